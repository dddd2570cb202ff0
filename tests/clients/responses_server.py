"""A small, deterministic OpenAI Responses API server for tests (FastAPI).

It keeps conversations in memory by response id, like the real service, and answers without a
model, so tests can assert exact behaviour. :func:`create_app` builds the app around a
:class:`ResponsesState` that tests inspect and steer.

The subset of the Responses API implemented:

``POST /v1/responses`` with a JSON body of

* ``model`` (required): must be one of ``state.models``, else 404 ``model_not_found``;
* ``input``: a string, or a list of input items:

  - ``{"type": "message", "role": "user" | "system" | "developer" | "assistant",
    "content": str | [parts]}`` (``type`` may be left out), parts ``input_text`` /
    ``output_text`` (text), ``input_image`` and ``input_file`` (kept, not read);
  - ``{"type": "function_call", "call_id", "name", "arguments"}``;
  - ``{"type": "function_call_output", "call_id", "output"}``: its ``call_id`` must name a
    function call of the conversation that has no output yet (else 400), and a conversation with
    unanswered function calls only accepts their outputs (400 otherwise), as the real service does;

* ``instructions`` (not carried over to later responses), ``tools`` (``type: "function"``
  only), ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` or
  ``{"type": "function", "name"}``), ``previous_response_id`` (400
  ``previous_response_not_found`` when unknown), ``store`` (default ``true``; ``false`` keeps
  nothing), ``max_output_tokens`` (words; longer answers end ``incomplete``), ``text.format``
  (``json_schema`` / ``json_object``), ``stream``; other fields are accepted and ignored;
* authentication: when ``state.api_key`` is set, ``Authorization: Bearer <key>`` must match
  (else 401, with a message that repeats the key it got, like a careless server would).

Answers, in order of precedence:

1. the input ends with function call outputs: the text ``results: <output>; <output>``;
2. tools are given, ``tool_choice`` is not ``"none"`` and the last user message names a tool (or
   ``tool_choice`` is ``"required"`` / names a function): a ``function_call`` of that tool
   (``call_id`` ``call_<n>``), whose arguments are the first ``{...}`` JSON object of the user
   text (``{}`` if none);
3. a ``json_schema`` / ``json_object`` text format: the user text if it is a JSON object, else
   ``{"echo": <text>}``;
4. otherwise ``echo: <last user text> (user messages: <n>)``, ``n`` counting the user messages of
   the whole conversation, so a test sees whether the server had the earlier turns.

Usage counts words: input = words of every message of the conversation, output = words answered.

With ``"stream": true`` the answer is sent as server-sent events: ``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta`` (one per word), ``response.output_text.done``,
``response.content_part.done``, ``response.function_call_arguments.delta`` / ``.done``,
``response.output_item.done``, then ``response.completed`` (or ``response.incomplete``).

Fault injection for error tests: ``state.fail_next`` answers that many requests with HTTP 500;
``state.delay`` sleeps that long before answering; ``state.stream_error`` sends an ``error`` event
after ``response.created`` and ends the stream.

Also ``GET /v1/responses/{id}``: a stored response (404 if unknown).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

__all__ = ["ResponsesState", "create_app"]


@dataclass
class ResponsesState:
    """What the server holds, and the knobs tests turn.

    Attributes:
        models: Model names the server accepts.
        api_key: The key clients must send (``None``: any key).
        conversations: Every stored response's whole conversation (input and output items, in
            order), by response id.
        responses: Every stored response object, by id.
        requests: Every request body received, in order.
        seen: For each answered request, the whole conversation the server answered.
        fail_next: Answer this many next requests with HTTP 500.
        delay: Seconds to wait before answering.
        stream_error: Break streams with an ``error`` event.
    """

    models: set[str] = field(default_factory=lambda: {"test-model"})
    api_key: str | None = None
    conversations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    seen: list[list[dict[str, Any]]] = field(default_factory=list)
    fail_next: int = 0
    delay: float = 0.0
    stream_error: bool = False
    _calls: int = 0

    def reset(self) -> None:
        """Back to a fresh state (between tests sharing one server)."""
        for spec in fields(self):
            factory: Any = spec.default_factory
            setattr(self, spec.name, factory() if factory is not MISSING else spec.default)

    def next_call_id(self) -> str:
        self._calls += 1
        return f"call_{self._calls}"


class _Refused(Exception):
    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.body = {
            "error": {
                "message": message,
                "type": "invalid_request_error" if status < 500 else "server_error",
                "param": param,
                "code": code,
            }
        }


def _text_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text")
        )
    return ""


def _normalize_input(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise _Refused(400, "'input' must be a string or a list of items", param="input")
    items: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _Refused(400, f"input[{index}] must be an object", param=f"input[{index}]")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ("user", "system", "developer", "assistant"):
                raise _Refused(400, f"input[{index}].role is invalid", param=f"input[{index}].role")
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise _Refused(400, f"input[{index}] needs call_id, name and arguments")
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("output"), str):
                raise _Refused(400, f"input[{index}] needs call_id and a string output")
        else:
            raise _Refused(400, f"input[{index}] has unsupported type {kind!r}", param=f"input[{index}].type")
        items.append({**item, "type": kind})
    return items


def _check_tool_outputs(history: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    pending = {i["call_id"] for i in history if i["type"] == "function_call"} - {
        i["call_id"] for i in history if i["type"] == "function_call_output"
    }
    for item in new:
        if item["type"] == "function_call_output":
            if item["call_id"] not in pending:
                raise _Refused(
                    400,
                    f"No tool call found for function call output with call_id {item['call_id']}.",
                    param="input",
                )
            pending.discard(item["call_id"])
        elif item["type"] == "function_call":
            pending.add(item["call_id"])
        elif pending:
            raise _Refused(
                400, f"No tool output found for function call {sorted(pending)[0]}.", param="input"
            )


def _answer(
    state: ResponsesState, body: dict[str, Any], conversation: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The output items for a conversation (see the module docstring for the rules)."""
    tail: list[dict[str, Any]] = []
    for item in reversed(conversation):
        if item["type"] != "function_call_output":
            break
        tail.insert(0, item)
    if tail:
        return [_message("results: " + "; ".join(i["output"] for i in tail))]
    users = [i for i in conversation if i["type"] == "message" and i.get("role") == "user"]
    text = _text_of(users[-1]) if users else ""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    choice = body.get("tool_choice", "auto")
    if tools and choice != "none":
        named = [t for t in tools if t["name"] in text]
        if isinstance(choice, dict):
            named = [t for t in tools if t["name"] == choice.get("name")]
        elif choice == "required" and not named:
            named = tools[:1]
        if named:
            arguments = "{}"
            start, end = text.find("{"), text.rfind("}")
            if 0 <= start < end:
                try:
                    if isinstance(json.loads(text[start : end + 1]), dict):
                        arguments = text[start : end + 1]
                except ValueError:
                    pass
            return [
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:12]}",
                    "call_id": state.next_call_id(),
                    "name": named[0]["name"],
                    "arguments": arguments,
                    "status": "completed",
                }
            ]
    fmt = (body.get("text") or {}).get("format") or {}
    if fmt.get("type") in ("json_schema", "json_object"):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        return [_message(text if isinstance(value, dict) else json.dumps({"echo": text}))]
    return [_message(f"echo: {text} (user messages: {len(users)})")]


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _words(items: list[dict[str, Any]]) -> int:
    total = 0
    for item in items:
        if item["type"] == "message":
            total += len(_text_of(item).split())
        elif item["type"] == "function_call":
            total += len(item["name"].split()) + len(item["arguments"].split())
        else:
            total += len(item["output"].split())
    return total


def _truncate(output: list[dict[str, Any]], limit: int | None) -> bool:
    """Cut message text to ``limit`` words; whether it was cut."""
    if limit is None:
        return False
    for item in output:
        if item["type"] == "message":
            part = item["content"][0]
            words = part["text"].split(" ")
            if len(words) > limit:
                part["text"] = " ".join(words[:limit])
                item["status"] = "incomplete"
                return True
    return False


def _respond(state: ResponsesState, body: dict[str, Any]) -> dict[str, Any]:
    model = body.get("model")
    if model not in state.models:
        raise _Refused(404, f"The model '{model}' does not exist", code="model_not_found", param="model")
    previous = body.get("previous_response_id")
    history: list[dict[str, Any]] = []
    if previous is not None:
        if previous not in state.conversations:
            raise _Refused(
                400,
                f"Previous response with id '{previous}' not found.",
                code="previous_response_not_found",
                param="previous_response_id",
            )
        history = state.conversations[previous]
    new = _normalize_input(body.get("input"))
    _check_tool_outputs(history, new)
    conversation = [*history, *new]
    state.seen.append(conversation)
    output = _answer(state, body, conversation)
    cut = _truncate(output, body.get("max_output_tokens"))
    input_words, output_words = _words(conversation), _words(output)
    response_id = f"resp_{uuid.uuid4().hex}"
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": model,
        "instructions": body.get("instructions"),
        "previous_response_id": previous,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "store": body.get("store", True),
        "text": body.get("text") or {"format": {"type": "text"}},
        "usage": {
            "input_tokens": input_words,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_words,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_words + output_words,
        },
    }
    if body.get("store", True):
        state.conversations[response_id] = [*conversation, *output]
        state.responses[response_id] = response
    return response


def _events(state: ResponsesState, response: dict[str, Any]) -> list[dict[str, Any]]:
    """The server-sent events that stream ``response``."""
    events: list[dict[str, Any]] = []
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events.append({"type": "response.created", "response": started})
    if state.stream_error:
        events.append(
            {"type": "error", "code": "server_error", "message": "the model crashed", "param": None}
        )
        return events
    events.append({"type": "response.in_progress", "response": started})
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            empty = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append({"type": "response.content_part.added", **where, "part": empty})
            pieces = [w + " " for w in text.split(" ")]
            pieces[-1] = pieces[-1][:-1]
            events.extend(
                {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                for piece in pieces
                if piece
            )
            events.append({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
            events.append({"type": "response.content_part.done", **where, "part": item["content"][0]})
        else:
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            where = {"item_id": item["id"], "output_index": index}
            args = item["arguments"]
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                events.append({"type": "response.function_call_arguments.delta", **where, "delta": piece})
            events.append({"type": "response.function_call_arguments.done", **where, "arguments": args})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append({"type": final, "response": response})
    return events


def create_app(state: ResponsesState) -> FastAPI:
    """The Responses API test app around ``state``."""
    app = FastAPI()

    @app.exception_handler(_Refused)
    async def refused(_request: Request, exc: Exception) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        assert isinstance(exc, _Refused)
        return JSONResponse(exc.body, status_code=exc.status)

    @app.post("/v1/responses")
    async def create_response(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        if state.api_key is not None:
            given = request.headers.get("authorization", "")
            if given != f"Bearer {state.api_key}":
                key = given.removeprefix("Bearer ")
                raise _Refused(401, f"Incorrect API key provided: {key}.", code="invalid_api_key")
        try:
            body = await request.json()
        except ValueError:
            raise _Refused(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _Refused(400, "the body must be a JSON object")
        state.requests.append(body)
        if state.delay:
            await asyncio.sleep(state.delay)
        if state.fail_next > 0:
            state.fail_next -= 1
            raise _Refused(500, "The server had an error while processing your request.")
        response = _respond(state, body)
        if not body.get("stream"):
            return JSONResponse(response)
        events = _events(state, response)

        async def sse() -> AsyncIterator[bytes]:
            for number, event in enumerate(events):
                event["sequence_number"] = number
                yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

        return StreamingResponse(sse(), media_type="text/event-stream")

    @app.get("/v1/responses/{response_id}")
    async def get_response(response_id: str) -> Any:  # pyright: ignore[reportUnusedFunction]
        if response_id not in state.responses:
            raise _Refused(404, f"No response found with id '{response_id}'.", param="response_id")
        return JSONResponse(state.responses[response_id])

    return app
