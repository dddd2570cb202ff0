"""Tenant isolation for session stores: :class:`IsolationKeyScopedSessionStore`.

A multi-user host wraps its one shared store in a scoped view per user or tenant. The view
rewrites every conversation id to ``{isolation_key}::{conversation_id}`` before it reaches the inner
store, so a tenant can only ever name its own sessions: a conversation id another tenant uses, or
one that itself contains ``::``, still lands under the caller's key.

Isolation holds for what a session points at, too. Every session the view hands out or saves
carries the tenant's :attr:`~agentkeep.sessions.AgentSession.isolation_key`, so its
:attr:`~agentkeep.sessions.AgentSession.storage_key` — the default key of a durable history and of
anything else a provider keys by session — is tenant-scoped: alice's and bob's ``chat-1`` have
separate stored histories. A session recorded for another tenant is refused with
:class:`~agentkeep.errors.IsolationError`, on reading and on saving.

The rewritten id stays inside the store. Sessions come back with the ``session_id`` the caller
knows: a new session's ``session_id`` is the caller's ``conversation_id``, and a stored session keeps
the id it was saved with. (A session whose id would be the scoped id is given the caller's id.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConflictError, IsolationError, StorageClosedError
from ..sessions import ISOLATION_SEPARATOR, AgentSession, check_isolation_key
from .base import (
    AgentSessionStore,
    DelegatingSessionStore,
    check_conversation_id,
    session_version,
    set_session_version,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..agent import Agent
    from ..turn_writes import HeldAppend

__all__ = ["ISOLATION_SEPARATOR", "IsolationKeyScopedSessionStore"]


class IsolationKeyScopedSessionStore(DelegatingSessionStore):
    """A view of ``inner_store`` limited to one user's or tenant's sessions.

    Args:
        inner_store: The shared store holding every tenant's sessions.
        isolation_key: The user or tenant. Non-empty, without ``"::"`` and not ending in ``":"``,
            so that ``{isolation_key}::{conversation_id}`` can only be read one way and two
            tenants never share an id.
        owns_inner_store: Whether :meth:`aclose` also closes ``inner_store``. By default it does
            not: views are cheap, made per request or tenant, over a store the host owns.

    Raises:
        ValueError: ``isolation_key`` is empty, contains ``"::"`` or ends in ``":"``.

    Example:
        ```python
        shared = FileSystemSessionStore()
        store = IsolationKeyScopedSessionStore(shared, isolation_key=user_id)
        session = await store.get_session(agent, "chat-1")  # stored as f"{user_id}::chat-1"
        assert session.session_id == "chat-1"
        ```
    """

    def __init__(
        self, inner_store: AgentSessionStore, isolation_key: str, *, owns_inner_store: bool = False
    ) -> None:
        super().__init__(inner_store)
        self._isolation_key = check_isolation_key(isolation_key)
        below = inner_store.get_service(IsolationKeyScopedSessionStore)
        self._scope = isolation_key if below is None else f"{below.scope}{ISOLATION_SEPARATOR}{isolation_key}"
        self._owns_inner_store = owns_inner_store
        self._closed = False

    @property
    def isolation_key(self) -> str:
        """The user or tenant this view is limited to."""
        return self._isolation_key

    @property
    def scope(self) -> str:
        """The isolation key sessions of this view carry: :attr:`isolation_key`, after the scopes
        of the views this one stands on (``"org-7::alice"`` for an ``alice`` view over an ``org-7``
        view)."""
        return self._scope

    def scoped_id(self, conversation_id: str) -> str:
        """The id ``conversation_id`` has in the inner store: ``{isolation_key}::{conversation_id}``.

        Raises:
            ValueError: ``conversation_id`` is not a non-empty string of valid Unicode text.
        """
        check_conversation_id(conversation_id)
        return f"{self._isolation_key}{ISOLATION_SEPARATOR}{conversation_id}"

    def _claim(self, session: AgentSession, conversation_id: str) -> None:
        """Mark ``session`` as this tenant's, or refuse it when it is another tenant's.

        Accepted: a session of this :attr:`scope` or of a sub-tenant's (a view over this one).
        Claimed: a session with no isolation key (saved before sessions recorded their tenant:
        what its providers stored keeps its key, what they key from now on is scoped), or with
        the key of a tenant this view is a sub-tenant of (the view below claimed it first).
        """
        owner, scope = session.isolation_key, self._scope
        if owner == scope or (owner is not None and owner.startswith(scope + ISOLATION_SEPARATOR)):
            return
        if owner is None or scope.startswith(owner + ISOLATION_SEPARATOR):
            session.isolation_key = scope
        else:
            raise IsolationError(
                f"session {session.session_id!r} under conversation {conversation_id!r} belongs to "
                "another tenant",
                backend=self.backend,
                conversation_id=conversation_id,
            )

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError("the session store is closed", backend=self.backend)

    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Save ``session`` under this tenant's ``conversation_id`` (see the inner store's rules).

        Raises:
            ConflictError: As the inner store does; its ``conversation_id`` is the caller's id.
        """
        scoped = self.scoped_id(conversation_id)
        self._check_open()
        self._claim(session, conversation_id)
        try:
            await self.inner_store.save_session(agent, scoped, session)
        except ConflictError as exc:  # name the conversation as the caller knows it
            raise ConflictError(str(exc), backend=exc.backend, conversation_id=conversation_id) from exc

    async def save_session_with_appends(
        self, agent: Agent, conversation_id: str, session: AgentSession, appends: Sequence[HeldAppend]
    ) -> None:
        """Save ``session`` under this tenant's ``conversation_id`` with the held ``appends``, in
        one transaction (see :mod:`agentkeep.turn_writes`).

        Raises:
            ConflictError: As :meth:`save_session`.
        """
        scoped = self.scoped_id(conversation_id)
        self._check_open()
        self._claim(session, conversation_id)
        try:
            await super().save_session_with_appends(agent, scoped, session, appends)
        except ConflictError as exc:  # name the conversation as the caller knows it
            raise ConflictError(str(exc), backend=exc.backend, conversation_id=conversation_id) from exc

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """This tenant's session under ``conversation_id``, or a new one with that ``session_id``."""
        scoped = self.scoped_id(conversation_id)
        self._check_open()
        return self._seen(await self.inner_store.get_session(agent, scoped), conversation_id, scoped)

    async def get_session_if_changed(
        self, agent: Agent, conversation_id: str, *, version: int | None
    ) -> AgentSession | None:
        """``None`` if this tenant's session under ``conversation_id`` is still at ``version``,
        else what :meth:`get_session` returns."""
        scoped = self.scoped_id(conversation_id)
        self._check_open()
        found = await self.inner_store.get_session_if_changed(agent, scoped, version=version)
        return None if found is None else self._seen(found, conversation_id, scoped)

    def _seen(self, session: AgentSession, conversation_id: str, scoped: str) -> AgentSession:
        """``session`` as the inner store gave it for ``scoped``, as this tenant's view shows it."""
        if session.session_id != scoped:
            self._claim(session, conversation_id)
            return session
        # The inner store made a new session named after the scoped id: the caller never sees it.
        renamed = AgentSession(
            session_id=conversation_id,
            service_session_id=session.service_session_id,
            isolation_key=self._scope,
        )
        renamed.state = session.state
        renamed.extra_fields = session.extra_fields
        set_session_version(renamed, session_version(session))
        return renamed

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget this tenant's session under ``conversation_id``; ``False`` if none was stored."""
        scoped = self.scoped_id(conversation_id)
        self._check_open()
        return await self.inner_store.delete_session(agent, scoped)

    async def aclose(self) -> None:
        """Close this view (and ``inner_store`` too when ``owns_inner_store=True``); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_inner_store:
            await self.inner_store.aclose()

    def __repr__(self) -> str:
        return f"IsolationKeyScopedSessionStore({self.inner_store!r}, {self._isolation_key!r})"
