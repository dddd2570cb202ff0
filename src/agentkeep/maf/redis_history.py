"""Copy chat history stored by ``agent-framework-redis``'s ``RedisHistoryProvider`` into any
agentkeep :class:`~agentkeep.message_stores.base.MessageStore`.

**The source layout** (agent-framework-redis 1.0.0b261022, the release of core 1.23): one Redis
list per conversation, one JSON message (the framework's ``Message.to_dict()``) per element,
oldest first, no expiry and no index keys. Keys are either *scoped*,
``{prefix}|v2|{tenant}|{application}|{agent}|{source_id}|{session_id}`` (each part literal when
it is plain lowercase ASCII, else ``~redis-<kind>-<base32>``, or a SHA-256 digest past 180
characters; an absent tenant or agent is ``~none``), or *legacy*, ``{prefix}:{session_id}``.

**Where a conversation goes**: under its session id, scoped to its tenant when it has one
(``{tenant}::{session_id}``, the storage key of a tenant's session in agentkeep), so tenants stay
apart. Two source conversations that would land on one id (the same session of two agents) are
refused before anything is written: choose one with ``application_id`` / ``agent_id`` /
``source_id``.

**Idempotent**: a message keeps its ``message_id``; one without gets an id derived from its key,
its stored text and the text before it, so a re-run recognizes what it copied before and appends
only what is new, in one atomic append per conversation. When the framework trimmed the list
(``max_messages``), the elements before the first one already copied are older ones whose
predecessor was trimmed away: they are not copied again. Every key is checked to be a list before
anything is written; a conversation whose element is not a framework message stops the import
with nothing of that conversation written (conversations before it stay copied; a re-run
continues). A conversation's new messages are held in memory until its append.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from .._db.redis import RedisConnection, glob_escape
from ..errors import MessageFormatError, TransferError
from ..message_stores.base import MessageStore
from ..messages import Message
from ..sessions import ISOLATION_SEPARATOR, check_isolation_key
from .sessions import message_from_maf

__all__ = [
    "MafRedisKey",
    "RedisImportProgress",
    "RedisImportReport",
    "find_maf_conversations",
    "import_maf_redis_history",
    "parse_maf_key",
]

_ABSENT: Final = "~none"
_DIGEST: Final = "sha256-"
_RESERVED_STEMS: Final = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{n}" for n in range(1, 10)), *(f"LPT{n}" for n in range(1, 10))}
)
_BATCH: Final = 500


@dataclass(frozen=True, slots=True)
class MafRedisKey:
    """One conversation's key in the framework's layout, read back into its parts.

    Attributes:
        key: The Redis key.
        layout: ``"scoped"`` or ``"legacy"``.
        session_id: The framework session id.
        tenant_id: The tenant (``None``: none, or a legacy key).
        application_id: The application (scoped keys only).
        agent_id: The agent (``None``: none, or a legacy key).
        source_id: The history provider's source id (scoped keys only).
    """

    key: str
    layout: Literal["scoped", "legacy"]
    session_id: str
    tenant_id: str | None = None
    application_id: str | None = None
    agent_id: str | None = None
    source_id: str | None = None

    @property
    def conversation_id(self) -> str:
        """Where the conversation goes in agentkeep: the session id, scoped to its tenant."""
        if self.tenant_id is None:
            return self.session_id
        return f"{self.tenant_id}{ISOLATION_SEPARATOR}{self.session_id}"


def _literal_safe(value: str) -> bool:
    if not value or value.startswith(".") or value.endswith((" ", ".")):
        return False
    if value.split(".", maxsplit=1)[0].upper() in _RESERVED_STEMS:
        return False
    return all(c.isascii() and ((c.isalnum() and not c.isupper()) or c in "._-") for c in value)


def key_segment(value: str, kind: str) -> str:
    """``value`` as the framework writes it in a key (``kind``: ``key-prefix``, ``tenant``, ...)."""
    if _literal_safe(value):
        return value
    encoded = f"~redis-{kind}-" + base64.b32encode(value.encode()).decode("ascii").rstrip("=").lower()
    if len(encoded) <= 180:
        return encoded
    return f"~redis-{kind}-{_DIGEST}{hashlib.sha256(value.encode()).hexdigest()}"


def _read_segment(segment: str, kind: str, key: str) -> str:
    marker = f"~redis-{kind}-"
    if not segment.startswith("~"):
        return segment
    if not segment.startswith(marker):
        raise TransferError(f"key {key!r}: the {kind} part {segment!r} is not in the framework's layout")
    body = segment[len(marker) :]
    if body.startswith(_DIGEST):
        raise TransferError(
            f"key {key!r}: the {kind} was longer than the framework writes out (only its SHA-256 "
            "digest is in the key), so it cannot be read back"
        )
    try:
        return base64.b32decode(body.upper() + "=" * (-len(body) % 8)).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise TransferError(f"key {key!r}: the {kind} part {segment!r} does not decode") from exc


def parse_maf_key(key: str, key_prefix: str) -> MafRedisKey | None:
    """Read a key of the framework's layout under ``key_prefix`` (``None``: not one of them).

    Raises:
        TransferError: A key of the layout whose parts cannot be read back.
    """
    scoped_head = key_segment(key_prefix, "key-prefix") + "|v2|"
    if key.startswith(scoped_head):
        parts = key[len(scoped_head) :].split("|")
        if len(parts) != 5:
            return None
        tenant, application, agent, source, session = parts

        def optional(part: str, kind: str) -> str | None:
            return None if part == _ABSENT else _read_segment(part, kind, key)

        return MafRedisKey(
            key,
            "scoped",
            _read_segment(session, "session", key),
            optional(tenant, "tenant"),
            _read_segment(application, "application", key),
            optional(agent, "agent"),
            _read_segment(source, "source", key),
        )
    if key.startswith(f"{key_prefix}:"):
        return MafRedisKey(key, "legacy", key[len(key_prefix) + 1 :])
    return None


async def find_maf_conversations(
    connection: RedisConnection,
    key_prefix: str,
    *,
    tenant_id: str | None = None,
    application_id: str | None = None,
    agent_id: str | None = None,
    source_id: str | None = None,
) -> list[MafRedisKey]:
    """The framework conversations under ``key_prefix`` (``SCAN``, both layouts), sorted by key,
    optionally only those of one tenant, application, agent or history source.

    Raises:
        TransferError: A key whose parts cannot be read back, a tenant or session id agentkeep
            cannot keep apart from others (one with ``::``, ending in ``:``, or empty), or a key
            that is not the list the framework writes.
    """
    patterns = [
        glob_escape(key_segment(key_prefix, "key-prefix") + "|v2|") + "*",
        glob_escape(f"{key_prefix}:") + "*",
    ]
    found: dict[str, MafRedisKey] = {}
    for pattern in patterns:
        async for batch in connection.scan(pattern):
            for raw in batch:
                try:
                    key = raw.decode()
                except UnicodeDecodeError:
                    continue  # the framework writes text keys: not one of its conversations
                parsed = parse_maf_key(key, key_prefix)
                if parsed is not None and _wanted(parsed, tenant_id, application_id, agent_id, source_id):
                    _check_ids(parsed)
                    found[key] = parsed
    conversations = [found[key] for key in sorted(found)]
    for key in conversations:  # before anything is written
        kind = await connection.execute("TYPE", key.key)
        if kind not in (b"list", "list", b"none", "none"):  # "none": deleted since the scan
            raise TransferError(f"key {key.key!r} is a Redis {kind!r}, not the list the framework writes")
    return conversations


def _check_ids(key: MafRedisKey) -> None:
    """The key's tenant and session id make an agentkeep conversation id no other tenant reads."""
    if key.tenant_id is not None:
        try:
            check_isolation_key(key.tenant_id)
        except ValueError as exc:
            raise TransferError(f"key {key.key!r}: tenant {key.tenant_id!r}: {exc}") from exc
    session = key.session_id
    if not session or ISOLATION_SEPARATOR in session or session.endswith(":"):
        raise TransferError(
            f"key {key.key!r}: session id {session!r} cannot be kept apart from other tenants' "
            f"sessions (it is empty, holds {ISOLATION_SEPARATOR!r} or ends in ':')"
        )


def _wanted(
    key: MafRedisKey,
    tenant_id: str | None,
    application_id: str | None,
    agent_id: str | None,
    source_id: str | None,
) -> bool:
    return (
        (tenant_id is None or key.tenant_id == tenant_id)
        and (application_id is None or key.application_id == application_id)
        and (agent_id is None or key.agent_id == agent_id)
        and (source_id is None or key.source_id == source_id)
    )


@dataclass(frozen=True, slots=True)
class RedisImportProgress:
    """How far an import got: conversations done of all, messages copied so far."""

    conversations_done: int
    conversations: int
    messages_copied: int
    current: str | None = None


@dataclass(slots=True)
class RedisImportReport:
    """What an import did.

    Attributes:
        conversations: The conversations found.
        copied: Messages copied, per conversation id (only those with new messages).
        already_present: Messages skipped because an earlier run copied them.
    """

    conversations: list[MafRedisKey] = field(default_factory=list[MafRedisKey])
    copied: dict[str, int] = field(default_factory=dict[str, int])
    already_present: int = 0

    @property
    def messages_copied(self) -> int:
        """Messages copied in all."""
        return sum(self.copied.values())


async def import_maf_redis_history(
    source: RedisConnection | str,
    store: MessageStore,
    *,
    key_prefix: str = "chat_messages",
    tenant_id: str | None = None,
    application_id: str | None = None,
    agent_id: str | None = None,
    source_id: str | None = None,
    progress: Callable[[RedisImportProgress], None] | None = None,
) -> RedisImportReport:
    """Copy the framework's Redis conversations under ``key_prefix`` into ``store`` (module docs).

    Args:
        source: The Redis server holding the framework's history: a connection, or a URL (the
            connection is then opened and closed here).
        store: Where to copy (set up already).
        key_prefix: The provider's ``key_prefix`` (the framework's default ``"chat_messages"``).
        tenant_id: Only this tenant's conversations.
        application_id: Only this application's.
        agent_id: Only this agent's.
        source_id: Only this history provider's.
        progress: Called before the first and after each conversation.

    Raises:
        TransferError: Two conversations for one id, a key or a stored element that cannot be
            read (nothing of that conversation is written), or a key that is not a list.
        StorageError: Either side failed.
    """
    if isinstance(source, str):
        connection = RedisConnection(redis_url=source)
        try:
            return await import_maf_redis_history(
                connection,
                store,
                key_prefix=key_prefix,
                tenant_id=tenant_id,
                application_id=application_id,
                agent_id=agent_id,
                source_id=source_id,
                progress=progress,
            )
        finally:
            await connection.aclose()
    connection = source
    keys = await find_maf_conversations(
        connection,
        key_prefix,
        tenant_id=tenant_id,
        application_id=application_id,
        agent_id=agent_id,
        source_id=source_id,
    )
    owners: dict[str, MafRedisKey] = {}
    for key in keys:
        other = owners.setdefault(key.conversation_id, key)
        if other is not key:
            raise TransferError(
                f"keys {other.key!r} and {key.key!r} both hold conversation {key.conversation_id!r} "
                "(the same session of two agents or sources); import one at a time with an "
                "application, agent or source filter"
            )
    report = RedisImportReport(conversations=keys)
    if progress is not None:
        progress(RedisImportProgress(0, len(keys), 0))
    for done, key in enumerate(keys, start=1):
        copied, present = await _import_one(connection, store, key)
        if copied:
            report.copied[key.conversation_id] = copied
        report.already_present += present
        if progress is not None:
            progress(RedisImportProgress(done, len(keys), report.messages_copied, key.conversation_id))
    return report


async def _import_one(connection: RedisConnection, store: MessageStore, key: MafRedisKey) -> tuple[int, int]:
    """Append what ``store`` lacks of one conversation; returns (copied, already present)."""
    stored = {
        entry.message.message_id
        for entry in (await store.read(key.conversation_id, raw=True)).entries
        if entry.message.message_id
    }
    new: list[Message] = []
    present = 0
    seen: set[str] = set()
    previous = b""
    index = 0
    known_before = False
    async for text in _elements(connection, key.key):
        message = _decode(text, key, index)
        message.message_id = _unique(message.message_id or _derived_id(key.key, previous, text), seen)
        previous = text
        index += 1
        if message.message_id not in stored:
            new.append(message)
            continue
        present += 1
        if not known_before:
            # The first element already stored: those before it are older (the framework appends
            # at the end and trims at the front), so they were copied before; their derived ids
            # changed only because what preceded them was trimmed away.
            known_before = True
            present += len(new)
            new.clear()
    if new:
        await store.append(key.conversation_id, new)
    return len(new), present


async def _elements(connection: RedisConnection, key: str) -> AsyncIterator[bytes]:
    start = 0
    while True:
        batch = cast("list[bytes]", await connection.execute("LRANGE", key, start, start + _BATCH - 1))
        for item in batch:
            yield item
        if len(batch) < _BATCH:
            return
        start += _BATCH


def _decode(text: bytes, key: MafRedisKey, index: int) -> Message:
    where = f"key {key.key!r} element {index}"
    try:
        data: Any = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TransferError(f"{where} is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise TransferError(f"{where} is nested too deeply") from exc
    try:
        return message_from_maf(data, path=f"element {index}")
    except MessageFormatError as exc:
        raise TransferError(f"{where}: {exc}") from exc


def _derived_id(key: str, previous: bytes, text: bytes) -> str:
    """An id for a message stored without one, from its key, its stored text and the text before
    it: the same on every run (a repeated message after another one gets another id)."""
    digest = hashlib.sha256(key.encode() + b"\n" + previous + b"\n" + text).hexdigest()
    return "maf-" + digest[:28]


def _unique(message_id: str, seen: set[str]) -> str:
    """``message_id``, numbered when the list already had it (the same pair of messages twice, or
    an id the framework was given twice)."""
    candidate, n = message_id, 1
    while candidate in seen:
        n += 1
        candidate = f"{message_id}-{n}"
    seen.add(candidate)
    return candidate
