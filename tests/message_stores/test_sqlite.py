"""SQLite-specific behaviour: file location, WAL and locking, schema, retention, errors, threads."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import pytest

from agentkeep import (
    Agent,
    CorruptRecordError,
    Message,
    SchemaVersionError,
    StorageClosedError,
    StorageUnavailableError,
)
from agentkeep._db import sqlite as database_layer
from agentkeep.message_stores import HistoryView, Summary
from agentkeep.message_stores.codec import FORMAT_VERSION
from agentkeep.message_stores.sqlite import (
    _LIST_CONVERSATIONS,  # pyright: ignore[reportPrivateUsage]
    SCHEMA_VERSION,
    SQLiteHistoryProvider,
    SQLiteMessageStore,
    default_database_path,
)
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient

from .backend_sqlite import execute
from .helpers import day, turn, turn_in_new_process


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMessageStore]:
    opened = SQLiteMessageStore(tmp_path / "store.db")
    try:
        yield opened
    finally:
        await opened.aclose()


async def _sql(path: Path, sql: str, parameters: tuple[Any, ...] | dict[str, Any] = ()) -> list[Any]:
    return await asyncio.to_thread(execute, path, sql, parameters)


# -- where the data lives --------------------------------------------------------------------------


async def test_default_path_is_under_xdg_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_database_path() == tmp_path / "data" / "agentkeep" / "agentkeep.db"
    store = SQLiteMessageStore()
    try:
        await store.append("c", turn(1))  # creates the folder and the file on first use
        assert store.path == tmp_path / "data" / "agentkeep" / "agentkeep.db"
        assert store.path.is_file()
    finally:
        await store.aclose()


def test_default_path_falls_back_to_local_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_database_path() == tmp_path / ".local" / "share" / "agentkeep" / "agentkeep.db"
    monkeypatch.setenv("XDG_DATA_HOME", "")
    assert default_database_path() == tmp_path / ".local" / "share" / "agentkeep" / "agentkeep.db"


async def test_wal_mode_and_each_schema_migration_recorded_once(store: SQLiteMessageStore) -> None:
    await store.setup()
    await store.setup()
    assert await _sql(store.path, "PRAGMA journal_mode") == [("wal",)]
    rows = await _sql(store.path, "SELECT version, format FROM agentkeep_schema")
    assert rows == [(version, FORMAT_VERSION) for version in range(1, SCHEMA_VERSION + 1)]
    # one index on message ids (migration 2): recording a compaction looks ids up through it
    indexes = await _sql(
        store.path, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'agentkeep_messages'"
    )
    assert indexes == [("agentkeep_messages_id",)]


async def _back_to_version_2(path: Path) -> None:
    """Undo migration 3 (the listing columns and indexes)."""
    for statement in (
        "DROP INDEX agentkeep_conversations_tenant",
        "DROP INDEX agentkeep_conversations_activity",
        "ALTER TABLE agentkeep_conversations DROP COLUMN tenant",
        "ALTER TABLE agentkeep_conversations DROP COLUMN activity",
        "DELETE FROM agentkeep_schema WHERE version > 2",
    ):
        await _sql(path, statement)


async def test_a_version_2_database_gains_the_listing_index_with_each_activity(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    first = SQLiteMessageStore(path)
    try:
        await first.append("t::old", [Message("user", ["x"], created_at=day(1))])
        await first.append(
            "t::new", [Message("user", ["x"], created_at=day(1)), Message("user", ["y"], created_at=day(3))]
        )
        await first.append("other", [Message("user", ["x"], created_at=day(2))])
    finally:
        await first.aclose()
    await _back_to_version_2(path)
    await _sql(path, "INSERT INTO agentkeep_conversations (conversation_id) VALUES ('t::empty')")
    again = SQLiteMessageStore(path)
    try:
        listed = await again.list_conversations()
        assert [(i.conversation_id, i.updated_at) for i in listed] == [
            ("t::new", day(3)),
            ("other", day(2)),
            ("t::old", day(1)),
            ("t::empty", None),
        ]
        assert [i.conversation_id for i in await again.list_conversations(tenant="t")] == [
            "t::new",
            "t::old",
            "t::empty",
        ]
        versions = await _sql(path, "SELECT version FROM agentkeep_schema ORDER BY version")
        assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    finally:
        await again.aclose()


async def test_a_version_1_database_gains_the_id_indexes_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    first = SQLiteMessageStore(path)
    try:
        await first.append("c", turn(1))
    finally:
        await first.aclose()
    await _back_to_version_2(path)
    for name in ("agentkeep_messages_id", "agentkeep_summaries_id"):  # back to what version 1 made
        await _sql(path, f"DROP INDEX {name}")
    await _sql(path, "DELETE FROM agentkeep_schema WHERE version > 1")
    again = SQLiteMessageStore(path)
    try:
        await again.setup()
        assert [m.message.text for m in (await again.read("c", raw=True)).entries] == [
            m.text for m in turn(1)
        ]
        names = await _sql(path, "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE '%_id'")
        assert sorted(name for (name,) in names) == ["agentkeep_messages_id", "agentkeep_summaries_id"]
        versions = await _sql(path, "SELECT version FROM agentkeep_schema ORDER BY version")
        assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    finally:
        await again.aclose()


async def test_bytes_per_message_stay_within_budget(store: SQLiteMessageStore) -> None:
    text = ("The quick brown fox jumps over the lazy dog. " * 5)[:194]
    for i in range(1000):  # 200-character messages
        await store.append(
            "big", [Message("user", [f"{i:05d} {text}"]), Message("assistant", [f"{text} {i:05d}"])]
        )
    [(size, count)] = await _sql(
        store.path,
        "SELECT (SELECT sum(pgsize) FROM dbstat WHERE name = 'agentkeep_messages'), "
        "(SELECT count(*) FROM agentkeep_messages)",
    )
    assert count == 2000
    assert size / count <= 260


# -- unavailable databases -------------------------------------------------------------------------


async def test_a_folder_that_cannot_be_created_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = blocker / "sub" / "history.db"
    store = SQLiteMessageStore(path)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            await store.append("c", turn(1))
        assert caught.value.backend == "sqlite"
        assert caught.value.address == str(path)
        assert str(path) in str(caught.value)
    finally:
        await store.aclose()
    sessions = SQLiteSessionStore(path)
    try:
        with pytest.raises(StorageUnavailableError, match="cannot create the folder"):
            await sessions.get_session(Agent(ScriptedChatClient(["x"]), name="bot"), "c")
    finally:
        await sessions.aclose()


async def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    store = SQLiteMessageStore(path)
    try:
        with pytest.raises(StorageUnavailableError, match="not a database") as caught:
            await store.setup()
        assert caught.value.address == str(path)
    finally:
        await store.aclose()
    assert path.read_bytes().startswith(b"these are my notes")  # left alone


@asynccontextmanager
async def _store_and_another_writer(
    path: Path, busy_seconds: float
) -> AsyncIterator[tuple[SQLiteMessageStore, sqlite3.Connection]]:
    """A store on ``path`` (SQLite busy timeout ``busy_seconds``) holding turn 1, and another
    connection that holds the write lock."""
    store = SQLiteMessageStore(path, timeout=busy_seconds)
    await store.append("c", turn(1))
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await asyncio.to_thread(holder.execute, "BEGIN IMMEDIATE")  # another writer holds the lock
        yield store, holder
    finally:
        await asyncio.to_thread(holder.close)
        await store.aclose()


async def test_a_database_locked_beyond_the_timeout_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with _store_and_another_writer(path, 0.2) as (store, holder):
        async with asyncio.timeout(30):  # a hang guard: the busy timeout (0.2 s) fires first
            with pytest.raises(StorageUnavailableError, match=r"still locked after 0\.2 s") as caught:
                await store.append("c", turn(2))
        assert caught.value.address == str(path)
        assert (
            len((await store.read("c", raw=True)).entries) == 2
        )  # WAL: readers are not blocked by the writer
        await asyncio.to_thread(holder.execute, "ROLLBACK")
        assert await store.append("c", turn(2)) == [3, 4]  # nothing partial was left
        # a store opening a connection of its own (its own timeout) while the lock is held cannot
        # migrate either; one joining this process's open connection has nothing to migrate
        await asyncio.to_thread(holder.execute, "BEGIN IMMEDIATE")
        late, joining = SQLiteMessageStore(path, timeout=0.3), SQLiteMessageStore(path, timeout=0.2)
        try:
            with pytest.raises(StorageUnavailableError, match=r"locked after 0\.3 s"):
                await late.setup()
            await joining.setup()
            assert len((await joining.read("c", raw=True)).entries) == 4
        finally:
            await late.aclose()
            await joining.aclose()
        await asyncio.to_thread(holder.execute, "ROLLBACK")


async def test_an_append_cancelled_while_it_waits_for_the_lock_never_commits(tmp_path: Path) -> None:
    async with _store_and_another_writer(tmp_path / "locked.db", 10) as (store, holder):
        pending = asyncio.create_task(store.append("c", turn(2)))
        queued = asyncio.create_task(store.append("c", turn(3)))  # waits for the worker itself
        await asyncio.sleep(0.2)  # the first append now waits in SQLite's busy handler
        pending.cancel()
        queued.cancel()
        await asyncio.to_thread(holder.execute, "ROLLBACK")  # the lock is free again
        async with asyncio.timeout(30):
            for task in (pending, queued):
                with pytest.raises(asyncio.CancelledError):
                    await task
        # the caller saw the cancel: nothing was committed behind its back
        assert [e.message.text for e in (await store.read("c", raw=True)).entries] == [
            "question 1",
            "answer 1",
        ]
        assert await store.append("c", turn(2)) == [3, 4]  # and the store works on


async def test_a_failure_inside_the_transaction_leaves_nothing_and_a_retry_stores_once(
    store: SQLiteMessageStore,
) -> None:
    await store.append("f", turn(1))
    # the second row of the next append fails after the first one was written
    await _sql(
        store.path,
        "CREATE TRIGGER agentkeep_test_fault BEFORE INSERT ON agentkeep_messages "
        "WHEN instr(NEW.body, x'616e737765722032') > 0 BEGIN SELECT abs(-9223372036854775808); END",
    )
    retried = turn(2)
    with pytest.raises(StorageUnavailableError, match="integer overflow"):
        await store.append("f", retried)
    assert [e.seq for e in (await store.read("f", raw=True)).entries] == [1, 2]
    assert (await store.read("f")).last_seq == 2
    await _sql(store.path, "DROP TRIGGER agentkeep_test_fault")
    assert await store.append("f", retried) == [3, 4]
    assert await store.append("f", retried) == [3, 4]  # a second retry is recognised
    assert [e.message.text for e in (await store.read("f", raw=True)).entries] == [
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
    ]


async def test_a_newer_record_format_is_refused(store: SQLiteMessageStore) -> None:
    await store.append("c", turn(1))
    await _sql(store.path, "UPDATE agentkeep_schema SET format = ?", (FORMAT_VERSION + 1,))
    fresh = SQLiteMessageStore(store.path)
    try:
        with pytest.raises(SchemaVersionError) as caught:
            await fresh.read("c", raw=True)
        assert f"record format {FORMAT_VERSION + 1}" in str(caught.value)
        assert f"record format {FORMAT_VERSION} at most" in str(caught.value)
    finally:
        await fresh.aclose()


async def test_an_open_store_stops_writing_once_a_newer_agentkeep_upgrades_the_file(
    store: SQLiteMessageStore,
) -> None:
    await store.append("c", turn(1))  # open, checked, migrated
    await _sql(store.path, "UPDATE agentkeep_schema SET format = ?", (FORMAT_VERSION + 1,))  # meanwhile
    with pytest.raises(SchemaVersionError, match="newer agentkeep while this one had it open"):
        await store.append("c", turn(2))
    assert [e.seq for e in (await store.read("c", raw=True)).entries] == [1, 2]  # nothing written
    await _sql(store.path, "UPDATE agentkeep_schema SET format = ?", (FORMAT_VERSION,))
    assert await store.append("c", turn(2)) == [3, 4]


async def test_a_newer_schema_is_refused_naming_both_versions(store: SQLiteMessageStore) -> None:
    await store.setup()
    await _sql(store.path, "INSERT INTO agentkeep_schema VALUES (?, 1, 0)", (SCHEMA_VERSION + 3,))
    sessions = SQLiteSessionStore(store.path)
    try:
        with pytest.raises(SchemaVersionError) as caught:
            await sessions.setup()
        assert f"schema version {SCHEMA_VERSION + 3}" in str(caught.value)
        assert f"schema version {SCHEMA_VERSION} " in str(caught.value)
    finally:
        await sessions.aclose()


# -- retention and purges --------------------------------------------------------------------------


async def test_expired_conversations_are_invisible_then_purged(store: SQLiteMessageStore) -> None:
    for name in ("a", "b", "c"):
        await store.append(name, turn(1))
    await store.expire("a", 0.05)
    await store.expire("b", 0.05)
    await asyncio.sleep(0.1)
    assert (await store.read("a", raw=True)).entries == []
    assert (await store.read("b")).last_seq == 0
    assert await store.expire("a", 10) is False  # expired means absent
    assert await _sql(store.path, "SELECT count(*) FROM agentkeep_messages") == [(4,)]  # "a" was removed
    assert await store.purge_expired() == 1
    assert await store.purge_expired() == 0
    assert await _sql(store.path, "SELECT conversation_id FROM agentkeep_conversations") == [("c",)]
    assert await _sql(store.path, "SELECT count(*) FROM agentkeep_messages") == [(2,)]


async def test_an_append_to_an_expired_conversation_starts_afresh(tmp_path: Path) -> None:
    store = SQLiteMessageStore(tmp_path / "ttl.db", ttl=0.05)
    try:
        await store.append("t", turn(1))
        await asyncio.sleep(0.1)
        assert await store.append("t", turn(2)) == [1, 2]
        assert [e.message.text for e in (await store.read("t", raw=True)).entries] == [
            "question 2",
            "answer 2",
        ]
        assert await _sql(store.path, "SELECT count(*) FROM agentkeep_messages") == [(2,)]
    finally:
        await store.aclose()


async def test_delete_and_max_messages_leave_no_rows_behind(tmp_path: Path) -> None:
    store = SQLiteMessageStore(tmp_path / "rows.db", max_messages=6)
    try:
        for i in range(10):
            await store.append("m", turn(i))
        assert await _sql(
            store.path,
            "SELECT min(position & 0xffffffff), max(position & 0xffffffff), count(*) FROM agentkeep_messages",
        ) == [(15, 20, 6)]
        [first, *_] = (await store.read("m", raw=True)).entries
        await store.record_compaction(
            "m", summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])]
        )
        assert await store.delete("m") is True
        for table in ("agentkeep_messages", "agentkeep_summaries", "agentkeep_conversations"):
            assert await _sql(store.path, f"SELECT count(*) FROM {table}") == [(0,)]
    finally:
        await store.aclose()


# -- listing ---------------------------------------------------------------------------------------


async def test_listing_skips_expired_conversations_and_counts_after_trims(tmp_path: Path) -> None:
    store = SQLiteMessageStore(tmp_path / "list.db", max_messages=3)
    try:
        for number, name in enumerate(["a", "b", "c"]):
            await store.append(name, [Message("user", [name], created_at=day(number)) for _ in range(2)])
        await store.append("a", [Message("user", ["a"], created_at=day(5)) for _ in range(2)])
        [oldest, *_] = (await store.read("a", raw=True)).entries
        summary = Summary(Message("assistant", ["s"], created_at=day(9)), [oldest.message.message_id or ""])
        await store.record_compaction("a", summaries=[summary])  # a summary is no message
        await store.expire("b", 0.05)
        await asyncio.sleep(0.1)
        listed = await store.list_conversations()
        assert [(i.conversation_id, i.message_count, i.last_seq, i.updated_at) for i in listed] == [
            ("a", 3, 5, day(5)),
            ("c", 2, 2, day(2)),
        ]
        assert [i.conversation_id for i in await store.list_conversations(limit=1)] == ["a"]
        assert await store.list_conversations(limit=0) == []
        # a conversation row without messages comes last
        await _sql(store.path, "INSERT INTO agentkeep_conversations (conversation_id) VALUES ('empty')")
        [*_, empty] = await store.list_conversations()
        assert (empty.conversation_id, empty.message_count, empty.updated_at) == ("empty", 0, None)
        await _sql(store.path, "UPDATE agentkeep_conversations SET activity = 9223372036854775807")
        with pytest.raises(CorruptRecordError) as caught:
            await store.list_conversations()
        assert caught.value.seq is not None
    finally:
        await store.aclose()


@pytest.mark.parametrize(("tenant", "after"), [(False, False), (False, True), (True, False), (True, True)])
async def test_a_listing_page_is_one_index_range(
    store: SQLiteMessageStore, tenant: bool, after: bool
) -> None:
    await store.setup()
    # the "old" tenant's rows are older than every other's, and ANALYZE knows the spread: walking
    # the activity index and filtering by tenant would read the others first
    rows = [
        (f"old::c{n}" if n % 10 == 0 else f"t{n % 7}::c{n}", n if n % 10 == 0 else n + 100_000)
        for n in range(2000)
    ]
    await asyncio.to_thread(_fill_conversations, store.path, rows)
    params = {"now": 0, "tenant": "old", "limit": 50, "activity": 2**62, "id": ""}
    plan = await _sql(store.path, "EXPLAIN QUERY PLAN " + _LIST_CONVERSATIONS[tenant, after], params)
    [(*_, detail)] = plan
    index = "agentkeep_conversations_tenant" if tenant else "agentkeep_conversations_activity"
    assert detail.startswith(
        tuple(f"{how} agentkeep_conversations USING INDEX {index}" for how in ("SCAN", "SEARCH"))
    ), detail


def _fill_conversations(path: Path, rows: list[tuple[str, int]]) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.executemany(
            "INSERT INTO agentkeep_conversations (conversation_id, activity) VALUES (?, ?)", rows
        )
        connection.execute("ANALYZE")


# -- compaction details ----------------------------------------------------------------------------


async def test_summaries_over_messages_below_the_view_floor(store: SQLiteMessageStore) -> None:
    for i in range(4):
        await store.append("f", turn(i))
    ids = [e.message.message_id or "" for e in (await store.read("f", raw=True)).entries]
    await store.record_compaction("f", excluded=ids[:4])  # the view now starts above seq 4
    assert [e.seq for e in (await store.read("f")).entries] == [5, 6, 7, 8]
    await store.record_compaction("f", summaries=[Summary(Message("assistant", ["S"]), ids[1:3])])
    view = await store.read("f")
    assert [e.message.text for e in view.entries] == ["S", "question 2", "answer 2", "question 3", "answer 3"]
    assert view.entries[0].replaces == tuple(ids[1:3])
    await store.record_compaction("f", excluded=[ids[6]])  # a middle exclusion keeps the floor
    await store.append("f", turn(9))
    assert [e.message.text for e in (await store.read("f", last=3)).entries] == [
        "answer 3",
        "question 9",
        "answer 9",
    ]
    assert [e.message.text for e in (await store.read("f", after=9)).entries] == [
        "question 9",
        "answer 9",
    ]


async def test_a_whole_view_has_the_seqs_of_its_messages_with_and_without_gaps(tmp_path: Path) -> None:
    """A whole view without summaries reads its seqs only when some seq of its span is not in it."""
    store = SQLiteMessageStore(tmp_path / "gaps.db", max_messages=16)
    try:
        for i in range(6):
            await store.append("g", turn(i))
        ids = [e.message.message_id or "" for e in (await store.read("g", raw=True)).entries]
        assert [e.seq for e in (await store.read("g")).entries] == list(range(1, 13))
        assert [e.seq for e in (await store.read("g", after=5)).entries] == list(range(6, 13))
        await store.record_compaction("g", excluded=[ids[4], ids[9]])  # two gaps in the middle
        view = await store.read("g")
        assert [e.seq for e in view.entries] == [1, 2, 3, 4, 6, 7, 8, 9, 11, 12]
        assert [e.message.message_id for e in view.entries] == [
            ids[i - 1] for i in [1, 2, 3, 4, 6, 7, 8, 9, 11, 12]
        ]
        for i in range(6, 10):  # past max_messages: the oldest are trimmed away
            await store.append("g", turn(i))
        raw = await store.read("g", raw=True)
        view = await store.read("g")
        kept = [e.seq for e in raw.entries if not e.excluded]
        assert [e.seq for e in view.entries] == kept
        assert [e.message for e in view.entries] == [e.message for e in raw.entries if not e.excluded]
        await _sql(
            store.path, "UPDATE agentkeep_messages SET time = time + 0.5 WHERE position & 4294967295 = 15"
        )
        with pytest.raises(CorruptRecordError) as caught:
            await store.read("g")
        assert caught.value.seq == 15  # named by its seq whether the seqs were read or not
    finally:
        await store.aclose()


async def test_a_turns_read_of_what_is_new_is_one_statement_with_the_views_rules(
    store: SQLiteMessageStore,
) -> None:
    """``read(after=n)`` reads the conversation and its new messages in one statement, and keeps
    the view's rules: excluded messages and summaries past ``n``, expiry, corrupt records."""
    for i in range(3):
        await store.append("n", turn(i))
    statements: list[str] = []
    await store.database.run(lambda db: db.set_trace_callback(statements.append), quick=True)
    view = await store.read("n", after=4)
    await store.database.run(lambda db: db.set_trace_callback(None), quick=True)
    assert len(statements) == 1
    assert ([e.seq for e in view.entries], view.epoch, view.last_seq) == ([5, 6], 0, 6)
    nothing_new = await store.read("n", after=6)
    assert (nothing_new.entries, nothing_new.last_seq) == ([], 6)
    assert (await store.read("absent", after=2)) == HistoryView()

    ids = [e.message.message_id or "" for e in (await store.read("n", raw=True)).entries]
    await store.record_compaction("n", excluded=[ids[4]])  # seq 5 leaves the view
    assert [e.seq for e in (await store.read("n", after=3)).entries] == [4, 6]
    summary = Summary(Message("assistant", ["sum"]), [ids[5]])
    await store.record_compaction("n", excluded=[ids[5]], summaries=[summary])  # seq 7, in seq 6's place
    view = await store.read("n", after=3)
    assert [(e.seq, e.message.text) for e in view.entries] == [(4, "answer 1"), (7, "sum")]
    assert view == HistoryView((await store.read("n")).entries[-2:], 2, 7)

    await store.append("n", turn(9))  # seqs 8 and 9
    await _sql(store.path, "UPDATE agentkeep_messages SET time = time + 0.5 WHERE position & 4294967295 = 9")
    with pytest.raises(CorruptRecordError) as caught:
        await store.read("n", after=7)
    assert (caught.value.conversation_id, caught.value.seq) == ("n", 9)

    await store.expire("n", 0.05)
    await asyncio.sleep(0.1)
    assert await store.read("n", after=7) == HistoryView()


async def test_a_corrupt_summary_is_reported(store: SQLiteMessageStore) -> None:
    await store.append("s", turn(1))
    [first, _] = (await store.read("s", raw=True)).entries
    await store.record_compaction(
        "s", summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])]
    )
    await _sql(store.path, "UPDATE agentkeep_summaries SET replaces = x'5b31'")
    with pytest.raises(CorruptRecordError) as caught:
        await store.read("s")
    assert (caught.value.conversation_id, caught.value.seq) == ("s", 3)


async def test_a_time_that_is_no_integer_is_a_corrupt_record(store: SQLiteMessageStore) -> None:
    for i in range(3):
        await store.append("t", turn(i))
    await _sql(store.path, "UPDATE agentkeep_messages SET time = time + 0.5 WHERE position & 4294967295 = 4")
    for raw in (False, True):  # the batch hands the load to the record-at-a-time path, which names it
        with pytest.raises(CorruptRecordError) as caught:
            await store.read("t", raw=raw)
        assert (caught.value.conversation_id, caught.value.seq) == ("t", 4)


# -- concurrency and threads -----------------------------------------------------------------------


def _connect_with(factory: type[sqlite3.Connection], monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every ``sqlite3.connect`` from now on a ``factory`` connection."""
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        return real_connect(*args, factory=factory, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)


def _counting_connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the path of every ``sqlite3.connect`` from now on."""
    opened: list[str] = []
    real_connect = sqlite3.connect

    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        opened.append(str(database))
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    return opened


async def test_the_stores_of_one_file_share_one_connection_until_the_last_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _counting_connects(monkeypatch)
    path = tmp_path / "shared.db"
    messages, sessions = SQLiteMessageStore(path), SQLiteSessionStore(tmp_path / "." / "shared.db")
    own_timeout = SQLiteMessageStore(path, timeout=1.0)  # a connection of its own
    agent = Agent(ScriptedChatClient(["hi"]), name="bot")
    try:
        await messages.append("c", turn(1))
        await sessions.save_session(agent, "c", await sessions.get_session(agent, "c"))
        assert len(opened) == 1
        assert len((await own_timeout.read("c")).entries) == 2
        assert len(opened) == 2
        await messages.aclose()
        with pytest.raises(StorageClosedError):
            await messages.read("c")
        assert (await sessions.get_session(agent, "c")).session_id == "c"  # still open for it
        await sessions.aclose()
        again = SQLiteMessageStore(path)
        try:
            assert len((await again.read("c")).entries) == 2
        finally:
            await again.aclose()
        assert len(opened) == 3  # the last user had closed it: opened anew
    finally:
        for store in (messages, sessions, own_timeout):
            await store.aclose()


async def test_a_forked_child_opens_its_own_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "forked.db"
    store = SQLiteMessageStore(path)
    try:
        await store.append("c", turn(1))
        opened = _counting_connects(monkeypatch)
        held = database_layer._shared_lock  # pyright: ignore[reportPrivateUsage]
        held.acquire()  # as if another thread of the parent were joining a connection as it forks
        pid = os.fork()
        if pid == 0:  # the child: the parent's connection (and its lock) are not its to use
            code = 1
            try:

                async def child() -> None:
                    own = SQLiteMessageStore(path)
                    try:
                        await own.append("c", turn(2))
                    finally:
                        await own.aclose()

                asyncio.new_event_loop().run_until_complete(child())
                code = 0 if len(opened) == 1 else 2
            finally:
                os._exit(code)
        held.release()
        waiting = asyncio.ensure_future(asyncio.to_thread(os.waitpid, pid, 0))
        try:
            async with asyncio.timeout(30):  # a hang guard: a child stuck on the parent's lock
                _, status = await asyncio.shield(waiting)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            await waiting
            raise
        assert os.waitstatus_to_exitcode(status) == 0
        assert opened == []  # the parent opened nothing new
        assert [e.seq for e in (await store.read("c")).entries] == [1, 2, 3, 4]
    finally:
        await store.aclose()


async def test_two_stores_on_one_file_interleave_whole_turns(tmp_path: Path) -> None:
    first, second = SQLiteMessageStore(tmp_path / "shared.db"), SQLiteMessageStore(tmp_path / "shared.db")
    try:

        async def writer(store: SQLiteMessageStore, name: str) -> None:
            for i in range(20):
                await store.append(
                    "shared", [Message("user", [f"{name}{i} q"]), Message("user", [f"{name}{i} a"])]
                )

        await asyncio.gather(
            *(writer(s, f"{n}{k}-") for n, s in (("x", first), ("y", second)) for k in range(3))
        )
        entries = (await first.read("shared", raw=True)).entries
        assert [e.seq for e in entries] == list(range(1, 241))
        texts = [e.message.text for e in entries]
        for question, answer in zip(texts[::2], texts[1::2], strict=True):
            assert answer == question.removesuffix(" q") + " a"
    finally:
        await first.aclose()
        await second.aclose()


async def test_the_event_loop_thread_runs_only_quick_jobs_and_never_waits_for_a_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.current_thread()
    on_loop: list[str] = []
    violations: list[str] = []

    class GuardedConnection(sqlite3.Connection):
        busy_ms = -1  # as connect() set it: the store's timeout

        def _guard(self, what: str) -> None:
            if what.startswith("PRAGMA busy_timeout"):
                self.busy_ms = int(what.rsplit("=", 1)[1])
            if threading.current_thread() is loop_thread:
                on_loop.append(what)
                if self.busy_ms != 0 and not what.startswith("PRAGMA busy_timeout"):
                    violations.append(what)  # it could wait for another connection's lock

        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            self._guard(sql)
            return super().execute(sql, parameters)

        def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
            self._guard(sql)
            return super().executemany(sql, parameters)

        def cursor(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
            self._guard("cursor()")
            return super().cursor(*args, **kwargs)

        def close(self) -> None:
            self._guard("close()")
            super().close()

    real_connect = sqlite3.connect

    def guarded_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        if threading.current_thread() is loop_thread:
            violations.append("connect()")
        return real_connect(*args, factory=GuardedConnection, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", guarded_connect)
    path = tmp_path / "guarded.db"
    provider = SQLiteHistoryProvider(path)
    sessions = SQLiteSessionStore(path)
    try:
        agent = Agent(ScriptedChatClient(["one", "two"]), name="bot", context_providers=[provider])
        session = await sessions.get_session(agent, "conv")
        await agent.run("hello", session=session)
        await sessions.save_session(agent, "conv", session)
        await agent.run("again", session=await sessions.get_session(agent, "conv"))
        store = provider.store
        [first, *_] = (await store.read("conv", raw=True)).entries
        await store.record_compaction(
            "conv", summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])]
        )
        await store.read("conv", last=2)
        await store.expire("conv", 60)
        await store.purge_expired()
        await sessions.delete_session(agent, "conv")
        await store.delete("conv")
    finally:
        await provider.aclose()
        await sessions.aclose()
    assert any("INSERT INTO agentkeep_messages" in sql for sql in on_loop)  # appends are quick
    assert any("agentkeep_sessions" in sql for sql in on_loop)  # so are session loads and saves
    slow = ("agentkeep_summaries (", "DELETE FROM", "SET expires_at =", "expires_at <=", "CREATE", "close()")
    assert [sql for sql in on_loop if any(word in sql for word in slow)] == []
    assert violations == []


async def test_an_append_that_must_first_delete_an_expired_log_does_it_in_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.current_thread()
    deletes: list[bool] = []  # per DELETE of messages: whether the loop's thread ran it

    class Watched(sqlite3.Connection):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            if sql.startswith("DELETE FROM agentkeep_messages"):
                deletes.append(threading.current_thread() is loop_thread)
            return super().execute(sql, parameters)

    _connect_with(Watched, monkeypatch)
    store = SQLiteMessageStore(tmp_path / "ttl.db", ttl=0.05)
    try:
        await store.append("c", [Message("user", [f"old {i}"]) for i in range(3)])
        await asyncio.sleep(0.1)  # expired now
        assert await store.append("c", [Message("user", ["new"])]) == [1]  # a new conversation
        assert [m.text for m in (await store.read("c", raw=True)).messages] == ["new"]
    finally:
        await store.aclose()
    assert deletes == [False]  # the old log went in the worker thread


async def test_the_write_ahead_log_is_checkpointed_on_a_connection_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``CHECKPOINT_EVERY`` quick writes the worker thread checkpoints, on a connection the
    jobs do not use: the quick jobs' connection stays free while the checkpoint syncs the files."""
    loop_thread = threading.current_thread()
    ran: list[tuple[int, str, bool]] = []  # (connection, statement, on the loop's thread)
    checkpointed = threading.Event()

    class Recording(sqlite3.Connection):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            ran.append((id(self), sql, threading.current_thread() is loop_thread))
            cursor = super().execute(sql, parameters)
            if sql.startswith("PRAGMA wal_checkpoint"):
                checkpointed.set()
            return cursor

        def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
            ran.append((id(self), sql, threading.current_thread() is loop_thread))
            return super().executemany(sql, parameters)

    _connect_with(Recording, monkeypatch)
    monkeypatch.setattr(database_layer, "CHECKPOINT_EVERY", 4)
    store = SQLiteMessageStore(tmp_path / "a folder #1?" / "checkpointed.db")  # opened by URI too
    try:
        for i in range(6):  # the first opens the connection in the worker: five quick writes
            await store.append("c", turn(i))
        assert await asyncio.to_thread(checkpointed.wait, 30)  # it runs in the background
        assert [e.seq for e in (await store.read("c")).entries] == list(range(1, 13))
    finally:
        await store.aclose()
    [(checkpointer, _, on_loop)] = [entry for entry in ran if entry[1].startswith("PRAGMA wal_checkpoint")]
    appenders = {connection for connection, sql, _ in ran if sql.startswith("INSERT INTO agentkeep_messages")}
    assert not on_loop
    assert len(appenders) == 1
    assert checkpointer not in appenders


async def test_a_quick_job_that_meets_another_writer_waits_in_the_worker_not_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    store = SQLiteMessageStore(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await store.append("c", [Message("user", ["first"])])
        other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
        append = asyncio.create_task(store.append("c", [Message("user", ["second"])]))
        ticks = 0
        async with asyncio.timeout(30):
            while ticks < 20:  # the loop keeps running while the append waits for the lock
                await asyncio.sleep(0.005)
                ticks += 1
        assert not append.done()
        other.execute("COMMIT")
        async with asyncio.timeout(30):
            assert await append == [2]
        assert [e.message.text for e in (await store.read("c", raw=True)).entries] == ["first", "second"]
    finally:
        other.close()
        await store.aclose()


# -- the history provider --------------------------------------------------------------------------


async def test_history_provider_owns_and_closes_its_store(tmp_path: Path) -> None:
    provider = SQLiteHistoryProvider(tmp_path / "p.db", load_limit=10, max_messages=100, ttl=3600)
    assert provider.source_id == "sqlite_history"
    assert provider.path == tmp_path / "p.db"
    assert (provider.store.max_messages, provider.store.ttl, provider.load_limit) == (100, 3600, 10)
    agent = Agent(ScriptedChatClient(["hi"]), context_providers=[provider])
    session = agent.create_session(session_id="s1")
    await agent.run("hello", session=session)
    assert len((await provider.store.read("s1", raw=True)).entries) == 2
    await provider.aclose()
    with pytest.raises(StorageClosedError):
        await provider.store.read("s1", raw=True)


async def test_options_are_checked_and_an_unused_store_closes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_messages"):
        SQLiteMessageStore(tmp_path / "x.db", max_messages=0)
    with pytest.raises(ValueError, match="ttl"):
        SQLiteMessageStore(tmp_path / "x.db", ttl=0)
    with pytest.raises(ValueError, match="timeout"):
        SQLiteMessageStore(tmp_path / "x.db", timeout=0)
    unused = SQLiteMessageStore(tmp_path / "x.db")
    await unused.aclose()
    assert not (tmp_path / "x.db").exists()
    with pytest.raises(StorageClosedError):
        await unused.purge_expired()


# -- across process restarts -----------------------------------------------------------------------

_OPEN_STORES = """
from agentkeep.message_stores.sqlite import SQLiteHistoryProvider
from agentkeep.session_stores.sqlite import SQLiteSessionStore

def open_stores(path):
    return SQLiteHistoryProvider(path), SQLiteSessionStore(path)
"""


def test_a_session_persists_across_process_restarts(tmp_path: Path) -> None:
    path = tmp_path / "restart.db"
    first = turn_in_new_process(_OPEN_STORES, "my name is Ada", str(path))
    assert first["sent"] == ["my name is Ada"]
    second = turn_in_new_process(_OPEN_STORES, "what is my name?", str(path))
    assert second["sent"] == ["my name is Ada", "re: my name is Ada", "what is my name?"]
    assert second["session"] < 300  # the session holds the key, the database the messages
