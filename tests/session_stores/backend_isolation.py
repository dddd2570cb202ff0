"""A tenant's view (IsolationKeyScopedSessionStore) over a file-system store, for the suite.

The view must behave like any store; tests/session_stores/test_isolation.py checks that tenants stay apart.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore, FileSystemSessionStore, IsolationKeyScopedSessionStore

NAME = "isolation"
CROSS_PROCESS = True
TENANT = "tenant-7"


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    with tempfile.TemporaryDirectory(prefix="agentkeep-sessions-") as folder:
        store = IsolationKeyScopedSessionStore(FileSystemSessionStore(folder), TENANT, owns_inner_store=True)
        try:
            yield store
        finally:
            await store.aclose()


def corrupt_session(store: AgentSessionStore, agent: Agent, conversation_id: str) -> None:
    assert isinstance(store, IsolationKeyScopedSessionStore)
    inner = store.inner_store
    assert isinstance(inner, FileSystemSessionStore)
    inner.session_path(agent, store.scoped_id(conversation_id)).write_bytes(b"\x00not json")


def session_store_spec(store: AgentSessionStore) -> dict[str, Any]:
    assert isinstance(store, IsolationKeyScopedSessionStore)
    inner = store.inner_store
    assert isinstance(inner, FileSystemSessionStore)
    return {"root_dir": str(inner.root_dir), "isolation_key": store.isolation_key}


def session_store_from_spec(spec: dict[str, Any]) -> AgentSessionStore:
    inner = FileSystemSessionStore(spec["root_dir"])
    return IsolationKeyScopedSessionStore(inner, spec["isolation_key"], owns_inner_store=True)
