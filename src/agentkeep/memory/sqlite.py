"""Memories in a SQLite file with vector search by ``sqlite-vec``: :class:`SQLiteMemoryStore`.

The records live in a plain table; their embeddings in a ``vec0`` virtual table partitioned by
scope, so a search reads only the scope's vectors (exact k-nearest by cosine distance). A record
superseded by a newer one of its key keeps its row (its history) but loses its vector, so it can
no longer be found.

Python's ``sqlite3`` module cannot load extensions on every build (this machine's cannot), so the
store talks to SQLite through ``apsw``, which bundles its own SQLite and loads ``sqlite-vec``'s
extension itself: whether memory works never depends on how Python was built. Needs the extra
``[memory]`` (``apsw``, ``sqlite-vec``); importing this module without them raises an
``ImportError`` that names it. The file may be the one that holds history.

apsw calls block, so every call runs on the store's own worker thread (one connection, one
thread: writes are serialized; SQLite's own locking keeps other processes out of a write).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from array import array
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

try:
    import apsw
    import sqlite_vec  # pyright: ignore[reportMissingTypeStubs]
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the SQLite memory store needs apsw and sqlite-vec: pip install 'agentkeep[memory]'"
    ) from exc

from ..errors import MemoryFormatError, StorageClosedError, StorageError, StorageUnavailableError
from .base import NO_CURRENT, MemoryStore, normalized
from .records import MemoryHit, MemoryRecord, MemoryScope, MemoryScopeSummary, check_embedding

__all__ = ["SQLiteMemoryStore"]

T = TypeVar("T")
_LAYOUT: Final = 1
# vec0 keeps each scope's vectors in chunks of this many; a scope takes at least one chunk
# (64 x 384 x 4 bytes = 96 KiB), where the default 1,024 took 1.5 MiB per user. Searches of large
# scopes are as fast (measured: 3.0 ms for 10k vectors either way).
_CHUNK: Final = 64
_COLUMNS: Final = (
    "rowid, id, key, kind, text, source_session_id, metadata, created_at, updated_at, superseded_by"
)


class _Db:
    """The store's connection with typed calls (apsw's own stubs leave values untyped) and
    write transactions that take the write lock at once (``BEGIN IMMEDIATE``)."""

    def __init__(self, connection: apsw.Connection) -> None:
        self._connection: Any = connection
        self.cancelled = threading.Event()
        """Set when the caller of the current job gave up: its write rolls back instead of committing."""

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._connection.execute(sql, args))

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        found = self.rows(sql, args)
        return found[0] if found else None

    def run(self, sql: str, args: Sequence[Any] = ()) -> None:
        self._connection.execute(sql, args)

    @property
    def last_rowid(self) -> int:
        return int(self._connection.last_insert_rowid())

    @contextmanager
    def write(self) -> Generator[None]:
        self._connection.execute("BEGIN IMMEDIATE")
        try:
            yield
            if self.cancelled.is_set():
                raise StorageClosedError("the write was cancelled by its caller", backend="sqlite")
        except BaseException:
            self._connection.execute("ROLLBACK")
            raise
        self._connection.execute("COMMIT")

    def close(self) -> None:
        self._connection.close()


def _micros(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def _time(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, UTC)


def _vector(values: Sequence[float]) -> bytes:
    return array("f", values).tobytes()


def _insert_vector(
    db: _Db, rowid: int, scope: MemoryScope, kind: str, updated: int, vector: Sequence[float]
) -> None:
    db.run(
        "INSERT INTO agentkeep_memory_vectors (memory_rowid, scope, kind, updated_at, embedding) "
        "VALUES (?, ?, ?, ?, ?)",
        (rowid, scope.key, kind, updated, _vector(vector)),
    )


def _delete_where(db: _Db, condition: str, value: Any) -> int:
    """Delete the records matching ``condition`` (one ``?``) with their vectors; returns how many."""
    with db.write():
        rowids = [r for (r,) in db.rows(f"SELECT rowid FROM agentkeep_memories WHERE {condition}", (value,))]
        for rowid in rowids:
            db.run("DELETE FROM agentkeep_memory_vectors WHERE memory_rowid = ?", (rowid,))
        db.run(f"DELETE FROM agentkeep_memories WHERE {condition}", (value,))
        return len(rowids)


class SQLiteMemoryStore(MemoryStore):
    """Memories in the SQLite file at ``path`` (see the module docs).

    Args:
        path: The database file (created with its folder if missing).
        dimensions: The length of every embedding (fixed for the file once written).
        ttl: Seconds after its last update at which a memory expires.
        timeout: Seconds to wait for another process's write lock.
    """

    backend = "sqlite"

    def __init__(
        self, path: str | os.PathLike[str], *, dimensions: int, ttl: float | None = None, timeout: float = 5.0
    ) -> None:
        super().__init__(dimensions=dimensions, ttl=ttl)
        self.path = Path(path)
        self.timeout = timeout
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentkeep-memory")
        self._connection: _Db | None = None
        self._closed = False

    # -- plumbing ----------------------------------------------------------------------------------
    async def _run(self, job: Callable[[_Db], T], *, closing: bool = False) -> T:
        if self._closed and not closing:
            raise StorageClosedError("the sqlite memory store is closed", backend=self.backend)
        cancelled = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(self._worker, self._call, job, cancelled, closing)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The job may already be running: it must not commit for a caller that gave up. It
            # rolls back at its commit (if it gets there); wait for it, so nothing is left behind.
            cancelled.set()
            with contextlib.suppress(Exception):
                await future
            raise

    def _call(self, job: Callable[[_Db], T], cancelled: threading.Event, closing: bool) -> T:
        if cancelled.is_set() or (self._closed and not closing):
            raise StorageClosedError("the sqlite memory store is closed", backend=self.backend)
        try:
            if self._connection is None:
                self._connection = self._open()
            self._connection.cancelled = cancelled
            return job(self._connection)
        except apsw.BusyError as exc:
            raise StorageUnavailableError(
                f"the file is locked by another writer: {exc}", backend=self.backend, address=str(self.path)
            ) from exc
        except apsw.Error as exc:
            raise StorageError(f"sqlite memory store at {self.path}: {exc}", backend=self.backend) from exc

    def _open(self) -> _Db:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = apsw.Connection(str(self.path))
        try:
            connection.enable_load_extension(True)
            connection.load_extension(sqlite_vec.loadable_path())
            connection.enable_load_extension(False)
            connection.set_busy_timeout(int(self.timeout * 1000))
            db = _Db(connection)
            db.run("PRAGMA journal_mode=WAL")
            self._create(db)
        except BaseException:
            connection.close()
            raise
        return db

    def _create(self, db: _Db) -> None:
        with db.write():
            db.run(
                "CREATE TABLE IF NOT EXISTS agentkeep_memory_meta "
                "(name TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            found: dict[str, str] = dict(db.rows("SELECT name, value FROM agentkeep_memory_meta"))  # pyright: ignore[reportAssignmentType]
            if found:
                if int(found.get("layout", 0)) > _LAYOUT:
                    raise StorageError(
                        f"{self.path} holds memories of a newer layout ({found['layout']})",
                        backend=self.backend,
                    )
                if int(found["dimensions"]) != self.dimensions:
                    raise MemoryFormatError(
                        f"{self.path} holds {found['dimensions']}-dimension embeddings, not {self.dimensions}"
                    )
                return
            db.run(
                # AUTOINCREMENT: a deleted record's rowid is never given to a later one, so a
                # vector row can never point at another record (of another scope)
                """CREATE TABLE agentkeep_memories (
                    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
                    id TEXT NOT NULL,
                    scope TEXT NOT NULL,
                    user_key TEXT NOT NULL,
                    key TEXT,
                    kind TEXT NOT NULL,
                    text TEXT NOT NULL,
                    source_session_id TEXT,
                    metadata TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    updated_at INTEGER NOT NULL,
                    superseded_by TEXT
                )"""
            )
            db.run("CREATE UNIQUE INDEX agentkeep_memories_id ON agentkeep_memories (scope, id)")
            db.run("CREATE INDEX agentkeep_memories_scope ON agentkeep_memories (scope, updated_at)")
            db.run("CREATE INDEX agentkeep_memories_user ON agentkeep_memories (user_key)")
            db.run(
                "CREATE UNIQUE INDEX agentkeep_memories_current_key ON agentkeep_memories (scope, key) "
                "WHERE key IS NOT NULL AND superseded_by IS NULL"
            )
            db.run(
                f"""CREATE VIRTUAL TABLE agentkeep_memory_vectors USING vec0(
                    memory_rowid INTEGER PRIMARY KEY,
                    scope TEXT PARTITION KEY,
                    kind TEXT,
                    updated_at INTEGER,
                    embedding float[{self.dimensions}] distance_metric=cosine,
                    chunk_size={_CHUNK}
                )"""
            )
            db.run(
                "INSERT INTO agentkeep_memory_meta (name, value) VALUES ('layout', ?), ('dimensions', ?)",
                (str(_LAYOUT), str(self.dimensions)),
            )

    def _record(self, row: Sequence[Any], embedding: list[float] | None = None) -> MemoryRecord:
        _, memory_id, key, kind, text, source, metadata, created, updated, superseded = row
        return MemoryRecord(
            text,
            embedding=embedding,
            key=key,
            kind=kind,
            source_session_id=source,
            metadata=json.loads(metadata),
            id=memory_id,
            created_at=_time(created),
            updated_at=_time(updated),
            superseded_by=superseded,
        )

    def _cutoff(self) -> int | None:
        cutoff = self.expired_before()
        return None if cutoff is None else _micros(cutoff)

    # -- the contract --------------------------------------------------------------------------------
    async def setup(self) -> None:
        await self._run(lambda db: None)

    async def add(
        self, scope: MemoryScope, record: MemoryRecord, *, replaces: str | None = None
    ) -> MemoryRecord:
        self.check_replaces(record, replaces)
        embedding = self.checked(record)
        metadata = json.dumps(record.metadata)

        def job(db: _Db) -> MemoryRecord:
            with db.write():
                if db.one(
                    "SELECT 1 FROM agentkeep_memories WHERE scope = ? AND id = ?", (scope.key, record.id)
                ):
                    raise MemoryFormatError(f"memory {record.id!r} already exists")
                if record.key is not None:
                    current = db.rows(
                        "SELECT rowid, id FROM agentkeep_memories "
                        "WHERE scope = ? AND key = ? AND superseded_by IS NULL",
                        (scope.key, record.key),
                    )
                    expected = [] if replaces == NO_CURRENT else [replaces]
                    if replaces is not None and [row[1] for row in current] != expected:
                        raise self.conflict(scope, record, replaces, current[0][1] if current else None)
                    for rowid, _ in current:
                        db.run(
                            "UPDATE agentkeep_memories SET superseded_by = ? WHERE rowid = ?",
                            (record.id, rowid),
                        )
                        db.run("DELETE FROM agentkeep_memory_vectors WHERE memory_rowid = ?", (rowid,))
                updated = _micros(record.updated_at or record.created_at)
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
                        _micros(record.created_at),
                        updated,
                    ),
                )
                if embedding is not None:
                    _insert_vector(db, db.last_rowid, scope, record.kind, updated, embedding)
            return MemoryRecord(
                record.text,
                embedding=embedding,
                key=record.key,
                kind=record.kind,
                source_session_id=record.source_session_id,
                metadata=dict(record.metadata),
                id=record.id,
                created_at=record.created_at,
                updated_at=record.updated_at,
            )

        return await self._run(job)

    async def get(self, scope: MemoryScope, memory_id: str) -> MemoryRecord | None:
        def job(db: _Db) -> MemoryRecord | None:
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
        vector = self.update_vector(text, embedding)

        def job(db: _Db) -> MemoryRecord:
            with db.write():
                row = db.one(
                    f"SELECT {_COLUMNS} FROM agentkeep_memories "
                    "WHERE scope = ? AND id = ? AND superseded_by IS NULL",
                    (scope.key, memory_id),
                )
                if row is None:
                    raise LookupError(f"no current memory {memory_id!r} in {scope}")
                old = self._record(row)
                changed = self.updated(old, text=text, vector=vector, metadata=metadata)
                updated = _micros(changed.updated_at or changed.created_at)
                db.run(
                    "UPDATE agentkeep_memories SET text = ?, metadata = ?, updated_at = ? WHERE rowid = ?",
                    (changed.text, json.dumps(changed.metadata), updated, row[0]),
                )
                if vector is not None:
                    db.run("DELETE FROM agentkeep_memory_vectors WHERE memory_rowid = ?", (row[0],))
                    _insert_vector(db, row[0], scope, changed.kind, updated, vector)
                else:
                    db.run(
                        "UPDATE agentkeep_memory_vectors SET updated_at = ? WHERE memory_rowid = ?",
                        (updated, row[0]),
                    )
            return changed

        return await self._run(job)

    async def delete(self, scope: MemoryScope, memory_id: str) -> bool:
        def job(db: _Db) -> bool:
            with db.write():
                row = db.one(
                    "SELECT rowid FROM agentkeep_memories WHERE scope = ? AND id = ?", (scope.key, memory_id)
                )
                if row is None:
                    return False
                db.run("DELETE FROM agentkeep_memory_vectors WHERE memory_rowid = ?", (row[0],))
                db.run("DELETE FROM agentkeep_memories WHERE rowid = ?", (row[0],))
                return True

        return await self._run(job)

    async def list_memories(
        self, scope: MemoryScope, *, kind: str | None = None, limit: int | None = None
    ) -> list[MemoryRecord]:
        cutoff = self._cutoff()

        def job(db: _Db) -> list[MemoryRecord]:
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
        embedding: Sequence[float],
        *,
        k: int = 5,
        kind: str | None = None,
        min_score: float | None = None,
    ) -> list[MemoryHit]:
        self.check_query(k, min_score)
        query = _vector(normalized(check_embedding(embedding, self.dimensions)))
        cutoff = self._cutoff()

        def job(db: _Db) -> list[MemoryHit]:
            # One statement, so one snapshot: the k nearest vectors of the scope and their
            # records, each record checked to be of this scope and current.
            nearest = (
                "SELECT memory_rowid, distance FROM agentkeep_memory_vectors "
                "WHERE embedding MATCH ? AND k = ? AND scope = ?"
            )
            args: list[Any] = [query, k, scope.key]
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
                [*args, scope.key],
            )
            hits: list[MemoryHit] = []
            for row in rows:
                distance = row[-1]
                if distance is None:  # a vector with no direction: no similarity to speak of
                    continue
                score = 1.0 - float(distance)
                if min_score is None or score >= min_score:
                    hits.append(MemoryHit(self._record(row[:-1]), score))
            return hits

        return await self._run(job)

    async def current(self, scope: MemoryScope, key: str) -> MemoryRecord | None:
        def job(db: _Db) -> MemoryRecord | None:
            row = db.one(
                f"SELECT {_COLUMNS} FROM agentkeep_memories "
                "WHERE scope = ? AND key = ? AND superseded_by IS NULL",
                (scope.key, key),
            )
            return None if row is None else self._record(row)

        return await self._run(job)

    async def history(self, scope: MemoryScope, key: str) -> list[MemoryRecord]:
        def job(db: _Db) -> list[MemoryRecord]:
            rows = db.rows(
                f"SELECT {_COLUMNS} FROM agentkeep_memories WHERE scope = ? AND key = ? "
                "ORDER BY created_at, id",
                (scope.key, key),
            )
            return [self._record(row) for row in rows]

        return await self._run(job)

    async def scopes(
        self, *, tenant_id: str | None, q: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[MemoryScopeSummary]:
        self.check_page(limit, offset)
        prefix = MemoryScope.tenant_prefix(tenant_id)
        cutoff = self._cutoff()

        def job(db: _Db) -> list[MemoryScopeSummary]:
            # a range of the (scope, id) index: the tenant's scopes only (the separator is the
            # last character before ' ', so every key of the tenant sorts below prefix[:-1] + ' ')
            sql = (
                "SELECT scope, count(*), max(updated_at) FROM agentkeep_memories "
                "WHERE scope > ? AND scope < ? AND superseded_by IS NULL"
            )
            args: list[Any] = [prefix, prefix[:-1] + " "]
            if q:
                sql += " AND instr(substr(user_key, ?), ?) > 0"
                args += [len(prefix) + 1, q]
            if cutoff is not None:
                sql += " AND updated_at >= ?"
                args.append(cutoff)
            sql += " GROUP BY scope ORDER BY max(updated_at) DESC, scope LIMIT ? OFFSET ?"
            rows = db.rows(sql, [*args, limit, offset])
            return [
                MemoryScopeSummary(MemoryScope.from_key(key), count, _time(newest))
                for key, count, newest in rows
            ]

        return await self._run(job)

    async def forget(self, *, user_id: str, tenant_id: str | None = None) -> int:
        user_key = MemoryScope(user_id, tenant_id).user_key
        return await self._run(lambda db: _delete_where(db, "user_key = ?", user_key))

    async def purge_expired(self) -> int:
        cutoff = self._cutoff()
        if cutoff is None:
            return 0
        return await self._run(lambda db: _delete_where(db, "updated_at < ?", cutoff))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True  # calls from now on are refused, also those already queued

        def close(db: _Db) -> None:
            db.close()
            self._connection = None

        if self._connection is not None:
            await self._run(close, closing=True)
        self._worker.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"SQLiteMemoryStore({str(self.path)!r}, dimensions={self.dimensions})"
