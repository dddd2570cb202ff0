"""The storage-backed history provider: the session keeps a key, a message store the messages.

:class:`StorageHistoryProvider` works with any :class:`~agentkeep.message_stores.base.MessageStore`; the
backend modules subclass it with convenient constructors (``SQLiteHistoryProvider``,
``RedisHistoryProvider``, ``PostgresHistoryProvider``), and
:func:`agentkeep.store_urls.open_history_provider` makes one from a URL.

Only the conversation id lives in the session state (``{"conversation_id": "..."}`` under the
provider's ``source_id``), so a serialized session stays tiny. It defaults to the session's
:attr:`~agentkeep.sessions.AgentSession.storage_key` (its id, scoped to its tenant if it has one);
:meth:`StorageHistoryProvider.attach` points a new session at an existing stored conversation.

Per-turn cost is O(new messages): the loaded view is cached in the session's runtime space
(``session.runtime["history:<source_id>"]``, never serialized) together with the store's
compaction epoch and last sequence number; the next turn asks the store only for what was
appended since, and reloads when a compaction (from any process) changed the epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from .. import telemetry
from ..message_log import MessageLog, MessageView
from ..message_stores.base import HistoryView, MessageStore, Summary, close_store
from ..messages import Message, new_message_id
from ..sessions import AgentSession, ProviderSessionState
from ..turn_writes import can_hold_appends, held_appends
from .history import HistoryOptions, HistoryProvider

__all__ = ["ConversationState", "StorageHistoryProvider"]


class ConversationState:
    """A storage-backed provider's value in the session state: the conversation id.

    Attributes:
        conversation_id: The stored conversation this session continues.
    """

    __slots__ = ("conversation_id",)

    def __init__(self, conversation_id: str) -> None:
        if not isinstance(conversation_id, str) or not conversation_id:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError("conversation_id must be a non-empty string")
        self.conversation_id = conversation_id

    def to_dict(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id}

    @classmethod
    def from_dict(cls, data: Any) -> ConversationState:
        if not isinstance(data, dict) or not isinstance(data.get("conversation_id"), str):  # pyright: ignore[reportUnknownMemberType]
            raise TypeError("expected an object with a string 'conversation_id'")
        return cls(data["conversation_id"])  # pyright: ignore[reportUnknownArgumentType]

    def __repr__(self) -> str:
        return f"ConversationState(conversation_id={self.conversation_id!r})"


class _LoadedView:
    """A session's cached view of one stored conversation (kept in ``session.runtime``).

    Attributes:
        store: The store it was read from.
        conversation_id: The conversation.
        log: The loaded view, stamped as this provider's history.
        epoch: The store's compaction epoch when it was read.
        last_seq: The store's last sequence number it includes.
    """

    __slots__ = ("conversation_id", "epoch", "last_seq", "log", "store")

    def __init__(
        self, store: MessageStore, conversation_id: str, log: MessageLog, epoch: int, last_seq: int
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.log = log
        self.epoch = epoch
        self.last_seq = last_seq


class StorageHistoryProvider(HistoryProvider):
    """A history provider that keeps messages in a :class:`MessageStore`.

    Args:
        store: The backend.
        source_id: Provider id and state key.
        load_limit: Load at most this many of the newest view messages per run (``None``: all).
            A window never starts with tool results whose call fell outside it.
        owns_store: Close ``store`` in :meth:`aclose`.
        **options: The :class:`~agentkeep.providers.history.HistoryProvider` options.
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

    def _state(
        self, session: AgentSession | None, state: Any = None, session_id: str | None = None
    ) -> ConversationState:
        """The conversation to use: the typed state's, the session's, or else the ``session_id``
        a direct caller names (``await provider.get_messages("chat-1")``).

        Raises:
            ValueError: None of the three names a conversation.
        """
        if isinstance(state, ConversationState):
            return state
        if session is not None:
            return self.session_state.get_or_initialize_state(session)
        if session_id is None:
            raise ValueError(
                f"{type(self).__name__} needs a conversation: pass session_id (the conversation's "
                "id), session= or the provider's state"
            )
        return ConversationState(session_id)

    # -- the session's cached view ------------------------------------------------------------------
    @property
    def _cache_key(self) -> str:
        return f"history:{self.source_id}"

    def _cached(self, session: AgentSession | None, conversation_id: str) -> _LoadedView | None:
        if session is None:
            return None
        cached = session.runtime.get(self._cache_key)
        if (
            isinstance(cached, _LoadedView)
            and cached.store is self.store
            and cached.conversation_id == conversation_id
        ):
            return cached
        return None

    def _remember(self, session: AgentSession | None, loaded: _LoadedView | None) -> None:
        if session is None:
            return
        if loaded is None:
            session.runtime.pop(self._cache_key, None)
        else:
            session.runtime[self._cache_key] = loaded

    # -- HistoryProvider ------------------------------------------------------------------------
    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        conversation_id = self._state(session, state, session_id).conversation_id
        held = self._held(session, conversation_id)
        cached = self._cached(session, conversation_id)
        if cached is not None:
            update = await self._read(conversation_id, cached=True, after=cached.last_seq)
            if update.epoch == cached.epoch and update.last_seq >= cached.last_seq:
                cached.log.extend(update.messages)
                cached.last_seq = update.last_seq
                return self._window(cached.log, held)
        view = await self._read(conversation_id, cached=False, last=self.load_limit)
        loaded = self._load(conversation_id, view)
        self._remember(session, loaded)
        return self._window(loaded.log, held)

    async def _read(
        self, conversation_id: str, *, cached: bool, after: int | None = None, last: int | None = None
    ) -> HistoryView:
        """What is new since ``after`` (for the cached view) or the newest ``last``, in a span."""
        attributes = {"agentkeep.backend": self.store.backend, "agentkeep.cached": cached}
        with telemetry.span("agentkeep.store.read", **attributes) as read:
            view = await self.store.read(conversation_id, after=after, last=last)
            read.set(**{"agentkeep.messages": len(view.messages)})
        return view

    def _load(self, conversation_id: str, view: HistoryView) -> _LoadedView:
        log = MessageLog.from_owned(view.messages, self.source_id)
        return _LoadedView(self.store, conversation_id, log, view.epoch, view.last_seq)

    def _window(self, log: MessageLog, held: Sequence[Message] = ()) -> Sequence[Message]:
        """The newest ``load_limit`` messages of ``log`` and then ``held`` (what this run holds for
        the session's save, newest of all), never starting with tool results."""
        if self.load_limit is not None:
            if len(log) > 2 * self.load_limit:  # keep the cache bounded (amortized O(1) per turn)
                log.replace(log.tail(self.load_limit))
            window = log.tail(self.load_limit)
        else:
            window = log.view()
        if held:
            window = [*window, *held]
            if self.load_limit is not None:
                window = window[-self.load_limit :] if self.load_limit else []
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
        conversation_id = self._state(session, state, session_id).conversation_id
        writes, store = held_appends(session), self.store
        if writes is not None and can_hold_appends(store) and writes.joins(store):
            writes.hold(store.hold_append(conversation_id, messages))  # stored with the session
            return
        with telemetry.span(
            "agentkeep.store.append",
            **{"agentkeep.backend": self.store.backend, "agentkeep.messages": len(messages)},
        ):
            await self.store.append(conversation_id, messages)

    def _held(self, session: AgentSession | None, conversation_id: str) -> list[Message]:
        """The messages this run holds for the session's save in ``conversation_id`` (see
        :mod:`agentkeep.turn_writes`): a read of the conversation shows them after what is stored,
        without writing them, so a run that fails leaves nothing behind."""
        writes = held_appends(session)
        if writes is None:
            return []
        return [
            message
            for append in writes.held
            if append.store is self.store and append.conversation_id == conversation_id
            for message in append.messages
        ]

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
        conversation_id = self._state(session).conversation_id
        writes = held_appends(session)
        if writes is not None and writes.held:  # what it changes must be stored first
            named = {*excluded, *(replaced for _, replaces in summaries for replaced in replaces)}
            await writes.flush(self.store, conversation_id, touching=named)
        epoch = await self.store.record_compaction(
            conversation_id,
            excluded=excluded,
            summaries=[Summary(message, list(replaces)) for message, replaces in summaries],
        )
        cached = self._cached(session, conversation_id)
        if cached is None or epoch != cached.epoch + 1:
            self._remember(session, None)
            return None
        update = await self.store.read(conversation_id, after=cached.last_seq)
        if update.epoch != epoch:
            self._remember(session, None)
            return None
        made = {message.message_id for message, _ in summaries}
        fresh = [m for m in update.messages if m.message_id not in made]  # appended by others meanwhile
        # The view's other messages come from this log, stamped already: stamp only what is new.
        new = [*(message for message, _ in summaries), *fresh]
        log = MessageLog.from_owned([*view, *fresh], self.source_id, stamped_except=new)
        self._remember(session, _LoadedView(self.store, conversation_id, log, epoch, update.last_seq))
        return log.view(0, len(view))

    async def aclose(self) -> None:
        """Close the store if this provider owns it (it made it from a URL or path)."""
        if self._owns_store:
            await close_store(self.store)


def _new_state(session: AgentSession | None) -> ConversationState:
    return ConversationState(session.storage_key if session is not None else new_message_id())
