"""The Redis session store on Redis Cluster for the session-store conformance suite: the test
session's private cluster (see :mod:`tests.private_redis_cluster`), a fresh key prefix per store
(its keys deleted afterwards)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore
from agentkeep.session_stores.redis import RedisSessionStore
from tests.message_stores.backend_redis import admin, delete_prefix, unique_prefix
from tests.private_redis_cluster import shared_redis_cluster

NAME = "redis-cluster"
CROSS_PROCESS = True


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    url = shared_redis_cluster().url
    prefix = unique_prefix("sessions")
    store = RedisSessionStore.from_url(url, key_prefix=prefix)
    try:
        yield store
    finally:
        await store.aclose()
        await delete_prefix(prefix, url)


async def corrupt_session(store: AgentSessionStore, agent: Agent, conversation_id: str) -> None:
    assert isinstance(store, RedisSessionStore)
    async with admin(store) as client:
        key = store.session_key(agent, conversation_id)
        assert await client.exists(key) == 1
        await client.hset(key, "p", b'{"version": 1, "sess')


def session_store_spec(store: AgentSessionStore) -> dict[str, Any]:
    assert isinstance(store, RedisSessionStore)
    return {
        "url": shared_redis_cluster().url,
        "key_prefix": store.key_prefix,
        "timeout": store.connection.timeout,
    }


def session_store_from_spec(spec: dict[str, Any]) -> AgentSessionStore:
    return RedisSessionStore.from_url(spec["url"], key_prefix=spec["key_prefix"], timeout=spec["timeout"])
