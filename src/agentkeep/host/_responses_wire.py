"""The OpenAI Responses wire, server side: input items to messages, a run's messages to output
items and stream events, and the ids that bind responses to their tenant's conversation.

**Ids.** A conversation is ``conv_`` + 32 hex digits; a response is ``resp_`` + its conversation's
32 digits + 16 of its own, so a response id names its conversation without a lookup table. Every
lookup happens inside the caller's tenant scope: another tenant's id names a conversation that
does not exist there (404).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from typing import Any, Final

from ..clients.openai_wire import arguments_text, json_text, parse_arguments, result_text
from ..contents import Content, FunctionCallContent, FunctionResultContent, TextContent, UsageDetails
from ..errors import MessageFormatError
from ..messages import Message

__all__ = [
    "LiveOutput",
    "conversation_items",
    "conversation_of",
    "is_conversation_id",
    "new_conversation_id",
    "new_response_id",
    "output_items",
    "replayed_events",
    "to_messages",
    "usage_of",
]

_CONVERSATION: Final = re.compile(r"conv_([0-9a-f]{32})")
_RESPONSE: Final = re.compile(r"resp_([0-9a-f]{32})[0-9a-f]{16}")


def new_conversation_id() -> str:
    return f"conv_{secrets.token_hex(16)}"


def new_response_id(conversation_id: str) -> str:
    return f"resp_{conversation_id[5:]}{secrets.token_hex(8)}"


def conversation_of(response_id: str) -> str | None:
    """The conversation a response id names (``None``: not a response id of this host)."""
    found = _RESPONSE.fullmatch(response_id)
    return None if found is None else f"conv_{found[1]}"


def is_conversation_id(value: str) -> bool:
    return _CONVERSATION.fullmatch(value) is not None


def _text_of(content: Any) -> list[Content]:
    if isinstance(content, str):
        return [TextContent(content)] if content else []
    if not isinstance(content, list):
        raise MessageFormatError("a message's content is a string or a list of parts")
    out: list[Content] = []
    for part in content:  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(part, dict):
            raise MessageFormatError("a content part is an object")
        kind = part.get("type")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if kind in ("input_text", "output_text", "text"):
            out.append(TextContent(str(part.get("text", ""))))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        elif kind == "input_image" and isinstance(part.get("image_url"), str):  # pyright: ignore[reportUnknownMemberType]
            out.append(Content.from_uri(part["image_url"]))  # pyright: ignore[reportUnknownArgumentType]
        else:
            raise MessageFormatError(f"content parts of type {kind!r} are not supported")
    return out


def to_messages(raw: Any) -> list[Message]:
    """Responses ``input`` (a string, or a list of items) as messages.

    Raises:
        MessageFormatError: An item of an unknown type, or of the wrong shape.
    """
    if raw is None:
        return []
    if isinstance(raw, str):
        return [Message("user", [raw])]
    if not isinstance(raw, list):
        raise MessageFormatError("input is a string or a list of items")
    messages: list[Message] = []
    for item in raw:  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(item, dict):
            raise MessageFormatError("an input item is an object")
        fields: dict[str, Any] = item  # pyright: ignore[reportUnknownVariableType]
        kind = fields.get("type", "message")
        try:
            if kind == "message":
                role = {"developer": "system"}.get(fields["role"], fields["role"])
                if role not in ("user", "assistant", "system"):
                    raise MessageFormatError(
                        f"a message's role is user, assistant, system or developer, not {role!r}"
                    )
                messages.append(Message(role, _text_of(fields.get("content"))))
            elif kind == "function_call":
                call = FunctionCallContent(
                    str(fields["call_id"]), str(fields["name"]), parse_arguments(fields.get("arguments"))
                )
                messages.append(Message("assistant", [call]))
            elif kind == "function_call_output":
                output = fields.get("output", "")
                text = json_text(output)
                messages.append(
                    Message("tool", [Content.from_function_result(str(fields["call_id"]), result=text)])
                )
            else:
                raise MessageFormatError(f"input items of type {kind!r} are not supported")
        except KeyError as exc:
            raise MessageFormatError(f"an input item of type {kind!r} lacks {exc.args[0]!r}") from exc
    return messages


def _message_item(message_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": message_id,
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}]
        if status == "completed"
        else [],
    }


def _call_item(call: FunctionCallContent, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call.call_id}",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": arguments_text(call) if status == "completed" else "",
        "status": status,
    }


def output_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A run's answers as output items: each assistant text a ``message``, each tool call the
    caller is to run a ``function_call``."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role != "assistant":
            continue
        text = message.text
        if text:
            items.append(_message_item(message.message_id or "", text))
        items.extend(_call_item(c) for c in message.contents if isinstance(c, FunctionCallContent))
    return items


def usage_of(usage: UsageDetails | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    prompt, answer = usage.input_token_count or 0, usage.output_token_count or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": answer,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_token_count or prompt + answer,
    }


class LiveOutput:
    """A streamed run's updates as ``response.*`` events, building the output items as it goes:
    a text is an item from its first delta to the next item (``output_item.added``,
    ``content_part.added``, ``output_text.delta`` ..., ``output_text.done``,
    ``content_part.done``, ``output_item.done``); a tool call is an item at once."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: str | None = None
        self._text: list[str] = []

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._open, "output_index": len(self.items), "content_index": 0}

    def close(self) -> list[dict[str, Any]]:
        """The events that end the text item being streamed (none if none is)."""
        if self._open is None:
            return []
        item = _message_item(self._open, "".join(self._text))
        where, part = self._where(), item["content"][0]
        self._open, self._text = None, []
        events: list[dict[str, Any]] = [
            {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []},
            {"type": "response.content_part.done", **where, "part": part},
            {"type": "response.output_item.done", "output_index": where["output_index"], "item": item},
        ]
        self.items.append(item)
        return events

    def text(self, message_id: str, delta: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open != message_id:
            events += self.close()
            self._open = message_id
            index = len(self.items)
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": _message_item(message_id, "", "in_progress"),
                }
            )
            events.append(
                {
                    "type": "response.content_part.added",
                    **self._where(),
                    "part": {"type": "output_text", "text": "", "annotations": []},
                }
            )
        self._text.append(delta)
        events.append({"type": "response.output_text.delta", **self._where(), "delta": delta, "logprobs": []})
        return events

    def call(self, call: FunctionCallContent) -> list[dict[str, Any]]:
        events = self.close()
        item, index = _call_item(call), len(self.items)
        where = {"item_id": item["id"], "output_index": index}
        events += [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": _call_item(call, "in_progress"),
            },
            {"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]},
            {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
        self.items.append(item)
        return events


def replayed_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``response.*`` events a stream of the stored ``response`` sent (each text whole, in
    one delta), ending with ``response.completed``."""
    shell: dict[str, Any] = {**response, "status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": shell},
        {"type": "response.in_progress", "response": shell},
    ]
    live = LiveOutput()
    for item in response.get("output", ()):
        if item.get("type") == "message":
            text = "".join(part.get("text", "") for part in item.get("content", ()))
            events += live.text(item["id"], text)
        elif item.get("type") == "function_call":
            events += live.call(FunctionCallContent(item["call_id"], item["name"], item["arguments"]))
    events += live.close()
    events.append({"type": "response.completed", "response": response})
    return events


def conversation_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Stored messages as Conversations API items, each with an id."""
    items: list[dict[str, Any]] = []
    for message in messages:
        message_id = message.message_id or ""
        text = message.text
        if message.role in ("user", "system") and text:
            kind = "input_text"
            items.append(
                {
                    "type": "message",
                    "id": message_id,
                    "role": message.role,
                    "status": "completed",
                    "content": [{"type": kind, "text": text}],
                }
            )
        elif message.role == "assistant":
            items.extend(output_items([message]))
        elif message.role == "tool":
            for result in message.contents:
                if isinstance(result, FunctionResultContent):
                    items.append(
                        {
                            "type": "function_call_output",
                            "id": f"fco_{result.call_id}",
                            "call_id": result.call_id,
                            "output": result_text(result),
                            "status": "completed",
                        }
                    )
    return items
