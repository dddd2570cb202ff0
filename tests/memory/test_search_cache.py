"""The memory stores' search cache (``memory/_vector_cache.py``): a large scope's vectors held as
a matrix and kept coherent by the per-scope change log, on SQLite and PostgreSQL.

Every test forces the cache with ``cache_min_vectors=1`` and compares with the store's own path
(a store on the same data with the cache off: sqlite-vec, or PostgreSQL's fetch of the scope),
across store objects on one file or schema (as separate processes would be: each has its own
connections and cache).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from agentkeep.memory import MemoryHit, MemoryRecord, MemoryScope, SearchMode
from agentkeep.memory._vector_cache import LOG_KEEP, ScopeVectors, VectorCache
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore
from tests.memory.backend_sqlite import raw_file
from tests.message_stores.backend_postgres import URL, drop_schema, execute, new_schema

DIMENSIONS = 8
TTL = 3_600.0
ANA = MemoryScope("ana", tenant_id="t")
ANA_HELPER = MemoryScope("ana", tenant_id="t", agent_id="helper")
BO = MemoryScope("bo", tenant_id="t")
SCOPES = (ANA, ANA_HELPER, BO)
BACKENDS = ("sqlite", "postgres")

Store = SQLiteMemoryStore | PostgresMemoryStore


def vector(seed: int) -> list[float]:
    return [float(v) for v in np.random.default_rng(seed).standard_normal(DIMENSIONS)]


def memory(
    text: str, seed: int, *, kind: str = "fact", key: str | None = None, old: bool = False
) -> MemoryRecord:
    created = datetime.now(UTC) - (timedelta(seconds=2 * TTL) if old else timedelta(0))
    return MemoryRecord(text, embedding=vector(seed), kind=kind, key=key, created_at=created)


@asynccontextmanager
async def stores(
    *caches: int | None, backend: str = "sqlite", ttl: float | None = TTL
) -> AsyncIterator[list[Store]]:
    """Stores on one new file (or schema): one per entry, with ``cache_min_vectors`` of that value
    (``None``: the cache off, every search by the store's own path)."""
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-cache-"))
    schema = new_schema("akcache")
    opened: list[Store] = []
    for minimum in caches:
        size, least = (0, 0) if minimum is None else (1 << 20, minimum)
        opened.append(
            SQLiteMemoryStore(
                folder / "memory.db",
                dimensions=DIMENSIONS,
                ttl=ttl,
                search_cache_bytes=size,
                cache_min_vectors=least,
            )
            if backend == "sqlite"
            else PostgresMemoryStore.from_url(
                URL,
                schema=schema,
                dimensions=DIMENSIONS,
                ttl=ttl,
                search_cache_bytes=size,
                cache_min_vectors=least,
            )
        )
    try:
        for store in opened:
            await store.setup()
        yield opened
    finally:
        for store in opened:
            await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)
        if backend == "postgres":
            await drop_schema(schema)


def assert_same_hits(found: Sequence[MemoryHit], expected: Sequence[MemoryHit]) -> None:
    """The same records with the same scores, best first; records that tie (the same vector
    twice) may come in either order."""
    assert len(found) == len(expected), (found, expected)
    for got, want in zip(found, expected, strict=True):
        assert got.score == pytest.approx(want.score, abs=1e-5)
    scores = {hit.record.id: hit.score for hit in expected}
    for hit in found:
        if hit.record.id in scores:
            assert hit.score == pytest.approx(scores[hit.record.id], abs=1e-5)
        else:  # only a tie with the last expected one may swap a record in
            assert hit.score == pytest.approx(expected[-1].score, abs=1e-5)


async def ids(store: Store, scope: MemoryScope, seed: int, **options: object) -> list[str]:
    return [hit.record.id for hit in await store.search(scope, vector(seed), k=10, **options)]  # pyright: ignore[reportArgumentType]


# -- the cache on its own -------------------------------------------------------------------------
def rows(count: int, *, start: int = 1) -> list[tuple[int, str, int, int, bytes]]:
    """Vector rows (row id, kind, updated_at, created_at, vector): said in another order than
    updated."""
    matrix = np.random.default_rng(count).standard_normal((count, DIMENSIONS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return [
        (start + n, "chunk" if n % 3 else "fact", n, (n * 37) % count, matrix[n].tobytes())
        for n in range(count)
    ]


def test_scope_vectors_find_what_a_full_sort_finds_through_puts_and_removes() -> None:
    loaded = rows(300)
    vectors = ScopeVectors.loaded(scope_id=1, seq=0, dimensions=DIMENSIONS, rows=loaded[:200])
    for rowid, kind, updated, said, blob in loaded[200:]:
        vectors.put(rowid, kind, updated, said, blob)  # past the reserved capacity
    removed = set(range(1, 301, 7))
    for rowid in removed:
        vectors.remove(rowid)
    vectors.remove(10_000)  # never there: nothing happens
    replaced = rows(1, start=2)[0]
    vectors.put(*replaced)
    live = {row[0]: row for row in loaded if row[0] not in removed}
    live[2] = replaced
    assert len(vectors) == len(live)
    query = np.asarray(vector(5), dtype=np.float32)
    query /= np.linalg.norm(query)
    filters: list[tuple[str | None, int | None, int | None, int | None]] = [
        (None, None, None, None),
        ("fact", None, None, None),
        (None, 150, None, None),
        ("chunk", 100, None, None),
        ("profile", None, None, None),
        (None, None, 40, 90),
        ("fact", 100, 120, None),
        (None, None, None, 30),
        (None, None, 90, 40),  # an empty window
    ]
    for kind, cutoff, since, until in filters:
        wanted = [
            (rowid, float(np.frombuffer(blob, dtype=np.float32) @ query))
            for rowid, (_, row_kind, updated, said, blob) in live.items()
            if (kind is None or row_kind == kind)
            and (cutoff is None or updated >= cutoff)
            and (since is None or said >= since)
            and (until is None or said < until)
        ]
        wanted.sort(key=lambda pair: -pair[1])
        found = vectors.nearest(query, 7, kind=kind, cutoff=cutoff, since=since, until=until)
        assert [rowid for rowid, _ in found] == [rowid for rowid, _ in wanted[:7]]
        assert [score for _, score in found] == pytest.approx([score for _, score in wanted[:7]], abs=1e-6)
        assert vectors.count(kind=kind, cutoff=cutoff, since=since, until=until) == len(wanted)
        # of a file's ranked rows (some of no scope here), those kept, in the order given
        ranked = [(rowid, float(-rowid)) for rowid in range(0, 400, 3)]
        kept = {rowid for rowid, _ in wanted}
        held = vectors.held(ranked, kind=kind, cutoff=cutoff, since=since, until=until)
        assert held == [(rowid, score) for rowid, score in ranked if rowid in kept]
    assert len(vectors.nearest(query, 1_000)) == len(live)


LAYOUTS = ("random", "clustered", "duplicates", "spiky", "signs")


def layout_matrix(layout: str, count: int, dimensions: int, seed: int) -> np.ndarray:
    """Unit vectors that stress the int8 first pass: near neighbours whose scores differ by less
    than its error, exact ties, one large component over many that quantize to zero, and
    vectors whose components all have one size (quantized without error)."""
    rng = np.random.default_rng(seed)
    if layout == "clustered":
        matrix = rng.standard_normal(dimensions) + 0.01 * rng.standard_normal((count, dimensions))
    elif layout == "duplicates":
        matrix = rng.standard_normal((max(1, count // 5), dimensions))[
            rng.integers(0, max(1, count // 5), count)
        ]
    elif layout == "spiky":
        matrix = 0.004 * rng.standard_normal((count, dimensions))
        matrix[np.arange(count), rng.integers(0, dimensions, count)] += 1.0
    elif layout == "signs":
        matrix = rng.choice([-1.0, 1.0], size=(count, dimensions))
    else:
        matrix = rng.standard_normal((count, dimensions))
    matrix = matrix.astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@settings(max_examples=150, deadline=None)
@given(
    layout=st.sampled_from(LAYOUTS),
    count=st.integers(1, 400),
    dimensions=st.sampled_from([2, 8, 384]),
    k=st.integers(1, 25),
    filtered=st.booleans(),
    near=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_int8_first_pass_never_drops_one_of_the_k_best(
    layout: str, count: int, dimensions: int, k: int, filtered: bool, near: bool, seed: int
) -> None:
    matrix = layout_matrix(layout, count, dimensions, seed)
    loaded = [(n + 1, "fact" if n % 3 else "chunk", n, n, matrix[n].tobytes()) for n in range(count)]
    vectors = ScopeVectors.loaded(scope_id=1, seq=0, dimensions=dimensions, rows=loaded)
    rng = np.random.default_rng(seed + 1)
    query = rng.standard_normal(dimensions).astype(np.float32)
    if near:  # a query next to a stored vector: the best scores crowd together
        query = matrix[seed % count] + np.float32(0.02) * query
    query /= np.linalg.norm(query)
    kind, cutoff = ("fact", count // 4) if filtered else (None, None)
    scores = np.vecdot(matrix, query)
    wanted = sorted(
        (float(scores[n]) for n in range(count) if not filtered or (n % 3 and n >= count // 4)),
        reverse=True,
    )[:k]
    found = vectors.nearest(query, k, kind=kind, cutoff=cutoff)
    assert len({rowid for rowid, _ in found}) == len(found) == len(wanted)
    for rowid, score in found:  # each score is the row's own float32 score ...
        assert score == pytest.approx(float(scores[rowid - 1]), abs=1e-6)
    # ... and they are the k best (a row may differ from the full scan's only by a tie)
    assert [score for _, score in found] == pytest.approx(wanted, abs=1e-6)


def test_the_int8_first_pass_leaves_few_rows_to_score_in_float32() -> None:
    matrix = layout_matrix("random", 20_000, 384, 3)
    loaded = [(n + 1, "fact", n, n, matrix[n].tobytes()) for n in range(len(matrix))]
    vectors = ScopeVectors.loaded(scope_id=1, seq=0, dimensions=384, rows=loaded)
    query = matrix[17] + np.float32(0.05) * np.random.default_rng(4).standard_normal(384).astype(np.float32)
    query /= np.linalg.norm(query)
    candidates = vectors._candidates(query, 10, None, None)  # pyright: ignore[reportPrivateUsage]
    assert 10 <= len(candidates) < 1_000  # measured: about 100 of 20,000
    assert 17 in candidates  # the position of row id 18, the vector the query was made from
    assert [rowid for rowid, _ in vectors.nearest(query, 1)] == [18]


def test_a_large_matrix_is_scored_in_parts_on_helper_threads_with_the_same_result() -> None:
    vectors = ScopeVectors.loaded(scope_id=1, seq=0, dimensions=DIMENSIONS, rows=rows(70_000))
    cache = VectorCache(1 << 30)
    query = np.asarray(vector(9), dtype=np.float32)
    query /= np.linalg.norm(query)
    try:
        alone = vectors.nearest(query, 20, kind="fact")
        assert vectors.nearest(query, 20, kind="fact", helpers=cache.helpers) == alone
        assert len(alone) == 20
    finally:
        cache.close()


def test_the_cache_evicts_the_least_recently_used_scope_past_its_bytes() -> None:
    one = ScopeVectors.loaded(scope_id=1, seq=0, dimensions=DIMENSIONS, rows=rows(100))
    cache = VectorCache(int(one.nbytes * 2.5))
    for name in ("a", "b"):
        cache.keep(name, ScopeVectors.loaded(scope_id=1, seq=0, dimensions=DIMENSIONS, rows=rows(100)))
    assert cache.get("a") is not None  # now "b" is the least recently used
    cache.keep("c", ScopeVectors.loaded(scope_id=1, seq=0, dimensions=DIMENSIONS, rows=rows(100)))
    assert ("a" in cache, "b" in cache, "c" in cache) == (True, False, True)
    assert cache.nbytes <= cache.max_bytes
    assert not cache.fits(1_000, DIMENSIONS)
    cache.keep("big", ScopeVectors.loaded(scope_id=1, seq=0, dimensions=DIMENSIONS, rows=rows(1_000)))
    assert "big" not in cache, "a scope bigger than the whole budget is not held"
    assert len(VectorCache(0)) == 0
    with pytest.raises(ValueError, match="size"):
        VectorCache(-1)


# -- the store with its cache ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
async def test_writes_through_one_store_are_seen_by_the_cache_of_another(backend: str) -> None:
    async with stores(1, None, backend=backend) as (cached, writer):
        first = await writer.add(ANA, memory("first", 1))
        await writer.add(ANA, memory("second", 2))
        assert await ids(cached, ANA, 1) == await ids(writer, ANA, 1)
        assert ANA.key in cached._cache  # the search built it

        third = await writer.add(ANA, memory("third", 3))
        assert third.id in await ids(cached, ANA, 3)
        await writer.update(ANA, first.id, text="first, moved", embedding=vector(30))
        assert (await cached.search(ANA, vector(30), k=1))[0].record.id == first.id
        assert (await cached.search(ANA, vector(30), k=1))[0].score == pytest.approx(1.0, abs=1e-5)
        assert await writer.delete(ANA, third.id)
        assert third.id not in await ids(cached, ANA, 3)

        keyed = await writer.add(ANA, memory("Lisbon", 4, key="home_city"))
        assert keyed.id in await ids(cached, ANA, 4)
        moved = await writer.add(ANA, memory("Porto", 5, key="home_city"))
        found = await ids(cached, ANA, 4)
        assert moved.id in found
        assert keyed.id not in found, "a superseded record is never found"

        assert await writer.forget(user_id="ana", tenant_id="t") > 0
        assert await cached.search(ANA, vector(1), k=5) == []
        again = await writer.add(ANA, memory("after forget", 6))
        assert await ids(cached, ANA, 1) == [again.id], "the forgotten scope's cache is rebuilt"
        for seed in range(7, 12):
            assert_same_hits(
                await cached.search(ANA, vector(seed), k=3), await writer.search(ANA, vector(seed), k=3)
            )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_kind_and_expiry_filter_through_the_cache(backend: str) -> None:
    async with stores(1, None, backend=backend) as (cached, writer):
        fact = await writer.add(ANA, memory("a fact", 1))
        chunk = await writer.add(ANA, memory("a chunk", 2, kind="chunk"))
        stale = await writer.add(ANA, memory("an old fact", 3, old=True))
        assert set(await ids(cached, ANA, 1)) == {fact.id, chunk.id}
        assert await ids(cached, ANA, 1, kind="chunk") == [chunk.id]
        assert await ids(cached, ANA, 1, kind="profile") == []
        await writer.update(ANA, stale.id, metadata={"seen": True})  # its time moves: alive again
        assert set(await ids(cached, ANA, 1)) == {fact.id, chunk.id, stale.id}
        assert await writer.purge_expired() == 0
        hits = await cached.search(ANA, vector(2), k=3, min_score=0.999)
        assert [hit.record.id for hit in hits] == [chunk.id]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_record_of_another_scope_is_never_found_through_the_cache(backend: str) -> None:
    async with stores(1, 1, backend=backend) as (cached, other):
        mine = await cached.add(ANA, memory("mine", 1))
        await other.add(ANA_HELPER, memory("the helper's", 1))
        await other.add(BO, memory("bo's", 1))
        for store in (cached, other):
            assert await ids(store, ANA, 1) == [mine.id]
        theirs = await other.search(BO, vector(1), k=5)
        assert [hit.record.text for hit in theirs] == ["bo's"]
        assert {ANA.key, BO.key} <= set(cached._cache._scopes) | set(other._cache._scopes)


async def test_words_ranked_alone_fall_back_when_other_scopes_crowd_the_best_out() -> None:
    # ANA holds most of the file, so its words are ranked without looking up each match's row;
    # BO's memories say "lamp" more often and fill the first ranks: ANA's best are still found.
    async with stores(1, None) as (cached, writer):
        mine = [await writer.add(ANA, memory(f"lamp by the door number {n} of many", n)) for n in range(10)]
        for n in range(5):
            await writer.add(BO, memory("lamp lamp lamp", 100 + n))
        await cached.search(ANA, vector(0), k=1)  # by meaning: the scope's vectors, cached
        assert ANA.key in cached._cache
        for k in (1, 3, 10):
            for kind in (None, "fact", "chunk"):
                expected = await writer.search(ANA, None, k=k, text="lamp", mode="lexical", kind=kind)
                assert_same_hits(
                    await cached.search(ANA, None, k=k, text="lamp", mode="lexical", kind=kind), expected
                )
                if kind != "chunk":
                    assert {hit.record.id for hit in expected} <= {record.id for record in mine}
                    assert len(expected) == k
        found = await cached.search(ANA, vector(1), k=3, text="lamp")
        assert_same_hits(found, await writer.search(ANA, vector(1), k=3, text="lamp"))
        assert ANA.key in cached._cache


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_cache_further_behind_than_the_log_keeps_is_rebuilt(backend: str) -> None:
    async with stores(1, None, backend=backend) as (cached, writer):
        record = await writer.add(ANA, memory("moving", 1))
        await writer.add(ANA, memory("still", 2))
        assert len(await cached.search(ANA, vector(1), k=5)) == 2
        for n in range(LOG_KEEP + 10):
            await writer.update(ANA, record.id, embedding=vector(100 + n))
        last = vector(100 + LOG_KEEP + 9)
        assert_same_hits(await cached.search(ANA, last, k=5), await writer.search(ANA, last, k=5))
        assert (await cached.search(ANA, last, k=1))[0].record.id == record.id


async def test_a_budget_smaller_than_a_scope_searches_by_sqlite_vec() -> None:
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-cache-"))
    try:
        store = SQLiteMemoryStore(
            folder / "m.db", dimensions=DIMENSIONS, search_cache_bytes=64, cache_min_vectors=1
        )
        try:
            added = [await store.add(ANA, memory(f"m{n}", n)) for n in range(5)]
            assert (await store.search(ANA, vector(3), k=1))[0].record.id == added[3].id
            assert len(store._cache) == 0
        finally:
            await store.aclose()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def downgrade_to_layout_1(path: Path) -> None:
    """Make ``path`` a file of layout 1 (no change log: the tables of layout 2 dropped, the
    index of current memories that layout 3 added, and layout 4's word index)."""
    with raw_file(path) as connection:
        connection.execute("DROP TABLE agentkeep_memory_changes")
        connection.execute("DROP TABLE agentkeep_memory_scopes")
        connection.execute("DROP INDEX agentkeep_memories_current")
        connection.execute("DROP TABLE agentkeep_memory_words")
        connection.execute("DROP INDEX agentkeep_memories_said")
        connection.execute("DROP INDEX agentkeep_memories_session")
        connection.execute("UPDATE agentkeep_memory_meta SET value = '1' WHERE name = 'layout'")


async def test_a_file_of_layout_1_is_upgraded_in_place_and_searches_the_same() -> None:
    async with stores(None) as (old,):
        added = [
            await old.add(scope, memory(f"{scope.user_id} {n}", n)) for scope in SCOPES for n in range(6)
        ]
        assert isinstance(old, SQLiteMemoryStore)
        path = old.path
        await old.aclose()
        await asyncio.to_thread(downgrade_to_layout_1, path)
        upgraded = SQLiteMemoryStore(path, dimensions=DIMENSIONS, cache_min_vectors=1)
        plain = SQLiteMemoryStore(path, dimensions=DIMENSIONS, search_cache_bytes=0)
        try:
            for scope in SCOPES:
                mine = {r.id for r in added if r.text.startswith(scope.user_id)}
                found = await upgraded.search(scope, vector(2), k=10)
                assert {hit.record.id for hit in found} <= mine
                assert_same_hits(found, await plain.search(scope, vector(2), k=10))
            assert ANA.key in upgraded._cache
            more = await upgraded.add(ANA, memory("after the upgrade", 99))
            assert (await plain.search(ANA, vector(99), k=1))[0].record.id == more.id
            assert (await upgraded.search(ANA, vector(99), k=1))[0].record.id == more.id
        finally:
            await upgraded.aclose()
            await plain.aclose()


async def test_a_postgres_schema_written_before_the_change_log_is_upgraded() -> None:
    async with stores(None, backend="postgres") as (old,):
        added = [
            await old.add(scope, memory(f"{scope.user_id} {n}", n)) for scope in SCOPES for n in range(6)
        ]
        assert isinstance(old, PostgresMemoryStore)
        for table in ("memory_changes", "memory_scopes"):
            await execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(old.schema, table)))
        meta = sql.Identifier(old.schema, "memory_meta")
        # a schema of that time recorded neither its change log nor a layout
        await execute(sql.SQL("DELETE FROM {} WHERE name IN ('change_log', 'layout')").format(meta))
        upgraded = PostgresMemoryStore.from_url(
            URL, schema=old.schema, dimensions=DIMENSIONS, cache_min_vectors=1
        )
        try:
            await upgraded.setup()
            for scope in SCOPES:
                mine = {r.id for r in added if r.text.startswith(scope.user_id)}
                found = await upgraded.search(scope, vector(2), k=10)
                assert {hit.record.id for hit in found} <= mine
                assert_same_hits(found, await old.search(scope, vector(2), k=10))
            assert ANA.key in upgraded._cache
            more = await upgraded.add(ANA, memory("after the upgrade", 99))
            assert (await old.search(ANA, vector(99), k=1))[0].record.id == more.id
            assert (await upgraded.search(ANA, vector(99), k=1))[0].record.id == more.id
        finally:
            await upgraded.aclose()


# -- the property: cached searches find what sqlite-vec finds, whatever was written -----------------
@dataclass(frozen=True)
class Op:
    name: str
    via: int
    scope: int = 0
    pick: int = 0
    seed: int = 0
    kind: int = 0
    key: int = 0
    old: bool = False


ops = st.one_of(
    st.builds(
        Op,
        name=st.just("add"),
        via=st.integers(0, 2),
        scope=st.integers(0, 2),
        seed=st.integers(0, 10_000),
        kind=st.integers(0, 1),
        key=st.integers(0, 2),
        old=st.booleans(),
    ),
    st.builds(
        Op,
        name=st.sampled_from(["update", "touch", "delete"]),
        via=st.integers(0, 2),
        pick=st.integers(0, 50),
        seed=st.integers(0, 10_000),
    ),
    st.builds(Op, name=st.sampled_from(["forget", "purge"]), via=st.integers(0, 2), scope=st.integers(0, 2)),
)


WORDS = ("lamp", "river", "stone", "cloud", "bread")


def said(seed: int) -> str:
    """A text of a few of WORDS (some repeated), so that searches by words match some memories
    of every scope, ranked by how often and in how short a text."""
    return " ".join(WORDS[(seed >> shift) % len(WORDS)] for shift in range(0, 3 * (1 + seed % 3), 3))


async def apply(op: Op, store: Store, added: list[tuple[MemoryScope, str]]) -> None:
    if op.name == "add":
        key = None if op.key == 0 else f"k{op.key}"
        text = f"m{len(added)} {said(op.seed)}"
        record = memory(text, op.seed, kind=("fact", "chunk")[op.kind], key=key, old=op.old)
        added.append((SCOPES[op.scope], (await store.add(SCOPES[op.scope], record)).id))
    elif op.name == "purge":
        await store.purge_expired()
    elif op.name == "forget":
        scope = SCOPES[op.scope]
        await store.forget(user_id=scope.user_id, tenant_id=scope.tenant_id)
    elif added:
        scope, memory_id = added[op.pick % len(added)]
        if op.name == "delete":
            await store.delete(scope, memory_id)
            return
        try:
            if op.name == "update":
                text = f"moved {said(op.seed)}"
                await store.update(scope, memory_id, text=text, embedding=vector(op.seed))
            else:
                await store.update(scope, memory_id, metadata={"touched": op.seed})
        except LookupError:
            pass  # superseded or gone: the same for every store


@settings(max_examples=30, deadline=None)
@given(st.lists(ops, min_size=1, max_size=25), st.integers(0, 1_000))
def test_cached_searches_find_what_sqlite_vec_finds(sequence: list[Op], query_seed: int) -> None:
    asyncio.run(same_hits_after(sequence, query_seed, backend="sqlite"))


@settings(max_examples=15, deadline=None)
@given(st.lists(ops, min_size=1, max_size=20), st.integers(0, 1_000))
def test_cached_searches_find_what_a_postgres_fetch_finds(sequence: list[Op], query_seed: int) -> None:
    asyncio.run(same_hits_after(sequence, query_seed, backend="postgres"))


async def same_hits_after(sequence: list[Op], query_seed: int, *, backend: str) -> None:
    """Apply ``sequence`` through three stores on one file or schema (one with the cache off);
    after each step, the two with a cache find what the one without finds, by meaning, by words
    and both."""
    async with stores(None, 1, 1, backend=backend) as opened:
        plain, cached = opened[0], opened[1:]
        added: list[tuple[MemoryScope, str]] = []
        for step, op in enumerate(sequence):
            await apply(op, opened[op.via], added)
            query = vector(query_seed + step)
            for scope in SCOPES:
                for kind, k in ((None, 1), (None, 3), ("chunk", 2)):
                    expected = await plain.search(scope, query, k=k, kind=kind)
                    for store in cached:
                        assert_same_hits(await store.search(scope, query, k=k, kind=kind), expected)
                words = WORDS[step % len(WORDS)]
                searches: tuple[tuple[list[float] | None, SearchMode], ...] = (
                    (None, "lexical"),
                    (query, "hybrid"),
                )
                for embedding, mode in searches:
                    expected = await plain.search(scope, embedding, k=3, text=words, mode=mode)
                    for store in cached:
                        found = await store.search(scope, embedding, k=3, text=words, mode=mode)
                        assert_same_hits(found, expected)
                middle = datetime.now(UTC) - timedelta(seconds=TTL)  # the old ones said before
                for since, until in ((middle, None), (None, middle)):
                    for text in (None, words):
                        expected = await plain.search(scope, query, k=3, text=text, since=since, until=until)
                        for store in cached:
                            found = await store.search(scope, query, k=3, text=text, since=since, until=until)
                            assert_same_hits(found, expected)
