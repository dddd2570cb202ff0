"""Compaction sized from a model's limits: the harness agent's default strategy.

:class:`ContextWindowCompactionStrategy` turns two numbers from a model's specification, the
context window and the most tokens one reply may take, into an **input budget**
(``max_context_window_tokens - max_output_tokens``) and keeps history inside it in two phases,
gentlest first:

1. **Tool-result collapsing.** Once history exceeds ``tool_eviction_threshold`` of the budget
   (default half), older tool-call groups are collapsed into short ``[Tool results: ...]`` summaries
   (as :class:`~agentkeep.compaction.ToolResultCompactionStrategy` does), oldest first, until it is
   back under that line or only the newest tool-call groups are left.
2. **Truncation.** Once history still exceeds ``truncation_threshold`` of the budget (default
   80%), the oldest non-system groups are excluded (as
   :class:`~agentkeep.compaction.TruncationStrategy` does) until it is back under that line.

The room left above the truncation line absorbs what the next model call adds (a tool result, the
reply) before compaction runs again. System messages and the newest non-system group are always
kept, and a tool call is never separated from its results.

With the index's own tokenizer (``tokenizer=None``, the same object, or an equally configured
:class:`~agentkeep.compaction.CharacterEstimatorTokenizer`) every check reads the index's running
totals and the phases walk only the groups they change, so compacting before each call of a tool
loop costs what the loop added, not the history. A tokenizer that counts differently recounts the
included messages once per phase.
"""

from __future__ import annotations

from ..annotations import AnnotatingStrategy
from ..index import MessageIndex
from ..tokenizers import Tokenizer
from ..triggers import CompactionTrigger, CompactionTriggers, non_negative
from .base import TokenMeter
from .composed import PipelineCompactionStrategy
from .tool_calls import ToolResultCompactionStrategy, tool_group_summary
from .truncation import TruncationStrategy

__all__ = ["ContextWindowCompactionStrategy"]


class _ToolEviction(ToolResultCompactionStrategy):
    """Collapse older tool-call groups while the included tokens exceed ``limit``, keeping a
    running total so each step costs O(1) whatever the tokenizer."""

    def __init__(
        self,
        limit: int,
        tokenizer: Tokenizer | None,
        *,
        keep_last_tool_call_groups: int,
        minimum_preserved: int,
    ) -> None:
        self.limit = limit
        self.tokenizer = tokenizer
        super().__init__(
            keep_last_tool_call_groups=keep_last_tool_call_groups,
            trigger=self._over_limit,  # the target is its inverse
            minimum_preserved=minimum_preserved,
        )

    def _over_limit(self, index: MessageIndex) -> bool:
        return TokenMeter(index, self.tokenizer)() > self.limit

    async def compact(self, index: MessageIndex) -> bool:
        """Collapse the oldest tool-call groups until within the limit (see the module docstring).

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        meter = TokenMeter(index, self.tokenizer)
        total = meter()
        if total <= self.limit:
            return False
        changed = False
        for group in self._candidates(index):
            if total <= self.limit:
                break
            before = meter.group(group)
            summary = index.replace([group], tool_group_summary(group))
            total += meter.group(summary) - before
            changed = True
        return changed

    def __repr__(self) -> str:
        return f"ToolResultCompactionStrategy(keep_last_tool_call_groups={self.keep_last_tool_call_groups})"


def _within(limit: int) -> CompactionTrigger:
    over = CompactionTriggers.tokens_exceed(limit)

    def target(index: MessageIndex) -> bool:
        return not over(index)

    return target


def _check_threshold(name: str, value: float) -> float:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], not {value}")
    return value


class ContextWindowCompactionStrategy(AnnotatingStrategy):
    """Keep history within a model's input budget: collapse old tool results, then drop oldest groups.

    The input budget is ``max_context_window_tokens - max_output_tokens``. Above
    ``tool_eviction_threshold`` of it, older tool-call groups are collapsed into short summaries;
    above ``truncation_threshold`` of it, the oldest non-system groups are excluded until history is
    back under that line. See the module docstring for the details and costs.

    Args:
        max_context_window_tokens: The model's context window (input plus output), in tokens.
        max_output_tokens: The most tokens one reply may take (reserved out of the window).
        tool_eviction_threshold: The share of the input budget above which old tool results are
            collapsed, in ``(0, 1]``.
        truncation_threshold: The share of the input budget above which the oldest groups are
            dropped, in ``(0, 1]``, at least ``tool_eviction_threshold``.
        keep_last_tool_call_groups: How many of the newest tool-call groups are never collapsed
            (default 4, as in the reference).
        preserve_first_user_group: Truncation never drops the first user message (the task).
        tokenizer: Counts tokens; default the index's tokenizer (the cheap path).
        minimum_preserved: The newest non-system groups that are always kept (at least 1).

    Attributes:
        input_budget: ``max_context_window_tokens - max_output_tokens``.
        tool_eviction_limit: The token count above which tool results are collapsed.
        truncation_limit: The token count above which the oldest groups are dropped, and the most
            tokens history holds afterwards unless only protected groups are left.

    Raises:
        ValueError: ``max_context_window_tokens`` is not positive, ``max_output_tokens`` is
            negative or not below it, a floor is negative, or a threshold is out of range.

    Example:
        >>> strategy = ContextWindowCompactionStrategy(128_000, 16_384)
        >>> strategy.input_budget, strategy.truncation_limit
        (111616, 89292)
    """

    exclude_reason = "truncation"
    summary_reason = "tool_result_compaction"

    def __init__(
        self,
        max_context_window_tokens: int,
        max_output_tokens: int,
        *,
        tool_eviction_threshold: float = 0.5,
        truncation_threshold: float = 0.8,
        keep_last_tool_call_groups: int = 4,
        tokenizer: Tokenizer | None = None,
        minimum_preserved: int = 1,
        preserve_first_user_group: bool = False,
    ) -> None:
        if max_context_window_tokens <= 0:
            raise ValueError(f"max_context_window_tokens must be positive, not {max_context_window_tokens}")
        if not 0 <= max_output_tokens < max_context_window_tokens:
            raise ValueError(
                f"max_output_tokens must be >= 0 and < max_context_window_tokens "
                f"({max_context_window_tokens}), not {max_output_tokens}"
            )
        non_negative("keep_last_tool_call_groups", keep_last_tool_call_groups)
        non_negative("minimum_preserved", minimum_preserved)
        _check_threshold("tool_eviction_threshold", tool_eviction_threshold)
        _check_threshold("truncation_threshold", truncation_threshold)
        if truncation_threshold < tool_eviction_threshold:
            raise ValueError(
                f"truncation_threshold must be >= tool_eviction_threshold, not "
                f"{truncation_threshold} < {tool_eviction_threshold}"
            )
        self.max_context_window_tokens = max_context_window_tokens
        self.max_output_tokens = max_output_tokens
        self.tool_eviction_threshold = tool_eviction_threshold
        self.truncation_threshold = truncation_threshold
        self.keep_last_tool_call_groups = keep_last_tool_call_groups
        self.tokenizer = tokenizer
        self.minimum_preserved = minimum_preserved
        self.preserve_first_user_group = preserve_first_user_group
        self.input_budget = max_context_window_tokens - max_output_tokens
        self.tool_eviction_limit = int(self.input_budget * tool_eviction_threshold)
        self.truncation_limit = int(self.input_budget * truncation_threshold)
        # Each phase reads the index's running totals when the tokenizer counts as the index's
        # does (see TokenMeter), and recounts otherwise.
        self._phases = self._pipeline(tokenizer)

    def _pipeline(self, tokenizer: Tokenizer | None) -> PipelineCompactionStrategy:
        limit = self.truncation_limit
        if tokenizer is None:
            # Without a tokenizer TruncationStrategy counts messages: give it the index's tokens.
            truncation = TruncationStrategy(
                limit,
                limit,
                trigger=CompactionTriggers.tokens_exceed(limit),
                target=_within(limit),
                minimum_preserved=self.minimum_preserved,
                preserve_first_user_group=self.preserve_first_user_group,
            )
        else:
            truncation = TruncationStrategy(
                limit,
                limit,
                tokenizer,
                minimum_preserved=self.minimum_preserved,
                preserve_first_user_group=self.preserve_first_user_group,
            )
        tools = _ToolEviction(
            self.tool_eviction_limit,
            tokenizer,
            keep_last_tool_call_groups=self.keep_last_tool_call_groups,
            minimum_preserved=self.minimum_preserved,
        )
        return PipelineCompactionStrategy(tools, truncation)

    async def compact(self, index: MessageIndex) -> bool:
        """Bring ``index`` within the limits, gentlest phase first.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        return await self._phases.compact(index)

    def __repr__(self) -> str:
        return (
            f"ContextWindowCompactionStrategy(max_context_window_tokens={self.max_context_window_tokens}, "
            f"max_output_tokens={self.max_output_tokens}, "
            f"tool_eviction_threshold={self.tool_eviction_threshold}, "
            f"truncation_threshold={self.truncation_threshold}, tokenizer={self.tokenizer!r})"
        )
