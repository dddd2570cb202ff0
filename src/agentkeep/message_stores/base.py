"""The storage contract: an append-only message log per conversation, with a compacted view.

Every durable history backend (SQLite, Redis, PostgreSQL) and the in-memory one implement
:class:`MessageStore`, and all of them pass one conformance suite
(:mod:`agentkeep.testing.conformance`, which a third-party backend can run too).

**The core** (:class:`MessageStore`, every backend):

* ``backend``: the backend's name, for errors and messages.
* :meth:`~MessageStore.append` messages to a conversation, atomically (a turn is stored whole or
  not at all). The backend assigns each message a per-conversation sequence number (``seq``,
  from 1, increasing, shared with summaries). Messages keep their ids and creation times.
  Appending a batch whose message ids were already appended (a retry after a failure) stores
  nothing again and returns the original sequence numbers.
* :meth:`~MessageStore.read` the compacted **view** (what history loads: non-excluded messages,
  each non-excluded summary placed where the first message it replaces was) or, with
  ``raw=True``, the **raw log** (every appended message, excluded ones flagged, summaries not);
  all of it or a window (the last ``n`` and/or those after a sequence number), oldest first. The
  result carries the compaction ``epoch`` and the conversation's ``last_seq``, so a reader can
  cache a view and later ask only for what is new (``after=``) as long as the epoch is unchanged.
* :meth:`~MessageStore.record_compaction`: mark messages excluded and add summaries (each listing
  the ids it replaces). Originals are kept; the epoch goes up.
* :meth:`~MessageStore.delete` a conversation and everything derived from it.

**Optional capabilities**, each a small protocol a backend implements (and so declares) when it
can; the conformance suite checks each one a backend declares:

* :class:`SupportsSetup`: ``setup()`` creates or migrates what the backend needs (idempotent);
  backends that need it also run it before their first operation.
* :class:`SupportsClose`: ``aclose()`` releases what the store owns.
* :class:`SupportsListing`: ``list_conversations()``, most recently active first.
* :class:`SupportsExpiry`: ``expire(conversation_id, ttl)``, and the ``ttl`` option honoured.
* :class:`SupportsPurge`: ``purge_expired()`` deletes expired conversations in bulk (for backends
  whose expired data stays on disk until then).
* :class:`SupportsRecordRewrite`: ``stored_records()`` and ``replace_records()`` read and replace
  records as stored, for ``agentkeep keys rotate`` (:mod:`agentkeep.key_rotation`).

:func:`setup_store` and :func:`close_store` call the first two when a store has them.

Retention settings the built-in backends take: ``max_messages`` (keep only the newest raw
messages; applied atomically with the append) and ``ttl`` (seconds of inactivity after which the
conversation expires; refreshed by every append).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol, TypeVar, runtime_checkable

from ..errors import CorruptRecordError, ListingCursorError, MessageIdConflictError
from ..messages import Message
from ..sessions import ISOLATION_SEPARATOR, check_isolation_key
from .codec import DECODE_ERRORS, decode_time

__all__ = [
    "DEDUP_WINDOW",
    "NO_ACTIVITY",
    "ConversationInfo",
    "HistoryView",
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
    "activity_key",
    "check_batch_ids",
    "check_listing",
    "check_retention",
    "check_summary_ids",
    "close_store",
    "conversation_tenant",
    "find_retry",
    "id_conflict",
    "listed_page",
    "listing_cursor",
    "listing_order",
    "newest_first",
    "read_listing_cursor",
    "setup_store",
    "stored_conversation",
    "summary_id_conflict",
    "tenant_prefix",
]

K = TypeVar("K")

DEDUP_WINDOW = 256
"""How many of the newest stored entries an append checks the batch's message ids against: a batch
stored there as it is, from its first message on, is a retry; any other batch reusing one of their
ids is a :class:`~agentkeep.errors.MessageIdConflictError`."""


def check_batch_ids(backend: str, conversation_id: str, messages: Sequence[Message]) -> bool:
    """Whether an append of ``messages`` must look for their ids among the stored ones: only ids
    the caller gave can be stored already (those :meth:`~agentkeep.messages.Message.ensure_identity`
    makes are new).

    Raises:
        MessageIdConflictError: Two messages of the batch have the same id.
    """
    given = [m.message_id for m in messages if m.message_id is not None]
    if len(set(given)) != len(given):
        seen: set[str] = set()
        for message_id in given:
            if message_id in seen:
                raise id_conflict(backend, conversation_id, message_id, within_batch=True)
            seen.add(message_id)
    return bool(given)


def find_retry(
    backend: str,
    conversation_id: str,
    ids: Sequence[K],
    bodies: Sequence[bytes],
    stored: Mapping[K, tuple[int, bytes]],
    *,
    name: Callable[[K], str] = str,
) -> int | None:
    """Decide an append whose ids may be stored: the first sequence number of the stored batch if
    it is a retry, ``None`` if none of ``ids`` is stored.

    Args:
        backend: For the error.
        conversation_id: For the error.
        ids: The batch's message ids, in order.
        bodies: Their encoded bodies (:func:`~agentkeep.message_stores.codec.encode_body`).
        stored: ``(seq, body)`` of each stored entry among the newest :data:`DEDUP_WINDOW` whose
            id is one of ``ids``.
        name: The id as the caller knows it, for the error (ids may be given encoded).

    Raises:
        MessageIdConflictError: An id is stored, but the batch is not stored as it is.
    """
    if not stored:
        return None
    first = stored.get(ids[0])
    if first is not None:
        start = first[0]
        if all(
            stored.get(i) == (start + k, body) for k, (i, body) in enumerate(zip(ids, bodies, strict=True))
        ):
            return start
    taken = next(i for i in ids if i in stored)
    raise id_conflict(backend, conversation_id, name(taken))


def id_conflict(
    backend: str, conversation_id: str, message_id: str, *, within_batch: bool = False
) -> MessageIdConflictError:
    """The error for an append that reuses ``message_id``."""
    what = "two messages of the batch have" if within_batch else "a stored message with other content has"
    return MessageIdConflictError(
        f"{backend}: cannot append to conversation {conversation_id!r}: {what} the id {message_id!r} "
        "(nothing was stored)",
        backend=backend,
        conversation_id=conversation_id,
        message_id=message_id,
    )


def check_summary_ids(backend: str, conversation_id: str, summaries: Sequence[Summary]) -> None:
    """Refuse two summaries of one compaction with one id that replace different messages (the
    same summary twice is recorded once).

    Raises:
        MessageIdConflictError: Naming the id.
    """
    seen: dict[str, tuple[str, ...]] = {}
    for summary in summaries:
        message_id = summary.message.message_id
        if message_id is not None and seen.setdefault(message_id, tuple(summary.replaces)) != tuple(
            summary.replaces
        ):
            raise summary_id_conflict(backend, conversation_id, message_id)


def summary_id_conflict(backend: str, conversation_id: str, message_id: str) -> MessageIdConflictError:
    """The error for a compaction whose summary has the id of a stored message (or of a stored
    summary that replaces other messages)."""
    return MessageIdConflictError(
        f"{backend}: cannot record the compaction of conversation {conversation_id!r}: its summary "
        f"has the id {message_id!r} of a stored message (nothing was recorded)",
        backend=backend,
        conversation_id=conversation_id,
        message_id=message_id,
    )


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


class HistoryView:
    """What :meth:`MessageStore.read` returns: the compacted view of a conversation (or, for a raw
    read, its raw log), all of it or the window the read asked for.

    Attributes:
        entries: View entries in view order (summaries at their anchors); for a raw read, log
            entries in sequence order, excluded ones flagged, no summaries.
        epoch: The compaction epoch: 0 until the first compaction, then +1 per compaction.
        last_seq: The highest sequence number the conversation has assigned (0 when empty).

    A backend that decodes a long log makes the view with :meth:`of` (the messages and their
    sequence numbers): its :attr:`entries` are then made on first use, as most readers only want
    :attr:`messages`. Views are immutable and compare equal when their entries, epoch and
    ``last_seq`` are.
    """

    __slots__ = ("_entries", "_excluded", "_messages", "_replaces", "_seqs", "epoch", "last_seq")

    _entries: list[StoredMessage] | None
    _messages: list[Message] | None
    _seqs: Sequence[int] | None
    _excluded: list[bool] | None
    _replaces: dict[int, tuple[str, ...]] | None
    epoch: int
    last_seq: int

    def __init__(self, entries: list[StoredMessage] | None = None, epoch: int = 0, last_seq: int = 0) -> None:
        self._entries = [] if entries is None else entries
        self._messages = None
        self._seqs = None
        self._excluded = None
        self._replaces = None
        self.epoch = epoch
        self.last_seq = last_seq

    @classmethod
    def of(
        cls,
        messages: list[Message],
        seqs: Sequence[int],
        epoch: int,
        last_seq: int,
        *,
        excluded: list[bool] | None = None,
        replaces: dict[int, tuple[str, ...]] | None = None,
    ) -> HistoryView:
        """A view of ``messages`` (taken, not copied) at ``seqs``, flagged by ``excluded`` (a raw
        read's) and with ``replaces`` for the summaries among them (by position)."""
        view = cls.__new__(cls)
        view._entries = None
        view._messages, view._seqs = messages, seqs
        view._excluded, view._replaces = excluded, replaces
        view.epoch, view.last_seq = epoch, last_seq
        return view

    @property
    def entries(self) -> list[StoredMessage]:
        """The entries (see the class docs)."""
        entries = self._entries
        if entries is None:
            messages, seqs = self._messages or [], self._seqs or []
            excluded, replaces = self._excluded, self._replaces or {}
            entries = [
                StoredMessage(
                    seq,
                    message,
                    False if excluded is None else excluded[index],
                    replaces.get(index, ()),
                )
                for index, (seq, message) in enumerate(zip(seqs, messages, strict=True))
            ]
            self._entries = entries
        return entries

    @property
    def messages(self) -> list[Message]:
        """The view's messages (a new list each time)."""
        if self._entries is None and self._messages is not None:
            return list(self._messages)
        return [entry.message for entry in self.entries]

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("epoch", "last_seq") and hasattr(self, name):
            raise AttributeError(f"a HistoryView is immutable: cannot set {name}")
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HistoryView):
            return NotImplemented
        return (self.epoch, self.last_seq) == (other.epoch, other.last_seq) and self.entries == other.entries

    __hash__ = None  # pyright: ignore[reportAssignmentType] - mutable contents, as the dataclass was

    def __repr__(self) -> str:
        return f"HistoryView(entries={self.entries!r}, epoch={self.epoch!r}, last_seq={self.last_seq!r})"


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """What :meth:`SupportsListing.list_conversations` reports about one conversation.

    Attributes:
        conversation_id: The conversation (its whole key, a tenant's prefix included).
        message_count: Raw messages stored (excluded ones included, summaries not).
        last_seq: The highest sequence number assigned.
        updated_at: Creation time of the newest stored message (``None`` if it has none).
    """

    conversation_id: str
    message_count: int
    last_seq: int
    updated_at: datetime | None

    @property
    def cursor(self) -> str:
        """Where a listing that ended at this conversation goes on: pass it as ``after``."""
        return listing_cursor(activity_key(self.updated_at), self.conversation_id)


NO_ACTIVITY: Final = -(2**62)
"""The activity key of a conversation without messages: below every real time, so it lists last."""


def activity_key(updated_at: datetime | None) -> int:
    """The integer listings order by: ``updated_at`` in microseconds since the epoch (UTC), or
    :data:`NO_ACTIVITY`. Exact in a Redis score (a double) and in a 64-bit column."""
    if updated_at is None:
        return NO_ACTIVITY
    return (updated_at - _EPOCH) // _MICROSECOND


def listing_cursor(activity: int, conversation_id: str) -> str:
    """The opaque cursor of a listing position: an activity key and a conversation id."""
    raw = f"{activity}:{conversation_id}".encode(errors="surrogatepass")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def read_listing_cursor(cursor: str) -> tuple[int, str]:
    """The activity key and conversation id in ``cursor`` (one :func:`listing_cursor` made).

    Raises:
        ListingCursorError: ``cursor`` is not one a listing issued.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        activity, separator, conversation_id = raw.decode(errors="surrogatepass").partition(":")
        if not separator or not activity or activity != activity.strip():
            raise ValueError("no activity key")
        return int(activity), conversation_id
    except (ValueError, TypeError, UnicodeDecodeError, binascii.Error) as exc:
        raise ListingCursorError(f"not a listing cursor: {cursor[:80]!r}") from exc


def tenant_prefix(tenant: str | None) -> str:
    """The key prefix of ``tenant``'s conversations (``""``: every conversation).

    A tenant-scoped key is ``f"{tenant}{ISOLATION_SEPARATOR}{id}"`` (see
    :attr:`agentkeep.sessions.AgentSession.storage_key`); a tenant never contains the separator.
    """
    return "" if tenant is None else f"{tenant}{ISOLATION_SEPARATOR}"


def stored_conversation(
    conversation_id: str, message_count: int, last_seq: int, activity: int, *, backend: str
) -> ConversationInfo:
    """A listing row as a backend stores it: ``activity`` is :data:`NO_ACTIVITY` or microseconds.

    Raises:
        CorruptRecordError: ``activity`` is no time.
    """
    try:
        when = None if activity == NO_ACTIVITY else decode_time(activity)
    except DECODE_ERRORS as exc:
        raise CorruptRecordError(
            f"bad activity time: {exc}", backend=backend, conversation_id=conversation_id, seq=last_seq
        ) from exc
    return ConversationInfo(conversation_id, message_count, last_seq, when)


def conversation_tenant(conversation_id: str) -> str | None:
    """The tenant of a tenant-scoped key (the part before the first separator), else ``None``."""
    tenant, separator, _ = conversation_id.partition(ISOLATION_SEPARATOR)
    return tenant if separator else None


def listing_order(info: ConversationInfo) -> tuple[int, str]:
    """The key listings sort by, descending: newest activity first, then the greater id first."""
    return activity_key(info.updated_at), info.conversation_id


def listed_page(
    infos: Iterable[ConversationInfo], *, tenant: str | None, after: str | None, limit: int | None
) -> list[ConversationInfo]:
    """One listing page from every conversation, in memory: the reference behaviour of
    :meth:`SupportsListing.list_conversations`, for backends that hold everything in process."""
    check_listing(limit, tenant=tenant)
    prefix = tenant_prefix(tenant)
    mine = [info for info in infos if info.conversation_id.startswith(prefix)]
    if after is not None:
        position = read_listing_cursor(after)
        mine = [info for info in mine if listing_order(info) < position]
    mine.sort(key=listing_order, reverse=True)
    return mine if limit is None else mine[:limit]


def newest_first(infos: list[ConversationInfo]) -> None:
    """Sort ``infos`` in place in listing order (see :func:`listing_order`)."""
    infos.sort(key=listing_order, reverse=True)


def check_listing(limit: int | None, *, tenant: str | None = None) -> None:
    """Refuse a listing limit below 0 (0 lists nothing) and a tenant that is no top-level
    isolation key (:func:`~agentkeep.sessions.check_isolation_key`: non-empty, without the
    separator, not ending in ``":"``), so a key's tenant is read one way only: the part before
    its first separator (:func:`conversation_tenant`). A sub-tenant's conversations
    (``org::alice::chat``) are listed with their top-level tenant's."""
    if limit is not None and (type(limit) is not int or limit < 0):  # bool is no limit either
        raise ValueError("limit must be a whole number of at least 0")
    if tenant is not None:
        check_isolation_key(tenant)


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def check_retention(max_messages: int | None, ttl: float | None) -> None:
    """Refuse retention settings (see the module docs) that no backend can honour.

    Raises:
        ValueError: ``max_messages`` or ``ttl`` is not positive.
    """
    if max_messages is not None and max_messages <= 0:
        raise ValueError("max_messages must be positive")
    if ttl is not None and ttl <= 0:
        raise ValueError("ttl must be positive")


@runtime_checkable
class MessageStore(Protocol):
    """An append-only message log per conversation with a compacted view (see the module docs).

    Every method raises :class:`~agentkeep.errors.StorageUnavailableError` when the backend cannot
    be reached (after its timeout), :class:`~agentkeep.errors.CorruptRecordError` for a record it
    cannot decode, and :class:`~agentkeep.errors.StorageClosedError` after ``aclose()``.
    """

    @property
    def backend(self) -> str:
        """The backend's name: ``"memory"``, ``"sqlite"``, ``"redis"``, ``"postgres"``."""
        ...

    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        """Append ``messages`` atomically; returns their sequence numbers.

        Messages without an id or creation time get them (on the caller's objects). Ids the
        caller gave are looked for among the newest :data:`DEDUP_WINDOW` stored entries: a batch
        stored there as it is (same ids in the same order and the same content, from its first
        message on) is a retry, which stores nothing and returns the original sequence numbers;
        any other reuse of a stored id, or one id twice in the batch, raises
        :class:`~agentkeep.errors.MessageIdConflictError` and stores nothing. Times are not
        compared: a retry that stamped its messages anew is still the same batch.
        """
        ...

    async def read(
        self,
        conversation_id: str,
        *,
        raw: bool = False,
        last: int | None = None,
        after: int | None = None,
    ) -> HistoryView:
        """The compacted view in view order, or with ``raw`` the raw log in sequence order.

        Args:
            conversation_id: The conversation.
            raw: Read the raw log (every appended message, excluded ones flagged, no summaries).
            last: Only the last ``last`` entries (of those after ``after``).
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
        ``replaces`` names no stored message raises ``ValueError``; a summary with the id of a
        stored message, or of a stored summary that replaces other messages, raises
        :class:`~agentkeep.errors.MessageIdConflictError`. Either way nothing is recorded. The
        same summary (id and ``replaces``) recorded again is a retry: stored once.
        """
        ...

    async def delete(self, conversation_id: str) -> bool:
        """Delete the conversation and everything derived from it; ``False`` if it did not exist."""
        ...


@runtime_checkable
class SupportsSetup(Protocol):
    """A store that creates or migrates what it needs before use."""

    async def setup(self) -> None:
        """Create or migrate what the backend needs; idempotent.

        Raises:
            SchemaVersionError: The stored data was written by a newer format version.
        """
        ...


@runtime_checkable
class SupportsClose(Protocol):
    """A store that owns something to release (a connection, a client, a worker thread)."""

    async def aclose(self) -> None:
        """Release what this store owns; idempotent. The store refuses work afterwards."""
        ...


@runtime_checkable
class SupportsListing(Protocol):
    """A store that can list its conversations, a page at a time."""

    async def list_conversations(
        self, *, tenant: str | None = None, after: str | None = None, limit: int | None = None
    ) -> list[ConversationInfo]:
        """Stored (unexpired) conversations, most recently active first (equal times: the greater
        conversation id first); at most ``limit``.

        ``tenant`` keeps the conversations whose key is ``f"{tenant}::{id}"`` (``None``: all);
        ``after`` is the :attr:`~ConversationInfo.cursor` of the last conversation of the
        previous page: the page goes on after it. A page costs what it holds, not what the store
        holds, on every backend but the in-process one.

        Raises:
            ListingCursorError: ``after`` is not a cursor a listing issued.
            ValueError: ``limit`` is negative, or ``tenant`` is no top-level isolation key.
        """
        ...


@runtime_checkable
class SupportsExpiry(Protocol):
    """A store whose conversations can expire (its ``ttl`` option, and :meth:`expire`)."""

    async def expire(self, conversation_id: str, ttl: float | None) -> bool:
        """Expire the conversation ``ttl`` seconds from now (``None``: never); ``False`` if absent."""
        ...


@runtime_checkable
class SupportsPurge(Protocol):
    """A store whose expired conversations stay stored until purged."""

    async def purge_expired(self) -> int:
        """Delete every expired conversation; returns how many."""
        ...


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A message or summary exactly as a backend stores it (see :mod:`agentkeep.message_stores.codec`).

    Attributes:
        seq: Its sequence number.
        message_id: The encoded id (:func:`~agentkeep.message_stores.codec.encode_id`).
        created_at: The encoded time (:func:`~agentkeep.message_stores.codec.encode_time`).
        body: The stored body (sealed, perhaps encrypted).
    """

    seq: int
    message_id: bytes
    created_at: int
    body: bytes


@runtime_checkable
class SupportsRecordRewrite(Protocol):
    """A backend whose records can be read and replaced as stored (to re-encrypt them online)."""

    async def stored_records(
        self, conversation_id: str, *, after: int = 0, limit: int = 500
    ) -> list[StoredRecord]:
        """Up to ``limit`` of the conversation's records (messages and summaries, excluded or not)
        with ``seq > after``, in seq order, as stored."""
        ...

    async def replace_records(
        self, conversation_id: str, changes: Sequence[tuple[StoredRecord, bytes]]
    ) -> int:
        """Give each record the new body if it is still stored as read (a record trimmed or
        deleted meanwhile is left alone), in one atomic step; returns how many were replaced. Ids,
        times, sequence numbers and flags stay as they are."""
        ...


async def setup_store(store: object) -> None:
    """``await store.setup()`` if ``store`` has that capability (:class:`SupportsSetup`)."""
    if isinstance(store, SupportsSetup):
        await store.setup()


async def close_store(store: object) -> None:
    """``await store.aclose()`` if ``store`` has that capability (:class:`SupportsClose`)."""
    if isinstance(store, SupportsClose):
        await store.aclose()
