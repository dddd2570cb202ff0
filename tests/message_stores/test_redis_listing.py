"""Listing on Redis (key layout 3): the per-tenant activity indexes, pages read by cursor, their
order at the edges of a double's exact range, and the upgrade from layouts 1 and 2.

Every listing is compared with the in-memory store's (the reference behaviour) over the same
conversations. Uses the machine's Redis with a fresh key prefix.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis

from agentkeep import Message, SchemaVersionError
from agentkeep.message_stores import ConversationInfo
from agentkeep.message_stores import _redis_lua as lua
from agentkeep.message_stores import redis as redis_module
from agentkeep.message_stores.base import activity_key
from agentkeep.message_stores.memory import InMemoryMessageStore
from agentkeep.message_stores.redis import LAYOUT_VERSION, RedisMessageStore, escape_key_part

from .backend_redis import REDIS_URL, open_store
from .helpers import day


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


async def test_scripts_name_tenant_keys_as_the_client_does(client: aioredis.Redis) -> None:
    # the purge names the tenant indexes of the ids it drops in Lua: percent-encoding, and the
    # SHA-256 of tenants longer than 100 characters once escaped (every padding length around a block)
    values = [
        "",
        "a",
        "t1:x",
        "ü ñ/{}*",
        "%" * 34,
        "x" * 100,
        *("y" * n for n in range(101, 240, 3)),
        "é" * 60,
    ]
    script = lua._KEY_PART + "local out = {} for i, v in ipairs(ARGV) do out[i] = key_part(v) end return out"
    named = await client.eval(script, 0, *values)  # pyright: ignore[reportUnknownMemberType]
    assert [part.decode() for part in named] == [escape_key_part(value) for value in values]


async def test_appends_deletes_and_expiry_keep_the_tenant_indexes(client: aioredis.Redis) -> None:
    long_tenant = "T" * 120  # hashed in its index key
    async with open_store() as store:
        for number, name in enumerate(["a::1", "a::2", "b::1", "plain", f"{long_tenant}::x", "::bare"]):
            await store.append(name, [Message("user", [name], created_at=day(number))])
        assert await client.zrange(store.tenant_index_key("a"), 0, -1) == [b"a::1", b"a::2"]
        assert await client.zrange(store.tenant_index_key(""), 0, -1) == [b"::bare"]
        assert await client.zscore(store.tenant_index_key(long_tenant), f"{long_tenant}::x") == activity_key(
            day(4)
        )
        assert await client.zcard(store.index_key) == 6  # every id, tenant or not
        assert await store.delete("a::1") is True
        assert await store.expire("b::1", 0) is True
        assert await client.zrange(store.tenant_index_key("a"), 0, -1) == [b"a::2"]
        assert await client.exists(store.tenant_index_key("b")) == 0
        # the bounded purge of an append drops expired ids from their tenants' indexes too
        await store.expire("a::2", 100)
        await store.expire(f"{long_tenant}::x", 100)
        past = time.time() * 1000 - 1500
        await client.zadd(store.expiry_key, {"a::2": past, f"{long_tenant}::x": past})
        await store.append("plain", [Message("user", ["again"], created_at=day(9))])
        assert await client.exists(store.tenant_index_key("a"), store.tenant_index_key(long_tenant)) == 0
        # a listing forgets ids whose keys vanished, in every index that holds them
        await store.append("c::gone", [Message("user", ["x"], created_at=day(20))])
        await client.delete(store.conversation_keys("c::gone").meta)
        assert await store.list_conversations(tenant="c") == []
        assert await client.exists(store.tenant_index_key("c")) == 0
        assert await client.zscore(store.index_key, "c::gone") is None


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
            score = await client.zscore(store.tenant_index_key("t"), name)
            assert score == redis_module._score(activity_key(info.updated_at))  # the scripts' score
        assert await client.zscore(store.index_key, "t::now") == activity_key(day(0))  # exact
        for size in (1, 2, 3, 7, 100):
            assert await pages(store, tenant="t", size=size) == await pages(reference, tenant="t", size=size)
            assert await pages(store, tenant=None, size=size) == await pages(
                reference, tenant=None, size=size
            )


@pytest.mark.parametrize("layout", [1, 2])
async def test_upgrading_to_layout_3_fills_the_tenant_indexes(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, layout: int
) -> None:
    monkeypatch.setattr(redis_module, "_REINDEX_BATCH", 7)  # several batches of the upgrade
    reference = InMemoryMessageStore()
    async with open_store() as store:
        names = [f"{tenant}::c{number}" for number in range(12) for tenant in ("a", "b", "ü x")]
        for number, name in enumerate([*names, "plain", "a"]):
            await append_both([store, reference], name, day(number % 9))
        # what layout 2 left: the prefix's index and expiry set, no tenant index (what layout 1
        # left: no index at all); the conversations' keys are the same
        tenant_keys = [store.tenant_index_key(tenant) for tenant in ("a", "b", "ü x")]
        assert await client.exists(*tenant_keys) == 3
        await client.delete(*tenant_keys)
        if layout == 1:
            await client.delete(store.index_key, store.expiry_key)
        await client.hset(store.layout_key, "layout", layout)
        fresh = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            for tenant in ("a", "b", "ü x", None):
                assert await pages(fresh, tenant=tenant, size=5) == await pages(
                    reference, tenant=tenant, size=5
                )
            assert await client.hget(store.layout_key, "layout") == str(LAYOUT_VERSION).encode()
            assert await client.zcard(store.tenant_index_key("a")) == 12
        finally:
            await fresh.aclose()


async def test_an_agentkeep_of_layout_2_refuses_a_layout_3_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_store() as store:
        await store.append("a::1", [Message("user", ["x"])])
        monkeypatch.setattr(redis_module, "LAYOUT_VERSION", 2)  # what an older agentkeep checks against
        older = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            with pytest.raises(SchemaVersionError, match=r"key layout version '?3"):
                await older.setup()
        finally:
            await older.aclose()
