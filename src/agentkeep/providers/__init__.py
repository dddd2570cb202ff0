"""Context providers: what shapes each run, and the history providers that load and store messages.

What lives where:

* :mod:`.context`: :class:`ContextProvider` (hooks around every run), :class:`AIContext` (what a
  provider adds; :data:`Context` is its earlier name, with :class:`InvokingContext` and
  :class:`InvokedContext` for the earlier hooks), :class:`SessionContext` (one run as it passes
  through the providers) and
  :class:`MessageAIContextProvider` (a provider that only adds messages).
* :mod:`.history`: :class:`HistoryProvider`, the base of every history provider (load before the
  run, store the new messages after it), and its options (:class:`HistoryOptions`).
* :mod:`.in_memory`: :class:`InMemoryHistoryProvider` (messages in the session's state) and the
  reducers (:class:`ChatReducer`, :class:`MessageCountingChatReducer`).
* :mod:`.file`: :class:`FileHistoryProvider` (one append-only file per session, the reference's
  layout).
* :mod:`.storage`: :class:`StorageHistoryProvider`, history in any
  :class:`~agentkeep.message_stores.base.MessageStore` (the session keeps only a key). The backend
  modules (:mod:`agentkeep.message_stores.sqlite`, ...) subclass it with convenient constructors.
"""

from .context import (
    AIContext,
    Context,
    ContextProvider,
    InvokedContext,
    InvokingContext,
    MessageAIContextProvider,
    SessionContext,
)
from .file import FileHistoryProvider
from .history import HistoryOptions, HistoryProvider, MessageFilter
from .in_memory import ChatReducer, InMemoryHistoryProvider, InMemoryHistoryState, MessageCountingChatReducer
from .storage import ConversationState, StorageHistoryProvider

__all__ = [
    "AIContext",
    "ChatReducer",
    "Context",
    "ContextProvider",
    "ConversationState",
    "FileHistoryProvider",
    "HistoryOptions",
    "HistoryProvider",
    "InMemoryHistoryProvider",
    "InMemoryHistoryState",
    "InvokedContext",
    "InvokingContext",
    "MessageAIContextProvider",
    "MessageCountingChatReducer",
    "MessageFilter",
    "SessionContext",
    "StorageHistoryProvider",
]
