"""The Redis backend: a conversation's log in a Redis list, every write one Lua script.

What lives here:

* ``RedisConnection`` (the private database layer, ``agentkeep._db.redis``):
  a redis-py asyncio client (injected, or created from a URL and then owned), its timeouts, Lua
  scripts run by SHA and the mapping of redis-py errors to agentkeep's.
  :class:`RedisMessageStore` and :class:`~agentkeep.session_stores.redis.RedisSessionStore` both use it.
* :class:`RedisMessageStore`: the :class:`~agentkeep.message_stores.base.MessageStore` contract.
* :class:`RedisHistoryProvider`: a :class:`~agentkeep.providers.StorageHistoryProvider` on a
  :class:`RedisMessageStore` (the reference edition's constructor names).

**Key layout** (version :data:`LAYOUT_VERSION`, recorded with the record format version and the
bucket count in the hash ``{key_prefix}:__layout__``; :meth:`RedisMessageStore.setup` refuses a
newer or unknown one and upgrades layouts 1 to 3, see below). A conversation id is
percent-encoded (ids longer than 100 characters once encoded are replaced by ``#`` + their
SHA-256), so no id can collide with another or reach outside its keys. A conversation lives in a
**bucket** of its tenant (the tenant: what comes before the id's first ``"::"``; none without
one): the hash tag ``{<tenant>:<b>}`` (the tenant escaped as ids are, empty for none; ``b`` the
CRC-32 of the id modulo the bucket count, 16). Its five keys are
``{key_prefix}:{<tenant>:<b>}:<id>:<kind>``:

* ``m``: a hash with ``h`` (the seq of the log's first entry), ``l`` (the last assigned seq) and
  ``e`` (the compaction epoch). It exists exactly when the conversation does.
* ``l``: the log, a list holding one entry per seq from ``h`` to ``l``, so list index =
  seq - ``h`` and every window is one ``LRANGE``. A message entry is a length-prefixed message id
  (see :mod:`~agentkeep.message_stores.codec`), the time as 8 bytes big-endian microseconds, then the
  body. A summary occupies its seq with an empty placeholder. Trims only remove from the head.
* ``i``: the length-prefixed ids of the newest :data:`~agentkeep.message_stores.base.DEDUP_WINDOW`
  seqs (placeholders for summaries), for recognising a retried append with one ``LPOS``.
* ``x``: excluded seqs as sorted ranges (``"1-40,45-45"``).
* ``s``: summaries, a hash from ``"<seq>:<anchor>"`` (anchor: the seq of the first message it
  replaces, where the view shows it) to a 4-byte entry length, the entry, and the replaced ids
  (MessagePack).

The bucket's own keys, ``{key_prefix}:{<tenant>:<b>}:<name>``, serve
:meth:`RedisMessageStore.list_conversations` and retention:

* ``__index__``: a sorted set of the bucket's conversation ids (unescaped) scored by the creation
  time of their newest message (microseconds since the epoch; the score orders, the reported time
  is read from the entry). Every append sets it (``ZADD``); ``delete`` and an expiry to 0 remove it.
* ``__expiry__``: a sorted set of the ids of the bucket's conversations with a TTL, scored by their
  deadline (milliseconds, the server's clock). Appends with ``ttl`` and ``expire`` set the
  conversation's keys to expire at exactly that deadline (``PEXPIREAT``) and record it;
  ``expire(None)`` and a new conversation without ``ttl`` remove it. Every append also drops from
  its bucket's sets up to 16 conversations whose deadline passed more than a second ago.
* ``__layout__``: the layout and record format of the newest agentkeep that appended to the bucket;
  appends and rewrites refuse a newer one (a newer agentkeep records its own in each bucket).

So every script names only keys of one hash tag, declared in its ``KEYS``: one slot, as Redis
Cluster requires. Two registries, outside the buckets, replace ``SCAN``:
``{key_prefix}:__tenants__`` (a set of the escaped tenants, an empty member for ids without one)
and ``{key_prefix}:__buckets__:<tenant>`` (a set of the tenant's bucket numbers). An append adds
its tenant and bucket (``SADD``, idempotent, once per store and bucket) before its script runs: a
crash in between leaves at most a registered bucket with no conversation, which listings read as
empty, never a stored conversation that no listing finds. Nothing removes a registry entry.

Scores are the scripts' doubles: exact microseconds within 2^53 of 1970 (years 1685 to 2254).
Beyond that, neighbouring times (8 µs apart near year 1, 32 µs near 9999) share a score; a
listing then reads such a group whole (from every bucket) and orders it by the times in the
entries, so the order is always the contract's: newest first, equal times by the greater id
(Redis orders equal scores by member bytes, which for UTF-8 is Python's ``str`` order).

A listing skips (and removes from the sets) ids whose meta key is gone, whatever the reason
(expiry not yet purged, keys removed by hand or evicted). :meth:`RedisMessageStore.setup` upgrades
an older prefix once, a version at a time, then records each version (which agentkeep versions
that do not maintain what it adds refuse: their ``setup`` and their append and rewrite scripts
check the recorded layout). Layout 1 had no index: its meta keys (``{key_prefix}:{<id>}:m``) are
found with ``SCAN`` and indexed; a conversation whose id was replaced by its hash in its keys
cannot be named that way and is not carried over. Layout 2 had no tenant indexes: they are filled
from the prefix's index. Layout 3 kept each conversation under its own hash tag
(``{key_prefix}:{<id>}:<kind>``) with prefix-wide indexes (``__index__``, ``__index__:<tenant>``,
``__expiry__``): the upgrade records layout 4 first (with ``migrating``; agentkeeps of layout 3
then refuse the prefix, their appends included), then moves the conversations of the old index
and expiry set, 100 per script (keys renamed, TTLs kept, score and deadline copied into the
bucket), registering each bucket first, and finally drops the old tenant indexes and
``migrating``. A store whose ``setup`` finds ``migrating`` finishes the move. The move needs one
server (its scripts span slots); layout 3 never stored a conversation on a cluster.

**Redis Cluster.** The client may be a ``redis.asyncio.RedisCluster`` (or the URL
``redis+cluster://host:port[,host:port...]``). A listing reads each bucket's index with
pipelines (one per node). Errors of a cluster that cannot serve a slot now (``CLUSTERDOWN``,
``TRYAGAIN``, ``MOVED``/``ASK`` past redis-py's redirections, ``MasterDownError``, ``READONLY``)
are handled as connection failures (below), and after one the slot map is read again before the
next call, so the store finds a replica that took over.

**Concurrency.** Every operation is one Lua script (``EVALSHA``, falling back to ``EVAL`` when the
server lost its script cache). Redis runs a script to completion before any other command, so
appends from any number of clients and processes serialize: each gets contiguous seqs, the
retry check, the ``max_messages`` trim and the TTL refresh happen in the same step, and a reader
never sees half a turn. A retried batch (a client timed out but the server ran the append) is
recognised by its first message id among the newest ``DEDUP_WINDOW`` entries (key ``i``). A whole
read (no ``last``, no ``after``) of a log of 512 entries or more that is its own view (nothing
compacted away), on a single server, takes two steps: the ``READ`` script answers with the
counters and the log's last entry instead of copying the log through Lua, then one transaction
(``MULTI`` / ``EXEC``) reads the counters again and the log up to that seq (``LRANGE``), taken
only if the head, the epoch and that last entry are still the same (see
``RedisMessageStore._whole_log``); otherwise the script reads it all.

**Cost per turn.** An append searches the short list ``i`` (``LPOS``, in Redis's C code) and
pushes the new entries; a window read computes list ranges from the exclusion ranges and summary
anchors (both small) and reads only those. Nothing on a turn scans the conversation. Recording a
compaction looks the given ids up by scanning the log from the first message that is not yet
excluded until all are found (an id that is not stored makes it scan the whole log). A summary
that takes the id of a stored message is refused when that message is one the compaction names
or among the newest ``DEDUP_WINDOW`` entries; the log has no index of older ids, so a clash with an
older message it does not name goes unnoticed (both are then kept).

**Cost of listing.** A tenant's page costs what it holds and the number of its registered buckets,
not what the prefix holds. Per bucket one ``PAGE`` script finds the next members of its index
after the cursor ``after`` (its activity's score and conversation id): by ``ZCOUNT`` and a binary
search by rank among the members of that score, then members below it (``ZRANGE`` by rank),
O(log C · log k + n) for C conversations in the bucket, k of the cursor's score and n read. The
buckets are merged newest first (a k-way merge by (score, id)); a bucket is read again only when
the merge used up what it read, each time twice as many ids (up to 200), all buckets that ran dry
in one pipeline. A second script per bucket, ``LIST``, reads per listed conversation its meta hash,
its newest log entry (``LINDEX``; walking back over trailing summary placeholders) and, only after
a ``max_messages`` trim, its summary fields (to count the raw messages): O(limit), independent of
the conversations' lengths. Ids that vanished make it read more until the page is full. A
whole-store page merges the buckets of every registered tenant: its cost grows with the number of
tenants. Appends pay one ``ZADD`` (O(log C)) and a bounded purge of their bucket's expiry set.

**Records as stored** (:class:`~agentkeep.message_stores.base.SupportsRecordRewrite`, for key rotation):
:meth:`RedisMessageStore.stored_records` reads one window of the log (``LRANGE``) and the
summaries hash; :meth:`RedisMessageStore.replace_records` is one script that replaces each entry
(``LSET``) or summary value (``HSET``) only if it still holds exactly the bytes read.

**Retention.** ``ttl`` becomes a ``PEXPIREAT`` (now + ``ttl``, recorded in the expiry set) of all
five keys in every append (and compactions give keys they create the conversation's deadline);
``max_messages`` is an ``LTRIM`` in the append script. ``delete`` removes the five keys and the
bucket's index entries. Needs Redis 6.0.6 or later (``LPOS``; ``SCAN ...
TYPE`` for the upgrade).

**Errors.** Connection failures and timeouts (``socket_connect_timeout`` / ``socket_timeout`` =
``timeout``; one immediate retry on a dropped connection, none on a timeout) raise
:class:`~agentkeep.errors.StorageUnavailableError` naming the server's address without
credentials; for an append or a recorded compaction, whose script may have run before the
connection failed, the subclass :class:`~agentkeep.errors.OutcomeUnknownError` (retrying with the
same messages stores them once); an entry that does not decode raises
:class:`~agentkeep.errors.CorruptRecordError`.
"""

from __future__ import annotations

import asyncio
import re
import struct
from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Sequence
from datetime import datetime
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Unpack, cast
from urllib.parse import unquote

import msgspec

from .._db.redis import (
    BUCKETS,
    RedisClient,
    RedisConnection,
    RedisScript,
    bucket_of,
    escape_key_part,
    glob_escape,
)
from ..encryption import KeyMismatch
from ..errors import CorruptRecordError, MessageFormatError, SchemaVersionError, StorageError
from ..messages import Message
from ..providers.history import HistoryOptions
from ..providers.storage import StorageHistoryProvider
from ..sessions import ISOLATION_SEPARATOR
from ..turn_writes import HeldAppend
from . import _redis_lua as _lua
from .base import (
    ConversationInfo,
    HistoryView,
    StoredMessage,
    StoredRecord,
    Summary,
    check_batch_ids,
    check_listing,
    check_retention,
    check_summary_ids,
    id_conflict,
    listing_order,
    newest_first,
    read_listing_cursor,
    summary_id_conflict,
    tenant_prefix,
)
from .codec import (
    BATCH,
    FORMAT_VERSION,
    RecordKey,
    bulk_decoding,
    decode_batch,
    decode_message,
    decode_time,
    encode_id,
    encode_records,
    record_error,
    seal_key,
)

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.credentials import CredentialProvider

    from ..encryption import KeyRing

__all__ = [
    "DEFAULT_KEY_PREFIX",
    "LAYOUT_VERSION",
    "BucketKeys",
    "ConversationKeys",
    "RedisHistoryProvider",
    "RedisMessageStore",
]

DEFAULT_KEY_PREFIX: Final = "chat_messages"
"""The key prefix of a message store (and history provider) when none is given."""

LAYOUT_VERSION: Final = 4
"""Version of the key layout described in the module docs (2: with the listing index; 3: with an
index per tenant; 4: buckets, every script on one hash tag)."""

_ESCAPED_PART: Final = re.compile(r"[A-Za-z0-9_.~%-]*")
_LIST_BATCH: Final = 200  # conversations looked at per listing script
_REINDEX_BATCH: Final = 100  # conversations indexed per script when upgrading the layout
_EXACT_SCORE: Final = 2.0**53  # scores below this (in magnitude) are exact microseconds
_replaces_decoder = msgspec.msgpack.Decoder(list[str])


# -- records --------------------------------------------------------------------------------------


def _needle(message_id: str) -> bytes:
    """The length-prefixed encoded id an entry starts with."""
    return _length_prefixed(encode_id(message_id))


def _length_prefixed(ident: bytes) -> bytes:
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


def _entries(conversation_id: str, messages: Sequence[Message], key_ring: KeyRing | None) -> list[bytes]:
    """The log entries of ``messages`` (see :func:`~agentkeep.message_stores.codec.encode_records`): the
    length-prefixed id, the 8-byte time and the sealed body of each."""
    return [
        _length_prefixed(ident) + created_at.to_bytes(8, "big", signed=True) + sealed
        for ident, created_at, sealed in encode_records(conversation_id, messages, key_ring=key_ring)
    ]


def _split_entry(data: bytes) -> tuple[bytes, int, bytes]:
    size, start = data[0], 1
    if size == 255:
        size, start = int.from_bytes(data[1:3], "big"), 3
    end = start + size
    if len(data) < end + 9:
        raise ValueError("truncated record")
    return data[start:end], int.from_bytes(data[end : end + 8], "big", signed=True), data[end + 8 :]


def _decode_entry(key: RecordKey, seq: int, data: bytes) -> Message:
    try:
        message_id, created_at, body = _split_entry(data)
        return decode_message(body, message_id, created_at, key=key)
    except Exception as exc:  # whatever fails to decode is a corrupt record, never skipped
        raise _corrupt(key.conversation_id, seq, exc) from exc


def _decode_summary(key: RecordKey, seq: int, data: bytes) -> StoredMessage:
    conversation_id = key.conversation_id
    try:
        size = int.from_bytes(data[:4], "big")
        message = _decode_entry(key, seq, data[4 : 4 + size])
        replaces = tuple(_replaces_decoder.decode(data[4 + size :]))
    except CorruptRecordError:
        raise
    except Exception as exc:
        raise _corrupt(conversation_id, seq, exc) from exc
    return StoredMessage(seq, message, replaces=replaces)


def _corrupt(conversation_id: str, seq: int, cause: Exception) -> CorruptRecordError:
    if isinstance(cause, KeyMismatch):
        return record_error(cause, backend="redis", conversation_id=conversation_id, seq=seq)
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


def _stamp(conversation_id: str, seq: int, data: bytes) -> datetime | None:
    """The time of the newest message from its 8 stored bytes (``None``: no message)."""
    if not seq:
        return None
    try:
        if len(data) != 8:
            raise ValueError("truncated record")
        return decode_time(int.from_bytes(data, "big", signed=True))
    except (ValueError, OverflowError) as exc:
        raise _corrupt(conversation_id, seq, exc) from exc


def _tenant_of(conversation_id: str) -> str | None:
    """The tenant of a conversation id: what comes before its first ``"::"`` (``None``: none)."""
    tenant, separator, _ = conversation_id.partition(ISOLATION_SEPARATOR)
    return tenant if separator else None


def _tenant_part(tenant: str | None) -> str:
    """A tenant as its keys name it: escaped (empty for ids without a tenant)."""
    return "" if tenant is None else escape_key_part(tenant)


def _score(activity: int) -> float:
    """The index score the scripts give a message time of ``activity`` microseconds.

    The scripts (whose numbers are doubles) read the 8 time bytes one at a time, as this does: the
    score is the time itself within 2^53 microseconds of 1970 (years 1685 to 2254), and beyond
    that the time rounded to a double, so neighbouring times can share a score.
    """
    clamped = min(max(activity, -(2**63)), 2**63 - 1)  # a cursor's key is any integer
    data = clamped.to_bytes(8, "big", signed=True)
    negative = data[0] >= 128
    value = 0.0
    for byte in data:
        value = value * 256 + (255 - byte if negative else byte)
    return -value - 1 if negative else value


def _score_arg(score: float) -> str:
    """``score`` as a script argument Redis reads back as the same double."""
    return str(int(score)) if abs(score) < _EXACT_SCORE else repr(score)


def _decoded_run(
    key: RecordKey, first: int, entries: list[bytes], messages: list[Message], seqs: list[int]
) -> None:
    """Decode a run of log entries (seqs from ``first``) onto ``messages`` and ``seqs``: the hot
    loop of long loads, a batch at a time where the entries hold agentkeep's 16-byte ids (split
    and decoded together), else each entry split and decoded on its own."""
    add, at = messages.append, seqs.append
    seq = first
    try:
        with bulk_decoding():
            for start in range(0, len(entries), BATCH):
                chunk = entries[start : start + BATCH]
                batch = _decoded_batch(key, chunk)
                if batch is not None:
                    messages.extend(batch)
                    seqs.extend(range(seq, seq + len(chunk)))
                    seq += len(chunk)
                    continue
                for data in chunk:
                    message_id, created_at, body = _split_entry(data)
                    add(decode_message(body, message_id, created_at, key=key))
                    at(seq)
                    seq += 1
    except Exception as exc:  # whatever fails to decode is a corrupt record, never skipped
        raise _corrupt(key.conversation_id, seq, exc) from exc


_first = itemgetter(0)
"""The first item: an entry's id length, an unpacked time."""
_ID16, _TIME_AT, _BODY_AT = itemgetter(slice(1, 17)), 17, 25
"""Where an entry with a 16-byte id holds its id, time and body."""
_time_at = struct.Struct(">q").unpack_from


def _decoded_batch(key: RecordKey, entries: list[bytes]) -> list[Message] | None:
    """:func:`~agentkeep.message_stores.codec.decode_batch` over entries that all hold a 16-byte
    id; ``None`` when one does not, or the batch is not of the common shape."""
    if min(map(len, entries)) < _BODY_AT + 6 or set(map(_first, entries)) != {16}:
        return None  # an empty entry never reaches _first: the one-by-one path names its seq
    ids = list(map(_ID16, entries))
    times = list(map(_first, map(_time_at, entries, repeat(_TIME_AT))))
    return decode_batch(key, ids, times, list(map(itemgetter(slice(_BODY_AT, None)), entries)))


def _history_view(key: RecordKey, reply: list[Any], raw: bool) -> HistoryView:
    """The ``READ`` script's reply as a view: runs of log entries (flagged by the exclusion
    ranges for a raw read) and, in a view, summaries."""
    epoch, last_seq, pieces, excluded = reply
    messages: list[Message] = []
    seqs: list[int] = []
    summaries: dict[int, tuple[str, ...]] = {}
    for kind, first, payload in pieces:
        if raw or kind == 0:
            _decoded_run(key, first, payload, messages, seqs)
        else:
            summary = _decode_summary(key, first, payload)
            summaries[len(messages)] = summary.replaces
            messages.append(summary.message)
            seqs.append(first)
    flags: list[bool] | None = None
    if raw:
        starts, ends = _parse_ranges(excluded)
        flags = []
        for seq in seqs:
            index = bisect_right(starts, seq) - 1
            flags.append(index >= 0 and seq <= ends[index])
    return HistoryView.of(messages, seqs, int(epoch), int(last_seq), excluded=flags, replaces=summaries)


def _counters(state: Any) -> tuple[int, int, int] | None:
    """The head, last seq and epoch in a meta hash's ``HMGET h l e``, or ``None`` when there is
    no such hash or they are not the plain, consistent counters the scripts keep."""
    if not isinstance(state, list):
        return None
    fields = cast("list[Any]", state)
    fields = [fields[0], fields[1], fields[2] or b"0"]
    if not all(isinstance(field, bytes) and field.isdigit() and len(field) < 17 for field in fields):
        return None  # plain decimal digits only: the script judges anything else
    head, last, epoch = (int(field) for field in fields)
    if not (1 <= head <= last + 1 and last <= _MAX_COUNTER and epoch <= _MAX_COUNTER):
        return None
    return head, last, epoch


_MAX_COUNTER: Final = 2**53 - 1
"""The greatest counter the scripts accept (a double's exact integers)."""
_LRANGE_FROM: Final = 512
"""Entries from which a whole read of a log with nothing compacted away reads it without the
``READ`` script copying it (one more round trip, no copy through Lua)."""

_DECODE_ON_LOOP: Final = 1024
"""Entries a read decodes on the event loop; a longer read decodes on a worker thread, so loading
a long history never holds up the other requests a host serves meanwhile."""


# -- the store ------------------------------------------------------------------------------------


class ConversationKeys(NamedTuple):
    """The Redis keys of one conversation (see the module docs)."""

    meta: str
    log: str
    excluded: str
    summaries: str
    recent: str


class BucketKeys(NamedTuple):
    """The Redis keys of one bucket (see the module docs), beside its conversations' keys."""

    listing: str
    expiry: str
    marker: str


class _Cursor:
    """A listing's place in one bucket's index: members read and not yet merged (greatest
    first), the position to read on from, and whether the index has no more."""

    __slots__ = ("bound", "bucket", "buffer", "chunk", "done")

    def __init__(self, bucket: BucketKeys, bound: list[bytes | str | int], chunk: int) -> None:
        self.bucket = bucket
        self.bound = bound
        self.chunk = chunk
        self.buffer: deque[tuple[float, bytes]] = deque()
        self.done = False


class RedisMessageStore:
    """The storage contract on Redis (see the module docs for the layout and the scripts).

    Args:
        redis_client: A redis-py asyncio client to use (``redis.asyncio.Redis``, or
            ``redis.asyncio.RedisCluster`` for Redis Cluster); the store never closes it. It must
            not decode responses, and its own timeouts apply.
        redis_url: Create (and own) a client for this URL instead, e.g. ``"redis://host:6379/0"``,
            or a cluster's, ``"redis+cluster://host:7000,host:7001"``.
        key_prefix: Namespace of every key the store writes.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        timeout: Connect and reply timeout in seconds for a client created from ``redis_url``.
        key_ring: Encrypt message bodies and summaries (see :mod:`agentkeep.encryption`).

    Example:
        ```python
        store = RedisMessageStore.from_url("redis://localhost:6379/0", ttl=7 * 86400)
        await store.setup()
        await store.append("conversation-1", [Message("user", ["Hello"])])
        view = await store.read("conversation-1", last=50)
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
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
    ) -> None:
        if not key_prefix:
            raise ValueError("key_prefix must not be empty")
        check_retention(max_messages, ttl)
        self.connection = RedisConnection(redis_client, redis_url=redis_url, timeout=timeout)
        self.connection.check_prefix(key_prefix)
        self.key_prefix = key_prefix
        self.max_messages = max_messages
        self.ttl = ttl
        self.key_ring = key_ring
        self.buckets: int = BUCKETS
        """The prefix's bucket count (the recorded one once :meth:`setup` ran)."""
        self._checked = False
        self._registered: set[tuple[str, int]] = set()  # (tenant part, bucket) in the registry

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
    ) -> RedisMessageStore:
        """A store with its own client for ``url`` (closed by :meth:`aclose`)."""
        return cls(
            redis_url=url,
            key_prefix=key_prefix,
            max_messages=max_messages,
            ttl=ttl,
            timeout=timeout,
            key_ring=key_ring,
        )

    @property
    def layout_key(self) -> str:
        """The key holding the layout and record format versions."""
        return f"{self.key_prefix}:__layout__"

    @property
    def tenants_key(self) -> str:
        """The registry of tenants: a set of their escaped names (an empty member for ids without
        a tenant) whose conversations were stored, which whole-store listings start from."""
        return f"{self.key_prefix}:__tenants__"

    def buckets_key(self, tenant: str | None) -> str:
        """The registry of ``tenant``'s buckets: a set of the numbers of those that hold (or
        held) its conversations."""
        return self._buckets_key(_tenant_part(tenant))

    def _buckets_key(self, part: str) -> str:
        return f"{self.key_prefix}:__buckets__:{part}"

    def _place(self, conversation_id: str) -> tuple[str, int]:
        """The tenant part and bucket of ``conversation_id``."""
        return _tenant_part(_tenant_of(conversation_id)), bucket_of(conversation_id, self.buckets)

    def _bucket(self, part: str, bucket: int) -> BucketKeys:
        base = f"{self.key_prefix}:{{{part}:{bucket}}}:"
        return BucketKeys(base + "__index__", base + "__expiry__", base + "__layout__")

    def bucket_keys(self, conversation_id: str) -> BucketKeys:
        """The keys of the bucket of ``conversation_id``: its index, expiry set and layout marker."""
        return self._bucket(*self._place(conversation_id))

    def conversation_keys(self, conversation_id: str) -> ConversationKeys:
        """The keys of ``conversation_id``."""
        part, bucket = self._place(conversation_id)
        base = f"{self.key_prefix}:{{{part}:{bucket}}}:{escape_key_part(conversation_id)}:"
        return ConversationKeys(base + "m", base + "l", base + "x", base + "s", base + "i")

    def _indexed_keys(self, conversation_id: str) -> list[str]:
        """The keys of a script that also keeps the listing up to date: the conversation's, then
        its bucket's index, expiry set and layout marker (one hash tag)."""
        return [*self.conversation_keys(conversation_id), *self.bucket_keys(conversation_id)]

    async def _register(self, conversation_id: str) -> None:
        """Put the conversation's tenant and bucket in the registries (once per store and bucket).

        Runs before the append that may create the conversation, tenant first: a crash in
        between leaves at most a registered bucket without a conversation, which listings read
        as empty, never a stored conversation no listing finds."""
        place = self._place(conversation_id)
        if place in self._registered:
            return
        part, bucket = place
        await self.connection.execute("SADD", self.tenants_key, part)
        await self.connection.execute("SADD", self._buckets_key(part), bucket)
        self._registered.add(place)

    # -- the keys of layout 3 and older, read by the upgrades ------------------------------------
    @property
    def _old_index(self) -> str:
        return f"{self.key_prefix}:__index__"

    @property
    def _old_expiry(self) -> str:
        return f"{self.key_prefix}:__expiry__"

    def _old_tenant_index(self, conversation_id: str) -> str:
        tenant = _tenant_of(conversation_id)
        return self._old_index if tenant is None else f"{self._old_index}:{escape_key_part(tenant)}"

    def _old_keys(self, conversation_id: str) -> ConversationKeys:
        base = f"{self.key_prefix}:{{{escape_key_part(conversation_id)}}}:"
        return ConversationKeys(base + "m", base + "l", base + "x", base + "s", base + "i")

    async def setup(self) -> None:
        """Record the layout version, or check the recorded one; idempotent.

        Raises:
            SchemaVersionError: The keys were written with a newer layout or record format.
        """
        self.connection.check_open()
        found = await self.connection.run(
            _lua.SETUP, [self.layout_key], [LAYOUT_VERSION, FORMAT_VERSION, BUCKETS]
        )
        versions: list[int] = []
        for name, value, known in zip(
            ("key layout", "record format"), found[:2], (LAYOUT_VERSION, FORMAT_VERSION), strict=True
        ):
            try:
                version = int(value)
            except (TypeError, ValueError):
                version = None
            if version is None or version > known or version < 1:
                shown = value.decode(errors="replace") if isinstance(value, bytes) else value
                raise SchemaVersionError(
                    f"redis keys under {self.key_prefix!r} use {name} version {shown!r}; this "
                    f"agentkeep reads up to version {known}",
                    backend=self.backend,
                )
            versions.append(version)
        if versions[0] < LAYOUT_VERSION:
            await self._upgrade(versions[0])
        else:
            self.buckets = self._bucket_count(found[2])
            if found[3]:  # another store began moving layout 3's conversations: finish it
                await self._move_conversations()
        self._checked = True

    def _bucket_count(self, value: Any) -> int:
        try:
            count = int(value)
        except (TypeError, ValueError):
            count = 0
        if count < 1:
            shown = value.decode(errors="replace") if isinstance(value, bytes) else value
            raise SchemaVersionError(
                f"redis keys under {self.key_prefix!r} record {shown!r} buckets", backend=self.backend
            )
        return count

    async def _upgrade(self, layout: int) -> None:
        """Bring keys written with an older key layout to this one, one version at a time: each
        step fills what its version adds, then records that version (so a step cut short is
        simply run again by the next ``setup``)."""
        steps = {2: self._index_conversations, 3: self._index_tenants}
        for version in range(layout + 1, LAYOUT_VERSION + 1):
            if version == 4:
                await self._start_layout_4()
                continue
            await steps[version]()
            await self.connection.run(_lua.UPGRADE, [self.layout_key], [version - 1, version])

    async def _start_layout_4(self) -> None:
        """Layout 3 → 4: record layout 4 first (layout-3 agentkeeps then refuse the prefix, their
        appends too), then move every conversation into its bucket."""
        layout, buckets = await self.connection.run(_lua.START_LAYOUT_4, [self.layout_key], [BUCKETS])
        if layout != str(LAYOUT_VERSION).encode():  # a newer agentkeep won the race: say which
            self._checked = False
            await self.setup()
            return
        self.buckets = self._bucket_count(buckets)
        await self._move_conversations()

    async def _move_conversations(self) -> None:
        """Move the conversations of layout 3 (the ids in its prefix-wide index and expiry set,
        100 per script) to their buckets, registering each bucket before its conversations move;
        then forget the layout-3 tenant indexes and record that the move is over. Any number of
        stores may run this at once: a conversation moves once."""
        while True:
            names = cast(
                list[bytes], await self.connection.execute("ZRANGE", self._old_index, 0, _REINDEX_BATCH - 1)
            )
            if not names:
                names = await self.connection.execute("ZRANGE", self._old_expiry, 0, _REINDEX_BATCH - 1)
            if not names:
                break
            if self.connection.cluster:  # layout 3 never stored a conversation on a cluster
                raise StorageError(
                    f"redis keys under {self.key_prefix!r}: conversations of key layout 3 can be moved "
                    "to layout 4 on a single server only",
                    backend=self.backend,
                )
            batch = [name.decode() for name in names]
            keys = [self._old_index, self._old_expiry]
            for conversation_id in batch:
                await self._register(conversation_id)
                keys += [
                    *self._old_keys(conversation_id),
                    *self.conversation_keys(conversation_id),
                    *self.bucket_keys(conversation_id)[:2],
                    self._old_tenant_index(conversation_id),
                ]
            await self.connection.run(_lua.MIGRATE, keys, batch, writes=True)
        parts = cast(list[bytes], await self.connection.execute("SMEMBERS", self.tenants_key))
        for part in parts:
            if part:
                await self.connection.execute("DEL", f"{self._old_index}:{part.decode()}")
        await self.connection.execute("HDEL", self.layout_key, "migrating")

    async def _index_conversations(self) -> None:
        """Layout 1 → 2. Layout 1 had no listing index: every conversation's meta key is found with
        one ``SCAN`` of the server's keys (once per prefix) and indexed. Conversations whose
        escaped id was replaced by a hash cannot be named from their keys: they are indexed by
        their next append."""
        pattern = f"{glob_escape(self.key_prefix)}:{{*}}:m"
        async for keys in self.connection.scan(pattern, count=1000, key_type="hash"):
            names = [name for name in map(self._conversation_of_meta_key, keys) if name is not None]
            for start in range(0, len(names), _REINDEX_BATCH):
                batch = names[start : start + _REINDEX_BATCH]
                keys = [self._old_index, self._old_expiry]
                for conversation_id in batch:
                    conversation = self._old_keys(conversation_id)
                    keys += [conversation.meta, conversation.log]
                await self.connection.run(_lua.REINDEX, keys, batch)

    async def _index_tenants(self) -> None:
        """Layout 2 → 3: every id with a tenant in the prefix's index (read with ``ZSCAN``, a
        thousand at a time) is added to its tenant's index with the score it has there when its
        batch runs."""
        cursor: bytes | int = 0
        while True:
            cursor, pairs = await self.connection.execute("ZSCAN", self._old_index, cursor, "COUNT", 1000)
            names = [
                member.decode() for member, _ in cast(list[tuple[bytes, float]], pairs)
            ]  # redis-py pairs them
            tenanted = [name for name in names if _tenant_of(name) is not None]
            for start in range(0, len(tenanted), _REINDEX_BATCH):
                batch = tenanted[start : start + _REINDEX_BATCH]
                keys = [self._old_index, *map(self._old_tenant_index, batch)]
                await self.connection.run(_lua.INDEX_TENANTS, keys, batch)
            if int(cursor) == 0:
                return

    def _conversation_of_meta_key(self, key: bytes) -> str | None:
        """The conversation id whose meta key is ``key``, if it can be told from the key."""
        head = f"{self.key_prefix}:{{".encode()
        if not key.startswith(head) or not key.endswith(b"}:m"):
            return None
        try:
            part = key[len(head) : -3].decode("ascii")
            if not _ESCAPED_PART.fullmatch(part):
                return None  # a hashed id, or a key of another prefix that starts like this one
            conversation_id = unquote(part, errors="strict")
        except UnicodeDecodeError:
            return None
        return conversation_id if escape_key_part(conversation_id) == part else None

    async def _ready(self) -> None:
        self.connection.check_open()
        if not self._checked:
            await self.setup()

    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        """Append ``messages`` atomically; returns their sequence numbers (see the contract)."""
        self.connection.check_open()
        if not messages:
            return []
        return await self._write_held(self.hold_append(conversation_id, messages))

    def hold_append(self, conversation_id: str, messages: Sequence[Message]) -> HeldAppend:
        """The append of ``messages`` checked and encoded (ids and times given: what cannot be
        stored is refused here) but not written: :meth:`append` writes it at once, and the
        session store on the same server with the session's save, in one script
        (:mod:`agentkeep.turn_writes`)."""
        self.connection.check_open()
        check = check_batch_ids(self.backend, conversation_id, messages)
        entries = _entries(conversation_id, messages, self.key_ring)
        held = HeldAppend(
            self, conversation_id, messages, (check, entries), write=lambda: self._write_held(held)
        )
        return held

    async def _append_call(self, held: HeldAppend) -> tuple[list[str], list[Any]]:
        """The keys and arguments of the ``APPEND`` script for ``held`` (registered, deadline set)."""
        check, entries = cast("tuple[bool, list[bytes]]", held.prepared)
        await self._ready()
        await self._register(held.conversation_id)
        arguments: list[Any] = [
            self.max_messages or 0,
            _ms(self.ttl) if self.ttl is not None else 0,
            1 if check else 2,  # 2: new ids, only redis-py's resend after a drop can repeat them
            held.conversation_id,
            await self.connection.start_by(),
            LAYOUT_VERSION,
            FORMAT_VERSION,
            *entries,
        ]
        return self._indexed_keys(held.conversation_id), arguments

    async def _appended(self, held: HeldAppend, reply: Any) -> list[int]:
        """The seqs of ``held`` from the ``APPEND`` script's ``reply``, or the error it means."""
        if isinstance(reply, list):  # upgraded by a newer agentkeep since this store checked
            self._checked = False
            await self.setup()  # raises SchemaVersionError naming the versions
            raise AssertionError("setup accepted a layout the append script refused")  # pragma: no cover
        first = int(cast("int", reply))
        if first == 0:  # only if the reply came after all: the server was late, nothing written
            raise self.connection.unavailable(
                TimeoutError("the server ran the append too late; nothing was stored")
            )
        if first < 0:
            raise id_conflict(self.backend, held.conversation_id, held.messages[-first - 1].message_id or "")
        return list(range(first, first + len(held.messages)))

    async def _write_held(self, held: HeldAppend) -> list[int]:
        keys, arguments = await self._append_call(held)
        return await self._appended(
            held, await self.connection.run(_lua.APPEND, keys, arguments, writes=True)
        )

    @staticmethod
    def script_with_append(before: str, after: str, *, caller_args: int) -> RedisScript:
        """The append script with a caller's Lua around it, for :meth:`append_with_session`: the
        caller's part sees ``SKEY`` (its key) and ``SARGV`` (its ``caller_args`` arguments);
        ``before`` may ``return`` before anything is written, ``after`` runs once the batch is."""
        return _lua.append_with(before, after, caller_args=caller_args)

    async def append_with_session(
        self, held: HeldAppend, script: RedisScript, session_key: str, session_args: Sequence[Any]
    ) -> tuple[bytes, Any]:
        """Write ``held`` in one script with a session store's save (``script`` from
        :meth:`script_with_append`, run on ``session_key`` and ``session_args``). Returns the
        script's outcome for the session (``b'ok'`` and the seqs, or what the session's part
        returned before anything was written).

        Raises:
            MessageIdConflictError, StorageUnavailableError, SchemaVersionError: As :meth:`append`
                (nothing is written).
        """
        keys, arguments = await self._append_call(held)
        found = await self.connection.run(
            script, [*keys, session_key], [*session_args, *arguments], writes=True
        )
        if isinstance(found, bytes):  # the session's part returned before anything was written
            return found, None
        reply = cast("list[Any]", found)
        outcome = bytes(reply[0])
        if outcome == b"append":
            await self._appended(held, reply[1])  # raises what the append's refusal means
            raise AssertionError("an append that wrote nothing reported seqs")  # pragma: no cover
        if outcome == b"ok":
            return outcome, await self._appended(held, reply[1])
        return outcome, reply[1] if len(reply) > 1 else None

    async def read(
        self,
        conversation_id: str,
        *,
        raw: bool = False,
        last: int | None = None,
        after: int | None = None,
    ) -> HistoryView:
        """The compacted view in view order, or with ``raw`` the raw log (see the contract); one
        ``READ`` script reads just the list ranges the window needs (a long whole log with nothing
        compacted away is read without it: :meth:`_whole_log`)."""
        await self._ready()
        keys = self.conversation_keys(conversation_id)
        # a long whole log that is its own view is read without the script (not on a cluster:
        # redis-py runs its transactions on a thread of their own, blocking the event loop)
        direct = _LRANGE_FROM if last is None and not after and not self.connection.cluster else 0
        want = -1 if last is None else max(last, 0)
        args = [after or 0, want, 1 if raw else 0]
        reply: list[Any] = await self.connection.run(_lua.READ, keys, [*args, direct])
        if isinstance(reply[2], bytes):  # 'whole': nothing compacted away
            reply = await self._whole_log(keys, reply) or await self.connection.run(_lua.READ, keys, args)
        key = seal_key(conversation_id, self.key_ring)
        if sum(len(piece[2]) for piece in reply[2]) <= _DECODE_ON_LOOP:
            return _history_view(key, reply, raw)
        return await asyncio.to_thread(_history_view, key, reply, raw)

    async def _whole_log(self, keys: ConversationKeys, answer: list[Any]) -> list[Any] | None:
        """The ``READ`` script's reply for a whole read, from its short answer for a long log that
        is its own view (``{epoch, last, 'whole', exclusions, head, last entry}``: nothing
        compacted away) and one transaction that reads the counters again and the log up to that
        last seq; ``None`` (the script then reads it all) unless the counters still have that head
        and epoch, the log that many entries and, at the last seq, the entry the script saw.

        Between the two, appends may add to the log's tail; a trim moves the head and a
        compaction the epoch. A conversation deleted and made again may have the same head and
        epoch, but not the same entry at that seq unless that very record (id, time and text)
        was stored there again. So the entries are those of the state the script read. Copying
        them through Lua instead takes about three times as long as the ``LRANGE`` alone."""
        epoch, last, _, excluded, head, tail = answer
        count = int(last) - int(head) + 1
        state, log = await self.connection.execute_atomic(
            (("HMGET", keys.meta, "h", "l", "e"), ("LRANGE", keys.log, 0, count - 1))
        )
        now = _counters(state)
        if now is None or (now[0], now[2]) != (int(head), int(epoch)) or now[1] < int(last):
            return None
        if not isinstance(log, list) or len(cast("list[bytes]", log)) != count or log[-1] != tail:
            return None
        return [epoch, last, [[0, int(head), log]], excluded]

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
        check_summary_ids(self.backend, conversation_id, summaries)
        args: list[bytes | str | int] = [conversation_id]
        needles = [n for n in map(_known_needle, excluded) if n is not None]
        args += [len(needles), *needles, len(summaries)]
        for summary in summaries:
            message = summary.message
            [entry] = _entries(conversation_id, [message], self.key_ring)
            replaces = [n for n in map(_known_needle, summary.replaces) if n is not None]
            record = len(entry).to_bytes(4, "big") + entry + msgspec.msgpack.encode(list(summary.replaces))
            args += [_needle(message.message_id or ""), record, len(replaces), *replaces]
        await self._ready()
        status, value = await self.connection.run(
            _lua.COMPACT, self._indexed_keys(conversation_id), args, writes=True
        )
        if status == -1:
            raise ValueError(f"conversation {conversation_id!r} does not exist")
        if status == -2:
            failed = summaries[int(value) - 1].message.message_id
            raise ValueError(
                f"summary {failed!r} replaces no stored message of conversation {conversation_id!r}"
            )
        if status == -3:
            clashing = summaries[int(value) - 1].message.message_id or ""
            raise summary_id_conflict(self.backend, conversation_id, clashing)
        return int(value)

    async def stored_records(
        self, conversation_id: str, *, after: int = 0, limit: int = 500
    ) -> list[StoredRecord]:
        """Up to ``limit`` records (messages and summaries, excluded or not) with ``seq > after``,
        in seq order, as stored: one ``RECORDS`` script reading a window of ``limit`` log entries
        (and the summaries hash).

        Raises:
            CorruptRecordError: A stored entry cannot be split into id, time and body.
        """
        await self._ready()
        if limit <= 0:
            return []
        reply = await self.connection.run(
            _lua.RECORDS, self.conversation_keys(conversation_id), [max(after, 0), limit]
        )
        records: list[StoredRecord] = []
        for seq, kind, data in cast(list[tuple[int, int, bytes]], reply):
            try:
                if kind:  # a summary: 4-byte entry length, the entry, its replaced ids
                    size = int.from_bytes(data[:4], "big")
                    if len(data) < 4 + size:
                        raise ValueError("truncated summary")
                    data = data[4 : 4 + size]
                message_id, created_at, body = _split_entry(data)
            except (ValueError, IndexError) as exc:
                raise _corrupt(conversation_id, int(seq), exc) from exc
            records.append(StoredRecord(int(seq), message_id, created_at, body))
        return records

    async def replace_records(
        self, conversation_id: str, changes: Sequence[tuple[StoredRecord, bytes]]
    ) -> int:
        """Give each record its new body if it is still stored exactly as read, in one ``REWRITE``
        script; returns how many were replaced (see the contract). A record that already holds
        the new body counts as replaced: the client resends a script once after a dropped
        connection, and the first attempt may have run.

        Raises:
            SchemaVersionError: A newer agentkeep upgraded the keys since this store checked them.
        """
        self.connection.check_open()
        if not changes:
            return 0
        args: list[bytes | str | int] = []
        for record, body in changes:
            prefix = _length_prefixed(record.message_id) + record.created_at.to_bytes(8, "big", signed=True)
            args += [record.seq, prefix + record.body, prefix + body]
        await self._ready()
        reply = await self.connection.run(
            _lua.REWRITE,
            self._indexed_keys(conversation_id),
            [await self.connection.start_by(), LAYOUT_VERSION, FORMAT_VERSION, *args],
        )
        if isinstance(reply, list):  # upgraded by a newer agentkeep since this store checked
            self._checked = False
            await self.setup()  # raises SchemaVersionError naming the versions
            raise AssertionError("setup accepted a layout the rewrite script refused")  # pragma: no cover
        replaced = int(cast("int", reply))
        if replaced < 0:  # only if the reply came after all: the server was late, nothing written
            raise self.connection.unavailable(
                TimeoutError("the server ran the rewrite too late; nothing was replaced")
            )
        return replaced

    async def delete(self, conversation_id: str) -> bool:
        """Delete the conversation's keys and index entries; ``False`` if it did not exist."""
        await self._ready()
        return bool(
            await self.connection.run(_lua.DELETE, self._indexed_keys(conversation_id), [conversation_id])
        )

    async def expire(self, conversation_id: str, ttl: float | None) -> bool:
        """Expire the conversation ``ttl`` seconds from now (``None``: never); ``False`` if absent."""
        await self._ready()
        millis = -1 if ttl is None else max(0, round(ttl * 1000))
        return bool(
            await self.connection.run(
                _lua.EXPIRE, self._indexed_keys(conversation_id), [millis, conversation_id]
            )
        )

    async def list_conversations(
        self, *, tenant: str | None = None, after: str | None = None, limit: int | None = None
    ) -> list[ConversationInfo]:
        """Live conversations, most recently active first (the newest message's time; equal times:
        the greater id first); at most ``limit``, only ``tenant``'s with ``tenant``, after the
        position of the cursor ``after`` (see the contract).

        Reads just the page: one ``PAGE`` script finds the ids after the position in the tenant's
        index (or the prefix's), and one ``LIST`` script reads each one's meta hash, newest log
        entry and (after a trim) its summary fields. Conversations that expired or vanished are
        dropped from the indexes on the way, and more ids are read in their place.

        Raises:
            ListingCursorError: ``after`` is not a cursor a listing issued.
            ValueError: ``limit`` is negative, or ``tenant`` is no top-level isolation key.
        """
        check_listing(limit, tenant=tenant)
        position = None if after is None else read_listing_cursor(after)
        await self._ready()
        if limit == 0:
            return []
        prefix = tenant_prefix(tenant)
        bound: list[bytes | str | int] = []
        if position is not None:
            score = _score(position[0])
            # past 2^53 the score is shared by neighbouring times: read its whole group
            bound = [_score_arg(score), position[1], "at" if abs(score) < _EXACT_SCORE else "group"]
        buckets = await self._listed_buckets(tenant)
        first = _LIST_BATCH if limit is None else min(_LIST_BATCH, limit)
        chunk = min(first, max(2, 2 * -(-first // max(len(buckets), 1))))
        cursors = [_Cursor(bucket, bound, chunk) for bucket in buckets]
        infos: list[ConversationInfo] = []
        seen: set[str] = set()
        while limit is None or len(infos) < limit:
            size = _LIST_BATCH if limit is None else min(_LIST_BATCH, limit - len(infos))
            picked = await self._merged(cursors, size)
            if not picked:
                break
            fresh: list[tuple[BucketKeys, str]] = []
            for bucket, member in picked:
                name = member.decode()
                if name.startswith(prefix) and name not in seen:
                    seen.add(name)
                    fresh.append((bucket, name))
            for info in await self._listed(fresh):
                # a conversation active again since the index was read belongs before `after`
                if position is None or listing_order(info) < position:
                    infos.append(info)
        # conversations appended to while the indexes were read keep the order of what is returned
        newest_first(infos)
        return infos if limit is None else infos[:limit]

    async def _listed_buckets(self, tenant: str | None) -> list[BucketKeys]:
        """The registered buckets of ``tenant`` (``None``: of every registered tenant)."""
        if tenant is not None:
            parts = [_tenant_part(tenant)]
        else:
            members = cast(list[bytes], await self.connection.execute("SMEMBERS", self.tenants_key))
            parts = sorted(member.decode() for member in members)
        replies = await self.connection.execute_many(
            [("SMEMBERS", self._buckets_key(part)) for part in parts]
        )
        return [
            self._bucket(part, int(number))
            for part, numbers in zip(parts, cast(list[list[bytes]], replies), strict=True)
            for number in sorted(numbers)
        ]

    async def _merged(self, cursors: list[_Cursor], size: int) -> list[tuple[BucketKeys, bytes]]:
        """The next ``size`` members of the buckets' indexes merged (greatest (score, member)
        first), more where a score beyond 2^53 is shared: every member of that score, from every
        bucket. Reads each bucket on from its position when it has none left, all such buckets in
        one pipeline, each time twice as many (up to 200)."""
        out: list[tuple[BucketKeys, bytes]] = []
        while len(out) < size:
            empty = [cursor for cursor in cursors if not cursor.buffer and not cursor.done]
            if empty:
                await self._refilled(empty)
            live = [cursor for cursor in cursors if cursor.buffer]
            if not live:
                break
            best = max(live, key=lambda cursor: cursor.buffer[0])
            score, member = best.buffer.popleft()
            out.append((best.bucket, member))
            if abs(score) >= _EXACT_SCORE:  # each buffer holds such a score's group whole
                for cursor in live:
                    while cursor.buffer and cursor.buffer[0][0] == score:
                        out.append((cursor.bucket, cursor.buffer.popleft()[1]))
        return out

    async def _refilled(self, cursors: list[_Cursor]) -> None:
        replies = await self.connection.run_many(
            [(_lua.PAGE, [cursor.bucket.listing], [cursor.chunk, *cursor.bound]) for cursor in cursors]
        )
        for cursor, reply in zip(cursors, replies, strict=True):
            flat = cast(list[bytes], reply)
            cursor.buffer.extend((float(flat[k + 1]), flat[k]) for k in range(len(flat) - 2, -1, -2))
            if flat:
                low: list[bytes | str | int] = [flat[1], flat[0], "at"]
                cursor.bound = low  # on from the lowest member read
            if len(flat) < 2 * cursor.chunk:
                cursor.done = True  # the index's last members
            cursor.chunk = min(_LIST_BATCH, cursor.chunk * 2)

    async def _listed(self, picked: list[tuple[BucketKeys, str]]) -> list[ConversationInfo]:
        """What the ``LIST`` script reads of each conversation in ``picked`` that still exists,
        one script per bucket, all in one pipeline."""
        groups: dict[BucketKeys, list[str]] = {}
        for bucket, name in picked:
            groups.setdefault(bucket, []).append(name)
        calls: list[tuple[Any, list[str], list[str]]] = []
        for bucket, names in groups.items():
            keys = [bucket.listing, bucket.expiry]
            for conversation_id in names:
                conversation = self.conversation_keys(conversation_id)
                keys += [conversation.meta, conversation.log, conversation.summaries]
            calls.append((_lua.LIST, keys, names))
        infos: list[ConversationInfo] = []
        for names, replies in zip(groups.values(), await self.connection.run_many(calls), strict=True):
            for conversation_id, reply in zip(names, cast(list[Any], replies), strict=True):
                if isinstance(reply, bytes):  # else expired or deleted since: no longer indexed
                    last_seq, count, seq, stamp = reply.split(b" ", 3)
                    updated_at = _stamp(conversation_id, int(seq), stamp)
                    infos.append(ConversationInfo(conversation_id, int(count), int(last_seq), updated_at))
        return infos

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

    The reference's constructor forms work: ``RedisHistoryProvider("mem", redis_url=...)``, and
    with Entra ID (Azure) authentication ``RedisHistoryProvider("mem", credential_provider=cred,
    host="name.redis.cache.windows.net")`` (port 6380 and TLS by default, as there).

    Args:
        source_id: Provider id and state key.
        redis_url: Connect to this URL (the provider owns the client).
        credential_provider: Or connect to ``host`` with this redis-py credential provider (the
            provider owns the client).
        host: The server of ``credential_provider``.
        port: Its port (default 6380, Azure Cache for Redis over TLS).
        ssl: Connect with TLS (default ``True``).
        username: The user name for ``credential_provider``'s connection.
        redis_client: Or use this redis-py asyncio client (never closed by the provider).
        key_prefix: Namespace of every key written.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        load_limit: Load at most this many of the newest view messages per run (``None``: all).
        timeout: Connect and reply timeout in seconds for a client created from ``redis_url``.
        key_ring: Encrypt message bodies and summaries (see :mod:`agentkeep.encryption`).
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
        credential_provider: CredentialProvider | None = None,
        host: str | None = None,
        port: int = 6380,
        ssl: bool = True,
        username: str | None = None,
        *,
        redis_client: aioredis.Redis | None = None,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        max_messages: int | None = None,
        ttl: float | None = None,
        load_limit: int | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
        **options: Unpack[HistoryOptions],
    ) -> None:
        if redis_url is None and credential_provider is None and redis_client is None:
            raise ValueError("Either redis_url or credential_provider must be provided (or a redis_client)")
        if credential_provider is not None and (redis_url is not None or redis_client is not None):
            raise ValueError("redis_url, redis_client and credential_provider are mutually exclusive")
        if credential_provider is not None and host is None:
            raise ValueError("host is required when using credential_provider")
        owned = None
        if credential_provider is not None:
            from redis.asyncio import Redis  # the extra is installed: this module's store needs it

            owned = Redis(
                host=cast(str, host),
                port=port,
                ssl=ssl,
                username=username,
                credential_provider=credential_provider,
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
            )
        store = RedisMessageStore(
            owned if owned is not None else redis_client,
            redis_url=redis_url,
            key_prefix=key_prefix,
            max_messages=max_messages,
            ttl=ttl,
            timeout=timeout,
            key_ring=key_ring,
        )
        if owned is not None:
            store.connection.owns_client = True  # made here: closed with the store
        super().__init__(
            store,
            source_id,
            load_limit=load_limit,
            **options,
            owns_store=True,
        )
        self.redis_url = redis_url

    @property
    def key_prefix(self) -> str:
        """The namespace of every key written (the store's)."""
        return self.store.key_prefix

    @property
    def max_messages(self) -> int | None:
        """The most raw messages kept per conversation (``None``: all)."""
        return self.store.max_messages

    async def clear(self, session_id: str) -> bool:
        """Delete the stored conversation ``session_id`` (what ``get_messages(session_id)`` reads);
        ``False`` if there was none."""
        return await self.store.delete(session_id)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisHistoryProvider:
        """A provider with its own client for ``url``; ``options`` as for the constructor."""
        return cls(redis_url=url, **options)
