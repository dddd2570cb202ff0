"""A hosted run that fails stores nothing and ends with ``RUN_ERROR``: the model failing, the store
going away mid-request (a private ``redis-server``, killed and restarted), the run taking too long."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator, Sequence

import httpx
import pytest

from agentkeep import Agent, Message, ModelUnavailableError
from agentkeep.host import AgentHost
from agentkeep.message_stores.base import close_store
from agentkeep.message_stores.redis import RedisMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores.redis import RedisSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn
from tests.host.conftest import conversation, run, user
from tests.private_redis import RedisServer

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


class Model:
    """A scripted model that can be told to fail or to take its time."""

    def __init__(self) -> None:
        self.fail = False
        self.delay = 0.0

    async def __call__(self, messages: Sequence[Message]) -> str:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise ModelUnavailableError("the model server went away")
        return f"heard {sum(m.role == 'user' for m in messages)}"


@pytest.fixture
def redis_server(private_redis: RedisServer) -> RedisServer:
    return private_redis


class Served:
    def __init__(self, redis: RedisServer) -> None:
        self.redis = redis
        self.model = Model()
        history = StorageHistoryProvider(
            RedisMessageStore.from_url(redis.url, timeout=0.5), "history", load_limit=50, owns_store=True
        )
        agent = Agent(ScriptedChatClient(self.model), name="chat", context_providers=[history])
        self.host = AgentHost(run_timeout=2.0)
        self.host.add_agent("chat", agent, session_store=RedisSessionStore.from_url(redis.url, timeout=0.5))
        self.server = ThreadedUvicorn(self.host.app, name="agentkeep host", lifespan="on")

    async def stored(self, conversation_id: str) -> list[str]:
        store = RedisMessageStore.from_url(self.redis.url)
        try:
            return [m.text for m in (await store.read(conversation_id, raw=True)).messages]
        finally:
            await close_store(store)


@pytest.fixture
def served(redis_server: RedisServer) -> Iterator[Served]:
    host = Served(redis_server)
    host.server.start()
    try:
        yield host
    finally:
        host.server.stop()


def error_of(events: list[dict[str, object]]) -> dict[str, object]:
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_ERROR", events
    assert not any(e["type"] == "RUN_FINISHED" for e in events)
    return events[-1]


async def test_a_failing_model_stores_nothing(served: Served) -> None:
    first = [user("one")]
    answer = conversation(await run(served.server.url, "c", first, key=None))
    served.model.fail = True
    failed = error_of(await run(served.server.url, "c", [*first, *answer, user("two")], key=None))
    assert failed["code"] == "model_unavailable"
    assert await served.stored("local::c") == ["one", "heard 1"]
    served.model.fail = False
    again = await run(served.server.url, "c", [*first, *answer, user("two")], key=None)
    assert conversation(again)[0]["content"] == "heard 2"
    assert await served.stored("local::c") == ["one", "heard 1", "two", "heard 2"]


async def test_a_store_that_goes_away_is_reported_and_the_next_turn_after_restart_works(
    served: Served,
) -> None:
    first = [user("one")]
    answer = conversation(await run(served.server.url, "c", first, key=None))
    served.redis.kill()
    failed = error_of(await run(served.server.url, "c", [*first, *answer, user("two")], key=None))
    assert failed["code"] == "store_unavailable"
    served.redis.start()  # an empty server: the data went with the process (no persistence)
    again = await run(served.server.url, "c2", [user("fresh")], key=None)
    assert conversation(again)[0]["content"] == "heard 1"
    assert await served.stored("local::c2") == ["fresh", "heard 1"]


async def test_a_run_past_the_time_limit_is_stopped_and_stores_nothing(served: Served) -> None:
    served.model.delay = 5.0
    failed = error_of(await run(served.server.url, "slow", [user("take your time")], key=None))
    assert failed["code"] == "timeout"
    assert await served.stored("local::slow") == []


async def test_a_client_that_goes_away_mid_run_stores_nothing(served: Served) -> None:
    served.model.delay = 1.0
    body = {"threadId": "gone", "runId": "r-1", "messages": [user("wait for it")]}
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{served.server.url}/agents/chat", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if "RUN_STARTED" in line:
                break  # hang up while the model thinks
    await asyncio.sleep(1.5)  # the run would have finished by now
    assert await served.stored("local::gone") == []
    served.model.delay = 0.0
    events = await run(served.server.url, "gone", [user("again")], key=None)
    assert conversation(events)[0]["content"] == "heard 1"
    assert await served.stored("local::gone") == ["again", "heard 1"]


async def test_with_the_store_gone_the_sessions_api_and_the_inspector_answer_503(served: Served) -> None:
    await run(served.server.url, "c", [user("one")], key=None)
    served.redis.kill()
    async with httpx.AsyncClient(base_url=served.server.url, timeout=30) as client:
        for path in (
            "/api/agents/chat/sessions",
            "/api/agents/chat/sessions/c/messages",
            "/api/agents/chat/sessions/c/export",
            "/inspector/sessions?agent=chat",
            "/inspector/session?agent=chat&id=c",
        ):
            answer = await client.get(path)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.json()["error"]["type"] == "store_unavailable", path
            assert answer.headers["retry-after"] == "1"
        deleted = await client.delete("/api/agents/chat/sessions/c")
        assert deleted.status_code == 503
        ready = await client.get("/readyz")
        assert ready.status_code == 503
