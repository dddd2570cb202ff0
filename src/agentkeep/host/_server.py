"""The HTTP server of ``agentkeep serve`` and ``agentkeep inspect``: uvicorn with bounded connections.

uvicorn (0.55) closes a keep-alive connection that stays idle after a response, and that is all:
it starts no timer on a fresh connection, none while a request's head or body trickles in, and its
``limit_concurrency`` answers 503 to *requests* once the open connections reach the limit, so
idle connections keep their descriptors and turn away the requests of working ones.
:class:`BoundedH11Protocol`, uvicorn's h11 protocol with three timers and a cap added, bounds each
phase of a connection (:class:`ConnectionLimits` says how long):

* waiting for a request head (from the connection's start, or from the first byte after a
  response): ``header_timeout``, whether nothing comes or the head trickles in;
* between two bytes of a request body: ``body_timeout`` (a slow upload is fine while it moves;
  not counted while the application is not reading);
* idle after a response: ``keep_alive_timeout`` (uvicorn's own timer);
* while the application answers (a streamed turn may last minutes): no timer; the host's
  ``run_timeout`` bounds a run.

At ``max_connections`` open connections, a new one pushes out the connection that has waited
longest for a request head (never sent one, trickles one in, or idles between requests), so idle
and slowloris connections cannot lock others out; when every open connection is busy with a
request, the new one is answered ``503`` and closed at once, and the open ones keep working.
:func:`run_server` raises the soft limit of open files to the hard one first; the default cap is
below it (:func:`agentkeep.host._limits.default_max_connections`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Final, cast

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

from ._limits import ConnectionLimits, raise_open_file_limit

__all__ = ["BoundedH11Protocol", "LimitedConfig", "run_server"]

REFUSAL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 20\r\nretry-after: 1\r\nconnection: close\r\n\r\ntoo many connections"
)
REQUEST_TIMEOUT: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 15\r\nconnection: close\r\n\r\nrequest timeout"
)
REFUSAL_LOG_INTERVAL: Final = 10.0

logger = logging.getLogger("uvicorn.error")


class LimitedConfig(uvicorn.Config):
    """uvicorn's configuration with :class:`ConnectionLimits`, served by :class:`BoundedH11Protocol`
    (it travels to worker processes with the rest of the configuration)."""

    def __init__(self, app: Any, *, limits: ConnectionLimits, **options: Any) -> None:
        self.connection_limits = limits.resolved()
        self.gate = _Gate()
        super().__init__(app, http=BoundedH11Protocol, ws="none", **options)


@dataclass(slots=True)
class _Gate:
    """What the connections of one server share: those waiting for a request head, oldest first
    (the ones a new connection may push out at the cap), and the refusals not yet logged (one
    warning per :data:`REFUSAL_LOG_INTERVAL` at most)."""

    waiting: dict[BoundedH11Protocol, None] = field(default_factory=dict["BoundedH11Protocol", None])
    refused: int = 0
    logged_at: float = float("-inf")

    def make_room(self, newcomer: BoundedH11Protocol) -> bool:
        """Close the connection that has waited longest for a request head; whether there was one."""
        for connection in self.waiting:
            if connection is not newcomer:
                connection.push_out()
                return True
        return False

    def refuse(self, limit: int) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self.logged_at >= REFUSAL_LOG_INTERVAL:
            logger.warning(
                "%d connection(s) refused: %d connections are open and busy (--max-connections)",
                self.refused,
                limit,
            )
            self.refused, self.logged_at = 0, now


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout, a body timeout and a connection cap (see the
    module docs); it takes its limits from a :class:`LimitedConfig`."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not isinstance(config, LimitedConfig):
            raise TypeError("BoundedH11Protocol takes its limits from a LimitedConfig")
        super().__init__(config, server_state, app_state, _loop)
        self._limits, self._gate = config.connection_limits, config.gate
        # uvicorn types its keep-alive timeout as whole seconds but only ever waits it with call_later
        setattr(self, "timeout_keep_alive", self._limits.keep_alive_timeout)  # noqa: B010
        self._refused = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_cycle: object = None  # the cycle in force when the head timer started
        self._head_started = False  # a byte of the awaited head came
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_read_at = 0.0

    # -- uvicorn's hooks --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limit = self._limits.max_connections or 1
        if len(self.connections) > limit and not self._gate.make_room(self):
            self._refused = True
            self.connections.discard(self)  # not counted, and gone at once
            self._gate.refuse(limit)
            self.transport.write(REFUSAL)
            self.transport.close()
            return
        self._start_head_timer(started=False)
        self._follow()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._head_timer is None and self._between_requests():
            self._start_head_timer(started=True)  # the next request's first byte
        elif self._head_timer is not None:
            self._head_started = True
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts the keep-alive timer, may start a pipelined request
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._stop_body_timer()
        self._gate.waiting.pop(self, None)
        super().connection_lost(exc)

    def push_out(self) -> None:
        """Close this connection, which waits for a request head, to make room for a new one."""
        self._gate.waiting.pop(self, None)
        self._stop_head_timer()
        self.transport.close()

    # -- the timers -------------------------------------------------------------------------------

    def _between_requests(self) -> bool:
        cycle = cast("RequestResponseCycle | None", self.cycle)  # uvicorn types it set; None at first
        return cycle is None or cycle.response_complete

    def _reading_body(self) -> bool:
        cycle = cast("RequestResponseCycle | None", self.cycle)
        return cycle is not None and cycle.more_body and not cycle.response_complete

    def _follow(self) -> None:
        """After a connection opened, bytes came or a response ended: stop the head timer once a new
        request's head is in (uvicorn made a new cycle), keep the connection in the line of those
        waiting for a head while it is, and time the body while one is being read."""
        if self._head_timer is not None and self.cycle is not self._head_cycle:
            self._stop_head_timer()
        if self._between_requests() and not self.transport.is_closing():
            self._gate.waiting.setdefault(self)  # an old place in the line is kept
        else:
            self._gate.waiting.pop(self, None)
        if self._reading_body():
            self._body_read_at = self.loop.time()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self._limits.body_timeout, self._check_body)
        else:
            self._stop_body_timer()

    def _start_head_timer(self, *, started: bool) -> None:
        self._head_cycle, self._head_started = self.cycle, started
        self._head_timer = self.loop.call_later(self._limits.header_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.cycle is not self._head_cycle:
            return
        if self._head_started:  # a client that sent something hears why; silence gets silence
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()

    def _check_body(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or not self._reading_body():
            return
        waited = self.loop.time() - self._body_read_at
        if self.flow.read_paused or waited < self._limits.body_timeout:
            # the application has not read what came (not the client's delay), or bytes came since
            delay = self._limits.body_timeout - (0.0 if self.flow.read_paused else waited)
            self._body_timer = self.loop.call_later(delay, self._check_body)
            return
        self.transport.close()  # the application's receive() answers http.disconnect


def run_server(
    app: Any,
    *,
    host: str,
    port: int,
    limits: ConnectionLimits,
    workers: int = 1,
    factory: bool = False,
) -> None:
    """Serve ``app`` (an ASGI app, or with ``workers > 1`` an import string, with ``factory`` a
    factory's) until interrupted, under ``limits``, after raising the open-file limit.

    Raises:
        SystemExit: The server could not start (uvicorn's code 3).
    """
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    raise_open_file_limit()
    config = LimitedConfig(
        app, limits=limits, host=host, port=port, workers=workers, factory=factory, log_level="info"
    )
    if config.workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises the SIGINT it stopped on again
        server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)
