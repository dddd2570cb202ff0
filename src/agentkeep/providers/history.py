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

The ``session_id`` both methods receive is the session's
:attr:`~agentkeep.sessions.AgentSession.storage_key`: the session id, scoped to the session's tenant
when it has one (``alice::chat-1``). A subclass that keys its storage by it keeps tenants apart
without knowing about them.

A caller that reads the history just before a run (a host telling which messages of a request
are new) passes ``keep_for_run=True`` to :meth:`~HistoryProvider.get_session_messages`: the next
run's load then takes those messages instead of reading them again. The caller drops them with
:meth:`~HistoryProvider.discard_kept` when no run follows (they would be stale by a later run).

``load_messages=False`` makes an audit / evaluation sink: it records without changing what the
model sees.

The implementations: :class:`~agentkeep.providers.in_memory.InMemoryHistoryProvider` (messages in
the session's state bag) and :class:`~agentkeep.providers.storage.StorageHistoryProvider` (messages
in a :class:`~agentkeep.message_stores.base.MessageStore`, only a key in the session).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from ..message_log import MessageView
from ..messages import Message, MessageSourceType
from ..sessions import AgentSession
from .context import AIContext, ContextProvider, SessionContext

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["HistoryOptions", "HistoryProvider", "MessageFilter", "without_excluded"]

MessageFilter = Callable[[Sequence[Message]], Sequence[Message]]
"""A function from messages to the messages to keep (the history options' filters)."""


def without_excluded(messages: Sequence[Message]) -> list[Message]:
    """``messages`` less those a compaction marked excluded (``additional_properties["_excluded"]``,
    see :mod:`agentkeep.compaction.annotations`): what a provider with ``skip_excluded`` loads."""
    from ..compaction.annotations import EXCLUDED_KEY  # compaction builds on this package

    return [m for m in messages if not m.additional_properties.get(EXCLUDED_KEY)]


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
    async def get_session_messages(
        self, session: AgentSession, *, keep_for_run: bool = False
    ) -> Sequence[Message]:
        """The history stored for ``session`` (what the next run would load).

        Args:
            session: The session.
            keep_for_run: Hand these messages to the next run of ``session``, which then loads
                them from here instead of from storage (for a caller about to run it; see
                :meth:`discard_kept`).
        """
        state = self.get_state(session)
        messages = await self.get_messages(session.storage_key, state=state, session=session)
        if keep_for_run:
            session.runtime[self._kept_key] = messages
        return messages

    def discard_kept(self, session: AgentSession) -> None:
        """Drop what :meth:`get_session_messages` kept for a run that did not take it."""
        session.runtime.pop(self._kept_key, None)

    @property
    def _kept_key(self) -> str:
        return f"history-kept:{self.source_id}"

    async def before_run(
        self,
        *,
        agent: Agent,
        session: AgentSession,
        context: SessionContext,
        state: Any,
    ) -> AIContext | None:
        """Load history into the request (the agent skips this when ``load_messages`` is off),
        or take what :meth:`get_session_messages` kept for this run."""
        history: Sequence[Message] | None = session.runtime.pop(self._kept_key, None)
        if history is None:
            history = await self.get_messages(session.storage_key, state=state, session=session)
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
            await self.save_messages(session.storage_key, messages, state=state, session=session)
