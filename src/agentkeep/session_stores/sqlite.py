"""A session store in a SQLite file: one row per (agent, conversation id), optimistic versions.

:class:`SQLiteSessionStore` keeps whole-session payloads (``agent.serialize_session(session)`` as
JSON) in the ``agentkeep_sessions`` table of the same database file the SQLite message store uses
(:mod:`agentkeep.message_stores.sqlite`). It runs through the same database layer
(``agentkeep._db.sqlite``), on the same connection when both stores are on one file: quick jobs on
the caller's thread when the connection is free and the rest on one worker thread (the event loop
never waits for a lock), WAL mode, a busy timeout, schema migrations and the mapping of database
failures to :class:`~agentkeep.errors.StorageUnavailableError`.

**Optimistic versions.** A save is one statement, hence one atomic write: a session read at
version ``n`` is written as ``n + 1`` by ``UPDATE ... WHERE version = n``; a new session by an
``INSERT`` that does nothing when a row exists. When no row changed, someone else saved first and
:class:`~agentkeep.errors.ConflictError` is raised; the stored session is left as it was. This
holds between tasks, threads and processes sharing the file.

**Encryption at rest.** Given a :class:`~agentkeep.encryption.KeyRing`, the store keeps payloads in
their encrypted envelope, bound to the agent, the conversation id and the version they are stored
as; :meth:`SQLiteSessionStore.stored_payloads` and :meth:`SQLiteSessionStore.replace_payload`
(:class:`~agentkeep.session_stores.base.SupportsPayloadRewrite`) let ``agentkeep keys rotate`` re-encrypt
them in place.
"""

from __future__ import annotations

import os
import sqlite3
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .._db.sqlite import SQLiteDatabase, now_us, write_transaction
from .._files import path_from_url
from ..errors import SessionFormatError
from ..message_stores.sqlite import SQLiteMessageStore
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

__all__ = ["SQLiteSessionStore"]


class SQLiteSessionStore(AgentSessionStore):
    """Sessions in a SQLite file, keyed by (:func:`~agentkeep.session_stores.base.agent_key`,
    conversation id).

    Args:
        path: The database file (default:
            :func:`~agentkeep.message_stores.sqlite.default_database_path`, shared with the message store).
        timeout: Seconds to wait for the write lock held by another connection.
        key_ring: Encrypt session payloads with its current key (decrypt with any of its keys);
            see :mod:`agentkeep.encryption`.

    Example:
        ```python
        store = SQLiteSessionStore("app.db")
        session = await store.get_session(agent, "user-42")  # new and empty the first time
        await agent.run("Hello!", session=session)
        await store.save_session(agent, "user-42", session)
        await store.aclose()
        ```
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout: float = 5.0,
        key_ring: KeyRing | None = None,
    ) -> None:
        self.database = SQLiteDatabase(path, timeout=timeout)
        self.key_ring = key_ring

    @classmethod
    def from_url(
        cls, url: str, *, timeout: float = 5.0, key_ring: KeyRing | None = None
    ) -> SQLiteSessionStore:
        """A store on the file ``url`` names (``sqlite:///abs/path.db``; ``sqlite://``: the
        default file).

        Raises:
            StoreURLError: Not a ``sqlite://`` URL, or one with a query.
        """
        return cls(path_from_url(url, scheme="sqlite"), timeout=timeout, key_ring=key_ring)

    @property
    def path(self) -> Path:
        """The database file."""
        return self.database.path

    async def setup(self) -> None:
        """Create or migrate the database; idempotent (also done on first use).

        Raises:
            SchemaVersionError: The file was written by a newer agentkeep.
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
        """Whether ``store`` is a :class:`~agentkeep.message_stores.sqlite.SQLiteMessageStore` on
        this store's file: its held appends then commit with a save in one transaction."""
        return isinstance(store, SQLiteMessageStore) and store.database.file == self.database.file

    async def save_session_with_appends(
        self, agent: Agent, conversation_id: str, session: AgentSession, appends: Sequence[HeldAppend]
    ) -> None:
        """Save ``session`` and write ``appends`` (held by message stores on this file) in one
        ``BEGIN IMMEDIATE`` transaction: both or neither.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at (nothing is
                written).
            SessionFormatError: A state value cannot be serialized (nothing is written).
        """
        self.database.check_open()
        check_conversation_id(conversation_id)
        key = agent_key(agent)
        payload = encode_session(agent, session, conversation_id=conversation_id, key_ring=self.key_ring)
        expected = session_version(session)
        for held in appends:
            if not self.shares_database(held.store):
                raise ValueError(f"an append to {held.store!r} cannot join a save to {self.path}")
        writers = [(cast("SQLiteMessageStore", held.store), held) for held in appends]

        def job(db: sqlite3.Connection) -> bool:
            if not writers:  # one statement: a transaction of its own
                return _save(key, conversation_id, expected, payload, db)
            try:
                with write_transaction(db):
                    for store, held in writers:
                        store.append_held(db, held)
                    if not _save(key, conversation_id, expected, payload, db):
                        raise _Conflict  # rolls the appends back too
            except _Conflict:
                return False
            return True

        if not await self.database.run(job, quick=True):
            raise conflict_error(self.backend, key, conversation_id, expected=expected)
        set_session_version(session, 1 if expected is None else expected + 1)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session, or a new empty one (``session_id=conversation_id``) if none.

        Raises:
            SessionFormatError: The stored payload is corrupt or of an unknown version.
            DecryptionError: The payload is encrypted under a key the ring does not hold, or does
                not decrypt with it (nothing is changed).
        """
        check_conversation_id(conversation_id)
        row = await self.database.run(partial(_load, agent_key(agent), conversation_id), quick=True)
        return self._restored(agent, conversation_id, row)

    async def get_session_if_changed(
        self, agent: Agent, conversation_id: str, *, version: int | None
    ) -> AgentSession | None:
        """``None`` if ``version`` is still the stored one (only the version is read), else what
        :meth:`get_session` returns."""
        check_conversation_id(conversation_id)
        job = partial(_load_if_changed, agent_key(agent), conversation_id, version)
        row = await self.database.run(job, quick=True)
        if row is not None and version is not None and row[0] == version:
            return None
        return self._restored(agent, conversation_id, row)

    def _restored(self, agent: Agent, conversation_id: str, row: tuple[int, object] | None) -> AgentSession:
        if row is None:
            return agent.create_session(session_id=conversation_id)
        version, payload = row
        where = f"{self.backend}: session {conversation_id!r} in {self.path}"
        if not isinstance(payload, bytes | str):
            raise SessionFormatError(f"{where}: the payload is not JSON")
        return restore_session(
            agent,
            payload,
            version=version,
            where=where,
            backend=self.backend,
            conversation_id=conversation_id,
            key_ring=self.key_ring,
        )

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Forget the session; ``False`` if none was stored."""
        check_conversation_id(conversation_id)
        return await self.database.run(partial(_delete, agent_key(agent), conversation_id))

    # -- payloads as stored (SupportsPayloadRewrite, for key rotation) ---------------------------
    async def stored_payloads(
        self, *, after: tuple[str, str] | None = None, limit: int = 100
    ) -> list[StoredPayload]:
        """Up to ``limit`` stored sessions ordered by (agent, conversation id) (the text's UTF-8
        bytes, which is code-point order), strictly after ``after``: one indexed query per call.

        Raises:
            ValueError: ``limit`` is less than 1.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.database.check_open()
        return await self.database.run(partial(_stored_payloads, after, limit))

    async def replace_payload(self, stored: StoredPayload, payload: bytes) -> bool:
        """Store ``payload`` for ``stored``'s session if it is still stored with the same version
        and payload bytes, keeping its version and ``updated_at``; ``False`` if it changed (or was
        deleted) meanwhile. One statement: atomic against concurrent saves."""
        self.database.check_open()
        return await self.database.run(partial(_replace_payload, stored, payload))

    async def aclose(self) -> None:
        """Close the connection and stop the worker thread; idempotent."""
        await self.database.aclose()

    def __repr__(self) -> str:
        return f"SQLiteSessionStore({str(self.path)!r})"


# -- jobs run in the database's worker thread -----------------------------------------------------


class _Conflict(Exception):
    """The session's version moved: the turn's transaction rolls back."""


def _save(
    agent: str, conversation_id: str, expected: int | None, payload: bytes, db: sqlite3.Connection
) -> bool:
    now = now_us()
    if expected is None:
        cursor = db.execute(
            "INSERT INTO agentkeep_sessions (agent, conversation_id, version, payload, updated_at) "
            "VALUES (?, ?, 1, ?, ?) ON CONFLICT DO NOTHING",
            (agent, conversation_id, payload, now),
        )
    else:
        cursor = db.execute(
            "UPDATE agentkeep_sessions SET version = version + 1, payload = ?, updated_at = ? "
            "WHERE agent = ? AND conversation_id = ? AND version = ?",
            (payload, now, agent, conversation_id, expected),
        )
    return cursor.rowcount == 1


def _load(agent: str, conversation_id: str, db: sqlite3.Connection) -> tuple[int, object] | None:
    return db.execute(
        "SELECT version, payload FROM agentkeep_sessions WHERE agent = ? AND conversation_id = ?",
        (agent, conversation_id),
    ).fetchone()


def _load_if_changed(
    agent: str, conversation_id: str, version: int | None, db: sqlite3.Connection
) -> tuple[int, object] | None:
    # With no version, ``version = NULL`` is never true: the payload comes along.
    return db.execute(
        "SELECT version, CASE WHEN version = ? THEN NULL ELSE payload END FROM agentkeep_sessions "
        "WHERE agent = ? AND conversation_id = ?",
        (version, agent, conversation_id),
    ).fetchone()


def _delete(agent: str, conversation_id: str, db: sqlite3.Connection) -> bool:
    cursor = db.execute(
        "DELETE FROM agentkeep_sessions WHERE agent = ? AND conversation_id = ?", (agent, conversation_id)
    )
    return cursor.rowcount > 0


_PAYLOAD_COLUMNS = "SELECT agent, conversation_id, version, payload FROM agentkeep_sessions "
_READABLE = "typeof(payload) IN ('blob', 'text')"  # what get_session can read at all


def _stored_payloads(
    after: tuple[str, str] | None, limit: int, db: sqlite3.Connection
) -> list[StoredPayload]:
    if after is None:
        query = f"{_PAYLOAD_COLUMNS}WHERE {_READABLE} ORDER BY agent, conversation_id LIMIT ?"
        params: tuple[object, ...] = (limit,)
    else:
        query = (
            f"{_PAYLOAD_COLUMNS}WHERE (agent, conversation_id) > (?, ?) AND {_READABLE} "
            "ORDER BY agent, conversation_id LIMIT ?"
        )
        params = (after[0], after[1], limit)
    return [
        StoredPayload(agent, conversation_id, version, _as_bytes(payload))
        for agent, conversation_id, version, payload in db.execute(query, params)
    ]


def _as_bytes(payload: bytes | str) -> bytes:
    return payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload


def _replace_payload(stored: StoredPayload, payload: bytes, db: sqlite3.Connection) -> bool:
    # CAST: a payload stored as TEXT compares by its bytes too (a TEXT value never equals a BLOB).
    cursor = db.execute(
        "UPDATE agentkeep_sessions SET payload = ? "
        "WHERE agent = ? AND conversation_id = ? AND version = ? AND CAST(payload AS BLOB) = ?",
        (payload, stored.agent, stored.conversation_id, stored.version, stored.payload),
    )
    return cursor.rowcount == 1
