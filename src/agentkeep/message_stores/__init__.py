"""Durable history: the storage contract and its backends.

The contract (:mod:`.base`) is an append-only message log per conversation with a compacted
view: a core every backend implements (:class:`MessageStore`) and optional capabilities
(:class:`SupportsSetup`, :class:`SupportsClose`, :class:`SupportsListing`,
:class:`SupportsExpiry`, :class:`SupportsPurge`, :class:`SupportsRecordRewrite`). Backends:
:mod:`.memory` (in process), :mod:`.sqlite` (embedded default), :mod:`.redis` (extra
``[redis]``), :mod:`.postgres` (extra ``[postgres]``); import a backend module to use it, or
open one from a URL with :mod:`agentkeep.store_urls`. The history provider on top of it is
:class:`agentkeep.providers.StorageHistoryProvider`; the record codec is :mod:`.codec`.
"""

from .base import (
    DEDUP_WINDOW,
    ConversationInfo,
    HistoryView,
    MessageStore,
    StoredMessage,
    StoredRecord,
    Summary,
    SupportsClose,
    SupportsExpiry,
    SupportsListing,
    SupportsPurge,
    SupportsRecordRewrite,
    SupportsSetup,
    close_store,
    setup_store,
)
from .memory import InMemoryMessageStore

__all__ = [
    "DEDUP_WINDOW",
    "ConversationInfo",
    "HistoryView",
    "InMemoryMessageStore",
    "MessageStore",
    "StoredMessage",
    "StoredRecord",
    "Summary",
    "SupportsClose",
    "SupportsExpiry",
    "SupportsListing",
    "SupportsPurge",
    "SupportsRecordRewrite",
    "SupportsSetup",
    "close_store",
    "setup_store",
]
