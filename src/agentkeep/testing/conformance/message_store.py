"""The message-store contract as checks: what every :class:`~agentkeep.message_stores.base.MessageStore` does.

Describe your backend with a :class:`MessageStoreBackend` (how to open a fresh, isolated store,
and the optional hooks that let the suite corrupt records or fake a newer version), then run
:func:`~agentkeep.testing.conformance.message_store_checks` against it. The core checks run on
every backend; a check about an optional capability (:class:`~agentkeep.message_stores.base.SupportsSetup`,
``SupportsClose``, ``SupportsListing``, ``SupportsExpiry``, ``SupportsPurge``) runs when the
store declares it (implements that protocol) and is *not applicable* otherwise.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from ...contents import Content, UsageDetails
from ...errors import (
    CorruptRecordError,
    ListingCursorError,
    MessageFormatError,
    MessageIdConflictError,
    SchemaVersionError,
    StorageClosedError,
)
from ...message_stores import base as contract
from ...message_stores import codec
from ...message_stores.base import MessageStore, StoredMessage, Summary
from ...message_stores.memory import InMemoryMessageStore
from ...messages import Message
from ._checks import ConformanceCheck, NotApplicable, check_list, expect, expect_equal, expect_raises

__all__ = ["MESSAGE_STORE_CHECKS", "MessageStoreBackend", "texts", "turn"]


@dataclass(frozen=True, slots=True)
class MessageStoreBackend:
    """How the suite gets the stores of one backend.

    Attributes:
        name: The backend's name (what ``store.backend`` says).
        open: ``open(**options)``: an async context manager giving a fresh, isolated, empty store
            (its own file, key prefix or schema), set up, and removed afterwards. ``options`` are
            the retention settings ``max_messages`` and ``ttl`` when the checks use them.
        max_messages: Whether ``open`` takes ``max_messages`` (the trimming checks run then).
        corrupt: ``await corrupt(store, conversation_id, seq)`` overwrites that stored message's
            record with bytes that do not decode (``None``: the backend keeps objects, not
            records, so nothing can be corrupted).
        corrupt_summaries: ``await corrupt_summaries(store, conversation_id)`` makes the stored
            summaries of that conversation undecodable.
        mark_newer_version: ``await mark_newer_version(store)`` makes the stored data claim a
            newer format or schema version than this agentkeep knows.
        tamper: ``await tamper(store, conversation_id, seq, change)`` replaces that stored
            message's record (the bytes the backend keeps for it, as they are stored) with
            ``change(record)``: how the suite flips bits and truncates records.
        reopen: ``reopen(store)``: a new store object on the same data, not set up yet (the
            suite closes it).
    """

    name: str
    open: Callable[..., AbstractAsyncContextManager[MessageStore]]
    max_messages: bool = True
    corrupt: Callable[[MessageStore, str, int], Awaitable[None]] | None = None
    corrupt_summaries: Callable[[MessageStore, str], Awaitable[None]] | None = None
    mark_newer_version: Callable[[MessageStore], Awaitable[None]] | None = None
    tamper: Callable[[MessageStore, str, int, Callable[[bytes], bytes]], Awaitable[None]] | None = None
    reopen: Callable[[MessageStore], MessageStore] | None = None


MESSAGE_STORE_CHECKS: list[ConformanceCheck[MessageStoreBackend]] = []
"""The store-level checks, in the order they run (see also the history-provider checks)."""

_check = check_list(MESSAGE_STORE_CHECKS)


def turn(i: int, *, tag: str = "") -> list[Message]:
    """Turn ``i``: ``question i`` then ``answer i``."""
    return [
        Message("user", [f"{tag}question {i}"]),
        Message("assistant", [f"{tag}answer {i}"], author_name="bot"),
    ]


def texts(entries: Any) -> list[str]:
    """The texts of stored entries (or of messages)."""
    return [getattr(entry, "message", entry).text for entry in entries]


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


async def _raw(store: MessageStore, conversation_id: str, **window: Any) -> list[StoredMessage]:
    return (await store.read(conversation_id, raw=True, **window)).entries


def _ids(entries: list[StoredMessage]) -> list[str]:
    return [entry.message.message_id or "" for entry in entries]


# -- appending and reading ---------------------------------------------------------------------


@_check
async def append_assigns_increasing_seqs(backend: MessageStoreBackend) -> None:
    """Appends get per-conversation sequence numbers from 1; the raw log reads oldest first."""
    async with backend.open() as store:
        expect_equal(store.backend, backend.name, "store.backend")
        expect_equal(await store.append("c", turn(1)), [1, 2], "seqs of the first append")
        expect_equal(await store.append("c", turn(2)), [3, 4], "seqs of the second append")
        entries = await _raw(store, "c")
        expect_equal([e.seq for e in entries], [1, 2, 3, 4], "seqs read back")
        expect_equal(texts(entries), ["question 1", "answer 1", "question 2", "answer 2"], "texts read back")
        expect(
            not any(e.excluded or e.replaces for e in entries),
            "fresh entries are neither excluded nor summaries",
        )


@_check
async def messages_round_trip_losslessly(backend: MessageStoreBackend) -> None:
    """Every kind of content, ids, times, authors and properties come back equal."""
    async with backend.open() as store:
        messages = _rich_messages()
        await store.append("rich", messages)
        stored = [e.message for e in await _raw(store, "rich")]
        expect_equal(stored, messages, "messages read back")
        expect(all(m.message_id and m.created_at for m in stored), "stored messages have ids and times")
        expect_equal(stored[0].message_id, "sys-1", "a given message id")
        expect_equal(stored[0].created_at, datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "a given time")


@_check
async def non_utc_times_keep_their_instant(backend: MessageStoreBackend) -> None:
    """A time with another offset reads back as the same instant."""
    async with backend.open() as store:
        when = datetime(2026, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
        await store.append("tz", [Message("user", ["x"], created_at=when)])
        [entry] = await _raw(store, "tz")
        expect_equal(entry.message.created_at, when, "the time read back")


@_check
async def times_a_record_cannot_hold_are_refused(backend: MessageStoreBackend) -> None:
    """A time whose instant lies outside the UTC years 1-9999 (an extreme offset at either end) or
    that has no timezone is refused with ``MessageFormatError`` before anything is written; the
    conversation stays readable."""
    async with backend.open() as store:
        await store.append("t", turn(1))
        for text in ("0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59"):
            message = Message("user", ["poison"])
            message.created_at = datetime.fromisoformat(text)  # set after construction, unchecked
            with expect_raises(MessageFormatError, f"appending a message made at {text}"):
                await store.append("t", [Message("user", ["fine"]), message])
        naive = Message("user", ["naive"])
        naive.created_at = datetime(2026, 1, 1)  # no timezone: the point of the check
        with expect_raises(MessageFormatError, "appending a message with a naive time"):
            await store.append("t", [naive])
        expect_equal(texts(await _raw(store, "t")), ["question 1", "answer 1"], "what is stored")
        edge = datetime(1, 1, 1, tzinfo=UTC)
        await store.append("t", [Message("user", ["edge"], created_at=edge)])
        expect_equal((await _raw(store, "t"))[-1].message.created_at, edge, "the earliest time")


@_check
async def raw_reads_honour_windows(backend: MessageStoreBackend) -> None:
    """``last`` and ``after`` bound raw reads; unknown conversations read as empty."""
    async with backend.open() as store:
        for i in range(5):
            await store.append("w", turn(i))
        expect_equal([e.seq for e in await _raw(store, "w", last=3)], [8, 9, 10], "last=3")
        expect_equal([e.seq for e in await _raw(store, "w", after=7)], [8, 9, 10], "after=7")
        expect_equal([e.seq for e in await _raw(store, "w", after=2, last=2)], [9, 10], "after=2, last=2")
        expect_equal(await _raw(store, "w", after=10), [], "after the last seq")
        expect_equal(await _raw(store, "w", last=0), [], "last=0")
        expect_equal(await _raw(store, "missing"), [], "an unknown conversation")


@_check
async def a_retried_append_stores_nothing_twice(backend: MessageStoreBackend) -> None:
    """Appending a batch again (a retry) returns its original seqs and stores nothing."""
    async with backend.open() as store:
        first_turn = turn(1)
        first = await store.append("r", first_turn)
        await store.append("r", turn(2))
        expect_equal(await store.append("r", first_turn), first, "seqs of the retried batch")
        expect_equal(len(await _raw(store, "r")), 4, "messages stored")


@_check
async def a_reused_message_id_is_refused_not_dropped(backend: MessageStoreBackend) -> None:
    """A batch that reuses a stored id for other content, or one id twice, raises
    ``MessageIdConflictError`` and stores nothing; the same batch again (new objects, same ids and
    content, times stamped anew) is a retry, stored once."""
    async with backend.open() as store:

        def batch(i: int, *ids: str) -> list[Message]:
            return [
                Message("user", [f"turn {i}"], message_id=ids[0]),
                Message("assistant", [f"reply {i}"], message_id=ids[1]),
            ]

        expect_equal(await store.append("ids", batch(1, "u1", "a1")), [1, 2], "seqs of the first turn")
        for label, reused in (
            ("the first id again for another turn", batch(2, "u1", "a2")),
            ("a later id of the batch stored already", batch(2, "u2", "a1")),
            ("one id twice in the batch", batch(2, "u2", "u2")),
            (
                "a retry with other content",
                [Message("user", ["turn 1, edited"], message_id="u1"), batch(1, "u1", "a1")[1]],
            ),
        ):
            with expect_raises(MessageIdConflictError, f"appending {label}") as caught:
                await store.append("ids", reused)
            error = caught.error
            assert isinstance(error, MessageIdConflictError)
            expect(error.conversation_id == "ids", f"{label}: the error names the conversation")
            expect(error.message_id in ("u1", "a1", "u2"), f"{label}: the error names the id")
        expect_equal(texts(await _raw(store, "ids")), ["turn 1", "reply 1"], "what is stored")
        expect_equal(
            await store.append("ids", batch(1, "u1", "a1")), [1, 2], "seqs of a retry with new objects"
        )
        expect_equal(await store.append("ids", batch(2, "u2", "a2")), [3, 4], "seqs of the next turn")
        expect_equal(len(await _raw(store, "ids")), 4, "messages stored")


@_check
async def a_failed_append_stores_nothing(backend: MessageStoreBackend) -> None:
    """A batch with an unstorable message fails whole and leaves the conversation as it was."""
    async with backend.open() as store:
        await store.append("f", turn(1))
        bad = [
            Message("user", ["fine"]),
            Message("tool", [Content.from_function_result("x", result=object())]),
        ]
        with expect_raises(MessageFormatError, "appending an unstorable value"):
            await store.append("f", bad)
        expect_equal(texts(await _raw(store, "f")), ["question 1", "answer 1"], "what is stored")
        expect_equal(await store.append("f", turn(2)), [3, 4], "seqs of the next append")


@_check
async def conversations_are_separate(backend: MessageStoreBackend) -> None:
    """Odd conversation ids never reach each other's messages."""
    async with backend.open() as store:
        odd_ids = ["a", "b:c", "../../etc/passwd", "space and/slash", "ünïcode ✓", "x" * 200, "{a}", "*"]
        for index, conversation in enumerate(odd_ids):
            await store.append(conversation, [Message("user", [f"for {index}"])])
        for index, conversation in enumerate(odd_ids):
            expect_equal(
                texts(await _raw(store, conversation)), [f"for {index}"], f"conversation {conversation!r}"
            )


# -- the view and compaction -------------------------------------------------------------------


@_check
async def the_view_of_an_uncompacted_conversation_is_the_log(backend: MessageStoreBackend) -> None:
    """Before any compaction the view holds the log, at epoch 0, with the last seq."""
    async with backend.open() as store:
        await store.append("v", turn(1) + turn(2))
        view = await store.read("v")
        expect_equal((view.epoch, view.last_seq), (0, 4), "epoch and last_seq")
        expect_equal(texts(view.entries), texts(await _raw(store, "v")), "view texts")
        empty = await store.read("nothing")
        expect_equal((empty.entries, empty.epoch, empty.last_seq), ([], 0, 0), "an unknown conversation")


@_check
async def compaction_excludes_and_places_summaries(backend: MessageStoreBackend) -> None:
    """A recorded compaction excludes originals (kept in the log) and puts the summary in place."""
    async with backend.open() as store:
        for i in range(4):
            await store.append("k", turn(i))
        raw = await _raw(store, "k")
        old = _ids(raw[:4])
        summary = Message("assistant", ["[summary of turns 0-1]"])
        expect_equal(
            await store.record_compaction("k", excluded=old, summaries=[Summary(summary, old)]), 1, "epoch"
        )
        view = await store.read("k")
        expect_equal(view.epoch, 1, "the view's epoch")
        expected = ["[summary of turns 0-1]", "question 2", "answer 2", "question 3", "answer 3"]
        expect_equal(texts(view.entries), expected, "the view")
        expect_equal(view.entries[0].replaces, tuple(old), "what the summary replaces")
        expect(view.entries[0].is_summary, "the summary entry is marked as one")
        expect_equal(view.last_seq, 9, "last_seq (the summary took the next seq)")
        raw_after = await _raw(store, "k")
        expect_equal([e.excluded for e in raw_after], [True] * 4 + [False] * 4, "excluded flags in the log")
        expect_equal(texts(raw_after), texts(raw), "the log keeps every original")
        expect_equal(
            texts((await store.read("k", last=2)).entries), ["question 3", "answer 3"], "view last=2"
        )
        last_five = (await store.read("k", last=5)).entries
        expect_equal(len(last_five), 5, "view last=5 counts the summary")
        expect_equal(texts(last_five)[0], "[summary of turns 0-1]", "view last=5 starts with the summary")


@_check
async def summaries_of_summaries_and_middle_exclusions(backend: MessageStoreBackend) -> None:
    """A summary can replace another summary; a message in the middle can be excluded alone."""
    async with backend.open() as store:
        for i in range(3):
            await store.append("m", turn(i))
        ids = _ids(await _raw(store, "m"))
        first = Message("assistant", ["S1"])
        await store.record_compaction("m", excluded=ids[:2], summaries=[Summary(first, ids[:2])])
        await store.record_compaction("m", excluded=[ids[3]])
        view = texts((await store.read("m")).entries)
        expect_equal(view, ["S1", "question 1", "question 2", "answer 2"], "after excluding a middle message")
        second = Message("assistant", ["S2"])
        replaced = [first.message_id or "", ids[2]]
        epoch = await store.record_compaction("m", excluded=replaced, summaries=[Summary(second, replaced)])
        expect_equal(epoch, 3, "epoch after three compactions")
        expect_equal(texts((await store.read("m")).entries), ["S2", "question 2", "answer 2"], "the view")


@_check
async def compaction_edge_cases(backend: MessageStoreBackend) -> None:
    """A summary of nothing stored is refused; unknown exclusions are ignored; retries add once."""
    async with backend.open() as store:
        await store.append("e", turn(1))
        with expect_raises(ValueError, "a summary replacing no stored message", match="replaces"):
            await store.record_compaction("e", summaries=[Summary(Message("assistant", ["s"]), ["nope"])])
        expect_equal((await store.read("e")).epoch, 0, "epoch after a refused compaction")
        await store.record_compaction("e", excluded=["unknown-id"])
        expect_equal(len((await store.read("e")).entries), 2, "view after excluding an unknown id")
        [first, _] = await _raw(store, "e")
        summary = Summary(Message("assistant", ["s"]), [first.message.message_id or ""])
        await store.record_compaction("e", summaries=[summary])
        await store.record_compaction("e", summaries=[summary])
        expect_equal(texts((await store.read("e")).entries).count("s"), 1, "a summary recorded twice")


@_check
async def a_summary_reusing_a_stored_id_is_refused(backend: MessageStoreBackend) -> None:
    """A summary given the id of a stored message (replaced by it, or not) or of another summary
    raises MessageIdConflictError, and nothing of that compaction is recorded; the same summary
    recorded again is a retry."""
    async with backend.open() as store:
        for i in range(3):
            await store.append("s", turn(i))
        before = await store.read("s")
        ids = _ids(await _raw(store, "s"))
        clashes = {
            "a message it replaces": ids[0],
            "a stored message it does not replace": ids[5],
        }
        for what, clashing in clashes.items():
            summary = Summary(Message("assistant", ["[summary]"], message_id=clashing), ids[:4])
            with expect_raises(MessageIdConflictError, f"a summary with the id of {what}") as raised:
                await store.record_compaction("s", excluded=ids[:4], summaries=[summary])
            error = raised.error
            assert isinstance(error, MessageIdConflictError)
            expect_equal((error.conversation_id, error.message_id), ("s", clashing), "the error")
            after = await store.read("s")
            expect_equal((after.epoch, _shape(after.entries)), (before.epoch, _shape(before.entries)), what)
        first = Summary(Message("assistant", ["S1"]), ids[:2])
        await store.record_compaction("s", excluded=ids[:2], summaries=[first])
        await store.record_compaction("s", excluded=ids[:2], summaries=[first])  # a retry
        recorded = await store.read("s")
        other = Summary(Message("assistant", ["S2"], message_id=first.message.message_id), ids[2:4])
        with expect_raises(MessageIdConflictError, "a summary with the id of another summary"):
            await store.record_compaction("s", excluded=ids[2:4], summaries=[other])
        after = await store.read("s")
        expect_equal(_shape(after.entries), _shape(recorded.entries), "the view after the refused summary")
        expect_equal(texts(after.entries), ["S1", *texts(before.entries)[2:]], "the view")
        twins = [
            Summary(Message("assistant", ["T1"], message_id="twin"), ids[2:3]),
            Summary(Message("assistant", ["T2"], message_id="twin"), ids[3:4]),
        ]
        with expect_raises(MessageIdConflictError, "two summaries of one compaction with one id"):
            await store.record_compaction("s", excluded=ids[2:4], summaries=twins)
        expect_equal(_shape((await store.read("s")).entries), _shape(after.entries), "after the twins")


@_check
async def view_reads_after_a_seq_give_what_is_new(backend: MessageStoreBackend) -> None:
    """``after=last_seq`` of a cached view gives exactly the messages appended since."""
    async with backend.open() as store:
        await store.append("i", turn(1))
        cached = await store.read("i")
        await store.append("i", turn(2))
        update = await store.read("i", after=cached.last_seq)
        expect_equal(update.epoch, cached.epoch, "the epoch")
        expect_equal(texts(update.entries), ["question 2", "answer 2"], "what is new")
        expect_equal(update.last_seq, 4, "last_seq")


@_check
async def delete_removes_everything(backend: MessageStoreBackend) -> None:
    """Delete removes messages and summaries; the id starts a new conversation afterwards."""
    async with backend.open() as store:
        await store.append("d", turn(1))
        [first, _] = await _raw(store, "d")
        summary = Summary(Message("assistant", ["s"]), [first.message.message_id or ""])
        await store.record_compaction("d", summaries=[summary])
        await store.append("keep", turn(9))
        expect_equal(await store.delete("d"), True, "deleting a stored conversation")
        expect_equal(await store.delete("d"), False, "deleting it again")
        expect_equal(await _raw(store, "d"), [], "its log")
        view = await store.read("d")
        expect_equal((view.entries, view.epoch, view.last_seq), ([], 0, 0), "its view")
        expect_equal(await store.append("d", turn(2)), [1, 2], "seqs of a new conversation")
        expect_equal(len(await _raw(store, "keep")), 2, "another conversation")


@_check
async def corrupt_records_are_reported_not_skipped(backend: MessageStoreBackend) -> None:
    """A record that does not decode raises CorruptRecordError naming conversation and seq."""
    if backend.corrupt is None:
        raise NotApplicable(f"{backend.name} keeps objects, not records: nothing can be corrupted")
    async with backend.open() as store:
        await store.append("bad", turn(1) + turn(2))
        await backend.corrupt(store, "bad", 3)
        with expect_raises(CorruptRecordError, "reading the log") as raised:
            await store.read("bad", raw=True)
        error = raised.error
        assert isinstance(error, CorruptRecordError)
        expect_equal((error.conversation_id, error.seq, error.backend), ("bad", 3, backend.name), "the error")
        with expect_raises(CorruptRecordError, "reading the view"):
            await store.read("bad")
        expect_equal(texts(await _raw(store, "bad", last=1)), ["answer 2"], "other records still read")


@_check
async def changed_records_are_detected_not_returned(backend: MessageStoreBackend) -> None:
    """Every single-bit flip and every truncation of a stored record raises CorruptRecordError
    (records carry a checksum); the record restored reads as before."""
    if backend.tamper is None:
        raise NotApplicable(f"{backend.name} gives the suite no way to change a stored record")
    async with backend.open() as store:
        await store.append("sum", [Message("user", ["pay 100 EUR"]), Message("assistant", ["ok"])])
        original: list[bytes] = []

        def keep(record: bytes) -> bytes:
            original.append(record)
            return record

        await backend.tamper(store, "sum", 1, keep)
        [record] = original
        changes: list[tuple[str, bytes]] = []
        for bit in range(len(record) * 8):
            flipped = bytearray(record)
            flipped[bit // 8] ^= 1 << (bit % 8)
            changes.append((f"bit {bit} flipped", bytes(flipped)))
        changes += [(f"cut to {size} bytes", record[:size]) for size in range(len(record))]
        for label, changed in changes:
            await backend.tamper(store, "sum", 1, lambda _, changed=changed: changed)
            with expect_raises(CorruptRecordError, f"reading a record with {label}"):
                await store.read("sum", raw=True)
        await backend.tamper(store, "sum", 1, lambda _: record)
        expect_equal(texts(await _raw(store, "sum")), ["pay 100 EUR", "ok"], "the restored record")


def _damaged_bodies(key: codec.RecordKey, message_id: bytes, created_at: int) -> dict[str, bytes]:
    """Record bodies whose checksum (if any) holds but whose inside is damaged: lengths that run
    past the end, nesting no stored message has."""
    deep = b"\x02" + b"\x91" * 100_000 + b"\xc0"  # MessagePack: a list in a list ... 100,000 deep
    return {
        "an author name running past the end (format 1)": b"\x03\x01\xf0ab",
        "an author name running past the end (sealed)": codec.seal(
            key, message_id, created_at, b"\x03\x01\xf0ab"
        ),
        "an author name running into the seal": codec.seal(key, message_id, created_at, b"\x03\x01\x05ab"),
        "a key id running past the end (sealed)": codec.seal(key, message_id, created_at, b"\x06\x20kid"),
        "MessagePack nested 100,000 deep (format 1)": deep,
        "MessagePack nested 100,000 deep (sealed)": codec.seal(key, message_id, created_at, deep),
    }


@_check
async def records_damaged_inside_a_valid_seal_are_reported(backend: MessageStoreBackend) -> None:
    """A record whose lengths run past its end, or nested deeper than any stored message, raises
    CorruptRecordError naming conversation and seq, with or without a valid seal."""
    if backend.tamper is None:
        raise NotApplicable(f"{backend.name} gives the suite no way to change a stored record")
    async with backend.open() as store:
        message = Message("user", ["hello"], author_name="ab")
        await store.append("len", [message, Message("assistant", ["ok"])])
        message_id, created_at = codec.encode_identity(message)
        key = codec.seal_key("len")
        stored = codec.seal(key, message_id, created_at, codec.encode_body(message))
        for label, body in _damaged_bodies(key, message_id, created_at).items():

            def change(record: bytes, body: bytes = body, previous: bytes = stored) -> bytes:
                if not record.endswith(previous):
                    raise NotApplicable(f"{backend.name} does not keep plain sealed records")
                return record[: len(record) - len(previous)] + body

            await backend.tamper(store, "len", 1, change)
            stored = body
            with expect_raises(CorruptRecordError, f"reading a record with {label}") as raised:
                await store.read("len", raw=True)
            error = raised.error
            assert isinstance(error, CorruptRecordError)
            expect_equal((error.conversation_id, error.seq), ("len", 1), f"the error for {label}")
            with expect_raises(CorruptRecordError, f"reading the view with {label}"):
                await store.read("len")
        original = codec.seal(key, message_id, created_at, codec.encode_body(message))
        await backend.tamper(store, "len", 1, lambda record: record[: len(record) - len(stored)] + original)
        expect_equal(texts(await _raw(store, "len")), ["hello", "ok"], "the restored record")


@_check
async def a_corrupt_summary_is_reported_with_its_seq(backend: MessageStoreBackend) -> None:
    """A summary record that does not decode raises CorruptRecordError with its seq."""
    if backend.corrupt_summaries is None:
        raise NotApplicable(f"{backend.name} gives the suite no way to corrupt a summary")
    async with backend.open() as store:
        await store.append("c", turn(1))
        [first, _] = await _raw(store, "c")
        summary = Summary(Message("assistant", ["s"]), [first.message.message_id or ""])
        await store.record_compaction("c", summaries=[summary])
        await backend.corrupt_summaries(store, "c")
        with expect_raises(CorruptRecordError, "reading the view") as raised:
            await store.read("c")
        error = raised.error
        assert isinstance(error, CorruptRecordError)
        expect_equal((error.conversation_id, error.seq), ("c", 3), "the error")


# -- random operations against the reference ---------------------------------------------------


def _shape(entries: list[StoredMessage]) -> list[tuple[int, str, bool, tuple[str, ...]]]:
    return [(e.seq, e.message.text, e.excluded, e.replaces) for e in entries]


async def _agree(reference: MessageStore, store: MessageStore) -> None:
    expect_equal(await _raw(store, "r"), await _raw(reference, "r"), "the raw log")
    expected = await reference.read("r")
    actual = await store.read("r")
    expect_equal(
        (actual.entries, actual.epoch, actual.last_seq),
        (expected.entries, expected.epoch, expected.last_seq),
        "the view",
    )
    raw = await _raw(reference, "r")
    for after in (None, 0, *(e.seq for e in raw[-6:]), expected.last_seq + 1):
        for last in (None, 0, 1, 2, 5, 50):
            for raw_read in (True, False):
                got = await store.read("r", raw=raw_read, last=last, after=after)
                want = await reference.read("r", raw=raw_read, last=last, after=after)
                expect_equal(
                    _shape(got.entries),
                    _shape(want.entries),
                    f"read(raw={raw_read}, last={last}, after={after})",
                )
    if isinstance(store, contract.SupportsListing) and isinstance(reference, contract.SupportsListing):
        expect_equal(await store.list_conversations(), await reference.list_conversations(), "the listing")


def _random_call(rng: random.Random, step: int, state: dict[str, list[Any]]) -> tuple[str, dict[str, Any]]:
    """One random operation (appends, retries, exclusions, summaries) on conversation ``r``."""
    batches, known, summaries = state["batches"], state["known"], state["summaries"]
    kind = rng.random()
    if kind < 0.5 or not known:
        batch = [
            Message(rng.choice(["user", "assistant"]), [f"m{step}.{i}"]) for i in range(rng.randint(1, 3))
        ]
        batches.append(batch)
        known += [m.ensure_identity().message_id or "" for m in batch]
        return "append", {"messages": batch}
    if kind < 0.6:
        return "append", {"messages": rng.choice(batches[-3:])}  # a retry
    if kind < 0.75:
        return "record_compaction", {
            "excluded": [*rng.sample(known, min(len(known), rng.randint(1, 3))), "unknown"]
        }
    if kind < 0.95 or not summaries:
        replaced = rng.sample(known, min(len(known), rng.randint(1, 3)))
        summary = Summary(Message("assistant", [f"summary {step}"]).ensure_identity(), replaced)
        summaries.append(summary)
        known.append(summary.message.message_id or "")
        return "record_compaction", {
            "excluded": replaced if rng.random() < 0.7 else [],
            "summaries": [summary],
        }
    return "record_compaction", {"summaries": [rng.choice(summaries)]}  # a retry


@_check
async def random_operations_match_the_reference(backend: MessageStoreBackend) -> None:
    """Random appends, retries and compactions read back exactly as on the in-memory reference."""
    settings: list[int | None] = [None, 7] if backend.max_messages else [None]
    for seed, max_messages in enumerate(settings * 2, start=1):
        rng = random.Random(seed)
        options = {"max_messages": max_messages} if max_messages is not None else {}
        reference = InMemoryMessageStore(max_messages=max_messages)
        state: dict[str, list[Any]] = {"batches": [], "known": [], "summaries": []}
        async with backend.open(**options) as store:
            for step in range(60):
                name, arguments = _random_call(rng, step, state)
                outcomes: list[Any] = []
                for target in (reference, store):
                    try:
                        outcomes.append(await getattr(target, name)("r", **arguments))
                    except ValueError as exc:
                        outcomes.append(type(exc))
                expect_equal(outcomes[1], outcomes[0], f"seed {seed}, step {step}: {name}")
                if step % 6 == 5:
                    await _agree(reference, store)
            await _agree(reference, store)


# -- optional capabilities ---------------------------------------------------------------------


@_check
async def setup_is_idempotent(backend: MessageStoreBackend) -> None:
    """``setup()`` can run again and again on a store in use."""
    async with backend.open() as store:
        if not isinstance(store, contract.SupportsSetup):
            raise NotApplicable(f"{backend.name} needs no setup")
        await store.setup()
        await store.setup()
        await store.append("s", turn(1))
        expect_equal(len(await _raw(store, "s")), 2, "messages stored after setups")


@_check
async def a_closed_store_refuses_work(backend: MessageStoreBackend) -> None:
    """After ``aclose()`` (idempotent) every operation raises StorageClosedError."""
    async with backend.open() as store:
        if not isinstance(store, contract.SupportsClose):
            raise NotApplicable(f"{backend.name} owns nothing to close")
        await store.append("s", turn(1))
        await store.aclose()
        await store.aclose()
        with expect_raises(StorageClosedError, "reading from a closed store"):
            await store.read("s")
        with expect_raises(StorageClosedError, "appending to a closed store"):
            await store.append("s", turn(2))


@_check
async def data_from_a_newer_version_is_refused(backend: MessageStoreBackend) -> None:
    """A store on data written by a newer format or schema refuses it in ``setup()``."""
    if backend.mark_newer_version is None or backend.reopen is None:
        raise NotApplicable(f"{backend.name} stores nothing that outlives the process")
    async with backend.open() as store:
        await store.append("v", turn(1))
        await backend.mark_newer_version(store)
        fresh = backend.reopen(store)
        try:
            expect(isinstance(fresh, contract.SupportsSetup), "a store with versioned data has setup()")
            assert isinstance(fresh, contract.SupportsSetup)
            with expect_raises(SchemaVersionError, "setting up on newer data"):
                await fresh.setup()
        finally:
            await contract.close_store(fresh)


@_check
async def listing_shows_newest_activity_first(backend: MessageStoreBackend) -> None:
    """``list_conversations`` orders by the newest message's time, counts, limits, forgets deletions."""
    async with backend.open() as store:
        if not isinstance(store, contract.SupportsListing):
            raise NotApplicable(f"{backend.name} does not list conversations")
        expect_equal(await store.list_conversations(), [], "an empty store's listing")
        base = datetime(2026, 1, 1, tzinfo=UTC)
        for index, name in enumerate(["old", "new", "mid"]):
            when = base + timedelta(days={"old": 0, "new": 2, "mid": 1}[name])
            await store.append(
                name, [Message("user", [f"{index}"], created_at=when) for _ in range(index + 1)]
            )
        listed = await store.list_conversations()
        expect_equal([i.conversation_id for i in listed], ["new", "mid", "old"], "the order")
        by_id = {info.conversation_id: info for info in listed}
        expect_equal((by_id["mid"].message_count, by_id["mid"].last_seq), (3, 3), "counts of 'mid'")
        expect_equal(by_id["new"].updated_at, base + timedelta(days=2), "the newest message's time")
        expect_equal([i.conversation_id for i in await store.list_conversations(limit=1)], ["new"], "limit=1")
        expect_equal(await store.list_conversations(limit=0), [], "limit=0")
        await store.delete("new")
        expect_equal(
            [i.conversation_id for i in await store.list_conversations()], ["mid", "old"], "after a deletion"
        )


@_check
async def listing_pages_by_cursor_within_a_tenant(backend: MessageStoreBackend) -> None:
    """Pages joined by cursors list each conversation once, in order; ``tenant`` keeps one
    tenant's keys; equal times order by id; a conversation active again moves to the front."""
    async with backend.open() as store:
        if not isinstance(store, contract.SupportsListing):
            raise NotApplicable(f"{backend.name} does not list conversations")
        base = datetime(2026, 3, 1, tzinfo=UTC)
        names = [f"t1::c{number:02}" for number in range(7)] + ["t2::c00", "t1", "t1:x::c9", "plain"]
        for number, name in enumerate(names):
            minutes = 0 if name.endswith(("c03", "c04")) else number  # two with one time
            await store.append(name, [Message("user", [name], created_at=base + timedelta(minutes=minutes))])
        everything = await store.list_conversations()
        expect_equal(len(everything), len(names), "the whole store's listing")
        expect_equal(
            [info.conversation_id for info in await store.list_conversations(tenant="t2")],
            ["t2::c00"],
            "tenant t2",
        )
        expected = ["t1::c06", "t1::c05", "t1::c02", "t1::c01", "t1::c04", "t1::c03", "t1::c00"]
        pages: list[list[str]] = []
        after: str | None = None
        while True:
            page = await store.list_conversations(tenant="t1", after=after, limit=3)
            if not page:
                break
            pages.append([info.conversation_id for info in page])
            after = page[-1].cursor
        expect_equal(pages, [expected[:3], expected[3:6], expected[6:]], "tenant t1, three to a page")
        expect_equal(await store.list_conversations(tenant="nobody"), [], "a tenant without conversations")
        await store.append("t1::c00", [Message("user", ["again"], created_at=base + timedelta(hours=1))])
        [first] = await store.list_conversations(tenant="t1", limit=1)
        expect_equal(first.conversation_id, "t1::c00", "the conversation active again, first")
        expect_equal(
            [
                info.conversation_id
                for info in await store.list_conversations(tenant="t1", after=first.cursor)
            ],
            expected[:-1],
            "the rest after it",
        )
        with expect_raises(ListingCursorError, "a cursor no listing issued"):
            await store.list_conversations(after="not a cursor!")


@_check
async def expiry_and_ttl(backend: MessageStoreBackend) -> None:
    """``expire`` and the ``ttl`` option make conversations vanish; appends refresh the ttl."""
    async with backend.open() as store:
        if not isinstance(store, contract.SupportsExpiry):
            raise NotApplicable(f"{backend.name} does not expire conversations")
        await store.append("x", turn(1))
        await store.append("y", turn(1))
        expect_equal(await store.expire("x", 0.3), True, "expiring a stored conversation")
        expect_equal(await store.expire("y", None), True, "making one permanent")
        expect_equal(await store.expire("missing", 1), False, "expiring an unknown one")
        await asyncio.sleep(0.6)
        expect_equal(await _raw(store, "x"), [], "an expired conversation")
        expect_equal(len(await _raw(store, "y")), 2, "a permanent one")
    async with backend.open(ttl=0.5) as store:
        await store.append("t", turn(1))
        await asyncio.sleep(0.3)
        await store.append("t", turn(2))  # refreshes the time to live
        await asyncio.sleep(0.3)
        expect_equal(len(await _raw(store, "t")), 4, "a conversation kept alive by an append")
        await asyncio.sleep(0.5)
        expect_equal(await _raw(store, "t"), [], "after the ttl passed")


@_check
async def an_append_to_an_expired_conversation_starts_afresh(backend: MessageStoreBackend) -> None:
    """After expiry the id is a new conversation: seqs from 1, epoch 0, no old summaries."""
    async with backend.open(ttl=0.2) as store:
        if not isinstance(store, contract.SupportsExpiry):
            raise NotApplicable(f"{backend.name} does not expire conversations")
        await store.append("e", turn(1))
        [first, _] = await _raw(store, "e")
        replaced = [first.message.message_id or ""]
        await store.record_compaction(
            "e", excluded=replaced, summaries=[Summary(Message("assistant", ["s"]), replaced)]
        )
        await asyncio.sleep(0.4)
        expect_equal(await store.append("e", turn(2)), [1, 2], "seqs after expiry")
        view = await store.read("e")
        expect_equal(
            (view.epoch, view.last_seq, texts(view.entries)), (0, 2, ["question 2", "answer 2"]), "the view"
        )


@_check
async def listing_skips_expired_conversations_and_counts_after_trims(backend: MessageStoreBackend) -> None:
    """Listing leaves out expired conversations and counts raw messages after trims, not summaries."""
    if not backend.max_messages:
        raise NotApplicable(f"{backend.name} does not trim (max_messages)")
    async with backend.open(max_messages=3) as store:
        if not isinstance(store, contract.SupportsListing) or not isinstance(store, contract.SupportsExpiry):
            raise NotApplicable(f"{backend.name} does not both list and expire conversations")
        day = datetime(2026, 1, 1, tzinfo=UTC)
        for number, name in enumerate(["a", "b", "c"]):
            await store.append(
                name, [Message("user", [name], created_at=day + timedelta(number)) for _ in range(2)]
            )
        await store.append("a", [Message("user", ["a"], created_at=day + timedelta(5)) for _ in range(2)])
        [oldest, *_] = await _raw(store, "a")
        summary = Summary(
            Message("assistant", ["s"], created_at=day + timedelta(9)), [oldest.message.message_id or ""]
        )
        await store.record_compaction("a", summaries=[summary])  # a summary is no message
        expect_equal(await store.expire("b", 0.2), True, "expiring 'b'")
        await asyncio.sleep(0.4)
        listed = [
            (i.conversation_id, i.message_count, i.last_seq, i.updated_at)
            for i in await store.list_conversations()
        ]
        expect_equal(
            listed, [("a", 3, 5, day + timedelta(5)), ("c", 2, 2, day + timedelta(2))], "the listing"
        )


@_check
async def purge_removes_only_expired_conversations(backend: MessageStoreBackend) -> None:
    """``purge_expired`` deletes the expired conversations (once) and keeps the live ones."""
    async with backend.open() as store:
        if not isinstance(store, contract.SupportsPurge) or not isinstance(store, contract.SupportsExpiry):
            raise NotApplicable(f"{backend.name} does not purge expired conversations")
        await store.append("old", turn(1))
        await store.append("kept", turn(1))
        await store.expire("old", 0.2)
        await asyncio.sleep(0.4)
        expect_equal(await store.purge_expired(), 1, "conversations purged")
        expect_equal(await store.purge_expired(), 0, "purged again")
        expect_equal(len(await _raw(store, "kept")), 2, "a live conversation")
        expect_equal(await store.append("old", turn(2)), [1, 2], "seqs of the purged id")


@_check
async def max_messages_keeps_the_newest(backend: MessageStoreBackend) -> None:
    """With ``max_messages`` only the newest raw messages stay, in the log and the view."""
    if not backend.max_messages:
        raise NotApplicable(f"{backend.name} does not trim (max_messages)")
    async with backend.open(max_messages=5) as store:
        for i in range(4):
            await store.append("n", turn(i))
        expect_equal([e.seq for e in await _raw(store, "n")], [4, 5, 6, 7, 8], "seqs in the log")
        expect_equal([e.seq for e in (await store.read("n")).entries], [4, 5, 6, 7, 8], "seqs in the view")
