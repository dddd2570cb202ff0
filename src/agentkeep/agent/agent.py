"""The agent: a chat client with context providers, history, compaction and tools.

:class:`Agent` holds the configuration and checks it (providers must not clash); each
``agent.run`` is one :class:`~agentkeep.agent._run.AgentRun` (the provider pipeline and the tool
loop, see there). ``run`` returns a coroutine of the :class:`~agentkeep.agent.AgentResponse`, or
with ``stream=True`` an :class:`~agentkeep.agent.AgentRunStream`.

Per-turn cost is O(new messages): history reaches the client as a zero-copy view, input and
output are stamped and identified once, and stores append only the new messages.

**Service-managed history.** When the session has a ``service_session_id`` (or ``options``
carry a ``conversation_id``, or the client keeps conversations by default and ``store`` is not
``False``), the service is the source of truth: history providers are skipped and only new
messages are sent, with the conversation id.

**Per-service-call persistence.** With ``require_per_service_call_history_persistence=True``
history providers store after *each* model call of the tool loop, so local history mirrors what a
service would hold even if the run stops right after a tool call. Combining it with a
service-managed conversation raises :class:`~agentkeep.errors.SessionModeError`.

**Compaction.** ``compaction_strategy=`` (per agent, or per ``run``) compacts what is sent before
every model call; stored history is untouched. A :class:`~agentkeep.compaction.CompactionProvider`
among the context providers compacts per run and records the result in stored history (its
``"after_run"`` phase runs after the history providers stored the run). Neither runs on a
service-managed conversation.
"""

from __future__ import annotations

import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar, overload, runtime_checkable

from ..clients.base import ChatClient, ChatOptions
from ..compaction.provider import CompactionProvider
from ..compaction.strategies import StrategyLike
from ..compaction.tokenizers import Tokenizer
from ..errors import ProviderConfigurationError, SessionFormatError, StateTypeError
from ..messages import Message, MessageInput, normalize_messages
from ..providers.context import ContextProvider
from ..providers.history import HistoryProvider
from ..providers.in_memory import InMemoryHistoryProvider
from ..sessions import AgentSession, ServiceSessionId
from ..tools import ToolLike, normalize_tools
from ._run import AgentRun
from .response import AgentResponse, AgentRunStream

__all__ = ["Agent", "SupportsAgentRun"]

P = TypeVar("P", bound=ContextProvider)


@runtime_checkable
class SupportsAgentRun(Protocol):
    """What an agent offers its callers (the reference's name): an id, a name, a description, a
    ``run`` and sessions to run on. :class:`Agent` is one."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str | None: ...

    @property
    def description(self) -> str | None: ...

    def run(self, messages: Any = None, *, session: AgentSession | None = None, **kwargs: Any) -> Any: ...

    def create_session(self) -> AgentSession: ...


class Agent:
    """An LLM agent with sessions, history, context providers and tools.

    Args:
        client: The chat client (model) to run.
        instructions: System instructions for every run.
        name: The agent's name (also the ``author_name`` of its messages).
        description: What the agent does.
        tools: Tools (or plain callables) the model may call in every run.
        context_providers: Providers run around every run, in order.
        require_per_service_call_history_persistence: Store history after each model call.
        default_options: :class:`~agentkeep.clients.base.ChatOptions` for every run.
        max_tool_iterations: Model calls that may request tools per run; then one final call
            without tools.
        compaction_strategy: Compacts the request before every model call (history, input and
            the tool loop's messages); stored history is untouched. See
            :mod:`agentkeep.compaction`.
        tokenizer: Counts tokens for ``compaction_strategy`` (default: the strategy's own, else
            :class:`~agentkeep.compaction.CharacterEstimatorTokenizer`).

    Raises:
        ProviderConfigurationError: Two providers share a ``source_id`` or a state key, more
            than one history provider loads messages, or more than one compaction runs per
            model call.
    """

    COMPACTION_SOURCE_ID = "agentkeep.compaction"

    def __init__(
        self,
        client: ChatClient,
        instructions: str | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        context_providers: ContextProvider | Sequence[ContextProvider] | None = None,
        require_per_service_call_history_persistence: bool = False,
        default_options: Mapping[str, Any] | None = None,
        max_tool_iterations: int = 10,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
        id: str | None = None,
    ) -> None:
        self.id = id or str(uuid.uuid4())
        self.client = client
        self.instructions = instructions
        self.name = name
        self.description = description
        self.tools = normalize_tools(tools)
        if context_providers is None:
            providers: tuple[ContextProvider, ...] = ()
        elif isinstance(context_providers, ContextProvider):
            providers = (context_providers,)
        else:
            providers = tuple(context_providers)
        self.context_providers = providers
        self.require_per_service_call_history_persistence = require_per_service_call_history_persistence
        self.default_options: dict[str, Any] = dict(default_options or {})
        if max_tool_iterations < 0:
            raise ValueError("max_tool_iterations must be >= 0")
        self.max_tool_iterations = max_tool_iterations
        self.compaction_strategy = compaction_strategy
        self.tokenizer = tokenizer
        self._compaction = self._model_call_compaction(compaction_strategy, tokenizer)
        loads = any(isinstance(p, HistoryProvider) and p.load_messages for p in providers)
        self.default_history_provider: InMemoryHistoryProvider | None = (
            None if loads else InMemoryHistoryProvider()
        )
        """The built-in in-memory history this agent uses for local sessions when none of its
        providers loads history (``None`` when one does)."""
        self._check_providers()

    def _check_providers(self) -> None:
        loading = [p for p in self.context_providers if isinstance(p, HistoryProvider) and p.load_messages]
        if len(loading) > 1:
            raise ProviderConfigurationError(
                f"history providers {loading[0]!r} and {loading[1]!r} both load messages, so every "
                "request would carry the history twice; give the others load_messages=False"
            )
        per_call = [
            p for p in self.context_providers if isinstance(p, CompactionProvider) and p.phase == "model_call"
        ]
        if len(per_call) + (self._compaction is not None) > 1:
            raise ProviderConfigurationError(
                "more than one compaction runs before each model call (compaction_strategy= and "
                "CompactionProvider(phase='model_call')); combine them in a PipelineCompactionStrategy"
            )
        owners: dict[str, ContextProvider] = {}
        sources: dict[str, ContextProvider] = {}
        candidates = list(self.context_providers)
        if self.default_history_provider is not None:  # used for local sessions: must not clash
            candidates.insert(0, self.default_history_provider)
        for provider in candidates:
            if provider.source_id in sources:
                raise ProviderConfigurationError(
                    f"providers {sources[provider.source_id]!r} and {provider!r} share source_id "
                    f"{provider.source_id!r}; give each provider of an agent its own source_id"
                )
            sources[provider.source_id] = provider
            for key in provider.state_keys:
                if key in owners:
                    raise ProviderConfigurationError(
                        f"providers {owners[key]!r} and {provider!r} both use state key {key!r}; "
                        "each provider needs its own key in the session state"
                    )
                owners[key] = provider

    def _model_call_compaction(
        self, strategy: StrategyLike | None, tokenizer: Tokenizer | None
    ) -> CompactionProvider | None:
        if strategy is None:
            return None
        return CompactionProvider(
            strategy, tokenizer=tokenizer, phase="model_call", source_id=self.COMPACTION_SOURCE_ID
        )

    def _compaction_for_run(
        self, strategy: StrategyLike | None, tokenizer: Tokenizer | None
    ) -> CompactionProvider | None:
        """The per-model-call compaction of a run, given ``run()``'s overrides."""
        if strategy is None and tokenizer is None:
            return self._compaction
        strategy = strategy or self.compaction_strategy
        tokenizer = tokenizer or self.tokenizer
        # A new provider per run is cheap: the session's index is keyed by strategy and tokenizer,
        # so runs passing the same strategy continue it.
        return self._model_call_compaction(strategy, tokenizer)

    def history_provider(self, source_id: str | None = None) -> HistoryProvider | None:
        """The history provider that loads this agent's history (the built-in in-memory one if
        none is configured), or the history provider with ``source_id``."""
        for provider in (*self.context_providers, self.default_history_provider):
            if isinstance(provider, HistoryProvider) and (
                provider.source_id == source_id if source_id is not None else provider.load_messages
            ):
                return provider
        return None

    # -- sessions ------------------------------------------------------------------------------
    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        """A new, empty local session."""
        return AgentSession(session_id=session_id)

    def get_session(
        self, *, service_session_id: ServiceSessionId, session_id: str | None = None
    ) -> AgentSession:
        """A session bound to an existing service-side conversation (service-managed history)."""
        return AgentSession(session_id=session_id, service_session_id=service_session_id)

    def serialize_session(self, session: AgentSession) -> dict[str, Any]:
        """The session's versioned payload (see :meth:`AgentSession.to_dict`).

        Raises:
            SessionFormatError: A state value cannot be serialized.
        """
        try:
            return session.to_dict()
        except StateTypeError as exc:
            raise SessionFormatError(f"session {session.session_id}: {exc}") from exc

    def deserialize_session(self, data: Mapping[str, Any] | str | bytes) -> AgentSession:
        """Restore a session and let this agent's providers check their state in it.

        Raises:
            SessionFormatError: The payload is corrupt, of an unknown version, or a provider's
                state in it cannot be read.
        """
        if isinstance(data, str | bytes):
            session = AgentSession.from_json(data)
        elif isinstance(data, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance] - outside data
            session = AgentSession.from_dict(dict(data))
        else:
            raise SessionFormatError(
                f"a session payload must be a mapping or JSON text, not {type(data).__name__}"
            )
        providers = list(self.context_providers)
        if self.default_history_provider is not None:
            providers.append(self.default_history_provider)
        for provider in providers:
            try:
                provider.validate_session(session)
            except StateTypeError as exc:
                raise SessionFormatError(
                    f"session {session.session_id}: state of provider {provider.source_id!r} "
                    f"is invalid: {exc}"
                ) from exc
        return session

    def get_provider(self, provider_type: type[P]) -> P | None:
        """The first configured provider of ``provider_type`` (like the .NET ``GetService``)."""
        for provider in self.context_providers:
            if isinstance(provider, provider_type):
                return provider
        return None

    # -- running -------------------------------------------------------------------------------
    @overload
    def run(
        self,
        messages: MessageInput = None,
        *,
        stream: Literal[False] = False,
        session: AgentSession | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        options: ChatOptions | Mapping[str, Any] | None = None,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> Coroutine[Any, Any, AgentResponse]: ...
    @overload
    def run(
        self,
        messages: MessageInput = None,
        *,
        stream: Literal[True],
        session: AgentSession | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        options: ChatOptions | Mapping[str, Any] | None = None,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> AgentRunStream: ...
    def run(
        self,
        messages: MessageInput = None,
        *,
        stream: bool = False,
        session: AgentSession | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        options: ChatOptions | Mapping[str, Any] | None = None,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> Coroutine[Any, Any, AgentResponse] | AgentRunStream:
        """Run the agent on ``messages``.

        Args:
            messages: Text, a message, or a sequence of either (strings are user messages).
            stream: Return an :class:`AgentRunStream` of updates instead of a coroutine.
            session: The session to continue (history and provider state live there).
            tools: Extra tools for this run only.
            options: :class:`~agentkeep.clients.base.ChatOptions` for this run.
            compaction_strategy: Replaces the agent's ``compaction_strategy`` for this run.
            tokenizer: Replaces the agent's ``tokenizer`` for this run.

        Returns:
            A coroutine giving the :class:`~agentkeep.agent.AgentResponse`, or with
            ``stream=True`` an async iterator of updates whose ``get_final_response()`` gives the
            same response.

        Raises:
            SessionModeError: Per-service-call persistence with a service-managed conversation.
            MessageFormatError: ``messages`` holds something that is not text or a message.
        """
        inputs = normalize_messages(messages)
        compaction = self._compaction_for_run(compaction_strategy, tokenizer)
        if stream:
            return AgentRunStream(
                AgentRun(self, inputs, session, tools, options, compaction).execute(stream=True)
            )
        return self._run(inputs, session, tools, options, compaction)

    async def _run(
        self,
        inputs: list[Message],
        session: AgentSession | None,
        tools: ToolLike | Sequence[ToolLike] | None,
        options: Mapping[str, Any] | None,
        compaction: CompactionProvider | None,
    ) -> AgentResponse:
        result: AgentResponse | None = None
        # Exhaust the generator rather than leave it suspended: a suspended async generator is
        # closed later by a task the event loop schedules, which costs more than the run itself.
        async for item in AgentRun(self, inputs, session, tools, options, compaction).execute(stream=False):
            if isinstance(item, AgentResponse):
                result = item
        assert result is not None, "a run always ends with its response"
        return result

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, providers={[p.source_id for p in self.context_providers]!r})"
