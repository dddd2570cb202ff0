"""The storage contracts as runnable checks: run them against a backend of your own.

agentkeep's own backends (memory, SQLite, Redis, PostgreSQL, and every session store) pass these
suites; a third-party backend passes them too to be a drop-in. Describe the backend, then either
run everything at once::

    report = await check_message_store(MessageStoreBackend("mystore", open=open_my_store))
    report.raise_for_failures()

or make each check a test of its own (pytest shown; any runner works)::

    @pytest.mark.parametrize("check", message_store_checks(), ids=str)
    async def test_my_store(check):
        try:
            await check(MY_BACKEND)
        except NotApplicable as reason:  # a capability the store does not declare
            pytest.skip(str(reason))

What lives where: :mod:`.message_store` (:class:`MessageStoreBackend` and the store-level
checks), :mod:`.history_provider` (the same backend under an agent with history and recorded
compaction), :mod:`.session_store` (:class:`SessionStoreBackend` and its checks), :mod:`.memory_store`
(:class:`MemoryStoreBackend` and the long-term memory checks). Checks need no
pytest: they raise :class:`ConformanceFailure` (an ``AssertionError``) with what was expected and
what came back, or :class:`NotApplicable`.
"""

from __future__ import annotations

from ._checks import (
    CheckOutcome,
    ConformanceCheck,
    ConformanceFailure,
    ConformanceReport,
    NotApplicable,
    run_checks,
)
from .history_provider import HISTORY_PROVIDER_CHECKS, CountingStore
from .memory_store import MEMORY_STORE_CHECKS, MemoryStoreBackend
from .message_store import MESSAGE_STORE_CHECKS, MessageStoreBackend
from .session_store import ODD_CONVERSATION_IDS, SESSION_STORE_CHECKS, SessionStoreBackend

__all__ = [
    "MEMORY_STORE_CHECKS",
    "ODD_CONVERSATION_IDS",
    "CheckOutcome",
    "ConformanceCheck",
    "ConformanceFailure",
    "ConformanceReport",
    "CountingStore",
    "MemoryStoreBackend",
    "MessageStoreBackend",
    "NotApplicable",
    "SessionStoreBackend",
    "check_message_store",
    "check_session_store",
    "message_store_checks",
    "run_checks",
    "session_store_checks",
]


def message_store_checks() -> list[ConformanceCheck[MessageStoreBackend]]:
    """Every check of the message-store contract: the store-level ones, then those under an agent."""
    return [*MESSAGE_STORE_CHECKS, *HISTORY_PROVIDER_CHECKS]


def session_store_checks() -> list[ConformanceCheck[SessionStoreBackend]]:
    """Every check of the session-store contract."""
    return list(SESSION_STORE_CHECKS)


async def check_message_store(
    backend: MessageStoreBackend, *, check_timeout: float = 60.0
) -> ConformanceReport:
    """Run :func:`message_store_checks` against ``backend`` (each within ``check_timeout`` seconds)."""
    return await run_checks(message_store_checks(), backend, check_timeout=check_timeout)


async def check_session_store(
    backend: SessionStoreBackend, *, check_timeout: float = 60.0
) -> ConformanceReport:
    """Run :func:`session_store_checks` against ``backend`` (each within ``check_timeout`` seconds)."""
    return await run_checks(session_store_checks(), backend, check_timeout=check_timeout)
