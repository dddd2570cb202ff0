"""Old home of :class:`SummarizationStrategy`; it lives in
:mod:`agentkeep.compaction.strategies.summarization` now.

Kept so that existing imports (``from agentkeep.compaction.summarization import ...``) work.
"""

from ..errors import SummarizationError
from .strategies.summarization import DEFAULT_SUMMARIZATION_PROMPT, SummarizationStrategy

__all__ = ["DEFAULT_SUMMARIZATION_PROMPT", "SummarizationError", "SummarizationStrategy"]
