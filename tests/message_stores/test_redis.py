"""Redis-specific behaviour of :mod:`agentkeep.message_stores.redis` (the shared contract is in the suite).

Key layout and escaping, the layout marker, client ownership, errors, retention details, the
window arithmetic (checked against the in-memory reference over random operations), the record
size, and :class:`RedisHistoryProvider`. Uses the machine's Redis with a fresh key prefix.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentkeep import (
    Agent,
    CorruptRecordError,
    Message,
    SchemaVersionError,
    StorageError,
    StorageUnavailableError,
)
from agentkeep._db.redis import BUCKETS, bucket_of
from agentkeep.message_stores import DEDUP_WINDOW, Summary
from agentkeep.message_stores import _redis_lua as lua
from agentkeep.message_stores import redis as redis_module
from agentkeep.message_stores.codec import FORMAT_VERSION
from agentkeep.message_stores.redis import (
    LAYOUT_VERSION,
    RedisConnection,
    RedisHistoryProvider,
    RedisMessageStore,
    escape_key_part,
)
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import free_port

from .backend_redis import REDIS_URL, delete_prefix, open_store, unique_prefix
from .helpers import day, turn


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    """A plain client on the test server, for looking at keys."""
    redis_client = aioredis.Redis.from_url(REDIS_URL)
    try:
        yield redis_client
    finally:
        await redis_client.aclose()


async def keys_under(client: aioredis.Redis, prefix: str) -> set[str]:
    return {key.decode() async for key in client.scan_iter(match=f"{prefix}:*", count=1000)}


def old_keys(store: RedisMessageStore, conversation_id: str) -> list[str]:
    """The keys layout 3 (and 1 and 2) kept ``conversation_id`` under."""
    base = f"{store.key_prefix}:{{{escape_key_part(conversation_id)}}}:"
    return [base + kind for kind in "mlxsi"]


async def as_layout_3(
    client: aioredis.Redis, store: RedisMessageStore, ids: list[str], *, everything: bool = True
) -> None:
    """Rewrite what ``store`` keeps of ``ids`` as layout 3 kept it: each conversation's keys under
    its own hash tag, the prefix's index and expiry set and the tenant indexes; with
    ``everything`` (all the store's ids given), no buckets, no registries, the layout marker at 3."""
    prefix = store.key_prefix
    for conversation_id in ids:
        bucket = store.bucket_keys(conversation_id)
        score = await client.zscore(bucket.listing, conversation_id)
        deadline = await client.zscore(bucket.expiry, conversation_id)
        for new, old in zip(
            store.conversation_keys(conversation_id), old_keys(store, conversation_id), strict=True
        ):
            if await client.exists(new):
                await client.rename(new, old)
        if score is not None:
            await client.zadd(f"{prefix}:__index__", {conversation_id: score})
            tenant, separator, _ = conversation_id.partition("::")
            if separator:
                await client.zadd(f"{prefix}:__index__:{escape_key_part(tenant)}", {conversation_id: score})
        if deadline is not None:
            await client.zadd(f"{prefix}:__expiry__", {conversation_id: deadline})
        await client.zrem(bucket.listing, conversation_id)
        await client.zrem(bucket.expiry, conversation_id)
    if not everything:
        return
    for key in await keys_under(client, prefix):
        if (
            key.endswith(("}:__index__", "}:__expiry__", "}:__layout__"))
            or ":__tenants__" in key
            or ":__buckets__:" in key
        ):
            await client.delete(key)
    await client.hset(store.layout_key, "layout", 3)
    await client.hdel(store.layout_key, "buckets")


# -- key layout ---------------------------------------------------------------------------------


def test_escaping_is_injective_and_keeps_ids_inside_their_keys() -> None:
    ids = ["a", "a:b", "a%3Ab", "{a}", "a}:{b", "*", "?[x]", "ü", "", "#x", "x" * 100, "x" * 101]
    escaped = [escape_key_part(i) for i in ids]
    assert len(set(escaped)) == len(ids)
    for part in escaped:
        assert not set(part) & set(":{}*?[] ")
        assert len(part) <= 100
    assert escape_key_part("conv-1_a.b~") == "conv-1_a.b~"
    assert escape_key_part("x" * 200).startswith("#")


async def test_keys_are_namespaced_and_share_a_hash_tag(client: aioredis.Redis) -> None:
    async with open_store() as store:
        prefix = store.key_prefix
        await store.append("a:b}{c", turn(1))
        [first, _] = (await store.read("a:b}{c", raw=True)).entries
        summary = Summary(Message("assistant", ["s"]), [first.message.message_id or ""])
        await store.record_compaction(
            "a:b}{c", excluded=[first.message.message_id or ""], summaries=[summary]
        )
        keys = await keys_under(client, prefix)
        bucket = store.bucket_keys("a:b}{c")
        registries = {store.tenants_key, store.buckets_key(None)}
        expected = set(store.conversation_keys("a:b}{c")) | {store.layout_key, bucket.listing, bucket.marker}
        assert keys == expected | registries
        tag = f"{{:{bucket_of('a:b}{c')}}}"  # no tenant: an empty tenant part
        assert store.conversation_keys("a:b}{c").log == f"{prefix}:{tag}:a%3Ab%7D%7Bc:l"
        assert all(key.startswith(f"{prefix}:{tag}:") for key in expected - {store.layout_key})
        assert await client.llen(store.conversation_keys("a:b}{c").log) == 3  # 2 messages, 1 summary


async def test_delete_leaves_no_key_of_the_conversation(client: aioredis.Redis) -> None:
    async with open_store(ttl=60) as store:
        await store.append("d", turn(1))
        [first, _] = (await store.read("d", raw=True)).entries
        await store.record_compaction(
            "d",
            excluded=[first.message.message_id or ""],
            summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])],
        )
        assert await store.delete("d") is True
        registered = {
            store.layout_key,
            store.tenants_key,
            store.buckets_key(None),
            store.bucket_keys("d").marker,
        }
        assert await keys_under(client, store.key_prefix) == registered


# -- layout marker --------------------------------------------------------------------------------


async def test_setup_records_the_layout_and_refuses_newer_or_unknown_ones(client: aioredis.Redis) -> None:
    async with open_store() as store:
        assert await client.hgetall(store.layout_key) == {
            b"layout": str(LAYOUT_VERSION).encode(),
            b"format": str(FORMAT_VERSION).encode(),
            b"buckets": str(BUCKETS).encode(),
        }
        await client.hset(store.layout_key, "format", 7)
        fresh = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            with pytest.raises(
                SchemaVersionError, match=rf"record format version .*7.* up to version {FORMAT_VERSION}"
            ):
                await fresh.append("x", turn(1))  # the first operation checks the layout
            await client.hset(store.layout_key, mapping={"format": 1, "layout": "junk"})
            with pytest.raises(SchemaVersionError, match="key layout"):
                await fresh.setup()
            await client.hset(store.layout_key, "layout", 0)
            with pytest.raises(SchemaVersionError, match="key layout"):
                await fresh.setup()
            await client.hset(store.layout_key, "layout", 1)
            await fresh.setup()
            assert await client.hget(store.layout_key, "layout") == str(LAYOUT_VERSION).encode()
            # an older record format is raised to this one: older agentkeeps refuse the keys now
            assert await client.hget(store.layout_key, "format") == str(FORMAT_VERSION).encode()
            assert await fresh.append("x", turn(1)) == [1, 2]
        finally:
            await fresh.aclose()


async def test_an_open_store_stops_appending_once_a_newer_agentkeep_upgrades_the_keys(
    client: aioredis.Redis,
) -> None:
    async with open_store() as store:
        await store.append("c", turn(1))  # checked the layout
        marker = store.bucket_keys("c").marker  # a newer process appended to the bucket meanwhile
        await client.hset(store.layout_key, "format", FORMAT_VERSION + 1)
        await client.hset(marker, "format", FORMAT_VERSION + 1)
        with pytest.raises(SchemaVersionError, match="record format"):
            await store.append("c", turn(2))
        await client.hset(store.layout_key, "format", FORMAT_VERSION)
        await client.hset(marker, "format", FORMAT_VERSION)
        assert [e.seq for e in (await store.read("c", raw=True)).entries] == [1, 2]  # nothing written
        assert await store.append("c", turn(2)) == [3, 4]


async def test_upgrading_from_layout_1_indexes_the_stored_conversations(client: aioredis.Redis) -> None:
    long_id = "L" * 150  # escaped into a hash: cannot be named from its keys
    async with open_store() as store:
        odd = ["a:b}{c", "", "ü *?[x]"]
        for number, name in enumerate([*odd, long_id, "plain"]):
            await store.append(name, [Message("user", [name], created_at=day(number))])
        before_ms = time.time() * 1000
        await store.expire("plain", 100)
        after_ms = time.time() * 1000
        # what layout 1 left: the conversation keys of layout 3, no index, the old marker
        await as_layout_3(client, store, [*odd, long_id, "plain"])
        await client.delete(f"{store.key_prefix}:__index__", f"{store.key_prefix}:__expiry__")
        await client.hset(store.layout_key, "layout", 1)
        fresh = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            listed = await fresh.list_conversations()
            assert [info.conversation_id for info in listed] == ["plain", *reversed(odd)]
            assert [info.updated_at for info in listed] == [day(4), day(2), day(1), day(0)]
            assert await client.hget(store.layout_key, "layout") == str(LAYOUT_VERSION).encode()
            deadline = await client.zscore(store.bucket_keys("plain").expiry, "plain") or 0
            assert before_ms + 100_000 - 5 <= deadline <= after_ms + 100_000 + 5  # set by expire(): kept
            # not indexed by layout 1's upgrade, so not moved to its bucket: it starts over
            await fresh.append(long_id, [Message("user", ["again"], created_at=day(9))])
            assert (await fresh.list_conversations(limit=1))[0].conversation_id == long_id
        finally:
            await fresh.aclose()


# -- listing --------------------------------------------------------------------------------------


async def listed_once_expired(store: RedisMessageStore, expected: list[str]) -> None:
    """Wait (polling, within a hang guard) until the listing shows ``expected``: the store's TTL
    runs on the server's clock, which a test cannot move."""
    async with asyncio.timeout(30):
        while True:
            listed = [i.conversation_id for i in await store.list_conversations()]
            if listed == expected:
                return
            await asyncio.sleep(0.05)


async def test_listing_skips_and_forgets_expired_conversations(client: aioredis.Redis) -> None:
    async with open_store(ttl=2.0) as store:  # long enough for the checks made before it passes
        forever = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            await store.append("short", [Message("user", ["a"], created_at=day(2))])
            await forever.append("kept", [Message("user", ["b"], created_at=day(1))])
            assert [i.conversation_id for i in await store.list_conversations()] == ["short", "kept"]
            short = store.bucket_keys("short")
            assert await client.zrange(short.expiry, 0, -1) == [b"short"]
            await listed_once_expired(store, ["kept"])
            assert await client.zscore(short.listing, "short") is None  # the listing forgot it
            assert await client.exists(short.expiry) == 0
            # an append purges its bucket of conversations whose deadline passed over a second ago
            await store.append("gone", [Message("user", ["c"])])
            gone = store.bucket_keys("gone")
            await client.zadd(gone.expiry, {"gone": time.time() * 1000 - 1500})
            neighbour = next(f"n{k}" for k in range(1000) if store.bucket_keys(f"n{k}") == gone)
            await forever.append(neighbour, [Message("user", ["d"], created_at=day(3))])
            assert await client.zscore(gone.listing, "gone") is None
            assert await store.delete(neighbour) is True
            # expire(None) keeps a conversation for good: it leaves the expiry set
            await store.append("s", [Message("user", ["e"], created_at=day(0))])
            assert await store.expire("s", None) is True
            assert await client.zscore(store.bucket_keys("s").expiry, "s") is None
            await store.append("t", [Message("user", ["f"], created_at=day(-1))])  # expires as s would
            await listed_once_expired(store, ["kept", "s"])
            assert await store.expire("s", 0) is True
            assert await client.zscore(store.bucket_keys("s").listing, "s") is None
        finally:
            await forever.aclose()


async def test_listing_counts_messages_after_trims_and_summaries() -> None:
    async with open_store(max_messages=3) as store:
        for i in range(3):
            await store.append("c", turn(i))
        raw = (await store.read("c", raw=True)).entries
        ids = [e.message.message_id or "" for e in raw]
        await store.record_compaction("c", summaries=[Summary(Message("assistant", ["s"]), ids[-2:])])
        [info] = await store.list_conversations()
        assert (info.message_count, info.last_seq) == (3, 7)
        assert info.updated_at == raw[-1].message.created_at  # the summary is no message
        await store.append("c", turn(4))
        [info] = await store.list_conversations()
        assert (info.message_count, info.last_seq) == (3, 9)


async def test_listing_reads_the_index_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_module, "_LIST_BATCH", 4)
    async with open_store() as store:
        for number in range(11):
            await store.append(f"c{number}", [Message("user", ["x"], created_at=day(number))])
        for number in (9, 4, 5):
            await store.expire(f"c{number}", 0)
        expected = [f"c{number}" for number in (10, 8, 7, 6, 3, 2, 1, 0)]
        assert [i.conversation_id for i in await store.list_conversations()] == expected
        assert [i.conversation_id for i in await store.list_conversations(limit=6)] == expected[:6]
        assert await store.list_conversations(limit=0) == []


async def test_a_corrupt_newest_record_is_reported_when_listing(client: aioredis.Redis) -> None:
    async with open_store() as store:
        await store.append("bad", turn(1))
        await client.lset(store.conversation_keys("bad").log, -1, "\x10short")
        with pytest.raises(CorruptRecordError) as caught:
            await store.list_conversations()
        assert (caught.value.conversation_id, caught.value.seq) == ("bad", 2)


async def test_an_empty_entry_in_a_long_read_is_reported_at_its_seq(client: aioredis.Redis) -> None:
    async with open_store() as store:
        await store.append("c", [Message("user", [f"m{i}"]) for i in range(20)])
        await client.lset(store.conversation_keys("c").log, 12, "")
        with pytest.raises(CorruptRecordError) as caught:
            await store.read("c")
        assert (caught.value.conversation_id, caught.value.seq) == ("c", 13)


# -- ownership and errors ---------------------------------------------------------------------------


async def test_an_injected_client_is_not_closed(client: aioredis.Redis) -> None:
    prefix = unique_prefix()
    store = RedisMessageStore(client, key_prefix=prefix)
    try:
        await store.append("c", turn(1))
        assert store.connection.owns_client is False
    finally:
        await store.aclose()
        await delete_prefix(prefix)
    assert await client.ping() is True


async def test_bad_client_arguments_are_refused(client: aioredis.Redis) -> None:
    with pytest.raises(ValueError, match="either"):
        RedisMessageStore()
    with pytest.raises(ValueError, match="either"):
        RedisMessageStore(client, redis_url=REDIS_URL)
    decoding = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        with pytest.raises(ValueError, match="decode"):
            RedisMessageStore(decoding)
    finally:
        await decoding.aclose()
    options: dict[str, Any]
    for options in ({"max_messages": 0}, {"ttl": 0}, {"timeout": 0}, {"key_prefix": ""}):
        with pytest.raises(ValueError):
            RedisMessageStore.from_url(REDIS_URL, **options)


async def test_an_unreachable_server_fails_fast_without_the_password() -> None:
    port = free_port()
    store = RedisMessageStore.from_url(f"redis://:s3cret@127.0.0.1:{port}/2", timeout=1.0)
    try:
        async with asyncio.timeout(30):  # a hang guard: the connect timeout fires first
            with pytest.raises(StorageUnavailableError) as caught:
                await store.append("c", turn(1))
        error = caught.value
        assert error.backend == "redis"
        assert error.address == f"redis://127.0.0.1:{port}/2"
        assert "s3cret" not in str(error)
        assert f"127.0.0.1:{port}" in str(error)
    finally:
        await store.aclose()


async def test_a_silent_server_times_out() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # never answers

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = RedisMessageStore.from_url(f"redis://127.0.0.1:{port}/0", timeout=0.3)
    try:
        async with asyncio.timeout(30):  # a hang guard: the reply timeout fires first
            with pytest.raises(StorageUnavailableError, match=r"[Tt]imeout"):
                await store.read("c", raw=True)
        assert len(accepted) == 1  # a timeout is not retried on a new connection
    finally:
        await store.aclose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_key_of_another_type_is_a_storage_error(client: aioredis.Redis) -> None:
    async with open_store() as store:
        await client.set(store.conversation_keys("c").meta, "not a hash")
        with pytest.raises(StorageError, match="WRONGTYPE") as caught:
            await store.append("c", turn(1))
        assert not isinstance(caught.value, StorageUnavailableError)


async def direct_read(store: RedisMessageStore, conversation_id: str, *, raw: bool) -> Any:
    """What a whole read gets without the ``READ`` script copying the log, however short it is
    (``None``: the script answers in full)."""
    keys = store.conversation_keys(conversation_id)
    answer = await store.connection.run(lua.READ, keys, [0, -1, 1 if raw else 0, 1])
    if not isinstance(answer[2], bytes):
        return None
    return await store._whole_log(keys, answer)  # pyright: ignore[reportPrivateUsage]


async def whole_reads(store: RedisMessageStore, conversation_id: str, *, raw: bool) -> tuple[Any, Any]:
    """A whole read without the ``READ`` script copying the log, and the script's full answer."""
    keys = store.conversation_keys(conversation_id)
    scripted = await store.connection.run(lua.READ, keys, [0, -1, 1 if raw else 0])
    return await direct_read(store, conversation_id, raw=raw), scripted


async def test_a_whole_read_answers_as_the_script_does_without_it(client: aioredis.Redis) -> None:
    async with open_store(max_messages=4) as store:
        for raw in (False, True):  # no such conversation: the script answers
            direct, scripted = await whole_reads(store, "nobody", raw=raw)
            assert direct is None
            assert scripted == [0, 0, [], b""]
        for i in range(3):  # trimmed: the log starts past seq 1
            await store.append("c", turn(i))
        for raw in (False, True):
            direct, scripted = await whole_reads(store, "c", raw=raw)
            assert direct == scripted
            assert direct[2][0][1] > 1
        ids = [e.message.message_id or "" for e in (await store.read("c", raw=True)).entries]
        await store.record_compaction("c", excluded=ids[:1])
        direct, scripted = await whole_reads(store, "c", raw=True)  # exclusions flag a raw read
        assert direct == scripted
        assert direct[3] != b""
        assert await direct_read(store, "c", raw=False) is None  # the view skips them
        await store.record_compaction("c", summaries=[Summary(Message("assistant", ["s"]), ids[-2:])])
        for raw in (False, True):
            assert await direct_read(store, "c", raw=raw) is None  # a summary takes a seq
        views = [await store.read("c", raw=raw) for raw in (False, True)]
        assert "s" in [m.text for m in views[0].messages]
        assert len(views[1].messages) == 4

        await store.append("d", turn(1))
        keys = store.conversation_keys("d")
        await client.hset(keys.meta, "l", "7")  # the log no longer one entry per seq
        assert await direct_read(store, "d", raw=False) is None
        await client.hset(keys.meta, "h", "x")  # a damaged counter: the script reports it
        with pytest.raises(CorruptRecordError, match="bookkeeping"):
            await store.read("d")
        await client.delete(keys.log)
        await client.set(keys.log, "not a list")
        await client.hset(keys.meta, mapping={"h": "1", "l": "2"})
        with pytest.raises(StorageError, match="WRONGTYPE"):
            await store.read("d")


async def test_a_whole_read_of_a_compacted_log_reads_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_store() as store:
        await store.append("c", [Message("user", [f"m{i}"]) for i in range(600)])
        sent: list[list[str]] = []
        atomic = store.connection.execute_atomic

        async def recording(commands: Any) -> list[Any]:
            sent.append([str(command[0]) for command in commands])
            return await atomic(commands)

        monkeypatch.setattr(store.connection, "execute_atomic", recording)
        assert len((await store.read("c")).messages) == 600  # long enough: LRANGE
        assert sent == [["HMGET", "LRANGE"]]
        ids = [m.message_id or "" for m in (await store.read("c", last=2)).messages]
        await store.record_compaction("c", excluded=ids)
        sent.clear()
        assert len((await store.read("c")).messages) == 598
        await store.append("short", turn(1))
        assert len((await store.read("short")).messages) == 2
        assert sent == []  # the script reads a compacted or short log, once


@pytest.mark.parametrize("write", ["append", "trim", "delete-and-refill"])
async def test_a_whole_read_between_two_writes_is_one_state(
    monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    async with open_store(max_messages=4 if write == "trim" else None) as store:
        for i in range(2):
            await store.append("c", turn(i))
        before = await store.connection.run(lua.READ, store.conversation_keys("c"), [0, -1, 0])
        atomic = store.connection.execute_atomic

        async def writing_first(commands: Any) -> list[Any]:
            if write == "delete-and-refill":
                await store.delete("c")
                await store.append("c", [*turn(7), *turn(8)])  # the same head, epoch and length
            else:
                await store.append("c", turn(9))
            return await atomic(commands)

        monkeypatch.setattr(store.connection, "execute_atomic", writing_first)
        direct = await direct_read(store, "c", raw=False)
        monkeypatch.undo()
        if write == "append":
            assert direct == before  # the entries the script counted
        else:
            assert direct is None  # the head moved, or another log: the script reads it


async def test_connection_repr_names_the_address_only() -> None:
    connection = RedisConnection(redis_url="redis://user:pw@127.0.0.1:6379/3")
    try:
        assert repr(connection) == "RedisConnection('redis://127.0.0.1:6379/3', owns_client=True)"
    finally:
        await connection.aclose()


# -- records ------------------------------------------------------------------------------------


async def test_long_and_odd_message_ids_round_trip_and_deduplicate() -> None:
    async with open_store() as store:
        messages = [
            Message("user", ["long"], message_id="i" * 300),
            Message("user", ["short"], message_id="x"),
            Message("user", ["sixteen"], message_id="a" * 15),
        ]
        assert await store.append("ids", messages) == [1, 2, 3]
        assert await store.append("ids", messages) == [1, 2, 3]
        assert [e.message for e in (await store.read("ids", raw=True)).entries] == messages
        await store.record_compaction("ids", excluded=["i" * 300, "bad\x00id"])
        assert [e.excluded for e in (await store.read("ids", raw=True)).entries] == [True, False, False]


async def test_a_retry_older_than_the_dedup_window_is_stored_again() -> None:
    async with open_store() as store:
        old = [Message("user", ["old"])]
        await store.append("w", old)
        for i in range(DEDUP_WINDOW // 2 - 1):
            await store.append("w", turn(i))
        assert await store.append("w", old) == [1]  # the newest DEDUP_WINDOW entries include it
        await store.append("w", turn(-1))
        assert await store.append("w", old) == [DEDUP_WINDOW + 2]  # seq 1 is now 257th newest


async def test_bytes_per_message_at_ten_thousand(client: aioredis.Redis) -> None:
    async with open_store() as store:
        for batch in range(20):
            await store.append(
                "big", [Message("user", [f"{batch:04d}-{i:04d} " + "x" * 190]) for i in range(500)]
            )
        used = 0
        for key in store.conversation_keys("big"):
            used += await client.memory_usage(key, samples=0) or 0
        assert used / 10_000 <= 260


# -- retention ------------------------------------------------------------------------------------


async def test_ttl_covers_keys_created_by_a_later_compaction(client: aioredis.Redis) -> None:
    async with open_store(ttl=100) as store:
        await store.append("t", turn(1))
        [first, second] = (await store.read("t", raw=True)).entries
        await store.record_compaction(
            "t",
            excluded=[first.message.message_id or ""],
            summaries=[Summary(Message("assistant", ["s"]), [second.message.message_id or ""])],
        )
        keys = store.conversation_keys("t")
        for key in keys:
            assert 0 < await client.pttl(key) <= 100_000
        assert await store.expire("t", None) is True
        for key in keys:
            assert await client.pttl(key) == -1


async def test_a_conversation_that_lost_its_meta_key_starts_over(client: aioredis.Redis) -> None:
    async with open_store() as store:
        await store.append("s", turn(1))
        [first, _] = (await store.read("s", raw=True)).entries
        await store.record_compaction("s", excluded=[first.message.message_id or ""])
        keys = store.conversation_keys("s")
        await client.delete(keys.meta, keys.log)  # as if the two expired before the others
        assert (await store.read("s", raw=True)).entries == []
        assert await store.append("s", turn(2)) == [1, 2]
        assert [e.excluded for e in (await store.read("s", raw=True)).entries] == [False, False]


# -- windows against the reference ----------------------------------------------------------------


async def test_compaction_finds_ids_anywhere_in_a_long_log() -> None:
    async with open_store() as store:
        for batch in range(3):
            await store.append("long", [Message("user", [f"{batch}-{i}"]) for i in range(600)])
        raw = (await store.read("long", raw=True)).entries
        ids = [e.message.message_id or "" for e in raw]
        await store.record_compaction("long", excluded=ids[:100])
        await store.record_compaction("long", excluded=[ids[1500], ids[50], ids[1799], "not-there"])
        flags = [e.excluded for e in (await store.read("long", raw=True)).entries]
        assert [i for i, flag in enumerate(flags) if flag] == [*range(100), 1500, 1799]
        summary = Summary(Message("assistant", ["s"]), [ids[1700], ids[1200]])
        await store.record_compaction("long", summaries=[summary])
        view = (await store.read("long")).entries
        assert [e.message.text for e in view[1099:1102]] == ["1-599", "s", "2-0"]  # anchored at ids[1200]


# -- concurrency in one process -------------------------------------------------------------------


async def test_concurrent_appends_from_two_clients_stay_contiguous() -> None:
    async with open_store() as store:
        other = RedisMessageStore.from_url(REDIS_URL, key_prefix=store.key_prefix)
        try:
            await asyncio.gather(
                *(
                    target.append("c", [Message("user", [f"{n} q"]), Message("assistant", [f"{n} a"])])
                    for n in range(40)
                    for target in ([store] if n % 2 else [other])
                )
            )
        finally:
            await other.aclose()
        texts = [e.message.text for e in (await store.read("c", raw=True)).entries]
        assert len(texts) == 80
        assert sorted(texts[::2], key=lambda t: int(t.split()[0])) == [f"{n} q" for n in range(40)]
        for question, answer in zip(texts[::2], texts[1::2], strict=True):
            assert answer == question.replace(" q", " a")


# -- the history provider -------------------------------------------------------------------------


async def test_history_provider_with_an_injected_client(client: aioredis.Redis) -> None:
    prefix = unique_prefix()
    provider = RedisHistoryProvider(redis_client=client, key_prefix=prefix, load_limit=10, ttl=60)
    try:
        assert provider.source_id == "redis_memory"
        scripted = ScriptedChatClient(["one", "two"])
        agent = Agent(scripted, context_providers=[provider])
        session = agent.create_session(session_id="user-42")
        await agent.run("hello", session=session)
        await agent.run("again", session=session)
        assert [m.text for m in scripted.calls[-1]] == ["hello", "one", "again"]
        stored = (await provider.store.read("user-42", raw=True)).entries
        assert [e.message.text for e in stored] == ["hello", "one", "again", "two"]
        assert 0 < await client.pttl(provider.store.conversation_keys("user-42").log) <= 60_000
    finally:
        await provider.aclose()
        await delete_prefix(prefix)
    assert await client.ping() is True


async def test_history_provider_from_url_owns_its_client() -> None:
    prefix = unique_prefix()
    provider = RedisHistoryProvider.from_url(REDIS_URL, key_prefix=prefix, max_messages=4)
    try:
        assert provider.store.connection.owns_client is True
        assert provider.store.max_messages == 4
        agent = Agent(ScriptedChatClient(["a", "b", "c"]), context_providers=[provider])
        session = agent.create_session()
        for text in ("x", "y", "z"):
            await agent.run(text, session=session)
        stored = await provider.store.read(provider.conversation_id(session), raw=True)
        assert [e.message.text for e in stored.entries] == ["y", "b", "z", "c"]
    finally:
        await provider.aclose()
        await delete_prefix(prefix)
    assert provider.store.connection.closed
    with pytest.raises(ValueError, match="Either redis_url or credential_provider"):
        RedisHistoryProvider()
    with pytest.raises(ValueError, match="mutually exclusive"):
        RedisHistoryProvider("mem", REDIS_URL, credential_provider=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host is required"):
        RedisHistoryProvider("mem", credential_provider=object())  # type: ignore[arg-type]


async def test_history_provider_takes_the_references_members(client: aioredis.Redis) -> None:
    prefix = f"ak-test-ref-{uuid.uuid4().hex[:8]}"
    provider = RedisHistoryProvider("mem", redis_url=REDIS_URL, key_prefix=prefix, max_messages=50)
    try:
        assert (provider.redis_url, provider.key_prefix, provider.max_messages) == (REDIS_URL, prefix, 50)
        await provider.save_messages("s1", [Message("user", "hi")])
        assert [m.text for m in await provider.get_messages("s1")] == ["hi"]
        assert await provider.clear("s1") is True
        assert list(await provider.get_messages("s1")) == []
        assert await provider.clear("s1") is False
    finally:
        await provider.aclose()
        await delete_prefix(prefix)


async def test_a_resend_after_the_deadline_is_answered_as_the_retry_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py resends a script after a dropped connection; if the first send was applied, the
    resend (however late) is a retry, answered with the stored seqs, never "nothing was stored"."""
    async with open_store() as store:
        turn = [Message("user", ["question"]), Message("assistant", ["answer"])]
        assert await store.append("late", turn) == [1, 2]

        async def long_past() -> int:
            return 1  # a start-by time on the server's clock that has passed

        monkeypatch.setattr(store.connection, "start_by", long_past)
        assert await store.append("late", turn) == [1, 2]
        with pytest.raises(StorageUnavailableError, match="too late; nothing was stored"):
            await store.append("late", [Message("user", ["new question"])])
        assert len((await store.read("late", raw=True)).entries) == 2
