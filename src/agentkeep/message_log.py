"""The append-only message log and its zero-copy views: message sequences that cost O(1) to hand around.

A request to a model is history + context + input. History can be long; copying or re-stamping it
on every turn would make each turn cost O(history). Instead:

* :class:`MessageLog` is an append-only list of messages that all carry one source stamp. Each
  message is stamped (and given an id) once, when it is appended.
* :meth:`MessageLog.view` is an immutable snapshot (the list plus bounds): O(1) to take, and it
  never changes even when the log grows later, because the log never rewrites positions it has
  handed out (a reducer swaps in a new list instead).
* :class:`MessageChain` concatenates sequences without copying them; a request is a chain.

All three are ordinary ``Sequence[Message]`` objects: index them, slice them, iterate them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Any, cast, overload

from .messages import Message, MessageSourceType

__all__ = ["MessageChain", "MessageLog", "MessageView"]


class MessageView(Sequence[Message]):
    """An immutable window ``[start, stop)`` over a list of messages that share one source stamp.

    Attributes:
        source_type: The stamp every message in the view carries.
        source_id: The stamp's provider id.
    """

    __slots__ = ("_items", "_start", "_stop", "source_id", "source_type")

    def __init__(
        self,
        items: list[Message],
        start: int,
        stop: int,
        *,
        source_type: MessageSourceType,
        source_id: str | None,
    ) -> None:
        self._items = items
        self._start = start
        self._stop = stop
        self.source_type = source_type
        self.source_id = source_id

    def __len__(self) -> int:
        return self._stop - self._start

    def extension_of(self, earlier: MessageView) -> MessageView | None:
        """What this view holds beyond ``earlier``, if it starts like ``earlier`` on the same log.

        Views of an append-only :class:`MessageLog` share its list until the log is replaced, so
        "same list, same start, not shorter" proves the first ``len(earlier)`` messages are the
        same objects in O(1).

        Returns:
            A view of the messages after ``earlier``'s end, or ``None`` if this view does not
            continue it.
        """
        if self._items is not earlier._items or self._start != earlier._start or self._stop < earlier._stop:
            return None
        return MessageView(
            self._items, earlier._stop, self._stop, source_type=self.source_type, source_id=self.source_id
        )

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return MessageView(
                self._items,
                self._start + start,
                self._start + max(start, stop),
                source_type=self.source_type,
                source_id=self.source_id,
            )
        size = self._stop - self._start
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("message index out of range")
        return self._items[self._start + index]

    def __iter__(self) -> Iterator[Message]:
        if self._start == 0:
            return islice(self._items, self._stop)
        return (self._items[i] for i in range(self._start, self._stop))

    def __reversed__(self) -> Iterator[Message]:
        items = self._items
        return (items[i] for i in range(self._stop - 1, self._start - 1, -1))

    def __eq__(self, other: object) -> bool:
        return _sequence_eq(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageView({len(self)} messages, source={self.source_type.value}:{self.source_id})"


class MessageLog:
    """An append-only message list whose messages all carry one source stamp.

    Appending stamps a shallow copy of each message (the caller's objects are never changed) and
    gives it an id and a creation time if it has none. Views taken with :meth:`view` are
    snapshots: later appends or :meth:`replace` never change them.

    Args:
        source_id: The owning provider's ``source_id``.
        messages: Initial messages (stamped like appended ones).
        source_type: The stamp to apply; history logs use ``CHAT_HISTORY``.
    """

    __slots__ = ("_items", "source_id", "source_type")

    def __init__(
        self,
        source_id: str | None,
        messages: Iterable[Message] = (),
        *,
        source_type: MessageSourceType = MessageSourceType.CHAT_HISTORY,
    ) -> None:
        self.source_id = source_id
        self.source_type = source_type
        self._items: list[Message] = []
        self.extend(messages)

    def extend(self, messages: Iterable[Message]) -> list[Message]:
        """Append messages in order; returns the stored (stamped) copies. O(len(messages))."""
        stamp_type, stamp_id = self.source_type, self.source_id
        stored = [m.with_source(stamp_type, stamp_id).ensure_identity() for m in messages]
        self._items.extend(stored)
        return stored

    def replace(self, messages: Iterable[Message], *, based_on: MessageView | None = None) -> bool:
        """Swap in a new message list (used by reducers); existing views keep the old one.

        Args:
            messages: The new contents.
            based_on: The view the new contents were computed from. Messages appended after it
                (by a concurrent run) are kept after ``messages``; if the log was replaced since,
                nothing happens and ``False`` is returned.
        """
        stamp_type, stamp_id = self.source_type, self.source_id
        items = [m.with_source(stamp_type, stamp_id).ensure_identity() for m in messages]
        if based_on is not None:
            appended = self.view().extension_of(based_on)  # None unless it is this list, from 0
            if appended is None:
                return False
            items.extend(appended)
        self._items = items
        return True

    @classmethod
    def from_owned(
        cls,
        messages: list[Message],
        source_id: str | None,
        *,
        source_type: MessageSourceType = MessageSourceType.CHAT_HISTORY,
        stamped_except: Iterable[Message] | None = None,
    ) -> MessageLog:
        """A log that takes ``messages`` (freshly decoded, owned by nobody else) without copying them.

        Args:
            messages: The messages; stamped in place (and given an id and time if they lack one).
            source_id: The owning provider's ``source_id``.
            source_type: The stamp to apply.
            stamped_except: When given, ``messages`` already carry this log's stamp except these
                (e.g. a compacted view of the log plus new summaries): only these are stamped.
        """
        log = cls(source_id, source_type=source_type)
        for message in messages if stamped_except is None else stamped_except:
            message.stamp(source_type, source_id)
            message.ensure_identity()
        log._items = messages
        return log

    def adopt(self, source_id: str | None) -> None:
        """Re-stamp every message for a new owner, in place (once, after deserialization)."""
        for message in self._items:
            message.stamp(self.source_type, source_id)
        self.source_id = source_id

    def view(self, start: int = 0, stop: int | None = None) -> MessageView:
        """An O(1) immutable snapshot of ``[start, stop)`` (default: everything so far)."""
        start, stop, _ = slice(start, stop).indices(len(self._items))
        stop = max(start, stop)
        return MessageView(self._items, start, stop, source_type=self.source_type, source_id=self.source_id)

    def tail(self, count: int) -> MessageView:
        """A view of the last ``count`` messages."""
        return self.view(max(0, len(self._items) - count))

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.view())

    def __repr__(self) -> str:
        return f"MessageLog({len(self._items)} messages, source={self.source_type.value}:{self.source_id})"

    def to_list(self) -> list[dict[str, Any]]:
        """The messages in wire form."""
        return [m.to_dict() for m in self._items]


class MessageChain(Sequence[Message]):
    """Sequences joined end to end without copying; lengths are fixed when the chain is made.

    Args:
        parts: The sequences to join; each contributes its length at construction time, so a
            list that grows later does not change the chain.
    """

    __slots__ = ("_ends", "_parts")

    def __init__(self, *parts: Sequence[Message]) -> None:
        kept: list[tuple[Sequence[Message], int]] = []
        ends: list[int] = []
        total = 0
        for part in parts:
            if isinstance(part, MessageChain):
                for sub, size in part._parts:
                    total += size
                    kept.append((sub, size))
                    ends.append(total)
                continue
            size = len(part)
            if size:
                total += size
                kept.append((part, size))
                ends.append(total)
        self._parts = tuple(kept)
        self._ends = tuple(ends)

    @property
    def parts(self) -> tuple[Sequence[Message], ...]:
        """The joined sequences, in order."""
        return tuple(part for part, _ in self._parts)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("message index out of range")
        slot = bisect_right(self._ends, index)
        begin = self._ends[slot - 1] if slot else 0
        return self._parts[slot][0][index - begin]

    def __iter__(self) -> Iterator[Message]:
        return chain.from_iterable(
            part if len(part) == size else islice(part, size) for part, size in self._parts
        )

    def __eq__(self, other: object) -> bool:
        return _sequence_eq(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageChain({len(self)} messages in {len(self._parts)} parts)"


def _sequence_eq(left: Sequence[Message], other: object) -> bool:
    if not isinstance(other, Sequence) or isinstance(other, str | bytes):
        return NotImplemented
    seq = cast("Sequence[Any]", other)
    return len(left) == len(seq) and all(a == b for a, b in zip(left, seq, strict=True))
