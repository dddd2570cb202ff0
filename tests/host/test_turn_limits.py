"""A tenant runs at most ``max_turns_per_tenant`` turns at once per process: one more is refused
with 429 and ``Retry-After`` before anything runs, other tenants go on, and every admitted turn is
counted as ended when its request ends (streamed, failed, or abandoned by its client)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import openai
import pytest

from agentkeep import Agent, Message
from agentkeep.host import AgentHost
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn
from tests.host.conftest import ALICE, BOB, keys_of, run, user


class Gate:
    """A model that answers once the test opens the gate (the server runs in another thread)."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.waiting = 0

    async def __call__(self, messages: Sequence[Message]) -> str:
        self.waiting += 1
        try:
            if not await asyncio.to_thread(self.opened.wait, 20):
                raise AssertionError("the test never opened the gate")
        finally:
            self.waiting -= 1
        return "done"


class Limited:
    def __init__(self, folder: Path) -> None:
        self.gate = Gate()
        history = StorageHistoryProvider(SQLiteMessageStore(folder / "h.db"), "history", owns_store=True)
        agent = Agent(ScriptedChatClient(self.gate), name="chat", context_providers=[history])
        self.host = AgentHost(api_keys=keys_of(ALICE, BOB), max_turns_per_tenant=2)
        self.host.add_agent("chat", agent, session_store=SQLiteSessionStore(folder / "h.db"))
        self.server = ThreadedUvicorn(self.host.app, name="agentkeep host", lifespan="on")


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Limited]:
    served = Limited(tmp_path)
    served.server.start()
    try:
        yield served
    finally:
        served.server.stop()


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2000):  # 20 s at most
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached: {what}")


async def test_a_third_concurrent_turn_of_a_tenant_is_refused_and_others_go_on(limited: Limited) -> None:
    url, turns = limited.server.url, limited.host.tenant_turns
    running = [asyncio.create_task(run(url, f"t{k}", [user("hi")], key=ALICE[0])) for k in range(2)]
    await until(lambda: limited.gate.waiting == 2, "two turns waiting on the model")
    alice = {"Authorization": f"Bearer {ALICE[0]}"}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        body = {"threadId": "t3", "runId": "r", "messages": [user("hi")]}
        refused = await client.post("/agents/chat", json=body, headers=alice)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "rate_limited"
        chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        assert (await client.post("/v1/chat/completions", json=chat, headers=alice)).status_code == 429
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=ALICE[0], max_retries=0) as sdk:
        with pytest.raises(openai.RateLimitError):
            await sdk.responses.create(model="chat", input="hi")
    bobs = asyncio.create_task(run(url, "b", [user("hi")], key=BOB[0]))  # another tenant's turn runs
    await until(lambda: limited.gate.waiting == 3, "bob's turn waiting on the model")
    limited.gate.opened.set()
    for events in await asyncio.gather(*running, bobs):
        assert events[-1]["type"] == "RUN_FINISHED"
    await until(lambda: turns.running("alice") == 0 and turns.running("bob") == 0, "every turn counted out")


async def test_a_turn_whose_client_goes_away_is_counted_out(limited: Limited) -> None:
    url, turns = limited.server.url, limited.host.tenant_turns
    body = {"threadId": "gone", "runId": "r", "messages": [user("hi")]}
    alice = {"Authorization": f"Bearer {ALICE[0]}"}
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{url}/agents/chat", json=body, headers=alice) as response,
    ):
        async for line in response.aiter_lines():
            if "RUN_STARTED" in line:
                break  # hang up while the model waits
    await until(lambda: turns.running("alice") == 0, "the abandoned turn counted out")
    limited.gate.opened.set()
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=ALICE[0], max_retries=0) as sdk:
        streamed = await sdk.responses.create(model="chat", input="hi", stream=True)
        assert [event.type async for event in streamed][-1] == "response.completed"
        assert (await sdk.responses.create(model="chat", input="hi")).output_text == "done"
    # counted out once the server is done with the request (a moment after the client has it)
    await until(lambda: turns.running("alice") == 0, "the finished turns counted out")
