"""The shipped memory-store conformance suite on every memory store (``backend_*.py`` here)."""

from __future__ import annotations

from types import ModuleType

import pytest

from agentkeep.testing.conformance import MEMORY_STORE_CHECKS, ConformanceCheck, MemoryStoreBackend
from tests.discovery import backend_modules, run_check

BACKENDS = backend_modules("tests.memory")


@pytest.mark.parametrize("module", BACKENDS, ids=lambda m: m.NAME)
@pytest.mark.parametrize("check", MEMORY_STORE_CHECKS, ids=str)
async def test_memory_store_contract(check: ConformanceCheck[MemoryStoreBackend], module: ModuleType) -> None:
    backend = MemoryStoreBackend(
        module.NAME,
        module.open_store,
        reopen=getattr(module, "reopen", None),
        damage=getattr(module, "damage", None),
        damage_meta=getattr(module, "damage_meta", None),
    )
    await run_check(check, backend)
