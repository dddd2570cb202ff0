"""An audit history next to the main one, with a calendar provider that injects fresh context.

Mirrors two places in the seeds: seed 000 (storage), the tip "use an extra audit/evaluation
history provider (``load_messages=False, store_context_messages=True``) to capture enriched
context and inputs/outputs without affecting how the main history loads", and seed 001 (history
and context), the ``CalendarProvider`` built on ``MessageAIContextProvider`` that injects the
user's upcoming events on every run.

The main history stores only what the user and the agent said, so stale calendar snapshots never
pile up in it; the audit log records the injected calendar messages as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentkeep import (
    Agent,
    AgentSession,
    InMemoryHistoryProvider,
    Message,
    MessageAIContextProvider,
    SessionContext,
)
from agentkeep.testing import ScriptedChatClient


class CalendarProvider(MessageAIContextProvider):
    """Tells the model the user's upcoming events, fetched fresh on every run.

    It holds a way to reach the calendar (like a database client), never per-session data.
    """

    def __init__(self, load_events: Callable[[], Awaitable[Sequence[str]]]) -> None:
        super().__init__("calendar")
        self.load_events = load_events

    async def provide_messages(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> Sequence[Message]:
        events = await self.load_events()
        return [Message("user", "Your upcoming events:\n" + "\n".join(events))]


def answer(messages: Sequence[Message]) -> str:
    calendar = next(m for m in reversed(messages) if m.text.startswith("Your upcoming events"))
    events = calendar.text.splitlines()[1:]
    return f"You have {len(events)} event(s); the last one is {events[-1]}."


def injected(messages: Sequence[Message]) -> int:
    """How many calendar snapshots ``messages`` hold."""
    return sum(m.text.startswith("Your upcoming events") for m in messages)


def show(title: str, messages: Sequence[Message]) -> None:
    print(f"{title}: {len(messages)} messages")
    for message in messages:
        print(f"  {message.role:<9} {message.text.replace(chr(10), ' | ')}")


async def main() -> None:
    calendar = ["09:00 stand-up"]  # stands in for a calendar service

    async def load_events() -> list[str]:
        return list(calendar)

    client = ScriptedChatClient(answer)
    history = InMemoryHistoryProvider("memory")
    audit = InMemoryHistoryProvider("audit", load_messages=False, store_context_messages=True)
    agent = client.as_agent(
        "You are a helpful assistant.",
        name="Planner",
        context_providers=[history, CalendarProvider(load_events), audit],
    )

    session = agent.create_session()
    response = await agent.run("What is on my calendar?", session=session)
    print(f"user > What is on my calendar?\n{agent.name} > {response.text}")
    calendar.append("15:00 dentist")  # the calendar changes between runs
    response = await agent.run("And now?", session=session)
    print(f"user > And now?\n{agent.name} > {response.text}")

    main_log = await history.get_session_messages(session)
    audit_log = await audit.get_session_messages(session)
    show("main history (what the next run loads)", main_log)
    show("audit log (also the injected context)", audit_log)

    assert injected(main_log) == 0
    assert len(main_log) == 4
    assert injected(audit_log) == 2
    assert len(audit_log) == 6
    # The second request held only the fresh calendar snapshot, after the loaded history.
    second_request = client.calls[1]
    assert injected(second_request) == 1
    assert [m.role for m in second_request] == ["user", "assistant", "user", "user"]
    assert response.text == "You have 2 event(s); the last one is 15:00 dentist."


if __name__ == "__main__":
    asyncio.run(main())
