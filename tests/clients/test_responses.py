"""OpenAIResponsesClient against a real HTTP server that keeps conversations.

The server is the Responses API test app of :mod:`tests.clients.responses_server` (its docstring
states the subset it implements), served by uvicorn on a free localhost port per test. It answers
deterministically, so these tests can check exact texts, items and counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from openai import AsyncOpenAI

from agentkeep import Agent, InMemoryHistoryProvider
from agentkeep.clients.openai import OpenAIResponsesClient
from agentkeep.errors import ChatClientError, ChatRequestError, ModelUnavailableError
from agentkeep.messages import Message
from tests.clients import servers
from tests.clients.servers import RunningServer, start_responses_server

MODEL = "test-model"

# the fixtures this module uses, from tests/clients/servers.py
responses_server = servers.responses_server
shared_responses_server = servers.shared_responses_server


@pytest.fixture
async def client(responses_server: RunningServer) -> AsyncIterator[OpenAIResponsesClient]:
    async with OpenAIResponsesClient(MODEL, base_url=responses_server.base_url, max_retries=0) as client:
        yield client


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    return f"Sunny in {city}"


@dataclass
class Weather:
    city: str
    temp: int


def user_item(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def test_service_keeps_history_and_history_providers_are_skipped(
    client: OpenAIResponsesClient,
    responses_server: RunningServer,
) -> None:
    history = InMemoryHistoryProvider()
    agent = client.as_agent("Be brief.", context_providers=[history])
    session = agent.create_session()

    first = await agent.run("My name is Ada.", session=session)
    assert first.text == "echo: My name is Ada. (user messages: 1)"
    assert session.service_session_id == first.response_id == first.conversation_id
    assert first.response_id in responses_server.state.conversations

    second = await agent.run("What is my name?", session=session)
    assert second.text == "echo: What is my name? (user messages: 2)"
    assert session.service_session_id == second.response_id != first.response_id

    sent = responses_server.state.requests
    assert "previous_response_id" not in sent[0]
    assert sent[0]["instructions"] == "Be brief."
    assert sent[1]["previous_response_id"] == first.response_id
    assert sent[1]["input"] == [user_item("What is my name?")]  # only the new message
    assert sent[1]["instructions"] == "Be brief."  # not carried over by the API: sent again
    # ... and the server answered the whole conversation
    seen = responses_server.state.seen[1]
    assert [(i["type"], i.get("role")) for i in seen] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    # the service is the source of truth: the local history provider stored nothing
    assert await history.get_messages(session.session_id, session=session) == []


async def test_get_session_resumes_a_service_conversation(
    client: OpenAIResponsesClient,
    responses_server: RunningServer,
) -> None:
    agent = client.as_agent()
    session = agent.create_session()
    await agent.run("Remember 42.", session=session)
    saved = session.service_session_id
    assert saved is not None

    # a new process would only have the id: a new client, agent and session object
    async with OpenAIResponsesClient(MODEL, base_url=responses_server.base_url) as other:
        resumed_agent = other.as_agent()
        assert isinstance(saved, str)
        resumed = resumed_agent.get_session(service_session_id=saved)
        reply = await resumed_agent.run("What number?", session=resumed)
    assert reply.text == "echo: What number? (user messages: 2)"
    assert responses_server.state.requests[-1]["previous_response_id"] == saved
    assert resumed.service_session_id == reply.response_id


async def test_tool_loop_in_service_mode_sends_only_function_call_outputs(
    client: OpenAIResponsesClient,
    responses_server: RunningServer,
) -> None:
    agent = client.as_agent(tools=[get_weather])
    session = agent.create_session()
    response = await agent.run('Use get_weather {"city": "Paris"}', session=session)

    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant"]
    call = response.messages[0].function_calls[0]
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert response.messages[1].function_results[0].result == "Sunny in Paris"
    assert response.text == "results: Sunny in Paris"

    first, second = responses_server.state.requests
    assert first["tools"][0]["name"] == "get_weather"
    assert first["tools"][0]["parameters"]["required"] == ["city"]
    assert first["tool_choice"] == "auto"
    assert second["previous_response_id"] == next(iter(responses_server.state.responses))
    assert second["input"] == [
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny in Paris"}
    ]
    assert session.service_session_id == response.response_id

    # the conversation goes on after the tool round trip
    follow_up = await agent.run("Thanks", session=session)
    assert follow_up.text == "echo: Thanks (user messages: 2)"


async def test_required_tool_choice_names_the_single_tool(
    client: OpenAIResponsesClient,
    responses_server: RunningServer,
) -> None:
    agent = client.as_agent(tools=[get_weather], max_tool_iterations=1)
    response = await agent.run("weather?", options={"tool_choice": "required"})
    assert responses_server.state.requests[0]["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert responses_server.state.requests[1]["tool_choice"] == "none"  # the final call
    assert response.messages[0].function_calls[0].name == "get_weather"


async def test_streaming(client: OpenAIResponsesClient, responses_server: RunningServer) -> None:
    agent = client.as_agent()
    session = agent.create_session()
    stream = agent.run("hello there friend", session=session, stream=True)
    texts = [update.text async for update in stream]
    response = await stream.get_final_response()

    expected = "echo: hello there friend (user messages: 1)"
    assert len([t for t in texts if t]) > 3  # word by word
    assert "".join(texts) == response.text == expected
    assert response.usage is not None
    assert response.usage.input_token_count == 3
    assert response.usage.output_token_count == len(expected.split())
    assert session.service_session_id == response.response_id

    stream = agent.run("again", session=session, stream=True)
    second = await stream.get_final_response()
    assert second.text == "echo: again (user messages: 2)"
    assert responses_server.state.requests[1]["previous_response_id"] == response.response_id
    assert responses_server.state.requests[1]["stream"] is True


async def test_streaming_tool_loop(client: OpenAIResponsesClient, responses_server: RunningServer) -> None:
    agent = client.as_agent(tools=[get_weather])
    session = agent.create_session()
    stream = agent.run('get_weather {"city": "Oslo"}', session=session, stream=True)
    updates = [update async for update in stream]
    response = await stream.get_final_response()

    assert [u.role for u in updates if u.contents][0:2] == ["assistant", "tool"]
    assert response.text == "results: Sunny in Oslo"
    call_id = response.messages[0].function_calls[0].call_id
    assert responses_server.state.requests[1]["input"] == [
        {"type": "function_call_output", "call_id": call_id, "output": "Sunny in Oslo"}
    ]


async def test_store_false_is_stateless(
    client: OpenAIResponsesClient, responses_server: RunningServer
) -> None:
    agent = client.as_agent(default_options={"store": False})
    session = agent.create_session()
    await agent.run("one", session=session)
    second = await agent.run("two", session=session)

    assert session.service_session_id is None
    assert second.conversation_id is None
    assert responses_server.state.conversations == {}  # the server kept nothing
    last = responses_server.state.requests[-1]
    assert last["store"] is False
    assert "previous_response_id" not in last
    # the agent kept the history and sent all of it
    assert [(i["type"], i["role"]) for i in last["input"]] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert second.text == "echo: two (user messages: 2)"


async def test_stateless_tool_loop_sends_calls_and_outputs(
    client: OpenAIResponsesClient,
    responses_server: RunningServer,
) -> None:
    agent = client.as_agent(tools=[get_weather], default_options={"store": False})
    response = await agent.run('get_weather {"city": "Rome"}', session=agent.create_session())
    assert response.text == "results: Sunny in Rome"
    kinds = [item["type"] for item in responses_server.state.requests[1]["input"]]
    assert kinds == ["message", "function_call", "function_call_output"]


async def test_direct_calls_usage_structured_output_and_length(
    client: OpenAIResponsesClient,
    responses_server: RunningServer,
) -> None:
    response = await client.get_response(
        [Message("user", ['{"city": "Paris", "temp": 21}'])],
        options={"response_format": Weather, "instructions": "Answer in JSON."},
    )
    assert response.value == Weather("Paris", 21)
    fmt = responses_server.state.requests[0]["text"]["format"]
    assert (fmt["type"], fmt["name"], sorted(fmt["schema"]["properties"])) == (
        "json_schema",
        "Weather",
        ["city", "temp"],
    )
    assert response.finish_reason == "stop"
    assert response.model == MODEL

    long = await client.get_response([Message("user", ["a b c d e f"])], options={"max_tokens": 3})
    assert responses_server.state.requests[1]["max_output_tokens"] == 3
    assert long.finish_reason == "length"
    assert long.usage is not None
    assert (long.usage.input_token_count, long.usage.output_token_count) == (6, 3)


async def test_unknown_model_is_a_request_error(responses_server: RunningServer) -> None:
    async with OpenAIResponsesClient("no-such-model", base_url=responses_server.base_url) as client:
        with pytest.raises(ChatRequestError) as caught:
            await client.get_response([Message("user", ["hi"])], options={})
    assert caught.value.status_code == 404
    assert "no-such-model" in str(caught.value)
    assert "\n" not in str(caught.value)


async def test_unknown_conversation_is_a_request_error(client: OpenAIResponsesClient) -> None:
    agent = client.as_agent()
    session = agent.get_session(service_session_id="resp_does_not_exist")
    with pytest.raises(ChatRequestError) as caught:
        await agent.run("hi", session=session)
    assert caught.value.status_code == 400
    assert "resp_does_not_exist" in str(caught.value)


async def test_bad_api_key_is_reported_without_the_key(responses_server: RunningServer) -> None:
    responses_server.state.api_key = "sk-the-right-key-0001"
    secret = "sk-wrong-secret-key-1234567890"
    async with OpenAIResponsesClient(MODEL, base_url=responses_server.base_url, api_key=secret) as client:
        with pytest.raises(ChatRequestError) as caught:
            await client.get_response([Message("user", ["hi"])], options={})
        assert caught.value.status_code == 401
        assert secret not in str(caught.value)
        assert "***" in str(caught.value)
        assert secret not in repr(client)


async def test_server_errors_are_retried_then_reported(responses_server: RunningServer) -> None:
    state = responses_server.state
    async with OpenAIResponsesClient(MODEL, base_url=responses_server.base_url, max_retries=1) as client:
        state.fail_next = 1
        response = await client.get_response([Message("user", ["hi"])], options={})
        assert response.text.startswith("echo: hi")
        assert len(state.requests) == 2  # one 500, one retry that worked

        state.fail_next = 2
        with pytest.raises(ModelUnavailableError) as caught:
            await client.get_response([Message("user", ["hi"])], options={})
    assert caught.value.status_code == 500
    assert len(state.requests) == 4


async def test_timeout_is_model_unavailable() -> None:
    server = start_responses_server()  # its own: the slow request outlives the test's call
    server.state.delay = 0.8
    try:
        # The server would answer after 0.8 s: a timeout error proves the 0.2 s timeout fired
        # (asyncio.timeout is only a hang guard).
        async with (
            asyncio.timeout(30),
            OpenAIResponsesClient(MODEL, base_url=server.base_url, timeout=0.2, max_retries=0) as client,
        ):
            with pytest.raises(ModelUnavailableError) as caught:
                await client.get_response([Message("user", ["hi"])], options={})
    finally:
        server.stop()
    assert caught.value.status_code is None
    assert "timed out" in str(caught.value)


async def test_stopped_server_is_model_unavailable() -> None:
    server = start_responses_server()
    base_url = server.base_url
    server.stop()
    # asyncio.timeout is a hang guard: a refused connection fails at once
    async with (
        asyncio.timeout(30),
        OpenAIResponsesClient(MODEL, base_url=base_url, timeout=2.0, max_retries=0) as client,
    ):
        with pytest.raises(ModelUnavailableError) as caught:
            await client.get_response([Message("user", ["hi"])], options={})
    assert caught.value.status_code is None
    assert base_url in str(caught.value)


async def test_stream_error_event(client: OpenAIResponsesClient, responses_server: RunningServer) -> None:
    responses_server.state.stream_error = True
    with pytest.raises(ModelUnavailableError, match="the model crashed"):
        async for _ in client.get_streaming_response([Message("user", ["hi"])], options={}):
            pass


async def test_streamed_request_error(responses_server: RunningServer) -> None:
    async with OpenAIResponsesClient("nope", base_url=responses_server.base_url) as client:
        with pytest.raises(ChatRequestError) as caught:
            async for _ in client.get_streaming_response([Message("user", ["hi"])], options={}):
                pass
    assert caught.value.status_code == 404


async def test_injected_client_is_not_closed(responses_server: RunningServer) -> None:
    async with AsyncOpenAI(api_key="k", base_url=responses_server.base_url) as sdk:
        client = OpenAIResponsesClient(MODEL, client=sdk)
        await client.get_response([Message("user", ["hi"])], options={})
        await client.aclose()
        with pytest.raises(ChatClientError, match="closed"):
            await client.get_response([Message("user", ["hi"])], options={})
        assert not sdk.is_closed()
        await sdk.responses.create(model=MODEL, input="still open")


async def test_configuration_from_the_environment(
    responses_server: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", responses_server.base_url)
    monkeypatch.setenv("OPENAI_MODEL", MODEL)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with OpenAIResponsesClient() as client:
        assert client.model == MODEL
        assert client.base_url == responses_server.base_url
        assert client.client.api_key == "not-needed"
        response = await client.get_response([Message("user", ["hi"])], options={})
    assert response.text == "echo: hi (user messages: 1)"
    assert client.client.is_closed()  # created by the client, so closed by it


def test_no_key_and_no_base_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ChatRequestError, match="OPENAI_API_KEY"):
        OpenAIResponsesClient("gpt-4o-mini")


async def test_agent_sees_stores_by_default(client: OpenAIResponsesClient) -> None:
    assert client.stores_by_default is True
    assert isinstance(client.as_agent(), Agent)
