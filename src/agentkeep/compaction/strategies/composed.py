"""Composed strategies: a pipeline of strategies, and a token budget kept by strategies then a fallback."""

from __future__ import annotations

from collections.abc import Sequence

from ..annotations import AnnotatingStrategy, index_strategy
from ..groups import MessageGroupKind
from ..index import MessageIndex
from ..tokenizers import Tokenizer
from ..triggers import CompactionTrigger, CompactionTriggers, non_negative
from ._stepping import exclude_oldest, unprotected
from .base import CompactionStrategy, StrategyLike, TokenMeter

__all__ = ["PipelineCompactionStrategy", "TokenBudgetComposedStrategy"]


class PipelineCompactionStrategy(AnnotatingStrategy):
    """Run strategies in order, each on the result of the previous one; put the gentlest first.

    Each child evaluates its own trigger; the pipeline's own trigger defaults to always.

    Args:
        *strategies: The children, gentlest first.
        trigger: When to run the pipeline at all (default: always).

    Example:
        >>> pipeline = PipelineCompactionStrategy(
        ...     ToolResultCompactionStrategy(trigger=CompactionTriggers.tokens_exceed(0x200)),
        ...     SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(4)),
        ... )
    """

    def __init__(self, *strategies: StrategyLike, trigger: CompactionTrigger | None = None) -> None:
        self.strategies: tuple[CompactionStrategy, ...] = tuple(map(index_strategy, strategies))
        self.trigger: CompactionTrigger = trigger if trigger is not None else CompactionTriggers.always

    async def compact(self, index: MessageIndex) -> bool:
        """Run every child in order.

        Args:
            index: The history to compact.

        Returns:
            Whether any child changed anything.
        """
        if not self.trigger(index):
            return False
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
        return changed

    def __repr__(self) -> str:
        return f"PipelineCompactionStrategy({', '.join(map(repr, self.strategies))})"


class TokenBudgetComposedStrategy(AnnotatingStrategy):
    """Run strategies in order until history fits ``token_budget``, then drop oldest groups if needed.

    Nothing runs while the included tokens are within the budget. With ``early_stop`` (default)
    the remaining children are skipped as soon as the budget holds. If the children are not
    enough, the oldest non-system groups are excluded (never the newest ``minimum_preserved``);
    if that is still not enough, system messages go too, oldest first, as in the reference
    (``strict_budget=False`` keeps them), while the newest group always stays.

    Args:
        token_budget: The most tokens the compacted history may hold.
        tokenizer: Counts tokens (the index's own counts are used when it is the index's tokenizer).
        strategies: The children, gentlest first.
        early_stop: Stop after the first child that brings history within the budget.
        minimum_preserved: The newest non-system groups the fallback always keeps (default 1).
        strict_budget: Let the fallback exclude system messages when nothing else is left.

    Raises:
        ValueError: A count is negative.
    """

    exclude_reason = "token_budget_fallback"

    def __init__(
        self,
        token_budget: int,
        tokenizer: Tokenizer,
        strategies: Sequence[StrategyLike],
        early_stop: bool = True,
        *,
        minimum_preserved: int = 1,
        strict_budget: bool = True,
    ) -> None:
        self.token_budget = non_negative("token_budget", token_budget)
        self.tokenizer = tokenizer
        self.strategies: tuple[CompactionStrategy, ...] = tuple(map(index_strategy, strategies))
        self.early_stop = early_stop
        self.minimum_preserved = non_negative("minimum_preserved", minimum_preserved)
        self.strict_budget = strict_budget

    def trigger(self, index: MessageIndex) -> bool:
        """Whether the included tokens exceed the budget."""
        return TokenMeter(index, self.tokenizer)() > self.token_budget

    async def compact(self, index: MessageIndex) -> bool:
        """Run the children, then the oldest-first fallback, until within the budget.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if not self.trigger(index):
            return False
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
            if self.early_stop and not self.trigger(index):
                return changed
        meter = TokenMeter(index, self.tokenizer)
        candidates = unprotected(index, self.minimum_preserved)
        changed = exclude_oldest(index, candidates, meter(), self.token_budget, meter.group_cost) or changed
        total = meter()
        if not self.strict_budget or total <= self.token_budget:
            return changed
        # Only system messages and the kept tail are left: system messages go too, oldest first,
        # but never the newest group (the projection is never empty).
        newest = index.newest_included(1) or [g for g in index.groups if not g.excluded][-1:]
        systems = [g for g in index.oldest_included(include_system=True) if g.kind is MessageGroupKind.SYSTEM]
        systems = [g for g in systems if g not in newest]
        return exclude_oldest(index, systems, total, self.token_budget, meter.group_cost) or changed

    def __repr__(self) -> str:
        return (
            f"TokenBudgetComposedStrategy(token_budget={self.token_budget}, tokenizer={self.tokenizer!r}, "
            f"strategies={list(self.strategies)!r}, early_stop={self.early_stop})"
        )
