"""The PostgreSQL connection pools a process shares: one per event loop, server and settings.

Every store opened from a URL (history, sessions, memory) asks :func:`acquire_pool` for its
pool: stores naming the same database with the same connection settings get the same
``AsyncConnectionPool``, so a host with three stores on one database holds one pool, not three.
The pool is counted per user and closed when its last user releases it (:func:`release_pool`).
Pools are per event loop, because an asyncio pool belongs to the loop it was opened on; a process
normally runs one.

A pool is sized by the largest ``max_size`` its users asked for (it grows when a user asking for
more joins; it does not shrink while that user stays). :func:`why_no_connection` explains a
pool timeout without adding load to a busy server: a pool that holds connections is saturated
(its users wait for each other), and only a pool that holds none tries one connection, once at
a time, to report why the server refuses.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool

__all__ = ["PoolKey", "acquire_pool", "pool_key", "pool_users", "release_pool", "why_no_connection"]

PostgresPool = AsyncConnectionPool[Any]

PoolKey = tuple[str, tuple[tuple[str, str], ...]]
"""What makes two pools the same: the connection string and the connection settings."""

MIN_SIZE: Final = 1
"""Connections a shared pool keeps open when idle."""


def pool_key(conninfo: str, kwargs: Mapping[str, Any]) -> PoolKey:
    """The key of the pool for ``conninfo`` opened with ``kwargs``."""
    return conninfo, tuple(sorted((name, repr(value)) for name, value in kwargs.items()))


@dataclass
class _Shared:
    pool: PostgresPool
    sizes: list[int] = field(default_factory=list[int])


@dataclass
class _Health:
    """The pool's count of failed connection attempts when it last opened a connection: while it
    stays the same, the server accepts connections and a pool timeout means a busy pool."""

    errors_when_connected: int | None = None


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[PoolKey, _Shared]] = (
    weakref.WeakKeyDictionary()
)
_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
_DIAGNOSES: weakref.WeakKeyDictionary[PostgresPool, asyncio.Future[str]] = weakref.WeakKeyDictionary()
_HEALTH: weakref.WeakKeyDictionary[PostgresPool, _Health] = weakref.WeakKeyDictionary()


def _connection_errors(pool: PostgresPool) -> int:
    return pool.get_stats().get("connections_errors", 0)


def _pools() -> dict[PoolKey, _Shared]:
    return _POOLS.setdefault(asyncio.get_running_loop(), {})


def _lock() -> asyncio.Lock:
    return _LOCKS.setdefault(asyncio.get_running_loop(), asyncio.Lock())


async def acquire_pool(
    conninfo: str, *, kwargs: Mapping[str, Any], max_size: int, seconds: float
) -> PostgresPool:
    """The loop's open pool for ``conninfo`` and ``kwargs``, opened if it is the first user;
    grown to ``max_size`` connections if it had fewer; ``seconds`` bounds the first connection
    and is the pool's wait for a connection. Every call needs one :func:`release_pool`.

    Raises:
        psycopg.OperationalError: The first connection of a new pool failed (nothing is kept).
    """
    key = pool_key(conninfo, kwargs)
    async with _lock():
        pools = _pools()
        shared = pools.get(key)
        if shared is None:
            health = _Health()
            made: list[PostgresPool] = []

            async def connected(_: psycopg.AsyncConnection[Any]) -> None:
                health.errors_when_connected = _connection_errors(made[0])

            pool = AsyncConnectionPool(
                conninfo,
                kwargs=dict(kwargs),
                min_size=MIN_SIZE,
                max_size=max_size,
                open=False,
                timeout=seconds,
                name="agentkeep",
                configure=connected,
            )
            made.append(pool)
            _HEALTH[pool] = health
            # One direct connection first: an unknown database or refused credentials fail at
            # once, saying so, instead of the pool retrying in the background until a timeout.
            async with asyncio.timeout(seconds):
                conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
            await conn.close()
            await pool.open(wait=False)
            shared = pools[key] = _Shared(pool)
        elif max_size > shared.pool.max_size:
            await shared.pool.resize(MIN_SIZE, max_size)
        shared.sizes.append(max_size)
        return shared.pool


async def release_pool(pool: PostgresPool, *, max_size: int) -> None:
    """One user of ``pool`` (which asked for ``max_size``) is done; the last closes it."""
    async with _lock():
        pools = _pools()
        key = next((key for key, shared in pools.items() if shared.pool is pool), None)
        if key is None:
            return  # released by all already
        pools[key].sizes.remove(max_size)
        if pools[key].sizes:
            return
        del pools[key]
        if (diagnosis := _DIAGNOSES.pop(pool, None)) is not None:
            diagnosis.cancel()
    await pool.close()


def pool_users(pool: PostgresPool) -> int:
    """How many stores of this loop use ``pool`` (0 once it is released by all)."""
    shared = _find(pool)
    return 0 if shared is None else len(shared.sizes)


async def why_no_connection(pool: PostgresPool, *, seconds: float) -> str:
    """Why ``pool`` gave no connection in time, as ``": reason"`` (``""`` if nothing is known).

    A shared pool that opened a connection with no failed attempt since is saturated: that is
    said, and nothing connects (a busy server gets no extra connection). Otherwise (a pool whose
    attempts fail, an injected pool) one direct connection tries to report the server's refusal
    within ``seconds``; concurrent callers share that one attempt.
    """
    stats = pool.get_stats()
    health = _HEALTH.get(pool)
    if health is not None and health.errors_when_connected == stats.get("connections_errors", 0):
        size, waiting = stats.get("pool_size", 0), stats.get("requests_waiting", 0)
        return (
            f": all {size} connections of the pool are in use ({waiting} more waiting; pool_size raises it)"
        )
    diagnosis = _DIAGNOSES.get(pool)
    if diagnosis is None or diagnosis.done():
        diagnosis = _DIAGNOSES[pool] = asyncio.ensure_future(_try_connecting(pool, seconds))
    return await asyncio.shield(diagnosis)


def _find(pool: PostgresPool) -> _Shared | None:
    loop = asyncio.get_running_loop()
    return next((shared for shared in _POOLS.get(loop, {}).values() if shared.pool is pool), None)


async def _try_connecting(pool: PostgresPool, seconds: float) -> str:
    conninfo, options = pool.conninfo, pool.kwargs or {}
    if not isinstance(conninfo, str) or not isinstance(options, dict):
        return ""  # parameters computed per connection: only the pool knows them
    try:
        async with asyncio.timeout(seconds):
            conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(conninfo, **options)
    except (psycopg.Error, TimeoutError, OSError) as exc:
        text = str(exc).strip().splitlines()
        return f": {text[0] if text else type(exc).__name__}"
    await conn.close()
    return ""
