"""Memories in a Python dict: :class:`InMemoryMemoryStore`, for tests and single-process use.

Searches compare the query with every current record of the scope (exact, O(records * dimensions)
per search); the SQLite store is the one for many memories. Each scope's current records with an
embedding are also in a small BM25 index of its own (:class:`~._lexical.BM25`), changed by every
write, for searches by words. Each tenant's scopes are also kept in
a list sorted in the order :meth:`~InMemoryMemoryStore.scopes` lists them (newest change first,
then by key), updated by every write of the scope, so a page of scopes is a slice of it.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import heapq
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .._files import check_memory_url
from ..errors import MemoryFormatError
from ._lexical import BM25, SearchMode, indexed_text, names_in, ranked, said_in
from .base import (
    NO_CURRENT,
    MemoryStore,
    check_following,
    check_page,
    check_replaces,
    check_settings,
    checked_embedding,
    cosine,
    cutoff_micros,
    expired_before,
    from_micros,
    replace_conflict,
    said_next,
    search_request,
    to_micros,
    update_vector,
    updated_record,
)
from .records import (
    MemoryHit,
    MemoryRecord,
    MemoryScope,
    MemoryScopeSummary,
    read_scope_cursor,
)

__all__ = ["InMemoryMemoryStore"]


def _updated(record: MemoryRecord) -> int:
    return to_micros(record.updated_at or record.created_at)


def _tenant(scope_key: str) -> str:
    """The tenant part of a scope's key (``""``: no tenant)."""
    return scope_key.partition("\x1f")[0]


def _copy(record: MemoryRecord, **changes: Any) -> MemoryRecord:
    """A copy that shares nothing mutable with ``record`` (callers may change what they hold)."""
    return dataclasses.replace(record, **{"metadata": copy.deepcopy(record.metadata), **changes})


class InMemoryMemoryStore(MemoryStore):
    """Memories in this process (see the module docs).

    Args:
        dimensions: The length of every embedding.
        ttl: Seconds after its last update at which a memory expires.
    """

    backend = "memory"

    def __init__(self, *, dimensions: int, ttl: float | None = None) -> None:
        check_settings(dimensions=dimensions, ttl=ttl)
        self.dimensions = dimensions
        self.ttl = ttl
        self._scopes: dict[str, dict[str, MemoryRecord]] = {}
        self._users: dict[str, set[str]] = {}
        # a scope with current records: (-newest update in µs, key), its entry in the sorted
        # listing of its tenant, and its count of current records
        self._listed: dict[str, tuple[tuple[int, str], int]] = {}
        self._listings: dict[str, list[tuple[int, str]]] = {}
        self._words: dict[str, BM25] = {}

    @classmethod
    def from_url(
        cls, url: str = "memory://", *, dimensions: int, ttl: float | None = None
    ) -> InMemoryMemoryStore:
        """A new empty store for ``memory://`` (the one URL of process memory).

        Raises:
            StoreURLError: Any other URL.
        """
        check_memory_url(url)
        return cls(dimensions=dimensions, ttl=ttl)

    def _records(self, scope: MemoryScope) -> dict[str, MemoryRecord]:
        return self._scopes.get(scope.key, {})

    def _summarize(self, scope_key: str) -> None:
        """Bring the scope's listing entry up to date with its records (after any write of it)."""
        listing = self._listings.setdefault(_tenant(scope_key), [])
        old = self._listed.pop(scope_key, None)
        if old is not None:
            del listing[bisect.bisect_left(listing, old[0])]
        current = [r for r in self._scopes.get(scope_key, {}).values() if r.current]
        if current:
            entry = (-max(map(_updated, current)), scope_key)
            bisect.insort(listing, entry)
            self._listed[scope_key] = (entry, len(current))

    def _index(self, scope_key: str, record: MemoryRecord) -> None:
        """Keep ``record`` in its scope's word index while it is current and has an embedding."""
        words = self._words.setdefault(scope_key, BM25())
        if record.current and record.embedding is not None:
            words.put(record.id, indexed_text(record.text, record.metadata))
        else:
            words.remove(record.id)

    def _live(self, record: MemoryRecord) -> bool:
        cutoff = expired_before(self)
        return record.current and (cutoff is None or (record.updated_at or record.created_at) >= cutoff)

    async def add(
        self, scope: MemoryScope, record: MemoryRecord, *, replaces: str | None = None
    ) -> MemoryRecord:
        check_replaces(record, replaces)
        embedding = checked_embedding(self, record)
        stored = _copy(record, embedding=embedding, superseded_by=None)
        records = self._scopes.setdefault(scope.key, {})
        if stored.id in records:
            raise MemoryFormatError(f"memory {stored.id!r} already exists in {scope}")
        if stored.key is not None:
            current = [other for other in records.values() if other.key == stored.key and other.current]
            if replaces is not None and [r.id for r in current] != (
                [] if replaces == NO_CURRENT else [replaces]
            ):
                raise replace_conflict(self, scope, stored, replaces, current[0].id if current else None)
            for other in current:
                other.superseded_by = stored.id
                self._index(scope.key, other)
        records[stored.id] = stored
        self._index(scope.key, stored)
        self._users.setdefault(scope.user_key, set()).add(scope.key)
        self._summarize(scope.key)
        return _copy(stored)

    async def get(self, scope: MemoryScope, memory_id: str) -> MemoryRecord | None:
        record = self._records(scope).get(memory_id)
        return None if record is None else _copy(record)

    async def update(
        self,
        scope: MemoryScope,
        memory_id: str,
        *,
        text: str | None = None,
        embedding: Sequence[float] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> MemoryRecord:
        record = self._records(scope).get(memory_id)
        if record is None or not record.current:
            raise LookupError(f"no current memory {memory_id!r} in {scope}")
        vector = update_vector(self, text, embedding)
        changed = _copy(
            updated_record(record, text=text, vector=vector or record.embedding, metadata=metadata)
        )
        self._scopes[scope.key][memory_id] = changed
        self._index(scope.key, changed)
        self._summarize(scope.key)
        return _copy(changed)

    async def delete(self, scope: MemoryScope, memory_id: str) -> bool:
        if self._records(scope).pop(memory_id, None) is None:
            return False
        self._words[scope.key].remove(memory_id)
        self._summarize(scope.key)
        return True

    async def list_memories(
        self, scope: MemoryScope, *, kind: str | None = None, limit: int | None = None
    ) -> list[MemoryRecord]:
        found = [
            _copy(r)
            for r in self._records(scope).values()
            if self._live(r) and (kind is None or r.kind == kind)
        ]
        found.sort(key=lambda r: (r.updated_at or r.created_at, r.id), reverse=True)
        return found if limit is None else found[:limit]

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
        request = search_request(
            self, embedding, k=k, min_score=min_score, text=text, mode=mode, since=since, until=until
        )
        found = {
            r.id: r
            for r in self._records(scope).values()
            if r.embedding is not None
            and self._live(r)
            and (kind is None or r.kind == kind)
            and (since is None or r.created_at >= since)
            and (until is None or r.created_at < until)
        }
        pool = request.pool(k)
        lexical: dict[str, float] = {}
        if request.terms and scope.key in self._words:
            lexical = self._words[scope.key].scores(request.terms, found)
        by_words = heapq.nsmallest(pool, lexical, key=lambda i: (-lexical[i], i))
        if request.vector is None:  # by words alone: the index's relevance is the score
            return [MemoryHit(_copy(found[i]), lexical[i], lexical[i]) for i in by_words[:k]]
        query = request.vector
        scores = {i: cosine(query, r.embedding) for i, r in found.items() if r.embedding is not None}
        by_meaning = heapq.nsmallest(
            pool,
            (i for i, score in scores.items() if min_score is None or score >= min_score),
            key=lambda i: (-scores[i], i),
        )
        candidates = {*by_meaning, *by_words} if request.mode == "hybrid" else set[str]()
        speakers = candidates if by_words else ()  # nothing found by words: none preferred (as the others)
        named = [i for i in speakers if names_in(request.terms, found[i].metadata.get("speaker"))]
        periods = request.periods
        dated = [i for i in candidates if said_in(periods, to_micros(found[i].created_at))] if periods else []
        best, _ = ranked(
            [(i, scores[i]) for i in by_meaning],
            [(i, lexical[i]) for i in by_words],
            mode=request.mode,
            k=k,
            min_score=None,  # applied above
            similarity=scores,
            named=named,
            dated=dated,
        )
        return [MemoryHit(_copy(found[i]), scores[i], lexical.get(i)) for i in best]  # only hits copied

    async def current(self, scope: MemoryScope, key: str) -> MemoryRecord | None:
        found = next((r for r in self._records(scope).values() if r.key == key and r.current), None)
        return None if found is None else _copy(found)

    async def history(self, scope: MemoryScope, key: str) -> list[MemoryRecord]:
        found = [_copy(r) for r in self._records(scope).values() if r.key == key]
        found.sort(key=lambda r: (r.created_at, r.id))
        return found

    async def following(
        self, scope: MemoryScope, records: Sequence[MemoryRecord], *, limit: int = 1
    ) -> list[list[MemoryRecord]]:
        check_following(limit)
        live = [r for r in self._records(scope).values() if self._live(r)]
        return [[_copy(r) for r in said] for said in said_next(live, records, limit)]

    async def scopes(
        self,
        *,
        tenant_id: str | None,
        q: str | None = None,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> list[MemoryScopeSummary]:
        """See :meth:`MemoryStore.scopes`: a slice of the tenant's sorted listing, from the
        cursor's place (found by bisection). A scope's newest change is that of its newest
        current record, which is unexpired if any of its records is: the listing stops at the
        first scope whose newest change has expired, and the count of a listed scope leaves out
        its expired records (counted over the scope's records)."""
        check_page(limit, offset)
        prefix = MemoryScope.tenant_prefix(tenant_id)
        listing = self._listings.get(prefix[:-1], [])
        start = 0
        if after is not None:
            micros, key = read_scope_cursor(after)
            start = bisect.bisect_right(listing, (-micros, key))
        floor = cutoff_micros(self)
        found: list[MemoryScopeSummary] = []
        skipped = 0
        for place in range(start, len(listing)):  # no copy of the listing's tail
            rank, key = listing[place]
            if floor is not None and -rank < floor:
                break  # this scope and every later one hold expired records only
            if q and q not in key[len(prefix) :].partition("\x1f")[0]:  # the user id only
                continue
            if skipped < offset:
                skipped += 1
                continue
            scope = MemoryScope.from_key(key)
            records = self._scopes[key].values()
            live = sum(1 for r in records if r.current and (floor is None or _updated(r) >= floor))
            found.append(MemoryScopeSummary(scope, live, from_micros(-rank)))
            if len(found) == limit:
                break
        return found

    async def forget(self, *, user_id: str, tenant_id: str | None = None) -> int:
        user_key = MemoryScope(user_id, tenant_id).user_key
        removed = 0
        for scope_key in self._users.pop(user_key, set()):
            removed += len(self._scopes.pop(scope_key, {}))
            self._words.pop(scope_key, None)
            self._summarize(scope_key)
        return removed

    async def purge_expired(self) -> int:
        cutoff = expired_before(self)
        if cutoff is None:
            return 0
        removed = 0
        for scope_key, records in self._scopes.items():
            expired = [i for i, r in records.items() if (r.updated_at or r.created_at) < cutoff]
            for memory_id in expired:
                del records[memory_id]
                self._words[scope_key].remove(memory_id)
            if expired:
                removed += len(expired)
                self._summarize(scope_key)
        return removed
