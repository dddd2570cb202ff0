"""Memories in PostgreSQL: :class:`PostgresMemoryStore`.

No vector extension is assumed (this project's machine has none: no pgvector package), so the
search is honest brute force where it is cheapest: the records live in a table (``bytea``
embeddings, float32), a search fetches the current vectors of its one scope through a binary
cursor (an index on the scope reads only those rows) and scores them with numpy, and the ``k``
best records are read back. Cost grows with the size of the *scope*, not of the table: measured
on 2 cores about 20 ms for 10,000 vectors of one user and 160 ms for 100,000; a user with a few
thousand memories in a table of millions searches in a few milliseconds.

The tables live in the schema of the message store (``agentkeep`` by default) and are created by
:meth:`~PostgresMemoryStore.setup`. Needs psycopg 3 (extra ``[postgres]``) and numpy (extra
``[memory]``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, cast

try:
    import numpy as np
    import psycopg
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the PostgreSQL memory store needs psycopg and numpy: pip install 'agentkeep[postgres]' "
        "and pip install 'agentkeep[memory]'"
    ) from exc

from .._db.postgres import DEFAULT_SCHEMA, PostgresConnection, PostgresDatabase, PostgresPool
from ..errors import ConflictError, MemoryFormatError
from .base import NO_CURRENT, MemoryStore, normalized
from .records import MemoryHit, MemoryRecord, MemoryScope, MemoryScopeSummary, check_embedding

__all__ = ["PostgresMemoryStore"]

T = TypeVar("T")
_COLUMNS: Final = "id, key, kind, text, source_session_id, metadata, created_at, updated_at, superseded_by"
_ATTEMPTS: Final = 5


def _micros(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def _record(row: Sequence[Any]) -> MemoryRecord:
    memory_id, key, kind, text, source, metadata, created, updated, superseded = row
    return MemoryRecord(
        text,
        key=key,
        kind=kind,
        source_session_id=source,
        metadata=cast("dict[str, Any]", metadata if isinstance(metadata, dict) else json.loads(metadata)),
        id=memory_id,
        created_at=datetime.fromtimestamp(created / 1_000_000, UTC),
        updated_at=datetime.fromtimestamp(updated / 1_000_000, UTC),
        superseded_by=superseded,
    )


class PostgresMemoryStore(MemoryStore):
    """Memories in PostgreSQL (see the module docs).

    Args:
        url: A connection URL (a pool is made and owned), or
        pool: an ``AsyncConnectionPool`` of the caller's.
        schema: The schema (the message store's default: ``agentkeep``).
        dimensions: The length of every embedding (fixed for the schema once written).
        ttl: Seconds after its last update at which a memory expires.
        timeout: Seconds to wait for a connection and for each operation.
    """

    backend = "postgres"

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: PostgresPool | None = None,
        schema: str = DEFAULT_SCHEMA,
        dimensions: int,
        ttl: float | None = None,
        timeout: float = 5.0,
    ) -> None:
        super().__init__(dimensions=dimensions, ttl=ttl)
        self.db = PostgresDatabase(pool, url=url, schema=schema, timeout=timeout)
        self.schema = schema
        self._table = sql.Identifier(schema, "memories")
        self._meta = sql.Identifier(schema, "memory_meta")
        self._ready = False

    def _q(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(memories=self._table, meta=self._meta)  # pyright: ignore[reportArgumentType]

    async def _run(self, operation: Callable[[PostgresConnection], Any]) -> Any:
        if not self._ready:
            await self.setup()
        return await self.db.run(operation)

    async def setup(self) -> None:
        await self.db.setup()
        if self._ready:
            return

        async def create(conn: PostgresConnection) -> None:
            async with conn.transaction():
                await conn.execute(
                    sql.SQL("SELECT pg_advisory_xact_lock(hashtext({}))").format(
                        sql.Literal(f"agentkeep-memory:{self.schema}")
                    )
                )
                await conn.execute(
                    self._q("CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value text NOT NULL)")
                )
                await conn.execute(
                    self._q(
                        "CREATE TABLE IF NOT EXISTS {memories} ("
                        "row bigserial PRIMARY KEY, id text NOT NULL, scope text NOT NULL, "
                        "user_key text NOT NULL, "
                        "key text, kind text NOT NULL, text text NOT NULL, source_session_id text, "
                        "metadata jsonb NOT NULL, created_at bigint NOT NULL, updated_at bigint NOT NULL, "
                        "superseded_by text, embedding bytea, UNIQUE (scope, id))"
                    )
                )
                for index in (
                    "CREATE UNIQUE INDEX IF NOT EXISTS memories_current_key ON {memories} (scope, key) "
                    "WHERE key IS NOT NULL AND superseded_by IS NULL",
                    "CREATE INDEX IF NOT EXISTS memories_scope ON {memories} (scope, updated_at)",
                    "CREATE INDEX IF NOT EXISTS memories_user ON {memories} (user_key)",
                    # byte order, whatever the database's collation: a tenant's scopes are a range
                    'CREATE INDEX IF NOT EXISTS memories_scope_bytes ON {memories} (scope COLLATE "C")',
                ):
                    await conn.execute(self._q(index))
                await conn.execute(
                    self._q(
                        "INSERT INTO {meta} (name, value) VALUES ('dimensions', %s) ON CONFLICT DO NOTHING"
                    ),
                    (str(self.dimensions),),
                )
                cursor = await conn.execute(self._q("SELECT value FROM {meta} WHERE name = 'dimensions'"))
                (found,) = await cursor.fetchone() or (str(self.dimensions),)
                if int(found) != self.dimensions:
                    raise MemoryFormatError(
                        f"schema {self.schema!r} holds {found}-dimension embeddings, not {self.dimensions}"
                    )

        await self.db.run(create)
        self._ready = True

    def _cutoff(self) -> int | None:
        cutoff = self.expired_before()
        return None if cutoff is None else _micros(cutoff)

    async def add(
        self, scope: MemoryScope, record: MemoryRecord, *, replaces: str | None = None
    ) -> MemoryRecord:
        self.check_replaces(record, replaces)
        embedding = self.checked(record)
        vector = None if embedding is None else np.asarray(embedding, dtype=np.float32).tobytes()
        updated = _micros(record.updated_at or record.created_at)

        async def operation(conn: PostgresConnection) -> None:
            for _ in range(_ATTEMPTS):
                try:
                    async with conn.transaction():
                        await self._add(conn, scope, record, replaces, vector, updated)
                    return
                except psycopg.errors.UniqueViolation as exc:
                    if exc.diag.constraint_name != "memories_current_key":
                        raise MemoryFormatError(f"memory {record.id!r} already exists") from exc
                    if replaces is not None:  # a concurrent first write of the key won
                        raise self.conflict(scope, record, replaces, None) from exc
            raise ConflictError(
                f"memory {record.key!r} of {scope} kept changing",
                backend=self.backend,
                conversation_id=scope.key,
            )

        await self._run(operation)
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

    async def _add(
        self,
        conn: PostgresConnection,
        scope: MemoryScope,
        record: MemoryRecord,
        replaces: str | None,
        vector: bytes | None,
        updated: int,
    ) -> None:
        if record.key is not None:
            # Writers of one key take turns (a lock for the transaction), so two first writes of a
            # key never race to insert; the unique index is the last guard.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{scope.key}\x1f{record.key}",)
            )
            cursor = await conn.execute(
                self._q(
                    "SELECT row, id FROM {memories} "
                    "WHERE scope = %s AND key = %s AND superseded_by IS NULL FOR UPDATE"
                ),
                (scope.key, record.key),
            )
            current = await cursor.fetchall()
            expected = [] if replaces == NO_CURRENT else [replaces]
            if replaces is not None and [row[1] for row in current] != expected:
                raise self.conflict(scope, record, replaces, current[0][1] if current else None)
            for row, _ in current:
                await conn.execute(
                    self._q("UPDATE {memories} SET superseded_by = %s, embedding = NULL WHERE row = %s"),
                    (record.id, row),
                )
        await conn.execute(
            self._q(
                "INSERT INTO {memories} (id, scope, user_key, key, kind, text, source_session_id, metadata, "
                "created_at, updated_at, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
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
                _micros(record.created_at),
                updated,
                vector,
            ),
        )

    async def get(self, scope: MemoryScope, memory_id: str) -> MemoryRecord | None:
        async def operation(conn: PostgresConnection) -> MemoryRecord | None:
            cursor = await conn.execute(
                self._q(f"SELECT {_COLUMNS} FROM {{memories}} WHERE scope = %s AND id = %s"),
                (scope.key, memory_id),
            )
            row = await cursor.fetchone()
            return None if row is None else _record(row)

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
        vector = self.update_vector(text, embedding)

        async def operation(conn: PostgresConnection) -> MemoryRecord:
            async with conn.transaction():
                cursor = await conn.execute(
                    self._q(
                        f"SELECT {_COLUMNS} FROM {{memories}} WHERE scope = %s AND id = %s "
                        "AND superseded_by IS NULL FOR UPDATE"
                    ),
                    (scope.key, memory_id),
                )
                row = await cursor.fetchone()
                if row is None:
                    raise LookupError(f"no current memory {memory_id!r} in {scope}")
                old = _record(row)
                changed = self.updated(old, text=text, vector=vector, metadata=metadata)
                await conn.execute(
                    self._q(
                        "UPDATE {memories} SET text = %s, metadata = %s, updated_at = %s, "
                        "embedding = coalesce(%s, embedding) WHERE scope = %s AND id = %s"
                    ),
                    (
                        changed.text,
                        json.dumps(changed.metadata),
                        _micros(changed.updated_at or changed.created_at),
                        None if vector is None else np.asarray(vector, dtype=np.float32).tobytes(),
                        scope.key,
                        memory_id,
                    ),
                )
                return changed

        return await self._run(operation)

    async def delete(self, scope: MemoryScope, memory_id: str) -> bool:
        async def operation(conn: PostgresConnection) -> bool:
            cursor = await conn.execute(
                self._q("DELETE FROM {memories} WHERE scope = %s AND id = %s"), (scope.key, memory_id)
            )
            return cursor.rowcount > 0

        return await self._run(operation)

    async def list_memories(
        self, scope: MemoryScope, *, kind: str | None = None, limit: int | None = None
    ) -> list[MemoryRecord]:
        cutoff = self._cutoff()

        async def operation(conn: PostgresConnection) -> list[MemoryRecord]:
            cursor = await conn.execute(
                self._q(
                    f"SELECT {_COLUMNS} FROM {{memories}} WHERE scope = %s AND superseded_by IS NULL "
                    "AND (%s::text IS NULL OR kind = %s) AND (%s::bigint IS NULL OR updated_at >= %s) "
                    "ORDER BY updated_at DESC, id DESC LIMIT %s"
                ),
                (scope.key, kind, kind, cutoff, cutoff, limit),
            )
            return [_record(row) for row in await cursor.fetchall()]

        return await self._run(operation)

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
        query = np.asarray(normalized(check_embedding(embedding, self.dimensions)), dtype=np.float32)
        cutoff = self._cutoff()

        async def operation(conn: PostgresConnection) -> list[MemoryHit]:
            async with conn.transaction():  # one snapshot for the vectors and their records
                async with conn.cursor(binary=True) as cursor:
                    await cursor.execute(
                        self._q(
                            "SELECT row, embedding FROM {memories} "
                            "WHERE scope = %s AND superseded_by IS NULL "
                            "AND embedding IS NOT NULL AND (%s::text IS NULL OR kind = %s) "
                            "AND (%s::bigint IS NULL OR updated_at >= %s)"
                        ),
                        (scope.key, kind, kind, cutoff, cutoff),
                    )
                    found = await cursor.fetchall()
                if not found:
                    return []
                rows = np.array([row for row, _ in found], dtype=np.int64)
                matrix = np.frombuffer(b"".join(bytes(vector) for _, vector in found), dtype=np.float32)
                scores = matrix.reshape(len(found), self.dimensions) @ query
                best = np.argsort(-scores, kind="stable")[:k]
                chosen = {int(rows[i]): float(scores[i]) for i in best}
                cursor = await conn.execute(
                    self._q(f"SELECT row, {_COLUMNS} FROM {{memories}} WHERE row = ANY(%s) AND scope = %s"),
                    (list(chosen), scope.key),
                )
                records = {row[0]: _record(row[1:]) for row in await cursor.fetchall()}
            hits = [MemoryHit(records[row], score) for row, score in chosen.items() if row in records]
            hits.sort(key=lambda hit: (-hit.score, hit.record.id))
            return [hit for hit in hits if min_score is None or hit.score >= min_score]

        return await self._run(operation)

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
            return None if row is None else _record(row)

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
            return [_record(row) for row in await cursor.fetchall()]

        return await self._run(operation)

    async def scopes(
        self, *, tenant_id: str | None, q: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[MemoryScopeSummary]:
        self.check_page(limit, offset)
        prefix = MemoryScope.tenant_prefix(tenant_id)
        cutoff = self._cutoff()
        # a range in byte order (the index on scope COLLATE "C"): the separator is the last
        # character before " ", so every key of the tenant sorts below prefix[:-1] + " "
        query = 'SELECT scope, count(*), max(updated_at) FROM {memories} WHERE scope COLLATE "C" > %s '
        query += 'AND scope COLLATE "C" < %s AND superseded_by IS NULL'
        args: list[Any] = [prefix, prefix[:-1] + " "]
        if q:
            query += " AND strpos(substr(user_key, %s), %s) > 0"
            args += [len(prefix) + 1, q]
        if cutoff is not None:
            query += " AND updated_at >= %s"
            args.append(cutoff)
        query += ' GROUP BY scope ORDER BY max(updated_at) DESC, scope COLLATE "C" LIMIT %s OFFSET %s'
        args += [limit, offset]

        async def operation(conn: PostgresConnection) -> list[MemoryScopeSummary]:
            cursor = await conn.execute(self._q(query), args)
            rows = await cursor.fetchall()
            return [
                MemoryScopeSummary(
                    MemoryScope.from_key(key), int(count), datetime.fromtimestamp(newest / 1_000_000, UTC)
                )
                for key, count, newest in rows
            ]

        return await self._run(operation)

    async def forget(self, *, user_id: str, tenant_id: str | None = None) -> int:
        user_key = MemoryScope(user_id, tenant_id).user_key
        return await self._delete("user_key = %s", user_key)

    async def purge_expired(self) -> int:
        cutoff = self._cutoff()
        return 0 if cutoff is None else await self._delete("updated_at < %s", cutoff)

    async def _delete(self, condition: str, value: Any) -> int:
        async def operation(conn: PostgresConnection) -> int:
            cursor = await conn.execute(self._q(f"DELETE FROM {{memories}} WHERE {condition}"), (value,))
            return cursor.rowcount

        return await self._run(operation)

    async def aclose(self) -> None:
        await self.db.aclose()

    def __repr__(self) -> str:
        return (
            f"PostgresMemoryStore({self.db.address!r}, schema={self.schema!r}, dimensions={self.dimensions})"
        )
