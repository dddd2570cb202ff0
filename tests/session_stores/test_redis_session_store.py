"""Redis-specific behaviour of :class:`~agentkeep.session_stores.redis.RedisSessionStore`.

The shared behaviour (versions, conflicts, odd ids, corruption, processes) is in the conformance
suite; here: key layout, TTL, client ownership and an unreachable server.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from agentkeep import Agent, SchemaVersionError, StorageUnavailableError
from agentkeep.session_stores.redis import SESSION_LAYOUT_VERSION, RedisSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.message_stores.backend_redis import REDIS_URL, delete_prefix, unique_prefix


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    redis_client = aioredis.Redis.from_url(REDIS_URL)
    try:
        yield redis_client
    finally:
        await redis_client.aclose()


def agent(name: str) -> Agent:
    return Agent(ScriptedChatClient(), name=name)


async def test_keys_are_escaped_hashes_with_a_version_and_a_ttl(client: aioredis.Redis) -> None:
    prefix = unique_prefix("sessions")
    store = RedisSessionStore(client, key_prefix=prefix, ttl=60)
    try:
        first = await store.get_session(agent("a:b"), "c")
        await store.save_session(agent("a:b"), "c", first)
        second = await store.get_session(agent("a"), "b:c")  # same text once joined: another key
        await store.save_session(agent("a"), "b:c", second)
        assert store.session_key(agent("a:b"), "c") == f"{prefix}:a%3Ab:c"
        assert store.session_key(agent("a"), "b:c") == f"{prefix}:a:b%3Ac"
        stored: dict[bytes, bytes] = await client.hgetall(store.session_key(agent("a:b"), "c"))  # type: ignore[misc]
        assert stored[b"v"] == b"1"
        assert stored[b"f"] == str(SESSION_LAYOUT_VERSION).encode()
        assert (stored[b"a"], stored[b"c"]) == (b"a:b", b"c")  # the ids as they are, for listing
        assert b'"session_id":"c"' in stored[b"p"]
        assert 0 < await client.pttl(store.session_key(agent("a:b"), "c")) <= 60_000
    finally:
        await store.aclose()
        await delete_prefix(prefix)
    assert await client.ping() is True  # an injected client stays open


async def test_a_session_of_a_newer_layout_is_refused_and_left_alone(client: aioredis.Redis) -> None:
    prefix = unique_prefix("sessions")
    store = RedisSessionStore(client, key_prefix=prefix)
    helper = agent("helper")
    try:
        session = await store.get_session(helper, "c")
        await store.save_session(helper, "c", session)
        key = store.session_key(helper, "c")
        await client.hset(key, "f", SESSION_LAYOUT_VERSION + 1)
        before = await client.hgetall(key)  # type: ignore[misc]
        with pytest.raises(SchemaVersionError, match="layout"):
            await store.get_session(helper, "c")
        with pytest.raises(SchemaVersionError, match="layout"):
            await store.save_session(helper, "c", session)
        assert await client.hgetall(key) == before  # type: ignore[misc]
        await client.hdel(key, "f")  # a session saved before the field existed reads as layout 1
        assert (await store.get_session(helper, "c")).session_id == "c"
    finally:
        await store.aclose()
        await delete_prefix(prefix)


async def test_an_unreachable_server_raises_storage_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = RedisSessionStore.from_url(f"redis://:pw@127.0.0.1:{port}/0", timeout=1)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            await store.get_session(agent("a"), "c")
        assert caught.value.address == f"redis://127.0.0.1:{port}/0"
        assert "pw" not in str(caught.value)
    finally:
        await store.aclose()


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="either"):
        RedisSessionStore()
    with pytest.raises(ValueError):
        RedisSessionStore.from_url(REDIS_URL, ttl=0)
    with pytest.raises(ValueError):
        RedisSessionStore.from_url(REDIS_URL, key_prefix="")
