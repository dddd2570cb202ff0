"""A session store in PostgreSQL: one row per (agent, conversation id), optimistic versions.

:class:`PostgresSessionStore` keeps whole-session payloads (``agent.serialize_session(session)`` as
JSON bytes) in the ``sessions`` table of the schema the PostgreSQL message store uses
(:mod:`agentkeep.message_stores.postgres`), and runs on the same
:class:`~agentkeep.message_stores.postgres.PostgresDatabase`: the pool (injected or owned), migrations,
timeouts and the mapping of failures to :class:`~agentkeep.errors.StorageUnavailableError`.

**Optimistic versions.** A save is one statement: a session read at version ``n`` is written as
``n + 1`` by ``UPDATE ... WHERE version = n``, a new session by ``INSERT ... ON CONFLICT DO
NOTHING``. When no row changed, someone else saved first (or deleted it) and
:class:`~agentkeep.errors.ConflictError` is raised; the stored session is left as it was. The row
lock the statement takes makes this hold between tasks and processes. Saves are not retried on a
dead connection (a retry of a save that committed would report a conflict); reads are. Each
write sets its transaction's commit-by time, which the row's trigger checks at COMMIT (see
:mod:`agentkeep.message_stores.postgres`): a save the caller was told had failed is not stored
later by a server that was paused.

**Encryption at rest.** Given a :class:`~agentkeep.encryption.KeyRing`, the store keeps payloads in
their encrypted envelope, bound to the agent, the conversation id and the version they are stored
as; :meth:`PostgresSessionStore.stored_payloads` and :meth:`PostgresSessionStore.replace_payload`
(:class:`~agentkeep.session_stores.base.SupportsPayloadRewrite`) let ``agentkeep keys rotate`` re-encrypt
them in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

from .._db.postgres import (
    COMMIT_BY,
    DEFAULT_SCHEMA,
    Pooler,
    PostgresConnection,
    PostgresDatabase,
    PostgresPool,
)
from ..message_stores.postgres import PostgresMessageStore
from ..sessions import AgentSession
from .base import (
    AgentSessionStore,
    StoredPayload,
    agent_key,
    check_conversation_id,
    conflict_error,
    encode_session,
    restore_session,
    session_version,
    set_session_version,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..agent import Agent
    from ..encryption import KeyRing
    from ..turn_writes import HeldAppend

__all__ = ["PostgresSessionStore"]


class _Conflict(Exception):
    """The session's version moved: the turn's transaction rolls back."""


# Each write sets its transaction's commit-by time (the last parameter) for each row it writes.
_INSERT: Final = f"""INSERT INTO {{sessions}} (agent, conversation_id, version, payload)
    VALUES (%s, %s, 1, %s) ON CONFLICT DO NOTHING RETURNING version, {COMMIT_BY}"""
_UPDATE: Final = f"""UPDATE {{sessions}} SET version = version + 1, payload = %s, updated_at = now()
    WHERE agent = %s AND conversation_id = %s AND version = %s RETURNING version, {COMMIT_BY}"""
_SELECT: Final = "SELECT version, payload FROM {sessions} WHERE agent = %s AND conversation_id = %s"
_SELECT_IF_CHANGED: Final = (
    "SELECT version, CASE WHEN version = %s THEN NULL ELSE payload END FROM {sessions} "
    "WHERE agent = %s AND conversation_id = %s"
)
_DELETE: Final = f"""DELETE FROM {{sessions}} WHERE agent = %s AND conversation_id = %s
    RETURNING version, {COMMIT_BY}"""
# Keyset pages in the primary key's order (the database's collation of text), so each page is an
# index range scan of ``limit`` rows.
_LIST_FIRST: Final = """SELECT agent, conversation_id, version, payload FROM {sessions}
    ORDER BY agent, conversation_id LIMIT %s"""
_LIST_AFTER: Final = """SELECT agent, conversation_id, version, payload FROM {sessions}
    WHERE (agent, conversation_id) > (%s, %s) ORDER BY agent, conversation_id LIMIT %s"""
_REPLACE: Final = f"""UPDATE {{sessions}} SET payload = %s
    WHERE agent = %s AND conversation_id = %s AND version = %s AND payload = %s
    RETURNING version, {COMMIT_BY}"""


class PostgresSessionStore(AgentSessionStore):
    """Sessions in PostgreSQL, keyed by (:func:`~agentkeep.session_stores.base.agent_key`, conversation id).

    Args:
        pool: An ``AsyncConnectionPool`` to use; it is not closed by :meth:`aclose`.
        url: Or a connection URL: the store uses the process's pool for it (shared with the
            other stores on that database), acquired on first use and released by :meth:`aclose`.
        schema: The schema holding the tables (shared with the message store).
        timeout: Seconds to wait for a connection, and (plus one second) for an operation.
        key_ring: Encrypt session payloads with its current key (decrypt with any of its keys);
            see :mod:`agentkeep.encryption`.
        pooler: ``"transaction"`` when ``url`` goes through a pooler in transaction pooling mode
            (PgBouncer's ``pool_mode = transaction``): nothing prepared, timeouts per transaction.
        pool_size: With ``url``, the most connections of the process's pool for that database
            (shared with the other stores on it; default 10).

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
        key_ring: KeyRing | None = None,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
    ) -> None:
        self.database = PostgresDatabase(
            pool, url=url, schema=schema, timeout=timeout, pooler=pooler, pool_size=pool_size
        )
        self.key_ring = key_ring
        self._insert = self.database.query(_INSERT)
        self._update = self.database.query(_UPDATE)
        self._select = self.database.query(_SELECT)
        self._select_if_changed = self.database.query(_SELECT_IF_CHANGED)
        self._delete = self.database.query(_DELETE)
        self._list_first = self.database.query(_LIST_FIRST)
        self._list_after = self.database.query(_LIST_AFTER)
        self._replace = self.database.query(_REPLACE)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
        pooler: Pooler | None = None,
        pool_size: int | None = None,
    ) -> PostgresSessionStore:
        """A store on the process's pool for ``url`` (acquired on first use, released by :meth:`aclose`)."""
        return cls(
            url=url, schema=schema, timeout=timeout, key_ring=key_ring, pooler=pooler, pool_size=pool_size
        )

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
        await self.save_session_with_appends(agent, conversation_id, session, ())

    # -- a turn in one step (agentkeep.turn_writes.SupportsTurnCommit) ---------------------------
    def shares_database(self, store: object) -> bool:
        """Whether ``store`` is a :class:`~agentkeep.message_stores.postgres.PostgresMessageStore`
        on this store's database (the same pool, or URL and settings; any schema): its held
        appends then commit with a save in one transaction."""
        return isinstance(store, PostgresMessageStore) and self.database.reaches_same_database(store.database)

    async def save_session_with_appends(
        self, agent: Agent, conversation_id: str, session: AgentSession, appends: Sequence[HeldAppend]
    ) -> None:
        """Save ``session`` and write ``appends`` (held by message stores on this database) in one
        transaction: both or neither.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at (nothing is
                written).
            SessionFormatError: A state value cannot be serialized (nothing is written).
            OutcomeUnknownError: The connection failed while it ran (it may have committed).
        """
        self.database.check_open()
        check_conversation_id(conversation_id)
        key = agent_key(agent)
        payload = encode_session(agent, session, conversation_id=conversation_id, key_ring=self.key_ring)
        expected = session_version(session)
        writers: list[tuple[PostgresMessageStore, HeldAppend]] = []
        for held in appends:
            if not self.shares_database(held.store):
                raise ValueError(f"an append to {held.store!r} cannot join a save to {self.database.address}")
            writers.append((cast("PostgresMessageStore", held.store), held))
        for store in {id(store): store for store, _ in writers}.values():
            await store.setup()  # its schema's tables (once per store)
        if expected is None:
            query, params = self._insert, (key, conversation_id, payload)
        else:
            query, params = self._update, (payload, key, conversation_id, expected)

        async def operation(conn: PostgresConnection) -> bool:
            commit_by = await self.database.commit_by(conn)  # one for the whole transaction
            try:
                async with conn.transaction():
                    for store, held in writers:
                        await store.append_held(conn, held, commit_by=commit_by)
                    if not await self.database.fetch(conn, query, (*params, commit_by)):
                        raise _Conflict  # rolls the appends back too
            except _Conflict:
                return False
            return True

        saved = (
            await self.database.run(operation, writes=True)
            if writers
            else await self.database.fetch_rows(query, params, commit_by=True)
        )
        if not saved:
            raise conflict_error(self.backend, key, conversation_id, expected=expected)
        set_session_version(session, 1 if expected is None else expected + 1)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session, or a new empty one (``session_id=conversation_id``) if none.

        Raises:
            SessionFormatError: The stored payload is corrupt or of an unknown version.
            DecryptionError: The payload is encrypted under a key the ring does not hold, or does
                not decrypt with it (nothing is changed).
        """
        self.database.check_open()
        check_conversation_id(conversation_id)
        rows = await self.database.fetch_rows(self._select, (agent_key(agent), conversation_id), retry=True)
        return self._restored(agent, conversation_id, rows)

    async def get_session_if_changed(
        self, agent: Agent, conversation_id: str, *, version: int | None
    ) -> AgentSession | None:
        """``None`` if ``version`` is still the stored one (only the version is read), else what
        :meth:`get_session` returns."""
        self.database.check_open()
        check_conversation_id(conversation_id)
        params = (version, agent_key(agent), conversation_id)  # NULL matches no version: payload read
        rows = await self.database.fetch_rows(self._select_if_changed, params, retry=True)
        if rows and version is not None and int(rows[0][0]) == version:
            return None
        return self._restored(agent, conversation_id, rows)

    def _restored(self, agent: Agent, conversation_id: str, rows: list[Any]) -> AgentSession:
        if not rows:
            return agent.create_session(session_id=conversation_id)
        version, payload = rows[0]
        where = f"{self.backend}: session {conversation_id!r} of agent {agent_key(agent)!r}"
        return restore_session(
            agent,
            bytes(payload),
            version=int(version),
            where=where,
            backend=self.backend,
            conversation_id=conversation_id,
            key_ring=self.key_ring,
        )

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored."""
        self.database.check_open()
        check_conversation_id(conversation_id)
        params = (agent_key(agent), conversation_id)
        return bool(await self.database.fetch_rows(self._delete, params, commit_by=True))

    # -- payloads as stored (SupportsPayloadRewrite, for key rotation) ---------------------------
    async def stored_payloads(
        self, *, after: tuple[str, str] | None = None, limit: int = 100
    ) -> list[StoredPayload]:
        """Up to ``limit`` stored sessions ordered by (agent, conversation id), strictly after
        ``after``: one index range scan per call. The order is the database's collation of text
        (code-point order under ``C`` or ``C.UTF-8``); ``after`` is compared in the same order, so
        paging with the last key of each page visits every session once.

        Raises:
            ValueError: ``limit`` is less than 1.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.database.check_open()
        if after is None:
            query, params = self._list_first, (limit,)
        else:
            query, params = self._list_after, (after[0], after[1], limit)
        rows = await self.database.fetch_rows(query, params, retry=True)
        return [
            StoredPayload(agent, conversation_id, int(version), bytes(payload))
            for agent, conversation_id, version, payload in rows
        ]

    async def replace_payload(self, stored: StoredPayload, payload: bytes) -> bool:
        """Store ``payload`` for ``stored``'s session if it is still stored with the same version
        and payload bytes, keeping its version and ``updated_at``; ``False`` if it changed (or was
        deleted) meanwhile. One statement, under the row lock: atomic against concurrent saves.
        Not retried on a dead connection (a retry of one that committed would report ``False``).
        """
        self.database.check_open()
        params = (payload, stored.agent, stored.conversation_id, stored.version, stored.payload)
        return bool(await self.database.fetch_rows(self._replace, params, commit_by=True))

    async def aclose(self) -> None:
        """Close the pool if the store created it; idempotent. The store refuses work afterwards."""
        await self.database.aclose()

    def __repr__(self) -> str:
        return f"PostgresSessionStore(address={self.database.address!r}, schema={self.schema!r})"
