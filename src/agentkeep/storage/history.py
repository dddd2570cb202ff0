"""Old home of the storage-backed history provider; it lives in :mod:`agentkeep.providers.storage` now.

Kept so that existing imports (``from agentkeep.storage.history import StorageHistoryProvider``)
work.
"""

from ..providers.storage import ConversationState, StorageHistoryProvider

__all__ = ["ConversationState", "StorageHistoryProvider"]
