"""The file-system session store for the conformance suite: a fresh temporary folder per store."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore, FileSystemSessionStore

NAME = "filesystem"
CROSS_PROCESS = True


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    with tempfile.TemporaryDirectory(prefix="agentkeep-sessions-") as folder:
        store = FileSystemSessionStore(folder)
        try:
            yield store
        finally:
            await store.aclose()


def corrupt_session(store: AgentSessionStore, agent: Agent, conversation_id: str) -> None:
    assert isinstance(store, FileSystemSessionStore)
    path = store.session_path(agent, conversation_id)
    assert path.exists()
    path.write_bytes(b'{"format": 1, "version": 1, "sess')


def session_store_spec(store: AgentSessionStore) -> dict[str, Any]:
    assert isinstance(store, FileSystemSessionStore)
    return {"root_dir": str(store.root_dir)}


def session_store_from_spec(spec: dict[str, Any]) -> AgentSessionStore:
    return FileSystemSessionStore(spec["root_dir"])
