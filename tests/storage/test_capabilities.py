"""The storage contract's core and its optional capabilities, as protocols a store declares."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agentkeep import Agent, Message
from agentkeep.providers import StorageHistoryProvider
from agentkeep.storage import (
    HistoryView,
    InMemoryMessageStore,
    MessageStore,
    Summary,
    SupportsClose,
    SupportsExpiry,
    SupportsListing,
    SupportsPurge,
    SupportsSetup,
    close_store,
    setup_store,
)
from agentkeep.storage.redis import RedisMessageStore
from agentkeep.storage.sqlite import SQLiteMessageStore
from agentkeep.testing import ScriptedChatClient


class DictStore:
    """The core contract and nothing more: what the smallest third-party backend writes."""

    backend = "dict"

    def __init__(self) -> None:
        self.inner = InMemoryMessageStore()

    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        return await self.inner.append(conversation_id, messages)

    async def read(
        self, conversation_id: str, *, raw: bool = False, last: int | None = None, after: int | None = None
    ) -> HistoryView:
        return await self.inner.read(conversation_id, raw=raw, last=last, after=after)

    async def record_compaction(
        self, conversation_id: str, *, excluded: Collection[str] = (), summaries: Sequence[Summary] = ()
    ) -> int:
        return await self.inner.record_compaction(conversation_id, excluded=excluded, summaries=summaries)

    async def delete(self, conversation_id: str) -> bool:
        return await self.inner.delete(conversation_id)


def test_the_built_in_backends_declare_what_they_can_do() -> None:
    capabilities = (SupportsSetup, SupportsClose, SupportsListing, SupportsExpiry, SupportsPurge)
    declared = {
        type(store).__name__: [c.__name__ for c in capabilities if isinstance(store, c)]
        for store in (
            InMemoryMessageStore(),
            SQLiteMessageStore(":memory:"),
            RedisMessageStore.from_url("redis://127.0.0.1:6379/0"),
            DictStore(),
        )
    }
    every = ["SupportsSetup", "SupportsClose", "SupportsListing", "SupportsExpiry", "SupportsPurge"]
    assert declared == {
        "InMemoryMessageStore": every,
        "SQLiteMessageStore": every,
        "RedisMessageStore": every[:4],  # Redis expires keys itself: nothing to purge
        "DictStore": [],
    }
    assert all(isinstance(store, MessageStore) for store in (InMemoryMessageStore(), DictStore()))


async def test_a_core_only_store_works_under_an_agent() -> None:
    store = DictStore()
    await setup_store(store)  # nothing to set up: no error
    provider = StorageHistoryProvider(store, "db", owns_store=True)
    client = ScriptedChatClient(lambda messages: f"{len(messages)} seen")
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session()
    await agent.run("one", session=session)
    await agent.run("two", session=session)
    assert [m.text for m in client.calls[-1]] == ["one", "1 seen", "two"]
    await provider.aclose()  # nothing to close: no error
    await close_store(store)
