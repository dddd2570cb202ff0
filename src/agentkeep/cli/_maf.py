"""Agent Framework sessions and Redis history for the ``agentkeep sessions`` commands:
``import --format maf FILE``, ``import --from-redis URL``, ``export ID --format maf``
(:mod:`agentkeep.maf` with the commands' errors and messages)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..maf import MafSession, session_from_maf, session_to_maf
from ..message_stores.base import MessageStore
from ..sessions import AgentSession
from ..store_urls import redact_url
from ..transfer import ConversationExport
from ._stores import CLIError
from ._transfer import decode_json, import_conversation, read_conversation, read_input

__all__ = [
    "export_maf_session",
    "import_maf_session",
    "import_redis_history",
    "not_imported",
    "read_maf_file",
]


def read_maf_file(path: Path) -> MafSession:
    """Read an Agent Framework session file (``"-"``: standard input).

    Raises:
        CLIError: The file cannot be read or is not JSON.
        SessionFormatError: It is not a framework session (or of an unknown version).
    """
    data, source = read_input(path)
    return session_from_maf(decode_json(data, source))


def not_imported(imported: MafSession) -> list[str]:
    """What of a framework session the history commands do not keep (its other state)."""
    keys = imported.session.state.keys()
    left = [f"state {key!r}" for key in keys]
    if imported.session.service_session_id is not None or imported.session.extra_fields:
        left.append("the service session id")
    return left


async def import_maf_session(
    store: MessageStore, imported: MafSession, *, conversation_id: str | None, force: bool
) -> str:
    """Store a framework session's history as a session; returns its id.

    Raises:
        CLIError: An empty history, or an existing session without ``force``.
    """
    export = ConversationExport(imported.session.session_id, imported.messages)
    return await import_conversation(store, export, conversation_id=conversation_id, force=force)


async def export_maf_session(store: MessageStore, conversation_id: str) -> str:
    """A stored session (its compacted view) as an Agent Framework session file.

    Raises:
        CLIError: No such session.
    """
    view = await read_conversation(store, conversation_id)
    document = session_to_maf(AgentSession(session_id=conversation_id), [e.message for e in view.entries])
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


async def import_redis_history(
    url: str,
    store: MessageStore,
    *,
    key_prefix: str,
    filters: dict[str, str | None],
    progress: Callable[[Any], None] | None = None,
) -> tuple[int, int, int, int]:
    """Copy the framework's Redis history at ``url`` into ``store``.

    Returns:
        (conversations found, sessions with new messages, messages copied, already present).

    Raises:
        TransferError, StorageError: As :func:`agentkeep.maf.redis_history.import_maf_redis_history`.
        ImportError: redis-py is missing (the message names the extra).
    """
    from .._db.redis import RedisConnection
    from ..maf.redis_history import import_maf_redis_history

    try:
        connection = RedisConnection(redis_url=url)
    except ValueError as exc:
        raise CLIError(f"--from-redis {redact_url(url)!r}: {exc}") from exc
    try:
        report = await import_maf_redis_history(
            connection,
            store,
            key_prefix=key_prefix,
            tenant_id=filters.get("tenant_id"),
            application_id=filters.get("application_id"),
            agent_id=filters.get("agent_id"),
            source_id=filters.get("source_id"),
            progress=progress,
        )
    finally:
        await connection.aclose()
    return len(report.conversations), len(report.copied), report.messages_copied, report.already_present
