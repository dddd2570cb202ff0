"""The compact record format shared by the durable backends."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Content, Message
from agentkeep.message_stores.codec import (
    RecordKey,
    decode_body,
    decode_id,
    decode_message,
    decode_time,
    encode_body,
    encode_id,
    encode_time,
    seal,
    seal_key,
    unseal,
)
from agentkeep.messages import FLOAT_EXACT_MICROS, time_of_micros

PROSE = (
    "Sure! The report notes revenue grew 12% year over year, margins were flat, and management "
    "flagged two risks: component shortages from a key supplier and rising freight costs."
)


def _round_trip(message: Message) -> Message:
    message.ensure_identity()
    assert message.message_id is not None
    assert message.created_at is not None
    message_id, created_at = encode_id(message.message_id), encode_time(message.created_at)
    key = seal_key("conversation")
    sealed = seal(key, message_id, created_at, encode_body(message))
    return decode_message(sealed, message_id, created_at, key=key)


@pytest.mark.parametrize(
    "message",
    [
        Message("user", ["short"]),
        Message("assistant", [PROSE], author_name="agent"),
        Message("system", [PROSE]),
        Message("tool", [Content.from_function_result("c", result={"a": [1, 2]})]),
        Message("assistant", [Content.from_text("x", source="y")]),
        Message("user", ["hi"], additional_properties={"k": 1}),
        Message("assistant", ["é" * 300], author_name="ü" * 10),
    ],
)
def test_bodies_round_trip(message: Message) -> None:
    assert _round_trip(message) == message


def test_long_prose_is_stored_deflated_and_short_text_is_not() -> None:
    document = " ".join([PROSE] * 8)
    long_body = encode_body(Message("user", [document]))
    assert len(long_body) < len(document) * 0.85
    short = "a short reply"
    assert encode_body(Message("user", [short])) == b"\x01\x01" + short.encode()


def test_text_under_the_threshold_stays_plain() -> None:
    text = (" ".join([PROSE] * 8))[:1023]
    body = encode_body(Message("user", [text]))
    assert body == b"\x01\x01" + text.encode()


def test_records_deflated_from_96_bytes_by_earlier_versions_still_decode() -> None:
    deflater = zlib.compressobj(6, zlib.DEFLATED, -9)
    stored = b"\x04\x01" + deflater.compress(PROSE.encode()) + deflater.flush()
    assert decode_body(stored, message_id=None, created_at=None).text == PROSE


@given(st.text(min_size=0, max_size=400))
@settings(max_examples=150)
def test_any_text_round_trips(text: str) -> None:
    message = Message("assistant", [text])
    assert decode_body(encode_body(message), message_id=None, created_at=None).text == text


@given(
    st.one_of(
        st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
        st.text(min_size=1, max_size=60).filter(lambda t: "\x00" not in t),
    )
)
@settings(max_examples=200)
def test_ids_round_trip(message_id: str) -> None:
    assert decode_id(encode_id(message_id)) == message_id


def test_own_ids_take_sixteen_bytes_and_nul_is_refused() -> None:
    assert len(encode_id("0123456789abcdef0123456789abcdef")) == 16
    assert len(encode_id("x" * 15)) != 16  # never mistaken for a raw id
    with pytest.raises(ValueError, match="NUL"):
        encode_id("a\x00b")


def test_times_keep_the_instant() -> None:
    when = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone(timedelta(hours=-5)))
    back = decode_time(encode_time(when))
    assert back == when
    assert back.tzinfo is UTC


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x09abc",
        b"\x01\x09text",
        b"\x04\x01not deflate",
        b"\x02\xc1",
        b"\x03\x01\xf0ab",  # an author name longer than what is left
        b"\x03\x01",  # no name length at all
        b"\x05\x01\x09ab",
        b"\x02" + b"\x91" * 100_000 + b"\xc0",  # nested deeper than any stored message
    ],
    ids=[
        "empty",
        "kind",
        "role",
        "deflate",
        "msgpack",
        "name-past-end",
        "no-name-length",
        "name-past-end-z",
        "deep",
    ],
)
def test_bad_records_raise_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):  # backends turn these into CorruptRecordError
        decode_body(body, message_id=None, created_at=None)


def test_an_author_name_may_not_run_into_the_seal() -> None:
    with pytest.raises(ValueError, match="author name"):
        decode_body(b"\x03\x01\x05ab" + b"CRC!", message_id=None, created_at=None, end=5)


@given(st.binary(max_size=64))
@settings(max_examples=300)
def test_any_bytes_decode_or_raise_value_error(body: bytes) -> None:
    try:
        message = decode_body(body, message_id=None, created_at=None)
    except ValueError:
        return
    assert isinstance(message, Message)


def _sealed_record() -> tuple[RecordKey, bytes, int, bytes]:
    key = seal_key("c-1")
    message_id, created_at = encode_id("m-1"), encode_time(datetime(2026, 1, 1, tzinfo=UTC))
    return (
        key,
        message_id,
        created_at,
        seal(key, message_id, created_at, encode_body(Message("user", ["100 EUR"]))),
    )


def test_every_single_bit_flip_in_a_sealed_record_is_detected() -> None:
    key, message_id, created_at, record = _sealed_record()
    body = unseal(key, message_id, created_at, record)
    assert decode_body(body, message_id="m-1", created_at=None).text == "100 EUR"
    for bit in range(len(record) * 8):
        flipped = bytearray(record)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(ValueError):
            decode_message(bytes(flipped), message_id, created_at, key=key)
    for bit in range(len(message_id) * 8):  # the id and the time are covered too
        other = bytearray(message_id)
        other[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(ValueError):
            unseal(key, bytes(other), created_at, record)
    stored_time = created_at.to_bytes(8, "big", signed=True)  # as backends keep it
    for bit in range(64):
        other = int.from_bytes(stored_time, "big", signed=True) ^ (1 << bit)
        changed = other - (1 << 64) if other >= 1 << 63 else other
        with pytest.raises(ValueError):
            unseal(key, message_id, changed, record)


def test_truncated_and_moved_records_are_detected() -> None:
    key, message_id, created_at, record = _sealed_record()
    for size in range(1, len(record)):
        with pytest.raises(ValueError):
            decode_message(record[:size], message_id, created_at, key=key)
    with pytest.raises(ValueError, match="checksum"):
        unseal(seal_key("c-2"), message_id, created_at, record)  # another conversation's


def test_unsealed_records_of_format_1_stay_readable() -> None:
    body = encode_body(Message("user", ["old"]))
    message = decode_message(body, encode_id("m-1"), 0, key=seal_key("c"))
    assert message.text == "old"


@given(st.integers(min_value=-(2**62), max_value=2**62))
@settings(max_examples=500)
def test_a_stored_time_reads_back_to_the_exact_microsecond(micros: int) -> None:
    """Times before 2038 are decoded through a double (faster): still exact to the microsecond."""
    try:
        expected = decode_time(micros)
    except OverflowError:
        return
    assert time_of_micros(micros) == expected


def test_times_near_the_float_path_edges_read_back_exactly() -> None:
    for micros in (
        0,
        1,
        999_999,
        1_000_000,
        FLOAT_EXACT_MICROS - 1,
        FLOAT_EXACT_MICROS,
        1_764_788_888_123_457,
    ):
        assert time_of_micros(micros) == decode_time(micros)
    for base in range(0, FLOAT_EXACT_MICROS, FLOAT_EXACT_MICROS // 997):
        for micros in (base, base + 499_999, base + 500_000, base + 999_999):
            assert time_of_micros(micros) == decode_time(micros)
