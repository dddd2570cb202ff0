"""One agent run: the plan, the provider pipeline around it and the tool loop inside it.

:class:`AgentRun` is what ``agent.run`` executes (SPEC §4): plan the run (which providers, which
persistence model) → providers' ``before_run`` in order → model call → tool loop (execute calls,
append results, call again; bounded) → providers' ``after_run`` in reverse order → update
``session.service_session_id`` when the service returned one. It yields streamed updates when
asked to, and always the :class:`~agentkeep.agent.AgentResponse` last.

The :class:`~agentkeep.agent.Agent` holds the configuration; a run holds the state of one run, so
a run never writes on the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from .. import telemetry
from ..clients.base import ChatOptions, ChatResponse, ChatResponseUpdate, merge_updates
from ..compaction.provider import CompactionProvider
from ..contents import Content, FunctionCallContent, FunctionResultContent, UsageContent, UsageDetails
from ..errors import SessionModeError, ToolArgumentError, ToolError
from ..message_log import MessageChain
from ..messages import Message, MessageSourceType, new_message_id
from ..providers.context import ContextProvider, SessionContext
from ..providers.history import HistoryProvider
from ..sessions import AgentSession, ServiceSessionId, from_builtins, to_builtins
from ..tools import FunctionTool, ToolLike, normalize_tools
from .response import AgentResponse, AgentResponseUpdate

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["AgentRun", "RunPlan", "plan_run"]


@dataclass(slots=True)
class RunPlan:
    """What one run does, decided before it starts.

    Attributes:
        session: The session (a throw-away one when the caller gave none but providers need one).
        providers: The providers of this run, in order.
        service_managed: The service keeps the history (no local history, no compaction).
        per_call: History providers store after each model call.
        conversation_id: The service-side conversation the run continues.
        options: The merged chat options (``conversation_id`` taken out).
        tools: The agent's and the run's tools.
        compaction: Compacts each model call's request.
    """

    session: AgentSession | None
    providers: tuple[ContextProvider, ...]
    service_managed: bool
    per_call: bool
    conversation_id: ServiceSessionId | None
    options: dict[str, Any]
    tools: list[FunctionTool] = field(default_factory=list[FunctionTool])
    compaction: CompactionProvider | None = None


def plan_run(
    agent: Agent,
    session: AgentSession | None,
    tools: ToolLike | Sequence[ToolLike] | None,
    options: Mapping[str, Any] | None,
    compaction: CompactionProvider | None,
) -> RunPlan:
    """Decide what a run of ``agent`` does.

    Raises:
        SessionModeError: Per-service-call persistence with a service-managed conversation.
    """
    merged = {**agent.default_options, **(options or {})}
    requested = merged.pop("conversation_id", None)
    conversation_id = (session.service_session_id if session is not None else None) or requested
    store = merged.get("store")
    service_managed = bool(conversation_id) or (
        store if store is not None else bool(getattr(agent.client, "stores_by_default", False))
    )
    per_call = agent.require_per_service_call_history_persistence
    if per_call and service_managed:
        raise SessionModeError(
            "require_per_service_call_history_persistence=True keeps history locally, but this run "
            "continues a service-managed conversation "
            f"({conversation_id or 'the client stores by default'}); "
            "use one persistence model per session (or pass options={'store': False})"
        )
    providers: tuple[ContextProvider, ...] = agent.context_providers
    if compaction is None:
        compaction = next(
            (p for p in providers if isinstance(p, CompactionProvider) and p.phase == "model_call"), None
        )
    if service_managed:  # the service holds the history: no local history, no compaction
        providers = tuple(p for p in providers if not isinstance(p, HistoryProvider | CompactionProvider))
        compaction = None
    elif session is not None and agent.default_history_provider is not None:
        providers = (agent.default_history_provider, *providers)
    run_session = session if session is not None or not providers else AgentSession()
    return RunPlan(
        session=run_session,
        providers=providers,
        service_managed=service_managed,
        per_call=per_call,
        conversation_id=conversation_id,
        options=merged,
        tools=[*agent.tools, *normalize_tools(tools)],
        compaction=compaction,
    )


_TURN_KEY: Final = "run:turn"
"""The runtime key of a session's turn lock."""


def session_turn(session: AgentSession) -> asyncio.Lock:
    """The lock runs on ``session`` hold for their whole length, kept in its runtime space.

    Concurrent runs on one session object would otherwise each load the same new history into
    the session's cached view and send it twice. (Runs on *different* session objects of one
    conversation, in this process or others, stay concurrent: the store orders their appends.)
    A lock belongs to one event loop, so a session used from another loop gets a new one.
    """
    loop = asyncio.get_running_loop()
    held = session.runtime.get(_TURN_KEY)
    if isinstance(held, tuple):
        owner, lock = cast("tuple[object, asyncio.Lock]", held)
        if owner is loop:
            return lock
    lock = asyncio.Lock()
    session.runtime[_TURN_KEY] = (loop, lock)
    return lock


@dataclass(slots=True)
class _LoopState:
    """The tool loop's progress within one run."""

    produced: list[Message] = field(default_factory=list[Message])
    usage: UsageDetails | None = None
    conversation_id: ServiceSessionId | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    value: Any = None
    stored_upto: int = 0  # per-call persistence: how much of `produced` is stored


class AgentRun:
    """One run of an agent (see the module docs); :meth:`execute` runs it.

    Args:
        agent: The agent whose configuration the run follows.
        inputs: The caller's messages, normalized.
        session: The session to continue.
        tools: Extra tools for this run.
        options: Chat options for this run.
        compaction: The per-model-call compaction of this run (``None``: the agent's providers').
    """

    __slots__ = ("_compaction", "_inputs", "_options", "_session", "_span", "_tools", "agent")

    def __init__(
        self,
        agent: Agent,
        inputs: list[Message],
        session: AgentSession | None,
        tools: ToolLike | Sequence[ToolLike] | None,
        options: Mapping[str, Any] | None,
        compaction: CompactionProvider | None,
    ) -> None:
        self.agent = agent
        self._inputs = inputs
        self._session = session
        self._tools = tools
        self._options = options
        self._compaction = compaction
        self._span = telemetry.Span()

    async def execute(self, *, stream: bool) -> AsyncIterator[AgentResponseUpdate | AgentResponse]:
        """The run pipeline; yields updates when ``stream``, and always the response last.

        Runs on one session object take turns (see :func:`session_turn`): each sees the history
        the one before it stored, and the session's caches are never extended by two at once.
        """
        session = self._session
        self._span = telemetry.start(
            "agentkeep.agent.run",
            **{
                "agentkeep.agent": self.agent.name or self.agent.id,
                "agentkeep.session": session.session_id if session is not None else "",
                "agentkeep.tenant": (session.isolation_key or "") if session is not None else "",
                "agentkeep.stream": stream,
            },
        )
        try:
            async with contextlib.nullcontext() if session is None else session_turn(session):
                async for item in self._execute(stream=stream):
                    yield item
        except BaseException as exc:
            self._span.fail(exc)
            raise
        finally:
            self._span.end()

    async def _execute(self, *, stream: bool) -> AsyncIterator[AgentResponseUpdate | AgentResponse]:
        plan = plan_run(self.agent, self._session, self._tools, self._options, self._compaction)
        context = await self._before(plan)
        loop = _LoopState(conversation_id=plan.conversation_id)
        max_iterations = self.agent.max_tool_iterations
        invocation = _invocation_configuration(self.agent.client)
        if invocation is not None and isinstance(invocation.get("max_iterations"), int):
            max_iterations = min(max_iterations, max(0, invocation["max_iterations"]))
        try:
            for iteration in range(max_iterations + 1):
                final = iteration == max_iterations
                call_options = self._call_options(plan, context, loop, final)
                if plan.compaction is not None:
                    request = await plan.compaction.compact_request(plan.session, context, loop.produced)
                else:
                    request = _messages_for_call(plan, context, loop)
                if stream:
                    updates: list[ChatResponseUpdate] = []
                    async for update in self._stream_call(request, call_options, updates):
                        yield update
                    response = merge_updates(updates)
                else:
                    with self._span.child("agentkeep.model.call", **self._model_attributes(request)):
                        response = await self.agent.client.get_response(request, options=call_options)
                answer = self._accept(response, loop)
                results = await self._answer_tools(plan, context, loop, answer, call_options, final)
                if results is None:
                    break
                if stream:
                    yield AgentResponseUpdate(
                        list(results.contents), role="tool", message_id=results.message_id
                    )
            result = _finish(plan, context, loop)
        except BaseException as exc:
            context.exception = exc
            await self._after(plan, context)
            raise
        await self._after(plan, context)
        if plan.session is not None and loop.conversation_id and plan.service_managed:
            plan.session.service_session_id = loop.conversation_id
        yield result

    # -- around the model calls -------------------------------------------------------------------
    async def _before(self, plan: RunPlan) -> SessionContext:
        session = plan.session
        stamped = [m.with_source(MessageSourceType.EXTERNAL, None).ensure_identity() for m in self._inputs]
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
            with self._span.child(
                "agentkeep.provider.before_run", **{"agentkeep.provider": provider.source_id}
            ):
                added = await provider.before_run(
                    agent=self.agent, session=session, context=context, state=provider.get_state(session)
                )
            if added is not None:
                context.add(provider, added)
        return context

    async def _after(self, plan: RunPlan, context: SessionContext) -> None:
        session = plan.session
        if session is None:
            return
        deferred: list[ContextProvider] = []
        for provider in reversed(plan.providers):
            if plan.per_call and isinstance(provider, HistoryProvider):
                continue  # already stored after each model call
            if isinstance(provider, CompactionProvider) and provider.defers_after_run:
                deferred.append(provider)  # compacts what the history providers just stored
                continue
            await self._after_one(provider, session, context)
        for provider in reversed(deferred):
            await self._after_one(provider, session, context)

    async def _after_one(
        self, provider: ContextProvider, session: AgentSession, context: SessionContext
    ) -> None:
        with self._span.child("agentkeep.provider.after_run", **{"agentkeep.provider": provider.source_id}):
            await provider.after_run(
                agent=self.agent, session=session, context=context, state=provider.get_state(session)
            )

    def _call_options(
        self, plan: RunPlan, context: SessionContext, loop: _LoopState, final: bool
    ) -> ChatOptions:
        options: dict[str, Any] = dict(plan.options)
        instructions = [text for text in (self.agent.instructions, options.pop("instructions", None)) if text]
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

    async def _stream_call(
        self, request: Sequence[Message], options: ChatOptions, updates: list[ChatResponseUpdate]
    ) -> AsyncIterator[AgentResponseUpdate]:
        """One streamed model call: its updates (collected into ``updates``) as the run's."""
        call = self._span.start_child("agentkeep.model.call", **self._model_attributes(request))
        try:
            async for update in self._streamed(request, options, updates):
                yield update
        except BaseException as exc:
            call.fail(exc)
            raise
        finally:
            call.end()

    def _model_attributes(self, request: Sequence[Message]) -> dict[str, Any]:
        return {"agentkeep.client": type(self.agent.client).__name__, "agentkeep.messages": len(request)}

    async def _streamed(
        self, request: Sequence[Message], options: ChatOptions, updates: list[ChatResponseUpdate]
    ) -> AsyncIterator[AgentResponseUpdate]:
        ids = _UpdateIds()
        name = self.agent.name
        async for update in self.agent.client.get_streaming_response(request, options=options):
            ids.assign(update)
            if update.author_name is None and update.role == "assistant" and name:
                update.author_name = name
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

    def _accept(self, response: ChatResponse, loop: _LoopState) -> list[Message]:
        name = self.agent.name
        for message in response.messages:
            message.ensure_identity()
            if message.author_name is None and message.role == "assistant" and name:
                message.author_name = name
        loop.produced.extend(response.messages)
        if response.usage is not None:
            loop.usage = response.usage if loop.usage is None else loop.usage + response.usage
        loop.conversation_id = response.conversation_id or loop.conversation_id
        loop.response_id = response.response_id or loop.response_id
        loop.finish_reason = response.finish_reason
        loop.value = response.value
        return response.messages

    async def _store_call(self, plan: RunPlan, context: SessionContext, loop: _LoopState) -> None:
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
                    agent=self.agent, session=session, context=call_context, state=provider.get_state(session)
                )
        loop.stored_upto = len(loop.produced)

    # -- the tool loop ----------------------------------------------------------------------------
    async def _answer_tools(
        self,
        plan: RunPlan,
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
        calls = _pending_calls(answer)
        if not calls:
            return None
        invocation = _invocation_configuration(self.agent.client)
        if invocation is not None and invocation.get("enabled") is False:
            return None  # the client's function invocation is off: the caller answers the calls
        declared = {t.name for t in options.get("tools", []) if t.declaration_only}
        if declared and any(call.name in declared for call in calls):
            return None  # the caller runs these: the run ends with the calls for it to answer
        if final:
            limit = self.agent.max_tool_iterations
            reason = f"ToolError: not executed: the run reached max_tool_iterations={limit}"
            results = Message(
                "tool", [Content.from_function_result(c.call_id, exception=reason) for c in calls]
            ).ensure_identity()
        else:
            results = await _execute_tools(calls, options.get("tools", []))
        loop.produced.append(results)
        if final and plan.per_call:
            await self._store_call(plan, context, loop)
        return results


def _invocation_configuration(client: object) -> dict[str, Any] | None:
    """A reference-style client's ``function_invocation_configuration`` (its
    :class:`~agentkeep.clients.layers.FunctionInvocationLayer`), which the tool loop honours."""
    found: object = getattr(client, "function_invocation_configuration", None)
    return cast("dict[str, Any]", found) if isinstance(found, dict) else None


def _messages_for_call(plan: RunPlan, context: SessionContext, loop: _LoopState) -> Sequence[Message]:
    if plan.service_managed and loop.conversation_id:
        if not loop.produced:  # first call on an existing conversation: only what is new
            return context.request_messages
        # the service holds everything up to its last answer: send only the tool results since
        last_answer = max(i for i, m in enumerate(loop.produced) if m.role == "assistant")
        return loop.produced[last_answer + 1 :]
    return MessageChain(context.request_messages, loop.produced)


def _pending_calls(messages: Sequence[Message]) -> list[FunctionCallContent]:
    answered = {r.call_id for m in messages for r in m.contents if isinstance(r, FunctionResultContent)}
    return [
        c
        for m in messages
        for c in m.contents
        if isinstance(c, FunctionCallContent) and c.call_id not in answered
    ]


async def _execute_tools(calls: list[FunctionCallContent], tools: Sequence[FunctionTool]) -> Message:
    by_name = {t.name: t for t in tools}
    results: list[Content] = []
    for call in calls:
        tool = by_name.get(call.name)
        if tool is None:
            exception = f"ToolError: no tool named {call.name!r}"
            results.append(Content.from_function_result(call.call_id, exception=exception))
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


def _finish(plan: RunPlan, context: SessionContext, loop: _LoopState) -> AgentResponse:
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
