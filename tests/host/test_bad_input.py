"""Bad input gets a typed 4xx and changes nothing: bodies nested past any parser's depth, thread
ids the sessions API could not address, empty ids; the host keeps serving the same connection."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.host.conftest import ALICE, Hosted, run, user

JSON = {"Content-Type": "application/json", "Authorization": f"Bearer {ALICE[0]}"}


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/agents/chat", b'{"threadId": "t", "runId": "r", "messages": ' + nested(100_000) + b"}"),
        (
            "/agents/chat",
            b'{"threadId": "t", "runId": "r", "messages": [], "state": ' + nested(100_000) + b"}",
        ),
        ("/v1/responses", b'{"model": "chat", "input": ' + nested(100_000) + b"}"),
        ("/v1/chat/completions", b'{"model": "chat", "messages": ' + nested(100_000) + b"}"),
        ("/v1/conversations", b'{"items": ' + nested(100_000) + b"}"),
        ("/api/agents/chat/sessions/t/compaction/preview", b'{"strategies": ' + nested(100_000) + b"}"),
    ],
)
async def test_a_body_nested_100000_deep_is_a_4xx_and_the_connection_goes_on(
    hosted: Hosted, path: str, body: bytes
) -> None:
    async with httpx.AsyncClient(base_url=hosted.server.url, timeout=30, headers=JSON) as client:
        answer = await client.post(path, content=body)
        assert 400 <= answer.status_code < 500, answer.text
        assert answer.json()["error"]["type"] == "invalid_request"
        assert (await client.get("/healthz")).status_code == 200  # on the same keep-alive connection
    assert await hosted.conversations() == []


def turn_body(thread: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": "r", "messages": [user("hi")]}


@pytest.mark.parametrize(
    "thread", ["", "a/b", "../../etc/passwd", "back\\slash", "line\nbreak", "nul\x00", "x" * 257]
)
async def test_a_thread_id_the_sessions_api_could_not_address_is_refused_at_the_door(
    hosted: Hosted, thread: str
) -> None:
    async with httpx.AsyncClient(base_url=hosted.server.url, timeout=30, headers=JSON) as client:
        answer = await client.post("/agents/chat", content=json.dumps(turn_body(thread)))
    assert answer.status_code == 422
    assert (answer.json()["error"]["type"], answer.json()["error"]["param"]) == (
        "invalid_request",
        "threadId",
    )
    assert await hosted.conversations() == []


@pytest.mark.parametrize("thread", ["ünïcødé thread", "a:b::c", "with space", "x" * 256, "q?x=1#frag", "%2F"])
async def test_every_thread_id_a_turn_accepts_is_reachable_through_the_sessions_api(
    hosted: Hosted, thread: str
) -> None:
    await run(hosted.server.url, thread, [user("hello")], key=ALICE[0])
    path = "/api/agents/chat/sessions/" + quote(thread, safe="")
    async with httpx.AsyncClient(base_url=hosted.server.url, timeout=30, headers=JSON) as client:
        listed = (await client.get("/api/agents/chat/sessions")).json()["sessions"]
        assert [row["id"] for row in listed] == [thread]
        messages = await client.get(f"{path}/messages")
        assert messages.status_code == 200, messages.text
        assert [m["text"] for m in messages.json()["messages"]][:1] == ["hello"]
        assert (await client.delete(path)).status_code == 204
    assert await hosted.conversations() == []
