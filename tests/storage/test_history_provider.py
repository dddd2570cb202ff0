"""StorageHistoryProvider on every backend: the session keeps a key, the backend the messages."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from agentkeep import Agent, AgentSession, Content, Message
from agentkeep.storage import HistoryView, MessageStore, StorageHistoryProvider, Summary
from agentkeep.testing import ScriptedChatClient


class CountingStore:
    """Wraps a store and records the view reads it serves."""

    def __init__(self, inner: MessageStore) -> None:
        self.inner = inner
        self.view_reads: list[dict[str, Any]] = []

    @property
    def backend(self) -> str:
        return self.inner.backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read_view(
        self, conversation_id: str, *, last: int | None = None, after: int | None = None
    ) -> HistoryView:
        view = await self.inner.read_view(conversation_id, last=last, after=after)
        self.view_reads.append({"last": last, "after": after, "returned": len(view.entries)})
        return view


def _echo(messages: Sequence[Message]) -> str:
    return f"re: {messages[-1].text}"


async def test_three_turns_store_two_four_six(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        provider = StorageHistoryProvider(store, "db")
        agent = Agent(ScriptedChatClient(["Done."] * 3), context_providers=[provider])
        session = agent.create_session()
        for expected in (2, 4, 6):
            await agent.run("continue", session=session)
            assert len(await store.read(provider.conversation_id(session))) == expected


async def test_session_keeps_only_the_key_and_resumes(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        provider = StorageHistoryProvider(store, "db")
        client = ScriptedChatClient(_echo)
        agent = Agent(client, context_providers=[provider])
        session = agent.create_session()
        for i in range(20):
            await agent.run(f"message {i} " + "x" * 200, session=session)
        payload = session.to_json()
        assert len(payload) < 300  # tiny: just the conversation id
        resumed = agent.deserialize_session(payload)
        await agent.run("last one", session=resumed)
        sent = client.calls[-1]
        assert len(sent) == 41
        assert sent[0].text.startswith("message 0")


async def test_attach_points_a_new_session_at_a_stored_conversation(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        provider = StorageHistoryProvider(store, "db")
        client = ScriptedChatClient(_echo)
        agent = Agent(client, context_providers=[provider])
        await agent.run(
            "What is the weather in Amsterdam?", session=agent.create_session(session_id="conv-7")
        )
        fresh = AgentSession()
        provider.attach(fresh, "conv-7")
        await agent.run("What was my last question?", session=fresh)
        assert client.calls[-1][0].text == "What is the weather in Amsterdam?"


async def test_turns_read_only_what_is_new(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        counting = CountingStore(store)
        provider = StorageHistoryProvider(counting, "db")  # type: ignore[arg-type]
        agent = Agent(ScriptedChatClient(_echo), context_providers=[provider])
        session = agent.create_session()
        for i in range(5):
            await agent.run(f"turn {i}", session=session)
        assert counting.view_reads[0]["after"] is None
        assert all(read["after"] is not None for read in counting.view_reads[1:])
        assert all(read["returned"] == 2 for read in counting.view_reads[1:])


async def test_compaction_by_another_writer_is_picked_up(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        provider = StorageHistoryProvider(store, "db")
        client = ScriptedChatClient(_echo)
        agent = Agent(client, context_providers=[provider])
        session = agent.create_session()
        for i in range(3):
            await agent.run(f"turn {i}", session=session)
        conversation = provider.conversation_id(session)
        raw = await store.read(conversation)
        old = [e.message.message_id or "" for e in raw[:4]]
        await store.record_compaction(
            conversation, excluded=old, summaries=[Summary(Message("assistant", ["[earlier turns]"]), old)]
        )
        await agent.run("next", session=session)
        assert [m.text for m in client.calls[-1]] == ["[earlier turns]", "turn 2", "re: turn 2", "next"]


async def test_load_limit_bounds_the_window_without_orphan_tool_results(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        provider = StorageHistoryProvider(store, "db", load_limit=2)
        client = ScriptedChatClient(_echo)
        agent = Agent(client, context_providers=[provider])
        session = agent.create_session()
        await store.append(
            provider.conversation_id(session),
            [
                Message("user", ["q"]),
                ScriptedChatClient.tool_call("f", {}, call_id="c1"),
                Message("tool", [Content.from_function_result("c1", result="ok")]),
                Message("assistant", ["done"]),
            ],
        )
        await agent.run("turn 0", session=session)
        # the last two are [tool result, "done"]: the result's call is outside the window
        assert [m.text for m in client.calls[0]] == ["done", "turn 0"]
        for i in range(1, 4):
            await agent.run(f"turn {i}", session=session)
        assert [m.text for m in client.calls[-1]] == ["turn 2", "re: turn 2", "turn 3"]
