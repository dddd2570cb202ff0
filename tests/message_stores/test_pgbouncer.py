"""PostgreSQL behind a transaction pooler (``?pooler=transaction``), against the session's private
pgbouncer (``pool_mode = transaction``) in front of the real server: the timeouts hold per
transaction, nothing stays on a shared server connection, and without the option the pooler
refuses the connection, saying why. The contract itself runs through the pooler in the
conformance suites (the ``backend_pgbouncer`` modules)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from agentkeep import Message, OutcomeUnknownError, StorageUnavailableError
from agentkeep._db.postgres import PostgresConnection, PostgresDatabase
from agentkeep.errors import StoreURLError
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.store_urls import open_message_store, parse_store_url
from tests.private_pgbouncer import PgBouncer

from .backend_postgres import URL, drop_schema, new_schema

GUARD = 20.0  # seconds: a hang fails the test instead of stalling the run


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = new_schema("akpgbt")
    try:
        yield name
    finally:
        await drop_schema(name)


def pooled(pgbouncer: PgBouncer, schema: str, *, timeout: float = 5.0) -> PostgresMessageStore:
    store = open_message_store(f"{pgbouncer.url}?schema={schema}&pooler=transaction", timeout=timeout)
    assert isinstance(store, PostgresMessageStore)
    return store


async def setting(conn: PostgresConnection, name: str) -> str:
    cursor = await conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name)))
    row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


async def test_a_statement_waiting_past_the_timeout_is_cancelled_and_never_applied(
    pgbouncer: PgBouncer, schema: str
) -> None:
    store = pooled(pgbouncer, schema, timeout=0.5)
    try:
        async with asyncio.timeout(GUARD):
            await store.append("c1", [Message("user", ["first"])])
            # Another client holds the conversation's row lock: the append waits for it.
            async with await psycopg.AsyncConnection.connect(URL) as holder:
                await holder.execute(
                    sql.SQL("SELECT 1 FROM {} WHERE conversation_id = 'c1' FOR UPDATE").format(
                        sql.Identifier(schema, "conversations")
                    )
                )
                with pytest.raises(StorageUnavailableError, match="statement timeout") as caught:
                    await store.append("c1", [Message("user", ["second"])])
                assert not isinstance(caught.value, OutcomeUnknownError)  # cancelled by the server
                await holder.rollback()
            await asyncio.sleep(0.1)
            view = await store.read("c1", raw=True)
            assert [entry.message.text for entry in view.entries] == ["first"]  # never applied later
    finally:
        await store.aclose()


async def test_an_operation_over_the_timeout_is_cancelled_by_the_server(
    pgbouncer: PgBouncer, schema: str
) -> None:
    store = pooled(pgbouncer, schema, timeout=0.5)

    async def sleep(conn: PostgresConnection) -> None:
        await conn.execute("SELECT pg_sleep(30)")  # a single statement: no transaction of its own

    try:
        async with asyncio.timeout(GUARD):
            with pytest.raises(StorageUnavailableError, match="statement timeout"):
                await store.database.run(sleep)
            assert await store.read("nothing") is not None  # the store still works
    finally:
        await store.aclose()


async def test_the_timeouts_are_set_per_transaction_and_leave_nothing_on_the_server_connection(
    pgbouncer: PgBouncer, schema: str
) -> None:
    store = pooled(pgbouncer, schema, timeout=2.0)

    async def timeouts(conn: PostgresConnection) -> tuple[str, str]:
        return await setting(conn, "statement_timeout"), await setting(
            conn, "idle_in_transaction_session_timeout"
        )

    try:
        async with asyncio.timeout(GUARD):
            assert await store.database.run(timeouts) == ("2s", "4s")
            # A plain client of the same pooler sees the server's defaults: nothing was SET for the
            # session (pool_size is small, so it gets one of the connections the store used).
            async with await psycopg.AsyncConnection.connect(pgbouncer.url, autocommit=True) as plain:
                assert await setting(plain, "statement_timeout") == "0"
    finally:
        await store.aclose()


@pytest.mark.postgres  # the server, directly (the tests with the pgbouncer fixture are marked by it)
async def test_a_direct_store_keeps_its_timeouts_per_connection(schema: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema, timeout=2.0)

    async def timeout(conn: PostgresConnection) -> tuple[str, object]:
        return await setting(conn, "statement_timeout"), conn.info.transaction_status.name

    try:
        async with asyncio.timeout(GUARD):
            assert await store.database.run(timeout) == ("2s", "IDLE")  # autocommit, no wrapping
    finally:
        await store.aclose()


async def test_concurrent_appends_through_the_pooler_prepare_nothing_and_lose_nothing(
    pgbouncer: PgBouncer, schema: str
) -> None:
    stores = [pooled(pgbouncer, schema) for _ in range(2)]  # two pools sharing the pooler's few

    async def writer(store: PostgresMessageStore, name: str) -> None:
        for i in range(15):  # past psycopg's threshold of 5 for preparing a statement
            await store.append(f"c{i % 3}", [Message("user", [f"{name}-{i}"])])

    try:
        async with asyncio.timeout(GUARD * 3):
            await asyncio.gather(*(writer(stores[n % 2], f"w{n}") for n in range(4)))
            texts = [
                entry.message.text
                for c in range(3)
                for entry in (await stores[0].read(f"c{c}", raw=True)).entries
            ]
            assert sorted(texts) == sorted(f"w{n}-{i}" for n in range(4) for i in range(15))
            for c in range(3):
                seqs = [entry.seq for entry in (await stores[1].read(f"c{c}", raw=True)).entries]
                assert seqs == list(range(1, len(seqs) + 1))
    finally:
        for store in stores:
            await store.aclose()


async def test_stores_setting_up_one_schema_together_through_the_pooler_all_succeed(
    pgbouncer: PgBouncer,
) -> None:
    # Behind the pooler a server connection may have looked the schema up for another client
    # before the migration lock was granted; the losing setups see the winner's work next round.
    for _ in range(8):
        schema = new_schema("akpgbr")
        stores = [pooled(pgbouncer, schema) for _ in range(4)]
        try:
            async with asyncio.timeout(GUARD):
                for store in stores:  # connected first, so the setups overlap
                    await store.read("warm-up")
                await drop_schema(schema)
                for store in stores:
                    store.database._ready = False  # pyright: ignore[reportPrivateUsage]
                await asyncio.gather(*(store.setup() for store in stores))
                assert await stores[0].append("c", [Message("user", ["hello"])]) == [1]
        finally:
            for store in stores:
                await store.aclose()
            await drop_schema(schema)


async def test_an_injected_pool_in_transactions_through_the_pooler(pgbouncer: PgBouncer, schema: str) -> None:
    # The caller's pool: not autocommit, psycopg's default preparing, more connections than the
    # pooler has server connections (4); the store turns preparing off on each connection it is
    # given and sets the timeouts in psycopg's own transaction.
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(pgbouncer.url, min_size=6, max_size=6, open=False)
    await pool.open()
    store = PostgresMessageStore(pool, schema=schema, timeout=3.0, pooler="transaction")

    async def timeout(conn: PostgresConnection) -> str:
        return await setting(conn, "statement_timeout")

    try:
        async with asyncio.timeout(GUARD * 2):
            for i in range(12):  # past psycopg's threshold of 5 for preparing a statement
                await asyncio.gather(
                    *(store.append(f"c{n}", [Message("user", [f"{n}-{i}"])]) for n in range(6))
                )
            assert await store.database.run(timeout) == "3s"
            assert [len((await store.read(f"c{n}", raw=True)).entries) for n in range(6)] == [12] * 6
    finally:
        await store.aclose()
        await pool.close()


async def test_without_the_option_the_pooler_refuses_the_connection_saying_why(
    pgbouncer: PgBouncer, schema: str
) -> None:
    store = PostgresMessageStore.from_url(pgbouncer.url, schema=schema, timeout=2.0)
    try:
        async with asyncio.timeout(GUARD):
            with pytest.raises(StorageUnavailableError, match="unsupported startup parameter: options"):
                await store.setup()
    finally:
        await store.aclose()


def test_the_pooler_parameter_is_agentkeeps_own() -> None:
    location = parse_store_url("postgresql://app@db:6432/app?schema=s&pooler=transaction&sslmode=disable")
    assert location.options == {"schema": "s", "pooler": "transaction"}
    assert location.url == "postgresql://app@db:6432/app?sslmode=disable"
    with pytest.raises(StoreURLError, match="pooler must be 'transaction'"):
        open_message_store("postgresql://app@db:6432/app?pooler=session")
    with pytest.raises(StoreURLError, match="pooler must not be empty"):
        open_message_store("postgresql://app@db:6432/app?pooler=")
    with pytest.raises(ValueError, match="pooler must be one of transaction"):
        PostgresDatabase(url="postgresql://app@db/app", pooler="session")  # pyright: ignore[reportArgumentType]
