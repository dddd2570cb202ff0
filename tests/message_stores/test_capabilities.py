"""The storage contract's core and its optional capabilities, as protocols a store declares."""

from __future__ import annotations

from agentkeep import Agent, message_stores
from agentkeep.message_stores import InMemoryMessageStore, MessageStore
from agentkeep.message_stores.redis import RedisMessageStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.testing import ScriptedChatClient
from agentkeep.testing.conformance import CountingStore


def test_the_built_in_backends_declare_what_they_can_do() -> None:
    capabilities = (
        message_stores.SupportsSetup,
        message_stores.SupportsClose,
        message_stores.SupportsListing,
        message_stores.SupportsExpiry,
        message_stores.SupportsPurge,
    )
    declared = {
        type(store).__name__: [c.__name__ for c in capabilities if isinstance(store, c)]
        for store in (
            InMemoryMessageStore(),
            SQLiteMessageStore(":memory:"),
            RedisMessageStore.from_url("redis://127.0.0.1:6379/0"),
            CountingStore(InMemoryMessageStore()),
        )
    }
    every = ["SupportsSetup", "SupportsClose", "SupportsListing", "SupportsExpiry", "SupportsPurge"]
    assert declared == {
        "InMemoryMessageStore": every,
        "SQLiteMessageStore": every,
        "RedisMessageStore": every[:4],  # Redis expires keys itself: nothing to purge
        "CountingStore": [],
    }
    assert all(
        isinstance(store, MessageStore)
        for store in (InMemoryMessageStore(), CountingStore(InMemoryMessageStore()))
    )


async def test_a_core_only_store_works_under_an_agent() -> None:
    store = CountingStore(InMemoryMessageStore())  # the core only: what the smallest backend writes
    await message_stores.setup_store(store)  # nothing to set up: no error
    provider = StorageHistoryProvider(store, "db", owns_store=True)
    client = ScriptedChatClient(lambda messages: f"{len(messages)} seen")
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session()
    await agent.run("one", session=session)
    await agent.run("two", session=session)
    assert [m.text for m in client.calls[-1]] == ["one", "1 seen", "two"]
    await provider.aclose()  # nothing to close: no error
    await message_stores.close_store(store)
