"""The reference's annotation view of compaction, computed from agentkeep's index, both ways."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentkeep import Agent, AgentSession, InMemoryHistoryProvider, Message, SessionContext
from agentkeep.compaction import (
    EXCLUDE_REASON_KEY,
    EXCLUDED_KEY,
    GROUP_ANNOTATION_KEY,
    SUMMARIZED_BY_SUMMARY_ID_KEY,
    SUMMARY_OF_MESSAGE_IDS_KEY,
    CharacterEstimatorTokenizer,
    CompactionProvider,
    PipelineCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    annotate_message_groups,
    apply_compaction,
    extend_compaction_messages,
    included_messages,
    included_token_count,
)
from agentkeep.testing import ScriptedChatClient
from tests.compaction.messages import assistant, call, result, system, texts, user


def group(message: Message) -> dict[str, Any]:
    return message.additional_properties[GROUP_ANNOTATION_KEY]


def excluded(message: Message) -> bool:
    return bool(message.additional_properties.get(EXCLUDED_KEY))


def test_annotations_describe_the_index_groups() -> None:
    messages = [system(), user(), call("c1"), assistant("between"), result("c1"), assistant("done")]
    ids = annotate_message_groups(messages, tokenizer=CharacterEstimatorTokenizer())
    assert [m.message_id for m in messages] == [f"msg_{i}" for i in range(6)]  # the reference's names
    assert ids == ["group_msg_0", "group_msg_1", "group_msg_2", "group_msg_3", "group_msg_5"]
    assert group(messages[4])["id"] == group(messages[2])["id"] == "group_msg_2"
    assert [group(m)["kind"] for m in messages] == [
        "system",
        "user",
        "tool_call",
        "assistant_text",
        "tool_call",
        "assistant_text",
    ]
    assert [group(m)["index"] for m in messages] == [0, 1, 2, 3, 2, 4]
    assert all(isinstance(group(m)["token_count"], int) for m in messages)
    assert included_token_count(messages) == sum(group(m)["token_count"] for m in messages)
    assert not any(map(excluded, messages))


def test_ids_are_only_given_where_missing_and_never_clash() -> None:
    messages = [user("zero"), assistant("one"), user("two")]
    messages[1].message_id = "msg_2"
    annotate_message_groups(messages)
    assert [m.message_id for m in messages] == ["msg_0", "msg_2", "msg_3"]


def test_a_cached_token_count_is_kept_and_a_split_group_stays_whole() -> None:
    messages = [call("c1"), assistant("waiting")]
    annotate_message_groups(messages)
    group(messages[0])["token_count"] = 7
    messages[0].additional_properties[EXCLUDED_KEY] = True
    extend_compaction_messages(messages, [result("c1")], tokenizer=CharacterEstimatorTokenizer())
    assert group(messages[0])["token_count"] == 7
    assert group(messages[2])["id"] == group(messages[0])["id"]
    assert not excluded(messages[0])
    assert not excluded(messages[2])


async def test_agentkeep_strategies_run_on_a_plain_list() -> None:
    messages = [system(), user("u1"), assistant("a1"), user("u2"), assistant("a2")]
    assert await SlidingWindowStrategy(keep_last_groups=2)(messages)
    assert texts(included_messages(messages)) == ["be brief", "u2", "a2"]
    assert messages[1].additional_properties[EXCLUDE_REASON_KEY] == "sliding_window"
    assert await SlidingWindowStrategy(keep_last_groups=2)(messages) is False  # nothing left to do


async def test_a_collapsed_group_becomes_a_linked_summary_in_place() -> None:
    messages = [
        user(),
        call("c1"),
        result("c1", value="r1"),
        call("c2"),
        result("c2", value="r2"),
        assistant(),
    ]
    assert await ToolResultCompactionStrategy(keep_last_tool_call_groups=1)(messages)
    assert len(messages) == 7
    summary = messages[1]
    assert summary.text == "[Tool results: get_weather: r1]"
    assert group(summary)[SUMMARY_OF_MESSAGE_IDS_KEY] == [messages[2].message_id, messages[3].message_id]
    assert group(messages[2])[SUMMARIZED_BY_SUMMARY_ID_KEY] == summary.message_id
    assert messages[2].additional_properties[EXCLUDE_REASON_KEY] == "tool_result_compaction"
    assert texts(included_messages(messages)) == ["question", summary.text, "assistant", "tool", "answer"]
    assert await ToolResultCompactionStrategy(keep_last_tool_call_groups=1)(messages) is False


class DropOldestNonSystem:
    """A strategy written for the reference: excludes the oldest included non-system group while
    more than ``keep`` are included."""

    def __init__(self, keep: int = 1) -> None:
        self.keep = keep

    async def __call__(self, messages: list[Message]) -> bool:
        annotate_message_groups(messages)
        live = {group(m)["id"] for m in messages if group(m)["kind"] != "system" and not excluded(m)}
        if len(live) <= self.keep:
            return False
        for message in messages:
            if group(message)["kind"] != "system" and not excluded(message):
                first = group(message)["id"]
                for other in messages:
                    if group(other)["id"] == first:
                        other.additional_properties[EXCLUDED_KEY] = True
                return True
        return False


class SummarizeAllButLast:
    """A reference-style strategy that inserts a summary of everything but the last message."""

    async def __call__(self, messages: list[Message]) -> bool:
        annotate_message_groups(messages)
        replaced = messages[:-1]
        summary = Message(
            "assistant",
            "summary",
            additional_properties={
                GROUP_ANNOTATION_KEY: {SUMMARY_OF_MESSAGE_IDS_KEY: [m.message_id for m in replaced]}
            },
        )
        for message in replaced:
            message.additional_properties[EXCLUDED_KEY] = True
        messages.insert(0, summary)
        return True


async def test_a_reference_strategy_runs_where_agentkeep_takes_one() -> None:
    history = [system(), user("hello"), assistant("world")]
    assert texts(await apply_compaction(history, strategy=DropOldestNonSystem())) == ["be brief", "world"]
    assert not any(GROUP_ANNOTATION_KEY in m.additional_properties for m in history)  # its scratch, not ours
    pipeline = PipelineCompactionStrategy(DropOldestNonSystem(), DropOldestNonSystem())
    # each drops one of three groups when more than one is left
    assert texts(await apply_compaction([user("a"), user("b"), user("c")], strategy=pipeline)) == ["c"]
    summarized = await apply_compaction(
        [user("a"), assistant("b"), user("c")], strategy=SummarizeAllButLast()
    )
    assert texts(summarized) == ["summary", "c"]


async def test_an_agent_compacts_with_a_reference_strategy_each_model_call() -> None:
    client = ScriptedChatClient(lambda messages: f"seen {len(messages)}")
    strategy = DropOldestNonSystem(keep=2)
    agent = Agent(client, context_providers=[InMemoryHistoryProvider()], compaction_strategy=strategy)
    session = agent.create_session()
    await agent.run("one", session=session)
    await agent.run("two", session=session)
    assert texts(client.calls[-1]) == ["seen 1", "two"]  # of one, seen 1, two: the oldest group went
    history = await agent.history_provider().get_session_messages(session)  # type: ignore[union-attr]
    assert texts(history) == ["one", "seen 1", "two", "seen 2"]  # only what was sent was compacted


async def test_the_reference_form_of_the_provider_compacts_sent_and_stored_history() -> None:
    provider = CompactionProvider(
        before_strategy=SlidingWindowStrategy(keep_last_groups=2),
        after_strategy=SlidingWindowStrategy(keep_last_groups=1),
        history_source_id="history",
    )
    context = SessionContext(input_messages=[])
    context.extend_messages("history", [system(), user("u1"), assistant("a1"), user("u2"), assistant("a2")])
    await provider.before_run(agent=None, session=None, context=context, state={})  # type: ignore[arg-type]
    assert texts(context.context_messages["history"]) == ["be brief", "u2", "a2"]
    session = AgentSession()
    stored = [user("q"), assistant("a")]
    session.state["history"] = {"messages": stored}
    await provider.after_run(agent=None, session=session, context=context, state={})  # type: ignore[arg-type]
    assert [excluded(m) for m in stored] == [True, False]  # kept, marked: skip_excluded leaves it out
    loaded = await InMemoryHistoryProvider("history", skip_excluded=True).get_messages("s", session=session)
    assert texts(loaded) == ["a"]
    with pytest.raises(ValueError, match="not both"):
        CompactionProvider(SlidingWindowStrategy(keep_last_groups=1), before_strategy=DropOldestNonSystem())


async def test_an_agent_records_the_after_strategy_on_agentkeep_history() -> None:
    client = ScriptedChatClient(["a1", "a2", "a3"])
    history = InMemoryHistoryProvider()
    compaction = CompactionProvider(
        after_strategy=SlidingWindowStrategy(keep_last_groups=2), history_source_id=history.source_id
    )
    agent = Agent(client, context_providers=[history, compaction])
    session = agent.create_session()
    for text in ("u1", "u2", "u3"):
        await agent.run(text, session=session)
    assert texts(await history.get_session_messages(session)) == ["u3", "a3"]


async def test_the_token_budget_fallback_lets_system_messages_go_last() -> None:
    tokenizer = CharacterEstimatorTokenizer()
    messages = [system("system " * 100), user("latest " * 100)]
    strict = TokenBudgetComposedStrategy(token_budget=1, tokenizer=tokenizer, strategies=[])
    assert texts(await apply_compaction(messages, strategy=strict)) == [messages[1].text]
    lenient = TokenBudgetComposedStrategy(
        token_budget=1, tokenizer=tokenizer, strategies=[], strict_budget=False
    )
    assert len(await apply_compaction(messages, strategy=lenient)) == 2
    alone = [system("system " * 100)]
    assert await apply_compaction(alone, strategy=strict) == alone  # the projection is never empty


async def test_summarization_passes_over_leading_groups_too_large_for_the_budget() -> None:
    summarizer = ScriptedChatClient(["summary"])
    messages = [user("oversized " * 300), assistant("small"), user("recent"), assistant("recent answer")]
    strategy = SummarizationStrategy(
        summarizer,
        target_count=2,
        threshold=0,
        max_summary_input_tokens=400,
        tokenizer=CharacterEstimatorTokenizer(),
    )
    assert await strategy(messages)
    sent = summarizer.calls[0][1].text
    assert "small" in sent
    assert "oversized" not in sent
    by_text = {m.text: m for m in messages}
    assert not excluded(by_text["oversized " * 300])
    assert excluded(by_text["small"])
    assert texts(included_messages(messages))[1].endswith("summary")  # in the place of "small"


async def test_repeated_summarization_failures_are_logged_once_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing:
        async def get_response(self, messages: Any, **kwargs: Any) -> Any:
            raise RuntimeError("down")

    strategy = SummarizationStrategy(Failing(), target_count=1, threshold=0)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agentkeep.compaction"):
        for _ in range(4):
            assert await strategy([user("a"), assistant("b"), user("c")]) is False
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "3 consecutive times" in errors[0].getMessage()
    assert "summary generation failed" in caplog.records[0].getMessage()
    assert strategy.consecutive_failures == 4


async def test_a_sliding_window_may_let_system_messages_go() -> None:
    messages = [system("old rules"), user("u1"), assistant("a1")]
    out = await apply_compaction(
        messages, strategy=SlidingWindowStrategy(keep_last_groups=1, preserve_system=False)
    )
    assert texts(out) == ["a1"]
