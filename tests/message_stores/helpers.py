"""Helpers shared by the backend-specific storage tests (the conformance suite has its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentkeep import Message

__all__ = ["day", "turn", "turn_in_new_process"]


def turn(i: int) -> list[Message]:
    """Turn ``i``: ``question i`` then ``answer i``."""
    return [Message("user", [f"question {i}"]), Message("assistant", [f"answer {i}"])]


def day(number: int) -> datetime:
    """Midnight UTC, ``number`` days after 2026-01-01."""
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=number)


_REPO = Path(__file__).resolve().parents[2]

_RUN_ONE_TURN = """
import asyncio, json, sys
from agentkeep import Agent
from agentkeep.testing import ScriptedChatClient

async def main(text, *where):
    provider, sessions = open_stores(*where)
    client = ScriptedChatClient(lambda messages: "re: " + messages[-1].text)
    agent = Agent(client, name="assistant", context_providers=[provider])
    try:
        session = await sessions.get_session(agent, "conv-1")
        await agent.run(text, session=session)
        await sessions.save_session(agent, "conv-1", session)
        print(json.dumps({"sent": [m.text for m in client.calls[-1]], "session": len(session.to_json())}))
    finally:
        await provider.aclose()
        await sessions.aclose()

asyncio.run(main(*sys.argv[1:]))
"""


def turn_in_new_process(open_stores: str, text: str, *where: str) -> dict[str, Any]:
    """Run one agent turn with ``text`` on conversation ``conv-1`` in a fresh interpreter.

    ``open_stores`` is the source of a function ``open_stores(*where)`` returning the history
    provider and the session store (it is called inside the event loop). Returns what the model
    was sent (``sent``) and the saved session's JSON length (``session``).
    """
    done = subprocess.run(
        [sys.executable, "-c", open_stores + _RUN_ONE_TURN, text, *where],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=_REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
