"""Stand-ins for the cloud clients the seeds' examples construct (Azure OpenAI, Azure AI Agent,
Azure credentials), so the examples run offline with only their import lines changed.

The clients are :class:`~agentkeep.ScriptedChatClient` subclasses taking the cloud client's
constructor arguments: the chat client answers with a fixed joke; the agent client answers a
structured-output request (seed 004's extraction call) by reading the user's name and age from
the messages, and any other request by saying which user facts its instructions carry. Every
client made is recorded in :data:`MADE`, so a test can look at the calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agentkeep import ChatOptions, Message
from agentkeep.clients import ScriptedChatClient

MADE: list[ScriptedChatClient] = []

_NAME = re.compile(r"\bmy name is (\w+)", re.IGNORECASE)
_AGE = re.compile(r"\bI am (\d+) years old", re.IGNORECASE)
_FACTS = re.compile(r"The user's (?:name|age) is [^.]+\.")


class AzureCliCredential:
    """A credential that is used as is or as an async context manager, and grants nothing."""

    def __init__(self, **_: Any) -> None:
        pass

    async def __aenter__(self) -> AzureCliCredential:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None


class AzureOpenAIChatClient(ScriptedChatClient):
    """Seed 003's chat client: tells a pirate joke (and, asked again, another)."""

    def __init__(self, **_: Any) -> None:
        super().__init__(_joke)
        MADE.append(self)


class AzureAIAgentClient(ScriptedChatClient):
    """Seed 004's client: extracts user facts when asked for structured output, else answers."""

    def __init__(self, **_: Any) -> None:
        super().__init__(_assistant)
        MADE.append(self)


def _joke(messages: Sequence[Message]) -> str:
    asked = sum(1 for m in messages if m.role == "user")
    return "Why did the pirate go to school? To improve his arrr-ticulation." + (
        f" (joke {asked})" if asked > 1 else ""
    )


def _assistant(messages: Sequence[Message], options: ChatOptions) -> str:
    users = " ".join(m.text for m in messages if m.role == "user")
    if options.get("response_format") is not None:
        name = _NAME.search(users)
        age = _AGE.search(users)
        return json.dumps({"name": name and name.group(1), "age": age and int(age.group(1))})
    facts = _FACTS.findall(options.get("instructions", ""))
    return " ".join(facts) if facts else "I have no facts about you."
