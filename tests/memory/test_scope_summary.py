"""The per-scope summary that ``scopes()`` lists from: after any sequence of writes it says what a
``GROUP BY`` over the memories says, on every store (a property test), and stores written by the
previous layout gain it, with the right counts, when opened."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from agentkeep.errors import SchemaVersionError
from agentkeep.memory import InMemoryMemoryStore, MemoryRecord, MemoryScope, MemoryStore
from agentkeep.memory._sqlite_file import LAYOUT
from agentkeep.memory.base import to_micros
from agentkeep.memory.postgres import MEMORY_LAYOUT, PostgresMemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore
from tests.memory.backend_sqlite import raw_file
from tests.message_stores.backend_postgres import URL, drop_schema, execute, new_schema

DIMENSIONS = 4
TTL = 3_600.0
SCOPES = (
    MemoryScope("ana", tenant_id="t"),
    MemoryScope("ana", tenant_id="t", agent_id="helper"),
    MemoryScope("bo", tenant_id="t"),
    MemoryScope("cy", tenant_id="t::team"),
    MemoryScope("ana"),
)
TENANTS = ("t", "t::team", None)


def record(n: int, *, key: str | None, when: datetime, vector: bool) -> MemoryRecord:
    embedding = [1.0 if i == n % DIMENSIONS else 0.5 for i in range(DIMENSIONS)] if vector else None
    metadata = {"speaker": f"ann{n % 2}"} if n % 3 == 0 else {}  # words a word index also holds
    return MemoryRecord(f"memory {n}", embedding=embedding, key=key, created_at=when, metadata=metadata)


@asynccontextmanager
async def opened(backend: str, *, ttl: float | None = TTL) -> AsyncIterator[MemoryStore]:
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-summary-"))
    schema = new_schema("aksum")
    store: MemoryStore
    if backend == "sqlite":
        store = SQLiteMemoryStore(folder / "memory.db", dimensions=DIMENSIONS, ttl=ttl)
    elif backend == "postgres":
        store = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=DIMENSIONS, ttl=ttl)
    else:
        store = InMemoryMemoryStore(dimensions=DIMENSIONS, ttl=ttl)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)
        if backend == "postgres":
            await drop_schema(schema)


async def expected_listing(store: MemoryStore, tenant: str | None) -> list[tuple[str, int, int]]:
    """The tenant's listing the slow way: every scope's current, unexpired memories, sorted."""
    rows: list[tuple[str, int, int]] = []
    for scope in SCOPES:
        if scope.tenant_id != tenant:
            continue
        live = await store.list_memories(scope)
        if live:
            rows.append((scope.key, len(live), max(to_micros(r.updated_at or r.created_at) for r in live)))
    rows.sort(key=lambda row: (-row[2], row[0]))
    return rows


async def listed(store: MemoryStore, tenant: str | None, *, size: int) -> list[tuple[str, int, int]]:
    """The tenant's listing in pages of ``size`` joined by their cursors."""
    rows: list[tuple[str, int, int]] = []
    after: str | None = None
    for _ in range(len(SCOPES) + 1):
        page = await store.scopes(tenant_id=tenant, limit=size, after=after)
        rows += [(s.scope.key, s.memories, to_micros(s.updated_at)) for s in page]
        if len(page) < size:
            return rows
        after = page[-1].cursor
    raise AssertionError("more pages than scopes")


def sqlite_rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    with raw_file(path) as connection:
        return sorted(connection.execute(query).fetchall())


_SUMMARY = "SELECT scope, memories, newest FROM {} WHERE memories > 0 OR newest IS NOT NULL"
_TRUTH = "SELECT scope, count(*), max(updated_at) FROM {} WHERE superseded_by IS NULL GROUP BY scope"


async def summary_matches_group_by(store: MemoryStore) -> None:
    """The summary rows (SQLite, PostgreSQL) are the GROUP BY over the current memories."""
    if isinstance(store, SQLiteMemoryStore):
        summary = await asyncio.to_thread(sqlite_rows, store.path, _SUMMARY.format("agentkeep_memory_scopes"))
        truth = await asyncio.to_thread(sqlite_rows, store.path, _TRUTH.format("agentkeep_memories"))
    elif isinstance(store, PostgresMemoryStore):
        scopes, memories = (sql.Identifier(store.schema, t) for t in ("memory_scopes", "memories"))
        summary = sorted(await execute(sql.SQL(_SUMMARY).format(scopes)))  # pyright: ignore[reportArgumentType]
        truth = sorted(await execute(sql.SQL(_TRUTH).format(memories)))  # pyright: ignore[reportArgumentType]
    else:
        return
    assert summary == truth


# -- the property ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    name: str
    scope: int = 0
    key: int = 0
    when: int = 0
    old: bool = False
    vector: bool = True
    pick: int = 0


ops = st.one_of(
    st.builds(
        Op,
        name=st.just("add"),
        scope=st.integers(0, len(SCOPES) - 1),
        key=st.integers(0, 2),
        when=st.integers(0, 3),  # few distinct times: ties between scopes
        old=st.booleans(),
        vector=st.booleans(),
    ),
    st.builds(Op, name=st.sampled_from(["update", "touch", "delete"]), pick=st.integers(0, 60)),
    st.builds(Op, name=st.sampled_from(["forget", "purge"]), scope=st.integers(0, len(SCOPES) - 1)),
)


async def apply(op: Op, store: MemoryStore, added: list[tuple[MemoryScope, str]], start: datetime) -> None:
    if op.name == "add":
        # a few fixed times before the run's start (ties between scopes), or long expired ones
        when = start - timedelta(seconds=op.when + (2 * TTL if op.old else 0))
        key = None if op.key == 0 else f"k{op.key}"
        scope = SCOPES[op.scope]
        stored = await store.add(scope, record(len(added), key=key, when=when, vector=op.vector))
        added.append((scope, stored.id))
    elif op.name == "purge":
        await store.purge_expired()
    elif op.name == "forget":
        scope = SCOPES[op.scope]
        await store.forget(user_id=scope.user_id, tenant_id=scope.tenant_id)
    elif added:
        scope, memory_id = added[op.pick % len(added)]
        if op.name == "delete":
            await store.delete(scope, memory_id)
            return
        vector = [0.5] * DIMENSIONS
        try:
            if op.name == "update":
                await store.update(scope, memory_id, text="moved", embedding=vector)
            else:
                context = f"bo: asked{op.pick % 3}"
                await store.update(scope, memory_id, metadata={"touched": True, "context": context})
        except LookupError:
            pass  # superseded or gone


async def summary_after(sequence: list[Op], backend: str) -> None:
    async with opened(backend) as store:
        added: list[tuple[MemoryScope, str]] = []
        start = datetime.now(UTC)
        for op in sequence:
            await apply(op, store, added, start)
            await summary_matches_group_by(store)
            for tenant in TENANTS:
                expected = await expected_listing(store, tenant)
                assert await listed(store, tenant, size=2) == expected
                whole = await store.scopes(tenant_id=tenant, limit=100)
                assert [(s.scope.key, s.memories, to_micros(s.updated_at)) for s in whole] == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(ops, min_size=1, max_size=25))
def test_the_sqlite_summary_is_the_group_by_after_any_writes(sequence: list[Op]) -> None:
    asyncio.run(summary_after(sequence, "sqlite"))


@settings(max_examples=40, deadline=None)
@given(st.lists(ops, min_size=1, max_size=25))
def test_the_in_process_listing_is_the_group_by_after_any_writes(sequence: list[Op]) -> None:
    asyncio.run(summary_after(sequence, "memory"))


@pytest.mark.postgres
@settings(max_examples=12, deadline=None)
@given(st.lists(ops, min_size=1, max_size=15))
def test_the_postgres_summary_is_the_group_by_after_any_writes(sequence: list[Op]) -> None:
    asyncio.run(summary_after(sequence, "postgres"))


# -- stores written by the previous layout ---------------------------------------------------------
async def fill(store: MemoryStore) -> None:
    """Memories of every sort: keyed and superseded, without a vector, expired, in three tenants."""
    now = datetime.now(UTC)
    for n, scope in enumerate(SCOPES):
        for m in range(n + 1):
            await store.add(
                scope, record(m, key=None, when=now - timedelta(minutes=n + m), vector=m % 2 == 0)
            )
    await store.add(SCOPES[0], record(10, key="city", when=now - timedelta(minutes=30), vector=True))
    await store.add(SCOPES[0], record(11, key="city", when=now - timedelta(minutes=1), vector=True))
    await store.add(SCOPES[2], record(12, key=None, when=now - timedelta(seconds=3 * TTL), vector=True))
    await store.add(
        MemoryScope("old", tenant_id="t"), record(13, key=None, when=now - timedelta(days=1), vector=False)
    )


def downgrade_sqlite_to_layout_2(path: Path) -> None:
    """Make ``path`` a file as the previous layout left it (no summary columns or indexes; a
    row in the scopes table only for scopes whose vectors were logged)."""
    with raw_file(path) as connection:
        connection.execute("DROP INDEX agentkeep_memory_scopes_listing")
        connection.execute("DROP INDEX agentkeep_memories_current")
        connection.execute("DROP TABLE agentkeep_memory_words")  # layout 4's
        connection.execute("DROP INDEX agentkeep_memories_said")
        connection.execute("DROP INDEX agentkeep_memories_session")
        connection.execute("DELETE FROM agentkeep_memory_scopes WHERE seq = 0")
        for column in ("tenant", "memories", "newest"):
            connection.execute(f"ALTER TABLE agentkeep_memory_scopes DROP COLUMN {column}")
        connection.execute("UPDATE agentkeep_memory_meta SET value = '2' WHERE name = 'layout'")


async def test_a_sqlite_file_of_layout_2_gains_the_summary_with_the_right_counts() -> None:
    assert LAYOUT == 6
    async with opened("sqlite") as old:
        assert isinstance(old, SQLiteMemoryStore)
        await fill(old)
        before = {tenant: await expected_listing(old, tenant) for tenant in TENANTS}
        await old.aclose()
        await asyncio.to_thread(downgrade_sqlite_to_layout_2, old.path)
        columns = await asyncio.to_thread(
            sqlite_rows, old.path, "SELECT name FROM pragma_table_info('agentkeep_memory_scopes')"
        )
        assert ("newest",) not in columns
        upgraded = SQLiteMemoryStore(old.path, dimensions=DIMENSIONS, ttl=TTL)
        try:
            for tenant in TENANTS:
                assert await listed(upgraded, tenant, size=2) == before[tenant]
            await summary_matches_group_by(upgraded)
            layout = await asyncio.to_thread(
                sqlite_rows, old.path, "SELECT value FROM agentkeep_memory_meta WHERE name = 'layout'"
            )
            assert layout == [("6",)]
            await upgraded.add(SCOPES[1], record(20, key=None, when=datetime.now(UTC), vector=True))
            assert (await upgraded.scopes(tenant_id="t", limit=1))[0].scope == SCOPES[1]
            await summary_matches_group_by(upgraded)
        finally:
            await upgraded.aclose()


async def test_a_sqlite_file_of_a_newer_layout_is_refused() -> None:
    async with opened("sqlite") as store:
        assert isinstance(store, SQLiteMemoryStore)
        await store.add(SCOPES[0], record(0, key=None, when=datetime.now(UTC), vector=True))
        await store.aclose()
        connection = apsw.Connection(str(store.path))
        try:
            connection.execute(
                "UPDATE agentkeep_memory_meta SET value = ? WHERE name = 'layout'", (str(LAYOUT + 1),)
            )
        finally:
            connection.close()
        newer = SQLiteMemoryStore(store.path, dimensions=DIMENSIONS)
        try:
            with pytest.raises(SchemaVersionError, match="newer layout"):
                await newer.setup()
        finally:
            await newer.aclose()


@pytest.mark.postgres
async def test_a_postgres_schema_of_layout_2_gains_the_summary_with_the_right_counts() -> None:
    assert MEMORY_LAYOUT == 7
    async with opened("postgres") as old:
        assert isinstance(old, PostgresMemoryStore)
        await fill(old)
        before = {tenant: await expected_listing(old, tenant) for tenant in TENANTS}
        scopes, meta = (sql.Identifier(old.schema, table) for table in ("memory_scopes", "memory_meta"))
        await execute(sql.SQL("DROP TRIGGER commit_by ON {}").format(scopes))  # layout 4's
        for index in ("memory_scopes_listing", "memories_current"):
            await execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(old.schema, index)))
        await execute(sql.SQL("DELETE FROM {} WHERE seq = 0").format(scopes))
        await execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN tenant, DROP COLUMN memories, DROP COLUMN newest").format(
                scopes
            )
        )
        await execute(sql.SQL("UPDATE {} SET value = '2' WHERE name = 'layout'").format(meta))
        upgraded = PostgresMemoryStore.from_url(URL, schema=old.schema, dimensions=DIMENSIONS, ttl=TTL)
        try:
            await upgraded.setup()
            for tenant in TENANTS:
                assert await listed(upgraded, tenant, size=2) == before[tenant]
            await summary_matches_group_by(upgraded)
            recorded = await execute(sql.SQL("SELECT value FROM {} WHERE name = 'layout'").format(meta))
            assert recorded == [("7",)]
            await upgraded.add(SCOPES[1], record(20, key=None, when=datetime.now(UTC), vector=True))
            assert (await upgraded.scopes(tenant_id="t", limit=1))[0].scope == SCOPES[1]
            await summary_matches_group_by(upgraded)
        finally:
            await upgraded.aclose()
