"""The session-store contract of the hosting layer: save and restore whole sessions by id.

An :class:`AgentSessionStore` keeps serialized :class:`~agentkeep.sessions.AgentSession` payloads
keyed by (agent, conversation id), where the agent part is ``agent.name`` (or ``agent.id`` for an
unnamed agent). Sessions are restored through ``agent.deserialize_session`` so the agent's
providers check their state.

**Optimistic versions.** Every stored session has a version (1, 2, ...). ``get_session`` records the
version it read on the session (``session_version(session)``); ``save_session`` writes version + 1
only if the stored version is still the one read (a new session: only if nothing is stored), and
raises :class:`~agentkeep.errors.ConflictError` otherwise, so a concurrent writer's work is never
silently overwritten. After a save the session carries the new version.

Decorators (``IsolationKeyScopedSessionStore``) derive from :class:`DelegatingSessionStore`, and
``store.get_service(SomeStoreType)`` finds a layer in the chain.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from .._json_values import text_problem
from ..errors import ConflictError, SessionFormatError, StateTypeError
from ..sessions import AgentSession, encode_payload

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = [
    "STORE_VERSION_KEY",
    "AgentSessionStore",
    "DelegatingSessionStore",
    "agent_key",
    "check_conversation_id",
    "conflict_error",
    "encode_session",
    "restore_session",
    "session_version",
    "set_session_version",
]

S = TypeVar("S")


STORE_VERSION_KEY: Final = "store:version"
"""The key in ``session.runtime`` under which session stores keep the version a session was read
at (this process only: it is never serialized)."""


def session_version(session: AgentSession) -> int | None:
    """The store version ``session`` was read at or last saved as (``None``: never stored)."""
    version = session.runtime.get(STORE_VERSION_KEY)
    return version if isinstance(version, int) else None


def set_session_version(session: AgentSession, version: int | None) -> None:
    """Record the store version of ``session`` (for store implementations)."""
    if version is None:
        session.runtime.pop(STORE_VERSION_KEY, None)
    else:
        session.runtime[STORE_VERSION_KEY] = version


def agent_key(agent: Agent) -> str:
    """The agent part of a session key: its name, or its id when it has none."""
    return agent.name or agent.id


# -- helpers every store implementation shares ----------------------------------------------------


def check_conversation_id(conversation_id: str) -> None:
    """Refuse what no store can key a session by.

    Raises:
        ValueError: ``conversation_id`` is empty, not a string, or not valid Unicode text.
    """
    if not isinstance(conversation_id, str) or not conversation_id:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"conversation_id must be a non-empty string, not {conversation_id!r}")
    if text_problem(conversation_id) is not None:  # a lone surrogate: no JSON (or file name) holds it
        raise ValueError(f"conversation_id {conversation_id!r} is not valid Unicode text")


def encode_session(agent: Agent, session: AgentSession) -> bytes:
    """The session's payload as JSON bytes (through ``agent.serialize_session``).

    Raises:
        SessionFormatError: A state value cannot be serialized.
    """
    payload = agent.serialize_session(session)
    try:
        return encode_payload(payload)
    except StateTypeError as exc:
        raise SessionFormatError(f"session {session.session_id}: {exc}") from exc


def restore_session(agent: Agent, payload: bytes | str, *, version: int, where: str) -> AgentSession:
    """A stored payload back as a session of ``version``, checked by the agent's providers.

    Args:
        agent: The agent whose providers check their state.
        payload: The JSON payload.
        version: The stored version (recorded on the session for the next save).
        where: What to name in an error (backend, key or file).

    Raises:
        SessionFormatError: The payload is corrupt or cannot be restored by ``agent``.
    """
    try:
        session = agent.deserialize_session(payload)
    except SessionFormatError as exc:
        raise SessionFormatError(f"{where}: {exc}") from exc
    set_session_version(session, version)
    return session


def conflict_error(
    backend: str,
    agent: str,
    conversation_id: str,
    *,
    expected: int | None,
    current: int | Literal["unknown"] | None = "unknown",
) -> ConflictError:
    """The error for a save that would overwrite someone else's version.

    Args:
        backend: The store's name.
        agent: The agent part of the key.
        conversation_id: The session's key.
        expected: The version the session was read at (``None``: a new session).
        current: The stored version (``None``: nothing stored), or ``"unknown"``.
    """
    read = "a new session" if expected is None else f"a session read at version {expected}"
    if current == "unknown":
        found = "it was saved or deleted by someone else since"
    else:
        found = "nothing is stored" if current is None else f"version {current} is stored"
    return ConflictError(
        f"{backend}: cannot save {read} as conversation {conversation_id!r} of agent {agent!r}: "
        f"{found}; get the session again and retry",
        backend=backend,
        conversation_id=conversation_id,
    )


class AgentSessionStore(ABC):
    """Saves and restores sessions by (agent, conversation id)."""

    backend: str = "custom"
    """The store's name in errors."""

    @abstractmethod
    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Store ``session`` under ``conversation_id``.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at.
            ValueError: ``conversation_id`` is empty.
        """

    @abstractmethod
    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session, or a new empty one (with ``session_id=conversation_id``) if none.

        Raises:
            SessionFormatError: The stored payload is corrupt or of an unknown version.
            ValueError: ``conversation_id`` is empty.
        """

    @abstractmethod
    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored."""

    def get_service(self, service_type: type[S]) -> S | None:
        """This store if it is a ``service_type``, else ``None`` (decorators search their chain)."""
        return self if isinstance(self, service_type) else None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release what the store owns; idempotent."""


class DelegatingSessionStore(AgentSessionStore):
    """Base for decorators: forwards everything to ``inner_store``.

    Args:
        inner_store: The store being decorated.
    """

    def __init__(self, inner_store: AgentSessionStore) -> None:
        self.inner_store = inner_store
        self.backend = inner_store.backend

    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        await self.inner_store.save_session(agent, conversation_id, session)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        return await self.inner_store.get_session(agent, conversation_id)

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        return await self.inner_store.delete_session(agent, conversation_id)

    def get_service(self, service_type: type[S]) -> S | None:
        found = super().get_service(service_type)
        return found if found is not None else self.inner_store.get_service(service_type)

    async def aclose(self) -> None:
        await self.inner_store.aclose()
