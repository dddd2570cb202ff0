"""The Redis backend: a conversation's log in a Redis list, every write one Lua script.

What lives here:

* :class:`RedisConnection`: a redis-py asyncio client (injected, or created from a URL and then
  owned), its timeouts, Lua scripts run by SHA and the mapping of redis-py errors to agentkeep's.
  :class:`RedisMessageStore` and :class:`~agentkeep.stores.redis.RedisSessionStore` both use it.
* :class:`RedisMessageStore`: the :class:`~agentkeep.storage.base.MessageStore` contract.
* :class:`RedisHistoryProvider`: a :class:`~agentkeep.storage.history.StorageHistoryProvider` on a
  :class:`RedisMessageStore` (the reference edition's constructor names).

**Key layout** (version :data:`LAYOUT_VERSION`, recorded with the record format version in the
hash ``{key_prefix}:__layout__``; :meth:`RedisMessageStore.setup` refuses a newer one). A
conversation id is percent-encoded (ids longer than 100 characters once encoded are replaced by
``#`` + their SHA-256), so no id can collide with another or reach outside its keys. The five keys
of a conversation share a hash tag, ``{key_prefix}:{<id>}:<kind>``:

* ``m``: a hash with ``h`` (the seq of the log's first entry), ``l`` (the last assigned seq) and
  ``e`` (the compaction epoch). It exists exactly when the conversation does.
* ``l``: the log, a list holding one entry per seq from ``h`` to ``l``, so list index =
  seq - ``h`` and every window is one ``LRANGE``. A message entry is a length-prefixed message id
  (see :mod:`~agentkeep.storage.codec`), the time as 8 bytes big-endian microseconds, then the
  body. A summary occupies its seq with an empty placeholder. Trims only remove from the head.
* ``i``: the length-prefixed ids of the newest :data:`~agentkeep.storage.base.DEDUP_WINDOW`
  seqs (placeholders for summaries), for recognising a retried append with one ``LPOS``.
* ``x``: excluded seqs as sorted ranges (``"1-40,45-45"``).
* ``s``: summaries, a hash from ``"<seq>:<anchor>"`` (anchor: the seq of the first message it
  replaces, where the view shows it) to a 4-byte entry length, the entry, and the replaced ids
  (MessagePack).

**Concurrency.** Every operation is one Lua script (``EVALSHA``, falling back to ``EVAL`` when the
server lost its script cache). Redis runs a script to completion before any other command, so
appends from any number of clients and processes serialize: each gets contiguous seqs, the
retry check, the ``max_messages`` trim and the TTL refresh happen in the same step, and a reader
never sees half a turn. A retried batch (a client timed out but the server ran the append) is
recognised by its first message id among the newest ``DEDUP_WINDOW`` entries (key ``i``).

**Cost per turn.** An append searches the short list ``i`` (``LPOS``, in Redis's C code) and
pushes the new entries; a window read computes list ranges from the exclusion ranges and summary
anchors (both small) and reads only those. Nothing on a turn scans the conversation. Recording a
compaction looks the given ids up by scanning the log from the first message that is not yet
excluded until all are found (an id that is not stored makes it scan the whole log).

**Retention.** ``ttl`` becomes a ``PEXPIRE`` of all five keys in every append (and compactions
give keys they create the conversation's remaining time); ``max_messages`` is an ``LTRIM`` in the
append script. ``delete`` removes the five keys. Needs Redis 6.0.6 or later (``LPOS``).

**Errors.** Connection failures and timeouts (``socket_connect_timeout`` / ``socket_timeout`` =
``timeout``; one immediate retry on a dropped connection, none on a timeout) raise
:class:`~agentkeep.errors.StorageUnavailableError` naming the server's address without
credentials; an entry that does not decode raises :class:`~agentkeep.errors.CorruptRecordError`.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Collection, Sequence
from typing import Any, Final, NamedTuple, cast
from urllib.parse import quote

import msgspec

try:
    import redis.asyncio as aioredis
    from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import NoScriptError, RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the Redis backend needs the redis package: pip install 'agentkeep[redis]'") from exc

from ..errors import (
    CorruptRecordError,
    MessageFormatError,
    SchemaVersionError,
    StorageClosedError,
    StorageError,
    StorageUnavailableError,
)
from ..history import MessageFilter
from ..messages import Message
from .base import DEDUP_WINDOW, HistoryView, StoredMessage, Summary
from .codec import FORMAT_VERSION, decode_message, encode_body, encode_id, encode_time
from .history import StorageHistoryProvider

__all__ = [
    "LAYOUT_VERSION",
    "ConversationKeys",
    "RedisConnection",
    "RedisHistoryProvider",
    "RedisMessageStore",
    "RedisScript",
    "escape_key_part",
]

LAYOUT_VERSION: Final = 1
"""Version of the key layout described in the module docs."""

_MAX_KEY_PART: Final = 100
_replaces_decoder = msgspec.msgpack.Decoder(list[str])


def escape_key_part(value: str) -> str:
    """``value`` as a safe, collision-free part of a Redis key.

    Percent-encodes everything but ASCII letters, digits and ``_.-~``; a result longer than 100
    characters becomes ``#`` and the SHA-256 of ``value`` (``#`` never appears otherwise).
    """
    escaped = quote(value, safe="")
    if len(escaped) > _MAX_KEY_PART:
        return "#" + hashlib.sha256(value.encode()).hexdigest()
    return escaped


class RedisScript:
    """A Lua script run by SHA (``EVALSHA``), sent again with ``EVAL`` if the server lacks it.

    Args:
        source: The Lua source.
    """

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


class RedisConnection:
    """A redis-py asyncio client with agentkeep's timeouts, ownership and error mapping.

    Args:
        redis_client: A client to use (not closed by :meth:`aclose`). It must not decode
            responses; its own timeouts apply.
        redis_url: Create a client for this URL (closed by :meth:`aclose`), e.g.
            ``"redis://localhost:6379/0"``.
        timeout: Seconds to wait for a connection and for each reply of a client created here.

    Raises:
        ValueError: Neither or both of ``redis_client`` and ``redis_url``, or a client that decodes
            responses.
    """

    backend: Final = "redis"

    def __init__(
        self,
        redis_client: aioredis.Redis | None = None,
        *,
        redis_url: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        if (redis_client is None) == (redis_url is None):
            raise ValueError("pass either redis_client or redis_url")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.timeout = timeout
        if redis_client is None:
            redis_client = aioredis.Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
                cast(str, redis_url),
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
                # reconnect once at once after a dropped connection; never resend on a timeout
                retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            )
            self.owns_client = True
        else:
            self.owns_client = False
        self.client = redis_client
        options = redis_client.connection_pool.connection_kwargs
        if options.get("decode_responses"):
            raise ValueError("the Redis client must not decode responses (decode_responses=False)")
        self.address = _address(redis_client)
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    def check_open(self, what: str = "store") -> None:
        """Raise :class:`~agentkeep.errors.StorageClosedError` after :meth:`aclose`."""
        if self._closed:
            raise StorageClosedError(f"the redis {what} is closed", backend=self.backend)

    async def run(self, script: RedisScript, keys: Sequence[str], args: Sequence[bytes | str | int]) -> Any:
        """Run ``script`` with ``keys`` and ``args``; returns its reply.

        Raises:
            StorageUnavailableError: The server cannot be reached or did not answer in time.
            StorageError: The server refused the script (e.g. a key of ours holds another type).
        """
        try:
            try:
                return await self.client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                return await self.client.eval(script.source, len(keys), *keys, *args)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise self.unavailable(exc) from exc
        except RedisError as exc:
            raise StorageError(f"redis at {self.address}: {exc}", backend=self.backend) from exc

    async def execute(self, *command: bytes | str | int) -> Any:
        """Run one Redis command; errors as in :meth:`run`."""
        try:
            return await self.client.execute_command(*command)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise self.unavailable(exc) from exc
        except RedisError as exc:
            raise StorageError(f"redis at {self.address}: {exc}", backend=self.backend) from exc

    def unavailable(self, cause: BaseException) -> StorageUnavailableError:
        """The error for a server that cannot be reached (``cause`` describes why)."""
        reason = str(cause) or type(cause).__name__
        return StorageUnavailableError(reason, backend=self.backend, address=self.address)

    async def aclose(self) -> None:
        """Close the client if it was created here; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.owns_client:
            await self.client.aclose()

    def __repr__(self) -> str:
        return f"RedisConnection({self.address!r}, owns_client={self.owns_client})"


def _address(client: aioredis.Redis) -> str:
    pool = client.connection_pool
    options = pool.connection_kwargs
    db = options.get("db", 0)
    if issubclass(pool.connection_class, UnixDomainSocketConnection):
        return f"unix://{options.get('path', '')}?db={db}"
    scheme = "rediss" if issubclass(pool.connection_class, SSLConnection) else "redis"
    return f"{scheme}://{options.get('host', 'localhost')}:{options.get('port', 6379)}/{db}"


# -- Lua ------------------------------------------------------------------------------------------
# KEYS of every conversation script: meta hash, log list, exclusion ranges, summaries hash, the
# ids of the newest DEDUP_WINDOW seqs.

_PRELUDE = (
    f"local WINDOW = {DEDUP_WINDOW}\n"
    + """
local function ranges(text)
  local out = {}
  if text then
    for a, b in string.gmatch(text, '(%d+)-(%d+)') do out[#out + 1] = {tonumber(a), tonumber(b)} end
  end
  return out
end

local function covered(rs, seq)
  local lo, hi = 1, #rs
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if seq < rs[mid][1] then hi = mid - 1 elseif seq > rs[mid][2] then lo = mid + 1 else return true end
  end
  return false
end

-- {seq, anchor, field} of every summary, by seq
local function summaries(key)
  local out = {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    local seq, anchor = string.match(field, '^(%d+):(%d+)$')
    out[#out + 1] = {tonumber(seq), tonumber(anchor), field}
  end
  table.sort(out, function(p, q) return p[1] < q[1] end)
  return out
end

-- the parts of [lo, hi] outside `skips` (ranges sorted by start), ascending
local function segments(lo, hi, skips)
  local out, cur = {}, lo
  for _, r in ipairs(skips) do
    if r[1] > hi then break end
    if r[2] >= cur then
      if r[1] > cur then out[#out + 1] = {cur, r[1] - 1} end
      cur = r[2] + 1
    end
  end
  if cur <= hi then out[#out + 1] = {cur, hi} end
  return out
end

-- the length-prefixed id an entry starts with (nil for a placeholder)
local function needle_at(entry, at)
  local size = string.byte(entry, at)
  if not size then return nil end
  if size == 255 then
    local high, low = string.byte(entry, at + 1, at + 2)
    if not low then return nil end
    return string.sub(entry, at, at + 2 + high * 256 + low)
  end
  return string.sub(entry, at, at + size)
end
"""
)

_SETUP = RedisScript("""
local found = redis.call('HMGET', KEYS[1], 'layout', 'format')
if not found[1] then
  redis.call('HSET', KEYS[1], 'layout', ARGV[1], 'format', ARGV[2])
  return {ARGV[1], ARGV[2]}
end
return found
""")

_APPEND = RedisScript(
    _PRELUDE
    + """
local meta, log, excl, sums, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local max_messages, ttl, needle = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local state = redis.call('HMGET', meta, 'h', 'l')
local head, last
if state[1] then
  head, last = tonumber(state[1]), tonumber(state[2])
  local at = redis.call('LPOS', recent, needle, 'RANK', -1)
  if at then
    local seq = last - redis.call('LLEN', recent) + 1 + at
    if seq >= head then return seq end  -- a retry: stored already
  end
else
  redis.call('DEL', log, excl, sums, recent)  -- leftovers of a conversation that expired
  head, last = 1, 0
  redis.call('HSET', meta, 'h', 1, 'e', 0)
end
for i = 4, #ARGV, 1000 do redis.call('RPUSH', log, unpack(ARGV, i, math.min(i + 999, #ARGV))) end
local needles = {}
for i = math.max(4, #ARGV - WINDOW + 1), #ARGV do needles[#needles + 1] = needle_at(ARGV[i], 1) end
redis.call('RPUSH', recent, unpack(needles))
redis.call('LTRIM', recent, -WINDOW, -1)
local first = last + 1
last = last + #ARGV - 3
redis.call('HSET', meta, 'l', last)
if max_messages > 0 then
  local points = {}
  for _, s in ipairs(summaries(sums)) do
    if s[1] >= head then points[#points + 1] = s[1] end
  end
  local excess = last - head + 1 - #points - max_messages
  if excess > 0 then
    local cut = head + excess
    for _, p in ipairs(points) do
      if p < cut then cut = cut + 1 end
    end
    redis.call('LTRIM', log, cut - head, -1)
    redis.call('HSET', meta, 'h', cut)
  end
end
if ttl > 0 then
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ttl) end
end
return first
"""
)

_READ = RedisScript(
    _PRELUDE
    + """
local meta, log, excl, sums = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- ARGV: after (0: from the start), how many (-1: all), 1 for the raw log / 0 for the view
local after, want, raw = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local state = redis.call('HMGET', meta, 'h', 'l', 'e')
if not state[1] then return {0, 0, {}, ''} end
local head, last, epoch = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
local text = redis.call('GET', excl) or ''
if want == 0 then return {epoch, last, {}, text} end
local excluded = ranges(text)
local skips, active = {}, {}
if not raw then
  for _, r in ipairs(excluded) do skips[#skips + 1] = r end
end
for _, s in ipairs(summaries(sums)) do
  skips[#skips + 1] = {s[1], s[1]}
  if not raw and s[1] > after and not covered(excluded, s[1]) then active[#active + 1] = s end
end
table.sort(skips, function(p, q) return p[1] < q[1] end)
table.sort(active, function(p, q)
  if p[2] ~= q[2] then return p[2] < q[2] end
  return p[1] < q[1]
end)
-- the view as pieces: {0, first seq, last seq} for messages, {1, summary} for a summary, which
-- goes just before the first message at or after its anchor
local pieces, j = {}, 1
for _, seg in ipairs(segments(math.max(head, after + 1), last, skips)) do
  local a, b = seg[1], seg[2]
  while a <= b do
    while j <= #active and active[j][2] <= a do pieces[#pieces + 1] = {1, active[j]}; j = j + 1 end
    if j <= #active and active[j][2] <= b then
      pieces[#pieces + 1] = {0, a, active[j][2] - 1}
      a = active[j][2]
    else
      pieces[#pieces + 1] = {0, a, b}
      a = b + 1
    end
  end
end
while j <= #active do pieces[#pieces + 1] = {1, active[j]}; j = j + 1 end
local first = 1
if want > 0 then
  first = #pieces + 1
  while first > 1 and want > 0 do
    local p = pieces[first - 1]
    local size = 1
    if p[1] == 0 then
      size = p[3] - p[2] + 1
      if size > want then p[2] = p[3] - want + 1; size = want end
    end
    want = want - size
    first = first - 1
  end
end
local out = {}
for i = first, #pieces do
  local p = pieces[i]
  if p[1] == 0 then
    out[#out + 1] = {0, p[2], redis.call('LRANGE', log, p[2] - head, p[3] - head)}
  else
    out[#out + 1] = {1, p[2][1], redis.call('HGET', sums, p[2][3]) or ''}
  end
end
return {epoch, last, out, text}
"""
)

_COMPACT = RedisScript(
    _PRELUDE
    + """
local meta, log, excl, sums, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local i = 1
local excluded, new = {}, {}
for k = 1, tonumber(ARGV[i]) do excluded[k] = ARGV[i + k] end
i = i + #excluded + 1
for k = 1, tonumber(ARGV[i]) do
  local count = tonumber(ARGV[i + 3])
  local s = {needle = ARGV[i + 1], record = ARGV[i + 2], replaces = {}}
  for q = 1, count do s.replaces[q] = ARGV[i + 3 + q] end
  new[k] = s
  i = i + 3 + count
end
local state = redis.call('HMGET', meta, 'h', 'l', 'e')
if not state[1] then
  if #new > 0 then return {-1, 0} end
  return {0, 0}
end
local head, last, epoch = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
-- wanted[needle]: false while not found, then {seq, anchor}
local wanted, missing = {}, 0
local function want(n)
  if wanted[n] == nil then wanted[n] = false; missing = missing + 1 end
end
for _, n in ipairs(excluded) do want(n) end
for _, s in ipairs(new) do
  for _, n in ipairs(s.replaces) do want(n) end
end
local stored, recorded = redis.call('HGETALL', sums), {}
for k = 1, #stored, 2 do
  local seq, anchor = string.match(stored[k], '^(%d+):(%d+)$')
  local n = needle_at(stored[k + 1], 5)
  if n then
    recorded[n] = true
    if wanted[n] == false then wanted[n] = {tonumber(seq), tonumber(anchor)}; missing = missing - 1 end
  end
end
local xr = ranges(redis.call('GET', excl))
local function scan(a, b)
  while a <= b and missing > 0 do
    local e = math.min(b, a + 499)
    for k, entry in ipairs(redis.call('LRANGE', log, a - head, e - head)) do
      local n = needle_at(entry, 1)
      if n and wanted[n] == false then wanted[n] = {a + k - 1, a + k - 1}; missing = missing - 1 end
    end
    a = e + 1
  end
end
if missing > 0 then
  -- compactions usually exclude what follows the previous one: start at the first included seq
  local start = head
  for _, r in ipairs(xr) do
    if r[1] <= start and r[2] >= start then start = r[2] + 1 end
  end
  scan(start, last)
  scan(head, math.min(start - 1, last))
end
local anchors = {}
for k, s in ipairs(new) do
  for _, n in ipairs(s.replaces) do
    local hit = wanted[n]
    if hit and (anchors[k] == nil or hit[2] < anchors[k]) then anchors[k] = hit[2] end
  end
  if anchors[k] == nil then return {-2, k} end
end
local points = {}
for _, n in ipairs(excluded) do
  local hit = wanted[n]
  if hit then points[#points + 1] = {hit[1], hit[1]} end
end
if #points > 0 then
  for _, r in ipairs(xr) do points[#points + 1] = r end
  table.sort(points, function(p, q) return p[1] < q[1] end)
  local merged = {}
  for _, r in ipairs(points) do
    local top = merged[#merged]
    if top and r[1] <= top[2] + 1 then
      if r[2] > top[2] then top[2] = r[2] end
    else
      merged[#merged + 1] = {r[1], r[2]}
    end
  end
  local parts = {}
  for k, r in ipairs(merged) do parts[k] = r[1] .. '-' .. r[2] end
  redis.call('SET', excl, table.concat(parts, ','))
end
for k, s in ipairs(new) do
  if not recorded[s.needle] then  -- else: recorded before, this is a retry
    last = last + 1
    redis.call('RPUSH', log, '')
    redis.call('RPUSH', recent, '')
    redis.call('LTRIM', recent, -WINDOW, -1)
    redis.call('HSET', sums, last .. ':' .. anchors[k], s.record)
    recorded[s.needle] = true
  end
end
epoch = epoch + 1
redis.call('HSET', meta, 'l', last, 'e', epoch)
local ttl = redis.call('PTTL', meta)
if ttl > 0 then
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ttl) end
end
return {0, epoch}
"""
)

_DELETE = RedisScript("""
local found = redis.call('EXISTS', KEYS[1])
redis.call('DEL', unpack(KEYS))
return found
""")

_EXPIRE = RedisScript("""
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ttl = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  if ttl >= 0 then redis.call('PEXPIRE', key, ttl) else redis.call('PERSIST', key) end
end
return 1
""")


# -- records --------------------------------------------------------------------------------------


def _needle(message_id: str) -> bytes:
    """The length-prefixed encoded id an entry starts with."""
    ident = encode_id(message_id)
    if len(ident) < 255:
        return bytes((len(ident),)) + ident
    if len(ident) > 0xFFFF:
        raise MessageFormatError("message ids may be at most 65535 bytes long", path="message_id")
    return b"\xff" + len(ident).to_bytes(2, "big") + ident


def _known_needle(message_id: str) -> bytes | None:
    try:
        return _needle(message_id)
    except MessageFormatError:
        return None  # an id no message can have: nothing stored matches it


def _entry(message: Message, body: bytes) -> bytes:
    assert message.message_id is not None
    assert message.created_at is not None
    when = encode_time(message.created_at).to_bytes(8, "big", signed=True)
    return _needle(message.message_id) + when + body


def _split_entry(data: bytes) -> tuple[bytes, int, bytes]:
    size, start = data[0], 1
    if size == 255:
        size, start = int.from_bytes(data[1:3], "big"), 3
    end = start + size
    if len(data) < end + 9:
        raise ValueError("truncated record")
    return data[start:end], int.from_bytes(data[end : end + 8], "big", signed=True), data[end + 8 :]


def _decode_entry(conversation_id: str, seq: int, data: bytes) -> Message:
    try:
        message_id, created_at, body = _split_entry(data)
        return decode_message(body, message_id, created_at)
    except Exception as exc:  # whatever fails to decode is a corrupt record, never skipped
        raise _corrupt(conversation_id, seq, exc) from exc


def _decode_summary(conversation_id: str, seq: int, data: bytes) -> StoredMessage:
    try:
        size = int.from_bytes(data[:4], "big")
        message = _decode_entry(conversation_id, seq, data[4 : 4 + size])
        replaces = tuple(_replaces_decoder.decode(data[4 + size :]))
    except CorruptRecordError:
        raise
    except Exception as exc:
        raise _corrupt(conversation_id, seq, exc) from exc
    return StoredMessage(seq, message, replaces=replaces)


def _corrupt(conversation_id: str, seq: int, cause: Exception) -> CorruptRecordError:
    return CorruptRecordError(
        f"{type(cause).__name__}: {cause}", backend="redis", conversation_id=conversation_id, seq=seq
    )


def _parse_ranges(text: bytes) -> tuple[list[int], list[int]]:
    starts: list[int] = []
    ends: list[int] = []
    for part in text.split(b","):
        if part:
            first, _, last = part.partition(b"-")
            starts.append(int(first))
            ends.append(int(last))
    return starts, ends


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


# -- the store ------------------------------------------------------------------------------------


class ConversationKeys(NamedTuple):
    """The Redis keys of one conversation (see the module docs)."""

    meta: str
    log: str
    excluded: str
    summaries: str
    recent: str


class RedisMessageStore:
    """The storage contract on Redis (see the module docs for the layout and the scripts).

    Args:
        redis_client: A redis-py asyncio client to use; the store never closes it. It must not
            decode responses, and its own timeouts apply.
        redis_url: Create (and own) a client for this URL instead, e.g. ``"redis://host:6379/0"``.
        key_prefix: Namespace of every key the store writes.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        timeout: Connect and reply timeout in seconds for a client created from ``redis_url``.

    Example:
        ```python
        store = RedisMessageStore.from_url("redis://localhost:6379/0", ttl=7 * 86400)
        await store.setup()
        await store.append("conversation-1", [Message("user", ["Hello"])])
        view = await store.read_view("conversation-1", last=50)
        await store.aclose()
        ```
    """

    backend = "redis"

    def __init__(
        self,
        redis_client: aioredis.Redis | None = None,
        *,
        redis_url: str | None = None,
        key_prefix: str = "chat_messages",
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
    ) -> None:
        if not key_prefix:
            raise ValueError("key_prefix must not be empty")
        if max_messages is not None and max_messages <= 0:
            raise ValueError("max_messages must be positive")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive")
        self.connection = RedisConnection(redis_client, redis_url=redis_url, timeout=timeout)
        self.key_prefix = key_prefix
        self.max_messages = max_messages
        self.ttl = ttl
        self._checked = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        key_prefix: str = "chat_messages",
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
    ) -> RedisMessageStore:
        """A store with its own client for ``url`` (closed by :meth:`aclose`)."""
        return cls(redis_url=url, key_prefix=key_prefix, max_messages=max_messages, ttl=ttl, timeout=timeout)

    @property
    def layout_key(self) -> str:
        """The key holding the layout and record format versions."""
        return f"{self.key_prefix}:__layout__"

    def conversation_keys(self, conversation_id: str) -> ConversationKeys:
        """The keys of ``conversation_id``."""
        base = f"{self.key_prefix}:{{{escape_key_part(conversation_id)}}}:"
        return ConversationKeys(base + "m", base + "l", base + "x", base + "s", base + "i")

    async def setup(self) -> None:
        """Record the layout version, or check the recorded one; idempotent.

        Raises:
            SchemaVersionError: The keys were written with a newer layout or record format.
        """
        self.connection.check_open()
        found = await self.connection.run(_SETUP, [self.layout_key], [LAYOUT_VERSION, FORMAT_VERSION])
        for name, value, known in zip(
            ("key layout", "record format"), found, (LAYOUT_VERSION, FORMAT_VERSION), strict=True
        ):
            try:
                version = int(value)
            except (TypeError, ValueError):
                version = None
            if version is None or version > known:
                shown = value.decode(errors="replace") if isinstance(value, bytes) else value
                raise SchemaVersionError(
                    f"redis keys under {self.key_prefix!r} use {name} version {shown!r}; this "
                    f"agentkeep reads up to version {known}",
                    backend=self.backend,
                )
        self._checked = True

    async def _ready(self) -> None:
        self.connection.check_open()
        if not self._checked:
            await self.setup()

    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        """Append ``messages`` atomically; returns their sequence numbers (see the contract)."""
        self.connection.check_open()
        if not messages:
            return []
        bodies = [encode_body(message) for message in messages]  # refuse what cannot be stored
        for message in messages:
            message.ensure_identity()
        entries = [_entry(message, body) for message, body in zip(messages, bodies, strict=True)]
        await self._ready()
        first = await self.connection.run(
            _APPEND,
            self.conversation_keys(conversation_id),
            [
                self.max_messages or 0,
                _ms(self.ttl) if self.ttl is not None else 0,
                _needle(messages[0].message_id or ""),
                *entries,
            ],
        )
        return list(range(int(first), int(first) + len(messages)))

    async def read(
        self, conversation_id: str, *, last: int | None = None, after: int | None = None
    ) -> list[StoredMessage]:
        """Raw log entries (excluded ones included, summaries not), oldest first."""
        await self._ready()
        want = -1 if last is None else max(last, 0)
        _, _, pieces, excluded = await self.connection.run(
            _READ, self.conversation_keys(conversation_id), [after or 0, want, 1]
        )
        starts, ends = _parse_ranges(excluded)
        out: list[StoredMessage] = []
        for _, first, entries in pieces:
            for offset, data in enumerate(entries):
                seq = first + offset
                index = bisect_right(starts, seq) - 1
                flagged = index >= 0 and seq <= ends[index]
                out.append(StoredMessage(seq, _decode_entry(conversation_id, seq, data), flagged))
        return out

    async def read_view(
        self, conversation_id: str, *, last: int | None = None, after: int | None = None
    ) -> HistoryView:
        """The compacted view, in view order (see the contract)."""
        await self._ready()
        want = -1 if last is None else max(last, 0)
        epoch, last_seq, pieces, _ = await self.connection.run(
            _READ, self.conversation_keys(conversation_id), [after or 0, want, 0]
        )
        entries: list[StoredMessage] = []
        for kind, first, payload in pieces:
            if kind == 0:
                for offset, data in enumerate(payload):
                    seq = first + offset
                    entries.append(StoredMessage(seq, _decode_entry(conversation_id, seq, data)))
            else:
                entries.append(_decode_summary(conversation_id, first, payload))
        return HistoryView(entries, int(epoch), int(last_seq))

    async def record_compaction(
        self,
        conversation_id: str,
        *,
        excluded: Collection[str] = (),
        summaries: Sequence[Summary] = (),
    ) -> int:
        """Exclude messages (by id) and add summaries in one script; returns the new epoch.

        Raises:
            ValueError: A summary replaces no stored message, or summaries for a conversation that
                does not exist (nothing is recorded).
        """
        self.connection.check_open()
        args: list[bytes | int] = []
        needles = [n for n in map(_known_needle, excluded) if n is not None]
        args += [len(needles), *needles, len(summaries)]
        for summary in summaries:
            message = summary.message
            body = encode_body(message)
            message.ensure_identity()
            entry = _entry(message, body)
            replaces = [n for n in map(_known_needle, summary.replaces) if n is not None]
            record = len(entry).to_bytes(4, "big") + entry + msgspec.msgpack.encode(list(summary.replaces))
            args += [_needle(message.message_id or ""), record, len(replaces), *replaces]
        await self._ready()
        status, value = await self.connection.run(_COMPACT, self.conversation_keys(conversation_id), args)
        if status == -1:
            raise ValueError(f"conversation {conversation_id!r} does not exist")
        if status == -2:
            failed = summaries[int(value) - 1].message.message_id
            raise ValueError(
                f"summary {failed!r} replaces no stored message of conversation {conversation_id!r}"
            )
        return int(value)

    async def delete(self, conversation_id: str) -> bool:
        """Delete the conversation's keys; ``False`` if it did not exist."""
        await self._ready()
        return bool(await self.connection.run(_DELETE, self.conversation_keys(conversation_id), []))

    async def expire(self, conversation_id: str, ttl: float | None) -> bool:
        """Expire the conversation ``ttl`` seconds from now (``None``: never); ``False`` if absent."""
        await self._ready()
        millis = -1 if ttl is None else max(0, round(ttl * 1000))
        return bool(await self.connection.run(_EXPIRE, self.conversation_keys(conversation_id), [millis]))

    async def aclose(self) -> None:
        """Close the client if the store created it; idempotent."""
        await self.connection.aclose()

    def __repr__(self) -> str:
        return f"RedisMessageStore({self.connection.address!r}, key_prefix={self.key_prefix!r})"


# -- the history provider -------------------------------------------------------------------------


class RedisHistoryProvider(StorageHistoryProvider):
    """Conversation history in Redis; the session keeps only the conversation id.

    The provider creates a :class:`RedisMessageStore` and closes it in :meth:`aclose` (which
    closes the Redis client only if the store created it from ``redis_url``).

    Args:
        source_id: Provider id and state key.
        redis_url: Connect to this URL (the provider owns the client).
        redis_client: Or use this redis-py asyncio client (never closed by the provider).
        key_prefix: Namespace of every key written.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        load_limit: Load at most this many of the newest view messages per run (``None``: all).
        timeout: Connect and reply timeout in seconds for a client created from ``redis_url``.
        load_messages: Provide the stored history to the model.
        store_inputs: Store the run's input messages.
        store_outputs: Store the model's responses.
        store_context_messages: Also store messages other context providers added.
        store_context_from: Only those of these providers (``None``: all).
        provide_output_message_filter: Filter applied to the loaded history.
        store_input_message_filter: Filter applied to the input messages before storing.

    Example:
        ```python
        provider = RedisHistoryProvider.from_url("redis://localhost:6379/0", ttl=86400)
        agent = Agent(client, context_providers=[provider])
        session = agent.create_session(session_id="user-42")
        await agent.run("Hello!", session=session)  # stored under chat_messages:{user-42}:*
        await provider.aclose()
        ```
    """

    store: RedisMessageStore

    def __init__(
        self,
        source_id: str = "redis_memory",
        redis_url: str | None = None,
        *,
        redis_client: aioredis.Redis | None = None,
        key_prefix: str = "chat_messages",
        max_messages: int | None = None,
        ttl: float | None = None,
        load_limit: int | None = None,
        timeout: float = 5.0,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_outputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: Collection[str] | None = None,
        provide_output_message_filter: MessageFilter | None = None,
        store_input_message_filter: MessageFilter | None = None,
    ) -> None:
        store = RedisMessageStore(
            redis_client,
            redis_url=redis_url,
            key_prefix=key_prefix,
            max_messages=max_messages,
            ttl=ttl,
            timeout=timeout,
        )
        super().__init__(
            store,
            source_id,
            load_limit=load_limit,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_outputs=store_outputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            provide_output_message_filter=provide_output_message_filter,
            store_input_message_filter=store_input_message_filter,
            owns_store=True,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisHistoryProvider:
        """A provider with its own client for ``url``; ``options`` as for the constructor."""
        return cls(redis_url=url, **options)
