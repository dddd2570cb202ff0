"""The SQLite database layer: the file's schema and the connection its jobs run on.

:class:`SQLiteDatabase` (used by :mod:`agentkeep.message_stores.sqlite`, where the tables and the
concurrency design are described) opens the file in its one worker thread, sets WAL mode, applies
the append-only :data:`MIGRATIONS` and maps database failures to agentkeep's errors. Both SQLite
stores run their jobs through it: the message store (:mod:`agentkeep.message_stores.sqlite`) and the
session store (:mod:`agentkeep.session_stores.sqlite`), which may share one file.

**One connection per file and process.** The :class:`SQLiteDatabase` objects of a process on one
file (and with one timeout) share one connection and worker thread, opened by the first job and
closed with the last of them. A second connection would drop its page cache whenever the other
wrote (SQLite cannot tell which pages changed), and read the pages it needs again; a host's
history and session stores, both on one file, would do so on every turn. Each object still checks
the file's versions on its first job, as opening a connection does. A forked child forgets the
parent's connections and opens its own.

**Quick jobs run on the caller's thread.** Handing a job to a thread and back costs about as much
CPU as a whole turn's SQL (two context switches and a wake-up of the event loop), so a job its
caller marks *quick* (bounded work: one conversation's new rows, one session) runs at once on the
caller's thread when the connection is free, with SQLite's busy timeout at zero: if another
connection holds the write lock it fails at once (``BEGIN IMMEDIATE``, before any change) and is
handed to the worker thread instead, which waits for the lock without blocking the event loop.
A quick job that finds unbounded work ahead (an expired conversation's whole log to delete) calls
:func:`not_quick` before changing anything and is run again in the worker thread. The connection
is guarded by a lock, so a quick job never runs while the worker uses it. Commits
of quick jobs never checkpoint the write-ahead log (that writes and syncs the database file);
every :data:`CHECKPOINT_EVERY` of them the worker thread runs a passive checkpoint instead, on a
connection of its own, so quick jobs go on meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

from ..errors import SchemaVersionError, StorageClosedError, StorageUnavailableError
from ..message_stores.base import NO_ACTIVITY
from ..message_stores.codec import FORMAT_VERSION
from .jobs import JobAbandoned, JobState, JobWorker, current_job, set_current_job

__all__ = [
    "BACKEND",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SQLiteDatabase",
    "default_database_path",
    "not_quick",
    "now_us",
    "read_transaction",
    "write_transaction",
]

T = TypeVar("T")

log = logging.getLogger("agentkeep.message_stores.sqlite")

BACKEND: Final = "sqlite"
CHECKPOINT_EVERY: Final = 256
"""Quick write jobs between two passive checkpoints run by the worker thread."""
AUTO_CHECKPOINT_PAGES: Final = 1000
"""SQLite's own checkpoint threshold, kept for jobs the worker thread runs."""

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE agentkeep_conversations (
            key INTEGER PRIMARY KEY,
            conversation_id TEXT NOT NULL UNIQUE,
            last_seq INTEGER NOT NULL DEFAULT 0,
            epoch INTEGER NOT NULL DEFAULT 0,
            message_count INTEGER NOT NULL DEFAULT 0,
            view_floor INTEGER NOT NULL DEFAULT 0,
            expires_at INTEGER
        )""",
        """CREATE INDEX agentkeep_conversations_expiry
            ON agentkeep_conversations (expires_at) WHERE expires_at IS NOT NULL""",
        """CREATE TABLE agentkeep_messages (
            position INTEGER PRIMARY KEY,
            id BLOB NOT NULL,
            time INTEGER NOT NULL,
            body BLOB NOT NULL,
            excluded INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE TABLE agentkeep_summaries (
            conversation INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            anchor INTEGER NOT NULL,
            id BLOB NOT NULL,
            time INTEGER NOT NULL,
            body BLOB NOT NULL,
            replaces BLOB NOT NULL,
            excluded INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (conversation, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE agentkeep_sessions (
            agent TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            payload BLOB NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (agent, conversation_id)
        )""",
    ),
    # Recording a compaction looks its ids up through these instead of reading the current view.
    (
        "CREATE INDEX agentkeep_messages_id ON agentkeep_messages (id)",
        "CREATE INDEX agentkeep_summaries_id ON agentkeep_summaries (conversation, id)",
    ),
    # A listing page is one index range: each conversation row keeps its activity (the newest
    # message's time, NO_ACTIVITY without messages) and its tenant (the id's part before the first
    # "::"), computed from the id.
    (
        f"ALTER TABLE agentkeep_conversations ADD COLUMN activity INTEGER NOT NULL DEFAULT {NO_ACTIVITY}",
        """UPDATE agentkeep_conversations SET activity = coalesce((
            SELECT time FROM agentkeep_messages
            WHERE position > key << 32 AND position <= (key << 32) + 4294967295
            ORDER BY position DESC LIMIT 1), activity)""",
        """ALTER TABLE agentkeep_conversations ADD COLUMN tenant TEXT GENERATED ALWAYS AS (
            CASE WHEN instr(conversation_id, '::') > 0
            THEN substr(conversation_id, 1, instr(conversation_id, '::') - 1) END) VIRTUAL""",
        """CREATE INDEX agentkeep_conversations_activity
            ON agentkeep_conversations (activity, conversation_id)""",
        """CREATE INDEX agentkeep_conversations_tenant
            ON agentkeep_conversations (tenant, activity, conversation_id)""",
    ),
)
"""The schema, as an append-only list of migrations (each a list of statements). Never edit one
that shipped: add a new one."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this agentkeep writes (the number of migrations)."""
_NEWEST_VERSIONS: Final = "SELECT coalesce(max(version), 0), coalesce(max(format), 0) FROM agentkeep_schema"


def default_database_path() -> Path:
    """Where the stores keep their data by default.

    ``$XDG_DATA_HOME/agentkeep/agentkeep.db``, or ``~/.local/share/agentkeep/agentkeep.db`` when
    ``XDG_DATA_HOME`` is not set (the folder is created on first use).
    """
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "agentkeep" / "agentkeep.db"


def now_us() -> int:
    """Now, in microseconds since the epoch (how the database stores every time)."""
    return time.time_ns() // 1000


class _Locked(Exception):
    """A quick job met another connection's lock (and changed nothing)."""


class _TooMuchForQuick(Exception):
    """A quick job found more work than it may do on the caller's thread (see :func:`not_quick`)."""


def not_quick() -> None:
    """Called by a job that found unbounded work ahead (say, deleting an expired conversation's
    whole log) before changing anything: if it runs as a quick job, it stops (its transaction
    rolls back) and runs again in the worker thread; otherwise nothing happens."""
    job_state = current_job()
    if job_state is not None and job_state.quick:
        raise _TooMuchForQuick


class SQLiteDatabase:
    """A SQLite database file as one store sees it: jobs run on the file's connection, and the
    event loop never waits for a lock or a slow job (see the module docs for quick jobs).

    Every ``SQLiteDatabase`` of this process on one file (and with one ``timeout``) shares one
    connection and its worker thread, opened (the folder created, WAL mode set, migrations
    applied) by the first job, in the worker thread, and closed when the last of them closes. So
    the stores of one file (a message store and a session store, say) never make each other's
    page cache stale, and their jobs run one after another as one store's do. Jobs are plain
    functions of the connection; :meth:`run` runs one and returns its result.

    Args:
        path: The database file (default: :func:`default_database_path`).
        timeout: Seconds to wait for a lock held by another connection before giving up.
    """

    backend = BACKEND

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout: float = 5.0) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.path = Path(path) if path is not None else default_database_path()
        self.file = os.path.normpath(self.path)
        """The path as given, normalized (no file-system call, so a file named two ways, say
        relative and absolute, is taken as two): databases with equal ``file`` are one file."""
        self.timeout = timeout
        self._shared: _SharedConnection | None = None  # joined on the first job
        self._checked = False  # a job found the file's versions readable
        self._closed = False

    def check_open(self) -> None:
        """Raise :class:`~agentkeep.errors.StorageClosedError` after :meth:`aclose`."""
        if self._closed:
            raise StorageClosedError(f"the store on {self.path} is closed", backend=BACKEND)

    async def run(self, job: Callable[[sqlite3.Connection], T], *, quick: bool = False) -> T:
        """Run ``job(connection)`` and return its result: in the worker thread, or with ``quick``
        (a job of bounded work, one transaction) on this thread when the connection is free and
        no other connection holds the lock it needs.

        Raises:
            StorageClosedError: After :meth:`aclose`.
            StorageUnavailableError: The database cannot be opened, or stayed locked too long.
            SchemaVersionError: The database was written by a newer agentkeep.
        """
        self.check_open()
        shared = self._shared
        if shared is None:
            shared = self._shared = _join(self.file, self.path, self.timeout)
        if self._checked:
            return await shared.run(job, quick=quick)
        result = await shared.run(partial(_first_job, self.path, job), quick=quick)
        self._checked = True
        return result

    async def setup(self) -> None:
        """Open the database and apply pending migrations (idempotent)."""
        await self.run(_nothing)

    async def aclose(self) -> None:
        """Stop using the file's connection (closed, and its worker thread stopped, with the last
        of its users); idempotent."""
        if self._closed:
            return
        self._closed = True
        shared, self._shared = self._shared, None
        if shared is not None:
            await _leave(shared)

    def __repr__(self) -> str:
        return f"SQLiteDatabase({str(self.path)!r})"


class _SharedConnection:
    """One file's connection, the worker thread that opens it and runs its slow jobs, and the
    quick jobs' state: shared by the process's :class:`SQLiteDatabase` objects on the file."""

    def __init__(self, key: tuple[str, float], path: Path, timeout: float) -> None:
        self.key = key  # where _SHARED holds it
        self.path = path
        self.timeout = timeout
        self.users = 0  # SQLiteDatabase objects that joined and have not closed
        self._worker = JobWorker(thread_name="agentkeep-sqlite")
        self._connection: sqlite3.Connection | None = None
        self._in_use = threading.Lock()  # held by whoever runs a job on the connection
        self._quick_mode = False  # the connection's settings are the quick jobs' (see _settle)
        self._quick_writes = 0  # quick writes since the last checkpoint
        self._checkpointer: sqlite3.Connection | None = None  # the worker thread's, for checkpoints

    async def run(self, job: Callable[[sqlite3.Connection], T], *, quick: bool) -> T:
        """See :meth:`SQLiteDatabase.run`."""
        if quick and self._in_use.acquire(blocking=False):
            try:
                if self._connection is not None:  # else the worker opens it first
                    return self._run_quick(self._connection, job)
            except (_Locked, _TooMuchForQuick):
                pass  # another connection's lock, or a long job: in the worker thread
            finally:
                self._in_use.release()
        return await self._worker.run(lambda: self._call(job))

    async def close(self) -> None:
        """Close the connection and stop the worker thread (after the jobs it was given)."""
        await self._worker.shutdown(self._close_connection)

    def unavailable(self, message: str) -> StorageUnavailableError:
        """A :class:`~agentkeep.errors.StorageUnavailableError` naming the file's path."""
        return StorageUnavailableError(message, backend=BACKEND, address=str(self.path))

    def _settle(self, connection: sqlite3.Connection, *, quick: bool) -> None:
        """Quick jobs: no busy wait, no checkpoint on commit; the worker's: SQLite's defaults."""
        if self._quick_mode != quick:
            busy_ms, pages = (0, 0) if quick else (int(self.timeout * 1000), AUTO_CHECKPOINT_PAGES)
            connection.execute(f"PRAGMA busy_timeout = {busy_ms}")
            connection.execute(f"PRAGMA wal_autocheckpoint = {pages}")
            self._quick_mode = quick

    def _run_quick(self, connection: sqlite3.Connection, job: Callable[[sqlite3.Connection], T]) -> T:
        changes = connection.total_changes
        set_current_job(JobState(quick=True))  # not a context manager: this is every append's path
        try:
            return self._checked(job, quick=True)
        finally:
            set_current_job(None)
            if connection.total_changes != changes:
                self._quick_writes += 1
                if self._quick_writes >= CHECKPOINT_EVERY:
                    self._quick_writes = 0
                    with contextlib.suppress(RuntimeError):  # closed meanwhile: nothing to checkpoint
                        self._worker.submit(self._checkpoint)

    def _checked(self, job: Callable[[sqlite3.Connection], T], *, quick: bool) -> T:
        """``job`` on the connection (opened first if need be) in ``quick`` or worker settings,
        the database's failures as agentkeep's (a quick job's lock error as :class:`_Locked`)."""
        try:
            connection = self._connection or self._open()
            self._settle(connection, quick=quick)
            return job(connection)
        except sqlite3.OperationalError as exc:
            if quick and _is_lock_error(exc):
                raise _Locked from exc
            raise self._mapped(exc) from exc
        except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # our own mistakes: not the database's state
        except sqlite3.DatabaseError as exc:
            raise self._mapped(exc) from exc

    def _mapped(self, exc: sqlite3.DatabaseError) -> StorageUnavailableError:
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and _is_lock_error(exc):
            return self.unavailable(f"database still locked after {self.timeout:g} s ({text})")
        return self.unavailable(text)  # "file is not a database", "disk image is malformed", ...

    # -- the worker thread ----------------------------------------------------------------------
    def _call(self, job: Callable[[sqlite3.Connection], T]) -> T:
        with self._in_use:
            return self._checked(job, quick=False)

    def _checkpoint(self) -> None:
        """Copy the write-ahead log's committed pages into the database file, without waiting
        for readers or writers (a failure is left to the next one), on a connection of its own:
        the copy syncs both files (milliseconds), and the jobs' connection stays free for quick
        jobs meanwhile, which would otherwise be handed to the worker thread behind it."""
        try:  # a passive checkpoint waits for nobody: the busy timeout does not matter
            if self._checkpointer is None:  # the file as it is (mode=rw: a file gone is not made anew)
                self._checkpointer = sqlite3.connect(
                    f"{self.path.absolute().as_uri()}?mode=rw",
                    uri=True,
                    timeout=self.timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            log.debug("checkpoint of %s failed: %s", self.path, exc)

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.unavailable(f"cannot create the folder {self.path.parent}: {exc}") from exc
        connection = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                try:
                    self._prepare(connection)
                    break
                except sqlite3.OperationalError as exc:
                    # Switching a new file to WAL while another connection creates it can fail at
                    # once (SQLite skips the busy handler where waiting could deadlock): retry.
                    if "locked" not in str(exc) or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.005)
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection

    def _prepare(self, connection: sqlite3.Connection) -> None:
        connection.execute("PRAGMA page_size=8192")  # new files only: fuller pages for long logs
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        self._migrate(connection)

    def _migrate(self, connection: sqlite3.Connection) -> None:
        with write_transaction(connection, check_schema=False):
            connection.execute(
                "CREATE TABLE IF NOT EXISTS agentkeep_schema ("
                "version INTEGER PRIMARY KEY, format INTEGER NOT NULL, applied_at INTEGER NOT NULL)"
            )
            version, record_format = _refuse_newer(connection, self.path)
            for number in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[number - 1]:
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO agentkeep_schema (version, format, applied_at) VALUES (?, ?, ?)",
                    (number, FORMAT_VERSION, now_us()),
                )
            if 0 < record_format < FORMAT_VERSION:  # what is written from now on: older agentkeeps refuse it
                connection.execute(
                    "UPDATE agentkeep_schema SET format = ? WHERE version = ?",
                    (FORMAT_VERSION, SCHEMA_VERSION),
                )

    def _close_connection(self) -> None:
        with self._in_use:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        if self._checkpointer is not None:  # the worker thread's own: no job uses it now
            self._checkpointer.close()
            self._checkpointer = None


_SHARED: dict[tuple[str, float], _SharedConnection] = {}
"""The open connections of this process, by normalized file and timeout."""
_shared_lock = threading.Lock()  # guards _SHARED (replaced in a forked child)


def _join(file: str, path: Path, timeout: float) -> _SharedConnection:
    """The connection to ``file`` (made if none is open), with one user more."""
    key = (file, timeout)
    with _shared_lock:
        shared = _SHARED.get(key)
        if shared is None:
            shared = _SHARED[key] = _SharedConnection(key, path, timeout)
        shared.users += 1
        return shared


async def _leave(shared: _SharedConnection) -> None:
    """One user fewer for ``shared``: closed with its last."""
    with _shared_lock:
        shared.users -= 1
        if shared.users:
            return
        if _SHARED.get(shared.key) is shared:
            del _SHARED[shared.key]
    await shared.close()


def _forget_after_fork() -> None:
    """A forked child opens its own connections: the parent's are not its to use."""
    global _shared_lock
    _shared_lock = threading.Lock()  # the parent's may have been held by one of its threads
    _SHARED.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _nothing(connection: sqlite3.Connection) -> None:
    return None


def _refuse_newer(connection: sqlite3.Connection, path: Path) -> tuple[int, int]:
    """The file's schema version and record format, if this agentkeep reads them.

    Raises:
        SchemaVersionError: A newer agentkeep wrote them.
    """
    version, record_format = connection.execute(_NEWEST_VERSIONS).fetchone()
    if version > SCHEMA_VERSION or record_format > FORMAT_VERSION:
        raise SchemaVersionError(
            f"{path} has schema version {version} and record format {record_format}; "
            f"this agentkeep reads schema version {SCHEMA_VERSION} and record format "
            f"{FORMAT_VERSION} at most: upgrade agentkeep",
            backend=BACKEND,
        )
    return version, record_format


def _first_job(path: Path, job: Callable[[sqlite3.Connection], T], connection: sqlite3.Connection) -> T:
    """``job``, after the versions check a store's first job makes (the connection it joined
    may have been opened, and the file checked, long before)."""
    _refuse_newer(connection, path)
    return job(connection)


def _is_lock_error(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


@contextmanager
def write_transaction(
    connection: sqlite3.Connection, *, check_schema: bool = True
) -> Generator[None, None, None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on any error): takes the write lock first.

    Under the lock it checks that no newer agentkeep has upgraded the schema since this one opened
    the file (a newer version's data must not be written in an older format), unless
    ``check_schema`` is off (the migration itself). In a job of :meth:`SQLiteDatabase.run` whose
    caller was cancelled meanwhile (say while this waited for another writer's lock), it rolls back
    instead of committing.

    Raises:
        SchemaVersionError: The schema or record format is now newer than this agentkeep's.
    """
    connection.execute("BEGIN IMMEDIATE")
    job_state = current_job()
    try:
        if check_schema:
            version, record_format = connection.execute(_NEWEST_VERSIONS).fetchone()
            if version > SCHEMA_VERSION or record_format > FORMAT_VERSION:
                raise SchemaVersionError(
                    f"the database was upgraded to schema version {version} and record format "
                    f"{record_format} by a newer agentkeep while this one had it open: upgrade agentkeep",
                    backend=BACKEND,
                )
        yield
        if job_state is not None and job_state.cancelled:
            raise JobAbandoned
        connection.execute("COMMIT")
        if job_state is not None:
            job_state.committed = True
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


@contextmanager
def read_transaction(connection: sqlite3.Connection) -> Generator[None, None, None]:
    """One read transaction: the statements in the block see one snapshot."""
    connection.execute("BEGIN")
    try:
        yield
    finally:
        if connection.in_transaction:
            connection.execute("COMMIT")
