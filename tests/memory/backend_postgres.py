"""The PostgreSQL memory store for the conformance suite: the real server, a schema of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentkeep.memory.base import MemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from tests.storage.backend_postgres import URL, drop_schema, new_schema

NAME = "postgres"


@asynccontextmanager
async def open_store(*, dimensions: int, ttl: float | None = None) -> AsyncIterator[PostgresMemoryStore]:
    schema = new_schema("akmem")
    store = PostgresMemoryStore(URL, schema=schema, dimensions=dimensions, ttl=ttl)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


@asynccontextmanager
async def reopen(store: MemoryStore) -> AsyncIterator[PostgresMemoryStore]:
    assert isinstance(store, PostgresMemoryStore)
    again = PostgresMemoryStore(URL, schema=store.schema, dimensions=store.dimensions, ttl=store.ttl)
    try:
        await again.setup()
        yield again
    finally:
        await again.aclose()
