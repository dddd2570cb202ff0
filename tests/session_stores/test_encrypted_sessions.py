"""Encryption at rest in the durable session stores (SQLite, Redis, PostgreSQL, file system).

Each test gets a fresh, isolated store from the backend's ``open_session_store()`` (tests/session_stores/
backend_*.py), opens more stores on the same data with or without a key ring, and looks at what is
stored with the backend's own client: the SQLite file, ``HGET``, a ``SELECT``, the file on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis.asyncio as aioredis
from psycopg import sql

from agentkeep import (
    Agent,
    AgentSession,
    ConflictError,
    DecryptionError,
    SchemaVersionError,
    StorageUnavailableError,
)
from agentkeep.encryption import KeyRing, decrypt_payload, encrypt_payload, payload_key_id
from agentkeep.session_stores import AgentSessionStore, FileSystemSessionStore, agent_key, session_version
from agentkeep.session_stores.base import StoredPayload, SupportsPayloadRewrite
from agentkeep.session_stores.filesystem import encode_file_name
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.session_stores.redis import SESSION_LAYOUT_VERSION, RedisSessionStore
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.message_stores.backend_postgres import URL, execute
from tests.message_stores.backend_redis import REDIS_URL
from tests.session_stores import backend_filesystem, backend_postgres, backend_redis, backend_sqlite

MARKER = "plaintext-marker-7f3a9c"
"""A state value that must never be found in what an encrypting store keeps."""
SAID = "tell-nobody-b41d"
"""Text the user says (kept in the session's history state)."""


def new_ring(key_id: str = "k1", secret: bytes | None = None) -> KeyRing:
    return KeyRing({key_id: secret if secret is not None else os.urandom(32)})


def make_agent(name: str = "helper", replies: list[str] | None = None) -> Agent:
    return Agent(ScriptedChatClient(replies or ["a reply"]), name=name)


async def save_new(
    store: AgentSessionStore, agent: Agent, conversation_id: str, *, turn: bool = False, **state: Any
) -> AgentSession:
    session = await store.get_session(agent, conversation_id)
    for key, value in state.items():
        session.state[key] = value
    if turn:
        await agent.run(f"please {SAID}", session=session)
    await store.save_session(agent, conversation_id, session)
    return session


# -- raw access to what each backend stores -------------------------------------------------------


class Raw:
    """What the store under test keeps, read and written past it."""

    def __init__(self, store: AgentSessionStore) -> None:
        self.store = store

    async def payload(self, agent: str, conversation_id: str) -> bytes | None:
        """The stored payload of a session (``None``: not stored)."""
        raise NotImplementedError

    async def stored(self, agent: str, conversation_id: str) -> bytes:
        """Everything stored for one session (a row, a hash, a file), as bytes."""
        raise NotImplementedError

    async def snapshot(self) -> object:
        """Everything the store keeps (to check that nothing changed or was created)."""
        raise NotImplementedError

    async def copy(self, agent: str, source: str, target: str) -> None:
        """Store ``source``'s version and payload, as they are, as session ``target``."""
        raise NotImplementedError


class SQLiteRaw(Raw):
    @property
    def path(self) -> Path:
        assert isinstance(self.store, SQLiteSessionStore)
        return self.store.path

    async def _query(self, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
        def run() -> list[Any]:
            with closing(sqlite3.connect(self.path, isolation_level=None)) as db:
                return db.execute(query, params).fetchall()

        return await asyncio.to_thread(run)

    async def payload(self, agent: str, conversation_id: str) -> bytes | None:
        rows = await self._query(
            "SELECT payload FROM agentkeep_sessions WHERE agent = ? AND conversation_id = ?",
            (agent, conversation_id),
        )
        return rows[0][0] if rows else None

    async def stored(self, agent: str, conversation_id: str) -> bytes:
        rows = await self._query(
            "SELECT version, payload, updated_at FROM agentkeep_sessions "
            "WHERE agent = ? AND conversation_id = ?",
            (agent, conversation_id),
        )
        return repr(rows).encode()

    async def snapshot(self) -> object:
        return await self._query("SELECT * FROM agentkeep_sessions ORDER BY agent, conversation_id")

    async def copy(self, agent: str, source: str, target: str) -> None:
        await self._query(
            "INSERT INTO agentkeep_sessions (agent, conversation_id, version, payload, updated_at) "
            "SELECT agent, ?, version, payload, updated_at FROM agentkeep_sessions "
            "WHERE agent = ? AND conversation_id = ?",
            (target, agent, source),
        )


class PostgresRaw(Raw):
    def _table(self) -> sql.Identifier:
        assert isinstance(self.store, PostgresSessionStore)
        return sql.Identifier(self.store.schema, "sessions")

    async def payload(self, agent: str, conversation_id: str) -> bytes | None:
        rows = await execute(
            sql.SQL("SELECT payload FROM {} WHERE agent = %s AND conversation_id = %s").format(self._table()),
            (agent, conversation_id),
        )
        return bytes(rows[0][0]) if rows else None

    async def stored(self, agent: str, conversation_id: str) -> bytes:
        rows = await execute(
            sql.SQL(
                "SELECT version, payload, updated_at FROM {} WHERE agent = %s AND conversation_id = %s"
            ).format(self._table()),
            (agent, conversation_id),
        )
        return repr([(v, bytes(p), t) for v, p, t in rows]).encode()

    async def snapshot(self) -> object:
        rows = await execute(
            sql.SQL(
                "SELECT agent, conversation_id, version, payload, updated_at FROM {} "
                "ORDER BY agent, conversation_id"
            ).format(self._table())
        )
        return [(a, c, v, bytes(p), t) for a, c, v, p, t in rows]

    async def copy(self, agent: str, source: str, target: str) -> None:
        await execute(
            sql.SQL(
                "INSERT INTO {t} (agent, conversation_id, version, payload, updated_at) "
                "SELECT agent, %s, version, payload, updated_at FROM {t} "
                "WHERE agent = %s AND conversation_id = %s"
            ).format(t=self._table()),
            (target, agent, source),
        )


class RedisRaw(Raw):
    @property
    def redis_store(self) -> RedisSessionStore:
        assert isinstance(self.store, RedisSessionStore)
        return self.store

    def key(self, agent: str, conversation_id: str) -> str:
        return self.redis_store.session_key(make_agent(agent), conversation_id)

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[aioredis.Redis]:
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            yield client
        finally:
            await client.aclose()

    async def payload(self, agent: str, conversation_id: str) -> bytes | None:
        async with self.client() as client:
            return await client.hget(self.key(agent, conversation_id), "p")  # type: ignore[misc]

    async def stored(self, agent: str, conversation_id: str) -> bytes:
        async with self.client() as client:
            stored: dict[bytes, bytes] = await client.hgetall(self.key(agent, conversation_id))  # type: ignore[misc]
        return repr(sorted(stored.items())).encode()

    async def snapshot(self) -> object:
        async with self.client() as client:
            keys = sorted([key async for key in client.scan_iter(match=f"{self.redis_store.key_prefix}:*")])
            contents: list[Any] = []
            for key in keys:
                stored: dict[bytes, bytes] = await client.hgetall(key)  # type: ignore[misc]
                contents.append((key, sorted(stored.items()), await client.pttl(key) > 0))
            return contents

    async def copy(self, agent: str, source: str, target: str) -> None:
        async with self.client() as client:
            stored: dict[bytes, bytes] = await client.hgetall(self.key(agent, source))  # type: ignore[misc]
            assert stored
            await client.hset(self.key(agent, target), mapping=stored)  # type: ignore[misc, arg-type]


class FileSystemRaw(Raw):
    @property
    def root(self) -> Path:
        assert isinstance(self.store, FileSystemSessionStore)
        return self.store.root_dir

    def path(self, agent: str, conversation_id: str) -> Path:
        return self.root / encode_file_name(agent) / f"{encode_file_name(conversation_id)}.json"

    async def payload(self, agent: str, conversation_id: str) -> bytes | None:
        path = self.path(agent, conversation_id)
        if not path.exists():
            return None
        data = path.read_bytes()
        start = data.index(b'"session":') + len(b'"session":')
        assert data.endswith(b"}")
        return data[start:-1]

    async def stored(self, agent: str, conversation_id: str) -> bytes:
        path = self.path(agent, conversation_id)
        return path.read_bytes() if path.exists() else b""

    async def snapshot(self) -> object:
        if not self.root.exists():
            return {}
        return {
            str(p.relative_to(self.root)): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()
        }

    async def copy(self, agent: str, source: str, target: str) -> None:
        data = self.path(agent, source).read_bytes()
        moved = data.replace(
            f'"conversation_id":"{source}"'.encode(), f'"conversation_id":"{target}"'.encode(), 1
        )
        assert moved != data
        self.path(agent, target).write_bytes(moved)


RAW: dict[type[AgentSessionStore], type[Raw]] = {
    SQLiteSessionStore: SQLiteRaw,
    PostgresSessionStore: PostgresRaw,
    RedisSessionStore: RedisRaw,
    FileSystemSessionStore: FileSystemRaw,
}


def reopen(store: AgentSessionStore, key_ring: KeyRing | None) -> AgentSessionStore:
    """Another store on the data of ``store``, with ``key_ring``."""
    if isinstance(store, SQLiteSessionStore):
        return SQLiteSessionStore(store.path, key_ring=key_ring)
    if isinstance(store, PostgresSessionStore):
        return PostgresSessionStore.from_url(URL, schema=store.schema, key_ring=key_ring)
    if isinstance(store, RedisSessionStore):
        return RedisSessionStore.from_url(REDIS_URL, key_prefix=store.key_prefix, key_ring=key_ring)
    assert isinstance(store, FileSystemSessionStore)
    return FileSystemSessionStore(store.root_dir, key_ring=key_ring)


@dataclass
class Harness:
    name: str
    plain: AgentSessionStore
    """A store without a key ring (writes plaintext payloads)."""
    raw: Raw
    open: Callable[[KeyRing | None], AgentSessionStore]
    """Another store on the same data (closed after the test)."""


@pytest.fixture(
    params=[backend_sqlite, backend_redis, backend_postgres, backend_filesystem],
    ids=lambda module: module.NAME,
)
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    backend: ModuleType = request.param
    async with backend.open_session_store() as plain, contextlib.AsyncExitStack() as stack:

        def open_store(key_ring: KeyRing | None) -> AgentSessionStore:
            store = reopen(plain, key_ring)
            stack.push_async_callback(store.aclose)
            return store

        yield Harness(backend.NAME, plain, RAW[type(plain)](plain), open_store)


# -- (a) round trip -------------------------------------------------------------------------------


async def test_an_encrypted_session_round_trips_and_stores_no_plaintext(harness: Harness) -> None:
    ring = new_ring()
    store = harness.open(ring)
    agent = make_agent("helper/ü", ["first reply", "second reply"])
    session = await store.get_session(agent, "chat/1 é")
    session.isolation_key = "tenant-9"
    session.state["profile"] = {"secret": MARKER, "n": 3}
    await agent.run(f"please {SAID}", session=session)
    await store.save_session(agent, "chat/1 é", session)
    assert session_version(session) == 1

    stored = await harness.raw.stored(agent_key(agent), "chat/1 é")
    assert stored
    assert MARKER.encode() not in stored
    assert SAID.encode() not in stored
    payload = await harness.raw.payload(agent_key(agent), "chat/1 é")
    assert payload is not None
    assert payload_key_id(payload) == "k1"

    back = await store.get_session(agent, "chat/1 é")
    assert back.state["profile"] == {"secret": MARKER, "n": 3}
    assert back.isolation_key == "tenant-9"
    assert back.session_id == session.session_id
    assert session_version(back) == 1
    # the second save (version 2) is bound to its version too, and reads back
    await agent.run("again", session=back)
    await store.save_session(agent, "chat/1 é", back)
    again = await harness.open(ring).get_session(agent, "chat/1 é")
    assert session_version(again) == 2
    assert again.state["profile"] == {"secret": MARKER, "n": 3}
    assert MARKER.encode() not in await harness.raw.stored(agent_key(agent), "chat/1 é")

    with pytest.raises(DecryptionError, match="no key ring"):  # a store without the ring
        await harness.plain.get_session(agent, "chat/1 é")


# -- (b) plaintext sessions ------------------------------------------------------------------------


async def test_a_plaintext_session_is_read_with_a_ring_and_encrypted_by_the_next_save(
    harness: Harness,
) -> None:
    agent = make_agent()
    await save_new(harness.plain, agent, "c1", turn=True, profile={"secret": MARKER})
    before = await harness.raw.payload("helper", "c1")
    assert before is not None
    assert MARKER.encode() in before
    assert payload_key_id(before) is None

    store = harness.open(new_ring())
    session = await store.get_session(agent, "c1")
    assert session.state["profile"] == {"secret": MARKER}
    assert session_version(session) == 1
    assert await harness.raw.payload("helper", "c1") == before  # reading changed nothing

    await store.save_session(agent, "c1", session)
    after = await harness.raw.payload("helper", "c1")
    assert after is not None
    assert payload_key_id(after) == "k1"
    assert MARKER.encode() not in after
    assert SAID.encode() not in after
    again = await store.get_session(agent, "c1")
    assert session_version(again) == 2
    assert again.state["profile"] == {"secret": MARKER}


# -- (c) a ring without the key --------------------------------------------------------------------


@pytest.mark.parametrize("problem", ["missing key", "other material"])
async def test_a_ring_without_the_key_raises_and_changes_nothing(harness: Harness, problem: str) -> None:
    agent = make_agent()
    await save_new(harness.open(new_ring("k1")), agent, "c1", turn=True, profile={"secret": MARKER})
    before = await harness.raw.snapshot()
    wrong = new_ring("k2") if problem == "missing key" else new_ring("k1")  # k1, but other bytes
    store = harness.open(wrong)

    with pytest.raises(DecryptionError) as caught:
        await store.get_session(agent, "c1")
    assert caught.value.key_id == "k1"
    assert "'k1'" in str(caught.value)
    assert caught.value.conversation_id == "c1"
    assert MARKER not in str(caught.value)
    assert await harness.raw.snapshot() == before  # byte-identical, nothing created

    # nor is anything written over it: a save of the session read at version 1 is not possible,
    # and a new session under that id conflicts
    fresh = agent.create_session(session_id="c1")
    with pytest.raises(ConflictError):
        await store.save_session(agent, "c1", fresh)
    assert await harness.raw.snapshot() == before


# -- (d) a payload moved to another conversation ---------------------------------------------------


async def test_a_payload_moved_to_another_conversation_does_not_decrypt(harness: Harness) -> None:
    ring = new_ring()
    store = harness.open(ring)
    agent = make_agent()
    await save_new(store, agent, "mine", profile={"secret": MARKER})
    await harness.raw.copy("helper", "mine", "theirs")
    assert await harness.raw.payload("helper", "theirs") == await harness.raw.payload("helper", "mine")

    with pytest.raises(DecryptionError) as caught:
        await store.get_session(agent, "theirs")
    assert caught.value.key_id == "k1"
    assert caught.value.conversation_id == "theirs"
    assert (await store.get_session(agent, "mine")).state["profile"] == {"secret": MARKER}


# -- (e) listing and replacing payloads ------------------------------------------------------------


LONG_ID = "long-" + "x" * 150
"""Longer than a file name or a Redis key part keeps: stored under its hash."""


def opened(ring: KeyRing, stored: StoredPayload) -> bytes:
    result = decrypt_payload(
        ring,
        stored.payload,
        agent=stored.agent,
        conversation_id=stored.conversation_id,
        version=stored.version,
    )
    return stored.payload if result is None else result[0]


async def test_stored_payloads_pages_in_order_and_replace_payload_reencrypts(harness: Harness) -> None:
    ring1, ring2 = new_ring("k1"), new_ring("k2")
    store = harness.open(ring1)
    assert isinstance(store, SupportsPayloadRewrite)
    assert await store.stored_payloads() == []
    conversations = {"alpha": ["b", "a", "Z", "a/b", "é", LONG_ID], "Beta": ["x"], "al": ["zz"]}
    expected: list[tuple[str, str]] = []
    for name, ids in conversations.items():
        agent = make_agent(name)
        for index, conversation_id in enumerate(ids):
            target = harness.plain if index == 0 else store  # some plaintext, some encrypted
            await save_new(target, agent, conversation_id, profile={"id": conversation_id, "secret": MARKER})
            expected.append((name, conversation_id))
    await save_new(store, make_agent("alpha"), "twice")  # version 2
    session = await store.get_session(make_agent("alpha"), "twice")
    await store.save_session(make_agent("alpha"), "twice", session)
    expected.append(("alpha", "twice"))

    listed: list[StoredPayload] = []
    after: tuple[str, str] | None = None
    while page := await store.stored_payloads(after=after, limit=3):
        assert len(page) <= 3
        listed.extend(page)
        after = (page[-1].agent, page[-1].conversation_id)
    keys = [(s.agent, s.conversation_id) for s in listed]
    assert keys == sorted(expected)
    assert len(set(keys)) == len(keys)
    for stored in listed:
        assert stored.payload == await harness.raw.payload(stored.agent, stored.conversation_id)
        assert stored.version == (2 if stored.conversation_id == "twice" else 1)
    assert await store.stored_payloads(after=keys[-1]) == []
    assert [
        (s.agent, s.conversation_id) for s in await store.stored_payloads(after=keys[2], limit=2)
    ] == keys[3:5]

    for stored in listed:
        new = encrypt_payload(
            ring2,
            opened(ring1, stored),
            agent=stored.agent,
            conversation_id=stored.conversation_id,
            version=stored.version,
        )
        assert await store.replace_payload(stored, new) is True
        assert await harness.raw.payload(stored.agent, stored.conversation_id) == new

    rotated = harness.open(ring2)
    for name, conversation_id in expected:
        session = await rotated.get_session(make_agent(name), conversation_id)
        assert session_version(session) == (2 if conversation_id == "twice" else 1)
        if conversation_id != "twice":
            assert session.state["profile"] == {"id": conversation_id, "secret": MARKER}
    with pytest.raises(DecryptionError):  # what was rotated no longer reads with the old ring alone
        await harness.open(ring1).get_session(make_agent("alpha"), "a")


async def test_replace_payload_refuses_a_stale_read_and_changes_nothing(harness: Harness) -> None:
    ring1, ring2 = new_ring("k1"), new_ring("k2")
    store = harness.open(ring1)
    assert isinstance(store, SupportsPayloadRewrite)
    agent = make_agent()
    await save_new(store, agent, "c1", profile={"secret": MARKER})
    [stale] = await store.stored_payloads()
    session = await store.get_session(agent, "c1")
    session.state["profile"] = {"secret": "newer"}
    await store.save_session(agent, "c1", session)  # version 2 now
    before = await harness.raw.snapshot()

    new = encrypt_payload(
        ring2, opened(ring1, stale), agent="helper", conversation_id="c1", version=stale.version
    )
    assert await store.replace_payload(stale, new) is False
    # the right version with other bytes, a missing session: refused too
    [current] = await store.stored_payloads()
    assert current.version == 2
    other_bytes = StoredPayload(current.agent, current.conversation_id, current.version, stale.payload)
    assert await store.replace_payload(other_bytes, new) is False
    assert await store.replace_payload(StoredPayload("helper", "nobody", 1, stale.payload), new) is False
    assert await harness.raw.snapshot() == before
    assert (await store.get_session(agent, "c1")).state["profile"] == {"secret": "newer"}

    await store.delete_session(agent, "c1")
    after_delete = await harness.raw.snapshot()
    assert await store.replace_payload(current, new) is False
    assert await harness.raw.snapshot() == after_delete


LONG_AGENT = "agent-" + "é" * 60
"""An agent name longer than a Redis key part keeps (120 escaped characters): stored hashed."""


async def test_a_hashed_redis_key_is_listed_by_its_stored_ids_and_a_short_one_keeps_its_ttl() -> None:
    async with backend_redis.open_session_store() as plain:
        assert isinstance(plain, RedisSessionStore)
        ring1, ring2 = new_ring("k1"), new_ring("k2")
        store = RedisSessionStore.from_url(REDIS_URL, key_prefix=plain.key_prefix, ttl=600, key_ring=ring1)
        rotated = RedisSessionStore.from_url(REDIS_URL, key_prefix=plain.key_prefix, key_ring=ring2)
        try:
            agent, long_agent = make_agent(), make_agent(LONG_AGENT)
            await save_new(store, long_agent, LONG_ID, profile={"secret": MARKER})
            await save_new(store, agent, LONG_ID)
            await save_new(store, agent, "short")
            long_key = store.session_key(long_agent, LONG_ID)
            _, agent_part, conversation_part = long_key.split(":")
            assert agent_part.startswith("#")  # both parts hashed
            assert conversation_part.startswith("#")
            assert store.session_key(agent, LONG_ID).endswith(":#" + conversation_part[1:])
            raw = RedisRaw(store)
            async with raw.client() as client:
                # the ids are kept as they are in every hash, with the payload
                assert await client.hmget(long_key, "a", "c") == [LONG_AGENT.encode(), LONG_ID.encode()]  # type: ignore[misc]
                key = store.session_key(agent, "short")
                assert await client.hmget(key, "a", "c") == [b"helper", b"short"]  # type: ignore[misc]

                listed = await store.stored_payloads()
                ids = [(s.agent, s.conversation_id) for s in listed]
                assert ids == [(LONG_AGENT, LONG_ID), ("helper", LONG_ID), ("helper", "short")]
                assert [s.agent for s in await store.stored_payloads(after=ids[0])] == ["helper", "helper"]
                for stored in listed:
                    assert stored.payload == await raw.payload(stored.agent, stored.conversation_id)

                # replaced (re-encrypted) under the hashed key, readable with the new ring alone
                long_listed = listed[0]
                new = encrypt_payload(
                    ring2,
                    opened(ring1, long_listed),
                    agent=LONG_AGENT,
                    conversation_id=LONG_ID,
                    version=long_listed.version,
                )
                assert await store.replace_payload(long_listed, new) is True
                assert await client.hget(long_key, "p") == new  # type: ignore[misc]
                back = await rotated.get_session(long_agent, LONG_ID)
                assert back.state["profile"] == {"secret": MARKER}
                assert session_version(back) == 1

                # a short key keeps its TTL when replaced
                short = listed[2]
                await client.pexpire(key, 500_000)
                assert await store.replace_payload(short, short.payload + b" ") is True
                assert 0 < await client.pttl(key) <= 500_000
                assert await client.hget(key, "v") == b"1"  # type: ignore[misc]

                # planted: a hash under another hashed key with these ids, and one under a short
                # key naming another agent; neither belongs to its key, so neither is listed
                stored_hash: dict[bytes, bytes] = await client.hgetall(long_key)  # type: ignore[misc]
                foreign_key = store.session_key(long_agent, LONG_ID + "-other")
                await client.hset(foreign_key, mapping=stored_hash)  # type: ignore[misc, arg-type]
                await raw.copy("helper", "short", "planted")
                planted_key = store.session_key(agent, "planted")
                await client.hset(planted_key, "c", "short")  # type: ignore[misc]
                after_planting = await store.stored_payloads()
                assert [(s.agent, s.conversation_id) for s in after_planting] == ids
                before = await raw.snapshot()
                foreign = StoredPayload(LONG_AGENT, LONG_ID + "-other", 1, stored_hash[b"p"])
                assert await store.replace_payload(foreign, b"{}") is False
                planted = StoredPayload("helper", "planted", 1, await client.hget(planted_key, "p"))  # type: ignore[misc, arg-type]
                assert await store.replace_payload(planted, b"{}") is False
                assert await raw.snapshot() == before

                # a session saved before the ids were stored cannot be listed under a hashed
                # key, until its next save
                await client.delete(foreign_key, planted_key)
                await client.hdel(long_key, "a", "c")  # type: ignore[misc]
                assert [s.conversation_id for s in await store.stored_payloads()] == [LONG_ID, "short"]
                await rotated.save_session(long_agent, LONG_ID, back)
                first = (await store.stored_payloads(limit=1))[0]
                assert (first.agent, first.conversation_id, first.version) == (LONG_AGENT, LONG_ID, 2)

                # a hashed key of a newer layout is refused, not skipped
                await client.hset(long_key, "f", SESSION_LAYOUT_VERSION + 1)  # type: ignore[misc]
                with pytest.raises(SchemaVersionError, match="layout"):
                    await store.stored_payloads(after=("helper", "short"))
        finally:
            await store.aclose()
            await rotated.aclose()


async def test_file_system_listing_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    async with backend_filesystem.open_session_store() as plain:
        assert isinstance(plain, FileSystemSessionStore)
        store = FileSystemSessionStore(plain.root_dir, key_ring=new_ring())
        elsewhere = FileSystemSessionStore(outside)
        agent = make_agent()
        await save_new(store, agent, "real")
        await save_new(elsewhere, agent, "planted")
        await save_new(elsewhere, make_agent("linked"), "planted")
        target = elsewhere.session_path(agent, "planted")
        # a link planted as a session file, and one planted as an agent folder
        store.session_path(agent, "planted").symlink_to(target)
        (store.root_dir / "linked").symlink_to(outside / "linked", target_is_directory=True)
        before = target.read_bytes()

        listed = await store.stored_payloads()
        assert [(s.agent, s.conversation_id) for s in listed] == [("helper", "real")]
        stolen = StoredPayload("helper", "planted", 1, before[before.index(b'"session":') + 10 : -1])
        with pytest.raises(StorageUnavailableError):
            await store.replace_payload(stolen, b"{}")
        linked_file = elsewhere.session_path(make_agent("linked"), "planted")
        linked_before = linked_file.read_bytes()
        with pytest.raises(StorageUnavailableError):  # as get_session and save_session refuse it
            await store.replace_payload(StoredPayload("linked", "planted", 1, stolen.payload), b"{}")
        assert target.read_bytes() == before
        assert linked_file.read_bytes() == linked_before
        with pytest.raises(ValueError, match="JSON"):
            await store.replace_payload(listed[0], b"not json")
