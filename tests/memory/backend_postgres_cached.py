"""The PostgreSQL memory store with its search cache on every scope (``cache_min_vectors=1``), for
the conformance suite: every search goes through the cached matrix and its change log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentkeep.memory.base import MemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from tests.memory.backend_postgres import damage, damage_meta
from tests.message_stores.backend_postgres import URL, drop_schema, new_schema

__all__ = ["NAME", "damage", "damage_meta", "open_store", "reopen"]

NAME = "postgres-cached"


@asynccontextmanager
async def open_store(*, dimensions: int, ttl: float | None = None) -> AsyncIterator[PostgresMemoryStore]:
    schema = new_schema("akmemc")
    store = PostgresMemoryStore.from_url(
        URL, schema=schema, dimensions=dimensions, ttl=ttl, cache_min_vectors=1
    )
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


@asynccontextmanager
async def reopen(store: MemoryStore) -> AsyncIterator[PostgresMemoryStore]:
    assert isinstance(store, PostgresMemoryStore)
    again = PostgresMemoryStore.from_url(
        URL, schema=store.schema, dimensions=store.dimensions, ttl=store.ttl, cache_min_vectors=1
    )
    try:
        await again.setup()
        yield again
    finally:
        await again.aclose()
