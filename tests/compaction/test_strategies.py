"""Compaction strategies without a model: seed-002 examples, then properties over generated histories."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Content, Message
from agentkeep.compaction import (
    CharacterEstimatorTokenizer,
    CompactionStrategy,
    CompactionTriggers,
    MessageGroupKind,
    MessageIndex,
    PipelineCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction,
    is_summary_message,
    project,
    summarized_message_ids,
    tool_group_summary_text,
)
from agentkeep.compaction.strategies import one_line
from tests.compaction.messages import (
    assert_totals_match_a_recount,
    assistant,
    call,
    histories,
    reference_projection,
    result,
    system,
    texts,
    user,
)

K = MessageGroupKind


def weather_history() -> list[Message]:
    return [
        system(),
        user("weather?"),
        call("c1"),
        result("c1"),
        assistant("It is sunny."),
        user("and tomorrow?"),
        call("c2"),
        result("c2", value="rain"),
        assistant("Rain."),
    ]


# -- protocol and apply_compaction ----------------------------------------------------------------


def test_every_strategy_satisfies_the_protocol() -> None:
    tokenizer = CharacterEstimatorTokenizer()
    strategies: list[object] = [
        TruncationStrategy(10, 5),
        SlidingWindowStrategy(keep_last_groups=2),
        SlidingWindowCompactionStrategy(),
        ToolResultCompactionStrategy(),
        SelectiveToolCallCompactionStrategy(),
        PipelineCompactionStrategy(),
        TokenBudgetComposedStrategy(100, tokenizer, []),
    ]
    assert all(isinstance(s, CompactionStrategy) for s in strategies)
    assert all(repr(s) for s in strategies)


async def test_apply_compaction_leaves_the_input_list_alone() -> None:
    messages = [user(str(i)) for i in range(6)]
    out = await apply_compaction(messages, strategy=TruncationStrategy(max_n=4, compact_to=2))
    assert texts(out) == ["4", "5"]
    assert len(messages) == 6


# -- truncation ---------------------------------------------------------------------------------


async def test_truncation_counts_messages_without_a_tokenizer() -> None:
    messages = [system(), *[user(str(i)) for i in range(5)]]
    out = await apply_compaction(messages, strategy=TruncationStrategy(max_n=5, compact_to=3))
    assert texts(out) == ["be brief", "3", "4"]


async def test_truncation_does_nothing_until_max_n_is_exceeded() -> None:
    messages = [user(str(i)) for i in range(5)]
    index = MessageIndex(messages)
    assert not await TruncationStrategy(max_n=5, compact_to=1).compact(index)
    assert index.included_message_count == 5


async def test_truncation_with_a_tokenizer_counts_tokens_and_keeps_tool_groups_whole() -> None:
    tokenizer = CharacterEstimatorTokenizer()
    messages = weather_history()
    index = MessageIndex(messages, tokenizer=tokenizer)
    total = index.included_token_count
    strategy = TruncationStrategy(max_n=total - 1, compact_to=total // 2, tokenizer=tokenizer)
    assert await strategy.compact(index)
    assert index.included_token_count <= total // 2
    for group in index.groups:
        if group.kind is K.TOOL_CALL:
            assert all(index.group_of(i).excluded == group.excluded for i in group.indices)
    assert index.groups[0].kind is K.SYSTEM
    assert not index.groups[0].excluded
    assert not index.groups[-1].excluded


async def test_truncation_uses_its_own_tokenizer_when_the_index_has_another() -> None:
    messages = [user("x" * 400) for _ in range(4)]
    index = MessageIndex(messages)  # 4 chars per token
    strategy = TruncationStrategy(
        max_n=500, compact_to=250, tokenizer=CharacterEstimatorTokenizer(chars_per_token=1)
    )
    assert await strategy.compact(index)
    assert index.included_message_count == 1  # each message is > 250 tokens at 1 char per token


async def test_truncation_minimum_preserved_is_a_floor() -> None:
    messages = [user(str(i)) for i in range(10)]
    out = await apply_compaction(messages, strategy=TruncationStrategy(9, 0, minimum_preserved=4))
    assert texts(out) == ["6", "7", "8", "9"]


async def test_truncation_with_a_custom_trigger_and_target() -> None:
    messages = [user(str(i)) for i in range(6)]
    strategy = TruncationStrategy(
        100, 50, trigger=CompactionTriggers.turns_exceed(3), target=CompactionTriggers.always
    )
    assert texts(await apply_compaction(messages, strategy=strategy)) == texts(messages)  # target holds
    strategy = TruncationStrategy(100, 50, trigger=CompactionTriggers.turns_exceed(3))
    assert texts(await apply_compaction(messages, strategy=strategy)) == texts(messages)  # compact_to holds


async def test_truncation_preserve_system_false_lets_old_system_messages_go() -> None:
    messages = [system("old rules"), user("a"), user("b"), user("c")]
    out = await apply_compaction(messages, strategy=TruncationStrategy(3, 2, preserve_system=False))
    assert texts(out) == ["b", "c"]


def test_truncation_rejects_compact_to_above_max_n() -> None:
    with pytest.raises(ValueError, match="compact_to"):
        TruncationStrategy(max_n=10, compact_to=11)
    with pytest.raises(ValueError, match="minimum_preserved"):
        TruncationStrategy(10, 5, minimum_preserved=-1)


# -- sliding windows ----------------------------------------------------------------------------


async def test_sliding_window_keeps_the_last_groups_and_every_system_message() -> None:
    messages = weather_history()
    out = await apply_compaction(messages, strategy=SlidingWindowStrategy(keep_last_groups=3))
    assert texts(out) == ["be brief", *texts(messages[5:])]


def test_sliding_window_needs_keep_last_groups_keyword() -> None:
    with pytest.raises(TypeError):
        SlidingWindowStrategy(20)  # type: ignore[misc]  # pyright: ignore[reportCallIssue]


async def test_turn_window_defaults_to_four_turns() -> None:
    messages = [system()]
    for i in range(6):
        messages += [user(f"q{i}"), assistant(f"a{i}")]
    out = await apply_compaction(messages, strategy=SlidingWindowCompactionStrategy())
    assert texts(out) == ["be brief", "q2", "a2", "q3", "a3", "q4", "a4", "q5", "a5"]


async def test_turn_window_removes_whole_turns_even_with_a_token_target() -> None:
    messages = [user("q0"), assistant("a" * 400), assistant("b"), user("q1"), assistant("a1")]
    strategy = SlidingWindowCompactionStrategy(
        trigger=CompactionTriggers.always, target=lambda index: index.included_message_count <= 4
    )
    assert texts(await apply_compaction(messages, strategy=strategy)) == ["q1", "a1"]
    strategy = SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(1))
    assert texts(await apply_compaction(messages, strategy=strategy)) == ["q1", "a1"]


# -- tool-call strategies -----------------------------------------------------------------------


async def test_tool_results_collapse_into_a_summary_in_place() -> None:
    messages = weather_history()
    out = await apply_compaction(messages, strategy=ToolResultCompactionStrategy())
    assert texts(out) == [
        "be brief",
        "weather?",
        "[Tool results: get_weather: sunny, 18°C]",
        "It is sunny.",
        "and tomorrow?",
        "assistant",
        "tool",
        "Rain.",
    ]
    summary = out[2]
    assert is_summary_message(summary)
    assert summarized_message_ids(summary) == [messages[2].message_id, messages[3].message_id]


async def test_tool_result_summary_lists_parallel_calls_and_errors() -> None:
    messages = [
        user("go"),
        call("a", "b", name="search_docs"),
        Message(
            "tool",
            [
                Content.from_function_result("a", result={"hits": 3}),
                Content.from_function_result("b", exception="TimeoutError: slow"),
            ],
        ),
        user("next"),
    ]
    out = await apply_compaction(
        messages, strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=0)
    )
    assert out[1].text == '[Tool results: search_docs: {"hits":3}; search_docs: error: TimeoutError: slow]'


async def test_tool_result_collapse_stops_at_the_target() -> None:
    messages: list[Message] = []
    for i in range(4):
        messages += [user(f"q{i}"), call(f"c{i}"), result(f"c{i}", value="x" * 400), assistant(f"a{i}")]
    index = MessageIndex(messages)
    budget = index.included_token_count - 50  # one collapse is enough
    strategy = ToolResultCompactionStrategy(trigger=CompactionTriggers.tokens_exceed(budget))
    assert await strategy.compact(index)
    assert sum(1 for g in index.groups if g.kind is K.SUMMARY) == 1
    assert index.included_tool_call_group_count == 3


async def test_selective_tool_call_keeps_only_the_newest_tool_group() -> None:
    messages = weather_history()
    out = await apply_compaction(messages, strategy=SelectiveToolCallCompactionStrategy())
    assert texts(out) == [
        "be brief",
        "weather?",
        "It is sunny.",
        "and tomorrow?",
        "assistant",
        "tool",
        "Rain.",
    ]
    out = await apply_compaction(
        messages, strategy=SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=2)
    )
    assert texts(out) == texts(messages)


async def test_tool_strategies_never_touch_the_newest_group() -> None:
    messages = [user("go"), call("c1")]  # the pending call is the newest group
    out = await apply_compaction(
        messages, strategy=SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=0)
    )
    assert len(out) == 2


# -- composition --------------------------------------------------------------------------------


async def test_pipeline_runs_children_in_order_each_with_its_own_trigger() -> None:
    messages = weather_history()
    pipeline = PipelineCompactionStrategy(
        ToolResultCompactionStrategy(),
        SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(1)),
        TruncationStrategy(1000, 500),  # never fires
    )
    out = await apply_compaction(messages, strategy=pipeline)
    assert texts(out) == ["be brief", "and tomorrow?", "assistant", "tool", "Rain."]
    assert not await PipelineCompactionStrategy(trigger=CompactionTriggers.never).compact(
        MessageIndex(messages)
    )


async def test_token_budget_stops_early_once_within_budget() -> None:
    tokenizer = CharacterEstimatorTokenizer()
    messages: list[Message] = []
    for i in range(3):
        messages += [user(f"q{i}"), call(f"c{i}"), result(f"c{i}", value="x" * 400), assistant(f"a{i}")]
    index = MessageIndex(messages, tokenizer=tokenizer)
    budget = index.included_token_count - 100
    window = SlidingWindowStrategy(keep_last_groups=1)
    strategy = TokenBudgetComposedStrategy(budget, tokenizer, [ToolResultCompactionStrategy(), window])
    assert await strategy.compact(index)
    assert index.included_token_count <= budget
    assert index.included_turn_count == 3  # the window never ran


async def test_token_budget_falls_back_to_dropping_oldest_groups() -> None:
    tokenizer = CharacterEstimatorTokenizer()
    messages = [system(), *[user("y" * 200) for _ in range(5)]]
    index = MessageIndex(messages, tokenizer=tokenizer)
    strategy = TokenBudgetComposedStrategy(120, tokenizer, [ToolResultCompactionStrategy()])
    assert await strategy.compact(index)
    assert index.included_token_count <= 120
    assert texts(project(index))[0] == "be brief"
    assert not await strategy.compact(index)


# -- properties ---------------------------------------------------------------------------------


# Up to 120 characters a message; some tool calls follow a reasoning message.
HISTORIES = histories(
    max_length=14, max_size=120, kinds=["system", "user", "assistant", "tool", "reasoning_tool"]
)


@st.composite
def strategies_st(draw: st.DrawFn) -> CompactionStrategy:
    tokenizer = CharacterEstimatorTokenizer()
    n = draw(st.integers(0, 400))
    m = draw(st.integers(0, 4))
    options: list[CompactionStrategy] = [
        TruncationStrategy(n, n // 2, tokenizer=tokenizer),
        TruncationStrategy(m * 2, m, minimum_preserved=m),
        SlidingWindowStrategy(keep_last_groups=m),
        SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(m)),
        ToolResultCompactionStrategy(keep_last_tool_call_groups=m % 2),
        SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=m % 2),
        PipelineCompactionStrategy(
            ToolResultCompactionStrategy(),
            SlidingWindowCompactionStrategy(CompactionTriggers.turns_exceed(m)),
        ),
        # strict_budget=False: the fallback keeps system messages (the strict default is checked
        # in test_annotations.py).
        TokenBudgetComposedStrategy(n, tokenizer, [ToolResultCompactionStrategy()], strict_budget=False),
    ]
    return draw(st.sampled_from(options))


def origin(index: MessageIndex) -> dict[int, int]:
    """Position of each message object in the original history (by identity)."""
    return {id(m): i for i, m in enumerate(index.messages)}


@settings(max_examples=100, deadline=None)
@given(HISTORIES, strategies_st())
async def test_no_split_tool_groups_no_lost_system_messages_order_kept(
    messages: list[Message], strategy: CompactionStrategy
) -> None:
    index = MessageIndex(messages)
    original = len(messages)
    await strategy.compact(index)
    out = project(index)
    where = origin(index)
    kept = [where[id(m)] for m in out if not is_summary_message(m)]
    assert kept == sorted(kept)  # original order
    kept_ids = {id(m) for m in out}  # identity: generated histories repeat equal messages
    assert all(id(m) in kept_ids for m in messages if m.role == "system")
    for group in index.groups[: len(index.groups)]:
        if group.indices[0] < original and group.kind is K.TOOL_CALL:
            inside = [i for i in group.indices if id(index.messages[i]) in kept_ids]
            assert inside in ([], list(group.indices))  # never split
    non_system = [g for g in index.groups if g.kind is not K.SYSTEM and g.first_index < original]
    if non_system:
        assert not non_system[-1].excluded  # the newest non-system group stays
    # A summary stands just before what follows the group it replaces.
    for position, message in enumerate(out):
        if is_summary_message(message):
            replaced = set(summarized_message_ids(message))
            first = min(i for i, m in enumerate(messages) if m.message_id in replaced)
            later = [where[id(m)] for m in out[position + 1 :] if not is_summary_message(m)]
            earlier = [where[id(m)] for m in out[:position] if not is_summary_message(m)]
            assert all(p > first for p in later)
            assert all(p < first for p in earlier)


@settings(max_examples=100, deadline=None)
@given(HISTORIES, strategies_st())
async def test_applying_twice_changes_nothing_the_second_time(
    messages: list[Message], strategy: CompactionStrategy
) -> None:
    index = MessageIndex(messages)
    await strategy.compact(index)
    first = project(index)
    assert not await strategy.compact(index)
    assert project(index) == first


def turns_of(messages: list[Message]) -> list[list[Message]]:
    """``messages`` cut before each user message: what an agent appends turn by turn."""
    turns: list[list[Message]] = [[]]
    for message in messages:
        if message.role == "user" and turns[-1]:
            turns.append([])
        turns[-1].append(message)
    return turns


@settings(max_examples=100, deadline=None)
@given(HISTORIES, strategies_st())
async def test_compacting_after_every_turn_keeps_the_invariants_and_exact_totals(
    messages: list[Message], strategy: CompactionStrategy
) -> None:
    index = MessageIndex()
    for turn in turns_of(messages):
        index.append(turn)
        await strategy.compact(index)
        out = project(index)
        assert out == reference_projection(index)  # original order, each summary at its anchor
        shown = {id(m) for m in out}
        where = origin(index)
        kept = [where[id(m)] for m in out if not index.is_inserted(where[id(m)])]
        assert kept == sorted(kept)
        originals = [p for p in range(index.message_count) if not index.is_inserted(p)]
        for position in originals:
            group = index.group_of(position)
            if group.kind is K.TOOL_CALL:  # never split
                assert len({id(index.messages[i]) in shown for i in group.indices}) == 1
            if index.messages[position].role == "system" and group.kind is K.SYSTEM:
                assert id(index.messages[position]) in shown
        non_system = [g for g in index.groups if g.kind is not K.SYSTEM]
        if non_system:
            assert not non_system[-1].excluded  # the newest non-system group stays
    assert_totals_match_a_recount(index)


def _stepwise(strategy: Any) -> CompactionStrategy:
    """``strategy`` with its target wrapped, so it is checked between steps (no batch path)."""
    target = strategy.target
    strategy.target = lambda index: target(index)
    return strategy


@settings(max_examples=100, deadline=None)
@given(HISTORIES, st.integers(0, 4), st.integers(0, 400))
async def test_batched_strategies_equal_their_step_by_step_runs(
    messages: list[Message], m: int, n: int
) -> None:
    def makers() -> list[CompactionStrategy]:
        return [
            SlidingWindowStrategy(keep_last_groups=m),
            SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(m)),
            ToolResultCompactionStrategy(keep_last_tool_call_groups=m % 2),
            SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=m % 2),
            TruncationStrategy(m * 2, m, minimum_preserved=m),
            TruncationStrategy(n, n // 2, tokenizer=CharacterEstimatorTokenizer()),
        ]

    for batched, stepwise in zip(makers(), map(_stepwise, makers()), strict=True):
        fast, slow = MessageIndex(messages), MessageIndex(messages)
        assert await batched.compact(fast) == await stepwise.compact(slow)
        assert texts(project(fast)) == texts(project(slow))
        assert [(g.kind, g.order, g.excluded) for g in fast.groups] == [
            (g.kind, g.order, g.excluded) for g in slow.groups
        ]


def test_tool_result_previews_collapse_whitespace_of_long_results() -> None:
    spaced = "a" + " " * 1000 + "b" * 200
    pretty = {"items": [{"name": f"n{i}", "value": i} for i in range(40)]}
    text = tool_group_summary_text(
        [call("x", "y"), result("x", value=spaced), result("y", value="  short \n text  ")]
    )
    assert text == f"[Tool results: get_weather: a {'b' * 77}…; get_weather: short text]"
    text = tool_group_summary_text([call("z"), result("z", value=pretty)])
    assert text.startswith('[Tool results: get_weather: {"items":[{"name":"n0","value":0},')
    assert len(text) == len("[Tool results: get_weather: ]") + 80


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab é✓ \t\n\u00a0\u2003xyz")), max_size=300),
    st.integers(min_value=2, max_value=120),
)
def test_one_line_is_the_collapsed_text_cut_to_the_limit(text: str, limit: int) -> None:
    collapsed = " ".join(text.split())
    expected = collapsed if len(collapsed) <= limit else collapsed[: limit - 1] + "…"
    assert one_line(text, limit) == expected


def test_a_call_and_its_result_read_as_in_any_other_group() -> None:
    # One call and its result (the common group) against the same contents with a text part in
    # front of the call, which goes through the general form.
    def with_text(message: Message) -> Message:
        return Message("assistant", [Content.from_text(""), *message.contents])

    failed = Message("tool", [Content.from_function_result("c1", exception="TimeoutError: slow")])
    for group in ([call("c1"), result("c1")], [call("c1"), failed], [call("c1"), result("other")]):
        general = tool_group_summary_text([with_text(group[0]), group[1]])
        assert tool_group_summary_text(group) == general
    expected = "[Tool results: get_weather: error: TimeoutError: slow]"
    assert tool_group_summary_text([call("c1"), failed]) == expected
    assert tool_group_summary_text([call("c1"), result("other")]) == "[Tool results: other: sunny, 18°C]"
