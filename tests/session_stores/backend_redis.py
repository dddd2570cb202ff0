"""The Redis session store for the session-store conformance suite: a fresh key prefix per store.

Uses the machine's server (``AGENTKEEP_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``); the
store's keys are deleted afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis

from agentkeep import Agent
from agentkeep.session_stores import AgentSessionStore
from agentkeep.session_stores.redis import RedisSessionStore
from tests.message_stores.backend_redis import REDIS_URL, delete_prefix, unique_prefix

NAME = "redis"
CROSS_PROCESS = True


@asynccontextmanager
async def open_session_store() -> AsyncIterator[AgentSessionStore]:
    prefix = unique_prefix("sessions")
    store = RedisSessionStore.from_url(REDIS_URL, key_prefix=prefix)
    try:
        yield store
    finally:
        await store.aclose()
        await delete_prefix(prefix)


async def corrupt_session(store: AgentSessionStore, agent: Agent, conversation_id: str) -> None:
    assert isinstance(store, RedisSessionStore)
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        key = store.session_key(agent, conversation_id)
        assert await client.exists(key) == 1
        await client.hset(key, "p", b'{"version": 1, "sess')
    finally:
        await client.aclose()


def session_store_spec(store: AgentSessionStore) -> dict[str, Any]:
    assert isinstance(store, RedisSessionStore)
    return {"url": REDIS_URL, "key_prefix": store.key_prefix, "timeout": store.connection.timeout}


def session_store_from_spec(spec: dict[str, Any]) -> AgentSessionStore:
    return RedisSessionStore.from_url(spec["url"], key_prefix=spec["key_prefix"], timeout=spec["timeout"])
