"""What was said next after a recalled memory: ``MemoryStore.following`` on every store against
the protocol's own rule after any writes, stores of the previous layout gaining its index, and the
semantic provider showing each recalled chunk with what followed it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from agentkeep import Agent, Message
from agentkeep.clients import ScriptedChatClient
from agentkeep.errors import StorageError
from agentkeep.memory import InMemoryMemoryStore, MemoryHit, MemoryRecord, MemoryScope, MemoryStore
from agentkeep.memory._sqlite_file import LAYOUT
from agentkeep.memory.postgres import MEMORY_LAYOUT, PostgresMemoryStore
from agentkeep.memory.semantic import SemanticMemoryProvider, render_memories, set_memory_user
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.testing import HashingEmbedder
from tests.memory.backend_sqlite import raw_file
from tests.memory.test_scope_summary import opened
from tests.message_stores.backend_postgres import URL, drop_schema, execute, new_schema

ANA = MemoryScope("ana", tenant_id="t")
START = datetime(2023, 5, 1, 9, tzinfo=UTC)


def _ids(found: list[list[MemoryRecord]]) -> list[list[str]]:
    """Each record's followers, by id."""
    return [[r.id for r in followers] for followers in found]


# -- the stores against the rule -------------------------------------------------------------------
# a write: (session, kind, minute, key, seconds) adds a memory; an int deletes the n-th memory added
_adds = st.tuples(
    st.sampled_from(["s1", "s2", None]),
    st.sampled_from(["chunk", "fact"]),
    st.integers(0, 4),  # few minutes: equal times happen
    st.sampled_from([None, None, "k1", "k2"]),  # a key supersedes the key's current memory
    st.integers(0, 2),  # when it was remembered (updated_at), seconds after it was said
)
writes = st.lists(_adds | st.integers(0, 30), min_size=1, max_size=24)


async def following_after(
    sequence: list[tuple[str | None, str, int, str | None, int] | int], backend: str
) -> None:
    """After the writes, each memory's followers (limits 1, 2 and 30), as the store answers, are
    what the protocol's default finds by listing the scope (superseded, deleted and other
    sessions' memories left out)."""
    async with opened(backend, ttl=None) as store:
        added: list[MemoryRecord] = []
        for n, write in enumerate(sequence):
            if isinstance(write, int):
                if added:
                    await store.delete(ANA, added[write % len(added)].id)
                continue
            session, kind, minute, key, remembered = write
            said = START + timedelta(minutes=minute)
            record = MemoryRecord(
                f"memory {n}",
                embedding=[1.0, 0.0, 0.0, 0.0],
                kind=kind,
                key=key,
                source_session_id=session,
                created_at=said,
                updated_at=said + timedelta(seconds=remembered),
            )
            added.append(await store.add(ANA, record))
        await store.add(MemoryScope("bo", tenant_id="t"), MemoryRecord("other scope", source_session_id="s1"))
        for limit in (1, 2, 30):
            expected = await MemoryStore.following(store, ANA, added, limit=limit)
            found = await store.following(ANA, added, limit=limit)
            assert _ids(found) == _ids(expected), limit


@settings(max_examples=40, deadline=None)
@given(writes)
def test_sqlite_following_keeps_the_rule(
    sequence: list[tuple[str | None, str, int, str | None, int] | int],
) -> None:
    asyncio.run(following_after(sequence, "sqlite"))


@settings(max_examples=40, deadline=None)
@given(writes)
def test_in_process_following_keeps_the_rule(
    sequence: list[tuple[str | None, str, int, str | None, int] | int],
) -> None:
    asyncio.run(following_after(sequence, "memory"))


@pytest.mark.postgres
@settings(max_examples=10, deadline=None)
@given(writes)
def test_postgres_following_keeps_the_rule(
    sequence: list[tuple[str | None, str, int, str | None, int] | int],
) -> None:
    asyncio.run(following_after(sequence, "postgres"))


async def test_the_default_reads_the_rule_off_the_listing() -> None:
    """The protocol's default, spelled out on a small case: later, same session and kind,
    oldest first."""
    store = InMemoryMemoryStore(dimensions=4)
    said = [
        await store.add(
            ANA, MemoryRecord(text, source_session_id=session, created_at=START + timedelta(minutes=m))
        )
        for text, session, m in [("a", "s1", 0), ("b", "s2", 1), ("c", "s1", 2), ("d", "s1", 3)]
    ]
    found = await MemoryStore.following(store, ANA, said, limit=2)
    assert [[r.text for r in f] for f in found] == [["c", "d"], [], ["d"], []]
    with pytest.raises(ValueError, match="limit"):
        await MemoryStore.following(store, ANA, said, limit=0)


# -- stores of the previous layout -----------------------------------------------------------------
async def _conversation(store: MemoryStore) -> list[MemoryRecord]:
    return [
        await store.add(
            ANA,
            MemoryRecord(
                text,
                embedding=[1.0, 0.0, 0.0, 0.0],
                source_session_id="s1",
                created_at=START + timedelta(minutes=m),
            ),
        )
        for m, text in enumerate(["Bo: been to Svalbard?", "Ana: yes, twice!"])
    ]


async def test_a_sqlite_file_of_layout_5_gains_the_session_index(tmp_path: Path) -> None:
    assert LAYOUT == 6
    path = tmp_path / "memory.db"
    old = SQLiteMemoryStore(path, dimensions=4)
    asked, answer = await _conversation(old)
    await old.aclose()

    def downgrade() -> None:
        with raw_file(path) as connection:
            connection.execute("DROP INDEX agentkeep_memories_session")
            connection.execute("UPDATE agentkeep_memory_meta SET value = '5' WHERE name = 'layout'")

    await asyncio.to_thread(downgrade)
    upgraded = SQLiteMemoryStore(path, dimensions=4)
    try:
        assert _ids(await upgraded.following(ANA, [asked, answer])) == [[answer.id], []]
    finally:
        await upgraded.aclose()


@pytest.mark.postgres
async def test_a_postgres_schema_of_layout_6_gains_the_session_index() -> None:
    assert MEMORY_LAYOUT == 7
    schema = new_schema("akmwin")
    old = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
    try:
        asked, answer = await _conversation(old)
        await old.aclose()
        meta = sql.Identifier(schema, "memory_meta")
        await execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, "memories_session")))
        await execute(sql.SQL("UPDATE {} SET value = '6' WHERE name = 'layout'").format(meta))
        upgraded = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
        try:
            assert _ids(await upgraded.following(ANA, [asked, answer])) == [[answer.id], []]
            indexes = await execute(
                sql.SQL(
                    "SELECT indexname FROM pg_indexes "
                    "WHERE schemaname = {} AND indexname = 'memories_session'"
                ).format(sql.Literal(schema))
            )
            assert indexes == [("memories_session",)]
        finally:
            await upgraded.aclose()
    finally:
        await drop_schema(schema)


# -- the provider ------------------------------------------------------------------------------------
async def test_a_recalled_chunk_comes_with_what_was_said_next(tmp_path: Path) -> None:
    """A question found by its words brings the answer said after it in its session; a follower
    that is itself recalled is not listed twice; ``window=0`` shows none."""
    store = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=64)
    embedder = HashingEmbedder(dimensions=64)
    memory = SemanticMemoryProvider(store, embedder, min_score=0.99, top_k=1)
    client = ScriptedChatClient(lambda messages: "ok")
    agent = Agent(client, context_providers=memory)
    session = agent.create_session(session_id="may")
    scope = set_memory_user(session, "ana")
    turns = [
        ("Bo", "Did you ever get to Svalbard on that kayaking trip?"),
        ("Ana", "Yes, twice: in 2019 and last March."),
        ("Bo", "Wow. I only made it to the Lofoten islands."),
    ]
    for n, (speaker, text) in enumerate(turns):
        said = START + timedelta(minutes=n)
        await memory.remember(
            scope, session, [Message("user", text, author_name=speaker, message_id=f"m{n}", created_at=said)]
        )
    hits = await memory.recall(scope, "Svalbard kayaking")
    assert [h.record.text for h in hits] == [turns[0][1]]
    (after,) = await memory.said_next(scope, hits)
    assert [r.text for r in after] == [turns[1][1]]

    later = agent.create_session(session_id="june")
    set_memory_user(later, "ana")
    await agent.run("Remind me about Svalbard kayaking", session=later)
    recalled = next(m.text for m in client.calls[-1] if m.role == "system" and "Memories from" in m.text)
    lines = recalled.splitlines()[1:]
    assert lines[0].startswith("- [2023-05-01] Bo: Did you ever get to Svalbard on that kayaking trip?")
    assert lines[1] == "  then [2023-05-01] Ana: Yes, twice: in 2019 and last March."

    unwindowed = SemanticMemoryProvider(store, embedder, min_score=0.99, window=0)
    assert await unwindowed.said_next(scope, hits) == [[]]
    with pytest.raises(ValueError, match="window"):
        SemanticMemoryProvider(store, embedder, window=-1)
    await store.aclose()


def test_followers_are_rendered_under_their_memory_once() -> None:
    first = MemoryRecord("Been to Svalbard?", created_at=START, metadata={"speaker": "Bo", "role": "user"})
    second = MemoryRecord("Yes, twice!", created_at=START + timedelta(days=1), metadata={"speaker": "Ana"})
    third = MemoryRecord("In winter? " * 60, created_at=START + timedelta(days=2), metadata={"speaker": "Bo"})
    hits = [MemoryHit(second, 0.9), MemoryHit(first, 0.5)]
    today = datetime(2024, 1, 2, tzinfo=UTC)
    by_time = render_memories(hits, today=today, order="time", following=[[third], [second]]).splitlines()[1:]
    assert by_time[0] == "- [2023-05-01] Bo: Been to Svalbard?"  # its follower is a hit: not again
    assert by_time[1] == "- [2023-05-02] Ana: Yes, twice!"
    assert by_time[2].startswith("  then [2023-05-03] Bo: In winter? In winter?")
    assert by_time[2].endswith("...")  # clipped
    assert len(by_time[2]) < 360
    with pytest.raises(ValueError):
        render_memories(hits, following=[[third]])  # one list per hit


class _Wrapped:
    """A store of the protocol's shape that does not derive from it: every call passed on to
    ``inner``, except ``following``, which it lacks (``missing``) or fails (``failing``)."""

    def __init__(self, inner: MemoryStore, *, failing: bool) -> None:
        self._inner = inner
        self._failing = failing

    def __getattr__(self, name: str) -> Any:
        if name == "following":
            if not self._failing:
                raise AttributeError(name)

            async def following(*args: object, **kwargs: object) -> list[list[MemoryRecord]]:
                raise StorageError("the store went away", backend="test")

            return following
        return getattr(self._inner, name)


@pytest.mark.parametrize("failing", [False, True], ids=["missing", "failing"])
async def test_a_store_without_following_still_recalls(failing: bool) -> None:
    """A store of the protocol's shape without ``following`` gets the protocol's default; one
    whose ``following`` fails still gives the memories found, without what followed them."""
    inner = InMemoryMemoryStore(dimensions=64)
    store = cast("MemoryStore", _Wrapped(inner, failing=failing))
    memory = SemanticMemoryProvider(store, HashingEmbedder(dimensions=64), min_score=0.99, top_k=1)
    client = ScriptedChatClient(lambda messages: "ok")
    agent = Agent(client, context_providers=memory)
    session = agent.create_session(session_id="may")
    scope = set_memory_user(session, "ana")
    for n, text in enumerate(["Did you ever get to Svalbard?", "Yes, twice."]):
        said = Message(
            "user", text, author_name="Bo" if n == 0 else "Ana", created_at=START + timedelta(minutes=n)
        )
        await memory.remember(scope, session, [said])
    later = agent.create_session(session_id="june")
    set_memory_user(later, "ana")
    await agent.run("Svalbard?", session=later)
    recalled = next(m.text for m in client.calls[-1] if m.role == "system" and "Memories from" in m.text)
    assert "Bo: Did you ever get to Svalbard?" in recalled
    assert ("then [2023-05-01] Ana: Yes, twice." in recalled) is not failing


@pytest.mark.postgres
async def test_postgres_orders_equal_times_by_code_point_whatever_the_collation() -> None:
    """In a database whose collation sorts ``tied-_`` before ``tied-B`` (ICU, en-US), what was
    said at one time still follows in code point order, as in the other stores."""
    name = new_schema("akicu")
    admin = URL.rsplit("/", 1)[0] + "/postgres"
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as connection:
        await connection.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 "
                "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            ).format(sql.Identifier(name))
        )
    try:
        store = PostgresMemoryStore.from_url(f"{admin.rsplit('/', 1)[0]}/{name}", dimensions=4)
        try:
            tied = [
                await store.add(
                    ANA,
                    MemoryRecord(f"tied {n}", id=f"tied-{n}", source_session_id="s", created_at=START),
                )
                for n in ("a", "_", "B")
            ]
            found = await store.following(ANA, tied, limit=5)
            assert _ids(found) == [[], ["tied-a"], ["tied-_", "tied-a"]]
        finally:
            await store.aclose()
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as connection:
            await connection.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
