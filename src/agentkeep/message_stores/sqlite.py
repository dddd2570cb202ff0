"""The SQLite backend, agentkeep's embedded default: one database file, stdlib :mod:`sqlite3` only.

What lives here:

* ``SQLiteDatabase`` (the private database layer, ``agentkeep._db.sqlite``): a database file, its
  connection (one per file and process, shared by the stores on it) and the worker thread that
  opens it. Both SQLite stores (:class:`SQLiteMessageStore` and
  :class:`~agentkeep.session_stores.sqlite.SQLiteSessionStore`) run their database work through
  it, so connection settings, migrations and error mapping live in one place.
* :class:`SQLiteMessageStore`: the :class:`~agentkeep.message_stores.base.MessageStore` contract.
* :class:`SQLiteHistoryProvider`: a :class:`~agentkeep.providers.StorageHistoryProvider`
  that opens (and owns) a :class:`SQLiteMessageStore` on a path.

**The event loop never waits.** The stores of a process on one file share one connection and one
dedicated worker thread (a single-thread executor) that opens it on first use. A turn's jobs (an
append, a read of what is new or of the newest ``last`` messages, a session's load and save) are
*quick*: they run at once on the caller's thread when the connection is free, with no busy wait,
because handing them to a thread and back would cost more than the SQL; one that meets another
connection's write lock is handed to the worker instead, as every other job is (whole-history
reads, compactions, deletes, expiry, migrations, checkpoints of the write-ahead log). The event
loop never waits for a lock or a long job, and jobs on one connection never overlap.

**Concurrency.** The database is in WAL mode (readers never block the writer) with a busy timeout
(``timeout``). Every write (append, compaction, delete, expiry) is one ``BEGIN IMMEDIATE``
transaction: it takes the database's write lock before reading the conversation's ``last_seq``,
so appends from several connections, threads or processes serialize and each one's messages get
contiguous sequence numbers. A write that cannot get the lock within ``timeout`` seconds raises
:class:`~agentkeep.errors.StorageUnavailableError`. Reads run in one read transaction each, so a
view and its ``epoch`` / ``last_seq`` come from one snapshot. ``synchronous=NORMAL``: a commit
survives a crash of the process; a power loss may roll back the last commits but never corrupts.

**Schema** (version :data:`SCHEMA_VERSION`: the database layer's append-only ``MIGRATIONS``,
applied when a connection opens and recorded with the record format version in
``agentkeep_schema``):

* ``agentkeep_conversations``: an integer ``key``, the ``conversation_id`` text (unique),
  ``last_seq``, ``epoch``, ``message_count``, ``view_floor`` (every message at or below it is
  excluded, so view reads start above it) and ``expires_at`` (microseconds since the epoch).
* ``agentkeep_messages``: one row per message, keyed by ``position`` = conversation key << 32 |
  seq (so a conversation's messages are one contiguous key range, up to 2**32 - 1 of them), with
  the id (16-byte blob), time (int microseconds), body (see :mod:`~agentkeep.message_stores.codec`) and
  ``excluded`` flag. Packing the key into the rowid keeps rows small: interior B-tree pages hold
  only integers and appends fill leaf pages completely (a ``WITHOUT ROWID`` table on
  ``(conversation, seq)`` measured ~275 bytes per 200-character message, this ~250 with the
  8 KiB pages new files get). An index on the message id (migration 2, with one on the
  summaries' ``(conversation, id)``) lets a compaction look its ids up; a retried batch is
  looked for among the newest :data:`~agentkeep.message_stores.base.DEDUP_WINDOW` positions.
* ``agentkeep_summaries``: summary messages with their view ``anchor`` (the sequence number of
  the first message they replace) and the replaced ids (a JSON list).
* ``agentkeep_sessions``: the session store's payloads (see :mod:`agentkeep.session_stores.sqlite`).

**Retention.** ``ttl`` sets ``expires_at`` on every append (sliding); ``max_messages`` deletes the
oldest rows in the same transaction as the append. Expired conversations are invisible to reads,
removed by the next write to them, and all at once by :meth:`SQLiteMessageStore.purge_expired`.

**Errors.** A folder that cannot be created, a file that is not a database, or a database still
locked after ``timeout`` seconds raise :class:`~agentkeep.errors.StorageUnavailableError` naming
the path; a row that does not decode raises :class:`~agentkeep.errors.CorruptRecordError`; a
database written by a newer agentkeep raises :class:`~agentkeep.errors.SchemaVersionError`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Unpack

import msgspec

from .._db.sqlite import (
    BACKEND,
    SCHEMA_VERSION,
    SQLiteDatabase,
    default_database_path,
    not_quick,
    now_us,
    read_transaction,
    write_transaction,
)
from .._files import path_from_url
from ..errors import CorruptRecordError
from ..messages import Message
from ..providers.history import HistoryOptions
from ..providers.storage import StorageHistoryProvider
from ..turn_writes import HeldAppend
from .base import (
    DEDUP_WINDOW,
    ConversationInfo,
    HistoryView,
    StoredRecord,
    Summary,
    check_batch_ids,
    check_listing,
    check_retention,
    check_summary_ids,
    find_retry,
    read_listing_cursor,
    stored_conversation,
    summary_id_conflict,
)
from .codec import (
    DECODE_ERRORS,
    RecordKey,
    decode_id,
    decode_rows,
    encode_id,
    encode_records,
    seal_key,
)

if TYPE_CHECKING:
    from ..encryption import KeyRing

__all__ = [
    "SCHEMA_VERSION",
    "SQLiteHistoryProvider",
    "SQLiteMessageStore",
    "default_database_path",
]


_SEQ_BITS: Final = 32
_SEQ_MASK: Final = (1 << _SEQ_BITS) - 1
_ID_BATCH: Final = 500
"""How many ids one lookup of a retried batch names (SQLite bounds the parameters of a statement)."""


# -- the message store ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Conversation:
    key: int
    last_seq: int
    epoch: int
    message_count: int
    view_floor: int
    expires_at: int | None


@dataclass(slots=True)
class _NewSummary:
    id: bytes
    time: int
    body: bytes
    replaces: bytes  # the replaced ids as a JSON list
    replaced: list[bytes]  # those of them that can be stored ids, encoded
    message_id: str | None


_QUICK_PAGE: Final = 1000
"""Listing pages up to this many rows are bounded jobs (see the database layer's ``quick``)."""

_SELECT_CONVERSATION: Final = (
    "SELECT key, last_seq, epoch, message_count, view_floor, expires_at "
    "FROM agentkeep_conversations WHERE conversation_id = ?"
)


class SQLiteMessageStore:
    """The storage contract on a SQLite file (see the module docs for the design).

    Args:
        path: The database file (default: :func:`default_database_path`). Several stores,
            threads and processes may share one file.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        timeout: Seconds to wait for the write lock before raising
            :class:`~agentkeep.errors.StorageUnavailableError`.
        key_ring: Encrypt message bodies and summaries with its current key (and decrypt with
            any of its keys); see :mod:`agentkeep.encryption`.
    """

    backend = BACKEND

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
    ) -> None:
        check_retention(max_messages, ttl)
        self.max_messages = max_messages
        self.ttl = ttl
        self.key_ring = key_ring
        self.database = SQLiteDatabase(path, timeout=timeout)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
    ) -> SQLiteMessageStore:
        """A store on the file ``url`` names (``sqlite:///abs/path.db``, ``sqlite://rel/path.db``;
        ``sqlite://``: the default file).

        Raises:
            StoreURLError: Not a ``sqlite://`` URL, or one with a query.
        """
        path = path_from_url(url, scheme="sqlite")
        return cls(path, max_messages=max_messages, ttl=ttl, timeout=timeout, key_ring=key_ring)

    @property
    def path(self) -> Path:
        """The database file."""
        return self.database.path

    async def setup(self) -> None:
        """Create the database (and its folder) or migrate it; idempotent (also done on first use).

        Raises:
            SchemaVersionError: The file was written by a newer agentkeep.
        """
        await self.database.setup()

    async def aclose(self) -> None:
        """Close the connection and stop the worker thread; idempotent."""
        await self.database.aclose()

    # -- writes ---------------------------------------------------------------------------------
    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        """Append ``messages`` in one transaction; returns their sequence numbers (see the contract)."""
        self.database.check_open()
        if not messages:
            return []
        return await self.hold_append(conversation_id, messages).write()

    def hold_append(self, conversation_id: str, messages: Sequence[Message]) -> HeldAppend:
        """The append of ``messages`` checked and encoded (ids and times given: what cannot be
        stored is refused here) but not written: :meth:`append` writes it at once, and a session
        store on the same file with the session's save (:mod:`agentkeep.turn_writes`)."""
        self.database.check_open()
        check = check_batch_ids(self.backend, conversation_id, messages)
        rows = encode_records(conversation_id, messages, key_ring=self.key_ring)
        job = partial(self._append, conversation_id, rows, check)
        return HeldAppend(
            self, conversation_id, messages, (rows, check), write=lambda: self.database.run(job, quick=True)
        )

    def append_held(self, db: sqlite3.Connection, held: HeldAppend) -> list[int]:
        """Write ``held`` (one :meth:`hold_append` made) inside the caller's write transaction on
        ``db``, a connection to this store's file."""
        rows, check = held.prepared
        return self._append_rows(db, held.conversation_id, rows, check)

    def _retried(
        self,
        db: sqlite3.Connection,
        conversation_id: str,
        found: _Conversation,
        rows: list[tuple[bytes, int, bytes]],
    ) -> int | None:
        """The first seq of ``rows`` if they are stored already (a retry); see the contract."""
        low, high = _span(found.key, found.last_seq - DEDUP_WINDOW, found.last_seq)
        ids = [row[0] for row in rows]
        stored: dict[bytes, tuple[int, bytes]] = {}
        for at in range(0, len(ids), _ID_BATCH):
            chunk = ids[at : at + _ID_BATCH]
            for message_id, position, body in db.execute(
                "SELECT id, position, body FROM agentkeep_messages WHERE position > ? AND position <= ? "
                f"AND id IN ({','.join('?' * len(chunk))})",
                (low, high, *chunk),
            ):
                stored[message_id] = (position & _SEQ_MASK, body[:-4])  # the seal covers the time
        bodies = [row[2][:-4] for row in rows]
        return find_retry(self.backend, conversation_id, ids, bodies, stored, name=decode_id)

    def _append(
        self, conversation_id: str, rows: list[tuple[bytes, int, bytes]], check: bool, db: sqlite3.Connection
    ) -> list[int]:
        with write_transaction(db):
            return self._append_rows(db, conversation_id, rows, check)

    def _append_rows(
        self, db: sqlite3.Connection, conversation_id: str, rows: list[tuple[bytes, int, bytes]], check: bool
    ) -> list[int]:
        """The append, inside the caller's write transaction."""
        now = now_us()
        found = _find(db, conversation_id, now, purge=True)
        if found is None:
            cursor = db.execute(
                "INSERT INTO agentkeep_conversations (conversation_id) VALUES (?)", (conversation_id,)
            )
            assert cursor.lastrowid is not None
            found = _Conversation(cursor.lastrowid, 0, 0, 0, 0, None)
        elif check:
            start = self._retried(db, conversation_id, found, rows)
            if start is not None:
                return list(range(start, start + len(rows)))
        key, first = found.key, found.last_seq + 1
        if found.last_seq + len(rows) > _SEQ_MASK:
            raise ValueError(f"conversation {conversation_id!r} is full ({_SEQ_MASK} sequence numbers)")
        base = key << _SEQ_BITS
        db.executemany(
            "INSERT INTO agentkeep_messages (position, id, time, body) VALUES (?, ?, ?, ?)",
            [(base + first + index, *row) for index, row in enumerate(rows)],
        )
        last_seq = found.last_seq + len(rows)
        count = found.message_count + len(rows)
        if self.max_messages is not None and count > self.max_messages:
            low, high = _span(key)
            cutoff = db.execute(
                "SELECT position FROM agentkeep_messages WHERE position > ? AND position <= ? "
                "ORDER BY position LIMIT 1 OFFSET ?",
                (low, high, count - self.max_messages - 1),
            ).fetchone()[0]
            db.execute("DELETE FROM agentkeep_messages WHERE position > ? AND position <= ?", (low, cutoff))
            count = self.max_messages
        expires_at = found.expires_at if self.ttl is None else now + round(self.ttl * 1_000_000)
        db.execute(
            "UPDATE agentkeep_conversations SET last_seq = ?, message_count = ?, expires_at = ?, "
            "activity = ? WHERE key = ?",
            (last_seq, count, expires_at, rows[-1][1], key),
        )
        return list(range(first, last_seq + 1))

    async def record_compaction(
        self,
        conversation_id: str,
        *,
        excluded: Collection[str] = (),
        summaries: Sequence[Summary] = (),
    ) -> int:
        """Exclude messages and add summaries in one transaction; returns the new epoch.

        The ids are looked up through indexes: the cost follows the ids named, not the history.
        """
        self.database.check_open()
        check_summary_ids(self.backend, conversation_id, summaries)
        excluded_ids = {encoded for encoded in map(_encode_known_id, excluded) if encoded is not None}
        new: list[_NewSummary] = []
        for summary in summaries:
            [(summary_id, summary_time, body)] = encode_records(
                conversation_id, [summary.message], key_ring=self.key_ring
            )
            replaced = [encoded for encoded in map(_encode_known_id, summary.replaces) if encoded is not None]
            replaces = msgspec.json.encode(list(summary.replaces))
            new.append(
                _NewSummary(summary_id, summary_time, body, replaces, replaced, summary.message.message_id)
            )
        return await self.database.run(partial(self._compact, conversation_id, excluded_ids, new))

    def _compact(
        self, conversation_id: str, excluded: set[bytes], summaries: list[_NewSummary], db: sqlite3.Connection
    ) -> int:
        with write_transaction(db):
            found = _find(db, conversation_id, now_us(), purge=True)
            if found is None:
                if summaries:
                    raise ValueError(f"conversation {conversation_id!r} does not exist")
                return 0
            key = found.key
            wanted = {*excluded, *(i for s in summaries for i in s.replaced), *(s.id for s in summaries)}
            low, high = _span(key)
            recent: dict[bytes, int] = {}
            stored: dict[bytes, tuple[int, int]] = {}
            stored_replaces: dict[bytes, bytes] = {}
            for chunk in _chunks(sorted(wanted)):
                marks = ",".join("?" * len(chunk))
                for message_id, position in db.execute(
                    f"SELECT id, position FROM agentkeep_messages WHERE id IN ({marks})", chunk
                ):
                    if low < position <= high:  # this conversation's (ids may repeat across others)
                        recent[message_id] = position & _SEQ_MASK
                for summary_id, seq, anchor, replaces in db.execute(
                    "SELECT id, seq, anchor, replaces FROM agentkeep_summaries "
                    f"WHERE conversation = ? AND id IN ({marks})",
                    (key, *chunk),
                ):
                    stored[summary_id] = (seq, anchor)
                    stored_replaces[summary_id] = replaces

            def anchor_of(message_id: bytes) -> int | None:
                seq = recent.get(message_id)
                if seq is not None:
                    return seq
                return stored[message_id][1] if message_id in stored else None

            anchors: list[int] = []
            for summary in summaries:
                found_anchors = [a for a in map(anchor_of, summary.replaced) if a is not None]
                if not found_anchors:
                    raise ValueError(
                        f"summary {summary.message_id!r} replaces no stored message of "
                        f"conversation {conversation_id!r}"
                    )
                anchors.append(min(found_anchors))
                if (
                    summary.id in recent
                    or stored_replaces.get(summary.id, summary.replaces) != summary.replaces
                ):
                    raise summary_id_conflict(BACKEND, conversation_id, summary.message_id or "")

            db.executemany(
                "UPDATE agentkeep_messages SET excluded = 1 WHERE position = ?",
                [((key << _SEQ_BITS) + recent[i],) for i in excluded if i in recent],
            )
            db.executemany(
                "UPDATE agentkeep_summaries SET excluded = 1 WHERE conversation = ? AND seq = ?",
                [(key, stored[i][0]) for i in excluded if i in stored],
            )
            last_seq = found.last_seq
            for summary, anchor in zip(summaries, anchors, strict=True):
                if summary.id in stored or summary.id in recent:
                    continue  # recorded before: a retry
                last_seq += 1
                db.execute(
                    "INSERT INTO agentkeep_summaries (conversation, seq, anchor, id, time, body, replaces) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key, last_seq, anchor, summary.id, summary.time, summary.body, summary.replaces),
                )
                stored[summary.id] = (last_seq, anchor)
            first_in_view = db.execute(
                "SELECT position FROM agentkeep_messages WHERE position > ? AND position <= ? "
                "AND excluded = 0 ORDER BY position LIMIT 1",
                _span(key, found.view_floor),
            ).fetchone()
            view_floor = (first_in_view[0] & _SEQ_MASK) - 1 if first_in_view is not None else last_seq
            epoch = found.epoch + 1
            db.execute(
                "UPDATE agentkeep_conversations SET last_seq = ?, epoch = ?, view_floor = ? WHERE key = ?",
                (last_seq, epoch, view_floor, key),
            )
            return epoch

    async def delete(self, conversation_id: str) -> bool:
        """Delete the conversation, its messages and summaries; ``False`` if it did not exist."""
        return await self.database.run(partial(_delete, conversation_id))

    async def expire(self, conversation_id: str, ttl: float | None) -> bool:
        """Expire the conversation ``ttl`` seconds from now (``None``: never); ``False`` if absent."""
        return await self.database.run(partial(_expire, conversation_id, ttl))

    async def purge_expired(self) -> int:
        """Delete every expired conversation (of any store on this file); returns how many."""
        return await self.database.run(_purge_expired)

    # -- reads ----------------------------------------------------------------------------------
    async def read(
        self,
        conversation_id: str,
        *,
        raw: bool = False,
        last: int | None = None,
        after: int | None = None,
    ) -> HistoryView:
        """The compacted view in view order (only rows above the view floor are read), or with
        ``raw`` the raw log in sequence order."""
        job = _read_raw if raw else _read_view
        bounded = last is not None or after is not None  # a turn's read: what is new, or the newest
        return await self.database.run(
            partial(job, seal_key(conversation_id, self.key_ring), last, after), quick=bounded
        )

    async def list_conversations(
        self, *, tenant: str | None = None, after: str | None = None, limit: int | None = None
    ) -> list[ConversationInfo]:
        """Live conversations, most recently active first (see the contract); at most ``limit``.

        One range of the index on ``(tenant, activity, conversation_id)`` (or, for the whole
        store, on ``(activity, conversation_id)``) read backwards from ``after``: a page costs its
        rows (and the expired rows among them), whatever the store holds.
        """
        self.database.check_open()
        check_listing(limit, tenant=tenant)
        position = None if after is None else read_listing_cursor(after)
        if limit == 0:
            return []
        bounded = limit is not None and limit <= _QUICK_PAGE  # a page: on the loop's thread when free
        return await self.database.run(partial(_list_conversations, tenant, position, limit), quick=bounded)

    # -- records as stored (for key rotation) ---------------------------------------------------
    async def stored_records(
        self, conversation_id: str, *, after: int = 0, limit: int = 500
    ) -> list[StoredRecord]:
        """Up to ``limit`` records (messages and summaries) with ``seq > after``, as stored."""
        self.database.check_open()
        return await self.database.run(partial(_stored_records, conversation_id, after, limit))

    async def replace_records(
        self, conversation_id: str, changes: Sequence[tuple[StoredRecord, bytes]]
    ) -> int:
        """Replace bodies still stored as read, in one transaction; returns how many were."""
        self.database.check_open()
        if not changes:
            return 0
        return await self.database.run(partial(_replace_records, conversation_id, list(changes)))

    def __repr__(self) -> str:
        return f"SQLiteMessageStore({str(self.path)!r})"


def _stored_records(
    conversation_id: str, after: int, limit: int, db: sqlite3.Connection
) -> list[StoredRecord]:
    with read_transaction(db):
        found = _find(db, conversation_id, now_us())
        if found is None or limit <= 0:
            return []
        rows = db.execute(
            "SELECT position & 4294967295, id, time, body FROM agentkeep_messages "
            "WHERE position > ? AND position <= ? ORDER BY position LIMIT ?",
            (*_span(found.key, after), limit),
        ).fetchall()
        rows += db.execute(
            "SELECT seq, id, time, body FROM agentkeep_summaries WHERE conversation = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (found.key, after, limit),
        ).fetchall()
    rows.sort(key=lambda row: row[0])
    return [StoredRecord(*row) for row in rows[:limit]]


def _replace_records(
    conversation_id: str, changes: list[tuple[StoredRecord, bytes]], db: sqlite3.Connection
) -> int:
    with write_transaction(db):
        found = _find(db, conversation_id, now_us())
        if found is None:
            return 0
        base = found.key << _SEQ_BITS
        replaced = 0
        for record, body in changes:
            same = (record.message_id, record.created_at, record.body)
            replaced += (
                db.execute(
                    "UPDATE agentkeep_messages SET body = ? "
                    "WHERE position = ? AND id = ? AND time = ? AND body = ?",
                    (body, base + record.seq, *same),
                ).rowcount
                or db.execute(
                    "UPDATE agentkeep_summaries SET body = ? "
                    "WHERE conversation = ? AND seq = ? AND id = ? AND time = ? AND body = ?",
                    (body, found.key, record.seq, *same),
                ).rowcount
            )
        return replaced


def _chunks(items: list[bytes], size: int = 500) -> Iterator[list[bytes]]:
    """``items`` in slices small enough for one statement's parameters."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _span(key: int, after: int = 0, upto: int = _SEQ_MASK) -> tuple[int, int]:
    """Positions of the conversation ``key``'s messages with ``after < seq <= upto``, as the
    bounds of ``position > ? AND position <= ?``."""
    base = key << _SEQ_BITS
    return base + max(after, 0), base + min(max(upto, 0), _SEQ_MASK)


def _encode_known_id(message_id: str) -> bytes | None:
    try:
        return encode_id(message_id)
    except ValueError:
        return None  # an id that could never have been stored


def _find(
    db: sqlite3.Connection, conversation_id: str, now: int, *, purge: bool = False
) -> _Conversation | None:
    """The live conversation, ``None`` if absent or expired (``purge``: remove an expired one)."""
    row = db.execute(_SELECT_CONVERSATION, (conversation_id,)).fetchone()
    if row is None:
        return None
    found = _Conversation(*row)
    if found.expires_at is not None and found.expires_at <= now:
        if purge:
            not_quick()  # removing a whole log: not on the caller's thread
            _remove(db, found.key)
        return None
    return found


def _remove(db: sqlite3.Connection, key: int) -> None:
    db.execute("DELETE FROM agentkeep_messages WHERE position > ? AND position <= ?", _span(key))
    db.execute("DELETE FROM agentkeep_summaries WHERE conversation = ?", (key,))
    db.execute("DELETE FROM agentkeep_conversations WHERE key = ?", (key,))


def _delete(conversation_id: str, db: sqlite3.Connection) -> bool:
    with write_transaction(db):
        found = _find(db, conversation_id, now_us(), purge=True)
        if found is None:
            return False
        _remove(db, found.key)
        return True


def _expire(conversation_id: str, ttl: float | None, db: sqlite3.Connection) -> bool:
    now = now_us()
    with write_transaction(db):
        found = _find(db, conversation_id, now, purge=True)
        if found is None:
            return False
        expires_at = None if ttl is None else now + round(ttl * 1_000_000)
        db.execute("UPDATE agentkeep_conversations SET expires_at = ? WHERE key = ?", (expires_at, found.key))
        return True


def _purge_expired(db: sqlite3.Connection) -> int:
    with write_transaction(db):
        keys = [
            key
            for (key,) in db.execute(
                "SELECT key FROM agentkeep_conversations WHERE expires_at IS NOT NULL AND expires_at <= ?",
                (now_us(),),
            ).fetchall()
        ]
        for key in keys:
            _remove(db, key)
        return len(keys)


# A listing page is one range of an index read backwards. A tenant's page is a range of the
# (tenant, activity, id) index ordered by all three (the tenant bounded by inequalities, never
# equal, so the order by tenant stays): no other plan gives its order without a sort, so the
# planner cannot walk the activity index and filter by tenant, whatever ANALYZE found.
def _list_query(tenant: bool, after: bool) -> str:
    where = ["(expires_at IS NULL OR expires_at > :now)"]
    order = "activity DESC, conversation_id DESC"
    if tenant:  # the upper bound is the cursor's row, or the tenant: where the backward walk starts
        where.append("tenant >= :tenant" if after else "tenant BETWEEN :tenant AND :tenant")
        order = f"tenant DESC, {order}"
    if after:
        columns, bound = ("tenant, ", ":tenant, ") if tenant else ("", "")
        where.append(f"({columns}activity, conversation_id) < ({bound}:activity, :id)")
    return (
        "SELECT conversation_id, message_count, last_seq, activity FROM agentkeep_conversations "
        f"WHERE {' AND '.join(where)} ORDER BY {order} LIMIT :limit"
    )


_LIST_CONVERSATIONS: Final = {
    (tenant, after): _list_query(tenant, after) for tenant in (False, True) for after in (False, True)
}


def _list_conversations(
    tenant: str | None, after: tuple[int, str] | None, limit: int | None, db: sqlite3.Connection
) -> list[ConversationInfo]:
    query = _LIST_CONVERSATIONS[tenant is not None, after is not None]
    params = {"now": now_us(), "tenant": tenant, "limit": -1 if limit is None else limit}
    if after is not None:
        params["activity"], params["id"] = after
    with read_transaction(db):
        rows = db.execute(query, params).fetchall()
    return [stored_conversation(*row, backend=BACKEND) for row in rows]


_MessageRow = tuple[int, bytes, int, bytes, int]  # seq, id, time, body, excluded


_SELECT_MESSAGES: Final = (
    "SELECT position & 4294967295, id, time, body, excluded FROM agentkeep_messages "
    "WHERE position > ? AND position <= ?"
)
_VIEW_ROWS: Final = "FROM agentkeep_messages WHERE position > ? AND position <= ? AND excluded = 0"
"""The messages of a span that are in the view (the three reads of it below pick their columns)."""
_SELECT_VIEW: Final = f"SELECT position & 4294967295, id, time, body {_VIEW_ROWS}"
_SELECT_VIEW_RECORDS: Final = f"SELECT id, time, body {_VIEW_ROWS}"
_SELECT_VIEW_SEQS: Final = f"SELECT position & 4294967295 {_VIEW_ROWS}"


def _read_raw(key: RecordKey, last: int | None, after: int | None, db: sqlite3.Connection) -> HistoryView:
    conversation_id = key.conversation_id
    with read_transaction(db):
        found = _find(db, conversation_id, now_us())
        if found is None:
            return HistoryView()
        if last is not None and last <= 0:
            return HistoryView([], found.epoch, found.last_seq)
        span = _span(found.key, after or 0)
        if last is None:
            rows = db.execute(_SELECT_MESSAGES + " ORDER BY position", span).fetchall()
        else:
            rows = db.execute(_SELECT_MESSAGES + " ORDER BY position DESC LIMIT ?", (*span, last)).fetchall()
            rows.reverse()
    messages, seqs = decode_rows(key, rows, backend=BACKEND)
    excluded = [bool(row[4]) for row in rows]
    return HistoryView.of(messages, seqs, found.epoch, found.last_seq, excluded=excluded)


_SELECT_NEW: Final = (
    "SELECT c.last_seq, c.epoch, c.expires_at, EXISTS (SELECT 1 FROM agentkeep_summaries "
    "WHERE conversation = c.key AND seq > ? AND excluded = 0), "
    "m.position & 4294967295, m.id, m.time, m.body FROM agentkeep_conversations AS c "
    "LEFT JOIN agentkeep_messages AS m ON m.position > (c.key << 32) + max(?, c.view_floor) "
    "AND m.position <= (c.key << 32) + 4294967295 AND m.excluded = 0 "
    "WHERE c.conversation_id = ? ORDER BY m.position"
)
"""A turn's read of what is new after a seq, as one statement (one snapshot, no transaction to
open and close): the conversation's row, whether a summary lies past the seq, and the view's
messages past it (one row of NULLs, the join's, when there are none)."""


def _read_new(key: RecordKey, after: int, db: sqlite3.Connection) -> HistoryView | None:
    """The view's messages after ``after`` in one statement; ``None`` when summaries lie past
    ``after`` (the view must then be ordered around them: :func:`_read_view` reads it in steps)."""
    rows = db.execute(_SELECT_NEW, (after, after, key.conversation_id)).fetchall()
    if not rows:
        return HistoryView()
    last_seq, epoch, expires_at, summarized = rows[0][:4]
    if expires_at is not None and expires_at <= now_us():
        return HistoryView()
    if summarized:
        return None
    if rows[0][4] is None:  # the join's row of NULLs: nothing new
        return HistoryView([], epoch, last_seq)
    messages, seqs = decode_rows(key, rows, seq_at=4, backend=BACKEND)
    return HistoryView.of(messages, seqs, epoch, last_seq)


def _read_view(key: RecordKey, last: int | None, after: int | None, db: sqlite3.Connection) -> HistoryView:
    if last is None and after is not None:  # a turn's read of what is new: one statement
        view = _read_new(key, max(after, 0), db)
        if view is not None:
            return view
    conversation_id = key.conversation_id
    with read_transaction(db):
        found = _find(db, conversation_id, now_us())
        if found is None:
            return HistoryView()
        if last is not None and last <= 0:
            return HistoryView([], found.epoch, found.last_seq)
        lower = after or 0
        floor = max(lower, found.view_floor)
        span = _span(found.key, floor)
        summary_rows = db.execute(
            "SELECT seq, id, time, body, excluded, anchor, replaces FROM agentkeep_summaries "
            "WHERE conversation = ? AND seq > ? AND excluded = 0",
            (found.key, lower),
        ).fetchall()
        whole: tuple[list[Any], Sequence[int]] | None = None
        message_rows: list[Any] = []
        if last is None and not summary_rows:
            # A whole view without summaries: its seqs are those of the span when every one of
            # them is in the view (one column fewer to read); else they are read on their own.
            span = _span(found.key, floor, found.last_seq)
            records = db.execute(_SELECT_VIEW_RECORDS + " ORDER BY position", span).fetchall()
            seqs: Sequence[int] = range(floor + 1, found.last_seq + 1)
            if len(records) != len(seqs):
                seqs = [seq for (seq,) in db.execute(_SELECT_VIEW_SEQS + " ORDER BY position", span)]
            whole = records, seqs
        elif last is None:
            message_rows = db.execute(_SELECT_VIEW + " ORDER BY position", span).fetchall()
        else:
            message_rows = db.execute(
                _SELECT_VIEW + " ORDER BY position DESC LIMIT ?", (*span, last)
            ).fetchall()
            message_rows.reverse()
    if whole is not None:
        messages, seqs = decode_rows(key, whole[0], backend=BACKEND, seqs=whole[1])
        return HistoryView.of(messages, seqs, found.epoch, found.last_seq)
    if not summary_rows:
        messages, seqs = decode_rows(key, message_rows, backend=BACKEND)
        return HistoryView.of(messages, seqs, found.epoch, found.last_seq)
    # View order: a message sits at its seq; a summary just before the first message it replaces.
    ordered: list[tuple[int, int, int, Sequence[Any], bytes | None]] = [
        (row[0], 1, row[0], row, None) for row in message_rows
    ]
    ordered.extend(
        (anchor, 0, seq, (seq, message_id, created_at, body), replaces)
        for seq, message_id, created_at, body, _, anchor, replaces in summary_rows
    )
    ordered.sort(key=lambda item: item[:3])
    if last is not None:
        ordered = ordered[-last:]
    messages, seqs = decode_rows(key, [item[3] for item in ordered], backend=BACKEND)
    summaries: dict[int, tuple[str, ...]] = {}
    for index, (_, _, seq, _, replaces) in enumerate(ordered):
        if replaces is None:
            continue
        try:
            summaries[index] = tuple(msgspec.json.decode(replaces, type=list[str]))
        except DECODE_ERRORS as exc:
            raise CorruptRecordError(
                f"bad replaced ids: {exc}", backend=BACKEND, conversation_id=conversation_id, seq=seq
            ) from exc
    return HistoryView.of(messages, seqs, found.epoch, found.last_seq, replaces=summaries)


# -- the history provider -------------------------------------------------------------------------


class SQLiteHistoryProvider(StorageHistoryProvider):
    """Conversation history in a SQLite file; the session keeps only the conversation id.

    The provider opens its own :class:`SQLiteMessageStore` and closes it in :meth:`aclose`.

    Args:
        path: The database file (default: :func:`default_database_path`).
        source_id: Provider id and state key.
        load_limit: Load at most this many of the newest view messages per run (``None``: all).
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        timeout: Seconds to wait for the write lock held by another connection.
        key_ring: Encrypt what is stored (see :class:`SQLiteMessageStore`).
        load_messages: Provide the stored history to the model.
        store_inputs: Store the run's input messages.
        store_outputs: Store the model's responses.
        store_context_messages: Also store messages other context providers added.
        store_context_from: Only those of these providers (``None``: all).
        provide_output_message_filter: Filter applied to the loaded history.
        store_input_message_filter: Filter applied to the input messages before storing.

    Example:
        ```python
        provider = SQLiteHistoryProvider("chat.db", load_limit=200)
        agent = Agent(client, context_providers=[provider])
        session = agent.create_session(session_id="user-42")
        await agent.run("Hello!", session=session)  # stored in chat.db under "user-42"
        await provider.aclose()
        ```
    """

    store: SQLiteMessageStore

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        source_id: str = "sqlite_history",
        load_limit: int | None = None,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
        **options: Unpack[HistoryOptions],
    ) -> None:
        store = SQLiteMessageStore(
            path, max_messages=max_messages, ttl=ttl, timeout=timeout, key_ring=key_ring
        )
        super().__init__(
            store,
            source_id,
            load_limit=load_limit,
            **options,
            owns_store=True,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteHistoryProvider:
        """A provider on the file ``url`` names (``sqlite:///path.db``; ``sqlite://``: the default
        file); ``options`` as for the constructor.

        Raises:
            StoreURLError: Not a ``sqlite://`` URL, or one with a query.
        """
        return cls(path_from_url(url, scheme="sqlite"), **options)

    @property
    def path(self) -> Path:
        """The database file."""
        return self.store.path
