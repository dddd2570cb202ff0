"""Bounded connections (``agentkeep.host._server``): a real host under the bounded uvicorn server on a
loopback port, spoken to over raw sockets with small configured timeouts. Idle, trickling and
stalled connections are closed; a kept-alive connection is closed once idle; beyond the cap a new
connection pushes out the one idle longest, or is answered 503 while every open one is busy (and
they keep working); a streamed turn that outlasts every timeout is not cut; and ``agentkeep
inspect`` takes the options."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest
import uvicorn

from agentkeep import Agent, BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate, Message
from agentkeep.contents import TextContent
from agentkeep.host import AgentHost, ConnectionLimits
from agentkeep.host._limits import MAX_CONNECTIONS_CEILING, default_max_connections
from agentkeep.host._server import LimitedConfig
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.host.processes import running

SHORT = 0.3  # seconds: every timeout of a test that waits for one
HANG = 10.0  # seconds: the hang guard of every wait


class SlowChatClient(BaseChatClient[ChatOptions]):
    """Streams ``chunks`` words, ``pause`` seconds apart (a turn longer than the timeouts)."""

    def __init__(self, chunks: int, pause: float) -> None:
        self.chunks, self.pause = chunks, pause

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        raise NotImplementedError("the host streams")

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        message_id = uuid.uuid4().hex
        for index in range(self.chunks):
            await asyncio.sleep(self.pause)
            yield ChatResponseUpdate(
                [TextContent(f"w{index} ")],
                role="assistant",
                message_id=message_id,
                finish_reason="stop" if index == self.chunks - 1 else None,
            )


class GatedChatClient(BaseChatClient[ChatOptions]):
    """Streams a word, then waits (in a worker thread) until the test opens :attr:`gate`."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        raise NotImplementedError("the host streams")

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        message_id = uuid.uuid4().hex
        yield ChatResponseUpdate([TextContent("wait ")], role="assistant", message_id=message_id)
        await asyncio.to_thread(self.gate.wait, HANG)
        yield ChatResponseUpdate(
            [TextContent("done")], role="assistant", message_id=message_id, finish_reason="stop"
        )


def turn_request(port: int, thread: str) -> bytes:
    """An AG-UI request of one user message on ``thread``, head and body."""
    body = msgspec.json.encode(
        {
            "threadId": thread,
            "runId": "r",
            "messages": [{"id": f"{thread}-m1", "role": "user", "content": "tell me"}],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
    )
    return (
        head(port, "POST", "/agents/chat", "Content-Type: application/json", f"Content-Length: {len(body)}")
        + body
    )


@contextmanager
def serving(
    folder: Path, limits: ConnectionLimits, client: BaseChatClient[ChatOptions] | None = None
) -> Iterator[int]:
    """A host (agent ``chat``, SQLite history and sessions) under :class:`LimitedConfig` in a
    background thread; yields its port."""
    path = folder / "host.db"
    history = StorageHistoryProvider(SQLiteMessageStore(path), "history", load_limit=50, owns_store=True)
    agent = Agent(
        client or ScriptedChatClient(lambda messages: "ok"), name="chat", context_providers=[history]
    )
    host = AgentHost()
    host.add_agent("chat", agent, session_store=SQLiteSessionStore(path))
    host.on_shutdown.append(history.aclose)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    config = LimitedConfig(
        host.app,
        limits=limits,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + HANG
        while not server.started:
            assert thread.is_alive(), "the server stopped"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=HANG)
        listener.close()


def limits(timeout: float = SHORT, max_connections: int | None = None) -> ConnectionLimits:
    return ConnectionLimits(
        header_timeout=timeout,
        keep_alive_timeout=timeout,
        body_timeout=timeout,
        max_connections=max_connections,
    )


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(HANG):
        return await asyncio.open_connection("127.0.0.1", port)


def head(port: int, method: str = "GET", path: str = "/healthz", *extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (hang-guarded)."""
    received = b""
    async with asyncio.timeout(HANG):
        while data := await reader.read(65536):
            received += data
    return received


async def one_response(reader: asyncio.StreamReader) -> bytes:
    """One response with a ``content-length`` body (the connection stays open)."""
    async with asyncio.timeout(HANG):
        answer = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in answer.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return answer + await reader.readexactly(length)


async def admitted(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection the server took in and answered on (retrying while it still counts closed
    ones), kept open."""
    async with asyncio.timeout(HANG):
        while True:
            reader, writer = await connect(port)
            writer.write(head(port))
            answer = await one_response(reader)
            if answer.startswith(b"HTTP/1.1 200"):
                return reader, writer
            writer.close()
            await asyncio.sleep(0.05)


async def test_a_connection_that_sends_nothing_is_closed_silently(tmp_path: Path) -> None:
    with serving(tmp_path, limits()) as port:
        reader, writer = await connect(port)
        assert await until_closed(reader) == b""  # no answer to a client that never asked
        writer.close()
        reader, writer = await connect(port)  # a client that asks at once is served
        writer.write(head(port))
        assert (await one_response(reader)).startswith(b"HTTP/1.1 200")
        writer.close()


async def test_a_head_that_trickles_in_is_closed_with_408(tmp_path: Path) -> None:
    """Each byte arrives well within the timeout, the head never does: the timeout counts from the
    first byte, not the last."""
    with serving(tmp_path, limits()) as port:
        reader, writer = await connect(port)
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        closed = asyncio.create_task(until_closed(reader))
        for line in range(200):  # 20 s at most: far past the timeout
            if closed.done():
                break
            writer.write(f"X-Slow-{line}: a\r\n".encode())
            await asyncio.sleep(SHORT / 6)
        assert (await closed).startswith(b"HTTP/1.1 408 Request Timeout")
        writer.close()


async def test_a_kept_alive_connection_is_closed_once_idle_and_served_while_used(tmp_path: Path) -> None:
    with serving(tmp_path, limits()) as port:
        reader, writer = await connect(port)
        for _ in range(3):  # requests closer together than the timeout keep it open
            writer.write(head(port))
            assert (await one_response(reader)).startswith(b"HTTP/1.1 200")
        assert await until_closed(reader) == b""
        writer.close()


async def test_a_slow_body_that_moves_is_read_and_a_stalled_one_is_closed(tmp_path: Path) -> None:
    body = msgspec.json.encode(
        {
            "threadId": "slow-upload",
            "runId": "r",
            "messages": [{"id": "m1", "role": "user", "content": "hi " * 20}],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
    )
    with serving(tmp_path, limits()) as port:
        post = head(
            port, "POST", "/agents/chat", "Content-Type: application/json", f"Content-Length: {len(body)}"
        )
        reader, writer = await connect(port)
        writer.write(post)
        pieces = [body[start : start + 16] for start in range(0, len(body), 16)]
        assert len(pieces) * SHORT / 3 > 2 * SHORT  # the upload lasts longer than the timeouts
        for piece in pieces:
            await asyncio.sleep(SHORT / 3)
            writer.write(piece)
        answer = await whole_stream(reader)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert b"RUN_FINISHED" in answer
        writer.close()

        reader, writer = await connect(port)
        writer.write(post + pieces[0])  # and no more
        assert await until_closed(reader) == b""
        writer.close()


async def whole_stream(reader: asyncio.StreamReader) -> bytes:
    """A streamed (chunked) answer read to its last chunk, or to the close."""
    received = b""
    async with asyncio.timeout(HANG):
        while not received.endswith(b"\r\n0\r\n\r\n"):
            data = await reader.read(65536)
            if not data:
                break
            received += data
    return received


async def test_at_the_cap_a_new_connection_pushes_out_the_one_idle_longest(tmp_path: Path) -> None:
    with serving(tmp_path, limits(HANG, max_connections=2)) as port:
        silent = await connect(port)  # never sends a request
        kept = await admitted(port)  # served, then idle
        newcomer = await admitted(port)  # gets in: the silent one waited longest
        assert await until_closed(silent[0]) == b""
        last = await admitted(port)  # gets in: the kept one waited longest now
        assert await until_closed(kept[0]) == b""
        for _, writer in (silent, kept, newcomer, last):
            writer.close()


async def test_when_every_connection_is_busy_a_new_one_is_refused_and_the_open_ones_work(
    tmp_path: Path,
) -> None:
    client = GatedChatClient()
    with serving(tmp_path, limits(HANG, max_connections=2), client) as port:
        turns = [await connect(port) for _ in range(2)]
        for index, (reader, writer) in enumerate(turns):
            writer.write(turn_request(port, f"busy-{index}"))
            async with asyncio.timeout(HANG):
                await reader.readuntil(b"RUN_STARTED")  # its turn runs until the gate opens
        extra = await connect(port)
        refused = await until_closed(extra[0])
        assert refused.startswith(b"HTTP/1.1 503 Service Unavailable")
        assert b"retry-after: 1" in refused
        extra[1].close()
        client.gate.set()
        for reader, _ in turns:
            assert b"RUN_FINISHED" in await whole_stream(reader)
        reader, writer = turns[0]
        writer.write(head(port))  # the connection that was open still works
        assert (await one_response(reader)).startswith(b"HTTP/1.1 200")
        for _, writer in turns:
            writer.close()


async def test_a_streamed_turn_longer_than_every_timeout_is_not_cut(tmp_path: Path) -> None:
    chunks, pause = 4, SHORT
    assert chunks * pause > 2 * SHORT  # longer than the header, body and keep-alive timeouts
    with serving(tmp_path, limits(), SlowChatClient(chunks, pause)) as port:
        reader, writer = await connect(port)
        writer.write(turn_request(port, "long"))
        answer = await whole_stream(reader)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    events = [msgspec.json.decode(line[6:]) for line in answer.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    text = "".join(event["delta"] for event in events if event["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "".join(f"w{index} " for index in range(chunks))


def test_the_limits_are_checked_and_the_cap_follows_the_open_file_limit() -> None:
    with pytest.raises(ValueError, match="header_timeout must be"):
        ConnectionLimits(header_timeout=0)
    with pytest.raises(ValueError, match="keep_alive_timeout must be"):
        ConnectionLimits(keep_alive_timeout=-1)
    with pytest.raises(ValueError, match="body_timeout must be"):
        ConnectionLimits(body_timeout=0)
    with pytest.raises(ValueError, match="max_connections must be"):
        ConnectionLimits(max_connections=0)
    assert default_max_connections(256) == 128  # macOS's default soft limit
    assert default_max_connections(1024) == 768
    assert default_max_connections(4096) == 3072
    assert default_max_connections(1_048_576) == MAX_CONNECTIONS_CEILING
    assert default_max_connections(None) == MAX_CONNECTIONS_CEILING
    assert ConnectionLimits(max_connections=5).resolved().max_connections == 5
    assert (ConnectionLimits().resolved().max_connections or 0) >= 1


async def test_inspect_takes_the_connection_options(env: dict[str, str], tmp_path: Path) -> None:
    """``agentkeep inspect`` as a real process: ``--header-timeout`` closes a connection that sends
    nothing; past ``--max-connections`` a new connection pushes out the one idle longest."""
    arguments = ("--store", f"sqlite:///{tmp_path / 'inspected.db'}", "--header-timeout", str(SHORT))
    with running(
        env, "inspect", *arguments, "--keep-alive-timeout", str(HANG), "--max-connections", "2"
    ) as url:
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await connect(port)
        assert await until_closed(reader) == b""
        writer.close()
        held = [await admitted(port) for _ in range(2)]
        extra = await admitted(port)
        assert await until_closed(held[0][0]) == b""
        for _, held_writer in (*held, extra):
            held_writer.close()
