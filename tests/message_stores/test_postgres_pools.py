"""One PostgreSQL pool per process and URL (``agentkeep._db.pools``): the history, session and
memory stores on one database share it, its size comes from the URL, and a pool timeout adds no
connection to a busy server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from psycopg_pool import AsyncConnectionPool

from agentkeep import StorageUnavailableError, StoreURLError
from agentkeep._db.pools import pool_users, why_no_connection
from agentkeep._db.postgres import PostgresConnection, PostgresDatabase
from agentkeep.memory import MemoryScope
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.store_urls import open_memory_store, open_message_store, open_session_store

from .backend_postgres import URL, drop_schema, new_schema
from .helpers import turn
from .reply_dropper import ReplyDropper, reply_dropper


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = new_schema("akpool")
    yield name
    await drop_schema(name)


@pytest.fixture
async def proxy() -> AsyncIterator[ReplyDropper]:
    """A loopback proxy in front of the server that counts the connections opened through it."""
    async with reply_dropper("127.0.0.1", 5432) as running:
        yield running


def through(proxy: ReplyDropper, query: str = "") -> str:
    url = URL.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    return f"{url}?{query}" if query else url


async def hold(database: PostgresDatabase, seconds: float) -> None:
    """Keep one of the pool's connections for ``seconds`` (under the operation's deadline)."""

    async def operation(conn: PostgresConnection) -> None:
        await conn.execute("SELECT 1")
        await asyncio.sleep(seconds)

    await database.run(operation)


async def test_the_stores_on_one_database_share_one_pool_until_the_last_closes(schema: str) -> None:
    url = f"{URL}?schema={schema}"
    messages = open_message_store(url)
    sessions = open_session_store(url)
    memories = open_memory_store(url, dimensions=4)
    assert isinstance(messages, PostgresMessageStore)
    assert isinstance(sessions, PostgresSessionStore)
    assert isinstance(memories, PostgresMemoryStore)
    await messages.append("c", turn(1))
    await sessions.setup()
    await memories.setup()
    pool = messages.database.pool
    assert pool is not None
    assert sessions.database.pool is pool
    assert memories.db.pool is pool
    assert pool_users(pool) == 3
    await messages.aclose()
    await sessions.aclose()
    assert not pool.closed
    assert pool_users(pool) == 1
    assert await memories.list_memories(MemoryScope("someone")) == []  # still served
    await memories.aclose()
    assert pool.closed
    assert pool_users(pool) == 0


async def test_stores_with_other_connection_settings_get_their_own_pool(schema: str) -> None:
    first = PostgresMessageStore.from_url(URL, schema=schema)
    slower = PostgresMessageStore.from_url(URL, schema=schema, timeout=9)
    try:
        await first.append("c", turn(1))
        await slower.append("c", turn(2))
        assert first.database.pool is not slower.database.pool  # other timeouts: other settings
    finally:
        await first.aclose()
        await slower.aclose()


async def test_the_pool_size_comes_from_the_url_and_the_largest_asked_wins(schema: str) -> None:
    small = open_message_store(f"{URL}?schema={schema}&pool_size=2")
    larger = open_session_store(f"{URL}?schema={schema}&pool_size=5")
    assert isinstance(small, PostgresMessageStore)
    assert isinstance(larger, PostgresSessionStore)
    try:
        await small.setup()
        pool = small.database.pool
        assert pool is not None
        assert pool.max_size == 2
        await larger.setup()
        assert larger.database.pool is pool
        assert pool.max_size == 5
    finally:
        await small.aclose()
        await larger.aclose()
    for bad in ("0", "-1", "two", "1001"):
        with pytest.raises(StoreURLError, match="pool_size"):
            open_message_store(f"{URL}?pool_size={bad}")
    with pytest.raises(ValueError, match="pool_size"):
        PostgresMessageStore(AsyncConnectionPool(URL, open=False), pool_size=3)


async def test_busy_stores_never_hold_more_connections_than_the_pool_size(
    schema: str, proxy: ReplyDropper
) -> None:
    url = through(proxy, f"schema={schema}&pool_size=3")
    messages, sessions = open_message_store(url), open_session_store(url)
    assert isinstance(messages, PostgresMessageStore)
    assert isinstance(sessions, PostgresSessionStore)
    try:
        async with asyncio.timeout(30):
            await messages.setup()
            await sessions.setup()
            await asyncio.gather(
                *(hold(messages.database, 0.05) for _ in range(12)),
                *(hold(sessions.database, 0.05) for _ in range(12)),
            )
        assert proxy.most_open <= 3  # the check before the pool opened is closed by then
    finally:
        await messages.aclose()
        await sessions.aclose()


async def test_a_pool_timeout_on_a_saturated_pool_opens_no_connection_and_says_why(
    schema: str, proxy: ReplyDropper
) -> None:
    store = PostgresMessageStore.from_url(through(proxy), schema=schema, pool_size=1, timeout=0.5)
    try:
        async with asyncio.timeout(30):
            await store.setup()
            before = proxy.connections
            holder = asyncio.create_task(hold(store.database, 1.0))
            await asyncio.sleep(0.2)
            waiting = [asyncio.create_task(store.read("c")) for _ in range(5)]
            results = await asyncio.gather(*waiting, return_exceptions=True)
            await holder
        assert all(isinstance(result, StorageUnavailableError) for result in results), results
        assert all("all 1 connections of the pool are in use" in str(result) for result in results)
        assert proxy.connections == before  # no diagnostic connection per timeout
    finally:
        await store.aclose()


async def test_a_pool_without_connections_explains_once_for_every_waiter() -> None:
    async def refuse(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        attempts += 1
        writer.close()

    attempts = 0
    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = AsyncConnectionPool(f"postgresql://nobody@127.0.0.1:{port}/none", open=False)
    try:
        async with asyncio.timeout(30):
            reasons = await asyncio.gather(*(why_no_connection(pool, seconds=5) for _ in range(20)))
        assert len(set(reasons)) == 1
        assert reasons[0].startswith(": ")
        assert attempts == 1
    finally:
        server.close()
        await server.wait_closed()
