"""The host's stateless Chat Completions endpoint with the official ``openai`` SDK: plain,
streamed, and a caller-run tool call; nothing is stored."""

from __future__ import annotations

import openai
import pytest

from tests.host.conftest import ALICE, Hosted

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def sdk(hosted: Hosted) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{hosted.server.url}/v1", api_key=ALICE[0], max_retries=0)


async def test_completions_answer_the_conversation_sent_and_store_nothing(hosted: Hosted) -> None:
    async with sdk(hosted) as client:
        done = await client.chat.completions.create(
            model="chat",
            messages=[
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "two"},
            ],
        )
        assert done.object == "chat.completion"
        assert done.choices[0].message.content == "heard 2: one | two"
        assert done.choices[0].finish_reason == "stop"
        stream = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "stream"}], stream=True
        )
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text == "heard 1: stream"
        assert chunks[-1].choices[0].finish_reason == "stop"
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert await hosted.conversations() == []  # stateless: nothing was stored


async def test_a_caller_tool_call_finishes_with_tool_calls(hosted: Hosted) -> None:
    async with sdk(hosted) as client:
        asked = await client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "weather in Paris?"}],
            tools=[WEATHER],  # type: ignore[list-item]
        )
        choice = asked.choices[0]
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls or []
        assert call.function.name == "get_weather"  # type: ignore[union-attr]
        answered = await client.chat.completions.create(
            model="chat",
            messages=[
                {"role": "user", "content": "weather in Paris?"},
                choice.message.model_dump(exclude_none=True),  # type: ignore[list-item]
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
            ],
            tools=[WEATHER],  # type: ignore[list-item]
        )
        assert answered.choices[0].message.content == "the tool said sunny"
