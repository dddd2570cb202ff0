"""ContextWindowCompactionStrategy: budget arithmetic, the two phases, cost per turn, properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Message
from agentkeep.compaction import (
    CharacterEstimatorTokenizer,
    CompactionStrategy,
    ContextWindowCompactionStrategy,
    MessageGroupKind,
    MessageIndex,
    Tokenizer,
    apply_compaction,
    count_message_tokens,
    is_summary_message,
    project,
    tool_group_summary_text,
)
from tests.compaction.messages import assistant, call, histories, result, system, texts, user

K = MessageGroupKind


# These tests were written against the text measure (what the model reads, plus a per-message
# overhead); the reference's payload measure is checked in test_tokenizers.py.
TEXT = CharacterEstimatorTokenizer(measure="text")


def tool_turn(i: int, size: int) -> list[Message]:
    """A user question, a tool call with a ``size``-character result, and the answer."""
    return [user(f"q{i}"), call(f"c{i}"), result(f"c{i}", value="r" * size), assistant(f"a{i}")]


class CountingTokenizer(CharacterEstimatorTokenizer):
    """The default estimate, counting how many messages it was asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count_message_tokens(self, message: Message) -> int:
        self.calls += 1
        return super().count_message_tokens(message)


def measured(index: MessageIndex, tokenizer: Tokenizer) -> int:
    return sum(count_message_tokens(m, tokenizer=tokenizer) for m in project(index))


# -- arguments ----------------------------------------------------------------------------------


def test_budget_and_limits_follow_the_seed_example() -> None:
    strategy = ContextWindowCompactionStrategy(max_context_window_tokens=128_000, max_output_tokens=16_384)
    assert strategy.input_budget == 111_616
    assert (strategy.tool_eviction_threshold, strategy.truncation_threshold) == (0.5, 0.8)
    assert strategy.tool_eviction_limit == 55_808
    assert strategy.truncation_limit == 89_292
    assert strategy.tokenizer is None
    assert strategy.keep_last_tool_call_groups == 4  # the reference's default
    assert isinstance(strategy, CompactionStrategy)
    assert repr(strategy).startswith("ContextWindowCompactionStrategy(max_context_window_tokens=128000, ")


@pytest.mark.parametrize(
    ("window", "output", "message"),
    [
        (1000, 1000, "max_output_tokens must be >= 0 and < max_context_window_tokens"),
        (1000, 2000, "max_output_tokens must be >= 0 and < max_context_window_tokens"),
        (-10, -20, "max_context_window_tokens must be positive"),
        (1000, -1, "max_output_tokens must be >= 0"),
        (0, 0, "max_context_window_tokens must be positive"),
    ],
)
def test_token_limits_are_validated(window: int, output: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ContextWindowCompactionStrategy(window, output)


def test_thresholds_and_floors_are_validated() -> None:
    with pytest.raises(ValueError, match=r"tool_eviction_threshold must be in \(0, 1\]"):
        ContextWindowCompactionStrategy(1000, 100, tool_eviction_threshold=0)
    with pytest.raises(ValueError, match=r"truncation_threshold must be in \(0, 1\]"):
        ContextWindowCompactionStrategy(1000, 100, truncation_threshold=1.5)
    with pytest.raises(ValueError, match="truncation_threshold must be >= tool_eviction_threshold"):
        ContextWindowCompactionStrategy(1000, 100, tool_eviction_threshold=0.9, truncation_threshold=0.5)
    with pytest.raises(ValueError, match="minimum_preserved must be greater than or equal to 0"):
        ContextWindowCompactionStrategy(1000, 100, minimum_preserved=-1)
    with pytest.raises(ValueError, match="keep_last_tool_call_groups must be greater than or equal to 0"):
        ContextWindowCompactionStrategy(1000, 100, keep_last_tool_call_groups=-1)
    assert ContextWindowCompactionStrategy(1000, 0).input_budget == 1000


def test_the_arguments_after_the_two_limits_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        ContextWindowCompactionStrategy(1000, 100, 0.5)  # type: ignore[misc]


# -- the phases ---------------------------------------------------------------------------------


async def test_nothing_changes_within_the_tool_eviction_limit() -> None:
    messages = [system(), *tool_turn(0, 400), *tool_turn(1, 400)]
    index = MessageIndex(messages, tokenizer=TEXT)
    strategy = ContextWindowCompactionStrategy(2 * index.included_token_count + 100, 100)
    assert not await strategy.compact(index)
    assert project(index) == messages


async def test_old_tool_results_are_collapsed_first_and_nothing_is_dropped() -> None:
    messages = [system(), *tool_turn(0, 2000), *tool_turn(1, 2000), *tool_turn(2, 2000)]
    index = MessageIndex(messages, tokenizer=TEXT)
    total = index.included_token_count  # about 1580
    # Budget 2000: tools collapse above 1000, truncation only above 1600.
    strategy = ContextWindowCompactionStrategy(2100, 100, keep_last_tool_call_groups=1)
    assert total < strategy.truncation_limit
    assert await strategy.compact(index)
    assert texts(project(index)) == [
        "be brief",
        "q0",
        f"[Tool results: get_weather: {'r' * 79}…]",
        "a0",
        "q1",
        f"[Tool results: get_weather: {'r' * 79}…]",
        "a1",
        "q2",
        "assistant",  # the newest tool-call group stays as it was
        "tool",
        "a2",
    ]
    assert index.included_token_count <= strategy.tool_eviction_limit


async def test_collapsing_stops_as_soon_as_history_is_under_the_tool_eviction_limit() -> None:
    messages = [system(), *[m for i in range(4) for m in tool_turn(i, 2000)]]
    index = MessageIndex(messages, tokenizer=TEXT)
    one_group = index.groups[2].token_count
    # Just over the eviction limit: one collapse is enough.
    strategy = ContextWindowCompactionStrategy(
        2 * (index.included_token_count - one_group // 2),
        0,
        truncation_threshold=1.0,
        keep_last_tool_call_groups=1,
    )
    assert await strategy.compact(index)
    assert sum(1 for m in project(index) if is_summary_message(m)) == 1
    assert index.included_tool_call_group_count == 3


async def test_the_collapsed_summaries_count_towards_the_limit() -> None:
    messages = [system(), *[m for i in range(4) for m in tool_turn(i, 2000)]]
    index = MessageIndex(messages, tokenizer=TEXT)
    oldest = index.groups[2]
    collapsed = Message("assistant", tool_group_summary_text(oldest.messages))
    after_one = (
        index.included_token_count
        - oldest.token_count
        + count_message_tokens(collapsed, tokenizer=index.tokenizer)
    )
    # One token short after the first collapse: a second collapse is needed, and no truncation.
    strategy = ContextWindowCompactionStrategy(
        after_one - 1, 0, tool_eviction_threshold=1.0, truncation_threshold=1.0, keep_last_tool_call_groups=1
    )
    assert await strategy.compact(index)
    out = project(index)
    assert sum(1 for m in out if is_summary_message(m)) == 2
    assert texts(out)[:2] == ["be brief", "q0"]


async def test_oldest_groups_are_dropped_when_collapsing_is_not_enough() -> None:
    messages = [
        system("rules " * 50),
        *[m for i in range(10) for m in (user("u" * 400), assistant("a" * 400))],
    ]
    index = MessageIndex(messages, tokenizer=TEXT)
    strategy = ContextWindowCompactionStrategy(1000, 200)  # budget 800, truncation above 640
    assert await strategy.compact(index)
    out = project(index)
    assert out[0] is messages[0]  # system kept
    assert out[1:] == messages[-len(out) + 1 :]  # the newest groups, in order
    assert index.included_token_count <= strategy.truncation_limit
    assert index.included_token_count + 104 > strategy.truncation_limit  # one group fewer was too few


async def test_both_phases_together_keep_the_newest_tool_group() -> None:
    messages = [system(), *[m for i in range(6) for m in tool_turn(i, 3000)]]
    strategy = ContextWindowCompactionStrategy(1200, 200)  # budget 1000
    out = await apply_compaction(messages, strategy=strategy, tokenizer=TEXT)
    assert out[0].role == "system"
    assert out[-4:] == messages[-4:]  # the last turn, its tool group intact
    tokens = sum(count_message_tokens(m, tokenizer=TEXT) for m in out)
    assert tokens <= strategy.truncation_limit


async def test_only_protected_groups_left_may_stay_over_the_budget() -> None:
    messages = [system("s" * 8000), user("u" * 8000)]
    index = MessageIndex(messages, tokenizer=TEXT)
    strategy = ContextWindowCompactionStrategy(1000, 100)
    assert not await strategy.compact(index)
    assert project(index) == messages


async def test_a_pending_tool_call_in_the_loop_is_never_touched() -> None:
    # Compaction runs before each model call of a tool loop: the newest call may await results.
    messages = [system(), *tool_turn(0, 3000), user("again"), call("c9")]
    index = MessageIndex(messages, tokenizer=TEXT)
    strategy = ContextWindowCompactionStrategy(900, 100, keep_last_tool_call_groups=0)
    assert await strategy.compact(index)
    assert project(index)[-2:] == messages[-2:]
    index.append([result("c9", value="done")])
    out = project(index)
    assert out[-1].function_results[0].result == "done"


async def test_its_own_tokenizer_measures_the_budget() -> None:
    messages = [system(), *[m for i in range(6) for m in (user("u" * 200), assistant("a" * 200))]]
    # 12 messages of ~54 estimated tokens: ~650, under 800; one token per character: ~2400.
    strict = CharacterEstimatorTokenizer(chars_per_token=1, measure="text")
    default = ContextWindowCompactionStrategy(1100, 100)
    index = MessageIndex(messages, tokenizer=TEXT)
    assert not await default.compact(index)
    strategy = ContextWindowCompactionStrategy(1100, 100, tokenizer=strict)
    index = MessageIndex(messages, tokenizer=TEXT)
    assert await strategy.compact(index)
    assert measured(index, strict) <= strategy.truncation_limit
    assert not await strategy.compact(index)


async def test_its_tokenizer_also_measures_tool_collapsing() -> None:
    strict = CharacterEstimatorTokenizer(chars_per_token=1, measure="text")
    messages = [system(), *tool_turn(0, 500), *tool_turn(1, 500), *tool_turn(2, 500)]
    strategy = ContextWindowCompactionStrategy(
        2100, 100, tokenizer=strict, keep_last_tool_call_groups=1
    )  # collapse above 1000
    index = MessageIndex(messages, tokenizer=TEXT)
    assert await strategy.compact(index)
    assert index.included_tool_call_group_count == 1
    assert sum(1 for m in project(index) if is_summary_message(m)) == 2
    assert measured(index, strict) <= strategy.tool_eviction_limit


# -- cost: compacting after a turn counts only what the turn added ------------------------------


async def test_compacting_each_turn_recounts_nothing_already_counted() -> None:
    tokenizer = CountingTokenizer()
    index = MessageIndex([system()], tokenizer=tokenizer)
    strategy = ContextWindowCompactionStrategy(4000, 1000)
    for i in range(200):
        turn = tool_turn(i, 800)
        before = tokenizer.calls
        index.append(turn)
        summaries = sum(1 for g in index.groups if g.kind is K.SUMMARY)
        await strategy.compact(index)
        made = sum(1 for g in index.groups if g.kind is K.SUMMARY) - summaries
        # The turn's messages and the collapsed summaries made now; never the history again.
        assert tokenizer.calls - before == len(turn) + made
        assert index.included_token_count <= strategy.truncation_limit


@pytest.mark.parametrize(
    "tokenizer",
    [None, "the index's", CharacterEstimatorTokenizer()],
    ids=["none", "same-object", "equal-estimator"],
)
async def test_the_index_totals_are_used_with_the_index_tokenizer(
    tokenizer: Tokenizer | str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_full_scan(self: MessageIndex) -> list[Message]:
        raise AssertionError("included_messages() walks the whole history")

    index = MessageIndex([system(), *[m for i in range(30) for m in tool_turn(i, 500)]], tokenizer=TEXT)
    chosen = index.tokenizer if isinstance(tokenizer, str) else tokenizer
    monkeypatch.setattr(MessageIndex, "included_messages", no_full_scan)
    assert await ContextWindowCompactionStrategy(2000, 500, tokenizer=chosen).compact(index)
    assert index.included_token_count <= 1200


async def test_a_differently_counting_tokenizer_recounts() -> None:
    index = MessageIndex([system(), *[m for i in range(30) for m in tool_turn(i, 500)]], tokenizer=TEXT)
    strict = CharacterEstimatorTokenizer(chars_per_token=2)
    assert await ContextWindowCompactionStrategy(2000, 500, tokenizer=strict).compact(index)
    assert measured(index, strict) <= 1200
    assert index.included_token_count < 1200 // 2 + 100  # the index's own estimate is about half


# -- properties ---------------------------------------------------------------------------------


# Up to 600 characters a message, tool turns drawn twice as often, system prompts an eighth the size.
HISTORIES = histories(
    max_length=18,
    max_size=600,
    kinds=["system", "user", "assistant", "tool", "tool"],
    system_size=lambda size: size // 8 + 1,
)


@st.composite
def windows(draw: st.DrawFn) -> ContextWindowCompactionStrategy:
    window = draw(st.integers(50, 3000))
    output = draw(st.integers(0, window - 1))
    eviction = draw(st.sampled_from([0.3, 0.5, 1.0]))
    return ContextWindowCompactionStrategy(
        window,
        output,
        tool_eviction_threshold=eviction,
        truncation_threshold=draw(st.sampled_from([x for x in (0.5, 0.8, 1.0) if x >= eviction])),
        keep_last_tool_call_groups=draw(st.integers(0, 2)),
        minimum_preserved=draw(st.integers(0, 3)),
        tokenizer=draw(st.sampled_from([None, CharacterEstimatorTokenizer(chars_per_token=2)])),
    )


@settings(max_examples=200, deadline=None)
@given(HISTORIES, windows())
async def test_within_budget_unless_only_protected_groups_remain(
    messages: list[Message], strategy: ContextWindowCompactionStrategy
) -> None:
    index = MessageIndex(messages, tokenizer=TEXT)
    tool_groups = [list(g.indices) for g in index.groups if g.kind is K.TOOL_CALL]
    await strategy.compact(index)
    out = project(index)
    tokenizer = strategy.tokenizer or index.tokenizer

    left = [g for g in index.groups if not g.excluded and g.kind is not K.SYSTEM]
    assert measured(index, tokenizer) <= strategy.truncation_limit or len(left) <= max(
        1, strategy.minimum_preserved
    )
    out_ids = {id(m) for m in out}
    assert all(id(m) in out_ids for m in messages if m.role == "system")
    for indices in tool_groups:  # a call and its results stay together (or are collapsed together)
        assert len({id(messages[i]) in out_ids for i in indices}) == 1
    where = {id(m): i for i, m in enumerate(messages)}
    kept = [where[id(m)] for m in out if id(m) in where]
    assert kept == sorted(kept)
    non_system = [m for m in messages if m.role != "system"]
    if non_system:
        assert id(non_system[-1]) in out_ids  # the newest message is always kept


@settings(max_examples=100, deadline=None)
@given(HISTORIES, windows())
async def test_compacting_again_changes_nothing(
    messages: list[Message], strategy: ContextWindowCompactionStrategy
) -> None:
    index = MessageIndex(messages, tokenizer=TEXT)
    await strategy.compact(index)
    first = project(index)
    assert not await strategy.compact(index)
    assert project(index) == first
