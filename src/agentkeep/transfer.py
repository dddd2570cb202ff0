"""Stored conversations out of (and into) agentkeep: the JSON export format and a Markdown
transcript. ``agentkeep sessions export`` / ``import`` and the host's sessions API use them.

**The JSON export** is one versioned object, lossless and re-importable::

    {
      "format": "agentkeep.conversation", "version": 1,
      "conversation_id": "...",
      "messages": [<wire dicts: the raw log, oldest first, excluded messages included>],
      "excluded": ["<ids a compaction excluded>"],                  (only when there are some)
      "summaries": [{"message": <wire dict>, "replaces": ["<id>"]}]  (only when there are some)
    }

Messages keep their ids and creation times. Summaries that a later compaction replaced again are
not in the view, so they are not exported (what they summarized is).

**The Markdown export** is a readable transcript of the compacted view (what the model sees).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from .contents import (
    DataContent,
    ErrorContent,
    FunctionCallContent,
    FunctionResultContent,
    TextContent,
    TextReasoningContent,
    UnknownContent,
    UriContent,
    UsageContent,
)
from .message_stores.base import MessageStore, StoredMessage, Summary
from .messages import Message

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ConversationExport",
    "content_lines",
    "export_conversation",
    "render_markdown",
]

EXPORT_FORMAT: Final = "agentkeep.conversation"
"""The ``format`` tag of a JSON export."""

EXPORT_VERSION: Final = 1
"""The version of the JSON export this agentkeep writes (and the newest it reads)."""


@dataclass(slots=True)
class ConversationExport:
    """A conversation as exported: its raw log and the compaction recorded on it.

    Attributes:
        conversation_id: The id it was exported from (``None`` when the file did not say).
        messages: The raw log, oldest first (excluded messages included).
        excluded: Ids of the messages a compaction excluded from the view.
        summaries: Summaries in the view, each with the ids it replaces.
    """

    conversation_id: str | None
    messages: list[Message] = field(default_factory=list[Message])
    excluded: list[str] = field(default_factory=list[str])
    summaries: list[Summary] = field(default_factory=list[Summary])

    def to_dict(self) -> dict[str, Any]:
        """The JSON export (see the module docs)."""
        out: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "conversation_id": self.conversation_id,
            "messages": [message.to_dict() for message in self.messages],
        }
        if self.excluded:
            out["excluded"] = list(self.excluded)
        if self.summaries:
            out["summaries"] = [
                {"message": summary.message.to_dict(), "replaces": list(summary.replaces)}
                for summary in self.summaries
            ]
        return out

    def to_json(self) -> str:
        """The JSON export as indented text (ends with a newline)."""
        return msgspec.json.format(msgspec.json.encode(self.to_dict()), indent=2).decode() + "\n"


# -- export -----------------------------------------------------------------------------------------


async def export_conversation(store: MessageStore, conversation_id: str) -> ConversationExport:
    """Everything stored for a conversation, ready for :meth:`ConversationExport.to_json`.

    Raises:
        LookupError: No such conversation in ``store``.
    """
    view = await store.read(conversation_id)
    if not view.entries and view.last_seq == 0:
        raise LookupError(conversation_id)
    log = (await store.read(conversation_id, raw=True)).entries
    return ConversationExport(
        conversation_id,
        [entry.message for entry in log],
        [entry.message.message_id for entry in log if entry.excluded and entry.message.message_id],
        [Summary(entry.message, entry.replaces) for entry in view.entries if entry.is_summary],
    )


def content_lines(message: Message) -> list[str]:
    """A message's contents as plain lines of text, for transcripts (usage is left out)."""
    lines: list[str] = []
    for content in message.contents:
        if isinstance(content, TextContent):
            lines.append(content.text)
        elif isinstance(content, TextReasoningContent):
            lines.append(f"(reasoning) {content.text}")
        elif isinstance(content, FunctionCallContent):
            arguments = content.arguments
            shown = arguments if isinstance(arguments, str) else msgspec.json.encode(arguments or {}).decode()
            lines.append(f"-> call {content.name}({shown}) [{content.call_id}]")
        elif isinstance(content, FunctionResultContent):
            if content.exception is not None:
                lines.append(f"<- error [{content.call_id}]: {content.exception}")
            else:
                lines.append(f"<- result [{content.call_id}]: {msgspec.json.encode(content.result).decode()}")
        elif isinstance(content, DataContent):
            lines.append(f"[data {content.media_type or 'application/octet-stream'}]")
        elif isinstance(content, UriContent):
            lines.append(f"[{content.media_type or 'uri'} {content.uri}]")
        elif isinstance(content, ErrorContent):
            lines.append(f"[error] {content.message}")
        elif isinstance(content, UnknownContent):
            lines.append(f"[{content.kind}]")
        elif not isinstance(content, UsageContent):  # pragma: no cover - every kind is listed above
            lines.append(f"[{type(content).__name__}]")
    return lines


def render_markdown(conversation_id: str, entries: Sequence[StoredMessage]) -> str:
    """A readable Markdown transcript of view ``entries`` (ends with a newline)."""
    exported = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"# Session `{conversation_id}`", "", f"_{len(entries)} messages, exported {exported}_"]
    for entry in entries:
        message = entry.message
        title = message.role if message.author_name is None else f"{message.role} ({message.author_name})"
        if entry.is_summary:
            title = f"summary of {len(entry.replaces)} earlier messages ({message.role})"
        created = message.created_at
        when = f" · {created.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if created is not None else ""
        out += ["", f"### {title}{when}", ""]
        out.append("\n\n".join(content_lines(message)) or "_(empty)_")
    return "\n".join(out) + "\n"
