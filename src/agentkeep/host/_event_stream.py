"""The streamed response of the event endpoints (:class:`EventStreamResponse`): server-sent events
written as they are made, in as few body messages as their timing allows.

Each body message costs the host a pass through every ASGI layer, the server's framing and a
socket write that wakes the client (tens of microseconds here, a few percent of a turn). A run
makes its events in bursts (the start, each model update, the closing events after the save),
and several bursts are often ready before the loop gets to send any: the whole turn of a model
that answers at once, or a start and the first update when the session and the history were read
without waiting. So the response sends from its own task (:class:`_Outbox`) only what is ready
when the run waits for something: the chunks made in between travel in one message, and a chunk
never waits for a later one (streaming is as prompt as before, in fewer messages).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Final

import anyio
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["EventStreamResponse"]

BACKLOG: Final = 1 << 16
"""Characters of unsent events past which the run waits for the sending to catch up (a slow
reader slows the run instead of filling the host's memory)."""


class _Outbox:
    """A response's body messages, sent in order, one at a time: by a task started when the run
    next waits (:meth:`put` schedules it on the event loop, so what the run makes before it waits
    joins the same message), or by the run itself (:meth:`finish`) at the end and when the
    backlog is full."""

    __slots__ = ("_failure", "_last", "_scheduled", "_send", "_sender", "_size", "_texts")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._texts: list[str] = []
        self._size = 0
        self._last = False  # the text that ends the response is among _texts
        self._sender: asyncio.Task[None] | None = None
        self._scheduled = False
        self._failure: BaseException | None = None

    async def put(self, text: str, *, last: bool) -> None:
        """``text`` to be sent, and whether it ends the response; waits only on a full backlog.

        Raises:
            Exception: What sending an earlier message raised.
        """
        self._raise_failure()
        self._texts.append(text)
        self._size += len(text)
        self._last = last
        if self._size > BACKLOG:
            await self.finish()  # everything out before the run goes on
        elif self._sender is None and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start_sender)

    async def finish(self) -> None:
        """Every text put is sent.

        Raises:
            Exception: What sending a message raised.
        """
        if self._sender is not None:
            await self._sender  # it sends everything put so far, then ends
        self._raise_failure()
        await self._drain()
        self._raise_failure()

    def close(self) -> None:
        """Stop sending (the response ends unfinished: the client is gone, or the run was
        cancelled); what is not sent yet is dropped."""
        self._texts.clear()
        if self._sender is not None:
            self._sender.cancel()

    def _start_sender(self) -> None:  # on the event loop, once the run that put texts waits
        self._scheduled = False
        if self._texts and self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._texts:
                texts, last = self._texts, self._last
                self._texts, self._size = [], 0
                body = (texts[0] if len(texts) == 1 else "".join(texts)).encode()
                await self._send({"type": "http.response.body", "body": body, "more_body": not last})
        except Exception as exc:  # raised in the run, at its next put or at the end
            self._texts.clear()
            self._failure = exc
        finally:
            if self._sender is asyncio.current_task():
                self._sender = None

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure


class EventStreamResponse(Response):
    """A ``text/event-stream`` response sent as ``chunks`` makes it (see the module docs): each
    ``(text, more)`` is sent once the run next waits, with the chunks made before it, and the
    first with ``more`` false ends the response (the end of the stream travels with its last
    events instead of in a message of its own).

    A client that hangs up stops the stream: once the run waits, a task waits for the disconnect
    and cancels the run, at whatever ``chunks`` awaits (a run then stores nothing); the response
    then ends quietly, as nobody is left to read it.

    ``chunks`` is closed when the response ends (it stops at its last chunk, unfinished): left to
    the garbage collector, an async generator is closed by a task the event loop starts for it,
    woken through its self-pipe, which costs about as much as sending a chunk.
    """

    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncGenerator[tuple[str, bool]], *, media_type: str | None = None) -> None:
        self.chunks = chunks
        self.status_code = 200
        if media_type is not None:
            self.media_type = media_type
        self.background = None
        self.init_headers()  # no body: no content-length, the server sends it chunked

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        outbox = _Outbox(send)
        try:
            # anyio's scope, not a bare Task.cancel(): it cancels again at every await until the
            # stream has stopped, so a library that swallows one CancelledError cannot keep it going.
            with anyio.CancelScope() as stopped:
                watcher = _DisconnectWatch(receive, stopped)
                try:
                    async for text, more in self.chunks:
                        await outbox.put(text, last=not more)
                        if not more:
                            break
                    else:  # the chunks ran out without saying so
                        await outbox.put("", last=True)
                    await outbox.finish()
                finally:
                    watcher.stop()
        finally:
            outbox.close()
            await self.chunks.aclose()


class _DisconnectWatch:
    """Cancels ``stopped`` when the client hangs up, from a task started once the run first waits
    (scheduled on the event loop): a run that never waits, such as a turn whose model answers at
    once, ends before a hang-up could stop it, and starts no task. A client gone before the task
    starts is seen at once (the server's ``receive`` answers ``http.disconnect``)."""

    __slots__ = ("_over", "_receive", "_stopped", "_task")

    def __init__(self, receive: Receive, stopped: anyio.CancelScope) -> None:
        self._receive, self._stopped = receive, stopped
        self._task: asyncio.Task[None] | None = None
        self._over = False
        asyncio.get_running_loop().call_soon(self._start)

    def stop(self) -> None:
        """The response is over: stop watching (or never start)."""
        self._over = True
        if self._task is not None:
            self._task.cancel()

    def _start(self) -> None:
        if not self._over:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._stopped.cancel()
