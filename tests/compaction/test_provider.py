"""Compaction in an agent: per model call (only what is sent) and per run (recorded in history)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agentkeep import Agent, InMemoryHistoryProvider, Message
from agentkeep.compaction import (
    SUMMARY_PROPERTY,
    CharacterEstimatorTokenizer,
    CompactionProvider,
    CompactionTriggers,
    MessageIndex,
    SlidingWindowCompactionStrategy,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
)
from agentkeep.errors import ProviderConfigurationError
from agentkeep.testing import ScriptedChatClient


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


def lookup(item: str) -> str:
    """Look up an item's price."""
    return f"{item}: 10 EUR"


def _summaries(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if SUMMARY_PROPERTY in (m.additional_properties or {})]


async def test_agent_strategy_compacts_what_is_sent_and_keeps_stored_history() -> None:
    client = ScriptedChatClient(lambda messages: f"reply {len(messages)}")
    agent = Agent(client, compaction_strategy=SlidingWindowStrategy(keep_last_groups=3))
    session = agent.create_session()
    for turn in range(6):
        await agent.run(f"turn {turn}", session=session)
    assert [len(call) for call in client.calls] == [1, 3, 3, 3, 3, 3]
    assert texts(client.calls[-1]) == ["turn 4", "reply 3", "turn 5"]
    stored = await agent.history_provider().get_session_messages(session)  # type: ignore[union-attr]
    assert len(stored) == 12  # nothing removed from the session's history


async def test_per_run_override_and_tokenizer() -> None:
    client = ScriptedChatClient(lambda messages: "ok")
    agent = Agent(client, compaction_strategy=SlidingWindowStrategy(keep_last_groups=8))
    session = agent.create_session()
    for turn in range(4):
        await agent.run(f"turn {turn}", session=session)
    assert len(client.calls[-1]) == 7
    await agent.run(
        "last",
        session=session,
        compaction_strategy=SlidingWindowStrategy(keep_last_groups=1),
        tokenizer=CharacterEstimatorTokenizer(),
    )
    assert texts(client.calls[-1]) == ["last"]
    await agent.run("again", session=session)  # the agent's own strategy is back
    assert len(client.calls[-1]) == 8


async def test_tool_loop_is_compacted_between_model_calls() -> None:
    replies: list[str | Message] = [
        ScriptedChatClient.tool_call("lookup", {"item": "laptop"}),
        ScriptedChatClient.tool_call("lookup", {"item": "mouse"}),
        ScriptedChatClient.tool_call("lookup", {"item": "desk"}),
        "All found.",
    ]
    client = ScriptedChatClient(replies)
    agent = Agent(
        client, tools=[lookup], compaction_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1)
    )
    session = agent.create_session()
    response = await agent.run("prices?", session=session)
    assert response.text == "All found."
    last = client.calls[-1]
    assert texts(_summaries(last)) == [
        "[Tool results: lookup: laptop: 10 EUR]",
        "[Tool results: lookup: mouse: 10 EUR]",
    ]
    assert texts(last)[0] == "prices?"
    assert last[-1].role == "tool"  # the newest tool group is sent whole
    stored = await agent.history_provider().get_session_messages(session)  # type: ignore[union-attr]
    assert not _summaries(stored)
    assert len(stored) == 8  # input, three calls with results, answer


async def test_model_call_cache_grows_by_the_turn_only() -> None:
    client = ScriptedChatClient(lambda messages: "ok")
    agent = Agent(client, compaction_strategy=SlidingWindowStrategy(keep_last_groups=4))
    session = agent.create_session()
    await agent.run("first", session=session)
    cache = session.runtime[f"compaction:{Agent.COMPACTION_SOURCE_ID}"]
    index = cache.index
    assert isinstance(index, MessageIndex)
    for turn in range(5):
        await agent.run(f"turn {turn}", session=session)
        assert cache.index is index  # the same index, continued
    # Every message once: five stored runs (input and reply) and this run's input; its reply
    # joins the index when the next run loads it.
    assert index.message_count == 11


async def test_before_run_provider_records_in_memory_history() -> None:
    client = ScriptedChatClient(lambda messages: "ok")
    provider = CompactionProvider(SlidingWindowCompactionStrategy(CompactionTriggers.turns_exceed(2)))
    agent = Agent(client, context_providers=[InMemoryHistoryProvider(), provider])
    session = agent.create_session()
    for turn in range(5):
        await agent.run(f"turn {turn}", session=session)
    stored = await agent.history_provider().get_session_messages(session)  # type: ignore[union-attr]
    # The in-memory history is the compacted view: the two turns left before the last run, and it.
    assert texts(stored) == ["turn 2", "ok", "turn 3", "ok", "turn 4", "ok"]
    restored = agent.deserialize_session(agent.serialize_session(session))
    assert texts(await agent.history_provider().get_session_messages(restored)) == texts(stored)  # type: ignore[union-attr]


async def test_service_managed_runs_are_not_compacted() -> None:
    client = ScriptedChatClient(["a", "b", "c"], service_managed=True)
    after = CompactionProvider(SlidingWindowStrategy(keep_last_groups=1), phase="after_run")
    agent = Agent(
        client, compaction_strategy=SlidingWindowStrategy(keep_last_groups=1), context_providers=[after]
    )
    session = agent.create_session()
    for text in ("x", "y", "z"):
        await agent.run(text, session=session)
    conversation = client.conversations[str(session.service_session_id or "")]
    assert len(conversation) == 6  # the service holds everything; nothing was compacted away
    assert f"compaction:{after.source_id}" not in session.runtime


async def test_two_model_call_compactions_are_rejected() -> None:
    with pytest.raises(ProviderConfigurationError, match="more than one compaction"):
        Agent(
            ScriptedChatClient(["x"]),
            compaction_strategy=SlidingWindowStrategy(keep_last_groups=1),
            context_providers=[
                CompactionProvider(SlidingWindowStrategy(keep_last_groups=2), phase="model_call")
            ],
        )
    with pytest.raises(ValueError, match="phase"):
        CompactionProvider(SlidingWindowStrategy(keep_last_groups=1), phase="later")  # type: ignore[arg-type]


async def test_compact_static_method_is_ad_hoc_compaction() -> None:
    messages = [Message("system", "be brief")] + [Message("user", f"q{i}") for i in range(10)]
    out = await CompactionProvider.compact(TruncationStrategy(max_n=4, compact_to=3), messages)
    assert texts(out) == ["be brief", "q8", "q9"]
    assert len(messages) == 11


async def test_concurrent_runs_on_one_session_lose_nothing() -> None:
    async def slow(messages: Sequence[Message]) -> str:
        return f"seen {len(messages)}"

    client = ScriptedChatClient(lambda messages: f"seen {len(messages)}")
    agent = Agent(client, compaction_strategy=SlidingWindowStrategy(keep_last_groups=3))
    session = agent.create_session()
    await asyncio.gather(*(agent.run(f"q{i}", session=session) for i in range(8)))
    stored = await agent.history_provider().get_session_messages(session)  # type: ignore[union-attr]
    assert sorted(m.text for m in stored if m.role == "user") == sorted(f"q{i}" for i in range(8))
    assert len(stored) == 16
    await agent.run("after", session=session)
    assert texts(client.calls[-1])[-1] == "after"
    assert len(client.calls[-1]) == 3


async def test_streaming_runs_are_compacted_the_same_way() -> None:
    client = ScriptedChatClient(lambda messages: f"reply {len(messages)}")
    agent = Agent(client, compaction_strategy=SlidingWindowStrategy(keep_last_groups=2))
    session = agent.create_session()
    for turn in range(4):
        stream = agent.run(f"turn {turn}", session=session, stream=True)
        chunks = [update.text async for update in stream]
        assert "".join(chunks) == (await stream.get_final_response()).text
    assert [len(call) for call in client.calls] == [1, 2, 2, 2]
    assert texts(client.calls[-1]) == ["reply 2", "turn 3"]


async def test_history_provider_lookup() -> None:
    mine = InMemoryHistoryProvider("mine")
    agent = Agent(ScriptedChatClient(["x"]), context_providers=[mine])
    assert agent.history_provider() is mine
    assert agent.history_provider("mine") is mine
    assert agent.history_provider("other") is None
    bare = Agent(ScriptedChatClient(["x"]))
    assert isinstance(bare.history_provider(), InMemoryHistoryProvider)  # the built-in default


async def test_a_per_run_strategy_continues_the_sessions_index() -> None:
    client = ScriptedChatClient(lambda messages: "ok")
    agent = Agent(client)
    window = SlidingWindowStrategy(keep_last_groups=4)
    session = agent.create_session()
    await agent.run("first", session=session, compaction_strategy=window)
    cache = session.runtime[f"compaction:{Agent.COMPACTION_SOURCE_ID}"]
    index = cache.index
    for turn in range(4):  # a new default tokenizer each run counts alike: the index is continued
        await agent.run(f"turn {turn}", session=session, compaction_strategy=window)
        assert cache.index is index
    assert index.message_count == 9  # four stored runs (input and reply) and this run's input
    assert len(client.calls[-1]) == 4
