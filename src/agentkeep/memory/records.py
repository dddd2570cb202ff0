"""What long-term memory holds: a :class:`MemoryRecord` (a fact or a chunk of conversation, with
its embedding) in a :class:`MemoryScope` (tenant, user, agent), and a :class:`MemoryHit` (a record
a search found, with its score).

**Scopes are exact.** A record written in one scope is found only in that very scope: another
user, another tenant, or another agent (``None`` is a scope of its own: memories shared by all
agents are written with ``agent_id=None`` and read with it) never sees it. Stores key every
record by :attr:`MemoryScope.key`, so no query can reach across.

**Keys say what a memory is about.** A record with a ``key`` (``"home_city"``) is the current
value of that subject: adding another with the same key in the same scope supersedes it (the
older one stays in the key's history, see :meth:`~agentkeep.memory.MemoryStore.history`, and is
no longer listed or found). Records without a key stand alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from .._json_values import check_text, json_problem
from ..errors import ListingCursorError, MemoryFormatError
from ..message_stores.base import activity_key, listing_cursor, read_listing_cursor
from ..messages import new_message_id
from ..sessions import ISOLATION_SEPARATOR, check_isolation_key

__all__ = [
    "MAX_MEMORY_TEXT",
    "MemoryHit",
    "MemoryRecord",
    "MemoryScope",
    "MemoryScopeSummary",
    "check_embedding",
    "read_scope_cursor",
]

MAX_MEMORY_TEXT: Final = 16_384
"""The longest text (in characters) a memory may hold: memories are facts and chunks, not files."""

_SEPARATOR: Final = "\x1f"


def _check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or _SEPARATOR in value:
        raise MemoryFormatError(
            f"{what} must be a non-empty string without control separators, not {value!r}"
        )
    check_text(value, what)
    return value


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """Whose memories: a user, within a tenant (``None``: no tenant), of an agent (``None``:
    shared by the user's agents).

    Raises:
        MemoryFormatError: An empty or malformed id.
    """

    user_id: str
    tenant_id: str | None = None
    agent_id: str | None = None

    def __post_init__(self) -> None:
        _check_id(self.user_id, "user_id")
        if self.tenant_id is not None:
            # A tenant may be narrowed (``acme::team``), as a session's isolation key may: each
            # part must be a key of its own.
            _check_id(self.tenant_id, "tenant_id")
            try:
                for part in self.tenant_id.split(ISOLATION_SEPARATOR):
                    check_isolation_key(part)
            except ValueError as exc:
                raise MemoryFormatError(f"tenant_id {self.tenant_id!r}: {exc}") from exc
        if self.agent_id is not None:
            _check_id(self.agent_id, "agent_id")

    @property
    def key(self) -> str:
        """The scope as one string that no other scope shares (what stores partition by)."""
        return _SEPARATOR.join((self.tenant_id or "", self.user_id, self.agent_id or ""))

    @classmethod
    def from_key(cls, key: str) -> MemoryScope:
        """The scope whose :attr:`key` is ``key`` (as a store keeps it).

        Raises:
            MemoryFormatError: Not a scope's key.
        """
        parts = key.split(_SEPARATOR)
        if len(parts) != 3:
            raise MemoryFormatError(f"{key!r} is not a memory scope's key")
        tenant, user, agent = parts
        return cls(user, tenant_id=tenant or None, agent_id=agent or None)

    @classmethod
    def tenant_prefix(cls, tenant_id: str | None) -> str:
        """What the :attr:`key` of every scope of ``tenant_id`` (exactly that tenant) starts with.

        Raises:
            MemoryFormatError: A malformed tenant id (one that could reach into another's keys).
        """
        cls("-", tenant_id=tenant_id)  # checked as any scope's tenant is
        return (tenant_id or "") + _SEPARATOR

    @classmethod
    def tenant_key_range(cls, tenant_id: str | None) -> tuple[str, str]:
        """Bounds, both exclusive, of the :attr:`key` of every scope of ``tenant_id`` (exactly
        that tenant) in code point order (byte order of UTF-8): a range an index can read. The
        separator is the character right before the upper bound's last one, so no other tenant's
        key falls between them.

        Raises:
            MemoryFormatError: A malformed tenant id.
        """
        prefix = cls.tenant_prefix(tenant_id)
        return prefix, prefix[:-1] + chr(ord(_SEPARATOR) + 1)

    @property
    def user_key(self) -> str:
        """The tenant and user (every agent): what :meth:`~agentkeep.memory.MemoryStore.forget`
        removes."""
        return _SEPARATOR.join((self.tenant_id or "", self.user_id))

    def __str__(self) -> str:
        tenant = f"{self.tenant_id}{ISOLATION_SEPARATOR}" if self.tenant_id else ""
        agent = f" (agent {self.agent_id})" if self.agent_id else ""
        return f"{tenant}{self.user_id}{agent}"


def check_embedding(embedding: Any, dimensions: int | None = None) -> list[float]:
    """``embedding`` as a list of finite floats (of ``dimensions`` entries when given).

    Raises:
        MemoryFormatError: Not a non-empty sequence of finite numbers, or of another length.
    """
    if not isinstance(embedding, Sequence) or isinstance(embedding, str | bytes) or not embedding:
        raise MemoryFormatError("an embedding must be a non-empty sequence of numbers")
    try:
        values = list(map(float, embedding))  # pyright: ignore[reportUnknownArgumentType]
    except (TypeError, ValueError) as exc:
        raise MemoryFormatError(f"an embedding must hold numbers: {exc}") from exc
    if not all(map(math.isfinite, values)):
        raise MemoryFormatError("an embedding must hold finite numbers (no NaN or infinity)")
    if not any(values):
        raise MemoryFormatError("an embedding of only zeros has no direction to compare")
    if dimensions is not None and len(values) != dimensions:
        raise MemoryFormatError(f"the embedding has {len(values)} dimensions; this store holds {dimensions}")
    return values


@dataclass(slots=True)
class MemoryRecord:
    """One memory.

    Attributes:
        text: What is remembered (a fact, or a chunk of conversation).
        embedding: Its vector (what searches compare); the provider that writes the record sets it.
        key: What the memory is about; a newer record with the same key supersedes this one.
        kind: ``"fact"``, ``"chunk"``, ``"profile"``, ... (free text; searches may filter by it).
        source_session_id: The session it came from.
        metadata: Free-form JSON data.
        id: Time-ordered id (made if not given).
        created_at: When it was first written.
        updated_at: When it last changed.
        superseded_by: The id of the record that replaced it (``None`` while current).

    Raises:
        MemoryFormatError: Empty or oversize text, a bad embedding, metadata with no JSON form.
    """

    text: str
    embedding: list[float] | None = None
    key: str | None = None
    kind: str = "fact"
    source_session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    id: str = field(default_factory=new_message_id)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime | None = None
    superseded_by: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise MemoryFormatError("a memory needs non-empty text")
        if len(self.text) > MAX_MEMORY_TEXT:
            raise MemoryFormatError(
                f"a memory holds at most {MAX_MEMORY_TEXT} characters, not {len(self.text)}"
            )
        check_text(self.text, "text")
        if self.embedding is not None:
            self.embedding = check_embedding(self.embedding)
        if self.key is not None:
            _check_id(self.key, "key")
        _check_id(self.kind, "kind")
        if not isinstance(self.metadata, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise MemoryFormatError("metadata must be an object")
        problem = json_problem(self.metadata)
        if problem is not None:
            raise MemoryFormatError(f"metadata cannot be stored: {problem}")
        for name in ("created_at", "updated_at"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise MemoryFormatError(f"{name} must be a timezone-aware datetime")
        if self.updated_at is None:
            self.updated_at = self.created_at

    @property
    def current(self) -> bool:
        """Whether no newer record replaced it."""
        return self.superseded_by is None


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """A record a search found.

    Attributes:
        record: The memory.
        score: Its cosine similarity to the query's embedding (1 = same direction); in a
            lexical search, the full-text index's relevance (larger is better).
        lexical_score: The full-text index's relevance when the query's words found it
            (``None``: found by meaning only, or a vector search).
    """

    record: MemoryRecord
    score: float
    lexical_score: float | None = None


@dataclass(frozen=True, slots=True)
class MemoryScopeSummary:
    """A scope that holds memories: whose they are, how many are current (and unexpired), when
    one last changed (what :meth:`~agentkeep.memory.MemoryStore.scopes` lists)."""

    scope: MemoryScope
    memories: int
    updated_at: datetime

    @property
    def cursor(self) -> str:
        """Where a listing that ended at this scope goes on: pass it as ``scopes(after=...)``.
        Opaque; it holds the scope's newest change (in microseconds) and its key."""
        return listing_cursor(activity_key(self.updated_at), self.scope.key)


def read_scope_cursor(cursor: str) -> tuple[int, str]:
    """The position a :attr:`MemoryScopeSummary.cursor` names: the newest change in microseconds
    since the epoch and the scope's key.

    Raises:
        ListingCursorError: ``cursor`` is not one a listing of scopes issued.
    """
    micros, key = read_listing_cursor(cursor)
    try:
        MemoryScope.from_key(key)
    except MemoryFormatError as exc:
        raise ListingCursorError(f"not a cursor of a listing of memory scopes: {cursor[:80]!r}") from exc
    return micros, key
