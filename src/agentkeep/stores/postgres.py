"""A session store in PostgreSQL: one row per (agent, conversation id), optimistic versions.

:class:`PostgresSessionStore` keeps whole-session payloads (``agent.serialize_session(session)`` as
JSON bytes) in the ``sessions`` table of the schema the PostgreSQL message store uses
(:mod:`agentkeep.storage.postgres`), and runs on the same
:class:`~agentkeep.storage.postgres.PostgresDatabase`: the pool (injected or owned), migrations,
timeouts and the mapping of failures to :class:`~agentkeep.errors.StorageUnavailableError`.

**Optimistic versions.** A save is one statement: a session read at version ``n`` is written as
``n + 1`` by ``UPDATE ... WHERE version = n``, a new session by ``INSERT ... ON CONFLICT DO
NOTHING``. When no row changed, someone else saved first (or deleted it) and
:class:`~agentkeep.errors.ConflictError` is raised; the stored session is left as it was. The row
lock the statement takes makes this hold between tasks and processes. Saves are not retried on a
dead connection (a retry of a save that committed would report a conflict); reads are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._db.postgres import DEFAULT_SCHEMA, PostgresDatabase, PostgresPool
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

__all__ = ["PostgresSessionStore"]

_INSERT: Final = """INSERT INTO {sessions} (agent, conversation_id, version, payload)
    VALUES (%s, %s, 1, %s) ON CONFLICT DO NOTHING RETURNING version"""
_UPDATE: Final = """UPDATE {sessions} SET version = version + 1, payload = %s, updated_at = now()
    WHERE agent = %s AND conversation_id = %s AND version = %s RETURNING version"""
_SELECT: Final = "SELECT version, payload FROM {sessions} WHERE agent = %s AND conversation_id = %s"
_DELETE: Final = "DELETE FROM {sessions} WHERE agent = %s AND conversation_id = %s RETURNING version"


class PostgresSessionStore(AgentSessionStore):
    """Sessions in PostgreSQL, keyed by (:func:`~agentkeep.stores.base.agent_key`, conversation id).

    Args:
        pool: An ``AsyncConnectionPool`` to use; it is not closed by :meth:`aclose`.
        url: Or a connection URL: the store creates, opens and closes its own pool.
        schema: The schema holding the tables (shared with the message store).
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.

    Example:
        ```python
        store = PostgresSessionStore.from_url("postgresql://app@db:5432/app")
        session = await store.get_session(agent, "user-42")  # new and empty the first time
        await agent.run("Hello!", session=session)
        await store.save_session(agent, "user-42", session)
        await store.aclose()
        ```
    """

    backend = "postgres"
    DEFAULT_SCHEMA = DEFAULT_SCHEMA

    def __init__(
        self,
        pool: PostgresPool | None = None,
        *,
        url: str | None = None,
        schema: str = DEFAULT_SCHEMA,
        timeout: float = 5.0,
    ) -> None:
        self.database = PostgresDatabase(pool, url=url, schema=schema, timeout=timeout)
        self._insert = self.database.query(_INSERT)
        self._update = self.database.query(_UPDATE)
        self._select = self.database.query(_SELECT)
        self._delete = self.database.query(_DELETE)

    @classmethod
    def from_url(
        cls, url: str, *, schema: str = DEFAULT_SCHEMA, timeout: float = 5.0
    ) -> PostgresSessionStore:
        """A store with its own pool on ``url`` (opened on first use, closed by :meth:`aclose`)."""
        return cls(url=url, schema=schema, timeout=timeout)

    @property
    def schema(self) -> str:
        """The schema holding the tables."""
        return self.database.schema

    async def setup(self) -> None:
        """Create or migrate the tables (also done before the first operation); idempotent.

        Raises:
            SchemaVersionError: The schema was migrated by a newer agentkeep.
        """
        await self.database.setup()

    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Store ``session`` under ``conversation_id`` as the next version.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at.
            SessionFormatError: A state value cannot be serialized.
        """
        self.database.check_open()
        check_conversation_id(conversation_id)
        key = agent_key(agent)
        payload = encode_session(agent, session)
        expected = session_version(session)
        if expected is None:
            query, params = self._insert, (key, conversation_id, payload)
        else:
            query, params = self._update, (payload, key, conversation_id, expected)
        if not await self.database.fetch_rows(query, params):
            raise conflict_error(self.backend, key, conversation_id, expected=expected)
        set_session_version(session, 1 if expected is None else expected + 1)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session, or a new empty one (``session_id=conversation_id``) if none.

        Raises:
            SessionFormatError: The stored payload is corrupt or of an unknown version.
        """
        self.database.check_open()
        check_conversation_id(conversation_id)
        rows = await self.database.fetch_rows(self._select, (agent_key(agent), conversation_id), retry=True)
        if not rows:
            return agent.create_session(session_id=conversation_id)
        version, payload = rows[0]
        where = f"{self.backend}: session {conversation_id!r} of agent {agent_key(agent)!r}"
        return restore_session(agent, bytes(payload), version=int(version), where=where)

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored."""
        self.database.check_open()
        check_conversation_id(conversation_id)
        return bool(await self.database.fetch_rows(self._delete, (agent_key(agent), conversation_id)))

    async def aclose(self) -> None:
        """Close the pool if the store created it; idempotent. The store refuses work afterwards."""
        await self.database.aclose()

    def __repr__(self) -> str:
        return f"PostgresSessionStore(address={self.database.address!r}, schema={self.schema!r})"
