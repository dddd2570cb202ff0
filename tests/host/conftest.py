"""The host test fixtures: an ``AgentHost`` with a scripted model, its history and sessions in a
real SQLite file, served by uvicorn on a loopback port; and an AG-UI client over httpx that reads
the event stream as the protocol's clients do."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import pytest

from agentkeep import Agent, Content, Message
from agentkeep.errors import ModelUnavailableError
from agentkeep.host import AgentHost, ApiKeys
from agentkeep.message_stores.base import close_store
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn

if TYPE_CHECKING:
    from tests.host.memory_host import MemoryHost

__all__ = ["ALICE", "BOB", "Hosted", "conversation", "keys_of", "run", "shape", "user"]

ALICE, BOB = ApiKeys.generate("alice"), ApiKeys.generate("bob")


def keys_of(*pairs: tuple[str, str]) -> ApiKeys:
    return ApiKeys({line.split("sha256:")[1]: line.split()[0] for _, line in pairs})


def echo(messages: Sequence[Message]) -> str | Message:
    """The scripted model: repeats what it got, calls the browser's tool when asked, and fails
    (as a model server that went away) when told ``boom``."""
    last = messages[-1]
    if last.role == "user" and last.text == "boom":
        raise ModelUnavailableError("the model server went away")
    if last.role == "user" and last.text.startswith("weather"):
        return Message(
            "assistant",
            [
                Content.from_function_call(
                    f"call-{uuid.uuid4().hex[:8]}", "get_weather", arguments={"city": "Paris"}
                )
            ],
        )
    if last.role == "tool":
        return f"the tool said {last.contents[0].result}"  # type: ignore[attr-defined]
    users = [m.text for m in messages if m.role == "user"]
    return f"heard {len(users)}: " + " | ".join(users)


class Hosted:
    def __init__(self, folder: Path, *, api_keys: ApiKeys | None, **host_options: Any) -> None:
        self.path = folder / "host.db"
        self.history = StorageHistoryProvider(
            SQLiteMessageStore(self.path), "history", load_limit=50, owns_store=True
        )
        self.agent = Agent(ScriptedChatClient(echo), name="chat", context_providers=[self.history])
        self.host = AgentHost(api_keys=api_keys, **host_options)
        self.host.add_agent("chat", self.agent, session_store=SQLiteSessionStore(self.path))
        self.server = ThreadedUvicorn(self.host.app, name="agentkeep host", lifespan="on")

    async def conversations(self) -> list[str]:
        """Every conversation the host's history holds."""
        store = SQLiteMessageStore(self.path)
        try:
            return [info.conversation_id for info in await store.list_conversations()]
        finally:
            await close_store(store)

    async def stored(self, conversation_id: str) -> list[Message]:
        store = SQLiteMessageStore(self.path)
        try:
            return (await store.read(conversation_id, raw=True)).messages
        finally:
            await close_store(store)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[MemoryHost]:
    """A host whose agent keeps long-term memory (``tests.host.memory_host``), served."""
    from tests.host.memory_host import MemoryHost

    host = MemoryHost(tmp_path)
    host.server.start()
    try:
        yield host
    finally:
        host.server.stop()


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[Hosted]:
    served = Hosted(tmp_path, api_keys=keys_of(ALICE, BOB))
    served.server.start()
    try:
        yield served
    finally:
        served.server.stop()


async def run(
    url: str,
    thread: str,
    messages: list[dict[str, Any]],
    *,
    key: str | None,
    tools: list[dict[str, Any]] | None = None,
    as_user: str | None = None,
) -> list[dict[str, Any]]:
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": messages,
        "tools": tools or [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    headers = {"Accept": "text/event-stream"} | ({"Authorization": f"Bearer {key}"} if key else {})
    if as_user is not None:
        headers["X-Agentkeep-User"] = as_user
    events: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{url}/agents/chat", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(msgspec.json.decode(line[6:]))
    return events


def conversation(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What an AG-UI client keeps of a run: the assistant messages (by id) and tool calls."""
    messages: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            messages[event["messageId"]] = {"id": event["messageId"], "role": "assistant", "content": ""}
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            messages[event["messageId"]]["content"] += event["delta"]
        elif event["type"] == "TOOL_CALL_START":
            parent = messages.setdefault(
                event["parentMessageId"], {"id": event["parentMessageId"], "role": "assistant"}
            )
            parent.setdefault("toolCalls", []).append(
                {
                    "id": event["toolCallId"],
                    "type": "function",
                    "function": {"name": event["toolCallName"], "arguments": ""},
                }
            )
        elif event["type"] == "TOOL_CALL_ARGS":
            for message in messages.values():
                for call in message.get("toolCalls", []):
                    if call["id"] == event["toolCallId"]:
                        call["function"]["arguments"] += event["delta"]
    return list(messages.values())


def shape(events: list[dict[str, Any]]) -> list[str]:
    """The event types, runs of one type (content deltas) shown once."""
    kinds = [e["type"] for e in events]
    return [kind for i, kind in enumerate(kinds) if i == 0 or kinds[i - 1] != kind]


def user(text: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "user", "content": text}
