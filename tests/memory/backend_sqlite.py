"""The SQLite (sqlite-vec) memory store for the conformance suite: a file of its own per store."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentkeep.memory.base import MemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore

NAME = "sqlite"


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
