"""A turn stored in one step: the history appends of a run held back and committed with the
session's save, in one transaction where the two stores share a database.

A caller that runs an agent on a session and saves the session afterwards (the host, for every
turn) attaches a :class:`TurnWrites` to the session first (:func:`hold_appends`). During the run a
history provider whose message store shares a database with the session store
(:meth:`SupportsTurnCommit.shares_database`) hands its append to the :class:`TurnWrites`
(:meth:`TurnWrites.hold`) instead of writing it: the messages are checked and encoded then, and
given their ids and times, exactly as an append would. Saving the session
(:meth:`SupportsTurnCommit.save_session_with_appends`) then writes the held appends and the
session in one transaction: both or neither. So a turn whose session cannot be saved (a conflict
no merge resolves, a state value that cannot be serialized, the store gone) stores none of its
messages either, and a turn reported failed was not stored behind the caller's back.

A read of the conversation through the history provider during the run (a second model call
of the tool loop, a branch's first run reading its held prefix) sees what is held after what is
stored, without writing it. What cannot join the step is written at once, as before: an append
to a store of another database, or one that something in the same run changes before the save
(a compaction in the ``"after_run"`` phase recording messages it names: :meth:`TurnWrites.flush`
appends what is held for that conversation first).

The shape is backend-neutral; each session store knows its own backend's message store and its
prepared appends (SQLite: one ``BEGIN IMMEDIATE`` transaction on the file; PostgreSQL: one
transaction on the database; Redis: one script, on a cluster for the session's own conversation,
whose keys share its slot). Other session stores have no such method and the host saves as
before.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeGuard, runtime_checkable

from . import telemetry

if TYPE_CHECKING:
    from .agent import Agent
    from .messages import Message
    from .sessions import AgentSession

__all__ = [
    "HeldAppend",
    "SupportsHoldAppend",
    "SupportsTurnCommit",
    "TurnWrites",
    "can_hold_appends",
    "commits_turns",
    "held_appends",
    "hold_appends",
    "release_appends",
]

_RUNTIME_KEY: Final = "turn:writes"
"""Where the session's :class:`TurnWrites` lives in ``session.runtime`` (this process only)."""


@dataclass(frozen=True, slots=True)
class HeldAppend:
    """An append held for the session's save.

    Attributes:
        store: The message store it goes to.
        conversation_id: The conversation.
        messages: The messages (with their ids and times given).
        prepared: What the store made of them to write inside a transaction (its backend's form).
        write: Appends them on their own, now (when the step cannot include them).
    """

    store: object
    conversation_id: str
    messages: Sequence[Message]
    prepared: Any
    write: Callable[[], Awaitable[list[int]]]


@runtime_checkable
class SupportsHoldAppend(Protocol):
    """A message store whose appends can be held for a session's save."""

    def hold_append(self, conversation_id: str, messages: Sequence[Message]) -> HeldAppend:
        """The append of ``messages`` checked and encoded (ids and times given), not written.

        Raises:
            MessageFormatError: A message cannot be stored.
            MessageIdConflictError: Two messages of the batch have the same id.
        """
        ...


@runtime_checkable
class SupportsTurnCommit(Protocol):
    """A session store that can save a session together with held appends in one transaction."""

    def shares_database(self, store: object) -> bool:
        """Whether appends to the message store ``store`` can join this store's saves."""
        ...

    async def save_session_with_appends(
        self, agent: Agent, conversation_id: str, session: AgentSession, appends: Sequence[HeldAppend]
    ) -> None:
        """Save ``session`` (as ``save_session`` does) and write ``appends``, in one transaction.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at (nothing of
                ``appends`` is written either).
            StorageError: The transaction failed (nothing is written).
        """
        ...


@functools.cache
def _class_is(cls: type, protocol: type) -> bool:
    return issubclass(cls, protocol)


def commits_turns(store: object) -> TypeGuard[SupportsTurnCommit]:
    """``isinstance(store, SupportsTurnCommit)``, answered once per class: every turn asks it, and
    a runtime protocol's own check walks the protocol's members each time. (A class without the
    methods is still checked per object, for one that sets them on the object.)"""
    return _class_is(type(store), SupportsTurnCommit) or isinstance(store, SupportsTurnCommit)


def can_hold_appends(store: object) -> TypeGuard[SupportsHoldAppend]:
    """``isinstance(store, SupportsHoldAppend)``, answered once per class (as :func:`commits_turns`)."""
    return _class_is(type(store), SupportsHoldAppend) or isinstance(store, SupportsHoldAppend)


@dataclass(slots=True)
class TurnWrites:
    """The appends a session's current run held for its save (see the module docs).

    Args:
        session_store: The store the session will be saved to.
    """

    session_store: SupportsTurnCommit
    held: list[HeldAppend] = field(default_factory=list[HeldAppend])

    def joins(self, store: object) -> bool:
        """Whether appends to ``store`` can be held for the save."""
        return self.session_store.shares_database(store)

    def hold(self, append: HeldAppend) -> None:
        """Hold ``append`` for the session's save."""
        self.held.append(append)

    async def flush(
        self, store: object, conversation_id: str, *, touching: Collection[str] | None = None
    ) -> None:
        """Append now what is held for ``conversation_id`` of ``store``: something is about to
        read it, or (with ``touching``) to change messages of these ids, and must see them."""
        mine = [held for held in self.held if held.store is store and held.conversation_id == conversation_id]
        if touching is not None:
            ids = {message.message_id for held in mine for message in held.messages}
            if ids.isdisjoint(touching):
                return
        if not mine:
            return
        self.held = [held for held in self.held if held not in mine]
        for held in mine:
            await _write(held)

    async def flush_all(self) -> None:
        """Append now everything held (the session has nothing to save: each append alone is one
        atomic step)."""
        held, self.held = self.held, []
        for append in held:
            await _write(append)


async def _write(held: HeldAppend) -> None:
    backend = str(getattr(held.store, "backend", "unknown"))
    with telemetry.span(
        "agentkeep.store.append", **{"agentkeep.backend": backend, "agentkeep.messages": len(held.messages)}
    ):
        await held.write()


def hold_appends(session: AgentSession, session_store: object) -> TurnWrites | None:
    """Attach a :class:`TurnWrites` for ``session_store`` to ``session`` for its next run, if the
    store can commit a turn in one step (else ``None``: appends are written as they come)."""
    if not commits_turns(session_store):
        return None
    writes = TurnWrites(session_store)
    session.runtime[_RUNTIME_KEY] = writes
    return writes


def held_appends(session: AgentSession | None) -> TurnWrites | None:
    """The :class:`TurnWrites` attached to ``session``, if any."""
    if session is None:
        return None
    found = session.runtime.get(_RUNTIME_KEY)
    return found if isinstance(found, TurnWrites) else None


def release_appends(session: AgentSession) -> None:
    """Detach the :class:`TurnWrites` of ``session``; what it still holds is dropped (the turn
    failed, or its save wrote it)."""
    session.runtime.pop(_RUNTIME_KEY, None)
