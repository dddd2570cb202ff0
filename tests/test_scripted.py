"""The scripted chat client: the shipped test double for agents."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from agentkeep import (
    ChatClientError,
    ChatResponseUpdate,
    Content,
    FunctionCallContent,
    Message,
    ScriptExhaustedError,
    TextContent,
    UsageContent,
    UsageDetails,
)
from agentkeep.clients.base import ChatClient, merge_updates
from agentkeep.testing import ScriptedChatClient


def user(text: str) -> list[Message]:
    return [Message("user", text)]


async def collect(client: ScriptedChatClient, messages: Sequence[Message]) -> list[ChatResponseUpdate]:
    return [u async for u in client.get_streaming_response(messages, options={})]


async def test_list_replies_are_consumed_in_order_then_exhausted() -> None:
    client = ScriptedChatClient(["one", "two"])
    assert client.remaining == 2

    first = await client.get_response(user("a"), options={})
    second = await client.get_response(user("b"), options={})

    assert first.text == "one"
    assert second.text == "two"
    assert first.messages[0].role == "assistant"
    assert first.finish_reason == "stop"
    assert first.model == "scripted"
    assert first.response_id != second.response_id
    assert client.remaining == 0

    with pytest.raises(ScriptExhaustedError, match="no reply left") as info:
        await client.get_response(user("c"), options={})
    assert isinstance(info.value, ChatClientError)
    assert len(client.calls) == 3  # the failing call is still recorded


async def test_empty_script_fails_on_first_call() -> None:
    with pytest.raises(ScriptExhaustedError):
        await ScriptedChatClient([]).get_response(user("a"), options={})


async def test_callable_replies_see_the_messages() -> None:
    seen: list[list[str]] = []

    def respond(messages: Sequence[Message]) -> str:
        seen.append([m.text for m in messages])
        return f"{len(messages)} message(s)"

    client = ScriptedChatClient(respond)
    assert client.remaining is None
    response = await client.get_response([Message("system", "sys"), Message("user", "hi")], options={})
    assert response.text == "2 message(s)"
    assert seen == [["sys", "hi"]]


async def test_default_echoes_last_user_text() -> None:
    client = ScriptedChatClient()
    messages = [
        Message("user", "first"),
        Message("assistant", "answer"),
        Message("user", "second"),
        Message("tool", [Content.from_function_result("c1", result=1)]),
    ]
    assert (await client.get_response(messages, options={})).text == "second"
    assert (await client.get_response([Message("system", "only system")], options={})).text == ""


async def test_calls_and_options_are_recorded() -> None:
    client = ScriptedChatClient(["a", "b"])
    first = user("x")
    await client.get_response(first, options={"temperature": 0.5})
    await client.get_response(user("y"), options={"model": "m"})

    assert client.calls[0] is first
    assert [m.text for call in client.calls for m in call] == ["x", "y"]
    assert client.call_options == [{"temperature": 0.5}, {"model": "m"}]


async def test_message_replies_are_fresh_copies() -> None:
    scripted = Message("assistant", "canned", message_id="fixed-id")
    client = ScriptedChatClient([scripted, scripted])

    first = (await client.get_response(user("a"), options={})).messages[0]
    second = (await client.get_response(user("b"), options={})).messages[0]

    assert first is not scripted
    assert second is not first
    assert first.text == second.text == "canned"
    assert first.message_id is None
    assert scripted.message_id == "fixed-id"


def test_tool_call_helper() -> None:
    message = ScriptedChatClient.tool_call("get_weather", {"city": "Paris"}, call_id="c1")
    assert message.role == "assistant"
    assert message.function_calls == [FunctionCallContent("c1", "get_weather", {"city": "Paris"})]

    generated = ScriptedChatClient.tool_call("ping")
    call = generated.function_calls[0]
    assert call.name == "ping"
    assert call.arguments is None
    assert call.call_id.startswith("call_")
    assert call.call_id != ScriptedChatClient.tool_call("ping").function_calls[0].call_id

    as_text = ScriptedChatClient.tool_call("add", '{"a": 1}')
    assert as_text.function_calls[0].arguments == '{"a": 1}'


async def test_tool_call_reply_finish_reason() -> None:
    client = ScriptedChatClient([ScriptedChatClient.tool_call("ping", call_id="c1")])
    response = await client.get_response(user("go"), options={})
    assert response.finish_reason == "tool_calls"
    assert response.messages[0].function_calls[0].call_id == "c1"


# -- streaming ---------------------------------------------------------------------------------


async def test_streaming_yields_word_pieces_that_merge_to_the_reply() -> None:
    text = "The quick  brown fox.\nJumps over."
    plain = await ScriptedChatClient([text]).get_response(user("go"), options={})
    updates = await collect(ScriptedChatClient([text]), user("go"))

    text_updates = [u for u in updates if u.text]
    assert [u.text for u in text_updates] == ["The ", "quick  ", "brown ", "fox.\n", "Jumps ", "over."]
    assert len({u.message_id for u in updates}) == 1
    assert updates[-1].finish_reason == "stop"
    assert all(u.finish_reason is None for u in updates[:-1])
    assert isinstance(updates[-1].contents[0], UsageContent)

    merged = merge_updates(updates)
    assert merged.text == text
    assert merged.messages[0].contents == [TextContent(text)]
    assert merged.usage == plain.usage
    assert merged.finish_reason == "stop"


async def test_streaming_tool_call_arrives_whole() -> None:
    call = ScriptedChatClient.tool_call("add", {"a": 1, "b": 2}, call_id="c1")
    updates = await collect(ScriptedChatClient([call]), user("go"))
    merged = merge_updates(updates)
    assert merged.messages[0].function_calls == call.function_calls
    assert merged.finish_reason == "tool_calls"


async def test_streaming_keeps_text_with_properties_whole() -> None:
    reply = Message("assistant", [Content.from_text("two words", lang="en")])
    updates = await collect(ScriptedChatClient([reply]), user("go"))
    texts = [c for u in updates for c in u.contents if isinstance(c, TextContent)]
    assert texts == [TextContent("two words", additional_properties={"lang": "en"})]


# -- usage -------------------------------------------------------------------------------------


async def test_default_usage_estimates_output_tokens_only() -> None:
    client = ScriptedChatClient(["x" * 40, "hi", ScriptedChatClient.tool_call("ping")])
    long = await client.get_response(user("a"), options={})
    short = await client.get_response(user("a"), options={})
    call = await client.get_response(user("a"), options={})
    assert long.usage == UsageDetails(output_token_count=10, total_token_count=10)
    assert short.usage == UsageDetails(output_token_count=1, total_token_count=1)
    assert call.usage == UsageDetails(output_token_count=0, total_token_count=0)


async def test_fixed_usage() -> None:
    fixed = UsageDetails(3, 4, 7)
    client = ScriptedChatClient(["a", "b"], usage=fixed)
    assert (await client.get_response(user("x"), options={})).usage == fixed
    assert (await client.get_response(user("y"), options={})).usage == fixed


async def test_callable_usage_sees_request_and_reply() -> None:
    def count(messages: Sequence[Message], reply: Message) -> UsageDetails:
        prompt = sum(len(m.text) for m in messages)
        return UsageDetails(prompt, len(reply.text), prompt + len(reply.text))

    client = ScriptedChatClient(["abc"], usage=count)
    response = await client.get_response([Message("user", "12345")], options={})
    assert response.usage == UsageDetails(5, 3, 8)


# -- structured output -------------------------------------------------------------------------


@dataclass
class Answer:
    value: int


async def test_response_format_parses_value() -> None:
    client = ScriptedChatClient(['{"value": 42}', "not json"])
    response = await client.get_response(user("q"), options={"response_format": Answer})
    assert response.value == Answer(42)
    with pytest.raises(ChatClientError, match="Answer"):
        await client.get_response(user("q"), options={"response_format": Answer})


# -- service-managed conversations -------------------------------------------------------------


async def test_service_managed_keeps_full_conversation() -> None:
    seen: list[list[str]] = []

    def respond(messages: Sequence[Message]) -> str:
        seen.append([m.text for m in messages])
        return f"answer {len(seen)}"

    client = ScriptedChatClient(respond, service_managed=True)
    assert isinstance(client, ChatClient)
    assert client.stores_by_default is True

    first = await client.get_response(user("q1"), options={})
    conversation_id = first.conversation_id
    assert conversation_id is not None
    second = await client.get_response(user("q2"), options={"conversation_id": conversation_id})

    assert second.conversation_id == conversation_id
    assert seen == [["q1"], ["q1", "answer 1", "q2"]]
    assert [m.text for m in client.conversations[conversation_id]] == ["q1", "answer 1", "q2", "answer 2"]
    assert [m.text for m in client.calls[1]] == ["q2"]


async def test_each_new_call_without_id_starts_a_conversation() -> None:
    client = ScriptedChatClient(["a", "b"], service_managed=True)
    first = await client.get_response(user("x"), options={})
    second = await client.get_response(user("y"), options={})
    assert first.conversation_id != second.conversation_id
    assert len(client.conversations) == 2


async def test_unknown_conversation_is_refused() -> None:
    client = ScriptedChatClient(["a"], service_managed=True)
    with pytest.raises(ChatClientError, match="conv_missing"):
        await client.get_response(user("x"), options={"conversation_id": "conv_missing"})
    plain = ScriptedChatClient(["a"])
    with pytest.raises(ChatClientError):
        await plain.get_response(user("x"), options={"conversation_id": "conv_missing"})


async def test_store_false_disables_service_conversations() -> None:
    client = ScriptedChatClient(["a"], service_managed=True)
    response = await client.get_response(user("x"), options={"store": False})
    assert response.conversation_id is None
    assert client.conversations == {}


async def test_store_true_enables_conversations_on_a_plain_client() -> None:
    client = ScriptedChatClient(["a"])
    assert client.stores_by_default is False
    response = await client.get_response(user("x"), options={"store": True})
    assert response.conversation_id in client.conversations


async def test_streaming_carries_conversation_id() -> None:
    client = ScriptedChatClient(["a b"], service_managed=True)
    updates = await collect(client, user("x"))
    ids = {u.conversation_id for u in updates}
    assert len(ids) == 1
    (conversation_id,) = ids
    assert conversation_id in client.conversations
    assert merge_updates(updates).conversation_id == conversation_id
