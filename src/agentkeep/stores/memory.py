"""Session stores that keep nothing durable: :class:`NoopSessionStore` and :class:`InMemorySessionStore`.

:class:`NoopSessionStore` is the hosting default: it remembers nothing, so every request starts a
new conversation. :class:`InMemorySessionStore` keeps serialized sessions in process memory for
development, tests and single-process apps; nothing survives the process.

Both follow the contract in :mod:`agentkeep.stores.base` (keys, optimistic versions).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import msgspec

from ..errors import ConflictError, SessionFormatError, StorageClosedError
from ..sessions import AgentSession
from .base import AgentSessionStore, agent_key, session_version, set_session_version

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["InMemorySessionStore", "NoopSessionStore"]


def _check_conversation_id(conversation_id: str) -> None:
    if not isinstance(conversation_id, str) or not conversation_id:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"conversation_id must be a non-empty string, not {conversation_id!r}")
    if not conversation_id.isascii():
        try:
            conversation_id.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate: no JSON (or file name) can hold it
            raise ValueError(f"conversation_id {conversation_id!r} is not valid Unicode text") from exc


class NoopSessionStore(AgentSessionStore):
    """A store that remembers nothing: the hosting default ("every request is a new conversation").

    ``save_session`` does nothing (the session's version is left as it was), ``get_session`` always
    returns a new empty session whose ``session_id`` is the conversation id, and
    ``delete_session`` always returns ``False``.
    """

    backend = "noop"

    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Do nothing."""
        _check_conversation_id(conversation_id)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """A new empty session with ``session_id=conversation_id``."""
        _check_conversation_id(conversation_id)
        return agent.create_session(session_id=conversation_id)

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """``False``: nothing is ever stored."""
        _check_conversation_id(conversation_id)
        return False


class InMemorySessionStore(AgentSessionStore):
    """Sessions in process memory, keyed by (agent name, conversation id).

    The store keeps each session's serialized JSON, not the live object, so changing a session
    after saving it does not change what is stored, and every ``get_session`` returns a new object.
    Saves use optimistic versions (see :mod:`agentkeep.stores.base`). Usable from several event
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
        _check_conversation_id(conversation_id)
        self._check_open()
        payload = msgspec.json.encode(agent.serialize_session(session))
        key = (agent_key(agent), conversation_id)
        expected = session_version(session)
        with self._lock:
            self._check_open()
            stored = self._sessions.get(key)
            current = stored[0] if stored is not None else None
            if current != expected:
                raise _conflict(self.backend, key, expected, current)
            version = (current or 0) + 1
            self._sessions[key] = (version, payload)
        set_session_version(session, version)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session (a new object each call), or a new empty one.

        Raises:
            SessionFormatError: The stored payload cannot be restored by ``agent``.
            StorageClosedError: The store is closed.
        """
        _check_conversation_id(conversation_id)
        self._check_open()
        key = (agent_key(agent), conversation_id)
        with self._lock:
            stored = self._sessions.get(key)
        if stored is None:
            return agent.create_session(session_id=conversation_id)
        version, payload = stored
        try:
            session = agent.deserialize_session(payload)
        except SessionFormatError as exc:
            raise SessionFormatError(
                f"{self.backend}: stored session {conversation_id!r} of agent {key[0]!r}: {exc}"
            ) from exc
        set_session_version(session, version)
        return session

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored.

        Raises:
            StorageClosedError: The store is closed.
        """
        _check_conversation_id(conversation_id)
        self._check_open()
        with self._lock:
            return self._sessions.pop((agent_key(agent), conversation_id), None) is not None

    async def aclose(self) -> None:
        """Drop every stored session; later calls raise :class:`~agentkeep.errors.StorageClosedError`."""
        with self._lock:
            self._closed = True
            self._sessions.clear()


def _conflict(backend: str, key: tuple[str, str], expected: int | None, current: int | None) -> ConflictError:
    agent, conversation_id = key
    read = "a new session" if expected is None else f"a session read at version {expected}"
    found = "nothing is stored" if current is None else f"version {current} is stored"
    return ConflictError(
        f"{backend}: cannot save {read} as conversation {conversation_id!r} of agent {agent!r}: "
        f"{found}; get the session again and retry",
        backend=backend,
        conversation_id=conversation_id,
    )
