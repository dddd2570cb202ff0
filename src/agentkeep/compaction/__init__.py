"""History compaction: the structured view of a message list and the measures strategies use.

What lives where:

* :mod:`~agentkeep.compaction.groups`: :class:`MessageIndex` (groups, turns and included counts
  over a message list, updated incrementally; summaries put in place; lazy walks; change
  tracking), re-exporting :class:`MessageGroup`, :class:`MessageGroupKind` and the summary mark
  (:data:`SUMMARY_PROPERTY`, :func:`is_summary_message`, :func:`summarized_message_ids`) from
  :mod:`~agentkeep.compaction.grouping`, which holds the grouping rules.
* :mod:`~agentkeep.compaction.triggers`: :data:`CompactionTrigger` and the
  :class:`CompactionTriggers` factories (``tokens_exceed``, ``turns_exceed``, ...).
* :mod:`~agentkeep.compaction.tokenizers`: the :class:`Tokenizer` protocol,
  :class:`CharacterEstimatorTokenizer`, the exact :class:`OpenAITokenizer` (optional
  ``bpe-openai`` package) and :func:`count_message_tokens`.

* :mod:`~agentkeep.compaction.strategies`: the :class:`CompactionStrategy` protocol, the
  strategies that need no model (truncation, sliding windows, tool-result collapsing, selective
  tool-call removal, pipeline, token budget) and :func:`apply_compaction`.
* :mod:`~agentkeep.compaction.summarization`: :class:`SummarizationStrategy` (a model summarizes
  the oldest groups in one call; a failure leaves history unchanged and is kept as a
  :class:`SummarizationError`) and :data:`DEFAULT_SUMMARIZATION_PROMPT`.
* :mod:`~agentkeep.compaction.context_window`: :class:`ContextWindowCompactionStrategy`, the
  harness agent's default: an input budget from a model's context window and output limit, kept by
  collapsing old tool results, then dropping the oldest groups.

* :mod:`~agentkeep.compaction.provider`: :class:`CompactionProvider`, where compaction runs in an
  agent (before each model call, before or after each run) with a per-session incremental index.

The harness agent (:func:`agentkeep.harness.create_harness_agent`) wires these into the tool loop.
"""

from __future__ import annotations

from .context_window import ContextWindowCompactionStrategy
from .groups import (
    SUMMARY_PROPERTY,
    MessageGroup,
    MessageGroupKind,
    MessageIndex,
    is_summary_message,
    summarized_message_ids,
)
from .provider import CompactionPhase, CompactionProvider
from .strategies import (
    CompactionStrategy,
    PipelineCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction,
    project,
    tool_group_summary_text,
)
from .summarization import DEFAULT_SUMMARIZATION_PROMPT, SummarizationError, SummarizationStrategy
from .tokenizers import (
    MESSAGE_OVERHEAD_TOKENS,
    CharacterEstimatorTokenizer,
    OpenAITokenizer,
    Tokenizer,
    count_message_tokens,
    message_token_text,
)
from .triggers import CompactionTrigger, CompactionTriggers

__all__ = [
    "DEFAULT_SUMMARIZATION_PROMPT",
    "MESSAGE_OVERHEAD_TOKENS",
    "SUMMARY_PROPERTY",
    "CharacterEstimatorTokenizer",
    "CompactionPhase",
    "CompactionProvider",
    "CompactionStrategy",
    "CompactionTrigger",
    "CompactionTriggers",
    "ContextWindowCompactionStrategy",
    "MessageGroup",
    "MessageGroupKind",
    "MessageIndex",
    "OpenAITokenizer",
    "PipelineCompactionStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowCompactionStrategy",
    "SlidingWindowStrategy",
    "SummarizationError",
    "SummarizationStrategy",
    "TokenBudgetComposedStrategy",
    "Tokenizer",
    "ToolResultCompactionStrategy",
    "TruncationStrategy",
    "apply_compaction",
    "count_message_tokens",
    "is_summary_message",
    "message_token_text",
    "project",
    "summarized_message_ids",
    "tool_group_summary_text",
]
