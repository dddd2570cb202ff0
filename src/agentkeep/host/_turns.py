"""One turn of a hosted conversation: the tenant's session loaded, the run, the session saved.

**Inside a process** turns of one conversation (tenant, agent, conversation id) take turns on an
``asyncio.Lock`` held from loading the session to saving it; locks of idle conversations are
dropped, so the table stays as large as the number of conversations in flight.

**Across processes** the session store's optimistic versions decide. A save that meets a newer
version (:class:`~agentkeep.errors.ConflictError`) reads the session again and puts this turn's
state changes on top of it, key by key of the state bag (each provider owns its keys): a key this
turn changed that the other writer left alone (or changed the same way) is taken over; a key both
changed differently is a real conflict, reported as :class:`TurnConflictError` (HTTP 409) after
``attempts`` tries. Messages are not part of this merge: a durable history provider appends them
to its own log during the run, atomically, so two processes' turns are both kept, each contiguous.

A run that fails (model error, cancelled request, store down) saves nothing, and its history
provider stores nothing of it.

**Warm sessions.** A :class:`SessionCache` keeps the session objects of recent conversations
(with their providers' caches in ``session.runtime``, such as the loaded history): when the store
still holds the version a cached object was saved as (asked with
:meth:`~agentkeep.session_stores.AgentSessionStore.get_session_if_changed`, which reads only the version
where the store can), the next turn runs on that object, so a durable history provider reads only
what was appended since, by any process. Any other version, or a failed turn, and the cached
object is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from .. import telemetry
from .._json_values import encode_json
from ..errors import ConflictError
from ..session_stores import (
    AgentSessionStore,
    IsolationKeyScopedSessionStore,
    session_version,
    set_session_version,
)
from ..sessions import AgentSession
from ..turn_writes import TurnWrites, held_appends, hold_appends

if TYPE_CHECKING:
    from ..agent import Agent
    from ..messages import Message

__all__ = ["ConversationLocks", "SessionCache", "SessionTurn", "TenantTurns", "TurnConflictError"]

_ABSENT: Final = b"\x00absent"


class TurnConflictError(ConflictError):
    """A turn's session changes collide with another writer's, after every retry."""


class TenantTurns:
    """How many turns each tenant runs at once in this process, each tenant at most ``limit``
    (``None``: no bound), so one tenant's burst cannot take every worker of the host."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError("a tenant's concurrent turns are at least 1 (or None: no bound)")
        self.limit = limit
        self._running: dict[str, int] = {}

    def running(self, tenant: str) -> int:
        """The tenant's turns running now."""
        return self._running.get(tenant, 0)

    def admit(self, tenant: str) -> bool:
        """Count one more turn of ``tenant``, unless it runs ``limit`` already (then ``False``)."""
        running = self._running.get(tenant, 0)
        if self.limit is not None and running >= self.limit:
            return False
        self._running[tenant] = running + 1
        return True

    def leave(self, tenant: str) -> None:
        """Count a turn of ``tenant`` as ended."""
        left = self._running[tenant] - 1
        if left:
            self._running[tenant] = left
        else:
            del self._running[tenant]


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


class SessionCache:
    """The session objects of the ``size`` most recently used conversations (see the module docs)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._sessions: OrderedDict[tuple[str, ...], AgentSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def pop(self, key: tuple[str, ...]) -> AgentSession | None:
        """The cached object for ``key``, forgotten (a turn runs on it and keeps it again; a
        deleted or compacted conversation's is dropped)."""
        return self._sessions.pop(key, None)

    def keep(self, key: tuple[str, ...], session: AgentSession) -> None:
        """Remember ``session`` (saved, at its version) for the next turn of ``key``."""
        self._sessions[key] = session
        self._sessions.move_to_end(key)
        while len(self._sessions) > self.size:
            self._sessions.popitem(last=False)


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
        cls,
        agent: Agent,
        store: AgentSessionStore,
        tenant: str,
        conversation_id: str,
        *,
        cache: tuple[SessionCache, tuple[str, ...]] | None = None,
        attempts: int = 3,
    ) -> SessionTurn:
        """The tenant's session ``conversation_id`` (new if none is stored), the cached object
        when ``cache`` (the cache and this conversation's key in it) holds it at the stored version.

        Raises:
            IsolationError: The stored session belongs to another tenant.
            StorageError: The store failed.
        """
        scoped = IsolationKeyScopedSessionStore(store, isolation_key=tenant)
        cached = None if cache is None else cache[0].pop(cache[1])
        version = None if cached is None else session_version(cached)
        with telemetry.span("agentkeep.session_store.get", **{"agentkeep.backend": store.backend}):
            if cached is not None and version is not None:
                fresh = await scoped.get_session_if_changed(agent, conversation_id, version=version)
                session = cached if fresh is None else fresh
            else:
                session = await scoped.get_session(agent, conversation_id)
        return cls(agent, scoped, conversation_id, session, _state_json(session), attempts)

    def hold_appends(self) -> None:
        """Have the history appends to come (the run's) held for :meth:`save`, which stores them
        with the session in one step where the stores share a database (see
        :mod:`agentkeep.turn_writes`). Only for a turn that ends with :meth:`save` or fails."""
        hold_appends(self.session, self.store)

    async def history(self, *, keep_for_run: bool = False) -> Sequence[Message]:
        """The newest stored history of the session (what the agent's history provider loads, as
        it gives it: not copied); with ``keep_for_run``, kept for the turn's run to load (see
        :meth:`discard_kept`)."""
        provider = self.agent.history_provider()
        if provider is None:
            return []
        return await provider.get_session_messages(self.session, keep_for_run=keep_for_run)

    def discard_kept(self) -> None:
        """Drop the history :meth:`history` kept if the run did not take it (it failed before)."""
        provider = self.agent.history_provider()
        if provider is not None:
            provider.discard_kept(self.session)

    async def save(self) -> None:
        """Save the session (nothing to do if the turn changed nothing and it is stored).

        Raises:
            TurnConflictError: Another writer changed what this turn changed, every time.
            StorageError: The store failed.
        """
        session, base = self.session, self.base
        writes = held_appends(session)
        try:
            ours = _state_json(session)
            if session_version(session) is not None and ours == base:
                if writes is not None:
                    await writes.flush_all()  # no session change: the appends alone, each atomic
                return
            await self._save(session, base, ours, writes)
        finally:
            if writes is not None:
                writes.held = []  # written, or dropped with the turn that failed

    async def _save(
        self, session: AgentSession, base: dict[str, bytes], ours: dict[str, bytes], writes: TurnWrites | None
    ) -> None:
        """Save ``session`` (with the appends ``writes`` holds, in one step), merging over other
        writers."""
        held = [] if writes is None else writes.held
        for _ in range(self.attempts):
            try:
                with telemetry.span(
                    "agentkeep.session_store.save",
                    **{
                        "agentkeep.backend": self.store.backend,
                        "agentkeep.messages": sum(len(h.messages) for h in held),
                    },
                ):
                    if writes is not None and held:  # its session store is this turn's
                        await writes.session_store.save_session_with_appends(
                            self.agent, self.conversation_id, session, held
                        )
                    else:
                        await self.store.save_session(self.agent, self.conversation_id, session)
                self.session = session
                return
            except ConflictError:
                fresh = await self.store.get_session(self.agent, self.conversation_id)
                merged = _merged(fresh, base, ours)
                if merged is None:
                    break
                session, base = merged, _state_json(fresh)
                if session_version(fresh) is not None and ours == base and not held:
                    self.session = fresh
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
    for key in changed:
        mine, other = ours.get(key, _ABSENT), theirs.get(key, _ABSENT)
        if other not in (base.get(key, _ABSENT), mine):
            return None  # both changed it, differently
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
