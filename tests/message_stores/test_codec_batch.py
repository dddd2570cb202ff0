"""Decoding a run of stored records together (``decode_batch``): the same messages as one record
at a time, or ``None`` so the caller decodes them one at a time; never other data."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Content, Message
from agentkeep.encryption import KeyRing
from agentkeep.message_stores.codec import (
    DECODE_ERRORS,
    RecordKey,
    decode_batch,
    decode_message,
    encode_records,
    seal_key,
)

CONVERSATION = "tenant::conversation"
K1, K2 = os.urandom(32), os.urandom(32)
RING = KeyRing({"k1": K1, "k2": K2})
ROTATED = KeyRing({"k1": K1, "k2": K2}, current="k2")
OTHER_RING = KeyRing({"k1": os.urandom(32), "k2": K2})  # k1 of other material
T0 = datetime(2026, 12, 6, 12, tzinfo=UTC)

Records = list[tuple[bytes, int, bytes]]


def records(messages: list[Message], ring: KeyRing | None = None) -> Records:
    return encode_records(CONVERSATION, messages, key_ring=ring)


def one_by_one(key: RecordKey, stored: Records) -> list[Message]:
    return [decode_message(body, message_id, created_at, key=key) for message_id, created_at, body in stored]


def batch(key: RecordKey, stored: Records) -> list[Message] | None:
    return decode_batch(key, [r[0] for r in stored], [r[1] for r in stored], [r[2] for r in stored])


def same(left: list[Message], right: list[Message]) -> None:
    assert [m.to_dict() for m in left] == [m.to_dict() for m in right]
    for a, b in zip(left, right, strict=True):
        assert (a.message_id, a.created_at, a.author_name) == (b.message_id, b.created_at, b.author_name)
        assert type(a.contents[0]) is type(b.contents[0])
        assert a.created_at is not None
        assert a.created_at.tzinfo is UTC


def chat(count: int) -> list[Message]:
    roles = ("user", "assistant", "system", "tool")
    return [
        Message(roles[i % 4], [f"turn {i}: ünïcode ✓ " * (i % 5)], created_at=T0 + timedelta(seconds=i))
        for i in range(count)
    ]


@pytest.mark.parametrize("ring", [None, RING], ids=["plain", "encrypted"])
def test_a_history_of_plain_texts_decodes_as_a_batch_to_the_same_messages(ring: KeyRing | None) -> None:
    stored = records(chat(50), ring)
    decoded = batch(seal_key(CONVERSATION, ring), stored)
    assert decoded is not None
    same(decoded, one_by_one(seal_key(CONVERSATION, ring), stored))


@pytest.mark.parametrize(
    "odd",
    [
        Message("user", ["named"], author_name="ann"),
        Message("tool", [Content.from_function_result("c", result={"a": 1})]),
        Message("user", ["custom id"], message_id="not-an-own-id"),
        Message("user", ["before 1970"], created_at=datetime(1969, 12, 31, tzinfo=UTC)),
        Message("user", ["after 2038"], created_at=datetime(2040, 1, 1, tzinfo=UTC)),
        Message("user", ["x" * 5000]),  # stored deflated
    ],
    ids=["author", "wire", "custom-id", "before-1970", "after-2038", "deflated"],
)
@pytest.mark.parametrize("ring", [None, RING], ids=["plain", "encrypted"])
def test_one_record_of_another_shape_sends_the_batch_one_by_one(odd: Message, ring: KeyRing | None) -> None:
    stored = records([*chat(5), odd, *chat(3)], ring)
    assert batch(seal_key(CONVERSATION, ring), stored) is None
    assert len(one_by_one(seal_key(CONVERSATION, ring), stored)) == 9


def test_mixed_plain_and_encrypted_or_two_keys_go_one_by_one() -> None:
    for stored in (
        records(chat(3)) + records(chat(3), RING),
        records(chat(3), RING) + records(chat(3), ROTATED),
    ):
        assert batch(seal_key(CONVERSATION, RING), stored) is None
        assert len(one_by_one(seal_key(CONVERSATION, RING), stored)) == 6
    rotated = records(chat(3), ROTATED)  # all under the ring's second key: a batch
    decoded = batch(seal_key(CONVERSATION, RING), rotated)
    assert decoded is not None
    same(decoded, one_by_one(seal_key(CONVERSATION, RING), rotated))


def test_a_key_the_ring_lacks_or_other_material_goes_one_by_one_and_fails_there() -> None:
    stored = records(chat(4), RING)
    for ring in (None, KeyRing({"k9": os.urandom(32)}), OTHER_RING):
        key = seal_key(CONVERSATION, ring)
        assert batch(key, stored) is None
        with pytest.raises(DECODE_ERRORS):
            one_by_one(key, stored)


def test_records_of_another_conversation_go_one_by_one_and_fail_there() -> None:
    stored = records(chat(4), RING)
    key = seal_key("tenant::other", RING)
    assert batch(key, stored) is None
    with pytest.raises(DECODE_ERRORS):
        one_by_one(key, stored)


def test_an_empty_batch_is_left_to_the_caller() -> None:
    assert decode_batch(seal_key(CONVERSATION), [], [], []) is None


@given(
    encrypted=st.booleans(),
    count=st.integers(1, 6),
    record=st.integers(0, 5),
    part=st.sampled_from(["id", "time", "body"]),
    bit=st.integers(0, 10_000),
)
@settings(max_examples=300, deadline=None)
def test_every_single_bit_flip_sends_the_batch_one_by_one_where_it_is_found(
    encrypted: bool, count: int, record: int, part: str, bit: int
) -> None:
    ring = RING if encrypted else None
    stored = records(chat(count), ring)
    index = record % count
    message_id, created_at, body = stored[index]
    if part == "id":
        message_id = _flip(message_id, bit)
    elif part == "time":
        created_at ^= 1 << (bit % 40)
    else:
        body = _flip(body, bit)
    stored[index] = (message_id, created_at, body)
    assert batch(seal_key(CONVERSATION, ring), stored) is None
    with pytest.raises(DECODE_ERRORS):
        one_by_one(seal_key(CONVERSATION, ring), stored)


def _flip(data: bytes, bit: int) -> bytes:
    bit %= len(data) * 8
    changed = bytearray(data)
    changed[bit // 8] ^= 1 << (bit % 8)
    return bytes(changed)


@given(
    texts=st.lists(st.text(max_size=60), min_size=1, max_size=8),
    roles=st.lists(st.sampled_from(["user", "assistant", "system", "tool"]), min_size=8, max_size=8),
    seconds=st.lists(st.integers(-(10**9), 3 * 10**9), min_size=8, max_size=8),
    authors=st.lists(st.none() | st.just("ann"), min_size=8, max_size=8),
    encrypted=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_a_batch_is_the_messages_one_by_one_or_none(
    texts: list[str], roles: list[str], seconds: list[int], authors: list[str | None], encrypted: bool
) -> None:
    messages = [
        Message(
            roles[i],  # pyright: ignore[reportArgumentType]
            [text],
            author_name=authors[i],
            created_at=datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds[i], microseconds=i),
        )
        for i, text in enumerate(texts)
    ]
    ring = RING if encrypted else None
    stored = records(messages, ring)
    expected = one_by_one(seal_key(CONVERSATION, ring), stored)
    decoded = batch(seal_key(CONVERSATION, ring), stored)
    if decoded is not None:
        same(decoded, expected)
    plain_times = all(0 <= s < 2**31 - 1 for s in seconds[: len(texts)])
    if plain_times and not any(authors[: len(texts)]):
        assert decoded is not None  # the common shape is decoded as a batch


def test_parts_of_another_type_go_one_by_one() -> None:
    stored = records(chat(3))
    ids = [memoryview(r[0]) for r in stored]
    key = seal_key(CONVERSATION)
    assert decode_batch(key, ids, [r[1] for r in stored], [r[2] for r in stored]) is None  # pyright: ignore[reportArgumentType]


def test_a_time_that_is_no_integer_goes_one_by_one() -> None:
    stored = records(chat(3))
    times: list[Any] = [r[1] for r in stored]
    times[1] += 0.5  # what a SQLite INTEGER column hands back once a REAL was written into it
    key = seal_key(CONVERSATION)
    assert decode_batch(key, [r[0] for r in stored], times, [r[2] for r in stored]) is None


def test_a_batch_decoded_messages_time_is_made_when_first_read_and_behaves_as_a_datetime() -> None:
    import copy
    import pickle

    originals = chat(3)
    stored = records(originals, RING)
    decoded = batch(seal_key(CONVERSATION, RING), stored)
    assert decoded is not None
    first, second, third = decoded
    assert isinstance(first._created_at, int)  # pyright: ignore[reportPrivateUsage] - kept as stored
    clone = first.copy()
    assert first == originals[0]  # equality reads it
    assert first.created_at == originals[0].created_at == clone.created_at
    assert first.created_at is first.created_at  # made once
    for other in (copy.copy(second), copy.deepcopy(second), pickle.loads(pickle.dumps(second))):
        assert other.created_at == originals[1].created_at
        assert other.to_dict() == originals[1].to_dict()
    later = T0 + timedelta(days=1)
    third.created_at = later  # set before it was ever read
    assert third.created_at == later
    assert Message.from_dict(third.to_dict()).created_at == later
