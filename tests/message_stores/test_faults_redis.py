"""Redis going away mid-run: the error, and a retried append stored exactly once after recovery.

Each test starts its own ``redis-server`` on a free port (no persistence except an explicit
``SAVE`` into its own folder under ``tmp_path``) and stops it at the end.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import signal
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentkeep import Agent, CorruptRecordError, Message, OutcomeUnknownError, StorageUnavailableError
from agentkeep._db.redis import RedisConnection
from agentkeep.message_stores.redis import RedisMessageStore
from agentkeep.session_stores.redis import RedisSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.message_stores.reply_dropper import reply_dropper
from tests.message_stores.workers import append_turns_through_outages
from tests.private_redis import RedisServer

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")

TIMEOUT = 0.5  # the stores' connect and reply timeout in these tests


@pytest.fixture
def server(private_redis: RedisServer) -> RedisServer:
    return private_redis


@pytest.fixture
async def admin(server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(server.url, socket_timeout=10)
    try:
        yield client
    finally:
        await client.aclose()


def turn(tag: str) -> list[Message]:
    return [Message("user", [f"{tag} question"]), Message("assistant", [f"{tag} answer"])]


async def busy(server: RedisServer) -> None:
    """Return once ``server`` has stopped answering (it is running a command that blocks it): a
    probe's PING that gets no reply within 0.2 s proves it (the sleep lasts 1.5 s), where a fixed
    sleep would guess."""
    probe = aioredis.Redis.from_url(server.url, socket_timeout=0.2)
    try:
        async with asyncio.timeout(30):  # a hang guard
            while True:
                try:
                    await probe.ping()
                except aioredis.TimeoutError:
                    return
                await asyncio.sleep(0.005)
    finally:
        await probe.aclose()


async def test_a_busy_server_does_not_apply_a_timed_out_append_later(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    store = RedisMessageStore.from_url(server.url, timeout=TIMEOUT)
    try:
        await store.append("c", turn("first"))
        second = turn("second")
        sleeping = asyncio.create_task(admin.execute_command("DEBUG", "SLEEP", 1.5))
        await busy(server)
        async with asyncio.timeout(30):  # a hang guard: the reply timeout fires first
            with pytest.raises(StorageUnavailableError) as caught:
                await store.append("c", second)  # sent, but the reply does not come in time
        assert caught.value.address == server.url
        await sleeping
        # the server woke up past the caller's timeout: the append it then found did not apply
        assert await admin.llen(store.conversation_keys("c").log) == 2
        assert await store.append("c", second) == [3, 4]
        assert await store.append("c", second) == [3, 4]  # and a second retry adds nothing
        texts = [entry.message.text for entry in (await store.read("c", raw=True)).entries]
        assert texts == ["first question", "first answer", "second question", "second answer"]
        await store.append("c", turn("third"))
        assert [entry.seq for entry in (await store.read("c", raw=True)).entries] == [1, 2, 3, 4, 5, 6]
    finally:
        await store.aclose()


async def test_a_paused_server_does_not_apply_a_timed_out_append_when_resumed(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    store = RedisMessageStore.from_url(server.url, timeout=TIMEOUT)
    process = server.process
    assert process is not None
    try:
        await store.append("c", turn("first"))
        process.send_signal(signal.SIGSTOP)
        try:
            async with asyncio.timeout(30):  # a hang guard: the reply timeout fires first
                with pytest.raises(StorageUnavailableError):
                    await store.append("c", turn("second"))  # queued in the paused server
        finally:
            process.send_signal(signal.SIGCONT)
        assert await admin.ping()  # answered after the queued append ran (or refused to)
        texts = [entry.message.text for entry in (await store.read("c", raw=True)).entries]
        assert texts == ["first question", "first answer"]  # reported failed, and not stored
        assert await store.append("c", turn("second")) == [3, 4]
    finally:
        await store.aclose()


async def test_a_killed_server_fails_fast_and_a_retry_after_restart_is_stored_once(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    store = RedisMessageStore.from_url(server.url, timeout=TIMEOUT)
    try:
        first, second = turn("first"), turn("second")
        await store.append("c", first)
        await admin.save()  # what survives the kill
        server.kill()
        async with asyncio.timeout(30):  # a hang guard: the connect timeout fires first
            with pytest.raises(StorageUnavailableError, match=f"redis at {server.url}"):
                await store.append("c", second)
            with pytest.raises(StorageUnavailableError):
                await store.read("c", raw=True)
        server.start()  # same port, loads the dump
        assert await store.append("c", second) == [3, 4]  # reconnects by itself
        assert await store.append("c", second) == [3, 4]  # a second retry changes nothing
        assert await store.append("c", first) == [1, 2]  # nor does a retry of the saved turn
        texts = [entry.message.text for entry in (await store.read("c", raw=True)).entries]
        assert texts == ["first question", "first answer", "second question", "second answer"]
    finally:
        await store.aclose()


async def test_the_session_store_reports_an_outage_and_recovers(server: RedisServer) -> None:
    store = RedisSessionStore.from_url(server.url, timeout=TIMEOUT)
    agent = Agent(ScriptedChatClient(), name="helper")
    try:
        session = await store.get_session(agent, "s")
        server.kill()
        with pytest.raises(StorageUnavailableError):
            await store.save_session(agent, "s", session)
        server.start()  # nothing was saved: an empty server
        await store.save_session(agent, "s", session)
        assert (await store.get_session(agent, "s")).session_id == "s"
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("field", "value"), [("l", "1e400"), ("l", "junk"), ("h", "-5"), ("e", "x"), ("h", "2.5")]
)
async def test_damaged_bookkeeping_is_reported_and_never_hangs_the_server(
    server: RedisServer, admin: aioredis.Redis, field: str, value: str
) -> None:
    # a private server: a script that loops on a damaged counter would block every client of it
    store = RedisMessageStore.from_url(server.url, timeout=TIMEOUT)
    try:
        await store.append("c", turn("first"))
        await admin.hset(store.conversation_keys("c").meta, field, value)
        async with asyncio.timeout(30):
            with pytest.raises(CorruptRecordError, match="bookkeeping is damaged") as caught:
                await store.read("c")
            assert caught.value.conversation_id == store.conversation_keys("c").meta
            if field != "e":  # appends and listings do not read the epoch
                with pytest.raises(CorruptRecordError):
                    await store.append("c", turn("second"))
                with pytest.raises(CorruptRecordError):
                    await store.list_conversations()
        assert await admin.ping()  # the server is still answering
    finally:
        await store.aclose()


async def test_writers_in_several_processes_retrying_through_a_killed_server_store_each_turn_once(
    tmp_path: Path,
) -> None:
    own = RedisServer(tmp_path, persistent=True)
    own.start()
    workers, turns = 4, 40
    try:
        context = multiprocessing.get_context("spawn")
        with (
            context.Manager() as manager,
            ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool,
        ):
            under_way = manager.Event()
            futures = [
                pool.submit(append_turns_through_outages, own.url, "shared", worker, turns, under_way)
                for worker in range(workers)
            ]
            assert await asyncio.to_thread(under_way.wait, 60)  # the writers are well under way
            own.kill()  # kill -9 in the middle of the appends
            await asyncio.sleep(0.5)
            own.start()  # the append-only file brings back what was acknowledged
            failures = [await asyncio.wait_for(asyncio.wrap_future(f), timeout=120) for f in futures]
        assert sum(failures) > 0  # the outage was felt
        store = RedisMessageStore.from_url(own.url)
        try:
            entries = (await store.read("shared", raw=True)).entries
        finally:
            await store.aclose()
        texts = [entry.message.text for entry in entries]
        assert len(texts) == workers * turns * 2  # every turn once: none lost, none twice
        assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
        for question, answer in zip(texts[::2], texts[1::2], strict=True):
            assert answer == question.replace("question", "answer")  # each turn contiguous
        for worker in range(workers):
            own_turns = [t for t in texts[::2] if t.startswith(f"w{worker}-")]
            assert own_turns == [f"w{worker}-t{t} question" for t in range(turns)]
    finally:
        own.kill()


async def test_a_lost_reply_says_the_outcome_is_unknown_and_a_retry_stores_once(server: RedisServer) -> None:
    host, port = server.url.removeprefix("redis://").split("/")[0].split(":")
    async with reply_dropper(host, int(port)) as proxy:
        store = RedisMessageStore.from_url(f"redis://127.0.0.1:{proxy.port}/0", timeout=TIMEOUT)
        try:
            await store.append("lost-reply", turn("first"))
            second = turn("second")
            proxy.marker = b"lost-reply"  # the server applies the append; its reply never arrives
            async with asyncio.timeout(30):  # a hang guard
                with pytest.raises(OutcomeUnknownError, match="may have been applied") as raised:
                    await store.append("lost-reply", second)
            assert isinstance(raised.value, StorageUnavailableError)
            assert proxy.dropped >= 1
            proxy.marker = None
            stored = [entry.message.text for entry in (await store.read("lost-reply", raw=True)).entries]
            assert stored == ["first question", "first answer", "second question", "second answer"]
            assert await store.append("lost-reply", second) == [3, 4]  # the retry: stored once
            assert len((await store.read("lost-reply", raw=True)).entries) == 4
        finally:
            await store.aclose()


# -- a connection torn down under a command ------------------------------------------------------


def _raised_in(filename: str) -> BaseException:
    """An AttributeError raised by code that lives in ``filename`` (as redis-py's own would be)."""
    namespace: dict[str, Any] = {}
    exec(compile("def write(writer):\n    writer.writelines([b'x'])\n", filename, "exec"), namespace)
    try:
        namespace["write"](None)
    except AttributeError as exc:
        return exc
    raise AssertionError("no error raised")


@pytest.mark.parametrize("writes", [False, True])
async def test_a_connection_closed_under_a_command_is_a_typed_error(writes: bool) -> None:
    connection = RedisConnection(redis_url="redis://127.0.0.1:1/0")
    try:
        leaked = _raised_in("/venv/lib/python3.11/site-packages/redis/asyncio/connection.py")
        expected = OutcomeUnknownError if writes else StorageUnavailableError
        mapped = connection._mapped_errors(writes=writes)  # pyright: ignore[reportPrivateUsage]
        with pytest.raises(expected, match="closed under the command"), mapped:
            raise leaked
        ours = _raised_in("/work/src/agentkeep/message_stores/redis.py")
        mapped = connection._mapped_errors(writes=writes)  # pyright: ignore[reportPrivateUsage]
        with pytest.raises(AttributeError), mapped:  # agentkeep's own bug stays a bug
            raise ours
    finally:
        await connection.aclose()
