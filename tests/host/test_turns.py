"""A hosted turn's session: per-conversation locks, warm sessions, and saves that meet another
writer's version (a real SQLite session store, two host processes simulated by two turns)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentkeep import Agent
from agentkeep.host import TurnConflictError
from agentkeep.host._turns import ConversationLocks, SessionCache, SessionTurn
from agentkeep.session_stores import session_version
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient


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
