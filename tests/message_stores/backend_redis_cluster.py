"""The Redis backend on Redis Cluster, for the conformance suite: the test session's private
cluster (3 masters + 3 replicas, see :mod:`tests.private_redis_cluster`), the store opened with a
``redis+cluster://`` URL, a fresh key prefix per store (its keys deleted afterwards, on every
master)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentkeep.message_stores import MessageStore
from agentkeep.message_stores.redis import RedisMessageStore
from tests.message_stores.backend_redis import (
    corrupt,
    corrupt_summaries,
    delete_prefix,
    mark_newer_version,
    stored_bytes,
    tamper,
    unique_prefix,
)
from tests.private_redis_cluster import shared_redis_cluster

__all__ = [
    "BACKEND",
    "CROSS_PROCESS",
    "NAME",
    "corrupt",
    "corrupt_summaries",
    "mark_newer_version",
    "open_store",
    "spec_of",
    "store_from_spec",
    "stored_bytes",
    "tamper",
]

NAME = "redis-cluster"
BACKEND = "redis"
CROSS_PROCESS = True


@asynccontextmanager
async def open_store(**options: Any) -> AsyncIterator[RedisMessageStore]:
    url = shared_redis_cluster().url
    prefix = unique_prefix()
    store = RedisMessageStore.from_url(url, key_prefix=prefix, **options)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await delete_prefix(prefix, url)


def spec_of(store: MessageStore) -> dict[str, Any]:
    assert isinstance(store, RedisMessageStore)
    return {
        "url": shared_redis_cluster().url,
        "key_prefix": store.key_prefix,
        "max_messages": store.max_messages,
        "ttl": store.ttl,
    }


def store_from_spec(spec: dict[str, Any]) -> RedisMessageStore:
    return RedisMessageStore.from_url(
        spec["url"], key_prefix=spec["key_prefix"], max_messages=spec["max_messages"], ttl=spec["ttl"]
    )
