"""Message groups and the incremental MessageIndex: examples, then properties over generated histories."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Message
from agentkeep.compaction import (
    SUMMARY_PROPERTY,
    CharacterEstimatorTokenizer,
    MessageGroupKind,
    MessageIndex,
    is_summary_message,
    summarized_message_ids,
)
from agentkeep.compaction.tokenizers import reference_payload
from agentkeep.errors import MessageFormatError
from agentkeep.messages import new_message_id
from tests.compaction.messages import (
    assert_included_counts_match_a_recount,
    assert_totals_match_a_recount,
    assistant,
    call,
    reasoning,
    reference_projection,
    result,
    summary,
    system,
    texts,
    user,
)

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
    # Consecutive tool messages share a group (adjacency, as in the reference).
    assert shape(index) == [("user", [0], 0), ("tool_call", [1, 2], 0)]
    index = MessageIndex([user(), result("unknown"), assistant(), Message("tool", "log line")])
    assert [g.kind for g in index.groups] == [K.USER, K.TOOL_CALL, K.ASSISTANT_TEXT, K.TOOL_CALL]


def test_tool_messages_right_after_a_call_join_it_whatever_they_answer() -> None:
    index = MessageIndex(
        [user(), call("c1"), result("other"), Message("tool", "log"), assistant(), result("c1")]
    )
    assert shape(index) == [("user", [0], 0), ("tool_call", [1, 2, 3, 5], 0), ("assistant_text", [4], 0)]


def test_reasoning_right_after_a_call_joins_it() -> None:
    index = MessageIndex([user(), call("c1"), reasoning(), result("c1"), reasoning(), assistant()])
    # Reasoning between the call and its results joins; after the results it does not.
    assert shape(index) == [
        ("user", [0], 0),
        ("tool_call", [1, 2, 3], 0),
        ("assistant_text", [4], 0),
        ("assistant_text", [5], 0),
    ]


def test_an_ambiguous_result_pairs_with_no_declaration() -> None:
    # Two pending declarations of one id: a result that follows neither pairs with none.
    index = MessageIndex([call("dup"), assistant("a"), call("dup"), assistant("b"), result("dup")])
    assert [g.first_index for g in index.groups] == [0, 1, 2, 3, 4]
    # Right after one of them it joins that one by adjacency.
    index = MessageIndex([call("dup"), assistant("a"), call("dup"), result("dup")])
    assert shape(index) == [
        ("tool_call", [0], None),
        ("assistant_text", [1], None),
        ("tool_call", [2, 3], None),
    ]


def test_an_answered_call_id_can_be_used_again() -> None:
    index = MessageIndex([call("r"), result("r"), call("r"), assistant("between"), result("r")])
    assert shape(index) == [
        ("tool_call", [0, 1], None),
        ("tool_call", [2, 4], None),
        ("assistant_text", [3], None),
    ]


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


def test_counts_are_the_references_by_default() -> None:
    messages = [user("héllo"), assistant("abcdefgh")]
    index = MessageIndex(messages)
    assert [g.token_count for g in index.groups] == [len(reference_payload(m)) // 4 for m in messages]
    assert [g.byte_count for g in index.groups] == [6, 8]  # bytes: of the text the model reads


def test_counts_use_the_tokenizer_plus_overhead_and_utf8_bytes() -> None:
    text_measure = CharacterEstimatorTokenizer(measure="text")
    index = MessageIndex([user("héllo"), assistant("abcdefgh")], tokenizer=text_measure)
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
    # A tokenizer that does not count messages itself gets each message's reference payload.
    assert tokenizer.texts == [reference_payload(m) for m in index.messages]
    assert index.included_token_count == 3


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
    index = MessageIndex([user("hi")], tokenizer=CharacterEstimatorTokenizer(measure="text"))
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
    assert_included_counts_match_a_recount(index)
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
    after_call = False  # the message before is a call, or reasoning right after one
    for i, message in enumerate(history.messages[:-1]):
        reasoning_only = bool(message.contents) and all(c.type == "text_reasoning" for c in message.contents)
        if reasoning_only and after_call:
            assert index.group_of(i) is index.group_of(i - 1)  # it joins the call before it
        elif reasoning_only and history.messages[i + 1].function_calls:
            assert index.group_of(i) is index.group_of(i + 1)
        after_call = bool(message.function_calls) or (reasoning_only and after_call)


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


# -- replace: summaries in place ----------------------------------------------------------------


def test_replace_puts_the_summary_in_the_slot_of_the_oldest_group() -> None:
    messages = [user("q"), call("a"), result("a"), assistant("mid"), call("b"), result("b"), user("next")]
    index = MessageIndex(messages)
    first_tool, mid, second_tool = index.groups[1], index.groups[2], index.groups[3]
    made = index.replace([second_tool, first_tool], Message("assistant", "both calls"))  # any order
    assert made.kind is K.SUMMARY
    assert (made.order, made.turn, list(made.indices)) == (1, 0, [7])
    assert list(index.groups) == [index.groups[0], made, mid, index.groups[3]]
    assert index.groups[3].first_index == 6
    assert first_tool.excluded
    assert second_tool.excluded
    assert index.is_inserted(7)
    assert not index.is_inserted(1)
    assert texts(index.included_messages()) == ["q", "both calls", "mid", "next"]
    assert index.included_tool_call_group_count == 0
    assert_totals_match_a_recount(index)


def test_replace_marks_the_summary_and_names_messages_without_an_id() -> None:
    messages = [user("q"), call("a"), result("a"), assistant("done")]
    messages[1].message_id = "call-id"
    index = MessageIndex(messages)
    summary = Message("assistant", "collapsed", additional_properties={"kept": True})
    index.replace([index.groups[1]], summary)
    result_id = messages[2].message_id
    assert result_id is not None
    assert len(result_id) == 32
    assert int(result_id, 16) >= 0  # hexadecimal
    assert summarized_message_ids(summary) == ["call-id", result_id]
    assert summary.additional_properties is not None
    assert summary.additional_properties["kept"] is True  # other properties stay
    assert messages[0].message_id is None  # only replaced messages are named
    repeated = Message("assistant", "once")
    index.replace([index.groups[2], index.groups[2]], repeated)  # a repeat counts once
    assert summarized_message_ids(repeated) == [messages[3].message_id]
    assert_totals_match_a_recount(index)


def test_ids_made_for_one_summary_are_distinct_and_time_ordered_like_new_message_ids() -> None:
    messages = [user("q"), call("a", "b", "c"), result("a"), result("b"), result("c"), user("next")]
    index = MessageIndex(messages)
    before = new_message_id()
    index.replace([index.groups[1]], Message("assistant", "s"))
    made = [m.message_id or "" for m in messages[1:5]]
    assert len(set(made)) == 4
    assert all(before[:12] <= i[:12] <= new_message_id()[:12] for i in made)  # 48-bit millisecond prefix


def test_a_summary_can_be_summarized_again() -> None:
    index = MessageIndex([user("q1"), assistant("a1"), user("q2"), assistant("a2"), user("q3")])
    first = index.replace(list(index.groups[:2]), Message("assistant", "turn 1"))
    second = index.replace([first, index.groups[1], index.groups[2]], Message("assistant", "turns 1-2"))
    assert first.excluded
    assert second.order == 0
    assert texts(index.included_messages()) == ["turns 1-2", "q3"]
    replaced = summarized_message_ids(index.messages[second.first_index])
    older = index.messages[first.first_index].message_id
    assert older is not None  # the older summary got an id
    assert replaced == [index.messages[2].message_id, index.messages[3].message_id, older]  # by position
    assert_totals_match_a_recount(index)


def test_replace_refuses_bad_groups() -> None:
    index = MessageIndex([user("q"), assistant("a"), user("r")])
    other = MessageIndex([user("elsewhere")])
    with pytest.raises(ValueError, match="at least one group"):
        index.replace([], Message("assistant", "s"))
    with pytest.raises(ValueError, match="not a group of this index"):
        index.replace([other.groups[0]], Message("assistant", "s"))
    index.exclude(index.groups[1])
    with pytest.raises(ValueError, match="excluded already"):
        index.replace([index.groups[1]], Message("assistant", "s"))
    replaced = index.groups[0]
    index.replace([replaced], Message("assistant", "s"))
    with pytest.raises(ValueError, match="excluded already"):
        index.replace([replaced], Message("assistant", "again"))
    with pytest.raises(ValueError, match="replaced by a summary"):
        index.include(replaced)
    assert index.message_count == 4  # the refused calls added nothing
    assert_totals_match_a_recount(index)


def test_a_summary_stands_where_a_tool_group_with_later_results_began() -> None:
    # The group is [1, 3]; the assistant message between its call and its result stays after it.
    messages = [user("q"), call("a"), assistant("interim"), result("a"), user("next"), call("b"), result("b")]
    index = MessageIndex(messages)
    index.replace([index.group_of(1)], Message("assistant", "collapsed a"))
    assert texts(index.included_messages()) == ["q", "collapsed a", "interim", "next", "assistant", "tool"]
    assert_totals_match_a_recount(index)


def test_summaries_are_placed_even_when_a_merge_shows_their_anchor_again() -> None:
    # Merging brings the replaced call back inside an included group: its anchor's message shows
    # again, and the summary stands just before it (the position-by-position projection).
    index = MessageIndex([user("q"), call("x"), call("y")])
    index.replace([index.group_of(2)], Message("assistant", "about y"))
    index.append([result("x", "y"), assistant("done")])
    assert texts(index.included_messages()) == ["q", "assistant", "about y", "assistant", "tool", "done"]
    assert index.included_messages() == reference_projection(index)


def _tool_turns(count: int) -> list[Message]:
    """``count`` turns of question, tool call, its result and answer."""
    out: list[Message] = []
    for i in range(count):
        out += [user(f"q{i}"), call(f"c{i}"), result(f"c{i}", value=f"v{i}"), assistant(f"a{i}")]
    return out


def test_replace_each_is_replace_one_group_at_a_time() -> None:
    batch, single = MessageIndex(_tool_turns(4)), MessageIndex(_tool_turns(4))
    made = batch.replace_each(
        batch.oldest_included(tool_calls_only=True),  # a walk in progress
        lambda g: Message("assistant", f"summary of {g.first_index}"),
    )
    for group in list(single.oldest_included(tool_calls_only=True)):
        single.replace([group], Message("assistant", f"summary of {group.first_index}"))
    assert [g.order for g in made] == [1, 5, 9, 13]
    assert texts(batch.included_messages()) == texts(single.included_messages())
    assert signature(batch) == signature(single)
    ids = [summarized_message_ids(batch.messages[g.first_index]) for g in made]
    assert [len(i) for i in ids] == [2, 2, 2, 2]
    assert len({i for pair in ids for i in pair}) == 8
    with pytest.raises(ValueError, match="excluded already"):
        batch.replace_each([batch.group_of(1)], lambda g: Message("assistant", "again"))
    assert_totals_match_a_recount(batch)


def test_collapse_each_is_replace_each_with_text_summaries() -> None:
    collapsed, replaced = MessageIndex(_tool_turns(4)), MessageIndex(_tool_turns(4))
    made = collapsed.collapse_each(
        collapsed.oldest_included(tool_calls_only=True),
        lambda messages: f"{len(messages)} messages",
        role="user",
    )
    replaced.replace_each(
        replaced.oldest_included(tool_calls_only=True),
        lambda g: Message("user", f"{len(g.messages)} messages"),
    )
    assert [collapsed.messages[g.first_index].role for g in made] == ["user"] * 4
    assert texts(collapsed.included_messages()) == texts(replaced.included_messages())
    assert signature(collapsed) == signature(replaced)
    assert [len(summarized_message_ids(collapsed.messages[g.first_index])) for g in made] == [2, 2, 2, 2]
    with pytest.raises(ValueError, match="excluded already"):
        collapsed.collapse_each([collapsed.group_of(1)], lambda messages: "again")
    assert_totals_match_a_recount(collapsed)


def test_collapse_each_refuses_a_text_that_cannot_be_stored_replacing_nothing() -> None:
    index = MessageIndex(_tool_turns(2))
    before = texts(index.included_messages())
    bad_texts: list[object] = ["caf\u00e9 \ud800", 7]
    for bad in bad_texts:
        walk = index.oldest_included(tool_calls_only=True)
        with pytest.raises(MessageFormatError):
            index.collapse_each(walk, lambda _, bad=bad: cast(str, bad))
        assert texts(index.included_messages()) == before
        assert not any(g.excluded for g in index.groups)
        assert_totals_match_a_recount(index)
    made = index.collapse_each(index.oldest_included(tool_calls_only=True), lambda _: "caf\u00e9 \u2026")
    assert [index.messages[g.first_index].text for g in made] == ["caf\u00e9 \u2026"] * 2
    assert_totals_match_a_recount(index)


# -- excluding many ----------------------------------------------------------------------------


def test_exclude_many_equals_excluding_one_by_one() -> None:
    messages = [system(), user(), call("c1"), result("c1"), user("b"), assistant(), user("c")]
    batch, single = MessageIndex(messages), MessageIndex(messages)
    picks = [1, 2, 2, 4, 0]  # a repeat and a system group
    assert batch.exclude_many(batch.groups[i] for i in picks) == 4
    for i in picks:
        single.exclude(single.groups[i])
    assert signature(batch) == signature(single)
    assert batch.exclude_many([batch.groups[1]]) == 0  # idempotent
    assert_totals_match_a_recount(batch)


def test_exclude_many_stops_at_a_foreign_group_with_totals_right() -> None:
    index = MessageIndex([user("a"), user("b"), user("c")])
    foreign = MessageIndex([user("x")]).groups[0]
    with pytest.raises(ValueError, match="not a group of this index"):
        index.exclude_many([index.groups[0], foreign, index.groups[1]])
    assert [g.excluded for g in index.groups] == [True, False, False]
    assert_totals_match_a_recount(index)


def test_exclude_before_equals_excluding_the_walk_before_that_order() -> None:
    messages = [system(), user(), call("c1"), result("c1"), system("mid"), user("b"), assistant(), user("c")]
    bulk, walked = MessageIndex(messages), MessageIndex(messages)
    for index in (bulk, walked):
        index.track_changes()
        index.exclude(index.groups[2])  # an excluded group on the way
    before = bulk.groups[-2].order
    assert bulk.exclude_before(before) == 2
    assert walked.exclude_many(walked.oldest_included(before=before)) == 2
    assert signature(bulk) == signature(walked)
    assert bulk.changes() == walked.changes()
    assert [g.excluded for g in bulk.groups] == [False, True, True, False, True, False, False]
    assert bulk.exclude_before(before, include_system=True) == 2  # the system groups go too
    assert_totals_match_a_recount(bulk)


# -- walking ------------------------------------------------------------------------------------


def test_oldest_included_skips_excluded_and_system_groups_and_keeps_its_cursor() -> None:
    index = MessageIndex([system(), user("0"), user("1"), system("mid"), user("2"), user("3")])
    sys_group, u0, u1, mid, u2, u3 = index.groups
    index.exclude_many([u0, u1])
    assert list(index.oldest_included()) == [u2, u3]
    assert list(index.oldest_included(include_system=True)) == [sys_group, mid, u2, u3]
    assert index._state.head == 4  # pyright: ignore[reportPrivateUsage]  # past the prefix for later walks
    assert list(index.oldest_included(before=u3.order)) == [u2]
    index.include(u1)  # a group before the cursor: the next walk starts over
    assert list(index.oldest_included()) == [u1, u2, u3]


def test_oldest_included_tolerates_exclusion_and_replacement_during_the_walk() -> None:
    index = MessageIndex([user(str(i)) for i in range(6)])
    seen = []
    for group in index.oldest_included():
        seen.append(group.first_index)
        if group.first_index % 2:
            index.exclude(group)
        else:
            index.replace([group], Message("assistant", f"s{group.first_index}"))  # not yielded
    assert seen == [0, 1, 2, 3, 4, 5]
    assert texts(index.included_messages()) == ["s0", "s2", "s4"]
    # Replacing the yielded group together with older ones shrinks the list under the walk.
    index = MessageIndex([user(str(i)) for i in range(6)])
    seen = []
    for group in index.oldest_included():
        seen.append(group.first_index)
        if group.first_index == 3:
            index.replace(list(index.groups[1:4]), Message("assistant", "1-3"))
    assert seen == [0, 1, 2, 3, 4, 5]
    assert texts(index.included_messages()) == ["0", "1-3", "4", "5"]
    assert_totals_match_a_recount(index)


def test_tool_call_walks_see_only_tool_groups() -> None:
    index = MessageIndex([user(), call("a"), result("a"), assistant(), call("b"), result("b"), user()])
    first, second = index.group_of(1), index.group_of(4)
    assert list(index.oldest_included(tool_calls_only=True)) == [first, second]
    assert index.newest_included(5, tool_calls_only=True) == [second, first]
    index.exclude(first)
    assert list(index.oldest_included(tool_calls_only=True)) == [second]


def test_newest_included_counts_back_past_excluded_and_system_groups() -> None:
    index = MessageIndex([user("0"), user("1"), user("2"), system("late"), user("3")])
    u0, u1, u2, _, u3 = index.groups
    index.exclude(u2)
    assert index.newest_included(2) == [u3, u1]
    assert index.newest_included(10) == [u3, u1, u0]
    assert index.newest_included(0) == []


# -- recording ----------------------------------------------------------------------------------


def test_changes_needs_track_changes() -> None:
    with pytest.raises(ValueError, match="track_changes"):
        MessageIndex([user()]).changes()


def test_changes_report_excluded_ids_and_summaries_still_included() -> None:
    messages = [user("q"), call("a"), result("a"), assistant("x"), user("r"), assistant("y")]
    for i, message in enumerate(messages):
        message.message_id = f"m{i}"
    index = MessageIndex(messages)
    earlier = index.replace([index.group_of(3)], Message("assistant", "earlier", message_id="s0"))
    index.track_changes()
    index.exclude(index.groups[0])
    index.exclude(index.groups[0])  # twice: reported once
    made = index.replace([index.group_of(1)], Message("assistant", "collapsed"))
    dropped = index.replace([index.group_of(5)], Message("assistant", "dropped again"))
    index.exclude(dropped)  # made and excluded within the recording: never reported
    index.exclude_many([earlier])  # made before the recording: reported
    index.exclude(index.group_of(4))
    index.include(index.group_of(4))  # re-included: not reported
    excluded, summaries = index.changes()
    assert excluded == ["m0", "m1", "m2", "m5", "s0"]
    assert summaries == [(index.messages[made.first_index], ["m1", "m2"])]
    index.track_changes()  # restarts
    assert index.changes() == ([], [])


_operations = st.lists(
    st.tuples(
        st.sampled_from(
            ["append", "exclude", "include", "exclude_many", "exclude_before", "replace", "replace_each"]
        ),
        st.lists(st.integers(0, 40), min_size=1, max_size=3),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(histories(), _operations)
def test_replacing_excluding_and_appending_keep_totals_projection_and_walks_right(
    history: History, operations: list[tuple[str, list[int]]]
) -> None:
    index = MessageIndex()
    messages = history.messages
    cut = 0
    for operation, picks in operations:
        listed = list(index.groups)
        if operation == "append":
            end = min(len(messages), cut + picks[0] % 6 + 1)
            index.append(messages[cut:end])
            cut = end
        elif listed:
            chosen = list({id(g): g for g in (listed[p % len(listed)] for p in picks)}.values())
            included = [g for g in chosen if not g.excluded]
            if operation == "exclude":
                index.exclude(chosen[0])
            elif operation == "include":
                index.include(chosen[0])
            elif operation == "exclude_many":
                assert index.exclude_many(chosen) == len(included)
            elif operation == "exclude_before":
                with_system = picks[0] % 2 == 1
                doomed = list(index.oldest_included(include_system=with_system, before=chosen[0].order))
                assert index.exclude_before(chosen[0].order, include_system=with_system) == len(doomed)
                assert all(g.excluded for g in doomed)
            elif included and operation == "replace":
                index.replace(included, Message("assistant", "summary"))
            elif included:
                index.replace_each(included, lambda g: Message("assistant", f"summary of {g.order}"))
        assert_totals_match_a_recount(index)
        walk = [g for g in index.groups if not g.excluded and g.kind is not K.SYSTEM]
        assert list(index.oldest_included()) == walk
        assert list(index.oldest_included(tool_calls_only=True)) == [g for g in walk if g.kind is K.TOOL_CALL]
        assert index.newest_included(3) == walk[::-1][:3]
    index.append(messages[cut:])
    assert_totals_match_a_recount(index)


def test_a_message_named_by_a_replace_keeps_a_count_a_recount_gives() -> None:
    """The default estimator measures the id: a message that a replace names (it had none) is
    counted as named, also when a later result brings it into an included group."""
    index = MessageIndex()
    messages = [call("c0", "c1"), result("c0"), user(""), user(""), call("c2"), result("c1", "c2")]
    index.append(messages[:5])
    index.replace([index.groups[3]], Message("assistant", "summary"))
    assert_totals_match_a_recount(index)
    index.append(messages[5:])
    assert_totals_match_a_recount(index)
