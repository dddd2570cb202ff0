"""The AG-UI host over real HTTP: agentkeep's ``AgentHost`` against Microsoft Agent Framework's endpoint.

Each server runs in its own subprocess on a loopback port under uvicorn (``loop="asyncio"``,
``http="h11"``, no access log, for all), with the same instant fake model (answers "ok"):

* ours: ``AgentHost`` (no API keys: loopback, tenant ``local``) serving an ``Agent`` on a minimal
  ``BaseChatClient`` subclass with a ``StorageHistoryProvider`` on ``SQLiteMessageStore``
  (``load_limit=50``) and a ``SQLiteSessionStore``, both in one SQLite file, as
  ``tests/host/conftest.py`` builds it;
* reference: ``agent-framework-ag-ui`` (``add_agent_framework_fastapi_endpoint``) on
  ``agent-framework-core``: an ``Agent`` on a minimal ``BaseChatClient`` subclass, its threads in
  the package's ``InMemoryAGUIThreadSnapshotStore`` under one stable scope (the documented
  ``authorization_scope_resolver``); installed only into ``bench/.venv-ref`` and run from there;
* floor (section 1 only): a bare FastAPI endpoint that validates the RunAgentInput and streams the
  same five events, no agent and no storage: what any Python AG-UI server on this stack pays.

A user message starting with ``slow:`` makes either fake model take 50 ms (section 3 only).

The load client is ``httpx.AsyncClient`` in this process (one per simulated user, one keep-alive
connection each) and behaves as an AG-UI client: each turn resends the whole message list with ids
and appends the assistant message rebuilt from ``TEXT_MESSAGE_START`` / ``TEXT_MESSAGE_CONTENT``.
Every event is received; the reference's ``MESSAGES_SNAPSHOT`` (its whole transcript, sent at the
end of each run) is not decoded, to keep the client light. Server CPU is read from /proc before and
after each phase: the sum of the server's threads' ``schedstat`` run time (ns), checked against
``/proc/<pid>/stat`` utime + stime (10 ms ticks) over the whole run. The servers take turns phase
by phase, so drift on a shared machine falls on both.

1. 1, 8 and 32 concurrent clients x 50 turns, each client on its own thread: server CPU ms per
   request, requests/s, p50 / p99 latency.
2. One turn after 10, 100 and 1,000 prior turns on one thread (the prior turns actually run), the
   client sending (a) only the new message, (b) the whole history: median latency, server CPU.
   Several threads at small N, so each measured turn has (within ~5%) N prior turns.
3. 8 concurrent turns on one thread, each with the same prior history and its own new message:
   how many of the 8 are stored afterwards (ours: the SQLite raw log of ``local::<threadId>``;
   the reference: its endpoint's replay of the stored thread), with the instant model and with
   the 50 ms one.
4. The model behind HTTP: a fake OpenAI-compatible server in a process of its own (plain asyncio,
   answers "ok" at once, streamed; counts each prompt's messages), ``agentkeep serve --base-url
   URL --api-model NAME --history-limit 1000000`` (as shipped: with uvicorn's access log, a line
   per request, which the reference is run without) against the reference with
   ``agent-framework-openai``'s ``OpenAIChatCompletionClient`` on it. One turn after 10, 40, 100
   and 1,000 prior turns (``--remote-sizes``), the client sending only the new message: server
   CPU per turn, latency, the prompt size the model got; and, timed in this process over the same
   prompt sizes, our chat client's body encoding and the SDK's own preparation of that body.

5. Instructions per request (not run by default; needs valgrind): each server alone under
   valgrind's callgrind, one client x 50 turns as in section 1, counted only while that load runs
   (``callgrind_control`` turns the count on after the warm-up and off after the load). User-space
   instructions do not move with the machine's speed as CPU time does here (by up to 2x between
   runs), so a change's effect shows at one run; they leave out the kernel's share (sends,
   SQLite's writes) and what a cache miss costs.

Run: ``.venv/bin/python bench/bench_host.py [--quick] [--no-reference] [--profile] [--sections 1,2,3,4,5]``.
``--memory-stores`` (sections 1 and 5 only, a diagnostic) serves ours with its history and
sessions in memory instead of SQLite: what the storage costs a turn.
Every load loop is bounded in count and by ``--budget`` seconds per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import pstats
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
from fastapi import Request  # resolved at run time by the floor server's route

if TYPE_CHECKING:
    from agentkeep import Message

HERE = Path(__file__).resolve().parent
REF_VENV = HERE / ".venv-ref"
REF_PACKAGES = [
    "agent-framework-ag-ui>=1.7,<1.8",
    "agent-framework-core",
    "agent-framework-openai",
    "uvicorn",
]
REF_FALLBACK = ["agent-framework-ag-ui", "agent-framework-core", "agent-framework-openai", "uvicorn"]
CLK_TCK = os.sysconf("SC_CLK_TCK")
RACE = 8  # concurrent turns on one thread in section 3
SLOW, SLOW_SECONDS = "slow:", 0.05  # a user message starting so: the fake model takes 50 ms
FAKE_MODEL = "bench-fake"  # the model name the fake OpenAI-compatible server offers (section 4)

# The reference server, run by bench/.venv-ref's python (kept as text here: the project's own
# environment has no agent_framework to type-check or lint it against).
_REFERENCE_SERVER = textwrap.dedent(
    '''
    import argparse, asyncio, cProfile, uuid

    import uvicorn
    from agent_framework import (
        Agent, BaseChatClient, ChatResponse, ChatResponseUpdate, Content, ResponseStream,
    )
    from agent_framework_ag_ui import (
        InMemoryAGUIThreadSnapshotStore, add_agent_framework_fastapi_endpoint,
    )
    from fastapi import FastAPI


    class InstantChatClient(BaseChatClient):
        """Answers "ok" at once (one streamed text update)."""

        OTEL_PROVIDER_NAME = "bench"

        def _inner_get_response(self, *, messages, stream, options, **kwargs):
            message_id = uuid.uuid4().hex
            slow = bool(messages) and messages[-1].text.startswith(%(slow)r)

            def update():
                return ChatResponseUpdate(
                    contents=[Content.from_text(text="ok")], role="assistant",
                    message_id=message_id, response_id=message_id, finish_reason="stop",
                )

            if stream:
                async def updates():
                    if slow:
                        await asyncio.sleep(%(seconds)r)
                    yield update()

                return ResponseStream(updates(), finalizer=ChatResponse.from_updates)

            async def response():
                if slow:
                    await asyncio.sleep(%(seconds)r)
                return ChatResponse.from_updates([update()])

            return response()


    def scope():
        return "bench-single-user"  # one stable application scope (documented single-user setup)


    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--profile")
    parser.add_argument("--model-url", help="an OpenAI-compatible server's base URL (section 4)")
    args = parser.parse_args()

    if args.model_url:
        from agent_framework.openai import OpenAIChatCompletionClient

        model = OpenAIChatCompletionClient(model=%(model)r, api_key="not-needed", base_url=args.model_url)
    else:
        model = InstantChatClient()
    app = FastAPI(title="reference AG-UI host")
    add_agent_framework_fastapi_endpoint(
        app,
        Agent(model, name="chat"),
        path="/agents/chat",
        snapshot_store=InMemoryAGUIThreadSnapshotStore(max_snapshots=100_000),
        authorization_scope_resolver=scope,
    )


    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}


    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=args.port, loop="asyncio", http="h11",
                       log_level="warning", access_log=False)
    )
    profile = cProfile.Profile() if args.profile else None
    try:
        if profile is not None:
            profile.runcall(server.run)
        else:
            server.run()
    except KeyboardInterrupt:
        pass
    finally:
        if profile is not None:
            profile.dump_stats(args.profile)
    '''
)


# -- the servers ---------------------------------------------------------------------------------------
def serve_ours(port: int, db: str, session_db: str, profile: str | None, *, memory: bool = False) -> None:
    """The ``--serve ours`` subprocess: the host as tests/host/conftest.py builds it, under uvicorn."""
    import cProfile

    import uvicorn

    from agentkeep import Agent, BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate, Message
    from agentkeep.contents import TextContent
    from agentkeep.host import AgentHost
    from agentkeep.message_stores.memory import InMemoryMessageStore
    from agentkeep.message_stores.sqlite import SQLiteMessageStore
    from agentkeep.providers import StorageHistoryProvider
    from agentkeep.session_stores.memory import InMemorySessionStore
    from agentkeep.session_stores.sqlite import SQLiteSessionStore

    class InstantChatClient(BaseChatClient):
        """Answers "ok" at once (one streamed text update), as the reference's fake does."""

        async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
            if messages and messages[-1].text.startswith(SLOW):
                await asyncio.sleep(SLOW_SECONDS)
            return ChatResponse([Message("assistant", [TextContent("ok")])], finish_reason="stop")

        async def get_streaming_response(
            self, messages: Sequence[Message], *, options: ChatOptions
        ) -> AsyncIterator[ChatResponseUpdate]:
            if messages and messages[-1].text.startswith(SLOW):
                await asyncio.sleep(SLOW_SECONDS)
            message_id = uuid.uuid4().hex
            yield ChatResponseUpdate(
                [TextContent("ok")], message_id=message_id, response_id=message_id, finish_reason="stop"
            )

    client = InstantChatClient()
    messages = InMemoryMessageStore() if memory else SQLiteMessageStore(db)
    history = StorageHistoryProvider(messages, "history", load_limit=50, owns_store=True)
    agent = Agent(client, name="chat", context_providers=[history])
    host = AgentHost()
    sessions = InMemorySessionStore() if memory else SQLiteSessionStore(session_db)
    host.add_agent("chat", agent, session_store=sessions)
    config = uvicorn.Config(
        host.app,
        host="127.0.0.1",
        port=port,
        loop="asyncio",
        http="h11",
        lifespan="on",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    profiler = cProfile.Profile() if profile else None
    try:
        if profiler is not None:
            profiler.runcall(server.run)
        else:
            server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it stopped on
        pass
    finally:
        if profiler is not None and profile:
            profiler.dump_stats(profile)


def serve_floor(port: int) -> None:
    """The ``--serve floor`` subprocess: FastAPI + uvicorn streaming the 5 AG-UI events of a text
    answer for each RunAgentInput (validated), with no agent and no storage."""
    import uvicorn
    from ag_ui.core import (
        RunAgentInput,
        RunFinishedEvent,
        RunStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
    )
    from ag_ui.encoder import EventEncoder
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    async def chat(request: Request) -> StreamingResponse:
        run = RunAgentInput.model_validate_json(await request.body())
        encoder, message = EventEncoder(), uuid.uuid4().hex

        async def events() -> AsyncIterator[str]:
            for event in (
                RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id),
                TextMessageStartEvent(message_id=message, role="assistant"),
                TextMessageContentEvent(message_id=message, delta="ok"),
                TextMessageEndEvent(message_id=message),
                RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id),
            ):
                yield encoder.encode(event)

        return StreamingResponse(events(), media_type="text/event-stream")

    app.get("/healthz")(healthz)
    app.post("/agents/chat")(chat)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, loop="asyncio", http="h11", log_level="warning", access_log=False
    )
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run()


def _reference_script() -> str:
    return _REFERENCE_SERVER % {"slow": SLOW, "seconds": SLOW_SECONDS, "model": FAKE_MODEL}


def serve_fake_model(port: int) -> None:
    """The ``--serve fake-model`` subprocess: an OpenAI-compatible Chat Completions server that
    answers "ok" at once (streamed as the SDKs ask: a text chunk, a finish chunk, a usage chunk and
    ``[DONE]``), on plain asyncio with keep-alive connections, so it costs the machine little.
    It counts the messages of each prompt (``"role":`` in the body), read and reset by
    ``GET /stats``; ``GET /v1/models`` lists the one model."""
    prompts: list[int] = []
    served = 0
    models = _encode(
        {"object": "list", "data": [{"id": FAKE_MODEL, "object": "model", "created": 0, "owned_by": "bench"}]}
    )
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}

    def completion(stream: bool) -> tuple[bytes, bytes]:
        nonlocal served
        served += 1
        base = {"id": f"chatcmpl-{served}", "created": 0, "model": FAKE_MODEL}
        if not stream:
            choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            return b"application/json", _encode(
                {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        chunk = {**base, "object": "chat.completion.chunk"}
        delta = {"role": "assistant", "content": "ok"}
        chunks = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": usage},
        ]
        events = b"".join(b"data: " + _encode(c) + b"\n\n" for c in chunks)
        return b"text/event-stream", events + b"data: [DONE]\n\n"

    def answer(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        if method == "POST" and path.endswith("/chat/completions"):
            prompts.append(body.count(b'"role":'))
            return (200, *completion(b'"stream":true' in body))
        if path.endswith("/models"):
            return 200, b"application/json", models
        if path.endswith("/stats"):
            out = _encode({"prompts": prompts})
            prompts.clear()
            return 200, b"application/json", out
        if path == "/healthz":
            return 200, b"application/json", b'{"status":"ok"}'
        return 404, b"application/json", b'{"error":{"message":"not found"}}'

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                request, *lines = head.split("\r\n")
                method, path, _ = request.split(" ", 2)
                length = 0
                for line in lines:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                status, kind, payload = answer(method, path, body)
                writer.write(
                    b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
                    % (status, b"OK" if status == 200 else b"Not Found", kind, len(payload))
                    + payload
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def run() -> None:
        server = await asyncio.start_server(connection, "127.0.0.1", port, backlog=256)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A server subprocess on a loopback port, with its CPU time read from /proc."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path, profile: Path | None) -> None:
        self.name, self.argv, self.port, self.log, self.profile = name, argv, port, log, profile
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, cwd=HERE.parent)

    async def ready(self, wait: float = 60.0) -> None:
        deadline = time.monotonic() + wait
        async with httpx.AsyncClient(timeout=2) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} server exited: {self.log.read_text()[-2000:].strip()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/healthz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} server not ready after {wait:.0f} s")

    def cpu(self) -> float:
        """Seconds of CPU the server has used: the sum of its threads' ``schedstat`` run time (ns)
        where the kernel has it, else :meth:`cpu_ticks`."""
        assert self.process is not None
        folder = Path(f"/proc/{self.process.pid}/task")
        try:
            return sum(int((task / "schedstat").read_text().split()[0]) for task in folder.iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            return self.cpu_ticks()

    def cpu_ticks(self) -> float:
        """Seconds of CPU (utime + stime, all threads, clock ticks) from ``/proc/<pid>/stat``."""
        assert self.process is not None
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _ensure_reference() -> tuple[Path | None, str]:
    """bench/.venv-ref's python with the reference installed, and its versions (or why not)."""
    python = REF_VENV / "bin" / "python"
    probe = [
        str(python),
        "-c",
        "import agent_framework_ag_ui, agent_framework, agent_framework_openai, uvicorn",
    ]
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
        if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
            print("installing the reference into bench/.venv-ref ...", file=sys.stderr)
            pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            if subprocess.run([*pip, *REF_PACKAGES], check=False).returncode != 0:
                subprocess.run([*pip, *REF_FALLBACK], check=True)
        versions = subprocess.run(
            [
                str(python),
                "-c",
                "import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in "
                "('agent-framework-ag-ui', 'agent-framework-core', 'agent-framework-openai', 'openai', "
                "'ag-ui-protocol', 'fastapi', 'uvicorn')))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (subprocess.CalledProcessError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return python, versions


# -- the AG-UI client ------------------------------------------------------------------------------------
def user(text: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "user", "content": text}


def answers(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assistant messages of a run as an AG-UI client keeps them (by id, text rebuilt)."""
    messages: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            messages[event["messageId"]] = {"id": event["messageId"], "role": "assistant", "content": ""}
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            messages[event["messageId"]]["content"] += event["delta"]
    return list(messages.values())


@dataclass
class Turn:
    seconds: float
    events: list[dict[str, Any]]
    error: str | None = None


_HEADERS = {"Accept": "text/event-stream", "Content-Type": "application/json"}
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_SNAPSHOT = b'"type":"MESSAGES_SNAPSHOT"'


async def run_turn(
    client: httpx.AsyncClient,
    url: str,
    thread: str,
    messages: list[dict[str, Any]],
    *,
    snapshots: bool = False,
) -> Turn:
    """POST one RunAgentInput and read its whole event stream (the body is encoded before timing).

    Every event is received; a ``MESSAGES_SNAPSHOT`` (the reference sends the whole transcript at
    the end of each run) is decoded only when ``snapshots``, to keep the load client light."""
    body = _encode(
        {
            "threadId": thread,
            "runId": uuid.uuid4().hex,
            "messages": messages,
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
    )
    events: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/agents/chat", content=body, headers=_HEADERS) as response:
            if response.status_code != 200:
                text = (await response.aread())[:200].decode(errors="replace")
                return Turn(time.perf_counter() - start, events, f"HTTP {response.status_code}: {text}")
            pending = b""
            async for chunk in response.aiter_raw():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data: "):
                        continue
                    if not snapshots and _SNAPSHOT in line[:48]:
                        events.append({"type": "MESSAGES_SNAPSHOT"})
                        continue
                    events.append(_decode(line[6:]))
    except httpx.HTTPError as exc:
        return Turn(time.perf_counter() - start, events, f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - start
    last = events[-1]["type"] if events else "nothing"
    if last != "RUN_FINISHED":
        detail = events[-1].get("code", "") if events else ""
        return Turn(seconds, events, f"{last} {detail}".strip())
    return Turn(seconds, events)


def _client(connections: int) -> httpx.AsyncClient:
    # idle connections are dropped well before the server's keep-alive timeout (uvicorn's 5 s):
    # a request sent on one the server is closing at that moment fails with a ReadError
    limits = httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=2.0
    )
    return httpx.AsyncClient(timeout=120, limits=limits)


@dataclass
class Thread:
    """One client's conversation as the client holds it."""

    id: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:12]}")
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0

    async def turn(self, client: httpx.AsyncClient, url: str, *, whole: bool = True) -> Turn:
        new = user(f"turn {self.turns + 1} of {self.id}")
        done = await run_turn(client, url, self.id, [*self.messages, new] if whole else [new])
        if done.error is None:
            self.messages.append(new)
            self.messages.extend(answers(done.events))
            self.turns += 1
        return done


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000


# -- the sections ----------------------------------------------------------------------------------------
async def warm_up(server: Server, turns: int) -> None:
    async with _client(4) as client:
        thread = Thread()
        for _ in range(turns):
            done = await thread.turn(client, server.url)
            if done.error:
                raise RuntimeError(f"{server.name} warm-up turn failed: {done.error}")


async def section_load(server: Server, clients: int, turns: int, budget: float) -> dict[str, Any]:
    """``clients`` concurrent clients, ``turns`` turns each (whole history resent), one thread each."""
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + budget
    async with contextlib.AsyncExitStack() as stack:
        # one httpx client (one keep-alive connection) per simulated user, as each browser has its
        # own; a shared pool of 32 connections costs the load client several ms per request
        pool = [await stack.enter_async_context(_client(2)) for _ in range(clients)]

        async def one(client: httpx.AsyncClient) -> None:
            thread = Thread()
            for _ in range(turns):
                if time.monotonic() > deadline:
                    return
                done = await thread.turn(client, server.url)
                latencies.append(done.seconds)
                if done.error:
                    errors.append(done.error)

        cpu, mine, start = server.cpu(), _client_cpu(), time.perf_counter()
        await asyncio.gather(*(one(client) for client in pool))
        wall = time.perf_counter() - start
        await asyncio.sleep(0.3)  # let the server finish what follows the last response
        cpu, mine = server.cpu() - cpu, _client_cpu() - mine
    count = len(latencies)
    return {
        "requests": count,
        "rps": count / wall,
        "p50": _pct(latencies, 0.5),
        "p99": _pct(latencies, 0.99),
        "cpu": cpu * 1000 / count,
        "client_cpu": mine * 1000 / count,
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
    }


async def _timed_turns(
    client: httpx.AsyncClient,
    server: Server,
    threads: list[Thread],
    *,
    rounds: int,
    samples: int,
    budget: float,
    whole: bool,
) -> dict[str, Any]:
    """Up to ``rounds`` turns on each of ``threads`` (``samples`` in all at most; past ``budget``
    seconds, stopped after 3): median latency (ms), server CPU per turn (ms), count and errors."""
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + budget
    cpu = server.cpu()
    for _ in range(rounds):
        for thread in threads:
            if len(latencies) >= samples or (len(latencies) >= 3 and time.monotonic() > deadline):
                break
            done = await thread.turn(client, server.url, whole=whole)
            latencies.append(done.seconds)
            if done.error:
                errors.append(done.error)
    await asyncio.sleep(0.3)  # let the server finish what follows the last response
    cpu = server.cpu() - cpu
    return {
        "median": statistics.median(latencies) * 1000,
        "cpu": cpu * 1000 / len(latencies),
        "n": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
    }


async def section_history(
    server: Server, sizes: list[int], samples: int, budget: float, db: Path | None
) -> dict[int, dict[str, Any]]:
    """Per size N: threads of N prior turns (built with new-message requests), then ``samples``
    turns sending only the new message, then ``samples`` resending the whole history."""
    out: dict[int, dict[str, Any]] = {}
    async with _client(4) as client:
        for size in sizes:
            deadline = time.monotonic() + budget
            rounds = max(1, min(samples, size // 20))  # turns per thread and case: drift <= ~5%
            threads = [Thread() for _ in range(math.ceil(samples / rounds))]
            build_start = time.perf_counter()
            for thread in threads:
                while thread.turns < size and time.monotonic() < deadline:
                    done = await thread.turn(client, server.url, whole=False)
                    if done.error:
                        raise RuntimeError(f"{server.name}: building turn failed: {done.error}")
            build = time.perf_counter() - build_start
            row: dict[str, Any] = {
                "prior": min(t.turns for t in threads),
                "build_s": build,
                "build_turns": sum(t.turns for t in threads),
            }
            for case, whole in (("new", False), ("whole", True)):
                row[case] = await _timed_turns(
                    client, server, threads, rounds=rounds, samples=samples, budget=budget / 2, whole=whole
                )
            # what the server holds afterwards against what the client holds (no turn lost or doubled)
            held = expected = 0
            for thread in threads:
                stored = await (
                    _ours_stored(db, thread.id)
                    if db is not None
                    else _reference_stored(client, server.url, thread.id)
                )
                held += len(stored) if stored is not None else 0
                expected += len(thread.messages)
            row["stored"], row["expected"] = held, expected
            out[size] = row
    return out


async def _ours_stored(db: Path, thread: str) -> list[dict[str, Any]]:
    from agentkeep.message_stores.base import close_store
    from agentkeep.message_stores.sqlite import SQLiteMessageStore

    store = SQLiteMessageStore(db)
    try:
        view = await store.read(f"local::{thread}", raw=True)
    finally:
        await close_store(store)
    return [{"id": m.message_id, "role": m.role} for m in view.messages]


async def _reference_stored(client: httpx.AsyncClient, url: str, thread: str) -> list[dict[str, Any]] | None:
    """The thread as the reference's endpoint replays it (a request with no messages hydrates
    the stored snapshot as a ``MESSAGES_SNAPSHOT`` event)."""
    done = await run_turn(client, url, thread, [], snapshots=True)
    for event in done.events:
        if event["type"] == "MESSAGES_SNAPSHOT":
            return [{"id": m.get("id"), "role": m.get("role")} for m in event["messages"]]
    return None


async def section_race(server: Server, prior: int, db: Path | None, *, slow: bool) -> dict[str, Any]:
    """``RACE`` concurrent turns on one thread: each sends the prior history and its own message
    (``slow``: a message the fake model takes ``SLOW_SECONDS`` over, so the runs overlap)."""
    async with _client(RACE + 2) as client:
        thread = Thread()
        for _ in range(prior):
            done = await thread.turn(client, server.url)
            if done.error:
                raise RuntimeError(f"{server.name}: prior turn failed: {done.error}")
        news = [user(f"{SLOW if slow else ''}racing turn {i}") for i in range(RACE)]
        start = time.perf_counter()
        results = await asyncio.gather(
            *(run_turn(client, server.url, thread.id, [*thread.messages, new]) for new in news)
        )
        wall = time.perf_counter() - start
        if db is not None:
            stored = await _ours_stored(db, thread.id)
        else:
            stored = await _reference_stored(client, server.url, thread.id)
    out: dict[str, Any] = {
        "finished": sum(r.error is None for r in results),
        "errors": sorted({r.error for r in results if r.error}),
        "wall_ms": wall * 1000,
        "observed": stored is not None,
    }
    if stored is not None:
        ids = [m["id"] for m in stored]
        position = {message_id: index for index, message_id in enumerate(ids)}
        kept = [new["id"] for new in news if new["id"] in position]
        answered = 0
        for message_id in kept:
            after = position[message_id] + 1
            answered += after < len(stored) and stored[after]["role"] == "assistant"
        out |= {
            "stored": len(kept),
            "answered": answered,
            "prior_kept": sum(m["id"] in position for m in thread.messages),
            "prior_total": len(thread.messages),
            "total": len(stored),
        }
    return out


# -- section 4: the model behind HTTP ---------------------------------------------------------------------
async def _prompt_sizes(model_url: str) -> list[int]:
    """The message counts of the prompts the fake model server got since the last call."""
    async with httpx.AsyncClient(timeout=10) as client:
        reply = await client.get(f"{model_url}/stats")
        return [int(n) for n in reply.json()["prompts"]]


async def section_remote(
    server: Server, model_url: str, size: int, samples: int, budget: float, *, seed_whole: bool
) -> dict[str, Any]:
    """Threads of ``size`` prior turns, then ``samples`` turns sending only the new message, the
    model behind HTTP. Ours builds its threads turn by turn; the reference gets each thread's
    history in one whole-history request (built turn by turn, its per-turn cost growing with the
    history, 1,000 turns would take minutes), which it keeps as the thread's snapshot."""
    rounds = max(1, min(samples, size // 20))  # turns per thread: drift <= ~5%
    threads = [Thread() for _ in range(math.ceil(samples / rounds))]
    deadline = time.monotonic() + budget
    async with _client(2) as client:
        build_start = time.perf_counter()
        for thread in threads:
            if seed_whole:
                for k in range(size - 1):
                    thread.messages.append(user(f"turn {k + 1} of {thread.id}"))
                    thread.messages.append({"id": uuid.uuid4().hex, "role": "assistant", "content": "ok"})
                thread.turns = size - 1
            while thread.turns < size and time.monotonic() < deadline:
                done = await thread.turn(client, server.url, whole=seed_whole)
                if done.error:
                    raise RuntimeError(f"{server.name}: building turn failed: {done.error}")
        build = time.perf_counter() - build_start
        prior = min(t.turns for t in threads)
        await _prompt_sizes(model_url)
        timed = await _timed_turns(
            client, server, threads, rounds=rounds, samples=samples, budget=budget / 2, whole=False
        )
        prompts = await _prompt_sizes(model_url)
    return {
        "prior": prior,
        "build_s": build,
        **timed,
        "prompt": statistics.median(prompts) if prompts else 0,
        "calls": len(prompts),
    }


def encode_costs(sizes: list[int], budget: float = 5.0) -> dict[int, dict[str, float]]:
    """In this process, per N: what our chat client spends encoding the request body of a turn
    after N prior turns (2N + 1 messages and the instructions, all but the new message encoded
    before, as in a warm host), and what the SDK's ``create`` spends on the same body before
    sending it (its type-directed transform of the keyword arguments, then its JSON encoding)."""
    from openai._utils import async_maybe_transform  # pyright: ignore[reportPrivateImportUsage]
    from openai._utils._json import openapi_dumps
    from openai.types.chat import completion_create_params

    from agentkeep import Message
    from agentkeep.clients.openai import OpenAIChatClient

    out: dict[int, dict[str, float]] = {}
    client = OpenAIChatClient(FAKE_MODEL, base_url="http://127.0.0.1:9/v1")
    options: Any = {"instructions": "You are a helpful assistant. Answer briefly."}
    for size in sizes:
        history: list[Message] = []
        for k in range(size):
            history += [Message("user", [f"turn {k + 1} of bench-thread"]), Message("assistant", ["ok"])]
        client._encoded(history, options, stream=True)  # pyright: ignore[reportPrivateUsage]
        calls, start = 0, time.perf_counter()
        while calls < 2000 and (calls < 20 or time.perf_counter() - start < budget / 2):
            turn = [*history, Message("user", [f"turn {size + calls} of bench-thread"])]
            client._encoded(turn, options, stream=True)  # pyright: ignore[reportPrivateUsage]
            calls += 1
        ours = (time.perf_counter() - start) / calls
        request, _ = client._request([*history, Message("user", ["new"])], options)  # pyright: ignore[reportPrivateUsage]
        body = {**request, "stream": True, "stream_options": {"include_usage": True}}

        async def sdk_encode(body: dict[str, Any] = body) -> tuple[int, float]:
            n, begin = 0, time.perf_counter()
            while n < 200 and (n < 3 or time.perf_counter() - begin < budget / 2):
                params = completion_create_params.CompletionCreateParamsStreaming
                openapi_dumps(await async_maybe_transform(body, params))
                n += 1
            return n, (time.perf_counter() - begin) / n

        _, sdk = asyncio.run(sdk_encode())
        out[size] = {"ours_us": ours * 1e6, "sdk_ms": sdk * 1000, "messages": 2 * size + 2}
    return out


async def measure_remote(servers: list[Server], model: Server, plan: Plan) -> tuple[dict[str, Any], str]:
    """Section 4 on each AG-UI server (the fake model server shared), the servers taking turns
    size by size (the order flipped every other size). A reference failure drops the reference."""
    results: dict[str, Any] = {server.name: {} for server in servers}
    model_url = f"{model.url}/v1"
    active = list(servers)
    failure = ""
    await model.ready()
    for server in servers:
        await server.ready()
        await warm_up(server, 10)
    for index, size in enumerate(plan.remote_sizes):
        for server in active if index % 2 == 0 else active[::-1]:
            print(
                f"  [{server.name}] model over HTTP: one turn after {size:,} prior turns ...", file=sys.stderr
            )
            try:
                results[server.name][size] = await section_remote(
                    server, model_url, size, plan.samples, plan.budget, seed_whole=server.name != "ours"
                )
            except Exception as exc:
                if server.name == "ours":
                    raise
                failure = f"{server.name} failed at {size} prior turns: {type(exc).__name__}: {exc}"
                print(failure, file=sys.stderr)
                active.remove(server)
    for server in servers:
        if server not in active:
            results.pop(server.name, None)
    return results, failure


def report_remote(
    plan: Plan, results: dict[str, Any], encode: dict[int, dict[str, float]], note: str
) -> None:
    ours, ref = results["ours"], results.get("reference") or {}
    print(f"\n4. The model behind HTTP (reference: {note})")
    print(
        "   `agentkeep serve --base-url URL --api-model NAME --history-limit 1000000` (whole history to the"
        " model) against agent-framework-ag-ui with its OpenAIChatCompletionClient, both on a fake"
        " OpenAI-compatible server in its own process (instant 'ok', streamed); one turn after N prior"
        f" turns, the client sending the new message only (median of up to {plan.samples} turns;"
        " CPU = the AG-UI server's CPU ms per turn)"
    )
    header = (
        f"{'N':>6} | {'prompt msgs':>11} | {'ours ms':>8} | {'ours CPU':>8} | {'ref ms':>8} | "
        f"{'ref CPU':>8} | {'ours/ref CPU':>12} | {'encode us':>9} | {'encode/CPU':>10} | "
        f"{'SDK encode ms':>13} | {'n ours/ref':>10}"
    )
    print(header)
    print("-" * len(header))
    for size in plan.remote_sizes:
        o, r, e = ours[size], ref.get(size), encode.get(size)
        prompt = f"{o['prompt']:.0f}/{r['prompt']:.0f}" if r else f"{o['prompt']:.0f}/-"
        r_ms = f"{r['median']:8.2f}" if r else f"{'-':>8}"
        r_cpu = f"{r['cpu']:8.2f}" if r else f"{'-':>8}"
        enc = f"{e['ours_us']:9.1f}" if e else f"{'-':>9}"
        share = f"{e['ours_us'] / 10 / o['cpu']:9.1f}%" if e else f"{'-':>10}"
        sdk = f"{e['sdk_ms']:13.2f}" if e else f"{'-':>13}"
        n = f"{o['n']}/{r['n'] if r else '-'}"
        print(
            f"{size:>6,} | {prompt:>11} | {o['median']:8.2f} | {o['cpu']:8.2f} | {r_ms} | {r_cpu} | "
            f"{_ratio(o['cpu'], r['cpu'] if r else None):>12} | {enc} | {share} | {sdk} | {n:>10}"
        )
        for name, x in (("ours", o), ("reference", r)):
            if x and x["errors"]:
                print(f"{'':>6}   {name}: {x['errors']} errors, first: {x['first_error']}")
            if x and x["prior"] < size:
                print(f"{'':>6}   {name}: only {x['prior']} prior turns reached in the time budget")
    print(
        "  prompt msgs: messages per model request, as the fake server counted them; encode us: our client"
        " encoding that request's body (all but the new message encoded before), in the bench process;"
        " SDK encode: the openai SDK's transform + JSON of the same body, as its create() does"
    )
    sizes = [n for n in plan.remote_sizes if n in ours]
    lo, hi = min(sizes), max(sizes)
    if 40 in ours:
        cpu40 = ours[40]["cpu"]
        print(
            f"  target: ours CPU per turn at 40 prior turns <= 3 ms: {cpu40:.2f} ms ({_verdict(cpu40 <= 3)})"
        )
    if hi != lo and ours[hi]["prompt"] > ours[lo]["prompt"]:
        growth = (ours[hi]["cpu"] - ours[lo]["cpu"]) * 1000 / (ours[hi]["prompt"] - ours[lo]["prompt"])
        print(
            f"  target: growth per prior message, {lo:,} -> {hi:,} prior turns, <= 2 us: {growth:.2f} us "
            f"({_verdict(growth <= 2)})"
        )
    for size in sizes:
        if size in ref:
            ratio = ours[size]["cpu"] / ref[size]["cpu"]
            print(
                f"  target: ours/reference CPU per turn at {size:,} prior turns <= 0.2: {ratio:.3f} "
                f"({_verdict(ratio <= 0.2)})"
            )


# -- running and printing ---------------------------------------------------------------------------------
@dataclass
class Plan:
    levels: list[int]
    load_turns: int
    sizes: list[int]
    samples: int
    race_prior: int
    budget: float
    sections: set[str]
    remote_sizes: list[int] = field(default_factory=lambda: [10, 40, 100, 1000])


async def measure_all(servers: list[Server], plan: Plan, db: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """Every phase on every server, the servers taking turns phase by phase (the order flipped
    every other phase), so drift on a shared machine falls on both alike. A reference failure
    drops the reference and keeps measuring ours (its message is returned)."""
    results: dict[str, dict[str, Any]] = {server.name: {} for server in servers}
    active = list(servers)
    failure = ""
    baseline: dict[str, tuple[float, float]] = {}

    async def step(server: Server, label: str, run: Callable[[], Awaitable[None]]) -> None:
        nonlocal failure
        if server not in active:
            return
        print(f"  [{server.name}] {label} ...", file=sys.stderr)
        try:
            await run()
        except Exception as exc:
            if server.name == "ours":
                raise
            failure = f"{server.name} failed during {label}: {type(exc).__name__}: {exc}"
            print(failure, file=sys.stderr)
            active.remove(server)

    async def start(server: Server) -> None:
        await server.ready()
        await warm_up(server, 20)
        baseline[server.name] = (server.cpu(), server.cpu_ticks())

    for server in servers:
        await step(server, "start and warm up", lambda server=server: start(server))

    phases: list[tuple[str, Callable[[Server], Awaitable[None]], bool]] = []  # label, run, floor too
    if "1" in plan.sections:
        for level in plan.levels:

            async def load(server: Server, level: int = level) -> None:
                rows = results[server.name].setdefault("load", {})
                rows[level] = await section_load(server, level, plan.load_turns, plan.budget)

            phases.append((f"{level} clients x {plan.load_turns} turns", load, True))
    if "2" in plan.sections:
        for size in plan.sizes:

            async def history(server: Server, size: int = size) -> None:
                rows = results[server.name].setdefault("history", {})
                ours_db = db if server.name == "ours" else None
                rows |= await section_history(server, [size], plan.samples, plan.budget, ours_db)

            phases.append((f"one turn after {size:,} prior turns", history, False))
    if "3" in plan.sections:
        for key, slow in (("race", False), ("race_slow", True)):

            async def race(server: Server, key: str = key, slow: bool = slow) -> None:
                ours_db = db if server.name == "ours" else None
                results[server.name][key] = await section_race(server, plan.race_prior, ours_db, slow=slow)

            phases.append(
                (f"{RACE} concurrent turns on one thread{' (slow model)' if slow else ''}", race, False)
            )

    for index, (label, run, floor_too) in enumerate(phases):
        order = [s for s in active if floor_too or s.name != "floor"]
        for server in order if index % 2 == 0 else order[::-1]:
            await step(server, label, lambda server=server, run=run: run(server))
    for server in active:
        cpu, ticks = baseline[server.name]
        results[server.name]["cpu_check"] = (server.cpu() - cpu, server.cpu_ticks() - ticks)
    for server in servers:
        if server not in active:
            results.pop(server.name, None)
    return results, failure


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "NOT met")


def report(plan: Plan, results: dict[str, dict[str, Any]], ref_note: str) -> None:
    ours, ref, floor = results["ours"], results.get("reference") or {}, results.get("floor") or {}
    print(f"\nAG-UI host bench (reference: {ref_note})")
    print("both servers: own subprocess, uvicorn loop=asyncio http=h11, instant fake model ('ok')")
    summary: list[str] = []

    if "load" in ours:
        print(
            f"\n1. Concurrent clients, {plan.load_turns} turns each, each client on its own thread "
            "(whole history resent every turn)"
        )
        header = (
            f"{'clients':>7} | {'impl':>9} | {'requests':>8} | {'req/s':>7} | {'p50 ms':>7} | "
            f"{'p99 ms':>7} | {'server CPU ms/req':>17} | {'client CPU ms/req':>17} | {'errors':>6}"
        )
        print(header)
        print("-" * len(header))
        for level in plan.levels:
            impls = (("ours", ours["load"]), ("reference", ref.get("load")), ("floor", floor.get("load")))
            for name, rows in impls:
                if not rows:
                    continue
                row = rows[level]
                print(
                    f"{level:>7} | {name:>9} | {row['requests']:>8} | {row['rps']:7.1f} | "
                    f"{row['p50']:7.2f} | {row['p99']:7.2f} | {row['cpu']:17.2f} | "
                    f"{row['client_cpu']:17.2f} | {row['errors']:>6}"
                )
                if row["errors"]:
                    print(f"{'':>7}   first error: {row['first_error']}")
        if floor.get("load"):
            print(
                "  (floor: a bare FastAPI endpoint in our environment, same uvicorn settings, that validates"
                " the RunAgentInput and streams the same 5 AG-UI events: no agent, no storage)"
            )
        if ref.get("load"):
            for level in plan.levels:
                o, r = ours["load"][level], ref["load"][level]
                print(
                    f"  {level:>2} clients: server CPU/req ours/ref {_ratio(o['cpu'], r['cpu'])}, "
                    f"req/s ours/ref {_ratio(o['rps'], r['rps'])}, p50 ours/ref {_ratio(o['p50'], r['p50'])}"
                )
            total = {
                name: sum(rows[lv]["cpu"] * rows[lv]["requests"] for lv in plan.levels)
                / sum(rows[lv]["requests"] for lv in plan.levels)
                for name, rows in (("ours", ours["load"]), ("ref", ref["load"]))
            }
            cpu_ratio = total["ours"] / total["ref"]
            summary.append(
                f"server CPU per request, section 1 overall, ours/reference: {total['ours']:.2f} / "
                f"{total['ref']:.2f} ms = {cpu_ratio:.2f} (target <= 0.25: {_verdict(cpu_ratio <= 0.25)})"
            )
            if 1 in plan.levels:
                mine, theirs = ours["load"][1]["cpu"], ref["load"][1]["cpu"]
                summary.append(
                    f"server CPU per request, one client alone, ours/reference: {mine:.2f} / {theirs:.2f} ms"
                    f" = {mine / theirs:.2f} (target <= 0.2: {_verdict(mine / theirs <= 0.2)})"
                )
            top = max(plan.levels)
            rps = ours["load"][top]["rps"] / ref["load"][top]["rps"]
            summary.append(
                f"requests/s at {top} clients ours/reference: {ours['load'][top]['rps']:.1f} / "
                f"{ref['load'][top]['rps']:.1f} = {rps:.2f}x (target >= 3x: {_verdict(rps >= 3)})"
            )

    if "history" in ours:
        print(
            f"\n2. One turn after N prior turns on one thread (median of up to {plan.samples} further turns;"
            " CPU = server CPU ms per request)"
        )
        header = (
            f"{'N':>6} | {'client sends':>12} | {'ours ms':>8} | {'ours CPU':>8} | {'ref ms':>8} | "
            f"{'ref CPU':>8} | {'ours/ref ms':>11} | {'ours/ref CPU':>12} | {'n ours/ref':>10}"
        )
        print(header)
        print("-" * len(header))
        ref_history = ref.get("history") or {}
        for size in plan.sizes:
            o_row, r_row = ours["history"][size], ref_history.get(size)
            for case, label in (("new", "new message"), ("whole", "whole hist.")):
                o = o_row[case]
                r = r_row[case] if r_row else None
                r_ms = f"{r['median']:8.2f}" if r else f"{'-':>8}"
                r_cpu = f"{r['cpu']:8.2f}" if r else f"{'-':>8}"
                n = f"{o['n']}/{r['n'] if r else '-'}"
                print(
                    f"{size:>6,} | {label:>12} | {o['median']:8.2f} | {o['cpu']:8.2f} | {r_ms} | {r_cpu} | "
                    f"{_ratio(o['median'], r['median'] if r else None):>11} | "
                    f"{_ratio(o['cpu'], r['cpu'] if r else None):>12} | {n:>10}"
                )
                for name, x in (("ours", o), ("reference", r)):
                    if x and x["errors"]:
                        print(f"{'':>6}   {name}: {x['errors']} errors, first: {x['first_error']}")
        for name, rows in (("ours", ours["history"]), ("reference", ref_history)):
            for size in plan.sizes:
                if size in rows:
                    row = rows[size]
                    note = (
                        "" if row["prior"] >= size else f" (only {row['prior']} reached in the time budget)"
                    )
                    print(
                        f"  {name} built {row['build_turns']:,} prior turns for N={size:,} in "
                        f"{row['build_s']:.1f} s{note}; stored afterwards {row['stored']:,} messages, "
                        f"the client holds {row['expected']:,}"
                    )
        lo, hi = min(plan.sizes), max(plan.sizes)
        if lo != hi:
            at_hi, at_lo = ours["history"][hi]["new"]["median"], ours["history"][lo]["new"]["median"]
            growth = at_hi / at_lo
            summary.append(
                f"ours turn after {hi:,} prior turns / after {lo:,} (new message): {at_hi:.2f} / "
                f"{at_lo:.2f} ms = {growth:.2f}x (target <= 1.5x: {_verdict(growth <= 1.5)})"
            )
        if hi in ref_history:
            o, r = ours["history"][hi]["whole"], ref_history[hi]["whole"]
            lat, cpu = o["median"] / r["median"], o["cpu"] / r["cpu"]
            summary.append(
                f"whole-history resend at {hi:,} prior turns, ours/reference: latency {o['median']:.2f} / "
                f"{r['median']:.2f} ms = {lat:.2f} (target <= 0.2: {_verdict(lat <= 0.2)}); server CPU "
                f"{o['cpu']:.2f} / {r['cpu']:.2f} ms = {cpu:.2f}"
            )

    if "race" in ours:
        print(
            f"\n3. {RACE} concurrent turns on one thread ({plan.race_prior} prior turns; each request sends"
        )
        print("   that history + its own new user message)")
        for key, title in (
            ("race", "instant model"),
            (
                "race_slow",
                f"model takes {SLOW_SECONDS * 1000:.0f} ms (user text '{SLOW}...'), so runs overlap",
            ),
        ):
            print(f"  {title}:")
            for name, race in (("ours", ours[key]), ("reference", ref.get(key))):
                if not race:
                    continue
                line = f"    {name:>9}: {race['finished']}/{RACE} runs finished in {race['wall_ms']:.0f} ms"
                if race["errors"]:
                    line += f"; errors: {race['errors']}"
                print(line)
                if not race["observed"]:
                    print(f"    {'':>9}  stored afterwards: cannot be observed")
                    continue
                where = "SQLite raw log, local::<threadId>" if name == "ours" else "endpoint hydration replay"
                print(
                    f"    {'':>9}  stored ({where}): {race['stored']}/{RACE} new user messages, "
                    f"{race['answered']} followed by their answer; prior kept "
                    f"{race['prior_kept']}/{race['prior_total']}; {race['total']} messages in all"
                )
            for name, race in (("ours", ours[key]), ("reference", ref.get(key))):
                if race and race["observed"]:
                    ok = race["stored"] == RACE and race["answered"] == RACE
                    verdict = f" (target {RACE} of {RACE}: {_verdict(ok)})" if name == "ours" else ""
                    summary.append(
                        f"{name}, turns stored of {RACE} concurrent ({title.split(' (')[0].split(',')[0]}): "
                        f"{race['stored']} of {RACE}{verdict}"
                    )

    checks = [(name, r["cpu_check"]) for name, r in results.items() if "cpu_check" in r]
    if checks:
        print("\nCPU source: the sum of the server threads' /proc/<pid>/task/*/schedstat run time (ns);")
        for name, (precise, ticks) in checks:
            print(
                f"  {name}: whole run {precise:.2f} s by schedstat, {ticks:.2f} s by /proc/<pid>/stat "
                "utime+stime (10 ms ticks)"
            )

    if summary:
        print("\nTargets")
        for line in summary:
            print(f"  {line}")


def _print_profile(name: str, path: Path, limit: int = 25) -> None:
    if not path.exists():
        print(f"\n(no profile was written for {name})")
        return
    package = "agentkeep/" if name == "ours" else "agent_framework"
    print(f"\nProfile of the {name} server's event-loop thread (cProfile), top {limit} by own time")
    pstats.Stats(str(path), stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(limit)
    print(f"Profile of the {name} server: {package} functions, top {limit} by cumulative time")
    pstats.Stats(str(path), stream=sys.stdout).sort_stats("cumulative").print_stats(package, limit)


def _server_argv(
    name: str, port: int, *, db: Path, ref_python: Path | None, memory_stores: bool = False
) -> list[str]:
    """The command line of the ``name`` server (ours, floor or reference) on ``port``."""
    if name == "reference":
        assert ref_python is not None
        return [str(ref_python), "-c", _reference_script(), "--port", str(port)]
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", name, "--port", str(port)]
    if name != "ours":
        return argv
    return [*argv, "--db", str(db), *(["--memory-stores"] if memory_stores else [])]


def run_instant(
    plan: Plan,
    folder: Path,
    ref_python: Path | None,
    ref_note: str,
    *,
    profile: bool,
    split_db: bool,
    memory_stores: bool,
) -> None:
    """Sections 1-3: the servers with the instant in-process fake model."""
    db = folder / "host.db"
    profiles = {"ours": folder / "ours.prof", "reference": folder / "reference.prof"}
    port = _free_port()
    ours_argv = _server_argv("ours", port, db=db, ref_python=ref_python, memory_stores=memory_stores)
    if profile:
        ours_argv += ["--profile-out", str(profiles["ours"])]
    if split_db:
        ours_argv += ["--session-db", str(folder / "sessions.db")]
    servers = [Server("ours", ours_argv, port, folder / "ours.log", profiles["ours"])]
    if "1" in plan.sections:
        port = _free_port()
        floor_argv = _server_argv("floor", port, db=db, ref_python=ref_python)
        servers.append(Server("floor", floor_argv, port, folder / "floor.log", None))
    if ref_python is not None:
        port = _free_port()
        ref_argv = _server_argv("reference", port, db=db, ref_python=ref_python)
        if profile:
            ref_argv += ["--profile", str(profiles["reference"])]
        servers.append(Server("reference", ref_argv, port, folder / "reference.log", profiles["reference"]))
    try:
        for server in servers:
            server.start()
        results, failure = asyncio.run(measure_all(servers, plan, db))
    finally:
        for server in servers:
            server.stop()
    if failure:
        ref_note = f"{ref_note}; {failure}"
    report(plan, results, ref_note)
    if profile:
        print("\n(--profile: every figure above is inflated by cProfile)")
        for server in servers:
            if server.profile is not None:
                _print_profile(server.name, server.profile)
    for server in servers:
        text = server.log.read_text(errors="replace").strip()
        if text:
            print(f"\n{server.name} server log (last lines):")
            print(textwrap.indent("\n".join(text.splitlines()[-10:]), "  "))


# -- section 5: instructions per request ------------------------------------------------------------------
def _callgrind_total(path: Path) -> int:
    """The instruction count callgrind wrote to ``path`` (its ``totals:`` line; the ``summary:``
    line of its header is left at 0 when counting starts switched off)."""
    totals = [line for line in path.read_text().splitlines() if line.startswith("totals:")]
    if not totals:
        raise RuntimeError(f"no totals in {path}")
    return int(totals[-1].split()[1])


async def count_instructions(server: Server, plan: Plan) -> tuple[int, int]:
    """Instructions the ``server`` (started under callgrind with instrumentation off) runs for
    ``plan.load_turns`` turns of one client, whole history resent, as in section 1 (after a
    warm-up, counted only while the load runs), and the requests made."""
    assert server.process is not None
    assert server.profile is not None
    await server.ready(wait=600)
    await warm_up(server, 10)
    pid = str(server.process.pid)
    await _control_callgrind("--instr=on", pid)
    row = await section_load(server, 1, plan.load_turns, plan.budget * 10)
    await _control_callgrind("--instr=off", pid)
    server.stop()  # callgrind writes its counts as the process ends
    if row["errors"]:
        raise RuntimeError(f"{server.name}: {row['first_error']}")
    return _callgrind_total(server.profile), row["requests"]


async def _control_callgrind(*args: str) -> None:
    process = await asyncio.create_subprocess_exec(
        "callgrind_control", *args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, errors = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: {errors.decode().strip()}")


def run_instructions(plan: Plan, folder: Path, ref_python: Path | None, *, memory_stores: bool) -> None:
    """Section 5: each server alone under valgrind's callgrind, one client (see the module docs)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("\n5. Instructions per request: skipped (valgrind is not installed)")
        return
    names = ["ours", "floor"] + (["reference"] if ref_python is not None else [])
    counts: dict[str, float] = {}
    for name in names:
        port, out = _free_port(), folder / f"{name}.callgrind"
        argv = _server_argv(
            name, port, db=folder / "instructions.db", ref_python=ref_python, memory_stores=memory_stores
        )
        tool = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        server = Server(name, [*tool, *argv], port, folder / f"{name}.callgrind.log", out)
        print(f"  [{name}] under callgrind, 1 client x {plan.load_turns} turns ...", file=sys.stderr)
        server.start()
        try:
            total, requests = asyncio.run(count_instructions(server, plan))
        finally:
            server.stop()
        counts[name] = total / requests
    turns = plan.load_turns
    print(f"\n5. Instructions per request (valgrind callgrind, user space), 1 client x {turns} turns")
    print("      impl | M instructions/request | / reference")
    print("-" * 50)
    for name in names:
        ratio = _ratio(counts[name], counts.get("reference"))
        print(f"{name:>10} | {counts[name] / 1e6:22.2f} | {ratio:>11}")


def run_remote(plan: Plan, folder: Path, ref_python: Path | None, ref_note: str) -> None:
    """Section 4: the AG-UI servers with the model behind HTTP (a fake OpenAI-compatible server)."""
    this = str(Path(__file__).resolve())
    port = _free_port()
    model = Server(
        "fake model",
        [sys.executable, this, "--serve", "fake-model", "--port", str(port)],
        port,
        folder / "model.log",
        None,
    )
    port = _free_port()
    ours_argv = [
        sys.executable,
        "-m",
        "agentkeep",
        "serve",
        "--store",
        f"sqlite://{folder / 'remote.db'}",
        "--base-url",
        f"{model.url}/v1",
        "--api-model",
        FAKE_MODEL,
        "--port",
        str(port),
        "--history-limit",
        "1000000",
    ]
    servers = [Server("ours", ours_argv, port, folder / "ours-remote.log", None)]
    if ref_python is not None:
        port = _free_port()
        ref_argv = [
            str(ref_python),
            "-c",
            _reference_script(),
            "--port",
            str(port),
            "--model-url",
            f"{model.url}/v1",
        ]
        servers.append(Server("reference", ref_argv, port, folder / "reference-remote.log", None))
    try:
        for server in [model, *servers]:
            server.start()
        results, failure = asyncio.run(measure_remote(servers, model, plan))
    finally:
        for server in [*servers, model]:
            server.stop()
    print("  [bench] timing the request encoding in this process ...", file=sys.stderr)
    encode = encode_costs(plan.remote_sizes)
    report_remote(plan, results, encode, f"{ref_note}; {failure}" if failure else ref_note)
    for server in [*servers, model]:
        text = server.log.read_text(errors="replace").strip()
        if text:
            print(f"\n{server.name} server log, model over HTTP (last lines):")
            print(textwrap.indent("\n".join(text.splitlines()[-10:]), "  "))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns and samples")
    parser.add_argument("--no-reference", action="store_true", help="measure ours only")
    parser.add_argument("--profile", action="store_true", help="cProfile both servers (figures inflated)")
    parser.add_argument("--sections", default="1,2,3,4", help="comma-separated sections to run")
    parser.add_argument("--sizes", help="prior-turn counts for section 2 (default 10,100,1000)")
    parser.add_argument("--levels", default="1,8,32", help="concurrent clients for section 1")
    parser.add_argument(
        "--remote-sizes", default="10,40,100,1000", help="prior-turn counts for section 4 (model over HTTP)"
    )
    parser.add_argument("--samples", type=int, help="measured turns per case in section 2 (default 20)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds at most per phase")
    parser.add_argument(
        "--split-db",
        action="store_true",
        help="diagnostic: our message store and session store in two SQLite files instead of one",
    )
    parser.add_argument(
        "--memory-stores",
        action="store_true",
        help="diagnostic, sections 1 and 5 only: our history and sessions in memory instead of SQLite",
    )
    parser.add_argument("--serve", choices=["ours", "floor", "fake-model"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--session-db", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve == "floor":
        serve_floor(args.port)
        return
    if args.serve == "fake-model":
        serve_fake_model(args.port)
        return
    if args.serve:
        serve_ours(
            args.port, args.db, args.session_db or args.db, args.profile_out, memory=args.memory_stores
        )
        return

    plan = Plan(
        levels=[int(level) for level in args.levels.split(",")],
        load_turns=10 if args.quick else 50,
        sizes=[int(s) for s in args.sizes.split(",")] if args.sizes else [10, 100, 1000],
        samples=args.samples or (5 if args.quick else 20),
        race_prior=3,
        budget=args.budget,
        sections=set(args.sections.split(",")),
        remote_sizes=[int(s) for s in args.remote_sizes.split(",")],
    )
    if args.memory_stores and not plan.sections <= {"1", "5"}:
        parser.error("--memory-stores is for sections 1 and 5 (the others read our SQLite file)")
    started = time.perf_counter()
    ref_python: Path | None = None
    ref_note = "not run (--no-reference)"
    if not args.no_reference:
        ref_python, ref_note = _ensure_reference()
        if ref_python is None:
            ref_note = f"unavailable: {ref_note}"
            print(f"reference {ref_note}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-host-") as tmp:
        folder = Path(tmp)
        if plan.sections & {"1", "2", "3"}:
            run_instant(
                plan,
                folder,
                ref_python,
                ref_note,
                profile=args.profile,
                split_db=args.split_db,
                memory_stores=args.memory_stores,
            )
        if "4" in plan.sections:
            run_remote(plan, folder, ref_python, ref_note)
        if "5" in plan.sections:
            run_instructions(plan, folder, ref_python, memory_stores=args.memory_stores)
    print(
        f"\n(took {time.perf_counter() - started:.0f} s; pid {os.getpid()}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
