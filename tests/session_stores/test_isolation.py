"""IsolationKeyScopedSessionStore: tenants never reach each other's sessions."""

from __future__ import annotations

from typing import Any

import pytest

from agentkeep import Agent, AgentSession, ConflictError, StorageClosedError
from agentkeep.session_stores import (
    AgentSessionStore,
    DelegatingSessionStore,
    FileSystemSessionStore,
    InMemorySessionStore,
    IsolationKeyScopedSessionStore,
    NoopSessionStore,
    session_version,
    set_session_version,
)
from agentkeep.testing import ScriptedChatClient


def make_agent() -> Agent:
    return Agent(ScriptedChatClient(), name="helper")


async def save_new(
    store: AgentSessionStore, agent: Agent, conversation_id: str, **state: Any
) -> AgentSession:
    session = await store.get_session(agent, conversation_id)
    for key, value in state.items():
        session.state[key] = value
    await store.save_session(agent, conversation_id, session)
    return session


@pytest.mark.parametrize("key", ["", "a::b", "::", "a:", ":"])
def test_ambiguous_isolation_keys_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="isolation_key"):
        IsolationKeyScopedSessionStore(InMemorySessionStore(), key)


def test_the_scoped_id_is_key_separator_conversation() -> None:
    store = IsolationKeyScopedSessionStore(InMemorySessionStore(), "tenant:1")
    assert store.isolation_key == "tenant:1"
    assert store.scoped_id("chat") == "tenant:1::chat"
    assert store.scoped_id("::x") == "tenant:1::::x"
    with pytest.raises(ValueError, match="conversation_id"):
        store.scoped_id("")


async def test_tenants_never_see_each_others_sessions() -> None:
    shared = InMemorySessionStore()
    alice = IsolationKeyScopedSessionStore(shared, "alice")
    bob = IsolationKeyScopedSessionStore(shared, "bob")
    agent = make_agent()
    await save_new(alice, agent, "chat", owner="alice")
    seen = await bob.get_session(agent, "chat")
    assert "owner" not in seen.state
    assert session_version(seen) is None
    assert await bob.delete_session(agent, "chat") is False
    await save_new(bob, agent, "chat", owner="bob")  # no conflict: another key
    assert (await alice.get_session(agent, "chat")).state["owner"] == "alice"
    assert (await bob.get_session(agent, "chat")).state["owner"] == "bob"
    # The inner store holds them under the scoped ids only.
    assert (await shared.get_session(agent, "alice::chat")).state["owner"] == "alice"
    assert session_version(await shared.get_session(agent, "chat")) is None


async def test_ids_that_look_scoped_cannot_cross_tenants() -> None:
    shared = InMemorySessionStore()
    agent = make_agent()
    await save_new(IsolationKeyScopedSessionStore(shared, "a"), agent, "b::secret", owner="a")
    # The only tenant that could reach "a::b::secret" would be "a::b", which is refused, and
    # tenant "a:" (refused too) would have met tenant "a" at "a::::x".
    mallory = IsolationKeyScopedSessionStore(shared, "b")
    assert "owner" not in (await mallory.get_session(agent, "a::b::secret")).state
    assert "owner" not in (await mallory.get_session(agent, "secret")).state


async def test_sessions_come_back_with_the_callers_id() -> None:
    shared = InMemorySessionStore()
    store = IsolationKeyScopedSessionStore(shared, "t")
    agent = make_agent()
    fresh = await store.get_session(agent, "chat")
    assert fresh.session_id == "chat"
    await agent.run("hi", session=fresh)
    await store.save_session(agent, "chat", fresh)
    stored_inside = await shared.get_session(agent, "t::chat")
    assert stored_inside.session_id == "chat"  # the payload never carries the tenant
    restored = await store.get_session(agent, "chat")
    assert restored.session_id == "chat"
    assert session_version(restored) == 1
    # A session saved with its own id keeps it.
    custom = AgentSession(session_id="mine")
    await store.save_session(agent, "other", custom)
    assert (await store.get_session(agent, "other")).session_id == "mine"


async def test_a_session_named_after_the_scoped_id_is_renamed_with_its_state_and_version() -> None:
    shared = InMemorySessionStore()
    agent = make_agent()
    odd = AgentSession(session_id="t::chat", service_session_id="svc")
    odd.state["n"] = 1
    await shared.save_session(agent, "t::chat", odd)
    session = await IsolationKeyScopedSessionStore(shared, "t").get_session(agent, "chat")
    assert session.session_id == "chat"
    assert session.service_session_id == "svc"
    assert session.state["n"] == 1
    assert session_version(session) == 1


async def test_over_the_noop_store_new_sessions_have_the_callers_id() -> None:
    store = IsolationKeyScopedSessionStore(NoopSessionStore(), "t")
    session = await store.get_session(make_agent(), "chat")
    assert session.session_id == "chat"
    assert session_version(session) is None


async def test_conflicts_name_the_callers_conversation() -> None:
    store = IsolationKeyScopedSessionStore(InMemorySessionStore(), "t")
    agent = make_agent()
    await save_new(store, agent, "chat")
    stale = await store.get_session(agent, "chat")
    set_session_version(stale, None)
    with pytest.raises(ConflictError) as caught:
        await store.save_session(agent, "chat", stale)
    assert caught.value.conversation_id == "chat"
    assert caught.value.backend == "memory"
    assert isinstance(caught.value.__cause__, ConflictError)


async def test_get_service_finds_every_layer(tmp_path: Any) -> None:
    inner = FileSystemSessionStore(tmp_path)
    tenant = IsolationKeyScopedSessionStore(inner, "t")
    outer = DelegatingSessionStore(tenant)
    assert outer.get_service(IsolationKeyScopedSessionStore) is tenant
    assert outer.get_service(FileSystemSessionStore) is inner
    assert outer.get_service(InMemorySessionStore) is None
    assert tenant.backend == "filesystem"


async def test_closing_a_view_leaves_the_shared_store_open_unless_it_owns_it() -> None:
    shared = InMemorySessionStore()
    agent = make_agent()
    view = IsolationKeyScopedSessionStore(shared, "t")
    await save_new(view, agent, "chat", n=1)
    await view.aclose()
    with pytest.raises(StorageClosedError):
        await view.get_session(agent, "chat")
    assert (await shared.get_session(agent, "t::chat")).state["n"] == 1
    owner = IsolationKeyScopedSessionStore(shared, "t", owns_inner_store=True)
    await owner.aclose()
    with pytest.raises(StorageClosedError):
        await shared.get_session(agent, "t::chat")
