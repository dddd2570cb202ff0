"""The OpenAI clients' own request bodies against the ones the SDK's ``create`` builds, and the
streamed chat chunks the chat client decodes itself.

The clients encode each request themselves (msgspec, each message once) and post it through the
SDK client. For the same messages, tools and options, the SDK's ``chat.completions.create`` /
``responses.create`` called with the keyword arguments the client builds (``_request``, the old
path) must send the same JSON, to the same path, with the same headers: both requests go to a
real HTTP server that records them (:class:`tests.clients.servers.CaptureServer`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest

from agentkeep.clients.base import ChatOptions, merge_updates
from agentkeep.clients.openai import OpenAIChatClient, OpenAIResponsesClient
from agentkeep.clients.openai_wire import MessageEncoder, chat_items
from agentkeep.contents import (
    DataContent,
    FunctionCallContent,
    FunctionResultContent,
    TextContent,
    TextReasoningContent,
    UriContent,
)
from agentkeep.errors import ChatClientError
from agentkeep.messages import Message
from agentkeep.tools import FunctionTool
from tests.clients import servers
from tests.clients.servers import Captured, CaptureServer

# the fixture this module uses, from tests/clients/servers.py
capture_server = servers.capture_server

Client = OpenAIChatClient | OpenAIResponsesClient

# Headers that differ between any two requests, or that the body's length decides.
_VOLATILE = {"content-length", "x-stainless-retry-count", "x-stainless-read-timeout"}


def get_weather(city: str, days: int = 1) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
        days: How many days ahead.
    """
    return f"Sunny in {city}"


def lookup(term: str) -> str:
    """Look a term up.

    Args:
        term: What to look up.
    """
    return term


WEATHER = FunctionTool(get_weather)
LOOKUP = FunctionTool(lookup)
PIXEL = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n-pixel").decode()
WAV = "data:audio/wav;base64," + base64.b64encode(b"RIFF....WAVEfmt ").decode()
PDF = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 tiny").decode()


@dataclass
class Answer:
    city: str
    degrees: float


def _conversation() -> list[Message]:
    """A conversation with most of what the clients map: system text, unicode, tool calls with
    their results (one failed), an image, reasoning (not sent) and a multi-part user message."""
    return [
        Message("system", ["Be brief. — «ünïcödé» 日本語 ✓ 😀"]),
        Message("user", ['What is the weather in Zürich? Quote: "hi"\n\ttab \\ backslash']),
        Message(
            "assistant",
            [
                TextReasoningContent("thinking..."),
                TextContent("Let me check."),
                FunctionCallContent("call_1", "get_weather", {"city": "Zürich", "days": 2}),
                FunctionCallContent("call_2", "lookup", '{"term": "föhn"}'),
            ],
        ),
        Message(
            "tool",
            [
                FunctionResultContent("call_1", {"forecast": ["sun", "☁"], "high": 21.5, "ok": True}),
                FunctionResultContent("call_2", exception="KeyError: 'föhn'"),
            ],
        ),
        Message("assistant", ["Sunny, 21.5 °C."]),
        Message(
            "user", [TextContent("And this picture?"), UriContent("https://example.com/a.png", "image/png")]
        ),
        Message("assistant", [FunctionCallContent("call_3", "lookup", None)]),
        Message("user", [FunctionResultContent("call_3", None), TextContent("thanks")]),
        Message("user", ["Part one, ", "part two."]),
    ]


def _media() -> list[Message]:
    """Inline data: an image, an audio clip, a file and a link of no stated type."""
    return [
        Message(
            "user",
            [
                TextContent("Describe these."),
                DataContent(PIXEL),
                DataContent(WAV, "audio/wav"),
                DataContent(PDF, "application/pdf"),
                UriContent("https://example.com/photo"),
                UriContent("https://example.com/notes.txt", "text/plain"),
            ],
        )
    ]


CASES: dict[str, tuple[Callable[[], list[Message]], ChatOptions]] = {
    "plain": (lambda: [Message("user", ["Hello"])], {}),
    "conversation": (
        _conversation,
        {
            "instructions": "You are terse. Ünïcode ✓",
            "tools": [WEATHER, LOOKUP],
            "temperature": 0.25,
            "top_p": 0.9,
            "max_tokens": 64,
            "stop": ["END", "ÆND"],
            "seed": 7,
            "user": "user-1",
        },
    ),
    "media": (_media, {"max_tokens": 8}),
    "one tool required": (
        lambda: [Message("user", ["Weather in Oslo?"])],
        {"tools": [WEATHER], "tool_choice": "required"},
    ),
    "tool choice none": (
        lambda: [Message("user", ["Hi"])],
        {"tools": [WEATHER, LOOKUP], "tool_choice": "none", "metadata": {"k": "v"}},
    ),
    "typed output": (lambda: [Message("user", ["Weather as JSON"])], {"response_format": Answer}),
    "schema output": (
        lambda: [Message("user", ["JSON"])],
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object"}},
            }
        },
    ),
    "json object": (lambda: [Message("user", ["JSON"])], {"response_format": {"type": "json_object"}}),
    "extra body": (
        lambda: [Message("user", ["Hi"])],
        {
            "additional_properties": {"top_k": 40, "temperature": 0.5, "nested": {"a": [1, None]}},
            "temperature": 1.0,
        },
    ),
    "empty": (list, {"instructions": "Only instructions."}),
}

RESPONSES_CASES: dict[str, tuple[Callable[[], list[Message]], ChatOptions]] = {
    "continued": (lambda: [Message("user", ["Next"])], {"conversation_id": "resp_123", "store": False}),
    "conversation object": (lambda: [Message("user", ["Next"])], {"conversation_id": "conv_9"}),
}


async def _sdk_path(client: Client, messages: list[Message], options: ChatOptions, *, stream: bool) -> None:
    """Send the request the old way: the SDK's ``create`` with the client's keyword arguments."""
    request, _ = client._request(messages, options)  # pyright: ignore[reportPrivateUsage]
    sdk = await client._sdk()  # pyright: ignore[reportPrivateUsage]
    if isinstance(client, OpenAIChatClient):
        if stream:
            request["stream_options"] = {"include_usage": True}
        answer: Any = await sdk.chat.completions.create(stream=stream, **request)
    else:
        answer = await sdk.responses.create(stream=stream, **request)
    if stream:
        async with answer:
            async for _ in answer:
                pass


async def _own_path(client: Client, messages: list[Message], options: ChatOptions, *, stream: bool) -> str:
    """Send the request the clients' way (their own encoding, posted through the SDK client);
    returns the answer's text."""
    if stream:
        updates = [u async for u in client.get_streaming_response(messages, options=options)]
        return "".join(u.text for u in updates)
    response = await client.get_response(messages, options=options)
    if isinstance(options.get("response_format"), type):
        assert response.value is not None
    return response.text


def _assert_same(ours: Captured, sdk: Captured) -> None:
    assert ours.path == sdk.path
    assert ours.json() == sdk.json()
    strip = lambda headers: {k: v for k, v in headers.items() if k not in _VOLATILE}  # noqa: E731
    assert strip(ours.headers) == strip(sdk.headers)


PAIRS = [(OpenAIChatClient, case) for case in CASES] + [
    (OpenAIResponsesClient, case) for case in [*CASES, *RESPONSES_CASES]
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("kind", "case"), PAIRS, ids=[f"{k.__name__[6:-6]}-{c}" for k, c in PAIRS])
async def test_the_same_body_as_the_sdk(
    capture_server: CaptureServer, kind: type[Client], case: str, stream: bool
) -> None:
    make, options = {**CASES, **RESPONSES_CASES}[case]
    messages = make()
    capture_server.reply = '{"city": "Oslo", "degrees": 1.5}' if "response_format" in options else "ok"
    async with kind("m", base_url=capture_server.base_url, api_key="sk-test-key", max_retries=0) as client:
        await _sdk_path(client, messages, options, stream=stream)
        sdk = capture_server.pop()
        # the client's own encoding, not the fallback to the SDK's create()
        assert client._encoded(messages, options, stream=stream)[0] is not None  # pyright: ignore[reportPrivateUsage]
        assert await _own_path(client, messages, options, stream=stream) == capture_server.reply
        _assert_same(capture_server.pop(), sdk)
        # again, now from the client's cache of encoded messages, with copies of the messages
        await _own_path(client, [m.copy() for m in messages], options, stream=stream)
        _assert_same(capture_server.pop(), sdk)


class Extra(pydantic.BaseModel):
    level: int
    tags: list[str]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_options_msgspec_cannot_encode_go_through_the_sdk(
    capture_server: CaptureServer, stream: bool
) -> None:
    """A pydantic model in ``additional_properties`` has no msgspec JSON form: the request is
    made by the SDK's ``create()``, which encodes it (the same request either way)."""
    messages = _conversation()
    options: ChatOptions = {"additional_properties": {"extra": Extra(level=2, tags=["ü"])}}
    async with OpenAIChatClient("m", base_url=capture_server.base_url, max_retries=0) as client:
        assert client._encoded(messages, options, stream=stream)[0] is None  # pyright: ignore[reportPrivateUsage]
        await _sdk_path(client, messages, options, stream=stream)
        sdk = capture_server.pop()
        assert sdk.json()["extra"] == {"level": 2, "tags": ["ü"]}
        assert await _own_path(client, messages, options, stream=stream) == "ok"
        _assert_same(capture_server.pop(), sdk)


async def test_a_growing_conversation_matches_the_sdk_at_every_turn(capture_server: CaptureServer) -> None:
    messages: list[Message] = []
    async with OpenAIChatClient("m", base_url=capture_server.base_url, max_retries=0) as client:
        for turn in range(4):
            messages.append(Message("user", [f"turn {turn} ✓"]))
            await _sdk_path(client, messages, {"instructions": "Hi"}, stream=True)
            sdk = capture_server.pop()
            await _own_path(client, messages, {"instructions": "Hi"}, stream=True)
            _assert_same(capture_server.pop(), sdk)
            messages.append(Message("assistant", ["ok"]))


def test_the_encoder_encodes_a_message_again_when_it_changed() -> None:
    encoder = MessageEncoder(chat_items)
    message = Message("user", ["one"])
    assert encoder.encode([message]) == b'[{"role":"user","content":"one"}]'
    message.contents.append(TextContent(" two"))  # grown in place
    assert encoder.encode([message]) == b'[{"role":"user","content":"one two"}]'
    message.role = "system"
    assert encoder.encode([message]) == b'[{"role":"system","content":"one two"}]'
    assert encoder.encode([Message("tool", [TextReasoningContent("not sent")])]) == b"[]"


def test_the_encoder_keeps_at_most_its_limit() -> None:
    encoder = MessageEncoder(chat_items, limit=16)
    messages = [Message("user", [f"m{i}"]) for i in range(100)]
    body = encoder.encode(messages)
    assert body.count(b'"role"') == 100
    assert len(encoder) <= 16
    assert encoder.encode(messages) == body


# -- streamed chat chunks, decoded by the client ---------------------------------------------------


def _chunk(**fields: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 0, "model": "m", **fields}


def _delta(finish: str | None = None, **delta: Any) -> dict[str, Any]:
    return _chunk(choices=[{"index": 0, "delta": delta, "finish_reason": finish}])


async def test_a_stream_of_reasoning_text_and_fragmented_tool_calls(capture_server: CaptureServer) -> None:
    capture_server.chunks = [
        _delta(role="assistant", reasoning_content="hmm, "),
        _delta(reasoning_content="weather"),
        _delta(content="Checking ✓"),
        _delta(
            tool_calls=[{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather"}}]
        ),
        _delta(tool_calls=[{"index": 0, "function": {"name": "get_weather", "arguments": '{"city": '}}]),
        _delta(tool_calls=[{"index": 1, "id": "call_b", "function": {"name": "lookup", "arguments": "{}"}}]),
        _delta(tool_calls=[{"index": 0, "function": {"arguments": '"Zürich"}'}}]),
        _chunk(choices=[{"index": 1, "delta": {"content": "another choice"}, "finish_reason": None}]),
        _chunk(choices=None, usage=None),  # nulls some servers send
        _chunk(choices=[{"index": 0, "delta": None, "finish_reason": None}]),
        _delta("tool_calls"),
        _chunk(choices=[], usage={"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}),
    ]
    try:
        async with OpenAIChatClient("m", base_url=capture_server.base_url, max_retries=0) as client:
            for _ in range(2):  # the second call on the connection the first one left
                updates = [
                    u async for u in client.get_streaming_response([Message("user", ["Hi"])], options={})
                ]
                capture_server.pop()
                response = merge_updates(updates)
                assert response.text == "Checking ✓"
                reasoning = [c for c in response.messages[0].contents if isinstance(c, TextReasoningContent)]
                assert "".join(c.text for c in reasoning) == "hmm, weather"
                calls = response.messages[0].function_calls
                assert [(c.call_id, c.name, c.arguments) for c in calls] == [
                    ("call_a", "get_weather", {"city": "Zürich"}),
                    ("call_b", "lookup", {}),
                ]
                assert response.finish_reason == "tool_calls"
                assert response.response_id == "chatcmpl-9"
                assert response.usage is not None
                assert response.usage.total_token_count == 12
    finally:
        capture_server.chunks = None


async def test_an_error_inside_a_stream_is_a_client_error(capture_server: CaptureServer) -> None:
    capture_server.chunks = [
        _delta(content="par"),
        {"error": {"message": "the model crashed", "code": "boom"}},
    ]
    try:
        async with OpenAIChatClient("m", base_url=capture_server.base_url, max_retries=0) as client:
            with pytest.raises(ChatClientError, match="the model crashed"):
                async for _ in client.get_streaming_response([Message("user", ["Hi"])], options={}):
                    pass
            capture_server.pop()
            capture_server.chunks = [_delta(content=["not", "text"])]
            with pytest.raises(ChatClientError, match="does not fit"):
                async for _ in client.get_streaming_response([Message("user", ["Hi"])], options={}):
                    pass
            capture_server.pop()
    finally:
        capture_server.chunks = None


@pytest.mark.parametrize("kind", [OpenAIChatClient, OpenAIResponsesClient], ids=["chat", "responses"])
async def test_a_closed_client_refuses_before_making_an_sdk_client(
    capture_server: CaptureServer, kind: type[Client]
) -> None:
    client = kind("m", base_url=capture_server.base_url)
    await client.aclose()
    with pytest.raises(ChatClientError, match="is closed"):
        await client.get_response([Message("user", ["Hi"])], options={})
    with pytest.raises(ChatClientError, match="is closed"):
        async for _ in client.get_streaming_response([Message("user", ["Hi"])], options={}):
            pass
    assert client._client is None  # pyright: ignore[reportPrivateUsage]
    assert capture_server.requests == []
