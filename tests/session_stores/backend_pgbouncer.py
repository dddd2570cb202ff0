"""The PostgreSQL session store through a transaction pooler, for the session-store conformance
suite: the session's private pgbouncer, the store opened with ``?pooler=transaction``, a fresh
schema per store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentkeep.session_stores import AgentSessionStore
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.store_urls import open_session_store as open_session_store_at
from tests.message_stores.backend_pgbouncer import pooled_url
from tests.message_stores.backend_postgres import drop_schema, new_schema
from tests.session_stores.backend_postgres import corrupt_session

__all__ = [
    "CROSS_PROCESS",
    "NAME",
    "corrupt_session",
    "open_session_store",
    "session_store_from_spec",
    "session_store_spec",
]

NAME = "postgres-pgbouncer"
CROSS_PROCESS = True


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    schema = new_schema("akspgb")
    store = open_session_store_url(pooled_url(schema))
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


def open_session_store_url(url: str, *, timeout: float = 5.0) -> PostgresSessionStore:
    store = open_session_store_at(url, timeout=timeout)
    assert isinstance(store, PostgresSessionStore)
    assert store.database.pooler == "transaction"
    return store


def session_store_spec(store: AgentSessionStore) -> dict[str, Any]:
    assert isinstance(store, PostgresSessionStore)
    return {"url": pooled_url(store.schema), "timeout": store.database.timeout}


def session_store_from_spec(spec: dict[str, Any]) -> AgentSessionStore:
    return open_session_store_url(spec["url"], timeout=spec["timeout"])
