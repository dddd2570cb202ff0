"""The in-memory session store for the conformance suite (one process only)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore, InMemorySessionStore, agent_key

NAME = "memory"
CROSS_PROCESS = False


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    store = InMemorySessionStore()
    try:
        yield store
    finally:
        await store.aclose()


def corrupt_session(store: AgentSessionStore, agent: Agent, conversation_id: str) -> None:
    assert isinstance(store, InMemorySessionStore)
    key = (agent_key(agent), conversation_id)
    version, _ = store._sessions[key]
    store._sessions[key] = (version, b'{"version": 1, "session_id": ')
