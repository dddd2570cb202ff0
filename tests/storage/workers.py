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
