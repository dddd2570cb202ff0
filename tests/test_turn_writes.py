"""A turn stored in one step (``agentkeep.turn_writes``): the run's history append held and written
with the session's save, in one transaction on SQLite and PostgreSQL (one script on Redis and a
Redis Cluster), so a turn whose save fails
stores none of its messages; a read during the run sees what is held; stores of two databases
append as before."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentkeep import Agent
from agentkeep.host import TurnConflictError
from agentkeep.host._turns import SessionTurn
from agentkeep.message_stores import MessageStore
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.message_stores.redis import RedisMessageStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores import AgentSessionStore, session_version
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.session_stores.redis import RedisSessionStore
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from agentkeep.turn_writes import held_appends
from tests.message_stores.backend_postgres import URL, drop_schema, new_schema
from tests.message_stores.backend_redis import REDIS_URL, delete_prefix, unique_prefix
from tests.private_redis_cluster import shared_redis_cluster

Stores = tuple[MessageStore, AgentSessionStore]
Opener = Callable[[Path], AbstractAsyncContextManager[Stores]]


@asynccontextmanager
async def sqlite_stores(folder: Path) -> AsyncIterator[Stores]:
    messages, sessions = SQLiteMessageStore(folder / "one.db"), SQLiteSessionStore(folder / "one.db")
    try:
        yield messages, sessions
    finally:
        await messages.aclose()
        await sessions.aclose()


@asynccontextmanager
async def postgres_stores(folder: Path) -> AsyncIterator[Stores]:
    del folder
    schema = new_schema()
    messages = PostgresMessageStore.from_url(URL, schema=schema)
    sessions = PostgresSessionStore.from_url(URL, schema=schema)
    try:
        yield messages, sessions
    finally:
        await messages.aclose()
        await sessions.aclose()
        await drop_schema(schema)


@asynccontextmanager
async def redis_stores_at(url: str) -> AsyncIterator[Stores]:
    prefix = unique_prefix("turns")
    messages = RedisMessageStore.from_url(url, key_prefix=prefix)
    sessions = RedisSessionStore.from_url(url, key_prefix=f"{prefix}-sessions")
    try:
        yield messages, sessions
    finally:
        await messages.aclose()
        await sessions.aclose()
        await delete_prefix(prefix, url)
        await delete_prefix(f"{prefix}-sessions", url)


def redis_stores(folder: Path) -> AbstractAsyncContextManager[Stores]:
    del folder
    return redis_stores_at(REDIS_URL)


def cluster_stores(folder: Path) -> AbstractAsyncContextManager[Stores]:
    del folder
    return redis_stores_at(shared_redis_cluster().url)


BACKENDS = [
    pytest.param(sqlite_stores, id="sqlite"),
    pytest.param(postgres_stores, id="postgres", marks=pytest.mark.postgres),
    pytest.param(redis_stores, id="redis", marks=pytest.mark.redis),
    pytest.param(cluster_stores, id="redis-cluster", marks=pytest.mark.redis),
]


def agent(store: MessageStore) -> tuple[Agent, StorageHistoryProvider]:
    history = StorageHistoryProvider(store, "history")
    return Agent(
        ScriptedChatClient(lambda messages: f"heard {messages[-1].text}"),
        name="chat",
        context_providers=[history],
    ), history


async def stored(store: MessageStore, conversation_id: str) -> list[str]:
    return [message.text for message in (await store.read(conversation_id, raw=True)).messages]


async def held_turn(bot: Agent, sessions: AgentSessionStore, text: str) -> SessionTurn:
    """A turn of conversation ``c`` of tenant ``t`` run with its appends held (not yet saved)."""
    turn = await SessionTurn.load(bot, sessions, "t", "c")
    turn.hold_appends()
    await bot.run(text, session=turn.session)
    return turn


@pytest.mark.parametrize("stores", BACKENDS)
async def test_a_turns_messages_are_stored_with_its_session(stores: Opener, tmp_path: Path) -> None:
    async with stores(tmp_path) as (messages, sessions):
        bot, _ = agent(messages)
        turn = await held_turn(bot, sessions, "hello")
        writes = held_appends(turn.session)
        assert writes is not None
        assert [len(held.messages) for held in writes.held] == [2]
        assert await stored(messages, "t::c") == []  # held for the save
        await turn.save()
        assert await stored(messages, "t::c") == ["hello", "heard hello"]
        assert session_version(turn.session) == 1
        again = await held_turn(bot, sessions, "more")  # the session is unchanged: the append alone
        await again.save()
        assert await stored(messages, "t::c") == ["hello", "heard hello", "more", "heard more"]


@pytest.mark.parametrize("stores", BACKENDS)
async def test_a_turn_whose_session_cannot_be_saved_stores_none_of_its_messages(
    stores: Opener, tmp_path: Path
) -> None:
    async with stores(tmp_path) as (messages, sessions):
        bot, _ = agent(messages)
        first = await held_turn(bot, sessions, "hello")
        await first.save()
        mine = await held_turn(bot, sessions, "mine")
        theirs = await SessionTurn.load(bot, sessions, "t", "c")  # another process, same version
        mine.session.state["memory"] = {"name": "Ada"}
        theirs.session.state["memory"] = {"name": "Grace"}
        await theirs.save()
        with pytest.raises(TurnConflictError):
            await mine.save()  # every merge meets the other writer's value
        assert await stored(messages, "t::c") == ["hello", "heard hello"]  # nothing of the failed turn
        writes = held_appends(mine.session)
        assert writes is not None
        assert writes.held == []  # dropped with the turn
        fresh = await SessionTurn.load(bot, sessions, "t", "c")
        assert fresh.session.state["memory"] == {"name": "Grace"}


@pytest.mark.parametrize("stores", BACKENDS)
async def test_a_merged_save_writes_the_held_messages_once(stores: Opener, tmp_path: Path) -> None:
    async with stores(tmp_path) as (messages, sessions):
        bot, _ = agent(messages)
        await (await held_turn(bot, sessions, "hello")).save()
        mine = await held_turn(bot, sessions, "mine")
        theirs = await SessionTurn.load(bot, sessions, "t", "c")
        mine.session.state["mood"] = "calm"
        theirs.session.state["memory"] = {"name": "Grace"}
        await theirs.save()
        await mine.save()  # the first try meets version 2 and rolls back; the merge goes in
        assert await stored(messages, "t::c") == ["hello", "heard hello", "mine", "heard mine"]
        fresh = await SessionTurn.load(bot, sessions, "t", "c")
        assert (fresh.session.state["mood"], fresh.session.state["memory"]) == ("calm", {"name": "Grace"})


@pytest.mark.parametrize("stores", BACKENDS)
async def test_a_read_during_the_run_sees_what_is_held(stores: Opener, tmp_path: Path) -> None:
    async with stores(tmp_path) as (messages, sessions):
        bot, history = agent(messages)
        turn = await held_turn(bot, sessions, "hello")
        seen = await history.get_session_messages(turn.session)  # appends what is held first
        assert [message.text for message in seen] == ["hello", "heard hello"]
        await turn.save()
        assert await stored(messages, "t::c") == ["hello", "heard hello"]  # once


async def test_stores_of_two_files_append_as_they_go(tmp_path: Path) -> None:
    messages, sessions = (
        SQLiteMessageStore(tmp_path / "history.db"),
        SQLiteSessionStore(tmp_path / "other.db"),
    )
    try:
        assert not sessions.shares_database(messages)
        bot, _ = agent(messages)
        turn = await held_turn(bot, sessions, "hello")
        assert await stored(messages, "t::c") == ["hello", "heard hello"]  # not held
        await turn.save()
    finally:
        await messages.aclose()
        await sessions.aclose()


@pytest.mark.postgres
async def test_postgres_stores_share_a_database_by_url_and_settings() -> None:
    schema = new_schema()
    opened: list[Any] = [
        PostgresMessageStore.from_url(URL, schema=schema),
        PostgresSessionStore.from_url(URL, schema=f"{schema}_s"),
        PostgresMessageStore.from_url(URL, schema=schema, timeout=9.0),
    ]
    same, sessions, slower = opened
    try:
        assert sessions.shares_database(same)  # another schema of the same database
        assert not sessions.shares_database(slower)  # other timeouts: another pool
    finally:
        for store in opened:
            await store.aclose()
