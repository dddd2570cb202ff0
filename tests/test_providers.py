"""Context providers: the before/after pipeline, AIContext, source stamps, tools and state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agentkeep import (
    Agent,
    AgentSession,
    AIContext,
    ContextProvider,
    InMemoryHistoryProvider,
    Message,
    MessageAIContextProvider,
    MessageSourceType,
    SessionContext,
    get_source_id,
    get_source_type,
)
from agentkeep.testing import ScriptedChatClient
from tests.helpers import default_history


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


class PipelineStep(ContextProvider):
    """Adds one instruction and one message, and records what it saw from earlier providers."""

    def __init__(self, source_id: str, log: list[str]) -> None:
        super().__init__(source_id)
        self.log = log
        self.seen_messages: list[str] = []
        self.seen_instructions: list[str] = []
        self.seen_after: list[str] = []

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        self.log.append(f"before {self.source_id}")
        self.seen_messages = texts(context.get_messages())
        self.seen_instructions = list(context.instructions)
        context.extend_instructions(self.source_id, f"instruction from {self.source_id}")
        context.extend_messages(self, [Message("user", f"message from {self.source_id}")])
        return None

    async def after_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> None:
        self.log.append(f"after {self.source_id}")
        self.seen_after = texts(context.get_messages(include_input=True, include_response=True))


async def test_before_in_order_after_in_reverse_and_each_sees_earlier_additions() -> None:
    log: list[str] = []
    a, b, c = PipelineStep("a", log), PipelineStep("b", log), PipelineStep("c", log)
    client = ScriptedChatClient(["reply"])
    agent = Agent(client, "Agent says hi.", context_providers=[a, b, c])

    await agent.run("input")

    assert log == ["before a", "before b", "before c", "after c", "after b", "after a"]
    assert a.seen_messages == []
    assert b.seen_messages == ["message from a"]
    assert c.seen_messages == ["message from a", "message from b"]
    assert a.seen_instructions == []
    assert b.seen_instructions == ["instruction from a"]
    assert c.seen_instructions == ["instruction from a", "instruction from b"]
    assert texts(client.calls[0]) == ["message from a", "message from b", "message from c", "input"]
    assert client.call_options[0].get("instructions") == (
        "Agent says hi.\ninstruction from a\ninstruction from b\ninstruction from c"
    )
    # after the run every provider sees the request and the response
    expected_after = ["message from a", "message from b", "message from c", "input", "reply"]
    assert a.seen_after == b.seen_after == c.seen_after == expected_after


async def test_history_comes_first_and_context_messages_are_not_stored() -> None:
    log: list[str] = []
    history = InMemoryHistoryProvider()
    client = ScriptedChatClient(["one", "two"])
    agent = Agent(client, context_providers=[history, PipelineStep("ctx", log)])
    session = agent.create_session()

    await agent.run("first", session=session)
    await agent.run("second", session=session)

    assert texts(client.calls[1]) == ["first", "one", "message from ctx", "second"]
    assert texts(await history.get_session_messages(session)) == ["first", "one", "second", "two"]


class ReturnsContext(ContextProvider):
    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        return AIContext(
            instructions=["Be brief.", "Be kind."],
            messages=[Message("system", "The user likes cats.")],
        )


async def test_before_run_can_return_an_ai_context() -> None:
    client = ScriptedChatClient(["ok"])
    agent = Agent(client, context_providers=[ReturnsContext("prefs")])

    await agent.run("hello")

    sent = client.calls[0]
    assert [(m.role, m.text) for m in sent] == [("system", "The user likes cats."), ("user", "hello")]
    assert client.call_options[0].get("instructions") == "Be brief.\nBe kind."


class Calendar(MessageAIContextProvider):
    """Injects fresh messages each run (the calendar example of the seeds)."""

    def __init__(self) -> None:
        super().__init__("calendar")
        self.runs = 0

    async def provide_messages(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> Sequence[Message]:
        self.runs += 1
        return [Message("user", f"Next event (check {self.runs}): dentist at 10:00")]


async def test_message_ai_context_provider_injects_fresh_messages_each_run() -> None:
    client = ScriptedChatClient(["noted", "noted again"])
    agent = Agent(client, context_providers=[Calendar()])
    session = agent.create_session()

    await agent.run("what's next?", session=session)
    await agent.run("and now?", session=session)

    assert texts(client.calls[0]) == ["Next event (check 1): dentist at 10:00", "what's next?"]
    # history (default in-memory) first, then this run's fresh calendar message, then input
    assert texts(client.calls[1]) == [
        "what's next?",
        "noted",
        "Next event (check 2): dentist at 10:00",
        "and now?",
    ]
    sources = [get_source_id(m) for m in client.calls[1]]
    assert sources == ["in_memory", "in_memory", "calendar", None]


async def test_messages_are_stamped_with_their_source() -> None:
    client = ScriptedChatClient(["one", "two"])
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history, ReturnsContext("prefs")])
    session = agent.create_session()

    await agent.run("first", session=session)
    await agent.run("second", session=session)

    stamps = [(get_source_type(m), get_source_id(m)) for m in client.calls[1]]
    assert stamps == [
        (MessageSourceType.CHAT_HISTORY, "in_memory"),
        (MessageSourceType.CHAT_HISTORY, "in_memory"),
        (MessageSourceType.CONTEXT_PROVIDER, "prefs"),
        (MessageSourceType.EXTERNAL, None),
    ]
    assert all(m.message_id is not None for m in client.calls[1])


async def test_callers_messages_are_never_mutated() -> None:
    note = Message("system", "Shared note.")

    class SharedNote(ContextProvider):
        async def before_run(
            self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
        ) -> AIContext | None:
            return AIContext(messages=[note])

    client = ScriptedChatClient(["one", "two"])
    agent = Agent(client, context_providers=[SharedNote("note")])
    session = agent.create_session()
    question = Message("user", "A question")

    await agent.run(question, session=session)
    await agent.run([question], session=session)

    for original in (note, question):
        assert original.message_id is None
        assert original.created_at is None
        assert get_source_id(original) is None
        assert get_source_type(original) is MessageSourceType.EXTERNAL
        assert all(sent is not original for call in client.calls for sent in call)
    assert get_source_type(client.calls[0][0]) is MessageSourceType.CONTEXT_PROVIDER
    # the same caller object sent twice becomes two stored messages with distinct ids
    stored = await default_history(agent).get_session_messages(session)
    assert [m.text for m in stored] == ["A question", "one", "A question", "two"]
    assert stored[0].message_id != stored[2].message_id


async def test_caller_message_with_id_keeps_it() -> None:
    client = ScriptedChatClient(["one"])
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()
    question = Message("user", "A question", message_id="my-id")

    await agent.run(question, session=session)

    assert client.calls[0][0].message_id == "my-id"
    assert (await history.get_session_messages(session))[0].message_id == "my-id"
    assert get_source_id(question) is None


async def test_tools_added_by_a_provider_are_callable() -> None:
    secrets: list[str] = []

    def remember(fact: str) -> str:
        """Remember a fact about the user."""
        secrets.append(fact)
        return "remembered"

    class Memory(ContextProvider):
        async def before_run(
            self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
        ) -> AIContext | None:
            return AIContext(tools=[remember])

    client = ScriptedChatClient(
        [ScriptedChatClient.tool_call("remember", {"fact": "likes tea"}, call_id="c1"), "Noted."]
    )
    agent = Agent(client, context_providers=[Memory("memory")])

    response = await agent.run("I like tea")

    assert response.text == "Noted."
    assert secrets == ["likes tea"]
    offered = client.call_options[0].get("tools", [])
    assert [t.name for t in offered] == ["remember"]
    assert offered[0].additional_properties.get("context_source") == "memory"
    assert client.calls[1][-1].function_results[0].result == "remembered"


class Counter(ContextProvider):
    """Counts runs per session in its state dict and injects the count as instructions."""

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        assert isinstance(state, dict)
        return AIContext(instructions=f"This is run {state.get('runs', 0) + 1}.")

    async def after_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> None:
        state["runs"] = state.get("runs", 0) + 1


async def test_state_is_a_dict_kept_in_session_state_and_survives_serialization() -> None:
    client = ScriptedChatClient(["a", "b", "c", "d"])
    agent = Agent(client, context_providers=[Counter("counter")])
    session = agent.create_session()

    await agent.run("1", session=session)
    await agent.run("2", session=session)
    assert session.state.get("counter") == {"runs": 2}
    assert client.call_options[1].get("instructions") == "This is run 2."

    restored = agent.deserialize_session(agent.serialize_session(session))
    assert restored.state.get("counter") == {"runs": 2}
    await agent.run("3", session=restored)
    assert client.call_options[2].get("instructions") == "This is run 3."
    assert restored.state.get("counter") == {"runs": 3}
    assert session.state.get("counter") == {"runs": 2}

    via_json = AgentSession.from_json(restored.to_json())
    await agent.run("4", session=via_json)
    assert client.call_options[3].get("instructions") == "This is run 4."
    assert via_json.state.get("counter") == {"runs": 4}


async def test_state_is_per_session_not_per_provider() -> None:
    client = ScriptedChatClient(["a", "b", "c"])
    counter = Counter("counter")
    agent = Agent(client, context_providers=[counter])
    s1, s2 = agent.create_session(), agent.create_session()

    await agent.run("x", session=s1)
    await agent.run("x", session=s1)
    await agent.run("x", session=s2)

    assert s1.state.get("counter") == {"runs": 2}
    assert s2.state.get("counter") == {"runs": 1}
    assert client.call_options[2].get("instructions") == "This is run 1."


async def test_providers_run_without_a_session_on_a_throwaway_state() -> None:
    client = ScriptedChatClient(["a", "b"])
    agent = Agent(client, context_providers=[Counter("counter")])
    await agent.run("x")
    await agent.run("x")
    assert client.call_options[1].get("instructions") == "This is run 1."


# -- the reference's call shapes (issue 23) ---------------------------------------------------------


def test_extend_messages_takes_a_source_id_or_anything_with_one() -> None:
    class Named:
        source_id = "rag"

    context = SessionContext(input_messages=[])
    original = Message("system", "context")
    context.extend_messages("notes", [original])
    context.extend_messages(Named(), [Message("system", "more")])
    stored = context.context_messages["notes"][0]
    assert stored is not original
    assert stored.additional_properties["_attribution"] == {"source_id": "notes"}
    assert "_attribution" not in original.additional_properties  # the caller's message is untouched
    assert context.context_messages["rag"][0].additional_properties["_attribution"] == {
        "source_id": "rag",
        "source_type": "Named",
    }
    assert get_source_id(stored) == "notes"
    assert get_source_type(stored) is MessageSourceType.CONTEXT_PROVIDER


def test_extend_messages_records_the_sessions_messages_came_from_once_each() -> None:
    context = SessionContext(session_id="now", input_messages=[])
    marked = Message(
        "system",
        "memory",
        additional_properties={"_attribution": {"source_id": "own", "origin_session_ids": ["a"]}},
    )
    context.extend_messages("memory", [marked], origin_session_ids=["a", "b", "a"])
    attribution = context.context_messages["memory"][0].additional_properties["_attribution"]
    assert attribution == {"source_id": "own", "origin_session_ids": ["a", "b"]}
    assert marked.additional_properties["_attribution"] == {"source_id": "own", "origin_session_ids": ["a"]}


def test_a_context_can_be_built_and_handed_a_response_as_the_reference_does() -> None:
    from agentkeep import AgentResponse

    context = SessionContext(input_messages=[])
    assert (context.context_messages, context.instructions, context.tools, context.metadata) == (
        {},
        [],
        [],
        {},
    )
    assert context.response is None
    response = AgentResponse(messages=[Message("assistant", "reply")])
    context._response = response  # pyright: ignore[reportPrivateUsage]  # the reference's tests do this
    assert context.response is response
    assert texts(context.get_messages(include_response=True)) == ["reply"]


async def test_in_memory_history_keeps_the_references_dict_shaped_state() -> None:
    provider = InMemoryHistoryProvider()
    state: dict[str, Any] = {}
    await provider.save_messages("s1", [Message("user", "hi")], state=state)
    await provider.save_messages("s1", [Message("assistant", "hello")], state=state)
    assert texts(state["messages"]) == ["hi", "hello"]
    assert texts(await provider.get_messages("s1", state=state)) == ["hi", "hello"]
    session = AgentSession()
    session.state["in_memory"] = {"messages": [Message("user", "kept")]}
    assert texts(await provider.get_messages(session.session_id, session=session)) == ["kept"]


async def test_in_memory_history_with_nowhere_to_keep_messages_refuses() -> None:
    provider = InMemoryHistoryProvider()
    with pytest.raises(ValueError, match="state"):  # never dropped silently
        await provider.save_messages("s1", [Message("user", "lost?")])


async def test_in_memory_history_can_skip_what_compaction_excluded() -> None:
    state = {
        "messages": [
            Message("user", "u1"),
            Message("assistant", "a1", additional_properties={"_excluded": True}),
            Message("user", "u2"),
        ]
    }
    assert texts(await InMemoryHistoryProvider(skip_excluded=True).get_messages("s", state=state)) == [
        "u1",
        "u2",
    ]
    assert len(await InMemoryHistoryProvider().get_messages("s", state=state)) == 3
