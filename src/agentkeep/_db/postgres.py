"""The PostgreSQL database layer: pool, schema, migrations, timeouts and error mapping.

:class:`PostgresDatabase` (used by :mod:`agentkeep.message_stores.postgres`, where the tables,
locking and timeouts are described) holds an ``AsyncConnectionPool`` (injected, or created from a
URL and then owned), applies the append-only list of migrations, gives each write its commit-by
time (:meth:`PostgresDatabase.commit_by`, checked at COMMIT by the schema's trigger) and maps
driver errors to agentkeep's. The PostgreSQL stores run their statements through it: the message
store (:mod:`agentkeep.message_stores.postgres`), the session store
(:mod:`agentkeep.session_stores.postgres`) and the memory store (:mod:`agentkeep.memory.postgres`).

Needs psycopg 3 and its pool (extra ``[postgres]``); importing this module without them raises an
``ImportError`` that names the extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final, Literal, LiteralString, TypeVar, cast

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.pq import TransactionStatus
    from psycopg.rows import tuple_row
    from psycopg_pool import AsyncConnectionPool, PoolTimeout

    from .pools import acquire_pool, release_pool, why_no_connection
except ImportError as exc:
    raise ImportError(
        "the PostgreSQL backend needs psycopg 3 and psycopg_pool: pip install 'agentkeep[postgres]'"
    ) from exc

from ..errors import (
    OutcomeUnknownError,
    SchemaVersionError,
    StorageClosedError,
    StorageError,
    StorageUnavailableError,
)
from ..message_stores.codec import FORMAT_VERSION

__all__ = [
    "BACKEND",
    "COMMIT_BY",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_SCHEMA",
    "POOLERS",
    "SCHEMA_VERSION",
    "Pooler",
    "PostgresConnection",
    "PostgresDatabase",
    "PostgresPool",
]

T = TypeVar("T")
PostgresConnection = psycopg.AsyncConnection[Any]
"""The connection type operations receive."""
PostgresPool = AsyncConnectionPool[Any]
"""The pool type the stores accept."""

BACKEND: Final = "postgres"

DEFAULT_POOL_SIZE: Final = 10
"""The most connections a process's pool for one URL opens, unless a store asks for more."""

DEFAULT_SCHEMA: Final = "agentkeep"
"""The schema both PostgreSQL stores use when none is given."""

Pooler = Literal["transaction"]
"""The connection poolers agentkeep can run behind: ``"transaction"``, a pooler in transaction
pooling mode (PgBouncer's ``pool_mode = transaction``), where consecutive transactions of a
client may run on different server connections."""
POOLERS: Final[tuple[Pooler, ...]] = ("transaction",)

# The schema's append function, one round trip per append; each statement of a (volatile)
# function sees what committed before it started, so the retry check after the row lock sees a
# concurrent original. Migrations 1 and 3 create it with different retry checks.
_APPEND_HEAD: Final = """{append_messages}(
            p_conversation text, p_times bigint[], p_ids bytea[], p_bodies bytea[],
            p_check boolean, p_window bigint, p_max bigint, p_ttl double precision
        ) RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE
            v_key bigint; v_last bigint; v_count bigint; v_expired boolean; v_found bigint; v_gone bigint;
"""
_APPEND_BODY: Final = """        BEGIN
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
"""
_APPEND_TAIL: Final = """            INSERT INTO {messages} (conversation, seq, time, id, body)
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
        $$"""
_NEWER_DATA: Final = "AK001"
"""The SQLSTATE the append function raises when a newer agentkeep has upgraded the schema or the
record format since (mapped to :class:`~agentkeep.errors.SchemaVersionError`)."""
_CHECK_VERSIONS: Final = """        BEGIN
            IF EXISTS (SELECT 1 FROM {schema_migrations} WHERE version > 4 OR format_version > 2) THEN
                RAISE EXCEPTION 'the data was upgraded by a newer agentkeep while this one had it open'
                    USING ERRCODE = 'AK001';
            END IF;
"""
_RETRY_BY_FIRST_ID: Final = """                SELECT seq INTO v_found FROM {messages}
                    WHERE conversation = v_key AND seq > v_last - p_window AND id = p_ids[1]
                    ORDER BY seq LIMIT 1;
                IF FOUND THEN  -- a retry: the batch was stored contiguously from there
                    RETURN v_found;
                END IF;
            END IF;
"""
_RETRY_BY_WHOLE_BATCH: Final = """                SELECT seq INTO v_found FROM {messages}
                    WHERE conversation = v_key AND seq > v_last - p_window AND id = p_ids[1]
                    ORDER BY seq DESC LIMIT 1;
                IF FOUND THEN
                    SELECT count(*) INTO v_same
                        FROM unnest(p_ids, p_bodies) WITH ORDINALITY AS t(id, body, ord)
                        JOIN {messages} m ON m.conversation = v_key AND m.seq = v_found + t.ord - 1
                            AND m.id = t.id
                            AND substring(m.body FROM 1 FOR length(m.body) - 4)
                                = substring(t.body FROM 1 FOR length(t.body) - 4);
                    IF v_same = cardinality(p_ids) THEN
                        RETURN v_found;  -- a retry: stored already
                    END IF;
                    RETURN -1;
                END IF;
                SELECT t.ord INTO v_found FROM unnest(p_ids) WITH ORDINALITY AS t(id, ord)
                    WHERE EXISTS (SELECT 1 FROM {messages} m
                        WHERE m.conversation = v_key AND m.seq > v_last - p_window AND m.id = t.id)
                    ORDER BY t.ord LIMIT 1;
                IF FOUND THEN
                    RETURN -v_found;
                END IF;
            END IF;
"""

# Migration 5's append function: versions after 5 refused, each conversation's activity kept.
_APPEND_WITH_ACTIVITY: Final = (
    "CREATE OR REPLACE FUNCTION "
    + _APPEND_HEAD
    + "            v_same bigint;\n"
    + _CHECK_VERSIONS.replace("version > 4", "version > 5")
    + _APPEND_BODY.removeprefix("        BEGIN\n")
    + _RETRY_BY_WHOLE_BATCH
    + _APPEND_TAIL.replace(
        "message_count = v_count,",
        "message_count = v_count,\n                activity = p_times[cardinality(p_times)],",
    )
)
_PAST_COMMIT_BY: Final = "AK002"
"""The SQLSTATE the commit-by trigger raises at a COMMIT the server reached after the transaction's
``agentkeep.commit_by`` time (mapped to :class:`~agentkeep.errors.StorageUnavailableError`:
the transaction is rolled back, nothing of it is stored)."""
_CHECK_COMMIT_BY: Final = """CREATE FUNCTION {check_commit_by}() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            v_by text := current_setting('agentkeep.commit_by', true);
        BEGIN
            IF v_by <> '' AND clock_timestamp() > v_by::timestamptz THEN
                RAISE EXCEPTION 'the server reached the commit at %, after the commit-by time %',
                    clock_timestamp(), v_by::timestamptz USING ERRCODE = 'AK002';
            END IF;
            RETURN NULL;
        END
        $$"""


def _commit_by_trigger(table: LiteralString, events: LiteralString) -> LiteralString:
    """The statement creating the commit-by check of ``table``'s rows, run at COMMIT."""
    return (
        f"CREATE CONSTRAINT TRIGGER commit_by AFTER {events} ON {{{table}}} "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {check_commit_by}()"
    )


COMMIT_BY: Final = "set_config('agentkeep.commit_by', %s, true)"
"""What a write statement evaluates (in its ``RETURNING`` or select list: once for each row it
writes) to set its transaction's commit-by time, the statement's parameter there being
:meth:`PostgresDatabase.commit_by`."""

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
        "CREATE FUNCTION " + _APPEND_HEAD + _APPEND_BODY + _RETRY_BY_FIRST_ID + _APPEND_TAIL,
    ),
    # Compaction excludes and anchors by message id: without these, each record_compaction scanned
    # the whole conversation.
    (
        "CREATE INDEX ON {messages} (conversation, id)",
        "CREATE INDEX ON {summaries} (conversation, id)",
    ),
    # A retry is a batch stored as it is from its first message on (ids, and bodies short of their
    # seals, which cover the time); any other batch reusing an id among the newest p_window is
    # refused: -k names its k-th message.
    (
        "CREATE OR REPLACE FUNCTION "
        + _APPEND_HEAD
        + "            v_same bigint;\n"
        + _APPEND_BODY
        + _RETRY_BY_WHOLE_BATCH
        + _APPEND_TAIL,
    ),
    # An open store stops appending once a newer agentkeep has upgraded the data: the function
    # checks the recorded versions (those after 4 / format 2) in the append's own transaction.
    (
        "CREATE OR REPLACE FUNCTION "
        + _APPEND_HEAD
        + "            v_same bigint;\n"
        + _CHECK_VERSIONS
        + _APPEND_BODY.removeprefix("        BEGIN\n")
        + _RETRY_BY_WHOLE_BATCH
        + _APPEND_TAIL,
    ),
    # A listing page is one index range: each conversation row keeps its activity (the newest
    # message's time in microseconds; -2**62, NO_ACTIVITY, without messages), set by the append
    # function, and its tenant (the id's part before the first "::"), computed from the id. Ids
    # order bytewise (COLLATE "C"), as Python orders str; the function checks versions after 5.
    (
        """ALTER TABLE {conversations}
            ADD COLUMN activity bigint NOT NULL DEFAULT -4611686018427387904,
            ADD COLUMN tenant text GENERATED ALWAYS AS (CASE WHEN strpos(conversation_id, '::') > 0
                THEN left(conversation_id, strpos(conversation_id, '::') - 1) END) STORED""",
        """UPDATE {conversations} AS c SET activity = coalesce((
            SELECT time FROM {messages} WHERE conversation = c.key ORDER BY seq DESC LIMIT 1), c.activity)""",
        'CREATE INDEX ON {conversations} (activity, conversation_id COLLATE "C")',
        'CREATE INDEX ON {conversations} (tenant, activity, conversation_id COLLATE "C")',
        _APPEND_WITH_ACTIVITY,
    ),
    # A write reported failed never commits later: every write transaction of agentkeep sets
    # agentkeep.commit_by (a time on the server's clock, see PostgresDatabase.commit_by), and a
    # deferred trigger on the rows its writes change refuses the COMMIT once the server's clock is
    # past it (a server paused, or a message delayed, past the caller's deadline). A transaction
    # that sets nothing (an older agentkeep, an administrator) is not checked, so the append
    # function now accepts versions up to 6.
    (
        _CHECK_COMMIT_BY,
        _commit_by_trigger("conversations", "INSERT OR UPDATE OR DELETE"),
        _commit_by_trigger("sessions", "INSERT OR UPDATE OR DELETE"),
        _commit_by_trigger("messages", "UPDATE OF body"),  # records rewritten in place (key rotation)
        _commit_by_trigger("summaries", "UPDATE OF body"),
        _APPEND_WITH_ACTIVITY.replace("version > 5", "version > 6"),
    ),
)

SCHEMA_VERSION: Final = len(_MIGRATIONS)
"""The schema version this agentkeep creates (the number of migrations)."""

_NAMES: Final = (
    "conversations",
    "messages",
    "summaries",
    "sessions",
    "schema_migrations",
    "append_messages",
    "check_commit_by",
)

_SETUP: Final[dict[str, LiteralString]] = {
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
}


def _milliseconds(timeout: float) -> int:
    return max(1, round(timeout * 1000))


def _connect_kwargs(timeout: float, pooler: Pooler | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": max(2, round(timeout)),  # libpq's minimum is 2 seconds
    }
    if pooler is None:
        milliseconds = _milliseconds(timeout)
        kwargs["options"] = (
            f"-c statement_timeout={milliseconds} -c idle_in_transaction_session_timeout={2 * milliseconds}"
        )
    else:
        # A transaction pooler refuses startup options and shares server connections between
        # clients: nothing is prepared (a prepared statement lives on one server connection).
        kwargs["prepare_threshold"] = None
    return kwargs


def _settings(timeout: float, *, pooler: Pooler | None, snapshot: bool) -> str:
    """What an operation's transaction sets first, as one message: with a pooler the timeouts, for
    this transaction only (``SET LOCAL``: nothing stays on the shared server connection)."""
    statements = ["SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"] if snapshot else []
    if pooler is not None:
        milliseconds = _milliseconds(timeout)
        statements.append(f"SET LOCAL statement_timeout = {milliseconds}")
        statements.append(f"SET LOCAL idle_in_transaction_session_timeout = {2 * milliseconds}")
    return "; ".join(statements)


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


_CLOCK_READ_EVERY: Final = 30.0
"""Seconds a reading of the server's clock serves commit-by times for (two clocks drift apart by
milliseconds in that time, where a commit-by time leaves a second)."""
_ATTEMPT_STARTED: ContextVar[float | None] = ContextVar("agentkeep_postgres_attempt", default=None)
"""When the attempt of the operation running in this context started (``time.monotonic()``)."""

_SETUP_ROUNDS: Final = 3
"""Setups tried when a concurrent one created the schema's objects first (see ``_migrate``)."""
_CREATED_CONCURRENTLY: Final = (
    psycopg.errors.UniqueViolation,
    psycopg.errors.DuplicateSchema,
    psycopg.errors.DuplicateTable,
    psycopg.errors.DuplicateObject,
    psycopg.errors.DuplicateFunction,
)

_TOO_LARGE: Final = "54"
"""SQLSTATE class "program limit exceeded" ("row is too big", too many columns): not retryable."""


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class PostgresDatabase:
    """A connection pool with what agentkeep's PostgreSQL stores share: schema, timeouts, errors.

    Args:
        pool: An ``AsyncConnectionPool`` to use; the caller opens and closes it.
        url: Or a connection URL: the process's pool for that URL and these settings is used
            (:mod:`agentkeep._db.pools`: one pool shared by every store on the same database,
            ``min_size`` 1, connections in autocommit mode with ``connect_timeout``,
            ``statement_timeout`` and, so that a stuck client cannot keep a conversation locked,
            ``idle_in_transaction_session_timeout`` of twice the timeout), acquired on first use
            and released by :meth:`aclose` (the last store to release it closes it).
        schema: The schema holding the tables (created by :meth:`setup`).
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.
        pooler: ``"transaction"`` when ``url`` reaches the server through a pooler in transaction
            pooling mode (PgBouncer's ``pool_mode = transaction``): no startup ``options`` are
            sent and nothing is prepared, and every operation runs in a transaction of its own
            that sets ``statement_timeout`` and ``idle_in_transaction_session_timeout`` with
            ``SET LOCAL``, so the server cancels an operation the client gave up on (an injected
            pool's connections are told to prepare nothing too; its ``kwargs`` must not hold
            ``options``). ``None`` (the default): a direct connection, timeouts set once per
            connection.
        pool_size: With ``url``, the most connections the shared pool may open (default 10; the
            pool takes the largest size its stores ask for).
    """

    backend = BACKEND

    def __init__(
        self,
        pool: PostgresPool | None = None,
        *,
        url: str | None = None,
        schema: str = DEFAULT_SCHEMA,
        timeout: float = 5.0,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
    ) -> None:
        if (pool is None) == (url is None):
            raise ValueError("pass either a pool or a url")
        if pool_size is not None and (pool is not None or isinstance(pool_size, bool) or pool_size < 1):
            raise ValueError(
                "pool_size is a positive whole number, for a store that opens its own pool (url)"
            )
        if pooler is not None and pooler not in POOLERS:
            raise ValueError(f"pooler must be one of {', '.join(POOLERS)} or None, not {pooler!r}")
        if not schema or "\x00" in schema:
            raise ValueError("schema must be a non-empty name")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.schema = schema
        self.timeout = timeout
        self.pooler: Pooler | None = pooler
        # per kind of operation (snapshot or not): what its transaction sets first, and the same
        # after BEGIN as one message (encoded once: every operation behind a pooler sends one)
        self._settings: dict[bool, tuple[bytes, bytes]] = {}
        for snapshot in (False, True):
            settings = _settings(timeout, pooler=pooler, snapshot=snapshot)
            self._settings[snapshot] = (settings.encode(), f"BEGIN; {settings}".encode())
        self._owns_pool = pool is None
        self._url = url or ""
        self._kwargs = _connect_kwargs(timeout, pooler)
        self.pool_size = DEFAULT_POOL_SIZE if pool_size is None else pool_size
        self._pool: PostgresPool | None = pool
        self.address = _address(url, self._kwargs) if pool is None else _address(pool.conninfo, pool.kwargs)
        identifiers: dict[str, sql.Composable] = {name: sql.Identifier(schema, name) for name in _NAMES}
        identifiers["schema"] = sql.Identifier(schema)
        self._identifiers = identifiers
        self._migrations_table = sql.Identifier(schema, "schema_migrations").as_string(None)
        self._lock_key = int.from_bytes(
            hashlib.blake2b(f"agentkeep:{schema}".encode(), digest_size=8).digest(), "big", signed=True
        )
        self._read_clock = self.query("SELECT extract(epoch FROM clock_timestamp())::float8")
        self._clock_offset: float | None = None  # the server's clock minus time.monotonic()
        self._clock_read_at = 0.0
        self._opened = not self._owns_pool
        self._ready = False
        self._closed = False
        self._setup_lock = asyncio.Lock()

    def reaches_same_database(self, other: PostgresDatabase) -> bool:
        """Whether ``other``'s operations can run on this one's connections, in one transaction
        with this one's: the same injected pool, or the same URL and connection settings."""
        if self._owns_pool != other._owns_pool:
            return False
        if not self._owns_pool:
            return self._pool is other._pool
        return (self._url, self._kwargs, self.pooler, self.timeout) == (
            other._url,
            other._kwargs,
            other.pooler,
            other.timeout,
        )

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

    async def fetch_rows(
        self,
        query: bytes,
        params: Sequence[Any] | Mapping[str, Any] = (),
        *,
        retry: bool = False,
        commit_by: bool = False,
    ) -> list[Any]:
        """Run one statement on a pooled connection (as :meth:`run` does); its rows as tuples.
        With ``commit_by``, a write whose last parameter (or ``%(commit_by)s``) is filled in with
        :meth:`commit_by` here."""

        async def operation(conn: PostgresConnection) -> list[Any]:
            if not commit_by:
                return await self.fetch(conn, query, params)
            by = await self.commit_by(conn)
            values = {**params, "commit_by": by} if isinstance(params, Mapping) else (*params, by)
            return await self.fetch(conn, query, values)

        return await self.run(operation, retry=retry)

    async def commit_by(self, conn: PostgresConnection) -> str:
        """The commit-by time of the write an operation of :meth:`run` makes on ``conn``: the
        time on the server's clock ``timeout`` seconds after the operation's attempt started, a
        second before its caller stops waiting. Each write statement sets it for its transaction
        (:data:`COMMIT_BY`), and the schema's trigger refuses the transaction's COMMIT once the
        server's clock is past it: a write that a paused or overloaded server gets to after its
        caller was told it failed is rolled back, not stored.

        The server's clock is read on ``conn`` (one round trip) when the last reading is older
        than 30 seconds, and taken as if read when the reply arrived: the time is never later
        than the caller's deadline on the server's clock (earlier by at most that round trip).
        """
        started = _ATTEMPT_STARTED.get()
        start = time.monotonic() if started is None else started
        if self._clock_offset is None or time.monotonic() - self._clock_read_at > _CLOCK_READ_EVERY:
            [(server_time,)] = await self.fetch(conn, self._read_clock, ())
            self._clock_read_at = time.monotonic()
            self._clock_offset = float(server_time) - self._clock_read_at
        return datetime.fromtimestamp(start + self._clock_offset + self.timeout, UTC).isoformat()

    def unavailable(self, message: str, *, outcome_unknown: bool = False) -> StorageUnavailableError:
        """A :class:`StorageUnavailableError` for this database (an :class:`OutcomeUnknownError`
        for a write that may have committed)."""
        kind = OutcomeUnknownError if outcome_unknown else StorageUnavailableError
        return kind(message, backend=BACKEND, address=self.address)

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
            for _ in range(_SETUP_ROUNDS):
                if self._ready:
                    break
                versions = await self._run(self._versions, retry=True, writes=False)
                self._check_versions(*versions)
                self._ready = versions == (SCHEMA_VERSION, FORMAT_VERSION) or await self._run(
                    self._migrate, retry=True, writes=False
                )
            if not self._ready:
                raise self.unavailable(f"the schema kept changing during {_SETUP_ROUNDS} setups")

    @property
    def pool(self) -> PostgresPool | None:
        """The pool operations run on (``None`` until a store opened from a URL is first used)."""
        return self._pool

    async def _open(self) -> None:
        if not self._opened:
            async with self._setup_lock:
                if not self._opened:
                    try:
                        self._pool = await acquire_pool(
                            self._url, kwargs=self._kwargs, max_size=self.pool_size, seconds=self.timeout
                        )
                    except (psycopg.Error, TimeoutError, OSError) as exc:
                        raise self.unavailable(f"cannot connect: {_describe(exc)}") from exc
                    self._opened = True

    async def aclose(self) -> None:
        """Release the pool if it was acquired here (the last user closes it); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_pool and self._opened and self._pool is not None:
            await release_pool(self._pool, max_size=self.pool_size)

    def _connections(self) -> PostgresPool:
        assert self._pool is not None, "opened before any operation runs"
        return self._pool

    # -- running operations ----------------------------------------------------------------------
    async def run(
        self,
        operation: Callable[[PostgresConnection], Awaitable[T]],
        *,
        retry: bool = False,
        writes: bool = False,
        snapshot: bool = False,
    ) -> T:
        """Run ``operation`` on a pooled connection (after :meth:`setup`, once), mapping errors.

        Args:
            operation: Receives the connection; opens its own transaction when it needs one
                (behind a pooler it runs inside one transaction already, its own become
                savepoints).
            retry: Run it once more on a fresh connection if the connection turns out to be
                dead (only for operations that are safe to repeat).
            writes: It changes data: a connection lost (or a reply not received) while it ran
                raises :class:`~agentkeep.errors.OutcomeUnknownError` (it may have committed).
            snapshot: Run it in one read-only transaction that sees one snapshot of the data
                (repeatable read).

        Raises:
            StorageUnavailableError: No connection in time, a dead server, no answer in time
                (``OutcomeUnknownError`` for a write that may have committed), or a COMMIT the
                server reached after the write's commit-by time (rolled back: nothing stored).
            StorageError: Any other database error.
        """
        self.check_open()
        if not self._ready:
            await self.setup()
        return await self._run(operation, retry=retry, writes=writes, snapshot=snapshot)

    async def _run(
        self,
        operation: Callable[[PostgresConnection], Awaitable[T]],
        *,
        retry: bool,
        writes: bool,
        snapshot: bool = False,
    ) -> T:
        if snapshot or self.pooler is not None:
            operation = self._in_transaction(
                operation, *self._settings[snapshot], prepare=self.pooler is None
            )

        attempts = 2 if retry else 1
        lost = False  # a write's connection failed while it ran: it may have committed
        for attempt in range(1, attempts + 1):
            try:
                async with self._connections().connection(timeout=self.timeout) as conn:
                    try:
                        async with asyncio.timeout(self.timeout + 1):
                            started = _ATTEMPT_STARTED.set(time.monotonic())
                            try:
                                return await operation(conn)
                            finally:
                                _ATTEMPT_STARTED.reset(started)
                    except TimeoutError:
                        lost = writes
                        raise
                    except psycopg.OperationalError:
                        lost = lost or (writes and conn.broken)
                        if not conn.broken or attempt == attempts:
                            raise
            except PoolTimeout as exc:
                reason = await why_no_connection(self._connections(), seconds=self.timeout)
                message = f"no connection within {self.timeout:g} s{reason}"
                raise self.unavailable(message, outcome_unknown=lost) from exc
            except TimeoutError as exc:
                message = f"no answer within {self.timeout + 1:g} s"
                raise self.unavailable(message, outcome_unknown=lost) from exc
            except psycopg.OperationalError as exc:
                if exc.sqlstate == _NEWER_DATA:
                    raise self._newer(exc) from exc
                if (exc.sqlstate or "").startswith(_TOO_LARGE):  # not the server's state: the data's
                    raise StorageError(
                        f"{BACKEND} at {self.address}: the data is too large to store ({_describe(exc)})",
                        backend=BACKEND,
                    ) from exc
                await self._drop_dead_connections()
                raise self.unavailable(_describe(exc), outcome_unknown=lost) from exc
            except psycopg.Error as exc:
                if exc.sqlstate == _NEWER_DATA:
                    raise self._newer(exc) from exc
                if exc.sqlstate == _PAST_COMMIT_BY:  # rolled back: nothing of this attempt is stored
                    message = f"not stored, too late: {exc.diag.message_primary or _describe(exc)}"
                    raise self.unavailable(message, outcome_unknown=lost) from exc
                raise StorageError(f"{BACKEND} at {self.address}: {_describe(exc)}", backend=BACKEND) from exc
            # The connection died (server restart, terminated backend): the pool has dropped it;
            # drop the other dead idle ones too before trying again.
            await self._drop_dead_connections()
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _in_transaction(
        operation: Callable[[PostgresConnection], Awaitable[T]],
        settings: bytes,
        begin: bytes,
        *,
        prepare: bool,
    ) -> Callable[[PostgresConnection], Awaitable[T]]:
        """``operation`` in a transaction that starts with ``settings``, committed after it (the
        commit is part of the operation: under its deadline, and a write's outcome is unknown if
        the reply is lost). A transaction the operation opens becomes a savepoint of this one;
        ``begin`` is ``BEGIN`` and ``settings`` as one message."""

        async def transaction(conn: PostgresConnection) -> T:
            if not prepare:
                conn.prepare_threshold = None  # an injected pool's connections too
            if not conn.autocommit:  # psycopg opens the transaction itself
                async with conn.transaction():
                    await conn.execute(settings)
                    return await operation(conn)
            await conn.execute(begin)  # one round trip
            try:
                result = await operation(conn)
            except BaseException:
                if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                    # a connection that fails here is gone with its transaction; the pool drops it
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute(b"ROLLBACK")
                raise
            await conn.execute(b"COMMIT")
            return result

        return transaction

    def _newer(self, exc: psycopg.Error) -> SchemaVersionError:
        message = exc.diag.message_primary or "the data was upgraded by a newer agentkeep"
        return SchemaVersionError(f"{BACKEND} at {self.address}: {message}", backend=BACKEND)

    async def _drop_dead_connections(self) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self._connections().check()
        except (psycopg.Error, TimeoutError):
            pass  # the next operation reports the state of the server

    async def _migrate(self, conn: PostgresConnection) -> bool:
        """Migrate under the lock; ``False`` if a concurrent setup created an object first.

        That happens behind a transaction pooler: a server connection may still hold a catalog
        entry looked up (as missing) for another client before the lock was granted; the next
        setup round, in a new transaction, sees the other setup's work.
        """
        try:
            await self._migrate_locked(conn)
        except _CREATED_CONCURRENTLY:
            return False
        return True

    async def _migrate_locked(self, conn: PostgresConnection) -> None:
        async with conn.transaction():
            # The commit-by checks run after each statement here (a migration sets no commit-by
            # time): a table with trigger events pending until COMMIT refuses ALTER TABLE and
            # CREATE INDEX, which a migration may run after changing its rows.
            await conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            await conn.execute(self.query(_SETUP["create_schema"]))
            await conn.execute(self.query(_SETUP["create_migrations"]))
            current, newest_format = await self._versions(conn)  # another process may have migrated
            self._check_versions(current, newest_format)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version - 1]:
                    await conn.execute(self.query(statement))
                await conn.execute(self.query(_SETUP["record_migration"]), (version, FORMAT_VERSION))
            # Records of this format may be written from now on: older readers must refuse them.
            await conn.execute(
                self.query(_SETUP["record_format"]), {"format": FORMAT_VERSION, "version": SCHEMA_VERSION}
            )

    async def _versions(self, conn: PostgresConnection) -> tuple[int, int]:
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute("SELECT to_regclass(%s) IS NOT NULL", (self._migrations_table,))
            exists = await cur.fetchone()
            if exists is None or not exists[0]:
                return 0, 0
            await cur.execute(self.query(_SETUP["versions"]))
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
