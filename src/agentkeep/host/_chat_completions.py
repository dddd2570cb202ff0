"""``POST /v1/chat/completions``: the OpenAI Chat Completions API, stateless (the caller sends the
whole conversation; nothing is stored), ``model`` = a hosted agent's name.

``messages`` in the Chat Completions form (``system`` / ``developer`` / ``user`` / ``assistant``
with ``tool_calls`` / ``tool``), ``tools`` of type ``function`` (the caller runs them: a call ends
the completion with ``finish_reason: "tool_calls"``), ``max_tokens`` or
``max_completion_tokens``, ``stream`` (``chat.completion.chunk`` events, then ``[DONE]``). The
agent runs with its instructions, tools and options but without its context providers: they
keep per-session data, and a stateless request has no session to keep it in.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import msgspec
import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import format_sse_event

from ..clients.openai_wire import arguments_text, parse_arguments
from ..contents import Content, FunctionCallContent, TextContent
from ..errors import MessageFormatError
from ..messages import Message
from ._http import STATUS_OF, HTTPProblem, declared_tools, error_response, parsed, run_error
from ._responses_wire import usage_of
from ._run_events import rendered_parts

if TYPE_CHECKING:
    from ._app import AgentHost

__all__ = ["install_chat_completions"]


class ChatRequest(pydantic.BaseModel):
    """The fields of ``POST /v1/chat/completions`` the host reads (others are ignored)."""

    model_config = pydantic.ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    stream: bool = False
    max_tokens: int | None = pydantic.Field(default=None, ge=1)
    max_completion_tokens: int | None = pydantic.Field(default=None, ge=1)


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            for part in content  # pyright: ignore[reportUnknownVariableType]
            if isinstance(part, dict) and part.get("type") == "text"  # pyright: ignore[reportUnknownMemberType]
        )
    raise MessageFormatError("a message's content is a string or a list of parts")


def to_messages(raw: list[dict[str, Any]]) -> list[Message]:
    """Chat Completions messages as agentkeep messages.

    Raises:
        MessageFormatError: A message of an unknown role or the wrong shape.
    """
    out: list[Message] = []
    for message in raw:
        role = message.get("role")
        try:
            if role in ("system", "developer"):
                out.append(Message("system", [_text(message.get("content"))]))
            elif role == "user":
                out.append(Message("user", [_text(message.get("content"))]))
            elif role == "assistant":
                contents: list[Content] = []
                text = _text(message.get("content"))
                if text:
                    contents.append(TextContent(text))
                for call in message.get("tool_calls") or ():
                    function = call["function"]
                    contents.append(
                        FunctionCallContent(
                            str(call["id"]), str(function["name"]), parse_arguments(function.get("arguments"))
                        )
                    )
                out.append(Message("assistant", contents))
            elif role == "tool":
                result = Content.from_function_result(
                    str(message["tool_call_id"]), result=_text(message.get("content"))
                )
                out.append(Message("tool", [result]))
            else:
                raise MessageFormatError(
                    f"messages have the role system, developer, user, assistant or tool, not {role!r}"
                )
        except (KeyError, TypeError) as exc:
            raise MessageFormatError(f"a {role} message of the wrong shape: {exc}") from exc
    return out


def _tool_calls(calls: list[FunctionCallContent]) -> list[dict[str, Any]]:
    return [
        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": arguments_text(c)}}
        for c in calls
    ]


class _ChatCompletions:
    def __init__(self, host: AgentHost) -> None:
        self.host = host

    async def create(self, request: Request) -> Response:
        tenant = self.host.tenant_of(request)
        body = parsed(ChatRequest, await self.host.body_of(request), what="a chat completion request")
        agent = self.host.hosted_agent(body.model, as_model=True).stateless
        self.host.check_message_count(len(body.messages))
        try:
            messages = to_messages(body.messages)
        except MessageFormatError as exc:
            raise HTTPProblem(400, "invalid_request", str(exc)) from exc
        tools = declared_tools(body.tools or (), shape="nested")
        limit = body.max_completion_tokens or body.max_tokens
        options = {} if limit is None else {"max_tokens": limit}
        self.host.admit_turn(request, tenant)  # counted until the request ends
        completion_id, created = f"chatcmpl-{secrets.token_hex(12)}", int(time.time())
        if body.stream:
            stream = agent.run(messages, stream=True, tools=tools, options=options)
            return StreamingResponse(
                self._chunks(stream, completion_id, created, body.model), media_type="text/event-stream"
            )
        try:
            async with self.host.timed():
                answer = await agent.run(messages, tools=tools, options=options)
        except Exception as exc:
            code, message = run_error(exc)
            return error_response(STATUS_OF[code], code, message)
        calls = [c for m in answer.messages for c in m.contents if isinstance(c, FunctionCallContent)]
        reply: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
        if calls:
            reply["tool_calls"] = _tool_calls(calls)
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": body.model,
                "choices": [
                    {"index": 0, "message": reply, "finish_reason": "tool_calls" if calls else "stop"}
                ],
                "usage": _chat_usage(answer.usage),
            }
        )

    async def _chunks(
        self, stream: Any, completion_id: str, created: int, model: str
    ) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return format_sse_event(data_str=msgspec.json.encode(data).decode())

        yield chunk({"role": "assistant", "content": ""})
        calls = 0
        try:
            async with self.host.timed(), stream as updates:
                async for update in updates:
                    for content in rendered_parts(update):
                        if isinstance(content, TextContent):
                            yield chunk({"content": content.text})
                        elif isinstance(content, FunctionCallContent):
                            [call] = _tool_calls([content])
                            yield chunk({"tool_calls": [{"index": calls, **call}]})
                            calls += 1
        except Exception as exc:
            code, message = run_error(exc)
            error = {"error": {"type": code, "message": message}}
            yield format_sse_event(data_str=msgspec.json.encode(error).decode())
            return
        yield chunk({}, "tool_calls" if calls else "stop")
        yield format_sse_event(data_str="[DONE]")


def _chat_usage(usage: Any) -> dict[str, Any] | None:
    converted = usage_of(usage)
    if converted is None:
        return None
    return {
        "prompt_tokens": converted["input_tokens"],
        "completion_tokens": converted["output_tokens"],
        "total_tokens": converted["total_tokens"],
    }


def install_chat_completions(host: AgentHost, app: FastAPI) -> None:
    """Add ``POST /v1/chat/completions`` of ``host`` to ``app``."""
    app.post("/v1/chat/completions", response_model=None)(_ChatCompletions(host).create)
