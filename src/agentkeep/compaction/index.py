"""The message index: groups, turns and included counts over a message list, kept up to date.

A :class:`MessageIndex` is a structured view of a flat message list: every message in exactly one
:class:`~agentkeep.compaction.MessageGroup` (the unit compaction keeps or removes, see
:mod:`agentkeep.compaction.groups`), every group after the first user message in a *turn*.

**Grouping** (the rules are in the private ``_grouping_rules``): a summary-marked message forms
a ``summary`` group and a system message a ``system`` group; an assistant message with function
calls and every message carrying their results form one ``tool_call`` group (results join by
call id, also when other messages come between; reasoning-only assistant messages directly
before the call join it; results answering calls of several groups merge them); otherwise the
role decides (``user``, ``assistant_text``, ``tool_call``).

**Turns.** A turn is a user message and everything up to the next user message; turn ``k`` is the
``k``-th user message (from 0). Groups before the first user message have no turn (``None``). A
tool-call group belongs to the turn of its first message.

**Incremental and O(1).** :meth:`MessageIndex.append` groups and counts only the new messages
(their token counts are cached); old messages are never regrouped or recounted. The included
(non-excluded) message, group, turn, token and tool-call-group counts are kept up to date as
groups are excluded and included, so triggers (:mod:`agentkeep.compaction.triggers`) read them in
O(1).

**What compaction does through it.** :meth:`~MessageIndex.exclude` (and
:meth:`~MessageIndex.exclude_many` for a run of groups) leaves groups out;
:meth:`~MessageIndex.replace` (and :meth:`~MessageIndex.replace_each`) puts a summary in the
place of groups; :meth:`~MessageIndex.included_messages` is what is sent, summaries at their
anchors. Strategies find their candidates with :meth:`~MessageIndex.oldest_included` and
:meth:`~MessageIndex.newest_included`, whose cursor stays past the excluded prefix, so compacting
after a turn costs about what the turn added. :meth:`~MessageIndex.track_changes` and
:meth:`~MessageIndex.changes` report what a compaction did, in the form storage records it.
"""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Final

from .._json_values import check_text
from ..messages import Message, Role, message_id_generator
from ._grouping_rules import append_messages
from ._index_state import IndexState
from ._projection import included_messages
from .groups import (
    SUMMARY_PROPERTY,
    MessageGroup,
    MessageGroupKind,
    order_key,
    summarized_message_ids,
    token_count_of,
)
from .tokenizers import (
    PLAIN_TEXT_PAYLOAD_CHARS,
    CharacterEstimatorTokenizer,
    Tokenizer,
    ascii_json_string,
    message_token_text,
    reference_payload_length,
)

__all__ = ["MessageIndex"]

_ID_OF: Final = attrgetter("message_id")


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

    __slots__ = ("_state", "messages")

    messages: Final[Sequence[Message]]
    """Every message, excluded or not, in original order (appended to, never reordered)."""

    def __init__(self, messages: Iterable[Message] = (), *, tokenizer: Tokenizer | None = None) -> None:
        self._state = IndexState(self, tokenizer if tokenizer is not None else CharacterEstimatorTokenizer())
        self.messages = self._state.messages  # read on every group's .messages: an attribute, not a property
        append_messages(self._state, messages)

    # -- reading ------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer that counted the messages."""
        return self._state.tokenizer

    @property
    def groups(self) -> Sequence[MessageGroup]:
        """The groups in logical order (by :attr:`MessageGroup.order`, i.e. by first message).

        A summary put in by :meth:`replace` stands where the first group it replaced stood; the
        replaced groups are no longer listed (:meth:`group_of` still finds them, excluded).
        """
        return self._state.groups

    def group_of(self, position: int) -> MessageGroup:
        """The group holding the message at ``position``."""
        return self._state.group_of[position]

    def message_token_count(self, position: int) -> int:
        """The cached token count of the message at ``position``."""
        return self._state.tokens[position]

    def included_messages(self) -> list[Message]:
        """The projection sent to the model: the messages of included groups in original order, each
        summary put in by :meth:`replace` standing where the first message it replaces was.

        Cost: the messages from the first included non-system group on (plus the system messages
        before it), not the excluded history before it.
        """
        return included_messages(self._state)

    def is_inserted(self, position: int) -> bool:
        """Whether the message at ``position`` is a summary put in by :meth:`replace`."""
        group = self._state.group_of[position]
        # Such a summary stands at its anchor, an older position; any other summary at its own.
        return group.kind is MessageGroupKind.SUMMARY and group.order != position

    @property
    def message_count(self) -> int:
        """All messages."""
        return len(self._state.messages)

    @property
    def group_count(self) -> int:
        """All groups."""
        return len(self._state.groups)

    @property
    def turn_count(self) -> int:
        """All turns (user messages that are not summaries)."""
        return len(self._state.turn_live)

    @property
    def token_count(self) -> int:
        """Tokens of all messages."""
        return self._state.total_tokens

    @property
    def byte_count(self) -> int:
        """Counted UTF-8 bytes of all messages."""
        return self._state.total_bytes

    @property
    def included_message_count(self) -> int:
        """Messages in non-excluded groups."""
        return self._state.included_message_count

    @property
    def included_group_count(self) -> int:
        """Non-excluded groups."""
        return self._state.included_group_count

    @property
    def included_turn_count(self) -> int:
        """Turns that still have a non-excluded group other than a system message."""
        return self._state.included_turn_count

    @property
    def included_token_count(self) -> int:
        """Tokens of the messages in non-excluded groups."""
        return self._state.included_token_count

    @property
    def included_byte_count(self) -> int:
        """Counted bytes of the messages in non-excluded groups."""
        return self._state.included_byte_count

    @property
    def included_tool_call_group_count(self) -> int:
        """Non-excluded ``tool_call`` groups."""
        return self._state.included_tool_group_count

    # -- appending ----------------------------------------------------------------------------
    def append(self, messages: Iterable[Message]) -> None:
        """Add ``messages`` at the end, grouping and counting only them.

        A pending tool-call group takes the results that arrive now; a reasoning-only message at
        the end of the previous append joins the tool-call group that now follows it.
        """
        append_messages(self._state, messages)

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
        state = self._state
        group_of, turn_live = state.group_of, state.turn_live
        left = state.journal[0] if state.journal is not None else None
        tool_kind, system_kind = MessageGroupKind.TOOL_CALL, MessageGroupKind.SYSTEM
        count = messages = tokens = size = tool_groups = turns = 0
        try:
            for group in groups:
                if group.index is not self or group_of[group.first_index] is not group:
                    raise ValueError(f"{group!r} is not a group of this index")
                if group.excluded:
                    continue
                group.excluded = True
                count += 1
                later = group.later_indices
                messages += 1 + len(later) if later else 1
                tokens += group.token_count
                size += group.byte_count
                kind = group.kind
                if kind is tool_kind:
                    tool_groups += 1
                turn = group.turn
                if turn is not None and kind is not system_kind:
                    live = turn_live[turn] - 1
                    turn_live[turn] = live
                    if not live:
                        turns += 1
                if left is not None:
                    left.append(group)
        finally:  # totals stay exact when a foreign group stops the run
            state.included_group_count -= count
            state.included_message_count -= messages
            state.included_token_count -= tokens
            state.included_byte_count -= size
            state.included_tool_group_count -= tool_groups
            state.included_turn_count -= turns
        return count

    def exclude_before(self, before: int, *, include_system: bool = False) -> int:
        """Exclude every included non-system group (with ``include_system``, system groups too)
        whose :attr:`~MessageGroup.order` is below ``before``: what a window does.

        The same as ``exclude_many(oldest_included(include_system=..., before=before))``: the
        groups are listed in one comprehension from the walk's cursor, excluded by
        :meth:`exclude_many`'s loop (cheaper per group than sums over the run in C, whose
        attribute getters take CPython's generic path), and a long run (a cold window) moves the
        walks' cursor past it at once.

        Returns:
            How many groups were excluded.
        """
        state = self._state
        groups = state.groups
        start = 0 if include_system else state.head
        stop = bisect_left(groups, before, key=order_key, lo=start)
        system = MessageGroupKind.SYSTEM
        if include_system:
            run = [g for g in groups[start:stop] if not g.excluded]
        else:
            run = [g for g in groups[start:stop] if not g.excluded and g.kind is not system]
        count = self.exclude_many(run)
        if count >= 16:  # a turn's few are left to the next walk, which moves the cursor as it passes
            # The run was every included (non-system) group from the cursor (or the first group)
            # to ``before``: every group up to its last is excluded (or a system group) now.
            last = run[-1]
            head = state.head
            end = bisect_right(groups, last.order, key=order_key, lo=head)
            if end > head and groups[end - 1] is last:
                state.head = end
        return count

    def include(self, group: MessageGroup) -> None:
        """Undo :meth:`exclude` (idempotent).

        Raises:
            ValueError: ``group`` belongs to another index, was merged into another group, or was
                replaced by a summary.
        """
        self._check_owned(group)
        if not group.excluded:
            return
        state = self._state
        slot = bisect_left(state.groups, group.order, key=order_key)
        if slot >= len(state.groups) or state.groups[slot] is not group:
            raise ValueError(f"{group!r} was replaced by a summary; include the summary's groups instead")
        group.excluded = False
        state.tally(group, 1)
        state.head = state.tool_head = 0  # the group may lie before a cursor
        if self.is_inserted(group.first_index):
            state.summaries.add(group.first_index)

    def _check_owned(self, group: MessageGroup) -> None:
        if group.index is not self or self._state.group_of[group.first_index] is not group:
            raise ValueError(f"{group!r} is not a group of this index")

    # -- replacing ----------------------------------------------------------------------------
    def replace(self, groups: Sequence[MessageGroup], summary: Message) -> MessageGroup:
        """Exclude ``groups`` and put ``summary`` in their place, as one ``summary`` group.

        The summary takes the logical place (and turn) of the oldest of ``groups``: it sorts there
        in :attr:`groups` and stands there in :meth:`included_messages`, while its message is
        appended to :attr:`messages` like any other (positions never change). ``summary`` is marked
        with :data:`~agentkeep.compaction.SUMMARY_PROPERTY` listing the ``message_id`` of every
        replaced message (in original order); a replaced message without an id gets one. Cost:
        the summary's token count, a binary search, and for several groups, moving the groups
        after the first.

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
        ordered = sorted({id(g): g for g in groups}.values(), key=order_key)
        if len(ordered) == 1:
            return self._replace_each(ordered, lambda _: summary, message_id_generator(batch=1))[0]
        # The oldest group is replaced as on its own, with the mark listing every message; then
        # the later groups are excluded (in this order, so changes() lists ids in order) and leave
        # the list.
        state = self._state
        first, later = ordered[0], ordered[1:]
        listed = sorted(i for g in ordered for i in g.indices)
        tail = state.reasoning_tail
        if tail and any(g in tail for g in later):
            state.reasoning_tail = []  # replaced reasoning no longer joins a following call
        new_id = message_id_generator(batch=len(listed))
        made = self._replace_each([first], lambda _: summary, new_id, listed)[0]
        self.exclude_many(later)
        gone = {id(g) for g in later}
        slot = bisect_left(state.groups, first.order, key=order_key)
        state.groups[slot + 1 :] = [g for g in state.groups[slot + 1 :] if id(g) not in gone]
        state.layout += 1
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
        return self._replace_each(groups, summarize, message_id_generator())

    def collapse_each(
        self,
        groups: Iterable[MessageGroup],
        summary_text: Callable[[list[Message]], str],
        *,
        role: Role = "assistant",
    ) -> list[MessageGroup]:
        """:meth:`replace_each` with summaries made from text: each group becomes one message of
        ``role`` holding ``summary_text(the group's messages)``.

        For strategies that collapse groups into short texts (as
        :class:`~agentkeep.compaction.ToolResultCompactionStrategy` does): the index reads each
        group's messages once and counts the text as it is made.

        Returns:
            The new summary groups, in the order of ``groups``.

        Raises:
            ValueError: As :meth:`replace_each`.
        """
        return self._replace_each(groups, None, message_id_generator(), summary_text=summary_text, role=role)

    def _recount_named(self, positions: list[int]) -> None:
        """Correct the counts of the messages at ``positions``, just named with generated ids (a
        summary names what it replaces; see :func:`~agentkeep.messages.message_id_generator`: hex,
        so written in a payload as they are, quoted), keeping every total exact.

        The default estimator measures the reference's payload, which holds the id: its count is
        corrected from the payload length kept at append (no tokenizer call), so the count kept
        for the message stays what a recount gives wherever it is counted later. Other tokenizers
        are not called again (a message is counted once); one that measures ids keeps the count
        of the unnamed message."""
        state = self._state
        per_token = state.payload_chars_per_token
        if not per_token:
            return
        messages, tokens, group_of, payload_lengths = (
            state.messages,
            state.tokens,
            state.group_of,
            state.payload_lengths,
        )
        included_change = total_change = 0
        for at in positions:
            length = payload_lengths[at]
            if length < 0:  # not measured unnamed here (it was named and renamed since)
                length = reference_payload_length(messages[at])
            else:  # the id replaces the payload's null
                # a generated id is hex, written as it is between quotes
                length += len(messages[at].message_id or "") + 2 - 4
                payload_lengths[at] = -1
            fresh = length // per_token or 1
            if change := fresh - tokens[at]:
                tokens[at] = fresh
                owner = group_of[at]
                owner.token_count += change
                total_change += change
                if not owner.excluded:
                    included_change += change
        state.total_tokens += total_change
        state.included_token_count += included_change

    def _check_replaceable(self, group: MessageGroup) -> None:
        self._check_owned(group)
        if group.excluded:
            raise ValueError(f"{group!r} is excluded already (or replaced by a summary)")

    def _replace_each(  # noqa: C901 - one loop on purpose, see below
        self,
        groups: Iterable[MessageGroup],
        summarize: Callable[[MessageGroup], Message] | None,
        new_id: Callable[[], str],
        listed: Sequence[int] | None = None,
        *,
        summary_text: Callable[[list[Message]], str] | None = None,
        role: Role = "assistant",
    ) -> list[MessageGroup]:
        """:meth:`replace_each` (``summarize``) or :meth:`collapse_each` (``summary_text`` and
        ``role``), with the id source to use, and for :meth:`replace` of several groups (then
        ``groups`` is the oldest of them) the positions of the messages the summary lists instead
        of its own.

        A cold compaction replaces thousands of groups, so this loop is written for speed: state in
        locals; a replaced message without an id named here and its count corrected in one pass
        at the end (:meth:`_recount_named`); a text summary made (as
        :meth:`Message.from_checked_text` would) and measured (its payload length from its text
        and id lengths, as the grouping loop measures a plain text) inline; the summary group
        made directly; the parallel lists and totals added to once (in ``finally``, so they stay
        exact when a bad group stops the run); and each group's slot found by walking on from the
        previous one when groups come in logical order (a walk's order), so a whole pass finds its
        slots in O(groups) instead of a binary search each.
        """
        state = self._state
        messages, group_of, all_groups = state.messages, state.group_of, state.groups
        journal, summaries, turn_live = state.journal, state.summaries, state.turn_live
        count_message, per_token = state.count_message, state.payload_chars_per_token
        if summarize is None:
            Message(role)  # the role is checked once (MessageFormatError), before anything changes
        # A text summary's payload besides its text and id, as the grouping loop counts a plain text
        text_payload = PLAIN_TEXT_PAYLOAD_CHARS + len(role)
        summary_kind, tool_kind, system_kind = (
            MessageGroupKind.SUMMARY,
            MessageGroupKind.TOOL_CALL,
            MessageGroupKind.SYSTEM,
        )
        new, from_checked_text = object.__new__, Message.from_checked_text
        ascii_json, id_of = ascii_json_string, _ID_OF
        made: list[MessageGroup] = []
        renamed: list[int] = []  # positions of the replaced messages named here
        start = len(messages)  # the summaries' positions follow on from here
        slot, last_order = -1, -1
        added_tokens = added_bytes = message_change = token_change = byte_change = tool_groups_gone = 0
        try:
            for group in groups:
                first_index = group.first_index
                if group.index is not self or group_of[first_index] is not group or group.excluded:
                    self._check_replaceable(group)  # raises, saying why
                later = group.later_indices  # the group's messages (as group.messages reads them)
                first = messages[first_index]
                own = [first, *map(messages.__getitem__, later)] if later else [first]
                named = own if listed is None else [messages[at] for at in listed]
                ids = list(map(id_of, named))
                if None in ids:  # named here; their counts are corrected at the end
                    positions = (
                        listed if listed is not None else [first_index, *later] if later else [first_index]
                    )
                    for at, message_id in enumerate(ids):
                        if message_id is None:
                            named[at].message_id = ids[at] = new_id()
                            renamed.append(positions[at])
                if summarize is None:
                    assert summary_text is not None
                    text = summary_text(own)
                    if type(text) is not str:
                        check_text(text, "text")  # raises, saying why
                    plain = text.isascii()
                    if plain:
                        size = len(text)
                        written = len(ascii_json(text)) if per_token else 0  # its length in a payload
                    else:  # the encodings both check the text (a lone surrogate fails) and size it
                        try:
                            # msgspec writes a text as encode_basestring does, UTF-8 encoded (see
                            # ascii_json_string); it keeps the text's UTF-8, which encode() reuses
                            written = len(ascii_json(text))
                            size = len(text.encode("utf-8"))
                        except UnicodeEncodeError:
                            check_text(text, "text")  # raises, saying why
                            raise
                        written -= size - len(text)  # the length less the bytes beyond one a character
                    summary_id = new_id()
                    summary = from_checked_text(role, text, None, summary_id, None)  # text checked above
                    summary.additional_properties = {SUMMARY_PROPERTY: ids}
                    if not per_token:
                        tokens = count_message(summary)
                    else:
                        length = text_payload + written + len(summary_id) + 2  # a hex id, quoted
                        tokens = length // per_token or 1  # max(1, ...) without a call
                else:
                    summary = summarize(group)
                    summary.additional_properties = {**summary.additional_properties, SUMMARY_PROPERTY: ids}
                    if summary.message_id is None:
                        summary.message_id = new_id()
                    text = message_token_text(summary)
                    tokens = count_message(summary)
                    size = len(text) if text.isascii() else len(text.encode("utf-8"))
                tail = state.reasoning_tail
                if tail and group in tail:
                    state.reasoning_tail = []  # replaced reasoning no longer joins a following call
                messages.append(summary)
                order, turn, kind = group.order, group.turn, group.kind
                if order > last_order:  # in logical order: the slot lies after the previous one
                    slot = all_groups.index(group, slot + 1)  # by identity: groups define no __eq__
                else:
                    slot = bisect_left(all_groups, order, key=order_key)
                last_order = order
                # the summary group, made (as MessageGroup() would) inline
                made_group = new(MessageGroup)
                made_group.index, made_group.kind, made_group.turn = self, summary_kind, turn
                made_group.order, made_group.first_index, made_group.later_indices = (
                    order,
                    start + len(made),
                    None,
                )
                made_group.token_count, made_group.byte_count, made_group.excluded = tokens, size, False
                made_group.call_ids, made_group.unanswered = (), None
                made.append(made_group)
                group_of.append(made_group)
                summaries.add(made_group.first_index)
                all_groups[slot] = made_group  # the summary takes the group's slot
                if slot < state.head:
                    state.head = slot
                # The summary takes the group's place in the included totals: one group for one.
                group.excluded = True
                added_tokens += tokens
                added_bytes += size
                if later:
                    message_change -= len(later)
                token_change += tokens - group.token_count
                byte_change += size - group.byte_count
                if kind is tool_kind:
                    tool_groups_gone += 1
                elif turn is not None and kind is system_kind:  # it did not count in its turn
                    live = turn_live[turn] + 1
                    turn_live[turn] = live
                    if live == 1:
                        state.included_turn_count += 1
                if journal is not None:
                    journal[0].append(group)
                    journal[1].append(made_group)
        finally:
            count = len(made)
            del messages[start + count :]  # a summary whose group was not made (a bad group stopped it)
            state.tokens.extend(map(token_count_of, made))
            if per_token:
                state.payload_lengths.extend([-1] * count)
            state.total_tokens += added_tokens
            state.total_bytes += added_bytes
            state.included_message_count += message_change
            state.included_token_count += token_change
            state.included_byte_count += byte_change
            state.included_tool_group_count -= tool_groups_gone
            if renamed:
                self._recount_named(renamed)
        return made

    # -- recording ----------------------------------------------------------------------------
    def track_changes(self) -> None:
        """Start recording what compaction does, for :meth:`changes` (restarts a recording)."""
        self._state.journal = ([], [])

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
        state = self._state
        if state.journal is None:
            raise ValueError("call track_changes() before changes()")
        left, made = state.journal
        made_ids = {id(g) for g in made}
        excluded: list[str] = []
        seen: set[int] = set()
        for group in left:
            if id(group) in seen or id(group) in made_ids or not group.excluded:
                continue  # a summary made and dropped again was never stored
            seen.add(id(group))
            for position in group.indices:
                message_id = state.messages[position].message_id
                if message_id is not None:
                    excluded.append(message_id)
        summaries: list[tuple[Message, list[str]]] = []
        for group in made:
            if not group.excluded:
                message = state.messages[group.first_index]
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
        state = self._state
        groups = state.tool_groups if tool_calls_only else state.groups
        i = 0 if include_system else state.tool_head if tool_calls_only else state.head
        prefix = not include_system  # inside the excluded (or system) prefix: move the cursor along
        system = MessageGroupKind.SYSTEM
        stop = before if before is not None else sys.maxsize
        while i < len(groups):
            group = groups[i]
            if group.order >= stop:
                return
            if group.excluded or (group.kind is system and not include_system):
                i += 1
                if prefix:
                    self._advance_cursor(tool_calls_only, i)
                continue
            prefix = False
            yield group
            if i < len(groups) and groups[i] is group:
                i += 1
            else:  # replace() changed the list: go on after the yielded group's place
                i = bisect_right(groups, group.order, key=order_key)

    def _advance_cursor(self, tool_calls_only: bool, value: int) -> None:
        state = self._state
        if tool_calls_only:
            state.tool_head = max(state.tool_head, value)
        else:
            state.head = max(state.head, value)

    def newest_included(self, count: int, *, tool_calls_only: bool = False) -> list[MessageGroup]:
        """The newest ``count`` included non-system groups (or tool-call groups), newest first.

        Cost: ``count`` plus the excluded and system groups passed on the way (never those before
        the cursor of :meth:`oldest_included`).
        """
        state = self._state
        groups = state.tool_groups if tool_calls_only else state.groups
        found: list[MessageGroup] = []
        if count <= 0:
            return found
        head = state.tool_head if tool_calls_only else state.head
        system = MessageGroupKind.SYSTEM
        for i in range(len(groups) - 1, head - 1, -1):
            group = groups[i]
            if group.excluded or group.kind is system:
                continue
            found.append(group)
            if len(found) == count:
                break
        return found

    def __repr__(self) -> str:
        state = self._state
        return (
            f"MessageIndex(messages={len(state.messages)}, groups={len(state.groups)}, "
            f"turns={len(state.turn_live)}, included_tokens={state.included_token_count})"
        )
