"""Load at scale: several ``AgentHost`` processes over one store, conversations moving between them.

Per target (``postgres``: the machine's PostgreSQL, direct; ``pgbouncer``: the same through a
private PgBouncer in transaction pooling mode with ``?pooler=transaction``; ``cluster``: a private
Redis Cluster of 3 masters + 3 replicas on free loopback ports, ``redis+cluster://``; ``redis``: a
Redis URL given with ``--redis-url``), ``--processes`` server processes (default 4)
each run the host on the store under uvicorn with an instant fake model (answers "ok";
``tests.host.instant_host``), the
history and the session store opened from the same URL (one pool per process, ``pool_size``
connections, named by ``application_name``; PgBouncer's server connections by its database's
``application_name``). ``--clients`` AG-UI clients (default 256) each hold one conversation of
``--turns`` turns (default 10) and send turn k to process (client + k) mod N, so every
conversation moves between processes every turn.

Reported: turns/s, p50 / p99 latency, errors, the most server connections seen (PostgreSQL's
``pg_stat_activity`` rows of that ``application_name``, sampled every 100 ms), server CPU ms per
turn (the processes' utime + stime from /proc), and an integrity check from the store alone: every
conversation holds exactly its completed turns, in order, with the assistant ids the clients saw,
and nothing of a failed one (counted apart: conversations holding more than their client saw
completed, and conversations missing a completed turn).

Run: ``.venv/bin/python bench/bench_scale.py [--targets postgres,pgbouncer] [--quick]``.
Every loop is bounded in count and by ``--budget`` seconds per target.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's tests package
from bench_host import Thread, _client  # pyright: ignore[reportPrivateUsage]

ROOT = Path(__file__).resolve().parent.parent

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
APPLICATION = f"agentkeep-scale-{os.getpid()}"
"""The servers' application_name: their connections are counted by it (PgBouncer passes it on)."""


# -- the server processes ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def servers(url: str, count: int) -> Iterator[list[tuple[str, int]]]:
    """``count`` server processes on ``url``: their base URLs and pids, stopped afterwards."""
    started: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for _ in range(count):
            port = _free_port()
            command = [sys.executable, "-m", "tests.host.instant_host", "--port", str(port), "--url", url]
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, cwd=ROOT)
            started.append((process, f"http://127.0.0.1:{port}"))
        deadline = time.monotonic() + 60
        for process, base in started:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"a server exited with {process.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("a server did not get ready within 60 s")
                time.sleep(0.1)
        yield [(base, process.pid) for process, base in started]
    finally:
        for process, _ in started:
            process.send_signal(signal.SIGINT)
        for process, _ in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


# -- the load ---------------------------------------------------------------------------------------
async def _sample_connections(stop: asyncio.Event, most: list[int]) -> None:
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        while not stop.is_set():
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,)
            )
            row = await cursor.fetchone()
            most[0] = max(most[0], int(row[0]) if row else 0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)


async def load(
    bases: list[str], pids: list[int], *, clients: int, turns: int, budget: float, count_connections: bool
) -> dict[str, Any]:
    threads = [Thread() for _ in range(clients)]
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + budget
    stop, most = asyncio.Event(), [0]
    sampler = asyncio.create_task(_sample_connections(stop, most)) if count_connections else None
    cpu_before, started = _cpu_seconds(pids), time.perf_counter()

    async def drive(number: int, thread: Thread, client: httpx.AsyncClient) -> None:
        for turn in range(turns):
            if time.monotonic() > deadline:
                errors.append("budget")
                return
            done = await thread.turn(client, bases[(number + turn) % len(bases)])
            latencies.append(done.seconds)
            if done.error is not None:
                message = done.events[-1].get("message", "") if done.events else ""
                errors.append(f"{done.error}: {message}" if message else done.error)

    async with _client(clients) as client:
        await asyncio.gather(*(drive(number, thread, client) for number, thread in enumerate(threads)))
    elapsed, cpu = time.perf_counter() - started, _cpu_seconds(pids) - cpu_before
    stop.set()
    if sampler is not None:
        await sampler
    completed = sum(thread.turns for thread in threads)
    ordered = sorted(latencies)
    return {
        "threads": threads,
        "turns": completed,
        "rate": completed / elapsed,
        "p50": statistics.median(ordered) * 1000,
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "errors": errors,
        "connections": most[0] if count_connections else None,
        "cpu_ms": cpu * 1000 / max(completed, 1),
    }


async def integrity(url: str, threads: list[Thread]) -> tuple[int, int]:
    """Conversations whose stored log is not exactly what their client saw completed: (those that
    hold more, a turn reported failed that was stored; those that lost or changed a completed one)."""
    from agentkeep.store_urls import open_message_store

    store = open_message_store(url)
    extra = lost = 0
    try:
        for thread in threads:
            stored = (await store.read(f"local::{thread.id}", raw=True)).messages
            seen = [
                (m["role"], m["content"], m["id"] if m["role"] == "assistant" else None)
                for m in thread.messages
            ]
            kept = [(m.role, m.text, m.message_id if m.role == "assistant" else None) for m in stored]
            if kept == seen:
                continue
            remaining = iter(kept)
            if all(any(item == other for other in remaining) for item in seen):
                extra += 1  # every completed turn is there, in order, and more
            else:
                lost += 1
    finally:
        await store.aclose()  # type: ignore[attr-defined]
    return extra, lost


async def drop_schema(schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


@contextlib.contextmanager
def target_url(name: str, pool_size: int, redis_url: str | None) -> Iterator[tuple[str, str, bool]]:
    """The store URL of a target, the URL to check the store with afterwards, and whether its
    connections are PostgreSQL's."""
    if name == "cluster":
        from tests.private_redis_cluster import RedisClusterProcesses

        with tempfile.TemporaryDirectory(prefix="akscale-cluster-") as folder:
            # Redis's default node timeout: the tests' 1 s makes a loaded machine fail over spuriously
            cluster = RedisClusterProcesses(Path(folder), node_timeout_ms=15_000)
            try:
                cluster.start()
                url = f"{cluster.url}?key_prefix=akscale"
                yield url, url, False
            finally:
                cluster.stop()
        return
    if name == "redis":
        if redis_url is None:
            raise SystemExit("--targets redis needs --redis-url")
        prefix = f"akscale{uuid.uuid4().hex[:8]}"
        separator = "&" if "?" in redis_url else "?"
        url = f"{redis_url}{separator}key_prefix={prefix}"
        yield url, url, False
        return
    schema = f"akscale_{uuid.uuid4().hex[:10]}"
    direct = f"{PG_URL}?schema={schema}&pool_size={pool_size}&application_name={APPLICATION}"
    try:
        if name == "postgres":
            yield direct, direct, True
        else:
            from tests.private_pgbouncer import PgBouncer

            with tempfile.TemporaryDirectory(prefix="akscale-") as folder:
                pooler = PgBouncer(
                    Path(folder), PG_URL, pool_size=pool_size * 2, application_name=APPLICATION
                )
                pooler.start()
                try:
                    yield (
                        f"{pooler.url}?pooler=transaction&schema={schema}&pool_size={pool_size}",
                        direct,
                        True,
                    )
                finally:
                    pooler.stop()
    finally:
        asyncio.run(drop_schema(schema))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--targets", default="postgres,pgbouncer,cluster", help="postgres, pgbouncer, cluster, redis"
    )
    parser.add_argument("--redis-url", help="the Redis store URL for the redis target")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--clients", type=int, default=256)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--pool-size", type=int, default=10, help="connections per process")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds at most per target")
    parser.add_argument("--quick", action="store_true", help="32 clients x 5 turns")
    args = parser.parse_args(argv)
    clients, turns = (32, 5) if args.quick else (args.clients, args.turns)
    rows: list[tuple[str, dict[str, Any], tuple[int, int]]] = []
    for name in args.targets.split(","):
        with target_url(name, args.pool_size, args.redis_url) as (url, check_url, postgres):
            with servers(url, args.processes) as started:
                bases, pids = [base for base, _ in started], [pid for _, pid in started]
                result = asyncio.run(
                    load(
                        bases,
                        pids,
                        clients=clients,
                        turns=turns,
                        budget=args.budget,
                        count_connections=postgres,
                    )
                )
            wrong = asyncio.run(integrity(check_url, result["threads"]))
            rows.append((name, result, wrong))
    print(
        f"\n{args.processes} processes, {clients} clients x {turns} turns, each conversation moving "
        f"between processes every turn; pool_size {args.pool_size} per process"
    )
    header = (
        f"{'target':>10} | {'turns':>6} | {'turns/s':>8} | {'p50':>9} | {'p99':>9} | {'errors':>6} | "
        f"{'connections':>11} | {'CPU/turn':>9} | {'more stored':>11} | {'lost':>4}"
    )
    print(header)
    print("-" * len(header))
    for name, result, wrong in rows:
        connections = "-" if result["connections"] is None else str(result["connections"])
        print(
            f"{name:>10} | {result['turns']:>6} | {result['rate']:8.1f} | {result['p50']:6.1f} ms | "
            f"{result['p99']:6.1f} ms | {len(result['errors']):>6} | {connections:>11} | "
            f"{result['cpu_ms']:6.2f} ms | {wrong[0]:>11} | {wrong[1]:>4}"
        )
        for error in sorted(set(result["errors"]))[:5]:
            print(f"{'':>12} error: {error[:150]}")
    print(
        "(more stored: conversations holding a turn reported failed; lost: a completed turn missing)\n"
        f"(targets: 0 errors, 0 of either; PostgreSQL connections <= {args.processes} x {args.pool_size} = "
        f"{args.processes * args.pool_size} direct, <= PgBouncer's pool of {2 * args.pool_size} behind it)"
    )


if __name__ == "__main__":
    main()
