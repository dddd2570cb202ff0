"""Memories in PostgreSQL: :class:`PostgresMemoryStore`.

No vector extension is assumed (this project's machine has none: no pgvector package), so the
search is honest brute force where it is cheapest: the records live in a table (``bytea``
embeddings, float32), and a search scores the current vectors of its one scope with numpy, then
reads back the ``k`` best records. A scope smaller than ``cache_min_vectors`` is fetched whole
through a binary cursor (an index on the scope reads only those rows); a larger one is held in
process as a matrix (:mod:`._vector_cache`) kept current by a per-scope change log that every
write keeps, so a search fetches only what changed since the last one. Cost grows with the size
of the *scope*, not of the table (figures in ``docs/memory.md``).

The tables live in the schema of the message store (``agentkeep`` by default) and are created by
:meth:`~PostgresMemoryStore.setup`. Every write changes its scope's row and sets its
transaction's commit-by time, which a deferred trigger on that row checks at COMMIT (layout 4;
see :mod:`agentkeep.message_stores.postgres`): a write the caller was told had failed is not
stored later by a server that was paused. Needs psycopg 3 (extra ``[postgres]``) and numpy (extra
``[memory]``).
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar, cast

try:
    import numpy as np
    import numpy.typing as npt
    import psycopg
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the PostgreSQL memory store needs psycopg and numpy: pip install 'agentkeep[postgres]' "
        "and pip install 'agentkeep[memory]'"
    ) from exc

from .._db.postgres import (
    COMMIT_BY,
    DEFAULT_SCHEMA,
    Pooler,
    PostgresConnection,
    PostgresDatabase,
    PostgresPool,
)
from ..errors import ConflictError, CorruptMemoryError, MemoryFormatError, SchemaVersionError
from ._lexical import INDEXED_METADATA, SearchMode, SearchRequest, names_in, ranked, said_in, tsquery
from ._vector_cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_MIN_VECTORS,
    LOG_KEEP,
    DamagedVector,
    ScopeVectors,
    VectorCache,
    behind,
    vector_matrix,
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
    meta_number,
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

__all__ = ["MEMORY_LAYOUT", "PostgresMemoryStore"]


@dataclass(frozen=True, slots=True)
class _Filters:
    """What a search keeps of a scope's memories besides being current: of ``kind``, updated at
    ``cutoff`` or later, said (µs) at ``since`` or later and before ``until``, when given."""

    scope: str
    kind: str | None
    cutoff: int | None
    since: int | None
    until: int | None

    def params(self) -> tuple[str | int | None, ...]:
        """The parameters of :data:`_FILTERED`, in its order."""
        return (
            *(self.scope, self.kind, self.kind, self.cutoff, self.cutoff),
            *(self.since, self.since, self.until, self.until),
        )


T = TypeVar("T")
_FILTERED: Final = (
    "scope = %s AND superseded_by IS NULL AND embedding IS NOT NULL "
    "AND (%s::text IS NULL OR kind = %s) AND (%s::bigint IS NULL OR updated_at >= %s) "
    "AND (%s::bigint IS NULL OR created_at >= %s) AND (%s::bigint IS NULL OR created_at < %s)"
)
"""A search's filter of a scope's current memories with vectors (parameters: ``_Filters.params()``)."""
_COLUMNS: Final = "id, key, kind, text, source_session_id, metadata, created_at, updated_at, superseded_by"


def _metadata_words(name: str) -> str:
    """SQL for the string value of the metadata entry ``name`` ('' when absent or not a string)."""
    return f"CASE WHEN jsonb_typeof(metadata->'{name}') = 'string' THEN metadata->>'{name}' ELSE '' END"


_WORDS: Final = "to_tsvector('english', text || ' ' || {})".format(
    " || ' ' || ".join(_metadata_words(name) for name in INDEXED_METADATA)
)
"""What a memory's ``words`` column is generated from (layout 6)."""

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (  # 1: the memories and their indexes
        "CREATE TABLE IF NOT EXISTS {memories} ("
        "row bigserial PRIMARY KEY, id text NOT NULL, scope text NOT NULL, user_key text NOT NULL, "
        "key text, kind text NOT NULL, text text NOT NULL, source_session_id text, "
        "metadata jsonb NOT NULL, created_at bigint NOT NULL, updated_at bigint NOT NULL, "
        "superseded_by text, embedding bytea, UNIQUE (scope, id))",
        "CREATE UNIQUE INDEX IF NOT EXISTS memories_current_key ON {memories} (scope, key) "
        "WHERE key IS NOT NULL AND superseded_by IS NULL",
        "CREATE INDEX IF NOT EXISTS memories_scope ON {memories} (scope, updated_at)",
        "CREATE INDEX IF NOT EXISTS memories_user ON {memories} (user_key)",
        # byte order, whatever the database's collation: a tenant's scopes are a range
        'CREATE INDEX IF NOT EXISTS memories_scope_bytes ON {memories} (scope COLLATE "C")',
    ),
    (  # 2: each scope's change counter and vector count, and the log of changed vectors (what
        # keeps search caches coherent, see _vector_cache); a scope forgotten and written again
        # gets a new id, which no cache has. The scopes that hold vectors are counted once.
        "CREATE TABLE IF NOT EXISTS {scopes} (id bigserial PRIMARY KEY, "
        "scope text NOT NULL UNIQUE, seq bigint NOT NULL, vectors bigint NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {changes} (scope_id bigint NOT NULL, seq bigint NOT NULL, "
        "row bigint NOT NULL, PRIMARY KEY (scope_id, seq))",
        "INSERT INTO {scopes} (scope, seq, vectors) SELECT scope, 0, count(*) "
        "FROM {memories} WHERE embedding IS NOT NULL GROUP BY scope ON CONFLICT (scope) DO NOTHING",
    ),
    (  # 3: each scope's summary for the listing of scopes (its tenant, count of current memories
        # and newest updated_at), indexed in the listing's order, counted once from the memories;
        # and an index of current memories by scope and time (a scope's newest, and the count of
        # its expired ones, in one range)
        "ALTER TABLE {scopes} ADD COLUMN IF NOT EXISTS tenant text NOT NULL DEFAULT '', "
        "ADD COLUMN IF NOT EXISTS memories bigint NOT NULL DEFAULT 0, "
        "ADD COLUMN IF NOT EXISTS newest bigint",
        "INSERT INTO {scopes} (scope, seq, vectors, memories, newest) "
        "SELECT scope, 0, 0, count(*), max(updated_at) FROM {memories} WHERE superseded_by IS NULL "
        "GROUP BY scope ON CONFLICT (scope) DO UPDATE "
        "SET memories = excluded.memories, newest = excluded.newest",
        "UPDATE {scopes} SET tenant = split_part(scope, chr(31), 1)",
        "CREATE INDEX IF NOT EXISTS memory_scopes_listing "
        'ON {scopes} (tenant, newest DESC, scope COLLATE "C")',
        "CREATE INDEX IF NOT EXISTS memories_current ON {memories} (scope, updated_at) "
        "WHERE superseded_by IS NULL",
    ),
    (  # 4: a write reported failed never commits later: every write changes its scope's row and
        # sets its transaction's commit-by time, which the message store's check refuses to
        # commit after (see agentkeep._db.postgres, migration 6 of the message store's schema)
        "CREATE CONSTRAINT TRIGGER commit_by AFTER INSERT OR UPDATE OR DELETE ON {scopes} "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {check_commit_by}()",
    ),
    (  # 5: searches by words: each memory's words as a tsvector (english: stemmed, stop words
        # out) the server computes on every write of its text, in the write's transaction, and a
        # GIN index of the words of the memories a search can find (current, with a vector). No
        # index by the time memories were said: with one of (scope, created_at) beside
        # memories_current, the planner read a scope's newest updated_at (every write does) by
        # walking the whole scope in it (an add took 2.4 ms at 2,000 memories, 10 ms at 12,000);
        # a time window reads the scope's current memories instead.
        "ALTER TABLE {memories} ADD COLUMN IF NOT EXISTS words tsvector "
        "GENERATED ALWAYS AS (to_tsvector('english', text)) STORED",
        "CREATE INDEX IF NOT EXISTS memories_words ON {memories} USING gin (words) "
        "WHERE superseded_by IS NULL AND embedding IS NOT NULL",
    ),
    (  # 6: the words with those of the memory's speaker and context (its metadata's string
        # values of _lexical.INDEXED_METADATA, as the other stores index them)
        "ALTER TABLE {memories} DROP COLUMN IF EXISTS words",  # and its index
        f"ALTER TABLE {{memories}} ADD COLUMN words tsvector GENERATED ALWAYS AS ({_WORDS}) STORED",
        "CREATE INDEX memories_words ON {memories} USING gin (words) "
        "WHERE superseded_by IS NULL AND embedding IS NOT NULL",
    ),
    (  # 7: current memories by scope, session and the order they were said (what was said
        # next after a search hit: MemoryStore.following)
        "CREATE INDEX IF NOT EXISTS memories_session ON {memories} "
        '(scope, source_session_id, created_at, updated_at, id COLLATE "C") WHERE superseded_by IS NULL',
    ),
)
"""The memory schema's layouts, in order: a schema of layout ``n`` runs the steps from index ``n``
on, in one transaction (under an advisory lock), and records :data:`MEMORY_LAYOUT`."""

MEMORY_LAYOUT: Final = len(_MIGRATIONS)
"""The layout this agentkeep writes (recorded in the ``memory_meta`` table as ``layout``)."""
_ATTEMPTS: Final = 5


class PostgresMemoryStore(MemoryStore):
    """Memories in PostgreSQL (see the module docs).

    Args:
        pool: An ``AsyncConnectionPool`` of the caller's (not closed by :meth:`aclose`).
        url: Or a connection URL: the store uses the process's pool for it, shared with the
            other stores on that database (as :meth:`from_url` does).
        schema: The schema (the message store's default: ``agentkeep``).
        dimensions: The length of every embedding (fixed for the schema once written).
        ttl: Seconds after its last update at which a memory expires.
        timeout: Seconds to wait for a connection and for each operation.
        search_cache_bytes: Memory for the vectors of large scopes, held as matrices and kept
            current through the change log, so a search fetches only what changed since the last
            (see :mod:`._vector_cache`); least recently searched scopes go first. ``0``: no cache.
        cache_min_vectors: Scopes with fewer vectors are fetched whole for each search.
        pooler: ``"transaction"`` when ``url`` goes through a pooler in transaction pooling mode
            (PgBouncer's ``pool_mode = transaction``): nothing prepared, timeouts per transaction.
        pool_size: With ``url``, the most connections of the process's pool for that database
            (shared with the other stores on it; default 10).
    """

    backend = "postgres"
    DEFAULT_SCHEMA = DEFAULT_SCHEMA

    def __init__(
        self,
        pool: PostgresPool | None = None,
        *,
        url: str | None = None,
        schema: str = DEFAULT_SCHEMA,
        dimensions: int,
        ttl: float | None = None,
        timeout: float = 5.0,
        search_cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache_min_vectors: int = DEFAULT_MIN_VECTORS,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
    ) -> None:
        check_settings(dimensions=dimensions, ttl=ttl)
        self.dimensions = dimensions
        self.ttl = ttl
        if cache_min_vectors < 0:
            raise ValueError("cache_min_vectors must not be negative")
        self.db = PostgresDatabase(
            pool, url=url, schema=schema, timeout=timeout, pooler=pooler, pool_size=pool_size
        )
        self.schema = schema
        self.location = f"{self.db.address} (schema {schema!r})"
        self._tables = {
            name: sql.Identifier(schema, table)
            for name, table in (
                ("memories", "memories"),
                ("meta", "memory_meta"),
                ("scopes", "memory_scopes"),
                ("changes", "memory_changes"),
                ("check_commit_by", "check_commit_by"),
            )
        }
        self._ready = False
        self._cache = VectorCache(search_cache_bytes)
        self._cache_min_vectors = cache_min_vectors
        # Cached searches of this store take turns: one catches a scope's matrix up while no
        # other reads it (the scoring runs on a thread, off the event loop).
        self._cache_lock = asyncio.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        dimensions: int,
        ttl: float | None = None,
        timeout: float = 5.0,
        search_cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache_min_vectors: int = DEFAULT_MIN_VECTORS,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
    ) -> PostgresMemoryStore:
        """A store on the process's pool for ``url`` (acquired on first use, released by :meth:`aclose`)."""
        return cls(
            url=url,
            schema=schema,
            dimensions=dimensions,
            ttl=ttl,
            timeout=timeout,
            search_cache_bytes=search_cache_bytes,
            cache_min_vectors=cache_min_vectors,
            pooler=pooler,
            pool_size=pool_size,
        )

    def _record(self, row: Sequence[Any]) -> MemoryRecord:
        memory_id, key, kind, text, source, metadata, created, updated, superseded = row
        return decoded_record(
            self,
            memory_id,
            lambda: MemoryRecord(
                text,
                key=key,
                kind=kind,
                source_session_id=source,
                metadata=cast(
                    "dict[str, Any]", metadata if isinstance(metadata, dict) else json.loads(metadata)
                ),
                id=memory_id,
                created_at=from_micros(created),
                updated_at=from_micros(updated),
                superseded_by=superseded,
            ),
        )

    async def _meta_number(self, conn: PostgresConnection, name: str) -> int | None:
        """The whole number meta row ``name`` holds (``None``: no such row).

        Raises:
            CorruptMemoryError: The row holds anything else.
        """
        cursor = await conn.execute(self._q("SELECT value FROM {meta} WHERE name = %s"), (name,))
        row = await cursor.fetchone()
        if row is None:
            return None
        return meta_number(row[0], name, backend=self.backend, store=self.location)

    async def _layout(self, conn: PostgresConnection) -> int:
        """The schema's memory layout: its ``layout`` row, or for a schema written before layouts
        were recorded, what its tables show (2: with the change log, 1: memories only, 0: none)."""
        recorded = await self._meta_number(conn, "layout")
        if recorded is not None:
            return recorded
        cursor = await conn.execute(self._q("SELECT 1 FROM {meta} WHERE name = 'change_log'"))
        if await cursor.fetchone() is not None:
            return 2
        cursor = await conn.execute("SELECT to_regclass(%s)", (f'"{self.schema}".memories',))
        (table,) = await cursor.fetchone() or (None,)
        return 0 if table is None else 1

    def _q(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(**self._tables)  # pyright: ignore[reportArgumentType]

    async def _run(self, operation: Callable[[PostgresConnection], Any], *, snapshot: bool = False) -> Any:
        if not self._ready:
            await self.setup()
        return await self.db.run(operation, snapshot=snapshot)

    async def setup(self) -> None:
        await self.db.setup()
        if self._ready:
            return

        async def create(conn: PostgresConnection) -> None:
            async with conn.transaction():
                await conn.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no COMMIT-time checks pending
                await conn.execute(
                    sql.SQL("SELECT pg_advisory_xact_lock(hashtext({}))").format(
                        sql.Literal(f"agentkeep-memory:{self.schema}")
                    )
                )
                await conn.execute(
                    self._q("CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value text NOT NULL)")
                )
                layout = await self._layout(conn)
                if layout > MEMORY_LAYOUT:
                    raise SchemaVersionError(
                        f"postgres memory store {self.location} is of a newer layout ({layout}) than this "
                        f"agentkeep knows ({MEMORY_LAYOUT})",
                        backend=self.backend,
                    )
                for migration in _MIGRATIONS[layout:]:
                    for statement in migration:
                        await conn.execute(self._q(statement))
                if layout < MEMORY_LAYOUT:
                    await conn.execute(
                        self._q(
                            "INSERT INTO {meta} (name, value) VALUES ('layout', %s) "
                            "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
                        ),
                        (str(MEMORY_LAYOUT),),
                    )
                await conn.execute(
                    self._q(
                        "INSERT INTO {meta} (name, value) VALUES ('dimensions', %s) ON CONFLICT DO NOTHING"
                    ),
                    (str(self.dimensions),),
                )
                found = await self._meta_number(conn, "dimensions")
                if found != self.dimensions:
                    raise MemoryFormatError(
                        f"schema {self.schema!r} holds {found}-dimension embeddings, not {self.dimensions}"
                    )

        await self.db.run(create)
        self._ready = True

    async def add(
        self, scope: MemoryScope, record: MemoryRecord, *, replaces: str | None = None
    ) -> MemoryRecord:
        check_replaces(record, replaces)
        embedding = checked_embedding(self, record)
        vector = None if embedding is None else np.asarray(embedding, dtype=np.float32).tobytes()
        updated = to_micros(record.updated_at or record.created_at)

        async def operation(conn: PostgresConnection) -> None:
            commit_by = await self.db.commit_by(conn)
            for _ in range(_ATTEMPTS):
                try:
                    async with conn.transaction():
                        await self._add(conn, scope, record, replaces, vector, updated, commit_by)
                    return
                except psycopg.errors.UniqueViolation as exc:
                    if exc.diag.constraint_name != "memories_current_key":
                        raise MemoryFormatError(f"memory {record.id!r} already exists") from exc
                    if replaces is not None:  # a concurrent first write of the key won
                        raise replace_conflict(self, scope, record, replaces, None) from exc
            raise ConflictError(
                f"memory {record.key!r} of {scope} kept changing",
                backend=self.backend,
                conversation_id=scope.key,
            )

        await self._run(operation)
        return stored_record(record, embedding)

    async def _add(
        self,
        conn: PostgresConnection,
        scope: MemoryScope,
        record: MemoryRecord,
        replaces: str | None,
        vector: bytes | None,
        updated: int,
        commit_by: str,
    ) -> None:
        changed: list[int] = []
        vectors = 0
        superseded = 0
        if record.key is not None:
            # Writers of one key take turns (a lock for the transaction), so two first writes of a
            # key never race to insert; the unique index is the last guard.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{scope.key}\x1f{record.key}",)
            )
            cursor = await conn.execute(
                self._q(
                    "SELECT row, id, embedding IS NOT NULL FROM {memories} "
                    "WHERE scope = %s AND key = %s AND superseded_by IS NULL FOR UPDATE"
                ),
                (scope.key, record.key),
            )
            current = await cursor.fetchall()
            expected = [] if replaces == NO_CURRENT else [replaces]
            if replaces is not None and [row[1] for row in current] != expected:
                raise replace_conflict(self, scope, record, replaces, current[0][1] if current else None)
            for row, _, had_vector in current:
                await conn.execute(
                    self._q("UPDATE {memories} SET superseded_by = %s, embedding = NULL WHERE row = %s"),
                    (record.id, row),
                )
                if had_vector:
                    changed.append(row)
                    vectors -= 1
            superseded = len(current)
        cursor = await conn.execute(
            self._q(
                "INSERT INTO {memories} (id, scope, user_key, key, kind, text, source_session_id, metadata, "
                "created_at, updated_at, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "RETURNING row"
            ),
            (
                record.id,
                scope.key,
                scope.user_key,
                record.key,
                record.kind,
                record.text,
                record.source_session_id,
                json.dumps(record.metadata),
                to_micros(record.created_at),
                updated,
                vector,
            ),
        )
        inserted = await cursor.fetchone()
        if vector is not None and inserted is not None:
            changed.append(inserted[0])
            vectors += 1
        await self._account(conn, scope.key, changed, vectors, 1 - superseded, commit_by)

    async def _account(
        self,
        conn: PostgresConnection,
        scope: str,
        rows: Sequence[int],
        vectors: int,
        memories: int,
        commit_by: str,
    ) -> None:
        """Bring the scope's row up to date after a write of its memories, in the write
        transaction: its change counter goes up by one per row of ``rows`` (whose vectors
        changed, logged for the search caches, see :mod:`._vector_cache`), its vector count by
        ``vectors``, its count of current memories by ``memories``, and its newest ``updated_at``
        is read again from the index of current memories (``NULL``: none left).

        The row's lock makes writers of one scope take turns from here to their commit, so the
        counter's order is commit order, and the newest time, read by a statement that starts
        once the lock is held, sees every earlier writer's memories; it is the last lock a write
        takes (a purge takes its scopes' in order), so no two writes wait on each other. It sets
        the write's ``commit_by`` time (:meth:`PostgresDatabase.commit_by`), which the row's
        trigger checks at COMMIT."""
        cursor = await conn.execute(
            self._q(
                "INSERT INTO {scopes} AS s (scope, tenant, seq, vectors, memories) "
                "VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (scope) DO UPDATE SET seq = s.seq + excluded.seq, "
                "vectors = s.vectors + excluded.vectors, memories = s.memories + excluded.memories "
                f"RETURNING id, seq, {COMMIT_BY}"
            ),
            (scope, scope.partition("\x1f")[0], len(rows), vectors, memories, commit_by),
        )
        scope_id, seq, _ = cast("tuple[int, int, str]", await cursor.fetchone())
        await conn.execute(
            self._q(
                "UPDATE {scopes} SET newest = (SELECT max(updated_at) FROM {memories} "
                "WHERE scope = %s AND superseded_by IS NULL) WHERE id = %s"
            ),
            (scope, scope_id),
        )
        if not rows:
            return
        await conn.execute(
            self._q(
                "INSERT INTO {changes} (scope_id, seq, row) "
                "SELECT %s, %s + n, r FROM unnest(%s::bigint[]) WITH ORDINALITY AS t(r, n)"
            ),
            (scope_id, seq - len(rows), list(rows)),
        )
        if seq > LOG_KEEP:  # a cache further behind than the log keeps rebuilds
            # Only the entries that just fell out, bounded below: an open range would walk every
            # dead index entry left by the earlier deletes until a vacuum (adds slowed with the
            # scope's size: 1.5 to 2.5 ms over 15,000 adds).
            await conn.execute(
                self._q("DELETE FROM {changes} WHERE scope_id = %s AND seq > %s AND seq <= %s"),
                (scope_id, seq - len(rows) - LOG_KEEP, seq - LOG_KEEP),
            )

    async def get(self, scope: MemoryScope, memory_id: str) -> MemoryRecord | None:
        async def operation(conn: PostgresConnection) -> MemoryRecord | None:
            cursor = await conn.execute(
                self._q(f"SELECT {_COLUMNS} FROM {{memories}} WHERE scope = %s AND id = %s"),
                (scope.key, memory_id),
            )
            row = await cursor.fetchone()
            return None if row is None else self._record(row)

        return await self._run(operation)

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

        async def operation(conn: PostgresConnection) -> MemoryRecord:
            commit_by = await self.db.commit_by(conn)
            async with conn.transaction():
                cursor = await conn.execute(
                    self._q(
                        f"SELECT row, embedding IS NOT NULL, {_COLUMNS} FROM {{memories}} "
                        "WHERE scope = %s AND id = %s AND superseded_by IS NULL FOR UPDATE"
                    ),
                    (scope.key, memory_id),
                )
                row = await cursor.fetchone()
                if row is None:
                    raise LookupError(f"no current memory {memory_id!r} in {scope}")
                old = self._record(row[2:])
                changed = updated_record(old, text=text, vector=vector, metadata=metadata)
                await conn.execute(
                    self._q(
                        "UPDATE {memories} SET text = %s, metadata = %s, updated_at = %s, "
                        "embedding = coalesce(%s, embedding) WHERE scope = %s AND id = %s"
                    ),
                    (
                        changed.text,
                        json.dumps(changed.metadata),
                        to_micros(changed.updated_at or changed.created_at),
                        None if vector is None else np.asarray(vector, dtype=np.float32).tobytes(),
                        scope.key,
                        memory_id,
                    ),
                )
                # a new vector, or a new time for the expiry filter; the scope's newest moved
                logged = [row[0]] if vector is not None or row[1] else []
                new_vectors = 1 if vector is not None and not row[1] else 0
                await self._account(conn, scope.key, logged, new_vectors, 0, commit_by)
                return changed

        return await self._run(operation)

    async def delete(self, scope: MemoryScope, memory_id: str) -> bool:
        async def operation(conn: PostgresConnection) -> bool:
            commit_by = await self.db.commit_by(conn)
            async with conn.transaction():
                cursor = await conn.execute(
                    self._q(
                        "DELETE FROM {memories} WHERE scope = %s AND id = %s "
                        "RETURNING row, embedding IS NOT NULL, superseded_by IS NULL"
                    ),
                    (scope.key, memory_id),
                )
                deleted = await cursor.fetchone()
                if deleted is not None and (deleted[1] or deleted[2]):
                    row, had_vector, was_current = deleted
                    await self._account(
                        conn,
                        scope.key,
                        [row] if had_vector else [],
                        -1 if had_vector else 0,
                        -int(was_current),
                        commit_by,
                    )
                return deleted is not None

        return await self._run(operation)

    async def list_memories(
        self, scope: MemoryScope, *, kind: str | None = None, limit: int | None = None
    ) -> list[MemoryRecord]:
        cutoff = cutoff_micros(self)

        async def operation(conn: PostgresConnection) -> list[MemoryRecord]:
            cursor = await conn.execute(
                self._q(
                    f"SELECT {_COLUMNS} FROM {{memories}} WHERE scope = %s AND superseded_by IS NULL "
                    "AND (%s::text IS NULL OR kind = %s) AND (%s::bigint IS NULL OR updated_at >= %s) "
                    "ORDER BY updated_at DESC, id DESC LIMIT %s"
                ),
                (scope.key, kind, kind, cutoff, cutoff, limit),
            )
            return [self._record(row) for row in await cursor.fetchall()]

        return await self._run(operation)

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
        query = None if request.vector is None else np.asarray(request.vector, dtype=np.float32)
        filters = _Filters(scope.key, kind, cutoff_micros(self), *window_micros(request))
        pool = request.pool(k)

        async def operation(conn: PostgresConnection) -> list[MemoryHit]:
            # One snapshot (run(snapshot=True): repeatable read, read only) for the scope's counter,
            # its log, the vectors, its words and the records of the best, each checked to be of
            # this scope and current.
            lexical = await self._by_words(conn, request.terms, pool, filters) if request.terms else []
            if query is None:  # by words alone: the index's relevance is the score
                records = await self._records_by_row(conn, scope.key, [row for row, _ in lexical[:k]])
                return [MemoryHit(records[r], score, score) for r, score in lexical[:k] if r in records]
            nearest = await self._by_meaning(conn, query, pool, filters)
            similarity: dict[int, float] = {}
            named: list[int] = []
            dated: list[int] = []
            if request.mode == "hybrid" and (lexical or request.periods):
                try:
                    similarity, named, dated = await self._candidates(conn, query, request, nearest, lexical)
                except DamagedVector as exc:
                    raise await self._damaged_vector(conn, exc) from exc
                if not lexical:  # nothing found by words: no speaker preferred (as the other stores)
                    named = []
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
            order = [r for r in order if r in scores]  # a vector gone since: not found by meaning
            records = await self._records_by_row(conn, scope.key, order)
            words = dict(lexical)
            hits = checked_hits(
                self, [MemoryHit(records[r], scores[r], words.get(r)) for r in order if r in records]
            )
            if request.mode == "vector":
                hits.sort(key=lambda hit: (-hit.score, hit.record.id))
            return hits

        return await self._run(operation, snapshot=True)

    async def _records_by_row(
        self, conn: PostgresConnection, scope: str, rows: Sequence[int]
    ) -> dict[int, MemoryRecord]:
        if not rows:
            return {}
        cursor = await conn.execute(
            self._q(
                f"SELECT row, {_COLUMNS} FROM {{memories}} "
                "WHERE row = ANY(%s) AND scope = %s AND superseded_by IS NULL"
            ),
            (list(rows), scope),
        )
        return {row[0]: self._record(row[1:]) for row in await cursor.fetchall()}

    async def _by_meaning(
        self,
        conn: PostgresConnection,
        query: npt.NDArray[np.float32],
        n: int,
        filters: _Filters,
    ) -> list[tuple[int, float]]:
        """The ``n`` nearest of the scope's vectors (row, cosine similarity), best first."""
        try:
            async with self._cache_lock:
                vectors = await self._cached(conn, filters.scope)
                if vectors is not None:
                    return await asyncio.to_thread(
                        vectors.nearest,
                        query,
                        n,
                        kind=filters.kind,
                        cutoff=filters.cutoff,
                        since=filters.since,
                        until=filters.until,
                        helpers=self._cache.helpers,
                    )
            return await self._nearest_fetched(conn, query, n, filters)
        except DamagedVector as exc:
            raise await self._damaged_vector(conn, exc) from exc

    async def _candidates(
        self,
        conn: PostgresConnection,
        query: npt.NDArray[np.float32],
        request: SearchRequest,
        nearest: Sequence[tuple[int, float]],
        lexical: Sequence[tuple[int, float]],
    ) -> tuple[dict[int, float], list[int], list[int]]:
        """For a fused search, in one query: the cosine similarity of the candidates found by
        words only, the candidates said by someone the query's terms name (their speaker), and
        those said in a period the query names (their ``created_at``).

        Raises:
            DamagedVector: A words-only candidate's vector is damaged.
        """
        near = {row for row, _ in nearest}
        missing = [row for row, _ in lexical if row not in near]
        async with conn.cursor(binary=True) as cursor:
            await cursor.execute(
                self._q(
                    "SELECT row, metadata->>'speaker', created_at, "
                    "CASE WHEN row = ANY(%s) THEN embedding END FROM {memories} WHERE row = ANY(%s)"
                ),
                (missing, [*near, *missing]),
            )
            found = await cursor.fetchall()
        terms, periods = request.terms, request.periods
        named = [row for row, speaker, _, _ in found if names_in(terms, speaker)]
        dated = [row for row, _, said_at, _ in found if said_in(periods, said_at)] if periods else []
        scored = [(row, bytes(vector)) for row, _, _, vector in found if vector is not None]
        if not scored:
            return {}, named, dated
        matrix = vector_matrix([row for row, _ in scored], [vector for _, vector in scored], self.dimensions)
        cosines = np.vecdot(matrix, query)
        similarity = {row: float(cosine) for (row, _), cosine in zip(scored, cosines, strict=True)}
        return similarity, named, dated

    async def _by_words(
        self, conn: PostgresConnection, terms: Sequence[str], n: int, filters: _Filters
    ) -> list[tuple[int, float]]:
        """The ``n`` memories of the scope whose words best match ``terms`` (row,
        ``ts_rank_cd``), best first."""
        cursor = await conn.execute(
            self._q(
                "SELECT row, ts_rank_cd(words, q) AS score "
                "FROM {memories}, to_tsquery('english', %s) AS q "
                f"WHERE words @@ q AND {_FILTERED} ORDER BY score DESC, row LIMIT %s"
            ),
            (tsquery(terms), *filters.params(), n),
        )
        return [(row, float(score)) for row, score in await cursor.fetchall()]

    async def _nearest_fetched(
        self, conn: PostgresConnection, query: npt.NDArray[np.float32], k: int, filters: _Filters
    ) -> list[tuple[int, float]]:
        """The k nearest of the scope's vectors, all fetched (a scope too small for the cache)."""
        async with conn.cursor(binary=True) as cursor:
            await cursor.execute(
                self._q(f"SELECT row, embedding FROM {{memories}} WHERE {_FILTERED}"),
                filters.params(),
            )
            found = await cursor.fetchall()
        if not found:
            return []
        rowids = [row for row, _ in found]
        vectors = [bytes(vector) for _, vector in found]
        joined = b"".join(vectors)
        if len(joined) != 4 * self.dimensions * len(vectors):
            vector_matrix(rowids, vectors, self.dimensions)  # raises DamagedVector naming the row
        matrix = np.frombuffer(joined, dtype=np.float32).reshape(len(vectors), self.dimensions)
        with np.errstate(over="ignore", invalid="ignore"):  # damaged vectors are found below
            scores = np.vecdot(matrix, query)
        if not (np.abs(scores) <= 1.001).all():  # NaN too: a vector not of unit length
            vector_matrix(rowids, vectors, self.dimensions)
        rows = np.array(rowids, dtype=np.int64)
        best = np.argsort(-scores, kind="stable")[:k]
        return [(int(rows[i]), float(scores[i])) for i in best]

    async def _damaged_vector(self, conn: PostgresConnection, exc: DamagedVector) -> CorruptMemoryError:
        """The error for a damaged vector met by a search, naming its memory."""
        cursor = await conn.execute(self._q("SELECT id FROM {memories} WHERE row = %s"), (exc.rowid,))
        found = await cursor.fetchone()
        if found is not None:
            return corrupt_row(self, str(exc), memory_id=str(found[0]))
        return corrupt_row(self, str(exc), row=f"row {exc.rowid}")

    async def _cached(self, conn: PostgresConnection, scope: str) -> ScopeVectors | None:
        """The scope's vectors from the cache, brought up to the snapshot's change counter
        (built if the scope is large enough and missing), or ``None``: fetch them all."""
        if self._cache.max_bytes == 0:
            return None
        cursor = await conn.execute(
            self._q("SELECT id, seq, vectors FROM {scopes} WHERE scope = %s"), (scope,)
        )
        row = await cursor.fetchone()
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
                vectors = await self._load(conn, scope, scope_id, seq)
            elif vectors.seq != seq:
                cursor = await conn.execute(
                    self._q("SELECT seq, row FROM {changes} WHERE scope_id = %s AND seq > %s ORDER BY seq"),
                    (scope_id, vectors.seq),
                )
                changes = await cursor.fetchall()
                if behind(vectors, seq, (logged for logged, _ in changes)):
                    vectors = await self._load(conn, scope, scope_id, seq)
                else:
                    await self._catch_up(conn, scope, vectors, {row for _, row in changes})
                    vectors.seq = seq
        except BaseException:
            self._cache.drop(scope)  # half caught up: never use it again
            raise
        self._cache.keep(scope, vectors)
        return vectors

    async def _load(self, conn: PostgresConnection, scope: str, scope_id: int, seq: int) -> ScopeVectors:
        async with conn.cursor(binary=True) as cursor:
            await cursor.execute(
                self._q(
                    "SELECT row, kind, updated_at, created_at, embedding FROM {memories} "
                    "WHERE scope = %s AND superseded_by IS NULL AND embedding IS NOT NULL"
                ),
                (scope,),
            )
            rows = [
                (row, kind, updated, said, bytes(vector))
                for row, kind, updated, said, vector in await cursor.fetchall()
            ]
        return await asyncio.to_thread(
            ScopeVectors.loaded, scope_id=scope_id, seq=seq, dimensions=self.dimensions, rows=rows
        )

    async def _catch_up(
        self, conn: PostgresConnection, scope: str, vectors: ScopeVectors, rows: set[int]
    ) -> None:
        # The log names what changed, not how: each row's vector is read as it is now (a removed
        # one is gone), so entries apply in any order and more than once alike.
        async with conn.cursor(binary=True) as cursor:
            await cursor.execute(
                self._q(
                    "SELECT row, scope, kind, updated_at, created_at, embedding FROM {memories} "
                    "WHERE row = ANY(%s) AND superseded_by IS NULL AND embedding IS NOT NULL"
                ),
                (list(rows),),
            )
            found = {row[0]: row for row in await cursor.fetchall()}
        for row in rows:
            current = found.get(row)
            if current is None or current[1] != scope:
                vectors.remove(row)
            else:
                vectors.put(row, current[2], current[3], current[4], bytes(current[5]))

    async def current(self, scope: MemoryScope, key: str) -> MemoryRecord | None:
        async def operation(conn: PostgresConnection) -> MemoryRecord | None:
            cursor = await conn.execute(
                self._q(
                    f"SELECT {_COLUMNS} FROM {{memories}} "
                    "WHERE scope = %s AND key = %s AND superseded_by IS NULL"
                ),
                (scope.key, key),
            )
            row = await cursor.fetchone()
            return None if row is None else self._record(row)

        return await self._run(operation)

    async def history(self, scope: MemoryScope, key: str) -> list[MemoryRecord]:
        async def operation(conn: PostgresConnection) -> list[MemoryRecord]:
            cursor = await conn.execute(
                self._q(
                    f"SELECT {_COLUMNS} FROM {{memories}} WHERE scope = %s AND key = %s "
                    "ORDER BY created_at, id"
                ),
                (scope.key, key),
            )
            return [self._record(row) for row in await cursor.fetchall()]

        return await self._run(operation)

    async def following(
        self, scope: MemoryScope, records: Sequence[MemoryRecord], *, limit: int = 1
    ) -> list[list[MemoryRecord]]:
        """See :meth:`MemoryStore.following`: one statement, a range of the index of current
        memories by scope, session and the order they were said per record."""
        check_following(limit)
        asked = [(n, r) for n, r in enumerate(records) if r.source_session_id is not None]
        found: list[list[MemoryRecord]] = [[] for _ in records]
        if not asked:
            return found
        cutoff = cutoff_micros(self)

        async def operation(conn: PostgresConnection) -> list[Sequence[Any]]:
            cursor = await conn.execute(
                self._q(
                    "SELECT h.n, m.* FROM unnest(%s::int[], %s::text[], %s::text[], %s::bigint[], "
                    "%s::bigint[], %s::text[]) AS h(n, session, kind, said, updated, id) "
                    f"CROSS JOIN LATERAL (SELECT {_COLUMNS} FROM {{memories}} AS x WHERE x.scope = %s "
                    "AND x.source_session_id = h.session AND x.created_at >= h.said "
                    'AND (x.created_at, x.updated_at, x.id COLLATE "C") > (h.said, h.updated, h.id) '
                    "AND x.superseded_by IS NULL AND x.kind = h.kind "
                    "AND (%s::bigint IS NULL OR x.updated_at >= %s) "
                    'ORDER BY x.created_at, x.updated_at, x.id COLLATE "C" LIMIT %s) AS m '
                    'ORDER BY h.n, m.created_at, m.updated_at, m.id COLLATE "C"'
                ),
                (
                    [n for n, _ in asked],
                    [r.source_session_id for _, r in asked],
                    [r.kind for _, r in asked],
                    [to_micros(r.created_at) for _, r in asked],
                    [to_micros(r.updated_at or r.created_at) for _, r in asked],
                    [r.id for _, r in asked],
                    scope.key,
                    cutoff,
                    cutoff,
                    limit,
                ),
            )
            return await cursor.fetchall()

        for row in await self._run(operation):
            n: int = row[0]
            found[n].append(self._record(row[1:]))
        return found

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
        cursor's time after its key, then the older ones (two ranges, each in index order), in
        one snapshot with the counts below.

        Expiry is exact without a write: a scope's newest ``updated_at`` is that of its newest
        current memory, unexpired if any of its memories is, so the range stops at the ``ttl``'s
        cut-off; each listed scope's count leaves out its expired current memories, counted in
        the index of current memories by (scope, updated_at) (one statement for the page: one
        step per scope when purges run, one per expired memory otherwise)."""
        check_page(limit, offset)
        low, _ = MemoryScope.tenant_key_range(tenant_id)
        tenant = low[:-1]
        position = None if after is None else read_scope_cursor(after)
        cutoff = cutoff_micros(self)
        floor = -(2**63) if cutoff is None else cutoff
        wanted = limit + offset
        match, matched = ("", []) if not q else (" AND strpos(split_part(scope, chr(31), 2), %s) > 0", [q])
        columns = "SELECT scope, memories, newest FROM {scopes} WHERE tenant = %s"

        async def operation(conn: PostgresConnection) -> list[MemoryScopeSummary]:
            # Only the index gives the page's order without reading the whole range: with no
            # statistics yet (a table just filled) the planner guessed two rows for the range
            # after a cursor and read all 50,000 into a sort (15 ms at 100,000 scopes).
            await conn.execute("SET LOCAL enable_sort = off")
            rows: list[tuple[Any, ...]] = []
            newer = None
            if position is not None:
                newer, key = position
                if newer >= floor:
                    cursor = await conn.execute(
                        self._q(
                            f'{columns} AND newest = %s AND scope COLLATE "C" > %s{match} '
                            'ORDER BY scope COLLATE "C" LIMIT %s'
                        ),
                        [tenant, newer, key, *matched, wanted],
                    )
                    rows = await cursor.fetchall()
            if len(rows) < wanted:
                cursor = await conn.execute(
                    self._q(
                        f"{columns} AND newest >= %s"
                        + ("" if newer is None else " AND newest < %s")
                        + f'{match} ORDER BY newest DESC, scope COLLATE "C" LIMIT %s'
                    ),
                    [tenant, floor, *([] if newer is None else [newer]), *matched, wanted - len(rows)],
                )
                rows += await cursor.fetchall()
            rows = rows[offset:]
            expired: dict[str, int] = {}
            if cutoff is not None and rows:
                cursor = await conn.execute(
                    self._q(
                        "SELECT scope, count(*) FROM {memories} WHERE scope = ANY(%s) "
                        "AND superseded_by IS NULL AND updated_at < %s GROUP BY scope"
                    ),
                    ([row[0] for row in rows], cutoff),
                )
                expired = dict(await cursor.fetchall())
            return [
                scope_summary(self, key, count - expired.get(key, 0), newest) for key, count, newest in rows
            ]

        return await self._run(operation, snapshot=True)

    async def forget(self, *, user_id: str, tenant_id: str | None = None) -> int:
        user_key = MemoryScope(user_id, tenant_id).user_key

        async def operation(conn: PostgresConnection) -> int:
            # The scopes' counters and logs go too: nothing that names the user stays. A scope
            # written again gets a new id, so a cache of the old one (anywhere) is rebuilt.
            commit_by = await self.db.commit_by(conn)
            async with conn.transaction():
                cursor = await conn.execute(
                    self._q("DELETE FROM {memories} WHERE user_key = %s"), (user_key,)
                )
                await conn.execute(
                    self._q(
                        "WITH gone AS (DELETE FROM {scopes} WHERE starts_with(scope, %s) "
                        f"RETURNING id, {COMMIT_BY}) "
                        "DELETE FROM {changes} WHERE scope_id IN (SELECT id FROM gone)"
                    ),
                    (f"{user_key}\x1f", commit_by),
                )
                return cursor.rowcount

        return await self._run(operation)

    async def purge_expired(self) -> int:
        cutoff = cutoff_micros(self)
        if cutoff is None:
            return 0

        async def operation(conn: PostgresConnection) -> int:
            commit_by = await self.db.commit_by(conn)
            async with conn.transaction():
                cursor = await conn.execute(
                    self._q(
                        "DELETE FROM {memories} WHERE updated_at < %s "
                        "RETURNING scope, row, embedding IS NOT NULL, superseded_by IS NULL"
                    ),
                    (cutoff,),
                )
                deleted = await cursor.fetchall()
                removed: defaultdict[str, list[int]] = defaultdict(list)
                current: defaultdict[str, int] = defaultdict(int)
                for scope, row, had_vector, was_current in deleted:
                    if had_vector:
                        removed[scope].append(row)
                    current[scope] += int(was_current)
                for scope in sorted(removed.keys() | current.keys()):  # locked in one order: no deadlock
                    rows = removed[scope]
                    await self._account(conn, scope, rows, -len(rows), -current[scope], commit_by)
                return len(deleted)

        return await self._run(operation)

    async def aclose(self) -> None:
        await self.db.aclose()

    def __repr__(self) -> str:
        return (
            f"PostgresMemoryStore({self.db.address!r}, schema={self.schema!r}, dimensions={self.dimensions})"
        )
