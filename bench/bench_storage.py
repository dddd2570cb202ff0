"""Durable history backends: append one turn, load the last 50, load all, bytes per message.

For SQLite, Redis and PostgreSQL, at 1k / 10k / 100k stored messages (~200 characters each) in one
conversation: the median time to append one turn (user + assistant) and to load the last 50 and all
messages of the compacted view, plus storage bytes per message. In the same run: a raw-driver
baseline (two pre-encoded records: pipelined RPUSH, a two-row executemany INSERT) and the reference
edition's ``RedisHistoryProvider`` (agent-framework-redis, in ``bench/.venv-ref``).

Needs the machine's Redis (127.0.0.1:6379) and PostgreSQL (127.0.0.1:5432); uses a unique key
prefix / schema / temp file and removes them afterwards.

Also per backend and size: one whole agent turn with a per-run ``CompactionProvider`` (a 40-group
sliding window recorded in the store every turn), scripted model.

Encryption at rest: per backend, at the middle size, append a turn and load the last 50 with and
without a key ring (AES-256-GCM), the two stores measured in alternation in the same run, and the
bytes per message of each (``--no-encryption`` skips it).

Cold reads (``--only-cold``, ``--cold-sizes``): per backend, a whole read of a history of N
messages, plain and encrypted, against the plainest way the same driver can keep the same
messages: one JSON row (list item) each, read whole and decoded with ``json.loads``; the three
alternate sample by sample, and each sample starts from a collected heap (``gc.collect()``, not
timed): a read pays for the collections its own objects cause, not for the objects the read before
it left, which otherwise decide which of the three meets the next full collection.

Listings (``--only-listing``): per backend (the in-process store too), N conversations of one
message each (90% in one tenant, the rest in 100 small ones), appended through the store; the
median time of a 50-row page: the big tenant's first page and one from its middle (by cursor), a
small tenant's, the whole store's.

Run: ``.venv/bin/python bench/bench_storage.py [--quick] [--no-reference] [--sizes 1000,10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis.asyncio as aioredis
from psycopg import sql

from agentkeep import Agent, KeyRing, Message
from agentkeep.compaction import CompactionProvider, SlidingWindowStrategy
from agentkeep.message_stores import InMemoryMessageStore, MessageStore, SupportsListing
from agentkeep.message_stores.codec import encode_body, encode_id, encode_time
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.message_stores.redis import RedisMessageStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.testing import ScriptedChatClient

HERE = Path(__file__).resolve().parent
REF_VENV = HERE / ".venv-ref"
REF_PACKAGES = ["agent-framework-core", "agent-framework-redis"]
REDIS_URL = "redis://127.0.0.1:6379/0"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
TEXT = (
    "The quick brown fox jumps over the lazy dog while the agent keeps its history durable, "
    "appending each turn to an append-only log and loading only what the model needs next. "
)[:200]


def _turn(i: int) -> list[Message]:
    return [Message("user", [f"{i:06d} {TEXT}"[:200]]), Message("assistant", [f"{i:06d} {TEXT[::-1]}"[:200]])]


async def _median_ms(func: Callable[[], Awaitable[object]], reps: int) -> float:
    samples: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        await func()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000.0


async def _fill(store: MessageStore, conversation: str, count: int) -> None:
    batch: list[Message] = []
    for i in range(count // 2):
        batch.extend(_turn(i))
        if len(batch) >= 1000:
            await store.append(conversation, batch)
            batch = []
    if batch:
        await store.append(conversation, batch)


async def _bytes_sqlite(store: SQLiteMessageStore, path: Path, messages: int) -> float:
    await store.aclose()

    def measure() -> float:
        connection = sqlite3.connect(path)
        try:
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            size = connection.execute("PRAGMA page_size").fetchone()[0]
        finally:
            connection.close()
        return pages * size / messages

    return await asyncio.to_thread(measure)


async def _bytes_redis(prefix: str, messages: int) -> float:
    client = aioredis.from_url(REDIS_URL)
    total = 0
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        total += int(await client.memory_usage(key, samples=0) or 0)
    await client.aclose()
    return total / messages


async def _bytes_postgres(schema: str, messages: int) -> float:
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as connection:
        table = sql.Identifier(schema, "messages")
        await connection.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
        row = await (
            await connection.execute(
                sql.SQL("SELECT pg_total_relation_size({})").format(sql.Literal(f'"{schema}".messages'))
            )
        ).fetchone()
    return (row[0] if row else 0) / messages


Factory = Callable[
    [], Awaitable[tuple[MessageStore, Callable[[int], Awaitable[float]], Callable[[], Awaitable[None]]]]
]


async def _measure_size(store: MessageStore, size: int, reps: int) -> dict[str, float]:
    conversation = f"bench-{size}"
    await _fill(store, conversation, size)
    turns = iter([_turn(i) for i in range(size, size + reps)])  # built before the clock starts
    append_ms = await _median_ms(lambda: store.append(conversation, next(turns)), reps)
    last_ms = await _median_ms(lambda: store.read(conversation, last=50), reps)
    all_reps = 3 if size >= 100_000 else max(3, reps // 10)
    all_ms = await _median_ms(lambda: store.read(conversation), all_reps)
    return {
        "append": append_ms,
        "last50": last_ms,
        "all": all_ms,
    }


async def _compacted_turn(store: MessageStore, size: int, reps: int) -> float:
    """One agent turn on a stored conversation of ``size`` messages with a per-run compaction
    (a 40-group window, recorded in the store): load what is new, compact, call a scripted model,
    record the compaction, append the turn."""
    conversation = f"bench-compacted-{size}"
    await _fill(store, conversation, size)
    history = StorageHistoryProvider(store, "history")
    window = CompactionProvider(SlidingWindowStrategy(keep_last_groups=40))
    agent = Agent(ScriptedChatClient(lambda _messages: "Done."), context_providers=[history, window])
    session = agent.create_session()
    history.attach(session, conversation)
    for _ in range(3):  # the first turn compacts the whole history once
        await agent.run("continue", session=session)
    return await _median_ms(lambda: agent.run("continue", session=session), max(20, reps // 2))


async def _measure_store(make: Factory, sizes: list[int], reps: int) -> dict[int, dict[str, float]]:
    results: dict[int, dict[str, float]] = {}
    for size in sizes:
        store, measure_bytes, cleanup = await make()
        try:
            row = await _measure_size(store, size, reps)
            row["bytes"] = await measure_bytes(len((await store.read(f"bench-{size}", raw=True)).entries))
            results[size] = row
        finally:
            await cleanup()
        store, _, cleanup = await make()  # a store of its own: its data must not count in the bytes
        try:
            results[size]["compacted"] = await _compacted_turn(store, size, reps)
        finally:
            await cleanup()
    return results


async def _sqlite_factory(
    key_ring: KeyRing | None = None,
) -> tuple[MessageStore, Callable[[int], Awaitable[float]], Callable[[], Awaitable[None]]]:
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-bench-"))
    path = folder / "bench.db"
    store = SQLiteMessageStore(path, key_ring=key_ring)
    await store.setup()

    async def cleanup() -> None:
        await store.aclose()
        await asyncio.to_thread(shutil.rmtree, folder, True)

    return store, lambda n: _bytes_sqlite(store, path, n), cleanup


async def _redis_factory(
    key_ring: KeyRing | None = None,
) -> tuple[MessageStore, Callable[[int], Awaitable[float]], Callable[[], Awaitable[None]]]:
    prefix = f"agentkeep-bench-{uuid.uuid4().hex[:8]}"
    store = RedisMessageStore.from_url(REDIS_URL, key_prefix=prefix, key_ring=key_ring)
    await store.setup()

    async def cleanup() -> None:
        await store.aclose()
        client = aioredis.from_url(REDIS_URL)
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()

    return store, lambda n: _bytes_redis(prefix, n), cleanup


async def _postgres_factory(
    key_ring: KeyRing | None = None,
) -> tuple[MessageStore, Callable[[int], Awaitable[float]], Callable[[], Awaitable[None]]]:
    schema = f"agentkeep_bench_{uuid.uuid4().hex[:8]}"
    store = PostgresMessageStore.from_url(PG_URL, schema=schema, key_ring=key_ring)
    await store.setup()

    async def cleanup() -> None:
        await store.aclose()
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as connection:
            await connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )

    return store, lambda n: _bytes_postgres(schema, n), cleanup


async def _measure_encryption(make: Callable[..., Awaitable[Any]], size: int, reps: int) -> dict[str, float]:
    """Append a turn and load the last 50 on a plain and an encrypted store of ``size`` messages,
    alternating between them sample by sample (so the machine's drift hits both alike)."""
    ring = KeyRing({"bench": KeyRing.generate_key()})
    plain, plain_bytes, plain_cleanup = await make()
    encrypted, encrypted_bytes, encrypted_cleanup = await make(ring)
    try:
        conversation = f"bench-{size}"
        await _fill(plain, conversation, size)
        await _fill(encrypted, conversation, size)
        samples: dict[str, list[float]] = {
            key: [] for key in ("append", "append_enc", "last50", "last50_enc")
        }
        turns = iter([_turn(i) for i in range(size, size + 2 * reps)])
        for _ in range(reps):
            for store, suffix in ((plain, ""), (encrypted, "_enc")):
                batch = next(turns)
                start = time.perf_counter()
                await store.append(conversation, batch)
                samples["append" + suffix].append(time.perf_counter() - start)
                start = time.perf_counter()
                await store.read(conversation, last=50)
                samples["last50" + suffix].append(time.perf_counter() - start)
        row = {key: statistics.median(values) * 1000.0 for key, values in samples.items()}
        count = len((await plain.read(conversation, raw=True)).entries)
        row["bytes"] = await plain_bytes(count)
        row["bytes_enc"] = await encrypted_bytes(count)
        return row
    finally:
        await plain_cleanup()
        await encrypted_cleanup()


def _raw_sqlite_open(path: Path) -> sqlite3.Connection:
    lite = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    lite.execute("PRAGMA journal_mode=WAL")
    lite.execute("PRAGMA synchronous=NORMAL")
    lite.execute("CREATE TABLE raw (position INTEGER PRIMARY KEY, id BLOB, at INTEGER, body BLOB)")
    return lite


def _records(count: int) -> list[tuple[bytes, int, bytes]]:
    out: list[tuple[bytes, int, bytes]] = []
    for message in (m for i in range(count // 2) for m in _turn(i)):
        message.ensure_identity()
        assert message.message_id is not None
        assert message.created_at is not None
        out.append((encode_id(message.message_id), encode_time(message.created_at), encode_body(message)))
    return out


async def _raw_baselines(reps: int) -> dict[str, float]:
    """Appending two pre-encoded records with the plain drivers, no agentkeep logic."""
    records = _records(2)
    client = aioredis.from_url(REDIS_URL)
    key = f"agentkeep-bench-raw-{uuid.uuid4().hex[:8]}"

    async def redis_append() -> None:
        async with client.pipeline(transaction=False) as pipe:
            pipe.rpush(key, *(body for _, _, body in records))
            await pipe.execute()

    redis_ms = await _median_ms(redis_append, reps)
    await client.delete(key)
    await client.aclose()

    schema = f"agentkeep_bench_raw_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as connection:
        await connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        await connection.execute(
            sql.SQL(
                "CREATE TABLE {} (conv bigint, seq bigint, id bytea, at bigint, body bytea, "
                "PRIMARY KEY (conv, seq))"
            ).format(sql.Identifier(schema, "raw"))
        )
        seq = iter(range(1, 10**9))

        async def pg_append() -> None:
            async with connection.cursor() as cursor:
                await cursor.executemany(
                    sql.SQL("INSERT INTO {} VALUES (1, %s, %s, %s, %s)").format(
                        sql.Identifier(schema, "raw")
                    ),
                    [(next(seq), rid, at, body) for rid, at, body in records],
                )

        pg_ms = await _median_ms(pg_append, reps)
        await connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))

    # SQLite has no server: the raw baseline runs its statements on one worker thread, as
    # agentkeep must (a blocking call on the event loop is not an option for either).
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-bench-raw-"))
    worker = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    lite = await loop.run_in_executor(worker, _raw_sqlite_open, folder / "raw.db")
    positions = iter(range(1, 10**9))

    def insert_turn() -> None:
        lite.execute("BEGIN IMMEDIATE")
        lite.executemany(
            "INSERT INTO raw VALUES (?, ?, ?, ?)",
            [(next(positions), rid, at, body) for rid, at, body in records],
        )
        lite.execute("COMMIT")

    async def sqlite_append() -> None:
        await loop.run_in_executor(worker, insert_turn)

    sqlite_ms = await _median_ms(sqlite_append, reps)
    await loop.run_in_executor(worker, lite.close)
    worker.shutdown()
    await asyncio.to_thread(shutil.rmtree, folder, True)
    return {"redis": redis_ms, "postgres": pg_ms, "sqlite": sqlite_ms}


_REFERENCE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, statistics, sys, time, uuid
    import redis.asyncio as aioredis
    from agent_framework import Message
    from agent_framework_redis import RedisHistoryProvider

    TEXT = %(text)r
    URL = %(url)r

    def turn(i):
        return [Message(role="user", contents=[f"{i:06d} {TEXT}"[:200]]),
                Message(role="assistant", contents=[f"{i:06d} {TEXT[::-1]}"[:200]])]

    async def median(func, reps):
        samples = []
        for _ in range(reps):
            start = time.perf_counter(); await func(); samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1000

    async def main():
        plan = json.loads(sys.argv[1])
        out = {}
        client = aioredis.from_url(URL, decode_responses=True)
        for size, reps in plan:
            prefix = f"agentkeep-bench-ref-{uuid.uuid4().hex[:8]}"
            provider = RedisHistoryProvider(redis_client=client, key_prefix=prefix, application_id="bench")
            session = f"bench-{size}"
            key = provider._redis_key(session)
            # pre-fill with the provider's own serialization, straight into its list
            batch = []
            for i in range(size // 2):
                batch.extend(provider._serialize_json(m) for m in turn(i))
                if len(batch) >= 1000:
                    await client.rpush(key, *batch); batch = []
            if batch:
                await client.rpush(key, *batch)
            turns = iter([turn(i) for i in range(size, size + reps)])
            append = await median(lambda: provider.save_messages(session, next(turns)), reps)
            load = await median(lambda: provider.get_messages(session), reps)
            count = await client.llen(key)
            usage = await client.memory_usage(key, samples=0) or 0
            out[str(size)] = {"append": append, "all": load, "bytes": usage / count}
            await client.delete(key)
        await client.aclose()
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _reference(sizes: list[int], quick: bool) -> dict[str, dict[str, float]] | None:
    python = REF_VENV / "bin" / "python"
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
        check = subprocess.run(
            [str(python), "-c", "import agent_framework_redis"], capture_output=True, check=False
        )
        if check.returncode != 0:
            print("installing the reference into bench/.venv-ref ...", file=sys.stderr)
            subprocess.run([str(python), "-m", "pip", "install", "-q", *REF_PACKAGES], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"reference unavailable: {exc}", file=sys.stderr)
        return None
    plan = [
        [size, (3 if size >= 100_000 else 10 if size >= 10_000 else 30) // (3 if quick else 1) or 1]
        for size in sizes
    ]
    done = subprocess.run(
        [str(python), "-c", _REFERENCE_SCRIPT % {"text": TEXT, "url": REDIS_URL}, json.dumps(plan)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        print(f"reference run failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- listing: a page of conversations at 1k and 100k conversations ---------------------------------

_LISTING_FILL_CONCURRENCY = 16
_BIG_SHARE = 0.9  # of the conversations, in one tenant; the rest spread over 100 small ones


def _listing_ids(count: int) -> list[str]:
    big = round(count * _BIG_SHARE)
    return [f"big::c{n}" for n in range(big)] + [f"t{n % 100}::c{n}" for n in range(count - big)]


async def _fill_listing(store: MessageStore, count: int) -> None:
    """``count`` conversations of one message each, appended through the store (16 at a time)."""
    ids = _listing_ids(count)
    base = time.time() - count  # one second apart, oldest first, and a few ties
    queue = iter(enumerate(ids))

    async def worker() -> None:
        for number, conversation_id in queue:
            when = datetime.fromtimestamp(base + number - number % 7 * 0.5, UTC)
            await store.append(conversation_id, [Message("user", [TEXT], created_at=when)])

    await asyncio.gather(*(worker() for _ in range(_LISTING_FILL_CONCURRENCY)))


async def _measure_listing(store: MessageStore, count: int, reps: int) -> dict[str, float]:
    """Medians (ms) of a 50-row page: the big tenant's first page and one from its middle, a small
    tenant's page, and the whole store's first page."""
    assert isinstance(store, SupportsListing)
    middle = (await store.list_conversations(tenant="big", limit=round(count * _BIG_SHARE) // 2))[-1].cursor
    pages = {
        "first": lambda: store.list_conversations(tenant="big", limit=50),
        "middle": lambda: store.list_conversations(tenant="big", after=middle, limit=50),
        "small": lambda: store.list_conversations(tenant="t7", limit=50),
        "store": lambda: store.list_conversations(limit=50),
    }
    for name, page in pages.items():  # every page holds rows
        assert await page(), f"the {name} page is empty"
    return {name: await _median_ms(page, reps) for name, page in pages.items()}


async def _listing(
    backends: list[str], counts: list[int], reps: int
) -> dict[str, dict[int, dict[str, float]]]:
    factories: dict[str, Factory] = {
        "memory": _memory_factory,
        "sqlite": _sqlite_factory,
        "redis": _redis_factory,
        "postgres": _postgres_factory,
    }
    results: dict[str, dict[int, dict[str, float]]] = {}
    for name in backends:
        for count in counts:
            store, _, cleanup = await factories[name]()
            try:
                started = time.perf_counter()
                await _fill_listing(store, count)
                filled = time.perf_counter() - started
                row = await _measure_listing(store, count, reps)
                row["fill_s"] = filled
                results.setdefault(name, {})[count] = row
                print(f"  listing {name} {count:,}: filled in {filled:.1f} s", file=sys.stderr)
            finally:
                await cleanup()
    return results


def _print_listing(rows: dict[str, dict[int, dict[str, float]]]) -> None:
    print("\nListings: a page of 50 conversations, N conversations (90% in one tenant); medians")
    header = f"{'backend':>9} | {'N':>7} | {'big tenant':>10} | {'its middle':>10} | "
    header += f"{'small tenant':>12} | {'store':>9}"
    print(header)
    print("-" * len(header))
    for backend, by_count in rows.items():
        for count, row in by_count.items():
            print(
                f"{backend:>9} | {count:>7,} | {row['first']:7.3f} ms | {row['middle']:7.3f} ms | "
                f"{row['small']:9.3f} ms | {row['store']:6.3f} ms"
            )
    print("(target: <= 10 ms per page at 100,000 conversations, flat from 1,000)")


async def _memory_factory(
    key_ring: KeyRing | None = None,
) -> tuple[MessageStore, Callable[[int], Awaitable[float]], Callable[[], Awaitable[None]]]:
    del key_ring  # the in-process store keeps no bytes

    async def no_bytes(_: int) -> float:
        return 0.0

    store = InMemoryMessageStore()

    async def cleanup() -> None:
        await store.aclose()

    return store, no_bytes, cleanup


# -- cold reads against a plain JSON baseline ----------------------------------------------------------
_PLAIN_TABLE = "CREATE TABLE {} (conversation TEXT, seq INTEGER, body TEXT, PRIMARY KEY (conversation, seq))"


async def _plain_json_baseline(
    backend: str, messages: list[Message]
) -> tuple[Callable[[], Awaitable[object]], Callable[[], Awaitable[None]]]:
    """The same messages stored the plainest way the same driver can: one JSON row (list item) each,
    read back whole and decoded with ``json.loads``; its read and its cleanup."""
    rows = [json.dumps(message.to_dict()) for message in messages]
    if backend == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="agentkeep-bench-json-"))
        db = sqlite3.connect(folder / "plain.db", check_same_thread=False)
        db.execute(_PLAIN_TABLE.format("messages"))
        db.executemany("INSERT INTO messages VALUES ('c', ?, ?)", enumerate(rows))
        db.commit()
        pool = ThreadPoolExecutor(1)  # as the store: the read on a worker thread

        def read() -> list[Any]:
            query = "SELECT body FROM messages WHERE conversation = 'c' ORDER BY seq"
            return [json.loads(body) for (body,) in db.execute(query)]

        async def sqlite_read() -> object:
            return await asyncio.get_running_loop().run_in_executor(pool, read)

        async def sqlite_cleanup() -> None:
            pool.shutdown()
            db.close()
            await asyncio.to_thread(shutil.rmtree, folder, True)

        return sqlite_read, sqlite_cleanup
    if backend == "redis":
        client = aioredis.from_url(REDIS_URL)
        key = f"agentkeep-bench-json-{uuid.uuid4().hex[:8]}"
        for start in range(0, len(rows), 10_000):
            await client.rpush(key, *rows[start : start + 10_000])

        async def redis_read() -> object:
            return [json.loads(item) for item in await client.lrange(key, 0, -1)]

        async def redis_cleanup() -> None:
            await client.delete(key)
            await client.aclose()

        return redis_read, redis_cleanup
    table = f"agentkeep_bench_json_{uuid.uuid4().hex[:8]}"
    connection = await psycopg.AsyncConnection.connect(PG_URL, autocommit=True)
    await connection.execute(sql.SQL(_PLAIN_TABLE).format(sql.Identifier(table)))  # pyright: ignore[reportArgumentType]
    async with connection.cursor() as cursor:
        insert = sql.SQL("COPY {} (conversation, seq, body) FROM STDIN").format(sql.Identifier(table))
        async with cursor.copy(insert) as copy:
            for seq, body in enumerate(rows):
                await copy.write_row(("c", seq, body))
    query = sql.SQL("SELECT body FROM {} WHERE conversation = 'c' ORDER BY seq").format(sql.Identifier(table))

    async def postgres_read() -> object:
        cursor = await connection.execute(query)
        return [json.loads(body) for (body,) in await cursor.fetchall()]

    async def postgres_cleanup() -> None:
        await connection.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        await connection.close()

    return postgres_read, postgres_cleanup


async def _cold_reads(
    backends: list[str], sizes: list[int], reps: int
) -> dict[str, dict[int, dict[str, float]]]:
    """Per backend and size: the median time of a whole read of the stored view, plain and
    encrypted, and of the plain JSON baseline, the three alternating sample by sample."""
    factories = {"sqlite": _sqlite_factory, "redis": _redis_factory, "postgres": _postgres_factory}
    ring = KeyRing({"bench": KeyRing.generate_key()})
    out: dict[str, dict[int, dict[str, float]]] = {}
    for backend in backends:
        out[backend] = {}
        for size in sizes:
            plain, _, plain_cleanup = await factories[backend]()
            sealed, _, sealed_cleanup = await factories[backend](ring)
            try:
                await _fill(plain, "c", size)
                await _fill(sealed, "c", size)
                messages = (await plain.read("c")).messages
                baseline, baseline_cleanup = await _plain_json_baseline(backend, messages)
                try:
                    samples: dict[str, list[float]] = {"ours": [], "encrypted": [], "baseline": []}
                    runs = max(3, reps // (10 if size <= 10_000 else 40))
                    for _ in range(runs):
                        for name, read in (
                            ("baseline", baseline),
                            ("ours", lambda store=plain: store.read("c")),
                            ("encrypted", lambda store=sealed: store.read("c")),
                        ):
                            gc.collect()  # see the module docs: each read pays for its own garbage
                            start = time.perf_counter()
                            await read()
                            samples[name].append((time.perf_counter() - start) * 1000)
                    out[backend][size] = {name: statistics.median(v) for name, v in samples.items()}
                finally:
                    await baseline_cleanup()
            finally:
                await plain_cleanup()
                await sealed_cleanup()
    return out


def _print_cold(rows: dict[str, dict[int, dict[str, float]]]) -> None:
    print("\nCold read of a whole stored history (store.read) against a plain baseline of the same driver")
    print("(one JSON row / list item per message, read whole, json.loads each); medians, interleaved,")
    print("each sample from a collected heap")
    header = f"{'backend':>9} | {'N':>7} | {'baseline':>10} | {'plain':>10} | {'x':>5} | "
    header += f"{'encrypted':>10} | {'x':>5}"
    print(header)
    print("-" * len(header))
    for backend, by_size in rows.items():
        for size, row in by_size.items():
            base = row["baseline"]
            print(
                f"{backend:>9} | {size:>7,} | {base:7.1f} ms | {row['ours']:7.1f} ms | "
                f"{row['ours'] / base:5.2f} | {row['encrypted']:7.1f} ms | {row['encrypted'] / base:5.2f}"
            )
    print("(target: plain and encrypted <= 1.0x the baseline)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference edition")
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated message counts")
    parser.add_argument("--backends", default="sqlite,redis,postgres", help="comma-separated backends")
    parser.add_argument("--no-encryption", action="store_true", help="skip the encryption rows")
    parser.add_argument("--only-encryption", action="store_true", help="only the encryption rows")
    parser.add_argument("--only-listing", action="store_true", help="only the listing rows")
    parser.add_argument(
        "--only-cold", action="store_true", help="only the cold reads against the JSON baseline"
    )
    parser.add_argument("--cold-sizes", default="10000,100000", help="comma-separated message counts (cold)")
    parser.add_argument(
        "--listing-sizes", default="1000,100000", help="comma-separated conversation counts (listing)"
    )
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    reps = 50 if args.quick else 200
    listing_counts = [int(count) for count in args.listing_sizes.split(",")]
    if args.only_listing:
        listing_backends = ["memory", *args.backends.split(",")]
        _print_listing(asyncio.run(_listing(listing_backends, listing_counts, reps)))
        return

    factories = {"sqlite": _sqlite_factory, "redis": _redis_factory, "postgres": _postgres_factory}
    backends = args.backends.split(",")
    mid = 10_000 if 10_000 in sizes else sizes[0]
    cold_sizes = [int(size) for size in args.cold_sizes.split(",")]
    if args.only_cold:
        _print_cold(asyncio.run(_cold_reads(backends, cold_sizes, reps)))
        return

    async def encryption() -> dict[str, dict[str, float]]:
        return {name: await _measure_encryption(factories[name], mid, reps) for name in backends}

    if args.only_encryption:
        _print_encryption(asyncio.run(encryption()), mid)
        return

    async def run() -> tuple[dict[str, dict[int, dict[str, float]]], dict[str, float]]:
        ours = {name: await _measure_store(factories[name], sizes, reps) for name in backends}
        return ours, await _raw_baselines(reps)

    ours, raw = asyncio.run(run())
    encrypted = None if args.no_encryption else asyncio.run(encryption())
    cold = asyncio.run(_cold_reads(backends, cold_sizes, reps))
    reference = None if args.no_reference else _reference(sizes, args.quick)

    print("\nDurable history backends, one conversation of N messages (~200 characters each); medians")
    columns = [f"{'backend':>9}", f"{'N':>7}", f"{'append turn':>11}", f"{'last 50':>9}", f"{'load all':>10}"]
    header = " | ".join([*columns, f"{'bytes/msg':>9}", f"{'compacted turn':>14}"])
    print(header)
    print("-" * len(header))
    for backend, rows in ours.items():
        for size, row in rows.items():
            print(
                f"{backend:>9} | {size:>7,} | {row['append']:8.3f} ms | {row['last50']:6.3f} ms | "
                f"{row['all']:7.1f} ms | {row['bytes']:9.1f} | {row['compacted']:11.3f} ms"
            )
    print(
        "(compacted turn = one agent.run with a 40-group window recorded in the store each turn: load what"
        " is new, compact, record, append)"
    )
    if reference is not None:
        for size in sizes:
            row = reference[str(size)]
            print(
                f"{'reference':>9} | {size:>7,} | {row['append']:8.3f} ms | {'-':>9} | "
                f"{row['all']:7.1f} ms | {row['bytes']:9.1f}"
            )
        print("(reference = agent-framework-redis RedisHistoryProvider; it has no windowed load)")

    if encrypted is not None:
        _print_encryption(encrypted, mid)
    _print_cold(cold)
    print("\nAppend rate against the raw driver (two pre-encoded records, no agentkeep logic)")
    for backend in ours:
        ours_ms = ours[backend][mid]["append"]
        print(
            f"{backend:>9}: agentkeep {ours_ms:.3f} ms, raw {raw[backend]:.3f} ms -> "
            f"{raw[backend] / ours_ms:.0%} of the raw rate (target >= 50%) at {mid:,} messages"
        )
    if reference is not None and str(mid) in reference and "redis" in ours:
        ratio = reference[str(mid)]["append"] / ours["redis"][mid]["append"]
        print(f"redis append at {mid:,}: reference {reference[str(mid)]['append']:.1f} ms, {ratio:.0f}x ours")
    print(f"(pid {os.getpid()}, python {sys.version.split()[0]})")


def _print_encryption(rows: dict[str, dict[str, float]], size: int) -> None:
    print(f"\nEncryption at rest (AES-256-GCM) at {size:,} messages, plain and encrypted stores alternating")
    header = (
        f"{'backend':>9} | {'append plain':>12} | {'encrypted':>10} | {'x':>5} | {'last 50 plain':>13} | "
    )
    header += f"{'encrypted':>10} | {'x':>5} | {'bytes/msg':>9} | {'encrypted':>9}"
    print(header)
    print("-" * len(header))
    for backend, row in rows.items():
        print(
            f"{backend:>9} | {row['append']:9.3f} ms | {row['append_enc']:7.3f} ms | "
            f"{row['append_enc'] / row['append']:5.2f} | {row['last50']:10.3f} ms | "
            f"{row['last50_enc']:7.3f} ms | {row['last50_enc'] / row['last50']:5.2f} | "
            f"{row['bytes']:9.1f} | {row['bytes_enc']:9.1f}"
        )
    print("(targets: encrypted append <= 1.3x plain, last-50 load <= 1.5x)")


if __name__ == "__main__":
    main()
