"""The AG-UI endpoint's protocol work: request messages to agentkeep messages, what is new in a
request, and a run's updates as AG-UI events (types and SSE encoding from ``ag-ui-protocol``).

**What is new.** AG-UI clients send the whole conversation every turn. The messages after the
newest one the stored history already holds are new: the request is walked from its end, each
message looked up by id among the ids of the loaded history (a set), so a turn costs what it
sends, never one comparison per pair. A client that sends no ids is matched by role and text
against the newest stored message instead. When nothing matches (a fresh thread, or a client that
rewrote its history) the messages after the request's last assistant message are new. The body
is decoded once (msgspec) and only the new messages are validated as AG-UI messages and
converted: what the host stores already is matched, not read again.

**A turn sent again.** A request whose last message is stored and already answered (a client
that did not see ``RUN_FINISHED`` retries, or the process that ran it died after storing it) is
answered from the store: :func:`stored_answer` finds the stored messages after it (up to the next
user message) and :func:`replayed` renders them as a run would, under their stored ids, without
running the model or storing anything. So retries converge on one answer per user message. (To
get another answer to the same message, send it as a new message, with a new id.)

**Events.** A run streams ``RUN_STARTED``; for each answer ``TEXT_MESSAGE_START`` /
``TEXT_MESSAGE_CONTENT`` (deltas) / ``TEXT_MESSAGE_END`` under the stored message's id (so the
client resends it under that id and it is recognised; an answer of tool calls only is opened and
closed empty, for the same reason); each tool call as ``TOOL_CALL_START`` / ``TOOL_CALL_ARGS`` /
``TOOL_CALL_END`` (parent: the answer's id); each result of a tool the agent
ran as ``TOOL_CALL_RESULT``; then ``RUN_FINISHED``, or ``RUN_ERROR`` with a code. Every event
carries a timestamp. Each is sent as ``ag_ui.encoder.EventEncoder`` writes it (:func:`encode_event`:
the same JSON, written by msgspec from the event's fields instead of by the model's serializer).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Final

import msgspec
import pydantic
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    DeveloperMessage,
    RunAgentInput,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import Message as AGUIMessage

from ..agent import AgentResponseUpdate
from ..contents import Content, DataContent, FunctionCallContent, FunctionResultContent, TextContent
from ..errors import MessageFormatError
from ..messages import Message
from ..tools import FunctionTool
from ._http import declared_tools
from ._run_events import rendered_parts

__all__ = [
    "EventStream",
    "checked_messages",
    "client_tools",
    "encode_event",
    "new_messages",
    "now_ms",
    "parse_input",
    "replayed",
    "stored_answer",
    "stored_ids",
    "to_messages",
]


def now_ms() -> int:
    """The time events carry: milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def _parts(content: Any) -> list[Content]:
    if isinstance(content, str):
        return [TextContent(content)] if content else []
    out: list[Content] = []
    for part in content or ():
        kind = getattr(part, "type", None)
        if kind == "text":
            out.append(TextContent(part.text))
            continue
        source = getattr(part, "source", None)
        if source is None:
            continue
        if source.type == "url":
            out.append(Content.from_uri(source.value, source.mime_type))
        elif source.type == "data":
            out.append(DataContent(f"data:{source.mime_type};base64,{source.value}", source.mime_type))
    return out


_MESSAGES: Final = pydantic.TypeAdapter(list[AGUIMessage])


def parse_input(body: bytes) -> tuple[RunAgentInput, list[dict[str, Any]]]:
    """A request body as its ``RunAgentInput`` (every field checked, ``messages`` left empty) and
    its messages as decoded JSON objects (checked when :func:`checked_messages` reads them).

    Raises:
        pydantic.ValidationError: A field of the wrong form.
        ValueError: Not a JSON object, or ``messages`` not a list of objects.
    """
    try:
        raw: Any = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from exc
    except RecursionError as exc:  # msgspec's own limit on nesting
        raise ValueError("the body is nested too deeply") from exc
    if not isinstance(raw, dict):
        raise ValueError("the body is not a JSON object")
    fields: dict[str, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    messages: Any = fields.get("messages")
    if not isinstance(messages, list) or not all(map(isinstance, messages, repeat(dict))):  # pyright: ignore[reportUnknownArgumentType]
        raise ValueError("messages is a list of message objects")
    checked: list[dict[str, Any]] = messages  # pyright: ignore[reportUnknownVariableType] - each a dict
    return RunAgentInput.model_validate({**fields, "messages": []}), checked


def checked_messages(raw: list[dict[str, Any]]) -> list[Message]:
    """``raw`` AG-UI messages, checked and converted (see :func:`to_messages`).

    Raises:
        MessageFormatError: A message of the wrong form, or one that cannot be represented.
    """
    try:
        messages = _MESSAGES.validate_python(raw)
    except pydantic.ValidationError as exc:
        raise MessageFormatError(
            f"not AG-UI messages: {exc.errors(include_url=False, include_input=False)}"
        ) from exc
    return to_messages(messages)


def to_messages(messages: Sequence[AGUIMessage]) -> list[Message]:
    """AG-UI messages as agentkeep messages, ids kept (activity and reasoning messages, which are
    not model input, are left out).

    Raises:
        MessageFormatError: A message cannot be represented (e.g. a lone surrogate in a text).
    """
    out: list[Message] = []
    for message in messages:
        if isinstance(message, UserMessage):
            out.append(Message("user", _parts(message.content), message_id=message.id))
        elif isinstance(message, AssistantMessage):
            contents: list[Content] = [TextContent(message.content)] if message.content else []
            for call in message.tool_calls or ():
                contents.append(FunctionCallContent(call.id, call.function.name, call.function.arguments))
            out.append(Message("assistant", contents, message_id=message.id))
        elif isinstance(message, ToolMessage):
            text = (
                message.content
                if isinstance(message.content, str)
                else "".join(c.text for c in _parts(message.content) if isinstance(c, TextContent))
            )
            result = (
                Content.from_function_result(message.tool_call_id, exception=message.error)
                if message.error
                else Content.from_function_result(message.tool_call_id, result=text)
            )
            out.append(Message("tool", [result], message_id=message.id))
        elif isinstance(message, SystemMessage | DeveloperMessage):
            out.append(Message("system", [TextContent(message.content)], message_id=message.id))
    return out


def client_tools(body: RunAgentInput) -> list[FunctionTool]:
    """The client's (frontend) tools as declarations: the model may call them, the client runs them.

    Raises:
        HTTPProblem: 422 for a tool with an invalid name or parameters.
    """
    specs = (
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        for tool in body.tools or ()
    )  # the fields read, not a model_dump() copying each tool's whole schema every turn
    return declared_tools(specs, shape="flat", status=422)


def _fingerprint(message: dict[str, Any]) -> tuple[str, str]:
    """Role and text of a raw AG-UI message, as :attr:`Message.role` and :attr:`Message.text`
    would read once converted."""
    role = message.get("role")
    content: Any = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(part.get("text", ""))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            for part in content  # pyright: ignore[reportUnknownVariableType]
            if isinstance(part, dict) and part.get("type") == "text"  # pyright: ignore[reportUnknownMemberType]
        )
    role = "system" if role == "developer" else role
    return str(role), content if isinstance(content, str) else ""


def stored_ids(stored: Sequence[Message]) -> dict[str, int]:
    """Where each message id of ``stored`` is (its last position): :func:`stored_answer` and
    :func:`new_messages` look the request's ids up in it, so a turn walks its history once."""
    return {
        message.message_id: index for index, message in enumerate(stored) if message.message_id is not None
    }


def stored_answer(
    sent: Sequence[dict[str, Any]], stored: Sequence[Message], *, ids: Mapping[str, int] | None = None
) -> list[Message] | None:
    """The stored answer to ``sent`` when the request was answered already (a retry: the client
    did not see its ``RUN_FINISHED``): its last message is stored (by id) and followed by stored
    messages; the answer is those up to the next user message. ``None`` otherwise.

    ``ids`` is :func:`stored_ids` of ``stored``, if the caller has it."""
    if not sent or not stored:
        return None
    last = sent[-1].get("id")
    if not isinstance(last, str) or not last:
        return None
    index = (stored_ids(stored) if ids is None else ids).get(last)
    if index is None:
        return None
    answer: list[Message] = []
    for message in stored[index + 1 :]:
        if message.role == "user":
            break
        answer.append(message)
    return answer or None


def replayed(answer: Sequence[Message]) -> Iterable[AgentResponseUpdate]:
    """A stored answer as the updates a run made of it (whole messages, not deltas)."""
    for message in answer:
        yield AgentResponseUpdate(
            list(message.contents),
            role=message.role,
            message_id=message.message_id,
            author_name=message.author_name,
        )


def new_messages(
    sent: Sequence[dict[str, Any]], stored: Sequence[Message], *, ids: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """The messages of ``sent`` (a whole AG-UI conversation, as decoded JSON) that ``stored`` (the
    newest stored history) does not hold yet; see the module docs. ``ids`` is :func:`stored_ids`
    of ``stored``, if the caller has it."""
    if not stored:
        return list(sent)
    known = stored_ids(stored) if ids is None else ids
    for index in range(len(sent) - 1, -1, -1):
        if sent[index].get("id") in known:
            return list(sent[index + 1 :])
    newest = (stored[-1].role, stored[-1].text)
    for index in range(len(sent) - 1, -1, -1):
        if _fingerprint(sent[index]) == newest:
            return list(sent[index + 1 :])
    last_answer = max((i for i, m in enumerate(sent) if m.get("role") == "assistant"), default=-1)
    return list(sent[last_answer + 1 :])


class EventStream:
    """Turns a run's updates into AG-UI events (see the module docs), opening and closing text
    messages as the updates move between messages."""

    def __init__(self) -> None:
        self._open: str | None = None  # the text message being streamed
        self._seen: set[str] = set()  # messages this stream has started
        self._calls: set[str] = set()

    def _close(self) -> list[BaseEvent]:
        if self._open is None:
            return []
        closed, self._open = self._open, None
        return [TextMessageEndEvent(message_id=closed, timestamp=now_ms())]

    def update(self, update: AgentResponseUpdate) -> list[BaseEvent]:
        """The events for one update of the run."""
        events: list[BaseEvent] = []
        message_id = update.message_id or ""
        for content in rendered_parts(update, results=True):
            if isinstance(content, TextContent):
                if self._open != message_id:
                    events += self._close()
                    events += self._start(message_id)
                events.append(
                    TextMessageContentEvent(message_id=message_id, delta=content.text, timestamp=now_ms())
                )
            elif isinstance(content, FunctionCallContent):
                events += self._close()
                if message_id not in self._seen:  # an answer of tool calls only: opened and closed
                    events += [*self._start(message_id), *self._close()]  # so the client keeps its id
                events += self._call(content, message_id)
            elif content.call_id in self._calls:
                events += self._close()
                events.append(
                    ToolCallResultEvent(
                        message_id=message_id,
                        tool_call_id=content.call_id,
                        content=_result_text(content),
                        role="tool",
                        timestamp=now_ms(),
                    )
                )
        return events

    def _start(self, message_id: str) -> list[BaseEvent]:
        self._open = message_id
        self._seen.add(message_id)
        return [TextMessageStartEvent(message_id=message_id, role="assistant", timestamp=now_ms())]

    def _call(self, call: FunctionCallContent, parent: str) -> Iterable[BaseEvent]:
        self._calls.add(call.call_id)
        arguments = call.arguments
        text = arguments if isinstance(arguments, str) else msgspec.json.encode(arguments or {}).decode()
        yield ToolCallStartEvent(
            tool_call_id=call.call_id, tool_call_name=call.name, parent_message_id=parent, timestamp=now_ms()
        )
        if text:
            yield ToolCallArgsEvent(tool_call_id=call.call_id, delta=text, timestamp=now_ms())
        yield ToolCallEndEvent(tool_call_id=call.call_id, timestamp=now_ms())

    def finish(self) -> list[BaseEvent]:
        """The events that close what is still open at the end of the run."""
        return self._close()


@functools.cache
def _wire_fields(event_type: type[BaseEvent]) -> tuple[tuple[str, str, bool], ...]:
    """Each field of ``event_type`` as (name, JSON key, left out when ``None``), in the order the
    model serializes them: keyed by alias, an optional field whose default is ``None`` omitted
    while it has no value (as ``ag_ui``'s models do)."""
    return tuple(
        (
            name,
            field.serialization_alias or field.alias or name,
            not field.is_required() and field.default is None,
        )
        for name, field in event_type.model_fields.items()
    )


def encode_event(event: BaseEvent) -> str:
    """``event`` as a server-sent event, as ``ag_ui.encoder.EventEncoder`` encodes it (``data:``,
    the event's JSON by alias without the optional fields it has no value for, a blank line).

    Its fields are written by msgspec: the model's own serializer (a Python wrapper around
    pydantic's, to leave fields out) costs several times more, on every event of every turn.
    An event with a value msgspec cannot write (a nested model) is encoded by the model."""
    values = event.__dict__
    body = {
        key: values[name]
        for name, key, optional in _wire_fields(type(event))
        if not optional or values[name] is not None
    }
    if event.__pydantic_extra__:
        body.update(event.__pydantic_extra__)
    try:
        return f"data: {_ENCODE(body).decode()}\n\n"
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        return f"data: {event.model_dump_json(by_alias=True)}\n\n"


_ENCODE: Final = msgspec.json.Encoder().encode


def _result_text(result: FunctionResultContent) -> str:
    if result.exception is not None:
        return f"error: {result.exception}"
    value = result.result
    if isinstance(value, str):
        return value
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError) as exc:  # pragma: no cover - results are made JSON-able
        raise MessageFormatError(f"a tool result cannot be sent: {exc}") from exc
