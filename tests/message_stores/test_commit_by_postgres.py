"""PostgreSQL: a write reported failed is never stored later (each write transaction's commit-by
time, checked at its COMMIT on the server's clock).

Most tests run a private server (:mod:`.private_postgres`) behind a proxy that pauses it
(``SIGSTOP``) just before a write's statement or its ``COMMIT`` reaches it (:mod:`.pausing_proxy`),
directly or through a private PgBouncer in transaction pooling mode. The caller's deadline passes
and it gets a typed error; the server is resumed, and once it has run (or refused) what waited
for it, nothing of the write is stored, and a retry stores it once.

A direct one-statement write (an append, a session save) is its own transaction: the server is
resumed once the caller was told it failed. A transaction's COMMIT is held by a server whose
backend is idle in the transaction, which its ``idle_in_transaction_session_timeout`` (twice the
timeout) ends by itself after a long pause; so there the server is resumed as soon as the caller
gives up (its cancel request), before that timeout: only the commit-by time stops the COMMIT.

One test runs on the machine's server: a slow COMMIT refused past the commit-by time is reported
as a definite failure.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from agentkeep import Agent, OutcomeUnknownError, StorageUnavailableError
from agentkeep._db.postgres import Pooler
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.private_pgbouncer import PgBouncer, pgbouncer_binary

from .backend_postgres import URL, drop_schema, execute, new_schema
from .helpers import turn
from .pausing_proxy import PausingProxy
from .private_postgres import PostgresServer

TIMEOUT = {"request": 1.0, "commit": 3.0}
"""The stores' timeout by where the write waits: the caller waits that plus a second for an
operation (then psycopg up to 5 s more for the statement it tried to cancel); for a COMMIT, the
server's idle-in-transaction timeout (twice the timeout) leaves two seconds to resume it in."""
HANG_GUARD = 60


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    own = PostgresServer()
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
async def proxy(server: PostgresServer) -> AsyncIterator[PausingProxy]:
    own = PausingProxy(server)
    await own.start()
    try:
        yield own
    finally:
        server.resume()  # a test that failed may have left it paused
        await own.close()


@pytest.fixture(params=["direct", "pgbouncer"])
def route(request: pytest.FixtureRequest, proxy: PausingProxy) -> Iterator[tuple[str, Pooler | None]]:
    """The URL the stores use and their ``pooler``: the proxy, or a PgBouncer in front of it."""
    if request.param == "direct":
        yield proxy.url, None
        return
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (make test installs Debian's package pgbouncer)")
    bouncer = PgBouncer(Path(tempfile.mkdtemp(prefix="agentkeep-pgbouncer-")), proxy.url)
    bouncer.start()
    try:
        yield bouncer.url, "transaction"
    finally:
        bouncer.stop()
        shutil.rmtree(bouncer.folder, ignore_errors=True)


def pause_point(pooler: Pooler | None) -> Literal["request", "commit"]:
    """Where a one-statement write waits: a direct one is its own transaction (its statement
    commits); behind a pooler it runs in a transaction of its own, whose COMMIT is the last step."""
    return "request" if pooler is None else "commit"


async def fails_while_paused(
    server: PostgresServer,
    proxy: PausingProxy,
    write: Callable[[], Awaitable[object]],
    *,
    marker: bytes,
    at: Literal["request", "commit"],
) -> None:
    """Run ``write`` with the server paused before its request holding ``marker`` or before its
    COMMIT (``at``); check that it fails, resume the server (see the module docs for when) and
    wait until the server has run (or refused) what waited for it."""
    proxy.pause_before(marker, at=at)
    async with asyncio.timeout(HANG_GUARD):
        if at == "request":
            with pytest.raises(StorageUnavailableError):
                await write()
            server.resume()
        else:
            pending = asyncio.ensure_future(write())
            await proxy.cancelled.wait()  # the caller stopped waiting
            server.resume()
            with pytest.raises(StorageUnavailableError):
                await pending
        assert proxy.paused.is_set()
        await proxy.paused_answered.wait()


async def texts(store: PostgresMessageStore, conversation_id: str) -> list[str]:
    return [entry.message.text for entry in (await store.read(conversation_id, raw=True)).entries]


async def test_an_append_the_paused_server_gets_late_is_not_stored(
    server: PostgresServer, proxy: PausingProxy, route: tuple[str, Pooler | None]
) -> None:
    url, pooler = route
    at = pause_point(pooler)
    store = PostgresMessageStore.from_url(url, schema=new_schema("akp"), timeout=TIMEOUT[at], pooler=pooler)
    try:
        await store.append("paused-append", turn(1))
        second = turn(2)
        await fails_while_paused(
            server, proxy, lambda: store.append("paused-append", second), marker=b"paused-append", at=at
        )
        assert await texts(store, "paused-append") == ["question 1", "answer 1"]
        assert await store.append("paused-append", second) == [3, 4]
        assert await store.append("paused-append", second) == [3, 4]  # a retry: stored once
        assert len(await texts(store, "paused-append")) == 4
    finally:
        await store.aclose()


async def test_a_session_save_the_paused_server_gets_late_is_not_stored(
    server: PostgresServer, proxy: PausingProxy, route: tuple[str, Pooler | None]
) -> None:
    url, pooler = route
    at = pause_point(pooler)
    sessions = PostgresSessionStore.from_url(
        url, schema=new_schema("akp"), timeout=TIMEOUT[at], pooler=pooler
    )
    agent = Agent(ScriptedChatClient(), name="helper")
    try:
        session = await sessions.get_session(agent, "paused-save")
        session.state["step"] = 1
        await sessions.save_session(agent, "paused-save", session)
        session.state["step"] = 2
        await fails_while_paused(
            server,
            proxy,
            lambda: sessions.save_session(agent, "paused-save", session),
            marker=b"paused-save",
            at=at,
        )
        assert (await sessions.get_session(agent, "paused-save")).state["step"] == 1
        await sessions.save_session(agent, "paused-save", session)  # still at the version read
        assert (await sessions.get_session(agent, "paused-save")).state["step"] == 2
    finally:
        await sessions.aclose()


async def test_a_turn_whose_commit_the_paused_server_gets_late_is_not_stored(
    server: PostgresServer, proxy: PausingProxy, route: tuple[str, Pooler | None]
) -> None:
    url, pooler = route
    schema = new_schema("akp")
    history = PostgresMessageStore.from_url(url, schema=schema, timeout=TIMEOUT["commit"], pooler=pooler)
    sessions = PostgresSessionStore.from_url(url, schema=schema, timeout=TIMEOUT["commit"], pooler=pooler)
    agent = Agent(ScriptedChatClient(), name="helper")
    try:
        assert sessions.shares_database(history)
        await history.setup()  # before the turn: only the turn's transaction waits
        session = await sessions.get_session(agent, "paused-turn")
        session.state["turns"] = 0
        await sessions.save_session(agent, "paused-turn", session)
        session.state["turns"] = 1
        held = history.hold_append("paused-turn", turn(1))
        await fails_while_paused(  # the appends and the save ran; the COMMIT waits
            server,
            proxy,
            lambda: sessions.save_session_with_appends(agent, "paused-turn", session, [held]),
            marker=b"paused-turn",
            at="commit",
        )
        assert await texts(history, "paused-turn") == []
        assert (await sessions.get_session(agent, "paused-turn")).state["turns"] == 0
        await sessions.save_session_with_appends(agent, "paused-turn", session, [held])  # the retry
        assert await texts(history, "paused-turn") == ["question 1", "answer 1"]
        assert (await sessions.get_session(agent, "paused-turn")).state["turns"] == 1
    finally:
        await history.aclose()
        await sessions.aclose()


@pytest.mark.parametrize("write", ["compaction", "delete"])
async def test_a_compaction_or_deletion_whose_commit_the_paused_server_gets_late_is_not_stored(
    server: PostgresServer, proxy: PausingProxy, write: str
) -> None:
    store = PostgresMessageStore.from_url(proxy.url, schema=new_schema("akp"), timeout=TIMEOUT["commit"])
    try:
        first = turn(1)
        await store.append("paused-write", first)
        question = first[0].message_id
        assert question is not None

        async def change() -> object:
            if write == "compaction":
                return await store.record_compaction("paused-write", excluded=[question])
            return await store.delete("paused-write")

        await fails_while_paused(server, proxy, change, marker=b"paused-write", at="commit")
        view = await store.read("paused-write")
        assert ([entry.message.text for entry in view.entries], view.epoch) == (["question 1", "answer 1"], 0)
        assert await change() == (1 if write == "compaction" else True)  # the retry
        assert [entry.message.text for entry in (await store.read("paused-write")).entries] == (
            ["answer 1"] if write == "compaction" else []
        )
    finally:
        await store.aclose()


# -- on the machine's server ---------------------------------------------------------------------


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = new_schema("akcb")
    try:
        yield name
    finally:
        await drop_schema(name)


async def test_a_commit_reached_after_the_commit_by_time_is_refused_and_reported_not_stored(
    schema: str,
) -> None:
    # A pool without server-side timeouts: only the commit-by time limits the COMMIT.
    pool = AsyncConnectionPool(URL, kwargs={"autocommit": True}, min_size=1, open=False)
    await pool.open()
    history = PostgresMessageStore(pool, schema=schema, timeout=1.0)
    sessions = PostgresSessionStore(pool, schema=schema, timeout=1.0)
    agent = Agent(ScriptedChatClient(), name="helper")
    try:
        session = await sessions.get_session(agent, "late")
        await sessions.save_session(agent, "late", session)
        names = {
            "stall": sql.Identifier(schema, "stall"),
            "sessions": sql.Identifier(schema, "sessions"),
        }
        # At the COMMIT, the server stalls until just past the transaction's commit-by time (a
        # slow server), before the commit-by check runs (one event's triggers fire by name).
        await execute(
            sql.SQL(
                "CREATE FUNCTION {stall}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "PERFORM pg_sleep_until(current_setting('agentkeep.commit_by')::timestamptz "
                "+ interval '10 milliseconds'); RETURN NULL; END $$"
            ).format(**names)
        )
        await execute(
            sql.SQL(
                "CREATE CONSTRAINT TRIGGER a_stall AFTER UPDATE ON {sessions} "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {stall}()"
            ).format(**names)
        )
        held = history.hold_append("late", turn(1))
        async with asyncio.timeout(HANG_GUARD):
            with pytest.raises(StorageUnavailableError, match="not stored, too late") as caught:
                await sessions.save_session_with_appends(agent, "late", session, [held])
        assert not isinstance(caught.value, OutcomeUnknownError)  # rolled back: a definite failure
        await execute(sql.SQL("DROP TRIGGER a_stall ON {sessions}").format(**names))
        assert (await history.read("late", raw=True)).entries == []
        await sessions.save_session_with_appends(agent, "late", session, [held])  # the retry
        assert [entry.message.text for entry in (await history.read("late", raw=True)).entries] == [
            "question 1",
            "answer 1",
        ]
    finally:
        await history.aclose()
        await sessions.aclose()
        await pool.close()
