"""Wire mapping for the OpenAI-compatible clients of :mod:`agentkeep.clients.openai`.

No I/O and no ``openai`` import at run time: agentkeep messages to Chat Completions messages and
Responses API input items, and request bodies encoded from them (:class:`MessageEncoder` keeps
each message's JSON, :func:`encode_body` adds the rest); ``response_format`` to JSON-schema
formats and back to values; streamed chat chunks decoded into :class:`ChatChunk`; error bodies
to one-line messages; and usage to :class:`~agentkeep.contents.UsageDetails`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

import msgspec

from ..contents import (
    Content,
    DataContent,
    FunctionCallContent,
    FunctionResultContent,
    TextContent,
    UriContent,
    UsageDetails,
)
from ..errors import ChatClientError, ChatRequestError, ModelUnavailableError
from ..messages import Message
from ..sessions import from_builtins

if TYPE_CHECKING:
    from openai.types.completion_usage import CompletionUsage
    from openai.types.responses import ResponseUsage

__all__ = [
    "ChatChunk",
    "ChunkChoice",
    "ChunkDelta",
    "ChunkFunction",
    "ChunkToolCall",
    "ChunkUsage",
    "MessageEncoder",
    "OutputFormat",
    "PartialCall",
    "arguments_text",
    "chat_items",
    "chat_leading",
    "chat_usage",
    "decode_chunk",
    "encode_body",
    "json_text",
    "one_line",
    "output_format",
    "parse_arguments",
    "reasoning_of",
    "response_items",
    "responses_usage",
    "result_text",
    "server_message",
    "stream_error",
    "to_chat_messages",
    "to_response_items",
]

_MAX_MESSAGE = 400
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")
_ENCODE = msgspec.json.Encoder().encode


# -- requests: agentkeep -> wire ---------------------------------------------------------------


def json_text(value: Any) -> str:
    """``value`` as JSON text (tool arguments and results), ``str()`` for what has no JSON form."""
    if isinstance(value, str):
        return value
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)


def result_text(result: FunctionResultContent) -> str:
    """A tool result as the text the model reads."""
    if result.exception is not None:
        return f"Error: {result.exception}"
    return "" if result.result is None else json_text(result.result)


def arguments_text(call: FunctionCallContent) -> str:
    return "{}" if call.arguments is None else json_text(call.arguments)


def parse_arguments(text: str | None) -> dict[str, Any] | str:
    """Model-written arguments as a dict; text that is not a JSON object is kept as is."""
    if not text or not text.strip():
        return {}
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text
    return cast("dict[str, Any]", value) if isinstance(value, dict) else text


def _media_type(content: DataContent | UriContent) -> str:
    if content.media_type:
        return content.media_type
    if content.uri.startswith("data:"):
        return content.uri[5:].split(";", 1)[0].split(",", 1)[0]
    return ""


def _chat_part(content: Content) -> dict[str, Any] | None:
    """A user-message content as a Chat Completions content part (``None``: nothing to send)."""
    if isinstance(content, TextContent):
        return {"type": "text", "text": content.text}
    if isinstance(content, DataContent | UriContent):
        media = _media_type(content)
        if media.startswith("image/") or (isinstance(content, UriContent) and not media):
            return {"type": "image_url", "image_url": {"url": content.uri}}
        if isinstance(content, DataContent) and media in ("audio/wav", "audio/x-wav", "audio/mpeg"):
            data = content.uri.partition(",")[2]
            return {"type": "input_audio", "input_audio": {"data": data, "format": media[-3:]}}
        if isinstance(content, DataContent):
            return {"type": "file", "file": {"file_data": content.uri}}
        return {"type": "text", "text": content.uri}
    return None  # reasoning, usage, errors and foreign contents are not model input


def chat_items(message: Message) -> list[dict[str, Any]]:
    """One message in Chat Completions form: usually one wire message; an assistant or user message
    that carries tool results adds one ``role: "tool"`` message per result; none for a message with
    nothing a model reads."""
    out: list[dict[str, Any]] = []
    results = [c for c in message.contents if isinstance(c, FunctionResultContent)]
    if message.role == "assistant":
        calls = [c for c in message.contents if isinstance(c, FunctionCallContent)]
        # content "" rather than null beside tool calls: both are valid OpenAI input, and some
        # compatible servers (llama.cpp's) reject null
        wire: dict[str, Any] = {"role": "assistant", "content": message.text}
        if calls:
            wire["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments_text(call)},
                }
                for call in calls
            ]
        out.append(wire)
    elif message.role == "system":
        out.append({"role": "system", "content": message.text})
    elif message.role == "user" or not results:
        parts = [p for p in (_chat_part(c) for c in message.contents) if p is not None]
        if parts and all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
        elif parts:
            out.append({"role": "user", "content": parts})
    out.extend(
        {"role": "tool", "tool_call_id": result.call_id, "content": result_text(result)} for result in results
    )
    return out


def to_chat_messages(messages: Sequence[Message], *, instructions: str | None = None) -> list[dict[str, Any]]:
    """Messages in Chat Completions form, with ``instructions`` as a leading system message.

    Tool results become ``role: "tool"`` messages (one per result, with ``tool_call_id``);
    assistant tool calls become ``tool_calls``; images and files become content parts.
    """
    out = chat_leading(instructions)
    for message in messages:
        out.extend(chat_items(message))
    return out


def chat_leading(instructions: str | None) -> list[dict[str, Any]]:
    """What goes before the messages in Chat Completions form: ``instructions`` as a system message."""
    return [{"role": "system", "content": instructions}] if instructions else []


def _response_part(content: Content) -> dict[str, Any] | None:
    """A user-message content as a Responses API input part (``None``: nothing to send)."""
    if isinstance(content, TextContent):
        return {"type": "input_text", "text": content.text}
    if isinstance(content, DataContent | UriContent):
        media = _media_type(content)
        if media.startswith("image/") or (isinstance(content, UriContent) and not media):
            return {"type": "input_image", "image_url": content.uri, "detail": "auto"}
        if isinstance(content, DataContent):
            return {"type": "input_file", "file_data": content.uri}
        return {"type": "input_file", "file_url": content.uri}
    return None


def response_items(message: Message) -> list[dict[str, Any]]:
    """One message as Responses API input items (none for a message with nothing a model reads)."""
    items: list[dict[str, Any]] = []
    if message.role == "assistant":
        text: list[str] = []
        for content in message.contents:
            if isinstance(content, TextContent):
                text.append(content.text)
            elif isinstance(content, FunctionCallContent):
                if text:
                    items.append({"type": "message", "role": "assistant", "content": "".join(text)})
                    text = []
                items.append(
                    {
                        "type": "function_call",
                        "call_id": content.call_id,
                        "name": content.name,
                        "arguments": arguments_text(content),
                    }
                )
        if text:
            items.append({"type": "message", "role": "assistant", "content": "".join(text)})
    elif message.role == "system":
        items.append({"type": "message", "role": "system", "content": message.text})
    else:
        parts = [p for p in (_response_part(c) for c in message.contents) if p is not None]
        if parts:
            items.append({"type": "message", "role": "user", "content": parts})
    items.extend(
        {"type": "function_call_output", "call_id": c.call_id, "output": result_text(c)}
        for c in message.contents
        if isinstance(c, FunctionResultContent)
    )
    return items


def to_response_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as Responses API input items.

    User and system text become ``message`` items; assistant tool calls become ``function_call``
    items (with ``call_id``) and tool results ``function_call_output`` items.
    """
    items: list[dict[str, Any]] = []
    for message in messages:
        items.extend(response_items(message))
    return items


# -- request bodies: encoded here, once per message ---------------------------------------------


class MessageEncoder:
    """Messages as JSON array bytes, each message's wire form encoded once and kept.

    A long conversation is resent whole on every call; encoding only the messages not seen before
    makes a call cost a dictionary look-up per earlier message instead of a walk through its
    fields. An entry is keyed by the message's ``contents`` list, which a message and its copies
    share (:meth:`Message.copy`) and which agentkeep treats as immutable once the message is made;
    it is used again only for the same list object, at the same length and with the same role.
    At most ``limit`` entries are kept; the oldest go first.

    Args:
        items: One message's wire form (:func:`chat_items` or :func:`response_items`).
        limit: How many messages' encodings to keep.
    """

    __slots__ = ("_entries", "_items", "_limit")

    def __init__(self, items: Callable[[Message], list[dict[str, Any]]], *, limit: int = 20_000) -> None:
        self._items = items
        self._limit = limit
        # id(contents) -> (contents, its length, role, the message's items as JSON, comma-joined)
        self._entries: dict[int, tuple[list[Content], int, str, bytes]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def encode(self, messages: Iterable[Message], *, leading: Sequence[dict[str, Any]] = ()) -> bytes:
        """``leading`` items (not kept) then the items of ``messages``, as one JSON array."""
        entries = self._entries
        parts: list[bytes] = [_ENCODE(item) for item in leading]
        for message in messages:
            contents = message.contents
            entry = entries.get(id(contents))
            if (
                entry is None
                or entry[0] is not contents
                or entry[1] != len(contents)
                or entry[2] != message.role
            ):
                entry = self._add(message)
            if entry[3]:
                parts.append(entry[3])
        return b"[" + b",".join(parts) + b"]"

    def _add(self, message: Message) -> tuple[list[Content], int, str, bytes]:
        entries = self._entries
        contents = message.contents
        encoded = b",".join(_ENCODE(item) for item in self._items(message))
        entry = (contents, len(contents), message.role, encoded)
        entries.pop(id(contents), None)
        if len(entries) >= self._limit:
            for key in list(islice(entries, max(1, len(entries) // 8))):
                del entries[key]
        entries[id(contents)] = entry
        return entry


def encode_body(key: str, items: bytes, rest: Mapping[str, Any]) -> bytes:
    """A JSON object of ``rest`` with ``key`` set to the encoded array ``items`` (placed first);
    ``rest`` holding ``key`` itself wins (as ``extra_body`` does in the SDK)."""
    if key in rest:
        return _ENCODE(rest)
    head = b'{"' + key.encode() + b'":' + items
    tail = _ENCODE(rest)
    return head + b"}" if len(tail) == 2 else head + b"," + tail[1:]


# -- structured output --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """What ``response_format`` asks for: a named JSON schema, or any JSON object."""

    name: str | None = None
    schema: dict[str, Any] | None = None
    target: type[Any] | None = None

    def for_chat(self) -> dict[str, Any]:
        if self.schema is None:
            return {"type": "json_object"}
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name or "response", "schema": self.schema, "strict": False},
        }

    def for_responses(self) -> dict[str, Any]:
        if self.schema is None:
            return {"format": {"type": "json_object"}}
        return {
            "format": {
                "type": "json_schema",
                "name": self.name or "response",
                "schema": self.schema,
                "strict": False,
            }
        }

    def parse(self, text: str) -> Any:
        """The reply parsed into the target type (``None`` when there is no type or no text)."""
        if self.target is None or not text.strip():
            return None
        try:
            validate = getattr(self.target, "model_validate_json", None)
            if callable(validate):  # a pydantic model
                return validate(text)
            return from_builtins(msgspec.json.decode(text), self.target)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
            raise ChatClientError(
                f"the model's reply does not fit {self.target.__name__}: {one_line(str(exc))}"
            ) from exc


def _inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A msgspec schema with its top-level ``$ref`` resolved (APIs want an object at the root)."""
    defs = dict(schema.pop("$defs", {}))
    ref = schema.get("$ref", "")
    body = dict(defs.pop(ref.rsplit("/", 1)[-1], schema)) if ref else dict(schema)
    if defs:
        body["$defs"] = defs
    return body


def output_format(response_format: Any) -> OutputFormat | None:
    if response_format is None:
        return None
    if isinstance(response_format, Mapping):
        fmt = cast("Mapping[str, Any]", response_format)
        kind = fmt.get("type")
        if kind == "json_object":
            return OutputFormat()
        if kind == "json_schema":
            spec = cast("Mapping[str, Any]", fmt.get("json_schema", fmt))
            return OutputFormat(name=spec.get("name"), schema=dict(spec.get("schema", {})))
        return OutputFormat(name=str(fmt.get("title", "response")), schema=dict(fmt))
    if isinstance(response_format, type):
        target = cast("type[Any]", response_format)
        model_schema = getattr(target, "model_json_schema", None)
        if callable(model_schema):
            schema = cast("dict[str, Any]", model_schema())
        else:
            try:
                schema = _inline_schema(msgspec.json.schema(target))
            except (TypeError, ValueError) as exc:
                raise ChatRequestError(
                    f"response_format {target.__name__} has no JSON schema: {exc}"
                ) from exc
        name = _SCHEMA_NAME.sub("_", target.__name__)[:64] or "response"
        return OutputFormat(name=name, schema=schema, target=target)
    raise ChatRequestError(
        f"response_format must be a type or a JSON schema dict, not {type(response_format).__name__}"
    )


# -- errors -------------------------------------------------------------------------------------


def one_line(text: str, limit: int = _MAX_MESSAGE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def server_message(body: object) -> str:
    """The human part of an error body (``{"message": ...}``, FastAPI's ``{"detail": ...}``)."""
    if isinstance(body, Mapping):
        data = cast("Mapping[str, Any]", body)
        inner = data.get("error")
        if isinstance(inner, Mapping):
            data = cast("Mapping[str, Any]", inner)
        for key in ("message", "detail", "error"):
            value = data.get(key)
            if value:
                return value if isinstance(value, str) else json_text(value)
        return ""
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")
    return "" if body is None else str(body)


def stream_error(code: str | None, message: str, what: str) -> ChatClientError:
    """An error reported inside a stream or a failed response (no HTTP status there)."""
    text = f"{what}: {code + ': ' if code else ''}{one_line(message)}"
    if code in ("server_error", "rate_limit_exceeded", "vector_store_timeout", "overloaded"):
        return ModelUnavailableError(text)
    if code:
        return ChatRequestError(text)
    return ChatClientError(text)


# -- usage --------------------------------------------------------------------------------------


def chat_usage(usage: CompletionUsage | ChunkUsage | None) -> UsageDetails | None:
    if usage is None:
        return None
    return UsageDetails(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


def responses_usage(usage: ResponseUsage | None) -> UsageDetails | None:
    if usage is None:
        return None
    return UsageDetails(usage.input_tokens, usage.output_tokens, usage.total_tokens)


@dataclass(slots=True)
class PartialCall:
    """A tool call being assembled from streamed deltas."""

    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list[str])


def reasoning_of(message: object) -> str | None:
    """The ``reasoning_content`` some servers (DeepSeek, vLLM, llama.cpp) add to a message or delta
    (an extra field of the SDK's models, a field of :class:`ChatChunk`'s deltas)."""
    value = getattr(message, "reasoning_content", None)
    return value if isinstance(value, str) and value else None


# -- streamed chat completion chunks ------------------------------------------------------------


class ChunkFunction(msgspec.Struct, frozen=True):
    """A piece of a streamed tool call's function: its name (first piece) and an arguments fragment."""

    name: str | None = None
    arguments: str | None = None


class ChunkToolCall(msgspec.Struct, frozen=True):
    """A piece of a streamed tool call, ``index`` saying which call of the answer it belongs to."""

    index: int = 0
    id: str | None = None
    function: ChunkFunction | None = None


class ChunkDelta(msgspec.Struct, frozen=True):
    """What one chunk adds to the answer."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(msgspec.Struct, frozen=True):
    """One choice of a chunk."""

    index: int = 0
    delta: ChunkDelta | None = None
    finish_reason: str | None = None


class ChunkUsage(msgspec.Struct, frozen=True):
    """The token counts of a chunk (the last one, when ``include_usage`` was asked for)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class ChatChunk(msgspec.Struct, frozen=True):
    """One streamed Chat Completions chunk: the fields the chat client reads, with the names and
    shapes of the SDK's ``ChatCompletionChunk`` (other fields are skipped; ``null`` is taken
    where servers are known to send it). ``error`` is set when a server reports an error inside
    the stream."""

    id: str | None = None
    model: str | None = None
    choices: list[ChunkChoice] | None = None
    usage: ChunkUsage | None = None
    error: Any = None


decode_chunk = msgspec.json.Decoder(ChatChunk).decode
"""One chunk's JSON text (an SSE event's data) as a :class:`ChatChunk`; raises
:class:`msgspec.DecodeError` (or its subclass ``ValidationError``) for what is not one."""
