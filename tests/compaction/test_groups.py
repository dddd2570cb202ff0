"""Message groups and the incremental MessageIndex: examples, then properties over generated histories."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Message
from agentkeep.compaction import (
    SUMMARY_PROPERTY,
    CharacterEstimatorTokenizer,
    MessageGroupKind,
    MessageIndex,
    count_message_tokens,
    is_summary_message,
    summarized_message_ids,
)
from tests.compaction.messages import assistant, call, reasoning, result, summary, system, user

K = MessageGroupKind


def shape(index: MessageIndex) -> list[tuple[str, list[int], int | None]]:
    return [(g.kind.value, list(g.indices), g.turn) for g in index.groups]


# -- examples ---------------------------------------------------------------------------------


def test_groups_follow_the_seed_kinds() -> None:
    index = MessageIndex(
        [
            system(),
            user("weather?"),
            call("c1"),
            result("c1"),
            assistant("sunny"),
            user("thanks"),
            assistant(),
        ]
    )
    assert shape(index) == [
        ("system", [0], None),
        ("user", [1], 0),
        ("tool_call", [2, 3], 0),
        ("assistant_text", [4], 0),
        ("user", [5], 1),
        ("assistant_text", [6], 1),
    ]
    assert index.turn_count == index.included_turn_count == 2
    assert index.group_count == 6
    assert index.message_count == 7
    assert index.included_tool_call_group_count == 1
    assert all(g.is_complete for g in index.groups)


def test_parallel_calls_and_scattered_results_form_one_group() -> None:
    messages = [user(), call("a", "b", "c"), result("b"), assistant("interim"), result("a", "c")]
    index = MessageIndex(messages)
    assert shape(index) == [("user", [0], 0), ("tool_call", [1, 2, 4], 0), ("assistant_text", [3], 0)]
    tool = index.groups[1]
    assert tool.message_count == 3
    assert list(tool.call_ids) == ["a", "b", "c"]
    assert tool.messages == [messages[1], messages[2], messages[4]]


def test_reasoning_directly_before_a_call_joins_the_tool_group() -> None:
    index = MessageIndex(
        [user(), reasoning(), reasoning(), call("c1"), result("c1"), reasoning(), assistant()]
    )
    assert shape(index) == [
        ("user", [0], 0),
        ("tool_call", [1, 2, 3, 4], 0),
        ("assistant_text", [5], 0),
        ("assistant_text", [6], 0),
    ]


def test_reasoning_not_directly_before_a_call_stays_apart() -> None:
    index = MessageIndex([user(), reasoning(), assistant("x"), call("c1"), result("c1")])
    assert [g.kind for g in index.groups] == [K.USER, K.ASSISTANT_TEXT, K.ASSISTANT_TEXT, K.TOOL_CALL]


def test_a_result_for_two_groups_merges_them() -> None:
    index = MessageIndex([user(), call("a"), assistant("mid"), call("b"), result("a", "b")])
    assert shape(index) == [("user", [0], 0), ("tool_call", [1, 3, 4], 0), ("assistant_text", [2], 0)]
    assert index.included_tool_call_group_count == 1
    assert index.included_group_count == index.group_count == 3


def test_results_without_a_call_and_bare_tool_messages_are_tool_groups() -> None:
    index = MessageIndex([user(), result("unknown"), Message("tool", "log line")])
    assert [g.kind for g in index.groups] == [K.USER, K.TOOL_CALL, K.TOOL_CALL]


def test_system_messages_are_always_their_own_groups() -> None:
    index = MessageIndex([system("a"), system("b"), user(), call("c1"), system("mid"), result("c1")])
    assert shape(index) == [
        ("system", [0], None),
        ("system", [1], None),
        ("user", [2], 0),
        ("tool_call", [3, 5], 0),
        ("system", [4], 0),
    ]


def test_summaries_are_recognised_by_their_mark_whatever_the_role() -> None:
    marked_user = Message("user", "summary", additional_properties={SUMMARY_PROPERTY: ["x"]})
    index = MessageIndex([summary(replaces=["id1", "id2"]), marked_user, user(), assistant()])
    assert [g.kind for g in index.groups] == [K.SUMMARY, K.SUMMARY, K.USER, K.ASSISTANT_TEXT]
    assert index.turn_count == 1  # a summary never starts a turn
    assert summarized_message_ids(index.messages[0]) == ["id1", "id2"]
    assert summarized_message_ids(user()) == []
    assert not is_summary_message(Message("user", "x", additional_properties={SUMMARY_PROPERTY: "no"}))


def test_counts_use_the_tokenizer_plus_overhead_and_utf8_bytes() -> None:
    index = MessageIndex([user("héllo"), assistant("abcdefgh")], tokenizer=CharacterEstimatorTokenizer())
    assert [g.token_count for g in index.groups] == [2 + 4, 2 + 4]
    assert [g.byte_count for g in index.groups] == [6, 8]
    assert index.token_count == index.included_token_count == 12
    assert index.byte_count == 14
    assert index.message_token_count(1) == 6


def test_pending_tool_group_is_completed_by_a_later_append() -> None:
    index = MessageIndex([user(), reasoning()])
    assert index.groups[1].kind is K.ASSISTANT_TEXT
    index.append([call("c1", "c2"), result("c1")])
    tool = index.groups[1]
    assert (tool.kind, list(tool.indices), tool.is_complete) == (K.TOOL_CALL, [1, 2, 3], False)
    index.append([user("next"), result("c2")])
    assert shape(index) == [("user", [0], 0), ("tool_call", [1, 2, 3, 5], 0), ("user", [4], 1)]
    assert index.groups[1].is_complete


def test_append_counts_only_new_messages() -> None:
    class Counting:
        def __init__(self) -> None:
            self.texts: list[str] = []

        def count_tokens(self, text: str) -> int:
            self.texts.append(text)
            return 1

    tokenizer = Counting()
    index = MessageIndex([user("one"), assistant("two")], tokenizer=tokenizer)
    index.append([user("three")])
    assert tokenizer.texts == ["one", "two", "three"]
    assert index.included_token_count == 3 * 5


def test_exclude_and_include_keep_included_counts() -> None:
    index = MessageIndex([system(), user(), call("c1"), result("c1"), user(), assistant()])
    sys_group, first_user, tool, second_user, reply = index.groups
    index.exclude(tool)
    index.exclude(tool)  # idempotent
    assert tool.excluded
    assert index.included_tool_call_group_count == 0
    assert index.included_message_count == 4
    assert index.included_group_count == 4
    assert index.included_messages() == [index.messages[i] for i in (0, 1, 4, 5)]
    index.exclude(first_user)
    assert index.included_turn_count == 1  # turn 0 has nothing left but (turnless) system
    index.exclude(sys_group)
    assert index.included_turn_count == 1
    index.include(tool)
    assert index.included_turn_count == 2
    assert index.included_tool_call_group_count == 1
    for group in (sys_group, first_user, tool, second_user, reply):
        index.include(group)
    assert index.included_messages() == list(index.messages)
    assert index.included_token_count == index.token_count


def test_groups_of_another_index_are_refused() -> None:
    index = MessageIndex([user()])
    other = MessageIndex([user()])
    with pytest.raises(ValueError, match="not a group of this index"):
        index.exclude(other.groups[0])
    merged_away = MessageIndex([call("a"), call("b")])
    doomed = merged_away.groups[1]
    merged_away.append([result("a", "b")])
    with pytest.raises(ValueError, match="not a group of this index"):
        merged_away.include(doomed)


def test_repr_is_informative() -> None:
    index = MessageIndex([user("hi")])
    index.exclude(index.groups[0])
    assert repr(index.groups[0]) == "MessageGroup(user, indices=[0], turn=0, tokens=5, excluded)"
    assert repr(index) == "MessageIndex(messages=1, groups=1, turns=1, included_tokens=0)"


# -- properties over generated histories ------------------------------------------------------


@dataclass
class History:
    messages: list[Message]
    calls: dict[str, int]  # call id -> position of the calling message
    results: dict[str, list[int]]  # call id -> positions of the messages answering it


_words = st.text(alphabet="abcdé xyz", min_size=0, max_size=12)


@st.composite
def histories(draw: st.DrawFn) -> History:
    messages: list[Message] = []
    calls: dict[str, int] = {}
    results: dict[str, list[int]] = {}
    pending: list[str] = []
    ids = itertools.count()
    for _ in range(draw(st.integers(0, 25))):
        action = draw(
            st.sampled_from(
                ["user", "assistant", "reasoning", "system", "summary", "call", "result", "result"]
            )
        )
        if action == "call":
            new = [f"c{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            calls.update((c, len(messages)) for c in new)
            messages.append(call(*new))
            if draw(st.booleans()):  # answered at once, one message per result
                for c in new:
                    results[c] = [len(messages)]
                    messages.append(result(c, value=draw(_words)))
            else:
                pending.extend(new)
        elif action == "result":
            if pending:
                chosen = draw(st.lists(st.sampled_from(pending), min_size=1, max_size=3, unique=True))
                for c in chosen:
                    pending.remove(c)
                    results[c] = [len(messages)]
                messages.append(result(*chosen))
        elif action == "user":
            messages.append(user(draw(_words)))
        elif action == "assistant":
            messages.append(assistant(draw(_words)))
        elif action == "reasoning":
            messages.append(reasoning(draw(_words)))
        elif action == "system":
            messages.append(system(draw(_words)))
        else:
            messages.append(summary(draw(_words)))
    if draw(st.booleans()) and pending:  # otherwise leave some calls unanswered, as mid-loop
        results.update((c, [len(messages)]) for c in pending)
        messages.append(result(*pending))
    return History(messages, calls, results)


def signature(index: MessageIndex) -> tuple[Any, ...]:
    groups = [
        (g.kind, tuple(g.indices), g.token_count, g.byte_count, g.turn, g.excluded, g.is_complete)
        for g in index.groups
    ]
    counts = (
        index.message_count,
        index.group_count,
        index.turn_count,
        index.token_count,
        index.byte_count,
        index.included_message_count,
        index.included_group_count,
        index.included_turn_count,
        index.included_token_count,
        index.included_byte_count,
        index.included_tool_call_group_count,
    )
    return (groups, counts)


def assert_aggregates_match_a_recount(index: MessageIndex) -> None:
    included = [g for g in index.groups if not g.excluded]
    tokenizer = index.tokenizer
    assert index.included_group_count == len(included)
    assert index.included_message_count == sum(g.message_count for g in included)
    assert index.included_token_count == sum(
        count_message_tokens(m, tokenizer=tokenizer) for g in included for m in g.messages
    )
    assert index.included_byte_count == sum(g.byte_count for g in included)
    assert index.included_tool_call_group_count == sum(g.kind is K.TOOL_CALL for g in included)
    live_turns = {g.turn for g in included if g.turn is not None and g.kind is not K.SYSTEM}
    assert index.included_turn_count == len(live_turns)
    excluded_positions = {i for g in index.groups if g.excluded for i in g.indices}
    assert index.included_messages() == [
        m for i, m in enumerate(index.messages) if i not in excluded_positions
    ]


@settings(max_examples=150, deadline=None)
@given(histories())
def test_every_message_is_in_exactly_one_group_in_order(history: History) -> None:
    index = MessageIndex(history.messages)
    positions = [i for g in index.groups for i in g.indices]
    assert sorted(positions) == list(range(len(history.messages)))
    firsts = [g.first_index for g in index.groups]
    assert firsts == sorted(firsts)
    for group in index.groups:
        assert list(group.indices) == sorted(group.indices)
        assert all(index.group_of(i) is group for i in group.indices)
        if group.kind in (K.SYSTEM, K.USER, K.SUMMARY):
            assert group.message_count == 1
    assert index.turn_count == sum(m.role == "user" and not is_summary_message(m) for m in history.messages)
    assert_aggregates_match_a_recount(index)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_a_tool_call_and_its_results_share_one_group(history: History) -> None:
    index = MessageIndex(history.messages)
    for call_id, at in history.calls.items():
        group = index.group_of(at)
        assert group.kind is K.TOOL_CALL
        for answered_at in history.results.get(call_id, []):
            assert index.group_of(answered_at) is group
        assert group.is_complete == all(c in history.results for c in group.call_ids)
    for i, message in enumerate(history.messages[:-1]):
        reasoning_only = bool(message.contents) and all(c.type == "text_reasoning" for c in message.contents)
        if reasoning_only and history.messages[i + 1].function_calls:
            assert index.group_of(i) is index.group_of(i + 1)


@settings(max_examples=150, deadline=None)
@given(histories(), st.lists(st.integers(0, 30), max_size=4))
def test_incremental_appends_equal_building_at_once(history: History, cuts: list[int]) -> None:
    whole = MessageIndex(history.messages)
    pieces = MessageIndex()
    start = 0
    for cut in sorted({min(c, len(history.messages)) for c in cuts}):
        pieces.append(history.messages[start:cut])
        start = cut
    pieces.append(history.messages[start:])
    assert signature(pieces) == signature(whole)


@settings(max_examples=150, deadline=None)
@given(histories(), st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=12))
def test_excluding_and_including_keeps_aggregates_equal_to_a_recount(
    history: History, steps: list[tuple[bool, int]]
) -> None:
    index = MessageIndex(history.messages)
    if not index.groups:
        return
    for exclude, pick in steps:
        group = index.groups[pick % len(index.groups)]
        if exclude:
            index.exclude(group)
        else:
            index.include(group)
        assert_aggregates_match_a_recount(index)


@settings(max_examples=100, deadline=None)
@given(histories(), st.integers(0, 30), st.lists(st.integers(0, 40), max_size=6))
def test_appends_after_exclusions_keep_aggregates_right(history: History, cut: int, picks: list[int]) -> None:
    index = MessageIndex(history.messages[:cut])
    for pick in picks:
        if index.groups:
            index.exclude(index.groups[pick % len(index.groups)])
    index.append(history.messages[cut:])
    assert_aggregates_match_a_recount(index)
