"""The SQLite database layer of the memory store: a connection of ``apsw`` with the sqlite-vec
extension loaded (the stdlib ``sqlite3`` cannot load extensions), typed calls, transactions that
follow the shared job protocol, and error mapping. Its jobs run on a
:class:`~agentkeep._db.jobs.JobWorker`, like those of :mod:`agentkeep._db.sqlite`; the memory
store's tables and their layouts are :mod:`agentkeep.memory._sqlite_file`'s.

Needs the extra ``[memory]`` (``apsw``, ``sqlite-vec``); only the SQLite memory store imports it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import apsw
import sqlite_vec  # pyright: ignore[reportMissingTypeStubs]

from ..errors import StorageError, StorageUnavailableError
from .jobs import JobAbandoned, current_job

__all__ = ["BACKEND", "VecConnection", "mapped_error", "open_vec_connection"]

BACKEND: Final = "sqlite"


class VecConnection:
    """A connection with typed calls (apsw's own stubs leave values untyped) and write
    transactions that take the write lock at once (``BEGIN IMMEDIATE``) and roll back instead of
    committing when the job's caller gave up (see :mod:`agentkeep._db.jobs`)."""

    def __init__(self, connection: apsw.Connection) -> None:
        self._connection: Any = connection

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._connection.execute(sql, args))

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        found = self.rows(sql, args)
        return found[0] if found else None

    def run(self, sql: str, args: Sequence[Any] = ()) -> None:
        self._connection.execute(sql, args)

    @property
    def last_rowid(self) -> int:
        return int(self._connection.last_insert_rowid())

    @contextmanager
    def read(self) -> Generator[None]:
        """A read transaction: every statement in it sees one snapshot of the file."""
        self._connection.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._connection.execute("ROLLBACK")
            raise
        self._connection.execute("COMMIT")

    @contextmanager
    def write(self) -> Generator[None]:
        self._connection.execute("BEGIN IMMEDIATE")
        job = current_job()
        try:
            yield
            if job is not None and job.cancelled:
                raise JobAbandoned
        except BaseException:
            self._connection.execute("ROLLBACK")
            raise
        self._connection.execute("COMMIT")
        if job is not None:
            job.committed = True

    def close(self) -> None:
        self._connection.close()


def open_vec_connection(path: Path, *, timeout: float) -> VecConnection:
    """A connection to the file at ``path`` (its folder created) with sqlite-vec loaded, a busy
    timeout of ``timeout`` seconds and the write-ahead log on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = apsw.Connection(str(path))
    try:
        connection.enable_load_extension(True)
        connection.load_extension(sqlite_vec.loadable_path())
        connection.enable_load_extension(False)
        connection.set_busy_timeout(int(timeout * 1000))
        opened = VecConnection(connection)
        opened.run("PRAGMA journal_mode=WAL")
    except BaseException:
        connection.close()
        raise
    return opened


def mapped_error(exc: Exception, path: Path) -> Exception:
    """``exc`` as agentkeep's error when it is the database's (``exc`` itself otherwise): a lock
    held too long is :class:`~agentkeep.errors.StorageUnavailableError`, any other database
    failure :class:`~agentkeep.errors.StorageError`."""
    if isinstance(exc, apsw.BusyError):
        return StorageUnavailableError(
            f"the file is locked by another writer: {exc}", backend=BACKEND, address=str(path)
        )
    if isinstance(exc, apsw.Error):
        return StorageError(f"sqlite memory store at {path}: {exc}", backend=BACKEND)
    return exc
