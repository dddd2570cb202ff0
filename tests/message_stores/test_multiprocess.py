"""Several processes on one conversation: nothing lost, nothing duplicated, turns contiguous."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from types import ModuleType

import pytest

from .workers import append_turns

WORKERS = 8
TURNS = 50


async def test_eight_processes_fifty_turns_each(backend: ModuleType) -> None:
    if not getattr(backend, "CROSS_PROCESS", True):
        pytest.skip(f"{backend.NAME} lives in one process")
    async with backend.open_store() as store:
        spec = backend.spec_of(store)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=WORKERS, mp_context=context) as pool:
            futures = [
                pool.submit(append_turns, backend.__name__, spec, "shared", worker, TURNS)
                for worker in range(WORKERS)
            ]
            for future in futures:
                future.result(timeout=300)
        entries = (await store.read("shared", raw=True)).entries
        texts = [entry.message.text for entry in entries]
        assert len(texts) == WORKERS * TURNS * 2
        assert len({entry.message.message_id for entry in entries}) == len(entries)
        assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
        for question, answer in zip(texts[::2], texts[1::2], strict=True):
            tag = question.removesuffix(" question")
            assert answer == f"{tag} answer"  # each turn stays contiguous
        expected = {f"w{w}-t{t} question" for w in range(WORKERS) for t in range(TURNS)}
        assert set(texts[::2]) == expected
        for worker in range(WORKERS):  # each worker's turns in its own order
            own = [t for t in texts[::2] if t.startswith(f"w{worker}-")]
            assert own == [f"w{worker}-t{t} question" for t in range(TURNS)]
