"""PostgreSQL storage: the message store, the connection layer it shares, and the history provider.

Needs psycopg 3 and its pool (``pip install 'agentkeep[postgres]'``). ``PostgresDatabase``
(in the private database layer, ``agentkeep._db.postgres``) holds an ``AsyncConnectionPool``
(injected, or created from a URL and then owned), the schema, the timeouts, the migrations and
the mapping of driver errors; :class:`PostgresMessageStore` (the
:class:`~agentkeep.message_stores.base.MessageStore` contract), :class:`PostgresHistoryProvider` and
:class:`~agentkeep.session_stores.postgres.PostgresSessionStore` run on it.

**Tables**, in the configured schema (``agentkeep`` by default; names are quoted)::

    schema_migrations  version, format_version, applied_at
    conversations      key (bigserial), conversation_id (unique), last_seq, epoch,
                       message_count, expires_at
    messages           (conversation, seq) primary key, time, excluded, id, body
    summaries          (conversation, seq) primary key, anchor, time, excluded, id, body, replaces
    sessions           (agent, conversation_id) primary key, version, payload, updated_at

Messages use :mod:`agentkeep.message_stores.codec` (16-byte ids, microsecond times, compact bodies);
fixed-width columns come first so rows need no padding, and ``body`` has storage ``MAIN`` (kept
in the row). Summaries have their own table, so ``messages`` is exactly the raw log.

**Setup and versions.** ``PostgresDatabase.setup()`` (also run before the first operation)
applies an append-only list of migrations in one transaction under an advisory lock derived from
the schema name, so processes starting together migrate once. ``schema_migrations`` records each
migration with the record format (:data:`~agentkeep.message_stores.codec.FORMAT_VERSION`); a newer
schema or format raises :class:`~agentkeep.errors.SchemaVersionError` naming both versions.

**Concurrency.** An append is one call of the schema's ``append_messages`` function (one round
trip, one transaction). It locks the conversation's row (``SELECT ... FOR UPDATE``; a new
conversation is created and locked by ``INSERT ... ON CONFLICT DO UPDATE``), so appenders to one
conversation, in any number of processes, take turns, while other conversations do not wait.
Under the lock it checks for a retried batch (the first id among the newest
:data:`~agentkeep.message_stores.base.DEDUP_WINDOW` sequence numbers, a primary-key range scan; each
statement of the function sees what committed before it, so a retry racing its original is
caught), inserts the batch at ``last_seq + 1 ...`` with one multi-row ``INSERT``, trims the
oldest rows for ``max_messages`` and refreshes ``expires_at``. Compactions take the same lock.

**Errors and timeouts.** Getting a connection waits at most ``timeout`` seconds; a pool made
here also sets ``connect_timeout`` and the server's ``statement_timeout``, and each operation
has a client-side deadline of ``timeout`` + 1 s, so an unreachable or stalled server raises
:class:`~agentkeep.errors.StorageUnavailableError` (naming the address, never the password). When
a pooled connection turns out dead (server restart, terminated backend), the pool's idle
connections are checked and reads, appends and compactions run once more on a fresh connection
(a repeated append is recognised as a retry, so the turn is stored once). Records that do not
decode raise :class:`~agentkeep.errors.CorruptRecordError`.

**A write reported failed is not stored later.** Every write statement sets its transaction's
commit-by time (``agentkeep.commit_by``, a time on the server's clock ``timeout`` seconds after
the operation started: ``PostgresDatabase.commit_by``), and a deferred constraint trigger on the
conversation's row (and on bodies rewritten in place) refuses the COMMIT once the server's clock
is past it: a server paused or slowed past the caller's deadline rolls the write back when it
gets to it, instead of storing a turn the caller was told had failed. A refusal the client still
waits for raises :class:`~agentkeep.errors.StorageUnavailableError` (nothing was stored).

**Behind a transaction pooler** (``pooler="transaction"``, ``?pooler=transaction`` in a URL: PgBouncer's
``pool_mode = transaction``), no startup options are sent and nothing is prepared; every
operation runs in a transaction of its own that sets both timeouts with ``SET LOCAL``, so the
server still cancels an operation the client gave up on, and no state stays on the shared
server connection (the advisory locks and the commit-by time are transaction-level).

**Records as stored** (:class:`~agentkeep.message_stores.base.SupportsRecordRewrite`, for key rotation):
:meth:`PostgresMessageStore.stored_records` is one statement (primary-key range scans of both
tables); :meth:`PostgresMessageStore.replace_records` one ``UPDATE`` per table in one statement,
each row compared with what was read (id, time and body).

**Retention.** ``expires_at`` follows the server's clock; an expired conversation reads as absent,
an append to it starts a new one, and :meth:`PostgresMessageStore.purge_expired` deletes expired
conversations in bulk (for a periodic job).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, LiteralString, Unpack

try:
    # ``from psycopg import`` (not ``from psycopg.rows``) fails when the driver is missing even if
    # the rest of the package was imported before.
    from psycopg import rows as psycopg_rows

    from .._db.postgres import (
        BACKEND,
        COMMIT_BY,
        DEFAULT_SCHEMA,
        SCHEMA_VERSION,
        Pooler,
        PostgresConnection,
        PostgresDatabase,
        PostgresPool,
    )
except ImportError as exc:
    raise ImportError(
        "agentkeep.message_stores.postgres needs psycopg 3 and psycopg_pool: "
        "pip install 'agentkeep[postgres]'"
    ) from exc

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
    id_conflict,
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
    "PostgresConnection",
    "PostgresHistoryProvider",
    "PostgresMessageStore",
    "PostgresPool",
]

_LIVE: Final = "(expires_at IS NULL OR expires_at > now())"
_LIVE_CONVERSATION: Final = f"""WITH c AS (
        SELECT key, epoch, last_seq FROM {{conversations}}
        WHERE conversation_id = %(conversation)s AND {_LIVE}
    )"""
_RAW_HEAD: Final = f"""{_LIVE_CONVERSATION}
    SELECT c.epoch, c.last_seq, e.seq, e.id, e.time, e.body, e.excluded
    FROM c LEFT JOIN LATERAL"""
_RAW_MESSAGE: Final = """seq, id, time, body, excluded FROM {messages} WHERE conversation = c.key"""
_VIEW_HEAD: Final = f"""{_LIVE_CONVERSATION}
    SELECT c.epoch, c.last_seq, e.anchor, e.kind, e.seq, e.id, e.time, e.body, e.replaces
    FROM c LEFT JOIN LATERAL"""
_VIEW_MESSAGE: Final = """seq AS anchor, 1 AS kind, seq, id, time, body, NULL::bytea[] AS replaces
    FROM {messages} WHERE conversation = c.key AND NOT excluded"""
_VIEW_SUMMARY: Final = """anchor, 0 AS kind, seq, id, time, body, replaces
    FROM {summaries} WHERE conversation = c.key AND NOT excluded"""
_QUERIES: Final[dict[str, LiteralString]] = {
    # -- append
    "append": f"""SELECT {{append_messages}}(%s, %s::int8[], %s::bytea[], %s::bytea[], %s, %s, %s, %s),
        {COMMIT_BY}""",
    "drop_messages": "DELETE FROM {messages} WHERE conversation = %s",
    "drop_summaries": "DELETE FROM {summaries} WHERE conversation = %s",
    # -- reads
    "read_last": f"""{_RAW_HEAD} (
            SELECT {_RAW_MESSAGE} AND seq > %(after)s ORDER BY seq DESC LIMIT %(last)s
        ) AS e ON true""",
    # Whole reads are ordered in Python: rows come nearly in order, and a server-side sort of a
    # long conversation would spill to disk.
    "read_all": f"""{_RAW_HEAD} (SELECT {_RAW_MESSAGE} AND seq > %(after)s) AS e ON true""",
    # The view order is (anchor, summaries before messages, seq); windows are read newest first.
    "view_last": f"""{_VIEW_HEAD} (
            (SELECT {_VIEW_MESSAGE} AND seq > %(after)s ORDER BY seq DESC LIMIT %(last)s)
            UNION ALL
            (SELECT {_VIEW_SUMMARY} AND seq > %(after)s ORDER BY anchor DESC, seq DESC LIMIT %(last)s)
            ORDER BY anchor DESC, kind DESC, seq DESC LIMIT %(last)s
        ) AS e ON true""",
    # A whole view: one row of the conversation's counters (kind -1: epoch as the seq, last_seq
    # as the time), then its messages (no anchor: their seq) and summaries, each row with only
    # what it holds (the counters are not repeated on every row, nor a message's seq).
    "view_all": f"""{_LIVE_CONVERSATION}
    SELECT NULL::int8 AS anchor, -1 AS kind, c.epoch AS seq, NULL::bytea AS id, c.last_seq AS time,
        NULL::bytea AS body, NULL::bytea[] AS replaces FROM c
    UNION ALL SELECT NULL, 1, m.seq, m.id, m.time, m.body, NULL FROM c JOIN {{messages}} AS m
        ON m.conversation = c.key AND NOT m.excluded AND m.seq > %(after)s
    UNION ALL SELECT s.anchor, 0, s.seq, s.id, s.time, s.body, s.replaces FROM c JOIN {{summaries}} AS s
        ON s.conversation = c.key AND NOT s.excluded AND s.seq > %(after)s""",
    # -- listing: one range of an index read backwards. A tenant's page is a range of the
    # (tenant, activity, id) index ordered by all three (the tenant bounded by inequalities, never
    # equal, so the order by tenant stays; after a cursor, its row is the upper bound the backward
    # walk starts from): no other plan gives its order without a sort, so the
    # planner cannot walk the activity index and filter by tenant (whose cost grows with the
    # other tenants' newer rows), whatever its statistics say.
    "list": f"""SELECT conversation_id, message_count, last_seq, activity FROM {{conversations}}
        WHERE {_LIVE} ORDER BY activity DESC, conversation_id COLLATE "C" DESC LIMIT %(limit)s""",
    "list_after": f"""SELECT conversation_id, message_count, last_seq, activity FROM {{conversations}}
        WHERE {_LIVE} AND (activity, conversation_id COLLATE "C") < (%(activity)s, %(id)s)
        ORDER BY activity DESC, conversation_id COLLATE "C" DESC LIMIT %(limit)s""",
    "list_tenant": f"""SELECT conversation_id, message_count, last_seq, activity FROM {{conversations}}
        WHERE {_LIVE} AND tenant BETWEEN %(tenant)s AND %(tenant)s
        ORDER BY tenant DESC, activity DESC, conversation_id COLLATE "C" DESC LIMIT %(limit)s""",
    "list_tenant_after": f"""SELECT conversation_id, message_count, last_seq, activity FROM {{conversations}}
        WHERE {_LIVE} AND tenant >= %(tenant)s
            AND (tenant, activity, conversation_id COLLATE "C") < (%(tenant)s, %(activity)s, %(id)s)
        ORDER BY tenant DESC, activity DESC, conversation_id COLLATE "C" DESC LIMIT %(limit)s""",
    # -- records as stored (key rotation): primary-key range scans of at most %(limit)s rows each
    "stored_records": f"""{_LIVE_CONVERSATION}
    SELECT e.seq, e.id, e.time, e.body FROM c CROSS JOIN LATERAL (
            (SELECT seq, id, time, body FROM {{messages}}
                WHERE conversation = c.key AND seq > %(after)s ORDER BY seq LIMIT %(limit)s)
            UNION ALL
            (SELECT seq, id, time, body FROM {{summaries}}
                WHERE conversation = c.key AND seq > %(after)s ORDER BY seq LIMIT %(limit)s)
            ORDER BY seq LIMIT %(limit)s
        ) AS e""",
    # Each record's body is replaced if the row still holds the id, time and body read (on a
    # second attempt also if it holds the new body: the first may have committed). Row locks
    # order it with appends, trims, compactions and deletions; no conversation lock is needed.
    "replace_records": f"""{_LIVE_CONVERSATION}, ch AS (
            SELECT * FROM unnest(%(seqs)s::int8[], %(ids)s::bytea[], %(times)s::int8[],
                %(old)s::bytea[], %(new)s::bytea[]) AS t(seq, id, time, old, new)
        ), done_m AS (
            UPDATE {{messages}} AS m SET body = ch.new FROM c, ch
            WHERE m.conversation = c.key AND m.seq = ch.seq AND m.id = ch.id AND m.time = ch.time
                AND (m.body = ch.old OR (%(again)s AND m.body = ch.new))
            RETURNING 1
        ), done_s AS (
            UPDATE {{summaries}} AS s SET body = ch.new FROM c, ch
            WHERE s.conversation = c.key AND s.seq = ch.seq AND s.id = ch.id AND s.time = ch.time
                AND (s.body = ch.old OR (%(again)s AND s.body = ch.new))
            RETURNING 1
        ) SELECT (SELECT count(*) FROM done_m) + (SELECT count(*) FROM done_s),
            set_config('agentkeep.commit_by', %(commit_by)s, true)""",
    # -- compaction, deletion, expiry
    "lock_live": f"""SELECT key, last_seq, {COMMIT_BY} FROM {{conversations}}
        WHERE conversation_id = %s AND {_LIVE} FOR UPDATE""",
    "anchors": """SELECT id, seq, NULL::bytea[] FROM {messages} WHERE conversation = %s AND id = ANY(%s)
        UNION ALL SELECT id, anchor, replaces FROM {summaries} WHERE conversation = %s AND id = ANY(%s)""",
    "exclude_messages": """UPDATE {messages} SET excluded = true
        WHERE conversation = %s AND id = ANY(%s) AND NOT excluded""",
    "exclude_summaries": """UPDATE {summaries} SET excluded = true
        WHERE conversation = %s AND id = ANY(%s) AND NOT excluded""",
    "insert_summary": """INSERT INTO {summaries} (conversation, seq, anchor, time, id, body, replaces)
        VALUES (%s, %s, %s, %s, %s, %s, %s)""",
    "compacted": "UPDATE {conversations} SET last_seq = %s, epoch = epoch + 1 WHERE key = %s RETURNING epoch",
    "delete": f"DELETE FROM {{conversations}} WHERE conversation_id = %s RETURNING key, {_LIVE}, {COMMIT_BY}",
    "expire": f"""UPDATE {{conversations}} SET expires_at = now() + make_interval(secs => %s)
        WHERE conversation_id = %s AND {_LIVE} RETURNING key, {COMMIT_BY}""",
    "purge": f"""WITH gone AS (
            DELETE FROM {{conversations}} WHERE expires_at <= now() RETURNING key, {COMMIT_BY}
        ), m AS (
            DELETE FROM {{messages}} WHERE conversation IN (SELECT key FROM gone)
        ), s AS (
            DELETE FROM {{summaries}} WHERE conversation IN (SELECT key FROM gone)
        ) SELECT count(*) FROM gone""",
}


_DECODE_ON_LOOP: Final = 1024
"""Rows a read decodes on the event loop; a longer read decodes on a worker thread, so loading a
long history never holds up the other requests a host serves meanwhile."""


def _replaced_ids(conversation_id: str, seq: int, raw_ids: list[bytes]) -> tuple[str, ...]:
    try:
        return tuple(decode_id(raw) for raw in raw_ids)
    except DECODE_ERRORS as exc:
        raise CorruptRecordError(
            f"replaced ids: {exc}", backend=BACKEND, conversation_id=conversation_id, seq=seq
        ) from exc


def _whole_view_of(
    key: RecordKey,
    rows: list[Any],
    epoch: int,
    last_seq: int,
) -> HistoryView:
    """A whole view from its rows (``anchor``, ``kind``, ``seq``, ``id``, ``time``, ``body``,
    ``replaces``; a message's anchor is its seq) in view order: by anchor, summaries before the
    message they are anchored at, then seq. Without summaries, by seq alone."""
    if 0 in map(itemgetter(1), rows):
        rows.sort(key=lambda row: (row[2] if row[0] is None else row[0], row[1], row[2]))
        summaries = {
            index: _replaced_ids(key.conversation_id, row[2], row[6])
            for index, row in enumerate(rows)
            if row[1] == 0
        }
    else:
        rows.sort(key=itemgetter(2))
        summaries = None
    messages, seqs = decode_rows(key, rows, seq_at=2, backend=BACKEND)
    return HistoryView.of(messages, seqs, epoch, last_seq, replaces=summaries)


class PostgresMessageStore:
    """The storage contract on PostgreSQL (see the module docs for tables and locking).

    Args:
        pool: An ``AsyncConnectionPool`` to use; it is not closed by :meth:`aclose`.
        url: Or a connection URL (``postgresql://user@host:5432/db``): the store uses the
            process's pool for it (shared with the other stores on that database), acquired on
            first use and released by :meth:`aclose`.
        schema: The schema holding the tables (one schema can hold many conversations).
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.
        key_ring: Encrypt message bodies and summaries (see :mod:`agentkeep.encryption`).
        pooler: ``"transaction"`` when ``url`` goes through a pooler in transaction pooling mode
            (PgBouncer's ``pool_mode = transaction``): nothing prepared, timeouts per transaction.
        pool_size: With ``url``, the most connections of the process's pool for that database
            (shared with the other stores on it; default 10).
    """

    backend = BACKEND
    DEFAULT_SCHEMA = DEFAULT_SCHEMA

    def __init__(
        self,
        pool: PostgresPool | None = None,
        *,
        url: str | None = None,
        schema: str = DEFAULT_SCHEMA,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
    ) -> None:
        check_retention(max_messages, ttl)
        self.database = PostgresDatabase(
            pool, url=url, schema=schema, timeout=timeout, pooler=pooler, pool_size=pool_size
        )
        self.max_messages = max_messages
        self.ttl = ttl
        self.key_ring = key_ring
        self._q = {name: self.database.query(text) for name, text in _QUERIES.items()}

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
    ) -> PostgresMessageStore:
        """A store on the process's pool for ``url`` (acquired on first use, released by :meth:`aclose`)."""
        return cls(
            url=url,
            schema=schema,
            max_messages=max_messages,
            ttl=ttl,
            timeout=timeout,
            key_ring=key_ring,
            pooler=pooler,
            pool_size=pool_size,
        )

    @property
    def schema(self) -> str:
        """The schema holding the tables."""
        return self.database.schema

    @property
    def address(self) -> str:
        """The server's address (without credentials)."""
        return self.database.address

    async def setup(self) -> None:
        """Create or migrate the tables (also done before the first operation); idempotent.

        Raises:
            SchemaVersionError: The schema or its records were written by a newer agentkeep.
        """
        await self.database.setup()

    async def aclose(self) -> None:
        """Close the pool if the store created it; idempotent. The store refuses work afterwards."""
        await self.database.aclose()

    # -- append ---------------------------------------------------------------------------------
    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        """Append ``messages`` atomically; returns their sequence numbers (see the contract)."""
        self.database.check_open()
        if not messages:
            return []
        return await self._append_now(self.hold_append(conversation_id, messages))

    def hold_append(self, conversation_id: str, messages: Sequence[Message]) -> HeldAppend:
        """The append of ``messages`` checked and encoded (ids and times given: what cannot be
        stored is refused here) but not written: :meth:`append` writes it at once, and a session
        store on the same database and schema with the session's save (:mod:`agentkeep.turn_writes`)."""
        self.database.check_open()
        check = check_batch_ids(self.backend, conversation_id, messages)  # new ids are not stored
        records = encode_records(conversation_id, messages, key_ring=self.key_ring)
        prepared = (check, [r[0] for r in records], [r[1] for r in records], [r[2] for r in records])
        held = HeldAppend(self, conversation_id, messages, prepared, write=lambda: self._append_now(held))
        return held

    async def _append_now(self, held: HeldAppend) -> list[int]:
        attempts = 0

        async def operation(conn: PostgresConnection) -> list[int]:
            nonlocal attempts
            attempts += 1  # a second attempt may follow one that committed: it checks for a retry
            commit_by = await self.database.commit_by(conn)
            return await self.append_held(conn, held, commit_by=commit_by, again=attempts > 1)

        return await self.database.run(operation, retry=True, writes=True)

    async def append_held(
        self, conn: PostgresConnection, held: HeldAppend, *, commit_by: str, again: bool = False
    ) -> list[int]:
        """Write ``held`` (one :meth:`hold_append` made) on ``conn``, a connection to this store's
        database, inside the caller's transaction, which must not commit after ``commit_by`` (see
        ``PostgresDatabase.commit_by``; ``again``: an earlier attempt may have committed it).

        Raises:
            MessageIdConflictError: A message reuses a stored message's id.
        """
        check, ids, times, bodies = held.prepared
        params = (
            held.conversation_id,
            times,
            ids,
            bodies,
            check or again,
            DEDUP_WINDOW,
            self.max_messages,
            self.ttl,
            commit_by,
        )
        [(found, _)] = await self.database.fetch(conn, self._q["append"], params)
        first = int(found)
        if first < 0:
            raise id_conflict(self.backend, held.conversation_id, held.messages[-first - 1].message_id or "")
        return list(range(first, first + len(ids)))

    # -- reads ----------------------------------------------------------------------------------
    async def read(
        self,
        conversation_id: str,
        *,
        raw: bool = False,
        last: int | None = None,
        after: int | None = None,
    ) -> HistoryView:
        """The compacted view in view order (summaries where their first replaced message was), or
        with ``raw`` the raw log in sequence order: one statement either way."""
        self.database.check_open()
        if last is not None and last < 0:
            last = 0
        params = {"conversation": conversation_id, "after": after if after is not None else 0, "last": last}
        if raw:
            query = self._q["read_all" if last is None else "read_last"]
        else:
            query = self._q["view_all" if last is None else "view_last"]
        rows = await self.database.fetch_rows(query, params, retry=True)
        if not rows:
            return HistoryView()
        if not raw and last is None:
            return await self._whole_view(conversation_id, rows)
        epoch, last_seq = rows[0][0], rows[0][1]
        key = seal_key(conversation_id, self.key_ring)
        if rows[0][2 if raw else 4] is None:  # the conversation exists, nothing matched
            return HistoryView([], epoch, last_seq)
        if len(rows) <= _DECODE_ON_LOOP:
            return self._view(key, rows, raw=raw, last=last)
        return await asyncio.to_thread(self._view, key, rows, raw=raw, last=last)

    async def _whole_view(self, conversation_id: str, rows: list[Any]) -> HistoryView:
        """The view of a ``view_all`` read's rows: its counters' row, then messages and summaries."""
        at = 0 if rows[0][1] == -1 else next(i for i, row in enumerate(rows) if row[1] == -1)
        _, _, epoch, _, last_seq, _, _ = rows.pop(at)
        if not rows:
            return HistoryView([], epoch, last_seq)
        key = seal_key(conversation_id, self.key_ring)
        if len(rows) <= _DECODE_ON_LOOP:
            return _whole_view_of(key, rows, epoch, last_seq)
        return await asyncio.to_thread(_whole_view_of, key, rows, epoch, last_seq)

    def _view(self, key: RecordKey, rows: list[Any], *, raw: bool, last: int | None) -> HistoryView:
        """The rows of a raw read, or of a window of the view (``view_last``), as a view (see
        :meth:`read`; a whole view: :func:`_whole_view_of`)."""
        epoch, last_seq = rows[0][0], rows[0][1]
        if raw:
            if last is None:
                rows.sort(key=itemgetter(2))
            else:
                rows.reverse()
            messages, seqs = decode_rows(key, rows, seq_at=2, backend=BACKEND)
            excluded = [row[6] for row in rows]
            return HistoryView.of(messages, seqs, epoch, last_seq, excluded=excluded)
        rows.reverse()  # newest first
        messages, seqs = decode_rows(key, rows, seq_at=4, backend=BACKEND)
        summaries = {
            index: _replaced_ids(key.conversation_id, row[4], row[8])
            for index, row in enumerate(rows)
            if row[3] == 0
        }
        return HistoryView.of(messages, seqs, epoch, last_seq, replaces=summaries)

    # -- compaction -----------------------------------------------------------------------------
    async def record_compaction(
        self,
        conversation_id: str,
        *,
        excluded: Collection[str] = (),
        summaries: Sequence[Summary] = (),
    ) -> int:
        """Exclude messages (by id) and add summaries; returns the new epoch (see the contract).

        The ids are looked up through the ``(conversation, id)`` indexes: the cost follows the ids
        named, not the history.
        """
        self.database.check_open()
        check_summary_ids(self.backend, conversation_id, summaries)
        rows: list[tuple[bytes, int, bytes, list[bytes]]] = []
        for summary in summaries:
            [(summary_id, summary_time, body)] = encode_records(
                conversation_id, [summary.message], key_ring=self.key_ring
            )
            rows.append(
                (summary_id, summary_time, body, [encode_id(replaced) for replaced in summary.replaces])
            )
        excluded_ids = [encode_id(message_id) for message_id in excluded]

        async def operation(conn: PostgresConnection) -> int:
            return await self._compact(conn, conversation_id, excluded_ids, summaries, rows)

        return await self.database.run(operation, retry=True, writes=True)

    async def _compact(
        self,
        conn: PostgresConnection,
        conversation_id: str,
        excluded_ids: list[bytes],
        summaries: Sequence[Summary],
        rows: list[tuple[bytes, int, bytes, list[bytes]]],
    ) -> int:
        q = self._q
        commit_by = await self.database.commit_by(conn)
        async with conn.transaction(), conn.cursor(row_factory=psycopg_rows.tuple_row, binary=True) as cur:
            await cur.execute(q["lock_live"], (commit_by, conversation_id))
            found = await cur.fetchone()
            if found is None:
                if summaries:
                    raise ValueError(f"conversation {conversation_id!r} does not exist")
                return 0
            key, last_seq, _ = found
            anchors: dict[bytes, int] = {}
            stored_replaces: dict[bytes, list[bytes] | None] = {}  # None: a message's id
            if rows:
                wanted = list({raw for row in rows for raw in (row[0], *row[3])})
                await cur.execute(q["anchors"], (key, wanted, key, wanted))
                for raw, anchor, replaced in await cur.fetchall():
                    anchors[bytes(raw)] = anchor
                    stored_replaces[bytes(raw)] = None if replaced is None else [bytes(r) for r in replaced]
            placed: list[int] = []
            for summary, (raw_id, _, _, replaces) in zip(summaries, rows, strict=True):
                known = [anchors[raw] for raw in replaces if raw in anchors]
                if not known:
                    raise ValueError(
                        f"summary {summary.message.message_id!r} replaces no stored message of "
                        f"conversation {conversation_id!r}"
                    )
                placed.append(min(known))
                if raw_id in stored_replaces and stored_replaces[raw_id] != replaces:  # not a retry
                    raise summary_id_conflict(BACKEND, conversation_id, summary.message.message_id or "")
            if excluded_ids:
                await cur.execute(q["exclude_messages"], (key, excluded_ids))
                await cur.execute(q["exclude_summaries"], (key, excluded_ids))
            for (raw_id, time, body, replaces), anchor in zip(rows, placed, strict=True):
                if raw_id in anchors:
                    continue  # recorded before: a retry
                last_seq += 1
                anchors[raw_id] = anchor
                await cur.execute(q["insert_summary"], (key, last_seq, anchor, time, raw_id, body, replaces))
            await cur.execute(q["compacted"], (last_seq, key))
            [(epoch,)] = await cur.fetchall()
        return int(epoch)

    # -- records as stored (key rotation) ---------------------------------------------------------
    async def stored_records(
        self, conversation_id: str, *, after: int = 0, limit: int = 500
    ) -> list[StoredRecord]:
        """Up to ``limit`` records (messages and summaries, excluded or not) with ``seq > after``,
        in seq order, as stored: one statement (two primary-key range scans of ``limit`` rows)."""
        self.database.check_open()
        if limit <= 0:
            return []
        params = {"conversation": conversation_id, "after": max(after, 0), "limit": limit}
        rows = await self.database.fetch_rows(self._q["stored_records"], params, retry=True)
        return [StoredRecord(seq, bytes(raw_id), time, bytes(body)) for seq, raw_id, time, body in rows]

    async def replace_records(
        self, conversation_id: str, changes: Sequence[tuple[StoredRecord, bytes]]
    ) -> int:
        """Give each record its new body if it is still stored as read, in one statement (one
        round trip, one transaction); returns how many were replaced (see the contract)."""
        self.database.check_open()
        if not changes:
            return 0
        params: dict[str, Any] = {
            "conversation": conversation_id,
            "seqs": [record.seq for record, _ in changes],
            "ids": [record.message_id for record, _ in changes],
            "times": [record.created_at for record, _ in changes],
            "old": [record.body for record, _ in changes],
            "new": [body for _, body in changes],
        }
        attempts = 0

        async def operation(conn: PostgresConnection) -> int:
            nonlocal attempts
            attempts += 1  # a second attempt may follow one that committed
            commit_by = await self.database.commit_by(conn)
            [(count, _)] = await self.database.fetch(
                conn, self._q["replace_records"], {**params, "again": attempts > 1, "commit_by": commit_by}
            )
            return int(count)

        return await self.database.run(operation, retry=True)

    # -- listing --------------------------------------------------------------------------------
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
        params: dict[str, Any] = {"tenant": tenant, "limit": limit}
        if after is not None:
            params["activity"], params["id"] = read_listing_cursor(after)
        if limit == 0:
            return []
        query = "list" + ("_tenant" if tenant is not None else "") + ("_after" if after is not None else "")
        rows = await self.database.fetch_rows(self._q[query], params, retry=True)
        return [stored_conversation(*row, backend=BACKEND) for row in rows]

    # -- deletion and retention -----------------------------------------------------------------
    async def delete(self, conversation_id: str) -> bool:
        """Delete the conversation, its messages and summaries; ``False`` if it did not exist."""
        self.database.check_open()
        q = self._q

        async def operation(conn: PostgresConnection) -> bool:
            commit_by = await self.database.commit_by(conn)
            async with conn.transaction(), conn.cursor(row_factory=psycopg_rows.tuple_row) as cur:
                await cur.execute(q["delete"], (conversation_id, commit_by))
                row = await cur.fetchone()
                if row is None:
                    return False
                await cur.execute(q["drop_messages"], (row[0],))
                await cur.execute(q["drop_summaries"], (row[0],))
                return bool(row[1])

        return await self.database.run(operation)

    async def expire(self, conversation_id: str, ttl: float | None) -> bool:
        """Expire the conversation ``ttl`` seconds from now (``None``: never); ``False`` if absent."""
        self.database.check_open()
        # make_interval(NULL) is NULL: expires_at = NULL, never
        params = (ttl, conversation_id)
        return bool(await self.database.fetch_rows(self._q["expire"], params, retry=True, commit_by=True))

    async def purge_expired(self) -> int:
        """Delete every expired conversation with its messages and summaries; returns how many."""
        self.database.check_open()
        [(count,)] = await self.database.fetch_rows(self._q["purge"], retry=True, commit_by=True)
        return int(count)


class PostgresHistoryProvider(StorageHistoryProvider):
    """A history provider keeping conversations in PostgreSQL.

    Args:
        pool: An ``AsyncConnectionPool`` to use (not closed by the provider).
        url: Or a connection URL; the provider's store uses the process's pool for it (as
            :meth:`from_url` does).
        source_id: Provider id and state key.
        schema: The schema holding the tables.
        load_limit: Load at most this many of the newest view messages per run.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires.
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.
        key_ring: Encrypt message bodies and summaries (see :mod:`agentkeep.encryption`).
        pooler: ``"transaction"`` when ``url`` goes through a pooler in transaction pooling mode
            (PgBouncer's ``pool_mode = transaction``): nothing prepared, timeouts per transaction.
        pool_size: With ``url``, the most connections of the process's pool for that database
            (shared with the other stores on it; default 10).

    The other options (``load_messages``, ``store_inputs``, ...) are those of
    :class:`~agentkeep.providers.HistoryProvider`.

    Example:
        ```python
        provider = PostgresHistoryProvider.from_url("postgresql://app@db:5432/app", load_limit=200)
        agent = Agent(client, context_providers=[provider])
        await agent.run("Hello!", session=agent.create_session(session_id="user-42"))
        await provider.aclose()  # releases the pool (the last store on it closes it)
        ```
    """

    store: PostgresMessageStore

    def __init__(
        self,
        pool: PostgresPool | None = None,
        *,
        url: str | None = None,
        source_id: str = "postgres_history",
        schema: str = DEFAULT_SCHEMA,
        load_limit: int | None = None,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
        **options: Unpack[HistoryOptions],
    ) -> None:
        store = PostgresMessageStore(
            pool,
            url=url,
            schema=schema,
            max_messages=max_messages,
            ttl=ttl,
            timeout=timeout,
            key_ring=key_ring,
            pooler=pooler,
            pool_size=pool_size,
        )
        super().__init__(
            store,
            source_id,
            load_limit=load_limit,
            **options,
            owns_store=True,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresHistoryProvider:
        """A provider whose store owns a pool on ``url``; ``options`` as for the constructor."""
        return cls(url=url, **options)
