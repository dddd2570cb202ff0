"""History providers: load/store flags, filters, custom backends, reducers, persistence."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from agentkeep import (
    Agent,
    AgentSession,
    AIContext,
    ChatReducer,
    Content,
    ContextProvider,
    HistoryProvider,
    InMemoryHistoryProvider,
    Message,
    MessageCountingChatReducer,
    MessageSourceType,
    ScriptExhaustedError,
    SessionContext,
    get_source_id,
    get_source_type,
)
from agentkeep.testing import ScriptedChatClient


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


def echo(messages: Sequence[Message]) -> str:
    return f"re: {messages[-1].text}"


class Note(ContextProvider):
    """Injects one context message per run."""

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        return AIContext(messages=[Message("user", f"note from {self.source_id}")])


# -- audit sinks and store flags ---------------------------------------------------------------


async def test_audit_provider_records_context_input_and_output_while_main_loads() -> None:
    main = InMemoryHistoryProvider()
    audit = InMemoryHistoryProvider("audit", load_messages=False, store_context_messages=True)
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[main, Note("ctx"), audit])
    session = agent.create_session()

    await agent.run("q1", session=session)
    await agent.run("q2", session=session)

    # only the main provider loads; the audit sink changes nothing the model sees
    assert texts(client.calls[1]) == ["q1", "re: q1", "note from ctx", "q2"]
    assert texts(await main.get_session_messages(session)) == ["q1", "re: q1", "q2", "re: q2"]
    assert texts(await audit.get_session_messages(session)) == [
        "note from ctx",
        "q1",
        "re: q1",
        "note from ctx",
        "q2",
        "re: q2",
    ]


async def test_store_context_from_limits_sources() -> None:
    main = InMemoryHistoryProvider()
    audit = InMemoryHistoryProvider(
        "audit", load_messages=False, store_context_messages=True, store_context_from=["ctx1"]
    )
    agent = Agent(ScriptedChatClient(echo), context_providers=[main, Note("ctx1"), Note("ctx2"), audit])
    session = agent.create_session()

    await agent.run("q", session=session)

    assert texts(await audit.get_session_messages(session)) == ["note from ctx1", "q", "re: q"]


async def test_loading_provider_storing_context_never_stores_history_twice() -> None:
    history = InMemoryHistoryProvider(store_context_messages=True)
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[history, Note("ctx")])
    session = agent.create_session()

    for turn in range(3):
        await agent.run(f"q{turn}", session=session)

    stored = await history.get_session_messages(session)
    assert texts(stored) == [
        text for turn in range(3) for text in ("note from ctx", f"q{turn}", f"re: q{turn}")
    ]
    assert len({m.message_id for m in stored}) == 9


async def test_history_sourced_messages_are_never_stored_twice() -> None:
    history = InMemoryHistoryProvider()
    agent = Agent(ScriptedChatClient(["Done."] * 3), context_providers=[history])
    session = agent.create_session()

    for _ in range(3):
        await agent.run("continue", session=session)

    stored = await history.get_session_messages(session)
    assert len(stored) == 6
    assert len({m.message_id for m in stored}) == 6


async def test_store_inputs_false_stores_only_outputs() -> None:
    history = InMemoryHistoryProvider(store_inputs=False)
    agent = Agent(ScriptedChatClient(echo), context_providers=[history])
    session = agent.create_session()

    await agent.run("q1", session=session)
    await agent.run("q2", session=session)

    assert texts(await history.get_session_messages(session)) == ["re: q1", "re: q2"]


async def test_store_outputs_false_stores_only_inputs() -> None:
    history = InMemoryHistoryProvider(store_outputs=False)
    agent = Agent(ScriptedChatClient(echo), context_providers=[history])
    session = agent.create_session()

    await agent.run("q1", session=session)
    await agent.run("q2", session=session)

    assert texts(await history.get_session_messages(session)) == ["q1", "q2"]


async def test_output_filter_limits_what_is_loaded_not_what_is_stored() -> None:
    def last_two(messages: Sequence[Message]) -> Sequence[Message]:
        return messages[-2:]

    history = InMemoryHistoryProvider(provide_output_message_filter=last_two)
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    for turn in range(3):
        await agent.run(f"q{turn}", session=session)

    assert texts(client.calls[2]) == ["q1", "re: q1", "q2"]
    assert all(get_source_type(m) is MessageSourceType.CHAT_HISTORY for m in client.calls[2][:2])
    assert len(await history.get_session_messages(session)) == 6


async def test_store_input_message_filter_receives_stamped_request_and_decides() -> None:
    received: list[list[tuple[str, MessageSourceType, str | None]]] = []

    def only_context_and_input(messages: Sequence[Message]) -> Sequence[Message]:
        received.append([(m.text, get_source_type(m), get_source_id(m)) for m in messages])
        return [m for m in messages if get_source_type(m) is not MessageSourceType.CHAT_HISTORY]

    history = InMemoryHistoryProvider(store_input_message_filter=only_context_and_input)
    agent = Agent(ScriptedChatClient(echo), context_providers=[history, Note("ctx")])
    session = agent.create_session()

    await agent.run("q1", session=session)
    await agent.run("q2", session=session)

    assert received[1] == [
        ("note from ctx", MessageSourceType.CHAT_HISTORY, "in_memory"),
        ("q1", MessageSourceType.CHAT_HISTORY, "in_memory"),
        ("re: q1", MessageSourceType.CHAT_HISTORY, "in_memory"),
        ("note from ctx", MessageSourceType.CONTEXT_PROVIDER, "ctx"),
        ("q2", MessageSourceType.EXTERNAL, None),
    ]
    # the filter chose to keep the context message; outputs are still stored per store_outputs
    assert texts(await history.get_session_messages(session)) == [
        "note from ctx",
        "q1",
        "re: q1",
        "note from ctx",
        "q2",
        "re: q2",
    ]


async def test_store_input_message_filter_can_drop_everything_but_outputs() -> None:
    history = InMemoryHistoryProvider(store_input_message_filter=lambda messages: [])
    agent = Agent(ScriptedChatClient(echo), context_providers=[history])
    session = agent.create_session()
    await agent.run("q1", session=session)
    assert texts(await history.get_session_messages(session)) == ["re: q1"]


# -- a custom backend keyed by state -----------------------------------------------------------


class DictHistoryProvider(HistoryProvider):
    """The seeds' database pattern: a key in session state, the messages in a backend."""

    def __init__(self, db: dict[str, list[dict[str, Any]]], source_id: str = "db") -> None:
        super().__init__(source_id)
        self.db = db

    def _key(self, state: Any) -> str:
        assert isinstance(state, dict)
        key = state.get("conversation_id")
        if key is None:
            key = state["conversation_id"] = f"conv-{uuid.uuid4().hex}"
        assert isinstance(key, str)
        return key

    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        return [Message.from_dict(item) for item in self.db.get(self._key(state), [])]

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: Any = None,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> None:
        self.db.setdefault(self._key(state), []).extend(m.to_dict() for m in messages)


async def test_custom_backend_keeps_only_a_key_in_session_state() -> None:
    db: dict[str, list[dict[str, Any]]] = {}
    provider = DictHistoryProvider(db)
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session()

    await agent.run("q1", session=session)
    await agent.run("q2", session=session)

    assert texts(client.calls[1]) == ["q1", "re: q1", "q2"]
    assert [get_source_id(m) for m in client.calls[1]] == ["db", "db", None]
    payload = agent.serialize_session(session)
    assert list(payload["state"]) == ["db"]
    key = payload["state"]["db"]["conversation_id"]
    assert [item["role"] for item in db[key]] == ["user", "assistant", "user", "assistant"]
    # ids are assigned before storage, so the backend can tell messages apart
    assert all(item.get("message_id") for item in db[key])
    assert texts(await provider.get_session_messages(session)) == ["q1", "re: q1", "q2", "re: q2"]


async def test_custom_backend_preseeded_key_attaches_to_stored_conversation() -> None:
    db: dict[str, list[dict[str, Any]]] = {}
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[DictHistoryProvider(db)])
    first = agent.create_session()
    await agent.run("q1", session=first)
    key = first.state.get("db")["conversation_id"]

    attached = agent.create_session()
    attached.state.set("db", {"conversation_id": key})
    await agent.run("q2", session=attached)

    assert texts(client.calls[1]) == ["q1", "re: q1", "q2"]
    assert len(db) == 1
    assert len(db[key]) == 4

    # a session without the key starts a fresh conversation
    await agent.run("fresh", session=agent.create_session())
    assert texts(client.calls[2]) == ["fresh"]
    assert len(db) == 2


# -- reducers ----------------------------------------------------------------------------------


async def test_in_memory_reducer_before_retrieval_keeps_system_and_last_two() -> None:
    history = InMemoryHistoryProvider(reducer=MessageCountingChatReducer(2))
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    await agent.run([Message("system", "sys"), "q1"], session=session)
    await agent.run("q2", session=session)
    # reduction happens on the next load: everything is still stored after turn 2
    assert len(session.to_dict()["state"]["in_memory"]["messages"]) == 5
    await agent.run("q3", session=session)

    assert texts(client.calls[1]) == ["sys", "q1", "re: q1", "q2"]
    assert texts(client.calls[2]) == ["sys", "q2", "re: q2", "q3"]
    assert texts(await history.get_session_messages(session)) == ["sys", "q3", "re: q3"]


async def test_in_memory_reducer_after_message_added() -> None:
    history = InMemoryHistoryProvider(
        reducer=MessageCountingChatReducer(2), reducer_trigger="after_message_added"
    )
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    await agent.run([Message("system", "sys"), "q1"], session=session)
    assert texts(await history.get_session_messages(session)) == ["sys", "q1", "re: q1"]
    await agent.run("q2", session=session)
    assert texts(await history.get_session_messages(session)) == ["sys", "q2", "re: q2"]
    assert len(session.to_dict()["state"]["in_memory"]["messages"]) == 3
    await agent.run("q3", session=session)

    assert texts(client.calls[2]) == ["sys", "q2", "re: q2", "q3"]


def _call(call_id: str) -> Message:
    return Message("assistant", [Content.from_function_call(call_id, "lookup", arguments={})])


def _result(call_id: str) -> Message:
    return Message("tool", [Content.from_function_result(call_id, result="ok")])


async def test_message_counting_reducer_drops_tool_messages_and_extra_systems() -> None:
    first_system = Message("system", "first system")
    messages = [
        first_system,
        Message("user", "u1"),
        _call("c1"),
        _result("c1"),
        Message("assistant", "a1"),
        Message("system", "second system"),
        Message("user", "u2"),
        _call("c2"),
        _result("c2"),
    ]
    reduced = await MessageCountingChatReducer(2).reduce(messages)
    assert texts(reduced) == ["first system", "a1", "u2"]
    assert reduced[0] is first_system

    everything = await MessageCountingChatReducer(10).reduce(messages)
    assert texts(everything) == ["first system", "u1", "a1", "u2"]


async def test_message_counting_reducer_without_system_and_short_input() -> None:
    reducer = MessageCountingChatReducer(3)
    assert isinstance(reducer, ChatReducer)
    assert texts(await reducer.reduce([Message("user", "u1"), Message("assistant", "a1")])) == ["u1", "a1"]
    assert list(await reducer.reduce([])) == []
    many = [Message("user", f"m{i}") for i in range(6)]
    assert texts(await reducer.reduce(many)) == ["m3", "m4", "m5"]


@pytest.mark.parametrize("count", [0, -1])
def test_message_counting_reducer_refuses_non_positive_target(count: int) -> None:
    with pytest.raises(ValueError, match="target_count"):
        MessageCountingChatReducer(count)


# -- persistence of in-memory history ----------------------------------------------------------


async def test_in_memory_history_survives_session_json_round_trip() -> None:
    history = InMemoryHistoryProvider()
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()
    await agent.run("q1", session=session)
    original = list(await history.get_session_messages(session))

    restored = AgentSession.from_json(session.to_json())
    await agent.run("q2", session=restored)

    sent = client.calls[1]
    assert texts(sent) == ["q1", "re: q1", "q2"]
    assert [m.message_id for m in sent[:2]] == [m.message_id for m in original]
    assert [m.created_at for m in sent[:2]] == [m.created_at for m in original]
    assert [get_source_type(m) for m in sent[:2]] == [MessageSourceType.CHAT_HISTORY] * 2
    assert texts(await history.get_session_messages(restored)) == ["q1", "re: q1", "q2", "re: q2"]


async def test_in_memory_state_wire_shape() -> None:
    agent = Agent(ScriptedChatClient(["hello"]))
    session = agent.create_session()
    await agent.run("hi", session=session)

    stored = session.to_dict()["state"]["in_memory"]["messages"]
    assert [(m["role"], m["contents"]) for m in stored] == [
        ("user", [{"type": "text", "text": "hi"}]),
        ("assistant", [{"type": "text", "text": "hello"}]),
    ]


async def test_custom_source_id_in_memory_provider_stamps_its_id() -> None:
    history = InMemoryHistoryProvider("chat")
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[history])
    session = agent.create_session()

    await agent.run("q1", session=session)
    restored = agent.deserialize_session(agent.serialize_session(session))
    await agent.run("q2", session=restored)

    assert "chat" in restored.state
    assert [get_source_id(m) for m in client.calls[1]] == ["chat", "chat", None]


async def test_failed_run_stores_nothing_in_any_history_provider() -> None:
    main = InMemoryHistoryProvider()
    audit = InMemoryHistoryProvider("audit", load_messages=False, store_context_messages=True)
    agent = Agent(ScriptedChatClient([]), context_providers=[main, Note("ctx"), audit])
    session = agent.create_session()

    with pytest.raises(ScriptExhaustedError):
        await agent.run("q", session=session)

    assert len(await main.get_session_messages(session)) == 0
    assert len(await audit.get_session_messages(session)) == 0


class CountingHistoryProvider(DictHistoryProvider):
    """Counts its loads from the backend."""

    def __init__(self, db: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__(db)
        self.loads = 0

    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        self.loads += 1
        return await super().get_messages(session_id, state=state, session=session, **kwargs)


async def test_history_kept_for_the_run_is_loaded_once_and_only_by_the_next_run() -> None:
    provider = CountingHistoryProvider({})
    client = ScriptedChatClient(echo)
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session()
    await agent.run("q1", session=session)
    provider.loads = 0

    kept = await provider.get_session_messages(session, keep_for_run=True)
    assert texts(kept) == ["q1", "re: q1"]
    await agent.run("q2", session=session)
    assert provider.loads == 1  # the run took what was kept instead of loading again
    assert texts(client.calls[-1]) == ["q1", "re: q1", "q2"]

    await agent.run("q3", session=session)  # what was kept was for one run only
    assert provider.loads == 2
    assert texts(client.calls[-1]) == ["q1", "re: q1", "q2", "re: q2", "q3"]

    await provider.get_session_messages(session, keep_for_run=True)
    provider.discard_kept(session)
    await agent.run("q4", session=session)
    assert provider.loads == 4  # discarded: the run loaded afresh
    assert texts(client.calls[-1])[-2:] == ["re: q3", "q4"]
