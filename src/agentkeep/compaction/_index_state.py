"""The state of a :class:`~agentkeep.compaction.MessageIndex`, shared by the modules that keep it.

One :class:`IndexState` per index. :mod:`.index` (the public API), :mod:`._grouping_rules`
(appending) and :mod:`._projection` (what is sent) read and write it; nothing else does. Its
invariants:

* ``messages``, ``tokens`` and ``group_of`` are parallel lists, one entry per message, append-only
  (positions never change);
* ``groups`` lists the live groups in logical order (by ``order``); a group replaced by a summary
  or merged into another leaves it (``group_of`` still finds it, excluded); ``tool_groups`` lists
  the ``tool_call`` groups oldest first;
* ``turn_live[t]`` counts the included non-system groups of turn ``t``; ``included_turn_count``
  counts the turns where that is above 0;
* every group before ``head`` in ``groups`` (``tool_head`` in ``tool_groups``) is excluded or a
  system group, so walks start there;
* the ``included_*`` totals are the sums over the included groups.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..messages import Message
from .groups import MessageGroup, MessageGroupKind
from .tokenizers import CharacterEstimatorTokenizer, count_message_tokens

if TYPE_CHECKING:
    from .index import MessageIndex
    from .tokenizers import Tokenizer

__all__ = ["IndexState"]


class IndexState:
    """The data of one index (see the module docs for the invariants).

    Attributes:
        owner: The index this is the state of (the groups' ``index``).
        tokenizer: Counts each message's tokens once, when it is appended.
        messages: Every message, excluded or not, in original order.
        tokens: The token count of each message.
        group_of: The group of each message.
        groups: The live groups in logical order.
        count_message: Counts one message's tokens with ``tokenizer`` (see
            :func:`~agentkeep.compaction.tokenizers.count_message_tokens`).
        payload_chars_per_token: For the default estimator measuring the reference's payload,
            its characters per token (the grouping loop counts inline); else 0.
        text_chars_per_token: The same for the default estimator measuring text; else 0.
        calls: Per function call id, the groups whose declaration of it is still pending (no
            result paired with it yet); two or more make a result of that id ambiguous.
        reasoning_tail: Reasoning-only groups at the end of the list, which a following tool-call
            message absorbs.
        open_group: The tool-call group the last message belongs to while tool messages may
            still join it by adjacency (``None`` once another message closed it).
        open_after_call: The last message of ``open_group`` is its call message (or reasoning
            right after it): a reasoning-only assistant message joins it too.
        turn_live: Per turn, its included non-system groups.
        tool_groups: The ``tool_call`` groups, oldest first.
        head: Cursor into ``groups``: everything before it is excluded or a system group.
        tool_head: The same cursor into ``tool_groups``.
        pinned: The system groups in ``groups[:pinned_upto]`` (they stay in the projection).
        pinned_upto: How far ``pinned`` was collected.
        layout: Bumped whenever groups leave ``groups`` (so ``pinned`` must be collected again).
        layout_seen: The ``layout`` ``pinned`` was collected at.
        summaries: Positions of the summaries ``replace`` put in that may be included.
        journal: Since ``track_changes()``: the groups excluded, and the summaries made.
        payload_lengths: With the payload measure, by position: the payload length of each
            message that was appended without an id (``-1`` for the others and for summaries):
            naming it (a summary names what it replaces) corrects its count from this, without
            measuring the message again. A list, appended as ``messages`` is: cheaper than a dict.
    """

    __slots__ = (
        "calls",
        "count_message",
        "group_of",
        "groups",
        "head",
        "included_byte_count",
        "included_group_count",
        "included_message_count",
        "included_token_count",
        "included_tool_group_count",
        "included_turn_count",
        "journal",
        "layout",
        "layout_seen",
        "messages",
        "open_after_call",
        "open_group",
        "owner",
        "payload_chars_per_token",
        "payload_lengths",
        "pinned",
        "pinned_upto",
        "reasoning_tail",
        "summaries",
        "text_chars_per_token",
        "tokenizer",
        "tokens",
        "tool_groups",
        "tool_head",
        "total_bytes",
        "total_tokens",
        "turn_live",
    )

    def __init__(self, owner: MessageIndex, tokenizer: Tokenizer) -> None:
        self.owner = owner
        self.tokenizer = tokenizer
        self.messages: list[Message] = []
        self.tokens: list[int] = []
        self.group_of: list[MessageGroup] = []
        self.groups: list[MessageGroup] = []
        self.count_message: Callable[[Message], int] = functools.partial(
            count_message_tokens, tokenizer=tokenizer
        )
        estimator = type(tokenizer) is CharacterEstimatorTokenizer
        measure = tokenizer.measure if isinstance(tokenizer, CharacterEstimatorTokenizer) else None
        self.payload_chars_per_token = tokenizer.chars_per_token if estimator and measure == "payload" else 0
        self.text_chars_per_token = tokenizer.chars_per_token if estimator and measure == "text" else 0
        self.payload_lengths: list[int] = []
        self.calls: dict[str, list[MessageGroup]] = {}
        self.reasoning_tail: list[MessageGroup] = []
        self.open_group: MessageGroup | None = None
        self.open_after_call = False
        self.turn_live: list[int] = []
        self.tool_groups: list[MessageGroup] = []
        self.head = 0
        self.tool_head = 0
        self.pinned: list[MessageGroup] = []
        self.pinned_upto = 0
        self.layout = 0
        self.layout_seen = 0
        self.summaries: set[int] = set()
        self.journal: tuple[list[MessageGroup], list[MessageGroup]] | None = None
        self.total_tokens = 0
        self.total_bytes = 0
        self.included_message_count = 0
        self.included_group_count = 0
        self.included_turn_count = 0
        self.included_token_count = 0
        self.included_byte_count = 0
        self.included_tool_group_count = 0

    def tally(self, group: MessageGroup, sign: int) -> None:
        """Add (``sign`` 1) an included ``group`` to the included totals, or take it out (-1)."""
        if group.excluded:
            return
        self.included_group_count += sign
        self.included_message_count += sign * group.message_count
        self.included_token_count += sign * group.token_count
        self.included_byte_count += sign * group.byte_count
        kind = group.kind
        if kind is MessageGroupKind.TOOL_CALL:
            self.included_tool_group_count += sign
        turn = group.turn
        if turn is not None and kind is not MessageGroupKind.SYSTEM:
            live = self.turn_live[turn] + sign
            self.turn_live[turn] = live
            if live == (1 if sign > 0 else 0):  # the turn's count just left 0, or just reached it
                self.included_turn_count += sign
