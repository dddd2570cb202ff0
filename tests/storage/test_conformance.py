"""The shipped message-store conformance suite on every backend (see tests/storage/conftest.py).

Each check of :mod:`agentkeep.testing.conformance` (store-level, then under an agent with history
and recorded compaction) is a test of its own here, once per backend.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from agentkeep.testing.conformance import (
    ConformanceCheck,
    MessageStoreBackend,
    NotApplicable,
    message_store_checks,
)


@pytest.mark.parametrize("check", message_store_checks(), ids=str)
async def test_message_store_contract(
    check: ConformanceCheck[MessageStoreBackend], backend: ModuleType
) -> None:
    try:
        await check(backend.BACKEND)
    except NotApplicable as reason:
        pytest.skip(str(reason))
