"""The PostgreSQL backend through a transaction pooler, for the conformance suite: the session's
private pgbouncer (``pool_mode = transaction``) in front of the real server, the store opened with
``?pooler=transaction``, a fresh schema per store. The helpers that damage or inspect data reach
the server directly (they are the test's, not the store's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentkeep.message_stores import MessageStore
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.store_urls import open_message_store
from tests.message_stores.backend_postgres import (
    URL,
    corrupt,
    corrupt_summaries,
    drop_schema,
    mark_newer_version,
    new_schema,
    stored_bytes,
    tamper,
)
from tests.private_pgbouncer import shared_pgbouncer

__all__ = [
    "BACKEND",
    "NAME",
    "corrupt",
    "corrupt_summaries",
    "mark_newer_version",
    "open_store",
    "pooled_url",
    "spec_of",
    "store_from_spec",
    "stored_bytes",
    "tamper",
]

NAME = "postgres-pgbouncer"
BACKEND = "postgres"  # store.backend


def pooled_url(schema: str) -> str:
    """A store URL reaching the test server through the session's pgbouncer."""
    return f"{shared_pgbouncer(URL).url}?schema={schema}&pooler=transaction"


@asynccontextmanager
async def open_store(**options: Any) -> AsyncIterator[PostgresMessageStore]:
    schema = new_schema("akpgb")
    store = open_message_store(pooled_url(schema), **options)
    assert isinstance(store, PostgresMessageStore)
    assert store.database.pooler == "transaction"
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


def spec_of(store: MessageStore) -> dict[str, Any]:
    assert isinstance(store, PostgresMessageStore)
    return {"url": pooled_url(store.schema), "max_messages": store.max_messages, "ttl": store.ttl}


def store_from_spec(spec: dict[str, Any]) -> MessageStore:
    return open_message_store(spec["url"], max_messages=spec["max_messages"], ttl=spec["ttl"])
