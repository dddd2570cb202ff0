"""The earlier API's history contract: a per-thread :class:`ChatMessageStoreProtocol`, the
in-memory :class:`ChatMessageStore`, and the history provider that runs one in today's pipeline.

A message store belongs to one thread (``ChatAgent(chat_message_store_factory=...)`` makes one per
thread): ``add_messages`` appends a run's new messages, ``list_messages`` returns what the model
should see, oldest first (a store that summarizes or trims does so there), and
``serialize_state`` / ``deserialize_state`` carry what it needs to find its messages again (a key,
or for the in-memory store the messages) inside the thread's serialized form.

:class:`MessageStoreHistoryProvider` is an ordinary
:class:`~agentkeep.providers.history.HistoryProvider`: it loads with ``list_messages`` and stores
with ``add_messages`` (the run's input and response; nothing when the run failed). Which store a
session uses is kept in the session's runtime space (never serialized), so a store with a live
connection rides along with its thread. Note that the contract itself reads the whole history per
run (``list_messages``); the in-memory store hands over a zero-copy view instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, Unpack, cast, runtime_checkable

from ..chat_message import ChatMessage
from ..errors import MessageFormatError, SessionFormatError
from ..message_log import MessageLog
from ..messages import Message
from ..providers.history import HistoryOptions, HistoryProvider
from ..sessions import AgentSession

__all__ = [
    "MESSAGE_STORE_KEY",
    "ChatMessageStore",
    "ChatMessageStoreFactory",
    "ChatMessageStoreProtocol",
    "MessageStoreHistoryProvider",
]

MESSAGE_STORE_KEY = "threads:message-store"
"""Where a session's message store lives in ``session.runtime``."""


@runtime_checkable
class ChatMessageStoreProtocol(Protocol):
    """A thread's chat history, as the earlier API's stores implement it (seed 003)."""

    async def add_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Append messages (a run's new ones), in order."""
        ...

    async def list_messages(self) -> list[ChatMessage]:
        """The messages the model should see, oldest first."""
        ...

    async def serialize_state(self, **kwargs: Any) -> Any:
        """What the store needs to find its messages again (JSON-compatible)."""
        ...

    async def deserialize_state(self, serialized_store_state: Any, **kwargs: Any) -> None:
        """Restore what :meth:`serialize_state` wrote."""
        ...


ChatMessageStoreFactory = Callable[[], ChatMessageStoreProtocol]
"""Makes a new, empty message store for a thread."""


class ChatMessageStore:
    """The in-memory message store: a thread's messages in an append-only log, serialized with
    the thread.

    Args:
        messages: Messages to start with.
    """

    SOURCE_ID = "chat_message_store"

    def __init__(self, messages: Sequence[Message] | None = None) -> None:
        self._log = MessageLog(self.SOURCE_ID, messages or ())

    @property
    def messages(self) -> Sequence[Message]:
        """The messages so far (a zero-copy snapshot)."""
        return self._log.view()

    async def add_messages(self, messages: Sequence[Message]) -> None:
        self._log.extend(messages)

    async def list_messages(self) -> list[ChatMessage]:
        """A copy of the messages, as ``ChatMessage`` objects."""
        return [ChatMessage.from_message(m) for m in self._log.view()]

    async def serialize_state(self, **kwargs: Any) -> dict[str, Any]:
        """``{"messages": [<wire form>, ...]}``."""
        return {"messages": self._log.to_list()}

    async def deserialize_state(self, serialized_store_state: Any, **kwargs: Any) -> None:
        """Replace the messages with those of a serialized state (``None`` leaves them).

        Raises:
            SessionFormatError: The state is not ``{"messages": [...]}`` of valid messages.
        """
        if serialized_store_state is None:
            return
        raw: Any = serialized_store_state
        items: Any = cast("dict[str, Any]", raw).get("messages") if isinstance(raw, dict) else None
        if not isinstance(items, list):
            raise SessionFormatError(
                "the in-memory message store's state must be an object with a 'messages' list"
            )
        try:
            decoded = [
                Message.from_dict(item, path=f"messages[{index}]")
                for index, item in enumerate(items)  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
            ]
        except MessageFormatError as exc:
            raise SessionFormatError(f"the in-memory message store's state: {exc}") from exc
        self._log = MessageLog.from_owned(decoded, self.SOURCE_ID)

    def __repr__(self) -> str:
        return f"ChatMessageStore(messages={len(self._log)})"


class MessageStoreHistoryProvider(HistoryProvider):
    """History in a per-thread :class:`ChatMessageStoreProtocol` (the ``ChatAgent`` way).

    Args:
        store_factory: Makes the store of a session that has none yet.
        source_id: Unique id within the agent.
        **options: The :class:`~agentkeep.providers.history.HistoryOptions`.
    """

    DEFAULT_SOURCE_ID = "chat_message_store"
    keeps_session_state = False  # the store is in the session's runtime, its state in the thread's

    def __init__(
        self,
        store_factory: ChatMessageStoreFactory | None = None,
        *,
        source_id: str = DEFAULT_SOURCE_ID,
        **options: Unpack[HistoryOptions],
    ) -> None:
        super().__init__(source_id, **options)
        self.store_factory: ChatMessageStoreFactory = store_factory or ChatMessageStore

    def store_for(self, session: AgentSession) -> ChatMessageStoreProtocol:
        """The session's message store (made by the factory the first time it is asked for)."""
        store = session.runtime.get(MESSAGE_STORE_KEY)
        if store is None:
            store = session.runtime[MESSAGE_STORE_KEY] = self.store_factory()
        return store

    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        if session is None:
            return []
        store = self.store_for(session)
        if isinstance(store, ChatMessageStore):
            return store.messages
        return await store.list_messages()

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: Any = None,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> None:
        if session is None or not messages:
            return
        store = self.store_for(session)
        if isinstance(store, ChatMessageStore):
            await store.add_messages(messages)
        else:  # a user's store gets the earlier API's message type
            await store.add_messages([ChatMessage.from_message(m) for m in messages])
