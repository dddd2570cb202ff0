"""Code run in worker processes by the multi-process storage tests (importable under spawn)."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from agentkeep import Message


def append_turns(
    module_name: str, spec: dict[str, Any], conversation_id: str, worker: int, turns: int
) -> None:
    """Append ``turns`` two-message turns tagged with the worker and turn number."""
    backend = importlib.import_module(module_name)

    async def main() -> None:
        store = backend.store_from_spec(spec)
        try:
            for turn in range(turns):
                tag = f"w{worker}-t{turn}"
                await store.append(
                    conversation_id,
                    [Message("user", [f"{tag} question"]), Message("assistant", [f"{tag} answer"])],
                )
        finally:
            await store.aclose()

    asyncio.run(main())


def append_turns_through_outages(
    url: str, conversation_id: str, worker: int, turns: int, under_way: Any
) -> int:
    """Append ``turns`` turns with fixed message ids, retrying each one that fails (the server may
    be killed and restarted meanwhile) until it is stored; sets the ``under_way`` event after a
    quarter of them; returns how many attempts failed."""
    from agentkeep import StorageUnavailableError
    from agentkeep.message_stores.redis import RedisMessageStore

    async def main() -> int:
        store = RedisMessageStore.from_url(url, timeout=0.5)
        failures = 0
        try:
            for turn in range(turns):
                tag = f"w{worker}-t{turn}"
                for _ in range(400):  # bounded: at most ~20 s of outage per turn
                    batch = [
                        Message("user", [f"{tag} question"], message_id=f"{tag}-q"),
                        Message("assistant", [f"{tag} answer"], message_id=f"{tag}-a"),
                    ]
                    try:
                        await store.append(conversation_id, batch)
                        break
                    except StorageUnavailableError:
                        failures += 1
                        await asyncio.sleep(0.05)
                else:
                    raise RuntimeError(f"turn {tag} was never stored")
                if turn == turns // 4:
                    under_way.set()
        finally:
            await store.aclose()
        return failures

    return asyncio.run(main())
