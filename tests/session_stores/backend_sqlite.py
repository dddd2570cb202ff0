"""The SQLite session store for the session-store conformance suite: a fresh database file per store."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore, agent_key
from agentkeep.session_stores.sqlite import SQLiteSessionStore

NAME = "sqlite"
CROSS_PROCESS = True


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    folder = Path(tempfile.mkdtemp(prefix="agentkeep-sqlite-sessions-"))
    store = SQLiteSessionStore(folder / "sessions.db")
    try:
        yield store
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)


def _overwrite(path: Path, agent: str, conversation_id: str) -> int:
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        return connection.execute(
            "UPDATE agentkeep_sessions SET payload = x'7b2276657273696f6e223a' "
            "WHERE agent = ? AND conversation_id = ?",
            (agent, conversation_id),
        ).rowcount


async def corrupt_session(store: AgentSessionStore, agent: Agent, conversation_id: str) -> None:
    assert isinstance(store, SQLiteSessionStore)
    changed = await asyncio.to_thread(_overwrite, store.path, agent_key(agent), conversation_id)
    assert changed == 1


def session_store_spec(store: AgentSessionStore) -> dict[str, Any]:
    assert isinstance(store, SQLiteSessionStore)
    return {"path": str(store.path), "timeout": store.database.timeout}


def session_store_from_spec(spec: dict[str, Any]) -> AgentSessionStore:
    return SQLiteSessionStore(spec["path"], timeout=spec["timeout"])
