"""Durable history: the storage contract, its backends and the history providers built on it.

The contract (:mod:`.base`) is an append-only message log per conversation with a compacted view.
Backends: :mod:`.memory` (in process), :mod:`.sqlite` (embedded default), :mod:`.redis`
(extra ``[redis]``), :mod:`.postgres` (extra ``[postgres]``). Import a backend module to use it.
"""

from .base import DEDUP_WINDOW, ConversationInfo, HistoryView, MessageStore, StoredMessage, Summary
from .history import ConversationState, StorageHistoryProvider
from .memory import InMemoryMessageStore

__all__ = [
    "DEDUP_WINDOW",
    "ConversationInfo",
    "ConversationState",
    "HistoryView",
    "InMemoryMessageStore",
    "MessageStore",
    "StorageHistoryProvider",
    "StoredMessage",
    "Summary",
]
