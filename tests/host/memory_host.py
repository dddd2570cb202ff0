"""A host whose agent keeps long-term memory (semantic recall with a hashing embedder, in the host's
SQLite file), served by uvicorn: for the memory tests of the host and of the inspector."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import httpx

from agentkeep import Agent, Message
from agentkeep.host import AgentHost
from agentkeep.memory import SemanticMemoryProvider
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.testing import HashingEmbedder, ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn
from tests.host.conftest import ALICE, BOB, keys_of

__all__ = ["MEMORY_HEADER", "MemoryHost", "recalling"]

MEMORY_HEADER = "Memories from earlier conversations"


def recalling(messages: Sequence[Message]) -> str:
    """The scripted model: says which memories it was given (or none)."""
    for message in messages:
        if message.role == "system" and message.text.startswith(MEMORY_HEADER):
            return "recalled: " + " / ".join(
                line.split("] ", 1)[-1].split(" (")[0] for line in message.text.splitlines()[1:]
            )
    return "recalled nothing"


class MemoryHost:
    def __init__(self, folder: Path, *, searchable: bool = True) -> None:
        self.path = path = folder / "host.db"
        self.memories = SQLiteMemoryStore(path, dimensions=64)
        self.embedder = HashingEmbedder(64)
        history = StorageHistoryProvider(SQLiteMessageStore(path), "history", load_limit=50, owns_store=True)
        recall = SemanticMemoryProvider(self.memories, self.embedder, min_score=0.3)
        agent = Agent(ScriptedChatClient(recalling), name="chat", context_providers=[history, recall])
        self.host = AgentHost(
            api_keys=keys_of(ALICE, BOB),
            memory_store=self.memories,
            memory_embedder=self.embedder if searchable else None,
        )
        self.host.add_agent("chat", agent, session_store=SQLiteSessionStore(path))
        self.host.on_shutdown.append(history.aclose)
        self.server = ThreadedUvicorn(self.host.app, name="agentkeep host", lifespan="on")
        self.url = self.server.url

    async def stored(self, conversation_id: str) -> list[Message]:
        """The raw history of a stored conversation (``alice::t``)."""
        store = SQLiteMessageStore(self.path)
        try:
            return (await store.read(conversation_id, raw=True)).messages
        finally:
            await store.aclose()

    def client(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
