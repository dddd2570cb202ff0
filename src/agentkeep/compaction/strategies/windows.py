"""Sliding windows: keep the newest groups (:class:`SlidingWindowStrategy`, the Python edition's
strategy) or the newest whole turns (:class:`SlidingWindowCompactionStrategy`, the .NET edition's).

The two differ in their unit, and their names come from the two editions of the reference:

* ``SlidingWindowStrategy(keep_last_groups=20)`` keeps the newest 20 **message groups** (a user
  message, an answer, a tool call with its results, ...), whatever turns they belong to;
* ``SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(4))`` drops the oldest
  **turns** (a user message and everything up to the next one) while there are more than 4, and
  never leaves a turn half excluded.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..groups import MessageGroup
from ..index import MessageIndex
from ..triggers import CompactionTrigger, CompactionTriggers, non_negative
from ._stepping import StepStrategy, protected_boundary, unprotected

__all__ = ["SlidingWindowCompactionStrategy", "SlidingWindowStrategy"]


class SlidingWindowStrategy(StepStrategy):
    """Keep only the newest ``keep_last_groups`` non-system groups; exclude every older one.

    Args:
        keep_last_groups: How many of the newest non-system groups to keep (at least 1 is kept).
        preserve_system: Keep system messages (default); ``False`` lets older ones go too.
        trigger: When to run (default: always).
        target: When to stop early (default: the trigger's inverse, i.e. never with ``always``).
        minimum_preserved: A floor on the kept groups (default 1).

    Raises:
        ValueError: A count is negative.

    Example:
        >>> sliding_window = SlidingWindowStrategy(keep_last_groups=20)
    """

    exclude_reason = "sliding_window"

    def __init__(
        self,
        *,
        keep_last_groups: int,
        preserve_system: bool = True,
        trigger: CompactionTrigger | None = None,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        self.keep_last_groups = non_negative("keep_last_groups", keep_last_groups)
        self.preserve_system = preserve_system
        super().__init__(
            trigger=trigger if trigger is not None else CompactionTriggers.always,
            target=target,
            minimum_preserved=minimum_preserved,
        )

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        keep = max(self.keep_last_groups, self.minimum_preserved)
        return unprotected(index, keep, include_system=not self.preserve_system)

    def _step_all(self, index: MessageIndex) -> bool:
        edge = protected_boundary(index, max(self.keep_last_groups, self.minimum_preserved))
        if edge is None:
            return False
        return index.exclude_before(edge.order, include_system=not self.preserve_system) > 0

    def __repr__(self) -> str:
        return f"SlidingWindowStrategy(keep_last_groups={self.keep_last_groups}, trigger={self.trigger!r})"


class SlidingWindowCompactionStrategy(StepStrategy):
    """Drop the oldest whole turns (a user message and what follows it) until the target holds.

    Groups before the first user message go first; the target is re-checked only at turn
    boundaries, so a turn is never left half excluded.

    Args:
        trigger: When to run (default ``CompactionTriggers.turns_exceed(4)``: keep the last 4 turns).
        target: When to stop (default: the trigger's inverse).
        minimum_preserved: The newest non-system groups that are always kept (default 1).

    Example:
        >>> sliding_window = SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(4))
    """

    exclude_reason = "sliding_window"

    def __init__(
        self,
        trigger: CompactionTrigger | None = None,
        *,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        super().__init__(
            trigger=trigger if trigger is not None else CompactionTriggers.turns_exceed(4),
            target=target,
            minimum_preserved=minimum_preserved,
        )

    async def compact(self, index: MessageIndex) -> bool:
        """Exclude the oldest turns while the target does not hold.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if not self.trigger(index):
            return False
        changed = False
        current: object = object()  # no turn matches it
        doomed: list[MessageGroup] = []  # the current turn's groups, excluded before the next check
        for group in self._candidates(index):
            turn = group.turn  # a summary has the turn of the first group it replaced
            if turn != current:
                index.exclude_many(doomed)
                doomed = []
                if self.target(index):
                    break
                current = turn
            doomed.append(group)
            changed = True
        index.exclude_many(doomed)
        return changed
