"""The Redis database layer: a client with agentkeep's timeouts, ownership, scripts and errors.

:class:`RedisConnection` wraps a redis-py asyncio client (injected, or created from a URL and then
owned), runs Lua scripts by SHA (:class:`RedisScript`, sent again when the server lost its script
cache) and maps redis-py's errors to agentkeep's. :func:`escape_key_part` makes any id a safe,
collision-free part of a key. Both Redis stores run on it: the message store
(:mod:`agentkeep.message_stores.redis`) and the session store (:mod:`agentkeep.session_stores.redis`).

Needs redis-py (extra ``[redis]``); importing this module without it raises an ``ImportError``
that names the extra.
"""

from __future__ import annotations

import hashlib
import time
import traceback
import zlib
from collections.abc import AsyncIterator, Generator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeAlias, cast
from urllib.parse import quote

try:
    import redis
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff, NoBackoff
    from redis.exceptions import (
        AskError,
        ClusterError,
        NoScriptError,
        ReadOnlyError,
        RedisClusterException,
        RedisError,
        TryAgainError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the Redis backend needs the redis package: pip install 'agentkeep[redis]'") from exc

from ..errors import (
    CorruptRecordError,
    OutcomeUnknownError,
    StorageClosedError,
    StorageError,
    StorageUnavailableError,
)

__all__ = [
    "BUCKETS",
    "CLUSTER_SCHEMES",
    "RedisClient",
    "RedisConnection",
    "RedisScript",
    "bucket_of",
    "escape_key_part",
    "glob_escape",
    "slot_tag",
]

_MAX_KEY_PART: Final = 100

RedisClient: TypeAlias = "aioredis.Redis | RedisCluster"
"""A redis-py asyncio client: one server's (``Redis``) or a Redis Cluster's (``RedisCluster``)."""

CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""The URL schemes of a Redis Cluster (``redis+cluster://host:port[,host:port...]``), each with
the scheme of one of its nodes."""

# Errors of a cluster that is failing over, resharding or has lost a slot's master: like a
# dropped connection, the cluster cannot serve the key now (and a write's outcome is unknown).
_UNAVAILABLE: Final = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    ClusterError,  # CLUSTERDOWN, MasterDownError
    TryAgainError,
    AskError,  # MOVED / ASK left after redis-py's redirections
    ReadOnlyError,  # a master just demoted to replica
    RedisClusterException,  # SlotNotCoveredError and the like
)


def _lost_transport(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside redis-py's asyncio connection code (or the asyncio
    transport under it): a connection torn down while a command used it, not agentkeep's code."""
    files = [frame.filename.replace("\\", "/") for frame in traceback.extract_tb(exc.__traceback__)]
    in_redis = [index for index, name in enumerate(files) if "/redis/asyncio/" in name]
    return bool(in_redis) and all(
        "/redis/asyncio/" in name or "/asyncio/" in name for name in files[in_redis[0] :]
    )


def _driver_info() -> dict[str, Any]:
    # redis-py 7+ looks its own version up in the installed packages' metadata (files on disk)
    # for every new connection, in the event loop, unless it is told: tell it once.
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # older redis-py reads its version once, at import
        return {}
    return {"driver_info": DriverInfo(name="redis-py", lib_version=redis.__version__)}


_DRIVER_INFO: Final = _driver_info()


_CORRUPT_META: Final = "AGENTKEEP_CORRUPT_META "
"""How the scripts report a conversation whose meta hash holds damaged counters."""


class RedisScript:
    """A Lua script run by SHA (``EVALSHA``), sent again with ``EVAL`` if the server lacks it.

    Args:
        source: The Lua source.
    """

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


def glob_escape(text: str) -> str:
    """``text`` as a ``SCAN MATCH`` pattern that matches only itself."""
    return "".join("\\" + char if char in "\\*?[]" else char for char in text)


def escape_key_part(value: str) -> str:
    """``value`` as a safe, collision-free part of a Redis key.

    Percent-encodes everything but ASCII letters, digits and ``_.-~``; a result longer than 100
    characters becomes ``#`` and the SHA-256 of ``value`` (``#`` never appears otherwise).
    """
    escaped = quote(value, safe="")
    if len(escaped) > _MAX_KEY_PART:
        return "#" + hashlib.sha256(value.encode()).hexdigest()
    return escaped


def _cluster_client(url: str, timeout: float) -> RedisCluster:
    """A cluster client for ``redis+cluster://[user:password@]host:port[,host:port...][?options]``:
    the nodes listed are where it starts looking for the cluster's slots."""
    scheme, _, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    if not slash:
        netloc, query, tail = rest.partition("?")
        tail = query + tail
    credentials, at, hosts = netloc.rpartition("@")
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        host, colon, port = part.rpartition(":")
        if not colon or not port.isdigit() or not host:
            raise ValueError(f"a Redis Cluster URL names its nodes as host:port, not {part!r}")
        nodes.append((host.strip("[]"), int(port)))
    path, _, query = tail.partition("?")
    if path.strip("/") not in ("", "0"):
        raise ValueError("a Redis Cluster has database 0 only")
    first = f"{CLUSTER_SCHEMES[scheme]}://{credentials}{at}{nodes[0][0]}:{nodes[0][1]}/0"
    return RedisCluster.from_url(  # pyright: ignore[reportUnknownMemberType]
        first + (f"?{query}" if query else ""),
        startup_nodes=[ClusterNode(host, port) for host, port in nodes[1:]],
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        # a few quick retries with a fresh slot map ride out a redirection or a moved slot; a
        # failover takes longer and surfaces as StorageUnavailableError
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        **_DRIVER_INFO,
    )


def _connection_options(client: RedisClient) -> dict[str, Any]:
    if isinstance(client, RedisCluster):
        return client.get_connection_kwargs()
    return client.connection_pool.connection_kwargs


BUCKETS: Final = 16
"""How many buckets (hash tags, so cluster slots) a tenant's conversations are spread over."""


def slot_tag(conversation_id: str, tenant: str | None, buckets: int = BUCKETS) -> str:
    """The hash tag of the keys of ``conversation_id`` (whose tenant is ``tenant``):
    ``{<tenant, escaped>:<bucket>}``, the bucket the CRC-32 of the id modulo ``buckets`` (an
    empty tenant part for an id without a tenant). The message store's and the session store's
    keys of a conversation carry the same tag, so a cluster keeps them on one slot."""
    return (
        "{"
        + ("" if tenant is None else escape_key_part(tenant))
        + f":{bucket_of(conversation_id, buckets)}}}"
    )


def bucket_of(conversation_id: str, buckets: int = BUCKETS) -> int:
    """The bucket of ``conversation_id``: the CRC-32 of its UTF-8 bytes modulo ``buckets``."""
    return zlib.crc32(conversation_id.encode()) % buckets


class RedisConnection:
    """A redis-py asyncio client with agentkeep's timeouts, ownership and error mapping.

    Args:
        redis_client: A client to use (not closed by :meth:`aclose`): ``redis.asyncio.Redis``
            or ``redis.asyncio.RedisCluster``. It must not decode responses; its own timeouts
            apply.
        redis_url: Create a client for this URL (closed by :meth:`aclose`), e.g.
            ``"redis://localhost:6379/0"``, or a cluster's:
            ``"redis+cluster://host:7000,host:7001"`` (see :data:`CLUSTER_SCHEMES`).
        timeout: Seconds to wait for a connection and for each reply of a client created here.

    Raises:
        ValueError: Neither or both of ``redis_client`` and ``redis_url``, or a client that decodes
            responses.
    """

    backend: Final = "redis"

    def __init__(
        self,
        redis_client: RedisClient | None = None,
        *,
        redis_url: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        if (redis_client is None) == (redis_url is None):
            raise ValueError("pass either redis_client or redis_url")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.timeout = timeout
        if redis_url is not None and redis_url.partition("://")[0] in CLUSTER_SCHEMES:
            redis_client = _cluster_client(redis_url, timeout)
            self.owns_client = True
        elif redis_client is None:
            redis_client = aioredis.Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
                cast(str, redis_url),
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
                # reconnect once at once after a dropped connection; never resend on a timeout
                retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                **_DRIVER_INFO,
            )
            self.owns_client = True
        else:
            self.owns_client = False
            options = _connection_options(redis_client)
            if not {"driver_info", "lib_name", "lib_version"} & options.keys():
                options.update(_DRIVER_INFO)  # what redis-py would read from disk per connection
        self.client: RedisClient = redis_client
        self.cluster = isinstance(redis_client, RedisCluster)
        """Whether the client is a Redis Cluster's (every script's keys then share one slot)."""
        options = _connection_options(redis_client)
        if options.get("decode_responses"):
            raise ValueError("the Redis client must not decode responses (decode_responses=False)")
        self.address = _address(redis_client)
        self._closed = False
        reply_timeout = options.get("socket_timeout")
        self.reply_timeout: float | None = float(reply_timeout) if reply_timeout else None
        self._clock_offset_ms: float | None = None
        self._stale_slots = False  # a cluster node failed: read the slot map again before the next call

    def check_prefix(self, key_prefix: str) -> None:
        """Refuse, with a cluster client, a key prefix holding a brace: it would change the hash
        tag of every key (a prefix with ``{...}`` puts all of them on one slot, one with ``{}``
        spreads a script's keys over several).

        Raises:
            ValueError: The client is a cluster's and ``key_prefix`` holds ``{`` or ``}``.
        """
        if self.cluster and ("{" in key_prefix or "}" in key_prefix):
            raise ValueError("with Redis Cluster the key prefix must not contain '{' or '}'")

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    def check_open(self, what: str = "store") -> None:
        """Raise :class:`~agentkeep.errors.StorageClosedError` after :meth:`aclose`."""
        if self._closed:
            raise StorageClosedError(f"the redis {what} is closed", backend=self.backend)

    async def run(
        self,
        script: RedisScript,
        keys: Sequence[str],
        args: Sequence[bytes | str | int],
        *,
        writes: bool = False,
    ) -> Any:
        """Run ``script`` with ``keys`` and ``args``; returns its reply.

        Args:
            writes: The script changes data and is safe to repeat: a failed connection then raises
                :class:`~agentkeep.errors.OutcomeUnknownError` (the script may have run).

        Raises:
            StorageUnavailableError: The server cannot be reached or did not answer in time
                (``OutcomeUnknownError`` for a script that ``writes``).
            StorageError: The server refused the script (e.g. a key of ours holds another type).
        """
        await self._fresh_slots()
        with self._mapped_errors(writes=writes):
            try:
                return await self.client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                return await self.client.eval(script.source, len(keys), *keys, *args)

    async def run_many(
        self, calls: Sequence[tuple[RedisScript, Sequence[str], Sequence[bytes | str | int]]]
    ) -> list[Any]:
        """Run read-only scripts (script, keys, args) in one pipeline (with a cluster client, one
        per node their keys live on); their replies in order. Errors as in :meth:`run`."""
        if not calls:
            return []
        await self._fresh_slots()
        with self._mapped_errors():
            replies = await self._pipelined(calls, "evalsha")
            missing = [k for k, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if missing:
                again = await self._pipelined([calls[k] for k in missing], "eval")
                for k, reply in zip(missing, again, strict=True):
                    replies[k] = reply
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
            return replies

    async def _pipelined(
        self, calls: Sequence[tuple[RedisScript, Sequence[str], Sequence[bytes | str | int]]], command: str
    ) -> list[Any]:
        commands: list[tuple[bytes | str | int, ...]] = []
        for script, keys, args in calls:
            body = script.sha if command == "evalsha" else script.source
            commands.append((command.upper(), body, len(keys), *keys, *args))
        return await self._send(commands)

    async def _send(self, commands: Sequence[tuple[bytes | str | int, ...]]) -> list[Any]:
        pipe: Any = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))

    async def execute_many(self, commands: Sequence[tuple[bytes | str | int, ...]]) -> list[Any]:
        """Run read-only commands in one pipeline (one per node with a cluster client); their
        replies in order. Errors as in :meth:`run`."""
        if not commands:
            return []
        await self._fresh_slots()
        with self._mapped_errors():
            replies = await self._send(commands)
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
            return replies

    async def execute_atomic(self, commands: Sequence[tuple[bytes | str | int, ...]]) -> list[Any]:
        """Run read-only commands on keys of one hash tag as one transaction (``MULTI`` /
        ``EXEC``): their replies in order, a command's error in its place (as an exception
        object, not raised). Unlike a script, no reply is copied through Lua: a long ``LRANGE``
        comes back as fast as on its own. Errors reaching the server as in :meth:`run`.

        Not for a cluster client: redis-py runs its transactions on a thread of their own and
        waits for it, blocking the event loop."""
        if self.cluster:
            raise TypeError("execute_atomic() needs a client of one server, not a cluster client")
        await self._fresh_slots()
        with self._mapped_errors():
            pipe: Any = self.client.pipeline(transaction=True)
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))

    async def start_by(self) -> int:
        """A time on the server's clock (ms since the epoch) by which a script sent now must start
        for its caller still to be waiting for the reply, or 0 when the client has no reply
        timeout. Scripts that change data refuse to start later: a server paused (or busy) past
        the caller's timeout must not apply a change the caller was told had failed.

        The server's clock is read once (``TIME``); the limit is 80 % of the reply timeout from
        now, which leaves the reply time to arrive.
        """
        if self.reply_timeout is None:
            return 0
        if self._clock_offset_ms is None:
            before = time.time()
            seconds, micros = await self.execute("TIME")
            after = time.time()
            server_ms = int(seconds) * 1000 + int(micros) / 1000
            self._clock_offset_ms = server_ms - (before + after) * 500
        return int(time.time() * 1000 + self._clock_offset_ms + self.reply_timeout * 800)

    async def scan(
        self, pattern: str, *, count: int = 1000, key_type: str | None = None
    ) -> AsyncIterator[list[bytes]]:
        """The keys matching ``pattern`` (see :func:`glob_escape`), one ``SCAN`` reply at a time
        (as ``SCAN`` does, a key may come twice); only keys of ``key_type`` when given."""
        typed: tuple[str, ...] = ("TYPE", key_type) if key_type else ()
        if isinstance(self.client, RedisCluster):  # every master's keys, one master after another
            with self._mapped_errors():
                masters = self.client.get_primaries() or [None]
            for node in masters:
                cursor: bytes | int = 0
                while True:
                    with self._mapped_errors():
                        reply: Any = await self.client.execute_command(  # pyright: ignore[reportUnknownMemberType]
                            "SCAN", cursor, "MATCH", pattern, "COUNT", count, *typed, target_nodes=node
                        )
                    cursor, keys = reply
                    yield cast("list[bytes]", keys)
                    if int(cursor) == 0:
                        break
            return
        cursor = 0
        while True:
            cursor, keys = await self.execute("SCAN", cursor, "MATCH", pattern, "COUNT", count, *typed)
            yield cast("list[bytes]", keys)
            if int(cursor) == 0:
                return

    async def execute(self, *command: bytes | str | int) -> Any:
        """Run one Redis command; errors as in :meth:`run`."""
        await self._fresh_slots()
        with self._mapped_errors():
            return await self.client.execute_command(*command)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]

    async def _fresh_slots(self) -> None:
        """Make a cluster client's slot map current before a command.

        A client that has not read the slot map yet (new, or closed by redis-py after a
        ``CLUSTERDOWN``) reads it first: redis-py would otherwise choose the node of every
        command sent meanwhile before it knows the slots, send each to one default node, meet a
        ``MOVED`` per command and, every fifth one, close all of its connections, failing the
        commands in flight on them (a burst of first requests turned into a storm of errors).
        After a cluster node failed, the map is read again (from a node that answers): redis-py
        keeps sending to a master that stopped answering until a refused connection or a
        redirection, so without this the store would not find the replica that took over.
        """
        client = self.client
        if not isinstance(client, RedisCluster):
            return
        with self._mapped_errors():
            if self._stale_slots:
                self._stale_slots = False
                await client.nodes_manager.initialize()
            await client.initialize()  # returns at once when the map is read

    @contextmanager
    def _mapped_errors(self, *, writes: bool = False) -> Generator[None]:
        """redis-py's errors as agentkeep's (see :meth:`run`)."""
        try:
            yield
        except _UNAVAILABLE as exc:
            self._stale_slots = self.cluster
            # A write's request may have reached the server before the connection failed (and
            # redis-py resends after a drop or, on a cluster, after a failed node, so the last
            # error may be a failed reconnect or a CLUSTERDOWN that followed a lost reply).
            raise self.unavailable(exc, outcome_unknown=writes) from exc
        except (AttributeError, TypeError) as exc:
            if not _lost_transport(exc):
                raise
            # redis-py lets the transport's own error out when a connection is closed under a
            # command (redis/redis-py#4287; a cluster client closes every connection after one
            # node's timeout): the connection is gone, and a write's outcome is unknown
            self._stale_slots = self.cluster
            raise self.unavailable(
                RedisConnectionError(f"the connection was closed under the command ({exc})"),
                outcome_unknown=writes,
            ) from exc
        except RedisError as exc:
            text = str(exc)
            if text.startswith(_CORRUPT_META):  # a script found a conversation's counters damaged
                key, _, detail = text[len(_CORRUPT_META) :].partition(": ")
                raise CorruptRecordError(
                    f"its bookkeeping is damaged ({detail})", backend=self.backend, conversation_id=key
                ) from exc
            raise StorageError(f"redis at {self.address}: {exc}", backend=self.backend) from exc

    def unavailable(self, cause: BaseException, *, outcome_unknown: bool = False) -> StorageUnavailableError:
        """The error for a server that cannot be reached (``cause`` describes why); with
        ``outcome_unknown``, for a write that may have been applied."""
        reason = str(cause) or type(cause).__name__
        kind = OutcomeUnknownError if outcome_unknown else StorageUnavailableError
        return kind(reason, backend=self.backend, address=self.address)

    async def aclose(self) -> None:
        """Close the client if it was created here; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.owns_client:
            await self.client.aclose()

    def __repr__(self) -> str:
        return f"RedisConnection({self.address!r}, owns_client={self.owns_client})"


def _address(client: RedisClient) -> str:
    if isinstance(client, RedisCluster):
        nodes = ",".join(client.nodes_manager.startup_nodes)
        ssl = issubclass(client.get_connection_kwargs().get("connection_class") or object, SSLConnection)
        return f"{'rediss' if ssl else 'redis'}+cluster://{nodes}"
    pool = client.connection_pool
    options = pool.connection_kwargs
    db = options.get("db", 0)
    if issubclass(pool.connection_class, UnixDomainSocketConnection):
        return f"unix://{options.get('path', '')}?db={db}"
    scheme = "rediss" if issubclass(pool.connection_class, SSLConnection) else "redis"
    return f"{scheme}://{options.get('host', 'localhost')}:{options.get('port', 6379)}/{db}"
