"""A hosted turn's session: per-conversation locks, warm sessions, and saves that meet another
writer's version (a real SQLite session store, two host processes simulated by two turns)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep import Agent
from agentkeep.host import AgentHost, TurnConflictError
from agentkeep.host._turns import ConversationLocks, SessionCache, SessionTurn
from agentkeep.message_stores import HistoryView
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores import session_version
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn
from tests.host.conftest import conversation, run, user


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteSessionStore]:
    opened = SQLiteSessionStore(tmp_path / "sessions.db")
    yield opened
    await opened.aclose()


def agent() -> Agent:
    return Agent(ScriptedChatClient(), name="chat")


async def test_locks_serialize_one_conversation_and_are_dropped_when_idle() -> None:
    locks = ConversationLocks()
    order: list[str] = []

    async def turn(name: str, key: tuple[str, ...]) -> None:
        async with locks.hold(key):
            order.append(f"{name} in")
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    async with asyncio.timeout(10):
        await asyncio.gather(turn("a", ("t", "c")), turn("b", ("t", "c")), turn("c", ("t", "other")))
    assert order.index("a out") < order.index("b in")  # one conversation: one after the other
    assert order.index("c in") < order.index("a out")  # another conversation: meanwhile
    assert len(locks) == 0


async def test_state_changes_of_two_writers_are_merged_key_by_key(store: SQLiteSessionStore) -> None:
    bot = agent()
    first = await SessionTurn.load(bot, store, "alice", "c")
    await first.save()  # version 1
    one = await SessionTurn.load(bot, store, "alice", "c")
    two = await SessionTurn.load(bot, store, "alice", "c")  # another process, same version
    one.session.state["memory"] = {"name": "Ada"}
    two.session.state["mood"] = "cheerful"
    await one.save()
    await two.save()  # meets version 2: takes it and adds its own key
    final = await SessionTurn.load(bot, store, "alice", "c")
    assert final.session.state["memory"] == {"name": "Ada"}
    assert final.session.state["mood"] == "cheerful"
    assert session_version(final.session) == 3


async def test_the_same_key_changed_by_two_writers_is_a_conflict(store: SQLiteSessionStore) -> None:
    bot = agent()
    await (await SessionTurn.load(bot, store, "alice", "c")).save()
    one = await SessionTurn.load(bot, store, "alice", "c")
    two = await SessionTurn.load(bot, store, "alice", "c")
    one.session.state["memory"] = {"name": "Ada"}
    two.session.state["memory"] = {"name": "Grace"}
    await one.save()
    with pytest.raises(TurnConflictError, match="send the turn again"):
        await two.save()
    assert (await SessionTurn.load(bot, store, "alice", "c")).session.state["memory"] == {"name": "Ada"}


async def test_an_unchanged_session_is_not_saved_again(store: SQLiteSessionStore) -> None:
    bot = agent()
    await (await SessionTurn.load(bot, store, "alice", "c")).save()
    turn = await SessionTurn.load(bot, store, "alice", "c")
    await turn.save()
    assert session_version(turn.session) == 1


async def test_warm_sessions_are_used_only_at_the_stored_version(store: SQLiteSessionStore) -> None:
    bot, cache, key = agent(), SessionCache(size=2), ("alice", "chat", "c")
    turn = await SessionTurn.load(bot, store, "alice", "c", cache=(cache, key))
    turn.session.runtime["provider:cache"] = "warm"
    await turn.save()
    cache.keep(key, turn.session)
    again = await SessionTurn.load(bot, store, "alice", "c", cache=(cache, key))
    assert again.session is turn.session  # same version: the warm object
    other = await SessionTurn.load(bot, store, "alice", "c")
    other.session.state["x"] = 1
    await other.save()  # another process moved it to version 2
    cache.keep(key, again.session)
    stale = await SessionTurn.load(bot, store, "alice", "c", cache=(cache, key))
    assert stale.session is not again.session
    assert stale.session.state["x"] == 1
    for name in ("d", "e", "f"):
        cache.keep(("alice", "chat", name), stale.session)
    assert len(cache) == 2  # the oldest dropped


class CountedReads(SQLiteMessageStore):
    """A SQLite message store that records the reads made of it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads: list[dict[str, object]] = []

    async def read(self, conversation_id: str, **options: Any) -> HistoryView:  # type: ignore[override]
        self.reads.append(options)
        return await super().read(conversation_id, **options)


async def test_a_turn_on_a_warm_conversation_reads_its_history_once_and_only_what_is_new(
    tmp_path: Path,
) -> None:
    """The host finds what a request adds against the history it loads, and the run's history
    provider takes that same view: one store read per turn, of the messages after the newest it
    holds (by any process)."""
    store = CountedReads(tmp_path / "h.db")
    history = StorageHistoryProvider(store, "history", load_limit=50, owns_store=True)
    agent = Agent(
        ScriptedChatClient(lambda messages: f"heard {len(messages)}"),
        name="chat",
        context_providers=[history],
    )
    host = AgentHost()
    host.add_agent("chat", agent, session_store=SQLiteSessionStore(tmp_path / "h.db"))
    server = ThreadedUvicorn(host.app, name="agentkeep host", lifespan="on")
    server.start()
    try:
        sent: list[dict[str, Any]] = []
        for turn in range(4):
            sent.append(user(f"turn {turn}"))
            store.reads.clear()
            events = await run(server.url, "warm", sent, key=None)
            sent.extend(conversation(events))
            if turn == 0:
                assert store.reads == [{"after": None, "last": 50}]
            else:
                assert len(store.reads) == 1, store.reads
                assert store.reads[0].get("after") == 2 * (turn - 1)  # only what was appended since
    finally:
        server.stop()
