"""Fuzzing every decoder and constructor that takes outside data.

Whatever comes in — arbitrary JSON, near-valid payloads with one field replaced, random bytes —
either decodes into something that can be written back out (and stored), or fails with an
``AgentkeepError`` subclass. Never a ``TypeError``, ``RecursionError`` or ``UnicodeEncodeError``
escaping, never a value accepted that fails later.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkeep import (
    Agent,
    AgentkeepError,
    AgentSession,
    KeyRing,
    Message,
    MessageFormatError,
    SessionFormatError,
    StateTypeError,
    TextContent,
)
from agentkeep.message_stores import InMemoryMessageStore
from agentkeep.message_stores.codec import (
    DECODE_ERRORS,
    decode_body,
    decode_message,
    encode_records,
    seal_key,
)
from agentkeep.session_stores import InMemorySessionStore, session_version
from agentkeep.testing import ScriptedChatClient

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# Text with what JSON can carry but UTF-8 cannot (lone surrogates), controls and astral characters.
texts = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20) | st.sampled_from(
    ["", "\ud800", "a\udfffb", "\x00", "user", "assistant", "text", "function_call", "message", "session"]
)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)

VALID_MESSAGE: dict[str, Any] = {
    "type": "message",
    "role": "assistant",
    "contents": [
        {"type": "text", "text": "hello"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"a": 1}},
        {"type": "function_result", "call_id": "c1", "result": {"ok": True}},
    ],
    "author_name": "bot",
    "message_id": "m-1",
    "created_at": "2026-01-01T00:00:00+00:00",
    "additional_properties": {"k": [1, 2]},
}


def _replace_at(value: Any, path: list[int], replacement: Any) -> Any:
    """``value`` with the node reached by walking ``path`` (indices into children) replaced."""
    if not path:
        return replacement
    if isinstance(value, dict) and value:
        keys = list(value)
        key = keys[path[0] % len(keys)]
        return {**value, key: _replace_at(value[key], path[1:], replacement)}
    if isinstance(value, list) and value:
        index = path[0] % len(value)
        return [*value[:index], _replace_at(value[index], path[1:], replacement), *value[index + 1 :]]
    return replacement


near_valid_messages = st.builds(
    _replace_at, st.just(VALID_MESSAGE), st.lists(st.integers(0, 10), min_size=1, max_size=4), json_values
)


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _check_message_is_representable(message: Message) -> None:
    """What was accepted can be written out as JSON and read back, and stored."""
    text = message.to_json()
    assert Message.from_json(text) == message


@FUZZ
@given(st.one_of(json_values, near_valid_messages))
def test_message_from_dict_accepts_only_what_it_can_write_back(data: Any) -> None:
    try:
        message = Message.from_dict(data)
    except MessageFormatError:
        return
    _check_message_is_representable(message)


@FUZZ
@given(st.one_of(st.binary(max_size=64), json_values.map(lambda v: json.dumps(v, allow_nan=True))))
def test_message_from_json_fails_typed(raw: bytes | str) -> None:
    try:
        message = Message.from_json(raw)
    except MessageFormatError:
        return
    _check_message_is_representable(message)


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_deeply_nested_payloads_fail_typed(depth: int) -> None:
    nested = "[" * depth + "]" * depth
    with pytest.raises(MessageFormatError):
        Message.from_json(nested)
    with pytest.raises(MessageFormatError):
        Message.from_json(
            '{"role": "user", "contents": [{"type": "text", "text": "x", "k": ' + nested + "}]}"
        )
    with pytest.raises(SessionFormatError):
        AgentSession.from_json(
            '{"type": "session", "version": 1, "session_id": "s", "state": {"k": ' + nested + "}}"
        )


def _session_payload(state: Any) -> dict[str, Any]:
    return {"type": "session", "version": 1, "session_id": "s-1", "service_session_id": None, "state": state}


near_valid_sessions = st.builds(
    _replace_at,
    st.just(_session_payload({"history": {"messages": [VALID_MESSAGE]}})),
    st.lists(st.integers(0, 10), min_size=1, max_size=5),
    json_values,
)


@FUZZ
@given(st.one_of(json_values, near_valid_sessions))
def test_sessions_from_outside_fail_typed(data: Any) -> None:
    agent = Agent(ScriptedChatClient())
    for decode in (AgentSession.from_dict, agent.deserialize_session):
        try:
            session = decode(data)
        except AgentkeepError:
            continue
        assert AgentSession.from_json(session.to_json()).to_dict() == session.to_dict()


@FUZZ
@given(st.binary(max_size=64))
def test_stored_records_fail_with_decode_errors_only(record: bytes) -> None:
    with contextlib.suppress(*DECODE_ERRORS):
        decode_body(record, message_id="m", created_at=None)
    with contextlib.suppress(*DECODE_ERRORS):
        decode_message(record, b"\x00m", 0, key=seal_key("c"))


_RING = KeyRing({"k1": KeyRing.generate_key()})
_ENCRYPTED = encode_records("c", [Message("user", ["100 EUR"])], key_ring=_RING)[0]


@FUZZ
@given(st.integers(min_value=0, max_value=len(_ENCRYPTED[2]) * 8 - 1), st.integers(0, len(_ENCRYPTED[2])))
def test_damaged_encrypted_records_are_detected(bit: int, keep: int) -> None:
    message_id, created_at, record = _ENCRYPTED
    flipped = bytearray(record)
    flipped[bit // 8] ^= 1 << (bit % 8)
    for damaged in (bytes(flipped), record[:keep] if keep < len(record) else record[:-1]):
        with pytest.raises(DECODE_ERRORS):
            decode_message(damaged, message_id, created_at, key=seal_key("c", _RING))


def test_unrepresentable_text_is_refused_when_the_message_is_made() -> None:
    for text in ("\ud800", "a\udfffb"):
        with pytest.raises(MessageFormatError, match="surrogate"):
            Message("user", [text])
        with pytest.raises(MessageFormatError, match="surrogate"):
            Message.from_dict({"role": "user", "contents": [{"type": "text", "text": text}]})
        with pytest.raises(MessageFormatError):
            Message("user", ["ok"], author_name=text)
    with pytest.raises(MessageFormatError):
        Message.from_dict({"role": []})


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, {"deep": [1.0, math.nan]}, "\ud800", {"\udc00": 1}],
    ids=["nan", "inf", "-inf", "nested-nan", "surrogate", "surrogate-key"],
)
async def test_state_that_cannot_be_saved_is_a_typed_error_and_stores_nothing(value: Any) -> None:
    session = AgentSession(session_id="s")
    session.state["bad"] = value
    with pytest.raises(StateTypeError, match="'bad'"):
        session.to_json()
    agent = Agent(ScriptedChatClient())
    store = InMemorySessionStore()
    with pytest.raises(SessionFormatError):
        await store.save_session(agent, "c", session)
    assert session_version(await store.get_session(agent, "c")) is None  # nothing stored


def test_self_referencing_and_very_deep_state_is_a_typed_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for value in (loop, _deep(50_000)):
        session = AgentSession(session_id="s")
        session.state["bad"] = value
        with pytest.raises(StateTypeError):
            session.to_json()


async def test_a_store_refuses_what_it_could_not_read_back_and_keeps_its_data() -> None:
    store = InMemoryMessageStore()
    await store.append("c", [Message("user", ["kept"])])
    bad = Message("user", ["x"])
    text = bad.contents[0]
    assert isinstance(text, TextContent)
    text.text = "\ud800"  # changed after construction
    with pytest.raises(MessageFormatError):
        await store.append("c", [Message("user", ["fine"]), bad])
    assert [m.text for m in (await store.read("c")).messages] == ["kept"]


def test_deserialize_session_of_a_non_mapping_is_typed() -> None:
    agent = Agent(ScriptedChatClient())
    for data in (1, None, [1], 2.5, b"\xff\xfe", "not json"):
        with pytest.raises(SessionFormatError):
            agent.deserialize_session(data)  # pyright: ignore[reportArgumentType]


def test_an_escaped_lone_surrogate_in_session_json_is_refused() -> None:
    payload = json.dumps(_session_payload({"note": "\ud800"}))  # json.dumps escapes it as \ud800
    assert "\\ud800" in payload
    with pytest.raises(SessionFormatError):
        AgentSession.from_json(payload)
    with pytest.raises(SessionFormatError):
        AgentSession.from_json(payload.encode())
    with pytest.raises(SessionFormatError, match="surrogate"):  # the same as a dict
        AgentSession.from_dict(json.loads(payload))
    paired = json.dumps(_session_payload({"note": "😀"}))  # a valid pair, escaped: accepted
    assert AgentSession.from_json(paired).state["note"] == "😀"
