"""Connections a server holds: the host under uvicorn as it was, uvicorn with httptools, agentkeep's
bounded server, and granian, on the same app over real loopback sockets.

Each server runs in its own subprocess (``loop="asyncio"`` everywhere, no access log) and serves the
same ``AgentHost``: one agent on a scripted model that answers "ok" at once, its history and
sessions in one SQLite file. The servers:

* ``uvicorn-h11``: ``uvicorn.Config(app, http="h11")``, what ``agentkeep serve`` ran before
  (uvicorn's ``auto`` is h11 without httptools);
* ``uvicorn-httptools``: the same with ``http="httptools"`` (needs ``httptools``);
* ``agentkeep``: ``agentkeep.host._server.LimitedConfig``, uvicorn's h11 protocol with the header,
  body and keep-alive timers and the connection cap (``header_timeout`` 10 s, the default);
* ``granian``: ``granian --interface asgi`` (needs ``granian``), ``--http1-header-read-timeout
  10000`` to match.

Servers whose package is missing are skipped. To include them without touching the project's
environment: ``pip install --target /tmp/bench-site httptools granian`` and run with
``PYTHONPATH=src:/tmp/bench-site``.

Phases, one server at a time, every loop bounded in count and by ``--budget`` seconds:

1. CPU: ``GET /healthz`` and AG-UI turns (each a new conversation, one user message) from 8 clients
   on keep-alive connections; server CPU per request from /proc (every thread of the server's
   process tree, ``schedstat`` run time), and the p50 latency.
2. Idle: 3,000 connections that send nothing, held ``--observe`` seconds (13 by default): how many
   the server closed and when, ``/healthz`` on a new connection every 0.5 s meanwhile (p50, max,
   failures), the server's CPU and memory growth while it holds them.
3. Slowloris: 1,000 connections that send a request line and then one header line a second, never
   the end of the head: how many the server closed, ``/healthz`` meanwhile.
4. Flood (``--flood``): the server started with 4,096 open files at most (soft and hard), 5,000
   idle connections opened: how many were accepted or refused, ``/healthz`` meanwhile.

Run: ``PYTHONPATH=src .venv/bin/python bench/bench_connections.py [--quick] [--servers a,b]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
SERVERS = ("uvicorn-h11", "uvicorn-httptools", "agentkeep", "granian")
HEADER_TIMEOUT = 10.0
FLOOD_FILES = 4096
PROBE_INTERVAL = 0.5
PROBE_TIMEOUT = 3.0


# -- the app and the servers (subprocess side) -------------------------------------------------------
def build_app() -> Any:
    """The host the servers serve (the SQLite file named by ``BENCH_DB``)."""
    from agentkeep import Agent
    from agentkeep.host import AgentHost
    from agentkeep.message_stores.sqlite import SQLiteMessageStore
    from agentkeep.providers import StorageHistoryProvider
    from agentkeep.session_stores.sqlite import SQLiteSessionStore
    from agentkeep.testing import ScriptedChatClient

    db = os.environ["BENCH_DB"]
    history = StorageHistoryProvider(SQLiteMessageStore(db), "history", load_limit=50, owns_store=True)
    agent = Agent(ScriptedChatClient(lambda messages: "ok"), name="chat", context_providers=[history])
    host = AgentHost()
    host.add_agent("chat", agent, session_store=SQLiteSessionStore(db))
    host.on_shutdown.append(history.aclose)
    return host.app


def serve(name: str, port: int) -> None:
    """The ``--serve NAME`` subprocess: one of the uvicorn servers."""
    import uvicorn

    options: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "loop": "asyncio",
        "log_level": "warning",
        "access_log": False,
        "lifespan": "on",
    }
    if name == "agentkeep":
        from agentkeep.host._server import ConnectionLimits, LimitedConfig, raise_open_file_limit

        raise_open_file_limit()
        config: uvicorn.Config = LimitedConfig(
            build_app(), limits=ConnectionLimits(header_timeout=HEADER_TIMEOUT), **options
        )
    else:
        config = uvicorn.Config(build_app(), http=name.removeprefix("uvicorn-"), **options)
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run()


def available(name: str) -> bool:
    module = {"uvicorn-httptools": "httptools", "granian": "granian"}.get(name)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def command(name: str, port: int) -> list[str]:
    if name == "granian":
        return [
            sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", "--loop", "asyncio", "--log-level", "warning",
            "--no-ws", "--http", "1", "--http1-header-read-timeout", str(int(HEADER_TIMEOUT * 1000)),
            "--factory", "--working-dir", str(HERE), "bench_connections:build_app",
        ]  # fmt: skip
    return [sys.executable, str(Path(__file__).resolve()), "--serve", name, "--port", str(port)]


# -- the servers (bench side) ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (granian runs its worker in a child process)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                parents.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
    found, todo = [root], [root]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


class Server:
    def __init__(self, name: str, folder: Path, *, open_files: int | None = None) -> None:
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / f"{name}-{self.port}.log"
        paths = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = {
            **os.environ,
            "BENCH_DB": str(folder / f"{name}-{self.port}.db"),
            "PYTHONPATH": os.pathsep.join(paths),
        }

        def limit_files() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command(name, self.port),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=limit_files,
            )

    async def ready(self, wait: float = 60.0) -> None:
        async with asyncio.timeout(wait), httpx.AsyncClient(timeout=2) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/healthz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)

    def cpu(self) -> float:
        """CPU seconds of every thread of the server's processes (schedstat run time)."""
        total = 0
        for pid in process_tree(self.process.pid):
            with contextlib.suppress(OSError, ValueError, IndexError):
                for task in Path(f"/proc/{pid}/task").iterdir():
                    total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9

    def rss(self) -> int:
        """Resident bytes of the server's processes."""
        total = 0
        for pid in process_tree(self.process.pid):
            with contextlib.suppress(OSError, ValueError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- the clients -------------------------------------------------------------------------------------
def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def cpu_phase(
    server: Server, *, requests: int, turns: int, clients: int, budget: float
) -> dict[str, Any]:
    """Server CPU per ``GET /healthz`` and per AG-UI turn, ``clients`` keep-alive connections."""

    async def load(job: str, count: int) -> tuple[float, float]:
        latencies: list[float] = []
        remaining = [count]

        async def client() -> None:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                while remaining[0] > 0:
                    remaining[0] -= 1
                    started = time.perf_counter()
                    if job == "healthz":
                        response = await http.get("/healthz")
                    else:
                        body = {
                            "threadId": uuid.uuid4().hex,
                            "runId": "r",
                            "state": {},
                            "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "hi"}],
                            "tools": [],
                            "context": [],
                            "forwardedProps": {},
                        }
                        response = await http.post("/agents/chat", json=body)
                        assert b"RUN_FINISHED" in response.content, response.text[:300]
                    assert response.status_code == 200, response.status_code
                    latencies.append(time.perf_counter() - started)

        before = server.cpu()
        async with asyncio.timeout(budget):
            await asyncio.gather(*(client() for _ in range(clients)))
        return (server.cpu() - before) / len(latencies) * 1000, pct(latencies, 0.5) * 1000

    await load("healthz", 200)  # warm up
    await load("turn", 50)
    healthz = await load("healthz", requests)
    turn = await load("turn", turns)
    return {"healthz_cpu": healthz[0], "healthz_p50": healthz[1], "turn_cpu": turn[0], "turn_p50": turn[1]}


@dataclass
class Held:
    """Connections the bench holds open, each watched for the server's close."""

    opened: int = 0
    failed: int = 0
    refused: int = 0  # answered 503 at once
    closed_at: list[float] = field(default_factory=list[float])
    writers: list[asyncio.StreamWriter] = field(default_factory=list[asyncio.StreamWriter])
    watchers: list[asyncio.Task[None]] = field(default_factory=list[asyncio.Task[None]])


async def open_held(server: Server, count: int, started: float, held: Held) -> None:
    async def one() -> None:
        try:
            async with asyncio.timeout(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        except (OSError, TimeoutError):
            held.failed += 1
            return
        held.opened += 1
        held.writers.append(writer)
        held.watchers.append(asyncio.create_task(watch(reader)))

    async def watch(reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(4096):
                if data.startswith(b"HTTP/1.1 503"):
                    held.refused += 1
        held.closed_at.append(time.monotonic() - started)

    for first in range(0, count, 250):
        await asyncio.gather(*(one() for _ in range(min(250, count - first))))


async def probe(server: Server) -> float | None:
    """``GET /healthz`` on a new connection: seconds to a 200, ``None`` for anything else."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode())
            answer = await reader.read()
            writer.close()
    except (OSError, TimeoutError):
        return None
    return time.perf_counter() - started if answer.startswith(b"HTTP/1.1 200") else None


async def hold_phase(
    server: Server, *, count: int, observe: float, slowloris: bool, budget: float
) -> dict[str, Any]:
    """Hold ``count`` connections for ``observe`` seconds (slowloris: trickling a head), probing
    ``/healthz`` meanwhile."""
    held = Held()
    rss, cpu = server.rss(), server.cpu()
    started = time.monotonic()
    probes: list[float | None] = []

    async def probing() -> None:
        while time.monotonic() - started < observe:
            probes.append(await probe(server))
            await asyncio.sleep(PROBE_INTERVAL)

    async def trickle() -> None:
        for writer in held.writers:
            writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode())
        line = 0
        while time.monotonic() - started < observe:
            await asyncio.sleep(1.0)
            line += 1
            for writer in held.writers:
                if not writer.is_closing():
                    with contextlib.suppress(OSError):
                        writer.write(f"X-Slow-{line}: {'a' * 8}\r\n".encode())

    async with asyncio.timeout(budget):
        prober = asyncio.create_task(probing())
        await open_held(server, count, started, held)
        peak_rss = server.rss()
        if slowloris:
            await trickle()
        await prober
    cpu = server.cpu() - cpu
    for writer in held.writers:
        writer.close()
    for watcher in held.watchers:
        watcher.cancel()
    good = [p for p in probes if p is not None]
    closed = sorted(held.closed_at)
    return {
        "opened": held.opened,
        "failed": held.failed,
        "refused": held.refused,
        "closed": len(closed),
        "closed_by": closed[-1] if closed else None,
        "probes": len(probes),
        "probe_failed": len(probes) - len(good),
        "probe_p50": pct(good, 0.5) * 1000 if good else None,
        "probe_max": max(good) * 1000 if good else None,
        "kib_per_conn": (peak_rss - rss) / 1024 / max(1, held.opened),
        "cpu": cpu,
        "alive": server.process.poll() is None,
    }


# -- the run -----------------------------------------------------------------------------------------
def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def hold_cells(phase: dict[str, Any] | None) -> list[str]:
    """The report's cells of one hold phase of one server."""
    if phase is None:
        return ["-"] * 7
    return [
        f"{phase['opened']}/{phase['refused']}/{phase['failed']}",
        str(phase["closed"]),
        fmt(phase["closed_by"]),
        f"{phase['probe_failed']}/{phase['probes']}",
        f"{fmt(phase['probe_p50'])}/{fmt(phase['probe_max'])}",
        fmt(phase["kib_per_conn"]),
        fmt(phase["cpu"], ".2f"),
    ]


def report(results: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace) -> None:
    names = list(results)
    width = max(18, *(len(n) + 2 for n in names))

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:40}" + "".join(f"{cell:>{width}}" for cell in cells))

    row("", names)
    for key, label in (
        ("healthz_cpu", "CPU per GET /healthz (ms)"),
        ("healthz_p50", "  p50 latency, 8 clients (ms)"),
        ("turn_cpu", "CPU per AG-UI turn (ms)"),
        ("turn_p50", "  p50 latency, 8 clients (ms)"),
    ):
        row(label, [fmt(results[n]["cpu"][key], ".3f" if "cpu" in key else ".2f") for n in names])
    labels = [
        "  opened / refused 503 / failed",
        "  closed by the server in the phase",
        "  the last closed after (s)",
        "  /healthz probes failed / made",
        "  /healthz p50 / max (ms)",
        "  server memory per connection (KiB)",
        "  server CPU in the phase (s)",
    ]
    for phase, title in (
        ("idle", f"{args.idle:,} idle connections"),
        ("slowloris", f"{args.slowloris:,} slowloris connections"),
        ("flood", f"{args.flood:,} idle, server limited to {FLOOD_FILES:,} open files"),
    ):
        columns = [hold_cells(results[n].get(phase)) for n in names]
        if all(column[0] == "-" for column in columns):
            continue
        print(title)
        for line, label in enumerate(labels):
            row(label, [column[line] for column in columns])


async def run(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    names = [n for n in args.servers.split(",") if n]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-conn-") as tmp:
        folder = Path(tmp)
        for name in names:
            if not available(name):
                print(f"skipping {name}: its package is not installed", flush=True)
                continue
            results[name] = {}
            server = Server(name, folder)
            try:
                await server.ready()
                print(f"{name}: CPU", flush=True)
                results[name]["cpu"] = await cpu_phase(
                    server, requests=args.requests, turns=args.turns, clients=8, budget=args.budget
                )
                for phase, count in (("idle", args.idle), ("slowloris", args.slowloris)):
                    if count:
                        print(f"{name}: {phase}", flush=True)
                        results[name][phase] = await hold_phase(
                            server, count=count, observe=args.observe, slowloris=phase == "slowloris",
                            budget=args.budget,
                        )  # fmt: skip
                        await asyncio.sleep(1)
            finally:
                server.stop()
            if args.flood:
                server = Server(name, folder, open_files=FLOOD_FILES)
                try:
                    await server.ready()
                    print(f"{name}: flood", flush=True)
                    results[name]["flood"] = await hold_phase(
                        server, count=args.flood, observe=args.observe, slowloris=False, budget=args.budget
                    )
                finally:
                    server.stop()
    report(results, args)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--requests", type=int, default=3000, help="GET /healthz per server")
    parser.add_argument("--turns", type=int, default=600, help="AG-UI turns per server")
    parser.add_argument("--idle", type=int, default=3000)
    parser.add_argument("--slowloris", type=int, default=1000)
    parser.add_argument("--flood", type=int, default=5000, help="0: skip the flood phase")
    parser.add_argument("--observe", type=float, default=13.0, help="seconds each hold phase lasts")
    parser.add_argument("--budget", type=float, default=90.0, help="seconds at most per phase")
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests and connections")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    if args.quick:
        args.requests, args.turns = args.requests // 10, args.turns // 10
        args.idle, args.slowloris, args.flood = args.idle // 10, args.slowloris // 10, args.flood // 10
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
