"""The projection: what an index sends to the model (the work of ``MessageIndex.included_messages``).

The messages of included groups in original order, each summary put in by ``replace`` standing
where the first message it replaces was. The projection starts past the excluded prefix (keeping
the system messages before it), so a compacted history costs what it still holds, not what it
once held.
"""

from __future__ import annotations

from itertools import compress

from ..messages import Message
from ._index_state import IndexState
from .groups import MessageGroupKind

__all__ = ["included_messages"]


def included_messages(state: IndexState) -> list[Message]:
    """The projection of ``state`` (see the module docs).

    Cost: the messages from the first included non-system group on (plus the system messages
    before it), not the excluded history before it.
    """
    start, pinned = _projection_start(state)
    if start:
        return [*pinned, *_included_from(state, start)]
    return _included_from(state, 0)


def _projection_start(state: IndexState) -> tuple[int, list[Message]]:
    """Where the included messages start past the excluded prefix, and the system messages
    before that point that are still included. Moves the cursor like a walk does."""
    groups = state.groups
    if state.pinned_upto > state.head or state.layout_seen != state.layout:
        state.pinned, state.pinned_upto, state.layout_seen = [], 0, state.layout
    head = state.head
    system = MessageGroupKind.SYSTEM
    while head < len(groups) and (groups[head].excluded or groups[head].kind is system):
        head += 1
    state.head = head
    pinned = state.pinned
    for i in range(state.pinned_upto, head):
        if groups[i].kind is system:
            pinned.append(groups[i])
    state.pinned_upto = head
    start = len(state.messages) if head >= len(groups) else groups[head].order
    if start <= 0:
        return 0, []
    return start, [state.messages[g.first_index] for g in pinned if not g.excluded]


def _included_from(state: IndexState, start: int) -> list[Message]:
    """The projection over the positions from ``start`` (summaries by their anchor)."""
    all_messages, all_groups = state.messages, state.group_of
    messages, group_of = (all_messages[start:], all_groups[start:]) if start else (all_messages, all_groups)
    if len(messages) != len(group_of):
        raise ValueError("the index's messages and groups are out of step")
    summaries = _live_summaries(state)
    # Which messages are included. A comprehension: its attribute read is specialized, about three
    # times cheaper than map(not_, map(excluded_of, ...)), whose attrgetter takes the generic path.
    keep = [not group.excluded for group in group_of]
    if not summaries:
        return list(compress(messages, keep))
    # Usually each included summary stands alone at its anchor, whose own message it replaced
    # (so is excluded): then it takes that message's place and one sweep does the rest.
    shown = messages[:] if not start else messages
    for position in summaries:
        if all_groups[position].order < start:
            return _included_in_order(state, start, summaries)
        keep[position - start] = False  # a summary is shown at its anchor, not at its position
    for position in summaries:
        slot = all_groups[position].order - start
        if keep[slot]:  # the anchor's message is shown, or another summary is there
            return _included_in_order(state, start, summaries)
        shown[slot] = all_messages[position]
        keep[slot] = True
    return list(compress(shown, keep))


def _live_summaries(state: IndexState) -> list[int]:
    """The positions of the included summaries ``replace`` put in (forgetting the others)."""
    group_of = state.group_of
    live = [p for p in state.summaries if not group_of[p].excluded]
    if len(live) < len(state.summaries):
        state.summaries = set(live)
    return live


def _included_in_order(state: IndexState, start: int, summaries: list[int]) -> list[Message]:
    """The projection position by position from ``start``, the included ``summaries`` first at
    their anchor (for when one does not simply take its anchor's place)."""
    out: list[Message] = []
    messages, group_of = state.messages, state.group_of
    at_anchor: dict[int, list[Message]] = {}
    for position in sorted(summaries):
        at_anchor.setdefault(group_of[position].order, []).append(messages[position])
    shown_elsewhere = set(summaries)
    for position in range(start, len(messages)):
        if position in at_anchor:
            out.extend(at_anchor[position])
        if not group_of[position].excluded and position not in shown_elsewhere:
            out.append(messages[position])
    return out
