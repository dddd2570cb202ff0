"""A loopback TCP proxy in front of a private PostgreSQL server that pauses the server (``SIGSTOP``)
just before a chosen message reaches it: the message then waits, unread, in the paused server.

Armed with :meth:`PausingProxy.pause_before`, it pauses the server before forwarding either the
first request that holds a marker (a statement whose parameters name the write's conversation:
the server has not started it), or the ``COMMIT`` that follows such a request on the same
connection (the statements ran; the transaction waits for its commit). When the client leaves,
the proxy passes the end of its requests on and keeps the server's side open until the server
closes it: :attr:`PausingProxy.paused_answered` tells that, once resumed, the server has run (or
refused) the paused message: it answered it (``ReadyForQuery``), or its backend ended.

Cancel requests (what a client sends when it stops waiting for a statement) are not forwarded:
:attr:`PausingProxy.cancelled` is set and the connection closed, as if the request were lost. A
cancel racing the paused message on resume would hide whether the server refused it by itself.

Put it directly in front of the server; a PgBouncer goes in front of the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Literal

from .private_postgres import PostgresServer

__all__ = ["PausingProxy"]

_COMMIT = b"COMMIT\x00"  # the query text of a COMMIT, as psycopg and PgBouncer send it
_READY = b"Z\x00\x00\x00\x05"  # ReadyForQuery: the server is done with what it was sent
_CANCEL_REQUEST = (16).to_bytes(4, "big") + (80877102).to_bytes(4, "big")  # a connection's first bytes
# An SSLRequest or GSSENCRequest may come first (libpq's default sslmode is "prefer"): the proxy
# answers "N", as the private server, which has neither, would.
_ENCRYPTION_REQUESTS = tuple(
    (8).to_bytes(4, "big") + code.to_bytes(4, "big") for code in (80877103, 80877104)
)
_CARRY = 256  # bytes of a request kept to find a marker split between two reads


@dataclass
class _Connection:
    marked: bool = False  # a request held the marker
    client_gone: bool = False
    paused: bool = False  # its message waited in the paused server
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # the server is done with it


class PausingProxy:
    """The proxy: listens on :attr:`port` (loopback) and forwards to ``server``.

    Attributes:
        paused: Set once the proxy paused the server.
        paused_answered: Set once the server answered the message that waited in it while
            paused, or closed that message's connection.
        cancelled: Set when a client sent a cancel request (it stopped waiting).
    """

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.port = 0
        self.paused = asyncio.Event()
        self.paused_answered = asyncio.Event()
        self.cancelled = asyncio.Event()
        self._armed: tuple[bytes, Literal["request", "commit"]] | None = None
        self._arming = 0  # how many times it was armed: bytes read before are not searched
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """The server's URL through the proxy."""
        return self.server.url.replace(f":{self.server.port}/", f":{self.port}/")

    def pause_before(self, marker: bytes, *, at: Literal["request", "commit"]) -> None:
        """Pause the server once, before the first request holding ``marker`` (``"request"``) or
        before the ``COMMIT`` that follows one on its connection (``"commit"``)."""
        self.paused.clear()
        self.cancelled.clear()
        self.paused_answered = asyncio.Event()
        self._armed = (marker, at)
        self._arming += 1

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        connection = _Connection()
        server_writer: asyncio.StreamWriter | None = None
        try:
            first = await client_reader.read(65536)
            while first in _ENCRYPTION_REQUESTS:
                client_writer.write(b"N")
                await client_writer.drain()
                first = await client_reader.read(65536)
            if first.startswith(_CANCEL_REQUEST):
                self.cancelled.set()
                return
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.server.port)
            server_writer.write(first)
            requests = asyncio.create_task(self._requests(client_reader, server_writer, connection))
            replies = asyncio.create_task(self._replies(server_reader, client_writer, connection))
            try:
                await asyncio.wait({requests, replies}, return_when=asyncio.FIRST_COMPLETED)
                if requests.done() and not replies.done():  # the client left first
                    connection.client_gone = True
                    server_writer.write_eof()  # read by the server after what it holds
                    await replies  # until the server closes: its backend ended
                connection.answered.set()
            finally:
                for pipe in (requests, replies):
                    pipe.cancel()
                    with contextlib.suppress(asyncio.CancelledError, OSError):
                        await pipe
        except OSError:
            pass
        finally:
            # What was forwarded stays in the (maybe paused) server's socket, read on resume.
            for writer in (client_writer, server_writer):
                if writer is not None:
                    writer.close()
            self._tasks.discard(task)

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        carried, arming = b"", self._arming
        while data := await reader.read(65536):
            if arming != self._arming:
                carried, arming = b"", self._arming
            seen = carried + data
            if self._armed is not None:
                marker, at = self._armed
                if at == "commit" and connection.marked and _COMMIT in data:
                    self._pause(connection)
                elif marker in seen:
                    connection.marked = True
                    if at == "request":
                        self._pause(connection)
            writer.write(data)
            await writer.drain()
            carried = seen[-_CARRY:]

    async def _replies(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        while data := await reader.read(65536):
            if connection.paused and _READY in data:
                connection.answered.set()
            if not connection.client_gone:
                writer.write(data)
                await writer.drain()

    def _pause(self, connection: _Connection) -> None:
        self.server.pause()
        self._armed = None
        connection.paused = True
        self.paused_answered = connection.answered
        self.paused.set()
