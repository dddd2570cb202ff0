"""Session stores that keep nothing durable: :class:`NoopSessionStore` and :class:`InMemorySessionStore`.

:class:`NoopSessionStore` is the hosting default: it remembers nothing, so every request starts a
new conversation. :class:`InMemorySessionStore` keeps serialized sessions in process memory for
development, tests and single-process apps; nothing survives the process.

Both follow the contract in :mod:`agentkeep.session_stores.base` (keys, optimistic versions).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._files import check_memory_url
from ..errors import StorageClosedError
from ..sessions import AgentSession
from .base import (
    AgentSessionStore,
    agent_key,
    check_conversation_id,
    conflict_error,
    encode_session,
    restore_session,
    session_version,
    set_session_version,
)

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["InMemorySessionStore", "NoopSessionStore"]


class NoopSessionStore(AgentSessionStore):
    """A store that remembers nothing: the hosting default ("every request is a new conversation").

    ``save_session`` does nothing (the session's version is left as it was), ``get_session`` always
    returns a new empty session whose ``session_id`` is the conversation id, and
    ``delete_session`` always returns ``False``.
    """

    backend = "noop"

    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Do nothing."""
        check_conversation_id(conversation_id)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """A new empty session with ``session_id=conversation_id``."""
        check_conversation_id(conversation_id)
        return agent.create_session(session_id=conversation_id)

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """``False``: nothing is ever stored."""
        check_conversation_id(conversation_id)
        return False


class InMemorySessionStore(AgentSessionStore):
    """Sessions in process memory, keyed by (agent name, conversation id).

    The store keeps each session's serialized JSON, not the live object, so changing a session
    after saving it does not change what is stored, and every ``get_session`` returns a new object.
    Saves use optimistic versions (see :mod:`agentkeep.session_stores.base`). Usable from several event
    loops and threads: the compare-and-set holds a short ``threading.Lock`` and never awaits.

    Example:
        ```python
        store = InMemorySessionStore()
        session = await store.get_session(agent, "conversation-1")
        await agent.run("Hello", session=session)
        await store.save_session(agent, "conversation-1", session)
        ```
    """

    backend = "memory"

    @classmethod
    def from_url(cls, url: str = "memory://") -> InMemorySessionStore:
        """A new empty store for ``memory://`` (the one URL of process memory).

        Raises:
            StoreURLError: Any other URL.
        """
        check_memory_url(url)
        return cls()

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], tuple[int, bytes]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError("the session store is closed", backend=self.backend)

    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Store a snapshot of ``session`` under ``conversation_id``.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at (nothing is
                changed).
            SessionFormatError: A state value cannot be serialized.
            StorageClosedError: The store is closed.
        """
        check_conversation_id(conversation_id)
        self._check_open()
        payload = encode_session(agent, session)
        key = (agent_key(agent), conversation_id)
        expected = session_version(session)
        with self._lock:
            self._check_open()
            stored = self._sessions.get(key)
            current = stored[0] if stored is not None else None
            if current != expected:
                raise conflict_error(
                    self.backend, key[0], conversation_id, expected=expected, current=current
                )
            version = (current or 0) + 1
            self._sessions[key] = (version, payload)
        set_session_version(session, version)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session (a new object each call), or a new empty one.

        Raises:
            SessionFormatError: The stored payload cannot be restored by ``agent``.
            StorageClosedError: The store is closed.
        """
        check_conversation_id(conversation_id)
        self._check_open()
        key = (agent_key(agent), conversation_id)
        with self._lock:
            stored = self._sessions.get(key)
        return self._restored(agent, key, stored)

    async def get_session_if_changed(
        self, agent: Agent, conversation_id: str, *, version: int | None
    ) -> AgentSession | None:
        """``None`` if ``version`` is still the stored one, else what :meth:`get_session` returns."""
        check_conversation_id(conversation_id)
        self._check_open()
        key = (agent_key(agent), conversation_id)
        with self._lock:
            stored = self._sessions.get(key)
        if version is not None and stored is not None and stored[0] == version:
            return None
        return self._restored(agent, key, stored)

    def _restored(self, agent: Agent, key: tuple[str, str], stored: tuple[int, bytes] | None) -> AgentSession:
        conversation_id = key[1]
        if stored is None:
            return agent.create_session(session_id=conversation_id)
        version, payload = stored
        where = f"{self.backend}: stored session {conversation_id!r} of agent {key[0]!r}"
        return restore_session(agent, payload, version=version, where=where)

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored.

        Raises:
            StorageClosedError: The store is closed.
        """
        check_conversation_id(conversation_id)
        self._check_open()
        with self._lock:
            return self._sessions.pop((agent_key(agent), conversation_id), None) is not None

    async def aclose(self) -> None:
        """Drop every stored session; later calls raise :class:`~agentkeep.errors.StorageClosedError`."""
        with self._lock:
            self._closed = True
            self._sessions.clear()
