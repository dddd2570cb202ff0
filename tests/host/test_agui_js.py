"""The official AG-UI JavaScript client (``@ag-ui/client``'s ``HttpAgent``, installed by ``make
test`` into tests/host/js/node_modules) against the host over real HTTP: two turns where the
second sees the first, and a browser-tool call answered in the next run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.host.conftest import ALICE, Hosted

JS = Path(__file__).parent / "js"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node")


def run_client(hosted: Hosted, prefix: str) -> dict[str, Any]:
    if not (JS / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client is not installed: run make test (npm ci --prefix tests/host/js)")
    done = subprocess.run(
        ["node", str(JS / "client.mjs"), f"{hosted.server.url}/agents/chat", ALICE[0], prefix],
        capture_output=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    parts = [msgspec.json.decode(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {part["part"]: part for part in parts}


async def test_the_official_client_holds_a_conversation_and_a_tool_round_trip(hosted: Hosted) -> None:
    parts = run_client(hosted, "js")
    chat = parts["chat"]["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "user", "assistant"]
    assert chat[3]["content"] == "heard 2: hello | again"  # turn 2 saw turn 1
    assert parts["chat"]["events"].count("RUN_FINISHED") == 2
    stored = await hosted.stored("alice::js-chat")
    assert [m.message_id for m in stored] == [m["id"] for m in chat]  # each stored once, same ids

    tool = parts["tool"]["messages"]
    assert [m["role"] for m in tool] == ["user", "assistant", "tool", "assistant"]
    assert tool[1]["toolCalls"][0]["function"]["name"] == "get_weather"
    assert tool[3]["content"] == "the tool said sunny"
    assert [m.role for m in await hosted.stored("alice::js-tool")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
