"""Grouping: the units compaction keeps or removes, and the rules that form them from messages.

A :class:`MessageIndex` is a structured view of a flat message list. It puts every message in
exactly one :class:`MessageGroup` and every group after the first user message in a *turn*:

* ``system``: one system message (each system message is its own group; strategies keep them).
* ``user``: one user message; it starts a new turn.
* ``assistant_text``: one assistant message without tool calls.
* ``tool_call``: an assistant message with function calls plus every message carrying a result
  for one of those calls, kept together because sending a call without its result (or the reverse)
  is an API error. Results join the group by call id, also when other messages come between.
  Reasoning-only assistant messages (all contents are reasoning) directly before the call message
  join the group too. A message whose results answer calls of several groups merges those groups.
  Results that answer no known call, and tool-role messages without results, form a ``tool_call``
  group of their own.
* ``summary``: a message marked as a summary (see :data:`SUMMARY_PROPERTY`), whatever its role.

Rules are applied in that order of precedence: the summary mark, then the system role, then
function calls/results, then the role.

**Turns.** A turn is a user message and everything up to the next user message; turn ``k`` is the
``k``-th user message (from 0). Groups before the first user message have no turn (``None``).
A tool-call group belongs to the turn of its first message.

**Incremental.** :func:`append_messages` (the work of :meth:`MessageIndex.append
<agentkeep.compaction.MessageIndex.append>`) groups and counts only the new messages: old messages
are never regrouped or recounted, and a tool-call group whose results arrive in a later append is
completed then.

What lives here: :class:`MessageGroupKind`, :class:`MessageGroup` (one group; its state belongs to
the index, which keeps it consistent with its totals), the **summary mark**
(:data:`SUMMARY_PROPERTY`, :func:`is_summary_message`, :func:`summarized_message_ids`: a message
lists the ``message_id`` of every message it summarizes), and :func:`append_messages`. Everything
public is re-exported by :mod:`agentkeep.compaction.groups` and by the package.
"""

# The index and its groups are one unit: MessageIndex and append_messages maintain the groups'
# private state, and append_messages the index's.
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from enum import StrEnum
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, cast

from ..contents import FunctionCallContent, FunctionResultContent, TextContent, TextReasoningContent
from ..messages import Message
from .tokenizers import MESSAGE_OVERHEAD_TOKENS, CharacterEstimatorTokenizer, message_token_text

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .groups import MessageIndex

__all__ = [
    "SUMMARY_PROPERTY",
    "MessageGroup",
    "MessageGroupKind",
    "is_summary_message",
    "summarized_message_ids",
]

SUMMARY_PROPERTY: Final[str] = "agentkeep.summary"
"""The ``additional_properties`` key that marks a message as a summary.

Its value is the list of ``message_id`` strings the summary replaces, e.g.
``Message("assistant", "Earlier: ...", additional_properties={"agentkeep.summary": ["id1", "id2"]})``.
A message carrying the key (with a list value) forms a ``summary`` group.
"""


def is_summary_message(message: Message) -> bool:
    """Whether ``message`` is marked as a summary (:data:`SUMMARY_PROPERTY` holds a list)."""
    props = message.additional_properties
    return props is not None and isinstance(props.get(SUMMARY_PROPERTY), list)


def summarized_message_ids(message: Message) -> list[str]:
    """The ids of the messages the summary ``message`` replaces (``[]`` if it is no summary)."""
    props = message.additional_properties
    ids = props.get(SUMMARY_PROPERTY) if props is not None else None
    if not isinstance(ids, list):
        return []
    return [item for item in cast("list[Any]", ids) if isinstance(item, str)]


class MessageGroupKind(StrEnum):
    """What a :class:`MessageGroup` holds."""

    SYSTEM = "system"
    """A system message; compaction always keeps it."""
    USER = "user"
    """A user message; it starts a turn."""
    ASSISTANT_TEXT = "assistant_text"
    """An assistant message without tool calls."""
    TOOL_CALL = "tool_call"
    """An assistant message with tool calls and all of their results (atomic)."""
    SUMMARY = "summary"
    """A summary made by summarization, replacing older messages."""


class MessageGroup:
    """Messages that compaction keeps or removes together. Made and updated by a :class:`MessageIndex`.

    Counts and the excluded flag are read-only here: change them through the index
    (:meth:`MessageIndex.exclude`, :meth:`MessageIndex.include`) so its totals stay right.
    """

    __slots__ = (
        "_byte_count",
        "_call_ids",
        "_excluded",
        "_index",
        "_indices",
        "_kind",
        "_order",
        "_pending",
        "_token_count",
        "_turn",
    )

    def __init__(self, index: MessageIndex, kind: MessageGroupKind, turn: int | None, order: int = 0) -> None:
        self._index = index
        self._kind = kind
        self._turn = turn
        self._order = order  # logical position: first message, or the anchor of an inserted summary
        # A one-message group that cannot grow holds its position as a bare int until a list is
        # asked for: a list per group nearly doubles the objects a cold build hands the garbage
        # collector, whose passes over a 100k-message heap cost as much as the build itself.
        self._indices: list[int] | int = []
        self._token_count = 0
        self._byte_count = 0
        self._excluded = False
        self._call_ids: list[str] | None = None  # made on the first call: most groups have none
        self._pending: set[str] | None = None

    @property
    def kind(self) -> MessageGroupKind:
        """What the group holds."""
        return self._kind

    @property
    def indices(self) -> Sequence[int]:
        """Positions of the group's messages in :attr:`MessageIndex.messages`, ascending."""
        return self._index_list()

    @property
    def messages(self) -> list[Message]:
        """The group's messages, in their original order."""
        messages = self._index.messages
        indices = self._indices
        return [messages[indices]] if isinstance(indices, int) else [messages[i] for i in indices]

    @property
    def first_index(self) -> int:
        """Position of the group's first message (groups are ordered by it)."""
        indices = self._indices
        return indices if isinstance(indices, int) else indices[0]

    @property
    def order(self) -> int:
        """Logical position: the first message's position, or for a summary put in by
        :meth:`MessageIndex.replace`, that of the first message it replaces. Groups sort by it."""
        return self._order

    @property
    def message_count(self) -> int:
        """Number of messages in the group."""
        indices = self._indices
        return 1 if isinstance(indices, int) else len(indices)

    @property
    def token_count(self) -> int:
        """Tokens of the group's messages (see :func:`~agentkeep.compaction.count_message_tokens`)."""
        return self._token_count

    @property
    def byte_count(self) -> int:
        """UTF-8 bytes of the group's counted text (see :func:`~agentkeep.compaction.message_token_text`)."""
        return self._byte_count

    @property
    def excluded(self) -> bool:
        """Whether compaction has excluded the group from what is sent to the model."""
        return self._excluded

    @property
    def turn(self) -> int | None:
        """The turn the group starts in (0-based), ``None`` before the first user message."""
        return self._turn

    @property
    def call_ids(self) -> Sequence[str]:
        """Ids of the function calls made in the group (``tool_call`` groups only)."""
        return self._call_ids or ()

    @property
    def is_complete(self) -> bool:
        """Whether every function call in the group has a result (always true for other kinds)."""
        return not self._pending

    def _index_list(self) -> list[int]:
        """The positions as a list, made once (and then kept and updated) for a bare-int group."""
        indices = self._indices
        if isinstance(indices, int):
            indices = self._indices = [indices]
        return indices

    def __repr__(self) -> str:
        flag = ", excluded" if self._excluded else ""
        return (
            f"MessageGroup({self._kind.value}, indices={self._index_list()}, turn={self._turn}, "
            f"tokens={self._token_count}{flag})"
        )


_order_key = attrgetter("_order")
"""Sort and search key of groups: their logical order (a C-level getter: bisecting calls it often)."""


# -- appending: the grouping rules applied to new messages ---------------------------------------


def append_messages(index: MessageIndex, messages: Iterable[Message]) -> None:
    """The work of :meth:`MessageIndex.append`: add ``messages`` to ``index``, grouping and counting
    only them.

    A pending tool-call group takes the results that arrive now; a reasoning-only message at
    the end of the previous append joins the tool-call group that now follows it.
    """
    # This loop is the whole cold build (a 100k-message history goes through it at once), so it
    # is written for speed: per-message helpers are inlined, state lives in locals, and the
    # common case (a message that forms a group of its own) creates its group directly.
    # Additive totals are collected in locals and added once at the end (in ``finally``, so
    # they stay exact if the tokenizer raises): the rare paths (tool-call messages, absorbing,
    # merging) add and subtract on ``index`` meanwhile, and sums commute. The per-turn counts
    # are not sums (a turn is included when its count leaves 0), so they are kept up to date.
    tokenizer = index._tokenizer
    count_tokens = tokenizer.count_tokens
    # The default estimator is ceil(len / chars_per_token): computed here instead of a method
    # call per message. Only for the exact class; a subclass may count differently.
    per_token = tokenizer.chars_per_token if type(tokenizer) is CharacterEstimatorTokenizer else 0
    overhead = MESSAGE_OVERHEAD_TOKENS
    all_messages = index._messages
    token_list = index._tokens
    group_of = index._group_of
    groups = index._groups
    turn_live = index._turn_live
    calls_by_id = index._calls
    tool_groups = index._tool_groups
    call_ids: list[str] | None = None  # the calls of a new tool-call group, else None
    new_group = MessageGroup.__new__
    summary_kind = MessageGroupKind.SUMMARY
    system_kind = MessageGroupKind.SYSTEM
    user_kind = MessageGroupKind.USER
    text_kind = MessageGroupKind.ASSISTANT_TEXT
    tool_kind = MessageGroupKind.TOOL_CALL
    turn: int | None = len(turn_live) - 1 if turn_live else None
    total_tokens = total_bytes = 0
    new_groups = new_messages = new_tokens = new_bytes = new_tool_groups = 0
    try:
        for message in messages:
            # -- counting (as message_token_text, with its one-text fast path inlined) --
            contents = message.contents
            plain = len(contents) == 1 and type(contents[0]) is TextContent
            text = cast(TextContent, contents[0]).text if plain else message_token_text(message)
            tokens = (-(-len(text) // per_token) if per_token else count_tokens(text)) + overhead
            # ASCII text is one byte per character: skip building the encoded copy.
            size = len(text) if text.isascii() else len(text.encode("utf-8"))
            position = len(all_messages)
            all_messages.append(message)
            token_list.append(tokens)
            total_tokens += tokens
            total_bytes += size

            # -- grouping (precedence: summary mark, system role, calls/results, role) --
            reasoning_tail = index._reasoning_tail
            if reasoning_tail:
                index._reasoning_tail = []
            props = message.additional_properties
            role = message.role
            provisional = False
            if props is not None and isinstance(props.get(SUMMARY_PROPERTY), list):
                kind = summary_kind
            elif role == "system":
                kind = system_kind
            elif plain:  # one text content: neither calls, results nor reasoning
                kind = user_kind if role == "user" else text_kind if role == "assistant" else tool_kind
            else:
                # One pass over the contents classifies calls, results and reasoning-only.
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
                if calls and not results and not reasoning_tail:
                    # The usual call message: a new tool-call group, made below.
                    call_ids = [c.call_id for c in calls]
                    kind = tool_kind
                elif results and not calls and len(results) == 1:
                    # The usual result message: it joins the group of its call, if known.
                    owner = calls_by_id.get(results[0].call_id)
                    if owner is None:
                        _place_tool_message(index, calls, results, reasoning_tail, position, tokens, size)
                        continue
                    owner._index_list().append(position)
                    owner._token_count += tokens
                    owner._byte_count += size
                    group_of.append(owner)
                    if not owner._excluded:
                        new_messages += 1
                        new_tokens += tokens
                        new_bytes += size
                    if owner._pending:
                        owner._pending.discard(results[0].call_id)
                    continue
                elif calls or results:
                    _place_tool_message(index, calls, results, reasoning_tail, position, tokens, size)
                    continue
                else:
                    kind = user_kind if role == "user" else text_kind if role == "assistant" else tool_kind
                # A reasoning-only assistant group is provisional: a tool-call message that
                # follows absorbs it (see _absorb).
                provisional = reasoning_only and kind is text_kind

            # -- a new group of this one message (the common case), made and counted inline --
            if kind is user_kind:
                turn = len(turn_live)
                turn_live.append(0)
            group = new_group(MessageGroup)
            group._index = index
            group._kind = kind
            group._turn = turn
            group._order = position
            # Tool-call groups grow as results arrive; other kinds never do.
            group._indices = [position] if kind is tool_kind else position
            group._token_count = tokens
            group._byte_count = size
            group._excluded = False
            if call_ids is None:
                group._call_ids = None
                group._pending = None
            else:
                group._call_ids = call_ids
                group._pending = set(call_ids)
                for call_id in call_ids:
                    calls_by_id[call_id] = group
                call_ids = None
            groups.append(group)
            group_of.append(group)
            new_groups += 1
            new_messages += 1
            new_tokens += tokens
            new_bytes += size
            if kind is tool_kind:
                new_tool_groups += 1
                tool_groups.append(group)
            if turn is not None and kind is not system_kind:
                live = turn_live[turn] + 1
                turn_live[turn] = live
                if live == 1:
                    index._included_turns += 1
            if provisional:
                reasoning_tail.append(group)
                index._reasoning_tail = reasoning_tail
    finally:
        index._total_tokens += total_tokens
        index._total_bytes += total_bytes
        index._included_groups += new_groups
        index._included_messages += new_messages
        index._included_tokens += new_tokens
        index._included_bytes += new_bytes
        index._included_tool_groups += new_tool_groups


def _place_tool_message(
    index: MessageIndex,
    calls: list[FunctionCallContent],
    results: list[FunctionResultContent],
    reasoning_tail: list[MessageGroup],
    position: int,
    tokens: int,
    size: int,
) -> None:
    targets: list[MessageGroup] = []
    for result in results:
        owner = index._calls.get(result.call_id)
        if owner is not None and all(owner is not t for t in targets):
            targets.append(owner)
    if targets:
        group = _merge(index, targets) if len(targets) > 1 else targets[0]
    elif calls and reasoning_tail:
        group = _absorb(index, reasoning_tail)
    else:
        group = _new_group(index, MessageGroupKind.TOOL_CALL, position)
    _add_to(index, group, position, tokens, size)
    if calls:
        call_ids: list[str] = group._call_ids if group._call_ids is not None else []
        pending: set[str] = group._pending if group._pending is not None else set()
        group._call_ids, group._pending = call_ids, pending
        for call in calls:
            index._calls[call.call_id] = group
            call_ids.append(call.call_id)
            pending.add(call.call_id)
    if group._pending:
        for result in results:
            group._pending.discard(result.call_id)


def _new_group(index: MessageIndex, kind: MessageGroupKind, position: int) -> MessageGroup:
    turn = len(index._turn_live) - 1
    group = MessageGroup(index, kind, turn if turn >= 0 else None, position)
    index._groups.append(group)
    if kind is MessageGroupKind.TOOL_CALL:
        index._tool_groups.append(group)
    index._tally(group, 1)
    return group


def _add_to(index: MessageIndex, group: MessageGroup, position: int, tokens: int, size: int) -> None:
    group._index_list().append(position)
    group._token_count += tokens
    group._byte_count += size
    index._group_of.append(group)
    if not group._excluded:
        index._included_messages += 1
        index._included_tokens += tokens
        index._included_bytes += size


def _absorb(index: MessageIndex, reasoning_tail: list[MessageGroup]) -> MessageGroup:
    """Turn the reasoning-only groups at the end of the list into the start of a tool-call group.

    They are the last groups (any other message ends the tail), so this is O(len(tail)). An
    exclusion of those provisional groups is dropped: the tool-call group starts included.
    """
    first = reasoning_tail[0]
    group = MessageGroup(index, MessageGroupKind.TOOL_CALL, first._turn, first._order)
    for old in reasoning_tail:
        index._tally(old, -1)
        old._excluded = True  # contributes nothing any more
        index._groups.pop()
        for i in old._index_list():
            group._index_list().append(i)
            index._group_of[i] = group
        group._token_count += old._token_count
        group._byte_count += old._byte_count
    index._groups.append(group)
    index._tool_groups.append(group)
    index._head = min(index._head, len(index._groups) - 1)
    index._layout += 1
    index._tally(group, 1)
    return group


def _merge(index: MessageIndex, targets: list[MessageGroup]) -> MessageGroup:
    """Merge tool-call groups that one result message ties together into the earliest of them.

    Rare (parallel calls normally share one assistant message), so removing the later groups
    from the middle of the list may cost O(groups). The merged group keeps the earliest
    group's excluded flag. A later group that a summary replaced has left the list already; its
    messages join the merged group all the same (a result must not be sent without its call).
    """
    targets.sort(key=lambda g: g.first_index)
    keep = targets[0]
    index._tally(keep, -1)
    indices = keep._index_list()
    for other in targets[1:]:
        index._tally(other, -1)
        other._excluded = True
        with suppress(ValueError):  # raised when a summary replaced it: it is not listed
            index._groups.remove(other)
        index._tool_groups.remove(other)
        for i in other._index_list():
            index._group_of[i] = keep
        indices.extend(other._index_list())
        keep._token_count += other._token_count
        keep._byte_count += other._byte_count
        if other._call_ids:
            for call_id in other._call_ids:
                if index._calls.get(call_id) is other:
                    index._calls[call_id] = keep
            keep._call_ids = [*(keep._call_ids or ()), *other._call_ids]
        if other._pending:
            keep._pending = other._pending.union(keep._pending or ())
        other._indices = []
    indices.sort()
    index._head = index._tool_head = 0  # removals shifted the lists under the cursors
    index._layout += 1
    index._tally(keep, 1)
    return keep
