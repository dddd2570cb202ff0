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

**The contract is a protocol.** :class:`AgentSessionStore` is a :class:`typing.Protocol`: a class
with its members is a session store, whatever it derives from. Subclassing it explicitly is how a
backend inherits the defaults of the optional members (``get_session_if_changed``,
``get_service``, ``aclose``, ``backend``) and has the three core methods checked when it is made.
Decorators (``IsolationKeyScopedSessionStore``) derive from the concrete
:class:`DelegatingSessionStore`, and ``store.get_service(SomeStoreType)`` finds a layer in the
chain.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeVar, runtime_checkable

from .._json_values import text_problem
from ..encryption import KeyMismatch, decrypt_payload, decryption_error, encrypt_payload
from ..errors import ConflictError, SessionFormatError, StateTypeError
from ..sessions import AgentSession, encode_payload
from ..turn_writes import SupportsTurnCommit, commits_turns

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..agent import Agent
    from ..encryption import KeyRing
    from ..turn_writes import HeldAppend

__all__ = [
    "STORE_VERSION_KEY",
    "AgentSessionStore",
    "DelegatingSessionStore",
    "StoredPayload",
    "SupportsPayloadRewrite",
    "agent_key",
    "check_conversation_id",
    "conflict_error",
    "encode_session",
    "next_version",
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


def next_version(session: AgentSession) -> int:
    """The version a successful save of ``session`` stores."""
    expected = session_version(session)
    return 1 if expected is None else expected + 1


def encode_session(
    agent: Agent,
    session: AgentSession,
    *,
    conversation_id: str | None = None,
    key_ring: KeyRing | None = None,
) -> bytes:
    """The session's payload as JSON bytes (through ``agent.serialize_session``); with
    ``key_ring``, in its encrypted envelope (:func:`~agentkeep.encryption.encrypt_payload`) bound
    to the agent, ``conversation_id`` (the store's key) and :func:`next_version`.

    Raises:
        SessionFormatError: A state value cannot be serialized.
        ValueError: ``key_ring`` without ``conversation_id`` (a payload is bound to its key).
    """
    if key_ring is not None and conversation_id is None:
        raise ValueError("encrypting a session payload needs the conversation id the store keys it by")
    serialized = agent.serialize_session(session)
    try:
        payload = encode_payload(serialized)
    except StateTypeError as exc:
        raise SessionFormatError(f"session {session.session_id}: {exc}") from exc
    if key_ring is None:
        return payload
    return encrypt_payload(
        key_ring,
        payload,
        agent=agent_key(agent),
        conversation_id=conversation_id or "",
        version=next_version(session),
    )


def restore_session(
    agent: Agent,
    payload: bytes | str,
    *,
    version: int,
    where: str,
    backend: str = "custom",
    conversation_id: str = "",
    key_ring: KeyRing | None = None,
) -> AgentSession:
    """A stored payload back as a session of ``version``, checked by the agent's providers; an
    encrypted one is decrypted first (a plaintext one is read as it is, with or without a ring).

    Args:
        agent: The agent whose providers check their state.
        payload: The JSON payload (or its encrypted envelope).
        version: The stored version (recorded on the session for the next save).
        where: What to name in an error (backend, key or file).
        backend: The store's name, for a :class:`~agentkeep.errors.DecryptionError`.
        conversation_id: The store's key of the session (what an encrypted payload is bound to).
        key_ring: The keys to decrypt with.

    Raises:
        SessionFormatError: The payload is corrupt or cannot be restored by ``agent``.
        DecryptionError: The payload is encrypted under a key ``key_ring`` does not hold, or does
            not decrypt with it.
    """
    if isinstance(payload, str):
        payload = payload.encode("utf-8", "surrogatepass")
    try:
        opened = decrypt_payload(
            key_ring, payload, agent=agent_key(agent), conversation_id=conversation_id, version=version
        )
    except KeyMismatch as exc:
        raise decryption_error(exc, backend=backend, conversation_id=conversation_id) from exc
    except ValueError as exc:
        raise SessionFormatError(f"{where}: {exc}") from exc
    try:
        session = agent.deserialize_session(payload if opened is None else opened[0])
    except SessionFormatError as exc:
        raise SessionFormatError(f"{where}: {exc}") from exc
    set_session_version(session, version)
    return session


@dataclass(frozen=True, slots=True)
class StoredPayload:
    """A session as a store keeps it, for tools that work on payloads (``agentkeep keys rotate``).

    Attributes:
        agent: The agent part of its key.
        conversation_id: The conversation part of its key.
        version: Its stored version.
        payload: The stored bytes (JSON, or an encrypted envelope).
    """

    agent: str
    conversation_id: str
    version: int
    payload: bytes


@runtime_checkable
class SupportsPayloadRewrite(Protocol):
    """A session store whose payloads can be read and replaced as stored (to re-encrypt them)."""

    async def stored_payloads(
        self, *, after: tuple[str, str] | None = None, limit: int = 100
    ) -> list[StoredPayload]:
        """Up to ``limit`` stored sessions after ``after``, ordered by (agent, conversation id) in
        the store's own stable order (a database's collation, say); an empty list is the end."""
        ...

    async def replace_payload(self, stored: StoredPayload, payload: bytes) -> bool:
        """Store ``payload`` for ``stored``'s session if it is still stored as ``stored`` (same
        version and bytes), keeping its version; ``False`` if it changed meanwhile."""
        ...


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


@runtime_checkable
class AgentSessionStore(Protocol):
    """Saves and restores sessions by (agent, conversation id).

    A protocol (see the module docs): ``save_session``, ``get_session`` and ``delete_session`` are
    what a backend writes; the other members have defaults a subclass inherits.
    """

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

    async def get_session_if_changed(
        self, agent: Agent, conversation_id: str, *, version: int | None
    ) -> AgentSession | None:
        """``None`` if version ``version`` of the session is still the stored one (the caller's
        copy at that version is current), else what :meth:`get_session` returns.

        For a caller that keeps session objects between turns (a host): the stores that can ask
        for the version alone do, and read and restore the payload only when it changed; this
        default reads the session.

        Raises:
            SessionFormatError: The stored payload is corrupt or of an unknown version.
            ValueError: ``conversation_id`` is empty.
        """
        session = await self.get_session(agent, conversation_id)
        return None if version is not None and session_version(session) == version else session

    def get_service(self, service_type: type[S]) -> S | None:
        """This store if it is a ``service_type``, else ``None`` (decorators search their chain)."""
        return self if isinstance(self, service_type) else None

    async def aclose(self) -> None:
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

    async def get_session_if_changed(
        self, agent: Agent, conversation_id: str, *, version: int | None
    ) -> AgentSession | None:
        return await self.inner_store.get_session_if_changed(agent, conversation_id, version=version)

    def shares_database(self, store: object) -> bool:
        """Whether the inner store can save with ``store``'s held appends in one transaction
        (:mod:`agentkeep.turn_writes`)."""
        inner = self.inner_store
        return commits_turns(inner) and inner.shares_database(store)

    async def save_session_with_appends(
        self, agent: Agent, conversation_id: str, session: AgentSession, appends: Sequence[HeldAppend]
    ) -> None:
        inner = self.inner_store
        if not isinstance(inner, SupportsTurnCommit):
            raise TypeError(f"{inner!r} cannot save a session with appends")
        await inner.save_session_with_appends(agent, conversation_id, session, appends)

    def get_service(self, service_type: type[S]) -> S | None:
        found = super().get_service(service_type)
        return found if found is not None else self.inner_store.get_service(service_type)

    async def aclose(self) -> None:
        await self.inner_store.aclose()
