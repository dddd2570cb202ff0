"""The in-memory memory store for the conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentkeep.memory import InMemoryMemoryStore

NAME = "memory"


@asynccontextmanager
async def open_store(*, dimensions: int, ttl: float | None = None) -> AsyncIterator[InMemoryMemoryStore]:
    store = InMemoryMemoryStore(dimensions=dimensions, ttl=ttl)
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()
