"""Backends for the session-store tests: the shipped suite (``test_conformance.py``) and the
cross-process tests (``test_multiprocess.py``).

Each backend is a module ``tests/session_stores/backend_<name>.py`` that defines:

* ``NAME``: the backend's name (the test id);
* ``open_session_store()``: an async context manager giving a fresh, isolated
  :class:`~agentkeep.session_stores.AgentSessionStore` (its own folder, file, key prefix or schema, with no
  sessions in it), removed and closed afterwards;
* ``corrupt_session(store, agent, conversation_id)`` (optional, async or not): overwrite that stored
  session (already saved by the test) with data that does not decode;
* ``CROSS_PROCESS = True`` (optional, default ``False``) together with
  ``session_store_spec(store) -> dict`` (JSON-serializable) and ``session_store_from_spec(spec)``
  (builds, in another process, a store on the same data; the caller closes it with ``aclose()``).

The ``session_backend`` fixture runs every test that takes it once per module found; the shipped
suite (``test_conformance.py``) sees each module as :func:`tests.discovery.session_store_backend`
describes it.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.discovery import backend_modules

SESSION_BACKEND_MODULES: list[ModuleType] = backend_modules("tests.session_stores")


@pytest.fixture(params=SESSION_BACKEND_MODULES, ids=lambda module: module.NAME)
def session_backend(request: pytest.FixtureRequest) -> ModuleType:
    """A session-store backend module (see this file's docstring)."""
    return request.param
