"""The message-store contract seen from an agent: history and recorded compaction on a backend.

These checks run a real :class:`~agentkeep.agent.Agent` with a
:class:`~agentkeep.providers.storage.StorageHistoryProvider` (and compaction providers) on stores
of the backend, with a scripted model: the session keeps only a key, each turn reads only what is
new, compaction is recorded non-destructively and survives other writers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from ...agent import Agent
from ...clients.scripted import ScriptedChatClient
from ...compaction import (
    SUMMARY_PROPERTY,
    CompactionProvider,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    summarized_message_ids,
)
from ...contents import Content
from ...errors import ScriptExhaustedError
from ...message_stores.base import HistoryView, MessageStore, StoredMessage, Summary
from ...messages import Message
from ...providers.storage import StorageHistoryProvider
from ...sessions import AgentSession
from ._checks import ConformanceCheck, check_list, expect, expect_equal, expect_raises
from .message_store import MessageStoreBackend, texts

__all__ = ["HISTORY_PROVIDER_CHECKS", "CountingStore"]

HISTORY_PROVIDER_CHECKS: list[ConformanceCheck[MessageStoreBackend]] = []
"""The agent-level checks, in the order they run."""

_check = check_list(HISTORY_PROVIDER_CHECKS)


class CountingStore:
    """A store wrapper that records the view reads it serves (to see what a turn asks for).

    Args:
        inner: The store to wrap; everything else is passed through.
    """

    def __init__(self, inner: MessageStore) -> None:
        self.inner = inner
        self.view_reads: list[dict[str, Any]] = []

    @property
    def backend(self) -> str:
        """The wrapped store's backend."""
        return self.inner.backend

    async def append(self, conversation_id: str, messages: Sequence[Message]) -> list[int]:
        """Append to the wrapped store."""
        return await self.inner.append(conversation_id, messages)

    async def read(
        self, conversation_id: str, *, raw: bool = False, last: int | None = None, after: int | None = None
    ) -> HistoryView:
        """Read from the wrapped store, recording view reads."""
        view = await self.inner.read(conversation_id, raw=raw, last=last, after=after)
        if not raw:
            self.view_reads.append({"last": last, "after": after, "returned": len(view.entries)})
        return view

    async def record_compaction(
        self, conversation_id: str, *, excluded: Collection[str] = (), summaries: Sequence[Summary] = ()
    ) -> int:
        """Record on the wrapped store."""
        return await self.inner.record_compaction(conversation_id, excluded=excluded, summaries=summaries)

    async def delete(self, conversation_id: str) -> bool:
        """Delete on the wrapped store."""
        return await self.inner.delete(conversation_id)


def _echo(messages: Sequence[Message]) -> str:
    return f"re: {messages[-1].text}"


def _echo_agent(
    store: MessageStore, **options: Any
) -> tuple[StorageHistoryProvider, ScriptedChatClient, Agent]:
    """A history provider on ``store``, a model that echoes, and an agent with both."""
    provider = StorageHistoryProvider(store, "db", **options)
    client = ScriptedChatClient(_echo)
    return provider, client, Agent(client, context_providers=[provider])


def _weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _weather_script(turns: int) -> list[str | Message]:
    replies: list[str | Message] = []
    for number in range(turns):
        replies.append(ScriptedChatClient.tool_call("_weather", {"city": f"city{number}"}))
        replies.append(f"answer {number}")
    return replies


async def _raw(store: MessageStore, conversation_id: str) -> list[StoredMessage]:
    return (await store.read(conversation_id, raw=True)).entries


async def _view(store: MessageStore, conversation_id: str) -> list[Message]:
    return (await store.read(conversation_id)).messages


# -- history ------------------------------------------------------------------------------------


@_check
async def each_turn_stores_its_two_messages(backend: MessageStoreBackend) -> None:
    """Three turns store 2, 4, 6 messages: each run appends its input and answer once."""
    async with backend.open() as store:
        provider = StorageHistoryProvider(store, "db")
        agent = Agent(ScriptedChatClient(["Done."] * 3), context_providers=[provider])
        session = agent.create_session()
        for expected in (2, 4, 6):
            await agent.run("continue", session=session)
            expect_equal(
                len(await _raw(store, provider.conversation_id(session))), expected, "messages stored"
            )


@_check
async def the_session_keeps_only_the_key_and_resumes(backend: MessageStoreBackend) -> None:
    """A serialized session holds the conversation id only, and a restored one continues it."""
    async with backend.open() as store:
        _, client, agent = _echo_agent(store)
        session = agent.create_session()
        for i in range(20):
            await agent.run(f"message {i} " + "x" * 200, session=session)
        payload = session.to_json()
        expect(len(payload) < 300, f"a session payload of {len(payload)} bytes holds more than the key")
        resumed = agent.deserialize_session(payload)
        await agent.run("last one", session=resumed)
        sent = client.calls[-1]
        expect_equal(len(sent), 41, "messages sent after resuming")
        expect(sent[0].text.startswith("message 0"), "the resumed request starts with the first message")


@_check
async def a_session_id_names_the_conversation_of_a_direct_call(backend: MessageStoreBackend) -> None:
    """``save_messages("s1", ...)`` / ``get_messages("s1")`` without a session (the reference's
    provider API) store and read conversation ``s1``; a call naming no conversation is refused."""
    async with backend.open() as store:
        provider = StorageHistoryProvider(store, "db")
        await provider.save_messages("s1", [Message("user", "hi"), Message("assistant", "hello")])
        await provider.save_messages("s1", [Message("user", "again")])
        expect_equal(texts(await provider.get_messages("s1")), ["hi", "hello", "again"], "conversation s1")
        expect_equal(texts(await _view(store, "s1")), ["hi", "hello", "again"], "what the store holds")
        expect_equal(texts(await provider.get_messages("s2")), [], "another conversation")
        with expect_raises(ValueError, "a save naming no conversation"):
            await provider.save_messages(None, [Message("user", "lost?")])
        with expect_raises(ValueError, "a read naming no conversation"):
            await provider.get_messages(None)


@_check
async def attach_points_a_new_session_at_a_stored_conversation(backend: MessageStoreBackend) -> None:
    """``attach`` makes a new session continue an existing conversation."""
    async with backend.open() as store:
        provider, client, agent = _echo_agent(store)
        await agent.run(
            "What is the weather in Amsterdam?", session=agent.create_session(session_id="conv-7")
        )
        fresh = AgentSession()
        provider.attach(fresh, "conv-7")
        await agent.run("What was my last question?", session=fresh)
        expect_equal(client.calls[-1][0].text, "What is the weather in Amsterdam?", "the first message sent")


@_check
async def turns_read_only_what_is_new(backend: MessageStoreBackend) -> None:
    """After the first load, each turn asks the store only for the messages appended since."""
    async with backend.open() as store:
        counting = CountingStore(store)
        _, _, agent = _echo_agent(counting)
        session = agent.create_session()
        for i in range(5):
            await agent.run(f"turn {i}", session=session)
        reads = counting.view_reads
        expect_equal(reads[0]["after"], None, "the first load")
        expect(all(read["after"] is not None for read in reads[1:]), f"later loads read everything: {reads}")
        expect(
            all(read["returned"] == 2 for read in reads[1:]),
            f"later loads returned more than the new turn: {reads}",
        )


@_check
async def a_compaction_by_another_writer_is_picked_up(backend: MessageStoreBackend) -> None:
    """A compaction recorded by someone else changes what the next turn loads."""
    async with backend.open() as store:
        provider, client, agent = _echo_agent(store)
        session = agent.create_session()
        for i in range(3):
            await agent.run(f"turn {i}", session=session)
        conversation = provider.conversation_id(session)
        old = [e.message.message_id or "" for e in (await _raw(store, conversation))[:4]]
        summary = Summary(Message("assistant", ["[earlier turns]"]), old)
        await store.record_compaction(conversation, excluded=old, summaries=[summary])
        await agent.run("next", session=session)
        expect_equal(
            texts(client.calls[-1]), ["[earlier turns]", "turn 2", "re: turn 2", "next"], "the next request"
        )


@_check
async def load_limit_bounds_the_window_without_orphan_tool_results(backend: MessageStoreBackend) -> None:
    """``load_limit`` loads the newest messages, never starting with results whose call is cut off."""
    async with backend.open() as store:
        provider, client, agent = _echo_agent(store, load_limit=2)
        session = agent.create_session()
        stored = [
            Message("user", ["q"]),
            ScriptedChatClient.tool_call("f", {}, call_id="c1"),
            Message("tool", [Content.from_function_result("c1", result="ok")]),
            Message("assistant", ["done"]),
        ]
        await store.append(provider.conversation_id(session), stored)
        await agent.run("turn 0", session=session)
        expect_equal(texts(client.calls[0]), ["done", "turn 0"], "the first request")
        for i in range(1, 4):
            await agent.run(f"turn {i}", session=session)
        expect_equal(texts(client.calls[-1]), ["turn 2", "re: turn 2", "turn 3"], "the last request")


# -- recorded compaction ------------------------------------------------------------------------


@_check
async def tool_results_collapse_in_storage_and_originals_stay(backend: MessageStoreBackend) -> None:
    """A per-run tool-result compaction is recorded: summaries in the view, originals in the log."""
    async with backend.open() as store:
        history = StorageHistoryProvider(store, "db")
        compaction = CompactionProvider(ToolResultCompactionStrategy(keep_last_tool_call_groups=1))
        agent = Agent(
            ScriptedChatClient(_weather_script(3)), tools=[_weather], context_providers=[history, compaction]
        )
        session = agent.create_session()
        for number in range(3):
            await agent.run(f"weather {number}?", session=session)
        conversation = history.conversation_id(session)
        raw = await _raw(store, conversation)
        expect_equal(len(raw), 12, "messages in the log (nothing deleted)")
        view = await _view(store, conversation)
        summaries = [m for m in view if SUMMARY_PROPERTY in (m.additional_properties or {})]
        expect_equal(texts(summaries), ["[Tool results: _weather: sunny in city0]"], "summaries in the view")
        expect_equal(
            summarized_message_ids(summaries[0]), [m.message.message_id for m in raw[1:3]], "what it replaces"
        )
        expect_equal(
            [m.text for m in view if m.role == "user"],
            ["weather 0?", "weather 1?", "weather 2?"],
            "user turns",
        )
        expect_equal(view.index(summaries[0]), 1, "the summary's place")
        fresh = agent.create_session()
        history.attach(fresh, conversation)
        loaded = await history.get_session_messages(fresh)
        expect_equal(
            [m.message_id for m in loaded], [m.message_id for m in view], "a fresh session's history"
        )


@_check
async def after_a_compaction_the_next_turn_loads_only_what_is_new(backend: MessageStoreBackend) -> None:
    """A window recorded every turn keeps requests small without reloading the conversation."""
    async with backend.open() as inner:
        store = CountingStore(inner)
        history = StorageHistoryProvider(store, "db")
        compaction = CompactionProvider(SlidingWindowStrategy(keep_last_groups=4))
        client = ScriptedChatClient(lambda messages: f"re {len(messages)}")
        agent = Agent(client, context_providers=[history, compaction])
        session = agent.create_session()
        for number in range(8):
            await agent.run(f"turn {number}", session=session)
        expect(
            all(len(call) <= 5 for call in client.calls), "a request held more than the window and the input"
        )
        expect(
            all(read["after"] is not None for read in store.view_reads[1:]),
            "a turn reloaded the conversation",
        )
        conversation = history.conversation_id(session)
        expect_equal(len(await _raw(inner, conversation)), 16, "messages in the log")
        view = await _view(inner, conversation)
        expect_equal(
            texts(view), texts(await history.get_session_messages(session)), "the cache agrees with the store"
        )
        expect(len(view) <= 6, f"the view holds {len(view)} messages")


@_check
async def the_after_run_phase_compacts_what_was_just_stored(backend: MessageStoreBackend) -> None:
    """An ``after_run`` compaction is recorded after the run's messages are stored."""
    async with backend.open() as store:
        history = StorageHistoryProvider(store, "db")
        after = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2), phase="after_run")
        client = ScriptedChatClient(["one", "two", "three"])
        agent = Agent(client, context_providers=[history, after])
        session = agent.create_session()
        for text in ("a", "b", "c"):
            await agent.run(text, session=session)
        conversation = history.conversation_id(session)
        expect_equal(texts(await _view(store, conversation)), ["c", "three"], "the view")
        expect_equal(len(await _raw(store, conversation)), 6, "messages in the log")
        expect_equal(texts(client.calls[2]), ["b", "two", "c"], "the third request")


@_check
async def a_failed_run_records_no_compaction(backend: MessageStoreBackend) -> None:
    """A run that fails stores nothing and records no compaction; the next good run does."""
    async with backend.open() as store:
        history = StorageHistoryProvider(store, "db")
        window = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2))
        agent = Agent(ScriptedChatClient(["one", "two"]), context_providers=[history, window])
        session = agent.create_session()
        await agent.run("a", session=session)
        await agent.run("b", session=session)
        conversation = history.conversation_id(session)
        expect_equal((await store.read(conversation)).epoch, 0, "epoch with nothing to compact")
        with expect_raises(ScriptExhaustedError, "a run without a reply"):
            await agent.run("c", session=session)
        view = await store.read(conversation)
        expect_equal((view.epoch, texts(view.entries)), (0, ["a", "one", "b", "two"]), "after the failed run")
        again = Agent(ScriptedChatClient(["three"]), context_providers=[history, window])
        await again.run("d", session=session)
        view = await store.read(conversation)
        expect_equal((view.epoch, texts(view.entries)), (1, ["b", "two", "d", "three"]), "after the next run")
        expect_equal(len(await _raw(store, conversation)), 6, "messages in the log")


@_check
async def stored_summaries_can_be_excluded_later(backend: MessageStoreBackend) -> None:
    """A later window drops groups that are stored summaries, by their ids."""
    async with backend.open() as store:
        history = StorageHistoryProvider(store, "db")
        tool_result = CompactionProvider(ToolResultCompactionStrategy(keep_last_tool_call_groups=0))
        client = ScriptedChatClient([*_weather_script(2), "plain"])
        agent = Agent(client, tools=[_weather], context_providers=[history, tool_result])
        session = agent.create_session()
        for text in ("w0", "w1", "w2"):
            await agent.run(text, session=session)
        conversation = history.conversation_id(session)
        view = await _view(store, conversation)
        expect_equal(sum(SUMMARY_PROPERTY in (m.additional_properties or {}) for m in view), 2, "summaries")
        window = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2), source_id="window")
        await Agent(ScriptedChatClient(["done"]), context_providers=[history, window]).run(
            "w3", session=session
        )
        expect_equal(texts(await _view(store, conversation)), ["w2", "plain", "w3", "done"], "the view")


@_check
async def two_writers_compacting_one_conversation_lose_nothing(backend: MessageStoreBackend) -> None:
    """Two hosts taking turns, each compacting, store every turn once and agree with the store."""
    async with backend.open() as store:
        agents: list[tuple[Agent, StorageHistoryProvider]] = []
        for name in ("a", "b"):
            history = StorageHistoryProvider(store, "db")
            window = CompactionProvider(SlidingWindowStrategy(keep_last_groups=3))
            client = ScriptedChatClient(lambda messages, name=name: f"{name} saw {len(messages)}")
            agents.append((Agent(client, context_providers=[history, window]), history))
        sessions: list[AgentSession] = []
        for _, history in agents:
            session = AgentSession()
            history.attach(session, "shared")
            sessions.append(session)
        for number in range(8):
            agent, _ = agents[number % 2]
            await agent.run(f"q{number}", session=sessions[number % 2])
        raw = await _raw(store, "shared")
        expect_equal(
            [e.message.text for e in raw if e.message.role == "user"],
            [f"q{i}" for i in range(8)],
            "user turns",
        )
        expect_equal(len(raw), 16, "messages in the log")
        view = await _view(store, "shared")
        expect_equal(view[-2].text, "q7", "the last question in the view")
        expect(len(view) <= 5, f"the view holds {len(view)} messages")
        for (_, history), session in zip(agents, sessions, strict=True):
            loaded = await history.get_session_messages(session)
            expect_equal([m.message_id for m in loaded], [m.message_id for m in view], "a writer's cache")
