"""Semantic memory: recall with the real packaged embeddings, and the provider across sessions,
users and tenants (scripted model; the memories in the SQLite store with sqlite-vec)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from agentkeep import Agent, AgentSession, ChatOptions, Message
from agentkeep.clients import ScriptedChatClient
from agentkeep.errors import ChatClientError
from agentkeep.memory import MAX_MEMORY_TEXT, InMemoryMemoryStore, MemoryRecord, MemoryScope
from agentkeep.memory.embedders import CachedEmbedder, MiniLMEmbedder
from agentkeep.memory.semantic import FactExtractor, SemanticMemoryProvider, memory_scope, set_memory_user
from agentkeep.memory.sqlite import SQLiteMemoryStore
from tests.memory.recall_set import FACTS, QUERIES


async def test_recall_with_the_packaged_model(minilm: MiniLMEmbedder) -> None:
    """recall@1 and @3 over the committed set (measured: 33/36 and 36/36); the floors are lower."""
    store = InMemoryMemoryStore(dimensions=minilm.dimensions)
    scope = MemoryScope("maren")
    ids = [
        (await store.add(scope, MemoryRecord(text, embedding=vector))).id
        for text, vector in zip(FACTS, await minilm.embed(FACTS), strict=True)
    ]
    at_1 = at_3 = 0
    vectors = await minilm.embed([query for query, _ in QUERIES])
    for (_, wanted), vector in zip(QUERIES, vectors, strict=True):
        found = [ids.index(hit.record.id) for hit in await store.search(scope, vector, k=3)]
        at_1 += found[0] == wanted
        at_3 += wanted in found
    assert len(QUERIES) >= 30
    assert at_1 / len(QUERIES) >= 0.7, f"recall@1 {at_1}/{len(QUERIES)}"
    assert at_3 / len(QUERIES) >= 0.85, f"recall@3 {at_3}/{len(QUERIES)}"


async def test_the_model_embeds_in_batches_normalized(minilm: MiniLMEmbedder) -> None:
    vectors = await minilm.embed(["a cat sits on the mat", "a feline rests on a rug", "stock prices fell"])
    assert [len(v) for v in vectors] == [384] * 3
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-4 for v in vectors)
    close = sum(a * b for a, b in zip(vectors[0], vectors[1], strict=True))
    far = sum(a * b for a, b in zip(vectors[0], vectors[2], strict=True))
    assert close > far
    assert await minilm.embed([]) == []


async def test_batches_of_mixed_lengths_come_back_in_order_as_encode_gives_them() -> None:
    """The embedder calls the model's modules itself, by batches of like length: each text gets
    the vector sentence-transformers' own encode() gives it alone, whatever it was batched with."""
    embedder = MiniLMEmbedder(batch_size=3)
    texts = [("word " * n).strip() for n in (1, 40, 3, 300, 7, 2, 90)]  # 300 words: truncated
    vectors = await embedder.embed(texts)
    model = embedder._model  # pyright: ignore[reportPrivateUsage]
    for text, vector in zip(texts, vectors, strict=True):
        (alone,) = model.encode([text], normalize_embeddings=True, show_progress_bar=False)
        assert vector == pytest.approx([float(v) for v in alone], abs=1e-5)
    await embedder.aclose()


class CountingEmbedder:
    """A tiny deterministic embedder that counts what it is asked (for the cache)."""

    dimensions = 4

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.asked.extend(texts)
        return [[float(len(t)), 1.0, float(t.count(" ")), 0.5] for t in texts]


async def test_the_cache_embeds_each_text_once() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, max_entries=2)
    first = await cached.embed(["a b", "c", "a b"])
    assert inner.asked == ["a b", "c"]
    assert first[0] == first[2]
    assert await cached.embed(["c"]) == [first[1]]
    assert inner.asked == ["a b", "c"]
    await cached.embed(["d"])  # evicts the least recently used ("a b")
    await cached.embed(["a b"])
    assert inner.asked == ["a b", "c", "d", "a b"]
    assert (cached.hits, cached.misses) == (2, 4)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
    memories = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=384)
    await memories.setup()
    yield memories
    await memories.aclose()


def _recalled(client: ScriptedChatClient, call: int = -1) -> str:
    """The recalled-memories message the model got on a call ("" when none)."""
    return next((m.text for m in client.calls[call] if m.role == "system" and "Memories from" in m.text), "")


async def test_memories_of_one_session_are_recalled_in_the_next(
    store: SQLiteMemoryStore, minilm: MiniLMEmbedder
) -> None:
    client = ScriptedChatClient(lambda messages: "Noted.")
    memory = SemanticMemoryProvider(store, CachedEmbedder(minilm))
    agent = Agent(client, context_providers=memory)
    first = agent.create_session(session_id="monday")
    set_memory_user(first, "maren")
    await agent.run("My dog is a golden retriever called Pixel.", session=first)
    await agent.run("I am allergic to peanuts.", session=first)
    await agent.run("I am allergic to peanuts.", session=first)  # said again: kept once

    later = agent.create_session(session_id="friday")
    set_memory_user(later, "maren")
    await agent.run("What was the name of my dog?", session=later)
    recalled = _recalled(client)
    assert "Pixel" in recalled
    assert "session monday" in recalled
    scope = memory_scope(later)
    assert scope is not None
    texts = [r.text for r in await store.list_memories(scope)]
    assert texts.count("I am allergic to peanuts.") == 1

    # Another user, another tenant, a session without a user: nothing recalled.
    bob = agent.create_session(session_id="bob-1")
    set_memory_user(bob, "bob")
    other_tenant = AgentSession(session_id="t-1", isolation_key="globex")
    set_memory_user(other_tenant, "maren")
    anonymous = agent.create_session()
    for session in (bob, other_tenant, anonymous):
        await agent.run("What was the name of my dog?", session=session)
        assert _recalled(client) == ""
    assert await store.list_memories(MemoryScope("maren", tenant_id="globex")) != []  # its own
    assert await store.list_memories(MemoryScope("maren", tenant_id="globex")) != await store.list_memories(
        scope
    )


async def test_a_failed_run_remembers_nothing(store: SQLiteMemoryStore, minilm: MiniLMEmbedder) -> None:
    def broken(messages: Sequence[Message]) -> str:
        raise ChatClientError("down")

    agent = Agent(ScriptedChatClient(broken), context_providers=SemanticMemoryProvider(store, minilm))
    session = agent.create_session()
    scope = set_memory_user(session, "maren")
    with pytest.raises(ChatClientError):
        await agent.run("My bank is DNB.", session=session)
    assert await store.list_memories(scope) == []


async def test_facts_with_a_key_replace_older_ones(store: SQLiteMemoryStore, minilm: MiniLMEmbedder) -> None:
    """The contradiction rule: a newer fact about the same key replaces the older (history kept)."""

    def extract(messages: Sequence[Message], options: ChatOptions) -> str:
        said = messages[-1].text
        if options.get("response_format") is None:
            return "Got it."
        if "Lisbon" in said:
            facts = [{"key": "home_city", "text": "The user lives in Lisbon."}]
        elif "Porto" in said:
            facts = [{"key": "Home City", "text": "The user lives in Porto."}]
        else:
            facts = []
        return json.dumps({"facts": facts})

    client = ScriptedChatClient(extract)
    memory = SemanticMemoryProvider(store, minilm, extractor=FactExtractor(client))
    agent = Agent(client, context_providers=memory)
    session = agent.create_session()
    scope = set_memory_user(session, "maren")
    await agent.run("I live in Lisbon.", session=session)
    await agent.run("I live in Lisbon.", session=session)  # said again: the newer one replaces it
    await agent.run("I moved to Porto last week.", session=session)
    await agent.run("Hello again.", session=session)  # no facts
    current = await store.list_memories(scope)
    assert [(r.key, r.text) for r in current] == [("fact.home_city", "The user lives in Porto.")]
    history = await store.history(scope, "fact.home_city")
    assert [r.text for r in history] == [
        "The user lives in Lisbon.",
        "The user lives in Lisbon.",
        "The user lives in Porto.",
    ]
    await agent.run("Where do I live?", session=session)
    answer_call = -2  # the last call is the run's extraction
    assert "Porto" in _recalled(client, answer_call)
    assert "Lisbon" not in _recalled(client, answer_call)


def test_the_provider_refuses_an_embedder_of_other_dimensions() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        SemanticMemoryProvider(InMemoryMemoryStore(dimensions=8), CountingEmbedder())


async def test_memory_failures_do_not_fail_a_turn_that_succeeded(
    tmp_path: Path, minilm: MiniLMEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    """A store gone away, or a message longer than a memory holds: the turn and its history stand."""
    memories = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=384)
    await memories.setup()
    agent = Agent(
        ScriptedChatClient(lambda messages: "ok"), context_providers=SemanticMemoryProvider(memories, minilm)
    )
    session = agent.create_session()
    scope = set_memory_user(session, "maren")
    long_message = "I keep a diary. " * 2_000  # 32,000 characters: split into memories that fit
    await agent.run(long_message, session=session)
    kept = await memories.list_memories(scope)
    assert kept  # (the two halves are alike enough to be kept once)
    assert all(len(r.text) <= MAX_MEMORY_TEXT for r in kept)
    await memories.aclose()  # from now on every memory call fails
    with caplog.at_level("WARNING", logger="agentkeep.memory"):
        answer = await agent.run("Still there?", session=session)
    assert answer.text == "ok"
    history = agent.history_provider()
    assert history is not None
    stored = [m.text for m in await history.get_session_messages(session)]
    assert stored[-2:] == ["Still there?", "ok"]
    assert any("remembering a turn failed" in r.getMessage() for r in caplog.records)
