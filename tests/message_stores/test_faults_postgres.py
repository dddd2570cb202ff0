"""PostgreSQL faults: an unreachable server, terminated connections, a server that does not answer.

The store's connections are found by their ``application_name`` (unique per test) and ended with
``pg_terminate_backend`` from another connection, as an administrator or a failover would. Each
test checks the error, that nothing partial was stored, and that a retry of the same append
stores the turn exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import psycopg.conninfo
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from agentkeep import Agent, OutcomeUnknownError, StorageUnavailableError
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import free_port

from .backend_postgres import URL, drop_schema, execute, new_schema
from .helpers import turn
from .reply_dropper import reply_dropper


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = new_schema("akf")
    try:
        yield name
    finally:
        await drop_schema(name)


def store_on(schema: str, *, timeout: float = 5.0) -> PostgresMessageStore:
    """A store whose connections carry the schema name as their application name."""
    return PostgresMessageStore.from_url(f"{URL}?application_name={schema}", schema=schema, timeout=timeout)


async def terminate(application: str, *, waiting_on: str | None = None) -> int:
    """End the server processes of ``application`` (only those in that wait event, if given)."""
    rows = await execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
        "AND (%s::text IS NULL OR wait_event = %s)",
        (application, waiting_on, waiting_on),
    )
    return len(rows)


async def texts(store: PostgresMessageStore, conversation_id: str) -> list[str]:
    return [entry.message.text for entry in (await store.read(conversation_id, raw=True)).entries]


async def test_an_unreachable_server_fails_fast_without_the_password() -> None:
    url = f"postgresql://postgres:s3cret@127.0.0.1:{free_port()}/test"
    store = PostgresMessageStore.from_url(url, timeout=1.0)
    sessions = PostgresSessionStore.from_url(url, timeout=1.0)
    agent = Agent(ScriptedChatClient(), name="a")
    try:
        async with asyncio.timeout(30):  # a hang guard: the connect timeout fires first
            with pytest.raises(StorageUnavailableError) as caught:
                await store.append("c", turn(1))
        error = caught.value
        assert (error.backend, error.address) == ("postgres", error.address)
        assert error.address.startswith("postgresql://postgres@127.0.0.1:")
        assert "s3cret" not in str(error)
        assert str(error).startswith(f"postgres at {error.address}: ")
        with pytest.raises(StorageUnavailableError):
            await sessions.get_session(agent, "c")
    finally:
        await store.aclose()
        await sessions.aclose()


async def test_terminated_idle_connections_are_replaced_and_the_turn_stored_once(schema: str) -> None:
    store = store_on(schema)
    try:
        await store.append("c", turn(1))
        assert await terminate(schema) >= 1
        await asyncio.sleep(0.1)
        assert await store.append("c", turn(2)) == [3, 4]  # the dead connection is retried once
        assert await texts(store, "c") == ["question 1", "answer 1", "question 2", "answer 2"]
    finally:
        await store.aclose()


async def test_a_connection_terminated_mid_append_leaves_nothing_and_the_retry_stores_once(
    schema: str,
) -> None:
    store = store_on(schema)
    try:
        await store.append("c", turn(1))
        # Stall every append after it inserted its messages, before it commits.
        await execute(
            sql.SQL(
                "CREATE FUNCTION {stall}() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$"
            ).format(stall=sql.Identifier(schema, "stall"))
        )
        await execute(
            sql.SQL("CREATE TRIGGER stall BEFORE UPDATE ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
                sql.Identifier(schema, "conversations"), sql.Identifier(schema, "stall")
            )
        )
        second = turn(2)
        pending = asyncio.create_task(store.append("c", second))
        terminated = 0
        while not pending.done():  # the first attempt and the retry on a fresh connection
            terminated += await terminate(schema, waiting_on="PgSleep")
            await asyncio.sleep(0.02)
        with pytest.raises(StorageUnavailableError, match="terminat"):
            await pending
        assert terminated == 2
        await execute(sql.SQL("DROP TRIGGER stall ON {}").format(sql.Identifier(schema, "conversations")))
        assert await texts(store, "c") == ["question 1", "answer 1"]  # nothing partial
        assert await store.append("c", second) == [3, 4]
        assert await store.append("c", second) == [3, 4]  # and again: still once
        assert await texts(store, "c") == ["question 1", "answer 1", "question 2", "answer 2"]
    finally:
        await store.aclose()


async def test_a_lock_held_beyond_the_timeout_is_unavailable_then_the_retry_stores_once(
    schema: str,
) -> None:
    store = store_on(schema, timeout=1.0)
    try:
        await store.append("c", turn(1))
        async with await psycopg.AsyncConnection.connect(URL) as blocker:
            await blocker.execute(
                sql.SQL("SELECT 1 FROM {} WHERE conversation_id = 'c' FOR UPDATE").format(
                    sql.Identifier(schema, "conversations")
                )
            )
            second = turn(2)
            async with asyncio.timeout(30):  # a hang guard: the statement timeout fires first
                with pytest.raises(StorageUnavailableError, match="statement timeout"):
                    await store.append("c", second)
            await blocker.rollback()
        assert await store.append("c", second) == [3, 4]
        assert await texts(store, "c") == ["question 1", "answer 1", "question 2", "answer 2"]
    finally:
        await store.aclose()


async def test_an_injected_pool_without_server_timeouts_still_gets_the_client_deadline(schema: str) -> None:
    pool = AsyncConnectionPool(URL, kwargs={"autocommit": True}, min_size=1, open=False)
    await pool.open()
    store = PostgresMessageStore(pool, schema=schema, timeout=1.0)
    try:
        await store.append("c", turn(1))
        async with await psycopg.AsyncConnection.connect(URL) as blocker:
            await blocker.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                    sql.Identifier(schema, "conversations")
                )
            )
            async with asyncio.timeout(30):  # a hang guard: the client-side deadline fires first
                with pytest.raises(StorageUnavailableError, match="no answer within 2 s"):
                    await store.read("c", raw=True)
            await blocker.rollback()
        assert await texts(store, "c") == ["question 1", "answer 1"]  # the cancelled read left it usable
    finally:
        await store.aclose()
        await pool.close()


async def test_a_lost_reply_says_the_outcome_is_unknown_and_a_retry_stores_once(schema: str) -> None:
    address = psycopg.conninfo.conninfo_to_dict(URL)
    async with reply_dropper(
        str(address.get("host", "127.0.0.1")), int(str(address.get("port", 5432)))
    ) as proxy:
        url = psycopg.conninfo.make_conninfo(URL, host="127.0.0.1", port=str(proxy.port))
        store = PostgresMessageStore.from_url(url, schema=schema, timeout=2.0)
        try:
            await store.append("lost-reply", turn(1))
            second = turn(2)
            proxy.marker = b"lost-reply"  # the server commits the append; its reply never arrives
            async with asyncio.timeout(30):  # a hang guard
                with pytest.raises(OutcomeUnknownError, match="may have been applied"):
                    await store.append("lost-reply", second)
            assert proxy.dropped == 2  # the first attempt and the retry on a fresh connection
            proxy.marker = None
            assert await texts(store, "lost-reply") == ["question 1", "answer 1", "question 2", "answer 2"]
            assert await store.append("lost-reply", second) == [3, 4]  # the retry: stored once
            assert len(await texts(store, "lost-reply")) == 4
        finally:
            await store.aclose()
