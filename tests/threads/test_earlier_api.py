"""The earlier thread API (seeds 003 and 004) as a layer over today's pipeline: ChatAgent and its
threads, message stores, the earlier context-provider hooks, ChatMessage and the earlier call
shape of chat clients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from agentkeep import (
    Agent,
    AgentSession,
    AggregateContextProvider,
    BaseChatClient,
    ChatAgent,
    ChatMessage,
    ChatMessageStore,
    ChatOptions,
    ChatResponse,
    ChatRole,
    Context,
    ContextProvider,
    InvokedContext,
    InvokingContext,
    Message,
    MessageFormatError,
    MessageSourceType,
    SessionFormatError,
    tool,
)
from agentkeep.clients import ScriptedChatClient
from agentkeep.errors import ChatClientError


class ListStore:
    """A user's message store (the seed 003 shape) keeping its messages in a list per key."""

    shelves: ClassVar[dict[str, list[dict[str, Any]]]] = {}

    def __init__(self, key: str = "k0") -> None:
        self.key = key
        self.closed = False

    async def add_messages(self, messages: Sequence[ChatMessage]) -> None:
        assert all(isinstance(m, ChatMessage) for m in messages)
        self.shelves.setdefault(self.key, []).extend(m.model_dump() for m in messages)

    async def list_messages(self) -> list[ChatMessage]:
        return [ChatMessage.model_validate(d) for d in self.shelves.get(self.key, [])]

    async def serialize_state(self, **kwargs: Any) -> Any:
        return {"key": self.key}

    async def deserialize_state(self, serialized_store_state: Any, **kwargs: Any) -> None:
        if serialized_store_state:
            self.key = serialized_store_state["key"]

    async def aclose(self) -> None:
        self.closed = True


def echo_history(messages: Sequence[Message]) -> str:
    return " | ".join(m.text for m in messages if m.role == "user")


# -- ChatAgent and threads ---------------------------------------------------------------------


async def test_a_thread_keeps_history_in_the_default_in_memory_store_and_round_trips() -> None:
    agent = ChatAgent(chat_client=ScriptedChatClient(echo_history), name="Echo", instructions="Be brief.")
    thread = agent.get_new_thread()
    assert isinstance(thread.message_store, ChatMessageStore)
    await agent.run("one", thread=thread)
    second = await agent.run("two", thread=thread)
    assert second.text == "one | two"
    listed = await thread.message_store.list_messages()
    assert [(m.role.value, m.text) for m in listed] == [
        ("user", "one"),
        ("assistant", "one"),
        ("user", "two"),
        ("assistant", "one | two"),
    ]
    state = await thread.serialize()
    assert state["type"] == "agent_thread_state"
    assert state["service_thread_id"] is None
    assert len(state["chat_message_store_state"]["messages"]) == 4

    resumed = await agent.deserialize_thread(state)
    assert resumed.id == thread.id
    third = await agent.run("three", thread=resumed)
    assert third.text == "one | two | three"
    assert len(thread.message_store.messages) == 4  # the original thread is untouched


async def test_a_users_store_from_the_factory_gets_chat_messages_and_rides_in_the_thread() -> None:
    ListStore.shelves.clear()
    made: list[ListStore] = []

    def factory() -> ListStore:
        made.append(ListStore(f"k{len(made)}"))
        return made[-1]

    async with ChatAgent(
        chat_client=ScriptedChatClient(echo_history), chat_message_store_factory=factory
    ) as agent:
        thread = agent.get_new_thread()
        await agent.run("hello", thread=thread)
        assert [d["role"] for d in ListStore.shelves["k0"]] == ["user", "assistant"]
        state = await thread.serialize()
        assert state["chat_message_store_state"] == {"key": "k0"}
        resumed = await agent.deserialize_thread(state)
        assert resumed.message_store is made[1]
        assert made[1].key == "k0"  # deserialize_state restored the key
        answer = await agent.run("again", thread=resumed)
        assert answer.text == "hello | again"
    assert all(store.closed for store in made)  # leaving the agent closed the stores it made


async def test_a_failed_run_stores_nothing_in_the_users_store() -> None:
    ListStore.shelves.clear()

    def broken(messages: Sequence[Message]) -> str:
        raise ChatClientError("the model is down")

    agent = ChatAgent(chat_client=ScriptedChatClient(broken), chat_message_store_factory=ListStore)
    thread = agent.get_new_thread()
    with pytest.raises(ChatClientError):
        await agent.run("lost?", thread=thread)
    assert ListStore.shelves == {}


async def test_run_without_a_thread_uses_a_new_one_and_chat_options_as_keywords() -> None:
    client = ScriptedChatClient(["a", "b"])
    agent = ChatAgent(client, temperature=0.1)
    await agent.run("x")
    await agent.run("y", max_tokens=5)
    assert len(client.calls[1]) == 1  # a new thread: no history
    assert client.call_options[0].get("temperature") == 0.1
    assert client.call_options[1].get("max_tokens") == 5
    with pytest.raises(TypeError, match="unknown chat option"):
        agent.run("z", temprature=0.5)  # pyright: ignore[reportCallIssue, reportUnusedCoroutine]
    with pytest.raises(TypeError, match="unknown chat option"):
        ChatAgent(client, colour="red")
    with pytest.raises(TypeError, match="thread or a session"):
        agent.run("z", thread=agent.get_new_thread(), session=AgentSession())  # pyright: ignore[reportUnusedCoroutine]


async def test_run_stream_on_a_thread() -> None:
    agent = ChatAgent(chat_client=ScriptedChatClient(["streamed reply"]))
    thread = agent.get_new_thread()
    stream = agent.run_stream("hi", thread=thread)
    texts = [update.text async for update in stream]
    assert "".join(texts) == "streamed reply"
    assert len(thread.message_store.messages) == 2  # pyright: ignore[reportAttributeAccessIssue, reportOptionalMemberAccess]


async def test_a_service_managed_thread_keeps_its_conversation_id_and_no_store() -> None:
    client = ScriptedChatClient(["first", "second"], service_managed=True)
    agent = ChatAgent(chat_client=client)
    thread = agent.get_new_thread()
    await agent.run("hi", thread=thread)
    conversation = thread.service_thread_id
    assert conversation is not None
    assert conversation in client.conversations
    resumed = await agent.deserialize_thread(await thread.serialize())
    assert resumed.service_thread_id == conversation
    await agent.run("more", thread=resumed)
    assert [m.text for m in client.calls[1]] == ["more"]  # only the new message is sent


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ([], "must be an object"),
        ({"type": "session"}, "has type"),
        ({"type": "agent_thread_state", "version": 9}, "version 9"),
        ({"chat_message_store_state": {"messages": "nope"}}, "'messages' list"),
        ({"chat_message_store_state": {"messages": [{"role": "robot"}]}}, "role"),
        ({"service_thread_id": 5}, "service_thread_id"),
        ({"session": "x"}, "'session' must be an object"),
    ],
)
async def test_a_bad_serialized_thread_is_a_session_format_error(payload: Any, problem: str) -> None:
    agent = ChatAgent(chat_client=ScriptedChatClient())
    with pytest.raises(SessionFormatError, match=problem):
        await agent.deserialize_thread(payload)


async def test_a_users_store_refusing_its_state_is_a_session_format_error() -> None:
    class Refusing(ListStore):
        async def deserialize_state(self, serialized_store_state: Any, **kwargs: Any) -> None:
            raise KeyError("key")

    agent = ChatAgent(chat_client=ScriptedChatClient(), chat_message_store_factory=Refusing)
    with pytest.raises(SessionFormatError, match="could not read its state"):
        await agent.deserialize_thread({"chat_message_store_state": {"x": 1}})


def test_a_thread_is_a_session_with_the_earlier_attributes() -> None:
    agent = ChatAgent(chat_client=ScriptedChatClient())
    thread = agent.get_new_thread(service_thread_id="conv_1")
    assert thread.message_store is None
    assert thread.session.service_session_id == "conv_1"
    with pytest.raises(ValueError, match="not both"):
        type(thread)(service_thread_id="c", message_store=ChatMessageStore())


# -- the earlier context-provider shape ----------------------------------------------------------


class Facts(ContextProvider):
    """An earlier-shape provider that never calls super().__init__ and keeps data on itself."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []
        self.outcomes: list[tuple[list[str], Exception | None]] = []

    async def invoking(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Context:
        self.seen.append(tuple(f"{m.role.value}:{m.text}" for m in messages))
        assert isinstance(kwargs["context"], InvokingContext)

        @tool
        def lucky_number() -> int:
            """The lucky number."""
            return 7

        return Context(
            instructions="Mention the lucky number.",
            messages=[ChatMessage(ChatRole.USER, text="(a reminder)")],
            tools=[lucky_number],
        )

    async def invoked(
        self,
        request_messages: Sequence[ChatMessage],
        response_messages: Sequence[ChatMessage] | None = None,
        invoke_exception: Exception | None = None,
        **kwargs: Any,
    ) -> None:
        assert isinstance(kwargs["context"], InvokedContext)
        self.outcomes.append(([m.text for m in response_messages or ()], invoke_exception))

    async def serialize(self) -> str:  # an async serialize() is awaited
        return f"{len(self.seen)} runs"


async def test_earlier_hooks_add_instructions_messages_and_tools_and_see_the_outcome() -> None:
    client = ScriptedChatClient([ScriptedChatClient.tool_call("lucky_number", {}), "It is 7."])
    facts = Facts()
    agent = ChatAgent(chat_client=client, context_providers=[facts])
    thread = agent.get_new_thread()
    response = await agent.run("What is my lucky number?", thread=thread)
    assert response.text == "It is 7."
    assert facts.source_id == "Facts"  # no super().__init__(): the class name
    assert facts.seen == [("user:What is my lucky number?",)]
    assert "Mention the lucky number." in str(client.call_options[0].get("instructions"))
    assert [m.text for m in client.calls[0]][-2:] == ["(a reminder)", "What is my lucky number?"]
    assert facts.outcomes[0][0][-1] == "It is 7."
    assert thread.context_provider.providers == [facts]
    state = await thread.serialize()
    assert state["context_provider_state"] == {"Facts": "1 runs"}
    assert state["session"]["state"] == {}  # neither the store nor the earlier provider keep state there
    # The provider's messages are request context, not history: only input and output are kept.
    assert thread.message_store.messages[0].text == "What is my lucky number?"  # pyright: ignore[reportOptionalMemberAccess, reportAttributeAccessIssue]


async def test_earlier_invoked_sees_the_exception_of_a_failed_run() -> None:
    def broken(messages: Sequence[Message]) -> str:
        raise ChatClientError("down")

    facts = Facts()
    agent = Agent(ScriptedChatClient(broken), context_providers=facts)  # today's Agent runs it too
    with pytest.raises(ChatClientError):
        await agent.run("hi", session=agent.create_session())
    ((response, error),) = facts.outcomes
    assert response == []
    assert isinstance(error, ChatClientError)


async def test_earlier_hooks_without_kwargs_get_no_context_keyword() -> None:
    class Plain(ContextProvider):
        def __init__(self) -> None:
            self.calls = 0

        async def invoking(self, messages: Sequence[ChatMessage]) -> Context:  # pyright: ignore[reportIncompatibleMethodOverride]
            self.calls += 1
            return Context(instructions="plain")

    plain = Plain()
    client = ScriptedChatClient(["ok"])
    await ChatAgent(client, context_providers=AggregateContextProvider([plain])).run("hi")
    assert plain.calls == 1
    assert "plain" in str(client.call_options[0].get("instructions"))


def test_a_provider_overriding_both_generations_of_hooks_is_refused() -> None:
    with pytest.raises(TypeError, match="either the hooks before_run/after_run or the earlier"):

        class Mixed(ContextProvider):  # pyright: ignore[reportUnusedClass]
            async def before_run(self, **kwargs: Any) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
                return None

            async def invoked(self, request_messages: Any, *args: Any, **kwargs: Any) -> None:
                return None


def test_todays_providers_are_not_earlier_shaped() -> None:
    assert not ContextProvider.uses_earlier_hooks
    assert Facts.uses_earlier_hooks
    assert Facts().state_keys == ()


def test_a_subclass_of_an_earlier_shape_provider_is_earlier_shaped_too() -> None:
    class MoreFacts(Facts):
        pass

    assert MoreFacts.uses_earlier_hooks
    assert MoreFacts().state_keys == ()
    assert MoreFacts().get_state(None) is None
    with pytest.raises(TypeError, match="either the hooks before_run/after_run or the earlier"):

        class Mixed(Facts):  # pyright: ignore[reportUnusedClass]
            async def after_run(self, **kwargs: Any) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
                return None


# -- ChatMessage and the earlier call shape ---------------------------------------------------------


def test_chat_message_is_a_message_with_the_earlier_spelling() -> None:
    message = ChatMessage(role=ChatRole.ASSISTANT, text="hi", author_name="bot")
    assert isinstance(message, Message)
    assert message.role == "assistant"
    assert message.role.value == "assistant"
    assert ChatMessage.model_validate(message.model_dump()) == message
    assert ChatMessage.model_validate_json(message.model_dump_json()).role.value == "assistant"  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(ValueError, match="not both"):
        ChatMessage("user", ["a"], text="b")
    with pytest.raises(MessageFormatError):
        ChatMessage.model_validate({"role": "robot"})
    # A plain message made from a ChatMessage's role stores plain text.
    plain = Message(message.role, "x")  # pyright: ignore[reportArgumentType]
    assert type(plain.role) is str
    assert type(Message.from_dict(message.to_dict()).role) is str
    copy = message.copy()
    assert isinstance(copy, ChatMessage)
    assert copy.role.value == "assistant"
    assert message.with_source(MessageSourceType.EXTERNAL, None).role is ChatRole.ASSISTANT
    # A role object anywhere has a JSON form (it is a StrEnum), and plain copies hold plain text.
    stray = Message("user", "y")
    stray.role = ChatRole.USER  # pyright: ignore[reportAttributeAccessIssue]
    assert '"role":"user"' in stray.to_json()
    assert type(stray.copy().role) is str


async def test_clients_accept_the_earlier_call_shape() -> None:
    client = ScriptedChatClient(['{"a": 1}', "plain", "streamed", "more"])
    response = await client.get_response(
        messages=[ChatMessage("user", text="hi")],
        chat_options=ChatOptions(instructions="Answer in JSON.", response_format=dict),  # pyright: ignore[reportCallIssue]
    )
    assert response.value == {"a": 1}
    assert str(client.call_options[0].get("instructions")) == "Answer in JSON."
    await client.get_response("just text", temperature=0.3)  # pyright: ignore[reportCallIssue, reportArgumentType]
    assert [m.text for m in client.calls[1]] == ["just text"]
    assert client.call_options[1] == {"temperature": 0.3}
    updates = [u async for u in client.get_streaming_response("stream it", seed=1)]  # pyright: ignore[reportCallIssue, reportArgumentType]
    assert "".join(u.text for u in updates) == "streamed"
    with pytest.raises(TypeError, match="unknown chat option"):
        await client.get_response("x", colour="red")  # pyright: ignore[reportCallIssue, reportArgumentType]
    await client.get_response("text with options", options={})  # pyright: ignore[reportArgumentType] - text too
    assert [m.text for m in client.calls[-1]] == ["text with options"]


async def test_the_earlier_call_shape_reaches_the_base_methods_and_own_keywords() -> None:
    class Minimal(BaseChatClient):
        """Implements only get_response, with a keyword of its own."""

        def __init__(self) -> None:
            self.seen: list[tuple[list[str], ChatOptions, int | None]] = []

        async def get_response(
            self, messages: Sequence[Message], *, options: ChatOptions, trace: int | None = None
        ) -> ChatResponse:
            self.seen.append(([m.text for m in messages], options, trace))
            return ChatResponse([Message("assistant", "ok")])

    client = Minimal()
    updates = [u async for u in client.get_streaming_response("hi", temperature=0.1)]  # pyright: ignore[reportCallIssue, reportArgumentType]
    assert "".join(u.text for u in updates) == "ok"
    await client.get_response([Message("user", "x")], options={}, trace=7)
    assert client.seen == [(["hi"], {"temperature": 0.1}, None), (["x"], {}, 7)]
