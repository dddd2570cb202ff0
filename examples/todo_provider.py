"""A to-do list provider: injects the list as a message and adds tools that change it.

Mirrors seed 001 (history and context), the ``TodoListProvider`` example: on every run the
provider shows the model the current list (one injected message) and gives it two tools,
``add_todo`` and ``remove_todo``. The list lives in the session's state, so the tools' effects
persist with the session; the provider itself holds nothing per session.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentkeep import Agent, AgentSession, AIContext, ContextProvider, Message, SessionContext
from agentkeep.testing import ScriptedChatClient


class TodoListProvider(ContextProvider):
    """Keeps a to-do list in the session and lets the model read and edit it."""

    def __init__(self) -> None:
        super().__init__("todo")  # the default state: a dict under the key "todo"

    def items(self, session: AgentSession) -> list[str]:
        return self.get_state(session).setdefault("items", [])

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> AIContext:
        items: list[str] = state.setdefault("items", [])

        def add_todo(item: str) -> str:
            """Add an item to the user's to-do list.

            Args:
                item: What to do.
            """
            items.append(item)
            return f"added #{len(items) - 1}: {item}"

        def remove_todo(index: int) -> str:
            """Remove an item from the user's to-do list.

            Args:
                index: The item's number in the list.
            """
            return f"removed: {items.pop(index)}"

        listing = "\n".join(f"{i}. {item}" for i, item in enumerate(items)) or "(empty)"
        return AIContext(
            messages=[Message("user", f"Your current to-do list:\n{listing}")],
            tools=[add_todo, remove_todo],
        )


async def main() -> None:
    call = ScriptedChatClient.tool_call
    client = ScriptedChatClient(
        [
            call("add_todo", {"item": "buy milk"}),
            call("add_todo", {"item": "call grandma"}),
            "Added both to your list.",
            call("remove_todo", {"index": 0}),
            "Done, milk is off the list.",
            "You still have to call grandma.",
        ]
    )
    todo = TodoListProvider()
    agent = client.as_agent("You manage the user's to-do list.", name="Todo", context_providers=[todo])

    session = agent.create_session()
    for text in ("Remind me to buy milk and to call grandma.", "I bought the milk.", "What is left?"):
        response = await agent.run(text, session=session)
        calls = [f"{c.name}({c.arguments})" for m in response.messages for c in m.function_calls]
        print(f"user > {text}\n  tool calls: {', '.join(calls) or '-'}\nTodo > {response.text}")
        print(f"  list now: {todo.items(session)}")

    assert todo.items(session) == ["call grandma"]
    shown = [m.text for m in client.calls[-1] if m.text.startswith("Your current to-do list")]
    assert shown == ["Your current to-do list:\n0. call grandma"], "only this run's list is sent"

    payload = json.dumps(agent.serialize_session(session))
    restored = agent.deserialize_session(payload)
    print(f"after a JSON round trip ({len(payload)} chars): {todo.items(restored)}")
    assert todo.items(restored) == ["call grandma"]
    assert client.remaining == 0


if __name__ == "__main__":
    asyncio.run(main())
