"""The PostgreSQL backend for the conformance suite: the real server, one fresh schema per store."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import QueryNoTemplate

from agentkeep.message_stores import MessageStore
from agentkeep.message_stores.postgres import SCHEMA_VERSION, PostgresMessageStore

NAME = "postgres"
URL = os.environ.get("AGENTKEEP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def new_schema(prefix: str = "akt") -> str:
    """A schema name no other test run uses."""
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:12]}"


async def execute(query: QueryNoTemplate, params: Any = None, *, url: str = URL) -> list[Any]:
    """Run one statement on a connection of its own; returns the rows (if any)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query, params)
        return await cursor.fetchall() if cursor.description else []


async def drop_schema(schema: str) -> None:
    """Remove a test schema and everything in it."""
    await execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def open_store(**options: Any) -> AsyncIterator[PostgresMessageStore]:
    schema = new_schema()
    store = PostgresMessageStore.from_url(URL, schema=schema, **options)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await drop_schema(schema)


def spec_of(store: MessageStore) -> dict[str, Any]:
    assert isinstance(store, PostgresMessageStore)
    return {"url": URL, "schema": store.schema, "max_messages": store.max_messages, "ttl": store.ttl}


def store_from_spec(spec: dict[str, Any]) -> PostgresMessageStore:
    return PostgresMessageStore.from_url(
        spec["url"], schema=spec["schema"], max_messages=spec["max_messages"], ttl=spec["ttl"]
    )


async def corrupt(store: MessageStore, conversation_id: str, seq: int) -> None:
    assert isinstance(store, PostgresMessageStore)
    await execute(
        sql.SQL(
            "UPDATE {m} SET body = '\\x09ff'::bytea FROM {c} "
            "WHERE {m}.conversation = {c}.key AND {c}.conversation_id = %s AND {m}.seq = %s"
        ).format(m=sql.Identifier(store.schema, "messages"), c=sql.Identifier(store.schema, "conversations")),
        (conversation_id, seq),
    )


async def tamper(
    store: MessageStore, conversation_id: str, seq: int, change: Callable[[bytes], bytes]
) -> None:
    assert isinstance(store, PostgresMessageStore)
    names = {
        "m": sql.Identifier(store.schema, "messages"),
        "c": sql.Identifier(store.schema, "conversations"),
    }
    where = "{m}.conversation = {c}.key AND {c}.conversation_id = %s AND {m}.seq = %s"
    [(body,)] = await execute(
        sql.SQL("SELECT body FROM {m}, {c} WHERE " + where).format(**names), (conversation_id, seq)
    )
    await execute(
        sql.SQL("UPDATE {m} SET body = %s FROM {c} WHERE " + where).format(**names),
        (change(bytes(body)), conversation_id, seq),
    )


async def corrupt_summaries(store: MessageStore, conversation_id: str) -> None:
    assert isinstance(store, PostgresMessageStore)
    await execute(
        sql.SQL(
            "UPDATE {s} SET replaces = ARRAY['\\x01'::bytea] FROM {c} "
            "WHERE {s}.conversation = {c}.key AND {c}.conversation_id = %s"
        ).format(
            s=sql.Identifier(store.schema, "summaries"), c=sql.Identifier(store.schema, "conversations")
        ),
        (conversation_id,),
    )


async def mark_newer_version(store: MessageStore) -> None:
    assert isinstance(store, PostgresMessageStore)
    await execute(
        sql.SQL("INSERT INTO {} (version, format_version) VALUES (%s, 1)").format(
            sql.Identifier(store.schema, "schema_migrations")
        ),
        (SCHEMA_VERSION + 1,),
    )


async def stored_bytes(store: MessageStore) -> bytes:
    """Everything the store keeps at rest: every table of its schema, copied out in binary form."""
    assert isinstance(store, PostgresMessageStore)
    parts: list[bytes] = []
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY table_name",
            (store.schema,),
        )
        for (table,) in await cursor.fetchall():
            query = sql.SQL("COPY {} TO STDOUT (FORMAT binary)").format(sql.Identifier(store.schema, table))
            async with conn.cursor().copy(query) as copy:
                async for chunk in copy:
                    parts.append(bytes(chunk))
    return b"".join(parts)
