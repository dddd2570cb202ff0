"""History providers: load conversation history before a run, store the new messages after it.

:class:`HistoryProvider` holds the shared behaviour; a subclass implements two methods,
:meth:`~HistoryProvider.get_messages` (oldest first, already bounded to what the model can take)
and :meth:`~HistoryProvider.save_messages`. The base:

* before the run: load → optional ``provide_output_message_filter`` → stamp ``chat_history`` →
  add to the request (history goes before the caller's input when this provider runs first);
* after the run: if the run failed, store nothing; otherwise store the caller's input
  (``store_inputs``), context-provider messages when ``store_context_messages`` (optionally only
  those from ``store_context_from``) and the response (``store_outputs``). Messages that came
  from chat history are never stored again. A custom ``store_input_message_filter`` receives all
  request messages (stamped, see :func:`~agentkeep.messages.get_source_type`) and picks which to
  store instead.

``load_messages=False`` makes an audit / evaluation sink: it records without changing what the
model sees. :class:`InMemoryHistoryProvider` keeps the messages in the session's state bag, so
they persist exactly when the session is serialized; appending and loading cost O(new messages).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Unpack, cast, runtime_checkable

from .contents import FunctionCallContent, FunctionResultContent
from .errors import MessageFormatError
from .messages import Message, MessageSourceType
from .providers import AIContext, ContextProvider, SessionContext
from .sequences import MessageLog, MessageView
from .sessions import AgentSession, ProviderSessionState

if TYPE_CHECKING:
    from .agent import Agent

__all__ = [
    "ChatReducer",
    "HistoryOptions",
    "HistoryProvider",
    "InMemoryHistoryProvider",
    "InMemoryHistoryState",
    "MessageCountingChatReducer",
]

MessageFilter = Callable[[Sequence[Message]], Sequence[Message]]


class HistoryOptions(TypedDict, total=False):
    """The options every history provider takes (see :class:`HistoryProvider`), for ``**options``."""

    load_messages: bool
    store_inputs: bool
    store_outputs: bool
    store_context_messages: bool
    store_context_from: Collection[str] | None
    provide_output_message_filter: MessageFilter | None
    store_input_message_filter: MessageFilter | None


class HistoryProvider(ContextProvider):
    """Base class of providers that load and store conversation history.

    Args:
        source_id: Unique id of this provider within an agent.
        load_messages: Load history before each run (only one provider of an agent should).
        store_inputs: Store the caller's input messages.
        store_outputs: Store the response messages.
        store_context_messages: Also store messages other context providers injected.
        store_context_from: With ``store_context_messages``, only these providers' messages.
        provide_output_message_filter: Applied to loaded history before it joins the request.
        store_input_message_filter: Receives all request messages and returns those to store
            (replaces ``store_inputs`` / ``store_context_*`` for request messages).
    """

    is_history_provider = True

    def __init__(
        self,
        source_id: str,
        *,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_outputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: Collection[str] | None = None,
        provide_output_message_filter: MessageFilter | None = None,
        store_input_message_filter: MessageFilter | None = None,
    ) -> None:
        super().__init__(source_id)
        self.load_messages = load_messages
        self.store_inputs = store_inputs
        self.store_outputs = store_outputs
        self.store_context_messages = store_context_messages
        self.store_context_from = frozenset(store_context_from) if store_context_from is not None else None
        self.provide_output_message_filter = provide_output_message_filter
        self.store_input_message_filter = store_input_message_filter

    # -- what subclasses implement --------------------------------------------------------------
    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        """The session's history, oldest first, limited to what the model can take."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_messages()")

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: Any = None,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> None:
        """Append ``messages`` (all new) to the session's history, atomically."""
        raise NotImplementedError(f"{type(self).__name__} must implement save_messages()")

    async def record_compaction(
        self,
        session: AgentSession,
        *,
        excluded: Sequence[str],
        summaries: Sequence[tuple[Message, Sequence[str]]],
        view: Sequence[Message],
        based_on: Sequence[Message],
    ) -> MessageView | None:
        """Make a compaction of the loaded history part of the stored history (optional).

        Called by a per-run :class:`~agentkeep.compaction.CompactionProvider` after it compacted
        ``based_on`` (what :meth:`get_messages` returned). Providers that cannot record it keep
        this default, and the compaction then shapes only the current request.

        Args:
            session: The session.
            excluded: Ids of the loaded messages the compaction excluded.
            summaries: New summary messages, each with the ids it replaces.
            view: The compacted history: ``based_on`` minus ``excluded``, summaries in place.
            based_on: The history the compaction started from.

        Returns:
            A view of the stored history's first ``len(view)`` messages (what the next load
            starts with), or ``None`` if nothing was recorded.
        """
        return None

    # -- the shared behaviour -------------------------------------------------------------------
    async def get_session_messages(self, session: AgentSession) -> Sequence[Message]:
        """The history stored for ``session`` (what the next run would load)."""
        return await self.get_messages(session.session_id, state=self.get_state(session), session=session)

    async def before_run(
        self,
        *,
        agent: Agent,
        session: AgentSession,
        context: SessionContext,
        state: Any,
    ) -> AIContext | None:
        """Load history into the request (the agent skips this when ``load_messages`` is off)."""
        history = await self.get_messages(context.session_id, state=state, session=session)
        if self.provide_output_message_filter is not None:
            history = self.provide_output_message_filter(history)
        context.extend_messages(self, history, source_type=MessageSourceType.CHAT_HISTORY)
        return None

    def messages_to_store(self, context: SessionContext) -> list[Message]:
        """The new messages of a finished run this provider stores (empty if the run failed)."""
        if context.exception is not None:
            return []
        out: list[Message] = []
        if self.store_input_message_filter is not None:
            out.extend(self.store_input_message_filter(context.request_messages))
        else:
            if self.store_context_messages:
                excluded = context.history_sources | {self.source_id}
                out.extend(context.get_messages(sources=self.store_context_from, exclude_sources=excluded))
            if self.store_inputs:
                out.extend(context.input_messages)
        if self.store_outputs and context.response is not None:
            out.extend(context.response.messages)
        return out

    async def after_run(
        self,
        *,
        agent: Agent,
        session: AgentSession,
        context: SessionContext,
        state: Any,
    ) -> None:
        """Store the run's new messages per the configuration; nothing when the run failed."""
        messages = self.messages_to_store(context)
        if messages:
            await self.save_messages(context.session_id, messages, state=state, session=session)


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


class InMemoryHistoryState:
    """The in-memory provider's value in the state bag: ``{"messages": [...]}`` in wire form."""

    __slots__ = ("messages",)

    def __init__(self, messages: MessageLog | None = None) -> None:
        self.messages = messages if messages is not None else MessageLog(None)

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
        try:
            items = [Message.from_dict(item) for item in entries]
        except MessageFormatError:  # rare: decode again, naming the bad message
            items = [Message.from_dict(item, path=f"messages[{i}]") for i, item in enumerate(entries)]
        return cls(MessageLog.from_owned(items, None))


ReducerTrigger = Literal["before_messages_retrieval", "after_message_added"]


class InMemoryHistoryProvider(HistoryProvider):
    """History kept in the session's state bag; it persists exactly when the session does.

    Args:
        source_id: Provider id and state key (default ``"in_memory"``).
        reducer: Optional :class:`ChatReducer` (e.g. ``MessageCountingChatReducer(20)``); the
            stored history is replaced by its output.
        reducer_trigger: Reduce ``"before_messages_retrieval"`` (default) or
            ``"after_message_added"``.
        **options: The :class:`HistoryProvider` options.
    """

    DEFAULT_SOURCE_ID = "in_memory"

    def __init__(
        self,
        source_id: str | None = None,
        *,
        reducer: ChatReducer | None = None,
        reducer_trigger: ReducerTrigger = "before_messages_retrieval",
        **options: Unpack[HistoryOptions],
    ) -> None:
        super().__init__(
            source_id or self.DEFAULT_SOURCE_ID,
            **options,
        )
        self.reducer = reducer
        self.reducer_trigger = reducer_trigger
        self.session_state = ProviderSessionState[InMemoryHistoryState](
            self._new_state, self.source_id, state_type=InMemoryHistoryState
        )

    def _new_state(self, _: AgentSession | None) -> InMemoryHistoryState:
        return InMemoryHistoryState(MessageLog(self.source_id))

    def _log(self, state: Any, session: AgentSession | None) -> MessageLog:
        if not isinstance(state, InMemoryHistoryState):
            state = self.get_state(session)
        log = cast(InMemoryHistoryState, state).messages
        if log.source_id != self.source_id:
            log.adopt(self.source_id)  # first read after deserialization: stamp once
        return log

    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        log = self._log(state, session)
        if self.reducer is not None and self.reducer_trigger == "before_messages_retrieval":
            await self._reduce(log)
        return log.view()

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
        if self.reducer is not None and self.reducer_trigger == "after_message_added":
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
        if not isinstance(based_on, MessageView) or not log.replace(view, based_on=based_on):
            return None
        return log.view(0, len(view))

    async def _reduce(self, log: MessageLog) -> None:
        assert self.reducer is not None
        before = log.view()
        reduced = await self.reducer.reduce(before)
        if len(reduced) != len(before) or any(a is not b for a, b in zip(reduced, before, strict=False)):
            log.replace(reduced, based_on=before)  # keeps what concurrent runs appended meanwhile
