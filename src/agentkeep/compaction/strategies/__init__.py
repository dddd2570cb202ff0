"""Compaction strategies, one module per family; every name is re-exported here.

A :class:`CompactionStrategy` works on a :class:`~agentkeep.compaction.MessageIndex` in place and
returns whether it changed anything. The families:

* :mod:`.truncation`: :class:`TruncationStrategy` (oldest groups out once history exceeds a size);
* :mod:`.windows`: :class:`SlidingWindowStrategy` (keep the newest *groups*) and
  :class:`SlidingWindowCompactionStrategy` (keep the newest whole *turns*);
* :mod:`.tool_calls`: :class:`ToolResultCompactionStrategy` (collapse older tool calls into
  one-line summaries) and :class:`SelectiveToolCallCompactionStrategy` (drop them);
* :mod:`.composed`: :class:`PipelineCompactionStrategy` and :class:`TokenBudgetComposedStrategy`;
* :mod:`.summarization`: :class:`SummarizationStrategy` (a model summarizes the oldest groups);
* :mod:`.context_window`: :class:`ContextWindowCompactionStrategy` (the harness agent's default).

:mod:`.base` holds the contract, :func:`apply_compaction` (compact a plain list once) and the
token measures strategies share.

Every strategy but summarization has a **trigger** (when to start), a **target** (when to stop;
default: the trigger's inverse) and a **minimum_preserved** floor (the newest non-system groups
never touched; at least one). System groups are never excluded (except by
:class:`TruncationStrategy` with ``preserve_system=False``), and a tool-call group is excluded or
collapsed as a whole. Strategies walk groups lazily from the index's cursors and stop as soon as
the target holds, so compacting again after a turn costs about what that turn added; on a cold
history, work is done in batches. Names and defaults follow the Python edition of the reference
(seed 002), plus the turn-based .NET-style :class:`SlidingWindowCompactionStrategy`.
"""

from .base import (
    CompactionStrategy,
    StrategyLike,
    TokenMeter,
    apply_compaction,
    counts_like,
    project,
    resolve_tokenizer,
)
from .composed import PipelineCompactionStrategy, TokenBudgetComposedStrategy
from .context_window import ContextWindowCompactionStrategy
from .summarization import DEFAULT_SUMMARIZATION_PROMPT, SummarizationStrategy
from .tool_calls import (
    SelectiveToolCallCompactionStrategy,
    ToolResultCompactionStrategy,
    one_line,
    tool_group_summary,
    tool_group_summary_text,
)
from .truncation import TruncationStrategy
from .windows import SlidingWindowCompactionStrategy, SlidingWindowStrategy

__all__ = [
    "DEFAULT_SUMMARIZATION_PROMPT",
    "CompactionStrategy",
    "ContextWindowCompactionStrategy",
    "PipelineCompactionStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowCompactionStrategy",
    "SlidingWindowStrategy",
    "StrategyLike",
    "SummarizationStrategy",
    "TokenBudgetComposedStrategy",
    "TokenMeter",
    "ToolResultCompactionStrategy",
    "TruncationStrategy",
    "apply_compaction",
    "counts_like",
    "one_line",
    "project",
    "resolve_tokenizer",
    "tool_group_summary",
    "tool_group_summary_text",
]
