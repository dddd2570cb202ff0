"""NoopSessionStore: the hosting default remembers nothing."""

from __future__ import annotations

import pytest

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore, NoopSessionStore, session_version
from agentkeep.testing import ScriptedChatClient


async def test_every_get_is_a_new_empty_session() -> None:
    store = NoopSessionStore()
    agent = Agent(ScriptedChatClient(), name="helper")
    session = await store.get_session(agent, "conv")
    assert session.session_id == "conv"
    assert session_version(session) is None
    await agent.run("hello", session=session)
    await store.save_session(agent, "conv", session)
    assert session_version(session) is None  # nothing was stored
    again = await store.get_session(agent, "conv")
    assert again is not session
    assert len(again.state) == 0
    await store.save_session(agent, "conv", session)  # never a conflict: nothing to conflict with
    assert await store.delete_session(agent, "conv") is False


async def test_the_noop_store_is_a_session_store() -> None:
    store = NoopSessionStore()
    assert store.backend == "noop"
    assert store.get_service(AgentSessionStore) is store
    assert store.get_service(NoopSessionStore) is store
    agent = Agent(ScriptedChatClient())
    with pytest.raises(ValueError, match="conversation_id"):
        await store.get_session(agent, "")
    await store.aclose()
    await store.aclose()
