"""The OpenAI-compatible embeddings client against a real HTTP server: ``llama_cpp.server`` with
the offline model in embedding mode (one 576-dimension vector per token, which the client
averages into one vector per text)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.clients.openai import OpenAIEmbedder
from agentkeep.errors import ChatClientError, ModelUnavailableError
from agentkeep.memory import InMemoryMemoryStore, MemoryRecord, MemoryScope
from tests.clients.servers import (  # pyright: ignore[reportPrivateUsage]
    STARTUP_TIMEOUT,
    _answers,
    _log_tail,
    _stop_process,
    closed_port_url,
    free_port,
)

DIMENSIONS = 576  # SmolLM2-135M's hidden size


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory: pytest.TempPathFactory, local_model_path: Path) -> Iterator[str]:
    """``python -m llama_cpp.server --embedding true`` on a free port; its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("embedding_server") / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(local_model_path)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--embedding", "true", "--n_ctx", "512"]
    command += ["--n_threads", "1", "--n_threads_batch", "1"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=os.environ.copy()
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not _answers(f"{base_url}/models"):
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {process.returncode}:\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer in {STARTUP_TIMEOUT:g}s:\n{_log_tail(log)}")
            time.sleep(0.1)
        yield base_url
    finally:
        _stop_process(process)


async def test_vectors_come_back_in_order_batched_and_normalized(embedding_server: str) -> None:
    # One text per request: llama.cpp's server lets the texts of one request affect each other's
    # vectors (its context is not reset between them), which would hide the order this checks.
    embedder = OpenAIEmbedder("smollm2", dimensions=DIMENSIONS, base_url=embedding_server, batch_size=1)
    try:
        texts = ["The cat sat on the mat.", "A kitten rests on a rug.", "Interest rates rose today."]
        vectors = await embedder.embed(texts)  # three requests
        assert [len(v) for v in vectors] == [DIMENSIONS] * 3
        assert all(abs(sum(x * x for x in v) - 1.0) < 1e-4 for v in vectors)
        again = await embedder.embed([texts[2], texts[0]])
        same = sum(a * b for a, b in zip(again[1], vectors[0], strict=True))
        assert same > 0.9999  # the order is the texts' order
        assert sum(a * b for a, b in zip(again[0], vectors[0], strict=True)) < 0.99
        assert await embedder.embed([]) == []
        store = InMemoryMemoryStore(dimensions=DIMENSIONS)  # and they are what a store takes
        scope = MemoryScope("maren")
        for text, vector in zip(texts, vectors, strict=True):
            await store.add(scope, MemoryRecord(text, embedding=vector))
        (best,) = await store.search(scope, vectors[1], k=1)
        assert best.record.text == texts[1]
    finally:
        await embedder.aclose()


async def test_a_wrong_length_and_an_unreachable_server_are_typed_errors(embedding_server: str) -> None:
    wrong = OpenAIEmbedder("smollm2", dimensions=384, base_url=embedding_server)
    try:
        with pytest.raises(ChatClientError, match="576 dimensions, not 384"):
            await wrong.embed(["hello"])
    finally:
        await wrong.aclose()
    gone = OpenAIEmbedder("smollm2", dimensions=DIMENSIONS, base_url=closed_port_url(), max_retries=0)
    try:
        with pytest.raises(ModelUnavailableError, match="cannot reach"):
            await gone.embed(["hello"])
    finally:
        await gone.aclose()
