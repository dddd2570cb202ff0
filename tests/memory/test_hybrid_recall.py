"""Hybrid recall: memories that carry their context (message, speaker, date), refreshes that keep
the newer text with history, recall by words and meaning with dates rendered, and stores of the
previous layout gaining the word index when opened."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from agentkeep import Agent, Message
from agentkeep.clients import ScriptedChatClient
from agentkeep.memory import InMemoryMemoryStore, MemoryHit, MemoryRecord, MemoryScope
from agentkeep.memory._lexical import (
    BM25,
    blended,
    indexed_text,
    names_in,
    query_terms,
    ranked,
    standout,
    words,
)
from agentkeep.memory._sqlite_file import LAYOUT
from agentkeep.memory.postgres import MEMORY_LAYOUT, PostgresMemoryStore
from agentkeep.memory.semantic import (
    CHUNK_KEY_PREFIX,
    SemanticMemoryProvider,
    render_memories,
    set_memory_user,
)
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.testing import HashingEmbedder
from tests.memory.backend_sqlite import raw_file
from tests.memory.test_scope_summary import SCOPES, Op, apply, opened, ops
from tests.message_stores.backend_postgres import URL, drop_schema, execute, new_schema

ANA = MemoryScope("ana", tenant_id="t")
SPRING = datetime(2023, 4, 12, 18, 30, tzinfo=UTC)


def test_fusion_blends_scaled_scores_and_the_named_speaker() -> None:
    cosines = {"a": 0.8, "b": 0.4, "c": 0.6, "d": -0.2}
    nearest = [("a", 0.8), ("c", 0.6), ("b", 0.4)]
    # over a, c, b, d: cosines .8 .6 .4 0 (a negative one counts 0) stand out by 1.18, words
    # 0 6 0 6 by 1: weights .6 * 1.4 and .4 * 1, to sum 1: .68 and .32;
    # a: .68; c: .68 * .75 + .32 = .83; b: .34; d: .32
    assert blended(nearest, [("c", 6.0), ("d", 6.0)], cosines) == ["c", "a", "b", "d"]
    assert blended(nearest, [("c", 6.0), ("d", 6.0)], cosines, named=["b"]) == ["b", "c", "a", "d"]
    assert blended([], [("x", 2.0), ("y", 1.0)], {}) == ["x", "y"]
    assert blended([("a", 0.5), ("b", 0.5)], [], cosines) == ["a", "b"]  # ties: the vector order
    # scaled by each ranking's best: multiplying one ranking's scores changes nothing
    assert blended(nearest, [("c", 600.0), ("d", 600.0)], cosines) == ["c", "a", "b", "d"]
    # a word match that stands out of the candidates' words is trusted more than one among many
    close = {"a": 0.9, "b": 0.85, "c": 0.8, "d": 0.75, "e": 0.7}
    by_cosine = sorted(close.items(), key=lambda pair: -pair[1])
    alone = [("e", 10.0), ("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)]
    crowded = [("e", 10.0), ("b", 9.0), ("c", 9.0), ("d", 9.0), ("a", 1.0)]
    assert blended(by_cosine, alone, close)[0] == "e"
    assert blended(by_cosine, crowded, close)[-1] == "e"
    # how far the best stands out: none in a ranking whose scores all tie, or of a single one
    assert standout([1.0, 1.0, 1.0, 1.0, 10.0]) == pytest.approx(2.0)
    assert standout([3.0, 3.0]) == standout([5.0]) == standout([]) == 0.0
    assert standout([2.0, 4.0, 9.0]) == pytest.approx(standout([200.0, 400.0, 900.0]))  # any scale
    assert blended([("a", 0.5), ("b", 0.5)], [("b", 2.0)], close) == ["b", "a"]  # tied cosines: words
    words_of = [("d", 1.0), ("a", 1.0)]
    order, scores = ranked(nearest, words_of, mode="hybrid", k=2, min_score=0.5, similarity=cosines)
    assert order == ["a", "c"]  # b under min_score is no candidate by meaning
    assert scores == {"a": 0.8, "c": 0.6}
    assert names_in(["what", "mary", "ann", "paint"], "Mary Ann")
    assert not names_in(["what", "mary", "paint"], "Mary Ann")
    assert not names_in(["what", "mary"], None)
    assert (
        indexed_text("Yes!", {"speaker": "Ana", "context": "Bo: Sushi?", "role": "user"})
        == "Yes!\nAna\nBo: Sushi?"
    )
    assert indexed_text("Yes!", {"speaker": 3}) == "Yes!"
    assert query_terms("When did Caroline go to the LGBTQ support group?") == [
        "caroline",
        "go",
        "lgbtq",
        "support",
        "group",
    ]


async def test_a_remembered_chunk_carries_its_message_speaker_and_date() -> None:
    store = InMemoryMemoryStore(dimensions=64)
    memory = SemanticMemoryProvider(store, HashingEmbedder(dimensions=64))
    agent = Agent(ScriptedChatClient(lambda messages: "Nice!"), context_providers=memory)
    session = agent.create_session(session_id="spring")
    scope = set_memory_user(session, "ana")
    said = Message(
        "user",
        "I adopted a grey kitten called Mochi.",
        author_name="Ana",
        message_id="m-1",
        created_at=SPRING,
    )
    await agent.run([said], session=session)
    (record,) = await store.list_memories(scope)
    assert record.created_at == SPRING  # when it was said, not when it was stored
    assert record.updated_at is not None
    assert record.updated_at > SPRING
    assert record.source_session_id == "spring"
    assert record.metadata == {"speaker": "Ana", "role": "user", "message_id": "m-1"}
    assert record.key is not None
    assert record.key.startswith(CHUNK_KEY_PREFIX)
    # the next turn's chunk keeps what was said just before it: the reply of the turn before
    await agent.run([Message("user", "Yes, twice!", author_name="Ana")], session=session)
    reply = next(r for r in await store.list_memories(scope) if r.text == "Yes, twice!")
    assert reply.metadata["context"] == "assistant: Nice!"
    found = await store.search(scope, None, text="nice", mode="lexical")
    assert [h.record.text for h in found] == ["Yes, twice!"]  # by the words of what it answers


async def test_a_refresh_keeps_the_newer_text_and_date_with_history() -> None:
    store = InMemoryMemoryStore(dimensions=64)
    memory = SemanticMemoryProvider(store, HashingEmbedder(dimensions=64), dedupe_threshold=0.8)
    session = Agent(ScriptedChatClient(lambda messages: "ok")).create_session(session_id="s")
    scope = set_memory_user(session, "ana")
    first = Message(
        "user", "My kitten Mochi is grey.", author_name="Ana", message_id="m-1", created_at=SPRING
    )
    again = Message(
        "user",
        "My kitten Mochi is grey!",
        author_name="Ana",
        message_id="m-2",
        created_at=SPRING + timedelta(days=30),
    )
    other = Message(
        "user",
        "My kitten Mochi is grey!",
        author_name="Ben",
        message_id="m-3",
        created_at=SPRING + timedelta(days=31),
    )
    for message in (first, again, other):
        await memory.remember(scope, session, [message])
    current = await store.list_memories(scope)
    by_speaker = {r.metadata["speaker"]: r for r in current}
    assert sorted(by_speaker) == ["Ana", "Ben"]  # another speaker's words never merge
    ana = by_speaker["Ana"]
    assert (ana.text, ana.created_at, ana.metadata["message_id"]) == (again.text, again.created_at, "m-2")
    assert ana.key is not None
    history = await store.history(scope, ana.key)
    assert [r.metadata["message_id"] for r in history] == ["m-1", "m-2"]
    assert [r.current for r in history] == [False, True]


async def test_recall_finds_by_words_and_renders_dates(tmp_path: Path) -> None:
    """A name the hashed embedder cannot relate to the question is found by its words; the
    message the model gets gives each memory's date and speaker, and today's date."""
    store = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=64)
    embedder = HashingEmbedder(dimensions=64)
    client = ScriptedChatClient(lambda messages: "ok")
    memory = SemanticMemoryProvider(store, embedder, min_score=0.99)
    agent = Agent(client, context_providers=memory)
    session = agent.create_session(session_id="spring")
    scope = set_memory_user(session, "ana")
    notes = [
        ("I signed up for pottery classes at Kilnworks.", SPRING),
        ("Work has been hectic this week.", SPRING + timedelta(days=3)),
        ("We watched a film about penguins.", SPRING + timedelta(days=9)),
    ]
    for n, (text, when) in enumerate(notes):
        message = Message("user", text, author_name="Ana", message_id=f"m-{n}", created_at=when)
        await memory.remember(scope, session, [message])
    hits = await memory.recall(scope, "Which studio did I take pottery lessons at?")
    assert hits[0].record.text == notes[0][0]
    assert hits[0].lexical_score is not None
    vector_only = SemanticMemoryProvider(store, embedder, min_score=0.99, mode="vector")
    assert await vector_only.recall(scope, "Which studio did I take pottery lessons at?") == []
    windowed = await memory.recall(scope, "pottery film work", since=SPRING + timedelta(days=1))
    assert {h.record.text for h in windowed} == {notes[1][0], notes[2][0]}
    later = agent.create_session(session_id="later")
    set_memory_user(later, "ana")
    await agent.run("Remind me where my pottery classes are?", session=later)
    recalled = next(m.text for m in client.calls[-1] if m.role == "system" and "Memories from" in m.text)
    assert f"today is {datetime.now(UTC).date().isoformat()}" in recalled
    assert "- [2023-04-12] Ana: I signed up for pottery classes at Kilnworks. (session spring)" in recalled
    await store.aclose()


def test_recalled_memories_may_be_listed_oldest_first() -> None:
    later = MemoryRecord("We moved to Porto.", created_at=SPRING + timedelta(days=40))
    earlier = MemoryRecord(
        "We visited Porto.", created_at=SPRING, metadata={"speaker": "Ana", "role": "user"}
    )
    hits = [MemoryHit(later, 0.9), MemoryHit(earlier, 0.5)]
    today = datetime(2024, 1, 2, tzinfo=UTC)
    by_relevance = render_memories(hits, today=today).splitlines()
    assert by_relevance[0].endswith("(most relevant first; today is 2024-01-02):")
    assert by_relevance[1:] == ["- [2023-05-22] We moved to Porto.", "- [2023-04-12] Ana: We visited Porto."]
    by_time = render_memories(hits, today=today, order="time").splitlines()
    assert "oldest first" in by_time[0]
    assert by_time[1:] == ["- [2023-04-12] Ana: We visited Porto.", "- [2023-05-22] We moved to Porto."]
    question = "Bo: Where did you go in April?\n" + "And then? " * 30
    reply = MemoryRecord("Porto!", created_at=SPRING, metadata={"speaker": "Ana", "context": question})
    (line,) = render_memories([MemoryHit(reply, 0.5)], today=today).splitlines()[1:]
    assert line.startswith("- [2023-04-12] Ana: Porto! (replying to Bo: Where did you go in April? And then?")
    assert line.endswith("And th...)")  # clipped, on one line
    assert len(line) < 210
    with pytest.raises(ValueError, match="order"):
        SemanticMemoryProvider(
            InMemoryMemoryStore(dimensions=8),
            HashingEmbedder(dimensions=8),
            order="random",  # pyright: ignore[reportArgumentType]
        )


def test_the_provider_refuses_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode"):
        SemanticMemoryProvider(InMemoryMemoryStore(dimensions=8), HashingEmbedder(dimensions=8), mode="fuzzy")  # pyright: ignore[reportArgumentType]


# -- stores of the previous layout ---------------------------------------------------------------
def _axis(n: int) -> list[float]:
    return [1.0 if i == n else 0.0 for i in range(4)]


def _downgrade_sqlite_to_layout_3(path: Path) -> None:
    with raw_file(path) as connection:
        connection.execute("DROP TABLE agentkeep_memory_words")
        connection.execute("DROP INDEX agentkeep_memories_said")
        connection.execute("DROP INDEX agentkeep_memories_session")
        connection.execute("UPDATE agentkeep_memory_meta SET value = '3' WHERE name = 'layout'")


_REPLY = MemoryRecord(
    "Yes, twice!", embedding=_axis(3), metadata={"speaker": "Ana", "context": "Bo: Been to Svalbard?"}
)


async def _written_at_the_previous_layout(store: SQLiteMemoryStore | PostgresMemoryStore) -> None:
    await store.add(ANA, _REPLY)
    await store.add(ANA, MemoryRecord("Ana keeps bees in Tromsø.", embedding=_axis(0), key="hobby"))
    await store.add(ANA, MemoryRecord("Ana keeps goats in Tromsø.", embedding=_axis(0), key="hobby"))
    await store.add(ANA, MemoryRecord("Ana's profile: beekeeper", key="profile"))  # no vector
    await store.add(MemoryScope("bo"), MemoryRecord("Bo keeps bees too.", embedding=_axis(1)))


async def _words_are_indexed(store: SQLiteMemoryStore | PostgresMemoryStore) -> None:
    async def found(text: str) -> list[str]:
        return [h.record.text for h in await store.search(ANA, None, text=text, mode="lexical")]

    assert await found("goats") == ["Ana keeps goats in Tromsø."]
    assert await found("Svalbard") == ["Yes, twice!"]  # by the words of what it answers
    assert await found("bees beekeeper") == []  # superseded, no vector, another scope
    await store.add(ANA, MemoryRecord("Ana rows on Saturdays.", embedding=_axis(2)))
    assert await found("rows") == ["Ana rows on Saturdays."]


def _index_sqlite_text_alone(path: Path) -> None:
    """The word index as layout 4 kept it: each memory's text alone."""
    with raw_file(path) as connection:
        connection.execute(
            "UPDATE agentkeep_memory_words SET text = "
            "(SELECT m.text FROM agentkeep_memories AS m WHERE m.rowid = agentkeep_memory_words.rowid)"
        )
        connection.execute("DROP INDEX agentkeep_memories_session")
        connection.execute("UPDATE agentkeep_memory_meta SET value = '4' WHERE name = 'layout'")


@pytest.mark.parametrize(
    "downgrade",
    [_downgrade_sqlite_to_layout_3, _index_sqlite_text_alone],
    ids=["layout 3 gains the word index", "layout 4 indexes speakers and contexts"],
)
async def test_a_sqlite_file_of_an_older_layout_is_upgraded(
    tmp_path: Path, downgrade: Callable[[Path], None]
) -> None:
    assert LAYOUT == 6
    path = tmp_path / "memory.db"
    old = SQLiteMemoryStore(path, dimensions=4)
    await _written_at_the_previous_layout(old)
    await old.aclose()
    await asyncio.to_thread(downgrade, path)
    upgraded = SQLiteMemoryStore(path, dimensions=4)
    try:
        await _words_are_indexed(upgraded)
    finally:
        await upgraded.aclose()


@pytest.mark.postgres
async def test_a_postgres_schema_of_layout_4_gains_the_word_index() -> None:
    assert MEMORY_LAYOUT == 7
    schema = new_schema("akmhyb")
    old = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
    try:
        await _written_at_the_previous_layout(old)
        await old.aclose()
        await execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, "memories_words")))
        memories, meta = (sql.Identifier(schema, t) for t in ("memories", "memory_meta"))
        await execute(sql.SQL("ALTER TABLE {} DROP COLUMN words").format(memories))
        await execute(sql.SQL("UPDATE {} SET value = '4' WHERE name = 'layout'").format(meta))
        upgraded = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
        try:
            await _words_are_indexed(upgraded)
            recorded = await execute(sql.SQL("SELECT value FROM {} WHERE name = 'layout'").format(meta))
            assert recorded == [("7",)]
        finally:
            await upgraded.aclose()
    finally:
        await drop_schema(schema)


@pytest.mark.postgres
async def test_a_postgres_schema_of_layout_5_indexes_speakers_and_contexts() -> None:
    schema = new_schema("akmhyb")
    old = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
    try:
        await _written_at_the_previous_layout(old)
        await old.aclose()
        memories, meta = (sql.Identifier(schema, t) for t in ("memories", "memory_meta"))
        await execute(sql.SQL("ALTER TABLE {} DROP COLUMN words").format(memories))  # layout 5's: text alone
        await execute(
            sql.SQL(
                "ALTER TABLE {} ADD COLUMN words tsvector "
                "GENERATED ALWAYS AS (to_tsvector('english', text)) STORED"
            ).format(memories)
        )
        await execute(sql.SQL("UPDATE {} SET value = '5' WHERE name = 'layout'").format(meta))
        upgraded = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
        try:
            await _words_are_indexed(upgraded)
        finally:
            await upgraded.aclose()
    finally:
        await drop_schema(schema)


# -- the word index after any writes ---------------------------------------------------------------
async def words_after(sequence: list[Op], backend: str) -> None:
    """After every write, a search by each word finds exactly the memories a search by meaning
    can find (current, unexpired, with a vector) whose text, speaker or context holds that word,
    in each scope."""
    async with opened(backend) as store:
        added: list[tuple[MemoryScope, str]] = []
        start = datetime.now(UTC)
        for op in sequence:
            await apply(op, store, added, start)
            for scope in SCOPES:
                findable = await store.search(scope, [1.0, 1.0, 1.0, 1.0], k=1_000)
                indexed = {
                    h.record.id: words(indexed_text(h.record.text, h.record.metadata)) for h in findable
                }
                vocabulary = {"memory", "moved", "ann0", "asked1"} | {
                    w for found in indexed.values() for w in found
                }
                for word in sorted(vocabulary):
                    expected = {memory for memory, found in indexed.items() if word in found}
                    hits = await store.search(scope, None, k=1_000, text=word, mode="lexical")
                    assert {h.record.id for h in hits} == expected, (scope, word)


@settings(max_examples=25, deadline=None)
@given(st.lists(ops, min_size=1, max_size=20))
def test_the_sqlite_word_index_follows_any_writes(sequence: list[Op]) -> None:
    asyncio.run(words_after(sequence, "sqlite"))


@settings(max_examples=25, deadline=None)
@given(st.lists(ops, min_size=1, max_size=20))
def test_the_in_process_word_index_follows_any_writes(sequence: list[Op]) -> None:
    asyncio.run(words_after(sequence, "memory"))


@pytest.mark.postgres
@settings(max_examples=8, deadline=None)
@given(st.lists(ops, min_size=1, max_size=12))
def test_the_postgres_word_index_follows_any_writes(sequence: list[Op]) -> None:
    asyncio.run(words_after(sequence, "postgres"))


_BM25_WORDS = ["kayak", "kayaks", "teal", "tea", "bees", "porto", "the"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.lists(st.sampled_from(_BM25_WORDS), max_size=6) | st.none()),
        max_size=30,
    )
)
def test_bm25_kept_up_by_writes_scores_as_one_built_afresh(
    writes: list[tuple[int, list[str] | None]],
) -> None:
    kept = BM25()
    texts: dict[str, str] = {}
    for key, said in writes:
        if said is None:
            kept.remove(f"m{key}")
            texts.pop(f"m{key}", None)
        else:
            kept.put(f"m{key}", " ".join(said))
            texts[f"m{key}"] = " ".join(said)
    fresh = BM25()
    for key, text in texts.items():
        fresh.put(key, text)
    assert len(kept) == len(texts)
    for query in (["kayak"], ["teal", "bees"], _BM25_WORDS):
        assert kept.scores(query, texts) == pytest.approx(fresh.scores(query, texts))
