"""Compaction triggers: each factory, thresholds, combinators, and that they read included counts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentkeep import Content, Message
from agentkeep.compaction import (
    CharacterEstimatorTokenizer,
    CompactionTrigger,
    CompactionTriggers,
    MessageIndex,
)


def history() -> MessageIndex:
    """Two turns, one tool call: 6 messages, 5 groups, 6 * 5 = 30 tokens (each text is <= 4 chars)."""
    return MessageIndex(
        tokenizer=CharacterEstimatorTokenizer(measure="text"),
        messages=[
            Message("system", "sys"),
            Message("user", "q1"),
            Message("assistant", [Content.from_function_call("c1", "f")]),
            Message("tool", [Content.from_function_result("c1", result="ok")]),
            Message("user", "q2"),
            Message("assistant", "a2"),
        ],
    )


def test_counts_behind_the_examples() -> None:
    index = history()
    assert (index.included_message_count, index.included_group_count, index.included_turn_count) == (6, 5, 2)
    assert index.included_token_count == 30


def test_always_and_never() -> None:
    index = history()
    assert CompactionTriggers.always(index) is True
    assert CompactionTriggers.never(index) is False
    assert CompactionTriggers.always(MessageIndex()) is True


@pytest.mark.parametrize(
    ("factory", "at_limit"),
    [
        (CompactionTriggers.tokens_exceed, 30),
        (CompactionTriggers.messages_exceed, 6),
        (CompactionTriggers.groups_exceed, 5),
        (CompactionTriggers.turns_exceed, 2),
    ],
)
def test_thresholds_are_exclusive(factory: Callable[[int], CompactionTrigger], at_limit: int) -> None:
    index = history()
    assert factory(at_limit - 1)(index) is True
    assert factory(at_limit)(index) is False
    with pytest.raises(ValueError, match="must be greater than or equal to 0"):
        factory(-1)


def test_thresholds_read_only_included_groups() -> None:
    index = history()
    tool = index.groups[2]
    trigger = CompactionTriggers.messages_exceed(4)
    has_tools = CompactionTriggers.has_tool_calls()
    assert trigger(index)
    assert has_tools(index)
    index.exclude(tool)
    assert not trigger(index)
    assert not has_tools(index)
    index.include(tool)
    assert has_tools(index)
    assert not has_tools(MessageIndex([Message("user", "hi")]))


def test_turns_exceed_drops_when_a_turn_is_excluded() -> None:
    index = history()
    trigger = CompactionTriggers.turns_exceed(1)
    assert trigger(index)
    for group in index.groups[1:3]:  # the first turn: its user message and its tool call
        index.exclude(group)
    assert not trigger(index)


def test_all_and_any_combine_like_the_seed_example() -> None:
    # Compact only when there are tool calls AND tokens exceed the limit.
    index = history()
    trigger = CompactionTriggers.all_(
        CompactionTriggers.has_tool_calls(), CompactionTriggers.tokens_exceed(15)
    )
    assert trigger(index)
    index.exclude(index.groups[2])
    assert not trigger(index)  # tokens still exceed 15, but no tool call is left
    either = CompactionTriggers.any_(
        CompactionTriggers.has_tool_calls(), CompactionTriggers.tokens_exceed(15)
    )
    assert either(index)
    assert CompactionTriggers.all_()(index) is True
    assert CompactionTriggers.any_()(index) is False


def test_any_callable_is_a_trigger() -> None:
    def custom(index: MessageIndex) -> bool:
        return index.included_byte_count > 0

    trigger: CompactionTrigger = CompactionTriggers.any_(custom, CompactionTriggers.never)
    assert trigger(history())


def test_triggers_print_as_written() -> None:
    trigger = CompactionTriggers.any_(
        CompactionTriggers.always, CompactionTriggers.all_(CompactionTriggers.turns_exceed(4))
    )
    assert repr(trigger) == (
        "CompactionTriggers.any_(CompactionTriggers.always, "
        "CompactionTriggers.all_(CompactionTriggers.turns_exceed(4)))"
    )
    assert repr(CompactionTriggers.has_tool_calls()) == "CompactionTriggers.has_tool_calls()"
