"""Tokenizers: the protocol, the character estimator, the offline OpenAI BPE tokenizer, message counts."""

from __future__ import annotations

import sys
from json.encoder import encode_basestring
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Content, FunctionCallContent, Message, MessageFormatError
from agentkeep.clients.local import ModelTokenizer
from agentkeep.compaction import (
    MESSAGE_OVERHEAD_TOKENS,
    CharacterEstimatorTokenizer,
    OpenAITokenizer,
    Tokenizer,
    count_message_tokens,
    message_token_text,
)
from agentkeep.compaction.tokenizers import (
    ascii_json_string,
    calls_measures,
    flat_calls_measures,
    json_string_length,
    reference_payload,
    reference_payload_length,
)


@pytest.mark.parametrize(("text", "tokens"), [("", 1), ("a", 1), ("abcd", 1), ("abcde", 1), ("x" * 401, 100)])
def test_character_estimator_counts_a_quarter_of_the_length_as_the_reference(text: str, tokens: int) -> None:
    assert CharacterEstimatorTokenizer().count_tokens(text) == tokens


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100)])
def test_the_text_measure_rounds_up_a_quarter_of_the_length(text: str, tokens: int) -> None:
    assert CharacterEstimatorTokenizer(measure="text").count_tokens(text) == tokens


def test_character_estimator_takes_another_ratio() -> None:
    tokenizer = CharacterEstimatorTokenizer(chars_per_token=3, measure="text")
    assert tokenizer.chars_per_token == 3
    assert tokenizer.measure == "text"
    assert tokenizer.count_tokens("abcdefg") == 3
    assert repr(tokenizer) == "CharacterEstimatorTokenizer(chars_per_token=3, measure='text')"
    assert repr(CharacterEstimatorTokenizer()) == "CharacterEstimatorTokenizer(chars_per_token=4)"
    assert CharacterEstimatorTokenizer() == CharacterEstimatorTokenizer()
    assert CharacterEstimatorTokenizer() != tokenizer
    with pytest.raises(ValueError, match="positive"):
        CharacterEstimatorTokenizer(chars_per_token=0)
    with pytest.raises(ValueError, match="measure"):
        CharacterEstimatorTokenizer(measure="words")  # type: ignore[arg-type]


# What agent-framework-core 1.23.0 counts for these messages: its CharacterEstimatorTokenizer over
# its _serialize_message, printed by the reference itself (the figures, not its code).
REFERENCE_FIGURES = [
    (Message("user", "u1 u1 u1 u1 u1", message_id="msg_0"), 31),
    (Message("assistant", "こんにちは、元気ですか", message_id="m-1"), 31),
    (Message("assistant", 'quote " and \\ newline\n tab\t', message_id="m-2"), 36),
    (
        Message(
            "assistant",
            [Content.from_function_call("c1", "get_weather", arguments='{"city":"Paris"}')],
            message_id="m-3",
        ),
        51,
    ),
    (
        Message(
            "assistant",
            [Content.from_function_call("c2", "get_weather", arguments={"city": "Paris"})],
            message_id="m-4",
        ),
        50,
    ),
    (Message("tool", [Content.from_function_result("c1", result="sunny, 18°C")], message_id="m-5"), 37),
    (
        Message(
            "tool",
            [Content.from_function_result("c2", result={"sky": "sunny", "temp": 18})],
            message_id="m-6",
        ),
        43,
    ),
    (
        Message(
            "assistant",
            [Content.from_text_reasoning("thinking"), Content.from_text("done")],
            message_id="m-7",
        ),
        49,
    ),
    (Message("system", "you are helpful"), 31),
]


@pytest.mark.parametrize(("message", "tokens"), REFERENCE_FIGURES)
def test_the_default_estimator_gives_the_references_figures(message: Message, tokens: int) -> None:
    assert count_message_tokens(message, tokenizer=CharacterEstimatorTokenizer()) == tokens
    assert reference_payload_length(message) == len(reference_payload(message))


def test_builtin_tokenizers_meet_the_protocol() -> None:
    # Structural checks only: the local model's tokenizer is checked without loading the model.
    model_tokenizer: type[Tokenizer] = ModelTokenizer
    estimator: Tokenizer = CharacterEstimatorTokenizer()
    assert issubclass(model_tokenizer, Tokenizer)
    assert isinstance(estimator, Tokenizer)
    assert issubclass(OpenAITokenizer, Tokenizer)


def test_message_text_covers_text_reasoning_calls_results_and_errors() -> None:
    message = Message(
        "assistant",
        [
            Content.from_text_reasoning("think"),
            Content.from_text("answer"),
            Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"}),
            Content.from_function_call("c2", "raw", arguments='{"q": 1}'),
            Content.from_function_call("c3", "no_args"),
            Content.from_function_result("c1", result={"sky": "sunny", "temp": 18}),
            Content.from_function_result("c2", exception=ValueError("bad")),
            Content.from_error("rate limited"),
            Content.from_data(b"\x00" * 100, "image/png"),
            Content.from_uri("https://example.com/a.png"),
        ],
    )
    assert message_token_text(message) == "\n".join(
        [
            "think",
            "answer",
            'get_weather {"city":"Paris"}',
            'raw {"q": 1}',
            "no_args",
            '{"sky":"sunny","temp":18}',
            "ValueError: bad",
            "rate limited",
        ]
    )


def test_message_text_survives_results_that_are_not_json() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    message = Message("tool", [Content.from_function_result("c1", result={"value": Opaque()})])
    assert message_token_text(message) == '{"value":"opaque"}'


def test_a_tokenizer_without_a_message_count_gets_the_reference_payload() -> None:
    seen: list[str] = []

    class Plain:
        def count_tokens(self, text: str) -> int:
            seen.append(text)
            return len(text)

    message = Message("user", "hi", message_id="m")
    assert count_message_tokens(message, tokenizer=Plain()) == len(reference_payload(message))
    assert seen == [reference_payload(message)]


def test_count_message_tokens_adds_the_per_message_overhead() -> None:
    tokenizer = CharacterEstimatorTokenizer(measure="text")
    assert (
        count_message_tokens(Message("user", "abcdefgh"), tokenizer=tokenizer) == 2 + MESSAGE_OVERHEAD_TOKENS
    )
    assert count_message_tokens(Message("user"), tokenizer=tokenizer) == MESSAGE_OVERHEAD_TOKENS


def test_openai_tokenizer_counts_like_tiktoken() -> None:
    pytest.importorskip("bpe_openai")
    o200k = OpenAITokenizer()
    cl100k = OpenAITokenizer("cl100k_base")
    assert o200k.encoding_name == "o200k_base"
    assert repr(cl100k) == "OpenAITokenizer('cl100k_base')"
    # Reference counts from tiktoken's encode_ordinary.
    assert cl100k.count_tokens("hello world") == 2
    assert cl100k.count_tokens("Hello, world!") == 4
    assert o200k.count_tokens("Hello, world! Smoke tests keep releases honest.") == 10
    assert o200k.count_tokens("") == 0
    assert o200k.count_tokens("<|endoftext|> hi") > 1  # special-token text counts as ordinary text
    assert OpenAITokenizer(model="gpt-4o").encoding_name == "o200k_base"
    assert isinstance(o200k, Tokenizer)


def test_openai_tokenizer_names_the_package_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    with pytest.raises(ImportError, match=r"agentkeep\[tokenizers\]"):
        OpenAITokenizer()


_CONTENT_KINDS = st.lists(
    st.sampled_from(["text", "reasoning", "call", "result", "error_result", "text_with_properties"]),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["user", "assistant", "tool", "system"]),
    st.one_of(st.none(), st.text(max_size=12)),
    st.text(max_size=40),
    st.one_of(
        st.none(),
        st.text(max_size=20),
        st.dictionaries(st.text(max_size=5), st.integers()),
        st.lists(st.floats(allow_nan=False), max_size=2),
    ),
    _CONTENT_KINDS,
)
def test_the_payload_length_is_the_payloads(
    role: str, message_id: str | None, text: str, value: Any, kinds: list[str]
) -> None:
    contents: list[Content] = []
    for kind in kinds:
        if kind == "text":
            contents.append(Content.from_text(text))
        elif kind == "reasoning":
            contents.append(Content.from_text_reasoning(text))
        elif kind == "text_with_properties":
            contents.append(Content.from_text(text, additional_properties={"k": value}))
        elif kind == "call":
            contents.append(Content.from_function_call(text or "c", "tool", arguments=value))
        elif kind == "result":
            contents.append(Content.from_function_result(text or "c", result=value))
        else:
            contents.append(Content.from_function_result("c", exception=text or "boom"))
    try:
        message = Message(role, contents, message_id=message_id or None)  # type: ignore[arg-type]
    except (MessageFormatError, TypeError, ValueError):
        return  # what a message cannot hold (a lone surrogate, arguments of a list)
    assert reference_payload_length(message) == len(reference_payload(message))


def test_the_fast_json_string_length_is_the_standard_one_for_every_ascii_character() -> None:
    for code in range(128):
        text = f"a{chr(code)}b{chr(code)}"
        assert json_string_length(text) == len(encode_basestring(text)), code


def test_msgspec_writes_every_code_point_as_encode_basestring_does() -> None:
    # What the collapse loop relies on to measure a non-ASCII summary from its UTF-8 size.
    for start in range(0, 0x110000, 4096):
        text = "".join(chr(c) for c in range(start, start + 4096) if not 0xD800 <= c <= 0xDFFF)
        text = f'a"{text}\\{text}'
        assert ascii_json_string(text).decode() == encode_basestring(text), hex(start)
        utf8_extra = len(text.encode()) - len(text)
        assert len(ascii_json_string(text)) - utf8_extra == len(encode_basestring(text)), hex(start)


@given(st.text())
@settings(max_examples=300)
def test_the_fast_json_string_length_is_the_standard_one_for_any_text(text: str) -> None:
    assert json_string_length(text) == len(encode_basestring(text))


_FLAT_VALUES = st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.none(), st.floats())


@given(
    st.lists(
        st.tuples(
            st.text(max_size=8),
            st.text(max_size=8),
            st.one_of(st.dictionaries(st.text(max_size=6), _FLAT_VALUES, max_size=4), st.none(), st.text()),
        ),
        min_size=1,
        max_size=3,
    )
)
@settings(max_examples=300)
def test_the_flat_calls_measure_is_the_calls_measure(calls: list[tuple[str, str, Any]]) -> None:
    contents = [FunctionCallContent(call_id, name, arguments) for call_id, name, arguments in calls]
    written, size = flat_calls_measures(contents)
    text, expected = calls_measures(contents)
    if written >= 0:  # measured (flat ASCII arguments): as calls_measures measures
        assert (written, size) == (expected, len(text.encode("utf-8")))
    else:
        assert size == -1
