"""Recall evaluation: how often memory finds a turn that answers a question, by words (BM25),
by meaning (embeddings) and both fused (hybrid), in one run.

Each conversation's turns are remembered as the semantic memory provider remembers a user's
messages (``SemanticMemoryProvider.remember``: one chunk per turn, with its speaker, message id
and the session's date; near-identical turns of one speaker kept once), in a SQLite memory store
of its own (or the in-process one); each question is then searched in its conversation's scope
in the three modes. A question counts as found at ``k`` when one of the turns labelled as its
evidence is among the ``k`` first hits. Printed: recall@1/5/10 per category and mode, and for
the hybrid hits with what was said next after each (the turn after it in its session, as the
provider shows a recalled chunk with ``window=1``: "hybrid+next", k hits and their followers).

Sets:

* the committed one (default): ``bench/data/recall_conversations.json``, written by
  ``bench/data/make_recall_set.py`` (six conversations, 340 questions: single-hop, multi-hop,
  temporal, and dated ones that name the day or month something was told);
* LoCoMo (``--locomo PATH``): the ``data/locomo10.json`` file of the snap-research/locomo
  repository on GitHub (10 conversations, 1,986 questions; licence CC BY-NC 4.0: not shipped
  here, point at your own copy). Its categories are numbered; the names used are those of its
  paper (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial). The 1,536
  questions of the first four categories that name their evidence are asked; adversarial ones
  (about something the conversation never says) have no answer to find.

``--embed-as`` measures other texts to embed for each turn (its speaker, the turn it replies to;
:data:`EMBED_AS`) with everything else as the provider does it.

Run: ``.venv/bin/python bench/eval_memory.py [--locomo PATH] [--embedder minilm|hashing]
[--store sqlite|memory] [--plain] [--embed-as text|speaker|reply|reply-text|mix]
[--vectors CACHE.npz] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np

from agentkeep import AgentSession, Message
from agentkeep.memory import InMemoryMemoryStore, MemoryRecord, MemoryScope, MemoryStore
from agentkeep.memory.embedders import Embedder
from agentkeep.memory.semantic import SemanticMemoryProvider
from agentkeep.testing import HashingEmbedder

SET: Final = Path(__file__).parent / "data" / "recall_conversations.json"
MODE_NAMES: Final = {
    "lexical": "BM25",
    "vector": "embeddings",
    "unnamed": "embeddings-names",
    "hybrid": "hybrid",
    "next": "hybrid+next",
}
RANKINGS: Final = ("lexical", "vector", "unnamed", "hybrid")
"""The rankings each question is searched with: the three modes (the vector ranking of the
question as asked), and the vector ranking of what the provider embeds of the question
(``"unnamed"``: without the names of the speakers it names,
:meth:`SemanticMemoryProvider.query_vector`; the hybrid ranks by it too)."""
COLUMNS: Final = (*RANKINGS, "next")
"""What is reported: the rankings, then the hybrid's hits each with what was said next."""
KS: Final = (1, 5, 10)
POOL: Final = 50
LOCOMO_CATEGORIES: Final = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
}


@dataclass(frozen=True, slots=True)
class Turn:
    id: str
    session: str
    speaker: str
    text: str
    said_at: datetime


@dataclass(frozen=True, slots=True)
class Question:
    conversation: str
    category: str
    text: str
    evidence: frozenset[str]


@dataclass(frozen=True, slots=True)
class EvalSet:
    name: str
    conversations: dict[str, list[Turn]]
    questions: list[Question]


def load_committed(path: Path = SET) -> EvalSet:
    """The committed set (see ``bench/data/make_recall_set.py``)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations = {
        c["id"]: [
            Turn(t["id"], s["id"], t["speaker"], t["text"], datetime.fromisoformat(s["date"]))
            for s in c["sessions"]
            for t in s["turns"]
        ]
        for c in data["conversations"]
    }
    questions = [
        Question(q["conversation"], q["category"], q["question"], frozenset(q["evidence"]))
        for q in data["questions"]
    ]
    return EvalSet(path.name, conversations, questions)


_LOCOMO_DATE: Final = re.compile(r"(\d{1,2}):(\d{2}) ?([ap]m) on (\d{1,2}) (\w+),? (\d{4})", re.IGNORECASE)


def _locomo_date(text: str) -> datetime:
    """LoCoMo's session dates ("1:56 pm on 8 May, 2023")."""
    found = _LOCOMO_DATE.search(text)
    if found is None:
        raise ValueError(f"not a LoCoMo session date: {text!r}")
    hour, minute, half, day, month, year = found.groups()
    stamp = f"{int(hour) % 12 + (12 if half.lower() == 'pm' else 0)}:{minute} {day} {month} {year}"
    return datetime.strptime(stamp, "%H:%M %d %B %Y").replace(tzinfo=UTC)


def load_locomo(path: Path) -> EvalSet:
    """LoCoMo's ``locomo10.json``: every session's turns (dated by the session), every question
    with evidence (each conversation's turn ids are prefixed with its sample id)."""
    samples: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    conversations: dict[str, list[Turn]] = {}
    questions: list[Question] = []
    for sample in samples:
        name = str(sample["sample_id"])
        dialogue = sample["conversation"]
        turns: list[Turn] = []
        number = 1
        while f"session_{number}" in dialogue:
            said_at = _locomo_date(dialogue[f"session_{number}_date_time"])
            for turn in dialogue[f"session_{number}"]:
                text = turn.get("text", "")
                if turn.get("blip_caption"):  # a shared photo: what it shows is part of the turn
                    text = f"{text} [shares a photo of {turn['blip_caption']}]"
                turns.append(
                    Turn(f"{name}:{turn['dia_id']}", f"{name}:S{number}", turn["speaker"], text, said_at)
                )
            number += 1
        conversations[name] = turns
        for qa in sample["qa"]:
            evidence = frozenset(f"{name}:{e.strip()}" for e in qa.get("evidence", []) if e.strip())
            if evidence and int(qa["category"]) in LOCOMO_CATEGORIES:
                category = LOCOMO_CATEGORIES[int(qa["category"])]
                questions.append(Question(name, category, str(qa["question"]), evidence))
    return EvalSet(path.name, conversations, questions)


async def remember(
    provider: SemanticMemoryProvider,
    scope: MemoryScope,
    turns: Sequence[Turn],
    vectors: dict[str, list[float]],
    *,
    plain: bool = False,
    embedded: dict[str, list[float]] | None = None,
) -> None:
    """Remember ``turns`` as the provider remembers a user's messages (one turn at a time), or
    with ``plain`` each turn's text alone (no speaker, no context, no dedupe: the baseline of
    plain BM25 and plain cosine over the turns)."""
    sessions: dict[str, AgentSession] = {}
    for turn in turns:
        if plain:
            record = MemoryRecord(
                turn.text,
                embedding=vectors[turn.text],
                metadata={"message_id": turn.id},
                created_at=turn.said_at,
            )
            await provider.store.add(scope, record)
            continue
        session = sessions.setdefault(turn.session, AgentSession(session_id=turn.session))
        message = Message(
            "user", turn.text, author_name=turn.speaker, message_id=turn.id, created_at=turn.said_at
        )
        vector = embedded[turn.id] if embedded is not None else vectors[turn.text]
        await provider.remember(scope, session, [message], known={turn.text.strip(): vector})


async def rank(
    provider: SemanticMemoryProvider, scope: MemoryScope, question: str, vector: list[float]
) -> dict[str, list[list[str]]]:
    """The turn ids each column found, best first, as one group per hit: the hit alone, or for
    ``"next"`` the hybrid's hit and what was said next after it. The vector and hybrid columns
    of ``--plain`` rank by the question as asked (its memories carry no speaker)."""
    store = provider.store
    unnamed = await provider.query_vector(scope, question, vector=vector)
    found: dict[str, list[list[str]]] = {}
    for mode in RANKINGS:
        # a hybrid search of 10 fuses the top 50 of each ranking, the single rankings' pool
        k = max(KS) if mode == "hybrid" else POOL
        asked = None if mode == "lexical" else vector if mode == "vector" else unnamed
        hits = await store.search(
            scope, asked, k=k, text=question, mode="vector" if mode == "unnamed" else mode
        )
        found[mode] = [[_turn_id(h.record)] for h in hits]
        if mode == "hybrid":
            after = await store.following(scope, [h.record for h in hits], limit=1)
            found["next"] = [
                [_turn_id(h.record), *map(_turn_id, then)] for h, then in zip(hits, after, strict=True)
            ]
    return found


def _turn_id(record: MemoryRecord) -> str:
    return str(record.metadata.get("message_id"))


EMBED_AS: Final = ("text", "speaker", "reply", "reply-text", "mix")
"""What a turn's embedding can be made of (``--embed-as``; see :func:`embedded_texts`). Only
the embedding changes: the remembered text, its speaker and context (what the word index reads)
stay those the provider keeps, and questions are embedded alone."""


def embedded_texts(turns: Sequence[Turn], embed_as: str) -> dict[str, list[str]]:
    """What each turn's embedding is made of, by turn id (the texts whose normalized mean it is):
    ``"text"`` the turn alone (what the provider embeds); ``"speaker"`` ``"Speaker: text"``;
    ``"reply"`` ``"Speaker (replying to Other: previous...): text"``; ``"reply-text"``
    ``"(replying to: previous...) text"``, no names; ``"mix"`` the turn alone and ``"Speaker:
    text"``. The previous turn is the one before in its session, clipped as a recalled line shows
    it (160 characters); the first turn of a session has none."""
    made: dict[str, list[str]] = {}
    before: dict[str, Turn] = {}
    for turn in turns:
        said = f"{turn.speaker}: {turn.text}"
        previous = before.get(turn.session)
        if embed_as == "speaker":
            made[turn.id] = [said]
        elif embed_as == "reply" and previous is not None:
            made[turn.id] = [
                f"{turn.speaker} (replying to {_clip(f'{previous.speaker}: {previous.text}')}): {turn.text}"
            ]
        elif embed_as == "reply":
            made[turn.id] = [said]
        elif embed_as == "reply-text" and previous is not None:
            made[turn.id] = [f"(replying to: {_clip(previous.text)}) {turn.text}"]
        elif embed_as == "mix":
            made[turn.id] = [turn.text, said]
        else:
            made[turn.id] = [turn.text]
        before[turn.session] = turn
    return made


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def evaluate(
    data: EvalSet,
    embedder: Embedder,
    *,
    store_kind: str = "sqlite",
    plain: bool = False,
    embed_as: str = "text",
) -> tuple[
    dict[str, dict[str, dict[int, float]]], dict[str, int], list[tuple[Question, dict[str, list[list[str]]]]]
]:
    """recall@k by mode and category (with ``"all"``), the count per category, and each
    question's rankings."""
    texts = sorted({t.text for turns in data.conversations.values() for t in turns})
    vectors = dict(zip(texts, await embedder.embed(texts), strict=True))
    embedded: dict[str, list[float]] | None = None
    if embed_as != "text" and not plain:
        made = {
            i: m for turns in data.conversations.values() for i, m in embedded_texts(turns, embed_as).items()
        }
        wanted = sorted({t for m in made.values() for t in m})
        known = dict(zip(wanted, await embedder.embed(wanted), strict=True))
        embedded = {}
        for turn_id, parts in made.items():
            mean = np.mean([known[t] for t in parts], axis=0)
            embedded[turn_id] = (mean / np.linalg.norm(mean)).tolist()
    asked = [q.text for q in data.questions]
    question_vectors = await embedder.embed(asked)
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-eval-"))
    ranked: list[tuple[Question, dict[str, list[list[str]]]]] = []
    try:
        by_conversation: dict[str, list[int]] = defaultdict(list)
        for at, question in enumerate(data.questions):
            by_conversation[question.conversation].append(at)
        for name, turns in data.conversations.items():
            store = _store(store_kind, folder / f"{len(ranked)}.db", embedder.dimensions)
            try:
                provider = SemanticMemoryProvider(store, embedder)
                scope = MemoryScope("eval", agent_id=name)
                await remember(provider, scope, turns, vectors, plain=plain, embedded=embedded)
                for at in by_conversation.get(name, []):
                    question = data.questions[at]
                    ranked.append(
                        (question, await rank(provider, scope, question.text, question_vectors[at]))
                    )
            finally:
                await store.aclose()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return recall_table(ranked), _counts(data.questions), ranked


def _store(kind: str, path: Path, dimensions: int) -> MemoryStore:
    if kind == "memory":
        return InMemoryMemoryStore(dimensions=dimensions)
    from agentkeep.memory.sqlite import SQLiteMemoryStore  # the [memory] extra

    return SQLiteMemoryStore(path, dimensions=dimensions)


def _counts(questions: Sequence[Question]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for question in questions:
        counts[question.category] += 1
        counts["all"] += 1
    return dict(counts)


def recall_table(
    ranked: Sequence[tuple[Question, dict[str, list[list[str]]]]],
) -> dict[str, dict[str, dict[int, float]]]:
    """recall@k (k in 1, 5, 10) by mode, then category (``"all"``: every question)."""
    table: dict[str, dict[str, dict[int, float]]] = {}
    for mode in {m for _, found in ranked for m in found}:
        hits: dict[str, dict[int, int]] = defaultdict(lambda: dict.fromkeys(KS, 0))
        totals: dict[str, int] = defaultdict(int)
        for question, found in ranked:
            for category in (question.category, "all"):
                totals[category] += 1
                for k in KS:
                    shown = {turn for group in found[mode][:k] for turn in group}
                    hits[category][k] += bool(question.evidence & shown)
        table[mode] = {c: {k: hits[c][k] / totals[c] for k in KS} for c in totals}
    return table


def _print(data: EvalSet, table: dict[str, dict[str, dict[int, float]]], counts: dict[str, int]) -> None:
    categories = [*sorted(c for c in counts if c != "all"), "all"]
    print(
        f"\n{data.name}: {len(data.conversations)} conversations, "
        f"{sum(len(t) for t in data.conversations.values())} turns, {len(data.questions)} questions"
    )
    print(f"{'category':<14}{'n':>5}  " + "  ".join(f"{MODE_NAMES[m] + ' @1/@5/@10':<26}" for m in COLUMNS))
    for category in categories:
        cells = ["/".join(f"{table[m][category][k]:.2f}" for k in KS).ljust(26) for m in COLUMNS]
        print(f"{category:<14}{counts[category]:>5}  " + "  ".join(cells))


class SavedEmbedder:
    """An embedder whose vectors are kept in a file between runs (``--vectors``): the model is
    asked only for texts it has not embedded before."""

    def __init__(self, embedder: Embedder, path: Path) -> None:
        self.embedder = embedder
        self.path = path
        self.dimensions = embedder.dimensions
        self._known: dict[str, list[float]] = {}
        if path.exists():
            with np.load(path) as saved:
                texts = [str(t) for t in saved["texts"]]
                self._known = dict(zip(texts, saved["vectors"].tolist(), strict=True))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._known))
        if missing:
            self._known.update(zip(missing, await self.embedder.embed(missing), strict=True))
        return [self._known[t] for t in texts]

    def save(self) -> None:
        texts = list(self._known)
        np.savez(self.path, texts=np.array(texts), vectors=np.array([self._known[t] for t in texts]))


def _embedder(name: str) -> Embedder:
    if name == "hashing":
        return HashingEmbedder(dimensions=384)
    from agentkeep.memory.embedders import MiniLMEmbedder  # the [embeddings] extra

    return MiniLMEmbedder()


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--locomo", type=Path, help="LoCoMo's data/locomo10.json, evaluated after the committed set"
    )
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument(
        "--plain", action="store_true", help="each turn's text alone: no speaker, no context, no dedupe"
    )
    parser.add_argument(
        "--embed-as", choices=EMBED_AS, default="text", help="what a turn's embedding is made of"
    )
    parser.add_argument("--vectors", type=Path, help="keep the embeddings made here, to reuse them")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    embedder = _embedder(args.embedder)
    if args.vectors is not None:
        embedder = SavedEmbedder(embedder, args.vectors)
    sets = [load_committed()]
    if args.locomo is not None:
        sets.append(load_locomo(args.locomo))
    print(f"embedder {args.embedder}, store {args.store}, fusion of the top {POOL} of each ranking")
    figures: dict[str, Any] = {}
    for data in sets:
        started = time.perf_counter()
        table, counts, _ = await evaluate(
            data, embedder, store_kind=args.store, plain=args.plain, embed_as=args.embed_as
        )
        _print(data, table, counts)
        print(f"({time.perf_counter() - started:.0f} s)")
        figures[data.name] = {"counts": counts, "recall": table}
    if isinstance(embedder, SavedEmbedder):
        embedder.save()
        embedder = embedder.embedder
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    close = getattr(embedder, "aclose", None)
    if close is not None:
        await close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
