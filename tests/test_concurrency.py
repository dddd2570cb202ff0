"""Concurrent runs on one session never lose or duplicate a message, and keep each turn together."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import ModuleType

import pytest

from agentkeep import InMemoryHistoryProvider, Message, MessageCountingChatReducer, MessageLog
from agentkeep.clients.base import ChatOptions, ChatResponse
from agentkeep.providers import StorageHistoryProvider
from agentkeep.testing import ScriptedChatClient
from tests.discovery import backend_modules

HISTORY_BACKENDS = backend_modules("tests.message_stores")


def _answer(messages: Sequence[Message]) -> str:
    return f"re: {messages[-1].text}"


class SlowCopyingReducer(MessageCountingChatReducer):
    """Yields to the event loop while reducing (so other runs append meanwhile) and returns copies,
    so the log is really replaced every time."""

    async def reduce(self, messages: Sequence[Message]) -> Sequence[Message]:
        await asyncio.sleep(0)
        return [m.copy() for m in await super().reduce(messages)]


async def test_parallel_runs_store_every_turn_once_and_contiguously() -> None:
    provider = InMemoryHistoryProvider()
    agent = ScriptedChatClient(_answer).as_agent(context_providers=[provider])
    session = agent.create_session()
    await asyncio.gather(*(agent.run(f"turn {i}", session=session) for i in range(50)))
    stored = list(await provider.get_session_messages(session))
    assert len(stored) == 100
    assert len({m.message_id for m in stored}) == 100
    for user, reply in zip(stored[::2], stored[1::2], strict=True):
        assert user.role == "user"
        assert reply.text == f"re: {user.text}"
    assert sorted(m.text for m in stored[::2]) == sorted(f"turn {i}" for i in range(50))


async def test_reducer_keeps_messages_appended_while_it_runs() -> None:
    reducer = SlowCopyingReducer(1000)
    provider = InMemoryHistoryProvider(reducer=reducer, reducer_trigger="after_message_added")
    agent = ScriptedChatClient(_answer).as_agent(context_providers=[provider])
    session = agent.create_session()
    await asyncio.gather(*(agent.run(f"turn {i}", session=session) for i in range(30)))
    stored = list(await provider.get_session_messages(session))
    assert len(stored) == 60
    assert len({m.message_id for m in stored}) == 60


def test_log_replace_based_on_a_view_keeps_later_appends() -> None:
    log = MessageLog("h", [Message("user", ["one"]), Message("assistant", ["two"])])
    before = log.view()
    log.extend([Message("user", ["three"])])  # a concurrent run appends while a reducer works
    assert log.replace([before[1]], based_on=before)
    assert [m.text for m in log.view()] == ["two", "three"]
    # a view of a list that has since been replaced cannot be the base of another replacement
    assert not log.replace([], based_on=before)
    assert [m.text for m in log.view()] == ["two", "three"]


class SlowClient(ScriptedChatClient):
    """Answers after yielding to the event loop a few times, so runs really overlap."""

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        for _ in range(3):
            await asyncio.sleep(0)
        return await super().get_response(messages, options=options)


@pytest.mark.parametrize("backend", HISTORY_BACKENDS, ids=lambda m: m.NAME)
async def test_tasks_sharing_one_session_object_never_send_duplicates(backend: ModuleType) -> None:
    async with backend.open_store() as store:
        client = SlowClient(_answer)
        agent = client.as_agent(context_providers=[StorageHistoryProvider(store, "history")])
        session = agent.create_session()
        await agent.run("first", session=session)  # the session's view is cached from here on
        async with asyncio.timeout(30):
            await asyncio.gather(*(agent.run(f"turn {i}", session=session) for i in range(8)))
        for request in client.calls:
            ids = [m.message_id for m in request]
            assert len(ids) == len(set(ids)), [m.text for m in request]
        # every run saw the turns before it, each once: the requests grow two messages a run
        assert [len(request) for request in client.calls] == [1 + 2 * n for n in range(9)]
        stored = (await store.read(session.storage_key)).messages
        assert len(stored) == 18
        assert len({m.message_id for m in stored}) == 18


async def test_a_streamed_run_holds_the_session_until_it_is_closed() -> None:
    agent = SlowClient(_answer).as_agent(context_providers=[InMemoryHistoryProvider()])
    session = agent.create_session()
    stream = agent.run("streamed", stream=True, session=session)
    async for _ in stream:
        break  # leave the stream open: the next run on the session waits for it
    waiting = asyncio.create_task(agent.run("next", session=session))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await stream.aclose()
    async with asyncio.timeout(10):
        response = await waiting
    assert response.text == "re: next"
