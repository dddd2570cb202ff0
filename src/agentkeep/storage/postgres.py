"""PostgreSQL storage: the message store, the connection layer it shares, and the history provider.

Needs psycopg 3 and its pool (``pip install 'agentkeep[postgres]'``). :class:`PostgresDatabase`
holds an ``AsyncConnectionPool`` (injected, or created from a URL and then owned), the schema,
the timeouts, the migrations and the mapping of driver errors; :class:`PostgresMessageStore` (the
:class:`~agentkeep.storage.base.MessageStore` contract), :class:`PostgresHistoryProvider` and
:class:`~agentkeep.stores.postgres.PostgresSessionStore` run on it.

**Tables**, in the configured schema (``agentkeep`` by default; names are quoted)::

    schema_migrations  version, format_version, applied_at
    conversations      key (bigserial), conversation_id (unique), last_seq, epoch,
                       message_count, expires_at
    messages           (conversation, seq) primary key, time, excluded, id, body
    summaries          (conversation, seq) primary key, anchor, time, excluded, id, body, replaces
    sessions           (agent, conversation_id) primary key, version, payload, updated_at

Messages use :mod:`agentkeep.storage.codec` (16-byte ids, microsecond times, compact bodies);
fixed-width columns come first so rows need no padding, and ``body`` has storage ``MAIN`` (kept
in the row). Summaries have their own table, so ``messages`` is exactly the raw log.

**Setup and versions.** :meth:`PostgresDatabase.setup` (also run before the first operation)
applies an append-only list of migrations in one transaction under an advisory lock derived from
the schema name, so processes starting together migrate once. ``schema_migrations`` records each
migration with the record format (:data:`~agentkeep.storage.codec.FORMAT_VERSION`); a newer
schema or format raises :class:`~agentkeep.errors.SchemaVersionError` naming both versions.

**Concurrency.** An append is one call of the schema's ``append_messages`` function (one round
trip, one transaction). It locks the conversation's row (``SELECT ... FOR UPDATE``; a new
conversation is created and locked by ``INSERT ... ON CONFLICT DO UPDATE``), so appenders to one
conversation, in any number of processes, take turns, while other conversations do not wait.
Under the lock it checks for a retried batch (the first id among the newest
:data:`~agentkeep.storage.base.DEDUP_WINDOW` sequence numbers, a primary-key range scan; each
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

**Retention.** ``expires_at`` follows the server's clock; an expired conversation reads as absent,
an append to it starts a new one, and :meth:`PostgresMessageStore.purge_expired` deletes expired
conversations in bulk (for a periodic job).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any, Final, LiteralString, TypeVar, Unpack, cast

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import tuple_row
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as exc:
    raise ImportError(
        "agentkeep.storage.postgres needs psycopg 3 and psycopg_pool: pip install 'agentkeep[postgres]'"
    ) from exc

from ..errors import (
    CorruptRecordError,
    SchemaVersionError,
    StorageClosedError,
    StorageError,
    StorageUnavailableError,
)
from ..history import HistoryOptions
from ..messages import Message
from .base import DEDUP_WINDOW, ConversationInfo, HistoryView, StoredMessage, Summary
from .codec import (
    FORMAT_VERSION,
    decode_id,
    decode_message,
    decode_time,
    encode_body,
    encode_id,
    encode_time,
)
from .history import StorageHistoryProvider

__all__ = [
    "SCHEMA_VERSION",
    "PostgresConnection",
    "PostgresDatabase",
    "PostgresHistoryProvider",
    "PostgresMessageStore",
    "PostgresPool",
]

T = TypeVar("T")
PostgresConnection = psycopg.AsyncConnection[Any]
"""The connection type operations receive."""
PostgresPool = AsyncConnectionPool[Any]
"""The pool type the stores accept."""

BACKEND: Final = "postgres"
_DECODE_ERRORS: Final = (ValueError, TypeError, KeyError, IndexError)

# An append-only list: never edit a released migration, add a new one.
_MIGRATIONS: Final[tuple[tuple[LiteralString, ...], ...]] = (
    (
        """CREATE TABLE {conversations} (
            key bigserial PRIMARY KEY, conversation_id text NOT NULL UNIQUE,
            last_seq bigint NOT NULL DEFAULT 0, epoch bigint NOT NULL DEFAULT 0,
            message_count bigint NOT NULL DEFAULT 0, expires_at timestamptz)""",
        """CREATE TABLE {messages} (
            conversation bigint NOT NULL, seq bigint NOT NULL, time bigint NOT NULL,
            excluded boolean NOT NULL DEFAULT false, id bytea NOT NULL, body bytea NOT NULL,
            PRIMARY KEY (conversation, seq))""",
        "ALTER TABLE {messages} ALTER COLUMN id SET STORAGE PLAIN, ALTER COLUMN body SET STORAGE MAIN",
        """CREATE TABLE {summaries} (
            conversation bigint NOT NULL, seq bigint NOT NULL, anchor bigint NOT NULL,
            time bigint NOT NULL, excluded boolean NOT NULL DEFAULT false, id bytea NOT NULL,
            body bytea NOT NULL, replaces bytea[] NOT NULL, PRIMARY KEY (conversation, seq))""",
        """CREATE TABLE {sessions} (
            agent text NOT NULL, conversation_id text NOT NULL, version bigint NOT NULL,
            payload bytea NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent, conversation_id))""",
        # One round trip per append; each statement of a (volatile) function sees what committed
        # before it started, so the retry check after the row lock sees a concurrent original.
        """CREATE FUNCTION {append_messages}(
            p_conversation text, p_times bigint[], p_ids bytea[], p_bodies bytea[],
            p_check boolean, p_window bigint, p_max bigint, p_ttl double precision
        ) RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE
            v_key bigint; v_last bigint; v_count bigint; v_expired boolean; v_found bigint; v_gone bigint;
        BEGIN
            SELECT key, last_seq, message_count, coalesce(expires_at <= now(), false)
                INTO v_key, v_last, v_count, v_expired
                FROM {conversations} WHERE conversation_id = p_conversation FOR UPDATE;
            IF NOT FOUND THEN
                INSERT INTO {conversations} AS c (conversation_id) VALUES (p_conversation)
                    ON CONFLICT (conversation_id) DO UPDATE SET last_seq = c.last_seq
                    RETURNING key, last_seq, message_count, coalesce(expires_at <= now(), false)
                    INTO v_key, v_last, v_count, v_expired;
            END IF;
            IF v_expired THEN  -- gone for readers: start over
                DELETE FROM {messages} WHERE conversation = v_key;
                DELETE FROM {summaries} WHERE conversation = v_key;
                UPDATE {conversations} SET epoch = 0, expires_at = NULL WHERE key = v_key;
                v_last := 0; v_count := 0;
            ELSIF p_check AND v_last > 0 THEN
                SELECT seq INTO v_found FROM {messages}
                    WHERE conversation = v_key AND seq > v_last - p_window AND id = p_ids[1]
                    ORDER BY seq LIMIT 1;
                IF FOUND THEN  -- a retry: the batch was stored contiguously from there
                    RETURN v_found;
                END IF;
            END IF;
            INSERT INTO {messages} (conversation, seq, time, id, body)
                SELECT v_key, v_last + t.ord, t.time, t.id, t.body
                FROM unnest(p_times, p_ids, p_bodies) WITH ORDINALITY AS t(time, id, body, ord);
            v_count := v_count + cardinality(p_ids);
            IF v_count > p_max THEN
                DELETE FROM {messages} WHERE conversation = v_key AND seq IN (
                    SELECT seq FROM {messages} WHERE conversation = v_key ORDER BY seq LIMIT v_count - p_max
                );
                GET DIAGNOSTICS v_gone = ROW_COUNT;
                v_count := v_count - v_gone;
            END IF;
            UPDATE {conversations} SET last_seq = v_last + cardinality(p_ids), message_count = v_count,
                expires_at = coalesce(now() + make_interval(secs => p_ttl), expires_at)
                WHERE key = v_key;
            RETURN v_last + 1;
        END
        $$""",
    ),
    # Compaction excludes and anchors by message id: without these, each record_compaction scanned
    # the whole conversation.
    (
        "CREATE INDEX ON {messages} (conversation, id)",
        "CREATE INDEX ON {summaries} (conversation, id)",
    ),
)

SCHEMA_VERSION: Final = len(_MIGRATIONS)
"""The schema version this agentkeep creates (the number of migrations)."""

_NAMES: Final = ("conversations", "messages", "summaries", "sessions", "schema_migrations", "append_messages")

_LIVE: Final = "(expires_at IS NULL OR expires_at > now())"
_VIEW_HEAD: Final = f"""WITH c AS (
        SELECT key, epoch, last_seq FROM {{conversations}}
        WHERE conversation_id = %(conversation)s AND {_LIVE}
    ) SELECT c.epoch, c.last_seq, e.anchor, e.kind, e.seq, e.id, e.time, e.body, e.replaces
    FROM c LEFT JOIN LATERAL"""
_VIEW_MESSAGE: Final = """seq AS anchor, 1 AS kind, seq, id, time, body, NULL::bytea[] AS replaces
    FROM {messages} WHERE conversation = c.key AND NOT excluded"""
_VIEW_SUMMARY: Final = """anchor, 0 AS kind, seq, id, time, body, replaces
    FROM {summaries} WHERE conversation = c.key AND NOT excluded"""
_QUERIES: Final[dict[str, LiteralString]] = {
    # -- setup
    "versions": "SELECT coalesce(max(version), 0), coalesce(max(format_version), 0) FROM {schema_migrations}",
    "create_schema": "CREATE SCHEMA IF NOT EXISTS {schema}",
    "create_migrations": """CREATE TABLE IF NOT EXISTS {schema_migrations} (
        version integer PRIMARY KEY,
        format_version integer NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )""",
    "record_migration": "INSERT INTO {schema_migrations} (version, format_version) VALUES (%s, %s)",
    "record_format": """UPDATE {schema_migrations} SET format_version = %(format)s
        WHERE version = %(version)s AND format_version < %(format)s""",
    # -- append
    "append": """SELECT {append_messages}(%s, %s::int8[], %s::bytea[], %s::bytea[], %s, %s, %s, %s)""",
    "drop_messages": "DELETE FROM {messages} WHERE conversation = %s",
    "drop_summaries": "DELETE FROM {summaries} WHERE conversation = %s",
    # -- reads
    "read_last": f"""SELECT seq, id, time, body, excluded FROM {{messages}}
        WHERE conversation = (SELECT key FROM {{conversations}} WHERE conversation_id = %s AND {_LIVE})
        AND seq > %s ORDER BY seq DESC LIMIT %s""",
    # Whole reads are ordered in Python: rows come nearly in order, and a server-side sort of a
    # long conversation would spill to disk.
    "read_all": f"""SELECT seq, id, time, body, excluded FROM {{messages}}
        WHERE conversation = (SELECT key FROM {{conversations}} WHERE conversation_id = %s AND {_LIVE})
        AND seq > %s""",
    # The view order is (anchor, summaries before messages, seq); windows are read newest first.
    "view_last": f"""{_VIEW_HEAD} (
            (SELECT {_VIEW_MESSAGE} AND seq > %(after)s ORDER BY seq DESC LIMIT %(last)s)
            UNION ALL
            (SELECT {_VIEW_SUMMARY} AND seq > %(after)s ORDER BY anchor DESC, seq DESC LIMIT %(last)s)
            ORDER BY anchor DESC, kind DESC, seq DESC LIMIT %(last)s
        ) AS e ON true""",
    "view_all": f"""{_VIEW_HEAD} (
            SELECT {_VIEW_MESSAGE} AND seq > %(after)s UNION ALL SELECT {_VIEW_SUMMARY} AND seq > %(after)s
        ) AS e ON true""",
    # -- listing: one primary-key probe (newest seq first) per live conversation
    "list": f"""SELECT c.conversation_id, c.message_count, c.last_seq, m.time, m.seq
        FROM {{conversations}} AS c
        LEFT JOIN LATERAL (
            SELECT seq, time FROM {{messages}} WHERE conversation = c.key ORDER BY seq DESC LIMIT 1
        ) AS m ON true
        WHERE {_LIVE}
        ORDER BY m.time DESC NULLS LAST, c.key
        LIMIT %s""",
    # -- compaction, deletion, expiry
    "lock_live": f"""SELECT key, last_seq FROM {{conversations}}
        WHERE conversation_id = %s AND {_LIVE} FOR UPDATE""",
    "anchors": """SELECT id, seq FROM {messages} WHERE conversation = %s AND id = ANY(%s)
        UNION ALL SELECT id, anchor FROM {summaries} WHERE conversation = %s AND id = ANY(%s)""",
    "exclude_messages": """UPDATE {messages} SET excluded = true
        WHERE conversation = %s AND id = ANY(%s) AND NOT excluded""",
    "exclude_summaries": """UPDATE {summaries} SET excluded = true
        WHERE conversation = %s AND id = ANY(%s) AND NOT excluded""",
    "insert_summary": """INSERT INTO {summaries} (conversation, seq, anchor, time, id, body, replaces)
        VALUES (%s, %s, %s, %s, %s, %s, %s)""",
    "compacted": "UPDATE {conversations} SET last_seq = %s, epoch = epoch + 1 WHERE key = %s RETURNING epoch",
    "delete": f"DELETE FROM {{conversations}} WHERE conversation_id = %s RETURNING key, {_LIVE}",
    "expire": f"""UPDATE {{conversations}} SET expires_at = now() + make_interval(secs => %s)
        WHERE conversation_id = %s AND {_LIVE} RETURNING key""",
    "purge": """WITH gone AS (
            DELETE FROM {conversations} WHERE expires_at <= now() RETURNING key
        ), m AS (
            DELETE FROM {messages} WHERE conversation IN (SELECT key FROM gone)
        ), s AS (
            DELETE FROM {summaries} WHERE conversation IN (SELECT key FROM gone)
        ) SELECT count(*) FROM gone""",
}


def _connect_kwargs(timeout: float) -> dict[str, Any]:
    milliseconds = max(1, round(timeout * 1000))
    return {
        "autocommit": True,
        "connect_timeout": max(2, round(timeout)),  # libpq's minimum is 2 seconds
        "options": f"-c statement_timeout={milliseconds} -c idle_in_transaction_session_timeout="
        f"{2 * milliseconds}",
    }


def _address(conninfo: object, kwargs: object) -> str:
    """``postgresql://user@host:port/dbname``, never the password."""
    params: dict[str, Any] = {}
    if isinstance(conninfo, str):
        try:
            params.update(conninfo_to_dict(conninfo))
        except psycopg.ProgrammingError:
            return "postgresql (unparsable connection string)"
    if isinstance(kwargs, Mapping):
        params.update(cast("Mapping[str, Any]", kwargs))
    user = f"{params['user']}@" if params.get("user") else ""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or 5432
    return f"postgresql://{user}{host}:{port}/{params.get('dbname') or ''}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class PostgresDatabase:
    """A connection pool with what agentkeep's PostgreSQL stores share: schema, timeouts, errors.

    Args:
        pool: An ``AsyncConnectionPool`` to use; the caller opens and closes it.
        url: Or a connection URL: a pool is created (``min_size`` 1, ``max_size`` 10, connections
            in autocommit mode with ``connect_timeout``, ``statement_timeout`` and, so that a
            stuck client cannot keep a conversation locked, ``idle_in_transaction_session_timeout``
            of twice the timeout), opened on first use and closed by :meth:`aclose`.
        schema: The schema holding the tables (created by :meth:`setup`).
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.
    """

    backend = BACKEND

    def __init__(
        self,
        pool: PostgresPool | None = None,
        *,
        url: str | None = None,
        schema: str = "agentkeep",
        timeout: float = 5.0,
    ) -> None:
        if (pool is None) == (url is None):
            raise ValueError("pass either a pool or a url")
        if not schema or "\x00" in schema:
            raise ValueError("schema must be a non-empty name")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.schema = schema
        self.timeout = timeout
        self._owns_pool = pool is None
        if pool is None:
            pool = AsyncConnectionPool(
                url or "",
                kwargs=_connect_kwargs(timeout),
                min_size=1,
                max_size=10,
                open=False,
                timeout=timeout,
                name=f"agentkeep-{schema}",
            )
        self.pool: PostgresPool = pool
        self.address = _address(pool.conninfo, pool.kwargs)
        identifiers: dict[str, sql.Composable] = {name: sql.Identifier(schema, name) for name in _NAMES}
        identifiers["schema"] = sql.Identifier(schema)
        self._identifiers = identifiers
        self._migrations_table = sql.Identifier(schema, "schema_migrations").as_string(None)
        self._lock_key = int.from_bytes(
            hashlib.blake2b(f"agentkeep:{schema}".encode(), digest_size=8).digest(), "big", signed=True
        )
        self._opened = not self._owns_pool
        self._ready = False
        self._closed = False
        self._setup_lock = asyncio.Lock()

    def query(self, text: LiteralString) -> bytes:
        """``text`` with ``{table}`` placeholders replaced by this schema's quoted table names."""
        return sql.SQL(text).format(**self._identifiers).as_bytes(None)

    @staticmethod
    async def fetch(
        conn: PostgresConnection, query: bytes, params: Sequence[Any] | Mapping[str, Any]
    ) -> list[Any]:
        """Run ``query`` on ``conn``; all result rows as tuples (whatever the pool's row factory)."""
        async with conn.cursor(row_factory=tuple_row, binary=True) as cur:
            await cur.execute(query, params)
            return await cur.fetchall() if cur.description is not None else []

    def unavailable(self, message: str) -> StorageUnavailableError:
        """A :class:`StorageUnavailableError` for this database."""
        return StorageUnavailableError(message, backend=BACKEND, address=self.address)

    def check_open(self) -> None:
        """Raise :class:`StorageClosedError` after :meth:`aclose`."""
        if self._closed:
            raise StorageClosedError(f"the {BACKEND} store is closed", backend=BACKEND)

    # -- lifecycle ------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Create the schema and tables or migrate them; idempotent and safe to run concurrently.

        Raises:
            SchemaVersionError: The schema was migrated by a newer agentkeep (or holds records
                of a newer format).
            StorageUnavailableError: The server cannot be reached.
        """
        self.check_open()
        await self._open()
        async with self._setup_lock:
            if not self._ready:
                await self._run(self._migrate, retry=True)
                self._ready = True

    async def _open(self) -> None:
        if not self._opened:
            async with self._setup_lock:
                if not self._opened:
                    await self.pool.open(wait=False)
                    self._opened = True

    async def aclose(self) -> None:
        """Close the pool if it was created here; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_pool and self._opened:
            await self.pool.close()

    # -- running operations ----------------------------------------------------------------------
    async def run(self, operation: Callable[[PostgresConnection], Awaitable[T]], *, retry: bool = False) -> T:
        """Run ``operation`` on a pooled connection (after :meth:`setup`, once), mapping errors.

        Args:
            operation: Receives the connection; opens its own transaction when it needs one.
            retry: Run it once more on a fresh connection if the connection turns out to be
                dead (only for operations that are safe to repeat).

        Raises:
            StorageUnavailableError: No connection in time, a dead server or no answer in time.
            StorageError: Any other database error.
        """
        self.check_open()
        if not self._ready:
            await self.setup()
        return await self._run(operation, retry=retry)

    async def _run(self, operation: Callable[[PostgresConnection], Awaitable[T]], *, retry: bool) -> T:
        attempts = 2 if retry else 1
        for attempt in range(1, attempts + 1):
            try:
                async with self.pool.connection(timeout=self.timeout) as conn:
                    try:
                        async with asyncio.timeout(self.timeout + 1):
                            return await operation(conn)
                    except psycopg.OperationalError:
                        if not conn.broken or attempt == attempts:
                            raise
            except PoolTimeout as exc:
                raise self.unavailable(f"no connection within {self.timeout:g} s") from exc
            except TimeoutError as exc:
                raise self.unavailable(f"no answer within {self.timeout + 1:g} s") from exc
            except psycopg.OperationalError as exc:
                await self._drop_dead_connections()
                raise self.unavailable(_describe(exc)) from exc
            except psycopg.Error as exc:
                raise StorageError(f"{BACKEND} at {self.address}: {_describe(exc)}", backend=BACKEND) from exc
            # The connection died (server restart, terminated backend): the pool has dropped it;
            # drop the other dead idle ones too before trying again.
            await self._drop_dead_connections()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _drop_dead_connections(self) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self.pool.check()
        except (psycopg.Error, TimeoutError):
            pass  # the next operation reports the state of the server

    async def _migrate(self, conn: PostgresConnection) -> None:
        current, newest_format = await self._versions(conn)
        self._check_versions(current, newest_format)
        if (current, newest_format) == (SCHEMA_VERSION, FORMAT_VERSION):
            return
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            await conn.execute(self.query(_QUERIES["create_schema"]))
            await conn.execute(self.query(_QUERIES["create_migrations"]))
            current, newest_format = await self._versions(conn)  # another process may have migrated
            self._check_versions(current, newest_format)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version - 1]:
                    await conn.execute(self.query(statement))
                await conn.execute(self.query(_QUERIES["record_migration"]), (version, FORMAT_VERSION))
            # Records of this format may be written from now on: older readers must refuse them.
            await conn.execute(
                self.query(_QUERIES["record_format"]), {"format": FORMAT_VERSION, "version": SCHEMA_VERSION}
            )

    async def _versions(self, conn: PostgresConnection) -> tuple[int, int]:
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute("SELECT to_regclass(%s) IS NOT NULL", (self._migrations_table,))
            exists = await cur.fetchone()
            if exists is None or not exists[0]:
                return 0, 0
            await cur.execute(self.query(_QUERIES["versions"]))
            row = await cur.fetchone()
            return (int(row[0]), int(row[1])) if row is not None else (0, 0)

    def _check_versions(self, schema_version: int, format_version: int) -> None:
        for what, found, known in (
            ("schema version", schema_version, SCHEMA_VERSION),
            ("record format version", format_version, FORMAT_VERSION),
        ):
            if found > known:
                raise SchemaVersionError(
                    f"{BACKEND} schema {self.schema!r} at {self.address} has {what} {found}, newer "
                    f"than {what} {known} this agentkeep knows; upgrade agentkeep",
                    backend=BACKEND,
                )


def _time(message: Message) -> int:
    if message.created_at is None:  # pragma: no cover - ensure_identity() set it
        raise ValueError("message without a creation time")
    return encode_time(message.created_at)


class PostgresMessageStore:
    """The storage contract on PostgreSQL (see the module docs for tables and locking).

    Args:
        pool: An ``AsyncConnectionPool`` to use; it is not closed by :meth:`aclose`.
        url: Or a connection URL (``postgresql://user@host:5432/db``): the store creates, opens
            and closes its own pool.
        schema: The schema holding the tables (one schema can hold many conversations).
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.
    """

    backend = BACKEND

    def __init__(
        self,
        pool: PostgresPool | None = None,
        *,
        url: str | None = None,
        schema: str = "agentkeep",
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
    ) -> None:
        if max_messages is not None and max_messages <= 0:
            raise ValueError("max_messages must be positive")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive")
        self.database = PostgresDatabase(pool, url=url, schema=schema, timeout=timeout)
        self.max_messages = max_messages
        self.ttl = ttl
        self._q = {name: self.database.query(text) for name, text in _QUERIES.items()}

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        schema: str = "agentkeep",
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
    ) -> PostgresMessageStore:
        """A store with its own pool on ``url`` (opened on first use, closed by :meth:`aclose`)."""
        return cls(url=url, schema=schema, max_messages=max_messages, ttl=ttl, timeout=timeout)

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
        bodies = [encode_body(message) for message in messages]  # refuse what cannot be stored
        may_be_retry = messages[0].message_id is not None  # a new id cannot have been stored
        ids: list[bytes] = []
        times: list[int] = []
        for message in messages:
            message.ensure_identity()
            ids.append(encode_id(message.message_id or ""))
            times.append(_time(message))
        attempts = 0

        async def operation(conn: PostgresConnection) -> list[int]:
            nonlocal attempts
            attempts += 1  # a second attempt may follow one that committed
            check = may_be_retry or attempts > 1
            params = (conversation_id, times, ids, bodies, check, DEDUP_WINDOW, self.max_messages, self.ttl)
            [(first,)] = await self.database.fetch(conn, self._q["append"], params)
            return list(range(first, first + len(ids)))

        return await self.database.run(operation, retry=True)

    # -- reads ----------------------------------------------------------------------------------
    async def read(
        self, conversation_id: str, *, last: int | None = None, after: int | None = None
    ) -> list[StoredMessage]:
        """Raw log entries (excluded ones included, summaries not), oldest first."""
        self.database.check_open()
        if last is not None and last <= 0:
            return []
        since = after if after is not None else 0
        if last is None:
            query, params = self._q["read_all"], (conversation_id, since)
        else:
            query, params = self._q["read_last"], (conversation_id, since, last)

        async def operation(conn: PostgresConnection) -> list[Any]:
            return await self.database.fetch(conn, query, params)

        rows = await self.database.run(operation, retry=True)
        if last is None:
            rows.sort(key=itemgetter(0))
        else:
            rows.reverse()
        return [
            StoredMessage(seq, self._decode(conversation_id, seq, body, raw_id, time), excluded)
            for seq, raw_id, time, body, excluded in rows
        ]

    async def read_view(
        self, conversation_id: str, *, last: int | None = None, after: int | None = None
    ) -> HistoryView:
        """The compacted view, in view order (summaries where their first replaced message was)."""
        self.database.check_open()
        params = {"conversation": conversation_id, "after": after if after is not None else 0, "last": last}
        query = self._q["view_all" if last is None else "view_last"]

        async def operation(conn: PostgresConnection) -> list[Any]:
            return await self.database.fetch(conn, query, params)

        rows = await self.database.run(operation, retry=True)
        if not rows:
            return HistoryView()
        epoch, last_seq = rows[0][0], rows[0][1]
        if rows[0][4] is None:  # the conversation exists, nothing matched
            return HistoryView([], epoch, last_seq)
        if last is None:
            rows.sort(key=itemgetter(2, 3, 4))
        else:
            rows.reverse()
        entries: list[StoredMessage] = []
        for _, _, _, kind, seq, raw_id, time, body, replaces in rows:
            message = self._decode(conversation_id, seq, body, raw_id, time)
            ids = self._ids(conversation_id, seq, replaces) if kind == 0 else ()
            entries.append(StoredMessage(seq, message, replaces=ids))
        return HistoryView(entries, epoch, last_seq)

    def _decode(self, conversation_id: str, seq: int, body: bytes, raw_id: bytes, time: int) -> Message:
        try:
            return decode_message(body, raw_id, time)
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(
                str(exc), backend=BACKEND, conversation_id=conversation_id, seq=seq
            ) from exc

    def _ids(self, conversation_id: str, seq: int, raw_ids: list[bytes]) -> tuple[str, ...]:
        try:
            return tuple(decode_id(raw) for raw in raw_ids)
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(
                f"replaced ids: {exc}", backend=BACKEND, conversation_id=conversation_id, seq=seq
            ) from exc

    # -- compaction -----------------------------------------------------------------------------
    async def record_compaction(
        self,
        conversation_id: str,
        *,
        excluded: Collection[str] = (),
        summaries: Sequence[Summary] = (),
    ) -> int:
        """Exclude messages (by id) and add summaries; returns the new epoch (see the contract).

        Finding the messages by id reads the conversation's rows once (there is no index on
        ids, to keep rows small); compactions are rare next to appends.
        """
        self.database.check_open()
        rows: list[tuple[bytes, int, bytes, list[bytes]]] = []
        for summary in summaries:
            body = encode_body(summary.message)
            summary.message.ensure_identity()
            rows.append(
                (
                    encode_id(summary.message.message_id or ""),
                    _time(summary.message),
                    body,
                    [encode_id(message_id) for message_id in summary.replaces],
                )
            )
        excluded_ids = [encode_id(message_id) for message_id in excluded]

        async def operation(conn: PostgresConnection) -> int:
            return await self._compact(conn, conversation_id, excluded_ids, summaries, rows)

        return await self.database.run(operation, retry=True)

    async def _compact(
        self,
        conn: PostgresConnection,
        conversation_id: str,
        excluded_ids: list[bytes],
        summaries: Sequence[Summary],
        rows: list[tuple[bytes, int, bytes, list[bytes]]],
    ) -> int:
        q = self._q
        async with conn.transaction(), conn.cursor(row_factory=tuple_row, binary=True) as cur:
            await cur.execute(q["lock_live"], (conversation_id,))
            found = await cur.fetchone()
            if found is None:
                if summaries:
                    raise ValueError(f"conversation {conversation_id!r} does not exist")
                return 0
            key, last_seq = found
            anchors: dict[bytes, int] = {}
            if rows:
                wanted = list({raw for row in rows for raw in (row[0], *row[3])})
                await cur.execute(q["anchors"], (key, wanted, key, wanted))
                anchors = {bytes(raw): anchor for raw, anchor in await cur.fetchall()}
            placed: list[int] = []
            for summary, (_, _, _, replaces) in zip(summaries, rows, strict=True):
                known = [anchors[raw] for raw in replaces if raw in anchors]
                if not known:
                    raise ValueError(
                        f"summary {summary.message.message_id!r} replaces no stored message of "
                        f"conversation {conversation_id!r}"
                    )
                placed.append(min(known))
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

    # -- listing --------------------------------------------------------------------------------
    async def list_conversations(self, *, limit: int | None = None) -> list[ConversationInfo]:
        """Live conversations, most recently active first (the newest message's time); at most
        ``limit``.

        One pass over the live rows of ``conversations`` plus, per conversation, one backward
        primary-key probe for its newest message: no message is scanned.
        """
        self.database.check_open()
        if limit is not None and limit <= 0:
            return []
        query = self._q["list"]

        async def operation(conn: PostgresConnection) -> list[Any]:
            return await self.database.fetch(conn, query, (limit,))

        infos: list[ConversationInfo] = []
        for conversation_id, message_count, last_seq, time, seq in await self.database.run(
            operation, retry=True
        ):
            try:
                when = None if time is None else decode_time(time)
            except (OverflowError, *_DECODE_ERRORS) as exc:
                raise CorruptRecordError(
                    f"bad time: {exc}", backend=BACKEND, conversation_id=conversation_id, seq=seq
                ) from exc
            infos.append(ConversationInfo(conversation_id, message_count, last_seq, when))
        return infos

    # -- deletion and retention -----------------------------------------------------------------
    async def delete(self, conversation_id: str) -> bool:
        """Delete the conversation, its messages and summaries; ``False`` if it did not exist."""
        self.database.check_open()
        q = self._q

        async def operation(conn: PostgresConnection) -> bool:
            async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(q["delete"], (conversation_id,))
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
        query = self._q["expire"]

        async def operation(conn: PostgresConnection) -> bool:
            return bool(await self.database.fetch(conn, query, (ttl, conversation_id)))

        # make_interval(NULL) is NULL: expires_at = NULL, never
        return await self.database.run(operation, retry=True)

    async def purge_expired(self) -> int:
        """Delete every expired conversation with its messages and summaries; returns how many."""
        self.database.check_open()
        query = self._q["purge"]

        async def operation(conn: PostgresConnection) -> int:
            rows = await self.database.fetch(conn, query, ())
            return int(rows[0][0])

        return await self.database.run(operation, retry=True)


class PostgresHistoryProvider(StorageHistoryProvider):
    """A history provider keeping conversations in PostgreSQL.

    Args:
        url: A connection URL; the provider's store creates, opens and closes its own pool.
        pool: Or an ``AsyncConnectionPool`` to use (not closed by the provider).
        source_id: Provider id and state key.
        schema: The schema holding the tables.
        load_limit: Load at most this many of the newest view messages per run.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires.
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.

    The other options (``load_messages``, ``store_inputs``, ...) are those of
    :class:`~agentkeep.history.HistoryProvider`.

    Example:
        ```python
        provider = PostgresHistoryProvider("postgresql://app@db:5432/app", load_limit=200)
        agent = Agent(client, context_providers=[provider])
        await agent.run("Hello!", session=agent.create_session(session_id="user-42"))
        await provider.aclose()  # closes the pool it created
        ```
    """

    store: PostgresMessageStore

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: PostgresPool | None = None,
        source_id: str = "postgres_history",
        schema: str = "agentkeep",
        load_limit: int | None = None,
        max_messages: int | None = None,
        ttl: float | None = None,
        timeout: float = 5.0,
        **options: Unpack[HistoryOptions],
    ) -> None:
        store = PostgresMessageStore(
            pool, url=url, schema=schema, max_messages=max_messages, ttl=ttl, timeout=timeout
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
        return cls(url, **options)
