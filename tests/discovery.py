"""Backends for the tests: every ``backend_<name>.py`` module of a package, described for the
shipped conformance suites, and one way to run a check of them as a test."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any

import pytest

from agentkeep.testing.conformance import (
    ConformanceCheck,
    MessageStoreBackend,
    NotApplicable,
    SessionStoreBackend,
)

__all__ = ["backend_modules", "message_store_backend", "run_check", "session_store_backend"]


def backend_modules(package: str) -> list[ModuleType]:
    """The ``backend_*`` modules of ``package`` (e.g. ``"tests.message_stores"``), imported, sorted
    by name."""
    folders = importlib.import_module(package).__path__
    return [
        importlib.import_module(f"{package}.{info.name}")
        for info in sorted(pkgutil.iter_modules(folders), key=lambda i: i.name)
        if info.name.startswith("backend_")
    ]


def message_store_backend(module: ModuleType) -> MessageStoreBackend:
    """The description of a ``tests/message_stores/backend_*`` module for the message-store suite."""
    spec_of, from_spec = getattr(module, "spec_of", None), getattr(module, "store_from_spec", None)
    return MessageStoreBackend(
        getattr(module, "BACKEND", module.NAME),  # store.backend, when the test id says more
        module.open_store,
        corrupt=getattr(module, "corrupt", None),
        corrupt_summaries=getattr(module, "corrupt_summaries", None),
        mark_newer_version=getattr(module, "mark_newer_version", None),
        tamper=getattr(module, "tamper", None),
        reopen=None if spec_of is None or from_spec is None else lambda store: from_spec(spec_of(store)),
    )


def session_store_backend(module: ModuleType) -> SessionStoreBackend:
    """The description of a ``tests/session_stores/backend_*`` module for the session-store suite."""
    return SessionStoreBackend(
        module.NAME, module.open_session_store, corrupt_session=getattr(module, "corrupt_session", None)
    )


async def run_check(check: ConformanceCheck[Any], backend: Any) -> None:
    """Run ``check`` on ``backend`` as a test: a check that does not apply is a skip."""
    try:
        await check(backend)
    except NotApplicable as reason:
        pytest.skip(str(reason))
