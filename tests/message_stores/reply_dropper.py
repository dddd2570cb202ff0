"""A loopback TCP proxy that loses replies: the server gets every request, but a connection whose
request holds ``marker`` is closed when the server answers it, the answer never delivered.

That is the "lost reply" of a crash right after the server applied a write (a killed server, a
dropped network path), made deterministic: the write is applied and its caller sees a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["ReplyDropper", "reply_dropper"]


class ReplyDropper:
    """The proxy: listens on ``port`` (loopback) and forwards to ``target``.

    Attributes:
        marker: Bytes that mark a request whose reply is lost (``None``: every reply delivered).
        dropped: How many replies were lost so far.
        connections: How many connections clients opened through the proxy so far.
        most_open: The most connections open through the proxy at one time so far.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.marker: bytes | None = None
        self.dropped = 0
        self.connections = 0
        self.most_open = 0
        self._open = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open += 1
        self.most_open = max(self.most_open, self._open)
        try:
            await self._forward(client_in, client_out)
        finally:
            self._open -= 1

    async def _forward(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection(*self.target)
        marked = asyncio.Event()

        async def upstream() -> None:
            while data := await client_in.read(65536):
                if self.marker is not None and self.marker in data:
                    marked.set()
                server_out.write(data)
                await server_out.drain()
            server_out.close()

        async def downstream() -> None:
            while data := await server_in.read(65536):
                if marked.is_set():  # the marked request's answer: lose it, and the connection
                    self.dropped += 1
                    break
                client_out.write(data)
                await client_out.drain()
            client_out.close()
            server_out.close()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
            for writer in (client_out, server_out):
                writer.close()
                with contextlib.suppress(OSError, ConnectionError, asyncio.CancelledError):
                    await writer.wait_closed()  # (cancelled when the proxy closes)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await self._server.wait_closed()


@asynccontextmanager
async def reply_dropper(host: str, port: int) -> AsyncIterator[ReplyDropper]:
    """A running :class:`ReplyDropper` in front of ``host:port``, closed afterwards."""
    proxy = ReplyDropper(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.aclose()
