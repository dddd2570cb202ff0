"""The AG-UI conformance validator (``ag-ui-validate``, a dev dependency) on the host's streams:
live against the endpoint (its own plain request), and on a recorded run with a browser-tool call
and one with the tool's result. Each report: no errors, no warnings, no infos."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from tests.host.conftest import ALICE, Hosted, conversation, run, user

VALIDATOR = Path(sys.executable).with_name("ag-ui-validate")
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def validate(target: str, *arguments: str) -> dict[str, Any]:
    if not VALIDATOR.exists():
        pytest.fail("ag-ui-validate is not installed: run make test")
    done = subprocess.run(
        [str(VALIDATOR), target, "--json", *arguments],
        capture_output=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return msgspec.json.decode(done.stdout)


def clean(report: dict[str, Any]) -> None:
    assert report["summary"] == {"errors": 0, "warnings": 0, "info": 0}, report["diagnostics"]
    assert report["internalErrors"] == []
    assert report["eventCount"] >= 3


async def record(hosted: Hosted, path: Path, messages: list[dict[str, Any]]) -> None:
    """One run's response body, as it came over the wire."""
    body = {"threadId": "recorded", "runId": uuid.uuid4().hex, "messages": messages, "tools": [WEATHER]}
    headers = {"Authorization": f"Bearer {ALICE[0]}", "Accept": "text/event-stream"}
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{hosted.server.url}/agents/chat", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        recorded = b"".join([chunk async for chunk in response.aiter_raw()])
    await asyncio.to_thread(path.write_bytes, recorded)


def test_the_live_endpoint_is_clean(hosted: Hosted) -> None:
    report = validate(f"{hosted.server.url}/agents/chat", "--header", f"Authorization: Bearer {ALICE[0]}")
    clean(report)
    assert report["features"]["agentic-chat"] == "exercised"


async def test_runs_with_a_tool_call_and_its_result_are_clean(hosted: Hosted, tmp_path: Path) -> None:
    asked = [user("weather in Paris?")]
    await record(hosted, tmp_path / "call.sse", asked)
    call = validate(str(tmp_path / "call.sse"))
    clean(call)
    events = await run(hosted.server.url, "recorded-2", asked, key=ALICE[0], tools=[WEATHER])
    [message] = conversation(events)
    result = {
        "id": uuid.uuid4().hex,
        "role": "tool",
        "toolCallId": message["toolCalls"][0]["id"],
        "content": "sunny",
    }
    await record(hosted, tmp_path / "result.sse", [*asked, message, result])
    clean(validate(str(tmp_path / "result.sse")))
