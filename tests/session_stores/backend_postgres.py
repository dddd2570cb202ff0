"""The PostgreSQL session store for the session-store conformance suite: a fresh schema per store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import sql

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore, agent_key
from agentkeep.session_stores.postgres import PostgresSessionStore
from tests.message_stores.backend_postgres import URL, drop_schema, execute, new_schema

NAME = "postgres"
CROSS_PROCESS = True


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    schema = new_schema("aks")
    store = PostgresSessionStore.from_url(URL, schema=schema)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


async def corrupt_session(store: AgentSessionStore, agent: Agent, conversation_id: str) -> None:
    assert isinstance(store, PostgresSessionStore)
    rows = await execute(
        sql.SQL(
            "UPDATE {} SET payload = '\\x7b2276657273696f6e223a'::bytea "
            "WHERE agent = %s AND conversation_id = %s RETURNING 1"
        ).format(sql.Identifier(store.schema, "sessions")),
        (agent_key(agent), conversation_id),
    )
    assert len(rows) == 1


def session_store_spec(store: AgentSessionStore) -> dict[str, Any]:
    assert isinstance(store, PostgresSessionStore)
    return {"url": URL, "schema": store.schema, "timeout": store.database.timeout}


def session_store_from_spec(spec: dict[str, Any]) -> AgentSessionStore:
    return PostgresSessionStore.from_url(spec["url"], schema=spec["schema"], timeout=spec["timeout"])
