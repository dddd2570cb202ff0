"""Old home of the history providers; they live in :mod:`agentkeep.providers` now.

Kept so that existing imports (``from agentkeep.history import InMemoryHistoryProvider``) work.
"""

from .providers.history import HistoryOptions, HistoryProvider, MessageFilter
from .providers.in_memory import (
    ChatReducer,
    InMemoryHistoryProvider,
    InMemoryHistoryState,
    MessageCountingChatReducer,
    ReducerTrigger,
)

__all__ = [
    "ChatReducer",
    "HistoryOptions",
    "HistoryProvider",
    "InMemoryHistoryProvider",
    "InMemoryHistoryState",
    "MessageCountingChatReducer",
    "MessageFilter",
    "ReducerTrigger",
]
