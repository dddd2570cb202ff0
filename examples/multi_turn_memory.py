"""Multi-turn memory with in-memory chat history.

Mirrors seed 000 (storage), "Magazyn historii czatów w pamięci": an agent with an explicit
``InMemoryHistoryProvider("memory", load_messages=True)`` is told "Remember that I like Italian
food." and later asked "What kind of food do I like?". The history lives in the session's state,
so a second session knows nothing.

The scripted model answers only from the messages it receives, so the recall is real: the second
answer is found by searching the request for what the user said in the first turn.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from agentkeep import InMemoryHistoryProvider, Message
from agentkeep.testing import ScriptedChatClient

LIKES = re.compile(r"I like (\w+) food")


def answer(messages: Sequence[Message]) -> str:
    """A tiny "model": acknowledges a request to remember, or recalls it from the conversation."""
    question = messages[-1].text
    if question.startswith("Remember"):
        return "Got it, I'll remember that."
    for message in messages:
        if message.role == "user" and (match := LIKES.search(message.text)):
            return f"You like {match.group(1)} food."
    return "I don't know what food you like yet."


async def main() -> None:
    client = ScriptedChatClient(answer)
    history = InMemoryHistoryProvider("memory", load_messages=True)
    agent = client.as_agent(
        name="StorageAgent",
        instructions="You are a helpful assistant.",
        context_providers=[history],
    )

    session = agent.create_session()
    for text in ("Remember that I like Italian food.", "What kind of food do I like?"):
        response = await agent.run(text, session=session)
        print(f"user      > {text}")
        print(f"assistant > {response.text}   (model saw {len(client.calls[-1])} messages)")

    assert response.text == "You like Italian food."
    assert len(client.calls[-1]) == 3, "history (2 messages) + the new question"

    stored = await history.get_session_messages(session)
    print(f"stored under state key {history.source_id!r}: {len(stored)} messages")
    for message in stored:
        print(f"  {message.role:<9} {message.text}")
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert "memory" in session.state

    other = agent.create_session()
    fresh = await agent.run("What kind of food do I like?", session=other)
    print(f"a new session answers: {fresh.text}")
    assert fresh.text == "I don't know what food you like yet."


if __name__ == "__main__":
    asyncio.run(main())
