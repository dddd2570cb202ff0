"""History compaction: the structured view of a message list, the strategies that shrink it, and
where compaction runs in an agent.

What lives where:

* :mod:`~agentkeep.compaction.groups`: :class:`MessageGroup` (the unit kept or removed together),
  :class:`MessageGroupKind` and the summary mark (:data:`SUMMARY_PROPERTY`,
  :func:`is_summary_message`, :func:`summarized_message_ids`).
* :mod:`~agentkeep.compaction.index`: :class:`MessageIndex` (groups, turns and included counts
  over a message list, updated incrementally; the grouping rules; summaries put in place; lazy
  walks; change tracking).
* :mod:`~agentkeep.compaction.triggers`: :data:`CompactionTrigger` and the
  :class:`CompactionTriggers` factories (``tokens_exceed``, ``turns_exceed``, ...).
* :mod:`~agentkeep.compaction.tokenizers`: the :class:`Tokenizer` protocol,
  :class:`CharacterEstimatorTokenizer`, the exact :class:`OpenAITokenizer` (optional
  ``bpe-openai`` package) and :func:`count_message_tokens`.
* :mod:`~agentkeep.compaction.strategies`: the :class:`CompactionStrategy` protocol and every
  strategy, one module per family (truncation, windows, tool calls, composed, summarization,
  context window), and :func:`apply_compaction`.
* :mod:`~agentkeep.compaction.provider`: :class:`CompactionProvider`, where compaction runs in an
  agent (before each model call, before or after each run) with a per-session incremental index.
* :mod:`~agentkeep.compaction.harness`: :func:`create_harness_agent`, an agent that compacts
  before every model call of its tool loop and after every run.
* :mod:`~agentkeep.compaction.annotations`: the reference's view: groups and exclusions written
  on the messages of a plain list (:func:`annotate_message_groups`, :func:`included_messages`,
  the ``*_KEY`` names), every strategy callable as ``await strategy(messages)``, and strategies
  written that way run wherever agentkeep takes one.

Two window strategies share a name stem, from the two editions of the reference:
:class:`SlidingWindowStrategy` keeps the newest *message groups*, while
:class:`SlidingWindowCompactionStrategy` drops the oldest whole *turns*.
"""

from __future__ import annotations

from ..errors import SummarizationError
from .annotations import (
    EXCLUDE_REASON_KEY,
    EXCLUDED_KEY,
    GROUP_ANNOTATION_KEY,
    GROUP_HAS_REASONING_KEY,
    GROUP_ID_KEY,
    GROUP_INDEX_KEY,
    GROUP_KIND_KEY,
    GROUP_TOKEN_COUNT_KEY,
    SUMMARIZED_BY_SUMMARY_ID_KEY,
    SUMMARY_OF_GROUP_IDS_KEY,
    SUMMARY_OF_MESSAGE_IDS_KEY,
    AnnotatedCompactionStrategy,
    annotate_message_groups,
    annotate_token_counts,
    append_compaction_message,
    extend_compaction_messages,
    included_messages,
    included_token_count,
)
from .groups import (
    SUMMARY_PROPERTY,
    MessageGroup,
    MessageGroupKind,
    is_summary_message,
    summarized_message_ids,
)
from .harness import create_harness_agent
from .index import MessageIndex
from .provider import CompactionPhase, CompactionProvider
from .strategies import (
    DEFAULT_SUMMARIZATION_PROMPT,
    CompactionStrategy,
    ContextWindowCompactionStrategy,
    PipelineCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
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
    "DEFAULT_SUMMARIZATION_PROMPT",
    "EXCLUDED_KEY",
    "EXCLUDE_REASON_KEY",
    "GROUP_ANNOTATION_KEY",
    "GROUP_HAS_REASONING_KEY",
    "GROUP_ID_KEY",
    "GROUP_INDEX_KEY",
    "GROUP_KIND_KEY",
    "GROUP_TOKEN_COUNT_KEY",
    "MESSAGE_OVERHEAD_TOKENS",
    "SUMMARIZED_BY_SUMMARY_ID_KEY",
    "SUMMARY_OF_GROUP_IDS_KEY",
    "SUMMARY_OF_MESSAGE_IDS_KEY",
    "SUMMARY_PROPERTY",
    "AnnotatedCompactionStrategy",
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
    "annotate_message_groups",
    "annotate_token_counts",
    "append_compaction_message",
    "apply_compaction",
    "count_message_tokens",
    "create_harness_agent",
    "extend_compaction_messages",
    "included_messages",
    "included_token_count",
    "is_summary_message",
    "message_token_text",
    "project",
    "summarized_message_ids",
    "tool_group_summary_text",
]
