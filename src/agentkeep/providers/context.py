"""Context providers: hooks that shape each agent run, and the per-run :class:`SessionContext`.

A :class:`ContextProvider` runs around every ``agent.run``: ``before_run`` (providers in order)
can add **instructions, messages and tools**, either by calling ``context.extend_*`` or by
returning an :class:`AIContext`; ``after_run`` (providers in reverse order) sees the request
messages, the response messages and the run's exception, and may update state. Each provider sees
what earlier ones added: the context is a pipeline.

Providers keep no per-session data on themselves, only in the session's state bag, under their
``state_keys``. The ``state`` argument of the hooks is the provider's value there: a ``dict``
by default (key = ``source_id``), or a typed object when the provider sets its own
:attr:`ContextProvider.session_state`.

History providers (loading and storing conversation history) build on this in
:mod:`agentkeep.providers.history`.

**The earlier shape** (seed 004): a subclass may instead override ``invoking(messages, **kwargs)
-> Context`` and ``invoked(request_messages, response_messages, invoke_exception, **kwargs)``;
which hooks a subclass overrides decides, once, when the class is made, and overriding hooks of
both generations raises ``TypeError``. The adapter lives in
:mod:`agentkeep._compat.provider_hooks`: ``invoking`` gets the run's new input messages as
:class:`~agentkeep.threads.ChatMessage` objects and its :class:`Context` joins the request like an
:class:`AIContext`; ``invoked`` gets those, the response messages and the exception of a failed
run. An earlier-shape provider keeps its data on itself, as it did then (so one instance is shared
by every thread of its agent), need not call ``super().__init__()`` (its ``source_id`` is then its
class name), and may define ``serialize()``, whose result an
:class:`~agentkeep.threads.AgentThread` writes into its serialized form. Hooks that take
``**kwargs`` (or a ``context`` keyword) also get an :class:`InvokingContext` /
:class:`InvokedContext` as ``context=``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, cast, runtime_checkable

from .._compat import provider_hooks as _compat
from .._compat.provider_hooks import InvokedContext, InvokingContext
from ..message_log import MessageChain, MessageView
from ..messages import Message, MessageSourceType
from ..sessions import AgentSession, ProviderSessionState
from ..tools import FunctionTool, ToolLike, normalize_tools

if TYPE_CHECKING:
    from ..agent import Agent, AgentResponse

__all__ = [
    "ATTRIBUTION_KEY",
    "AIContext",
    "Context",
    "ContextProvider",
    "HasSourceId",
    "InvokedContext",
    "InvokingContext",
    "MessageAIContextProvider",
    "SessionContext",
]


@dataclass(slots=True)
class AIContext:
    """What a provider adds to a run: instructions, messages and tools (all optional)."""

    instructions: str | Sequence[str] | None = None
    messages: Sequence[Message] | None = None
    tools: Sequence[ToolLike] | None = None


Context = AIContext
"""The earlier name of :class:`AIContext`: what an earlier-shape ``invoking`` returns."""


class SessionContext:
    """The state of one run as it passes through the provider pipeline.

    Created fresh for every ``agent.run`` (and, with per-service-call persistence, for every model
    call). Providers add to it before the model call and read the outcome after.

    Attributes:
        session_id: The session's id (``None`` for a run without a session).
        service_session_id: The service-side conversation id, when the service keeps history.
        input_messages: The caller's new messages (stamped ``external``).
        instructions: Instructions providers added, in order.
        tools: Tools providers added, in order.
        options: The run's options (read-only for providers).
        metadata: Free-form data providers can share during a run.
        response: The run's response (set after the model call; ``None`` if it failed).
        exception: The exception that failed the run, if any.
    """

    def __init__(
        self,
        *,
        session_id: str | None = None,
        service_session_id: str | Mapping[str, Any] | None = None,
        input_messages: Sequence[Message] = (),
        context_messages: Mapping[str, Sequence[Message]] | None = None,
        instructions: Sequence[str] | None = None,
        tools: Sequence[ToolLike] | None = None,
        options: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.service_session_id = service_session_id
        self.input_messages: list[Message] = list(input_messages)
        self._context: dict[str, list[Sequence[Message]]] = {}
        self._history_sources: set[str] = set()
        if context_messages:
            for source_id, messages in context_messages.items():
                self._context[source_id] = [list(messages)]
        self.instructions: list[str] = list(instructions) if instructions else []
        self.tools: list[FunctionTool] = normalize_tools(tools) if tools else []
        self.options: Mapping[str, Any] = options or {}
        self.metadata: dict[str, Any] = dict(metadata) if metadata else {}
        self._response: AgentResponse | None = None
        self.exception: BaseException | None = None

    @property
    def response(self) -> AgentResponse | None:
        """The run's response: set after the model call (``None`` before it, and when it failed)."""
        return self._response

    @response.setter
    def response(self, value: AgentResponse | None) -> None:
        self._response = value

    # -- adding --------------------------------------------------------------------------------
    def extend_messages(
        self,
        source: str | ContextProvider | HasSourceId,
        messages: Sequence[Message],
        *,
        source_type: MessageSourceType | None = None,
        origin_session_ids: Iterable[str] | None = None,
    ) -> None:
        """Add messages from a provider, stamped with its source.

        History providers' messages are stamped ``chat_history``, other providers'
        ``context_provider``. Messages are stamped on copies, never on the caller's objects, and
        each copy records its source in ``additional_properties["_attribution"]`` (``source_id``,
        and the provider's class name as ``source_type`` when ``source`` is an object), as the
        reference Python edition does; an attribution the message already carries is kept. A view
        that already carries the right stamp (a loaded history) is added as it is, without copying.

        Args:
            source: The provider (anything with a ``source_id``), or its ``source_id``.
            messages: The messages to add, oldest first.
            source_type: Override the stamp type.
            origin_session_ids: The sessions these messages were drawn from (a memory provider
                bringing in what another session said); recorded, without repeats, in each
                message's attribution as ``origin_session_ids``.
        """
        source_id: str = source if isinstance(source, str) else source.source_id
        if source_type is None:
            is_history = not isinstance(source, str) and getattr(source, "is_history_provider", False)
            source_type = MessageSourceType.CHAT_HISTORY if is_history else MessageSourceType.CONTEXT_PROVIDER
        if not messages and not isinstance(messages, MessageView):
            self._context.setdefault(source_id, [])
            return
        origins = list(dict.fromkeys(origin_session_ids)) if origin_session_ids is not None else None
        if (
            origins is not None
            or not isinstance(messages, MessageView)
            or messages.source_type is not source_type
            or messages.source_id != source_id
        ):
            provider_type = None if isinstance(source, str) else type(source).__name__
            messages = [_attributed(m, source_type, source_id, provider_type, origins) for m in messages]
        if source_type is MessageSourceType.CHAT_HISTORY:
            self._history_sources.add(source_id)
        self._context.setdefault(source_id, []).append(messages)

    def replace_messages(self, source_id: str, messages: Sequence[Message]) -> None:
        """Swap the messages ``source_id`` added for ``messages`` (e.g. compacted history).

        Raises:
            KeyError: ``source_id`` added no messages to this context.
        """
        if source_id not in self._context:
            raise KeyError(f"{source_id!r} added no messages to this context")
        self._context[source_id] = [messages]

    def extend_instructions(self, source_id: str, instructions: str | Iterable[str]) -> None:
        """Add instructions (appended to the agent's own)."""
        if isinstance(instructions, str):
            self.instructions.append(instructions)
        else:
            self.instructions.extend(instructions)

    def extend_tools(self, source_id: str, tools: ToolLike | Iterable[ToolLike]) -> None:
        """Add tools for this run; each is tagged with the provider's ``source_id``."""
        for made in normalize_tools(tools):
            made.additional_properties["context_source"] = source_id
            self.tools.append(made)

    def add(self, source: ContextProvider, ai_context: AIContext) -> None:
        """Add everything in ``ai_context`` on behalf of ``source``."""
        if ai_context.instructions:
            self.extend_instructions(source.source_id, ai_context.instructions)
        if ai_context.messages:
            self.extend_messages(source, ai_context.messages)
        if ai_context.tools:
            self.extend_tools(source.source_id, ai_context.tools)

    def adopt_messages_from(self, other: SessionContext) -> None:
        """Share ``other``'s context messages (used for per-model-call contexts of one run)."""
        self._context = other._context
        self._history_sources = other._history_sources

    # -- reading -------------------------------------------------------------------------------
    @property
    def context_messages(self) -> dict[str, Sequence[Message]]:
        """Messages added per provider ``source_id``, in provider order."""
        return {source: MessageChain(*parts) for source, parts in self._context.items()}

    def message_parts(self, source_id: str) -> tuple[Sequence[Message], ...]:
        """The message sequences ``source_id`` added, as added (a loaded history view stays a view)."""
        return tuple(self._context.get(source_id, ()))

    @property
    def history_sources(self) -> frozenset[str]:
        """The source ids whose messages were added as chat history."""
        return frozenset(self._history_sources)

    def get_messages(
        self,
        *,
        sources: Iterable[str] | None = None,
        exclude_sources: Iterable[str] | None = None,
        include_input: bool = False,
        include_response: bool = False,
    ) -> MessageChain:
        """Context messages in provider order, optionally filtered, plus input and response.

        The result is a zero-copy chain: cheap even when it includes a long history.
        """
        wanted = set(sources) if sources is not None else None
        unwanted: set[str] = set(exclude_sources) if exclude_sources is not None else set()
        parts: list[Sequence[Message]] = []
        for source_id, chunks in self._context.items():
            if (wanted is not None and source_id not in wanted) or source_id in unwanted:
                continue
            parts.extend(chunks)
        if include_input:
            parts.append(self.input_messages)
        if include_response and self.response is not None:
            parts.append(self.response.messages)
        return MessageChain(*parts)

    @property
    def request_messages(self) -> MessageChain:
        """Everything sent to the model as messages: context (history first if it ran first) and input."""
        return self.get_messages(include_input=True)

    @property
    def response_messages(self) -> list[Message]:
        """The messages the run produced (empty if it failed)."""
        return list(self.response.messages) if self.response is not None else []


ATTRIBUTION_KEY: Final = "_attribution"
"""Where a message added by a provider records its source in ``additional_properties``."""


@runtime_checkable
class HasSourceId(Protocol):
    """Anything that names a source: a provider, or an object standing for one."""

    source_id: str


def _attributed(
    message: Message,
    source_type: MessageSourceType,
    source_id: str,
    provider_type: str | None,
    origins: list[str] | None,
) -> Message:
    """A stamped copy of ``message`` whose attribution names its source (see ``extend_messages``)."""
    clone = message.copy()
    clone.stamp(source_type, source_id)
    props = clone.additional_properties  # the copy's own dict
    existing: Any = props.get(ATTRIBUTION_KEY)
    if isinstance(existing, dict):
        attribution: dict[str, Any] = dict(cast("dict[str, Any]", existing))
    else:
        attribution = {"source_id": source_id}
        if provider_type is not None:
            attribution["source_type"] = provider_type
    if origins:
        known: Any = attribution.get("origin_session_ids")
        earlier = (
            [o for o in cast("list[Any]", known) if isinstance(o, str)] if isinstance(known, list) else []
        )
        attribution["origin_session_ids"] = list(dict.fromkeys([*earlier, *origins]))
    props[ATTRIBUTION_KEY] = attribution
    return clone.ensure_identity()


class ContextProvider(_compat.EarlierHooks):
    """Base class of providers that shape agent runs.

    Override :meth:`before_run` and/or :meth:`after_run`. Keep per-session data in ``state`` (or
    through your own :class:`~agentkeep.sessions.ProviderSessionState`), never on ``self``: one
    provider instance serves every session of its agent.

    Args:
        source_id: Unique id of this provider within an agent; stamps the messages it adds and
            (by default) names its key in the session state bag.

    Attributes:
        session_state: Where the hooks' ``state`` comes from; by default a ``dict`` stored under
            ``source_id``. Replace it with a typed ``ProviderSessionState`` for typed state.
    """

    is_history_provider: bool = False
    """``True`` for history providers (their messages are stamped ``chat_history``)."""

    keeps_session_state: ClassVar[bool] = True
    """``False`` for a provider whose data lives elsewhere (a store, the session's runtime): it
    takes no key in the session's state bag, and its hooks get ``state=None``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _compat.adapt_provider_class(cls, base=ContextProvider)

    def __init__(self, source_id: str) -> None:
        if not source_id or not isinstance(source_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError("a context provider needs a non-empty string source_id")
        self.source_id = source_id
        self.session_state: ProviderSessionState[Any] = ProviderSessionState(
            _new_dict, source_id, state_type=dict
        )

    @property
    def state_keys(self) -> tuple[str, ...]:
        """The state-bag keys this provider uses; an agent refuses two providers sharing one."""
        if not self.keeps_session_state:
            return ()
        return (self.session_state.state_key,)

    def get_state(self, session: AgentSession | None) -> Any:
        """This provider's state for ``session`` (initialized when absent; ``None`` for a provider
        that keeps no session state)."""
        if not self.keeps_session_state:
            return None
        return self.session_state.get_or_initialize_state(session)

    def validate_session(self, session: AgentSession) -> None:
        """Check this provider's state in a deserialized ``session`` can be read.

        Raises:
            StateTypeError: The state is present but cannot be read as the provider's type.
        """
        if self.session_state.state_key in session.state:
            session.state.get(self.session_state.state_key, self.session_state.state_type)

    async def before_run(
        self,
        *,
        agent: Agent,
        session: AgentSession,
        context: SessionContext,
        state: Any,
    ) -> AIContext | None:
        """Called before the model is invoked; add context here or return an :class:`AIContext`."""
        return None

    async def after_run(
        self,
        *,
        agent: Agent,
        session: AgentSession,
        context: SessionContext,
        state: Any,
    ) -> None:
        """Called after the run (also when it failed: see ``context.exception``)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source_id={self.source_id!r})"


def _new_dict(_: AgentSession | None) -> dict[str, Any]:
    return {}


class MessageAIContextProvider(ContextProvider):
    """Base for providers that only add messages: implement :meth:`provide_messages`.

    Example:
        ```python
        class CalendarProvider(MessageAIContextProvider):
            async def provide_messages(self, *, agent, session, context, state):
                events = await load_events()
                return [Message("user", ["Your next events:\\n" + "\\n".join(events)])]
        ```
    """

    async def provide_messages(
        self,
        *,
        agent: Agent,
        session: AgentSession,
        context: SessionContext,
        state: Any,
    ) -> Sequence[Message]:
        """The messages to add to this run."""
        raise NotImplementedError(f"{type(self).__name__} must implement provide_messages()")

    async def before_run(
        self,
        *,
        agent: Agent,
        session: AgentSession,
        context: SessionContext,
        state: Any,
    ) -> AIContext | None:
        messages = await self.provide_messages(agent=agent, session=session, context=context, state=state)
        return AIContext(messages=messages)
