"""The storage contract: an append-only message log per conversation, with a compacted view.

Every durable history backend (SQLite, Redis, PostgreSQL) and the in-memory one implement
:class:`MessageStore`, and all of them pass one conformance suite (``tests/storage``). The contract:

* **append** messages to a conversation, atomically (a turn is stored whole or not at all). The
  backend assigns each message a per-conversation sequence number (``seq``, from 1, increasing,
  shared with summaries). Messages keep their ids and creation times. Appending a batch whose
  message ids were already appended (a retry after a failure) stores nothing again and returns
  the original sequence numbers.
* **read** the raw log (every appended message, excluded ones included), all or a window: the last
  ``n`` and/or those after a sequence number; oldest first.
* **read_view**: the compacted view, what history loads: non-excluded messages, with each
  non-excluded summary placed where the first message it replaces was. It carries the compaction
  ``epoch`` and the conversation's ``last_seq`` so a reader can cache it and later ask only for
  what is new (``after=``) as long as the epoch is unchanged.
* **record_compaction**: mark messages excluded and add summaries (each listing the ids it
  replaces). Originals are kept; the epoch goes up.
* **delete** a conversation and everything derived from it; **expire** it after a time to live.
* **list_conversations**: what is stored (for tools and hosts that inspect history), most recently
  active first.

Optional retention settings every backend honours: ``max_messages`` (keep only the newest raw
messages; applied atomically with the append) and ``ttl`` (seconds of inactivity after which the
conversation expires; refreshed by every append).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..messages import Message

__all__ = [
    "DEDUP_WINDOW",
    "ConversationInfo",
    "HistoryView",
    "MessageStore",
    "StoredMessage",
    "Summary",
    "check_retention",
    "newest_first",
]

DEDUP_WINDOW = 256
"""How many of the newest stored entries an append checks for ids of a retried batch."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as stored in a conversation's log.

    Attributes:
        seq: Its per-conversation sequence number, assigned by the backend.
        message: The message (with its id and creation time).
        excluded: Whether a compaction excluded it from the view.
        replaces: For a summary, the ids of the messages it replaces (empty otherwise).
    """

    seq: int
    message: Message
    excluded: bool = False
    replaces: tuple[str, ...] = ()

    @property
    def is_summary(self) -> bool:
        """Whether this entry is a summary recorded by a compaction."""
        return bool(self.replaces)


@dataclass(frozen=True, slots=True)
class Summary:
    """A summary message and the ids of the messages it replaces (at least one, all stored)."""

    message: Message
    replaces: Sequence[str]


@dataclass(frozen=True, slots=True)
class HistoryView:
    """The compacted view of a conversation (or the part of it a read asked for).

    Attributes:
        entries: View entries in view order (summaries at their anchors).
        epoch: The compaction epoch: 0 until the first compaction, then +1 per compaction.
        last_seq: The highest sequence number the conversation has assigned (0 when empty).
    """

    entries: list[StoredMessage] = field(default_factory=list[StoredMessage])
    epoch: int = 0
    last_seq: int = 0

    @property
    def messages(self) -> list[Message]:
        """The view's messages."""
        return [entry.message for entry in self.entries]


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """What :meth:`MessageStore.list_conversations` reports about one conversation.

    Attributes:
        conversation_id: The conversation.
        message_count: Raw messages stored (excluded ones included, summaries not).
        last_seq: The highest sequence number assigned.
        updated_at: Creation time of the newest stored message (``None`` if it has none).
    """

    conversation_id: str
    message_count: int
    last_seq: int
    updated_at: datetime | None


def check_retention(max_messages: int | None, ttl: float | None) -> None:
    """Refuse retention settings (see the module docs) that no backend can honour.

    Raises:
        ValueError: ``max_messages`` or ``ttl`` is not positive.
    """
    if max_messages is not None and max_messages <= 0:
        raise ValueError("max_messages must be positive")
    if ttl is not None and ttl <= 0:
        raise ValueError("ttl must be positive")


def newest_first(infos: list[ConversationInfo]) -> None:
    """Sort ``infos`` in place, most recently active first (those without messages last)."""
    infos.sort(key=_activity, reverse=True)


def _activity(info: ConversationInfo) -> float:
    return info.updated_at.timestamp() if info.updated_at is not None else float("-inf")


@runtime_checkable
class MessageStore(Protocol):
    """An append-only message log per conversation with a compacted view (see the module docs).

    Every method raises :class:`~agentkeep.errors.StorageUnavailableError` when the backend cannot
    be reached (after its timeout), :class:`~agentkeep.errors.CorruptRecordError` for a record it
    cannot decode, and :class:`~agentkeep.errors.StorageClosedError` after :meth:`aclose`.
    """

    @property
    def backend(self) -> str:
        """The backend's name: ``"memory"``, ``"sqlite"``, ``"redis"``, ``"postgres"``."""
        ...

    async def setup(self) -> None:
        """Create or migrate what the backend needs; idempotent.

        Raises:
            SchemaVersionError: The stored data was written by a newer format version.
        """
        ...

    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        """Append ``messages`` atomically; returns their sequence numbers.

        Messages without an id or creation time get them (on the caller's objects). A batch whose
        first message id is among the newest :data:`DEDUP_WINDOW` stored entries is a retry: it
        stores nothing and returns the original sequence numbers.
        """
        ...

    async def read(
        self, conversation_id: str, *, last: int | None = None, after: int | None = None
    ) -> list[StoredMessage]:
        """Raw log entries (excluded ones included, summaries not), oldest first.

        Args:
            conversation_id: The conversation.
            last: Only the newest ``last`` entries (of those after ``after``).
            after: Only entries with ``seq > after``.
        """
        ...

    async def read_view(
        self, conversation_id: str, *, last: int | None = None, after: int | None = None
    ) -> HistoryView:
        """The compacted view, in view order.

        Args:
            conversation_id: The conversation.
            last: Only the last ``last`` view entries.
            after: Only entries with ``seq > after`` (for readers that cached an earlier view
                with the same epoch: these are exactly the messages appended since).
        """
        ...

    async def record_compaction(
        self,
        conversation_id: str,
        *,
        excluded: Collection[str] = (),
        summaries: Sequence[Summary] = (),
    ) -> int:
        """Exclude messages (by id) from the view and add summaries; returns the new epoch.

        Originals stay in the log. Excluding an unknown id is ignored; a summary whose
        ``replaces`` names no stored message raises ``ValueError``.
        """
        ...

    async def delete(self, conversation_id: str) -> bool:
        """Delete the conversation and everything derived from it; ``False`` if it did not exist."""
        ...

    async def list_conversations(self, *, limit: int | None = None) -> list[ConversationInfo]:
        """Stored (unexpired) conversations, most recently active first; at most ``limit``."""
        ...

    async def expire(self, conversation_id: str, ttl: float | None) -> bool:
        """Expire the conversation ``ttl`` seconds from now (``None``: never); ``False`` if absent."""
        ...

    async def aclose(self) -> None:
        """Release what this store owns (a client it created); idempotent."""
        ...
