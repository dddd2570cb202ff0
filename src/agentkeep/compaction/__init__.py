"""History compaction: the structured view of a message list and the measures strategies use.

What lives where:

* :mod:`~agentkeep.compaction.groups`: :class:`MessageIndex` (groups, turns and included counts
  over a message list, updated incrementally), :class:`MessageGroup`, :class:`MessageGroupKind`,
  and the summary mark (:data:`SUMMARY_PROPERTY`, :func:`is_summary_message`,
  :func:`summarized_message_ids`).
* :mod:`~agentkeep.compaction.triggers`: :data:`CompactionTrigger` and the
  :class:`CompactionTriggers` factories (``tokens_exceed``, ``turns_exceed``, ...).
* :mod:`~agentkeep.compaction.tokenizers`: the :class:`Tokenizer` protocol,
  :class:`CharacterEstimatorTokenizer`, the exact :class:`OpenAITokenizer` (optional
  ``bpe-openai`` package) and :func:`count_message_tokens`.

* :mod:`~agentkeep.compaction.strategies`: the :class:`CompactionStrategy` protocol, the
  strategies that need no model (truncation, sliding windows, tool-result collapsing, selective
  tool-call removal, pipeline, token budget) and :func:`apply_compaction`.

Summarization, the compaction provider and the harness agent build on these and are added
separately.
"""

from __future__ import annotations

from .groups import (
    SUMMARY_PROPERTY,
    MessageGroup,
    MessageGroupKind,
    MessageIndex,
    is_summary_message,
    summarized_message_ids,
)
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
    "MESSAGE_OVERHEAD_TOKENS",
    "SUMMARY_PROPERTY",
    "CharacterEstimatorTokenizer",
    "CompactionStrategy",
    "CompactionTrigger",
    "CompactionTriggers",
    "MessageGroup",
    "MessageGroupKind",
    "MessageIndex",
    "OpenAITokenizer",
    "PipelineCompactionStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowCompactionStrategy",
    "SlidingWindowStrategy",
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
