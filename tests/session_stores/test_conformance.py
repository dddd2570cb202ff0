"""The shipped session-store conformance suite on every store (see tests/session_stores/conftest.py).

Each check of :func:`agentkeep.testing.conformance.session_store_checks` is a test of its own
here, once per store; ``test_multiprocess.py`` adds the checks that need several processes.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from agentkeep.testing.conformance import ConformanceCheck, SessionStoreBackend, session_store_checks
from tests.discovery import run_check, session_store_backend


@pytest.mark.parametrize("check", session_store_checks(), ids=str)
async def test_session_store_contract(
    check: ConformanceCheck[SessionStoreBackend], session_backend: ModuleType
) -> None:
    await run_check(check, session_store_backend(session_backend))
