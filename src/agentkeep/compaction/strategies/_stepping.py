"""What the step strategies share (private): default targets, protected tails, and the step loop.

Every strategy built on :class:`StepStrategy` has a **trigger** (when it is false the strategy does
nothing), a **target** (checked before each step; by default the trigger's inverse,
:class:`Inverse`) and a **minimum_preserved** floor: the newest ``minimum_preserved`` non-system
groups are never touched (at least one). Candidates are walked lazily from the index's cursors
and the walk stops as soon as the target holds; when the target cannot stop it early, every
candidate goes in one batch (:meth:`~agentkeep.compaction.MessageIndex.exclude_many`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter

from ..annotations import AnnotatingStrategy
from ..groups import MessageGroup
from ..index import MessageIndex
from ..triggers import CompactionTrigger, CompactionTriggers, non_negative

__all__ = [
    "Inverse",
    "StepStrategy",
    "exclude_oldest",
    "message_count",
    "never_holds",
    "protected_boundary",
    "unprotected",
]


class Inverse:
    """A strategy's default target: its trigger no longer fires."""

    __slots__ = ("trigger",)

    def __init__(self, trigger: CompactionTrigger) -> None:
        self.trigger = trigger

    def __call__(self, index: MessageIndex) -> bool:
        return not self.trigger(index)

    def __repr__(self) -> str:
        return f"not {self.trigger!r}"


def never_holds(target: CompactionTrigger) -> bool:
    """Whether ``target`` is known never to hold, so a strategy need not check it between steps."""
    return target is CompactionTriggers.never or (
        isinstance(target, Inverse) and target.trigger is CompactionTriggers.always
    )


def protected_boundary(index: MessageIndex, keep: int) -> MessageGroup | None:
    """The oldest of the newest ``max(1, keep)`` included non-system groups; ``None`` if there are
    no more groups than that (nothing may go)."""
    keep = max(1, keep)
    newest = index.newest_included(keep + 1)
    return newest[keep - 1] if len(newest) > keep else None


def unprotected(
    index: MessageIndex, minimum_preserved: int, *, include_system: bool = False
) -> Iterator[MessageGroup]:
    """Included non-system groups oldest first, up to the newest ``minimum_preserved`` (at least 1).

    Lazy: a strategy that stops early pays only for the groups it looked at.
    """
    edge = protected_boundary(index, minimum_preserved)
    if edge is None:
        return iter(())
    return index.oldest_included(include_system=include_system, before=edge.order)


message_count: Callable[[MessageGroup], int] = attrgetter("message_count")


def exclude_oldest(
    index: MessageIndex,
    candidates: Iterable[MessageGroup],
    total: int,
    limit: int,
    cost: Callable[[MessageGroup], int],
) -> bool:
    """Exclude ``candidates`` in order while ``total``, less each excluded group's ``cost``, is
    above ``limit``: a running measure instead of re-measuring, and one exclusion for the lot.

    Returns:
        Whether any group was excluded.
    """
    doomed: list[MessageGroup] = []
    for group in candidates:
        if total <= limit:
            break
        total -= cost(group)
        doomed.append(group)
    return index.exclude_many(doomed) > 0


class StepStrategy(AnnotatingStrategy):
    """Base of strategies that walk candidate groups oldest first, checking the target before each step."""

    def __init__(
        self,
        *,
        trigger: CompactionTrigger,
        target: CompactionTrigger | None,
        minimum_preserved: int,
    ) -> None:
        self.trigger: CompactionTrigger = trigger
        self.target: CompactionTrigger = target if target is not None else Inverse(trigger)
        self.minimum_preserved: int = non_negative("minimum_preserved", minimum_preserved)

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        return unprotected(index, self.minimum_preserved)

    def _step(self, index: MessageIndex, group: MessageGroup) -> None:
        index.exclude(group)

    def _done(self, index: MessageIndex) -> bool:
        return self.target(index)

    async def compact(self, index: MessageIndex) -> bool:
        """Compact ``index`` in place if the trigger fires; stop once the target holds.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if not self.trigger(index):
            return False
        if never_holds(self.target):  # every candidate goes: no check between steps
            return self._step_all(index)
        changed = False
        for group in self._candidates(index):
            if self._done(index):
                break
            self._step(index, group)
            changed = True
        return changed

    def _step_all(self, index: MessageIndex) -> bool:
        """Step every candidate, when the target is known never to hold."""
        return index.exclude_many(self._candidates(index)) > 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"
