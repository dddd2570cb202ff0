"""Contents: factories, wire shape, decoding, unknown kinds and malformed input."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agentkeep import (
    AgentkeepError,
    Content,
    DataContent,
    ErrorContent,
    FunctionCallContent,
    FunctionResultContent,
    MessageFormatError,
    TextContent,
    TextReasoningContent,
    UnknownContent,
    UriContent,
    UsageContent,
    UsageDetails,
)
from agentkeep.contents import content_from_dict

# -- factories ----------------------------------------------------------------------------------


def test_from_text() -> None:
    content = Content.from_text("hello")
    assert isinstance(content, TextContent)
    assert content.text == "hello"
    assert content.type == "text"
    assert content.additional_properties is None
    assert content.to_dict() == {"type": "text", "text": "hello"}


def test_from_text_with_additional_properties() -> None:
    content = Content.from_text("hello", lang="en", score=3)
    assert content.additional_properties == {"lang": "en", "score": 3}
    assert content.to_dict() == {
        "type": "text",
        "text": "hello",
        "additional_properties": {"lang": "en", "score": 3},
    }


def test_from_text_reasoning() -> None:
    content = Content.from_text_reasoning("let me think")
    assert isinstance(content, TextReasoningContent)
    assert content.text == "let me think"
    assert content.to_dict() == {"type": "text_reasoning", "text": "let me think"}
    assert Content.from_text_reasoning("x", step=1).to_dict() == {
        "type": "text_reasoning",
        "text": "x",
        "additional_properties": {"step": 1},
    }


def test_from_function_call_with_mapping_arguments_copies_them() -> None:
    args = {"city": "Oslo", "days": 3}
    content = Content.from_function_call("call-1", "get_weather", arguments=args)
    assert isinstance(content, FunctionCallContent)
    assert (content.call_id, content.name, content.arguments) == ("call-1", "get_weather", args)
    args["city"] = "Bergen"
    assert content.arguments == {"city": "Oslo", "days": 3}
    assert content.to_dict() == {
        "type": "function_call",
        "call_id": "call-1",
        "name": "get_weather",
        "arguments": {"city": "Oslo", "days": 3},
    }


def test_from_function_call_with_json_text_arguments() -> None:
    content = Content.from_function_call("c", "f", arguments='{"a": 1}')
    assert content.arguments == '{"a": 1}'
    assert content.to_dict()["arguments"] == '{"a": 1}'


def test_from_function_call_without_arguments_omits_them() -> None:
    content = Content.from_function_call("c", "f")
    assert content.arguments is None
    assert content.to_dict() == {"type": "function_call", "call_id": "c", "name": "f"}


def test_from_function_call_with_empty_arguments_keeps_them() -> None:
    content = Content.from_function_call("c", "f", arguments={})
    assert content.to_dict()["arguments"] == {}
    assert content_from_dict(content.to_dict()) == content


def test_from_function_result_with_result() -> None:
    content = Content.from_function_result("call-1", result={"temp": 18, "sky": "sunny"})
    assert isinstance(content, FunctionResultContent)
    assert content.result == {"temp": 18, "sky": "sunny"}
    assert content.exception is None
    assert content.to_dict() == {
        "type": "function_result",
        "call_id": "call-1",
        "result": {"temp": 18, "sky": "sunny"},
    }


def test_from_function_result_with_exception_text() -> None:
    content = Content.from_function_result("c", exception="TimeoutError: too slow")
    assert content.result is None
    assert content.exception == "TimeoutError: too slow"
    assert content.to_dict() == {
        "type": "function_result",
        "call_id": "c",
        "exception": "TimeoutError: too slow",
    }


def test_from_function_result_with_exception_object() -> None:
    content = Content.from_function_result("c", exception=ValueError("bad city"))
    assert content.exception == "ValueError: bad city"
    assert isinstance(content.exception, str)
    # the stored form is plain JSON and reads back equal
    assert content_from_dict(content.to_dict()) == content


def test_from_function_result_with_falsy_result_keeps_it() -> None:
    for value in (0, False, "", [], {}):
        content = Content.from_function_result("c", result=value)
        assert content.to_dict()["result"] == value
        decoded = content_from_dict(content.to_dict())
        assert isinstance(decoded, FunctionResultContent)
        assert decoded.result == value
        assert type(decoded.result) is type(value)


def test_from_function_result_bare() -> None:
    assert Content.from_function_result("c").to_dict() == {"type": "function_result", "call_id": "c"}


def test_from_data_encodes_base64_and_decodes_back() -> None:
    payload = bytes(range(256))
    content = Content.from_data(payload, "application/octet-stream")
    assert isinstance(content, DataContent)
    assert content.media_type == "application/octet-stream"
    expected_uri = "data:application/octet-stream;base64," + base64.b64encode(payload).decode()
    assert content.uri == expected_uri
    assert content.data == payload
    assert content.to_dict() == {
        "type": "data",
        "uri": expected_uri,
        "media_type": "application/octet-stream",
    }
    decoded = content_from_dict(content.to_dict())
    assert isinstance(decoded, DataContent)
    assert decoded.data == payload
    assert decoded == content


def test_from_data_empty_bytes() -> None:
    content = Content.from_data(b"", "image/png")
    assert content.uri == "data:image/png;base64,"
    assert content.data == b""
    assert content_from_dict(content.to_dict()) == content


def test_from_uri() -> None:
    content = Content.from_uri("https://example.com/cat.png", "image/png")
    assert isinstance(content, UriContent)
    assert content.to_dict() == {
        "type": "uri",
        "uri": "https://example.com/cat.png",
        "media_type": "image/png",
    }
    bare = Content.from_uri("https://example.com/x")
    assert bare.media_type is None
    assert bare.to_dict() == {"type": "uri", "uri": "https://example.com/x"}


def test_from_usage_with_details_object() -> None:
    details = UsageDetails(input_token_count=10, output_token_count=5, total_token_count=15)
    content = Content.from_usage(details)
    assert isinstance(content, UsageContent)
    assert content.usage_details is details
    assert content.to_dict() == {
        "type": "usage",
        "usage_details": {"input_token_count": 10, "output_token_count": 5, "total_token_count": 15},
    }


def test_from_usage_with_mapping() -> None:
    content = Content.from_usage({"input_token_count": 7})
    assert content.usage_details == UsageDetails(input_token_count=7)
    assert content.to_dict() == {"type": "usage", "usage_details": {"input_token_count": 7}}


def test_from_usage_with_bad_mapping_raises() -> None:
    with pytest.raises(MessageFormatError) as info:
        Content.from_usage({"input_token_count": "7"})
    assert info.value.path == "usage_details.input_token_count"


def test_from_error() -> None:
    content = Content.from_error("rate limited", error_code="429", details="retry in 2s")
    assert isinstance(content, ErrorContent)
    assert content.to_dict() == {
        "type": "error",
        "message": "rate limited",
        "error_code": "429",
        "details": "retry in 2s",
    }
    assert Content.from_error("oops").to_dict() == {"type": "error", "message": "oops"}


def test_type_discriminators() -> None:
    assert [cls.type for cls in (TextContent, TextReasoningContent, FunctionCallContent)] == [
        "text",
        "text_reasoning",
        "function_call",
    ]
    assert [cls.type for cls in (FunctionResultContent, DataContent, UriContent, UsageContent)] == [
        "function_result",
        "data",
        "uri",
        "usage",
    ]
    assert ErrorContent.type == "error"


# -- round trips --------------------------------------------------------------------------------

ALL_KINDS: list[Content] = [
    Content.from_text("hi"),
    Content.from_text("hi", a=1),
    Content.from_text_reasoning("hmm"),
    Content.from_function_call("c1", "f", arguments={"x": [1, 2, {"y": None}]}),
    Content.from_function_call("c2", "g", arguments='{"x": 1}'),
    Content.from_function_call("c3", "h"),
    Content.from_function_result("c1", result=[1, "two", {"three": 3.5}]),
    Content.from_function_result("c2", exception=RuntimeError("boom")),
    Content.from_function_result("c3", result="partial", exception="KeyError: 'k'"),
    Content.from_data(b"\x89PNG\r\n", "image/png"),
    Content.from_uri("https://example.com/a.mp3", "audio/mpeg"),
    Content.from_uri("file:///tmp/x"),
    Content.from_usage(UsageDetails(1, 2, 3)),
    Content.from_usage(UsageDetails()),
    Content.from_error("bad", error_code="E1"),
    Content.from_error("bad", details="more"),
]


@pytest.mark.parametrize("content", ALL_KINDS, ids=lambda c: type(c).__name__)
def test_round_trip_every_kind(content: Content) -> None:
    wire = content.to_dict()
    assert wire["type"] == content.type
    decoded = content_from_dict(wire)
    assert type(decoded) is type(content)
    assert decoded == content
    assert decoded.to_dict() == wire


@pytest.mark.parametrize("content", ALL_KINDS, ids=lambda c: type(c).__name__)
def test_to_dict_leaves_out_unset_optional_fields(content: Content) -> None:
    wire = content.to_dict()
    assert None not in wire.values()
    assert "extra_fields" not in wire
    if not getattr(content, "additional_properties", None):
        assert "additional_properties" not in wire


def test_decoded_text_with_only_required_fields() -> None:
    decoded = content_from_dict({"type": "text", "text": "x"})
    assert decoded == TextContent("x")
    assert isinstance(decoded, TextContent)
    assert decoded.extra_fields is None
    assert decoded.additional_properties is None


def test_additional_properties_round_trip() -> None:
    wire = {"type": "uri", "uri": "u", "additional_properties": {"k": {"nested": [1, 2]}}}
    decoded = content_from_dict(wire)
    assert isinstance(decoded, UriContent)
    assert decoded.additional_properties == {"k": {"nested": [1, 2]}}
    assert decoded.to_dict() == wire


def test_null_optional_fields_are_accepted() -> None:
    decoded = content_from_dict(
        {"type": "error", "message": "m", "error_code": None, "details": None, "additional_properties": None}
    )
    assert decoded == ErrorContent("m")
    assert decoded.to_dict() == {"type": "error", "message": "m"}


# -- unknown types and unknown fields -------------------------------------------------------


def test_unknown_content_type_is_kept_whole() -> None:
    wire: dict[str, Any] = {
        "type": "hosted_file",
        "file_id": "file-123",
        "meta": {"size": 10, "tags": ["a", "b"]},
        "additional_properties": {"x": 1},
    }
    decoded = content_from_dict(wire)
    assert isinstance(decoded, UnknownContent)
    assert decoded.kind == "hosted_file"
    assert decoded.raw == wire
    assert decoded.to_dict() == wire


def test_unknown_content_is_isolated_from_the_input_and_output_dicts() -> None:
    wire: dict[str, Any] = {"type": "mystery", "a": 1}
    decoded = content_from_dict(wire)
    wire["a"] = 2
    wire["b"] = 3
    assert decoded.to_dict() == {"type": "mystery", "a": 1}
    out = decoded.to_dict()
    out["c"] = 4
    assert decoded.to_dict() == {"type": "mystery", "a": 1}


def test_unknown_content_with_only_a_type() -> None:
    decoded = content_from_dict({"type": "ping"})
    assert isinstance(decoded, UnknownContent)
    assert decoded.to_dict() == {"type": "ping"}


def test_unknown_content_equality() -> None:
    assert content_from_dict({"type": "x", "a": 1}) == content_from_dict({"type": "x", "a": 1})
    assert content_from_dict({"type": "x", "a": 1}) != content_from_dict({"type": "x", "a": 2})


@pytest.mark.parametrize(
    "wire",
    [
        {"type": "text", "text": "hi", "annotations": [{"kind": "citation"}], "raw_representation": None},
        {"type": "text_reasoning", "text": "t", "protected_data": "abc"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": {}, "informational_only": True},
        {"type": "function_result", "call_id": "c", "result": 1, "items": [1]},
        {"type": "data", "uri": "data:text/plain;base64,aGk=", "media_type": "text/plain", "name": "hi.txt"},
        {"type": "uri", "uri": "https://x", "detail": "high"},
        {"type": "usage", "usage_details": {"input_token_count": 1}, "model": "m"},
        {"type": "error", "message": "m", "retryable": False},
    ],
    ids=lambda w: w["type"],
)
def test_unknown_fields_on_known_types_are_preserved(wire: dict[str, Any]) -> None:
    decoded = content_from_dict(wire)
    assert not isinstance(decoded, UnknownContent)
    assert decoded.type == wire["type"]
    assert decoded.to_dict() == wire
    assert content_from_dict(decoded.to_dict()) == decoded


def test_unknown_fields_do_not_override_known_ones() -> None:
    content = TextContent("real", extra_fields={"text": "fake", "other": 1})
    assert content.to_dict() == {"type": "text", "text": "real", "other": 1}


def test_extra_fields_take_part_in_equality() -> None:
    plain = content_from_dict({"type": "text", "text": "a"})
    extended = content_from_dict({"type": "text", "text": "a", "x": 1})
    assert plain != extended
    assert isinstance(extended, TextContent)
    assert extended.extra_fields == {"x": 1}


# -- malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["text", 3, None, ["type", "text"], ("a",)])
def test_non_dict_content_is_rejected(bad: Any) -> None:
    with pytest.raises(MessageFormatError) as info:
        content_from_dict(bad)
    assert info.value.path == "content"
    assert "object" in str(info.value)


def test_error_path_uses_the_given_prefix() -> None:
    with pytest.raises(MessageFormatError) as info:
        content_from_dict(42, path="contents[3]")
    assert info.value.path == "contents[3]"
    assert "contents[3]" in str(info.value)
    with pytest.raises(MessageFormatError) as info:
        content_from_dict({"type": "text"}, path="messages[0].contents[3]")
    assert info.value.path == "messages[0].contents[3].text"


@pytest.mark.parametrize("bad_type", [None, 1, "", ["text"], True])
def test_missing_or_invalid_type_is_rejected(bad_type: Any) -> None:
    data: dict[str, Any] = {"text": "hi"}
    if bad_type is not None:
        data["type"] = bad_type
    with pytest.raises(MessageFormatError) as info:
        content_from_dict(data)
    assert info.value.path == "content.type"


@pytest.mark.parametrize(
    ("wire", "path"),
    [
        ({"type": "text"}, "content.text"),
        ({"type": "text", "text": None}, "content.text"),
        ({"type": "text", "text": 5}, "content.text"),
        ({"type": "text", "text": "a", "additional_properties": [1]}, "content.additional_properties"),
        ({"type": "text_reasoning", "text": ["a"]}, "content.text"),
        ({"type": "function_call", "name": "f"}, "content.call_id"),
        ({"type": "function_call", "call_id": "c"}, "content.name"),
        ({"type": "function_call", "call_id": 1, "name": "f"}, "content.call_id"),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": [1]}, "content.arguments"),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": 3}, "content.arguments"),
        ({"type": "function_result"}, "content.call_id"),
        ({"type": "function_result", "call_id": "c", "exception": 3}, "content.exception"),
        ({"type": "data"}, "content.uri"),
        ({"type": "data", "uri": "https://example.com/a.png"}, "content.uri"),
        ({"type": "data", "uri": "data:text/plain,hello"}, "content.uri"),
        ({"type": "data", "uri": "data:text/plain;base64"}, "content.uri"),
        ({"type": "data", "uri": "data:image/png;base64,@@not base64@@"}, "content.uri"),
        ({"type": "data", "uri": "data:image/png;base64,abc"}, "content.uri"),
        ({"type": "data", "uri": "data:image/png;base64,aGk=", "media_type": 1}, "content.media_type"),
        ({"type": "uri"}, "content.uri"),
        ({"type": "uri", "uri": "u", "media_type": ["a"]}, "content.media_type"),
        ({"type": "usage"}, "content.usage_details"),
        ({"type": "usage", "usage_details": [1]}, "content.usage_details"),
        (
            {"type": "usage", "usage_details": {"input_token_count": "1"}},
            "content.usage_details.input_token_count",
        ),
        (
            {"type": "usage", "usage_details": {"output_token_count": 1.5}},
            "content.usage_details.output_token_count",
        ),
        (
            {"type": "usage", "usage_details": {"total_token_count": True}},
            "content.usage_details.total_token_count",
        ),
        ({"type": "error"}, "content.message"),
        ({"type": "error", "message": "m", "error_code": 429}, "content.error_code"),
        ({"type": "error", "message": "m", "details": {"a": 1}}, "content.details"),
    ],
)
def test_malformed_known_content_is_rejected_with_a_path(wire: dict[str, Any], path: str) -> None:
    with pytest.raises(MessageFormatError) as info:
        content_from_dict(wire)
    assert info.value.path == path
    assert f"(at {path})" in str(info.value)


def test_bad_base64_error_is_chained_to_its_cause() -> None:
    with pytest.raises(MessageFormatError) as info:
        content_from_dict({"type": "data", "uri": "data:image/png;base64,a"})
    assert info.value.__cause__ is not None


def test_message_format_error_is_in_the_error_tree() -> None:
    with pytest.raises(MessageFormatError) as info:
        content_from_dict({"type": "text"})
    assert isinstance(info.value, AgentkeepError)
    assert isinstance(info.value, ValueError)


def test_message_format_error_without_path() -> None:
    error = MessageFormatError("broken")
    assert error.path == ""
    assert str(error) == "broken"


# -- UsageDetails -------------------------------------------------------------------------------


def test_usage_details_addition_sums_counts() -> None:
    total = UsageDetails(10, 5, 15) + UsageDetails(1, 2, 3)
    assert total == UsageDetails(11, 7, 18)


def test_usage_details_addition_treats_missing_as_zero_but_keeps_both_missing_missing() -> None:
    total = UsageDetails(input_token_count=4) + UsageDetails(input_token_count=None, output_token_count=6)
    assert total == UsageDetails(input_token_count=4, output_token_count=6, total_token_count=None)
    assert UsageDetails() + UsageDetails() == UsageDetails()


def test_usage_details_sum_over_several() -> None:
    parts = [UsageDetails(1, 1, 2), UsageDetails(2, 0, 2), UsageDetails(total_token_count=1)]
    total = UsageDetails()
    for part in parts:
        total = total + part
    assert total == UsageDetails(3, 1, 5)


def test_usage_details_is_immutable_and_hashable() -> None:
    details = UsageDetails(1, 2, 3)
    with pytest.raises(AttributeError):
        details.input_token_count = 5  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]
    assert hash(details) == hash(UsageDetails(1, 2, 3))


def test_usage_details_wire_form() -> None:
    assert UsageDetails().to_dict() == {}
    assert UsageDetails(output_token_count=0).to_dict() == {"output_token_count": 0}
    assert UsageDetails.from_dict({"input_token_count": 3, "total_token_count": None}) == UsageDetails(3)
    with pytest.raises(MessageFormatError) as info:
        UsageDetails.from_dict({"input_token_count": False}, path="u")
    assert info.value.path == "u.input_token_count"
