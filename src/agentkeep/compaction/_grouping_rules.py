"""The grouping rules: how appended messages join groups and turns (the work of ``MessageIndex.append``).

The rules are the reference Python edition's, in order of precedence: the summary mark, then the
system role, then tool calls and their results, then the role (see
:mod:`agentkeep.compaction.index` for what they make):

* a message marked as a summary forms a ``summary`` group; a system message a ``system`` group;
* an assistant message with function calls starts a ``tool_call`` group, and opens it: the
  reasoning-only assistant messages right after it and the tool-role messages after those join
  it (adjacency), until any other message closes it;
* a message carrying results also joins the group of each call it answers that has exactly one
  pending declaration of its id (also when other messages come between); a result whose call id
  is pending in two groups is ambiguous and pairs with neither. A declaration stops pending once a
  result pairs with it. Results that tie several groups together merge them; a tool-role message
  that pairs with nothing and follows no open group forms a ``tool_call`` group of its own (and
  opens it, so the tool messages after it join);
* reasoning-only assistant messages directly before a call message join its group: they form
  provisional ``assistant_text`` groups that the call message absorbs;
* otherwise the role decides: ``user`` (a new turn starts), ``assistant_text``, or ``tool_call``.

Only the new messages are grouped and counted: old messages are never regrouped or recounted,
and a tool-call group whose results arrive in a later append is completed then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from json.encoder import encode_basestring
from operator import attrgetter
from typing import Any, Final, cast

from ..contents import Content, FunctionCallContent, FunctionResultContent, TextContent, TextReasoningContent
from ..messages import Message
from ._index_state import IndexState
from .groups import SUMMARY_PROPERTY, MessageGroup, MessageGroupKind
from .tokenizers import (
    EMPTY_PAYLOAD_CHARS,
    MESSAGE_OVERHEAD_TOKENS,
    PLAIN_TEXT_PAYLOAD_CHARS,
    RESULT_PAYLOAD_CHARS,
    ascii_json_string,
    call_measures,
    calls_measures,
    flat_calls_measures,
    message_token_text,
    reference_payload_length,
)

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
_PLAIN_KINDS: Final = {"user": _USER, "assistant": _TEXT}
"""The roles whose plain text the grouping loop's fast path takes, and the group kind it makes."""
_CALLS_ONLY: Final[frozenset[type]] = frozenset({FunctionCallContent})
_CALL_ID_OF: Final[Callable[[FunctionCallContent], str]] = attrgetter("call_id")


def append_messages(state: IndexState, messages: Iterable[Message]) -> None:  # noqa: C901 - see below
    """Add ``messages`` to the index ``state``, grouping and counting only them.

    The common messages are handled here, in one pass written for speed: this loop is the whole
    cold build of a long history. The most common (with the default estimator), a plain user or
    assistant text, a tool message of one text result and an assistant message of one call with
    flat arguments, each take a short path of their own first, which measures the message and
    makes or joins its group without the general path's checks. Otherwise a message that forms a
    group of its own (one text content, a summary or system message, one function call) gets it
    made inline; a message with one result that joins one group gets added inline; the rest
    (parallel calls, reasoning, merges, unknown results, several contents) go to
    :func:`_append_structured`. Totals of the inline paths are summed in locals and added once at
    the end (in ``finally``, so they stay exact if the tokenizer raises); the other path adds to
    ``state`` directly, and sums commute. Turn counts are not sums (a turn is included when its
    count leaves 0), so they are kept up to date as groups are made.

    This is the one function of the package over ruff's complexity limit, on purpose: split into
    helpers (token count, group choice, join), the cold build would pay Python calls per message
    in its hottest loop.
    """
    count_message = state.count_message
    # The default estimator, counted inline instead of a call per message: the reference's payload
    # length (from the text and id lengths for a plain text), or the text measure's rounded length.
    per_token, text_per_token = state.payload_chars_per_token, state.text_chars_per_token
    payload_length, overhead = reference_payload_length, MESSAGE_OVERHEAD_TOKENS
    all_messages, token_list, group_of = state.messages, state.tokens, state.group_of
    groups, turn_live, tool_groups, calls = state.groups, state.turn_live, state.tool_groups, state.calls
    role_kinds, new_group = _ROLE_KINDS, MessageGroup.__new__
    payload_lengths, ascii_json = state.payload_lengths, ascii_json_string
    measure_call, measure_calls = call_measures, calls_measures
    plain_kinds, user_kind, tool_kind, owner_index = _PLAIN_KINDS, _USER, _TOOL, state.owner
    turn: int | None = len(turn_live) - 1 if turn_live else None
    total_tokens = total_bytes = made = joined = tokens_made = bytes_made = tool_groups_made = 0
    plain_tokens = plain_bytes = 0  # of the plain texts: in the totals and the included totals
    try:
        for position, message in enumerate(messages, len(all_messages)):
            contents = message.contents
            only: Any = contents[0] if len(contents) == 1 else None  # read by type below, without casts
            kind_of_only: object = type(only)  # pyright: ignore[reportUnknownVariableType]
            plain = kind_of_only is TextContent
            if (
                plain
                and per_token
                and (kind := plain_kinds.get(message.role)) is not None
                and not message.additional_properties
                and not only.additional_properties
                and not only.extra_fields
            ):
                # -- a plain user or assistant text (most messages): a group of its own, measured
                # (as the general path below does, in the same order) and made inline --
                text = only.text
                ascii_text = text.isascii()
                written = len(ascii_json(text)) if ascii_text else len(encode_basestring(text))
                message_id = message.message_id
                head = 4 if message_id is None else len(encode_basestring(message_id))  # null, or the id
                length = PLAIN_TEXT_PAYLOAD_CHARS + written + head + len(message.role)
                payload_lengths.append(length if message_id is None else -1)
                tokens = length // per_token or 1  # max(1, ...) without a call
                size = len(text) if ascii_text else len(text.encode("utf-8"))  # ASCII: 1 byte per char
                all_messages.append(message)
                token_list.append(tokens)
                plain_tokens += tokens
                plain_bytes += size
                if state.reasoning_tail:
                    state.reasoning_tail = []  # any message ends the reasoning tail
                if kind is user_kind:  # a new turn, included from its first group
                    turn = len(turn_live)
                    turn_live.append(1)
                    state.included_turn_count += 1
                elif turn is not None:
                    live = turn_live[turn] + 1
                    turn_live[turn] = live
                    if live == 1:
                        state.included_turn_count += 1
                group = new_group(MessageGroup)
                group.index = owner_index
                group.kind = kind
                group.turn = turn
                group.order = group.first_index = position
                group.later_indices = None
                group.token_count = tokens
                group.byte_count = size
                group.excluded = False
                group.call_ids = ()
                group.unanswered = None
                state.open_group = None
                groups.append(group)
                group_of.append(group)
                made += 1
                continue
            if (
                kind_of_only is FunctionResultContent
                and per_token
                and not state.reasoning_tail
                and message.role == "tool"
                and type(value := only.result) is str
                and value.isascii()
                and only.exception is None
                and not message.additional_properties
                and not only.additional_properties
                and not only.extra_fields
            ):
                # -- one ASCII text result (the usual tool message): the group it joins, chosen as
                # the general path below chooses it (the one group whose call of its id is pending,
                # or the open group, unless the two differ); when there is one, it joins inline --
                pending = calls.get(result_id := only.call_id)
                paired = pending[0] if pending is not None and len(pending) == 1 else None
                adjacent = state.open_group
                owner = None
                if paired is None or adjacent is None or paired is adjacent:
                    owner = paired or adjacent
                if owner is not None:
                    size = len(ascii_json(value))  # its counted text is the result's JSON
                    message_id = message.message_id
                    head = 4 if message_id is None else len(encode_basestring(message_id))  # null, or the id
                    length = (
                        RESULT_PAYLOAD_CHARS
                        + len(encode_basestring(result_id))
                        + size
                        + head
                        + len(message.role)
                    )
                    payload_lengths.append(length if message_id is None else -1)
                    tokens = length // per_token or 1
                    all_messages.append(message)
                    token_list.append(tokens)
                    total_tokens += tokens
                    total_bytes += size
                    if paired is not None:
                        del calls[result_id]  # the declaration is answered: no longer pending
                        if paired.unanswered:
                            paired.unanswered.discard(result_id)
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
                    state.open_group, state.open_after_call = owner, False
                    continue
            if (
                (
                    kind_of_only is FunctionCallContent
                    or (len(contents) > 1 and _CALLS_ONLY.issuperset(map(type, contents)))
                )
                and per_token
                and not state.reasoning_tail
                and message.role == "assistant"
                and not message.additional_properties
            ):
                # -- function calls of flat arguments (the usual call message): a new tool-call
                # group, measured as call_measures measures them (flat_calls_measures), made inline --
                written, size = flat_calls_measures(contents)  # one call or several
                if written >= 0:
                    message_id = message.message_id
                    head = 4 if message_id is None else len(encode_basestring(message_id))  # null, or the id
                    length = EMPTY_PAYLOAD_CHARS + written + head + len(message.role)
                    payload_lengths.append(length if message_id is None else -1)
                    tokens = length // per_token or 1
                    all_messages.append(message)
                    token_list.append(tokens)
                    plain_tokens += tokens
                    plain_bytes += size
                    group = new_group(MessageGroup)
                    group.index = owner_index
                    group.kind = tool_kind
                    group.turn = turn
                    group.order = group.first_index = position
                    group.later_indices = None
                    group.token_count = tokens
                    group.byte_count = size
                    group.excluded = False
                    if kind_of_only is FunctionCallContent:
                        call_id: str = only.call_id
                        group.call_ids = [call_id]
                        group.unanswered = {call_id}
                        pending = calls.get(call_id)  # the declaration is pending (as _add_calls records it)
                        if pending is None:
                            calls[call_id] = [group]
                        else:
                            pending.append(group)
                    else:
                        group.call_ids = call_ids = list(map(_CALL_ID_OF, contents))
                        group.unanswered = set(call_ids)
                        for call_id in call_ids:
                            pending = calls.get(call_id)
                            if pending is None:
                                calls[call_id] = [group]
                            elif pending[-1] is not group:  # an id made twice in the message is listed once
                                pending.append(group)
                    state.open_group, state.open_after_call = group, True
                    groups.append(group)
                    group_of.append(group)
                    tool_groups.append(group)
                    made += 1
                    tool_groups_made += 1
                    if turn is not None:
                        live = turn_live[turn] + 1
                        turn_live[turn] = live
                        if live == 1:
                            state.included_turn_count += 1
                    continue
            ascii_result = False  # one result of ASCII text, no exception: its JSON, made here
            call_written = -1  # what the function calls add to the payload, when measured here
            many_calls = False  # several contents, all function calls
            text: str
            if plain:
                text = only.text
            elif (
                kind_of_only is FunctionResultContent
                and type(value := only.result) is str
                and value.isascii()
                and only.exception is None
            ):
                text = ascii_json(value).decode()  # message_token_text's JSON of the result
                ascii_result = True
            elif kind_of_only is FunctionCallContent:
                text, call_written = measure_call(only)
            elif len(contents) > 1 and _CALLS_ONLY.issuperset(map(type, contents)):  # parallel calls
                text, call_written = measure_calls(cast("list[FunctionCallContent]", contents))
                many_calls = True
            else:
                text = message_token_text(message)
            ascii_text = text.isascii()
            if per_token:
                message_id = message.message_id
                if (plain or ascii_result) and not only.additional_properties and not only.extra_fields:
                    # reference_payload_length's plain text and string result, inline
                    head = (4 if message_id is None else len(encode_basestring(message_id))) + len(
                        message.role
                    )
                    if plain:
                        written = len(ascii_json(text)) if ascii_text else len(encode_basestring(text))
                        length = PLAIN_TEXT_PAYLOAD_CHARS + written + head
                    else:  # the result's JSON is its payload text
                        answered: str = only.call_id
                        length = RESULT_PAYLOAD_CHARS + len(encode_basestring(answered)) + len(text) + head
                elif call_written >= 0:  # reference_payload_length's one function call, inline
                    head = (4 if message_id is None else len(encode_basestring(message_id))) + len(
                        message.role
                    )
                    length = EMPTY_PAYLOAD_CHARS + call_written + head
                else:
                    length = payload_length(message)
                payload_lengths.append(length if message_id is None else -1)
                tokens = length // per_token or 1  # max(1, ...) without a call
            elif text_per_token:
                tokens = -(-len(text) // text_per_token) + overhead
            else:
                tokens = count_message(message)
            size = len(text) if ascii_text else len(text.encode("utf-8"))  # ASCII: 1 byte per char
            all_messages.append(message)
            token_list.append(tokens)
            total_tokens += tokens
            total_bytes += size
            tail = state.reasoning_tail
            if tail:
                state.reasoning_tail = []  # any message ends the reasoning tail, or absorbs it
            role = message.role
            open_group = state.open_group
            call_ids: list[str] | None = None
            props = message.additional_properties
            if props and isinstance(props.get(SUMMARY_PROPERTY), list):
                kind = _SUMMARY
            elif role == "system":
                kind = _SYSTEM
            elif plain and (role != "tool" or open_group is None):
                kind = role_kinds[role]
            elif type(only) is FunctionCallContent and not tail and role == "assistant":
                kind, call_ids = _TOOL, [only.call_id]  # one call: a new tool-call group
            elif many_calls and not tail and role == "assistant":  # parallel calls: the same
                kind, call_ids = _TOOL, list(map(_CALL_ID_OF, contents))
            else:
                owner = None
                if plain:  # a tool-role text right after an open group: it joins by adjacency
                    owner = open_group
                elif type(only) is FunctionResultContent:
                    result_id = only.call_id
                    pending = calls.get(result_id)
                    paired = pending[0] if pending is not None and len(pending) == 1 else None
                    adjacent = open_group if role == "tool" else None
                    if paired is None or adjacent is None or paired is adjacent:
                        owner = paired or adjacent
                    if owner is not None and paired is not None:
                        del calls[result_id]  # the declaration is answered: no longer pending
                        if owner.unanswered:
                            owner.unanswered.discard(result_id)
                if owner is None:  # parallel calls, reasoning, merges, unknown results, ...
                    _append_structured(state, message, position, tokens, size, tail)
                    turn = len(turn_live) - 1 if turn_live else None
                    continue
                # -- it joins its group (as _add_to would), counted inline --
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
                if role == "tool":
                    state.open_group, state.open_after_call = owner, False
                else:
                    state.open_group = None
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
            if call_ids is None:
                group.call_ids = ()
                group.unanswered = None
                if kind is _TOOL:  # a tool-role text with nothing open: it opens its own
                    state.open_group, state.open_after_call = group, False
                else:
                    state.open_group = None
            else:
                group.call_ids = call_ids
                group.unanswered = set(call_ids)
                for call_id in call_ids:  # each pending (as _add_calls records them)
                    pending = calls.get(call_id)
                    if pending is None:
                        calls[call_id] = [group]
                    elif pending[-1] is not group:  # an id made twice in the message is listed once
                        pending.append(group)
                state.open_group, state.open_after_call = group, True
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
        state.total_tokens += total_tokens + plain_tokens
        state.total_bytes += total_bytes + plain_bytes
        state.included_group_count += made
        state.included_message_count += made + joined
        state.included_token_count += tokens_made + plain_tokens
        state.included_byte_count += bytes_made + plain_bytes
        state.included_tool_group_count += tool_groups_made


def _append_structured(
    state: IndexState, message: Message, position: int, tokens: int, size: int, tail: list[MessageGroup]
) -> None:
    """Group a message that the main loop does not handle inline (``tail``: the reasoning-only
    groups just before it)."""
    calls, results, reasoning_only = _classify(message.contents)
    role = message.role
    open_group = state.open_group
    if calls or results:
        group = _place_tool_message(state, message, calls, results, tail, position, tokens, size)
        if calls:
            state.open_group, state.open_after_call = group, True
        elif role == "tool":
            state.open_group, state.open_after_call = group, False
        else:
            state.open_group = None
        return
    if open_group is not None and (
        role == "tool" or (reasoning_only and role == "assistant" and state.open_after_call)
    ):
        # Adjacency: reasoning right after a call, and tool messages, join the open group.
        _add_to(state, open_group, position, tokens, size)
        if role == "tool":
            state.open_after_call = False
        return
    kind = _ROLE_KINDS[role]
    group = _new_group(state, kind, position, tokens, size)
    state.open_group = group if kind is _TOOL else None
    state.open_after_call = False
    if reasoning_only and kind is _TEXT:  # provisional: a tool-call message that follows absorbs it
        tail.append(group)
        state.reasoning_tail = tail


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
    message: Message,
    calls: list[FunctionCallContent],
    results: list[FunctionResultContent],
    tail: list[MessageGroup],
    position: int,
    tokens: int,
    size: int,
) -> MessageGroup:
    """Group a message with calls and/or results: it joins the open group (a tool-role message)
    and the group of every call it answers unambiguously, merging them; a call message that joins
    none starts its group (absorbing the reasoning before it)."""
    targets: list[MessageGroup] = []
    if message.role == "tool" and state.open_group is not None:
        targets.append(state.open_group)
    own = {call.call_id for call in calls}
    answered: list[str] = []
    pending_calls = state.calls
    for result in results:
        call_id = result.call_id
        if call_id in own:
            continue  # answered in this very message
        pending = pending_calls.get(call_id)
        if pending is not None and len(pending) == 1:
            owner = pending[0]
            del pending_calls[call_id]
            answered.append(call_id)
            if all(owner is not t for t in targets):
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
        _add_calls(state, group, [call for call in calls if not _answers(results, call.call_id)])
    if group.unanswered:
        for call_id in answered:
            group.unanswered.discard(call_id)
        for result in results:
            group.unanswered.discard(result.call_id)
    return group


def _answers(results: list[FunctionResultContent], call_id: str) -> bool:
    return any(result.call_id == call_id for result in results)


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
    """Record ``calls`` as made in ``group``, each pending until a result pairs with it."""
    call_ids = group.call_ids if isinstance(group.call_ids, list) else list(group.call_ids)
    unanswered: set[str] = group.unanswered if group.unanswered is not None else set()
    pending_calls = state.calls
    for call in calls:
        pending = pending_calls.get(call.call_id)
        if pending is None:
            pending_calls[call.call_id] = [group]
        elif all(g is not group for g in pending):
            pending.append(group)
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
    pending_calls = state.calls
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
            pending = pending_calls.get(call_id)
            if pending is not None:
                pending_calls[call_id] = list(dict.fromkeys(keep if g is other else g for g in pending))
        keep.call_ids = [*keep.call_ids, *other.call_ids]
        if other.unanswered:
            keep.unanswered = other.unanswered.union(keep.unanswered or ())
        if state.open_group is other:
            state.open_group = keep
    positions.sort()
    keep.first_index = positions[0]
    keep.later_indices = positions[1:] or None
    state.head = state.tool_head = 0  # removals shifted the lists under the cursors
    state.layout += 1
    state.tally(keep, 1)
    return keep
