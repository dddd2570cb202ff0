"""Persisted compaction on every backend: originals stay, the compacted view is what loads."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import pytest

from agentkeep import Agent, Message
from agentkeep.compaction import (
    SUMMARY_PROPERTY,
    CompactionProvider,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    summarized_message_ids,
)
from agentkeep.errors import ScriptExhaustedError
from agentkeep.storage import StorageHistoryProvider
from agentkeep.testing import ScriptedChatClient

from .test_history_provider import CountingStore


def _weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _script(turns: int) -> list[str | Message]:
    replies: list[str | Message] = []
    for turn in range(turns):
        replies.append(ScriptedChatClient.tool_call("_weather", {"city": f"city{turn}"}))
        replies.append(f"answer {turn}")
    return replies


async def test_tool_results_collapse_in_storage_and_originals_stay(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        history = StorageHistoryProvider(store, "db")
        compaction = CompactionProvider(ToolResultCompactionStrategy(keep_last_tool_call_groups=1))
        client = ScriptedChatClient(_script(3))
        agent = Agent(client, tools=[_weather], context_providers=[history, compaction])
        session = agent.create_session()
        for turn in range(3):
            await agent.run(f"weather {turn}?", session=session)
        conversation = history.conversation_id(session)

        raw = await store.read(conversation)
        assert len(raw) == 12  # user, call, result, answer per turn: nothing deleted
        view = (await store.read_view(conversation)).messages
        summaries = [m for m in view if SUMMARY_PROPERTY in (m.additional_properties or {})]
        # Before run 3 the loaded history held two tool groups: the older one was collapsed.
        assert [s.text for s in summaries] == ["[Tool results: _weather: sunny in city0]"]
        replaced = summarized_message_ids(summaries[0])
        assert replaced == [m.message.message_id for m in raw[1:3]]
        assert [m.text for m in view if m.role == "user"] == ["weather 0?", "weather 1?", "weather 2?"]
        assert view.index(summaries[0]) == 1  # in place of the call it replaces

        # A fresh session on the same conversation loads the compacted view.
        fresh = agent.create_session()
        history.attach(fresh, conversation)
        loaded = await history.get_session_messages(fresh)
        assert [m.message_id for m in loaded] == [m.message_id for m in view]


async def test_next_turn_loads_only_what_is_new_after_a_compaction(backend: ModuleType) -> None:
    async with backend.open_store() as inner:
        store = CountingStore(inner)
        history = StorageHistoryProvider(store, "db")  # type: ignore[arg-type]
        compaction = CompactionProvider(SlidingWindowStrategy(keep_last_groups=4))
        client = ScriptedChatClient(lambda messages: f"re {len(messages)}")
        agent = Agent(client, context_providers=[history, compaction])
        session = agent.create_session()
        for turn in range(8):
            await agent.run(f"turn {turn}", session=session)
        # Every request holds at most the window plus the new input.
        assert all(len(call) <= 5 for call in client.calls)
        # After the first full load, each turn asks only for what is new (no full reloads).
        assert [read["last"] for read in store.view_reads].count(None) == len(store.view_reads)
        assert all(read["after"] is not None for read in store.view_reads[1:])
        conversation = history.conversation_id(session)
        assert len(await inner.read(conversation)) == 16
        view = (await inner.read_view(conversation)).messages
        assert [m.text for m in view] == [m.text for m in (await history.get_session_messages(session))]
        assert len(view) <= 6


async def test_after_run_phase_compacts_what_was_just_stored(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        history = StorageHistoryProvider(store, "db")
        after = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2), phase="after_run")
        client = ScriptedChatClient(["one", "two", "three"])
        agent = Agent(client, context_providers=[history, after])
        session = agent.create_session()
        for text in ("a", "b", "c"):
            await agent.run(text, session=session)
        conversation = history.conversation_id(session)
        assert [m.text for m in (await store.read_view(conversation)).messages] == ["c", "three"]
        assert len(await store.read(conversation)) == 6
        # The request of run 3 was run 2's compacted view plus the new input.
        assert [m.text for m in client.calls[2]] == ["b", "two", "c"]


async def test_failed_run_records_nothing(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        history = StorageHistoryProvider(store, "db")
        after = CompactionProvider(SlidingWindowStrategy(keep_last_groups=1), phase="after_run")
        client = ScriptedChatClient(["one"])  # the second run finds no reply and fails
        agent = Agent(client, context_providers=[history, after])
        session = agent.create_session()
        await agent.run("a", session=session)
        conversation = history.conversation_id(session)
        epoch = (await store.read_view(conversation)).epoch
        with pytest.raises(ScriptExhaustedError):
            await agent.run("b", session=session)
        view = await store.read_view(conversation)
        assert view.epoch == epoch
        assert [m.text for m in view.messages] == ["one"]
        assert len(await store.read(conversation)) == 2


def _texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


async def test_summary_of_a_stored_summary_can_be_excluded_later(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        history = StorageHistoryProvider(store, "db")
        tool_result = CompactionProvider(ToolResultCompactionStrategy(keep_last_tool_call_groups=0))
        client = ScriptedChatClient([*_script(2), "plain"])
        agent = Agent(client, tools=[_weather], context_providers=[history, tool_result])
        session = agent.create_session()
        await agent.run("w0", session=session)
        await agent.run("w1", session=session)
        await agent.run("w2", session=session)
        conversation = history.conversation_id(session)
        view = (await store.read_view(conversation)).messages
        assert sum(SUMMARY_PROPERTY in (m.additional_properties or {}) for m in view) == 2
        # Now a window drops the oldest groups, summaries included: their ids are excluded too.
        window = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2), source_id="window")
        agent2 = Agent(ScriptedChatClient(["done"]), context_providers=[history, window])
        await agent2.run("w3", session=session)
        assert _texts((await store.read_view(conversation)).messages) == ["w2", "plain", "w3", "done"]


async def test_a_failed_run_records_no_compaction_and_the_next_one_does(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        history = StorageHistoryProvider(store, "db")
        window = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2))
        agent = Agent(ScriptedChatClient(["one", "two"]), context_providers=[history, window])
        session = agent.create_session()
        await agent.run("a", session=session)
        await agent.run("b", session=session)
        conversation = history.conversation_id(session)
        assert (await store.read_view(conversation)).epoch == 0  # nothing to compact yet: 2 groups
        with pytest.raises(ScriptExhaustedError):
            await agent.run("c", session=session)  # compacts a, one, b, two -> b, two; then fails
        view = await store.read_view(conversation)
        assert view.epoch == 0
        assert _texts(view.messages) == ["a", "one", "b", "two"]
        again = Agent(ScriptedChatClient(["three"]), context_providers=[history, window])
        await again.run("d", session=session)
        view = await store.read_view(conversation)
        assert view.epoch == 1
        assert _texts(view.messages) == ["b", "two", "d", "three"]
        assert len(await store.read(conversation)) == 6


async def test_two_writers_compacting_one_conversation_lose_nothing(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        agents: list[tuple[Agent, StorageHistoryProvider]] = []
        for name in ("a", "b"):  # two hosts, each with its own provider and cache
            history = StorageHistoryProvider(store, "db")
            window = CompactionProvider(SlidingWindowStrategy(keep_last_groups=3))
            client = ScriptedChatClient(lambda messages, name=name: f"{name} saw {len(messages)}")
            agents.append((Agent(client, context_providers=[history, window]), history))
        sessions = []
        for agent, history in agents:
            session = agent.create_session()
            history.attach(session, "shared")
            sessions.append(session)
        for turn in range(8):
            index = turn % 2
            agent, _ = agents[index]
            await agent.run(f"q{turn}", session=sessions[index])
        raw = await store.read("shared")
        assert [entry.message.text for entry in raw if entry.message.role == "user"] == [
            f"q{i}" for i in range(8)
        ]
        assert len(raw) == 16  # every turn stored once, nothing lost to the other writer's compactions
        view = (await store.read_view("shared")).messages
        assert [m.text for m in view][-2:][0] == "q7"
        assert len(view) <= 5  # the last window (3 groups) plus the last turn
        for (_, history), session in zip(agents, sessions, strict=True):  # both caches agree with the store
            assert [m.message_id for m in await history.get_session_messages(session)] == [
                m.message_id for m in view
            ]
