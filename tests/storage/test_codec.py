"""The compact record format shared by the durable backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Content, Message
from agentkeep.storage.codec import (
    decode_body,
    decode_id,
    decode_message,
    decode_time,
    encode_body,
    encode_id,
    encode_time,
)

PROSE = (
    "Sure! The report notes revenue grew 12% year over year, margins were flat, and management "
    "flagged two risks: component shortages from a key supplier and rising freight costs."
)


def _round_trip(message: Message) -> Message:
    message.ensure_identity()
    assert message.message_id is not None
    assert message.created_at is not None
    return decode_message(
        encode_body(message), encode_id(message.message_id), encode_time(message.created_at)
    )


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


def test_prose_is_stored_deflated_and_short_text_is_not() -> None:
    long_body = encode_body(Message("user", [PROSE]))
    assert len(long_body) < len(PROSE) * 0.85
    short = "a short reply"
    assert encode_body(Message("user", [short])) == b"\x01\x01" + short.encode()


def test_text_under_the_threshold_stays_plain() -> None:
    text = PROSE[:95]
    body = encode_body(Message("user", [text]))
    assert body == b"\x01\x01" + text.encode()


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
    [b"", b"\x09abc", b"\x01\x09text", b"\x04\x01not deflate", b"\x02\xc1"],
)
def test_bad_records_raise_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):  # backends turn these into CorruptRecordError
        decode_body(body, message_id=None, created_at=None)
