"""The SQLite backend for the conformance suite: a fresh database file per store, removed after."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from agentkeep.message_stores import MessageStore
from agentkeep.message_stores.sqlite import SCHEMA_VERSION, SQLiteMessageStore

NAME = "sqlite"
CROSS_PROCESS = True


@asynccontextmanager
async def open_store(**options: Any) -> AsyncIterator[SQLiteMessageStore]:
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-sqlite-"))
    store = SQLiteMessageStore(folder / "test.db", **options)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)


def spec_of(store: MessageStore) -> dict[str, Any]:
    assert isinstance(store, SQLiteMessageStore)
    return {
        "path": str(store.path),
        "max_messages": store.max_messages,
        "ttl": store.ttl,
        "timeout": store.database.timeout,
    }


def store_from_spec(spec: dict[str, Any]) -> SQLiteMessageStore:
    return SQLiteMessageStore(
        spec["path"], max_messages=spec["max_messages"], ttl=spec["ttl"], timeout=spec["timeout"]
    )


def execute(path: Path | str, sql: str, parameters: tuple[Any, ...] | dict[str, Any] = ()) -> list[Any]:
    """Run one statement on a connection of its own (blocking: call it off the event loop)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        return connection.execute(sql, parameters).fetchall()


async def corrupt(store: MessageStore, conversation_id: str, seq: int) -> None:
    assert isinstance(store, SQLiteMessageStore)
    await asyncio.to_thread(
        execute,
        store.path,
        "UPDATE agentkeep_messages SET body = x'ff00' WHERE position = "
        "((SELECT key FROM agentkeep_conversations WHERE conversation_id = ?) << 32) + ?",
        (conversation_id, seq),
    )


async def tamper(
    store: MessageStore, conversation_id: str, seq: int, change: Callable[[bytes], bytes]
) -> None:
    assert isinstance(store, SQLiteMessageStore)
    where = "position = ((SELECT key FROM agentkeep_conversations WHERE conversation_id = ?) << 32) + ?"
    [(body,)] = await asyncio.to_thread(
        execute, store.path, f"SELECT body FROM agentkeep_messages WHERE {where}", (conversation_id, seq)
    )
    await asyncio.to_thread(
        execute,
        store.path,
        f"UPDATE agentkeep_messages SET body = ? WHERE {where}",
        (change(bytes(body)), conversation_id, seq),
    )


async def corrupt_summaries(store: MessageStore, conversation_id: str) -> None:
    assert isinstance(store, SQLiteMessageStore)
    await asyncio.to_thread(
        execute,
        store.path,
        "UPDATE agentkeep_summaries SET replaces = x'5b31' WHERE conversation = "
        "(SELECT key FROM agentkeep_conversations WHERE conversation_id = ?)",
        (conversation_id,),
    )


async def mark_newer_version(store: MessageStore) -> None:
    assert isinstance(store, SQLiteMessageStore)
    await asyncio.to_thread(
        execute,
        store.path,
        "INSERT INTO agentkeep_schema (version, format, applied_at) VALUES (?, 1, 0)",
        (SCHEMA_VERSION + 1,),
    )


async def stored_bytes(store: MessageStore) -> bytes:
    """Everything the store keeps at rest: its database file and write-ahead log, as bytes."""
    assert isinstance(store, SQLiteMessageStore)

    def read() -> bytes:
        parts = [store.path, store.path.with_name(store.path.name + "-wal")]
        return b"".join(part.read_bytes() for part in parts if part.exists())

    return await asyncio.to_thread(read)
