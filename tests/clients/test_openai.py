"""OpenAIChatClient against a real OpenAI-compatible server: ``python -m llama_cpp.server``.

The server runs the offline SmolLM2-135M model (session-scoped fixture in
:mod:`tests.clients.servers`). The model is tiny: these tests assert structure (roles, tool
calls, history, token counts, error types), never wording. The pure message-mapping tests at the
end need no server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentkeep import InMemoryHistoryProvider
from agentkeep.clients.base import ChatOptions, merge_updates
from agentkeep.clients.openai import (
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_chat_messages,
    to_response_items,
)
from agentkeep.contents import Content, FunctionCallContent
from agentkeep.errors import ChatRequestError, ModelUnavailableError
from agentkeep.messages import Message
from agentkeep.tools import FunctionTool
from tests.clients.servers import LlamaServer, ThreadedUvicorn, closed_port_url

FAST: ChatOptions = {"max_tokens": 16, "temperature": 0.0}


@pytest.fixture
async def client(llama_server: LlamaServer) -> AsyncIterator[OpenAIChatClient]:
    async with OpenAIChatClient("smollm2", base_url=llama_server.base_url, max_retries=0) as client:
        yield client


calls: list[str] = []


def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city's name.
    """
    calls.append(city)
    return f"Sunny in {city}"


async def test_chat_with_history_through_an_agent(client: OpenAIChatClient) -> None:
    history = InMemoryHistoryProvider()
    agent = client.as_agent("You are a helpful assistant.", context_providers=[history], default_options=FAST)
    session = agent.create_session()

    first = await agent.run("My name is Ada.", session=session)
    second = await agent.run("What is my name?", session=session)

    for response in (first, second):
        assert [m.role for m in response.messages] == ["assistant"]
        assert response.finish_reason in ("stop", "length")
        assert response.usage is not None
    stored = await history.get_messages(session.session_id, session=session)
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert session.service_session_id is None  # Chat Completions keep nothing on the server
    # the second request carried the first turn: more prompt than the whole first call
    assert first.usage is not None
    assert second.usage is not None
    first_call = (first.usage.input_token_count or 0) + (first.usage.output_token_count or 0)
    assert (second.usage.input_token_count or 0) > first_call > 0


async def test_usage_and_finish_reason(client: OpenAIChatClient) -> None:
    response = await client.get_response(
        [Message("user", ["Count from one to twenty."])], options={"max_tokens": 4, "temperature": 0.0}
    )
    assert response.usage is not None
    usage = response.usage
    assert usage.input_token_count is not None
    assert usage.output_token_count is not None
    assert usage.input_token_count > 0
    assert 0 < usage.output_token_count <= 4
    assert usage.total_token_count == usage.input_token_count + usage.output_token_count
    assert response.finish_reason == "length"
    assert (response.response_id or "").startswith("chatcmpl-")
    assert response.model == "smollm2"


async def test_streaming_through_an_agent(client: OpenAIChatClient) -> None:
    agent = client.as_agent(default_options={"max_tokens": 12, "temperature": 0.0})
    session = agent.create_session()
    stream = agent.run("Tell me about the sea.", session=session, stream=True)
    updates = [update async for update in stream]
    response = await stream.get_final_response()

    texts = [u.text for u in updates if u.text]
    assert len(texts) > 1  # deltas as they come, not one block
    assert "".join(texts) == response.text
    assert [m.role for m in response.messages] == ["assistant"]
    assert len({u.message_id for u in updates}) == 1
    assert response.finish_reason in ("stop", "length")
    # (llama_cpp.server ignores stream_options.include_usage: a streamed answer has no usage)


async def test_tool_call_round_trip_through_the_agent_tool_loop(client: OpenAIChatClient) -> None:
    calls.clear()
    history = InMemoryHistoryProvider()
    agent = client.as_agent(
        tools=[get_weather], context_providers=[history], max_tool_iterations=1, default_options=FAST
    )
    session = agent.create_session()
    # "required" with one tool is sent as that tool, which llama.cpp's server can force
    response = await agent.run(
        "What is the weather in Paris?",
        session=session,
        options={"tool_choice": "required", "max_tokens": 32},
    )

    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant"]
    call = response.messages[0].function_calls[0]
    assert call.name == "get_weather"
    assert isinstance(call.arguments, dict)
    assert set(call.arguments) == {"city"}  # grammar-constrained to the tool's schema
    assert calls == [call.arguments["city"]]
    result = response.messages[1].function_results[0]
    assert result.call_id == call.call_id
    assert result.result == f"Sunny in {calls[0]}"
    assert not response.messages[2].function_calls

    # the history with the tool call and its result is valid input for the next turn
    follow_up = await agent.run("Thanks!", session=session, options={"tool_choice": "none"})
    assert [m.role for m in follow_up.messages] == ["assistant"]
    stored = await history.get_messages(session.session_id, session=session)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "user", "assistant"]


async def test_streamed_tool_call_is_assembled_from_deltas(client: OpenAIChatClient) -> None:
    tool = FunctionTool(get_weather)
    updates = [
        update
        async for update in client.get_streaming_response(
            [Message("user", ["Weather in Oslo?"])],
            options={"tools": [tool], "tool_choice": "required", "max_tokens": 32},
        )
    ]
    assert not any(isinstance(c, FunctionCallContent) for u in updates[:-1] for c in u.contents)
    response = merge_updates(updates)
    [call] = response.messages[0].function_calls
    assert call.name == "get_weather"
    assert isinstance(call.arguments, dict)
    assert set(call.arguments) == {"city"}
    assert call.call_id
    assert response.finish_reason == "tool_calls"


async def test_too_long_input_is_a_request_error(client: OpenAIChatClient) -> None:
    with pytest.raises(ChatRequestError) as caught:
        await client.get_response([Message("user", ["hello world " * 1500])], options={"max_tokens": 4})
    assert caught.value.status_code == 400
    assert "context length" in str(caught.value)
    assert "\n" not in str(caught.value)


async def test_wrong_path_is_a_request_error(llama_server: LlamaServer) -> None:
    # llama_cpp.server ignores model names (any name gets its one model), so the 4xx that a
    # user really meets there is a wrong URL: the base URL without /v1, or an API it lacks.
    root = llama_server.base_url.removesuffix("/v1")
    async with OpenAIChatClient("smollm2", base_url=root, max_retries=0) as client:
        with pytest.raises(ChatRequestError) as caught:
            await client.get_response([Message("user", ["hi"])], options=FAST)
    assert caught.value.status_code == 404
    async with OpenAIResponsesClient("smollm2", base_url=llama_server.base_url, max_retries=0) as responses:
        with pytest.raises(ChatRequestError) as caught:
            await responses.get_response([Message("user", ["hi"])], options={})
    assert caught.value.status_code == 404


async def test_invalid_parameter_reported_as_server_error(client: OpenAIChatClient) -> None:
    # llama_cpp.server answers request validation failures with HTTP 500 and a multi-line trace
    with pytest.raises(ModelUnavailableError) as caught:
        await client.get_response([Message("user", ["hi"])], options={"top_p": 3.0})
    assert caught.value.status_code == 500
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) <= 500


async def test_closed_port_is_model_unavailable_quickly() -> None:
    url = closed_port_url()
    # asyncio.timeout is a hang guard: a refused connection fails at once
    async with (
        asyncio.timeout(30),
        OpenAIChatClient("smollm2", base_url=url, timeout=2.0, max_retries=0) as client,
    ):
        with pytest.raises(ModelUnavailableError) as caught:
            await client.get_response([Message("user", ["hi"])], options={})
    assert caught.value.status_code is None
    assert url in str(caught.value)


async def test_credentials_in_the_url_are_not_shown() -> None:
    url = closed_port_url().replace("//", "//ada:hunter2@")
    async with OpenAIChatClient(
        "smollm2", base_url=url, api_key="sk-secret-123456789", max_retries=0
    ) as client:
        with pytest.raises(ModelUnavailableError) as caught:
            await client.get_response([Message("user", ["hi"])], options={})
    assert "hunter2" not in str(caught.value)
    assert "sk-secret" not in str(caught.value)


async def test_closed_port_while_streaming() -> None:
    async with OpenAIChatClient("smollm2", base_url=closed_port_url(), max_retries=0) as client:
        with pytest.raises(ModelUnavailableError):
            async for _ in client.get_streaming_response([Message("user", ["hi"])], options={}):
                pass


async def test_missing_model_name_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    async with OpenAIChatClient(base_url=closed_port_url()) as client:
        with pytest.raises(ChatRequestError, match="OPENAI_MODEL"):
            await client.get_response([Message("user", ["hi"])], options={})


class ModelList:
    """An OpenAI-compatible server's ``GET /v1/models`` only, with the models a test names."""

    def __init__(self, *names: str) -> None:
        from fastapi import FastAPI

        self.names = list(names)
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, object]:  # pyright: ignore[reportUnusedFunction]
            data = [{"id": n, "object": "model", "created": 0, "owned_by": "test"} for n in self.names]
            return {"object": "list", "data": data}

        self.server = ThreadedUvicorn(app, name="model list")

    def __enter__(self) -> ModelList:
        self.server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.stop()

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"


async def test_without_a_model_name_load_takes_the_only_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with ModelList("the-one") as listing:
        async with asyncio.timeout(30), OpenAIChatClient(base_url=listing.base_url, max_retries=0) as client:
            await client.load()
            assert client.model == "the-one"
            await client.check_ready()
        listing.names = ["first", "second"]
        async with asyncio.timeout(30), OpenAIChatClient(base_url=listing.base_url, max_retries=0) as client:
            with pytest.raises(ChatRequestError, match="offers first, second"):
                await client.load()
            named = OpenAIChatClient("second", base_url=listing.base_url)
            await named.load()  # a named model is not looked up: nothing to settle
            assert named.model == "second"
            await named.aclose()


async def test_check_ready_fails_quickly_when_the_server_does_not_answer() -> None:
    url = closed_port_url()
    async with asyncio.timeout(30), OpenAIChatClient("m", base_url=url, max_retries=2) as client:
        with pytest.raises(ModelUnavailableError):
            await client.check_ready()


# -- message mapping (no server) ------------------------------------------------------------------


def test_messages_to_chat_completions() -> None:
    image = Content.from_data(b"\x89PNG", "image/png")
    messages = [
        Message("user", ["Look:", image]),
        Message("assistant", [Content.from_function_call("c1", "get_weather", arguments={"city": "Oslo"})]),
        Message(
            "tool",
            [
                Content.from_function_result("c1", result={"sky": "clear"}),
                Content.from_function_result("c2", exception="ValueError: bad city"),
            ],
        ),
        Message("assistant", ["Clear.", Content.from_usage({"output_token_count": 1})]),
        Message("system", ["Be terse."]),
        Message("user", ["plain"]),
    ]
    wire = to_chat_messages(messages, instructions="You help.")
    assert wire == [
        {"role": "system", "content": "You help."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": image.uri}},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky":"clear"}'},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: ValueError: bad city"},
        {"role": "assistant", "content": "Clear."},
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "plain"},
    ]


def test_messages_to_response_items() -> None:
    messages = [
        Message("system", ["Be terse."]),
        Message("user", ["hi", Content.from_uri("https://example.com/cat.png", "image/png")]),
        Message(
            "assistant",
            ["Let me check.", Content.from_function_call("c1", "get_weather", arguments='{"city":"Oslo"}')],
        ),
        Message("tool", [Content.from_function_result("c1", result="Sunny")]),
    ]
    assert to_response_items(messages) == [
        {"type": "message", "role": "system", "content": "Be terse."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
            ],
        },
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
    ]
