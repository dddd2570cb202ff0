"""The AG-UI endpoint of ``AgentHost`` over real HTTP: uvicorn on a loopback port, httpx as the
client reading the event stream; the sessions and history in a real SQLite file."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentkeep import Agent, Content, Message
from agentkeep.host import AgentHost, ApiKeys
from agentkeep.providers import StorageHistoryProvider
from agentkeep.storage.base import close_store
from agentkeep.storage.sqlite import SQLiteMessageStore
from agentkeep.stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn

ALICE, BOB = ApiKeys.generate("alice"), ApiKeys.generate("bob")


def keys_of(*pairs: tuple[str, str]) -> ApiKeys:
    return ApiKeys({line.split("sha256:")[1]: line.split()[0] for _, line in pairs})


def echo(messages: Sequence[Message]) -> str | Message:
    """The scripted model: repeats what it got, or calls the browser's tool when asked."""
    last = messages[-1]
    if last.role == "user" and last.text.startswith("weather"):
        return Message(
            "assistant",
            [
                Content.from_function_call(
                    f"call-{uuid.uuid4().hex[:8]}", "get_weather", arguments={"city": "Paris"}
                )
            ],
        )
    if last.role == "tool":
        return f"the tool said {last.contents[0].result}"  # type: ignore[attr-defined]
    users = [m.text for m in messages if m.role == "user"]
    return f"heard {len(users)}: " + " | ".join(users)


class Hosted:
    def __init__(self, folder: Path, *, api_keys: ApiKeys | None) -> None:
        self.path = folder / "host.db"
        self.history = StorageHistoryProvider(
            SQLiteMessageStore(self.path), "history", load_limit=50, owns_store=True
        )
        self.agent = Agent(ScriptedChatClient(echo), name="chat", context_providers=[self.history])
        self.host = AgentHost(api_keys=api_keys)
        self.host.add_agent("chat", self.agent, session_store=SQLiteSessionStore(self.path))
        self.server = ThreadedUvicorn(self.host.app, name="agentkeep host", lifespan="on")

    async def stored(self, conversation_id: str) -> list[Message]:
        store = SQLiteMessageStore(self.path)
        try:
            return (await store.read(conversation_id, raw=True)).messages
        finally:
            await close_store(store)


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[Hosted]:
    served = Hosted(tmp_path, api_keys=keys_of(ALICE, BOB))
    served.server.start()
    try:
        yield served
    finally:
        served.server.stop()


async def run(
    url: str,
    thread: str,
    messages: list[dict[str, Any]],
    *,
    key: str | None,
    tools: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": messages,
        "tools": tools or [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    headers = {"Accept": "text/event-stream"} | ({"Authorization": f"Bearer {key}"} if key else {})
    events: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{url}/agents/chat", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(msgspec.json.decode(line[6:]))
    return events


def conversation(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What an AG-UI client keeps of a run: the assistant messages (by id) and tool calls."""
    messages: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            messages[event["messageId"]] = {"id": event["messageId"], "role": "assistant", "content": ""}
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            messages[event["messageId"]]["content"] += event["delta"]
        elif event["type"] == "TOOL_CALL_START":
            parent = messages.setdefault(
                event["parentMessageId"], {"id": event["parentMessageId"], "role": "assistant"}
            )
            parent.setdefault("toolCalls", []).append(
                {
                    "id": event["toolCallId"],
                    "type": "function",
                    "function": {"name": event["toolCallName"], "arguments": ""},
                }
            )
        elif event["type"] == "TOOL_CALL_ARGS":
            for message in messages.values():
                for call in message.get("toolCalls", []):
                    if call["id"] == event["toolCallId"]:
                        call["function"]["arguments"] += event["delta"]
    return list(messages.values())


def shape(events: list[dict[str, Any]]) -> list[str]:
    """The event types, runs of one type (content deltas) shown once."""
    kinds = [e["type"] for e in events]
    return [kind for i, kind in enumerate(kinds) if i == 0 or kinds[i - 1] != kind]


def user(text: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "user", "content": text}


async def test_a_two_turn_conversation_resends_everything_and_stores_each_message_once(
    hosted: Hosted,
) -> None:
    first = [user("hello")]
    events = await run(hosted.server.url, "t-1", first, key=ALICE[0])
    assert shape(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert all(isinstance(e.get("timestamp"), int) for e in events)
    answer = conversation(events)
    assert answer[0]["content"] == "heard 1: hello"

    events = await run(hosted.server.url, "t-1", [*first, *answer, user("again")], key=ALICE[0])
    assert conversation(events)[0]["content"] == "heard 2: hello | again"  # turn 2 sees turn 1
    stored = await hosted.stored("alice::t-1")
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].message_id == answer[0]["id"]  # the id the client got is the stored one


async def test_a_browser_tool_call_ends_the_run_and_its_result_comes_next(hosted: Hosted) -> None:
    tools = [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    first = [user("weather in Paris?")]
    events = await run(hosted.server.url, "t-tool", first, key=ALICE[0], tools=tools)
    assert shape(events) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    [call_message] = conversation(events)
    call = call_message["toolCalls"][0]
    assert call["function"]["name"] == "get_weather"
    assert msgspec.json.decode(call["function"]["arguments"]) == {"city": "Paris"}
    result = {"id": uuid.uuid4().hex, "role": "tool", "toolCallId": call["id"], "content": "sunny"}
    events = await run(hosted.server.url, "t-tool", [*first, call_message, result], key=ALICE[0], tools=tools)
    assert conversation(events)[0]["content"] == "the tool said sunny"
    stored = await hosted.stored("alice::t-tool")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]


async def test_tenants_never_see_each_other(hosted: Hosted) -> None:
    await run(hosted.server.url, "shared", [user("alice's secret")], key=ALICE[0])
    events = await run(hosted.server.url, "shared", [user("what do you know?")], key=BOB[0])
    assert conversation(events)[0]["content"] == "heard 1: what do you know?"
    assert [m.text for m in await hosted.stored("alice::shared")] == [
        "alice's secret",
        "heard 1: alice's secret",
    ]
    assert [m.text for m in await hosted.stored("bob::shared")] == [
        "what do you know?",
        "heard 1: what do you know?",
    ]


async def test_requests_without_a_valid_key_or_with_bad_bodies_are_refused(hosted: Hosted) -> None:
    async with httpx.AsyncClient(timeout=30, base_url=hosted.server.url) as client:
        body = {"threadId": "t", "runId": "r", "messages": [user("x")]}
        assert (await client.post("/agents/chat", json=body)).status_code == 401
        wrong = await client.post("/agents/chat", json=body, headers={"Authorization": "Bearer ak_nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["type"] == "unauthorized"
        auth = {"Authorization": f"Bearer {ALICE[0]}"}
        assert (await client.post("/agents/other", json=body, headers=auth)).status_code == 404
        bad = await client.post("/agents/chat", content=b"{not json", headers=auth)
        assert bad.status_code == 422
        assert bad.json()["error"]["type"] == "invalid_request"
        typed = await client.post("/agents/chat", json={"threadId": 1, "messages": "no"}, headers=auth)
        assert typed.status_code == 422
        huge = await client.post("/agents/chat", content=b"x" * (2 << 20), headers=auth)
        assert huge.status_code == 413
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"ready": True, "agents": {"chat": "ok"}}
    assert await hosted.stored("alice::t") == []


async def test_concurrent_turns_on_one_thread_are_all_stored_once_each_contiguous(hosted: Hosted) -> None:
    async def one(i: int) -> list[dict[str, Any]]:
        return await run(hosted.server.url, "busy", [user(f"turn {i}")], key=ALICE[0])

    async with asyncio.timeout(60):
        results = await asyncio.gather(*(one(i) for i in range(16)))
    assert all(r[-1]["type"] == "RUN_FINISHED" for r in results)
    stored = await hosted.stored("alice::busy")
    assert len(stored) == 32
    for index in range(0, 32, 2):
        assert stored[index].role == "user"
        assert stored[index + 1].role == "assistant"
    assert len({m.text for m in stored[::2]}) == 16


async def test_a_host_without_keys_serves_the_local_tenant(tmp_path: Path) -> None:
    served = Hosted(tmp_path, api_keys=None)
    served.server.start()
    try:
        events = await run(served.server.url, "mine", [user("hi")], key=None)
        assert events[-1]["type"] == "RUN_FINISHED"
        assert [m.text for m in await served.stored("local::mine")] == ["hi", "heard 1: hi"]
    finally:
        served.server.stop()
