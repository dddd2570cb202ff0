"""Memories in a SQLite file with vector search by ``sqlite-vec``: :class:`SQLiteMemoryStore`.

The records live in a plain table; their embeddings in a ``vec0`` virtual table partitioned by
scope, so a search reads only the scope's vectors (exact k-nearest by cosine distance). A record
superseded by a newer one of its key keeps its row (its history) but loses its vector, so it can
no longer be found.

sqlite-vec as packaged is built without SIMD, so an exact scan of a large scope is slow (39 to 104 ms,
by the day, for 100,000 vectors). A scope of ``cache_min_vectors`` or more is searched from an
in-process matrix of its vectors (:mod:`._vector_cache`), exactly as well, and kept coherent with
the file (written by any process) through a per-scope change log that every write keeps: a
search reads only what changed since the last one. The file's layout (created, or upgraded in
place), its connection and the logged writes are in :mod:`._sqlite_file`.

Python's ``sqlite3`` module cannot load extensions on every build (this machine's cannot), so the
store talks to SQLite through ``apsw``, which bundles its own SQLite and loads ``sqlite-vec``'s
extension itself: whether memory works never depends on how Python was built. Needs the extra
``[memory]`` (``apsw``, ``sqlite-vec``, ``numpy``); importing this module without them raises an
``ImportError`` that names it. The file may be the one that holds history.

apsw calls block, so every call runs on the store's own worker thread (one connection, one
thread: writes are serialized; SQLite's own locking keeps other processes out of a write), and so
does the cache's numpy work (helped by threads of its own for the largest matrices).
"""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TypeVar

try:
    # the extra's check (the database layer below imports apsw and sqlite_vec again)
    import apsw  # noqa: F401  # pyright: ignore[reportUnusedImport]
    import numpy as np
    import sqlite_vec  # noqa: F401  # pyright: ignore[reportMissingTypeStubs, reportUnusedImport]
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the SQLite memory store needs apsw, sqlite-vec and numpy: pip install 'agentkeep[memory]'"
    ) from exc

from .._db.jobs import JobWorker
from .._db.sqlite import default_database_path
from .._db.sqlite_vec import VecConnection, mapped_error, open_vec_connection
from .._files import path_from_url
from ..errors import (
    CorruptMemoryError,
    MemoryFormatError,
    StorageClosedError,
)
from ._lexical import SearchMode, SearchRequest, fts5_query, indexed_text, names_in, ranked, said_in
from ._sqlite_file import (
    account,
    create_or_upgrade,
    delete_vector,
    forget_user,
    has_vector,
    log_change,
    purge_before,
    put_vector,
    put_words,
    vector_bytes,
)
from ._vector_cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_MIN_VECTORS,
    DamagedVector,
    ScopeVectors,
    VectorCache,
    behind,
)
from .base import (
    NO_CURRENT,
    MemoryStore,
    check_following,
    check_page,
    check_replaces,
    check_settings,
    checked_embedding,
    checked_hits,
    corrupt_row,
    cutoff_micros,
    decoded_record,
    from_micros,
    replace_conflict,
    scope_summary,
    search_request,
    stored_record,
    to_micros,
    update_vector,
    updated_record,
    window_micros,
)
from .records import (
    MemoryHit,
    MemoryRecord,
    MemoryScope,
    MemoryScopeSummary,
    read_scope_cursor,
)

__all__ = ["SQLiteMemoryStore"]


@dataclass(frozen=True, slots=True)
class _Filters:
    """What a search keeps of a scope's memories: current ones of the scope, of ``kind``,
    unexpired (updated at ``cutoff`` or later) and said in ``[since, until)`` (µs), when given."""

    scope: str
    kind: str | None
    cutoff: int | None
    since: int | None
    until: int | None

    def where(self, *, lead: str = "WHERE", checked: bool = False) -> tuple[str, list[Any]]:
        """The conditions on ``agentkeep_memories AS m``, and their arguments. ``checked``: only
        checked on the rows the word index finds ("+": no index of the memories' is walked
        instead, which would run the full-text query once per memory); otherwise the scope's
        memories are read by their index (by the time they were said, in a window)."""
        plus = "+" if checked else ""
        parts = [f"{plus}m.scope = ?", "m.superseded_by IS NULL"]
        args: list[Any] = [self.scope]
        for condition, value in (
            (f"{plus}m.kind = ?", self.kind),
            (f"{plus}m.updated_at >= ?", self.cutoff),
            (f"{plus}m.created_at >= ?", self.since),
            (f"{plus}m.created_at < ?", self.until),
        ):
            if value is not None:
                parts.append(condition)
                args.append(value)
        return f"{lead} " + " AND ".join(parts), args

    def kept(self, vectors: ScopeVectors, ranked: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
        """Those of ``ranked`` (row id, score) that ``vectors``, the scope's, hold and these
        filters keep."""
        return vectors.held(ranked, kind=self.kind, cutoff=self.cutoff, since=self.since, until=self.until)

    def count(self, vectors: ScopeVectors) -> int:
        """How many of ``vectors``, the scope's, these filters keep."""
        return vectors.count(kind=self.kind, cutoff=self.cutoff, since=self.since, until=self.until)


T = TypeVar("T")
# A search by words in a cached scope takes the word index's best few matches (and keeps those the
# cache tells it keeps) when the file holds at most this many rows per row the search keeps; with
# more, it scores every match: see SQLiteMemoryStore._by_words.
_SPREAD_RANKED_ALONE: Final = 4
_COLUMNS: Final = (
    "rowid, id, key, kind, text, source_session_id, metadata, created_at, updated_at, superseded_by"
)


class SQLiteMemoryStore(MemoryStore):
    """Memories in the SQLite file at ``path`` (see the module docs).

    Args:
        path: The database file (created with its folder if missing).
        dimensions: The length of every embedding (fixed for the file once written).
        ttl: Seconds after its last update at which a memory expires.
        timeout: Seconds to wait for another process's write lock.
        search_cache_bytes: Memory for the vectors of large scopes, held as matrices (float32
            and int8) so their searches are scans in memory (see :mod:`._vector_cache`); least recently
            searched scopes go first. ``0``: no cache, every search by sqlite-vec.
        cache_min_vectors: Scopes with fewer vectors are searched by sqlite-vec (as fast, and
            not worth the memory).
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dimensions: int,
        ttl: float | None = None,
        timeout: float = 5.0,
        search_cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache_min_vectors: int = DEFAULT_MIN_VECTORS,
    ) -> None:
        check_settings(dimensions=dimensions, ttl=ttl)
        self.dimensions = dimensions
        self.ttl = ttl
        if cache_min_vectors < 0:
            raise ValueError("cache_min_vectors must not be negative")
        self.path = Path(path)
        self.location = str(self.path)
        self.timeout = timeout
        self._cache = VectorCache(search_cache_bytes)
        self._cache_min_vectors = cache_min_vectors
        self._worker = JobWorker(thread_name="agentkeep-memory")
        self._connection: VecConnection | None = None
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        dimensions: int,
        ttl: float | None = None,
        timeout: float = 5.0,
        search_cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache_min_vectors: int = DEFAULT_MIN_VECTORS,
    ) -> SQLiteMemoryStore:
        """A store in the file ``url`` names (``sqlite:///abs/path.db``; ``sqlite://``: the
        default file, shared with message history).

        Raises:
            StoreURLError: Not a ``sqlite://`` URL, or one with a query.
        """
        path = path_from_url(url, scheme="sqlite") or default_database_path()
        return cls(
            path,
            dimensions=dimensions,
            ttl=ttl,
            timeout=timeout,
            search_cache_bytes=search_cache_bytes,
            cache_min_vectors=cache_min_vectors,
        )

    # -- plumbing ----------------------------------------------------------------------------------
    async def _run(self, job: Callable[[VecConnection], T], *, closing: bool = False) -> T:
        if self._closed and not closing:
            raise StorageClosedError("the sqlite memory store is closed", backend=self.backend)
        return await self._worker.run(lambda: self._call(job, closing))

    def _call(self, job: Callable[[VecConnection], T], closing: bool) -> T:
        if self._closed and not closing:
            raise StorageClosedError("the sqlite memory store is closed", backend=self.backend)
        try:
            if self._connection is None:
                self._connection = self._open()
            return job(self._connection)
        except Exception as exc:
            mapped = mapped_error(exc, self.path)
            if mapped is exc:
                raise
            raise mapped from exc

    def _open(self) -> VecConnection:
        connection = open_vec_connection(self.path, timeout=self.timeout)
        try:
            create_or_upgrade(connection, self.path, self.dimensions)
        except BaseException:
            connection.close()
            raise
        return connection

    def _record(self, row: Sequence[Any], embedding: list[float] | None = None) -> MemoryRecord:
        _, memory_id, key, kind, text, source, metadata, created, updated, superseded = row
        return decoded_record(
            self,
            memory_id,
            lambda: MemoryRecord(
                text,
                embedding=embedding,
                key=key,
                kind=kind,
                source_session_id=source,
                metadata=json.loads(metadata),
                id=memory_id,
                created_at=from_micros(created),
                updated_at=from_micros(updated),
                superseded_by=superseded,
            ),
        )

    # -- the contract --------------------------------------------------------------------------------
    async def setup(self) -> None:
        await self._run(lambda db: None)

    async def add(
        self, scope: MemoryScope, record: MemoryRecord, *, replaces: str | None = None
    ) -> MemoryRecord:
        check_replaces(record, replaces)
        embedding = checked_embedding(self, record)
        metadata = json.dumps(record.metadata)

        def job(db: VecConnection) -> MemoryRecord:
            with db.write():
                if db.one(
                    "SELECT 1 FROM agentkeep_memories WHERE scope = ? AND id = ?", (scope.key, record.id)
                ):
                    raise MemoryFormatError(f"memory {record.id!r} already exists")
                superseded = 0
                if record.key is not None:
                    current = db.rows(
                        "SELECT rowid, id FROM agentkeep_memories "
                        "WHERE scope = ? AND key = ? AND superseded_by IS NULL",
                        (scope.key, record.key),
                    )
                    expected = [] if replaces == NO_CURRENT else [replaces]
                    if replaces is not None and [row[1] for row in current] != expected:
                        raise replace_conflict(
                            self, scope, record, replaces, current[0][1] if current else None
                        )
                    for rowid, _ in current:
                        db.run(
                            "UPDATE agentkeep_memories SET superseded_by = ? WHERE rowid = ?",
                            (record.id, rowid),
                        )
                        delete_vector(db, scope.key, rowid)
                    superseded = len(current)
                updated = to_micros(record.updated_at or record.created_at)
                db.run(
                    "INSERT INTO agentkeep_memories (id, scope, user_key, key, kind, text, "
                    "source_session_id, metadata, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.id,
                        scope.key,
                        scope.user_key,
                        record.key,
                        record.kind,
                        record.text,
                        record.source_session_id,
                        metadata,
                        to_micros(record.created_at),
                        updated,
                    ),
                )
                rowid = db.last_rowid
                if embedding is not None:
                    words = indexed_text(record.text, record.metadata)
                    put_vector(db, rowid, scope, record.kind, updated, embedding, words)
                account(db, scope.key, 1 - superseded)
            return stored_record(record, embedding)

        return await self._run(job)

    async def get(self, scope: MemoryScope, memory_id: str) -> MemoryRecord | None:
        def job(db: VecConnection) -> MemoryRecord | None:
            row = db.one(
                f"SELECT {_COLUMNS} FROM agentkeep_memories WHERE scope = ? AND id = ?",
                (scope.key, memory_id),
            )
            return None if row is None else self._record(row)

        return await self._run(job)

    async def update(
        self,
        scope: MemoryScope,
        memory_id: str,
        *,
        text: str | None = None,
        embedding: Sequence[float] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> MemoryRecord:
        vector = update_vector(self, text, embedding)

        def job(db: VecConnection) -> MemoryRecord:
            with db.write():
                row = db.one(
                    f"SELECT {_COLUMNS} FROM agentkeep_memories "
                    "WHERE scope = ? AND id = ? AND superseded_by IS NULL",
                    (scope.key, memory_id),
                )
                if row is None:
                    raise LookupError(f"no current memory {memory_id!r} in {scope}")
                old = self._record(row)
                changed = updated_record(old, text=text, vector=vector, metadata=metadata)
                updated = to_micros(changed.updated_at or changed.created_at)
                db.run(
                    "UPDATE agentkeep_memories SET text = ?, metadata = ?, updated_at = ? WHERE rowid = ?",
                    (changed.text, json.dumps(changed.metadata), updated, row[0]),
                )
                words = indexed_text(changed.text, changed.metadata)
                if vector is not None:
                    put_vector(db, row[0], scope, changed.kind, updated, vector, words)
                elif has_vector(db, row[0]):  # its time moved: the expiry filter reads it
                    db.run(
                        "UPDATE agentkeep_memory_vectors SET updated_at = ? WHERE memory_rowid = ?",
                        (updated, row[0]),
                    )
                    if metadata is not None:  # the words of its speaker or context may have changed
                        put_words(db, row[0], words)
                    log_change(db, scope.key, row[0], 0)
                account(db, scope.key, 0)  # its newest may have moved
            return changed

        return await self._run(job)

    async def delete(self, scope: MemoryScope, memory_id: str) -> bool:
        def job(db: VecConnection) -> bool:
            with db.write():
                row = db.one(
                    "SELECT rowid, superseded_by IS NULL FROM agentkeep_memories WHERE scope = ? AND id = ?",
                    (scope.key, memory_id),
                )
                if row is None:
                    return False
                delete_vector(db, scope.key, row[0])
                db.run("DELETE FROM agentkeep_memories WHERE rowid = ?", (row[0],))
                if row[1]:
                    account(db, scope.key, -1)
                return True

        return await self._run(job)

    async def list_memories(
        self, scope: MemoryScope, *, kind: str | None = None, limit: int | None = None
    ) -> list[MemoryRecord]:
        cutoff = cutoff_micros(self)

        def job(db: VecConnection) -> list[MemoryRecord]:
            sql = f"SELECT {_COLUMNS} FROM agentkeep_memories WHERE scope = ? AND superseded_by IS NULL"
            args: list[Any] = [scope.key]
            if kind is not None:
                sql += " AND kind = ?"
                args.append(kind)
            if cutoff is not None:
                sql += " AND updated_at >= ?"
                args.append(cutoff)
            sql += " ORDER BY updated_at DESC, id DESC"
            if limit is not None:
                sql += " LIMIT ?"
                args.append(limit)
            return [self._record(row) for row in db.rows(sql, args)]

        return await self._run(job)

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
        query = None if request.vector is None else vector_bytes(request.vector)
        filters = _Filters(scope.key, kind, cutoff_micros(self), *window_micros(request))

        def job(db: VecConnection) -> list[MemoryHit]:
            # One read transaction, so one snapshot: the scope's vectors (cached and caught up,
            # or read by sqlite-vec), its words, and the records of the best, each checked to be
            # of this scope and current.
            pool = request.pool(k)
            with db.read():
                # by words alone, a scope's vectors are not read for it, but used if held
                held = query is not None or scope.key in self._cache
                vectors = self._vectors(db, scope.key) if held else None
                lexical = self._by_words(db, request.terms, pool, filters, vectors) if request.terms else []
                if query is None:  # by words alone: the index's relevance is the score
                    found = self._records_of(db, scope.key, lexical[:k])
                    return [MemoryHit(self._record(row), score, score) for row, score in found]
                nearest = self._by_meaning(db, query, pool, filters, vectors)
                similarity: dict[int, float] = {}
                named: list[int] = []
                dated: list[int] = []
                if request.mode == "hybrid" and lexical:
                    near = {r for r, _ in nearest}
                    missing = [r for r, _ in lexical if r not in near]  # found by words only
                    similarity = self._cosines(db, vectors, query, missing) if missing else {}
                    named, dated = self._marked(db, request, [*near, *(r for r, _ in lexical)])
                elif request.mode == "hybrid" and request.periods:
                    _, dated = self._marked(db, request, [r for r, _ in nearest])
                order, scores = ranked(
                    nearest,
                    lexical,
                    mode=request.mode,
                    k=k,
                    min_score=min_score,
                    similarity=similarity,
                    named=named,
                    dated=dated,
                )
                found = self._records_of(db, scope.key, [(r, scores[r]) for r in order if r in scores])
            words = dict(lexical)
            return checked_hits(
                self, [MemoryHit(self._record(row), score, words.get(row[0])) for row, score in found]
            )

        return await self._run(job)

    def _vectors(self, db: VecConnection, scope: str) -> ScopeVectors | None:
        """The scope's cached vectors as of this transaction (:meth:`_cached`), a damaged one
        named by its memory."""
        try:
            return self._cached(db, scope)
        except DamagedVector as exc:
            raise self._damaged_vector(db, exc) from exc

    def _by_meaning(
        self,
        db: VecConnection,
        query: bytes,
        n: int,
        filters: _Filters,
        vectors: ScopeVectors | None,
    ) -> list[tuple[int, float]]:
        """The ``n`` nearest of the scope's vectors (row id, cosine similarity), best first;
        ``vectors``: the scope's, cached (:meth:`_vectors`), or none: read by sqlite-vec."""
        if vectors is not None:
            try:
                return vectors.nearest(
                    np.frombuffer(query, dtype=np.float32),
                    n,
                    kind=filters.kind,
                    cutoff=filters.cutoff,
                    since=filters.since,
                    until=filters.until,
                    helpers=self._cache.helpers,
                )
            except DamagedVector as exc:
                raise self._damaged_vector(db, exc) from exc
        if filters.since is None and filters.until is None:
            return self._nearest_by_vec0(db, filters.scope, query, n, filters.kind, filters.cutoff)
        # A window: the scope's memories said in it (their index), each vector scored by row id.
        where, args = filters.where()
        rows = db.rows(
            "SELECT m.rowid, m.id, vec_distance_cosine(v.embedding, ?) AS distance "
            f"FROM agentkeep_memories AS m JOIN agentkeep_memory_vectors AS v ON v.memory_rowid = m.rowid "
            f"{where} ORDER BY distance, m.rowid LIMIT ?",
            [query, *args, n],
        )
        return [(rowid, self._similarity(memory_id, distance)) for rowid, memory_id, distance in rows]

    def _similarity(self, memory_id: str, distance: float | None) -> float:
        if distance is None:  # NaN (SQLite has no NaN: NULL), or a vector with no direction
            raise corrupt_row(
                self, "its embedding scores no number (NaN, or a zero vector)", memory_id=memory_id
            )
        return 1.0 - float(distance)

    def _cosines(
        self, db: VecConnection, vectors: ScopeVectors | None, query: bytes, rowids: list[int]
    ) -> dict[int, float]:
        """The cosine similarity of each of ``rowids``' vectors to ``query``: from ``vectors``, the
        scope's cached matrix caught up in this transaction, or read in one query by row id."""
        if vectors is not None:
            return vectors.similarities(np.frombuffer(query, dtype=np.float32), rowids)
        marks = ", ".join("?" * len(rowids))
        rows = db.rows(
            "SELECT v.memory_rowid, m.id, vec_distance_cosine(v.embedding, ?) "
            "FROM agentkeep_memory_vectors AS v "
            f"JOIN agentkeep_memories AS m ON m.rowid = v.memory_rowid WHERE v.memory_rowid IN ({marks})",
            [query, *rowids],
        )
        return {rowid: self._similarity(memory_id, distance) for rowid, memory_id, distance in rows}

    def _marked(
        self, db: VecConnection, request: SearchRequest, rowids: list[int]
    ) -> tuple[list[int], list[int]]:
        """Those of ``rowids`` said by someone the query's terms name (their metadata's
        speaker), and those said in a period it names (their ``created_at``)."""
        marks = ", ".join("?" * len(rowids))
        rows = db.rows(
            "SELECT rowid, json_extract(metadata, '$.speaker'), created_at FROM agentkeep_memories "
            f"WHERE rowid IN ({marks})",
            rowids,
        )
        terms, periods = request.terms, request.periods
        named = [rowid for rowid, speaker, _ in rows if names_in(terms, speaker)]
        dated = [rowid for rowid, _, said_at in rows if said_in(periods, said_at)] if periods else []
        return named, dated

    def _by_words(
        self,
        db: VecConnection,
        terms: Sequence[str],
        n: int,
        filters: _Filters,
        vectors: ScopeVectors | None,
    ) -> list[tuple[int, float]]:
        """The ``n`` memories of the scope whose words best match ``terms`` (row id, BM25 as
        FTS5 computes it, negated: larger is better), best first. ``vectors``: the scope's,
        cached and current, which can tell the memories the search keeps from the rest."""
        if vectors is not None:
            # The cache tells the memories the search keeps, so the word index's matches need
            # no look-up of their memory rows (1.6 of 2.5 ms at 100,000 memories). A search that
            # keeps a large share of the file ranks them all and keeps the best n of the first
            # few; other rows crowding those out (fewer than n kept while more matched), or a
            # small share: every match is scored and those kept ranked here.
            share = filters.count(vectors)  # without filters, the held count: no pass over them
            if share == 0:
                return []
            (last,) = db.one("SELECT coalesce(max(rowid), 0) FROM agentkeep_memories") or (0,)
            spread = -(-int(last) // share)  # file rows per row kept, at least
            if spread <= _SPREAD_RANKED_ALONE:
                limit = 2 * n * spread
                ranked = self._word_matches(db, terms, limit)
                kept = filters.kept(vectors, ranked)
                if len(kept) >= n or len(ranked) < limit:
                    return kept[:n]
            kept = filters.kept(vectors, self._word_matches(db, terms, None))
            return heapq.nsmallest(n, kept, key=lambda pair: (-pair[1], pair[0]))
        where, args = filters.where(lead="AND", checked=True)
        return [
            (rowid, float(score))
            for rowid, score in db.rows(
                "SELECT m.rowid, -bm25(agentkeep_memory_words) AS score FROM agentkeep_memory_words "
                "JOIN agentkeep_memories AS m ON m.rowid = agentkeep_memory_words.rowid "
                f"WHERE agentkeep_memory_words MATCH ? {where} ORDER BY score DESC, m.rowid LIMIT ?",
                [fts5_query(terms), *args, n],
            )
        ]

    @staticmethod
    def _word_matches(db: VecConnection, terms: Sequence[str], limit: int | None) -> list[tuple[int, float]]:
        """The word index's matches of ``terms`` in the whole file (row id, negated BM25): the
        ``limit`` best, best first, or all of them, in no order."""
        sql = (
            "SELECT rowid, -bm25(agentkeep_memory_words) AS score FROM agentkeep_memory_words "
            "WHERE agentkeep_memory_words MATCH ?"
        )
        if limit is None:
            return [(rowid, float(score)) for rowid, score in db.rows(sql, [fts5_query(terms)])]
        ranked = db.rows(f"{sql} ORDER BY score DESC, rowid LIMIT ?", [fts5_query(terms), limit])
        return [(rowid, float(score)) for rowid, score in ranked]

    def _damaged_vector(self, db: VecConnection, exc: DamagedVector) -> CorruptMemoryError:
        """The error for a damaged vector met by a search, naming its memory."""
        found = db.one("SELECT id FROM agentkeep_memories WHERE rowid = ?", (exc.rowid,))
        if found is not None:
            return corrupt_row(self, str(exc), memory_id=str(found[0]))
        return corrupt_row(self, str(exc), row=f"vector row {exc.rowid}")

    def _nearest_by_vec0(
        self, db: VecConnection, scope: str, query: bytes, k: int, kind: str | None, cutoff: int | None
    ) -> list[tuple[int, float]]:
        nearest = (
            "SELECT memory_rowid, distance FROM agentkeep_memory_vectors "
            "WHERE embedding MATCH ? AND k = ? AND scope = ?"
        )
        args: list[Any] = [query, k, scope]
        if kind is not None:
            nearest += " AND kind = ?"
            args.append(kind)
        if cutoff is not None:
            nearest += " AND updated_at >= ?"
            args.append(cutoff)
        columns = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))
        rows = db.rows(
            f"SELECT {columns}, v.distance FROM ({nearest}) AS v "
            "JOIN agentkeep_memories AS m ON m.rowid = v.memory_rowid "
            "WHERE m.scope = ? AND m.superseded_by IS NULL ORDER BY v.distance",
            [*args, scope],
        )
        return [(row[0], self._similarity(row[1], row[-1])) for row in rows]

    def _records_of(
        self, db: VecConnection, scope: str, nearest: list[tuple[int, float]]
    ) -> list[tuple[tuple[Any, ...], float]]:
        if not nearest:
            return []
        marks = ", ".join("?" * len(nearest))
        # "+scope": checked on the k rows read by rowid, not used as the index to read by (the
        # planner's choice otherwise: a walk of the whole scope, 4.5 ms at 34,000 memories)
        rows = db.rows(
            f"SELECT {_COLUMNS} FROM agentkeep_memories "
            f"WHERE rowid IN ({marks}) AND +scope = ? AND superseded_by IS NULL",
            [*(rowid for rowid, _ in nearest), scope],
        )
        by_rowid = {row[0]: row for row in rows}
        return [(by_rowid[rowid], score) for rowid, score in nearest if rowid in by_rowid]

    def _cached(self, db: VecConnection, scope: str) -> ScopeVectors | None:
        """The scope's vectors from the cache, brought up to the snapshot's change counter
        (built if the scope is large enough and missing), or ``None``: search with sqlite-vec."""
        if self._cache.max_bytes == 0:
            return None
        row = db.one("SELECT id, seq, vectors FROM agentkeep_memory_scopes WHERE scope = ?", (scope,))
        vectors = self._cache.get(scope)
        if row is None or (vectors is not None and vectors.scope_id != row[0]):
            self._cache.drop(scope)  # forgotten (and maybe written again since)
            vectors = None
            if row is None:
                return None
        scope_id, seq, count = row
        try:
            if vectors is None:
                if count < self._cache_min_vectors or not self._cache.fits(count, self.dimensions):
                    return None
                vectors = self._load(db, scope, scope_id, seq)
            elif vectors.seq != seq:
                changes = db.rows(
                    "SELECT seq, memory_rowid FROM agentkeep_memory_changes "
                    "WHERE scope_id = ? AND seq > ? ORDER BY seq",
                    (scope_id, vectors.seq),
                )
                if behind(vectors, seq, (logged for logged, _ in changes)):
                    vectors = self._load(db, scope, scope_id, seq)
                else:
                    self._catch_up(db, scope, vectors, {rowid for _, rowid in changes})
                    vectors.seq = seq
        except BaseException:
            self._cache.drop(scope)  # half caught up: never use it again
            raise
        self._cache.keep(scope, vectors)
        return vectors

    def _load(self, db: VecConnection, scope: str, scope_id: int, seq: int) -> ScopeVectors:
        # vec0 answers "WHERE scope = ?" by scanning every scope's vectors (measured: a scope of
        # 1,000 in a table of 20,000 cost as much as all 20,000), so the scope's current records
        # come from their own index and each vector is read by its row id: the cost follows the
        # scope's size, not the file's (about 8 µs a vector). kind and updated_at are the ones
        # every write sets on the record and its vector alike.
        rows: list[tuple[int, str, int, int, bytes]] = []
        for rowid, kind, updated, said in db.rows(
            "SELECT rowid, kind, updated_at, created_at FROM agentkeep_memories "
            "WHERE scope = ? AND superseded_by IS NULL",
            (scope,),
        ):
            found = db.one("SELECT embedding FROM agentkeep_memory_vectors WHERE memory_rowid = ?", (rowid,))
            if found is not None:  # records without an embedding (a profile field, a block)
                rows.append((rowid, kind, updated, said, found[0]))
        return ScopeVectors.loaded(scope_id=scope_id, seq=seq, dimensions=self.dimensions, rows=rows)

    @staticmethod
    def _catch_up(db: VecConnection, scope: str, vectors: ScopeVectors, rowids: set[int]) -> None:
        # The log names what changed, not how: each row id's vector is read as it is now (a
        # removed one is gone), so entries apply in any order and more than once alike.
        for rowid in rowids:
            row = db.one(
                "SELECT v.scope, v.kind, v.updated_at, m.created_at, v.embedding "
                "FROM agentkeep_memory_vectors AS v JOIN agentkeep_memories AS m ON m.rowid = v.memory_rowid "
                "WHERE v.memory_rowid = ?",
                (rowid,),
            )
            if row is None or row[0] != scope:
                vectors.remove(rowid)
            else:
                vectors.put(rowid, row[1], row[2], row[3], row[4])

    async def current(self, scope: MemoryScope, key: str) -> MemoryRecord | None:
        def job(db: VecConnection) -> MemoryRecord | None:
            row = db.one(
                f"SELECT {_COLUMNS} FROM agentkeep_memories "
                "WHERE scope = ? AND key = ? AND superseded_by IS NULL",
                (scope.key, key),
            )
            return None if row is None else self._record(row)

        return await self._run(job)

    async def history(self, scope: MemoryScope, key: str) -> list[MemoryRecord]:
        def job(db: VecConnection) -> list[MemoryRecord]:
            rows = db.rows(
                f"SELECT {_COLUMNS} FROM agentkeep_memories WHERE scope = ? AND key = ? "
                "ORDER BY created_at, id",
                (scope.key, key),
            )
            return [self._record(row) for row in rows]

        return await self._run(job)

    async def following(
        self, scope: MemoryScope, records: Sequence[MemoryRecord], *, limit: int = 1
    ) -> list[list[MemoryRecord]]:
        """See :meth:`MemoryStore.following`: one range of the index of current memories by
        scope, session and the order they were said per record."""
        check_following(limit)
        cutoff = cutoff_micros(self)
        sql = (
            f"SELECT {_COLUMNS} FROM agentkeep_memories INDEXED BY agentkeep_memories_session "
            "WHERE scope = ? AND source_session_id = ? AND created_at >= ? AND superseded_by IS NULL "
            "AND (created_at > ? OR updated_at > ? OR (updated_at = ? AND id > ?)) "
            "AND kind = ? AND (? IS NULL OR updated_at >= ?) ORDER BY created_at, updated_at, id LIMIT ?"
        )

        def job(db: VecConnection) -> list[list[MemoryRecord]]:
            found: list[list[MemoryRecord]] = []
            for record in records:
                if record.source_session_id is None:
                    found.append([])
                    continue
                said = to_micros(record.created_at)
                updated = to_micros(record.updated_at or record.created_at)
                args = (scope.key, record.source_session_id, said, said, updated, updated, record.id)
                rows = db.rows(sql, (*args, record.kind, cutoff, cutoff, limit))
                found.append([self._record(row) for row in rows])
            return found

        return await self._run(job)

    async def scopes(
        self,
        *,
        tenant_id: str | None,
        q: str | None = None,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> list[MemoryScopeSummary]:
        """See :meth:`MemoryStore.scopes`. A page is a range of the index on the per-scope
        summary ``(tenant, newest DESC, scope)``, read from the cursor's place: the scopes of the
        cursor's time after its key, then the older ones (two ranges, each in index order).

        Expiry is exact without a write: a scope's newest ``updated_at`` is that of its newest
        current memory, unexpired if any of its memories is, so the range stops at the ``ttl``'s
        cut-off; each listed scope's count leaves out its expired current memories, counted in
        the index of current memories by (scope, updated_at): one step per scope when purges run,
        one per expired memory otherwise."""
        check_page(limit, offset)
        low, _ = MemoryScope.tenant_key_range(tenant_id)
        tenant = low[:-1]
        position = None if after is None else read_scope_cursor(after)
        cutoff = cutoff_micros(self)
        floor = -(2**63) if cutoff is None else cutoff
        wanted = limit + offset
        # q: the user part of the key (between the tenant's separator and the agent's)
        match = ""
        args: list[Any] = []
        if q:
            match = " AND instr(substr(substr(scope, ?), 1, instr(substr(scope, ?), char(31)) - 1), ?) > 0"
            args = [len(low) + 1, len(low) + 1, q]
        columns = "SELECT scope, memories, newest FROM agentkeep_memory_scopes WHERE tenant = ?"

        def job(db: VecConnection) -> list[MemoryScopeSummary]:
            rows: list[tuple[Any, ...]] = []
            with db.read():
                newer = None
                if position is not None:
                    newer, key = position
                    if newer >= floor:
                        rows = db.rows(
                            f"{columns} AND newest = ? AND scope > ?{match} ORDER BY scope LIMIT ?",
                            [tenant, newer, key, *args, wanted],
                        )
                if len(rows) < wanted:
                    rows += db.rows(
                        f"{columns} AND newest >= ?"
                        + ("" if newer is None else " AND newest < ?")
                        + f"{match} ORDER BY newest DESC, scope LIMIT ?",
                        [tenant, floor, *([] if newer is None else [newer]), *args, wanted - len(rows)],
                    )
                rows = rows[offset:]
                expired: dict[str, int] = {}
                if cutoff is not None:
                    for scope_key, *_ in rows:
                        (count,) = db.one(
                            "SELECT count(*) FROM agentkeep_memories "
                            "WHERE scope = ? AND superseded_by IS NULL AND updated_at < ?",
                            (scope_key, cutoff),
                        ) or (0,)
                        expired[scope_key] = count
            return [
                scope_summary(self, key, count - expired.get(key, 0), newest) for key, count, newest in rows
            ]

        return await self._run(job)

    async def forget(self, *, user_id: str, tenant_id: str | None = None) -> int:
        user_key = MemoryScope(user_id, tenant_id).user_key
        return await self._run(lambda db: forget_user(db, user_key))

    async def purge_expired(self) -> int:
        cutoff = cutoff_micros(self)
        if cutoff is None:
            return 0
        return await self._run(lambda db: purge_before(db, cutoff))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True  # calls from now on are refused, also those already queued

        def close() -> None:
            self._cache.close()
            if self._connection is not None:
                self._connection.close()
                self._connection = None

        await self._worker.shutdown(close)

    def __repr__(self) -> str:
        return f"SQLiteMemoryStore({str(self.path)!r}, dimensions={self.dimensions})"
