"""The agent's run loop, driven by the scripted chat client.

Covers history across turns, the request each model call receives, default in-memory history,
sessions shared between agents, streaming, the tool loop, failed runs, usage, service-managed
conversations, per-service-call persistence, provider clashes, session (de)serialization,
structured output and concurrent runs on one session.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from agentkeep import (
    Agent,
    AgentSession,
    AIContext,
    BaseChatClient,
    ChatOptions,
    ChatResponse,
    Content,
    ContextProvider,
    FunctionTool,
    InMemoryHistoryProvider,
    Message,
    ProviderConfigurationError,
    ProviderSessionState,
    ScriptExhaustedError,
    SessionContext,
    SessionFormatError,
    SessionModeError,
    ToolError,
    UsageDetails,
)
from agentkeep.testing import ScriptedChatClient
from tests.helpers import default_history

tool_call = ScriptedChatClient.tool_call


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


def roles(messages: Sequence[Message]) -> list[str]:
    return [m.role for m in messages]


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class RecordingProvider(ContextProvider):
    """Adds nothing; records what each hook saw (test-only data on the instance)."""

    def __init__(self, source_id: str = "recorder", *, instructions: str | None = None) -> None:
        super().__init__(source_id)
        self.extra_instructions = instructions
        self.exceptions: list[BaseException | None] = []
        self.responses: list[list[str]] = []

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        if self.extra_instructions:
            return AIContext(instructions=self.extra_instructions)
        return None

    async def after_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> None:
        self.exceptions.append(context.exception)
        self.responses.append(texts(context.response_messages))


class FailingClient(BaseChatClient):
    """A model that is down."""

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        self.calls += 1
        raise RuntimeError("model is down")


class YieldingClient(ScriptedChatClient):
    """A scripted client that yields to the event loop before answering, so runs interleave."""

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        await asyncio.sleep(0)
        return await super().get_response(messages, options=options)


# -- history across turns ---------------------------------------------------------------------


async def test_three_turns_grow_history_by_two_each() -> None:
    client = ScriptedChatClient(["Done.", "Done.", "Done."])
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    counts: list[int] = []
    for _ in range(3):
        response = await agent.run("continue", session=session)
        assert response.text == "Done."
        counts.append(len(await history.get_session_messages(session)))

    assert counts == [2, 4, 6]
    stored = await history.get_session_messages(session)
    assert roles(stored) == ["user", "assistant"] * 3
    assert texts(stored) == ["continue", "Done."] * 3
    assert len({m.message_id for m in stored}) == 6


async def test_default_history_counts_through_private_provider() -> None:
    client = ScriptedChatClient(["Done.", "Done.", "Done."])
    agent = Agent(client)
    session = agent.create_session()
    counts: list[int] = []
    for _ in range(3):
        await agent.run("continue", session=session)
        counts.append(len(await default_history(agent).get_session_messages(session)))
    assert counts == [2, 4, 6]


async def test_second_turn_request_has_history_before_input() -> None:
    client = ScriptedChatClient(["first answer", "second answer"])
    agent = Agent(client, context_providers=[InMemoryHistoryProvider()])
    session = agent.create_session()

    await agent.run("first question", session=session)
    await agent.run("second question", session=session)

    assert roles(client.calls[0]) == ["user"]
    assert texts(client.calls[0]) == ["first question"]
    assert roles(client.calls[1]) == ["user", "assistant", "user"]
    assert texts(client.calls[1]) == ["first question", "first answer", "second question"]


async def test_instructions_join_agent_and_provider_instructions() -> None:
    client = ScriptedChatClient(["ok", "ok"])
    agent = Agent(
        client,
        "You are terse.",
        context_providers=[
            RecordingProvider("p1", instructions="The user is called Ada."),
            RecordingProvider("p2", instructions="Answer in English."),
        ],
    )
    await agent.run("hi")
    assert client.call_options[0].get("instructions") == (
        "You are terse.\nThe user is called Ada.\nAnswer in English."
    )

    # instructions given in the run's options come right after the agent's own
    await agent.run("hi", options={"instructions": "Be kind."})
    assert client.call_options[1].get("instructions") == (
        "You are terse.\nBe kind.\nThe user is called Ada.\nAnswer in English."
    )


async def test_no_instructions_means_no_instructions_option() -> None:
    client = ScriptedChatClient(["ok"])
    await Agent(client).run("hi")
    assert "instructions" not in client.call_options[0]


# -- default history ---------------------------------------------------------------------------


async def test_default_history_used_without_mutating_providers() -> None:
    recorder = RecordingProvider()
    client = ScriptedChatClient(["one", "two"])
    agent = Agent(client, context_providers=[recorder])
    session = agent.create_session()

    await agent.run("a", session=session)
    await agent.run("b", session=session)

    assert texts(client.calls[1]) == ["a", "one", "b"]
    assert agent.context_providers == (recorder,)


async def test_default_history_used_when_only_an_audit_history_provider_exists() -> None:
    audit = InMemoryHistoryProvider("audit", load_messages=False)
    client = ScriptedChatClient(["one", "two"])
    agent = Agent(client, context_providers=[audit])
    session = agent.create_session()

    await agent.run("a", session=session)
    await agent.run("b", session=session)

    assert texts(client.calls[1]) == ["a", "one", "b"]
    assert agent.context_providers == (audit,)
    # the audit sink recorded both turns without loading anything itself
    assert texts(await audit.get_session_messages(session)) == ["a", "one", "b", "two"]


async def test_without_session_no_history_is_kept() -> None:
    client = ScriptedChatClient(["one", "two"])
    agent = Agent(client)

    await agent.run("a")
    await agent.run("b")

    assert texts(client.calls[1]) == ["b"]
    assert agent.context_providers == ()


async def test_explicit_history_provider_without_session_keeps_nothing() -> None:
    client = ScriptedChatClient(["one", "two"])
    agent = Agent(client, context_providers=[InMemoryHistoryProvider()])
    await agent.run("a")
    await agent.run("b")
    assert texts(client.calls[1]) == ["b"]


# -- sessions shared between agents -------------------------------------------------------------


async def test_one_session_shared_by_two_agents_shares_history() -> None:
    client_a = ScriptedChatClient(["from a"])
    client_b = ScriptedChatClient(["from b"])
    agent_a = Agent(client_a, name="a")
    agent_b = Agent(client_b, name="b")
    session = agent_a.create_session()

    await agent_a.run("hello a", session=session)
    await agent_b.run("hello b", session=session)

    assert texts(client_b.calls[0]) == ["hello a", "from a", "hello b"]
    stored = await default_history(agent_b).get_session_messages(session)
    assert texts(stored) == ["hello a", "from a", "hello b", "from b"]
    assert [m.author_name for m in stored if m.role == "assistant"] == ["a", "b"]


async def test_one_agent_keeps_two_sessions_apart() -> None:
    client = ScriptedChatClient(lambda messages: f"seen {len(messages)}")
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history])
    s1 = agent.create_session()
    s2 = agent.create_session()

    await agent.run("s1 first", session=s1)
    await agent.run("s2 first", session=s2)
    await agent.run("s1 second", session=s1)

    assert texts(client.calls[1]) == ["s2 first"]
    assert texts(client.calls[2]) == ["s1 first", "seen 1", "s1 second"]
    assert texts(await history.get_session_messages(s1)) == ["s1 first", "seen 1", "s1 second", "seen 3"]
    assert texts(await history.get_session_messages(s2)) == ["s2 first", "seen 1"]


# -- streaming ---------------------------------------------------------------------------------


async def test_streaming_updates_add_up_to_final_response() -> None:
    client = ScriptedChatClient(["Hello there, brave new world."])
    history = InMemoryHistoryProvider()
    agent = Agent(client, name="bot", context_providers=[history])
    session = agent.create_session()

    stream = agent.run("hi", session=session, stream=True)
    updates = [update async for update in stream]
    final = await stream.get_final_response()

    assert len(updates) > 1  # word by word
    assert "".join(u.text for u in updates) == final.text == "Hello there, brave new world."
    assert stream.response is final
    assert {u.message_id for u in updates} == {final.messages[0].message_id}
    assert all(u.author_name == "bot" for u in updates)
    assert texts(await history.get_session_messages(session)) == ["hi", "Hello there, brave new world."]


async def test_streaming_final_response_matches_non_streaming_run() -> None:
    script = [tool_call("add", {"a": 2, "b": 3}, call_id="c1"), "The sum is 5."]
    streamed_client = ScriptedChatClient(script, usage=UsageDetails(1, 2, 3))
    plain_client = ScriptedChatClient(script, usage=UsageDetails(1, 2, 3))
    streamed_agent = Agent(streamed_client, name="bot", tools=[add])
    plain_agent = Agent(plain_client, name="bot", tools=[add])

    stream = streamed_agent.run("add 2 and 3", stream=True)
    streamed = await stream.get_final_response()
    plain = await plain_agent.run("add 2 and 3")

    def shape(messages: Sequence[Message]) -> list[tuple[str, list[Content], str | None]]:
        return [(m.role, m.contents, m.author_name) for m in messages]

    assert shape(streamed.messages) == shape(plain.messages)
    assert streamed.text == plain.text == "The sum is 5."
    assert streamed.usage == plain.usage == UsageDetails(2, 4, 6)
    assert texts(streamed_client.calls[1]) == texts(plain_client.calls[1])


async def test_streaming_tool_loop_yields_calls_results_and_text() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 2, "b": 3}, call_id="c1"), "It is 5."])
    agent = Agent(client, tools=[add])

    stream = agent.run("add", stream=True)
    updates = [u async for u in stream]

    kinds = [c.type for u in updates for c in u.contents]
    assert kinds[0] == "function_call"
    assert "function_result" in kinds
    assert "usage" not in kinds
    tool_updates = [u for u in updates if u.role == "tool"]
    assert len(tool_updates) == 1
    result = tool_updates[0].contents[0]
    assert result.type == "function_result"
    assert "".join(u.text for u in updates) == "It is 5."
    final = await stream.get_final_response()
    assert roles(final.messages) == ["assistant", "tool", "assistant"]


async def test_streaming_stores_history_only_when_consumed() -> None:
    client = ScriptedChatClient(["one two three"])
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    stream = agent.run("hi", session=session, stream=True)
    assert len(await history.get_session_messages(session)) == 0
    iterator = aiter(stream)
    first = await anext(iterator)
    assert first.text == "one "
    assert len(await history.get_session_messages(session)) == 0

    rest = [u async for u in iterator]
    assert "".join(u.text for u in [first, *rest]) == "one two three"
    assert texts(await history.get_session_messages(session)) == ["hi", "one two three"]
    assert (await stream.get_final_response()).text == "one two three"


async def test_stream_can_be_awaited_directly() -> None:
    client = ScriptedChatClient(["streamed"])
    agent = Agent(client)
    response = await agent.run("hi", stream=True)
    assert response.text == "streamed"


# -- the tool loop -----------------------------------------------------------------------------


async def test_sync_tool_result_is_fed_back() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 2, "b": 40}, call_id="c1"), "It is 42."])
    agent = Agent(client, tools=[add])

    response = await agent.run("what is 2 + 40?")

    assert response.text == "It is 42."
    assert len(client.calls) == 2
    second = client.calls[1]
    assert roles(second) == ["user", "assistant", "tool"]
    results = second[2].function_results
    assert len(results) == 1
    assert results[0].call_id == "c1"
    assert results[0].result == 42
    assert results[0].exception is None
    assert roles(response.messages) == ["assistant", "tool", "assistant"]
    assert [t.name for t in client.call_options[0].get("tools", [])] == ["add"]


async def test_async_tool_and_two_calls_in_one_message() -> None:
    async def lookup(city: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"city": city, "degrees": 18}

    calls = Message(
        "assistant",
        [
            Content.from_function_call("c1", "lookup", arguments={"city": "Paris"}),
            Content.from_function_call("c2", "add", arguments='{"a": 1, "b": 2}'),
        ],
    )
    client = ScriptedChatClient([calls, "done"])
    agent = Agent(client, tools=[lookup, add])

    await agent.run("go")

    tool_message = client.calls[1][-1]
    assert tool_message.role == "tool"
    results = tool_message.function_results
    assert [r.call_id for r in results] == ["c1", "c2"]
    assert results[0].result == {"city": "Paris", "degrees": 18}
    assert results[1].result == 3


async def test_run_level_tools_are_offered_for_that_run_only() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 1, "b": 1}), "two", "plain"])
    agent = Agent(client)

    await agent.run("add", tools=[add])
    await agent.run("no tools")

    assert [t.name for t in client.call_options[0].get("tools", [])] == ["add"]
    assert client.calls[1][-1].function_results[0].result == 2
    assert "tools" not in client.call_options[2]


async def test_tool_exception_becomes_result_and_run_continues() -> None:
    def explode() -> str:
        raise ValueError("kaboom")

    client = ScriptedChatClient([tool_call("explode", call_id="c1"), "Sorry, it failed."])
    agent = Agent(client, tools=[explode])

    response = await agent.run("try it")

    assert response.text == "Sorry, it failed."
    result = client.calls[1][-1].function_results[0]
    assert result.call_id == "c1"
    assert result.result is None
    assert result.exception is not None
    assert "ValueError" in result.exception
    assert "kaboom" in result.exception


async def test_wrong_argument_types_become_tool_argument_error_result() -> None:
    called: list[tuple[int, int]] = []

    def guarded_add(a: int, b: int) -> int:
        called.append((a, b))
        return a + b

    client = ScriptedChatClient(
        [tool_call("guarded_add", {"a": "not a number", "b": 2}, call_id="c1"), "oops"]
    )
    agent = Agent(client, tools=[guarded_add])

    response = await agent.run("add")

    assert response.text == "oops"
    assert called == []
    result = client.calls[1][-1].function_results[0]
    assert result.exception is not None
    assert "ToolArgumentError" in result.exception
    assert "guarded_add" in result.exception


async def test_unknown_tool_becomes_exception_result() -> None:
    client = ScriptedChatClient([tool_call("does_not_exist", {}, call_id="c1"), "ok"])
    agent = Agent(client, tools=[add])

    response = await agent.run("go")

    assert response.text == "ok"
    result = client.calls[1][-1].function_results[0]
    assert result.call_id == "c1"
    assert result.exception is not None
    assert "does_not_exist" in result.exception


class Opaque:
    """A tool return value with no JSON form."""

    def __str__(self) -> str:
        return "<opaque thing>"


async def test_tool_results_are_made_json_compatible() -> None:
    def forecast() -> Weather:
        return Weather(city="Paris", degrees=18)

    def opaque() -> Opaque:
        return Opaque()

    calls = Message(
        "assistant",
        [Content.from_function_call("c1", "forecast"), Content.from_function_call("c2", "opaque")],
    )
    client = ScriptedChatClient([calls, "ok"])
    history = InMemoryHistoryProvider()
    agent = Agent(client, tools=[forecast, opaque], context_providers=[history])
    session = agent.create_session()

    await agent.run("go", session=session)

    results = client.calls[1][-1].function_results
    assert results[0].result == {"city": "Paris", "degrees": 18}
    assert results[1].result == "<opaque thing>"
    # and the stored history survives a JSON round trip
    restored = agent.deserialize_session(AgentSession.from_json(session.to_json()).to_dict())
    stored = await history.get_session_messages(restored)
    assert stored[2].function_results[0].result == {"city": "Paris", "degrees": 18}


async def test_tool_loop_is_bounded() -> None:
    pings: list[int] = []

    def ping() -> str:
        pings.append(1)
        return "pong"

    client = ScriptedChatClient(lambda messages: ScriptedChatClient.tool_call("ping"))
    agent = Agent(client, tools=[ping], max_tool_iterations=2)

    session = agent.create_session()
    response = await agent.run("loop forever", session=session)

    assert len(client.calls) == 3
    assert len(pings) == 2
    for options in client.call_options[:2]:
        assert [t.name for t in options.get("tools", [])] == ["ping"]
        assert "tool_choice" not in options
    last = client.call_options[2]
    assert last.get("tool_choice") == "none"
    assert [t.name for t in last.get("tools", [])] == ["ping"]  # tool_choice needs the tools listed
    # the model ignored tool_choice: its call is answered with an error, not run, so the history
    # never ends with a call that has no result
    assert len(pings) == 2
    refusal = response.messages[-1]
    assert refusal.role == "tool"
    [result] = refusal.function_results
    assert result.call_id == response.messages[-2].function_calls[0].call_id
    assert result.exception is not None
    assert "max_tool_iterations=2" in result.exception
    stored = await default_history(agent).get_session_messages(session)
    assert [m.role for m in stored][-2:] == ["assistant", "tool"]


async def test_bounded_tool_loop_refusal_streams_and_persists_per_call() -> None:
    def ping() -> str:
        return "pong"

    client = ScriptedChatClient(lambda messages: ScriptedChatClient.tool_call("ping"))
    history = InMemoryHistoryProvider()
    agent = Agent(
        client,
        tools=[ping],
        max_tool_iterations=1,
        context_providers=[history],
        require_per_service_call_history_persistence=True,
    )
    session = agent.create_session()
    stream = agent.run("go", session=session, stream=True)
    roles = [update.role async for update in stream]
    assert roles == ["assistant", "tool", "assistant", "tool"]
    response = await stream.get_final_response()
    stored = await history.get_session_messages(session)
    assert [m.message_id for m in stored] == [
        stored[0].message_id,
        *(m.message_id for m in response.messages),
    ]


async def test_max_tool_iterations_zero_makes_a_single_call_without_tools() -> None:
    client = ScriptedChatClient(["plain answer"])
    agent = Agent(client, tools=[add], max_tool_iterations=0)
    response = await agent.run("hi")
    assert response.text == "plain answer"
    assert len(client.calls) == 1
    assert client.call_options[0].get("tool_choice") == "none"
    assert [t.name for t in client.call_options[0].get("tools", [])] == ["add"]


def test_negative_max_tool_iterations_is_refused() -> None:
    with pytest.raises(ValueError, match="max_tool_iterations"):
        Agent(ScriptedChatClient(), max_tool_iterations=-1)


async def test_duplicate_tool_names_between_agent_and_provider_fail() -> None:
    class AddsAdd(ContextProvider):
        async def before_run(
            self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
        ) -> AIContext | None:
            return AIContext(tools=[add])

    agent = Agent(ScriptedChatClient(["x"]), tools=[add], context_providers=[AddsAdd("adds")])
    with pytest.raises(ToolError, match="add"):
        await agent.run("hi")


# -- failed runs -------------------------------------------------------------------------------


async def test_failed_run_stores_nothing_and_providers_see_exception() -> None:
    client = FailingClient()
    history = InMemoryHistoryProvider()
    recorder = RecordingProvider()
    agent = Agent(client, context_providers=[history, recorder])
    session = agent.create_session()

    with pytest.raises(RuntimeError, match="model is down"):
        await agent.run("hi", session=session)

    assert client.calls == 1
    assert len(await history.get_session_messages(session)) == 0
    assert len(recorder.exceptions) == 1
    assert isinstance(recorder.exceptions[0], RuntimeError)
    assert recorder.responses == [[]]


async def test_failed_turn_leaves_existing_history_untouched() -> None:
    client = ScriptedChatClient(["Done."])
    history = InMemoryHistoryProvider()
    recorder = RecordingProvider()
    agent = Agent(client, context_providers=[history, recorder])
    session = agent.create_session()

    await agent.run("continue", session=session)
    before = list(await history.get_session_messages(session))
    assert len(before) == 2

    with pytest.raises(ScriptExhaustedError):
        await agent.run("continue", session=session)

    after = await history.get_session_messages(session)
    assert list(after) == before
    assert recorder.exceptions[0] is None
    assert isinstance(recorder.exceptions[1], ScriptExhaustedError)


async def test_failure_inside_tool_loop_stores_nothing() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 1, "b": 2})])  # no reply for the 2nd call
    history = InMemoryHistoryProvider()
    agent = Agent(client, tools=[add], context_providers=[history])
    session = agent.create_session()

    with pytest.raises(ScriptExhaustedError):
        await agent.run("add", session=session)

    assert len(client.calls) == 2
    assert len(await history.get_session_messages(session)) == 0


async def test_failed_stream_stores_nothing_and_propagates() -> None:
    history = InMemoryHistoryProvider()
    recorder = RecordingProvider()
    agent = Agent(ScriptedChatClient([]), context_providers=[history, recorder])
    session = agent.create_session()

    stream = agent.run("hi", session=session, stream=True)
    with pytest.raises(ScriptExhaustedError):
        await stream.get_final_response()

    assert len(await history.get_session_messages(session)) == 0
    assert isinstance(recorder.exceptions[0], ScriptExhaustedError)


# -- usage, text, author -----------------------------------------------------------------------


async def test_usage_is_summed_over_model_calls() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 1, "b": 2}), "three"], usage=UsageDetails(10, 5, 15))
    agent = Agent(client, tools=[add])
    response = await agent.run("add")
    assert response.usage == UsageDetails(20, 10, 30)
    assert response.text == "three"
    assert str(response) == "three"


async def test_author_name_is_the_agent_name() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 1, "b": 2}), "three"])
    history = InMemoryHistoryProvider()
    agent = Agent(client, name="calculator", tools=[add], context_providers=[history])
    session = agent.create_session()

    response = await agent.run("add", session=session)

    assert [m.author_name for m in response.messages if m.role == "assistant"] == ["calculator"] * 2
    stored = await history.get_session_messages(session)
    assert [m.author_name for m in stored if m.role == "assistant"] == ["calculator"] * 2
    assert all(m.author_name is None for m in stored if m.role != "assistant")


async def test_response_messages_have_identity() -> None:
    client = ScriptedChatClient(["hello"])
    response = await Agent(client).run("hi")
    message = response.messages[0]
    assert message.message_id is not None
    assert message.created_at is not None
    assert response.response_id is not None
    assert response.finish_reason == "stop"


# -- service-managed history --------------------------------------------------------------------


async def test_service_managed_conversation() -> None:
    client = ScriptedChatClient(["one", "two", "three"], service_managed=True)
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    first = await agent.run("hi", session=session)

    conversation_id = session.service_session_id
    assert conversation_id is not None
    assert first.conversation_id == conversation_id
    assert conversation_id in client.conversations
    assert "conversation_id" not in client.call_options[0]

    await agent.run("again", session=session)

    assert texts(client.calls[1]) == ["again"]
    assert client.call_options[1].get("conversation_id") == conversation_id
    assert session.service_session_id == conversation_id
    assert texts(client.conversations[conversation_id]) == ["hi", "one", "again", "two"]
    # the service is the source of truth: local history stays empty
    assert len(await history.get_session_messages(session)) == 0

    resumed = agent.get_session(service_session_id=conversation_id)
    await agent.run("third", session=resumed)
    assert texts(client.calls[2]) == ["third"]
    assert client.call_options[2].get("conversation_id") == conversation_id
    assert texts(client.conversations[conversation_id]) == ["hi", "one", "again", "two", "third", "three"]


async def test_service_managed_default_history_is_not_used() -> None:
    client = ScriptedChatClient(["one", "two"], service_managed=True)
    agent = Agent(client)
    session = agent.create_session()
    await agent.run("hi", session=session)
    await agent.run("again", session=session)
    assert texts(client.calls[1]) == ["again"]
    assert len(await default_history(agent).get_session_messages(session)) == 0


async def test_service_managed_tool_loop_sends_only_tool_results() -> None:
    client = ScriptedChatClient(
        [tool_call("add", {"a": 1, "b": 2}, call_id="c1"), "It is 3."], service_managed=True
    )
    agent = Agent(client, tools=[add])
    session = agent.create_session()

    response = await agent.run("add", session=session)

    assert response.text == "It is 3."
    assert roles(client.calls[1]) == ["tool"]
    assert client.calls[1][0].function_results[0].result == 3
    assert client.call_options[1].get("conversation_id") == session.service_session_id
    conversation_id = session.service_session_id
    assert isinstance(conversation_id, str)
    assert roles(client.conversations[conversation_id]) == ["user", "assistant", "tool", "assistant"]


async def test_conversation_id_in_options_makes_run_service_managed() -> None:
    client = ScriptedChatClient(["one", "two"], service_managed=True)
    first_agent = Agent(client)
    await first_agent.run("hi", session=first_agent.create_session())
    conversation_id = next(iter(client.conversations))

    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()
    await agent.run("again", session=session, options={"conversation_id": conversation_id})

    assert texts(client.calls[1]) == ["again"]
    assert client.call_options[1].get("conversation_id") == conversation_id
    assert session.service_session_id == conversation_id
    assert len(await history.get_session_messages(session)) == 0


# -- per-service-call history persistence -------------------------------------------------------


async def test_per_call_persistence_keeps_tool_call_when_next_call_fails() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 1, "b": 2}, call_id="c1")])
    history = InMemoryHistoryProvider()
    agent = Agent(
        client,
        tools=[add],
        context_providers=[history],
        require_per_service_call_history_persistence=True,
    )
    session = agent.create_session()

    with pytest.raises(ScriptExhaustedError):
        await agent.run("add", session=session)

    stored = await history.get_session_messages(session)
    assert roles(stored) == ["user", "assistant"]
    assert stored[0].text == "add"
    assert [c.call_id for c in stored[1].function_calls] == ["c1"]
    assert not any(m.function_results for m in stored)


async def test_per_call_persistence_stores_nothing_when_first_call_fails() -> None:
    history = InMemoryHistoryProvider()
    agent = Agent(
        FailingClient(), context_providers=[history], require_per_service_call_history_persistence=True
    )
    session = agent.create_session()
    with pytest.raises(RuntimeError):
        await agent.run("hi", session=session)
    assert len(await history.get_session_messages(session)) == 0


async def test_per_call_persistence_stores_each_message_once() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 1, "b": 2}, call_id="c1"), "It is 3.", "Bye."])
    history = InMemoryHistoryProvider()
    agent = Agent(
        client,
        tools=[add],
        context_providers=[history],
        require_per_service_call_history_persistence=True,
    )
    session = agent.create_session()

    response = await agent.run("add", session=session)

    stored = await history.get_session_messages(session)
    assert roles(stored) == ["user", "assistant", "tool", "assistant"]
    assert stored[2].function_results[0].result == 3
    assert stored[3].text == "It is 3."
    assert [m.message_id for m in stored[1:]] == [m.message_id for m in response.messages]

    await agent.run("thanks", session=session)
    stored = await history.get_session_messages(session)
    assert texts(stored)[4:] == ["thanks", "Bye."]
    assert len(stored) == 6
    assert len({m.message_id for m in stored}) == 6
    assert roles(client.calls[2]) == ["user", "assistant", "tool", "assistant", "user"]


async def test_per_call_persistence_with_default_history() -> None:
    client = ScriptedChatClient([tool_call("add", {"a": 1, "b": 2})])
    agent = Agent(client, tools=[add], require_per_service_call_history_persistence=True)
    session = agent.create_session()
    with pytest.raises(ScriptExhaustedError):
        await agent.run("add", session=session)
    assert roles(await default_history(agent).get_session_messages(session)) == ["user", "assistant"]


async def test_per_call_persistence_refuses_service_session() -> None:
    client = ScriptedChatClient(["x"])
    agent = Agent(client, require_per_service_call_history_persistence=True)
    session = agent.get_session(service_session_id="conv_remote")

    with pytest.raises(SessionModeError):
        await agent.run("hi", session=session)
    assert client.calls == []


async def test_per_call_persistence_refuses_service_managed_client() -> None:
    client = ScriptedChatClient(["x"], service_managed=True)
    agent = Agent(client, require_per_service_call_history_persistence=True)

    with pytest.raises(SessionModeError):
        await agent.run("hi", session=agent.create_session())
    with pytest.raises(SessionModeError):
        await agent.run("hi", stream=True).get_final_response()
    assert client.calls == []


async def test_per_call_persistence_with_store_false_on_service_client_is_local() -> None:
    client = ScriptedChatClient(["x"], service_managed=True)
    history = InMemoryHistoryProvider()
    agent = Agent(
        client,
        context_providers=[history],
        require_per_service_call_history_persistence=True,
        default_options={"store": False},
    )
    session = agent.create_session()
    await agent.run("hi", session=session)
    assert session.service_session_id is None
    assert client.conversations == {}
    assert texts(await history.get_session_messages(session)) == ["hi", "x"]


# -- provider configuration --------------------------------------------------------------------


def test_providers_sharing_a_source_id_are_refused() -> None:
    with pytest.raises(ProviderConfigurationError, match="dup"):
        Agent(ScriptedChatClient(), context_providers=[ContextProvider("dup"), ContextProvider("dup")])


def test_providers_sharing_a_state_key_are_refused() -> None:
    first = ContextProvider("first")
    second = ContextProvider("second")
    second.session_state = ProviderSessionState[dict[str, Any]](lambda _: {}, "first")
    with pytest.raises(ProviderConfigurationError, match="first"):
        Agent(ScriptedChatClient(), context_providers=[first, second])


def test_provider_using_default_history_key_clashes() -> None:
    sneaky = ContextProvider("sneaky")
    sneaky.session_state = ProviderSessionState[dict[str, Any]](lambda _: {}, "in_memory")
    with pytest.raises(ProviderConfigurationError, match="in_memory"):
        Agent(ScriptedChatClient(), context_providers=[sneaky])


def test_provider_named_like_default_history_clashes() -> None:
    with pytest.raises(ProviderConfigurationError, match="in_memory"):
        Agent(ScriptedChatClient(), context_providers=[ContextProvider("in_memory")])


def test_in_memory_key_is_free_when_a_loading_history_provider_exists() -> None:
    sneaky = ContextProvider("sneaky")
    sneaky.session_state = ProviderSessionState[dict[str, Any]](lambda _: {}, "in_memory")
    history = InMemoryHistoryProvider("history")
    agent = Agent(ScriptedChatClient(), context_providers=[history, sneaky])
    assert list(agent.context_providers) == [history, sneaky]


# -- session serialization ---------------------------------------------------------------------


@pytest.mark.parametrize("form", ["dict", "str", "bytes"])
async def test_serialize_deserialize_round_trip_continues(form: str) -> None:
    client = ScriptedChatClient(["one", "two"])
    agent = Agent(client)
    session = agent.create_session()
    await agent.run("first", session=session)
    stored_ids = [m.message_id for m in await default_history(agent).get_session_messages(session)]

    payload = agent.serialize_session(session)
    assert payload["version"] == 1
    data: dict[str, Any] | str | bytes
    if form == "dict":
        data = payload
    elif form == "str":
        data = json.dumps(payload)
    else:
        data = json.dumps(payload).encode()

    restored = agent.deserialize_session(data)
    assert restored is not session
    assert restored.session_id == session.session_id

    await agent.run("second", session=restored)
    assert texts(client.calls[1]) == ["first", "one", "second"]
    assert [m.message_id for m in client.calls[1]][:2] == stored_ids
    restored_history = await default_history(agent).get_session_messages(restored)
    assert texts(restored_history) == ["first", "one", "second", "two"]
    # the original session object is independent of the restored one
    assert len(await default_history(agent).get_session_messages(session)) == 2


async def test_deserialize_corrupt_history_state_names_provider() -> None:
    agent = Agent(ScriptedChatClient(["one"]))
    session = agent.create_session()
    await agent.run("first", session=session)
    good = agent.serialize_session(session)

    bad = copy.deepcopy(good)
    bad["state"] = {"in_memory": {"messages": [{"role": 5}]}}
    bad_before = copy.deepcopy(bad)

    with pytest.raises(SessionFormatError, match="in_memory"):
        agent.deserialize_session(bad)
    with pytest.raises(SessionFormatError, match="in_memory"):
        agent.deserialize_session(json.dumps(bad))

    # a failed deserialize alters nothing that was already stored
    assert bad == bad_before
    assert texts(await default_history(agent).get_session_messages(session)) == ["first", "one"]
    assert agent.serialize_session(session) == good
    assert len(await default_history(agent).get_session_messages(agent.deserialize_session(good))) == 2


async def test_deserialize_corrupt_provider_state_names_provider() -> None:
    agent = Agent(ScriptedChatClient(["one"]), context_providers=[ContextProvider("counter")])
    session = agent.create_session()
    await agent.run("hi", session=session)
    payload = agent.serialize_session(session)
    payload["state"]["counter"] = [1, 2, 3]  # a dict is expected

    with pytest.raises(SessionFormatError, match="counter"):
        agent.deserialize_session(payload)


def test_deserialize_refuses_unknown_version_and_bad_json() -> None:
    agent = Agent(ScriptedChatClient())
    payload = agent.serialize_session(agent.create_session())
    payload["version"] = 999
    with pytest.raises(SessionFormatError, match="999"):
        agent.deserialize_session(payload)
    with pytest.raises(SessionFormatError):
        agent.deserialize_session("{not json")


def test_serialize_session_with_unserializable_state_fails_clearly() -> None:
    agent = Agent(ScriptedChatClient())
    session = agent.create_session()
    session.state.set("weird", object())
    with pytest.raises(SessionFormatError, match="weird"):
        agent.serialize_session(session)


# -- structured output -------------------------------------------------------------------------


@dataclass
class Weather:
    city: str
    degrees: int


async def test_structured_output_value() -> None:
    client = ScriptedChatClient(['{"city": "Paris", "degrees": 18}'])
    agent = Agent(client)
    response = await agent.run("weather?", options={"response_format": Weather})
    assert response.value == Weather(city="Paris", degrees=18)
    assert client.call_options[0].get("response_format") is Weather


async def test_structured_output_value_when_streaming() -> None:
    client = ScriptedChatClient(['{"city": "Oslo", "degrees": -3}'])
    agent = Agent(client)
    stream = agent.run("weather?", stream=True, options={"response_format": Weather})
    response = await stream.get_final_response()
    assert response.value == Weather(city="Oslo", degrees=-3)


async def test_structured_output_from_default_options() -> None:
    client = ScriptedChatClient(['{"city": "Rome", "degrees": 25}'])
    agent = Agent(client, default_options={"response_format": Weather})
    response = await agent.run("weather?")
    assert response.value == Weather(city="Rome", degrees=25)


# -- concurrency -------------------------------------------------------------------------------


@pytest.mark.parametrize("client_type", [ScriptedChatClient, YieldingClient])
async def test_concurrent_runs_on_one_session(client_type: type[ScriptedChatClient]) -> None:
    def echo(messages: Sequence[Message]) -> str:
        return f"reply to {messages[-1].text}"

    client = client_type(echo)
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    responses = await asyncio.gather(*(agent.run(f"msg {i}", session=session) for i in range(20)))

    assert sorted(r.text for r in responses) == sorted(f"reply to msg {i}" for i in range(20))
    stored = await history.get_session_messages(session)
    assert len(stored) == 40
    assert len({m.message_id for m in stored}) == 40
    for user, reply in zip(stored[0::2], stored[1::2], strict=True):
        assert user.role == "user"
        assert reply.role == "assistant"
        assert reply.text == f"reply to {user.text}"
    assert sorted(m.text for m in stored[0::2]) == sorted(f"msg {i}" for i in range(20))


# -- misc --------------------------------------------------------------------------------------


async def test_as_agent_builds_an_agent() -> None:
    client = ScriptedChatClient(["hi there"])
    agent = client.as_agent("Be brief.", name="helper", tools=[add])
    assert isinstance(agent, Agent)
    assert agent.name == "helper"
    assert [t.name for t in agent.tools] == ["add"]
    assert isinstance(agent.tools[0], FunctionTool)
    response = await agent.run("hello")
    assert response.text == "hi there"
    assert client.call_options[0].get("instructions") == "Be brief."


async def test_get_provider_finds_configured_provider() -> None:
    history = InMemoryHistoryProvider()
    recorder = RecordingProvider()
    agent = Agent(ScriptedChatClient(), context_providers=[recorder, history])
    assert agent.get_provider(InMemoryHistoryProvider) is history
    assert agent.get_provider(RecordingProvider) is recorder


def test_two_loading_history_providers_are_refused() -> None:
    with pytest.raises(ProviderConfigurationError, match="both load messages"):
        Agent(
            ScriptedChatClient(),
            context_providers=[InMemoryHistoryProvider("a"), InMemoryHistoryProvider("b")],
        )
    # an audit sink next to the main history is fine
    Agent(
        ScriptedChatClient(),
        context_providers=[InMemoryHistoryProvider("a"), InMemoryHistoryProvider("b", load_messages=False)],
    )
