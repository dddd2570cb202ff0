"""PostgreSQL-specific behaviour of :mod:`agentkeep.message_stores.postgres` (the contract is in the suite).

Schema, migrations and versions, pool ownership (including an injected pool with transactions and
dict rows), argument checks, retries racing their originals, retention rows, windows checked
against the in-memory reference over random operations, the record size, the history provider and
a session resumed by a new process. Uses the machine's server with a fresh schema per test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentkeep import (
    Agent,
    CorruptRecordError,
    Message,
    SchemaVersionError,
    StorageClosedError,
    StorageError,
    StorageUnavailableError,
)
from agentkeep.message_stores import Summary
from agentkeep.message_stores.codec import FORMAT_VERSION
from agentkeep.message_stores.postgres import (
    SCHEMA_VERSION,
    PostgresHistoryProvider,
    PostgresMessageStore,
)
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.testing import ScriptedChatClient

from .backend_postgres import URL, drop_schema, execute, new_schema, open_store
from .helpers import day, turn, turn_in_new_process


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A schema name for the test, dropped afterwards."""
    name = new_schema()
    try:
        yield name
    finally:
        await drop_schema(name)


def table(schema: str, name: str) -> sql.Identifier:
    return sql.Identifier(schema, name)


async def count_rows(schema: str, name: str) -> int:
    [(count,)] = await execute(sql.SQL("SELECT count(*) FROM {}").format(table(schema, name)))
    return count


# -- schema and versions ----------------------------------------------------------------------------


async def test_setup_creates_the_tables_and_records_one_migration(schema: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        await store.setup()
        await store.setup()
        rows = await execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        assert {name for (name,) in rows} == {
            "conversations",
            "messages",
            "summaries",
            "sessions",
            "schema_migrations",
        }
        versions = await execute(
            sql.SQL("SELECT version, format_version FROM {}").format(table(schema, "schema_migrations"))
        )
        assert versions == [(version, FORMAT_VERSION) for version in range(1, SCHEMA_VERSION + 1)]
        indexes = await execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE %s",
            (schema, "%(conversation, id)%"),
        )
        assert sorted(name for name, _ in indexes) == ["messages", "summaries"]  # compaction finds ids fast
        storage = await execute(
            "SELECT attname, attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname IN "
            "('id', 'body')",
            (f'"{schema}"."messages"',),
        )
        assert dict(storage) == {"id": "p", "body": "m"}  # plain and main: no TOAST pointer
    finally:
        await store.aclose()


async def test_concurrent_setups_migrate_once(schema: str) -> None:
    stores = [PostgresMessageStore.from_url(URL, schema=schema) for _ in range(6)]
    try:
        await asyncio.gather(*(store.setup() for store in stores))
        assert await count_rows(schema, "schema_migrations") == SCHEMA_VERSION  # each one once
        await asyncio.gather(*(store.append("c", turn(i)) for i, store in enumerate(stores)))
        assert len((await stores[0].read("c", raw=True)).entries) == 12
    finally:
        for store in stores:
            await store.aclose()


async def _back_to_version_5(schema: str) -> None:
    """Undo migration 6 (the commit-by triggers and their function; the append function is as
    migration 5 made it but for the versions it accepts)."""
    for name in ("conversations", "sessions", "messages", "summaries"):
        await execute(sql.SQL("DROP TRIGGER commit_by ON {}").format(sql.Identifier(schema, name)))
    await execute(sql.SQL("DROP FUNCTION {}()").format(sql.Identifier(schema, "check_commit_by")))
    migrations = sql.Identifier(schema, "schema_migrations")
    await execute(sql.SQL("DELETE FROM {} WHERE version > 5").format(migrations))


async def _back_to_version_4(schema: str) -> None:
    """Undo migrations 6 and 5 (the listing columns, their indexes go with them)."""
    await _back_to_version_5(schema)
    conversations = sql.Identifier(schema, "conversations")
    await execute(sql.SQL("ALTER TABLE {} DROP COLUMN tenant, DROP COLUMN activity").format(conversations))
    migrations = sql.Identifier(schema, "schema_migrations")
    await execute(sql.SQL("DELETE FROM {} WHERE version > 4").format(migrations))


async def test_a_version_4_schema_gains_the_listing_indexes_with_each_activity(schema: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        await store.append("t::old", [Message("user", ["x"], created_at=day(1))])
        await store.append(
            "t::new", [Message("user", ["x"], created_at=day(1)), Message("user", ["y"], created_at=day(3))]
        )
        await store.append("other", [Message("user", ["x"], created_at=day(2))])
    finally:
        await store.aclose()
    await _back_to_version_4(schema)
    conversations = sql.Identifier(schema, "conversations")
    await execute(sql.SQL("INSERT INTO {} (conversation_id) VALUES ('t::empty')").format(conversations))
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        listed = await store.list_conversations()
        assert [(i.conversation_id, i.updated_at) for i in listed] == [
            ("t::new", day(3)),
            ("other", day(2)),
            ("t::old", day(1)),
            ("t::empty", None),
        ]
        assert [i.conversation_id for i in await store.list_conversations(tenant="t")] == [
            "t::new",
            "t::old",
            "t::empty",
        ]
        await store.append("t::old", [Message("user", ["z"], created_at=day(4))])  # the new function
        [first] = await store.list_conversations(tenant="t", limit=1)
        assert (first.conversation_id, first.updated_at) == ("t::old", day(4))
    finally:
        await store.aclose()


@pytest.mark.parametrize("query", ["list", "list_after", "list_tenant", "list_tenant_after"])
async def test_a_listing_page_is_one_index_range(schema: str, query: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        await store.setup()
        conversations = sql.Identifier(schema, "conversations")
        await execute(  # enough rows that a sequential scan and sort would cost more
            sql.SQL(
                "INSERT INTO {} (conversation_id, activity) "
                "SELECT CASE WHEN n % 10 = 0 THEN 'old' ELSE 't' || (n % 7) END || '::c' || n,"
                " CASE WHEN n % 10 = 0 THEN n ELSE n + 100000 END FROM generate_series(1, 5000) AS n"
            ).format(conversations)
        )
        await execute(sql.SQL("ANALYZE {}").format(conversations))
        # the "old" tenant's rows are older than every other's: walking the activity index and
        # filtering by tenant would read the others first
        params = {"tenant": "old", "limit": 50, "activity": 2**62, "id": ""}
        text = store._q[query]  # pyright: ignore[reportPrivateUsage]
        plan = "\n".join(row[0] for row in await execute(b"EXPLAIN " + text, params))
        index = "tenant_activity" if query.startswith("list_tenant") else "conversations_activity"
        assert "Index Scan Backward using" in plan, plan
        assert index in plan.split("Index Scan Backward using ", 1)[1].split()[0], plan
        assert "Sort" not in plan, plan
        assert "Seq Scan" not in plan, plan
    finally:
        await store.aclose()


async def commit_by_triggers(schema: str) -> list[str]:
    """The tables of ``schema`` whose rows a deferred commit-by check guards."""
    rows = await execute(
        "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND t.tgname = 'commit_by' AND t.tgdeferrable AND t.tginitdeferred "
        "ORDER BY c.relname",
        (schema,),
    )
    return [name for (name,) in rows]


async def test_a_version_5_schema_gains_the_commit_by_check_and_keeps_its_data(schema: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    sessions = PostgresSessionStore.from_url(URL, schema=schema)
    agent = Agent(ScriptedChatClient(), name="helper")
    try:
        await store.append("c", turn(1))
        session = await sessions.get_session(agent, "c")
        session.state["kept"] = True
        await sessions.save_session(agent, "c", session)
    finally:
        await store.aclose()
        await sessions.aclose()
    await _back_to_version_5(schema)
    assert await commit_by_triggers(schema) == []
    conversations = sql.Identifier(schema, "conversations")
    store = PostgresMessageStore.from_url(URL, schema=schema)
    sessions = PostgresSessionStore.from_url(URL, schema=schema)
    try:
        await store.setup()
        assert await commit_by_triggers(schema) == ["conversations", "messages", "sessions", "summaries"]
        migrations = sql.Identifier(schema, "schema_migrations")
        versions = await execute(sql.SQL("SELECT version FROM {} ORDER BY version").format(migrations))
        assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
        assert [m.message.text for m in (await store.read("c", raw=True)).entries] == [
            m.text for m in turn(1)
        ]
        assert (await sessions.get_session(agent, "c")).state["kept"] is True
        assert await store.append("c", turn(2)) == [3, 4]  # the append function takes version 6
        # A transaction that set no commit-by time (an administrator's, an older agentkeep's) is
        # not checked; one past its commit-by time is refused at its COMMIT.
        await execute(sql.SQL("UPDATE {} SET expires_at = NULL").format(conversations))
        async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
            await conn.execute("BEGIN")
            await conn.execute(
                "SELECT set_config('agentkeep.commit_by', (clock_timestamp() - interval '1 s')::text, true)"
            )
            await conn.execute(sql.SQL("UPDATE {} SET expires_at = NULL").format(conversations))
            with pytest.raises(psycopg.Error, match="after the commit-by time") as caught:
                await conn.execute("COMMIT")
            assert caught.value.sqlstate == "AK002"
    finally:
        await store.aclose()
        await sessions.aclose()


async def test_the_commit_by_time_stays_in_its_transaction(schema: str) -> None:
    pool = AsyncConnectionPool(URL, kwargs={"autocommit": True}, min_size=1, max_size=1, open=False)
    await pool.open()
    store = PostgresMessageStore(pool, schema=schema)
    try:
        await store.append("c", turn(1))
        async with pool.connection() as conn:  # the one the append ran on
            cursor = await conn.execute("SELECT current_setting('agentkeep.commit_by', true)")
            assert await cursor.fetchone() == ("",)  # set for the transaction only: none now
    finally:
        await store.aclose()
        await pool.close()


async def test_a_version_1_schema_gains_the_id_indexes_and_keeps_its_data(schema: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        await store.append("c", turn(1))
    finally:
        await store.aclose()
    indexes = await execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE %s",
        (schema, "%(conversation, id)%"),
    )
    await _back_to_version_4(schema)
    for (name,) in indexes:  # back to what version 1 created
        await execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, name)))
    migrations = sql.Identifier(schema, "schema_migrations")
    await execute(sql.SQL("DELETE FROM {} WHERE version > 1").format(migrations))
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        await store.setup()
        assert [m.message.text for m in (await store.read("c", raw=True)).entries] == [
            m.text for m in turn(1)
        ]
        again = await execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE %s",
            (schema, "%(conversation, id)%"),
        )
        assert again == [(2,)]
        versions = await execute(sql.SQL("SELECT version FROM {} ORDER BY version").format(migrations))
        assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    finally:
        await store.aclose()


async def test_the_first_operation_sets_up_the_schema(schema: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        assert (await store.read("c", raw=True)).entries == []
        assert await store.append("c", turn(1)) == [1, 2]
    finally:
        await store.aclose()


async def test_newer_schemas_and_formats_are_refused_naming_both_versions(schema: str) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        await store.append("c", turn(1))
    finally:
        await store.aclose()
    migrations = table(schema, "schema_migrations")
    await execute(sql.SQL("UPDATE {} SET format_version = %s").format(migrations), (FORMAT_VERSION + 1,))
    fresh = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        with pytest.raises(
            SchemaVersionError, match=rf"format version {FORMAT_VERSION + 1}.*{FORMAT_VERSION}"
        ):
            await fresh.read("c", raw=True)  # any first operation checks
    finally:
        await fresh.aclose()
    await execute(sql.SQL("UPDATE {} SET format_version = %s").format(migrations), (FORMAT_VERSION,))
    await execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(migrations), (SCHEMA_VERSION + 1, 1))
    sessions = PostgresSessionStore.from_url(URL, schema=schema)
    try:
        with pytest.raises(SchemaVersionError, match=rf"version {SCHEMA_VERSION + 1}.*{SCHEMA_VERSION}"):
            await sessions.setup()
    finally:
        await sessions.aclose()


# -- pools and arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("column", ["version", "format_version"])
async def test_an_open_store_stops_appending_once_a_newer_agentkeep_upgrades_the_schema(
    schema: str, column: str
) -> None:
    store = PostgresMessageStore.from_url(URL, schema=schema)
    try:
        await store.append("c", turn(1))  # open, checked, migrated
        migrations = table(schema, "schema_migrations")  # meanwhile, another agentkeep upgrades the data
        if column == "version":
            query = sql.SQL("INSERT INTO {} (version, format_version) VALUES (%s, %s)").format(migrations)
            await execute(query, (SCHEMA_VERSION + 1, FORMAT_VERSION))
        else:
            await execute(
                sql.SQL("UPDATE {} SET format_version = %s").format(migrations), (FORMAT_VERSION + 1,)
            )
        with pytest.raises(SchemaVersionError, match="newer agentkeep while this one had it open"):
            await store.append("c", turn(2))
        assert await count_rows(schema, "messages") == 2  # nothing written
    finally:
        await store.aclose()


async def test_an_injected_pool_with_transactions_and_dict_rows_is_used_and_not_closed(schema: str) -> None:
    pool = AsyncConnectionPool(URL, kwargs={"row_factory": dict_row}, min_size=1, max_size=3, open=False)
    await pool.open()
    try:
        store = PostgresMessageStore(pool, schema=schema, max_messages=3)
        sessions = PostgresSessionStore(pool, schema=schema)
        agent = Agent(ScriptedChatClient(), name="a")
        try:
            assert await store.append("c", turn(1)) == [1, 2]
            assert await store.append("c", turn(2)) == [3, 4]
            [first, *_] = (await store.read("c", raw=True)).entries
            await store.record_compaction(
                "c",
                excluded=[first.message.message_id or ""],
                summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])],
            )
            assert [e.message.text for e in (await store.read("c")).entries] == [
                "s",
                "question 2",
                "answer 2",
            ]
            session = await sessions.get_session(agent, "c")
            session.state["k"] = 1
            await sessions.save_session(agent, "c", session)
        finally:
            await store.aclose()
            await sessions.aclose()
        # committed: another connection sees it
        assert await count_rows(schema, "messages") == 3
        assert await count_rows(schema, "sessions") == 1
        async with pool.connection() as conn:  # the pool still works
            assert await (await conn.execute("SELECT 1 AS one")).fetchone() == {"one": 1}
    finally:
        await pool.close()


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="either"):
        PostgresMessageStore()
    pool = AsyncConnectionPool(URL, open=False)
    with pytest.raises(ValueError, match="either"):
        PostgresMessageStore(pool, url=URL)
    options: dict[str, Any]
    for options in ({"max_messages": 0}, {"ttl": 0}, {"timeout": 0}, {"schema": ""}):
        with pytest.raises(ValueError):
            PostgresMessageStore.from_url(URL, **options)
    unused = PostgresMessageStore.from_url(URL)
    await unused.aclose()  # never opened: nothing to close
    with pytest.raises(StorageClosedError):
        await unused.purge_expired()


def test_the_address_never_shows_the_password() -> None:
    store = PostgresMessageStore.from_url("postgresql://app:s3cret@db.example:6543/prod?sslmode=disable")
    assert store.address == "postgresql://app@db.example:6543/prod"
    keyword = PostgresSessionStore.from_url("host=10.0.0.1 user=u password=hunter2 dbname=d")
    assert keyword.database.address == "postgresql://u@10.0.0.1:5432/d"


# -- appends ----------------------------------------------------------------------------------------


async def test_a_retry_racing_its_original_is_stored_once() -> None:
    async with open_store() as store:
        await store.append("r", turn(0))
        batch = [message.ensure_identity() for message in turn(1)]
        others = [turn(i) for i in range(2, 6)]
        results = await asyncio.gather(
            *(store.append("r", batch) for _ in range(5)), *(store.append("r", t) for t in others)
        )
        assert all(result == results[0] for result in results[:5])
        entries = (await store.read("r", raw=True)).entries
        assert len(entries) == 12
        assert [e.message.text for e in entries].count("question 1") == 1
        position = next(e.seq for e in entries if e.message.text == "question 1")
        assert results[0] == [position, position + 1]


async def test_concurrent_appends_in_one_process_keep_turns_contiguous() -> None:
    async with open_store() as store:

        async def writer(w: int) -> None:
            for t in range(10):
                await store.append(
                    "shared", [Message("user", [f"{w}.{t} q"]), Message("assistant", [f"{w}.{t} a"])]
                )

        await asyncio.gather(*(writer(w) for w in range(12)))
        entries = (await store.read("shared", raw=True)).entries
        assert [e.seq for e in entries] == list(range(1, 241))
        texts = [e.message.text for e in entries]
        for question, answer in zip(texts[::2], texts[1::2], strict=True):
            assert answer == question.replace(" q", " a")


async def test_max_messages_trims_within_the_append_even_a_batch_larger_than_the_limit() -> None:
    async with open_store(max_messages=3) as store:
        assert await store.append("m", [Message("user", [str(i)]) for i in range(5)]) == [1, 2, 3, 4, 5]
        assert [e.seq for e in (await store.read("m", raw=True)).entries] == [3, 4, 5]
        await store.append("m", turn(1))
        assert [e.message.text for e in (await store.read("m", raw=True)).entries] == [
            "4",
            "question 1",
            "answer 1",
        ]
        assert await count_rows(store.schema, "messages") == 3
        [(count,)] = await execute(
            sql.SQL("SELECT message_count FROM {}").format(table(store.schema, "conversations"))
        )
        assert count == 3


# -- retention --------------------------------------------------------------------------------------


async def test_expired_conversations_read_as_absent_then_are_purged() -> None:
    async with open_store() as store:
        await store.append("old", turn(1))
        [first, _] = (await store.read("old", raw=True)).entries
        await store.record_compaction(
            "old", summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])]
        )
        await store.append("kept", turn(1))
        assert await store.expire("old", 0.2) is True
        await asyncio.sleep(0.4)
        assert (await store.read("old", raw=True)).entries == []
        assert (await store.read("old")).last_seq == 0
        assert await store.expire("old", 10) is False
        assert await store.record_compaction("old", excluded=["x"]) == 0
        assert await count_rows(store.schema, "messages") == 4  # still there, invisible
        assert await store.purge_expired() == 1
        assert await store.purge_expired() == 0
        assert await count_rows(store.schema, "messages") == 2
        assert await count_rows(store.schema, "summaries") == 0
        assert await count_rows(store.schema, "conversations") == 1


async def test_delete_leaves_no_rows_behind() -> None:
    async with open_store() as store:
        await store.append("d", turn(1))
        [first, _] = (await store.read("d", raw=True)).entries
        await store.record_compaction(
            "d", summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])]
        )
        await store.append("other", turn(1))
        assert await store.delete("d") is True
        assert await count_rows(store.schema, "messages") == 2
        assert await count_rows(store.schema, "summaries") == 0
        assert await count_rows(store.schema, "conversations") == 1


# -- listing ----------------------------------------------------------------------------------------


async def test_listing_puts_conversations_without_messages_last_and_reports_corrupt_times() -> None:
    async with open_store() as store:
        await store.append("a", [Message("user", ["a"], created_at=day(1))])
        await execute(
            sql.SQL("INSERT INTO {} (conversation_id) VALUES ('empty')").format(
                table(store.schema, "conversations")
            )
        )
        [first, empty] = await store.list_conversations()
        assert first.conversation_id == "a"
        assert (empty.conversation_id, empty.message_count, empty.updated_at) == ("empty", 0, None)
        await execute(
            sql.SQL("UPDATE {} SET activity = 9223372036854775807").format(
                table(store.schema, "conversations")
            )
        )
        with pytest.raises(CorruptRecordError) as caught:
            await store.list_conversations()
        assert caught.value.seq is not None


# -- size ---------------------------------------------------------------------------------------------


async def test_rows_stay_compact() -> None:
    """About 430 bytes per ~200-character message, indexes included (see the module docs): the
    text is stored plain (texts under 1 KiB are, so that loads need not inflate them)."""
    async with open_store() as store:
        text = ("the weather in Amsterdam tomorrow looks " * 6)[:200]
        for _ in range(10):
            await store.append("size", [Message("user", [text]) for _ in range(200)])
        messages = table(store.schema, "messages")
        await execute(sql.SQL("VACUUM ANALYZE {}").format(messages))
        [(total, heap, row)] = await execute(
            sql.SQL(
                "SELECT pg_total_relation_size(%s), pg_relation_size(%s), max(pg_column_size(m.*)) FROM {} m"
            ).format(messages),
            (f'"{store.schema}"."messages"',) * 2,
        )
        # tuple header + 8 + 8 + 8 + 1 + 17 (id) + 3 (padding) + 4 (length) + 206 (body: kind, role,
        # the 200 bytes stored plain, checksum)
        assert row <= 24 + 255
        assert heap / 2000 < 300
        assert total / 2000 < 450  # heap + primary key + id index + free-space and visibility maps


# -- the history provider -----------------------------------------------------------------------------


async def test_history_provider_from_url_owns_its_pool(schema: str) -> None:
    provider = PostgresHistoryProvider.from_url(URL, schema=schema, load_limit=10, max_messages=100, ttl=3600)
    assert provider.source_id == "postgres_history"
    store = provider.store
    assert (store.schema, store.max_messages, store.ttl, provider.load_limit) == (schema, 100, 3600, 10)
    agent = Agent(ScriptedChatClient(["hi"]), context_providers=[provider])
    await agent.run("hello", session=agent.create_session(session_id="s1"))
    assert len((await store.read("s1", raw=True)).entries) == 2
    await provider.aclose()
    assert store.database.pool is not None
    assert store.database.pool.closed
    with pytest.raises(StorageClosedError):
        await store.read("s1", raw=True)


async def test_history_provider_on_an_injected_pool_leaves_it_open(schema: str) -> None:
    pool = AsyncConnectionPool(URL, kwargs={"autocommit": True}, min_size=1, open=False)
    await pool.open()
    try:
        provider = PostgresHistoryProvider(pool=pool, schema=schema, source_id="db")
        client = ScriptedChatClient(lambda messages: f"re: {messages[-1].text}")
        agent = Agent(client, context_providers=[provider])
        session = agent.create_session()
        await agent.run("one", session=session)
        await agent.run("two", session=session)
        assert [m.text for m in client.calls[-1]] == ["one", "re: one", "two"]
        await provider.aclose()
        assert not pool.closed
    finally:
        await pool.close()


_OPEN_STORES = """
from agentkeep.message_stores.postgres import PostgresHistoryProvider
from agentkeep.session_stores.postgres import PostgresSessionStore

def open_stores(url, schema):
    history = PostgresHistoryProvider.from_url(url, schema=schema)
    return history, PostgresSessionStore.from_url(url, schema=schema)
"""


async def test_a_session_persists_across_process_restarts(schema: str) -> None:
    first = await asyncio.to_thread(turn_in_new_process, _OPEN_STORES, "my name is Ada", URL, schema)
    assert first["sent"] == ["my name is Ada"]
    second = await asyncio.to_thread(turn_in_new_process, _OPEN_STORES, "what is my name?", URL, schema)
    assert second["sent"] == ["my name is Ada", "re: my name is Ada", "what is my name?"]
    assert second["session"] < 300  # the session holds the key, the database the messages


async def test_an_unknown_database_fails_at_once_saying_why() -> None:
    store = PostgresMessageStore.from_url(URL.rsplit("/", 1)[0] + "/agentkeep_no_such_database", timeout=30)
    try:
        async with asyncio.timeout(10):  # a hang guard far below the 30 s connection timeout
            with pytest.raises(StorageUnavailableError, match="does not exist"):
                await store.append("c", turn(1))
    finally:
        await store.aclose()


async def test_a_record_too_large_for_a_row_is_a_plain_storage_error_not_an_outage() -> None:
    async with open_store() as store:
        await store.append("c", turn(1))
        with pytest.raises(StorageError, match="too large to store") as caught:
            await store.append("c", [Message("user", ["x"], message_id="i" * 20_000)])
        assert not isinstance(caught.value, StorageUnavailableError)  # retrying cannot help
        assert len((await store.read("c", raw=True)).entries) == 2


# -- whole views ------------------------------------------------------------------------------------


async def test_a_whole_view_reads_the_counters_once_and_orders_summaries_among_messages() -> None:
    """A whole view's statement gives the counters in a row of their own: with every message
    excluded the view is empty at the conversation's epoch; a summary sits before the first
    message it replaces, and a long view (decoded on a worker thread) is in seq order."""
    async with open_store() as store:
        for i in range(3):
            await store.append("w", turn(i))
        ids = [e.message.message_id or "" for e in (await store.read("w", raw=True)).entries]
        await store.record_compaction("w", excluded=ids)
        empty = await store.read("w")
        assert (empty.entries, empty.epoch, empty.last_seq) == ([], 1, 6)
        await store.append("w", turn(3))
        await store.append("w", turn(4))
        later = [e.message.message_id or "" for e in (await store.read("w", raw=True)).entries][6:]
        await store.record_compaction("w", summaries=[Summary(Message("assistant", ["S"]), later[2:3])])
        view = await store.read("w")
        assert [e.message.text for e in view.entries] == [
            "question 3",
            "answer 3",
            "S",
            "question 4",
            "answer 4",
        ]
        assert [e.seq for e in view.entries] == [7, 8, 11, 9, 10]
        assert view.entries[2].replaces == (later[2],)
        assert (view.epoch, view.last_seq) == (2, 11)
        assert view.entries == (await store.read("w", after=0)).entries
        long = [m for i in range(5, 705) for m in turn(i)]
        await store.append("long", long)
        whole = await store.read("long")
        assert [e.seq for e in whole.entries] == list(range(1, 1401))
        assert [e.message for e in whole.entries] == long
