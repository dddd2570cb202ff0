"""Message groups: the atomic units compaction keeps or removes, and the index that maintains them.

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

**Incremental and O(1).** :meth:`MessageIndex.append` groups and counts only the new messages;
old messages are never regrouped or recounted (their token counts are cached). A tool-call group
whose results arrive in a later append is completed then. The included (non-excluded) message,
group, turn, token and tool-call-group counts are kept up to date as groups are excluded and
included, so triggers (:mod:`agentkeep.compaction.triggers`) read them in O(1).
"""

# MessageIndex maintains its groups' private state: the two classes are one unit.
# pyright: reportPrivateUsage=false

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from enum import StrEnum
from typing import Any, Final, cast

from ..contents import FunctionCallContent, FunctionResultContent, TextContent, TextReasoningContent
from ..messages import Message, new_message_id
from .tokenizers import (
    MESSAGE_OVERHEAD_TOKENS,
    CharacterEstimatorTokenizer,
    Tokenizer,
    count_message_tokens,
    message_token_text,
)

__all__ = [
    "SUMMARY_PROPERTY",
    "MessageGroup",
    "MessageGroupKind",
    "MessageIndex",
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


def _order_key(group: MessageGroup) -> int:
    return group._order


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
        return [messages[i] for i in self._index_list()]

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


class MessageIndex:
    """Groups, turns and counts over a message list, updated incrementally as messages are appended.

    Args:
        messages: The initial messages (kept by reference, in order).
        tokenizer: Counts each message's tokens once; default :class:`CharacterEstimatorTokenizer`.

    Example:
        >>> index = MessageIndex([Message("user", "hi"), Message("assistant", "hello")])
        >>> [g.kind.value for g in index.groups]
        ['user', 'assistant_text']
    """

    __slots__ = (
        "_anchor_of",
        "_bytes",
        "_calls",
        "_group_of",
        "_groups",
        "_head",
        "_included_bytes",
        "_included_groups",
        "_included_messages",
        "_included_tokens",
        "_included_tool_groups",
        "_included_turns",
        "_inserted",
        "_journal",
        "_messages",
        "_reasoning_tail",
        "_tokenizer",
        "_tokens",
        "_tool_groups",
        "_tool_head",
        "_total_bytes",
        "_total_tokens",
        "_turn_live",
    )

    def __init__(self, messages: Iterable[Message] = (), *, tokenizer: Tokenizer | None = None) -> None:
        self._tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
        self._messages: list[Message] = []
        self._tokens: list[int] = []
        self._bytes: list[int] = []
        self._group_of: list[MessageGroup] = []
        self._groups: list[MessageGroup] = []
        self._calls: dict[str, MessageGroup] = {}
        self._reasoning_tail: list[MessageGroup] = []
        self._turn_live: list[int] = []  # per turn: included non-system groups
        self._tool_groups: list[MessageGroup] = []  # tool-call groups, oldest first
        # Cursors: every group before them (in _groups / _tool_groups) is excluded. They only move
        # forward while groups are excluded, so strategies skip what earlier turns removed.
        self._head = 0
        self._tool_head = 0
        # Summaries put in by replace(): anchor position -> their positions, and back.
        self._inserted: dict[int, list[int]] = {}
        self._anchor_of: dict[int, int] = {}
        # Since track_changes(): the groups excluded, and the summaries replace() made.
        self._journal: tuple[list[MessageGroup], list[MessageGroup]] | None = None
        self._total_tokens = 0
        self._total_bytes = 0
        self._included_messages = 0
        self._included_groups = 0
        self._included_turns = 0
        self._included_tokens = 0
        self._included_bytes = 0
        self._included_tool_groups = 0
        self.append(messages)

    # -- reading ------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer that counted the messages."""
        return self._tokenizer

    @property
    def messages(self) -> Sequence[Message]:
        """Every message, excluded or not, in original order."""
        return self._messages

    @property
    def groups(self) -> Sequence[MessageGroup]:
        """The groups in logical order (by :attr:`MessageGroup.order`, i.e. by first message).

        A summary put in by :meth:`replace` stands where the first group it replaced stood; the
        replaced groups are no longer listed (:meth:`group_of` still finds them, excluded).
        """
        return self._groups

    def group_of(self, position: int) -> MessageGroup:
        """The group holding the message at ``position``."""
        return self._group_of[position]

    def message_token_count(self, position: int) -> int:
        """The cached token count of the message at ``position``."""
        return self._tokens[position]

    def included_messages(self) -> list[Message]:
        """The projection sent to the model: the messages of included groups in original order, each
        summary put in by :meth:`replace` standing where the first message it replaces was."""
        if not self._inserted:
            return [m for m, g in zip(self._messages, self._group_of, strict=True) if not g._excluded]
        out: list[Message] = []
        messages, group_of = self._messages, self._group_of
        inserted, anchor_of = self._inserted, self._anchor_of
        for position, (message, group) in enumerate(zip(messages, group_of, strict=True)):
            if position in anchor_of:
                continue  # emitted at its anchor
            summaries = inserted.get(position)
            if summaries is not None:
                out.extend(messages[s] for s in summaries if not group_of[s]._excluded)
            if not group._excluded:
                out.append(message)
        return out

    def is_inserted(self, position: int) -> bool:
        """Whether the message at ``position`` is a summary put in by :meth:`replace`."""
        return position in self._anchor_of

    @property
    def message_count(self) -> int:
        """All messages."""
        return len(self._messages)

    @property
    def group_count(self) -> int:
        """All groups."""
        return len(self._groups)

    @property
    def turn_count(self) -> int:
        """All turns (user messages that are not summaries)."""
        return len(self._turn_live)

    @property
    def token_count(self) -> int:
        """Tokens of all messages."""
        return self._total_tokens

    @property
    def byte_count(self) -> int:
        """Counted UTF-8 bytes of all messages."""
        return self._total_bytes

    @property
    def included_message_count(self) -> int:
        """Messages in non-excluded groups."""
        return self._included_messages

    @property
    def included_group_count(self) -> int:
        """Non-excluded groups."""
        return self._included_groups

    @property
    def included_turn_count(self) -> int:
        """Turns that still have a non-excluded group other than a system message."""
        return self._included_turns

    @property
    def included_token_count(self) -> int:
        """Tokens of the messages in non-excluded groups."""
        return self._included_tokens

    @property
    def included_byte_count(self) -> int:
        """Counted bytes of the messages in non-excluded groups."""
        return self._included_bytes

    @property
    def included_tool_call_group_count(self) -> int:
        """Non-excluded ``tool_call`` groups."""
        return self._included_tool_groups

    # -- excluding ----------------------------------------------------------------------------
    def exclude(self, group: MessageGroup) -> None:
        """Leave ``group`` out of :meth:`included_messages` and the included counts (idempotent).

        Raises:
            ValueError: ``group`` belongs to another index, or was merged into another group.
        """
        self._check_owned(group)
        if not group._excluded:
            self._leave(group)
            group._excluded = True
            if self._journal is not None:
                self._journal[0].append(group)

    def include(self, group: MessageGroup) -> None:
        """Undo :meth:`exclude` (idempotent).

        Raises:
            ValueError: ``group`` belongs to another index, was merged into another group, or was
                replaced by a summary.
        """
        self._check_owned(group)
        if group._excluded:
            groups = self._groups
            slot = bisect_left(groups, group._order, key=_order_key)
            if slot >= len(groups) or groups[slot] is not group:
                raise ValueError(f"{group!r} was replaced by a summary; include the summary's groups instead")
            group._excluded = False
            self._enter(group)
            self._head = self._tool_head = 0  # the group may lie before a cursor

    # -- replacing ----------------------------------------------------------------------------
    def replace(self, groups: Sequence[MessageGroup], summary: Message) -> MessageGroup:
        """Exclude ``groups`` and put ``summary`` in their place, as one ``summary`` group.

        The summary takes the logical place (and turn) of the oldest of ``groups``: it sorts there
        in :attr:`groups` and stands there in :meth:`included_messages`, while its message is
        appended to :attr:`messages` like any other (positions never change). ``summary`` is marked
        with :data:`SUMMARY_PROPERTY` listing the ``message_id`` of every replaced message (in
        original order); a replaced message without an id gets one. Cost: the summary's token
        count, a binary search and one list insert.

        Args:
            groups: Included groups of this index to replace (any order).
            summary: The message that stands for them (changed in place: the mark is added).

        Returns:
            The new summary group.

        Raises:
            ValueError: ``groups`` is empty, or holds a group of another index or an excluded one.
        """
        if not groups:
            raise ValueError("replace() needs at least one group")
        for group in groups:
            self._check_owned(group)
            if group._excluded:
                raise ValueError(f"{group!r} is excluded already (or replaced by a summary)")
        ordered = sorted(groups, key=_order_key)
        if self._reasoning_tail and any(g in self._reasoning_tail for g in ordered):
            self._reasoning_tail = []  # replaced reasoning no longer joins a following call
        replaced: list[int] = sorted(i for g in ordered for i in g._index_list())
        ids: list[str] = []
        for position in replaced:
            message = self._messages[position]
            if message.message_id is None:
                message.message_id = new_message_id()
            ids.append(message.message_id)
        summary.additional_properties = {**(summary.additional_properties or {}), SUMMARY_PROPERTY: ids}
        first = ordered[0]
        slot = bisect_left(self._groups, first._order, key=_order_key)
        for group in ordered:
            self.exclude(group)
        position = len(self._messages)
        tokens = count_message_tokens(summary, tokenizer=self._tokenizer)
        size = len(message_token_text(summary).encode("utf-8"))
        self._messages.append(summary)
        self._tokens.append(tokens)
        self._bytes.append(size)
        self._total_tokens += tokens
        self._total_bytes += size
        group = MessageGroup(self, MessageGroupKind.SUMMARY, first._turn, first._order)
        group._indices = position
        group._token_count = tokens
        group._byte_count = size
        self._group_of.append(group)
        # The summary takes the first group's slot (O(1)); the others leave the list.
        self._groups[slot] = group
        if len(ordered) > 1:
            gone = {id(g) for g in ordered[1:]}
            self._groups[slot + 1 :] = [g for g in self._groups[slot + 1 :] if id(g) not in gone]
        self._head = min(self._head, slot)
        self._inserted.setdefault(first._order, []).append(position)
        self._anchor_of[position] = first._order
        self._enter(group)
        if self._journal is not None:
            self._journal[1].append(group)
        return group

    # -- recording ----------------------------------------------------------------------------
    def track_changes(self) -> None:
        """Start recording what compaction does, for :meth:`changes` (restarts a recording)."""
        self._journal = ([], [])

    def changes(self) -> tuple[list[str], list[tuple[Message, list[str]]]]:
        """What compaction did since :meth:`track_changes`, in the form storage records it.

        Cost: the groups excluded or replaced since then, not the history.

        Returns:
            ``(excluded, summaries)``: the ``message_id`` of every message that was included and is
            now excluded (summaries made and dropped again within the recording are left out), and
            each summary made since that is still included, with the ids it replaces.

        Raises:
            ValueError: :meth:`track_changes` was not called.
        """
        journal = self._journal
        if journal is None:
            raise ValueError("call track_changes() before changes()")
        left, made = journal
        made_ids = {id(g) for g in made}
        excluded: list[str] = []
        seen: set[int] = set()
        for group in left:
            if id(group) in seen or id(group) in made_ids or not group._excluded:
                continue  # a summary made and dropped again was never stored
            seen.add(id(group))
            for position in group._index_list():
                message_id = self._messages[position].message_id
                if message_id is not None:
                    excluded.append(message_id)
        summaries: list[tuple[Message, list[str]]] = []
        for group in made:
            if not group._excluded:
                message = self._messages[group.first_index]
                summaries.append((message, summarized_message_ids(message)))
        return excluded, summaries

    # -- walking ------------------------------------------------------------------------------
    def oldest_included(
        self, *, tool_calls_only: bool = False, include_system: bool = False
    ) -> Iterator[MessageGroup]:
        """Included non-system groups oldest first (logical order), starting past the excluded prefix.

        The walk tolerates what strategies do meanwhile: excluding the group just yielded, or
        :meth:`replace` putting a summary in its place (the summary is not yielded). Cost: the
        groups yielded plus the excluded ones skipped, and those are skipped once: the cursor
        stays past them for later walks.

        Args:
            tool_calls_only: Walk only the ``tool_call`` groups.
            include_system: Yield system groups too (this walk starts at the first group).
        """
        groups = self._tool_groups if tool_calls_only else self._groups
        i = 0 if include_system else self._tool_head if tool_calls_only else self._head
        prefix = not include_system  # inside the excluded (or system) prefix: move the cursor along
        system = MessageGroupKind.SYSTEM
        while i < len(groups):
            group = groups[i]
            if group._excluded or (group._kind is system and not include_system):
                i += 1
                if prefix:
                    self._set_head(tool_calls_only, i)
                continue
            prefix = False
            yield group
            if i < len(groups) and groups[i] is not group:  # a summary went in before it
                while i < len(groups) and groups[i] is not group:
                    i += 1
            i += 1

    def _set_head(self, tool_calls_only: bool, value: int) -> None:
        if tool_calls_only:
            self._tool_head = max(self._tool_head, value)
        else:
            self._head = max(self._head, value)

    def newest_included(self, count: int, *, tool_calls_only: bool = False) -> list[MessageGroup]:
        """The newest ``count`` included non-system groups (or tool-call groups), newest first.

        Cost: ``count`` plus the excluded and system groups passed on the way.
        """
        groups = self._tool_groups if tool_calls_only else self._groups
        found: list[MessageGroup] = []
        if count <= 0:
            return found
        system = MessageGroupKind.SYSTEM
        for i in range(len(groups) - 1, -1, -1):
            group = groups[i]
            if group._excluded or group._kind is system:
                continue
            found.append(group)
            if len(found) == count:
                break
        return found

    def _check_owned(self, group: MessageGroup) -> None:
        indices = group._indices
        if group._index is not self or indices == [] or self._group_of[group.first_index] is not group:
            raise ValueError(f"{group!r} is not a group of this index")

    # -- appending ----------------------------------------------------------------------------
    def append(self, messages: Iterable[Message]) -> None:
        """Add ``messages`` at the end, grouping and counting only them.

        A pending tool-call group takes the results that arrive now; a reasoning-only message at
        the end of the previous append joins the tool-call group that now follows it.
        """
        # This loop is the whole cold build (a 100k-message history goes through it at once), so it
        # is written for speed: per-message helpers are inlined, state lives in locals, and the
        # common case (a message that forms a group of its own) creates its group directly.
        # Additive totals are collected in locals and added once at the end (in ``finally``, so
        # they stay exact if the tokenizer raises): the rare paths (tool-call messages, absorbing,
        # merging) add and subtract on ``self`` meanwhile, and sums commute. The per-turn counts
        # are not sums (a turn is included when its count leaves 0), so they are kept up to date.
        tokenizer = self._tokenizer
        count_tokens = tokenizer.count_tokens
        # The default estimator is ceil(len / chars_per_token): computed here instead of a method
        # call per message. Only for the exact class; a subclass may count differently.
        per_token = tokenizer.chars_per_token if type(tokenizer) is CharacterEstimatorTokenizer else 0
        overhead = MESSAGE_OVERHEAD_TOKENS
        all_messages = self._messages
        token_list = self._tokens
        byte_list = self._bytes
        group_of = self._group_of
        groups = self._groups
        turn_live = self._turn_live
        calls_by_id = self._calls
        tool_groups = self._tool_groups
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
                byte_list.append(size)
                total_tokens += tokens
                total_bytes += size

                # -- grouping (precedence: summary mark, system role, calls/results, role) --
                reasoning_tail = self._reasoning_tail
                if reasoning_tail:
                    self._reasoning_tail = []
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
                            self._place_tool_message(calls, results, reasoning_tail, position, tokens, size)
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
                        self._place_tool_message(calls, results, reasoning_tail, position, tokens, size)
                        continue
                    else:
                        kind = (
                            user_kind if role == "user" else text_kind if role == "assistant" else tool_kind
                        )
                    # A reasoning-only assistant group is provisional: a tool-call message that
                    # follows absorbs it (see _absorb).
                    provisional = reasoning_only and kind is text_kind

                # -- a new group of this one message (the common case), made and counted inline --
                if kind is user_kind:
                    turn = len(turn_live)
                    turn_live.append(0)
                group = new_group(MessageGroup)
                group._index = self
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
                        self._included_turns += 1
                if provisional:
                    reasoning_tail.append(group)
                    self._reasoning_tail = reasoning_tail
        finally:
            self._total_tokens += total_tokens
            self._total_bytes += total_bytes
            self._included_groups += new_groups
            self._included_messages += new_messages
            self._included_tokens += new_tokens
            self._included_bytes += new_bytes
            self._included_tool_groups += new_tool_groups

    def _place_tool_message(
        self,
        calls: list[FunctionCallContent],
        results: list[FunctionResultContent],
        reasoning_tail: list[MessageGroup],
        position: int,
        tokens: int,
        size: int,
    ) -> None:
        targets: list[MessageGroup] = []
        for result in results:
            owner = self._calls.get(result.call_id)
            if owner is not None and all(owner is not t for t in targets):
                targets.append(owner)
        if targets:
            group = self._merge(targets) if len(targets) > 1 else targets[0]
        elif calls and reasoning_tail:
            group = self._absorb(reasoning_tail)
        else:
            group = self._new_group(MessageGroupKind.TOOL_CALL, position)
        self._add_to(group, position, tokens, size)
        if calls:
            call_ids: list[str] = group._call_ids if group._call_ids is not None else []
            pending: set[str] = group._pending if group._pending is not None else set()
            group._call_ids, group._pending = call_ids, pending
            for call in calls:
                self._calls[call.call_id] = group
                call_ids.append(call.call_id)
                pending.add(call.call_id)
        if group._pending:
            for result in results:
                group._pending.discard(result.call_id)

    def _new_group(self, kind: MessageGroupKind, position: int) -> MessageGroup:
        turn = len(self._turn_live) - 1
        group = MessageGroup(self, kind, turn if turn >= 0 else None, position)
        self._groups.append(group)
        if kind is MessageGroupKind.TOOL_CALL:
            self._tool_groups.append(group)
        self._enter(group)
        return group

    def _add_to(self, group: MessageGroup, position: int, tokens: int, size: int) -> None:
        group._index_list().append(position)
        group._token_count += tokens
        group._byte_count += size
        self._group_of.append(group)
        if not group._excluded:
            self._included_messages += 1
            self._included_tokens += tokens
            self._included_bytes += size

    def _absorb(self, reasoning_tail: list[MessageGroup]) -> MessageGroup:
        """Turn the reasoning-only groups at the end of the list into the start of a tool-call group.

        They are the last groups (any other message ends the tail), so this is O(len(tail)). An
        exclusion of those provisional groups is dropped: the tool-call group starts included.
        """
        first = reasoning_tail[0]
        group = MessageGroup(self, MessageGroupKind.TOOL_CALL, first._turn, first._order)
        for old in reasoning_tail:
            self._leave(old)
            old._excluded = True  # contributes nothing any more
            self._groups.pop()
            for i in old._index_list():
                group._index_list().append(i)
                self._group_of[i] = group
            group._token_count += old._token_count
            group._byte_count += old._byte_count
        self._groups.append(group)
        self._tool_groups.append(group)
        self._head = min(self._head, len(self._groups) - 1)
        self._enter(group)
        return group

    def _merge(self, targets: list[MessageGroup]) -> MessageGroup:
        """Merge tool-call groups that one result message ties together into the earliest of them.

        Rare (parallel calls normally share one assistant message), so removing the later groups
        from the middle of the list may cost O(groups). The merged group keeps the earliest
        group's excluded flag.
        """
        targets.sort(key=lambda g: g.first_index)
        keep = targets[0]
        self._leave(keep)
        indices = keep._index_list()
        for other in targets[1:]:
            self._leave(other)
            other._excluded = True
            self._groups.remove(other)
            self._tool_groups.remove(other)
            for i in other._index_list():
                self._group_of[i] = keep
            indices.extend(other._index_list())
            keep._token_count += other._token_count
            keep._byte_count += other._byte_count
            if other._call_ids:
                for call_id in other._call_ids:
                    if self._calls.get(call_id) is other:
                        self._calls[call_id] = keep
                keep._call_ids = [*(keep._call_ids or ()), *other._call_ids]
            if other._pending:
                keep._pending = other._pending.union(keep._pending or ())
            other._indices = []
        indices.sort()
        self._head = self._tool_head = 0  # removals shifted the lists under the cursors
        self._enter(keep)
        return keep

    # -- included totals ----------------------------------------------------------------------
    def _enter(self, group: MessageGroup) -> None:
        """Add an included ``group`` to the included totals."""
        if group._excluded:
            return
        self._included_groups += 1
        self._included_messages += group.message_count
        self._included_tokens += group._token_count
        self._included_bytes += group._byte_count
        kind = group._kind
        if kind is MessageGroupKind.TOOL_CALL:
            self._included_tool_groups += 1
        turn = group._turn
        if turn is not None and kind is not MessageGroupKind.SYSTEM:
            self._turn_live[turn] += 1
            if self._turn_live[turn] == 1:
                self._included_turns += 1

    def _leave(self, group: MessageGroup) -> None:
        """Take an included ``group`` out of the included totals."""
        if group._excluded:
            return
        self._included_groups -= 1
        self._included_messages -= group.message_count
        self._included_tokens -= group._token_count
        self._included_bytes -= group._byte_count
        kind = group._kind
        if kind is MessageGroupKind.TOOL_CALL:
            self._included_tool_groups -= 1
        turn = group._turn
        if turn is not None and kind is not MessageGroupKind.SYSTEM:
            self._turn_live[turn] -= 1
            if self._turn_live[turn] == 0:
                self._included_turns -= 1

    def __repr__(self) -> str:
        return (
            f"MessageIndex(messages={len(self._messages)}, groups={len(self._groups)}, "
            f"turns={len(self._turn_live)}, included_tokens={self._included_tokens})"
        )
