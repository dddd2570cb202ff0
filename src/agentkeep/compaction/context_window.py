"""Old home of :class:`ContextWindowCompactionStrategy`; it lives in
:mod:`agentkeep.compaction.strategies.context_window` now.

Kept so that existing imports (``from agentkeep.compaction.context_window import ...``) work.
"""

from .strategies.context_window import ContextWindowCompactionStrategy

__all__ = ["ContextWindowCompactionStrategy"]
