"""Two agents sharing one session (and so one conversation history).

Mirrors seed 001 (history and context), the opening section: ``agentA`` answers "what is the
weather in Amsterdam?", then ``agentB`` is asked "say it again" on the same session. A session
belongs to no agent; both agents' default in-memory history providers read and write the same
state in it, so agent B's request contains agent A's turn. Both runs stream, as in the seed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agentkeep import Agent, AgentSession, Message
from agentkeep.testing import ScriptedChatClient


def weather(messages: Sequence[Message]) -> str:
    return "In Amsterdam it is 14°C and cloudy, with a light breeze."


def repeat(messages: Sequence[Message]) -> str:
    """Repeats the last assistant answer it can find in the request."""
    for message in reversed(messages):
        if message.role == "assistant":
            return f"Again, as {message.author_name} said: {message.text}"
    return "There is nothing to repeat."


async def stream(agent: Agent, text: str, session: AgentSession) -> str:
    print(f"user > {text}")
    print(f"{agent.name} > ", end="")
    run = agent.run(text, session=session, stream=True)
    async for update in run:
        print(update.text, end="", flush=True)
    print()
    return (await run.get_final_response()).text


async def main() -> None:
    client_a = ScriptedChatClient(weather)
    client_b = ScriptedChatClient(repeat)
    agent_a = client_a.as_agent("You report the weather.", name="WeatherAgent")
    agent_b = client_b.as_agent("You repeat things on request.", name="EchoAgent")

    session = agent_a.create_session()
    first = await stream(agent_a, "What is the weather like in Amsterdam?", session)
    second = await stream(agent_b, "Say it again?", session)

    seen_by_b = client_b.calls[0]
    print(f"{agent_b.name}'s request held {len(seen_by_b)} messages:")
    for message in seen_by_b:
        print(f"  {message.role:<9} {message.author_name or '-':<12} {message.text}")
    assert [m.role for m in seen_by_b] == ["user", "assistant", "user"]
    assert seen_by_b[1].author_name == "WeatherAgent"
    assert first in second

    print(f"session state keys: {session.state.keys()}")
    assert len(session.state.keys()) == 1, "both agents wrote to one history"


if __name__ == "__main__":
    asyncio.run(main())
