"""Old home of the message groups and the summary mark; they live in :mod:`agentkeep.compaction.groups`
now (and the grouping rules with the index, :mod:`agentkeep.compaction.index`).

Kept so that existing imports (``from agentkeep.compaction.grouping import MessageGroup``) work.
"""

from .groups import (
    SUMMARY_PROPERTY,
    MessageGroup,
    MessageGroupKind,
    is_summary_message,
    summarized_message_ids,
)

__all__ = [
    "SUMMARY_PROPERTY",
    "MessageGroup",
    "MessageGroupKind",
    "is_summary_message",
    "summarized_message_ids",
]
