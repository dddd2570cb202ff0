"""History providers on the storage contract: the session keeps a key, the backend the messages.

:class:`StorageHistoryProvider` works with any :class:`~agentkeep.storage.base.MessageStore`; the
backend modules subclass it with convenient constructors (``SQLiteHistoryProvider``,
``RedisHistoryProvider``, ``PostgresHistoryProvider``).

Only the conversation id lives in the session state (``{"conversation_id": "..."}`` under the
provider's ``source_id``), so a serialized session stays tiny. It defaults to the session's id;
:meth:`StorageHistoryProvider.attach` points a new session at an existing stored conversation.

Per-turn cost is O(new messages): the loaded view is cached on the session's state object (not
serialized) together with the store's compaction epoch and last sequence number; the next turn
asks the store only for what was appended since, and reloads when a compaction (from any process)
changed the epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from ..history import HistoryOptions, HistoryProvider
from ..messages import Message
from ..sequences import MessageLog, MessageView
from ..sessions import AgentSession, ProviderSessionState
from .base import HistoryView, MessageStore, Summary

__all__ = ["ConversationState", "StorageHistoryProvider"]


class ConversationState:
    """A storage-backed provider's value in the session state: the conversation id.

    Attributes:
        conversation_id: The stored conversation this session continues.
    """

    __slots__ = ("_epoch", "_last_seq", "_log", "conversation_id")

    def __init__(self, conversation_id: str) -> None:
        if not isinstance(conversation_id, str) or not conversation_id:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError("conversation_id must be a non-empty string")
        self.conversation_id = conversation_id
        self._log: MessageLog | None = None  # cached view; never serialized
        self._epoch = 0
        self._last_seq = 0

    def to_dict(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id}

    @classmethod
    def from_dict(cls, data: Any) -> ConversationState:
        if not isinstance(data, dict) or not isinstance(data.get("conversation_id"), str):  # pyright: ignore[reportUnknownMemberType]
            raise TypeError("expected an object with a string 'conversation_id'")
        return cls(data["conversation_id"])  # pyright: ignore[reportUnknownArgumentType]

    def __repr__(self) -> str:
        return f"ConversationState(conversation_id={self.conversation_id!r})"


class StorageHistoryProvider(HistoryProvider):
    """A history provider that keeps messages in a :class:`MessageStore`.

    Args:
        store: The backend.
        source_id: Provider id and state key.
        load_limit: Load at most this many of the newest view messages per run (``None``: all).
            A window never starts with tool results whose call fell outside it.
        owns_store: Close ``store`` in :meth:`aclose`.
        **options: The :class:`~agentkeep.history.HistoryProvider` options.
    """

    def __init__(
        self,
        store: MessageStore,
        source_id: str,
        *,
        load_limit: int | None = None,
        owns_store: bool = False,
        **options: Unpack[HistoryOptions],
    ) -> None:
        super().__init__(
            source_id,
            **options,
        )
        if load_limit is not None and load_limit <= 0:
            raise ValueError("load_limit must be positive")
        self.store = store
        self.load_limit = load_limit
        self._owns_store = owns_store
        self.session_state = ProviderSessionState[ConversationState](
            _new_state, source_id, state_type=ConversationState
        )

    # -- the session's key ------------------------------------------------------------------------
    def conversation_id(self, session: AgentSession) -> str:
        """The stored conversation ``session`` continues (created on first use)."""
        return self._state(session).conversation_id

    def attach(self, session: AgentSession, conversation_id: str) -> None:
        """Point ``session`` at the stored conversation ``conversation_id`` (seed 001's pattern)."""
        self.session_state.save_state(session, ConversationState(conversation_id))

    def _state(self, session: AgentSession | None, state: Any = None) -> ConversationState:
        if isinstance(state, ConversationState):
            return state
        return self.session_state.get_or_initialize_state(session)

    # -- HistoryProvider ------------------------------------------------------------------------
    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        current = self._state(session, state)
        log = current._log  # pyright: ignore[reportPrivateUsage]
        if log is not None:
            update = await self.store.read_view(current.conversation_id, after=current._last_seq)  # pyright: ignore[reportPrivateUsage]
            if update.epoch == current._epoch and update.last_seq >= current._last_seq:  # pyright: ignore[reportPrivateUsage]
                log.extend(update.messages)
                current._last_seq = update.last_seq  # pyright: ignore[reportPrivateUsage]
                return self._window(current, log)
        view = await self.store.read_view(current.conversation_id, last=self.load_limit)
        return self._window(current, self._reset(current, view))

    def _reset(self, state: ConversationState, view: HistoryView) -> MessageLog:
        log = MessageLog.from_owned(view.messages, self.source_id)
        state._log = log  # pyright: ignore[reportPrivateUsage]
        state._epoch = view.epoch  # pyright: ignore[reportPrivateUsage]
        state._last_seq = view.last_seq  # pyright: ignore[reportPrivateUsage]
        return log

    def _window(self, state: ConversationState, log: MessageLog) -> Sequence[Message]:
        if self.load_limit is not None:
            if len(log) > 2 * self.load_limit:  # keep the cache bounded (amortized O(1) per turn)
                log.replace(log.tail(self.load_limit))
            window = log.tail(self.load_limit)
        else:
            window = log.view()
        start = 0
        while start < len(window) and window[start].role == "tool":
            start += 1  # results whose call is outside the window would be rejected by models
        return window[start:] if start else window

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: Any = None,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> None:
        await self.store.append(self._state(session, state).conversation_id, messages)

    async def record_compaction(
        self,
        session: AgentSession,
        *,
        excluded: Sequence[str],
        summaries: Sequence[tuple[Message, Sequence[str]]],
        view: Sequence[Message],
        based_on: Sequence[Message],
    ) -> MessageView | None:
        """Record the compaction in the store (originals kept, summaries listing what they
        replace) and keep the cached view in step, so the next turn still loads only what is new.

        If another writer compacted the conversation meanwhile, the cache is dropped and the next
        load reads the view afresh.
        """
        state = self._state(session)
        conversation_id = state.conversation_id
        epoch = await self.store.record_compaction(
            conversation_id,
            excluded=excluded,
            summaries=[Summary(message, list(replaces)) for message, replaces in summaries],
        )
        if state._log is None or epoch != state._epoch + 1:  # pyright: ignore[reportPrivateUsage]
            state._log = None  # pyright: ignore[reportPrivateUsage]
            return None
        update = await self.store.read_view(conversation_id, after=state._last_seq)  # pyright: ignore[reportPrivateUsage]
        if update.epoch != epoch:
            state._log = None  # pyright: ignore[reportPrivateUsage]
            return None
        made = {message.message_id for message, _ in summaries}
        fresh = [m for m in update.messages if m.message_id not in made]  # appended by others meanwhile
        # The view's other messages come from this log, stamped already: stamp only what is new.
        new = [*(message for message, _ in summaries), *fresh]
        log = MessageLog.from_owned([*view, *fresh], self.source_id, stamped_except=new)
        state._log = log  # pyright: ignore[reportPrivateUsage]
        state._epoch = epoch  # pyright: ignore[reportPrivateUsage]
        state._last_seq = update.last_seq  # pyright: ignore[reportPrivateUsage]
        return log.view(0, len(view))

    async def aclose(self) -> None:
        """Close the store if this provider owns it (it made it from a URL or path)."""
        if self._owns_store:
            await self.store.aclose()


def _new_state(session: AgentSession | None) -> ConversationState:
    from ..messages import new_message_id

    return ConversationState(session.session_id if session is not None else new_message_id())
