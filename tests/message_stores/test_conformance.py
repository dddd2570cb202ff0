"""The shipped message-store conformance suite on every backend (see tests/message_stores/conftest.py).

Each check of :mod:`agentkeep.testing.conformance` (store-level, then under an agent with history
and recorded compaction) is a test of its own here, once per backend.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from agentkeep.testing.conformance import ConformanceCheck, MessageStoreBackend, message_store_checks
from tests.discovery import message_store_backend, run_check


@pytest.mark.parametrize("check", message_store_checks(), ids=str)
async def test_message_store_contract(
    check: ConformanceCheck[MessageStoreBackend], backend: ModuleType
) -> None:
    await run_check(check, message_store_backend(backend))
