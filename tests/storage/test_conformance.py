"""The storage conformance suite: every backend behaves the same (see tests/storage/conftest.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from types import ModuleType
from typing import Any

import pytest

from agentkeep import (
    Content,
    CorruptRecordError,
    Message,
    SchemaVersionError,
    StorageClosedError,
    UsageDetails,
)
from agentkeep.storage import MessageStore, Summary


def _turn(i: int, *, tag: str = "") -> list[Message]:
    return [
        Message("user", [f"{tag}question {i}"]),
        Message("assistant", [f"{tag}answer {i}"], author_name="bot"),
    ]


def _rich_messages() -> list[Message]:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    return [
        Message("system", ["be brief"], message_id="sys-1", created_at=when),
        Message("user", ["héllo wörld ✓ 🎉"], additional_properties={"k": [1, 2]}),
        Message(
            "assistant",
            [
                Content.from_text_reasoning("thinking"),
                Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"}),
                Content.from_function_call("c2", "get_time", arguments='{"tz": "UTC"}'),
            ],
            author_name="agent",
        ),
        Message(
            "tool",
            [
                Content.from_function_result("c1", result={"temp": 18, "sky": ["sunny"]}),
                Content.from_function_result("c2", exception="ValueError: bad tz"),
            ],
        ),
        Message(
            "assistant",
            [
                Content.from_text("It is sunny."),
                Content.from_data(b"\x00\x01binary", "application/octet-stream"),
                Content.from_uri("https://example.com/a.png", "image/png"),
                Content.from_usage(UsageDetails(3, 4, 7)),
                Content.from_error("partial", error_code="E1"),
            ],
        ),
    ]


def _texts(entries: Any) -> list[str]:
    return [entry.message.text for entry in entries]


async def test_append_assigns_increasing_seqs_and_reads_oldest_first(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        assert store.backend == backend.NAME
        assert await store.append("c", _turn(1)) == [1, 2]
        assert await store.append("c", _turn(2)) == [3, 4]
        entries = await store.read("c")
        assert [e.seq for e in entries] == [1, 2, 3, 4]
        assert _texts(entries) == ["question 1", "answer 1", "question 2", "answer 2"]
        assert not any(e.excluded or e.replaces for e in entries)


async def test_messages_round_trip_losslessly(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        messages = _rich_messages()
        await store.append("rich", messages)
        stored = [e.message for e in await store.read("rich")]
        assert stored == messages  # ids and times were assigned on the caller's objects
        assert all(m.message_id and m.created_at for m in stored)
        assert stored[0].message_id == "sys-1"
        assert stored[0].created_at == datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


async def test_non_utc_times_keep_their_instant(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        when = datetime(2026, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
        await store.append("tz", [Message("user", ["x"], created_at=when)])
        [entry] = await store.read("tz")
        assert entry.message.created_at == when


async def test_read_windows(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        for i in range(5):
            await store.append("w", _turn(i))
        assert [e.seq for e in await store.read("w", last=3)] == [8, 9, 10]
        assert [e.seq for e in await store.read("w", after=7)] == [8, 9, 10]
        assert [e.seq for e in await store.read("w", after=2, last=2)] == [9, 10]
        assert await store.read("w", after=10) == []
        assert await store.read("w", last=0) == []
        assert await store.read("missing") == []


async def test_retried_append_stores_nothing_twice(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        turn = _turn(1)
        first = await store.append("r", turn)
        await store.append("r", _turn(2))
        assert await store.append("r", turn) == first
        assert len(await store.read("r")) == 4


async def test_a_failed_append_stores_nothing(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        await store.append("f", _turn(1))
        bad = [
            Message("user", ["fine"]),
            Message("tool", [Content.from_function_result("x", result=object())]),
        ]
        with pytest.raises((TypeError, ValueError)):
            await store.append("f", bad)
        assert _texts(await store.read("f")) == ["question 1", "answer 1"]
        assert await store.append("f", _turn(2)) == [3, 4]


async def test_conversations_are_separate(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        odd_ids = ["a", "b:c", "../../etc/passwd", "space and/slash", "ünïcode ✓", "x" * 200]
        for index, conversation in enumerate(odd_ids):
            await store.append(conversation, [Message("user", [f"for {index}"])])
        for index, conversation in enumerate(odd_ids):
            assert _texts(await store.read(conversation)) == [f"for {index}"]


async def test_view_without_compaction_is_the_log(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        await store.append("v", _turn(1) + _turn(2))
        view = await store.read_view("v")
        assert view.epoch == 0
        assert view.last_seq == 4
        assert _texts(view.entries) == _texts(await store.read("v"))
        empty = await store.read_view("nothing")
        assert (empty.entries, empty.epoch, empty.last_seq) == ([], 0, 0)


async def test_compaction_excludes_and_places_summaries(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        for i in range(4):
            await store.append("k", _turn(i))
        raw = await store.read("k")
        old = [e.message.message_id or "" for e in raw[:4]]
        summary = Message("assistant", ["[summary of turns 0-1]"])
        epoch = await store.record_compaction("k", excluded=old, summaries=[Summary(summary, old)])
        assert epoch == 1
        view = await store.read_view("k")
        assert view.epoch == 1
        assert _texts(view.entries) == [
            "[summary of turns 0-1]",
            "question 2",
            "answer 2",
            "question 3",
            "answer 3",
        ]
        assert view.entries[0].replaces == tuple(old)
        assert view.entries[0].is_summary
        assert view.last_seq == 9  # the summary took the next sequence number
        # originals are kept, marked
        raw_after = await store.read("k")
        assert [e.excluded for e in raw_after] == [True] * 4 + [False] * 4
        assert _texts(raw_after) == _texts(raw)
        # windows of the view count summaries
        assert _texts((await store.read_view("k", last=2)).entries) == ["question 3", "answer 3"]
        assert len((await store.read_view("k", last=5)).entries) == 5
        assert _texts((await store.read_view("k", last=5)).entries)[0] == "[summary of turns 0-1]"


async def test_summary_of_a_summary_and_middle_exclusions(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        for i in range(3):
            await store.append("m", _turn(i))
        raw = await store.read("m")
        ids = [e.message.message_id or "" for e in raw]
        first = Message("assistant", ["S1"])
        await store.record_compaction("m", excluded=ids[:2], summaries=[Summary(first, ids[:2])])
        # exclude a message in the middle only
        await store.record_compaction("m", excluded=[ids[3]])
        assert _texts((await store.read_view("m")).entries) == ["S1", "question 1", "question 2", "answer 2"]
        second = Message("assistant", ["S2"])
        replaced = [first.message_id or "", ids[2]]
        epoch = await store.record_compaction("m", excluded=replaced, summaries=[Summary(second, replaced)])
        assert epoch == 3
        assert _texts((await store.read_view("m")).entries) == ["S2", "question 2", "answer 2"]


async def test_compaction_edge_cases(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        await store.append("e", _turn(1))
        with pytest.raises(ValueError, match="replaces"):
            await store.record_compaction("e", summaries=[Summary(Message("assistant", ["s"]), ["nope"])])
        assert (await store.read_view("e")).epoch == 0  # nothing recorded
        await store.record_compaction("e", excluded=["unknown-id"])
        assert len((await store.read_view("e")).entries) == 2
        # recording the same summary twice (a retry) adds it once
        [first, _] = await store.read("e")
        summary = Summary(Message("assistant", ["s"]), [first.message.message_id or ""])
        await store.record_compaction("e", summaries=[summary])
        await store.record_compaction("e", summaries=[summary])
        assert _texts((await store.read_view("e")).entries).count("s") == 1


async def test_incremental_view_reads(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        await store.append("i", _turn(1))
        cached = await store.read_view("i")
        await store.append("i", _turn(2))
        update = await store.read_view("i", after=cached.last_seq)
        assert update.epoch == cached.epoch
        assert _texts(update.entries) == ["question 2", "answer 2"]
        assert update.last_seq == 4


async def test_delete_purges_everything(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        await store.append("d", _turn(1))
        [first, _] = await store.read("d")
        await store.record_compaction(
            "d", summaries=[Summary(Message("assistant", ["s"]), [first.message.message_id or ""])]
        )
        await store.append("keep", _turn(9))
        assert await store.delete("d") is True
        assert await store.delete("d") is False
        assert await store.read("d") == []
        view = await store.read_view("d")
        assert (view.entries, view.epoch, view.last_seq) == ([], 0, 0)
        assert await store.append("d", _turn(2)) == [1, 2]  # a new conversation
        assert len(await store.read("keep")) == 2


async def test_expire_and_ttl(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        await store.append("x", _turn(1))
        await store.append("y", _turn(1))
        assert await store.expire("x", 0.3) is True
        assert await store.expire("y", None) is True
        assert await store.expire("missing", 1) is False
        await asyncio.sleep(0.6)
        assert await store.read("x") == []
        assert len(await store.read("y")) == 2
    async with backend.open_store(ttl=0.5) as store:
        await store.append("t", _turn(1))
        await asyncio.sleep(0.3)
        await store.append("t", _turn(2))  # refreshes the time to live
        await asyncio.sleep(0.3)
        assert len(await store.read("t")) == 4
        await asyncio.sleep(0.5)
        assert await store.read("t") == []


async def test_max_messages_keeps_the_newest(backend: ModuleType) -> None:
    async with backend.open_store(max_messages=5) as store:
        for i in range(4):
            await store.append("n", _turn(i))
        entries = await store.read("n")
        assert [e.seq for e in entries] == [4, 5, 6, 7, 8]
        assert [e.seq for e in (await store.read_view("n")).entries] == [4, 5, 6, 7, 8]


async def test_setup_is_idempotent_and_closed_stores_refuse_work(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        await store.setup()
        await store.setup()
        await store.append("s", _turn(1))
        await store.aclose()
        await store.aclose()
        with pytest.raises(StorageClosedError):
            await store.read("s")
        with pytest.raises(StorageClosedError):
            await store.append("s", _turn(2))


async def test_corrupt_records_are_reported_not_skipped(backend: ModuleType) -> None:
    corrupt = getattr(backend, "corrupt", None)
    if corrupt is None:
        pytest.skip(f"{backend.NAME} keeps objects, not records: nothing can be corrupted")
    async with backend.open_store() as store:
        await store.append("bad", _turn(1) + _turn(2))
        await corrupt(store, "bad", 3)
        with pytest.raises(CorruptRecordError) as caught:
            await store.read("bad")
        assert caught.value.conversation_id == "bad"
        assert caught.value.seq == 3
        assert caught.value.backend == backend.NAME
        with pytest.raises(CorruptRecordError):
            await store.read_view("bad")
        assert _texts(await store.read("bad", last=1)) == ["answer 2"]  # other records still read


async def test_data_from_a_newer_version_is_refused(backend: ModuleType) -> None:
    mark = getattr(backend, "mark_newer_version", None)
    if mark is None:
        pytest.skip(f"{backend.NAME} stores nothing that outlives the process")
    async with backend.open_store() as store:
        await store.append("v", _turn(1))
        await mark(store)
        fresh: MessageStore = backend.store_from_spec(backend.spec_of(store))
        try:
            with pytest.raises(SchemaVersionError):
                await fresh.setup()
        finally:
            await fresh.aclose()


async def test_list_conversations_newest_activity_first(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        assert await store.list_conversations() == []
        base = datetime(2026, 1, 1, tzinfo=UTC)
        for index, name in enumerate(["old", "new", "mid"]):
            when = base + timedelta(days={"old": 0, "new": 2, "mid": 1}[name])
            await store.append(
                name, [Message("user", [f"{index}"], created_at=when) for _ in range(index + 1)]
            )
        listed = await store.list_conversations()
        assert [info.conversation_id for info in listed] == ["new", "mid", "old"]
        by_id = {info.conversation_id: info for info in listed}
        assert by_id["mid"].message_count == 3
        assert by_id["mid"].last_seq == 3
        assert by_id["new"].updated_at == base + timedelta(days=2)
        assert [info.conversation_id for info in await store.list_conversations(limit=1)] == ["new"]
        await store.delete("new")
        assert [info.conversation_id for info in await store.list_conversations()] == ["mid", "old"]
