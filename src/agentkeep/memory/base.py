"""The memory-store contract: :class:`MemoryStore`, what every backend of long-term memory does.

A store keeps :class:`~agentkeep.memory.MemoryRecord` objects by
:class:`~agentkeep.memory.MemoryScope`, with their embeddings, and answers nearest-neighbour
searches within one scope. Every method takes the scope: there is no call that reaches across
scopes, except :meth:`MemoryStore.forget`, which removes everything of one user of one tenant
(every agent), embeddings and history included.

Rules every backend keeps (the conformance suite in
:mod:`agentkeep.testing.conformance.memory_store` checks them):

* a record found, listed or read is one written in the same scope;
* adding a record whose ``key`` matches a current record of the scope supersedes that one in the
  same atomic step (``superseded_by`` set; it stays in :meth:`~MemoryStore.history`);
* searches and listings see current records only; scores are cosine similarities, best first;
  records read back may come without their embedding (a store need not return vectors);
* a search with a query ``text`` also ranks by words, with a full-text index the store keeps in
  the same transaction as the memory (``mode="hybrid"``: both rankings fused by score,
  each hit's score still its cosine similarity; ``mode="lexical"``: by words alone, scores the
  index's relevance); a memory leaves the index when it is superseded, deleted, forgotten or
  purged, and no other scope's memory ever matches;
* ``since`` / ``until`` keep the memories whose ``created_at`` (when it was said) is in
  ``[since, until)``;
* embeddings have the store's ``dimensions``; a record without one (a profile field, a memory
  block: read by key, not by meaning) is stored and listed but never found by a search;
* a record whose ``updated_at`` is older than the store's ``ttl`` is neither found nor listed,
  and :meth:`~MemoryStore.purge_expired` removes it;
* a stored row that does not read back as it was written (damaged fields, an embedding of the
  wrong length or with NaN, damaged meta rows) raises
  :class:`~agentkeep.errors.CorruptMemoryError` naming the store and the memory; it is never
  returned as data, and a search never returns a score that is not a finite number.
"""

from __future__ import annotations

import dataclasses
import math
from abc import abstractmethod
from bisect import bisect_right
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, cast

from ..errors import ConflictError, CorruptMemoryError, MemoryFormatError
from ._dates import named_periods
from ._lexical import SearchMode, SearchRequest, query_terms
from .records import MemoryHit, MemoryRecord, MemoryScope, MemoryScopeSummary, check_embedding

__all__ = [
    "DAMAGED_ROW_ERRORS",
    "MAX_K",
    "NO_CURRENT",
    "MemoryStore",
    "SearchMode",
    "check_following",
    "check_mode",
    "check_page",
    "check_query",
    "check_replaces",
    "check_settings",
    "checked_embedding",
    "checked_hits",
    "corrupt_row",
    "cosine",
    "cutoff_micros",
    "decoded_record",
    "expired_before",
    "from_micros",
    "meta_number",
    "normalized",
    "replace_conflict",
    "rewrite_keyed",
    "said_next",
    "scope_summary",
    "search_request",
    "stored_record",
    "to_micros",
    "update_vector",
    "updated_record",
    "window_micros",
]

DAMAGED_ROW_ERRORS: Final = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    OSError,
)
"""What building a record from a damaged row can raise (bad JSON, a time out of range, a value of
the wrong type); :func:`decoded_record` turns them into ``CorruptMemoryError``."""

MAX_K: Final = 1_000
"""The most memories one search returns."""

NO_CURRENT: Final = ""
"""``add(..., replaces=NO_CURRENT)``: store only if the key has no current record yet (the first
write of a read-modify-write; no id is empty, so this names none)."""


def meta_number(value: object, name: str, *, backend: str, store: str) -> int:
    """The whole number a store's meta row ``name`` holds (its text, as the stores write it).

    Raises:
        CorruptMemoryError: The row holds anything else.
    """
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10):
        raise CorruptMemoryError(
            f"it holds {value!r}, not a whole number", backend=backend, store=store, row=f"meta {name!r}"
        )
    return int(value)


def normalized(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays zero)."""
    length = math.hypot(*vector)
    return [v / length for v in vector] if length else list(vector)


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def to_micros(value: datetime) -> int:
    """``value`` as whole microseconds since the epoch (how the stores keep times), exactly:
    :func:`from_micros` gives ``value`` back, and a listing cursor holds the same number."""
    return (value - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """The UTC time ``micros`` (microseconds since the epoch) stands for."""
    return _EPOCH + timedelta(microseconds=micros)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors of one length (0 when either is zero)."""
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return dot / norms if norms else 0.0


class MemoryStore(Protocol):
    """Long-term memory by scope (see the module docs).

    A protocol: any class with these members is a memory store. A backend that subclasses it
    explicitly inherits the defaults of ``current``, ``following``, ``setup``, ``aclose``,
    ``backend`` and ``location``, and is refused when made without one of the core methods; the helpers the
    backends share are the module's functions (:func:`check_settings`, :func:`stored_record`,
    :func:`corrupt_row`, ...).

    Attributes:
        dimensions: The length of every embedding the store holds.
        ttl: Seconds after its last update at which a memory expires (``None``: never).
    """

    backend: str = "custom"
    """The store's name in errors."""

    location: str = ""
    """Where the store keeps its data (a path, or a database address and schema), for errors."""

    dimensions: int
    ttl: float | None

    # -- what a backend implements -------------------------------------------------------------
    @abstractmethod
    async def add(
        self, scope: MemoryScope, record: MemoryRecord, *, replaces: str | None = None
    ) -> MemoryRecord:
        """Store ``record`` (with its embedding, if it has one); a current record of the same
        ``key`` in the scope is superseded atomically. Returns the stored record.

        Args:
            scope: Whose memory it is.
            record: The memory.
            replaces: For a keyed record read-modified-written (a memory block's new text): the id
                of the current record it was made from, or :data:`NO_CURRENT` when the key had
                none. If the key's current record is another by now (a concurrent writer),
                nothing is stored and ``ConflictError`` says so.

        Raises:
            MemoryFormatError: An embedding of another length, or a reused id.
            ConflictError: ``replaces`` is not the key's current record.
            ValueError: ``replaces`` for a record without a key.
        """

    @abstractmethod
    async def get(self, scope: MemoryScope, memory_id: str) -> MemoryRecord | None:
        """The record with ``memory_id`` in ``scope`` (superseded ones too), or ``None``."""

    @abstractmethod
    async def update(
        self,
        scope: MemoryScope,
        memory_id: str,
        *,
        text: str | None = None,
        embedding: Sequence[float] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> MemoryRecord:
        """Change a current record in place (a new text needs its new embedding).

        Raises:
            LookupError: No current record ``memory_id`` in ``scope``.
            MemoryFormatError: A text without an embedding, or a bad value.
        """

    @abstractmethod
    async def delete(self, scope: MemoryScope, memory_id: str) -> bool:
        """Remove a record (and its embedding); ``False`` if there was none."""

    @abstractmethod
    async def list_memories(
        self, scope: MemoryScope, *, kind: str | None = None, limit: int | None = None
    ) -> list[MemoryRecord]:
        """The scope's current records, newest first (only of ``kind`` when given)."""

    @abstractmethod
    async def search(
        self,
        scope: MemoryScope,
        embedding: Sequence[float] | None,
        *,
        k: int = 5,
        kind: str | None = None,
        min_score: float | None = None,
        text: str | None = None,
        mode: SearchMode | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[MemoryHit]:
        """The ``k`` current records of ``scope`` that best match the query, best first.

        Args:
            scope: Whose memories.
            embedding: The query's embedding (``None`` only for ``mode="lexical"``).
            k: How many to return (1 to 1,000).
            kind: Only records of this kind.
            min_score: The least cosine similarity of a hit found by meaning (in hybrid mode a
                record that matches the query's words is kept whatever its similarity; not for
                ``mode="lexical"``).
            text: The query's text: its words are looked up in the store's full-text index.
            mode: ``"hybrid"`` (the default with ``text``), ``"vector"`` (the default without)
                or ``"lexical"``.
            since: Only records said (``created_at``) at or after this time.
            until: Only records said before this time.

        Raises:
            ValueError: A mode without what it needs, or a bad ``k``, ``min_score`` or window.
            MemoryFormatError: An embedding of another length.
        """

    @abstractmethod
    async def history(self, scope: MemoryScope, key: str) -> list[MemoryRecord]:
        """Every record that held ``key`` in ``scope``, oldest first (the last is current)."""

    async def current(self, scope: MemoryScope, key: str) -> MemoryRecord | None:
        """The current record of ``key`` in ``scope`` (expired ones too), or ``None``.

        The stores answer from their index on the current record of a key; this default reads
        the key's whole history.
        """
        return next((r for r in await self.history(scope, key) if r.current), None)

    async def following(
        self, scope: MemoryScope, records: Sequence[MemoryRecord], *, limit: int = 1
    ) -> list[list[MemoryRecord]]:
        """What was said next after each of ``records`` (the window after a search hit): for each,
        up to ``limit`` current, unexpired records of ``scope`` from its session
        (``source_session_id``) and of its kind, said after it, in the order they were said: by
        ``created_at``, then (messages imported with one time for a whole session) by
        ``updated_at``, when each was remembered, then by id. A record without a session is
        followed by nothing.

        The stores read an index of each scope's current memories by session and time; this
        default lists the scope's current records of those kinds.

        Raises:
            ValueError: ``limit`` outside 1..1,000.
        """
        check_following(limit)
        kinds = {record.kind for record in records if record.source_session_id is not None}
        listed = [found for kind in sorted(kinds) for found in await self.list_memories(scope, kind=kind)]
        return said_next(listed, records, limit)

    @abstractmethod
    async def scopes(
        self,
        *,
        tenant_id: str | None,
        q: str | None = None,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> list[MemoryScopeSummary]:
        """The scopes of one tenant (exactly ``tenant_id``; ``None``: the scopes without a tenant)
        that hold current, unexpired memories, the most recently updated first (then by key), with
        their counts of current, unexpired memories; ``q`` keeps the users whose id contains it.

        ``after`` is the :attr:`~MemoryScopeSummary.cursor` of the last scope of the previous
        page: the page goes on after it, and costs what it holds, however many scopes the tenant
        has (the shipped stores read a per-scope summary kept by every write, in the listing's
        order). ``offset`` skips that many scopes first (after ``after``, if given) and may cost
        what it skips: page with ``after``. A page with ``q`` reads the tenant's scopes in order
        until it has ``limit`` that match, so a ``q`` that few users match may read every one of
        the tenant's summaries (never their memories).

        Raises:
            ValueError: ``limit`` outside 1..1,000 or a negative ``offset``.
            ListingCursorError: ``after`` is not a cursor a listing of scopes issued.
            MemoryFormatError: A malformed ``tenant_id``.
        """

    @abstractmethod
    async def forget(self, *, user_id: str, tenant_id: str | None = None) -> int:
        """Remove every memory of a user in a tenant (all agents, history and embeddings);
        returns how many records were removed."""

    @abstractmethod
    async def purge_expired(self) -> int:
        """Remove the memories past the store's ``ttl``; returns how many."""

    async def setup(self) -> None:
        """Create what the store needs (tables, files); idempotent."""

    async def aclose(self) -> None:
        """Release connections; idempotent."""


def check_settings(*, dimensions: int, ttl: float | None) -> None:
    """Refuse a store's ``dimensions`` and ``ttl`` that no store can keep.

    Raises:
        ValueError: ``dimensions`` not positive, or ``ttl`` given and not positive.
    """
    if dimensions <= 0:
        raise ValueError("dimensions must be positive")
    if ttl is not None and ttl <= 0:
        raise ValueError("ttl must be positive (or None)")


def checked_embedding(store: MemoryStore, record: MemoryRecord) -> list[float] | None:
    """``record``'s embedding, checked against the store's dimensions and normalized
    (``None``: it has none).

    Raises:
        MemoryFormatError: One of another length.
    """
    if record.embedding is None:
        return None
    return normalized(check_embedding(record.embedding, store.dimensions))


def stored_record(record: MemoryRecord, embedding: list[float] | None) -> MemoryRecord:
    """What :meth:`MemoryStore.add` returns for ``record``: a copy, current, with its stored
    (normalized) embedding."""
    return dataclasses.replace(
        record, embedding=embedding, metadata=dict(record.metadata), superseded_by=None
    )


def corrupt_row(
    store: MemoryStore, reason: str, *, memory_id: str | None = None, row: str | None = None
) -> CorruptMemoryError:
    """The error for a damaged row of ``store`` (one memory's, or ``row`` naming another)."""
    return CorruptMemoryError(
        reason, backend=store.backend, store=store.location, memory_id=memory_id, row=row
    )


def decoded_record(store: MemoryStore, memory_id: object, build: Callable[[], MemoryRecord]) -> MemoryRecord:
    """``build()``: the record of a stored row; a row it cannot build raises
    :class:`~agentkeep.errors.CorruptMemoryError` naming ``memory_id``."""
    try:
        record = build()
        for name in ("id", "source_session_id", "superseded_by"):  # what MemoryRecord takes as given
            value = getattr(record, name)
            if not (type(value) is str or (value is None and name != "id")):
                raise TypeError(f"its {name} is {value!r}, not text")
    except DAMAGED_ROW_ERRORS as exc:
        raise corrupt_row(store, f"{type(exc).__name__}: {exc}", memory_id=str(memory_id)) from exc
    return record


def scope_summary(store: MemoryStore, key: object, count: object, newest: object) -> MemoryScopeSummary:
    """A row of :meth:`MemoryStore.scopes` (scope key, current memories, newest ``updated_at`` in
    µs); one it cannot read raises :class:`~agentkeep.errors.CorruptMemoryError` naming the scope."""
    try:
        return MemoryScopeSummary(
            MemoryScope.from_key(cast(str, key)), int(cast(int, count)), from_micros(cast(int, newest))
        )
    except DAMAGED_ROW_ERRORS as exc:
        raise corrupt_row(store, f"{type(exc).__name__}: {exc}", row=f"scope {key!r}") from exc


def checked_hits(store: MemoryStore, hits: list[MemoryHit]) -> list[MemoryHit]:
    """``hits``, refused if one has a score that is not a finite number (a damaged vector).

    Raises:
        CorruptMemoryError: Naming that memory.
    """
    for hit in hits:
        if not math.isfinite(hit.score):
            raise corrupt_row(store, f"its embedding scores {hit.score}", memory_id=hit.record.id)
    return hits


def expired_before(store: MemoryStore) -> datetime | None:
    """Records of ``store`` last updated before this time are expired (``None``: no ``ttl``)."""
    if store.ttl is None:
        return None
    return datetime.now(UTC) - timedelta(seconds=store.ttl)


def window_micros(request: SearchRequest) -> tuple[int | None, int | None]:
    """The search's ``since`` and ``until`` in microseconds (``None`` where not given), as the
    stores' filters and their search caches take them."""
    since, until = request.since, request.until
    return None if since is None else to_micros(since), None if until is None else to_micros(until)


def cutoff_micros(store: MemoryStore) -> int | None:
    """:func:`expired_before` in microseconds (``None``: no ``ttl``)."""
    cutoff = expired_before(store)
    return None if cutoff is None else to_micros(cutoff)


def update_vector(
    store: MemoryStore, text: str | None, embedding: Sequence[float] | None
) -> list[float] | None:
    """The normalized new embedding of an update (``None``: it keeps its own).

    Raises:
        MemoryFormatError: A new text without its new embedding, or a bad embedding.
    """
    if text is not None and embedding is None:
        raise MemoryFormatError("a new text needs its new embedding")
    return None if embedding is None else normalized(check_embedding(embedding, store.dimensions))


def updated_record(
    old: MemoryRecord, *, text: str | None, vector: list[float] | None, metadata: dict[str, Any] | None
) -> MemoryRecord:
    """``old`` with an update applied (checked as a new record would be), updated now."""
    return MemoryRecord(
        old.text if text is None else text,
        key=old.key,
        kind=old.kind,
        source_session_id=old.source_session_id,
        metadata=old.metadata if metadata is None else metadata,
        id=old.id,
        created_at=old.created_at,
        updated_at=datetime.now(UTC),
        embedding=vector,
    )


def check_replaces(record: MemoryRecord, replaces: str | None) -> None:
    """Refuse ``replaces`` for a record without a key (there is nothing to compare with).

    Raises:
        ValueError: ``replaces`` given for a record without a key.
    """
    if replaces is not None and record.key is None:
        raise ValueError("replaces= is for a record with a key")


def replace_conflict(
    store: MemoryStore, scope: MemoryScope, record: MemoryRecord, replaces: str, current: str | None
) -> ConflictError:
    """The error for an ``add(..., replaces=...)`` that found another current record."""
    found = "none" if current is None else repr(current)
    return ConflictError(
        f"memory {record.key!r} of {scope} changed: {replaces!r} was to be replaced, the current "
        f"one is {found}; read it again and retry",
        backend=store.backend,
        conversation_id=scope.key,
    )


def check_page(limit: int, offset: int) -> None:
    """Refuse a page of :meth:`MemoryStore.scopes` that asks for nothing sensible.

    Raises:
        ValueError: ``limit`` outside 1..1,000 or a negative ``offset``.
    """
    if not 1 <= limit <= MAX_K:
        raise ValueError(f"limit must be between 1 and {MAX_K}")
    if offset < 0:
        raise ValueError("offset must not be negative")


def check_query(k: int, min_score: float | None) -> None:
    """Refuse a search that asks for nothing sensible.

    Raises:
        ValueError: ``k`` outside 1..1,000, or ``min_score`` outside [-1, 1].
    """
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}")
    if min_score is not None and not -1.0 <= min_score <= 1.0:
        raise ValueError("min_score must be between -1 and 1")


def check_following(limit: int) -> None:
    """Refuse a window that asks for nothing sensible (see :meth:`MemoryStore.following`)."""
    if not 1 <= limit <= MAX_K:
        raise ValueError(f"limit must be between 1 and {MAX_K}")


def said_next(
    candidates: Sequence[MemoryRecord], records: Sequence[MemoryRecord], limit: int
) -> list[list[MemoryRecord]]:
    """:meth:`MemoryStore.following` over ``candidates`` (a scope's current, unexpired records)."""
    by_session: dict[tuple[str, str], list[MemoryRecord]] = {}
    for candidate in candidates:
        if candidate.source_session_id is not None:
            by_session.setdefault((candidate.source_session_id, candidate.kind), []).append(candidate)
    for said in by_session.values():
        said.sort(key=_said_order)
    found: list[list[MemoryRecord]] = []
    for record in records:
        session = record.source_session_id
        said = by_session.get((session, record.kind), []) if session is not None else []
        start = bisect_right(said, _said_order(record), key=_said_order)  # the first said after it
        found.append(said[start : start + limit])
    return found


def _said_order(record: MemoryRecord) -> tuple[datetime, datetime, str]:
    """Where a memory stands in the order things were said (see :meth:`MemoryStore.following`)."""
    return record.created_at, record.updated_at or record.created_at, record.id


def check_mode(mode: object) -> None:
    """Refuse ``mode`` unless it is a :data:`SearchMode`.

    Raises:
        ValueError: It is not ``"hybrid"``, ``"vector"`` or ``"lexical"``.
    """
    if mode not in ("hybrid", "vector", "lexical"):
        raise ValueError(f"mode must be 'hybrid', 'vector' or 'lexical', not {mode!r}")


def search_request(
    store: MemoryStore,
    embedding: Sequence[float] | None,
    *,
    k: int,
    min_score: float | None,
    text: str | None,
    mode: SearchMode | None,
    since: datetime | None,
    until: datetime | None,
) -> SearchRequest:
    """A search's arguments, checked (see :meth:`MemoryStore.search`): the query's normalized
    vector (when the mode ranks by meaning) and its words (when it ranks by words).

    Raises:
        ValueError: A mode without what it needs, or a bad ``k``, ``min_score`` or window.
        MemoryFormatError: An embedding of another length.
    """
    check_query(k, min_score)
    chosen: SearchMode = mode if mode is not None else ("vector" if text is None else "hybrid")
    check_mode(chosen)
    if chosen != "vector" and text is None:
        raise ValueError(f"a {chosen} search needs the query's text")
    if chosen != "lexical" and embedding is None:
        raise ValueError(f"a {chosen} search needs the query's embedding")
    if chosen == "lexical" and min_score is not None:
        raise ValueError("min_score is a cosine similarity: a lexical search has none")
    for name, value in (("since", since), ("until", until)):
        if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"{name} must be a timezone-aware datetime")
    vector = None
    if chosen != "lexical" and embedding is not None:
        vector = normalized(check_embedding(embedding, store.dimensions))
    terms = tuple(query_terms(text)) if chosen != "vector" and text is not None else ()
    periods = ()
    if chosen == "hybrid" and text is not None:  # "yesterday", "last spring": from today
        periods = named_periods(text, today=datetime.now(UTC).date())
    return SearchRequest(chosen, vector, terms, since, until, periods)


async def rewrite_keyed(
    store: MemoryStore,
    scope: MemoryScope,
    key: str,
    change: Callable[[MemoryRecord | None], MemoryRecord | None],
    *,
    attempts: int = 5,
) -> MemoryRecord | None:
    """Read-modify-write the current record of ``key`` without losing a concurrent write.

    ``change`` gets the key's current record (``None``: none, or expired) and returns the record
    to store in its place, or ``None`` to leave it. The write is a compare-and-set on what
    ``change`` saw; if another writer got there first, ``change`` runs again on the newer record.

    Returns:
        The stored record, or ``None`` if ``change`` left the key as it was.

    Raises:
        ConflictError: Other writers won ``attempts`` times in a row.
    """
    cutoff = expired_before(store)
    for _ in range(attempts):
        current = await store.current(scope, key)
        live = current
        if live is not None and cutoff is not None and (live.updated_at or live.created_at) < cutoff:
            live = None  # expired: gone for readers, so changed as if absent
        record = change(live)
        if record is None:
            return None
        try:
            return await store.add(scope, record, replaces=NO_CURRENT if current is None else current.id)
        except ConflictError:
            continue
    raise ConflictError(
        f"memory {key!r} of {scope} kept changing under {attempts} attempts to update it",
        backend=store.backend,
        conversation_id=scope.key,
    )
