"""The grouping rules: how appended messages join groups and turns (the work of ``MessageIndex.append``).

Rules, in order of precedence: the summary mark, then the system role, then function
calls/results, then the role (see :mod:`agentkeep.compaction.index` for what they make):

* a message marked as a summary forms a ``summary`` group; a system message a ``system`` group;
* an assistant message with function calls starts a ``tool_call`` group; a message carrying
  results joins the group of their calls (by call id, also when other messages come between);
  results that answer calls of several groups merge those groups; results that answer no known
  call, and tool-role messages without results, form a ``tool_call`` group of their own;
* reasoning-only assistant messages (all contents are reasoning) directly before a call message
  join its group: they form provisional ``assistant_text`` groups that the call message absorbs;
* otherwise the role decides: ``user`` (a new turn starts), ``assistant_text``, or ``tool_call``.

Only the new messages are grouped and counted: old messages are never regrouped or recounted,
and a tool-call group whose results arrive in a later append is completed then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import suppress
from typing import Final

from ..contents import Content, FunctionCallContent, FunctionResultContent, TextContent, TextReasoningContent
from ..messages import Message
from ._index_state import IndexState
from .groups import SUMMARY_PROPERTY, MessageGroup, MessageGroupKind
from .tokenizers import MESSAGE_OVERHEAD_TOKENS, CharacterEstimatorTokenizer, message_token_text

__all__ = ["append_messages"]

_ROLE_KINDS: Final = {
    "user": MessageGroupKind.USER,
    "assistant": MessageGroupKind.ASSISTANT_TEXT,
    "tool": MessageGroupKind.TOOL_CALL,
}
_SYSTEM: Final = MessageGroupKind.SYSTEM
_SUMMARY: Final = MessageGroupKind.SUMMARY
_USER: Final = MessageGroupKind.USER
_TEXT: Final = MessageGroupKind.ASSISTANT_TEXT
_TOOL: Final = MessageGroupKind.TOOL_CALL


def append_messages(state: IndexState, messages: Iterable[Message]) -> None:
    """Add ``messages`` to the index ``state``, grouping and counting only them.

    The common messages are handled here, in one pass written for speed: this loop is the whole
    cold build of a long history. A message that forms a group of its own (one text content, a
    summary or system message, one function call) gets it made inline; a message with one result
    joins its call's group inline; the rest (parallel calls, reasoning, unknown results, several
    contents) go to :func:`_append_structured`. Totals of the inline paths are summed in locals
    and added once at the end (in ``finally``, so they stay exact if the tokenizer raises); the
    other path adds to ``state`` directly, and sums commute. Turn counts are not sums (a turn is
    included when its count leaves 0), so they are kept up to date as groups are made.
    """
    tokenizer = state.tokenizer
    count_tokens = tokenizer.count_tokens
    # The default estimator is ceil(len / chars_per_token): computed here instead of a method
    # call per message. Only for the exact class; a subclass may count differently.
    per_token = tokenizer.chars_per_token if type(tokenizer) is CharacterEstimatorTokenizer else 0
    overhead = MESSAGE_OVERHEAD_TOKENS
    all_messages, token_list, group_of = state.messages, state.tokens, state.group_of
    groups, turn_live, tool_groups, calls = state.groups, state.turn_live, state.tool_groups, state.calls
    role_kinds, new_group = _ROLE_KINDS, MessageGroup.__new__
    turn: int | None = len(turn_live) - 1 if turn_live else None
    total_tokens = total_bytes = made = joined = tokens_made = bytes_made = tool_groups_made = 0
    try:
        for message in messages:
            contents = message.contents
            only = contents[0] if len(contents) == 1 else None
            plain = type(only) is TextContent
            text = only.text if plain else message_token_text(message)
            tokens = (-(-len(text) // per_token) if per_token else count_tokens(text)) + overhead
            size = len(text) if text.isascii() else len(text.encode("utf-8"))  # ASCII: 1 byte per char
            position = len(all_messages)
            all_messages.append(message)
            token_list.append(tokens)
            total_tokens += tokens
            total_bytes += size
            tail = state.reasoning_tail
            if tail:
                state.reasoning_tail = []  # any message ends the reasoning tail, or absorbs it
            call_id: str | None = None
            props = message.additional_properties
            if props is not None and isinstance(props.get(SUMMARY_PROPERTY), list):
                kind = _SUMMARY
            elif message.role == "system":
                kind = _SYSTEM
            elif plain:
                kind = role_kinds[message.role]
            elif type(only) is FunctionCallContent and not tail:  # one call: a new tool-call group
                kind, call_id = _TOOL, only.call_id
            elif type(only) is FunctionResultContent and (owner := calls.get(only.call_id)) is not None:
                # -- one result: it joins its call's group (as _add_to would), counted inline --
                later = owner.later_indices
                if later is None:
                    owner.later_indices = [position]
                else:
                    later.append(position)
                owner.token_count += tokens
                owner.byte_count += size
                group_of.append(owner)
                if not owner.excluded:
                    joined += 1
                    tokens_made += tokens
                    bytes_made += size
                if owner.unanswered:
                    owner.unanswered.discard(only.call_id)
                continue
            else:
                _append_structured(state, message, position, tokens, size, tail)
                turn = len(turn_live) - 1 if turn_live else None
                continue
            # -- a new group of this one message, made (as MessageGroup() would) and counted inline --
            if kind is _USER:
                turn = len(turn_live)
                turn_live.append(0)
            group = new_group(MessageGroup)
            group.index = state.owner
            group.kind = kind
            group.turn = turn
            group.order = group.first_index = position
            group.later_indices = None
            group.token_count = tokens
            group.byte_count = size
            group.excluded = False
            if call_id is None:
                group.call_ids = ()
                group.unanswered = None
            else:
                group.call_ids = [call_id]
                group.unanswered = {call_id}
                calls[call_id] = group
            groups.append(group)
            group_of.append(group)
            made += 1
            tokens_made += tokens
            bytes_made += size
            if kind is _TOOL:  # a call, or a tool message without results
                tool_groups_made += 1
                tool_groups.append(group)
            if turn is not None and kind is not _SYSTEM:
                live = turn_live[turn] + 1
                turn_live[turn] = live
                if live == 1:
                    state.included_turn_count += 1
    finally:
        state.total_tokens += total_tokens
        state.total_bytes += total_bytes
        state.included_group_count += made
        state.included_message_count += made + joined
        state.included_token_count += tokens_made
        state.included_byte_count += bytes_made
        state.included_tool_group_count += tool_groups_made


def _append_structured(
    state: IndexState, message: Message, position: int, tokens: int, size: int, tail: list[MessageGroup]
) -> None:
    """Group a message with calls, results or reasoning that the main loop does not handle inline
    (``tail``: the reasoning-only groups just before it)."""
    calls, results, reasoning_only = _classify(message.contents)
    if calls and not results and not tail:  # parallel calls: a new tool-call group
        _new_tool_group(state, position, tokens, size, [call.call_id for call in calls])
        return
    if results and not calls and len(results) == 1:  # a result: it joins its call's group
        owner = state.calls.get(results[0].call_id)
        if owner is not None:
            _add_to(state, owner, position, tokens, size)
            if owner.unanswered:
                owner.unanswered.discard(results[0].call_id)
            return
    if calls or results:
        _place_tool_message(state, calls, results, tail, position, tokens, size)
        return
    kind = _ROLE_KINDS[message.role]
    group = _new_group(state, kind, position, tokens, size)
    if reasoning_only and kind is _TEXT:  # provisional: a tool-call message that follows absorbs it
        tail.append(group)
        state.reasoning_tail = tail


def _new_tool_group(state: IndexState, position: int, tokens: int, size: int, call_ids: list[str]) -> None:
    """A new tool-call group of the call message at ``position``, its calls pending, counted."""
    turn = len(state.turn_live) - 1
    group = MessageGroup(state.owner, _TOOL, turn if turn >= 0 else None, position, position, tokens, size)
    group.call_ids = call_ids
    group.unanswered = set(call_ids)
    calls = state.calls
    for call_id in call_ids:
        calls[call_id] = group
    state.groups.append(group)
    state.group_of.append(group)
    state.tool_groups.append(group)
    state.included_group_count += 1
    state.included_message_count += 1
    state.included_token_count += tokens
    state.included_byte_count += size
    state.included_tool_group_count += 1
    if turn >= 0:
        live = state.turn_live[turn] + 1
        state.turn_live[turn] = live
        if live == 1:
            state.included_turn_count += 1


def _classify(
    contents: Sequence[Content],
) -> tuple[list[FunctionCallContent], list[FunctionResultContent], bool]:
    """The calls and results among ``contents``, and whether all of them are reasoning."""
    calls: list[FunctionCallContent] = []
    results: list[FunctionResultContent] = []
    reasoning_only = bool(contents)
    for content in contents:
        if isinstance(content, FunctionCallContent):
            calls.append(content)
            reasoning_only = False
        elif isinstance(content, FunctionResultContent):
            results.append(content)
            reasoning_only = False
        elif reasoning_only and not isinstance(content, TextReasoningContent):
            reasoning_only = False
    return calls, results, reasoning_only


def _place_tool_message(
    state: IndexState,
    calls: list[FunctionCallContent],
    results: list[FunctionResultContent],
    tail: list[MessageGroup],
    position: int,
    tokens: int,
    size: int,
) -> None:
    """Group a message with calls and results, results of several calls, or unknown results."""
    targets: list[MessageGroup] = []
    for result in results:
        owner = state.calls.get(result.call_id)
        if owner is not None and all(owner is not t for t in targets):
            targets.append(owner)
    if targets:
        group = _merge(state, targets) if len(targets) > 1 else targets[0]
        _add_to(state, group, position, tokens, size)
    elif calls and tail:
        group = _absorb(state, tail)
        _add_to(state, group, position, tokens, size)
    else:
        group = _new_group(state, _TOOL, position, tokens, size)
    if calls:
        _add_calls(state, group, calls)
    if group.unanswered:
        for result in results:
            group.unanswered.discard(result.call_id)


def _new_group(
    state: IndexState, kind: MessageGroupKind, position: int, tokens: int, size: int
) -> MessageGroup:
    """A new group of the message at ``position``, listed and counted."""
    turn_live = state.turn_live
    if kind is _USER:
        turn_live.append(0)
    turn = len(turn_live) - 1
    group = MessageGroup(state.owner, kind, turn if turn >= 0 else None, position, position, tokens, size)
    state.groups.append(group)
    state.group_of.append(group)
    if kind is _TOOL:
        state.tool_groups.append(group)
    state.tally(group, 1)
    return group


def _add_calls(state: IndexState, group: MessageGroup, calls: list[FunctionCallContent]) -> None:
    """Record ``calls`` as made in ``group`` (each pending until its result arrives)."""
    call_ids = group.call_ids if isinstance(group.call_ids, list) else list(group.call_ids)
    unanswered: set[str] = group.unanswered if group.unanswered is not None else set()
    for call in calls:
        state.calls[call.call_id] = group
        call_ids.append(call.call_id)
        unanswered.add(call.call_id)
    group.call_ids, group.unanswered = call_ids, unanswered


def _add_to(state: IndexState, group: MessageGroup, position: int, tokens: int, size: int) -> None:
    """Add the message at ``position`` to ``group``, counting it if the group is included."""
    if group.later_indices is None:
        group.later_indices = [position]
    else:
        group.later_indices.append(position)
    group.token_count += tokens
    group.byte_count += size
    state.group_of.append(group)
    if not group.excluded:
        state.included_message_count += 1
        state.included_token_count += tokens
        state.included_byte_count += size


def _absorb(state: IndexState, tail: list[MessageGroup]) -> MessageGroup:
    """Turn the reasoning-only groups at the end of the list into the start of a tool-call group.

    They are the last groups (any other message ends the tail), so this is O(len(tail)). An
    exclusion of those provisional groups is dropped: the tool-call group starts included.
    """
    first = tail[0]
    group = MessageGroup(state.owner, _TOOL, first.turn, first.first_index, first.order)
    positions: list[int] = []
    for old in tail:
        state.tally(old, -1)
        old.excluded = True  # contributes nothing any more
        state.groups.pop()
        positions.extend(old.indices)
        group.token_count += old.token_count
        group.byte_count += old.byte_count
    for position in positions:
        state.group_of[position] = group
    group.later_indices = positions[1:] or None
    state.groups.append(group)
    state.tool_groups.append(group)
    state.head = min(state.head, len(state.groups) - 1)
    state.layout += 1
    state.tally(group, 1)
    return group


def _merge(state: IndexState, targets: list[MessageGroup]) -> MessageGroup:
    """Merge tool-call groups that one result message ties together into the earliest of them.

    Rare (parallel calls normally share one assistant message), so removing the later groups
    from the middle of the list may cost O(groups). The merged group keeps the earliest
    group's excluded flag. A later group that a summary replaced has left the list already; its
    messages join the merged group all the same (a result must not be sent without its call).
    """
    targets.sort(key=lambda g: g.first_index)
    keep = targets[0]
    state.tally(keep, -1)
    positions = keep.indices
    for other in targets[1:]:
        state.tally(other, -1)
        other.excluded = True
        with suppress(ValueError):  # raised when a summary replaced it: it is not listed
            state.groups.remove(other)
        state.tool_groups.remove(other)
        for position in other.indices:
            state.group_of[position] = keep
        positions.extend(other.indices)
        keep.token_count += other.token_count
        keep.byte_count += other.byte_count
        for call_id in other.call_ids:
            if state.calls.get(call_id) is other:
                state.calls[call_id] = keep
        keep.call_ids = [*keep.call_ids, *other.call_ids]
        if other.unanswered:
            keep.unanswered = other.unanswered.union(keep.unanswered or ())
    positions.sort()
    keep.first_index = positions[0]
    keep.later_indices = positions[1:] or None
    state.head = state.tool_head = 0  # removals shifted the lists under the cursors
    state.layout += 1
    state.tally(keep, 1)
    return keep
