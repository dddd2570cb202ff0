"""Old home of the harness agent; it lives in :mod:`agentkeep.compaction.harness` now.

Kept so that existing imports (``from agentkeep.harness import create_harness_agent``) work.
"""

from .compaction.harness import AFTER_COMPACTION_SOURCE_ID, BEFORE_COMPACTION_SOURCE_ID, create_harness_agent

__all__ = ["AFTER_COMPACTION_SOURCE_ID", "BEFORE_COMPACTION_SOURCE_ID", "create_harness_agent"]
