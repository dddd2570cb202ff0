"""Every memory store opens from its URL (``X.from_url``) and finds what it keeps there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool

from agentkeep import StoreURLError
from agentkeep.memory import InMemoryMemoryStore, MemoryRecord, MemoryScope, MemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from tests.message_stores.backend_postgres import URL as POSTGRES_URL
from tests.message_stores.backend_postgres import drop_schema, new_schema


async def _add_and_find(store: MemoryStore) -> list[str]:
    scope = MemoryScope("ada")
    async with asyncio.timeout(30):
        await store.setup()
        await store.add(scope, MemoryRecord("likes tea", embedding=[1.0, 0.0, 0.0, 0.0]))
        await store.add(scope, MemoryRecord("owns a cat", embedding=[0.0, 1.0, 0.0, 0.0]))
        hits = await store.search(scope, [0.9, 0.1, 0.0, 0.0], k=1)
    return [hit.record.text for hit in hits]


async def test_sqlite_from_url_opens_the_file_it_names(tmp_path: Path) -> None:
    store = SQLiteMemoryStore.from_url(f"sqlite://{tmp_path}/m.db", dimensions=4, ttl=60, timeout=2.0)
    try:
        assert (store.path, store.dimensions, store.ttl, store.timeout) == (tmp_path / "m.db", 4, 60, 2.0)
        assert await _add_and_find(store) == ["likes tea"]
    finally:
        await store.aclose()


def test_sqlite_from_url_without_a_path_is_the_default_file() -> None:
    assert SQLiteMemoryStore.from_url("sqlite://", dimensions=4).path == SQLiteMessageStore().path


async def test_memory_from_url_is_a_new_empty_store() -> None:
    store = InMemoryMemoryStore.from_url("memory://", dimensions=4, ttl=30)
    assert (store.dimensions, store.ttl) == (4, 30)
    assert await _add_and_find(store) == ["likes tea"]


async def test_postgres_from_url_owns_its_pool_and_a_pool_can_be_given_first() -> None:
    schema = new_schema("akmemurl")
    store = PostgresMemoryStore.from_url(POSTGRES_URL, schema=schema, dimensions=4)
    pool = AsyncConnectionPool(POSTGRES_URL, open=False, min_size=1, max_size=2)
    try:
        assert (store.schema, store.dimensions) == (schema, 4)
        assert await _add_and_find(store) == ["likes tea"]
        await pool.open()
        on_pool = PostgresMemoryStore(pool, schema=schema, dimensions=4)
        async with asyncio.timeout(30):
            [record] = await on_pool.list_memories(MemoryScope("ada"), limit=1)
        assert record.text == "owns a cat"  # newest first
        await on_pool.aclose()
        assert not pool.closed  # a pool of the caller's stays open
    finally:
        await store.aclose()
        await pool.close()
        await drop_schema(schema)


@pytest.mark.parametrize("bad", ["sqlite:///m.db?mode=ro", "postgresql://h/db"])
def test_sqlite_from_url_refuses_another_form(bad: str) -> None:
    with pytest.raises(StoreURLError):
        SQLiteMemoryStore.from_url(bad, dimensions=4)


def test_memory_from_url_refuses_a_place() -> None:
    with pytest.raises(StoreURLError):
        InMemoryMemoryStore.from_url("memory://here", dimensions=4)
