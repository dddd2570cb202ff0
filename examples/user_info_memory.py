"""User-profile memory: a context provider that extracts facts and injects them as instructions.

Mirrors seed 004 (memory via context providers), the ``UserInfoMemory`` example: after each run,
while the user's name or age is unknown and the request had user messages, the provider asks a
model for structured output (``response_format=UserInfo``); before each run it tells the agent what
it knows, or to ask for what is missing. The seed's three turns are replayed.

Unlike the seed's Python version, the memory lives in the session's state (through a typed
``ProviderSessionState[UserInfo]``), not on the provider: one provider serves every session, and
the memory is saved and restored with the session.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from agentkeep import (
    Agent,
    AgentSession,
    AIContext,
    ChatClient,
    ChatClientError,
    ContextProvider,
    Message,
    ProviderSessionState,
    SessionContext,
)
from agentkeep.testing import ScriptedChatClient


@dataclass
class UserInfo:
    name: str | None = None
    age: int | None = None


class UserInfoMemory(ContextProvider):
    """Remembers the user's name and age, per session."""

    def __init__(self, client: ChatClient) -> None:
        super().__init__("user_info")
        self._client = client  # a dependency, like a database client: fine to keep on the provider
        self.session_state = ProviderSessionState[UserInfo](lambda _: UserInfo(), "UserInfoMemory")

    def user_info(self, session: AgentSession) -> UserInfo:
        return self.session_state.get_or_initialize_state(session)

    async def after_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: UserInfo
    ) -> None:
        """Extract the user's name and age from the request, while either is unknown."""
        request = context.request_messages
        if (state.name is None or state.age is None) and any(m.role == "user" for m in request):
            try:
                result = await self._client.get_response(
                    request,
                    options={
                        "instructions": "Extract the user's name and age from the message if present. "
                        "If not present return nulls.",
                        "response_format": UserInfo,
                    },
                )
            except ChatClientError:
                return  # extraction failed: try again after the next run
            if isinstance(result.value, UserInfo):
                state.name = state.name or result.value.name
                state.age = state.age if state.age is not None else result.value.age
                self.session_state.save_state(session, state)

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: UserInfo
    ) -> AIContext:
        """Tell the agent what it knows about the user, or to ask for what is missing."""
        return AIContext(
            instructions=[
                "Ask the user for their name and politely decline to answer any questions until they "
                "provide it."
                if state.name is None
                else f"The user's name is {state.name}.",
                "Ask the user for their age and politely decline to answer any questions until they "
                "provide it."
                if state.age is None
                else f"The user's age is {state.age}.",
            ]
        )


def extract(messages: Sequence[Message]) -> str:
    """The extraction "model": finds a name and an age in the user's words, answers with JSON."""
    said = " ".join(m.text for m in messages if m.role == "user")
    name = re.search(r"[Mm]y name is (\w+)", said)
    age = re.search(r"(\d+) years old", said)
    return json.dumps({"name": name and name.group(1), "age": age and int(age.group(1))})


async def main() -> None:
    chat = ScriptedChatClient(
        [
            "I'd be glad to help! First, may I have your name?",
            "Nice to meet you, Ruaidhrí! And how old are you?",
            "Thank you, Ruaidhrí. The square root of 9 is 3.",
            "Of course, Ruaidhrí: you are 20.",
        ]
    )
    extractor = ScriptedChatClient(extract)
    memory = UserInfoMemory(extractor)
    agent = chat.as_agent(
        "You are a friendly assistant. Always address the user by their name.", context_providers=[memory]
    )

    session = agent.create_session()
    for text in ("Hello, what is the square root of 9?", "My name is Ruaidhrí", "I am 20 years old"):
        response = await agent.run(text, session=session)
        sent = chat.call_options[-1].get("instructions", "").splitlines()[1:]
        print(f"user      > {text}\n  instructions: {' / '.join(sent)}\nassistant > {response.text}")

    info = memory.user_info(session)
    print(f"\nMEMORY - User Name: {info.name}\nMEMORY - User Age: {info.age}")
    assert info == UserInfo(name="Ruaidhrí", age=20)
    assert "Ask the user for their name" in chat.call_options[0].get("instructions", "")
    assert "The user's name is Ruaidhrí." in chat.call_options[2].get("instructions", "")
    assert len(extractor.calls) == 3

    # The memory is part of the session: it survives serialization.
    payload = json.dumps(agent.serialize_session(session), ensure_ascii=False)
    restored = agent.deserialize_session(payload)
    print(f"serialized session: {len(payload)} chars, state keys {restored.state.keys()}")
    assert memory.user_info(restored) == info

    response = await agent.run("Do you remember how old I am?", session=restored)
    instructions = chat.call_options[-1].get("instructions", "")
    print(f"after restore > {response.text}\n  instructions: {' / '.join(instructions.splitlines()[1:])}")
    assert "The user's name is Ruaidhrí." in instructions
    assert "The user's age is 20." in instructions
    assert len(extractor.calls) == 3, "nothing left to extract"


if __name__ == "__main__":
    asyncio.run(main())
