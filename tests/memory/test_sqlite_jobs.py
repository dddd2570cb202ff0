"""The SQLite memory store on the shared job worker (agentkeep._db.jobs): a caller that gives up
never has its write committed behind its back, and a lock held too long is a typed error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import apsw
import pytest

from agentkeep.errors import StorageUnavailableError
from agentkeep.memory import MemoryRecord, MemoryScope
from agentkeep.memory.sqlite import SQLiteMemoryStore

SCOPE = MemoryScope(tenant_id="t", user_id="ana")


def fact(text: str, seed: int) -> MemoryRecord:
    values = [0.0] * 8
    values[seed % 8] = 1.0
    return MemoryRecord(text, embedding=values, kind="fact")


async def _held(path: Path) -> apsw.Connection:
    """Another connection to ``path`` holding the write lock."""
    holder = apsw.Connection(str(path))
    await asyncio.to_thread(holder.execute, "BEGIN IMMEDIATE")
    return holder


async def test_an_add_cancelled_while_it_waits_for_the_lock_never_commits(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, dimensions=8, timeout=10)
    try:
        await store.add(SCOPE, fact("kept", 1))
        holder = await _held(path)
        pending = asyncio.create_task(store.add(SCOPE, fact("waits for the lock", 2)))
        queued = asyncio.create_task(store.add(SCOPE, fact("waits for the worker", 3)))
        await asyncio.sleep(0)  # both are handed to the worker
        pending.cancel()
        queued.cancel()
        for _ in range(5):  # the tasks see their cancellation (and tell their jobs) first: a job
            await asyncio.sleep(0)  # that commits before its caller's cancellation lands may return
        await asyncio.to_thread(holder.execute, "ROLLBACK")
        async with asyncio.timeout(30):
            for task in (pending, queued):
                with pytest.raises(asyncio.CancelledError):
                    await task
        assert [m.text for m in await store.list_memories(SCOPE)] == ["kept"]
        await store.add(SCOPE, fact("after", 4))  # the store works on
        assert [m.text for m in await store.list_memories(SCOPE)] == ["after", "kept"]
        holder.close()
    finally:
        await store.aclose()


async def test_a_lock_held_beyond_the_timeout_is_unavailable_and_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, dimensions=8, timeout=0.2)
    try:
        await store.add(SCOPE, fact("kept", 1))
        holder = await _held(path)
        async with asyncio.timeout(30):  # a hang guard: the busy timeout fires first
            with pytest.raises(StorageUnavailableError, match="locked") as caught:
                await store.add(SCOPE, fact("refused", 2))
        assert caught.value.address == str(path)
        await asyncio.to_thread(holder.execute, "ROLLBACK")
        holder.close()
        assert [m.text for m in await store.list_memories(SCOPE)] == ["kept"]
    finally:
        await store.aclose()
