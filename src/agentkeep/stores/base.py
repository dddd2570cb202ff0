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
from typing import TYPE_CHECKING, TypeVar

from ..sessions import AgentSession

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = [
    "AgentSessionStore",
    "DelegatingSessionStore",
    "agent_key",
    "session_version",
    "set_session_version",
]

S = TypeVar("S")


def session_version(session: AgentSession) -> int | None:
    """The store version ``session`` was read at or last saved as (``None``: never stored)."""
    return session._store_version  # pyright: ignore[reportPrivateUsage]


def set_session_version(session: AgentSession, version: int | None) -> None:
    """Record the store version of ``session`` (for store implementations)."""
    session._store_version = version  # pyright: ignore[reportPrivateUsage]


def agent_key(agent: Agent) -> str:
    """The agent part of a session key: its name, or its id when it has none."""
    return agent.name or agent.id


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
