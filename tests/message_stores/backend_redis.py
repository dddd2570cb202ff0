"""The Redis backend for the conformance suite: the machine's server, a fresh key prefix per store.

The server is ``AGENTKEEP_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Every store gets
its own key prefix; its keys are deleted (``SCAN`` + ``DEL``) when the store is done.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from agentkeep.message_stores import MessageStore
from agentkeep.message_stores.redis import LAYOUT_VERSION, RedisMessageStore

NAME = "redis"
CROSS_PROCESS = True
REDIS_URL = os.environ.get("AGENTKEEP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def unique_prefix(kind: str = "messages") -> str:
    """A key prefix no other test run uses."""
    return f"agentkeep-test-{kind}-{uuid.uuid4().hex[:12]}"


async def delete_prefix(prefix: str, url: str = REDIS_URL) -> int:
    """Delete every key under ``prefix:`` on the server (or cluster) at ``url``; returns how many."""
    if url.startswith("redis+cluster://"):
        cluster = RedisCluster.from_url("redis://" + url.split("://", 1)[1].split(",")[0])
        try:
            keys = [key async for key in cluster.scan_iter(match=f"{prefix}:*", count=1000)]
            return sum([await cluster.delete(key) for key in keys])
        finally:
            await cluster.aclose()
    client = aioredis.Redis.from_url(url)
    try:
        deleted = 0
        batch: list[bytes] = []
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += await client.delete(*batch)
                batch.clear()
        if batch:
            deleted += await client.delete(*batch)
        return deleted
    finally:
        await client.aclose()


@asynccontextmanager
async def admin(store: Any) -> AsyncIterator[Any]:
    """A client for looking at (and damaging) the keys of ``store``: the store's own with a
    cluster (left open), else a new one on the test server."""
    if store.connection.cluster:
        yield store.connection.client
        return
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()


@asynccontextmanager
async def open_store(**options: Any) -> AsyncIterator[RedisMessageStore]:
    prefix = unique_prefix()
    store = RedisMessageStore.from_url(REDIS_URL, key_prefix=prefix, **options)
    try:
        await store.setup()
        yield store
    finally:
        await store.aclose()
        await delete_prefix(prefix)


def spec_of(store: MessageStore) -> dict[str, Any]:
    assert isinstance(store, RedisMessageStore)
    return {
        "url": REDIS_URL,
        "key_prefix": store.key_prefix,
        "max_messages": store.max_messages,
        "ttl": store.ttl,
    }


def store_from_spec(spec: dict[str, Any]) -> RedisMessageStore:
    return RedisMessageStore.from_url(
        spec["url"], key_prefix=spec["key_prefix"], max_messages=spec["max_messages"], ttl=spec["ttl"]
    )


async def corrupt(store: MessageStore, conversation_id: str, seq: int) -> None:
    assert isinstance(store, RedisMessageStore)
    keys = store.conversation_keys(conversation_id)
    async with admin(store) as client:
        head = int(await client.hget(keys.meta, "h") or 0)
        await client.lset(keys.log, seq - head, "\x10not a record")


async def tamper(
    store: MessageStore, conversation_id: str, seq: int, change: Callable[[bytes], bytes]
) -> None:
    assert isinstance(store, RedisMessageStore)
    keys = store.conversation_keys(conversation_id)
    async with admin(store) as client:
        head = int(await client.hget(keys.meta, "h") or 0)
        record: Any = await client.lindex(keys.log, seq - head)
        assert isinstance(record, bytes)
        changed: Any = change(record)  # the client's stubs type values as str; bytes are stored as they are
        await client.lset(keys.log, seq - head, changed)


async def corrupt_summaries(store: MessageStore, conversation_id: str) -> None:
    assert isinstance(store, RedisMessageStore)
    key = store.conversation_keys(conversation_id).summaries
    async with admin(store) as client:
        for field in await client.hkeys(key):
            await client.hset(key, field, b"\x00\x00\x00\x02ab")


async def mark_newer_version(store: MessageStore, *, layout: int = LAYOUT_VERSION + 1) -> None:
    """What a newer agentkeep records: its layout in the prefix's marker and in every bucket's."""
    assert isinstance(store, RedisMessageStore)
    async with admin(store) as client:
        await client.hset(store.layout_key, "layout", layout)
        async for key in client.scan_iter(match=f"{store.key_prefix}:*}}:__layout__", count=1000):
            await client.hset(key, "layout", layout)


async def stored_bytes(store: MessageStore) -> bytes:
    """Everything the store keeps at rest: the raw values (and names) of every key of its prefix."""
    assert isinstance(store, RedisMessageStore)
    parts: list[bytes] = []
    async with admin(store) as client:
        found: list[bytes] = [
            key async for key in client.scan_iter(match=f"{store.key_prefix}:*", count=1000)
        ]
        for key in sorted(found):  # in one order whatever the server's SCAN order
            kind = cast(bytes, await client.type(key)).decode()
            parts.append(key)
            if kind == "string":
                parts.append(cast(bytes | None, await client.get(key)) or b"")
            elif kind == "list":
                parts.extend(cast(list[bytes], await client.lrange(key, 0, -1)))
            elif kind == "hash":
                for field, value in cast(dict[bytes, bytes], await client.hgetall(key)).items():
                    parts += [field, value]
            elif kind == "zset":
                members = cast(list[tuple[bytes, float]], await client.zrange(key, 0, -1, withscores=True))
                parts.extend(member for member, _ in members)
            elif kind == "set":
                parts.extend(sorted(cast(set[bytes], await client.smembers(key))))
            else:
                raise AssertionError(f"unexpected key type {kind} of {key!r}")
    return b"\n".join(parts)
