"""Tenant isolation holds for what a session points at: scoped session stores with durable history.

Alice and Bob both call their conversation ``chat-1``; each talks through a scoped view of one shared
session store, and the agent keeps history in one shared message store. Neither may ever see the
other's messages, on any pairing of a durable history backend with a session store.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import pytest

from agentkeep import Agent, AgentSession, IsolationError, Message, SessionFormatError
from agentkeep.message_stores import InMemoryMessageStore, MessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores import AgentSessionStore, InMemorySessionStore, IsolationKeyScopedSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.discovery import backend_modules

HISTORY_BACKENDS = backend_modules("tests.message_stores")
SESSION_BACKENDS = backend_modules("tests.session_stores")


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


async def talk(
    shared_sessions: AgentSessionStore, history: MessageStore
) -> tuple[ScriptedChatClient, dict[str, AgentSession]]:
    """Two turns each for alice and bob on ``chat-1``, interleaved; the sessions they end with."""
    client = ScriptedChatClient(lambda messages: f"reply {len(messages)}")
    agent = Agent(client, context_providers=[StorageHistoryProvider(history, "history")])
    sessions: dict[str, AgentSession] = {}
    for turn in range(2):
        for tenant in ("alice", "bob"):
            store = IsolationKeyScopedSessionStore(shared_sessions, tenant)
            session = await store.get_session(agent, "chat-1")
            await agent.run(f"{tenant} says secret {turn}", session=session)
            await store.save_session(agent, "chat-1", session)
            sessions[tenant] = session
    return client, sessions


def check_apart(client: ScriptedChatClient, sessions: dict[str, AgentSession]) -> None:
    requests = [texts(call) for call in client.calls]
    alice_turns, bob_turns = requests[0::2], requests[1::2]
    for seen in bob_turns:
        assert not [t for t in seen if "alice" in t], seen
    for seen in alice_turns:
        assert not [t for t in seen if "bob" in t], seen
    # each tenant's second request holds its own first turn exactly once, then the new input
    assert alice_turns[1] == ["alice says secret 0", "reply 1", "alice says secret 1"]
    assert bob_turns[1] == ["bob says secret 0", "reply 1", "bob says secret 1"]
    assert sessions["alice"].session_id == sessions["bob"].session_id == "chat-1"
    # over a tenant's view (the "isolation" backend) the keys are that tenant's sub-tenants'
    assert sessions["alice"].storage_key.endswith("alice::chat-1")
    assert sessions["bob"].storage_key.endswith("bob::chat-1")
    assert sessions["alice"].storage_key != sessions["bob"].storage_key


@pytest.mark.parametrize("history_backend", HISTORY_BACKENDS, ids=lambda m: m.NAME)
async def test_tenants_histories_stay_apart_on_every_history_backend(history_backend: ModuleType) -> None:
    async with history_backend.open_store() as history:
        client, sessions = await talk(InMemorySessionStore(), history)
        check_apart(client, sessions)
        stored = {key: texts((await history.read(key)).messages) for key in ("alice::chat-1", "bob::chat-1")}
        assert stored["alice::chat-1"][0::2] == ["alice says secret 0", "alice says secret 1"]
        assert stored["bob::chat-1"][0::2] == ["bob says secret 0", "bob says secret 1"]
        assert (await history.read("chat-1")).messages == []  # nothing under the unscoped id


@pytest.mark.parametrize("session_backend", SESSION_BACKENDS, ids=lambda m: m.NAME)
async def test_tenants_histories_stay_apart_on_every_session_store(session_backend: ModuleType) -> None:
    async with session_backend.open_session_store() as shared:
        client, sessions = await talk(shared, InMemoryMessageStore())
        if session_backend.NAME == "noop":  # nothing remembered: each turn is a new session
            assert all("alice" not in t for call in client.calls[1::2] for t in texts(call))
            return
        check_apart(client, sessions)


async def test_a_session_of_another_tenant_is_refused_on_read_and_on_save() -> None:
    shared = InMemorySessionStore()
    history = StorageHistoryProvider(InMemoryMessageStore(), "history")
    agent = Agent(ScriptedChatClient(), context_providers=[history])
    alice = IsolationKeyScopedSessionStore(shared, "alice")
    session = await alice.get_session(agent, "chat-1")
    await agent.run("hello", session=session)
    await alice.save_session(agent, "chat-1", session)
    # Bob's view cannot save alice's session object under his id ...
    bob = IsolationKeyScopedSessionStore(shared, "bob")
    with pytest.raises(IsolationError, match="another tenant") as caught:
        await bob.save_session(agent, "chat-1", session)
    assert caught.value.conversation_id == "chat-1"
    assert "alice" not in str(caught.value)  # the owner is not named to the caller
    # ... and a session recorded for alice, planted under bob's scoped id, is refused on read.
    await shared.save_session(agent, "bob::planted", AgentSession.from_dict(session.to_dict()))
    with pytest.raises(IsolationError):
        await bob.get_session(agent, "planted")


async def test_views_over_views_scope_keys_by_every_tenant_on_the_way() -> None:
    shared = InMemorySessionStore()
    history = InMemoryMessageStore()
    agent = Agent(ScriptedChatClient(), context_providers=[StorageHistoryProvider(history, "history")])
    keys: list[str] = []
    for org in ("org-1", "org-2"):  # the same user name in two organisations
        user = IsolationKeyScopedSessionStore(IsolationKeyScopedSessionStore(shared, org), "alice")
        assert user.scope == f"{org}::alice"
        session = await user.get_session(agent, "chat-1")
        await agent.run(f"hello from {org}", session=session)
        await user.save_session(agent, "chat-1", session)
        again = await user.get_session(agent, "chat-1")
        assert again.isolation_key == f"{org}::alice"
        keys.append(again.storage_key)
    assert keys == ["org-1::alice::chat-1", "org-2::alice::chat-1"]
    assert next(m.text for m in (await history.read("org-2::alice::chat-1")).messages) == "hello from org-2"
    # org-2's alice cannot save org-1's alice's session
    org1_session = await IsolationKeyScopedSessionStore(
        IsolationKeyScopedSessionStore(shared, "org-1"), "alice"
    ).get_session(agent, "chat-1")
    org2_alice = IsolationKeyScopedSessionStore(IsolationKeyScopedSessionStore(shared, "org-2"), "alice")
    with pytest.raises(IsolationError):
        await org2_alice.save_session(agent, "chat-1", org1_session)


async def test_a_session_saved_before_tenants_were_recorded_is_claimed() -> None:
    shared = InMemorySessionStore()
    agent = Agent(ScriptedChatClient())
    legacy = AgentSession(session_id="chat-1")
    legacy.state["note"] = "old"
    await shared.save_session(agent, "alice::chat-1", legacy)
    session = await IsolationKeyScopedSessionStore(shared, "alice").get_session(agent, "chat-1")
    assert session.state["note"] == "old"
    assert session.isolation_key == "alice"


async def test_the_isolation_key_survives_serialization_and_cannot_change() -> None:
    session = AgentSession(session_id="chat-1", isolation_key="alice")
    restored = AgentSession.from_dict(session.to_dict())
    assert restored.isolation_key == "alice"
    assert restored.storage_key == "alice::chat-1"
    assert AgentSession.from_dict({**session.to_dict(), "isolation_key": None}).storage_key == "chat-1"
    with pytest.raises(ValueError, match="cannot change"):
        restored.isolation_key = "bob"
    restored.isolation_key = "alice::team"  # narrowing to a sub-tenant is allowed
    assert restored.storage_key == "alice::team::chat-1"
    for bad in ("", "a:", "a::", "::b"):
        with pytest.raises(ValueError, match="isolation_key"):
            AgentSession(isolation_key=bad)
    for bad_payload in (7, "a:::", ""):
        with pytest.raises(SessionFormatError, match="isolation_key"):
            AgentSession.from_dict({**session.to_dict(), "isolation_key": bad_payload})
