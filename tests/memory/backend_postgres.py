"""The PostgreSQL memory store for the conformance suite: the real server, a schema of its own."""

from __future__ import annotations

import math
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import psycopg.types.json
from psycopg import sql

from agentkeep.memory.base import MemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.testing.conformance import NotApplicable
from tests.message_stores.backend_postgres import URL, drop_schema, new_schema

NAME = "postgres"


@asynccontextmanager
async def open_store(*, dimensions: int, ttl: float | None = None) -> AsyncIterator[PostgresMemoryStore]:
    schema = new_schema("akmem")
    store = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=dimensions, ttl=ttl)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


@asynccontextmanager
async def reopen(store: MemoryStore) -> AsyncIterator[PostgresMemoryStore]:
    assert isinstance(store, PostgresMemoryStore)
    again = PostgresMemoryStore.from_url(URL, schema=store.schema, dimensions=store.dimensions, ttl=store.ttl)
    try:
        await again.setup()
        yield again
    finally:
        await again.aclose()


_ROW_DAMAGES: dict[str, tuple[str, object]] = {
    "metadata not an object": ("metadata", psycopg.types.json.Jsonb([1, 2])),
    "created_at out of range": ("created_at", 2**62),
    "embedding of 3 bytes": ("embedding", b"\x00\x00\x80"),
    "embedding of NaN": ("embedding", struct.pack("<8f", *[math.nan] * 8)),
}


async def damage(store: MemoryStore, memory_id: str, what: str) -> None:
    """Damage a memory's row (typed columns: metadata is always JSON, times always numbers)."""
    assert isinstance(store, PostgresMemoryStore)
    if what not in _ROW_DAMAGES:
        raise NotApplicable(f"postgres columns cannot hold {what}")
    column, value = _ROW_DAMAGES[what]
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("UPDATE {} SET {} = %s WHERE id = %s").format(
                sql.Identifier(store.schema, "memories"), sql.Identifier(column)
            ),
            (value, memory_id),
        )


async def damage_meta(store: MemoryStore, name: str) -> None:
    assert isinstance(store, PostgresMemoryStore)
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("UPDATE {} SET value = 'x1' WHERE name = %s").format(
                sql.Identifier(store.schema, "memory_meta")
            ),
            (name,),
        )
