"""Listing on Redis (key layout 4): the buckets' activity indexes and the registries, pages read
by cursor across buckets, their order at the edges of a double's exact range, and the upgrade from
layouts 1, 2 and 3.

Every listing is compared with the in-memory store's (the reference behaviour) over the same
conversations. Uses the machine's Redis with a fresh key prefix.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from agentkeep import Agent, Message, SchemaVersionError
from agentkeep._db.redis import BUCKETS, bucket_of
from agentkeep.message_stores import ConversationInfo
from agentkeep.message_stores import redis as redis_module
from agentkeep.message_stores.base import activity_key
from agentkeep.message_stores.memory import InMemoryMessageStore
from agentkeep.message_stores.redis import LAYOUT_VERSION, RedisMessageStore, escape_key_part
from agentkeep.session_stores.redis import RedisSessionStore
from agentkeep.testing import ScriptedChatClient

from .backend_redis import REDIS_URL, open_store
from .helpers import day
from .test_redis import as_layout_3, keys_under, old_keys


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    """A plain client on the test server, for looking at keys."""
    redis_client = aioredis.Redis.from_url(REDIS_URL)
    try:
        yield redis_client
    finally:
        await redis_client.aclose()


async def append_both(
    stores: Sequence[RedisMessageStore | InMemoryMessageStore], name: str, when: datetime
) -> None:
    message = Message("user", [name], created_at=when)
    for store in stores:
        await store.append(name, [message])


async def pages(
    store: RedisMessageStore | InMemoryMessageStore, *, tenant: str | None, size: int
) -> list[list[ConversationInfo]]:
    """Every page of ``size`` of ``tenant``'s listing, joined by cursors."""
    out: list[list[ConversationInfo]] = []
    after: str | None = None
    while True:
        page = await store.list_conversations(tenant=tenant, after=after, limit=size)
        if not page:
            return out
        out.append(page)
        after = page[-1].cursor


def test_a_conversations_keys_its_buckets_and_its_sessions_share_one_slot() -> None:
    # every script names only keys of one hash tag: what Redis Cluster requires of a script
    store = RedisMessageStore.from_url(REDIS_URL, key_prefix="p")
    sessions = RedisSessionStore.from_url(REDIS_URL, key_prefix="s")
    agent = Agent(ScriptedChatClient([]), name="helper")
    for conversation_id in ["a::1", "a::2::x", "plain", "::bare", "ü ñ/{}*::y", "T" * 150 + "::z", "L" * 150]:
        keys = [*store.conversation_keys(conversation_id), *store.bucket_keys(conversation_id)]
        keys.append(sessions.session_key(agent, conversation_id, tagged=True))
        assert len({key_slot(key.encode()) for key in keys}) == 1, conversation_id
    tags = {store.bucket_keys(f"a::{number}").listing for number in range(200)}
    assert len(tags) == BUCKETS  # a tenant's conversations spread over all its buckets


async def test_appends_deletes_and_expiry_keep_the_buckets_and_registries(client: aioredis.Redis) -> None:
    long_tenant = "T" * 120  # hashed in its keys
    async with open_store() as store:
        names = ["a::1", "a::2", "b::1", "plain", f"{long_tenant}::x", "::bare"]
        for number, name in enumerate(names):
            await store.append(name, [Message("user", [name], created_at=day(number))])
        tenants = await client.smembers(store.tenants_key)
        assert tenants == {b"a", b"b", b"", escape_key_part(long_tenant).encode()}
        for name in names:
            bucket = store.bucket_keys(name)
            assert await client.zscore(bucket.listing, name) == activity_key(day(names.index(name)))
            tenant = name.partition("::")[0] if "::" in name else None
            assert str(bucket_of(name)).encode() in await client.smembers(store.buckets_key(tenant))
        assert await store.delete("a::1") is True
        assert await store.expire("b::1", 0) is True
        assert await client.zscore(store.bucket_keys("a::1").listing, "a::1") is None
        assert await client.exists(store.bucket_keys("b::1").listing) == 0
        assert [i.conversation_id for i in await store.list_conversations(tenant="a")] == ["a::2"]
        # the bounded purge of an append drops expired ids from its bucket
        await store.expire("a::2", 100)
        bucket = store.bucket_keys("a::2")
        await client.zadd(bucket.expiry, {"a::2": time.time() * 1000 - 1500})
        neighbour = next(f"a::n{k}" for k in range(1000) if store.bucket_keys(f"a::n{k}") == bucket)
        await store.append(neighbour, [Message("user", ["again"], created_at=day(9))])
        assert await client.zscore(bucket.listing, "a::2") is None
        # a listing forgets ids whose keys vanished
        await store.append("c::gone", [Message("user", ["x"], created_at=day(20))])
        await client.delete(store.conversation_keys("c::gone").meta)
        assert await store.list_conversations(tenant="c") == []
        assert await client.exists(store.bucket_keys("c::gone").listing) == 0
        assert "c::gone" not in [i.conversation_id for i in await store.list_conversations()]


async def test_pages_across_interleaved_tenants_never_show_another_tenants_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redis_module, "_LIST_BATCH", 3)  # the index read a few ids at a time
    reference = InMemoryMessageStore()
    tenants = ["t1", "t10", "t1:x", "t", ""]
    async with open_store() as store:
        base = datetime(2026, 5, 1, tzinfo=UTC)
        for number in range(60):
            tenant = tenants[number % len(tenants)]
            # interleaved activity, with runs of equal times inside and across tenants
            when = base + timedelta(seconds=number // 4)
            await append_both([store, reference], f"{tenant}::c{number % 7}-{number}", when)
        for name in ["t1", "t1:", "t1::", "plain", "t1:::odd"]:  # look alike, belong to no tenant or another
            await append_both([store, reference], name, base + timedelta(seconds=3))
        await store.delete("t1::c1-15")
        await reference.delete("t1::c1-15")
        for bad in ["", "t1:", "t1::x"]:  # no key's tenant reads this way
            with pytest.raises(ValueError, match="isolation_key"):
                await store.list_conversations(tenant=bad)
        for tenant in [*tenants[:-1], None, "nobody"]:
            for size in (1, 4, 50):
                got = await pages(store, tenant=tenant, size=size)
                assert got == await pages(reference, tenant=tenant, size=size), (tenant, size)
                if tenant is not None:
                    prefix = f"{tenant}::"
                    assert all(info.conversation_id.startswith(prefix) for page in got for info in page)
            assert await store.list_conversations(tenant=tenant) == await reference.list_conversations(
                tenant=tenant
            )


async def test_times_beyond_a_doubles_exact_range_list_in_the_references_order(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_module, "_LIST_BATCH", 2)
    reference = InMemoryMessageStore()
    last = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    first = datetime(1, 1, 1, tzinfo=UTC)
    async with open_store() as store:
        # neighbours a microsecond apart share a score near year 9999 (32 µs per double there)
        # and near year 1 (8 µs); ids chosen so their byte order disagrees with their times
        for number in range(12):
            await append_both([store, reference], f"t::z{number:02}", last - timedelta(microseconds=number))
            await append_both(
                [store, reference], f"t::a{number:02}", last - timedelta(microseconds=20 - number)
            )
            await append_both(
                [store, reference], f"t::m{number:02}", first + timedelta(microseconds=number % 5)
            )
        await append_both([store, reference], "t::now", day(0))
        for name in ("t::z03", "t::a05", "t::m07"):
            info = next(i for i in await store.list_conversations() if i.conversation_id == name)
            score = await client.zscore(store.bucket_keys(name).listing, name)
            assert score == redis_module._score(activity_key(info.updated_at))  # the scripts' score
        assert await client.zscore(store.bucket_keys("t::now").listing, "t::now") == activity_key(day(0))
        for size in (1, 2, 3, 7, 100):
            assert await pages(store, tenant="t", size=size) == await pages(reference, tenant="t", size=size)
            assert await pages(store, tenant=None, size=size) == await pages(
                reference, tenant=None, size=size
            )


@pytest.mark.parametrize("layout", [1, 2, 3])
async def test_upgrading_to_layout_4_moves_every_conversation_into_its_bucket(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, layout: int
) -> None:
    monkeypatch.setattr(redis_module, "_REINDEX_BATCH", 7)  # several batches of the upgrade
    reference = InMemoryMessageStore()
    async with open_store(ttl=3600) as store:
        names = [f"{tenant}::c{number}" for number in range(12) for tenant in ("a", "b", "ü x")]
        long_name = "L" * 150 + "::long"
        names += ["plain", "a", long_name]
        for number, name in enumerate(names):
            await append_both([store, reference], name, day(number % 9))
        # what layout 3 left; layout 2 had no tenant index, layout 1 no index at all
        await as_layout_3(client, store, names)
        prefix = store.key_prefix
        if layout < 3:
            tenants = ("a", "b", "ü x", "L" * 150)
            await client.delete(*(f"{prefix}:__index__:{escape_key_part(t)}" for t in tenants))
        if layout < 2:
            await client.delete(f"{prefix}:__index__", f"{prefix}:__expiry__")
            # an id hashed in its keys cannot be named from them: not indexed, so not moved
            names.remove(long_name)
            await reference.delete(long_name)
        await client.hset(store.layout_key, "layout", layout)
        fresh = RedisMessageStore.from_url(REDIS_URL, key_prefix=prefix)
        try:
            for tenant in ("a", "b", "ü x", None):
                assert await pages(fresh, tenant=tenant, size=5) == await pages(
                    reference, tenant=tenant, size=5
                )
            assert await client.hget(store.layout_key, "layout") == str(LAYOUT_VERSION).encode()
            assert await client.hget(store.layout_key, "migrating") is None
            left = [key for key in await keys_under(client, prefix) if ":__index__" in key and "}" not in key]
            assert left == []  # layout 3's indexes are gone
            for name in names:  # history and deadline moved with each conversation
                assert [e.message.text for e in (await fresh.read(name)).entries] == [name]
                assert 0 < await client.pttl(fresh.conversation_keys(name).log) <= 3_600_000
                assert await client.zscore(fresh.bucket_keys(name).expiry, name) is not None
            assert await client.exists(*(key for name in names for key in old_keys(store, name))) == 0
        finally:
            await fresh.aclose()


async def test_a_move_to_layout_4_cut_short_is_finished_by_the_next_setup(client: aioredis.Redis) -> None:
    reference = InMemoryMessageStore()
    async with open_store() as store:
        names = [f"t::{number}" for number in range(10)]
        for number, name in enumerate(names):
            await append_both([store, reference], name, day(number))
        await as_layout_3(client, store, names[:4], everything=False)  # not moved when the mover stopped
        await client.hset(store.layout_key, mapping={"layout": 4, "buckets": BUCKETS, "migrating": 1})
        fresh = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            assert await pages(fresh, tenant="t", size=3) == await pages(reference, tenant="t", size=3)
            assert await client.hget(store.layout_key, "migrating") is None
        finally:
            await fresh.aclose()


async def test_an_agentkeep_of_layout_3_refuses_a_layout_4_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_store() as store:
        await store.append("a::1", [Message("user", ["x"])])
        monkeypatch.setattr(redis_module, "LAYOUT_VERSION", 3)  # what an older agentkeep checks against
        older = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            with pytest.raises(SchemaVersionError, match=r"key layout version '?4"):
                await older.setup()
        finally:
            await older.aclose()
