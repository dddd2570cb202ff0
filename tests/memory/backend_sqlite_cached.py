"""The SQLite memory store with its search cache on every scope (``cache_min_vectors=1``), for the
conformance suite: every search goes through the cached matrix and its change log."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentkeep.memory.base import MemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore
from tests.memory.backend_sqlite import damage, damage_meta

__all__ = ["NAME", "damage", "damage_meta", "open_store", "reopen"]

NAME = "sqlite-cached"


@asynccontextmanager
async def open_store(*, dimensions: int, ttl: float | None = None) -> AsyncIterator[SQLiteMemoryStore]:
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-memory-"))
    store = SQLiteMemoryStore(folder / "memory.db", dimensions=dimensions, ttl=ttl, cache_min_vectors=1)
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)


@asynccontextmanager
async def reopen(store: MemoryStore) -> AsyncIterator[SQLiteMemoryStore]:
    assert isinstance(store, SQLiteMemoryStore)
    again = SQLiteMemoryStore(store.path, dimensions=store.dimensions, ttl=store.ttl, cache_min_vectors=1)
    await again.setup()
    try:
        yield again
    finally:
        await again.aclose()
