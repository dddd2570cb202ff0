"""Backends for the storage tests: the shipped conformance suite and the project's own tests.

Each backend is a module ``tests/message_stores/backend_<name>.py`` that defines:

* ``NAME``: the backend's name (``store.backend``);
* ``open_store(**options)``: an async context manager giving a fresh, isolated store (its own file,
  key prefix or schema) created with ``options`` (``max_messages``, ``ttl``), set up, and removed
  afterwards;
* ``spec_of(store) -> dict``: a picklable description from which ``store_from_spec(spec)`` builds,
  in another process, a store on the same data (for multi-process tests);
* ``corrupt(store, conversation_id, seq)``: overwrite that stored record with bytes that do not
  decode;
* ``mark_newer_version(store)``: make the stored data claim a newer format/schema version;
* ``stop_backend`` / ``restart_backend`` (optional, for fault tests of server backends).

The ``backend`` fixture runs every test that takes it once per module found; the shipped suite
(``test_conformance.py``) sees each module as :func:`tests.discovery.message_store_backend`
describes it.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.discovery import backend_modules

BACKEND_MODULES: list[ModuleType] = backend_modules("tests.message_stores")


@pytest.fixture(params=BACKEND_MODULES, ids=lambda module: module.NAME)
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """A backend module (see this file's docstring)."""
    return request.param
