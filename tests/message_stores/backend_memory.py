"""The in-memory backend for the conformance suite (no cross-process or corruption tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentkeep.message_stores import InMemoryMessageStore, MessageStore

NAME = "memory"
CROSS_PROCESS = False


@asynccontextmanager
async def open_store(**options: Any) -> AsyncIterator[MessageStore]:
    store = InMemoryMessageStore(**options)
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()
