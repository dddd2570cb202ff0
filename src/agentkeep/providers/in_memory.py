"""In-memory history: the messages live in the session's state bag, and reducers that shrink them.

:class:`InMemoryHistoryProvider` keeps the messages in the session's state bag, so they persist
exactly when the session is serialized; appending and loading cost O(new messages) (the state
holds an append-only :class:`~agentkeep.message_log.MessageLog`, and history is handed to the
model as a view of it). An optional :class:`ChatReducer` (e.g. :class:`MessageCountingChatReducer`)
replaces the stored messages with fewer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Literal, Protocol, Unpack, cast, runtime_checkable

from ..contents import FunctionCallContent, FunctionResultContent
from ..errors import MessageFormatError, StateTypeError
from ..message_log import MessageLog, MessageView
from ..messages import Message
from ..sessions import AgentSession, ProviderSessionState
from .history import HistoryOptions, HistoryProvider, without_excluded

__all__ = [
    "ChatReducer",
    "InMemoryHistoryProvider",
    "InMemoryHistoryState",
    "MessageCountingChatReducer",
    "ReducerTrigger",
]


# -- reducers ---------------------------------------------------------------------------------


@runtime_checkable
class ChatReducer(Protocol):
    """Shrinks a message list (e.g. to fit a model's context)."""

    async def reduce(self, messages: Sequence[Message]) -> Sequence[Message]:
        """The messages to keep, in order."""
        ...


class MessageCountingChatReducer:
    """Keeps the first system message and the last ``target_count`` other messages.

    Messages that carry tool calls or tool results are left out (a call without its result would
    be invalid), as in the .NET edition.

    Args:
        target_count: How many non-system messages to keep (> 0).
    """

    def __init__(self, target_count: int) -> None:
        if target_count <= 0:
            raise ValueError("target_count must be greater than zero")
        self.target_count = target_count

    async def reduce(self, messages: Sequence[Message]) -> Sequence[Message]:
        kept: list[Message] = []
        system: Message | None = None
        for message in reversed(messages):
            if message.role == "system":
                system = message  # walking backwards, the last one seen is the first one
            elif len(kept) < self.target_count and not any(
                isinstance(c, FunctionCallContent | FunctionResultContent) for c in message.contents
            ):
                kept.append(message)
        kept.reverse()
        return [system, *kept] if system is not None else kept


# -- in-memory history ------------------------------------------------------------------------


class InMemoryHistoryState(Mapping[str, Any]):
    """The in-memory provider's value in the state bag: ``{"messages": [...]}`` in wire form.

    Also a read-only mapping with the one key ``"messages"`` (a view of the history), as the
    reference's code reads its provider's state (``state["messages"]``).
    """

    __slots__ = ("messages",)

    def __init__(self, messages: MessageLog | None = None) -> None:
        self.messages = messages if messages is not None else MessageLog(None)

    def __getitem__(self, key: str) -> Any:
        if key != "messages":
            raise KeyError(key)
        return self.messages.view()

    def __iter__(self) -> Iterator[str]:
        return iter(("messages",))

    def __len__(self) -> int:
        return 1

    def to_dict(self) -> dict[str, Any]:
        return {"messages": self.messages.to_list()}

    @classmethod
    def from_dict(cls, data: Any) -> InMemoryHistoryState:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object with 'messages', got {type(data).__name__}")
        raw = cast("dict[str, Any]", data).get("messages", [])
        if not isinstance(raw, list):
            raise TypeError("'messages' must be a list")
        entries = cast("list[Any]", raw)
        if (
            entries
            and isinstance(entries[0], dict)
            and cast("dict[str, Any]", entries[0]).get("type") == "message"
        ):
            from ..maf.sessions import message_from_maf  # the reference's messages (its sessions)

            items = [message_from_maf(item, path=f"messages[{i}]") for i, item in enumerate(entries)]
        else:
            try:
                items = [Message.from_dict(item) for item in entries]
            except MessageFormatError:  # rare: decode again, naming the bad message
                items = [Message.from_dict(item, path=f"messages[{i}]") for i, item in enumerate(entries)]
        return cls(MessageLog.from_owned(items, None))


ReducerTrigger = Literal["before_messages_retrieval", "after_message_added"]


class InMemoryHistoryProvider(HistoryProvider):
    """History kept in the session's state bag; it persists exactly when the session does.

    The hooks' ``state`` is an :class:`InMemoryHistoryState` (what an agent passes). The
    reference's shape works too: a plain dict, whose ``"messages"`` list is the history (a session
    whose state holds ``{"messages": [...]}`` under the provider's key, or a dict handed to
    :meth:`get_messages` / :meth:`save_messages` directly).

    Args:
        source_id: Provider id and state key (default ``"in_memory"``).
        reducer: Optional :class:`ChatReducer` (e.g. ``MessageCountingChatReducer(20)``); the
            stored history is replaced by its output.
        reducer_trigger: Reduce ``"before_messages_retrieval"`` (default) or
            ``"after_message_added"``.
        skip_excluded: Leave out of what is loaded the messages a compaction marked excluded
            (``additional_properties["_excluded"]``, see
            :mod:`agentkeep.compaction.annotations`); they stay stored.
        **options: The :class:`HistoryProvider` options.
    """

    DEFAULT_SOURCE_ID = "in_memory"

    def __init__(
        self,
        source_id: str | None = None,
        *,
        reducer: ChatReducer | None = None,
        reducer_trigger: ReducerTrigger = "before_messages_retrieval",
        skip_excluded: bool = False,
        **options: Unpack[HistoryOptions],
    ) -> None:
        super().__init__(
            source_id or self.DEFAULT_SOURCE_ID,
            **options,
        )
        self.reducer = reducer
        self.reducer_trigger = reducer_trigger
        self.skip_excluded = skip_excluded
        self.session_state = ProviderSessionState[InMemoryHistoryState](
            self._new_state, self.source_id, state_type=InMemoryHistoryState
        )

    def _new_state(self, _: AgentSession | None) -> InMemoryHistoryState:
        return InMemoryHistoryState(MessageLog(self.source_id))

    def _log(self, state: Any, session: AgentSession | None) -> MessageLog | list[Message]:
        """The history to read and append to: the typed state's log, or the ``"messages"`` list of
        a dict-shaped one.

        Raises:
            ValueError: There is neither a state nor a session to keep the messages in.
        """
        if state is None and session is not None:
            try:
                state = self.get_state(session)
            except StateTypeError:  # not the typed state: the reference's dict, or a real mismatch
                held: object = session.state.get(self.source_id, None)
                if not isinstance(held, MutableMapping):
                    raise
                state = cast("MutableMapping[str, Any]", held)
        if isinstance(state, MutableMapping):
            return _dict_messages(cast("MutableMapping[str, Any]", state), self.source_id)
        if not isinstance(state, InMemoryHistoryState):
            if session is None:
                raise ValueError(
                    f"{type(self).__name__} keeps messages in the session's state: pass state= "
                    "(the provider's value in session.state) or session="
                )
            state = self.get_state(session)
        log = cast(InMemoryHistoryState, state).messages
        if log.source_id != self.source_id:
            log.adopt(self.source_id)  # first read after deserialization: stamp once
        return log

    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        log = self._log(state, session)
        if isinstance(log, list):
            messages: Sequence[Message] = list(log)
        else:
            if self.reducer is not None and self.reducer_trigger == "before_messages_retrieval":
                await self._reduce(log)
            messages = log.view()
        return without_excluded(messages) if self.skip_excluded else messages

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: Any = None,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> None:
        log = self._log(state, session)
        log.extend(messages)
        if (
            isinstance(log, MessageLog)
            and self.reducer is not None
            and self.reducer_trigger == "after_message_added"
        ):
            await self._reduce(log)

    async def record_compaction(
        self,
        session: AgentSession,
        *,
        excluded: Sequence[str],
        summaries: Sequence[tuple[Message, Sequence[str]]],
        view: Sequence[Message],
        based_on: Sequence[Message],
    ) -> MessageView | None:
        """Replace the session's history with the compacted ``view`` (messages appended since
        ``based_on`` are kept after it). In-memory history keeps no originals: the session
        state is the history. ``None`` if ``based_on`` is not the current history."""
        log = self._log(None, session)
        if (
            isinstance(log, list)
            or not isinstance(based_on, MessageView)
            or not log.replace(view, based_on=based_on)
        ):
            return None
        return log.view(0, len(view))

    async def _reduce(self, log: MessageLog) -> None:
        assert self.reducer is not None
        before = log.view()
        reduced = await self.reducer.reduce(before)
        if len(reduced) != len(before) or any(a is not b for a, b in zip(reduced, before, strict=False)):
            log.replace(reduced, based_on=before)  # keeps what concurrent runs appended meanwhile


def _dict_messages(state: MutableMapping[str, Any], source_id: str) -> list[Message]:
    """The ``"messages"`` list of a dict-shaped state (made when absent), checked to hold messages."""
    messages: Any = state.setdefault("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, Message) for m in cast("list[Any]", messages)):
        raise StateTypeError(
            f"state value {source_id!r}: 'messages' must be a list of Message objects",
            key=source_id,
        )
    return cast("list[Message]", messages)
