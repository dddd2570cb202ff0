"""The message index: groups, turns and included counts over a message list, kept up to date.

A :class:`MessageIndex` is a structured view of a flat message list: every message in exactly one
:class:`MessageGroup` (the unit compaction keeps or removes), every group after the first user
message in a turn. How messages form groups and turns is described in
:mod:`agentkeep.compaction.grouping`, which also holds :class:`MessageGroup`,
:class:`MessageGroupKind` and the summary mark (all re-exported here).

**Incremental and O(1).** :meth:`MessageIndex.append` groups and counts only the new messages
(their token counts are cached). The included (non-excluded) message, group, turn, token and
tool-call-group counts are kept up to date as groups are excluded and included, so triggers
(:mod:`agentkeep.compaction.triggers`) read them in O(1).

**What compaction does through it.** :meth:`~MessageIndex.exclude` (and
:meth:`~MessageIndex.exclude_many` for a run of groups) leaves groups out;
:meth:`~MessageIndex.replace` (and :meth:`~MessageIndex.replace_each`) puts a summary in the
place of groups; :meth:`~MessageIndex.included_messages` is what is sent, summaries at their
anchors. Strategies find their candidates with :meth:`~MessageIndex.oldest_included` and
:meth:`~MessageIndex.newest_included`, whose cursor stays past the excluded prefix, so compacting
after a turn costs about what the turn added. :meth:`~MessageIndex.track_changes` and
:meth:`~MessageIndex.changes` report what a compaction did, in the form storage records it.
"""

# MessageIndex maintains its groups' private state (see agentkeep.compaction.grouping).
# pyright: reportPrivateUsage=false

from __future__ import annotations

import os
import sys
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress
from typing import cast

from ..messages import Message
from .grouping import (
    SUMMARY_PROPERTY,
    MessageGroup,
    MessageGroupKind,
    _order_key,
    append_messages,
    is_summary_message,
    summarized_message_ids,
)
from .tokenizers import (
    MESSAGE_OVERHEAD_TOKENS,
    CharacterEstimatorTokenizer,
    Tokenizer,
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
        "_journal",
        "_layout",
        "_layout_seen",
        "_messages",
        "_pinned",
        "_pinned_upto",
        "_reasoning_tail",
        "_summaries",
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
        self._group_of: list[MessageGroup] = []
        self._groups: list[MessageGroup] = []
        self._calls: dict[str, MessageGroup] = {}
        self._reasoning_tail: list[MessageGroup] = []
        self._turn_live: list[int] = []  # per turn: included non-system groups
        self._tool_groups: list[MessageGroup] = []  # tool-call groups, oldest first
        # Cursors: every group before them (in _groups / _tool_groups) is excluded or a system group.
        # They only move
        # forward while groups are excluded, so strategies skip what earlier turns removed.
        self._head = 0
        self._tool_head = 0
        # For projections that start past the excluded prefix: the system groups in _groups[:_pinned_upto]
        # (they stay in the projection), valid while _layout (bumped whenever groups leave the list)
        # is unchanged.
        self._pinned: list[MessageGroup] = []
        self._pinned_upto = 0
        self._layout = 0
        self._layout_seen = 0
        # Positions of the summaries replace() put in that may be included: the projection drops
        # those it finds excluded (include() adds one back), so it never walks every summary made.
        self._summaries: set[int] = set()
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
        summary put in by :meth:`replace` standing where the first message it replaces was.

        Cost: the messages from the first included non-system group on (plus the system messages
        before it), not the excluded history before it.
        """
        start, pinned = self._projection_start()
        if start:
            return [*pinned, *self._included_from(start)]
        return self._included_from(0)

    def _projection_start(self) -> tuple[int, list[Message]]:
        """Where the included messages start past the excluded prefix, and the system messages
        before that point that are still included. Moves the cursor like a walk does."""
        groups = self._groups
        if self._pinned_upto > self._head or self._layout_seen != self._layout:
            self._pinned, self._pinned_upto, self._layout_seen = [], 0, self._layout
        head = self._head
        system = MessageGroupKind.SYSTEM
        while head < len(groups) and (groups[head]._excluded or groups[head]._kind is system):
            head += 1
        self._head = head
        pinned = self._pinned
        for i in range(self._pinned_upto, head):
            if groups[i]._kind is system:
                pinned.append(groups[i])
        self._pinned_upto = head
        if head >= len(groups):
            start = len(self._messages)
        else:
            start = groups[head]._order
        if start <= 0:
            return 0, []
        shown = [self._messages[g.first_index] for g in pinned if not g._excluded]
        return start, shown

    def _included_from(self, start: int) -> list[Message]:
        """:meth:`included_messages` over the positions from ``start`` (summaries by their anchor)."""
        all_messages, all_groups = self._messages, self._group_of
        messages, group_of = (
            (all_messages[start:], all_groups[start:]) if start else (all_messages, all_groups)
        )
        summaries = self._live_summaries()
        if not summaries:
            return [m for m, g in zip(messages, group_of, strict=True) if not g._excluded]
        # Usually each included summary stands alone at its anchor, whose own message it replaced
        # (so is excluded): then it takes that message's place and one sweep does the rest.
        shown = messages[:] if not start else messages
        keep = [not g._excluded for g in group_of]
        for position in summaries:
            if all_groups[position]._order < start:
                return self._included_in_order(start, summaries)
            keep[position - start] = False  # a summary is shown at its anchor, not at its position
        for position in summaries:
            slot = all_groups[position]._order - start
            if keep[slot]:  # the anchor's message is shown, or another summary is there
                return self._included_in_order(start, summaries)
            shown[slot] = all_messages[position]
            keep[slot] = True
        return list(compress(shown, keep))

    def _live_summaries(self) -> list[int]:
        """The positions of the included summaries put in by :meth:`replace` (forgetting the others)."""
        group_of = self._group_of
        live = [p for p in self._summaries if not group_of[p]._excluded]
        if len(live) < len(self._summaries):
            self._summaries = set(live)
        return live

    def _included_in_order(self, start: int, summaries: list[int]) -> list[Message]:
        """:meth:`included_messages` position by position from ``start``, the included ``summaries``
        first at their anchor (for when one does not simply take its anchor's place)."""
        out: list[Message] = []
        messages, group_of = self._messages, self._group_of
        at_anchor: dict[int, list[Message]] = {}
        for position in sorted(summaries):
            at_anchor.setdefault(group_of[position]._order, []).append(messages[position])
        shown_elsewhere = set(summaries)
        for position in range(start, len(messages)):
            if position in at_anchor:
                out.extend(at_anchor[position])
            if not group_of[position]._excluded and position not in shown_elsewhere:
                out.append(messages[position])
        return out

    def is_inserted(self, position: int) -> bool:
        """Whether the message at ``position`` is a summary put in by :meth:`replace`."""
        group = self._group_of[position]
        # Such a summary stands at its anchor, an older position; any other summary at its own.
        return group._kind is MessageGroupKind.SUMMARY and group._order != position

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
        self.exclude_many((group,))

    def exclude_many(self, groups: Iterable[MessageGroup]) -> int:
        """:meth:`exclude` every group of ``groups``, in order, adjusting the included totals once.

        For strategies that drop a run of groups at a time (a window, a budget's overflow): per
        group this costs a flag and a few additions instead of a call and a dozen updates. The
        groups may come from a walk (:meth:`oldest_included`) that this exclusion runs alongside.

        Returns:
            How many of ``groups`` were included (and are excluded now).

        Raises:
            ValueError: A group belongs to another index, or was merged into another group. The
                groups before it stay excluded, as with :meth:`exclude` one by one.
        """
        group_of, turn_live = self._group_of, self._turn_live
        left = self._journal[0] if self._journal is not None else None
        tool_kind, system_kind = MessageGroupKind.TOOL_CALL, MessageGroupKind.SYSTEM
        count = messages = tokens = size = tool_groups = turns = 0
        try:
            for group in groups:
                indices = group._indices
                if isinstance(indices, int):
                    first, length = indices, 1
                else:
                    first, length = (indices[0] if indices else -1), len(indices)
                if group._index is not self or first < 0 or group_of[first] is not group:
                    raise ValueError(f"{group!r} is not a group of this index")
                if group._excluded:
                    continue
                group._excluded = True
                count += 1
                messages += length
                tokens += group._token_count
                size += group._byte_count
                kind = group._kind
                if kind is tool_kind:
                    tool_groups += 1
                turn = group._turn
                if turn is not None and kind is not system_kind:
                    live = turn_live[turn] - 1
                    turn_live[turn] = live
                    if not live:
                        turns += 1
                if left is not None:
                    left.append(group)
        finally:  # totals stay exact when a foreign group stops the run
            self._included_groups -= count
            self._included_messages -= messages
            self._included_tokens -= tokens
            self._included_bytes -= size
            self._included_tool_groups -= tool_groups
            self._included_turns -= turns
        return count

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
            self._tally(group, 1)
            self._head = self._tool_head = 0  # the group may lie before a cursor
            if self.is_inserted(group.first_index):
                self._summaries.add(group.first_index)

    # -- replacing ----------------------------------------------------------------------------
    def replace(self, groups: Sequence[MessageGroup], summary: Message) -> MessageGroup:
        """Exclude ``groups`` and put ``summary`` in their place, as one ``summary`` group.

        The summary takes the logical place (and turn) of the oldest of ``groups``: it sorts there
        in :attr:`groups` and stands there in :meth:`included_messages`, while its message is
        appended to :attr:`messages` like any other (positions never change). ``summary`` is marked
        with :data:`SUMMARY_PROPERTY` listing the ``message_id`` of every replaced message (in
        original order); a replaced message without an id gets one. Cost: the summary's token
        count, a binary search, and for several groups, moving the groups after the first.

        Args:
            groups: Included groups of this index to replace (any order; a repeat counts once).
            summary: The message that stands for them (changed in place: the mark is added).

        Returns:
            The new summary group.

        Raises:
            ValueError: ``groups`` is empty, or holds a group of another index or an excluded one.
        """
        if not groups:
            raise ValueError("replace() needs at least one group")
        for group in groups:
            self._check_replaceable(group)
        ordered = sorted({id(g): g for g in groups}.values(), key=_order_key)
        if len(ordered) == 1:
            return self._replace_each(ordered, lambda _: summary, _MessageIds())[0]
        # The oldest group is replaced as on its own, with the mark listing every message; then
        # the later groups are excluded (in this order, so changes() lists ids in order) and leave
        # the list.
        first, later = ordered[0], ordered[1:]
        listed = [self._messages[i] for i in sorted(i for g in ordered for i in g._index_list())]
        tail = self._reasoning_tail
        if tail and any(g in tail for g in later):
            self._reasoning_tail = []  # replaced reasoning no longer joins a following call
        made = self._replace_each([first], lambda _: summary, _MessageIds(), listed)[0]
        self.exclude_many(later)
        all_groups, gone = self._groups, {id(g) for g in later}
        slot = bisect_left(all_groups, first._order, key=_order_key)
        all_groups[slot + 1 :] = [g for g in all_groups[slot + 1 :] if id(g) not in gone]
        self._layout += 1
        return made

    def replace_each(
        self, groups: Iterable[MessageGroup], summarize: Callable[[MessageGroup], Message]
    ) -> list[MessageGroup]:
        """:meth:`replace` each of ``groups`` on its own, by the summary ``summarize(group)`` returns.

        The same as ``[self.replace([g], summarize(g)) for g in groups]``, for strategies that
        collapse many groups one for one: the bookkeeping is done in one loop, and ids for the
        replaced messages come from one read of random bytes for the lot. ``groups`` may be a
        walk (:meth:`oldest_included`) in progress.

        Returns:
            The new summary groups, in the order of ``groups``.

        Raises:
            ValueError: A group belongs to another index or is excluded. The groups before it stay
                replaced.
        """
        return self._replace_each(groups, summarize, _MessageIds(batch=True))

    def _check_replaceable(self, group: MessageGroup) -> None:
        self._check_owned(group)
        if group._excluded:
            raise ValueError(f"{group!r} is excluded already (or replaced by a summary)")

    def _replace_each(
        self,
        groups: Iterable[MessageGroup],
        summarize: Callable[[MessageGroup], Message],
        ids: _MessageIds,
        listed: Sequence[Message] | None = None,
    ) -> list[MessageGroup]:
        """:meth:`replace_each`, with the id source to use, and for :meth:`replace` of several groups
        (then ``groups`` is the oldest of them) the messages the summary lists instead of its own."""
        # A cold compaction replaces thousands of groups, so this loop is written like the one in
        # append_messages: state in locals, the summary group made directly, totals added once.
        messages, all_groups, group_of = self._messages, self._groups, self._group_of
        token_list, turn_live, summaries = self._tokens, self._turn_live, self._summaries
        journal = self._journal
        count_tokens = self._tokenizer.count_tokens
        new_group = MessageGroup.__new__
        summary_kind, tool_kind, system_kind = (
            MessageGroupKind.SUMMARY,
            MessageGroupKind.TOOL_CALL,
            MessageGroupKind.SYSTEM,
        )
        made: list[MessageGroup] = []
        added_tokens = added_bytes = message_change = token_change = byte_change = tool_groups_gone = 0
        try:
            for group in groups:
                self._check_replaceable(group)
                summary = summarize(group)
                indices = group._indices
                own = [messages[indices]] if isinstance(indices, int) else [messages[i] for i in indices]
                tail = self._reasoning_tail
                if tail and group in tail:
                    self._reasoning_tail = []  # replaced reasoning no longer joins a following call
                ids.mark(summary, own if listed is None else listed)
                order, turn, kind = group._order, group._turn, group._kind
                slot = bisect_left(all_groups, order, key=_order_key)

                position = len(messages)
                text = message_token_text(summary)
                tokens = count_tokens(text) + MESSAGE_OVERHEAD_TOKENS
                size = len(text) if text.isascii() else len(text.encode("utf-8"))
                messages.append(summary)
                token_list.append(tokens)
                added_tokens += tokens
                added_bytes += size
                summary_group = new_group(MessageGroup)
                summary_group._index = self
                summary_group._kind = summary_kind
                summary_group._turn = turn
                summary_group._order = order
                summary_group._indices = position
                summary_group._token_count = tokens
                summary_group._byte_count = size
                summary_group._excluded = False
                summary_group._call_ids = summary_group._pending = None
                group_of.append(summary_group)
                all_groups[slot] = summary_group  # the summary takes the group's slot
                if slot < self._head:
                    self._head = slot
                summaries.add(position)

                # The summary takes the group's place in the included totals: one group for one.
                group._excluded = True
                message_change += 1 - len(own)
                token_change += tokens - group._token_count
                byte_change += size - group._byte_count
                if kind is tool_kind:
                    tool_groups_gone += 1
                if turn is not None and kind is system_kind:  # a system group did not count in its turn
                    live = turn_live[turn] + 1
                    turn_live[turn] = live
                    if live == 1:
                        self._included_turns += 1
                if journal is not None:
                    journal[0].append(group)
                    journal[1].append(summary_group)
                made.append(summary_group)
        finally:  # totals stay exact when a bad group stops the run
            self._total_tokens += added_tokens
            self._total_bytes += added_bytes
            self._included_messages += message_change
            self._included_tokens += token_change
            self._included_bytes += byte_change
            self._included_tool_groups -= tool_groups_gone
        return made

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
        self, *, tool_calls_only: bool = False, include_system: bool = False, before: int | None = None
    ) -> Iterator[MessageGroup]:
        """Included non-system groups oldest first (logical order), starting past the excluded prefix.

        The walk tolerates what strategies do meanwhile: excluding the group just yielded, or
        :meth:`replace` putting a summary in its place (the summary is not yielded). Cost: the
        groups yielded plus the excluded ones skipped, and those are skipped once: the cursor
        stays past them for later walks.

        Args:
            tool_calls_only: Walk only the ``tool_call`` groups.
            include_system: Yield system groups too (this walk starts at the first group).
            before: Stop at the first group whose :attr:`~MessageGroup.order` is not below this.
        """
        groups = self._tool_groups if tool_calls_only else self._groups
        i = 0 if include_system else self._tool_head if tool_calls_only else self._head
        prefix = not include_system  # inside the excluded (or system) prefix: move the cursor along
        system = MessageGroupKind.SYSTEM
        stop = before if before is not None else sys.maxsize
        while i < len(groups):
            group = groups[i]
            if group._order >= stop:
                return
            if group._excluded or (group._kind is system and not include_system):
                i += 1
                if prefix:
                    self._set_head(tool_calls_only, i)
                continue
            prefix = False
            yield group
            if i < len(groups) and groups[i] is group:
                i += 1
            else:  # replace() changed the list: go on after the yielded group's place
                i = bisect_right(groups, group._order, key=_order_key)

    def _set_head(self, tool_calls_only: bool, value: int) -> None:
        if tool_calls_only:
            self._tool_head = max(self._tool_head, value)
        else:
            self._head = max(self._head, value)

    def newest_included(self, count: int, *, tool_calls_only: bool = False) -> list[MessageGroup]:
        """The newest ``count`` included non-system groups (or tool-call groups), newest first.

        Cost: ``count`` plus the excluded and system groups passed on the way (never those before
        the cursor of :meth:`oldest_included`).
        """
        groups = self._tool_groups if tool_calls_only else self._groups
        found: list[MessageGroup] = []
        if count <= 0:
            return found
        head = self._tool_head if tool_calls_only else self._head
        system = MessageGroupKind.SYSTEM
        for i in range(len(groups) - 1, head - 1, -1):
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
        the end of the previous append joins the tool-call group that now follows it. (The grouping
        rules are applied by :func:`~agentkeep.compaction.grouping.append_messages`.)
        """
        append_messages(self, messages)

    # -- included totals ----------------------------------------------------------------------
    def _tally(self, group: MessageGroup, sign: int) -> None:
        """Add (``sign`` 1) an included ``group`` to the included totals, or take it out (-1)."""
        if group._excluded:
            return
        self._included_groups += sign
        self._included_messages += sign * group.message_count
        self._included_tokens += sign * group._token_count
        self._included_bytes += sign * group._byte_count
        kind = group._kind
        if kind is MessageGroupKind.TOOL_CALL:
            self._included_tool_groups += sign
        turn = group._turn
        if turn is not None and kind is not MessageGroupKind.SYSTEM:
            live = self._turn_live[turn] + sign
            self._turn_live[turn] = live
            if live == (1 if sign > 0 else 0):  # the turn's count just left 0, or just reached it
                self._included_turns += sign

    def __repr__(self) -> str:
        return (
            f"MessageIndex(messages={len(self._messages)}, groups={len(self._groups)}, "
            f"turns={len(self._turn_live)}, included_tokens={self._included_tokens})"
        )


class _MessageIds:
    """Marks summaries, making the ids of replaced messages that have none.

    The ids have :func:`~agentkeep.messages.new_message_id`'s form (48 bits of milliseconds, then
    80 random bits, as 32 hex digits). Random bytes are read once per :meth:`mark` call, or with
    ``batch`` a few thousand ids' worth at a time: collapsing a long history names tens of thousands
    of messages, and each read of random bytes is a system call.
    """

    __slots__ = ("_batch", "_millis", "_prefix", "_random", "_used")

    def __init__(self, *, batch: bool = False) -> None:
        self._batch = batch
        self._random = ""
        self._used = 0
        self._millis = -1
        self._prefix = ""

    def mark(self, summary: Message, replaced: Sequence[Message]) -> None:
        """Mark ``summary`` with :data:`SUMMARY_PROPERTY` listing the ids of ``replaced``."""
        ids = [message.message_id for message in replaced]
        missing = ids.count(None)
        if missing:
            millis = time.time_ns() // 1_000_000
            if millis != self._millis:
                self._millis, self._prefix = millis, f"{millis:012x}"
            prefix, random, used = self._prefix, self._random, self._used
            if used + 20 * missing > len(random):
                random, used = os.urandom(10 * max(missing, 256 if self._batch else 0)).hex(), 0
            for at, message in enumerate(replaced):
                if ids[at] is None:
                    if message.message_id is None:  # else listed twice, and named at its first listing
                        message.message_id = prefix + random[used : used + 20]
                        used += 20
                    ids[at] = message.message_id
            self._random, self._used = random, used
        props = summary.additional_properties
        marked = cast("list[str]", ids)  # every None was filled in above
        summary.additional_properties = (
            {SUMMARY_PROPERTY: marked} if props is None else {**props, SUMMARY_PROPERTY: marked}
        )
