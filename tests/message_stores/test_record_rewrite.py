"""Records as stored, read and replaced (:class:`~agentkeep.message_stores.base.SupportsRecordRewrite`), on
every durable backend that declares it (see tests/message_stores/conftest.py): what ``agentkeep keys
rotate`` relies on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import pytest

from agentkeep import DecryptionError, KeyRing, Message, SchemaVersionError
from agentkeep.message_stores import MessageStore, Summary
from agentkeep.message_stores.base import StoredRecord, SupportsRecordRewrite
from agentkeep.message_stores.codec import encode_id, encode_time, reseal, seal_key
from agentkeep.message_stores.redis import LAYOUT_VERSION

from .helpers import day

CONVERSATION = "conv-rewrite"


@asynccontextmanager
async def rewritable(backend: ModuleType, **options: Any) -> AsyncIterator[Any]:
    """A fresh store of ``backend`` (skipping backends that cannot rewrite records)."""
    if backend.NAME == "memory":
        pytest.skip("the memory backend does not rewrite records")
    async with backend.open_store(**options) as store:
        if not isinstance(store, SupportsRecordRewrite):
            pytest.skip(f"the {backend.NAME} backend does not rewrite records")
        yield store


async def fill(store: MessageStore, conversation_id: str = CONVERSATION) -> list[Message]:
    """Five messages, a compaction excluding the 2nd and 3rd for a summary (seq 6), two more."""
    messages = [
        Message("user" if i % 2 == 0 else "assistant", [f"secret text {i}"], created_at=day(i))
        for i in range(5)
    ]
    await store.append(conversation_id, messages)
    replaced = [messages[1].message_id or "", messages[2].message_id or ""]
    summary = Message("assistant", ["secret summary"], created_at=day(10))
    await store.record_compaction(conversation_id, excluded=replaced, summaries=[Summary(summary, replaced)])
    more = [Message("user", [f"secret text {i}"], created_at=day(i)) for i in (5, 6)]
    await store.append(conversation_id, more)
    return [*messages, summary, *more]


async def snapshot(store: MessageStore, conversation_id: str = CONVERSATION) -> dict[str, Any]:
    """Everything a reader sees of the conversation: the raw log and the view, entry by entry."""

    def rows(entries: Any) -> list[tuple[Any, ...]]:
        return [
            (
                e.seq,
                e.message.role,
                e.message.text,
                e.message.message_id,
                e.message.created_at,
                e.excluded,
                e.replaces,
            )
            for e in entries
        ]

    raw = await store.read(conversation_id, raw=True)
    view = await store.read(conversation_id)
    return {
        "raw": rows(raw.entries),
        "view": rows(view.entries),
        "epoch": (raw.epoch, view.epoch),
        "last_seq": (raw.last_seq, view.last_seq),
    }


async def all_records(
    store: Any, conversation_id: str = CONVERSATION, *, limit: int = 500
) -> list[StoredRecord]:
    """Every record, page by page, as ``agentkeep keys rotate`` reads them."""
    records: list[StoredRecord] = []
    after = 0
    while page := await store.stored_records(conversation_id, after=after, limit=limit):
        assert len(page) <= limit
        records += page
        after = page[-1].seq
    return records


# -- reading --------------------------------------------------------------------------------------


async def test_records_come_in_seq_order_messages_and_summaries(backend: ModuleType) -> None:
    async with rewritable(backend) as store:
        written = await fill(store)
        records = await store.stored_records(CONVERSATION)
        assert [r.seq for r in records] == list(range(1, 9))
        assert [r.message_id for r in records] == [encode_id(m.message_id or "") for m in written]
        assert [r.created_at for r in records] == [encode_time(m.created_at or day(0)) for m in written]
        assert all(isinstance(r.body, bytes) and r.body for r in records)
        for limit in (1, 2, 3, 5, 7, 8, 100):
            assert await all_records(store, limit=limit) == records
        assert await store.stored_records(CONVERSATION, after=5, limit=1) == [records[5]]  # the summary
        assert await store.stored_records(CONVERSATION, after=8) == []
        assert await store.stored_records(CONVERSATION, limit=0) == []


async def test_records_after_a_trim_include_the_summaries_it_kept(backend: ModuleType) -> None:
    async with rewritable(backend, max_messages=3) as store:
        messages = [Message("user", [f"m{i}"]) for i in range(5)]
        await store.append(CONVERSATION, messages)
        ids = [m.message_id or "" for m in messages[3:]]
        await store.record_compaction(
            CONVERSATION, excluded=ids, summaries=[Summary(Message("assistant", ["s"]), ids)]
        )
        await store.append(CONVERSATION, [Message("user", [f"n{i}"]) for i in range(6)])
        raw = await store.read(CONVERSATION, raw=True)
        view = await store.read(CONVERSATION)
        expected = sorted({e.seq for e in raw.entries} | {e.seq for e in view.entries if e.is_summary})
        assert len(raw.entries) == 3
        for limit in (1, 2, 500):
            assert [r.seq for r in await all_records(store, limit=limit)] == expected
        # the summary before the kept messages is replaced like any record (and put back)
        records = await all_records(store)
        before = await snapshot(store)
        changed = [(r, r.body + b"\x00") for r in records]
        assert await store.replace_records(CONVERSATION, changed) == len(records)
        assert [r.body for r in await all_records(store)] == [body for _, body in changed]
        back = [(StoredRecord(r.seq, r.message_id, r.created_at, body), r.body) for r, body in changed]
        assert await store.replace_records(CONVERSATION, back) == len(records)
        assert await all_records(store) == records
        assert await snapshot(store) == before


# -- replacing ------------------------------------------------------------------------------------


async def test_resealed_records_read_back_the_same_under_the_key_ring(backend: ModuleType) -> None:
    ring = KeyRing({"k1": KeyRing.generate_key()})
    async with rewritable(backend, key_ring=ring) as store:
        plain = backend.store_from_spec(backend.spec_of(store))  # the same data, without a key ring
        try:
            written = await fill(plain)
            before = await snapshot(plain)
            assert await snapshot(store) == before  # a ring reads plain records too
            texts = [m.text.encode() for m in written]
            records = await store.stored_records(CONVERSATION)
            assert all(any(text in r.body for text in texts) for r in records)  # stored in the clear

            key = seal_key(CONVERSATION, ring)
            changes: list[tuple[StoredRecord, bytes]] = []
            for record in records:
                body = reseal(key, record.message_id, record.created_at, record.body)
                assert body is not None
                changes.append((record, body))
            assert await store.replace_records(CONVERSATION, changes) == len(records)

            after = await store.stored_records(CONVERSATION)
            assert [(r.seq, r.message_id, r.created_at) for r in after] == [
                (r.seq, r.message_id, r.created_at) for r in records
            ]
            assert [r.body for r in after] == [body for _, body in changes]
            assert not any(text in r.body for r in after for text in texts)
            assert await snapshot(store) == before
            with pytest.raises(DecryptionError):
                await plain.read(CONVERSATION)  # encrypted now: no reading without the ring

            # nothing left to do: every record is under the current key
            assert all(reseal(key, r.message_id, r.created_at, r.body) is None for r in after)
            assert await store.replace_records(CONVERSATION, []) == 0
        finally:
            await plain.aclose()


async def test_a_record_that_changed_since_it_was_read_is_left_alone(backend: ModuleType) -> None:
    async with rewritable(backend) as store:
        await fill(store)
        before = await snapshot(store)
        records = await store.stored_records(CONVERSATION)
        message, summary = records[0], records[5]
        assert await store.replace_records(CONVERSATION, [(message, b"\xf1\x01new")]) == 1
        changed = await store.stored_records(CONVERSATION)
        assert changed[0].body == b"\xf1\x01new"

        stale = [
            (message, b"other"),  # as read before the replacement above
            (StoredRecord(summary.seq, summary.message_id, summary.created_at, summary.body + b"!"), b"x"),
            (StoredRecord(2, records[1].message_id, records[1].created_at, records[2].body), b"x"),
            (
                StoredRecord(3, records[3].message_id, records[2].created_at, records[2].body),
                b"x",
            ),  # not its id
            (StoredRecord(99, records[2].message_id, records[2].created_at, records[2].body), b"x"),
        ]
        assert await store.replace_records(CONVERSATION, stale) == 0
        assert await store.stored_records(CONVERSATION) == changed

        # in one call, the matching changes are applied and counted, the others not
        good = (records[2], records[2].body[:-1] + b"\x00")
        assert await store.replace_records(CONVERSATION, [stale[1], good, stale[2]]) == 1
        assert (await store.stored_records(CONVERSATION))[2].body == good[1]

        # the rest of the conversation is untouched: put the bodies back and it reads as before
        now = await store.stored_records(CONVERSATION)
        assert (
            await store.replace_records(CONVERSATION, [(now[0], message.body), (now[2], records[2].body)])
            == 2
        )
        assert await store.stored_records(CONVERSATION) == records
        assert await snapshot(store) == before


async def test_no_record_of_a_deleted_or_unknown_conversation_is_replaced(backend: ModuleType) -> None:
    async with rewritable(backend) as store:
        await fill(store)
        await fill(store, "other")
        records = await store.stored_records(CONVERSATION)
        changes = [(r, r.body + b"\x00") for r in records]
        assert await store.replace_records("unknown", changes) == 0
        assert await store.stored_records("unknown") == []
        assert await store.delete(CONVERSATION)
        assert await store.replace_records(CONVERSATION, changes) == 0
        assert await store.stored_records(CONVERSATION) == []
        # the other conversation has the same seqs (other ids): untouched too
        other = await store.stored_records("other")
        assert await store.replace_records("other", changes) == 0
        assert await store.stored_records("other") == other


async def test_a_replacement_keeps_the_conversations_deadline(backend: ModuleType) -> None:
    async with rewritable(backend, ttl=3600) as store:
        await fill(store)
        records = await store.stored_records(CONVERSATION)
        ring = KeyRing({"k1": KeyRing.generate_key()})
        key = seal_key(CONVERSATION, ring)
        changes = [(r, reseal(key, r.message_id, r.created_at, r.body) or b"") for r in records]
        assert await store.replace_records(CONVERSATION, changes) == len(records)
        if backend.NAME == "redis":
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(backend.REDIS_URL)
            try:
                for name in store.conversation_keys(CONVERSATION):
                    assert 0 < await client.pttl(name) <= 3_600_000, name
            finally:
                await client.aclose()
        infos = await store.list_conversations()
        assert [info.conversation_id for info in infos] == [CONVERSATION]


async def test_redis_refuses_to_rewrite_keys_a_newer_agentkeep_upgraded(backend: ModuleType) -> None:
    if backend.NAME != "redis":
        pytest.skip("a check of the Redis scripts' layout check")
    async with rewritable(backend) as store:
        await fill(store)
        records = await store.stored_records(CONVERSATION)
        await backend.mark_newer_version(store)
        with pytest.raises(SchemaVersionError):
            await store.replace_records(CONVERSATION, [(records[0], records[0].body + b"\x00")])
        await backend.mark_newer_version(store, layout=LAYOUT_VERSION)  # back again
        assert await store.stored_records(CONVERSATION) == records  # nothing was replaced
