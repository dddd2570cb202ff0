"""Properties of the durable memory stores over damaged rows: whatever value lands in a stored
memory's column (written to the backend directly, as a bug elsewhere or an adversary with write
access would), every read either returns well-formed records and finite scores or raises
``CorruptMemoryError`` naming the store and the memory; never another error, never bad data.

The conformance suite checks the named damages on every backend; these draw the values at random.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import apsw
import psycopg
import psycopg.types.json
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from agentkeep.errors import CorruptMemoryError
from agentkeep.memory import MemoryHit, MemoryRecord, MemoryScope
from agentkeep.memory.base import MemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore
from tests.memory import backend_postgres, backend_sqlite, backend_sqlite_cached
from tests.message_stores.backend_postgres import URL

DIMENSIONS = 8
SCOPE = MemoryScope("ana", tenant_id="t")

anything = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.sampled_from(["{}", '{"a": 1}', "[1]", "null", "NaN", '{"a": NaN}', "", " "]),
)
"""What SQLite's dynamically typed columns can be made to hold."""

SQLITE_COLUMNS = ("text", "key", "kind", "source_session_id", "metadata", "created_at", "updated_at")

postgres_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12)
"""What a PostgreSQL text (or jsonb string) can hold: no NUL, no lone surrogate."""
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | postgres_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(postgres_text, inner, max_size=3),
    max_leaves=6,
)
"""What a jsonb column can hold."""
postgres_damage = st.one_of(
    st.tuples(st.just("metadata"), json_values.map(psycopg.types.json.Jsonb)),
    st.tuples(st.sampled_from(["created_at", "updated_at"]), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.sampled_from(["text", "kind", "key"]), postgres_text),
    st.tuples(st.just("embedding"), st.binary(max_size=40)),
)


def well_formed(record: MemoryRecord) -> None:
    assert type(record.text) is str
    assert record.text.strip()
    assert type(record.metadata) is dict
    assert isinstance(record.created_at, datetime)
    assert isinstance(record.updated_at, datetime)
    assert type(record.id) is str
    assert type(record.kind) is str


async def every_read(store: MemoryStore, memory_id: str) -> None:
    """Each read returns well-formed data or raises CorruptMemoryError naming ``memory_id``."""
    reads: list[Callable[[], Awaitable[Any]]] = [
        lambda: store.get(SCOPE, memory_id),
        lambda: store.list_memories(SCOPE),
        lambda: store.search(SCOPE, [1.0] + [0.0] * (DIMENSIONS - 1), k=5),
        lambda: store.history(SCOPE, "topic"),
        lambda: store.current(SCOPE, "topic"),
    ]
    for read in reads:
        try:
            found = await read()
        except CorruptMemoryError as error:
            named = (error.store, error.memory_id)
            found = None
        else:
            named = (store.location, memory_id)
        assert named == (store.location, memory_id)
        for item in found if isinstance(found, list) else [found]:
            if isinstance(item, MemoryHit):
                assert math.isfinite(item.score)
                item = item.record
            if item is not None:
                well_formed(item)
    try:
        summaries = await store.scopes(tenant_id=SCOPE.tenant_id)
    except CorruptMemoryError as error:
        named = (error.store, error.row)
        summaries = []
    else:
        named = (store.location, f"scope {SCOPE.key!r}")
    assert named == (store.location, f"scope {SCOPE.key!r}")
    assert all(isinstance(summary.updated_at, datetime) for summary in summaries)


async def damaged_memory(store: MemoryStore) -> str:
    await store.add(SCOPE, MemoryRecord("Ana drinks tea.", embedding=[0.0, 1.0] + [0.0] * (DIMENSIONS - 2)))
    record = await store.add(
        SCOPE, MemoryRecord("Ana lives in Lisbon.", embedding=[1.0] + [0.0] * (DIMENSIONS - 1), key="topic")
    )
    return record.id


def write_sqlite(store: SQLiteMemoryStore, statement: str, args: tuple[object, ...]) -> bool:
    with backend_sqlite.raw_file(store.path) as connection:
        try:
            connection.execute(statement, args)
        except apsw.ConstraintError:
            return False  # a value the column refuses (NOT NULL): nothing was damaged
    return True


@settings(max_examples=60, deadline=None)
@given(column=st.sampled_from(SQLITE_COLUMNS), value=anything, cached=st.booleans())
def test_sqlite_rows_damaged_at_random(column: str, value: object, cached: bool) -> None:
    async def run() -> None:
        module = backend_sqlite_cached if cached else backend_sqlite
        async with module.open_store(dimensions=DIMENSIONS) as store:
            memory_id = await damaged_memory(store)
            statement = f"UPDATE agentkeep_memories SET {column} = ? WHERE id = ?"
            if await asyncio.to_thread(write_sqlite, store, statement, (value, memory_id)):
                await every_read(store, memory_id)

    asyncio.run(run())


@settings(max_examples=40, deadline=None)
@given(vector=st.binary(min_size=4 * DIMENSIONS, max_size=4 * DIMENSIONS), cached=st.booleans())
def test_sqlite_vectors_damaged_at_random(vector: bytes, cached: bool) -> None:
    async def run() -> None:
        module = backend_sqlite_cached if cached else backend_sqlite
        async with module.open_store(dimensions=DIMENSIONS) as store:
            memory_id = await damaged_memory(store)
            statement = (
                "UPDATE agentkeep_memory_vectors SET embedding = ? "
                "WHERE memory_rowid = (SELECT rowid FROM agentkeep_memories WHERE id = ?)"
            )
            await asyncio.to_thread(write_sqlite, store, statement, (vector, memory_id))
            await every_read(store, memory_id)

    asyncio.run(run())


@settings(max_examples=40, deadline=None)
@given(damage=postgres_damage, cache=st.booleans())
def test_postgres_rows_damaged_at_random(damage: tuple[str, object], cache: bool) -> None:
    async def run() -> None:
        async with backend_postgres.open_store(dimensions=DIMENSIONS) as opened:
            store = opened
            if cache:
                store = PostgresMemoryStore.from_url(
                    URL, schema=opened.schema, dimensions=DIMENSIONS, cache_min_vectors=1
                )
            try:
                memory_id = await damaged_memory(store)
                column, value = damage
                async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
                    await conn.execute(
                        sql.SQL("UPDATE {} SET {} = %s WHERE id = %s").format(
                            sql.Identifier(opened.schema, "memories"), sql.Identifier(column)
                        ),
                        (value, memory_id),
                    )
                await every_read(store, memory_id)
            finally:
                if store is not opened:
                    await store.aclose()

    asyncio.run(run())
