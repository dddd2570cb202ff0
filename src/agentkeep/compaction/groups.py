"""Message groups: the units compaction keeps or removes, and the mark that makes a message a summary.

A :class:`~agentkeep.compaction.MessageIndex` puts every message of a flat list in exactly one
:class:`MessageGroup` (see :mod:`agentkeep.compaction.index` for the grouping rules). A group's
:class:`MessageGroupKind` says what it holds:

* ``system``: one system message (strategies keep it);
* ``user``: one user message; it starts a new turn;
* ``assistant_text``: one assistant message without tool calls;
* ``tool_call``: an assistant message with function calls plus every message carrying a result
  for one of those calls (never split: sending a call without its result is an API error);
* ``summary``: a message marked as a summary, whatever its role.

**The summary mark.** A summary lists the ``message_id`` of every message it replaces under
:data:`SUMMARY_PROPERTY` in its ``additional_properties``; :func:`is_summary_message` and
:func:`summarized_message_ids` read it, :func:`mark_summary` writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, cast

from ..messages import Message

if TYPE_CHECKING:
    from .index import MessageIndex

__all__ = [
    "SUMMARY_PROPERTY",
    "MessageGroup",
    "MessageGroupKind",
    "excluded_of",
    "fill_message_ids",
    "is_summary_message",
    "mark_summary",
    "order_key",
    "summarized_message_ids",
    "token_count_of",
]

SUMMARY_PROPERTY: Final[str] = "agentkeep.summary"
"""The ``additional_properties`` key that marks a message as a summary.

Its value is the list of ``message_id`` strings the summary replaces, e.g.
``Message("assistant", "Earlier: ...", additional_properties={"agentkeep.summary": ["id1", "id2"]})``.
A message carrying the key (with a list value) forms a ``summary`` group.
"""


def is_summary_message(message: Message) -> bool:
    """Whether ``message`` is marked as a summary (:data:`SUMMARY_PROPERTY` holds a list)."""
    props = message.additional_properties
    return isinstance(props.get(SUMMARY_PROPERTY), list)


def summarized_message_ids(message: Message) -> list[str]:
    """The ids of the messages the summary ``message`` replaces (``[]`` if it is no summary)."""
    props = message.additional_properties
    ids = props.get(SUMMARY_PROPERTY)
    if not isinstance(ids, list):
        return []
    return [item for item in cast("list[Any]", ids) if isinstance(item, str)]


def fill_message_ids(messages: Sequence[Message], new_id: Callable[[], str]) -> list[str]:
    """The ``message_id`` of each of ``messages``, in order; one without an id gets one from
    ``new_id`` first (as it would on entering a session)."""
    ids = [message.message_id for message in messages]
    if None in ids:
        for at, message in enumerate(messages):
            if message.message_id is None:
                message.message_id = new_id()
            ids[at] = message.message_id
    return cast("list[str]", ids)  # every None was filled in above


def mark_summary(summary: Message, replaced: Sequence[Message], new_id: Callable[[], str]) -> None:
    """Mark ``summary`` with :data:`SUMMARY_PROPERTY` listing the ids of ``replaced``, in order.

    A replaced message without an id gets one from ``new_id`` first (see
    :func:`fill_message_ids`): a summary must name what it replaces.
    """
    ids = fill_message_ids(replaced, new_id)
    props = summary.additional_properties
    summary.additional_properties = {**props, SUMMARY_PROPERTY: ids}


class MessageGroupKind(StrEnum):
    """What a :class:`MessageGroup` holds."""

    SYSTEM = "system"
    """A system message; compaction always keeps it."""
    USER = "user"
    """A user message; it starts a turn."""
    ASSISTANT_TEXT = "assistant_text"
    """An assistant message without tool calls."""
    TOOL_CALL = "tool_call"
    """An assistant message with tool calls and all of their results (atomic)."""
    SUMMARY = "summary"
    """A summary made by summarization, replacing older messages."""


class MessageGroup:
    """Messages that compaction keeps or removes together. Made and kept up to date by a
    :class:`~agentkeep.compaction.MessageIndex`.

    Read its attributes; never assign them. The index keeps them consistent with its totals:
    change a group only through the index (:meth:`~agentkeep.compaction.MessageIndex.exclude`,
    :meth:`~agentkeep.compaction.MessageIndex.include`,
    :meth:`~agentkeep.compaction.MessageIndex.replace`).

    Attributes:
        index: The index the group belongs to.
        kind: What the group holds.
        turn: The turn the group starts in (0-based), ``None`` before the first user message.
        order: Logical position: the first message's position, or for a summary put in by
            :meth:`~agentkeep.compaction.MessageIndex.replace`, that of the first message it
            replaces. Groups sort by it.
        first_index: Position of the group's first message in the index's messages.
        later_indices: Positions of its other messages, ascending (``None`` while it has one).
        token_count: Tokens of the group's messages (see
            :func:`~agentkeep.compaction.count_message_tokens`).
        byte_count: UTF-8 bytes of the group's counted text (see
            :func:`~agentkeep.compaction.message_token_text`).
        excluded: Whether compaction excluded the group from what is sent to the model.
        call_ids: Ids of the function calls made in the group (``tool_call`` groups only).
        unanswered: Ids of those calls that have no result yet (``None``: none pending).
    """

    __slots__ = (
        "byte_count",
        "call_ids",
        "excluded",
        "first_index",
        "index",
        "kind",
        "later_indices",
        "order",
        "token_count",
        "turn",
        "unanswered",
    )

    index: MessageIndex
    kind: MessageGroupKind
    turn: int | None
    order: int
    first_index: int
    # A group that cannot grow holds no list: a list per group nearly doubles the objects a cold
    # build hands the garbage collector, whose passes over a 100k-message heap cost as much as
    # the build itself.
    later_indices: list[int] | None
    token_count: int
    byte_count: int
    excluded: bool
    call_ids: Sequence[str]
    unanswered: set[str] | None

    def __init__(
        self,
        index: MessageIndex,
        kind: MessageGroupKind,
        turn: int | None,
        position: int,
        order: int | None = None,
        token_count: int = 0,
        byte_count: int = 0,
    ) -> None:
        self.index = index
        self.kind = kind
        self.turn = turn
        self.order = position if order is None else order
        self.first_index = position
        self.later_indices = None
        self.token_count = token_count
        self.byte_count = byte_count
        self.excluded = False
        self.call_ids = ()
        self.unanswered = None

    @property
    def indices(self) -> list[int]:
        """Positions of the group's messages in :attr:`MessageIndex.messages`, ascending."""
        later = self.later_indices
        return [self.first_index, *later] if later else [self.first_index]

    @property
    def messages(self) -> list[Message]:
        """The group's messages, in their original order."""
        messages = self.index.messages
        later = self.later_indices
        if not later:
            return [messages[self.first_index]]
        return [messages[self.first_index], *map(messages.__getitem__, later)]

    @property
    def message_count(self) -> int:
        """Number of messages in the group."""
        later = self.later_indices
        return 1 + len(later) if later else 1

    @property
    def is_complete(self) -> bool:
        """Whether every function call in the group has a result (always true for other kinds)."""
        return not self.unanswered

    def __repr__(self) -> str:
        flag = ", excluded" if self.excluded else ""
        return (
            f"MessageGroup({self.kind.value}, indices={self.indices}, turn={self.turn}, "
            f"tokens={self.token_count}{flag})"
        )


order_key: Callable[[MessageGroup], int] = attrgetter("order")
"""Sort and search key of groups: their logical order (a C-level getter: bisecting calls it often)."""

excluded_of: Callable[[MessageGroup], bool] = attrgetter("excluded")
token_count_of: Callable[[MessageGroup], int] = attrgetter("token_count")
"""C-level getters of a group's flag and kept count, for loops over long runs of groups."""
