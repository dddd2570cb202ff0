"""The PostgreSQL memory store through a transaction pooler, for the conformance suite: the
session's private pgbouncer, the store opened with ``?pooler=transaction``, a schema of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentkeep.memory.base import MemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.store_urls import open_memory_store
from tests.memory.backend_postgres import damage, damage_meta
from tests.message_stores.backend_pgbouncer import pooled_url
from tests.message_stores.backend_postgres import drop_schema, new_schema

__all__ = ["NAME", "damage", "damage_meta", "open_store", "reopen"]

NAME = "postgres-pgbouncer"


def _open(schema: str, *, dimensions: int, ttl: float | None) -> PostgresMemoryStore:
    store = open_memory_store(pooled_url(schema), dimensions=dimensions, ttl=ttl)
    assert isinstance(store, PostgresMemoryStore)
    assert store.db.pooler == "transaction"
    return store


@asynccontextmanager
async def open_store(*, dimensions: int, ttl: float | None = None) -> AsyncIterator[PostgresMemoryStore]:
    schema = new_schema("akmempgb")
    store = _open(schema, dimensions=dimensions, ttl=ttl)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


@asynccontextmanager
async def reopen(store: MemoryStore) -> AsyncIterator[PostgresMemoryStore]:
    assert isinstance(store, PostgresMemoryStore)
    again = _open(store.schema, dimensions=store.dimensions, ttl=store.ttl)
    try:
        await again.setup()
        yield again
    finally:
        await again.aclose()
