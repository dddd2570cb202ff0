"""The AG-UI endpoint of ``AgentHost`` over real HTTP: uvicorn on a loopback port, httpx as the
client reading the event stream; the sessions and history in a real SQLite file."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec

from agentkeep import Agent
from agentkeep.clients.openai import OpenAIChatClient
from agentkeep.host import AgentHost
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from tests.clients.servers import ThreadedUvicorn, closed_port_url
from tests.host.conftest import ALICE, BOB, Hosted, conversation, run, shape, user


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
        "TEXT_MESSAGE_START",  # the answer, empty but under its id
        "TEXT_MESSAGE_END",
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
        as_json = auth | {"Content-Type": "application/json"}
        bad = await client.post("/agents/chat", content=b"{not json", headers=as_json)
        assert bad.status_code == 422
        assert bad.json()["error"]["type"] == "invalid_request"
        typed = await client.post("/agents/chat", json={"threadId": 1, "messages": "no"}, headers=auth)
        assert typed.status_code == 422
        huge = await client.post("/agents/chat", content=b"x" * (2 << 20), headers=as_json)
        assert huge.status_code == 413
        other_method = await client.get("/agents/chat", headers=auth)
        assert (other_method.status_code, other_method.json()["error"]["type"]) == (405, "method_not_allowed")
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


async def test_a_new_message_of_the_wrong_form_ends_the_run_and_stores_nothing(hosted: Hosted) -> None:
    events = await run(hosted.server.url, "bad", [{"id": "m-1", "role": "user", "content": 5}], key=ALICE[0])
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "invalid_request"
    assert await hosted.stored("alice::bad") == []


async def test_the_host_mounted_under_a_prefix_of_another_app_serves_the_same_turns(tmp_path: Path) -> None:
    from fastapi import FastAPI

    from tests.clients.servers import ThreadedUvicorn
    from tests.host.conftest import keys_of

    hosted = Hosted(tmp_path, api_keys=keys_of(ALICE))
    outer = FastAPI()
    outer.mount("/assistant", hosted.host.app)
    server = ThreadedUvicorn(outer, name="an app with the host mounted", lifespan="on")
    server.start()
    try:
        events = await run(f"{server.url}/assistant", "mounted", [user("hi")], key=ALICE[0])
        assert conversation(events)[0]["content"] == "heard 1: hi"
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert (await client.post("/agents/chat", json={})).status_code == 404  # not outside the prefix
    finally:
        server.stop()
        hosted.server.stop()  # never started: its socket is released
        await hosted.host.aclose()
    assert [m.text for m in await hosted.stored("alice::mounted")] == ["hi", "heard 1: hi"]


async def test_readyz_says_not_ready_while_the_model_server_does_not_answer(tmp_path: Path) -> None:
    model = OpenAIChatClient("m", base_url=closed_port_url(), max_retries=0)
    host = AgentHost()
    host.add_agent("chat", Agent(model, name="chat"), session_store=SQLiteSessionStore(tmp_path / "s.db"))
    server = ThreadedUvicorn(host.app, name="agentkeep host", lifespan="on")
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["agents"]["chat"].startswith("ModelUnavailableError")
    finally:
        server.stop()
        await model.aclose()


WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def same_answer(replay: list[dict[str, Any]], original: list[dict[str, Any]]) -> bool:
    """Whether ``replay`` tells the client what ``original`` told it: the same events (text
    deltas may be cut otherwise) and the same messages, under the same ids."""
    return shape(replay) == shape(original) and conversation(replay) == conversation(original)


async def test_a_turn_sent_again_is_answered_from_what_is_stored_and_runs_nothing(hosted: Hosted) -> None:
    """A client that did not see RUN_FINISHED sends the same turn again: it gets the stored
    answer's events again (same ids, same text), the model does not run, nothing is stored twice."""
    url, key = hosted.server.url, ALICE[0]
    first = [user("hello")]
    original = await run(url, "retry", first, key=key)
    again = await run(url, "retry", first, key=key)
    assert same_answer(again, original)
    answer = conversation(again)
    assert [m.text for m in await hosted.stored("alice::retry")] == ["hello", "heard 1: hello"]

    # the conversation goes on, and a retry of the second turn replays the second answer only
    second = [*first, *answer, user("and then?")]
    later = await run(url, "retry", second, key=key)
    assert conversation(later)[0]["content"] == "heard 2: hello | and then?"
    replayed = await run(url, "retry", second, key=key)
    assert conversation(replayed) == conversation(later)
    # a stale client resending the first turn gets the first answer, not the newest
    assert conversation(await run(url, "retry", first, key=key)) == answer
    texts = [m.text for m in await hosted.stored("alice::retry")]
    assert texts == ["hello", "heard 1: hello", "and then?", "heard 2: hello | and then?"]

    # a browser tool call: the retry replays the call, and its result then goes on as usual
    asked = [user("weather in Paris?")]
    call_events = await run(url, "retry-tool", asked, key=key, tools=[WEATHER_TOOL])
    replay = await run(url, "retry-tool", asked, key=key, tools=[WEATHER_TOOL])
    assert same_answer(replay, call_events)
    [call_message] = conversation(replay)
    result = {
        "id": uuid.uuid4().hex,
        "role": "tool",
        "toolCallId": call_message["toolCalls"][0]["id"],
        "content": "sunny",
    }
    done = await run(url, "retry-tool", [*asked, call_message, result], key=key, tools=[WEATHER_TOOL])
    assert conversation(done)[0]["content"] == "the tool said sunny"
    assert [m.role for m in await hosted.stored("alice::retry-tool")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_events_are_encoded_as_the_ag_ui_encoder_encodes_them() -> None:
    from ag_ui.core import (
        RunAgentInput,
        RunErrorEvent,
        RunFinishedEvent,
        RunStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )
    from ag_ui.encoder import EventEncoder

    from agentkeep.host._agui import encode_event

    run_input = RunAgentInput(
        thread_id="t", run_id="r", messages=[], tools=[], context=[], state={}, forwarded_props={}
    )
    events = [
        RunStartedEvent(thread_id="t", run_id="r", timestamp=5),
        RunStartedEvent(thread_id="t", run_id="r", input=run_input),  # a nested model
        TextMessageStartEvent(message_id="m", role="assistant", timestamp=1),
        TextMessageContentEvent(message_id="m", delta='a\x00\x1f\x7f\n\u2028é😀"\\</', timestamp=2),
        TextMessageEndEvent(message_id="m", timestamp=3),
        ToolCallStartEvent(tool_call_id="c", tool_call_name="f", parent_message_id="m", timestamp=4),
        ToolCallStartEvent(tool_call_id="c", tool_call_name="f"),
        ToolCallArgsEvent(tool_call_id="c", delta='{"a": 1}', timestamp=1),
        ToolCallEndEvent(tool_call_id="c", timestamp=1),
        ToolCallResultEvent(message_id="m", tool_call_id="c", content="sunny", role="tool", timestamp=1),
        RunFinishedEvent(thread_id="t", run_id="r", timestamp=1),
        RunFinishedEvent(thread_id="t", run_id="r", result={"a": [1, None]}),
        RunErrorEvent(message="boom", code="timeout", timestamp=1),
    ]
    for event in events:
        assert encode_event(event) == EventEncoder().encode(event)
