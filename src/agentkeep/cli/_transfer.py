"""Reading, exporting and importing stored conversations (the ``agentkeep sessions`` commands):
:mod:`agentkeep.transfer` with the command's errors, plus reading export files back.

:func:`parse_export` reads the JSON export (see :mod:`agentkeep.transfer`) and also accepts the
minimal shape ``{"conversation_id": ..., "messages": [...]}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import msgspec

from .. import transfer
from ..errors import MessageFormatError
from ..message_stores.base import HistoryView, MessageStore, StoredMessage, Summary
from ..messages import Message
from ..transfer import EXPORT_FORMAT, EXPORT_VERSION, ConversationExport, content_lines, render_markdown
from ._stores import CLIError, describe_store, missing_session

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ConversationExport",
    "content_lines",
    "conversation_exists",
    "decode_json",
    "export_conversation",
    "import_conversation",
    "parse_export",
    "read_conversation",
    "read_entries",
    "read_export_file",
    "read_input",
    "render_markdown",
]

# -- reading ----------------------------------------------------------------------------------------


async def read_conversation(store: MessageStore, conversation_id: str) -> HistoryView:
    """The compacted view of a stored conversation.

    Raises:
        CLIError: No such conversation in ``store``.
    """
    view = await store.read(conversation_id)
    if not view.entries and view.last_seq == 0:
        raise missing_session(store, conversation_id)
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
        raise missing_session(store, conversation_id)
    return entries


async def conversation_exists(store: MessageStore, conversation_id: str) -> bool:
    """Whether ``store`` holds anything under ``conversation_id``."""
    view = await store.read(conversation_id, last=1)
    return bool(view.entries) or view.last_seq > 0


# -- export -----------------------------------------------------------------------------------------


async def export_conversation(store: MessageStore, conversation_id: str) -> ConversationExport:
    """:func:`agentkeep.transfer.export_conversation`.

    Raises:
        CLIError: No such conversation in ``store``.
    """
    try:
        return await transfer.export_conversation(store, conversation_id)
    except LookupError as exc:
        raise missing_session(store, conversation_id) from exc


# -- import -----------------------------------------------------------------------------------------


def read_input(path: str | Path) -> tuple[bytes, str]:
    """The bytes of a file (``"-"``: standard input), and its name for messages.

    Raises:
        CLIError: The file cannot be read.
    """
    if str(path) == "-":
        import sys

        return sys.stdin.buffer.read(), "standard input"
    try:
        return Path(path).read_bytes(), str(path)
    except OSError as exc:
        raise CLIError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc


def decode_json(data: bytes | str, source: str) -> Any:
    """Parsed JSON.

    Raises:
        CLIError: Not JSON, or nested too deeply to read.
    """
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise CLIError(f"{source} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise CLIError(f"{source} is nested too deeply") from exc


def read_export_file(path: str | Path) -> ConversationExport:
    """Read and check a JSON export file (``"-"``: standard input).

    Raises:
        CLIError: The file cannot be read, or is not an agentkeep JSON export.
    """
    data, source = read_input(path)
    return parse_export(data, source=source)


def parse_export(data: bytes | str, *, source: str = "the export") -> ConversationExport:
    """Parse a JSON export (see the module docs).

    Raises:
        CLIError: Not JSON, not an object of the expected shape, a newer version, or a malformed
            message (the error names ``source`` and where in it the problem is).
    """
    document = decode_json(data, source)
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
