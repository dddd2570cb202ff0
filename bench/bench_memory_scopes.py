"""Listing a tenant's memory scopes (``MemoryStore.scopes``): a page of 50 at 1,000 and 100,000
scopes of one tenant, on the SQLite, PostgreSQL and in-process stores.

Each scope (a user of tenant ``bench``) holds one memory, added through the store's own ``add``
(batches of 500, concurrent on PostgreSQL; bounded in count and time), plus 100 scopes of another
tenant. The store has a ``ttl`` of 30 days (nothing expires), so every page also counts its
scopes' expired memories. Measured, median of 50 calls: the first page; a page from the middle of
the listing by cursor (``after=``); the same middle page by ``offset=`` (kept for compatibility:
it costs what it skips); a page with ``q`` matching one user in a thousand. In the same run, the
reference: the previous implementation's query, a ``GROUP BY`` over the tenant's memories with
``OFFSET`` (SQLite and PostgreSQL, run on the same data), for the first page.

Run: ``.venv/bin/python bench/bench_memory_scopes.py [--sizes 1000,100000] [--backend sqlite]``.
Uses a temporary file / a schema of its own, removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import apsw

from agentkeep.memory import InMemoryMemoryStore, MemoryRecord, MemoryScope, MemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore

POSTGRES_URL = os.environ.get("AGENTKEEP_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TTL = 30 * 86_400.0
SAMPLES = 50
PAGE = 50
BATCH = 500
FILL_SECONDS = 900

_OLD_SQLITE = (
    "SELECT scope, count(*), max(updated_at) FROM agentkeep_memories "
    "WHERE scope > ? AND scope < ? AND superseded_by IS NULL AND updated_at >= ? "
    "GROUP BY scope ORDER BY max(updated_at) DESC, scope LIMIT ? OFFSET 0"
)
_OLD_POSTGRES = (
    'SELECT scope, count(*), max(updated_at) FROM {}.memories WHERE scope COLLATE "C" > %s '
    'AND scope COLLATE "C" < %s AND superseded_by IS NULL AND updated_at >= %s '
    'GROUP BY scope ORDER BY max(updated_at) DESC, scope COLLATE "C" LIMIT %s OFFSET 0'
)


async def median_ms(job: Callable[[], Awaitable[object]]) -> float:
    times: list[float] = []
    for _ in range(SAMPLES):
        start = time.perf_counter()
        await job()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def open_store(backend: str, folder: Path, schema: str) -> MemoryStore:
    if backend == "sqlite":
        return SQLiteMemoryStore(folder / "memory.db", dimensions=8, ttl=TTL)
    if backend == "postgres":
        return PostgresMemoryStore.from_url(POSTGRES_URL, schema=schema, dimensions=8, ttl=TTL)
    return InMemoryMemoryStore(dimensions=8, ttl=TTL)


async def fill(store: MemoryStore, backend: str, size: int) -> None:
    """``size`` scopes of tenant ``bench`` with one memory each, 100 of tenant ``other``."""
    deadline = time.monotonic() + FILL_SECONDS
    scopes = [MemoryScope(f"user-{n:06}", tenant_id="bench") for n in range(size)]
    scopes += [MemoryScope(f"user-{n:06}", tenant_id="other") for n in range(100)]
    for start in range(0, len(scopes), BATCH):  # bounded: len(scopes) / BATCH batches
        batch = scopes[start : start + BATCH]
        adds = [store.add(scope, MemoryRecord(f"note of {scope.user_id}")) for scope in batch]
        if backend == "postgres":
            for part in range(0, len(adds), 8):  # 8 at a time: the pool's connections
                await asyncio.gather(*adds[part : part + 8])
        else:
            for add in adds:
                await add
        if time.monotonic() > deadline:
            raise SystemExit(f"filling {size} scopes took more than {FILL_SECONDS} s")


async def reference_ms(store: MemoryStore, backend: str) -> float | None:
    """The previous implementation's first page (GROUP BY over the tenant's memories)."""
    low, high = MemoryScope.tenant_key_range("bench")
    cutoff = int((time.time() - TTL) * 1_000_000)
    if isinstance(store, SQLiteMemoryStore):
        connection = apsw.Connection(str(store.path))
        try:
            return await median_ms(
                lambda: asyncio.to_thread(
                    lambda: connection.execute(_OLD_SQLITE, (low, high, cutoff, PAGE)).fetchall()
                )
            )
        finally:
            connection.close()
    if isinstance(store, PostgresMemoryStore):
        import psycopg
        from psycopg import sql

        query = sql.SQL(_OLD_POSTGRES).format(sql.Identifier(store.schema))  # pyright: ignore[reportArgumentType]
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:

            async def page() -> None:
                await (await conn.execute(query, (low, high, cutoff, PAGE))).fetchall()

            return await median_ms(page)
    return None


async def measure(backend: str, size: int) -> dict[str, float | None]:
    folder = Path(tempfile.mkdtemp(prefix="bench-scopes-"))
    schema = f"bench_scopes_{uuid.uuid4().hex[:10]}"
    store = open_store(backend, folder, schema)
    try:
        await store.setup()
        start = time.perf_counter()
        await fill(store, backend, size)
        filled = time.perf_counter() - start
        middle = size // 2
        walked = 0
        after: str | None = None
        for _ in range(middle // 1000 + 1):  # to the middle in pages of up to 1,000
            step = min(1000, middle - walked)
            if step == 0:
                break
            page = await store.scopes(tenant_id="bench", limit=step, after=after)
            walked += len(page)
            after = page[-1].cursor
        deep = await store.scopes(tenant_id="bench", limit=PAGE, after=after)
        assert deep == await store.scopes(tenant_id="bench", limit=PAGE, offset=middle)
        return {
            "fill": filled,
            "first": await median_ms(lambda: store.scopes(tenant_id="bench", limit=PAGE)),
            "cursor": await median_ms(lambda: store.scopes(tenant_id="bench", limit=PAGE, after=after)),
            "offset": await median_ms(lambda: store.scopes(tenant_id="bench", limit=PAGE, offset=middle)),
            "q": await median_ms(lambda: store.scopes(tenant_id="bench", limit=PAGE, q="nobody")),
            "reference": await reference_ms(store, backend),
        }
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)
        if backend == "postgres":
            import psycopg
            from psycopg import sql

            async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
                await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def main() -> None:
    parser = argparse.ArgumentParser(description="Listing a tenant's memory scopes, a page of 50.")
    parser.add_argument("--sizes", default="1000,100000", help="scopes of the tenant, comma-separated")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "memory"], help="one store only")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(
        f"scopes(tenant_id=..., limit={PAGE}): median of {SAMPLES} calls, ttl set (expired memories counted)"
    )
    print(
        f"{'store':<9} | {'scopes':>8} | {'fill':>7} | {'1st page':>9} | {'by cursor':>9} | "
        f"{'by offset':>9} | {'q (none)':>9} | {'GROUP BY':>9} | {'ratio':>6}"
    )
    print("-" * 98)
    for backend in ("sqlite", "postgres", "memory"):
        if args.backend not in (None, backend):
            continue
        for size in sizes:
            t = await measure(backend, size)
            reference = t["reference"]
            first = t["first"] or 0.0
            shown = "-" if reference is None else f"{reference:>6.2f} ms"
            ratio = "-" if reference is None else f"{reference / first:.0f}x"
            print(
                f"{backend:<9} | {size:>8,} | {t['fill']:>5.0f} s | {first:>6.2f} ms | "
                f"{t['cursor']:>6.2f} ms | {t['offset']:>6.2f} ms | {t['q']:>6.2f} ms | "
                f"{shown:>9} | {ratio:>6}",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
