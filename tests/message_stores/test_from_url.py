"""Every message store opens from its URL (``X.from_url``) and works there, on the real backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool

from agentkeep import Message, StorageClosedError, StoreURLError
from agentkeep.message_stores import InMemoryMessageStore, MessageStore, close_store
from agentkeep.message_stores.postgres import PostgresHistoryProvider, PostgresMessageStore
from agentkeep.message_stores.redis import RedisMessageStore
from agentkeep.message_stores.sqlite import SQLiteHistoryProvider, SQLiteMessageStore
from tests.message_stores.backend_postgres import URL as POSTGRES_URL
from tests.message_stores.backend_postgres import drop_schema, new_schema
from tests.message_stores.backend_redis import REDIS_URL, delete_prefix, unique_prefix


async def _append_and_read(store: MessageStore) -> list[str]:
    async with asyncio.timeout(30):
        assert await store.append("c", [Message("user", ["one"]), Message("user", ["two"])]) == [1, 2]
        return [entry.message.text for entry in (await store.read("c")).entries]


async def test_sqlite_from_url_opens_the_file_it_names(tmp_path: Path) -> None:
    store = SQLiteMessageStore.from_url(f"sqlite://{tmp_path}/h.db", max_messages=5, ttl=60, timeout=2.0)
    try:
        assert (store.path, store.max_messages, store.ttl, store.database.timeout) == (
            tmp_path / "h.db",
            5,
            60,
            2.0,
        )
        assert await _append_and_read(store) == ["one", "two"]
    finally:
        await store.aclose()
    again = SQLiteMessageStore(tmp_path / "h.db")  # the constructor on the same file reads it
    try:
        async with asyncio.timeout(30):
            assert [e.message.text for e in (await again.read("c")).entries] == ["one", "two"]
    finally:
        await again.aclose()


def test_sqlite_from_url_without_a_path_is_the_default_file() -> None:
    assert SQLiteMessageStore.from_url("sqlite://").path == SQLiteMessageStore().path


async def test_a_sqlite_history_provider_from_url_owns_its_store(tmp_path: Path) -> None:
    provider = SQLiteHistoryProvider.from_url(f"sqlite://{tmp_path}/p.db", load_limit=5, source_id="db")
    assert (provider.path, provider.load_limit, provider.source_id) == (tmp_path / "p.db", 5, "db")
    try:
        assert await _append_and_read(provider.store) == ["one", "two"]
    finally:
        await provider.aclose()
    with pytest.raises(StorageClosedError):  # the provider closed the store it opened
        await provider.store.read("c")


@pytest.mark.parametrize(
    ("opener", "bad"),
    [
        (SQLiteMessageStore.from_url, "sqlite:///x.db?mode=ro"),
        (SQLiteMessageStore.from_url, "file:///x.db"),
        (InMemoryMessageStore.from_url, "memory://somewhere"),
        (InMemoryMessageStore.from_url, "sqlite://"),
    ],
)
def test_a_url_of_another_form_is_refused(opener: Callable[[str], MessageStore], bad: str) -> None:
    with pytest.raises(StoreURLError):
        opener(bad)


async def test_memory_from_url_is_a_new_empty_store() -> None:
    store = InMemoryMessageStore.from_url("memory://", max_messages=1)
    assert store.max_messages == 1
    assert await _append_and_read(store) == ["two"]


async def test_server_stores_from_url_own_what_they_open() -> None:
    prefix, schema = unique_prefix("fromurl"), new_schema("akfromurl")
    redis = RedisMessageStore.from_url(REDIS_URL, key_prefix=prefix, ttl=60)
    postgres = PostgresMessageStore.from_url(POSTGRES_URL, schema=schema, max_messages=10)
    try:
        assert (redis.key_prefix, redis.ttl, redis.connection.owns_client) == (prefix, 60, True)
        assert (postgres.schema, postgres.max_messages) == (schema, 10)
        for store in (redis, postgres):
            assert await _append_and_read(store) == ["one", "two"]
    finally:
        for store in (redis, postgres):
            await close_store(store)
        await delete_prefix(prefix)
        await drop_schema(schema)


async def test_a_postgres_history_provider_takes_a_pool_first_or_a_url() -> None:
    schema = new_schema("akfromurl")
    pool = AsyncConnectionPool(POSTGRES_URL, open=False, min_size=1, max_size=2)
    await pool.open()
    by_url = PostgresHistoryProvider.from_url(POSTGRES_URL, schema=schema)
    on_pool = PostgresHistoryProvider(pool, schema=schema, source_id="db")
    try:
        async with asyncio.timeout(30):
            await by_url.store.append("c", [Message("user", ["hi"])])
            assert [e.message.text for e in (await on_pool.store.read("c")).entries] == ["hi"]
        await on_pool.aclose()
        assert not pool.closed  # a pool of the caller's stays open
    finally:
        await by_url.aclose()
        await pool.close()
        await drop_schema(schema)
