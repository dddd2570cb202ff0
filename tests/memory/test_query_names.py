"""Names in the question: a search embeds the question without the names of the scope's speakers
it names (the fusion's speaker preference matches them), so "What did Caroline research?" is
near what Caroline said about research, not near every memory that mentions Caroline."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkeep import Agent, AgentSession, Message
from agentkeep.clients import ScriptedChatClient
from agentkeep.memory import InMemoryMemoryStore, MemoryScope, MemoryStore
from agentkeep.memory._lexical import names_in, query_terms, without_names, words
from agentkeep.memory.embedders import MiniLMEmbedder
from agentkeep.memory.semantic import SemanticMemoryProvider, set_memory_user
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.testing import HashingEmbedder

SCOPE = MemoryScope("friends", tenant_id="t")
OTHER = MemoryScope("strangers", tenant_id="t")
SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "names", "expected"),
    [
        ("What did Caroline research?", ["Caroline"], "What did research?"),
        ("What is caroline's job?", ["Caroline"], "What is job?"),
        ("Where did Caroline\u2019s sister move?", ["Caroline"], "Where did sister move?"),
        ("When did Mary Ann and Bo go hiking?", ["Mary Ann", "Bo"], "When did and go hiking?"),
        ("What did Carolines say?", ["Caroline"], "What did Carolines say?"),  # whole words only
        ("Did Bo like Bobby's gift?", ["Bo"], "Did like Bobby's gift?"),
        ("Caroline?", ["Caroline"], "Caroline?"),  # nothing would be left: the text itself
        ("What did Caroline research?", [], "What did Caroline research?"),
        ("Was Zoë at the café?", ["Zoë"], "Was at the café?"),
    ],
)
def test_names_are_left_out_as_whole_words(text: str, names: list[str], expected: str) -> None:
    assert without_names(text, names) == expected


_NAME = st.text(st.sampled_from("abcdeyzÉéß"), min_size=1, max_size=6)


@given(
    st.lists(st.one_of(_NAME, st.sampled_from(["what", "did", "say", "'s", "?", "-", "2023"])), max_size=12),
    st.lists(_NAME, max_size=3),
)
def test_no_word_of_a_name_is_left_and_no_other_word_is_lost(parts: list[str], names: list[str]) -> None:
    text = " ".join(parts)
    kept = without_names(text, names)
    gone = {w for name in names for w in words(name)}
    if kept == text:  # nothing was named, or nothing else would be left
        return
    assert not gone & set(words(kept))
    assert [w for w in words(text) if w not in gone and w != "s"] == [w for w in words(kept) if w != "s"]


class RecordingEmbedder(HashingEmbedder):
    """The hashed embedder, keeping every text it was asked to embed."""

    def __init__(self, dimensions: int) -> None:
        super().__init__(dimensions)
        self.texts: list[str] = []
        self.batches: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        self.batches.append(list(texts))
        return await super().embed(texts)


async def _remember(memory: SemanticMemoryProvider, scope: MemoryScope, said: list[tuple[str, str]]) -> None:
    session = AgentSession(session_id=f"s-{scope.user_id}")
    for at, (speaker, text) in enumerate(said):
        message = Message(
            "user",
            text,
            author_name=speaker,
            message_id=f"{scope.user_id}-{at}",
            created_at=SAID + timedelta(minutes=at),
        )
        await memory.remember(scope, session, [message])


def _stores(tmp_path: Path) -> list[MemoryStore]:
    return [InMemoryMemoryStore(dimensions=64), SQLiteMemoryStore(tmp_path / "memory.db", dimensions=64)]


async def test_the_query_vector_leaves_out_the_speakers_the_question_names(tmp_path: Path) -> None:
    for store in _stores(tmp_path):
        try:
            embedder = RecordingEmbedder(64)
            memory = SemanticMemoryProvider(store, embedder)
            await _remember(
                memory,
                SCOPE,
                [
                    ("Caroline", "I have been researching adoption agencies."),
                    ("Melanie", "Paris was lovely."),
                ],
            )
            await _remember(memory, OTHER, [("Jon", "I love the sea.")])
            embedder.texts.clear()
            asked = await memory.query_vector(SCOPE, "What did Caroline research in Paris?")
            # Caroline is a speaker of the scope; Paris is only a word of a memory
            assert embedder.texts == ["What did research in Paris?"]
            assert asked == (await embedder.embed(["What did research in Paris?"]))[0]
            embedder.texts.clear()
            own = (await embedder.embed(["What does Jon love?"]))[0]
            embedder.texts.clear()
            # Jon speaks in another scope only: the question is embedded as asked (and not again)
            assert await memory.query_vector(SCOPE, "What does Jon love?", vector=own) == own
            assert embedder.texts == []
            assert await memory.query_vector(OTHER, "What does Jon love?", vector=own) != own
            assert embedder.texts == ["What does love?"]
            embedder.texts.clear()
            await memory.query_vector(SCOPE, "Melanie and Caroline?")  # nothing else: as asked
            assert embedder.texts == ["Melanie and Caroline?"]
        finally:
            await store.aclose()


async def test_recall_embeds_the_question_without_the_name_in_every_mode_by_meaning(tmp_path: Path) -> None:
    store = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=64)
    try:
        embedder = RecordingEmbedder(64)
        said = [("Caroline", "I went to a support group yesterday."), ("Melanie", "Caroline is brave.")]
        for mode in ("hybrid", "vector"):
            memory = SemanticMemoryProvider(store, embedder, mode=mode, min_score=-1.0)
            if mode == "hybrid":
                await _remember(memory, SCOPE, said)
            embedder.texts.clear()
            await memory.recall(SCOPE, "Which group did Caroline go to?")
            assert embedder.texts == ["Which group did go to?"], mode
        lexical = SemanticMemoryProvider(store, embedder, mode="lexical")
        embedder.texts.clear()
        await lexical.recall(SCOPE, "Which group did Caroline go to?")
        assert embedder.texts == []  # a search by words embeds nothing
    finally:
        await store.aclose()


async def test_a_named_speakers_subject_outranks_mentions_of_the_name(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    """With the packaged model: the question's name left in its embedding pulls it toward the
    turns that mention the name; left out, the speaker's own turn about the subject comes first
    (the fusion prefers Caroline's turns, and her turn about research is the nearest of them)."""
    store = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=minilm.dimensions)
    try:
        memory = SemanticMemoryProvider(store, minilm, mode="vector", min_score=-1.0, top_k=3)
        said = [
            ("Melanie", "Caroline, you are so brave!"),
            ("Melanie", "Caroline and I went to the beach with the kids."),
            ("Caroline", "Thanks Melanie! How are the kids?"),
            ("Caroline", "I've been looking into adoption agencies for weeks now."),
            ("Melanie", "Caroline, that painting of yours is lovely."),
        ]
        await _remember(memory, SCOPE, said)
        question = "What did Caroline research?"
        (as_asked,) = await minilm.embed([question])
        plain = await store.search(SCOPE, as_asked, k=1, mode="vector")
        assert plain[0].record.text != said[3][1]  # as asked: a turn that says "Caroline"
        hits = await memory.recall(SCOPE, question)
        assert hits[0].record.text == said[3][1]
        hybrid = SemanticMemoryProvider(store, minilm, top_k=1)
        assert [h.record.text for h in await hybrid.recall(SCOPE, question)] == [said[3][1]]
    finally:
        await store.aclose()


async def test_a_run_embeds_the_input_and_its_search_text_in_one_call() -> None:
    store = InMemoryMemoryStore(dimensions=64)
    embedder = RecordingEmbedder(64)
    memory = SemanticMemoryProvider(store, embedder, min_score=-1.0)
    agent = Agent(ScriptedChatClient(lambda messages: "ok"), context_providers=memory)
    session = agent.create_session()
    scope = set_memory_user(session, "friends")
    await _remember(memory, scope, [("Caroline", "I went to a support group yesterday.")])
    embedder.batches.clear()
    question = Message("user", "Which group did Caroline go to?", author_name="Melanie")
    await agent.run([question], session=session)
    assert embedder.batches[0] == ["Which group did Caroline go to?", "Which group did go to?"]
    assert all("Which group did go to?" not in batch for batch in embedder.batches[1:])
    remembered = [r for r in await store.list_memories(scope) if r.metadata["speaker"] == "Melanie"]
    (as_said,) = await embedder.embed([question.text])
    assert len(remembered) == 1
    assert remembered[0].embedding == pytest.approx(as_said)  # remembered as said


def test_a_name_is_named_by_its_words_among_the_query_terms() -> None:
    terms = query_terms("What did Mary Ann paint?")
    assert names_in(terms, "Mary Ann")
    assert without_names("What did Mary Ann paint?", ["Mary Ann"]) == "What did paint?"
