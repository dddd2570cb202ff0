"""Messages: construction, wire form round trips, malformed input, identity and source stamps."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import (
    Content,
    DataContent,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    MessageFormatError,
    MessageSourceType,
    Role,
    TextContent,
    TextReasoningContent,
    UnknownContent,
    UsageDetails,
    get_source_id,
    get_source_type,
    message_id_generator,
    new_message_id,
    normalize_messages,
)
from agentkeep.contents import content_from_dict

HEX32 = re.compile(r"[0-9a-f]{32}")

# -- construction -------------------------------------------------------------------------------


def test_strings_become_text_contents() -> None:
    message = Message("user", ["hi", Content.from_text(" there")])
    assert message.role == "user"
    assert message.contents == [TextContent("hi"), TextContent(" there")]
    assert message.text == "hi there"


def test_single_string_is_one_text_part() -> None:
    message = Message("assistant", "hello world")
    assert message.contents == [TextContent("hello world")]
    assert message.text == "hello world"


def test_no_contents() -> None:
    assert Message("system").contents == []
    assert Message("system").text == ""
    assert Message("system", []).contents == []


def test_contents_accepts_any_sequence_and_copies_it() -> None:
    parts: list[Content | str] = ["a", "b"]
    message = Message("user", parts)
    parts.append("c")
    assert message.text == "ab"
    assert Message("user", ("x", "y")).text == "xy"


def test_text_joins_only_text_contents() -> None:
    message = Message(
        "assistant",
        [
            Content.from_text_reasoning("thinking..."),
            "Hello",
            Content.from_function_call("c", "f"),
            ", world",
            Content.from_usage(UsageDetails(1, 2, 3)),
        ],
    )
    assert message.text == "Hello, world"
    assert Message("assistant", [Content.from_text_reasoning("only reasoning")]).text == ""
    assert Message("tool", [Content.from_function_result("c", result="r")]).text == ""


def test_function_calls_and_results() -> None:
    call = Content.from_function_call("c1", "f", arguments={"a": 1})
    result = Content.from_function_result("c1", result=2)
    message = Message("assistant", ["text", call, result])
    assert message.function_calls == [call]
    assert message.function_results == [result]
    assert Message("user", "x").function_calls == []


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool"])
def test_known_roles(role: Role) -> None:
    assert Message(role, "x").role == role
    assert Message.from_dict({"role": role, "contents": []}).role == role


@pytest.mark.parametrize("role", ["bot", "User", "", "function"])
def test_unknown_role_is_rejected(role: str) -> None:
    with pytest.raises(MessageFormatError) as info:
        Message(cast(Role, role), "x")
    assert info.value.path == "role"


def test_invalid_content_item_is_rejected() -> None:
    with pytest.raises(MessageFormatError) as info:
        Message("user", ["ok", cast(Any, 3)])
    assert info.value.path == "contents[1]"
    with pytest.raises(MessageFormatError) as info:
        Message("user", [cast(Any, {"type": "text", "text": "dict is not a content"})])
    assert info.value.path == "contents[0]"


def test_naive_created_at_is_rejected() -> None:
    with pytest.raises(MessageFormatError) as info:
        Message("user", "x", created_at=datetime(2026, 1, 1, 12, 0))
    assert info.value.path == "created_at"


def test_aware_created_at_is_kept() -> None:
    when = datetime(2026, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert Message("user", "x", created_at=when).created_at == when


def test_additional_properties_default_to_an_own_empty_dict() -> None:
    # As in the reference: ``msg.additional_properties[k] = v`` works on any message.
    first, second = Message("user", "x"), Message("user", "y")
    assert first.additional_properties == {}
    first.additional_properties["k"] = "v"
    assert second.additional_properties == {}
    assert first.to_dict()["additional_properties"] == {"k": "v"}
    assert Message("user", "x", additional_properties={"a": 1}).additional_properties == {"a": 1}
    assert "additional_properties" not in Message("user", "x").to_dict()


def test_a_copy_has_its_own_additional_properties() -> None:
    original = Message("user", "x", additional_properties={"a": 1})
    clone = original.copy()
    clone.additional_properties["b"] = 2
    assert original.additional_properties == {"a": 1}


def test_new_message_has_no_identity_yet() -> None:
    message = Message("user", "x")
    assert message.message_id is None
    assert message.created_at is None
    assert message.author_name is None


# -- wire form ------------------------------------------------------------------------------


def test_minimal_wire_form() -> None:
    assert Message("user", "hi").to_dict() == {"role": "user", "contents": [{"type": "text", "text": "hi"}]}


def test_full_wire_form() -> None:
    message = Message(
        "assistant",
        ["hi"],
        author_name="helper",
        message_id="0123456789abcdef0123456789abcdef",
        created_at=datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        additional_properties={"trace": {"id": 7}},
    )
    assert message.to_dict() == {
        "role": "assistant",
        "contents": [{"type": "text", "text": "hi"}],
        "author_name": "helper",
        "message_id": "0123456789abcdef0123456789abcdef",
        "created_at": "2026-01-02T03:04:05.123456Z",
        "additional_properties": {"trace": {"id": 7}},
    }


def test_utc_time_without_microseconds_uses_z() -> None:
    message = Message("user", "x", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert message.to_dict()["created_at"] == "2026-01-01T00:00:00Z"


def test_offset_time_keeps_its_offset() -> None:
    when = datetime(2026, 6, 1, 8, 30, 0, 500, tzinfo=timezone(timedelta(hours=-5)))
    message = Message("user", "x", created_at=when)
    assert message.to_dict()["created_at"] == "2026-06-01T08:30:00.000500-05:00"
    back = Message.from_dict(message.to_dict())
    assert back.created_at == when
    assert back.created_at is not None
    assert back.created_at.utcoffset() == timedelta(hours=-5)


def _full_message() -> Message:
    return Message(
        "assistant",
        [
            Content.from_text_reasoning("plan"),
            Content.from_text("hi", lang="en"),
            Content.from_function_call("c1", "lookup", arguments={"q": "x", "n": [1, 2.5, None]}),
            Content.from_function_result("c1", result={"ok": True}),
            Content.from_function_result("c2", exception=KeyError("missing")),
            Content.from_data(b"\x00\x01\x02", "application/octet-stream"),
            Content.from_uri("https://example.com/a.png", "image/png"),
            Content.from_usage(UsageDetails(3, 4, 7)),
            Content.from_error("oops", error_code="E", details="d"),
        ],
        author_name="bot",
        message_id="0192f1e2a3b4c5d6e7f8091a2b3c4d5e",
        created_at=datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
        additional_properties={"k": [1, {"v": "w"}]},
    )


def test_dict_round_trip_is_lossless() -> None:
    message = _full_message()
    wire = message.to_dict()
    back = Message.from_dict(wire)
    assert back == message
    assert back.to_dict() == wire
    assert back.created_at == datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def test_json_round_trip_is_lossless() -> None:
    message = _full_message()
    text = message.to_json()
    assert isinstance(text, str)
    assert msgspec.json.decode(text) == message.to_dict()
    back = Message.from_json(text)
    assert back == message
    assert back.to_dict() == message.to_dict()
    assert Message.from_json(text.encode()) == message


def test_decoded_contents_have_their_types() -> None:
    back = Message.from_dict(_full_message().to_dict())
    assert isinstance(back.contents[0], TextReasoningContent)
    assert isinstance(back.contents[2], FunctionCallContent)
    assert isinstance(back.contents[4], FunctionResultContent)
    assert back.contents[4].exception == "KeyError: 'missing'"
    assert isinstance(back.contents[5], DataContent)
    assert back.contents[5].data == b"\x00\x01\x02"


def test_unknown_top_level_fields_survive() -> None:
    wire: dict[str, Any] = {
        "role": "user",
        "contents": [{"type": "text", "text": "hi"}],
        "x_trace": {"span": "abc"},
        "raw_representation": None,
    }
    message = Message.from_dict(wire)
    assert message.extra_fields == {"x_trace": {"span": "abc"}, "raw_representation": None}
    assert message.to_dict() == wire
    assert Message.from_json(message.to_json()).to_dict() == wire


def test_unknown_top_level_field_on_a_minimal_message_survives() -> None:
    wire: dict[str, Any] = {"role": "user", "x": 1}
    message = Message.from_dict(wire)
    assert message.to_dict() == {"role": "user", "contents": [], "x": 1}


def test_unknown_top_level_fields_with_every_known_field() -> None:
    wire = _full_message().to_dict() | {"x_a": 1, "x_b": [True]}
    message = Message.from_dict(wire)
    assert message.to_dict() == wire


def test_unknown_fields_take_part_in_equality() -> None:
    assert Message.from_dict({"role": "user", "x": 1}) != Message.from_dict({"role": "user"})
    assert Message.from_dict({"role": "user", "x": 1}) == Message.from_dict({"role": "user", "x": 1})


def test_reference_payload_with_message_type_key_is_read() -> None:
    wire: dict[str, Any] = {
        "type": "message",
        "role": "assistant",
        "contents": [{"type": "text", "text": "hello"}],
        "author_name": "agent",
        "message_id": "m-1",
    }
    message = Message.from_dict(wire)
    assert message == Message("assistant", ["hello"], author_name="agent", message_id="m-1")
    assert message.extra_fields is None
    out = message.to_dict()
    assert {k: v for k, v in out.items() if k != "type"} == {k: v for k, v in wire.items() if k != "type"}
    assert Message.from_dict(out) == message
    assert Message.from_json(msgspec.json.encode(wire)) == message


def test_unknown_content_survives_inside_a_message() -> None:
    foreign = {"type": "hosted_vector_store", "vector_store_id": "vs_1", "extra": {"a": [1, 2]}}
    wire: dict[str, Any] = {"role": "assistant", "contents": [{"type": "text", "text": "see"}, foreign]}
    message = Message.from_dict(wire)
    assert isinstance(message.contents[1], UnknownContent)
    assert message.to_dict() == wire
    assert Message.from_json(message.to_json()).to_dict() == wire


def test_contents_defaults_to_empty() -> None:
    assert Message.from_dict({"role": "user"}).contents == []


def test_from_dict_result_is_unstamped() -> None:
    message = Message.from_dict({"role": "user", "contents": []})
    assert get_source_type(message) is MessageSourceType.EXTERNAL
    assert get_source_id(message) is None


def test_empty_additional_properties_in_wire_are_dropped() -> None:
    message = Message.from_dict({"role": "user", "contents": [], "additional_properties": {}})
    assert message.additional_properties == {}
    assert "additional_properties" not in message.to_dict()
    assert Message.from_dict({"role": "user", "contents": []}).additional_properties == {}


# -- malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "path"),
    [
        ({"contents": []}, "role"),
        ({"role": None, "contents": []}, "role"),
        ({"role": "robot", "contents": []}, "role"),
        ({"role": 1, "contents": []}, "role"),
        ({"role": "user", "contents": "hi"}, "contents"),
        ({"role": "user", "contents": {"type": "text", "text": "hi"}}, "contents"),
        ({"role": "user", "contents": None}, "contents"),
        ({"role": "user", "contents": ["hi"]}, "contents[0]"),
        ({"role": "user", "contents": [{"type": "text", "text": "a"}, {"type": "text"}]}, "contents[1].text"),
        ({"role": "user", "contents": [{"text": "a"}]}, "contents[0].type"),
        ({"role": "user", "contents": [], "author_name": 5}, "author_name"),
        ({"role": "user", "contents": [], "author_name": ["a"]}, "author_name"),
        ({"role": "user", "contents": [], "message_id": 5}, "message_id"),
        ({"role": "user", "contents": [], "message_id": {"id": "x"}}, "message_id"),
        ({"role": "user", "contents": [], "created_at": 1700000000}, "created_at"),
        ({"role": "user", "contents": [], "created_at": "yesterday"}, "created_at"),
        ({"role": "user", "contents": [], "created_at": "2026-01-01T00:00:00"}, "created_at"),
        ({"role": "user", "contents": [], "additional_properties": [1]}, "additional_properties"),
    ],
)
def test_malformed_message_dict_is_rejected(wire: dict[str, Any], path: str) -> None:
    with pytest.raises(MessageFormatError) as info:
        Message.from_dict(wire)
    assert info.value.path == path


def test_malformed_path_is_prefixed() -> None:
    with pytest.raises(MessageFormatError) as info:
        Message.from_dict({"role": "user", "contents": [{"type": "text"}]}, path="messages[4]")
    assert info.value.path == "messages[4].contents[0].text"
    with pytest.raises(MessageFormatError) as info:
        Message.from_dict({"contents": []}, path="messages[4]")
    assert info.value.path == "messages[4].role"


@pytest.mark.parametrize("bad", [None, "user", 3, [{"role": "user"}]])
def test_non_dict_message_is_rejected(bad: Any) -> None:
    with pytest.raises(MessageFormatError) as info:
        Message.from_dict(bad)
    assert info.value.path == ""
    assert "object" in str(info.value)


@pytest.mark.parametrize("text", ["", "{", "not json", '{"role": "user",}', b"\xff\xfe"])
def test_invalid_json_is_rejected(text: str | bytes) -> None:
    with pytest.raises(MessageFormatError) as info:
        Message.from_json(text)
    assert "invalid JSON" in str(info.value)
    assert isinstance(info.value.__cause__, msgspec.DecodeError)


@pytest.mark.parametrize("text", ["[]", "1", '"user"', '{"role": "bot"}', "null"])
def test_valid_json_that_is_not_a_message_is_rejected(text: str) -> None:
    with pytest.raises(MessageFormatError):
        Message.from_json(text)


# -- normalize_messages ---------------------------------------------------------------------


def test_normalize_none() -> None:
    assert normalize_messages(None) == []


def test_normalize_str() -> None:
    result = normalize_messages("hello")
    assert len(result) == 1
    assert result[0].role == "user"
    assert result[0].text == "hello"


def test_normalize_message_keeps_the_object() -> None:
    message = Message("system", "be brief")
    result = normalize_messages(message)
    assert len(result) == 1
    assert result[0] is message


def test_normalize_mixed_list() -> None:
    assistant = Message("assistant", "ok")
    result = normalize_messages(["one", assistant, "two"])
    assert [m.role for m in result] == ["user", "assistant", "user"]
    assert [m.text for m in result] == ["one", "ok", "two"]
    assert result[1] is assistant


def test_normalize_tuple_and_generator() -> None:
    assert [m.text for m in normalize_messages(("a", "b"))] == ["a", "b"]
    assert [m.text for m in normalize_messages(s for s in ["x", "y", "z"])] == ["x", "y", "z"]
    assert normalize_messages([]) == []


def test_normalize_dict_is_rejected() -> None:
    with pytest.raises(MessageFormatError) as info:
        normalize_messages(cast(Any, {"role": "user", "contents": []}))
    assert "from_dict" in str(info.value)


def test_normalize_int_in_list_is_rejected() -> None:
    with pytest.raises(MessageFormatError) as info:
        normalize_messages(["fine", Message("user", "ok"), cast(Any, 3)])
    assert info.value.path == "messages[2]"
    assert "int" in str(info.value)


def test_normalize_dict_in_list_is_rejected() -> None:
    with pytest.raises(MessageFormatError) as info:
        normalize_messages([cast(Any, {"role": "user"})])
    assert info.value.path == "messages[0]"


# -- identity -------------------------------------------------------------------------------


def test_ensure_identity_assigns_id_and_time() -> None:
    message = Message("user", "x")
    before = datetime.now(UTC)
    assert message.ensure_identity() is message
    after = datetime.now(UTC)
    assert message.message_id is not None
    assert HEX32.fullmatch(message.message_id)
    assert message.created_at is not None
    assert message.created_at.tzinfo is not None
    assert before <= message.created_at <= after


def test_ensure_identity_keeps_existing_values() -> None:
    when = datetime(2020, 1, 1, tzinfo=UTC)
    message = Message("user", "x", message_id="custom", created_at=when)
    message.ensure_identity()
    assert message.message_id == "custom"
    assert message.created_at == when
    first = Message("user", "y").ensure_identity()
    first_id, first_time = first.message_id, first.created_at
    first.ensure_identity()
    assert (first.message_id, first.created_at) == (first_id, first_time)


def test_ensure_identity_fills_only_what_is_missing() -> None:
    message = Message("user", "x", message_id="given")
    message.ensure_identity()
    assert message.message_id == "given"
    assert message.created_at is not None


def test_ids_are_unique_and_hex() -> None:
    ids = [new_message_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(HEX32.fullmatch(i) for i in ids)


def test_an_id_generator_makes_unique_time_ordered_ids_in_batches() -> None:
    next_id = message_id_generator(batch=3)
    ids = [next_id() for _ in range(10)]  # four batches, the last one partly used
    assert len(set(ids)) == 10
    assert all(HEX32.fullmatch(i) for i in ids)
    prefixes = [int(i[:12], 16) for i in ids]
    assert prefixes == sorted(prefixes)  # batches are made in time order
    assert len({i[:12] for i in ids[:3]}) == 1  # one clock read per batch
    assert abs(prefixes[0] - time.time_ns() // 1_000_000) < 60_000


@pytest.mark.parametrize("batch", [0, -1])
def test_an_id_generator_needs_a_positive_batch(batch: int) -> None:
    with pytest.raises(ValueError, match="batch must be positive"):
        message_id_generator(batch=batch)


def test_ids_are_time_ordered() -> None:
    ids: list[str] = []
    for _ in range(5):
        ids.append(Message("user", "x").ensure_identity().message_id or "")
        time.sleep(0.003)
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    # the leading 12 hex digits are the creation time in milliseconds
    quick = [new_message_id() for _ in range(200)]
    prefixes = [int(i[:12], 16) for i in quick]
    assert prefixes == sorted(prefixes)
    assert abs(prefixes[-1] - time.time() * 1000) < 60_000


# -- source stamps --------------------------------------------------------------------------


def test_unstamped_message_is_external() -> None:
    message = Message("user", "x")
    assert get_source_type(message) is MessageSourceType.EXTERNAL
    assert get_source_id(message) is None


def test_with_source_returns_a_stamped_copy_without_touching_the_original() -> None:
    original = Message("user", "x", message_id="m1")
    stamped = original.with_source(MessageSourceType.CHAT_HISTORY, "history")
    assert stamped is not original
    assert get_source_type(stamped) is MessageSourceType.CHAT_HISTORY
    assert get_source_id(stamped) == "history"
    assert get_source_type(original) is MessageSourceType.EXTERNAL
    assert get_source_id(original) is None
    assert stamped.contents == original.contents
    assert stamped.message_id == "m1"


def test_with_source_returns_self_when_already_stamped_identically() -> None:
    stamped = Message("user", "x").with_source(MessageSourceType.CONTEXT_PROVIDER, "memory")
    assert stamped.with_source(MessageSourceType.CONTEXT_PROVIDER, "memory") is stamped


def test_with_source_copies_when_stamp_differs() -> None:
    stamped = Message("user", "x").with_source(MessageSourceType.CONTEXT_PROVIDER, "memory")
    other_id = stamped.with_source(MessageSourceType.CONTEXT_PROVIDER, "rag")
    other_type = stamped.with_source(MessageSourceType.CHAT_HISTORY, "memory")
    none_id = stamped.with_source(MessageSourceType.CONTEXT_PROVIDER, None)
    assert other_id is not stamped
    assert other_type is not stamped
    assert none_id is not stamped
    assert get_source_id(other_id) == "rag"
    assert get_source_type(other_type) is MessageSourceType.CHAT_HISTORY
    assert get_source_id(none_id) is None
    # the first stamp is unchanged
    assert get_source_type(stamped) is MessageSourceType.CONTEXT_PROVIDER
    assert get_source_id(stamped) == "memory"


def test_stamped_copy_does_not_share_identity_assignment() -> None:
    original = Message("user", "x")
    stamped = original.with_source(MessageSourceType.CHAT_HISTORY, "h").ensure_identity()
    assert stamped.message_id is not None
    assert original.message_id is None


def test_equality_ignores_the_source_stamp() -> None:
    original = Message("user", "x", message_id="m")
    stamped = original.with_source(MessageSourceType.CHAT_HISTORY, "h")
    assert stamped == original
    assert original == stamped.with_source(MessageSourceType.CONTEXT_PROVIDER, "c")


def test_stamp_is_not_part_of_the_wire_form() -> None:
    original = Message("user", "x", message_id="m")
    stamped = original.with_source(MessageSourceType.CHAT_HISTORY, "h")
    assert stamped.to_dict() == original.to_dict()
    assert "source" not in stamped.to_json()


def test_equality_compares_every_wire_field() -> None:
    base = Message("user", "x", message_id="m")
    assert base == Message("user", "x", message_id="m")
    assert base != Message("assistant", "x", message_id="m")
    assert base != Message("user", "y", message_id="m")
    assert base != Message("user", "x", message_id="n")
    assert base != Message("user", "x", message_id="m", author_name="a")
    assert base != Message("user", "x", message_id="m", additional_properties={"a": 1})
    assert base != Message("user", "x", message_id="m", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert base != "x"


def test_messages_are_unhashable() -> None:
    with pytest.raises(TypeError):
        hash(Message("user", "x"))


def test_copy_is_equal_and_independent_at_top_level() -> None:
    original = Message("user", "x", author_name="a")
    clone = original.copy()
    assert clone == original
    assert clone is not original
    clone.author_name = "b"
    assert original.author_name == "a"


def test_repr_mentions_role_and_text() -> None:
    text = repr(Message("user", "hello", message_id="m1"))
    assert "user" in text
    assert "hello" in text
    assert "m1" in text
    assert len(repr(Message("user", "y" * 500))) < 200


# -- property-based round trips -------------------------------------------------------------

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=3)
_known_content_types = {
    "text",
    "text_reasoning",
    "function_call",
    "function_result",
    "data",
    "uri",
    "usage",
    "error",
}
extra_keys = st.text(min_size=1, max_size=6).map(lambda s: "x_" + s)
optional_props = st.none() | json_objects
optional_text = st.none() | st.text(max_size=12)
counts = st.none() | st.integers(min_value=0, max_value=2**40)


@st.composite
def _text_contents(draw: st.DrawFn) -> Content:
    props = draw(optional_props)
    if draw(st.booleans()):
        return TextContent(draw(st.text(max_size=20)), additional_properties=props)
    return TextReasoningContent(draw(st.text(max_size=20)), additional_properties=props)


@st.composite
def _call_contents(draw: st.DrawFn) -> Content:
    arguments = draw(st.none() | st.text(max_size=20) | st.dictionaries(st.text(max_size=6), json_values))
    return Content.from_function_call(
        draw(st.text(max_size=8)), draw(st.text(max_size=8)), arguments=arguments
    )


@st.composite
def _result_contents(draw: st.DrawFn) -> Content:
    call_id = draw(st.text(max_size=8))
    if draw(st.booleans()):
        error = draw(st.sampled_from([ValueError, KeyError, RuntimeError]))(draw(st.text(max_size=10)))
        return Content.from_function_result(call_id, exception=error)
    return Content.from_function_result(call_id, result=draw(json_values), exception=draw(optional_text))


@st.composite
def _other_contents(draw: st.DrawFn) -> Content:
    kind = draw(st.sampled_from(["usage", "error", "data", "uri"]))
    if kind == "usage":
        return Content.from_usage(UsageDetails(draw(counts), draw(counts), draw(counts)))
    if kind == "error":
        return Content.from_error(
            draw(st.text(max_size=10)), error_code=draw(optional_text), details=draw(optional_text)
        )
    if kind == "data":
        media = draw(
            st.sampled_from(["image/png", "audio/wav", "application/pdf", "text/plain;charset=utf-8"])
        )
        return Content.from_data(draw(st.binary(max_size=40)), media)
    return Content.from_uri(draw(st.text(max_size=20)), draw(optional_text))


@st.composite
def _unknown_contents(draw: st.DrawFn) -> Content:
    kind = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in _known_content_types))
    fields = draw(st.dictionaries(st.text(max_size=6).filter(lambda k: k != "type"), json_values, max_size=3))
    return UnknownContent({"type": kind, **fields})


@st.composite
def _extended_contents(draw: st.DrawFn) -> Content:
    """A known content read from a wire dict that carries extra, unknown fields."""
    base = draw(_text_contents() | _call_contents() | _other_contents())
    wire = base.to_dict() | draw(st.dictionaries(extra_keys, json_values, min_size=1, max_size=2))
    return content_from_dict(wire)


contents = (
    st.one_of(_text_contents(), _call_contents(), _result_contents(), _other_contents(), _unknown_contents())
    | _extended_contents()
)

timezones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8)), timezone(timedelta(0))]
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    message = Message(
        draw(st.sampled_from(["system", "user", "assistant", "tool"])),
        draw(st.lists(contents, max_size=5)),
        author_name=draw(optional_text),
        message_id=draw(st.none() | st.text(max_size=32)),
        created_at=draw(st.none() | st.datetimes(timezones=timezones)),
        additional_properties=draw(optional_props),
    )
    extra = draw(st.none() | st.dictionaries(extra_keys, json_values, min_size=1, max_size=2))
    message.extra_fields = extra
    return message


@settings(max_examples=150, deadline=None)
@given(messages())
def test_property_dict_round_trip_is_lossless(message: Message) -> None:
    wire = message.to_dict()
    back = Message.from_dict(wire)
    assert back == message
    assert back.to_dict() == wire


@settings(max_examples=150, deadline=None)
@given(messages())
def test_property_json_round_trip_is_lossless(message: Message) -> None:
    text = message.to_json()
    back = Message.from_json(text)
    assert back == message
    assert back.to_dict() == message.to_dict()
    assert Message.from_json(back.to_json()) == message


@settings(max_examples=100, deadline=None)
@given(st.lists(messages(), max_size=4))
def test_property_normalize_keeps_messages(items: list[Message]) -> None:
    result = normalize_messages(items)
    assert len(result) == len(items)
    assert all(a is b for a, b in zip(result, items, strict=True))


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59"])
def test_times_outside_the_utc_range_are_refused(text: str) -> None:
    when = datetime.fromisoformat(text)
    with pytest.raises(MessageFormatError, match="outside the UTC range"):
        Message("user", ["x"], created_at=when)
    with pytest.raises(MessageFormatError, match="outside the UTC range") as caught:
        Message.from_dict({"role": "user", "contents": [{"type": "text", "text": "x"}], "created_at": text})
    assert caught.value.path == "created_at"


def test_times_at_the_edges_of_the_utc_range_are_kept() -> None:
    for when in (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, tzinfo=UTC)):
        message = Message.from_dict(Message("user", ["x"], created_at=when).to_dict())
        assert message.created_at == when
