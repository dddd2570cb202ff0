"""The AG-UI endpoint, ``POST /agents/{name}``: a request's turn, streamed as AG-UI events.

It is served by a plain ASGI middleware (:class:`AGUIRoute`) in front of the FastAPI app rather
than by a FastAPI route: the one endpoint every chat turn goes through skips the router, the
dependency solving and the request/response wrappers, which cost about a third of what a turn
costs the host (the app's outer middleware, such as the access log and the server-error handler,
still wrap it). Everything the route does is done here: authentication, limits, typed errors.
The app's OpenAPI document describes the endpoint (:func:`agui_openapi`).

A turn: the tenant's session loaded through the agent's store scoped to the tenant, what is new in
the request found against the stored history (read once: the run takes it), the run streamed, the
session saved (see :mod:`agentkeep.host._turns`); ``RUN_ERROR`` with a code when anything fails,
and then nothing of the run is stored. A request that was answered already is answered again from
the store, with nothing run (see :mod:`agentkeep.host._agui`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import pydantic
from ag_ui.core import BaseEvent, RunAgentInput, RunErrorEvent, RunFinishedEvent, RunStartedEvent
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import telemetry
from ._agui import (
    EventStream,
    checked_messages,
    client_tools,
    encode_event,
    new_messages,
    now_ms,
    parse_input,
    replayed,
    stored_answer,
    stored_ids,
)
from ._event_stream import EventStreamResponse
from ._hosted_turn import HostedTurn
from ._http import HTTPProblem, conversation_id_problem, error_response, run_error
from ._memory import user_of

if TYPE_CHECKING:
    from ._app import AgentHost, HostedAgent

__all__ = ["AGUIRoute", "agui_openapi"]

log = logging.getLogger("agentkeep.host")

PATH = "/agents/{name}"


async def _unreachable(scope: Scope, receive: Receive, send: Send) -> None:  # pragma: no cover
    raise AssertionError("AGUIRoute answers the requests its route matches itself")


class AGUIRoute:
    """ASGI middleware: ``POST /agents/{name}`` answered by ``host`` (see the module docs), every
    other request passed on to ``app``."""

    def __init__(self, app: ASGIApp, *, host: AgentHost) -> None:
        self.app = app
        self.host = host
        self._route = Route(PATH, _unreachable, methods=["POST"])  # matching only (root path aware)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match, child = self._route.matches(scope)
            if match is Match.FULL:
                await self._turn(child["path_params"]["name"], Request(scope, receive), send)
                return
            if match is Match.PARTIAL:  # the path, another method
                await error_response(405, "method_not_allowed", "use POST")(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _turn(self, name: str, request: Request, send: Send) -> None:
        host = self.host
        try:
            tenant = host.tenant_of(request)
            hosted = host.hosted_agent(name)
            body = await host.body_of(request)
            try:
                run_input, sent = parse_input(body)
            except pydantic.ValidationError as exc:
                details = exc.errors(include_url=False, include_input=False)
                raise HTTPProblem(422, "invalid_request", "not a RunAgentInput", details=details) from exc
            except ValueError as exc:
                raise HTTPProblem(422, "invalid_request", str(exc)) from exc
            problem = conversation_id_problem(run_input.thread_id)
            if problem is not None:
                raise HTTPProblem(422, "invalid_request", problem, param="threadId")
            host.check_message_count(len(sent))
            tools = client_tools(run_input)
            user = user_of(request)
            host.admit_turn(request, tenant)  # counted until the request ends
        except HTTPProblem as exc:
            await exc.response()(request.scope, request.receive, send)
            return
        parent: telemetry.Span = request.scope.get("state", {}).get("span") or telemetry.Span()
        batches = self._events(hosted, tenant, user, run_input, sent, tools, parent)
        response = EventStreamResponse(_encoded(batches), media_type="text/event-stream")
        await response(request.scope, request.receive, send)

    async def _events(
        self,
        hosted: HostedAgent,
        tenant: str,
        user: str | None,
        run_input: RunAgentInput,
        sent: list[dict[str, Any]],
        tools: list[Any],
        parent: telemetry.Span,
    ) -> AsyncGenerator[tuple[list[BaseEvent], bool]]:
        """The run's events in batches (``RUN_STARTED`` at once, then each update's events, then
        the closing events with ``RUN_FINISHED`` after the save), the last saying it is the last;
        the response sends the batches made before the run next waits as one message."""
        thread, run = run_input.thread_id, run_input.run_id
        yield [RunStartedEvent(thread_id=thread, run_id=run, timestamp=now_ms())], True
        closing: list[BaseEvent] = []
        try:
            async with HostedTurn(self.host, hosted, tenant, thread, parent) as frame:
                turn = await frame.session(user=user)
                history = await turn.history(keep_for_run=True)
                stream = EventStream()
                ids = stored_ids(history)  # the history walked once, for both questions
                answer = stored_answer(sent, history, ids=ids)
                if answer is not None:  # answered already: the same answer again, nothing run
                    turn.discard_kept()
                    events = [event for update in replayed(answer) for event in stream.update(update)]
                    closing = [*events, *stream.finish()]
                else:
                    new = checked_messages(new_messages(sent, history, ids=ids))
                    async with hosted.agent.run(
                        new, session=turn.session, stream=True, tools=tools
                    ) as updates:
                        async for update in updates:
                            if events := stream.update(update):
                                yield events, True
                    closing = stream.finish()
                    await frame.store(turn)
        except Exception as exc:  # reported in the protocol: the stream has started
            code, message = run_error(exc)
            if code == "internal_error":
                log.exception("run %s of thread %r failed", run, thread)
            yield [*closing, RunErrorEvent(message=message, code=code, timestamp=now_ms())], False
            return
        yield [*closing, RunFinishedEvent(thread_id=thread, run_id=run, timestamp=now_ms())], False


async def _encoded(batches: AsyncGenerator[tuple[list[BaseEvent], bool]]) -> AsyncGenerator[tuple[str, bool]]:
    """Each batch of events as one chunk of server-sent events; ``batches`` closed with it."""
    async with contextlib.aclosing(batches):
        async for events, more in batches:
            yield "".join(map(encode_event, events)), more


def agui_openapi(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (the app's OpenAPI document) with the AG-UI endpoint described: its body a
    ``RunAgentInput``, its answer an event stream, its errors the host's typed error body."""
    schema = RunAgentInput.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(schema.pop("$defs", {}))
    schemas["RunAgentInput"] = schema
    problem = {"description": 'A typed error: {"error": {"type": ..., "message": ...}}'}
    document.setdefault("paths", {})[PATH] = {
        "post": {
            "summary": "Run a turn of the agent over AG-UI",
            "description": (
                "The AG-UI protocol: the body is a RunAgentInput (threadId = the conversation), the "
                "answer a stream of AG-UI events (RUN_STARTED, TEXT_MESSAGE_*, TOOL_CALL_*, "
                "TOOL_CALL_RESULT, then RUN_FINISHED or RUN_ERROR with a code)."
            ),
            "operationId": "run_agent_agui",
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunAgentInput"}}},
            },
            "responses": {
                "200": {
                    "description": "AG-UI events as server-sent events",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **dict.fromkeys(("401", "403", "404", "413", "422"), problem),
            },
        }
    }
    return document
