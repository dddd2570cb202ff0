"""Reading, exporting and importing stored conversations (the ``agentkeep sessions`` commands).

**The JSON export** is one versioned object, lossless and re-importable::

    {
      "format": "agentkeep.conversation", "version": 1,
      "conversation_id": "...",
      "messages": [<wire dicts: the raw log, oldest first, excluded messages included>],
      "excluded": ["<ids a compaction excluded>"],                  (only when there are some)
      "summaries": [{"message": <wire dict>, "replaces": ["<id>"]}]  (only when there are some)
    }

Messages keep their ids and creation times. :func:`parse_export` also accepts the minimal shape
``{"conversation_id": ..., "messages": [...]}``. Summaries that a later compaction replaced
again are not in the view, so they are not exported (what they summarized is).

**The Markdown export** is a readable transcript of the compacted view (what the model sees).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast

import msgspec

from ..contents import (
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
from ..errors import MessageFormatError
from ..messages import Message
from ..storage.base import HistoryView, MessageStore, StoredMessage, Summary
from ._stores import CLIError, describe_store

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ConversationExport",
    "content_lines",
    "conversation_exists",
    "export_conversation",
    "import_conversation",
    "parse_export",
    "read_conversation",
    "read_entries",
    "read_export_file",
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


# -- reading ----------------------------------------------------------------------------------------


async def read_conversation(store: MessageStore, conversation_id: str) -> HistoryView:
    """The compacted view of a stored conversation.

    Raises:
        CLIError: No such conversation in ``store``.
    """
    view = await store.read(conversation_id)
    if not view.entries and view.last_seq == 0:
        raise _missing(store, conversation_id)
    return view


async def read_entries(
    store: MessageStore, conversation_id: str, *, last: int | None = None, raw: bool = False
) -> list[StoredMessage]:
    """The view's entries (or with ``raw``, the raw log's), all or the ``last`` ones, oldest first.

    Raises:
        CLIError: No such conversation in ``store``.
    """
    entries = (await store.read(conversation_id, raw=raw, last=last)).entries
    if not entries and not await conversation_exists(store, conversation_id):
        raise _missing(store, conversation_id)
    return entries


async def conversation_exists(store: MessageStore, conversation_id: str) -> bool:
    """Whether ``store`` holds anything under ``conversation_id``."""
    view = await store.read(conversation_id, last=1)
    return bool(view.entries) or view.last_seq > 0


def _missing(store: MessageStore, conversation_id: str) -> CLIError:
    return CLIError(f"no session {conversation_id!r} in {describe_store(store)}")


# -- export -----------------------------------------------------------------------------------------


async def export_conversation(store: MessageStore, conversation_id: str) -> ConversationExport:
    """Everything stored for a conversation, ready for :meth:`ConversationExport.to_json`.

    Raises:
        CLIError: No such conversation in ``store``.
    """
    view = await read_conversation(store, conversation_id)
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


# -- import -----------------------------------------------------------------------------------------


def read_export_file(path: str | Path) -> ConversationExport:
    """Read and check a JSON export file (``"-"``: standard input).

    Raises:
        CLIError: The file cannot be read, or is not an agentkeep JSON export.
    """
    if str(path) == "-":
        import sys

        data = sys.stdin.buffer.read()
        source = "standard input"
    else:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise CLIError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
        source = str(path)
    return parse_export(data, source=source)


def parse_export(data: bytes | str, *, source: str = "the export") -> ConversationExport:
    """Parse a JSON export (see the module docs).

    Raises:
        CLIError: Not JSON, not an object of the expected shape, a newer version, or a malformed
            message (the error names ``source`` and where in it the problem is).
    """
    try:
        document = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise CLIError(f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise CLIError(f"{source} is not an agentkeep conversation export (expected a JSON object)")
    document = cast("dict[str, Any]", document)
    kind = document.get("format", EXPORT_FORMAT)
    if kind != EXPORT_FORMAT:
        raise CLIError(f"{source} has format {kind!r}, expected {EXPORT_FORMAT!r}")
    version = document.get("version", EXPORT_VERSION)
    if not isinstance(version, int) or version < 1 or version > EXPORT_VERSION:
        raise CLIError(
            f"{source} has export version {version!r}; this agentkeep reads up to {EXPORT_VERSION}"
        )
    conversation_id = document.get("conversation_id")
    if conversation_id is not None and (not isinstance(conversation_id, str) or not conversation_id):
        raise CLIError(f"{source}: 'conversation_id' must be a non-empty string")
    raw_messages = document.get("messages")
    if not isinstance(raw_messages, list):
        raise CLIError(f"{source} is not an agentkeep conversation export (no 'messages' list)")
    try:
        messages = [
            Message.from_dict(item, path=f"messages[{index}]")
            for index, item in enumerate(cast("list[Any]", raw_messages))
        ]
        excluded = _string_list(document.get("excluded", []), "excluded")
        summaries: list[Summary] = []
        for index, item in enumerate(_list(document.get("summaries", []), "summaries")):
            at = f"summaries[{index}]"
            if not isinstance(item, dict):
                raise MessageFormatError("a summary must be an object", path=at)
            item = cast("dict[str, Any]", item)
            message = Message.from_dict(item.get("message"), path=f"{at}.message")
            summaries.append(Summary(message, _string_list(item.get("replaces"), f"{at}.replaces")))
    except MessageFormatError as exc:
        raise CLIError(f"{source}: {exc}") from exc
    return ConversationExport(conversation_id, messages, excluded, summaries)


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise MessageFormatError("must be a list", path=path)
    return cast("list[Any]", value)


def _string_list(value: Any, path: str) -> list[str]:
    items = _list(value, path)
    if not all(isinstance(item, str) for item in items):
        raise MessageFormatError("must be a list of strings", path=path)
    return cast("list[str]", items)


async def import_conversation(
    store: MessageStore,
    export: ConversationExport,
    *,
    conversation_id: str | None = None,
    force: bool = False,
) -> str:
    """Store an exported conversation; returns the id it was stored under.

    The messages are appended in one atomic batch, then the compaction (excluded ids and
    summaries) is recorded again. Summaries that replace no imported message are dropped.

    Args:
        store: Where to import.
        export: What :func:`parse_export` read.
        conversation_id: Store it under this id (default: the id in the export).
        force: Replace an existing conversation of that id (it is deleted first).

    Raises:
        CLIError: No id given and none in the export, an empty export, or an existing
            conversation without ``force``.
    """
    target = conversation_id or export.conversation_id
    if not target:
        raise CLIError("the export names no conversation id: pass --session ID")
    if not export.messages:
        raise CLIError("the export holds no messages")
    if await conversation_exists(store, target):
        if not force:
            raise CLIError(
                f"session {target!r} already exists in {describe_store(store)}; "
                "import under another id (--session ID) or replace it (--force)"
            )
        await store.delete(target)
    await store.append(target, export.messages)
    known = {message.message_id for message in export.messages}
    summaries: list[Summary] = []
    for summary in export.summaries:
        replaces = [message_id for message_id in summary.replaces if message_id in known]
        if replaces:
            summaries.append(Summary(summary.message, replaces))
    excluded = [message_id for message_id in export.excluded if message_id in known]
    if excluded or summaries:
        await store.record_compaction(target, excluded=excluded, summaries=summaries)
    return target
