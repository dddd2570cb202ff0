"""The agent: runs a chat client with context providers, history and a tool loop.

The run pipeline (SPEC §4): normalize input → providers' ``before_run`` in order → build the
request (instructions, history and context messages, input, tools) → model call → tool loop
(execute calls, append results, call again; bounded) → providers' ``after_run`` in reverse order →
update ``session.service_session_id`` if the service returned one.

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
from collections.abc import AsyncIterator, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast, overload

import msgspec

from .clients.base import ChatClient, ChatOptions, ChatResponse, ChatResponseUpdate, merge_updates
from .compaction.provider import CompactionProvider
from .compaction.strategies import CompactionStrategy
from .compaction.tokenizers import Tokenizer
from .contents import Content, FunctionCallContent, FunctionResultContent, UsageContent, UsageDetails
from .errors import (
    ProviderConfigurationError,
    SessionFormatError,
    SessionModeError,
    StateTypeError,
    ToolArgumentError,
    ToolError,
)
from .history import HistoryProvider, InMemoryHistoryProvider
from .messages import Message, MessageInput, MessageSourceType, new_message_id, normalize_messages
from .providers import ContextProvider, SessionContext
from .responses import AgentResponse, AgentResponseUpdate
from .sequences import MessageChain
from .sessions import AgentSession, from_builtins, to_builtins
from .tools import FunctionTool, ToolLike, normalize_tools

__all__ = ["Agent", "AgentRunStream"]

P = TypeVar("P", bound=ContextProvider)


@dataclass(slots=True)
class _RunPlan:
    """What one run does, decided before it starts."""

    session: AgentSession | None
    providers: tuple[ContextProvider, ...]
    service_managed: bool
    per_call: bool
    conversation_id: str | None
    options: dict[str, Any]
    tools: list[FunctionTool] = field(default_factory=list[FunctionTool])
    compaction: CompactionProvider | None = None  # compacts each model call's request


@dataclass(slots=True)
class _LoopState:
    """The tool loop's progress within one run."""

    produced: list[Message] = field(default_factory=list[Message])
    usage: UsageDetails | None = None
    conversation_id: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    value: Any = None
    stored_upto: int = 0  # per-call persistence: how much of `produced` is stored


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
        compaction_strategy: CompactionStrategy | None = None,
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
        self._default_history = InMemoryHistoryProvider()
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
        if not self._has_loading_history():
            candidates.insert(0, self._default_history)  # used for local sessions: must not clash
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
        self, strategy: CompactionStrategy | None, tokenizer: Tokenizer | None
    ) -> CompactionProvider | None:
        if strategy is None:
            return None
        return CompactionProvider(
            strategy, tokenizer=tokenizer, phase="model_call", source_id=self.COMPACTION_SOURCE_ID
        )

    def _compaction_for_run(
        self, strategy: CompactionStrategy | None, tokenizer: Tokenizer | None
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
        for provider in (*self.context_providers, self._default_history):
            if isinstance(provider, HistoryProvider) and (
                provider.source_id == source_id if source_id is not None else provider.load_messages
            ):
                return provider
        return None

    def _has_loading_history(self) -> bool:
        return any(isinstance(p, HistoryProvider) and p.load_messages for p in self.context_providers)

    # -- sessions ------------------------------------------------------------------------------
    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        """A new, empty local session."""
        return AgentSession(session_id=session_id)

    def get_session(self, *, service_session_id: str, session_id: str | None = None) -> AgentSession:
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
        else:
            session = AgentSession.from_dict(dict(data))
        providers = list(self.context_providers)
        if not self._has_loading_history():
            providers.append(self._default_history)
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
        compaction_strategy: CompactionStrategy | None = None,
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
        compaction_strategy: CompactionStrategy | None = None,
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
        compaction_strategy: CompactionStrategy | None = None,
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
            A coroutine giving the :class:`~agentkeep.responses.AgentResponse`, or with
            ``stream=True`` an async iterator of updates whose ``get_final_response()`` gives the
            same response.

        Raises:
            SessionModeError: Per-service-call persistence with a service-managed conversation.
            MessageFormatError: ``messages`` holds something that is not text or a message.
        """
        inputs = normalize_messages(messages)
        compaction = self._compaction_for_run(compaction_strategy, tokenizer)
        if stream:
            return AgentRunStream(self._execute(inputs, session, tools, options, compaction, stream=True))
        return self._run(inputs, session, tools, options, compaction)

    def _plan(
        self,
        session: AgentSession | None,
        tools: ToolLike | Sequence[ToolLike] | None,
        options: Mapping[str, Any] | None,
        compaction: CompactionProvider | None,
    ) -> _RunPlan:
        merged = {**self.default_options, **(options or {})}
        requested = merged.pop("conversation_id", None)
        conversation_id = (session.service_session_id if session is not None else None) or requested
        store = merged.get("store")
        service_managed = bool(conversation_id) or (
            store if store is not None else self.client.stores_by_default
        )
        per_call = self.require_per_service_call_history_persistence
        if per_call and service_managed:
            raise SessionModeError(
                "require_per_service_call_history_persistence=True keeps history locally, but this run "
                "continues a service-managed conversation "
                f"({conversation_id or 'the client stores by default'}); "
                "use one persistence model per session (or pass options={'store': False})"
            )
        providers: tuple[ContextProvider, ...] = self.context_providers
        if compaction is None:
            compaction = next(
                (p for p in providers if isinstance(p, CompactionProvider) and p.phase == "model_call"), None
            )
        if service_managed:  # the service holds the history: no local history, no compaction
            providers = tuple(p for p in providers if not isinstance(p, HistoryProvider | CompactionProvider))
            compaction = None
        elif session is not None and not self._has_loading_history():
            providers = (self._default_history, *providers)
        run_session = session if session is not None or not providers else AgentSession()
        return _RunPlan(
            session=run_session,
            providers=providers,
            service_managed=service_managed,
            per_call=per_call,
            conversation_id=conversation_id,
            options=merged,
            tools=[*self.tools, *normalize_tools(tools)],
            compaction=compaction,
        )

    async def _before(self, plan: _RunPlan, inputs: list[Message]) -> SessionContext:
        session = plan.session
        stamped = [m.with_source(MessageSourceType.EXTERNAL, None).ensure_identity() for m in inputs]
        context = SessionContext(
            session_id=session.session_id if session is not None else None,
            service_session_id=plan.conversation_id,
            input_messages=stamped,
            options=plan.options,
        )
        if session is None:
            return context
        for provider in plan.providers:
            if isinstance(provider, HistoryProvider) and not provider.load_messages:
                continue
            added = await provider.before_run(
                agent=self, session=session, context=context, state=provider.get_state(session)
            )
            if added is not None:
                context.add(provider, added)
        return context

    async def _after(self, plan: _RunPlan, context: SessionContext) -> None:
        session = plan.session
        if session is None:
            return
        deferred: list[ContextProvider] = []
        for provider in reversed(plan.providers):
            if plan.per_call and isinstance(provider, HistoryProvider):
                continue  # already stored after each model call
            if isinstance(provider, CompactionProvider) and provider.phase == "after_run":
                deferred.append(provider)  # compacts what the history providers just stored
                continue
            await provider.after_run(
                agent=self, session=session, context=context, state=provider.get_state(session)
            )
        for provider in reversed(deferred):
            await provider.after_run(
                agent=self, session=session, context=context, state=provider.get_state(session)
            )

    def _call_options(
        self, plan: _RunPlan, context: SessionContext, loop: _LoopState, final: bool
    ) -> ChatOptions:
        options: dict[str, Any] = dict(plan.options)
        instructions = [text for text in (self.instructions, options.pop("instructions", None)) if text]
        instructions.extend(context.instructions)
        if instructions:
            options["instructions"] = "\n".join(instructions)
        tools = [*plan.tools, *context.tools]
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            duplicate = next(n for n in names if names.count(n) > 1)
            raise ToolError(f"two tools of this run are named {duplicate!r}", tool_name=duplicate)
        if tools:
            options["tools"] = tools
            if final:  # the tool budget is spent: ask for an answer, not more calls
                options["tool_choice"] = "none"
        if plan.service_managed and loop.conversation_id:
            options["conversation_id"] = loop.conversation_id
        return cast(ChatOptions, options)

    def _messages_for_call(
        self, plan: _RunPlan, context: SessionContext, loop: _LoopState
    ) -> Sequence[Message]:
        if plan.service_managed and loop.conversation_id:
            if not loop.produced:  # first call on an existing conversation: only what is new
                return context.request_messages
            # the service holds everything up to its last answer: send only the tool results since
            last_answer = max(i for i, m in enumerate(loop.produced) if m.role == "assistant")
            return loop.produced[last_answer + 1 :]
        return MessageChain(context.request_messages, loop.produced)

    def _accept(self, response: ChatResponse, loop: _LoopState) -> list[Message]:
        for message in response.messages:
            message.ensure_identity()
            if message.author_name is None and message.role == "assistant" and self.name:
                message.author_name = self.name
        loop.produced.extend(response.messages)
        if response.usage is not None:
            loop.usage = response.usage if loop.usage is None else loop.usage + response.usage
        loop.conversation_id = response.conversation_id or loop.conversation_id
        loop.response_id = response.response_id or loop.response_id
        loop.finish_reason = response.finish_reason
        loop.value = response.value
        return response.messages

    async def _store_call(self, plan: _RunPlan, context: SessionContext, loop: _LoopState) -> None:
        """Per-call persistence: history providers store what the last model call added.

        The first call also stores the run's input (and context messages, as configured); later
        calls store the tool results sent to them and their answer.
        """
        session = plan.session
        if session is None:
            return
        first = loop.stored_upto == 0
        call_context = SessionContext(
            session_id=context.session_id,
            service_session_id=context.service_session_id,
            input_messages=context.input_messages if first else (),
            options=context.options,
        )
        if first:
            call_context.adopt_messages_from(context)
        call_context.response = AgentResponse(messages=loop.produced[loop.stored_upto :])
        for provider in reversed(plan.providers):
            if isinstance(provider, HistoryProvider):
                await provider.after_run(
                    agent=self, session=session, context=call_context, state=provider.get_state(session)
                )
        loop.stored_upto = len(loop.produced)

    async def _answer_tools(
        self,
        plan: _RunPlan,
        context: SessionContext,
        loop: _LoopState,
        answer: list[Message],
        options: ChatOptions,
        final: bool,
    ) -> Message | None:
        """After a model answer: persist it (per-call mode) and answer the tool calls it asks for.

        Returns the tool-result message for the next call, or ``None`` when the run is done. On the
        final call the calls are answered with an error instead of run, so history never ends with a
        call that has no result (which chat APIs reject on the next turn).
        """
        if plan.per_call:
            await self._store_call(plan, context, loop)
        calls = self._pending_calls(answer)
        if not calls:
            return None
        if final:
            reason = (
                f"ToolError: not executed: the run reached max_tool_iterations={self.max_tool_iterations}"
            )
            results = Message(
                "tool", [Content.from_function_result(c.call_id, exception=reason) for c in calls]
            ).ensure_identity()
        else:
            results = await self._execute_tools(calls, options.get("tools", []))
        loop.produced.append(results)
        if final and plan.per_call:
            await self._store_call(plan, context, loop)
        return results

    def _pending_calls(self, messages: Sequence[Message]) -> list[FunctionCallContent]:
        answered = {r.call_id for m in messages for r in m.contents if isinstance(r, FunctionResultContent)}
        return [
            c
            for m in messages
            for c in m.contents
            if isinstance(c, FunctionCallContent) and c.call_id not in answered
        ]

    async def _execute_tools(
        self, calls: list[FunctionCallContent], tools: Sequence[FunctionTool]
    ) -> Message:
        by_name = {t.name: t for t in tools}
        results: list[Content] = []
        for call in calls:
            tool = by_name.get(call.name)
            if tool is None:
                results.append(
                    Content.from_function_result(
                        call.call_id, exception=f"ToolError: no tool named {call.name!r}"
                    )
                )
                continue
            try:
                value = await tool.invoke(call.arguments)
            except ToolArgumentError as exc:
                results.append(Content.from_function_result(call.call_id, exception=exc))
                continue
            except Exception as exc:  # a failing tool is the model's problem, not the run's
                results.append(Content.from_function_result(call.call_id, exception=exc))
                continue
            results.append(Content.from_function_result(call.call_id, result=_jsonable(value)))
        return Message("tool", results).ensure_identity()

    def _finish(self, plan: _RunPlan, context: SessionContext, loop: _LoopState) -> AgentResponse:
        value = loop.value
        response_format = plan.options.get("response_format")
        if value is None and isinstance(response_format, type) and loop.produced:
            value = _parse_structured(loop.produced[-1].text, response_format)
        response = AgentResponse(
            messages=list(loop.produced),
            usage=loop.usage,
            response_id=loop.response_id,
            conversation_id=loop.conversation_id if plan.service_managed else None,
            finish_reason=loop.finish_reason,
            value=value,
        )
        context.response = response
        return response

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
        async for item in self._execute(inputs, session, tools, options, compaction, stream=False):
            if isinstance(item, AgentResponse):
                result = item
        assert result is not None, "a run always ends with its response"
        return result

    async def _execute(
        self,
        inputs: list[Message],
        session: AgentSession | None,
        tools: ToolLike | Sequence[ToolLike] | None,
        options: Mapping[str, Any] | None,
        compaction: CompactionProvider | None,
        *,
        stream: bool,
    ) -> AsyncIterator[AgentResponseUpdate | AgentResponse]:
        """The run pipeline; yields updates when streaming, and always the response last."""
        plan = self._plan(session, tools, options, compaction)
        context = await self._before(plan, inputs)
        loop = _LoopState(conversation_id=plan.conversation_id)
        try:
            for iteration in range(self.max_tool_iterations + 1):
                final = iteration == self.max_tool_iterations
                call_options = self._call_options(plan, context, loop, final)
                if plan.compaction is not None:
                    request = await plan.compaction.compact_request(plan.session, context, loop.produced)
                else:
                    request = self._messages_for_call(plan, context, loop)
                if stream:
                    updates: list[ChatResponseUpdate] = []
                    ids = _UpdateIds()
                    async for update in self.client.get_streaming_response(request, options=call_options):
                        ids.assign(update)
                        if update.author_name is None and update.role == "assistant" and self.name:
                            update.author_name = self.name
                        updates.append(update)
                        visible = [c for c in update.contents if not isinstance(c, UsageContent)]
                        if visible:
                            yield AgentResponseUpdate(
                                visible,
                                role=update.role,
                                message_id=update.message_id,
                                author_name=update.author_name,
                                response_id=update.response_id,
                            )
                    response = merge_updates(updates)
                else:
                    response = await self.client.get_response(request, options=call_options)
                answer = self._accept(response, loop)
                results = await self._answer_tools(plan, context, loop, answer, call_options, final)
                if results is None:
                    break
                if stream:
                    yield AgentResponseUpdate(
                        list(results.contents), role="tool", message_id=results.message_id
                    )
            result = self._finish(plan, context, loop)
        except BaseException as exc:
            context.exception = exc
            await self._after(plan, context)
            raise
        await self._after(plan, context)
        self._update_session(plan, loop)
        yield result

    def _update_session(self, plan: _RunPlan, loop: _LoopState) -> None:
        if plan.session is not None and loop.conversation_id and plan.service_managed:
            plan.session.service_session_id = loop.conversation_id

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, providers={[p.source_id for p in self.context_providers]!r})"


class _UpdateIds:
    """Gives streamed updates without a message id a stable one per message."""

    __slots__ = ("_last_id", "_last_role")

    def __init__(self) -> None:
        self._last_role: str | None = None
        self._last_id: str | None = None

    def assign(self, update: ChatResponseUpdate) -> None:
        if update.message_id is not None:
            self._last_role, self._last_id = update.role, update.message_id
            return
        if self._last_id is None or update.role != self._last_role:
            self._last_id = new_message_id()
            self._last_role = update.role
        update.message_id = self._last_id


class AgentRunStream:
    """The updates of a streamed run; ``get_final_response()`` gives the same :class:`AgentResponse`.

    Iterate it with ``async for``. The run's providers (and so history storage) finish when the
    stream is exhausted; a stream abandoned half-way stores nothing, like a failed run.
    """

    def __init__(self, source: AsyncIterator[AgentResponseUpdate | AgentResponse]) -> None:
        self._source = source
        self._response: AgentResponse | None = None

    def __aiter__(self) -> AsyncIterator[AgentResponseUpdate]:
        return self._updates()

    async def _updates(self) -> AsyncIterator[AgentResponseUpdate]:
        async for item in self._source:
            if isinstance(item, AgentResponse):
                self._response = item
            else:
                yield item

    @property
    def response(self) -> AgentResponse | None:
        """The final response once the stream is exhausted, else ``None``."""
        return self._response

    async def get_final_response(self) -> AgentResponse:
        """Consume what is left of the stream and return the run's response."""
        async for _ in self._updates():
            pass
        if self._response is None:  # pragma: no cover - the source always ends with a response
            raise RuntimeError("the stream ended without a response")
        return self._response

    def __await__(self) -> Generator[Any, None, AgentResponse]:
        return self.get_final_response().__await__()


def _jsonable(value: Any) -> Any:
    """A tool's return value in JSON-compatible form (text for what has none)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return to_builtins(value)
    except TypeError:
        return str(value)


def _parse_structured(text: str, response_format: type[Any]) -> Any:
    try:
        return from_builtins(msgspec.json.decode(text), response_format)
    except (msgspec.DecodeError, msgspec.ValidationError, NotImplementedError, TypeError, ValueError):
        return None
