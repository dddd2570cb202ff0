"""The harness agent: compaction before every model call and after the run; per-call persistence."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentkeep import Agent, InMemoryHistoryProvider, Message
from agentkeep.compaction import (
    CharacterEstimatorTokenizer,
    CompactionProvider,
    ContextWindowCompactionStrategy,
    SlidingWindowStrategy,
    count_message_tokens,
)
from agentkeep.compaction.harness import (
    AFTER_COMPACTION_SOURCE_ID,
    BEFORE_COMPACTION_SOURCE_ID,
    create_harness_agent,
)
from agentkeep.message_stores import InMemoryMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.testing import ScriptedChatClient

TOKENIZER = CharacterEstimatorTokenizer()


def fetch_page(page: int) -> str:
    """Fetch one page of a long document."""
    return f"page {page}: " + "lorem ipsum dolor sit amet " * 40


def _compaction(agent: Agent) -> dict[str, CompactionProvider]:
    return {p.source_id: p for p in agent.context_providers if isinstance(p, CompactionProvider)}


def _tokens(messages: Sequence[Message]) -> int:
    return sum(count_message_tokens(m, tokenizer=TOKENIZER) for m in messages)


def test_compaction_is_off_unless_both_limits_or_a_strategy() -> None:
    client = ScriptedChatClient(["x"])
    assert _compaction(create_harness_agent(client)) == {}
    only_output = create_harness_agent(client, max_output_tokens=512)
    assert _compaction(only_output) == {}
    assert only_output.default_options["max_tokens"] == 512
    assert only_output.require_per_service_call_history_persistence
    both = _compaction(create_harness_agent(client, max_context_window_tokens=4_000, max_output_tokens=512))
    assert set(both) == {BEFORE_COMPACTION_SOURCE_ID, AFTER_COMPACTION_SOURCE_ID}
    assert both[BEFORE_COMPACTION_SOURCE_ID].phase == "model_call"
    assert both[AFTER_COMPACTION_SOURCE_ID].phase == "after_run"
    strategy = both[BEFORE_COMPACTION_SOURCE_ID].strategy
    assert isinstance(strategy, ContextWindowCompactionStrategy)
    assert both[AFTER_COMPACTION_SOURCE_ID].strategy is strategy  # one strategy serves both phases
    disabled = create_harness_agent(
        client, max_context_window_tokens=4_000, max_output_tokens=512, disable_compaction=True
    )
    assert _compaction(disabled) == {}
    assert disabled.default_options["max_tokens"] == 512


def test_phase_strategies_and_history_provider_are_used() -> None:
    before = SlidingWindowStrategy(keep_last_groups=10)
    history = InMemoryHistoryProvider("mine")
    agent = create_harness_agent(
        ScriptedChatClient(["x"]), before_compaction_strategy=before, history_provider=history
    )
    providers = _compaction(agent)
    assert set(providers) == {BEFORE_COMPACTION_SOURCE_ID}
    assert providers[BEFORE_COMPACTION_SOURCE_ID].strategy is before
    assert agent.history_provider() is history


def test_bad_limits_raise() -> None:
    with pytest.raises(ValueError, match="positive"):
        create_harness_agent(ScriptedChatClient(["x"]), max_context_window_tokens=0, max_output_tokens=10)
    with pytest.raises(ValueError):
        create_harness_agent(ScriptedChatClient(["x"]), max_context_window_tokens=100, max_output_tokens=100)


async def test_long_tool_loop_stays_inside_the_window_and_history_is_compacted_after() -> None:
    pages = 12
    replies: list[str | Message] = [
        ScriptedChatClient.tool_call("fetch_page", {"page": i}) for i in range(pages)
    ]
    replies.append("The document is about lorem ipsum.")
    client = ScriptedChatClient(replies)
    store = InMemoryMessageStore()
    history = StorageHistoryProvider(store, "db")
    window, output = 2_000, 400
    agent = create_harness_agent(
        client,
        max_context_window_tokens=window,
        max_output_tokens=output,
        history_provider=history,
        tools=[fetch_page],
        max_tool_iterations=pages + 1,
    )
    session = agent.create_session()
    response = await agent.run("Summarize the document.", session=session)
    assert response.text == "The document is about lorem ipsum."
    assert len(client.calls) == pages + 1
    assert all(_tokens(call) <= window - output for call in client.calls)
    assert client.calls[-1][0].text == "Summarize the document."  # the task itself is never dropped
    assert all(options.get("max_tokens") == output for options in client.call_options)
    conversation = history.conversation_id(session)
    raw = (await store.read(conversation, raw=True)).entries
    assert len(raw) == 2 + 2 * pages  # everything stored, per model call
    view = (await store.read(conversation)).messages
    assert _tokens(view) <= window - output  # the after phase recorded a compacted view
    assert view[-1].text == "The document is about lorem ipsum."


async def test_history_is_stored_after_each_model_call() -> None:
    stored_counts: list[int] = []
    history = InMemoryHistoryProvider()

    agent: Agent

    async def count_stored(step: int) -> str:
        """Report how much history is stored now."""
        stored_counts.append(len(await history.get_session_messages(session)))
        return f"step {step}"

    client = ScriptedChatClient(
        [
            ScriptedChatClient.tool_call("count_stored", {"step": 1}),
            ScriptedChatClient.tool_call("count_stored", {"step": 2}),
            "done",
        ]
    )
    agent = create_harness_agent(client, history_provider=history, tools=[count_stored])
    session = agent.create_session()
    await agent.run("go", session=session)
    assert stored_counts == [2, 4]  # input + first call; then its result + the second call
    assert len(await history.get_session_messages(session)) == 6
