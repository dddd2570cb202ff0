"""The SQLite (sqlite-vec) memory store for the conformance suite: a file of its own per store."""

from __future__ import annotations

import asyncio
import math
import shutil
import struct
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import apsw
import sqlite_vec

from agentkeep.memory.base import MemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.testing.conformance import NotApplicable

NAME = "sqlite"


@contextmanager
def raw_file(path: Path) -> Iterator[apsw.Connection]:
    """A connection of its own to a memory store's file, with sqlite-vec loaded: for tests that
    look at its rows or change them behind the store's back (an older layout, damage)."""
    connection = apsw.Connection(str(path))
    try:
        connection.enable_load_extension(True)
        connection.load_extension(sqlite_vec.loadable_path())
        yield connection
    finally:
        connection.close()


@asynccontextmanager
async def open_store(*, dimensions: int, ttl: float | None = None) -> AsyncIterator[SQLiteMemoryStore]:
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-memory-"))
    store = SQLiteMemoryStore(folder / "memory.db", dimensions=dimensions, ttl=ttl)
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)


@asynccontextmanager
async def reopen(store: MemoryStore) -> AsyncIterator[SQLiteMemoryStore]:
    assert isinstance(store, SQLiteMemoryStore)
    again = SQLiteMemoryStore(store.path, dimensions=store.dimensions, ttl=store.ttl)
    await again.setup()
    try:
        yield again
    finally:
        await again.aclose()


def _write(path: Path, sql: str, args: tuple[object, ...]) -> None:
    with raw_file(path) as connection:
        connection.set_busy_timeout(5_000)
        connection.execute(sql, args)


_ROW_DAMAGES: dict[str, tuple[str, object]] = {
    "metadata not JSON": ("UPDATE agentkeep_memories SET metadata = ? WHERE id = ?", "{not json"),
    "metadata not an object": ("UPDATE agentkeep_memories SET metadata = ? WHERE id = ?", "[1, 2]"),
    "created_at out of range": ("UPDATE agentkeep_memories SET created_at = ? WHERE id = ?", 2**62),
    "updated_at not a number": ("UPDATE agentkeep_memories SET updated_at = ? WHERE id = ?", "yesterday"),
    "embedding of NaN": (
        "UPDATE agentkeep_memory_vectors SET embedding = ? "
        "WHERE memory_rowid = (SELECT rowid FROM agentkeep_memories WHERE id = ?)",
        struct.pack("<8f", *[math.nan] * 8),
    ),
}


async def damage(store: MemoryStore, memory_id: str, what: str) -> None:
    """Damage a memory's row in the file (sqlite-vec keeps vectors of one fixed length: an
    embedding of another length cannot be written)."""
    assert isinstance(store, SQLiteMemoryStore)
    if what not in _ROW_DAMAGES:
        raise NotApplicable(f"sqlite cannot hold {what}")
    sql, value = _ROW_DAMAGES[what]
    await asyncio.to_thread(_write, store.path, sql, (value, memory_id))


async def damage_meta(store: MemoryStore, name: str) -> None:
    assert isinstance(store, SQLiteMemoryStore)
    await asyncio.to_thread(
        _write, store.path, "UPDATE agentkeep_memory_meta SET value = ? WHERE name = ?", ("x1", name)
    )
