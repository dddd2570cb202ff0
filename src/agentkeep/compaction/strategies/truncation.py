"""Truncation: exclude the oldest groups once history exceeds a size, down to a smaller one."""

from __future__ import annotations

from collections.abc import Iterable

from ..groups import MessageGroup, MessageGroupKind
from ..index import MessageIndex
from ..tokenizers import Tokenizer
from ..triggers import CompactionTrigger, non_negative
from ._stepping import StepStrategy, exclude_oldest, message_count, unprotected
from .base import TokenMeter

__all__ = ["TruncationStrategy"]


class TruncationStrategy(StepStrategy):
    """Exclude the oldest groups once history exceeds ``max_n``, until it is at most ``compact_to``.

    The measure is tokens when a ``tokenizer`` is given, messages otherwise. Tool-call groups go
    as a whole, so the result may be a little under ``compact_to``.

    Args:
        max_n: Compaction starts when the measure exceeds this.
        compact_to: Compaction stops once the measure is at most this.
        tokenizer: Count tokens with it (measure = tokens); ``None`` measures messages.
        preserve_system: Keep system messages (default); ``False`` lets them go oldest-first too.
        preserve_first_user_group: Never drop the first user message (the task a long run
            started from).
        trigger: Replaces the ``max_n`` trigger.
        target: Replaces the ``compact_to`` target.
        minimum_preserved: The newest non-system groups that are always kept (at least 1).

    Raises:
        ValueError: ``compact_to`` is greater than ``max_n``, or a count is negative.

    Example:
        >>> truncation = TruncationStrategy(
        ...     max_n=32_000, compact_to=16_000, tokenizer=CharacterEstimatorTokenizer()
        ... )
    """

    exclude_reason = "truncation"

    def __init__(
        self,
        max_n: int,
        compact_to: int,
        tokenizer: Tokenizer | None = None,
        preserve_system: bool = True,
        *,
        preserve_first_user_group: bool = False,
        trigger: CompactionTrigger | None = None,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        non_negative("max_n", max_n)
        non_negative("compact_to", compact_to)
        if compact_to > max_n:
            raise ValueError(f"compact_to must be less than or equal to max_n, not {compact_to} > {max_n}")
        self.max_n = max_n
        self.compact_to = compact_to
        self.tokenizer = tokenizer
        self.preserve_system = preserve_system
        self.preserve_first_user_group = preserve_first_user_group
        super().__init__(
            trigger=trigger if trigger is not None else self._over_max,
            target=target if target is not None else self._at_most_compact_to,
            minimum_preserved=minimum_preserved,
        )

    def _measure(self, index: MessageIndex) -> int:
        if self.tokenizer is None:
            return index.included_message_count
        return TokenMeter(index, self.tokenizer)()

    def _over_max(self, index: MessageIndex) -> bool:
        return self._measure(index) > self.max_n

    def _at_most_compact_to(self, index: MessageIndex) -> bool:
        return self._measure(index) <= self.compact_to

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        # Without preserve_system, system groups older than the protected tail may go too.
        groups = unprotected(index, self.minimum_preserved, include_system=not self.preserve_system)
        if not self.preserve_first_user_group:
            return groups
        first = next((g for g in index.groups if g.kind is MessageGroupKind.USER), None)
        return (g for g in groups if g is not first)

    async def compact(self, index: MessageIndex) -> bool:
        """Exclude the oldest groups while the measure is above ``compact_to`` (see the class).

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if self.target != self._at_most_compact_to:  # a target of the caller's: check it each step
            return await super().compact(index)
        # The default target: keep a running measure instead of re-measuring after each group, and
        # exclude the groups that go at once.
        meter = TokenMeter(index, self.tokenizer) if self.tokenizer is not None else None
        total = meter() if meter is not None else index.included_message_count
        if not self.trigger(index):
            return False
        cost = meter.group_cost if meter is not None else message_count
        return exclude_oldest(index, self._candidates(index), total, self.compact_to, cost)

    def __repr__(self) -> str:
        return (
            f"TruncationStrategy(max_n={self.max_n}, compact_to={self.compact_to}, "
            f"tokenizer={self.tokenizer!r}, preserve_system={self.preserve_system})"
        )
