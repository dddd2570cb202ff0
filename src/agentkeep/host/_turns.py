"""One turn of a hosted conversation: the tenant's session loaded, the run, the session saved.

**Inside a process** turns of one conversation (tenant, agent, conversation id) take turns on an
``asyncio.Lock`` held from loading the session to saving it; locks of idle conversations are
dropped, so the table stays as large as the number of conversations in flight.

**Across processes** the session store's optimistic versions decide. A save that meets a newer
version (:class:`~agentkeep.errors.ConflictError`) reads the session again and puts this turn's
state changes on top of it, key by key of the state bag (each provider owns its keys): a key this
turn changed that the other writer left alone is taken over; a key both changed is a real
conflict, reported as :class:`TurnConflictError` (HTTP 409) after ``attempts`` tries. Messages
are not part of this merge: a durable history provider appends them to its own log during the run,
atomically, so two processes' turns are both kept, each contiguous.

A run that fails (model error, cancelled request, store down) saves nothing, and its history
provider stores nothing of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from .._json_values import encode_json
from ..errors import ConflictError
from ..sessions import AgentSession
from ..stores import AgentSessionStore, IsolationKeyScopedSessionStore, session_version, set_session_version

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["ConversationLocks", "SessionTurn", "TurnConflictError"]

_ABSENT: Final = b"\x00absent"


class TurnConflictError(ConflictError):
    """A turn's session changes collide with another writer's, after every retry."""


class ConversationLocks:
    """One ``asyncio.Lock`` per conversation in flight, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, ...], tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def hold(self, key: tuple[str, ...]) -> AsyncGenerator[None]:
        """Hold the conversation ``key`` (waiting for whoever holds it first)."""
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


def _state_json(session: AgentSession) -> dict[str, bytes]:
    """Each state value as JSON bytes, to tell what a turn changed."""
    return {key: encode_json(value) for key, value in session.state.to_dict().items()}


@dataclass(slots=True)
class SessionTurn:
    """A tenant's session for one turn: loaded through a scoped view of the agent's store, saved
    with the merge described in the module docs.

    Attributes:
        agent: The agent.
        store: The agent's session store, scoped to the tenant for this turn only.
        conversation_id: The conversation as the tenant names it.
        session: The session the turn runs on.
        base: Its state as loaded (each value's JSON), to tell what the turn changed.
        attempts: How many saves to try before reporting a conflict.
    """

    agent: Agent
    store: AgentSessionStore
    conversation_id: str
    session: AgentSession
    base: dict[str, bytes]
    attempts: int = 3

    @classmethod
    async def load(
        cls, agent: Agent, store: AgentSessionStore, tenant: str, conversation_id: str, *, attempts: int = 3
    ) -> SessionTurn:
        """The tenant's session ``conversation_id`` (new if none is stored).

        Raises:
            IsolationError: The stored session belongs to another tenant.
            StorageError: The store failed.
        """
        scoped = IsolationKeyScopedSessionStore(store, isolation_key=tenant)
        session = await scoped.get_session(agent, conversation_id)
        return cls(agent, scoped, conversation_id, session, _state_json(session), attempts)

    async def save(self) -> None:
        """Save the session (nothing to do if the turn changed nothing and it is stored).

        Raises:
            TurnConflictError: Another writer changed what this turn changed, every time.
            StorageError: The store failed.
        """
        session, base = self.session, self.base
        ours = _state_json(session)
        if session_version(session) is not None and ours == base:
            return
        for _ in range(self.attempts):
            try:
                await self.store.save_session(self.agent, self.conversation_id, session)
                return
            except ConflictError:
                fresh = await self.store.get_session(self.agent, self.conversation_id)
                session = _merged(fresh, base, ours)
                if session is None:
                    break
                base = _state_json(fresh)
                if session_version(fresh) is not None and ours == base:
                    return  # the other writer stored just what this turn would
        raise TurnConflictError(
            f"conversation {self.conversation_id!r}: another request changed the same session state "
            "at the same time; send the turn again",
            backend=self.store.backend,
            conversation_id=self.conversation_id,
        )


def _merged(fresh: AgentSession, base: dict[str, bytes], ours: dict[str, bytes]) -> AgentSession | None:
    """``fresh`` with the state keys this turn changed (relative to ``base``) set as in ``ours``;
    ``None`` if ``fresh`` changed one of them too."""
    theirs = _state_json(fresh)
    changed = {key for key in base.keys() | ours.keys() if base.get(key, _ABSENT) != ours.get(key, _ABSENT)}
    if any(theirs.get(key, _ABSENT) != base.get(key, _ABSENT) for key in changed):
        return None
    data: dict[str, Any] = fresh.to_dict()
    state: dict[str, Any] = dict(data.get("state") or {})
    for key in changed:
        if key in ours:
            state[key] = msgspec.json.decode(ours[key])
        else:
            state.pop(key, None)
    data["state"] = state
    merged = AgentSession.from_dict(data)
    set_session_version(merged, session_version(fresh))
    return merged
