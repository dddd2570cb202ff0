"""An in-process :class:`~agentkeep.message_stores.base.MessageStore`: the contract's reference behaviour.

Useful in tests and for single-process apps that want the storage contract (compaction records,
windows, retention) without a database. Nothing survives the process. It has every optional
capability (setup, close, listing, expiry, purge).
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from .._files import check_memory_url
from ..errors import StorageClosedError
from ..messages import Message
from .base import (
    DEDUP_WINDOW,
    ConversationInfo,
    HistoryView,
    StoredMessage,
    Summary,
    activity_key,
    check_batch_ids,
    check_listing,
    check_summary_ids,
    conversation_tenant,
    find_retry,
    read_listing_cursor,
    summary_id_conflict,
)
from .codec import encode_body, encode_identity

__all__ = ["InMemoryMessageStore"]


@dataclass(slots=True)
class _Entry:
    seq: int
    message: Message
    excluded: bool = False
    replaces: tuple[str, ...] = ()
    anchor: int = 0  # view position: seq for messages, the first replaced message's for summaries

    def stored(self) -> StoredMessage:
        return StoredMessage(self.seq, self.message, self.excluded, self.replaces)


@dataclass(slots=True)
class _Conversation:
    log: list[_Entry] = field(default_factory=list[_Entry])  # raw messages, seq order
    summaries: list[_Entry] = field(default_factory=list[_Entry])
    by_id: dict[str, _Entry] = field(default_factory=dict[str, _Entry])
    last_seq: int = 0
    epoch: int = 0
    expires_at: float | None = None
    activity: int | None = None  # its key in the activity index, once it holds messages


class _ActivityIndex:
    """Conversation ids by ``(activity, id)`` in ascending order, for the whole store and per
    tenant: a listing page is a bisection and a walk back over its rows; a move costs a bisection
    and a shift of the list (C ``memmove``), with appends moving conversations to the end."""

    def __init__(self) -> None:
        self.everything: list[tuple[int, str]] = []
        self.tenants: dict[str, list[tuple[int, str]]] = {}

    def move(self, conversation_id: str, old: int | None, new: int | None) -> None:
        tenant = conversation_tenant(conversation_id)
        lists = (
            [self.everything] if tenant is None else [self.everything, self.tenants.setdefault(tenant, [])]
        )
        for keys in lists:
            if old is not None:
                del keys[bisect_left(keys, (old, conversation_id))]
            if new is not None:
                insort(keys, (new, conversation_id))
        if tenant is not None and not self.tenants[tenant]:
            del self.tenants[tenant]

    def before(
        self, tenant: str | None, position: tuple[int, str] | None
    ) -> tuple[list[tuple[int, str]], int]:
        """The keys of ``tenant`` (``None``: all) and how many of them list after ``position``."""
        keys = self.everything if tenant is None else self.tenants.get(tenant, [])
        return keys, len(keys) if position is None else bisect_left(keys, position)


class InMemoryMessageStore:
    """The storage contract in process memory.

    Args:
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires (refreshed by appends).
        clock: Monotonic clock in seconds (injectable for tests).
    """

    backend = "memory"

    def __init__(
        self,
        *,
        max_messages: int | None = None,
        ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_messages is not None and max_messages <= 0:
            raise ValueError("max_messages must be positive")
        self.max_messages = max_messages
        self.ttl = ttl
        self._clock = clock
        self._conversations: dict[str, _Conversation] = {}
        self._index = _ActivityIndex()
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def from_url(
        cls, url: str = "memory://", *, max_messages: int | None = None, ttl: float | None = None
    ) -> InMemoryMessageStore:
        """A new empty store for ``memory://`` (the one URL of process memory).

        Raises:
            StoreURLError: Any other URL.
        """
        check_memory_url(url)
        return cls(max_messages=max_messages, ttl=ttl)

    def _check(self) -> None:
        if self._closed:
            raise StorageClosedError("the store is closed", backend=self.backend)

    def _get(self, conversation_id: str) -> _Conversation | None:
        conversation = self._conversations.get(conversation_id)
        expires_at = conversation.expires_at if conversation is not None else None
        if expires_at is not None and self._clock() >= expires_at:
            self._forget(conversation_id)
            return None
        return conversation

    def _forget(self, conversation_id: str) -> None:
        conversation = self._conversations.pop(conversation_id)
        if conversation.activity is not None:
            self._index.move(conversation_id, conversation.activity, None)

    async def setup(self) -> None:
        self._check()

    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        self._check()
        if not messages:
            return []
        bodies = [encode_body(m) for m in messages]  # like a durable backend, refuse what could not be stored
        check = check_batch_ids(self.backend, conversation_id, messages)
        for message in messages:
            encode_identity(message)  # gives the message an id and a time, and checks them
        async with self._lock:
            conversation = self._get(conversation_id)
            if conversation is None:
                conversation = self._conversations[conversation_id] = _Conversation()
            if check:
                ids = [m.message_id or "" for m in messages]
                floor, by_id = conversation.last_seq - DEDUP_WINDOW, conversation.by_id
                found = {
                    i: (e.seq, encode_body(e.message)) for i in ids if (e := by_id.get(i)) and e.seq > floor
                }
                start = find_retry(self.backend, conversation_id, ids, bodies, found)
                if start is not None:
                    return list(range(start, start + len(messages)))
            seqs: list[int] = []
            for message in messages:
                conversation.last_seq += 1
                entry = _Entry(conversation.last_seq, message, anchor=conversation.last_seq)
                conversation.log.append(entry)
                conversation.by_id[message.message_id or ""] = entry
                seqs.append(entry.seq)
            if self.max_messages is not None and len(conversation.log) > self.max_messages:
                dropped = conversation.log[: len(conversation.log) - self.max_messages]
                del conversation.log[: len(dropped)]
                for entry in dropped:
                    conversation.by_id.pop(entry.message.message_id or "", None)
            if self.ttl is not None:
                conversation.expires_at = self._clock() + self.ttl
            activity = activity_key(messages[-1].created_at)
            if activity != conversation.activity:
                self._index.move(conversation_id, conversation.activity, activity)
                conversation.activity = activity
            return seqs

    async def read(
        self,
        conversation_id: str,
        *,
        raw: bool = False,
        last: int | None = None,
        after: int | None = None,
    ) -> HistoryView:
        self._check()
        conversation = self._get(conversation_id)
        if conversation is None:
            return HistoryView()
        if raw:
            entries = _after(conversation.log, after)
        else:
            entries = [entry for entry in _after(conversation.log, after) if not entry.excluded]
            for summary in conversation.summaries:
                if not summary.excluded and (after is None or summary.seq > after):
                    insort(entries, summary, key=_view_key)
        if last is not None:
            entries = entries[-last:] if last > 0 else []
        return HistoryView([e.stored() for e in entries], conversation.epoch, conversation.last_seq)

    async def record_compaction(
        self,
        conversation_id: str,
        *,
        excluded: Collection[str] = (),
        summaries: Sequence[Summary] = (),
    ) -> int:
        self._check()
        check_summary_ids(self.backend, conversation_id, summaries)
        async with self._lock:
            conversation = self._get(conversation_id)
            if conversation is None:
                if summaries:
                    raise ValueError(f"conversation {conversation_id!r} does not exist")
                return 0
            anchors: list[int] = []
            for summary in summaries:
                found = [conversation.by_id[i].anchor for i in summary.replaces if i in conversation.by_id]
                if not found:
                    raise ValueError(
                        f"summary {summary.message.message_id!r} replaces no stored message of "
                        f"conversation {conversation_id!r}"
                    )
                anchors.append(min(found))
                summary.message.ensure_identity()
                summary_id = summary.message.message_id or ""
                stored = conversation.by_id.get(summary_id)
                if stored is not None and stored.replaces != tuple(summary.replaces):  # not a retry
                    raise summary_id_conflict(self.backend, conversation_id, summary_id)
            for message_id in excluded:
                entry = conversation.by_id.get(message_id)
                if entry is not None:
                    entry.excluded = True
            for summary, anchor in zip(summaries, anchors, strict=True):
                if (summary.message.message_id or "") in conversation.by_id:
                    continue  # recorded before: a retry
                conversation.last_seq += 1
                entry = _Entry(
                    conversation.last_seq, summary.message, replaces=tuple(summary.replaces), anchor=anchor
                )
                conversation.summaries.append(entry)
                conversation.by_id[summary.message.message_id or ""] = entry
            conversation.epoch += 1
            return conversation.epoch

    async def delete(self, conversation_id: str) -> bool:
        self._check()
        async with self._lock:
            if self._get(conversation_id) is None:
                return False
            self._forget(conversation_id)
            return True

    async def list_conversations(
        self, *, tenant: str | None = None, after: str | None = None, limit: int | None = None
    ) -> list[ConversationInfo]:
        """The listing (see :class:`SupportsListing`): a bisection of the activity index and a
        walk back over the page's rows (and the expired ones among them, which it forgets)."""
        self._check()
        check_listing(limit, tenant=tenant)
        position = None if after is None else read_listing_cursor(after)
        keys, end = self._index.before(tenant, position)
        infos: list[ConversationInfo] = []
        expired: list[str] = []
        now = self._clock()
        for at in range(end - 1, -1, -1):
            if limit is not None and len(infos) >= limit:
                break
            conversation_id = keys[at][1]
            conversation = self._conversations[conversation_id]
            if conversation.expires_at is not None and now >= conversation.expires_at:
                expired.append(conversation_id)
                continue
            newest = conversation.log[-1].message.created_at
            infos.append(
                ConversationInfo(conversation_id, len(conversation.log), conversation.last_seq, newest)
            )
        for conversation_id in expired:
            self._forget(conversation_id)
        return infos

    async def expire(self, conversation_id: str, ttl: float | None) -> bool:
        self._check()
        async with self._lock:
            conversation = self._get(conversation_id)
            if conversation is None:
                return False
            conversation.expires_at = None if ttl is None else self._clock() + ttl
            return True

    async def purge_expired(self) -> int:
        """Forget every expired conversation; returns how many."""
        self._check()
        async with self._lock:
            before = len(self._conversations)
            for conversation_id in list(self._conversations):
                self._get(conversation_id)  # forgets it when expired
            return before - len(self._conversations)

    async def aclose(self) -> None:
        self._closed = True


def _after(log: list[_Entry], after: int | None) -> list[_Entry]:
    """The entries of ``log`` (in seq order) with ``seq > after``: a turn's read costs what is new."""
    return log if after is None else log[bisect_right(log, after, key=_seq) :]


def _seq(entry: _Entry) -> int:
    return entry.seq


def _view_key(entry: _Entry) -> tuple[int, int, int]:
    # A summary sits just before the first message it replaces; summaries anchored at the same
    # place keep the order they were recorded in.
    return (entry.anchor, 0 if entry.replaces else 1, entry.seq)
