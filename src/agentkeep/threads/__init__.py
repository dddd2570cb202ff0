"""The earlier thread API of seeds 003 and 004, as a thin layer over today's pipeline.

* :class:`ChatAgent` — an :class:`~agentkeep.agent.Agent` on threads, with
  ``chat_message_store_factory``;
* :class:`AgentThread` — a session with the earlier attributes (``message_store``,
  ``service_thread_id``, ``context_provider.providers``) and ``await thread.serialize()``;
* :class:`ChatMessageStoreProtocol` (``add_messages``, ``list_messages``, ``serialize_state``,
  ``deserialize_state``), the in-memory :class:`ChatMessageStore`, and
  :class:`MessageStoreHistoryProvider`, the history provider that runs a store;
* :class:`ChatMessage` and :class:`ChatRole` — a message in the earlier spelling.

The earlier ``ContextProvider`` shape (``invoking`` / ``invoked`` with ``Context``) is served by
:class:`agentkeep.ContextProvider` itself; see :mod:`agentkeep.providers.context`. The guide is
``docs/threads.md``.
"""

from ..chat_message import ChatMessage, ChatRole, as_chat_messages
from .chat_agent import ChatAgent
from .message_stores import (
    MESSAGE_STORE_KEY,
    ChatMessageStore,
    ChatMessageStoreFactory,
    ChatMessageStoreProtocol,
    MessageStoreHistoryProvider,
)
from .thread import THREAD_STATE_TYPE, AgentThread, AggregateContextProvider

__all__ = [
    "MESSAGE_STORE_KEY",
    "THREAD_STATE_TYPE",
    "AgentThread",
    "AggregateContextProvider",
    "ChatAgent",
    "ChatMessage",
    "ChatMessageStore",
    "ChatMessageStoreFactory",
    "ChatMessageStoreProtocol",
    "ChatRole",
    "MessageStoreHistoryProvider",
    "as_chat_messages",
]
