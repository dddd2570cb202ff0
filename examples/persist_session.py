"""Persisting a session across restarts: serialize, store as JSON, restore, continue.

Mirrors seed 000 (storage), "Utrwalanie sesji przy ponownych uruchomieniach" ("save the whole
session object, not only the message text"): ``serialized = session.to_dict()``, store the payload,
then ``AgentSession.from_dict(serialized)``. It also shows ``agent.deserialize_session``, which
lets the agent's providers check their state in the payload, and that a restored session continues
the conversation where it stopped.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from agentkeep import AgentSession, InMemoryHistoryProvider, Message
from agentkeep.testing import ScriptedChatClient


def answer(messages: Sequence[Message]) -> str:
    """Answers "where were we?" with the first thing the user said in this conversation."""
    question = messages[-1].text
    if question.startswith("Where were we"):
        first = next(m for m in messages if m.role == "user")
        return f'You started with: "{first.text}"'
    return f"Noted ({len(messages)} messages so far)."


async def main() -> None:
    client = ScriptedChatClient(answer)
    history = InMemoryHistoryProvider("memory")
    agent = client.as_agent("You are a helpful assistant.", name="Assistant", context_providers=[history])

    session = agent.create_session()
    await agent.run("Tell me a joke about a pirate.", session=session)
    await agent.run("Make it shorter.", session=session)
    before = len(await history.get_session_messages(session))

    payload = session.to_dict()
    print(f"payload: version {payload['version']}, state keys {list(payload['state'])}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "session.json"
        path.write_text(json.dumps(payload, ensure_ascii=False, indent=2), encoding="utf-8")
        print(f"saved session {session.session_id[:8]}… to {path.name}: {path.stat().st_size} bytes")
        text = path.read_text(encoding="utf-8")

    # ... later, in another process: restore it (two equivalent ways) ...
    restored = AgentSession.from_dict(json.loads(text))
    checked = agent.deserialize_session(text)
    assert restored.session_id == checked.session_id == session.session_id
    restored_count = len(await history.get_session_messages(restored))
    print(f"messages: {before} before saving, {restored_count} after AgentSession.from_dict")
    assert restored_count == before == 4

    response = await agent.run("Where were we?", session=restored)
    print(f"user      > Where were we?\nassistant > {response.text}")
    assert response.text == 'You started with: "Tell me a joke about a pirate."'

    after = len(await history.get_session_messages(restored))
    print(f"restored session now holds {after} messages; the original still holds {before}")
    assert after == before + 2
    assert len(await history.get_session_messages(session)) == before
    assert len(await history.get_session_messages(checked)) == before


if __name__ == "__main__":
    asyncio.run(main())
