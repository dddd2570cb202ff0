"""Message builders and index checks shared by the compaction tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from agentkeep import Content, Message
from agentkeep.compaction import SUMMARY_PROPERTY, MessageIndex, count_message_tokens
from agentkeep.compaction import MessageGroupKind as K

__all__ = [
    "assert_included_counts_match_a_recount",
    "assert_totals_match_a_recount",
    "assistant",
    "call",
    "histories",
    "reasoning",
    "reference_projection",
    "result",
    "summary",
    "system",
    "texts",
    "user",
]

_ids = itertools.count()


def user(text: str = "question") -> Message:
    return Message("user", text)


def assistant(text: str = "answer") -> Message:
    return Message("assistant", text)


def system(text: str = "be brief") -> Message:
    return Message("system", text)


def reasoning(text: str = "thinking") -> Message:
    return Message("assistant", [Content.from_text_reasoning(text)])


def call(*call_ids: str, name: str = "get_weather") -> Message:
    return Message(
        "assistant", [Content.from_function_call(c, name, arguments={"city": "Paris"}) for c in call_ids]
    )


def result(*call_ids: str, value: Any = "sunny, 18°C") -> Message:
    return Message("tool", [Content.from_function_result(c, result=value) for c in call_ids])


def summary(text: str = "earlier: weather talk", replaces: list[str] | None = None) -> Message:
    return Message("assistant", text, additional_properties={SUMMARY_PROPERTY: replaces or ["m1", "m2"]})


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text or m.role for m in messages]


@st.composite
def histories(
    draw: st.DrawFn,
    *,
    max_length: int,
    max_size: int,
    kinds: Sequence[str],
    system_size: Callable[[int], int] = lambda size: size,
    split_results: bool | None = None,
) -> list[Message]:
    """Generated histories of ``kinds`` (repeat a kind to weight it): "system", "user", "assistant",
    "tool" (a call and its results), "reasoning_tool" (the same after a reasoning message) and
    "summary". Results come one message per call id when ``split_results`` is true, all in one
    message when false, and either way (drawn) when None."""
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, max_length))):
        kind = draw(st.sampled_from(kinds))
        size = draw(st.integers(1, max_size))
        if kind == "system":
            messages.append(system("s" * system_size(size)))
        elif kind == "user":
            messages.append(user("u" * size))
        elif kind == "assistant":
            messages.append(assistant("a" * size))
        elif kind == "summary":
            messages.append(summary("p" * size, replaces=[f"gone{next(_ids)}"]))
        else:
            if kind == "reasoning_tool":
                messages.append(reasoning("r" * size))
            ids = [f"c{next(_ids)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(call(*ids))
            split = draw(st.booleans()) if split_results is None else split_results
            if split:
                messages += [result(i, value="v" * size) for i in ids]
            else:
                messages.append(result(*ids, value="v" * size))
    return messages


def reference_projection(index: MessageIndex) -> list[Message]:
    """included_messages() spelled out: original order, each included summary put in by replace()
    just before the message at its anchor (its group's order), in the order they were made."""
    anchored: dict[int, list[Message]] = {}
    for position in range(index.message_count):
        group = index.group_of(position)
        if index.is_inserted(position) and not group.excluded:
            anchored.setdefault(group.order, []).append(index.messages[position])
    out: list[Message] = []
    for position in range(index.message_count):
        if index.is_inserted(position):
            continue
        out.extend(anchored.get(position, []))
        if not index.group_of(position).excluded:
            out.append(index.messages[position])
    return out


def assert_included_counts_match_a_recount(index: MessageIndex) -> None:
    """The included counts equal sums over the groups not excluded."""
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


def assert_totals_match_a_recount(index: MessageIndex) -> None:
    """The included counts equal sums over the listed groups (which hold summaries in place)."""
    assert_included_counts_match_a_recount(index)
    assert index.token_count == sum(index.message_token_count(p) for p in range(index.message_count))
    orders = [g.order for g in index.groups]
    assert orders == sorted(orders)
    assert len(set(orders)) == len(orders)
    assert index.included_messages() == reference_projection(index)
