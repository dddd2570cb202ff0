"""A session store on Redis: one hash per session, saved with a compare-and-set Lua script.

Each session lives in ``{key_prefix}:{agent}:{conversation}`` (both parts escaped by
:func:`~agentkeep._db.redis.escape_key_part`, so no id can collide with another or reach
outside the prefix; a part longer than 100 escaped characters is kept as ``#`` and its SHA-256)
as a hash with the fields

* ``v``: the version;
* ``p``: the payload (JSON, ``agent.serialize_session(session)``, or its encrypted envelope);
* ``f``: the hash's layout (:data:`SESSION_LAYOUT_VERSION`; a session of a newer layout is refused
  with :class:`~agentkeep.errors.SchemaVersionError`, on reading and on saving over it);
* ``a`` and ``c``: the agent and the conversation id as they are (UTF-8), written by every save
  with the payload, so that a hashed key part can be told back. Reading a session never needs
  them; sessions saved by agentkeep before they existed have neither until their next save.

**Optimistic versions.** A save runs one Lua script that compares the stored version with the one
the session was read at (nothing stored, for a new session) and writes version + 1 only if they
match; otherwise it raises :class:`~agentkeep.errors.ConflictError` and changes nothing. Redis runs
the script atomically, so concurrent saves from any number of processes let exactly one win.

**Encryption at rest.** Given a :class:`~agentkeep.encryption.KeyRing`, the store keeps payloads in
their encrypted envelope, bound to the agent, the conversation id and the version they are stored
as; :meth:`RedisSessionStore.stored_payloads` and :meth:`RedisSessionStore.replace_payload`
(:class:`~agentkeep.session_stores.base.SupportsPayloadRewrite`) let ``agentkeep keys rotate`` re-encrypt
them in place. Listing takes the agent and conversation id from the key, or from the ``a`` and
``c`` fields where the key keeps only a hash (checking that they escape back to the key's parts).
A session whose key holds a hashed part and that was last saved before those fields existed
cannot be listed (so a rotation leaves it as it is) until its next save.

**Redis Cluster.** With a ``redis.asyncio.RedisCluster`` client (or a ``redis+cluster://`` URL)
the key carries the hash tag of the conversation's bucket, as the message store's keys do:
``{key_prefix}:{<tenant>:<b>}:{agent}:{conversation}`` (see
:func:`~agentkeep._db.redis.slot_tag`), so a conversation's session and history share a slot.
On one server the key keeps its form without the tag (sessions saved before stay where they are;
no session was ever stored on a cluster, whose clients agentkeep refused until then). Listing
for key rotation scans every master and reads both forms.

Connection handling, timeouts and error mapping are those of
:class:`~agentkeep._db.redis.RedisConnection` (an unreachable server raises
:class:`~agentkeep.errors.StorageUnavailableError` within ``timeout`` seconds).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final, TypeGuard, cast
from urllib.parse import unquote

from .._db.redis import RedisClient, RedisConnection, RedisScript, escape_key_part, glob_escape, slot_tag
from ..errors import SchemaVersionError, SessionFormatError
from ..message_stores.redis import RedisMessageStore
from ..sessions import ISOLATION_SEPARATOR, AgentSession
from .base import (
    AgentSessionStore,
    StoredPayload,
    agent_key,
    check_conversation_id,
    conflict_error,
    encode_session,
    next_version,
    restore_session,
    session_version,
    set_session_version,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..agent import Agent
    from ..encryption import KeyRing
    from ..turn_writes import HeldAppend

__all__ = ["DEFAULT_KEY_PREFIX", "SESSION_LAYOUT_VERSION", "RedisSessionStore"]

DEFAULT_KEY_PREFIX: Final = "agent_sessions"
"""The key prefix of a session store when none is given."""

SESSION_LAYOUT_VERSION: Final = 1
"""The layout of a stored session hash (field ``f``); a session of a newer layout is refused."""
# Still 1 with the ``a`` and ``c`` fields: they are optional extras that no reader needs, so a
# version bump would only make agentkeep releases that read layout 1 refuse sessions they read
# correctly. Those releases ignore the fields, and a save of theirs (which rewrites only v, p and
# f) leaves them in place and still right: the key is made from the very ids they hold. Bump the
# layout only for a change older releases would misread.

# ARGV: the version the session was read at ('' for none), the new version, the payload, the ttl
# in ms (0: none), this layout, the agent, the conversation id. Returns 'ok', 'newer:<layout>' or
# the stored version.
_SAVE_CHECK: Final = """
local stored = redis.call('HMGET', SKEY, 'v', 'f')
local layout = tonumber(stored[2] or '1')
if layout == nil or layout > tonumber(SARGV[5]) then return 'newer:' .. tostring(stored[2]) end
if (stored[1] or '') ~= SARGV[1] then return stored[1] or '' end
"""
_SAVE_WRITE: Final = """
redis.call('HSET', SKEY, 'v', SARGV[2], 'p', SARGV[3], 'f', SARGV[5], 'a', SARGV[6], 'c', SARGV[7])
if tonumber(SARGV[4]) > 0 then redis.call('PEXPIRE', SKEY, SARGV[4]) end
"""
_SAVE = RedisScript("local SKEY, SARGV = KEYS[1], ARGV\n" + _SAVE_CHECK + _SAVE_WRITE + "return 'ok'\n")
_SAVE_ARGS: Final = 7
_SAVE_WITH_APPEND = RedisMessageStore.script_with_append(_SAVE_CHECK, _SAVE_WRITE, caller_args=_SAVE_ARGS)
"""The save and a held history append in one script (:mod:`agentkeep.turn_writes`)."""

# KEYS: session hashes; ARGV: fields. Returns, for each hash, false if it is no hash, else the
# values of those fields (each false when missing).
_FETCH = RedisScript("""
local found = {}
for i, key in ipairs(KEYS) do
  if redis.call('TYPE', key).ok == 'hash' then
    found[i] = redis.call('HMGET', key, unpack(ARGV))
  else
    found[i] = false
  end
end
return found
""")

# ARGV: the stored version, the stored payload, the new payload, this layout, the agent, the
# conversation id. Sets p only if the hash still holds that version and payload (in a layout this
# agentkeep writes) and no other agent or conversation id (a and c may be missing); the TTL is
# kept. Returns 1 if it did, else 0.
_REPLACE = RedisScript("""
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return 0 end
local stored = redis.call('HMGET', KEYS[1], 'v', 'p', 'f', 'a', 'c')
if stored[1] ~= ARGV[1] or stored[2] ~= ARGV[2] then return 0 end
local layout = tonumber(stored[3] or '1')
if layout == nil or layout > tonumber(ARGV[4]) then return 0 end
if (stored[4] and stored[4] ~= ARGV[5]) or (stored[5] and stored[5] ~= ARGV[6]) then return 0 end
redis.call('HSET', KEYS[1], 'p', ARGV[3])
return 1
""")

_SCAN_BATCH: Final = 1000
"""How many keys one ``SCAN`` step looks at."""
_FETCH_BATCH: Final = 100
"""How many session hashes one run of :data:`_FETCH` reads at most."""
_HASHED_PART: Final = re.compile(r"#[0-9a-f]{64}")
"""A key part :func:`escape_key_part` made of an id too long to keep: ``#`` and its SHA-256."""


class RedisSessionStore(AgentSessionStore):
    """Sessions in Redis, keyed by (agent name, conversation id), with optimistic versions.

    Args:
        redis_client: A redis-py asyncio client to use (``redis.asyncio.Redis``, or
            ``redis.asyncio.RedisCluster`` for Redis Cluster); the store never closes it. It must
            not decode responses, and its own timeouts apply.
        redis_url: Create (and own) a client for this URL instead, e.g. ``"redis://host:6379/0"``,
            or a cluster's, ``"redis+cluster://host:7000,host:7001"``.
        key_prefix: Namespace of every key the store writes.
        ttl: Seconds after its last save at which a session expires (``None``: never).
        timeout: Connect and reply timeout in seconds for a client created from ``redis_url``.
        key_ring: Encrypt session payloads with its current key (decrypt with any of its keys);
            see :mod:`agentkeep.encryption`.

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
        redis_client: RedisClient | None = None,
        *,
        redis_url: str | None = None,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
    ) -> None:
        if not key_prefix:
            raise ValueError("key_prefix must not be empty")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive")
        self.connection = RedisConnection(redis_client, redis_url=redis_url, timeout=timeout)
        self.connection.check_prefix(key_prefix)
        self.key_prefix = key_prefix
        self.ttl = ttl
        self.key_ring = key_ring

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
    ) -> RedisSessionStore:
        """A store with its own client for ``url`` (closed by :meth:`aclose`)."""
        return cls(redis_url=url, key_prefix=key_prefix, ttl=ttl, timeout=timeout, key_ring=key_ring)

    def session_key(self, agent: Agent, conversation_id: str, *, tagged: bool | None = None) -> str:
        """The Redis key of the session of ``agent`` stored under ``conversation_id``; ``tagged``
        (default: with a cluster client) gives the key the hash tag of the conversation's bucket
        (see the module docs)."""
        return self._named(agent_key(agent), conversation_id, tagged=tagged)

    def _named(self, agent: str, conversation_id: str, *, tagged: bool | None = None) -> str:
        parts = f"{escape_key_part(agent)}:{escape_key_part(conversation_id)}"
        if not (self.connection.cluster if tagged is None else tagged):
            return f"{self.key_prefix}:{parts}"
        tenant, separator, _ = conversation_id.partition(ISOLATION_SEPARATOR)
        return f"{self.key_prefix}:{slot_tag(conversation_id, tenant if separator else None)}:{parts}"

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
        await self.save_session_with_appends(agent, conversation_id, session, ())

    # -- a turn in one step (agentkeep.turn_writes.SupportsTurnCommit) ---------------------------
    def shares_database(self, store: object) -> bool:
        """Whether ``store`` is a :class:`~agentkeep.message_stores.redis.RedisMessageStore` on
        this store's server: its held append then goes into the save's script (on a cluster, the
        append to the session's own conversation: their keys share a slot)."""
        return isinstance(store, RedisMessageStore) and store.connection.address == self.connection.address

    async def save_session_with_appends(
        self, agent: Agent, conversation_id: str, session: AgentSession, appends: Sequence[HeldAppend]
    ) -> None:
        """Save ``session`` and write a held append in one script: both or neither. The append to
        the session's own conversation joins (any one on a single server); other appends are
        written first, each in its own step.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at (nothing of
                the joined append is written either).
            SessionFormatError: A state value cannot be serialized (nothing is written).
            MessageIdConflictError: The joined append reuses a stored message's id (nothing is written).
            StorageUnavailableError: The server cannot be reached.
        """
        key = self._key(agent, conversation_id)
        name = agent_key(agent)
        # The version the payload is bound to (encode_session) is the one the script writes.
        payload = encode_session(agent, session, conversation_id=conversation_id, key_ring=self.key_ring)
        expected = session_version(session)
        version = next_version(session)
        ttl = max(1, round(self.ttl * 1000)) if self.ttl is not None else 0
        arguments: list[Any] = [
            "" if expected is None else str(expected),
            str(version),
            payload,
            ttl,
            SESSION_LAYOUT_VERSION,
            name,  # a and c: the ids as they are, for listing (stored_payloads)
            conversation_id,
        ]
        joined: HeldAppend | None = None
        for held in appends:
            same_slot = not self.connection.cluster or held.conversation_id == conversation_id
            if joined is None and self.shares_database(held.store) and same_slot:
                joined = held
            else:
                await held.write()  # cannot join the script: its own step, first
        if joined is None:
            reply = await self.connection.run(_SAVE, [key], arguments)
        else:
            store = cast("RedisMessageStore", joined.store)
            reply, _ = await store.append_with_session(joined, _SAVE_WITH_APPEND, key, arguments)
        if reply.startswith(b"newer:"):
            raise self._newer(agent, conversation_id, reply[6:])
        if reply != b"ok":
            current = int(reply) if reply else None
            raise conflict_error(self.backend, name, conversation_id, expected=expected, current=current)
        set_session_version(session, version)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session (a new object each call), or a new empty one.

        Raises:
            SessionFormatError: The stored payload or version cannot be read.
            DecryptionError: The payload is encrypted under a key the ring does not hold, or does
                not decrypt with it (nothing is changed).
            StorageUnavailableError: The server cannot be reached.
        """
        key = self._key(agent, conversation_id)
        stored: list[bytes | None] = await self.connection.execute("HMGET", key, "v", "p", "f")
        return self._restored(agent, conversation_id, *stored)

    async def get_session_if_changed(
        self, agent: Agent, conversation_id: str, *, version: int | None
    ) -> AgentSession | None:
        """``None`` if ``version`` is still the stored one (only the version is fetched), else what
        :meth:`get_session` returns."""
        if version is None:
            return await self.get_session(agent, conversation_id)
        key = self._key(agent, conversation_id)
        stored_version, layout = await self.connection.execute("HMGET", key, "v", "f")
        if stored_version == str(version).encode() and not _newer_layout(layout):
            return None
        return await self.get_session(agent, conversation_id)

    def _restored(
        self,
        agent: Agent,
        conversation_id: str,
        version: bytes | None,
        payload: bytes | None,
        layout: bytes | None,
    ) -> AgentSession:
        if version is None and payload is None:
            return agent.create_session(session_id=conversation_id)
        if _newer_layout(layout):
            raise self._newer(agent, conversation_id, layout)
        where = f"redis: stored session {conversation_id!r} of agent {agent_key(agent)!r}"
        if version is None or payload is None or not version.isdigit():
            raise SessionFormatError(f"{where}: the stored session is incomplete or has no valid version")
        return restore_session(
            agent,
            payload,
            version=int(version),
            where=where,
            backend=self.backend,
            conversation_id=conversation_id,
            key_ring=self.key_ring,
        )

    def _newer(self, agent: Agent, conversation_id: str, layout: bytes) -> SchemaVersionError:
        return self._layout_error(f"stored session {conversation_id!r} of agent {agent_key(agent)!r}", layout)

    def _layout_error(self, what: str, layout: bytes) -> SchemaVersionError:
        shown = layout.decode(errors="replace")
        return SchemaVersionError(
            f"redis: {what} has layout {shown!r}; this agentkeep reads layout "
            f"{SESSION_LAYOUT_VERSION} at most: upgrade agentkeep",
            backend=self.backend,
        )

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored.

        Raises:
            StorageUnavailableError: The server cannot be reached.
        """
        key = self._key(agent, conversation_id)
        return bool(await self.connection.execute("DEL", key))

    # -- payloads as stored (SupportsPayloadRewrite, for key rotation) ---------------------------
    async def stored_payloads(
        self, *, after: tuple[str, str] | None = None, limit: int = 100
    ) -> list[StoredPayload]:
        """Up to ``limit`` stored sessions ordered by (agent, conversation id) (code-point order),
        strictly after ``after``.

        Redis keeps no order: every call scans (``SCAN``) all keys of the database for the
        prefix's session keys and sorts them here, then reads only the sessions it returns (one
        script run per 100). The agent and conversation id come from the key; where the key keeps
        only the hash of one (it was too long), they come from the hash's ``a`` and ``c`` fields,
        which every call reads first for all such keys (one script run per 100), and which must
        escape back to the key's parts.

        Skipped: a session whose key holds a hashed part and that was last saved before agentkeep
        stored the ``a`` and ``c`` fields (its ids are stored nowhere: it is listed, and so
        rotated, only after its next save), a hash whose ``a`` or ``c`` does not belong to its key
        (not written by this store: foreign or corrupt), other keys under the prefix, and
        incomplete or unreadable hashes.

        Raises:
            ValueError: ``limit`` is less than 1.
            SchemaVersionError: A session of a newer layout is stored (upgrade agentkeep).
            StorageUnavailableError: The server cannot be reached.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.connection.check_open("session store")
        plain, hashed = await self._session_keys()
        known = plain + await self._recovered(hashed)
        candidates = sorted(item for item in known if after is None or item[:2] > after)
        found: list[StoredPayload] = []
        while candidates and len(found) < limit:
            batch, candidates = candidates[:_FETCH_BATCH], candidates[_FETCH_BATCH:]
            keys = [key for _, _, key in batch]
            replies: list[Any] = await self.connection.run(_FETCH, keys, ["v", "p", "f", "a", "c"])
            for (agent, conversation_id, _), reply in zip(batch, replies, strict=True):
                stored = self._stored(agent, conversation_id, reply)
                if stored is not None:
                    found.append(stored)
        return found[:limit]

    async def _session_keys(self) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
        """The session keys under the prefix: (agent, conversation id, key) of those made of two
        escaped ids, and (agent part, conversation part, key) of those with a hashed part."""
        pattern = glob_escape(self.key_prefix) + ":*"
        start = self.key_prefix.encode() + b":"
        plain: set[tuple[str, str, str]] = set()
        hashed: set[tuple[str, str, str]] = set()
        async for batch in self.connection.scan(pattern, count=_SCAN_BATCH):
            for raw in batch:
                parts = _key_parts(_untagged(raw[len(start) :])) if raw.startswith(start) else None
                if parts is None:
                    continue
                agent, conversation_id = _unescaped(parts[0]), _unescaped(parts[1])
                if agent is not None and conversation_id is not None:
                    plain.add((agent, conversation_id, raw.decode()))
                else:
                    hashed.add((*parts, raw.decode()))
        return sorted(plain), sorted(hashed)

    async def _recovered(self, hashed: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """(agent, conversation id, key) of the keys in ``hashed`` ((agent part, conversation
        part, key), a part hashed) whose hash holds the ids (``a`` and ``c``) of its key."""
        found: list[tuple[str, str, str]] = []
        for start in range(0, len(hashed), _FETCH_BATCH):
            batch = hashed[start : start + _FETCH_BATCH]
            replies: list[Any] = await self.connection.run(
                _FETCH, [key for *_, key in batch], ["a", "c", "f"]
            )
            for (agent_part, conversation_part, key), reply in zip(batch, replies, strict=True):
                if not reply:  # gone meanwhile, or no hash
                    continue
                agent_field, conversation_field, layout = reply
                if _newer_layout(layout):
                    raise self._layout_error(f"stored session {key!r}", layout)
                agent = _part_id(agent_part, agent_field)
                conversation_id = _part_id(conversation_part, conversation_field)
                if agent is not None and conversation_id is not None:
                    found.append((agent, conversation_id, key))
        return found

    def _stored(self, agent: str, conversation_id: str, reply: Any) -> StoredPayload | None:
        if not reply:  # gone meanwhile, or no hash
            return None
        version, payload, layout, agent_field, conversation_field = reply
        if _newer_layout(layout):
            raise self._layout_error(f"stored session {conversation_id!r} of agent {agent!r}", layout)
        if (agent_field is not None and agent_field != agent.encode()) or (
            conversation_field is not None and conversation_field != conversation_id.encode()
        ):  # the ids of another key: not a session this store wrote here
            return None
        if version is None or payload is None or not version.isdigit():
            return None
        return StoredPayload(agent, conversation_id, int(version), payload)

    async def replace_payload(self, stored: StoredPayload, payload: bytes) -> bool:
        """Store ``payload`` for ``stored``'s session if it is still stored with the same version
        and payload bytes, keeping its version, layout and TTL; ``False`` if it changed (or
        expired, or was deleted) meanwhile, or if its hash names another agent or conversation
        id (``a``, ``c``). One script: atomic against concurrent saves.

        Raises:
            StorageUnavailableError: The server cannot be reached.
        """
        self.connection.check_open("session store")
        key = self._named(stored.agent, stored.conversation_id)
        args = [
            str(stored.version),
            stored.payload,
            payload,
            SESSION_LAYOUT_VERSION,
            stored.agent,
            stored.conversation_id,
        ]
        return await self.connection.run(_REPLACE, [key], args) == 1

    async def aclose(self) -> None:
        """Close the client if the store created it; later calls raise ``StorageClosedError``."""
        await self.connection.aclose()

    def __repr__(self) -> str:
        return f"RedisSessionStore({self.connection.address!r}, key_prefix={self.key_prefix!r})"


def _newer_layout(layout: bytes | None) -> TypeGuard[bytes]:
    """Whether a hash's ``f`` is of a layout this agentkeep does not read (missing: layout 1)."""
    return layout is not None and (not layout.isdigit() or int(layout) > SESSION_LAYOUT_VERSION)


def _untagged(rest: bytes) -> bytes:
    """A key (after the prefix and ``:``) without its bucket's hash tag, if it has one (escaped
    parts never hold a brace)."""
    if rest.startswith(b"{"):
        end = rest.find(b"}:")
        return rest[end + 2 :] if end > 0 else b""
    return rest


def _key_parts(rest: bytes) -> tuple[str, str] | None:
    """The agent and conversation parts of a key (after the prefix and ``:``), each escaped or
    hashed; ``None`` if it is no session key this store writes."""
    try:
        parts = rest.decode("ascii").split(":")
    except UnicodeDecodeError:
        return None
    if len(parts) != 2:
        return None
    for part in parts:
        if _HASHED_PART.fullmatch(part) is None and _unescaped(part) is None:
            return None
    return parts[0], parts[1]


def _unescaped(part: str) -> str | None:
    """The id that :func:`escape_key_part` turns into ``part``; ``None`` if ``part`` is hashed
    (the id cannot be recovered) or is no part this store writes."""
    if not part or part.startswith("#"):  # "#": too long, kept as its hash
        return None
    try:
        text = unquote(part, errors="strict")
    except UnicodeDecodeError:
        return None
    return text if escape_key_part(text) == part else None


def _part_id(part: str, field: bytes | None) -> str | None:
    """The id a key part stands for: the one its hash stores (``a`` or ``c``), if it does, which
    must escape to ``part``; else the part unescaped. ``None`` if neither tells it (a hashed part
    of a session saved before the field existed) or the field holds the id of another key."""
    if field is None:
        return _unescaped(part)
    try:
        text = field.decode()
    except UnicodeDecodeError:
        return None
    return text if escape_key_part(text) == part else None
