"""The OpenAI Responses-compatible endpoints: the seeds' service-managed mode, served by agentkeep.

* ``POST /v1/responses``: ``model`` names a hosted agent; ``input`` (a string or input items),
  ``instructions`` (this response only), ``tools`` (``function`` tools: the caller runs them, a
  call ends the response with a ``function_call`` item), ``previous_response_id`` or
  ``conversation`` (continue one; not both), ``store`` (default true; false keeps nothing and
  needs no conversation), ``max_output_tokens``, ``stream`` (the documented ``response.*``
  events: ``response.created``, ``response.in_progress``, per item ``output_item.added`` ...
  ``output_item.done``, then ``response.completed``, or ``error`` and ``response.failed``).
* ``GET /v1/responses/{id}``: a stored response (the newest :data:`KEPT_RESPONSES` of each
  conversation are kept).
* ``POST /v1/conversations``, ``GET /v1/conversations/{id}``, ``GET /v1/conversations/{id}/items``
  (``limit``, ``order``, ``after``): conversations of the host's first agent. Newest first (the
  default order) a page reads only the messages between it and the newest one; ``order=asc``
  reads the whole view.

A conversation is a session of the agent's store (its history in the agent's history provider),
under the caller's tenant; responses are recorded in its state. Continuing from a response that is
not the newest of its conversation branches: a new conversation starts with the history up to that
response (copied once), and the new response belongs to it. Every id is looked up in the
caller's tenant only: another tenant's id is a 404. A request with an ``Idempotency-Key`` that was
answered before is answered again from the store (see :mod:`agentkeep.host._idempotency`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import format_sse_event

from .. import telemetry
from ..contents import FunctionCallContent, TextContent
from ..errors import MessageFormatError
from ..memory.semantic import memory_scope
from ..messages import Message
from ..tools import FunctionTool
from ._conversations import (
    KEPT_RESPONSES,
    Conversations,
    all_messages,
    history_until,
    keep_record,
    newest_messages,
    record_of,
)
from ._hosted_turn import HostedTurn
from ._http import STATUS_OF, HTTPProblem, declared_tools, error_response, parsed, run_error
from ._idempotency import IdempotencyKey, keyed_conversation_id
from ._memory import user_of
from ._responses_wire import (
    LiveOutput,
    conversation_items,
    conversation_of,
    is_conversation_id,
    new_conversation_id,
    new_response_id,
    replayed_events,
    to_messages,
    usage_of,
)
from ._run_events import rendered_parts

if TYPE_CHECKING:
    from ..agent import Agent, AgentResponse, AgentResponseUpdate
    from ..sessions import AgentSession
    from ._app import AgentHost, HostedAgent
    from ._turns import SessionTurn

__all__ = ["KEPT_RESPONSES", "install_responses"]

_CONVERSATION: Final = "host:conversation"


class ResponsesRequest(pydantic.BaseModel):
    """The fields of ``POST /v1/responses`` the host reads (others are accepted and ignored)."""

    model_config = pydantic.ConfigDict(extra="allow")

    model: str
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    store: bool = True
    stream: bool = False
    user: str | None = None
    max_output_tokens: int | None = pydantic.Field(default=None, ge=1)


class _NewConversation(msgspec.Struct):
    """The body of ``POST /v1/conversations``."""

    items: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None


def _after(items: list[dict[str, Any]], after: str | None) -> list[dict[str, Any]]:
    """The items after the one with id ``after`` (all without one; none if it is not there)."""
    if after is None:
        return items
    for index, item in enumerate(items):
        if item["id"] == after:
            return items[index + 1 :]
    return []


async def _newest_items(
    agent: Agent, session: AgentSession, limit: int, after: str | None
) -> list[dict[str, Any]]:
    """The conversation's items newest first, from after the item ``after``, at least ``limit + 1``
    of them when there are (so the caller can tell whether more follow). The newest messages are
    read in windows that double until they hold the page: a page costs what lies between it and
    the newest message, not the whole history."""
    window = limit + 1
    while True:
        messages, whole = await newest_messages(agent, session, window)
        items = conversation_items(messages)
        items.reverse()
        if whole:  # the view holds no older message
            return _after(items, after)
        ids = [item["id"] for item in items]
        start = 0 if after is None else (ids.index(after) + 1 if after in ids else None)
        if start is not None and len(items) - start > limit:
            return items[start:]
        window *= 2


def _newest_id(messages: Sequence[Message]) -> str | None:
    return messages[-1].message_id if messages else None


def _run_options(body: ResponsesRequest) -> dict[str, Any]:
    """The chat options a request sets for its run."""
    options: dict[str, Any] = {}
    if body.instructions:
        options["instructions"] = body.instructions
    if body.max_output_tokens is not None:
        options["max_tokens"] = body.max_output_tokens
    return options


def _shell(
    hosted: HostedAgent, body: ResponsesRequest, response_id: str, conversation: str
) -> dict[str, Any]:
    """The response object before its output."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": hosted.name,
        "instructions": body.instructions,
        "previous_response_id": body.previous_response_id,
        "conversation": {"id": conversation} if body.conversation is not None else None,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.tools or [],
        "store": body.store,
        "text": {"format": {"type": "text"}},
        "usage": None,
        "metadata": {},
    }


class _Responses:
    def __init__(self, host: AgentHost) -> None:
        self.host = host
        self.conversations = Conversations(host)

    # -- POST /v1/responses -------------------------------------------------------------------
    async def create(self, request: Request) -> Response:
        tenant = self.host.tenant_of(request)
        raw = await self.host.body_of(request)
        body = parsed(ResponsesRequest, raw, what="a Responses request")
        # one request, whether its answer is streamed or not: a retry may ask either way
        asked = msgspec.json.encode(body.model_dump(mode="json", exclude={"stream"}))
        key = IdempotencyKey.of(request, asked) if body.store else None
        hosted = self.host.hosted_agent(body.model, as_model=True)
        try:
            new = to_messages(body.input)
        except MessageFormatError as exc:
            raise HTTPProblem(400, "invalid_request", str(exc)) from exc
        self.host.check_message_count(len(new), "input items")
        tools = declared_tools(body.tools or (), shape="typed")
        conversation_id = self._conversation_id(body)
        user = user_of(request, body.user)
        self.host.admit_turn(request, tenant)  # counted until the request ends
        parent: telemetry.Span = getattr(request.state, "span", telemetry.Span())
        run = self._run(hosted, tenant, user, conversation_id, body, new, tools, parent, key)
        if body.stream:
            first = await anext(run)  # a refusal before the run starts is an HTTP error
            if first["type"] == "problem":
                return error_response(first["status"], first["code"], first["message"])
            return StreamingResponse(_sse(_chain(first, run)), media_type="text/event-stream")
        final: dict[str, Any] | None = None
        async for event in run:
            if event["type"] == "response.completed":
                final = event["response"]
            elif event["type"] == "response.failed":
                # an error status, as OpenAI answers: the failed response (which stored nothing)
                # gets no id to continue from, and the last good response stays the one to use
                error = event["response"]["error"]
                status, code = STATUS_OF.get(error["code"], 500), error["code"]
                return error_response(status, code, error["message"])
            elif event["type"] == "problem":
                return error_response(event["status"], event["code"], event["message"])
        assert final is not None
        return JSONResponse(final)

    def _conversation_id(self, body: ResponsesRequest) -> str | None:
        """The conversation a request continues (``None``: a new one), checked for form only."""
        if body.previous_response_id is not None and body.conversation is not None:
            raise HTTPProblem(400, "invalid_request", "give previous_response_id or conversation, not both")
        if body.previous_response_id is not None:
            found = conversation_of(body.previous_response_id)
            if found is None:
                raise HTTPProblem(404, "previous_response_not_found", "no such previous response")
            return found
        if body.conversation is not None:
            name = body.conversation if isinstance(body.conversation, str) else body.conversation.get("id")
            if not isinstance(name, str) or not is_conversation_id(name):
                raise HTTPProblem(404, "not_found", "no such conversation")
            return name
        return None

    async def _run(
        self,
        hosted: HostedAgent,
        tenant: str,
        user: str | None,
        conversation_id: str | None,
        body: ResponsesRequest,
        new: list[Message],
        tools: list[FunctionTool],
        parent: telemetry.Span,
        key: IdempotencyKey | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """The run as ``response.*`` events (and a ``problem`` for a refusal before it starts);
        for a request answered before (the same ``Idempotency-Key``), that answer's events."""
        shell: dict[str, Any] = {}
        keyed = None if key is None else keyed_conversation_id(tenant, hosted.name, key.key)
        try:
            async with HostedTurn(
                self.host, hosted, tenant, conversation_id or keyed or new_conversation_id(), parent
            ) as frame:
                answered = None if key is None else await self._answered(frame, user, conversation_id, key)
                if answered is not None:
                    for event in replayed_events(answered):
                        yield event
                    return
                turn, prior, conversation = await self._turn_for(frame, user, conversation_id, body, keyed)
                shell = _shell(hosted, body, new_response_id(conversation), conversation)
                yield {"type": "response.created", "response": shell}
                yield {"type": "response.in_progress", "response": shell}
                live = LiveOutput()
                session = turn.session if body.store and turn is not None else None
                agent = hosted.agent if session is not None else hosted.stateless
                stream = agent.run(
                    [*prior, *new], session=session, stream=True, tools=tools, options=_run_options(body)
                )
                async with stream as updates:
                    async for update in updates:
                        for event in _events_of(live, update):
                            yield event
                    answer: AgentResponse = await updates.get_final_response()
                for event in live.close():
                    yield event
                response = {
                    **shell,
                    "status": "completed",
                    "output": live.items,
                    "usage": usage_of(answer.usage),
                }
                if session is not None and turn is not None:
                    produced = answer.messages
                    last = produced[-1].message_id if produced else None
                    keep_record(session, response, last, idempotency=None if key is None else key.record())
                    await frame.store(turn, conversation_id=conversation)
        except HTTPProblem as exc:
            yield {"type": "problem", "status": exc.status, "code": exc.kind, "message": exc.message}
            return
        except Exception as exc:
            for event in _failure(shell, exc):
                yield event
            return
        yield {"type": "response.completed", "response": response}

    async def _answered(
        self, frame: HostedTurn, user: str | None, conversation_id: str | None, key: IdempotencyKey
    ) -> dict[str, Any] | None:
        """The response an earlier request with ``key`` made: recorded in the conversation it
        continued, or in the one it started or branched into (named by the key).

        Raises:
            HTTPProblem: 422 when the key was sent with another request, or names a
                conversation ``user`` may not read.
        """
        places = [frame.conversation_id]
        if conversation_id is not None:
            places.append(keyed_conversation_id(frame.tenant, frame.hosted.name, key.key))
        for place in places:
            records = await self.conversations.readable_records(frame.hosted, frame.tenant, place, user=user)
            if records is None:
                raise HTTPProblem(
                    422, "idempotency_key_reused", "this Idempotency-Key was sent by another user"
                )
            answered = key.answered(records)
            if answered is not None:
                return answered
        return None

    async def _turn_for(
        self,
        frame: HostedTurn,
        user: str | None,
        conversation_id: str | None,
        body: ResponsesRequest,
        keyed: str | None = None,
    ) -> tuple[SessionTurn | None, Sequence[Message], str]:
        """The session the run goes on (``None``: not stored), the messages the model sees before
        the request's (an unstored run's history, or a branch's prefix) and the conversation the
        run is in: a request continuing an earlier response of it branches into a new one."""
        hosted, tenant, conversation = frame.hosted, frame.tenant, frame.conversation_id
        if conversation_id is None:
            if not body.store:
                return None, [], conversation
            # stored with its first run's save: a run that fails leaves no conversation behind
            return (
                await self.conversations.create(hosted, tenant, conversation, [], user=user, save=False),
                [],
                conversation,
            )
        turn = await frame.session(
            user=user, existing=True
        )  # its owner is decided before anything is written
        bound = memory_scope(turn.session)
        user = None if bound is None else bound.user_id  # a branch is the same user's
        previous = body.previous_response_id
        record = None if previous is None else record_of(turn.session, previous)
        if previous is not None and record is None:
            raise HTTPProblem(404, "previous_response_not_found", "no such previous response")
        history = await turn.history(keep_for_run=body.store)
        last = None if record is None else record.get("last_message_id")
        if last in (None, _newest_id(history)):  # not a branch: the newest response, or none
            return turn, ([] if body.store else history), conversation
        turn.discard_kept()  # continuing an earlier response: a branch, not on this session
        prefix = await history_until(hosted.agent, turn.session, str(last))
        if not body.store:
            return turn, prefix, conversation
        conversation = keyed or new_conversation_id()  # a keyed request's retry finds its branch
        return (
            await self.conversations.create(hosted, tenant, conversation, prefix, user=user, save=False),
            [],
            conversation,
        )

    # -- GET /v1/responses/{id} -----------------------------------------------------------------
    async def get(self, response_id: str, request: Request) -> Response:
        tenant = self.host.tenant_of(request)
        conversation = conversation_of(response_id)
        if conversation is not None:
            found = await self.conversations.response(
                tenant, conversation, response_id, user=user_of(request)
            )
            if found is not None:
                return JSONResponse(found)
        raise HTTPProblem(404, "not_found", f"no response {response_id!r}")

    # -- conversations ------------------------------------------------------------------------------
    def _first_agent(self) -> HostedAgent:
        if not self.host.agents:
            raise HTTPProblem(404, "not_found", "this host serves no agents")
        return next(iter(self.host.agents.values()))

    async def create_conversation(self, request: Request) -> Response:
        try:
            tenant = self.host.tenant_of(request)
            raw = await self.host.body_of(request)
            try:
                body = msgspec.json.decode(raw, type=_NewConversation) if raw.strip() else _NewConversation()
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                raise HTTPProblem(400, "invalid_request", f"not a conversation: {exc}") from exc
            metadata, items = body.metadata or {}, to_messages(body.items)
            hosted = self._first_agent()
            conversation = new_conversation_id()
            created: dict[str, Any] = {
                "id": conversation,
                "object": "conversation",
                "created_at": int(time.time()),
                "metadata": metadata,
            }
            await self.conversations.create(
                hosted, tenant, conversation, items, state={_CONVERSATION: created}, user=user_of(request)
            )
            return JSONResponse(created)
        except MessageFormatError as exc:
            return error_response(400, "invalid_request", str(exc))

    async def _conversation(self, request: Request, conversation_id: str) -> tuple[HostedAgent, SessionTurn]:
        tenant = self.host.tenant_of(request)
        if not is_conversation_id(conversation_id):
            raise HTTPProblem(404, "not_found", f"no conversation {conversation_id!r}")
        hosted = self._first_agent()
        turn = await self.conversations.open(
            hosted, tenant, conversation_id, user=user_of(request), check_reader=True
        )
        return hosted, turn

    async def get_conversation(self, conversation_id: str, request: Request) -> Response:
        _, turn = await self._conversation(request, conversation_id)
        described: Any = turn.session.state.get(_CONVERSATION)
        if not isinstance(described, dict):  # a conversation a response started
            described = {"id": conversation_id, "object": "conversation", "created_at": 0, "metadata": {}}
        return JSONResponse(described)

    async def list_items(
        self,
        conversation_id: str,
        request: Request,
        limit: int = 20,
        order: Literal["asc", "desc"] = "desc",
        after: str | None = None,
    ) -> Response:
        if not 1 <= limit <= 100:
            raise HTTPProblem(400, "invalid_request", "limit is 1 to 100")
        hosted, turn = await self._conversation(request, conversation_id)
        if order == "desc":
            items = await _newest_items(hosted.agent, turn.session, limit, after)
        else:
            messages = await all_messages(hosted.agent, turn.session)
            # the whole view, as long as the conversation: made into items on a worker thread
            items = _after(await asyncio.to_thread(conversation_items, messages), after)
        page = items[:limit]
        return JSONResponse(
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(items) > limit,
            }
        )


def _failure(shell: dict[str, Any], exc: Exception) -> list[dict[str, Any]]:
    """The events of a run that failed: a ``problem`` (an HTTP error) before the response was
    created, else ``error`` and ``response.failed``."""
    code, message = run_error(exc)
    if not shell:
        return [{"type": "problem", "status": STATUS_OF[code], "code": code, "message": message}]
    failed = {**shell, "status": "failed", "error": {"code": code, "message": message}}
    return [
        {"type": "error", "code": code, "message": message, "param": None},
        {"type": "response.failed", "response": failed},
    ]


def _events_of(live: LiveOutput, update: AgentResponseUpdate) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for content in rendered_parts(update):
        if isinstance(content, TextContent):
            events += live.text(update.message_id or "", content.text)
        elif isinstance(content, FunctionCallContent):
            events += live.call(content)
    return events


async def _chain(first: dict[str, Any], rest: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    yield first
    async for event in rest:
        yield event


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    number = 0
    async for event in events:
        event["sequence_number"] = number
        number += 1
        yield format_sse_event(data_str=msgspec.json.encode(event).decode(), event=event["type"])


def install_responses(host: AgentHost, app: FastAPI) -> None:
    """Add the Responses and Conversations endpoints of ``host`` to ``app``."""
    routes = _Responses(host)
    app.post("/v1/responses", response_model=None)(routes.create)
    app.get("/v1/responses/{response_id}", response_model=None)(routes.get)
    app.post("/v1/conversations", response_model=None)(routes.create_conversation)
    app.get("/v1/conversations/{conversation_id}", response_model=None)(routes.get_conversation)
    app.get("/v1/conversations/{conversation_id}/items", response_model=None)(routes.list_items)
