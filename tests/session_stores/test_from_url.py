"""Every session store opens from its URL (``X.from_url``) and keeps a session there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentkeep import Agent, StoreURLError
from agentkeep.session_stores import AgentSessionStore, FileSystemSessionStore, InMemorySessionStore
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.session_stores.redis import RedisSessionStore
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.message_stores.backend_postgres import URL as POSTGRES_URL
from tests.message_stores.backend_postgres import drop_schema, new_schema
from tests.message_stores.backend_redis import REDIS_URL, delete_prefix, unique_prefix


async def _round_trip(store: AgentSessionStore) -> int:
    """Save a one-turn session and read it back; the number of messages it holds."""
    agent = Agent(ScriptedChatClient(lambda _: "hello"), name="a")
    async with asyncio.timeout(30):
        session = await store.get_session(agent, "conv")
        await agent.run("hi", session=session)
        await store.save_session(agent, "conv", session)
        restored = await store.get_session(agent, "conv")
    return len(restored.to_dict()["state"]["in_memory"]["messages"])


async def test_local_stores_from_url_keep_sessions_where_the_url_says(tmp_path: Path) -> None:
    sqlite = SQLiteSessionStore.from_url(f"sqlite://{tmp_path}/s.db", timeout=2.0)
    files = FileSystemSessionStore.from_url(f"file://{tmp_path}/sessions", lock_timeout=3.0)
    memory = InMemorySessionStore.from_url("memory://")
    try:
        assert (sqlite.path, sqlite.database.timeout) == (tmp_path / "s.db", 2.0)
        assert (files.root_dir, files.lock_timeout) == (tmp_path / "sessions", 3.0)
        for store in (sqlite, files, memory):
            assert await _round_trip(store) == 2, store.backend
        assert (tmp_path / "sessions").is_dir()
    finally:
        for store in (sqlite, files, memory):
            await store.aclose()


async def test_server_stores_from_url_keep_sessions_in_their_namespace() -> None:
    prefix, schema = unique_prefix("fromurlsessions"), new_schema("akfromurls")
    redis = RedisSessionStore.from_url(REDIS_URL, key_prefix=prefix, ttl=60)
    postgres = PostgresSessionStore.from_url(POSTGRES_URL, schema=schema)
    try:
        assert (redis.key_prefix, redis.ttl) == (prefix, 60)
        assert postgres.schema == schema
        for store in (redis, postgres):
            assert await _round_trip(store) == 2, store.backend
    finally:
        for store in (redis, postgres):
            await store.aclose()
        await delete_prefix(prefix)
        await drop_schema(schema)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SQLiteSessionStore.from_url("redis://h/0"),
        lambda: FileSystemSessionStore.from_url("file://"),
        lambda: FileSystemSessionStore.from_url("file:///x?mode=ro"),
        lambda: InMemorySessionStore.from_url("memory://here"),
    ],
)
def test_a_url_of_another_form_is_refused(make: object) -> None:
    with pytest.raises(StoreURLError):
        make()  # type: ignore[operator]


def test_the_session_store_contract_is_a_protocol_a_class_meets_without_a_base() -> None:
    class Minimal:  # the three core methods and the defaults' members, no base class
        backend = "minimal"

        async def save_session(self, agent: Agent, conversation_id: str, session: object) -> None: ...
        async def get_session(self, agent: Agent, conversation_id: str) -> object: ...
        async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
            return False

        async def get_session_if_changed(
            self, agent: Agent, conversation_id: str, *, version: object
        ) -> None: ...
        def get_service(self, service_type: type) -> None: ...
        async def aclose(self) -> None: ...

    assert isinstance(Minimal(), AgentSessionStore)
    assert not isinstance(object(), AgentSessionStore)
    store = InMemorySessionStore()
    assert isinstance(store, AgentSessionStore)
    assert store.get_service(AgentSessionStore) is store

    class Incomplete(AgentSessionStore):  # subclassing still checks the core when it is made
        async def save_session(self, agent: Agent, conversation_id: str, session: object) -> None: ...

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]
