"""A session store on Redis: one hash per session, saved with a compare-and-set Lua script.

Each session lives in ``{key_prefix}:{agent}:{conversation}`` (both parts escaped by
:func:`~agentkeep._db.redis.escape_key_part`, so no id can collide with another or reach
outside the prefix) as a hash with the version ``v``, the JSON payload ``p``
(``agent.serialize_session(session)``) and the hash's layout ``f``
(:data:`SESSION_LAYOUT_VERSION`; a session of a newer layout is refused with
:class:`~agentkeep.errors.SchemaVersionError`, on reading and on saving over it).

**Optimistic versions.** A save runs one Lua script that compares the stored version with the one
the session was read at (nothing stored, for a new session) and writes version + 1 only if they
match; otherwise it raises :class:`~agentkeep.errors.ConflictError` and changes nothing. Redis runs
the script atomically, so concurrent saves from any number of processes let exactly one win.

Connection handling, timeouts and error mapping are those of
:class:`~agentkeep._db.redis.RedisConnection` (an unreachable server raises
:class:`~agentkeep.errors.StorageUnavailableError` within ``timeout`` seconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._db.redis import RedisConnection, RedisScript, escape_key_part
from ..errors import SchemaVersionError, SessionFormatError
from ..sessions import AgentSession
from .base import (
    AgentSessionStore,
    agent_key,
    check_conversation_id,
    conflict_error,
    encode_session,
    restore_session,
    session_version,
    set_session_version,
)

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from ..agent import Agent

__all__ = ["DEFAULT_KEY_PREFIX", "SESSION_LAYOUT_VERSION", "RedisSessionStore"]

DEFAULT_KEY_PREFIX: Final = "agent_sessions"
"""The key prefix of a session store when none is given."""

SESSION_LAYOUT_VERSION: Final = 1
"""The layout of a stored session hash (field ``f``); a session of a newer layout is refused."""

# ARGV: the version the session was read at ('' for none), the new version, the payload, the ttl
# in ms (0: none), this layout. Returns 'ok', 'newer:<layout>' or the stored version.
_SAVE = RedisScript("""
local stored = redis.call('HMGET', KEYS[1], 'v', 'f')
local layout = tonumber(stored[2] or '1')
if layout == nil or layout > tonumber(ARGV[5]) then return 'newer:' .. tostring(stored[2]) end
if (stored[1] or '') ~= ARGV[1] then return stored[1] or '' end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'p', ARGV[3], 'f', ARGV[5])
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 'ok'
""")


class RedisSessionStore(AgentSessionStore):
    """Sessions in Redis, keyed by (agent name, conversation id), with optimistic versions.

    Args:
        redis_client: A redis-py asyncio client to use; the store never closes it. It must not
            decode responses, and its own timeouts apply.
        redis_url: Create (and own) a client for this URL instead, e.g. ``"redis://host:6379/0"``.
        key_prefix: Namespace of every key the store writes.
        ttl: Seconds after its last save at which a session expires (``None``: never).
        timeout: Connect and reply timeout in seconds for a client created from ``redis_url``.

    Example:
        ```python
        store = RedisSessionStore.from_url("redis://localhost:6379/0", ttl=30 * 86400)
        session = await store.get_session(agent, "conversation-1")
        await agent.run("Hello", session=session)
        await store.save_session(agent, "conversation-1", session)
        await store.aclose()
        ```
    """

    backend = "redis"
    DEFAULT_KEY_PREFIX = DEFAULT_KEY_PREFIX

    def __init__(
        self,
        redis_client: aioredis.Redis | None = None,
        *,
        redis_url: str | None = None,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        ttl: float | None = None,
        timeout: float = 5.0,
    ) -> None:
        if not key_prefix:
            raise ValueError("key_prefix must not be empty")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive")
        self.connection = RedisConnection(redis_client, redis_url=redis_url, timeout=timeout)
        self.key_prefix = key_prefix
        self.ttl = ttl

    @classmethod
    def from_url(
        cls, url: str, *, key_prefix: str = DEFAULT_KEY_PREFIX, ttl: float | None = None, timeout: float = 5.0
    ) -> RedisSessionStore:
        """A store with its own client for ``url`` (closed by :meth:`aclose`)."""
        return cls(redis_url=url, key_prefix=key_prefix, ttl=ttl, timeout=timeout)

    def session_key(self, agent: Agent, conversation_id: str) -> str:
        """The Redis key of the session of ``agent`` stored under ``conversation_id``."""
        return f"{self.key_prefix}:{escape_key_part(agent_key(agent))}:{escape_key_part(conversation_id)}"

    def _key(self, agent: Agent, conversation_id: str) -> str:
        check_conversation_id(conversation_id)
        self.connection.check_open("session store")
        return self.session_key(agent, conversation_id)

    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Store ``session`` as the next version of ``conversation_id``.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at (nothing is
                changed).
            SessionFormatError: A state value cannot be serialized.
            StorageUnavailableError: The server cannot be reached.
        """
        key = self._key(agent, conversation_id)
        payload = encode_session(agent, session)
        expected = session_version(session)
        version = (expected or 0) + 1
        ttl = max(1, round(self.ttl * 1000)) if self.ttl is not None else 0
        reply = await self.connection.run(
            _SAVE,
            [key],
            ["" if expected is None else str(expected), str(version), payload, ttl, SESSION_LAYOUT_VERSION],
        )
        if reply.startswith(b"newer:"):
            raise self._newer(agent, conversation_id, reply[6:])
        if reply != b"ok":
            current = int(reply) if reply else None
            raise conflict_error(
                self.backend, agent_key(agent), conversation_id, expected=expected, current=current
            )
        set_session_version(session, version)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session (a new object each call), or a new empty one.

        Raises:
            SessionFormatError: The stored payload or version cannot be read.
            StorageUnavailableError: The server cannot be reached.
        """
        key = self._key(agent, conversation_id)
        stored: list[bytes | None] = await self.connection.execute("HMGET", key, "v", "p", "f")
        version, payload, layout = stored
        if version is None and payload is None:
            return agent.create_session(session_id=conversation_id)
        if layout is not None and (not layout.isdigit() or int(layout) > SESSION_LAYOUT_VERSION):
            raise self._newer(agent, conversation_id, layout)
        where = f"redis: stored session {conversation_id!r} of agent {agent_key(agent)!r}"
        if version is None or payload is None or not version.isdigit():
            raise SessionFormatError(f"{where}: the stored session is incomplete or has no valid version")
        return restore_session(agent, payload, version=int(version), where=where)

    def _newer(self, agent: Agent, conversation_id: str, layout: bytes) -> SchemaVersionError:
        shown = layout.decode(errors="replace")
        return SchemaVersionError(
            f"redis: stored session {conversation_id!r} of agent {agent_key(agent)!r} has layout "
            f"{shown!r}; this agentkeep reads layout {SESSION_LAYOUT_VERSION} at most: upgrade agentkeep",
            backend=self.backend,
        )

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored.

        Raises:
            StorageUnavailableError: The server cannot be reached.
        """
        key = self._key(agent, conversation_id)
        return bool(await self.connection.execute("DEL", key))

    async def aclose(self) -> None:
        """Close the client if the store created it; later calls raise ``StorageClosedError``."""
        await self.connection.aclose()

    def __repr__(self) -> str:
        return f"RedisSessionStore({self.connection.address!r}, key_prefix={self.key_prefix!r})"
