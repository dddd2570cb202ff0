"""Shared fixtures for the agentkeep test suite.

The local model's path and the ``llama_cpp.server`` serving it are session-wide, so every test
module that needs them (clients, CLI) shares one model file lookup and one server process. The CLI
tests (``test_cli*.py``) share the subprocess environment and their store URLs.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx

from agentkeep.clients.local import default_model_path
from tests.clients.servers import llama_server
from tests.message_stores.backend_postgres import URL as POSTGRES_URL
from tests.message_stores.backend_postgres import drop_schema, new_schema
from tests.message_stores.backend_redis import REDIS_URL, delete_prefix, unique_prefix
from tests.private_pgbouncer import PgBouncer, shared_pgbouncer, stop_shared_pgbouncer
from tests.private_redis import RedisServer

__all__ = [
    "env",
    "llama_server",
    "local_model_path",
    "no_blocking_calls_in_the_event_loop",
    "pgbouncer",
    "pgbouncer_session",
    "private_redis",
    "server_store",
    "store_url",
]


@pytest.fixture(autouse=True)
def no_blocking_calls_in_the_event_loop() -> Iterator[None]:
    """Fail any test in which agentkeep makes a blocking call (file, socket, sqlite3, sleep, a
    contended lock, ...) in a thread that runs an event loop (``blockbuster``).

    The conformance suite (``agentkeep.testing``) is not scanned itself: it calls the tests'
    backend openers, which make temporary folders and files; what it calls in agentkeep is. The
    SQLite layer's quick jobs may use the connection in the loop's thread (they never wait for a
    lock: see ``agentkeep._db.sqlite``). redis-py reads its version from the package metadata
    (files) when a client that a user's code made (seed 003's message store) opens a connection;
    agentkeep's own clients pass the version so it never does.
    """
    with blockbuster_ctx("agentkeep", excluded_modules=["agentkeep.testing"]) as guard:
        for name, function in guard.functions.items():
            if name.startswith("sqlite3."):  # quick jobs run on the caller's thread, by design
                function.can_block_in("agentkeep/_db/sqlite.py", "_run_quick")
            function.can_block_in("redis/utils.py", "get_lib_version")
        yield


@pytest.fixture(scope="session")
def local_model_path() -> Path:
    """The packaged SmolLM2-135M-Instruct ``.gguf`` file."""
    return default_model_path()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The CLI subprocess environment: a private data dir, no store from the caller's environment."""
    variables = {
        key: value for key, value in os.environ.items() if not key.startswith(("AGENTKEEP_", "OPENAI_"))
    }
    variables.update(XDG_DATA_HOME=str(tmp_path / "data"), PYTHONIOENCODING="utf-8", COLUMNS="160")
    return variables


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A CLI store URL on a SQLite file of the test's own."""
    return f"sqlite://{tmp_path / 'sessions.db'}"


@pytest.fixture
def server_store(request: pytest.FixtureRequest) -> Iterator[str]:
    """A CLI store URL on the real Redis or PostgreSQL server (``request.param``), with a namespace
    of its own."""
    if request.param == "redis":
        prefix = unique_prefix("cli")
        yield f"{REDIS_URL}?key_prefix={prefix}"
        asyncio.run(delete_prefix(prefix))
    else:
        schema = new_schema("akcli")
        yield f"{POSTGRES_URL}?schema={schema}"
        asyncio.run(drop_schema(schema))


# -- service markers --------------------------------------------------------------------------------
# Each test that needs a service is marked with it, so ``-m "not postgres and not redis ..."`` (the
# fast tier, ``make test-fast``) runs without any. A test needs a service when its id names the
# backend (a parameter ``postgres`` / ``redis``, a module about it) or when it uses a fixture or a
# module that starts or reaches it; the table below says which.
SERVICE_FIXTURES: dict[str, frozenset[str]] = {
    "redis": frozenset({"private_redis"}),
    "postgres": frozenset({"pgbouncer"}),
    "model": frozenset({"local_model_path", "local_client", "llama_server", "minilm"}),
}
SERVICE_NAMES: dict[str, frozenset[str]] = {
    # global names a test function uses that reach the service
    "postgres": frozenset({"POSTGRES_URL"}),
    "redis": frozenset({"REDIS_URL"}),
    "model": frozenset({"MiniLMEmbedder", "LocalChatClient", "default_model_path", "local_model_path"}),
}
SERVICE_MODULES: dict[str, frozenset[str]] = {
    "browser": frozenset(
        {"tests.host.test_inspector", "tests.host.test_inspector_memory", "tests.host.test_cross_site"}
    ),
    "node": frozenset({"tests.host.test_agui_js"}),
}


def service_markers(item: pytest.Item) -> set[str]:
    """The services ``item`` needs (see the table above)."""
    needs: set[str] = set()
    nodeid = item.nodeid.lower()
    for service in ("postgres", "redis"):
        if service in nodeid:
            needs.add(service)
    fixtures = set(getattr(item, "fixturenames", ()))
    needs.update(service for service, names in SERVICE_FIXTURES.items() if fixtures & names)
    code = getattr(getattr(item, "function", None), "__code__", None)
    used = set(code.co_names) if code is not None else set()
    needs.update(service for service, names in SERVICE_NAMES.items() if used & names)
    module = getattr(getattr(item, "module", None), "__name__", "")
    needs.update(service for service, names in SERVICE_MODULES.items() if module in names)
    return needs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for service in service_markers(item):
            item.add_marker(getattr(pytest.mark, service))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Close the two ``/dev/null`` files llama_cpp opens at import and never closes."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        handle = getattr(utils, name, None)
        if handle is not None and hasattr(handle, "close"):
            handle.close()


@pytest.fixture(scope="session", autouse=True)
def pgbouncer_session() -> Iterator[None]:
    """Stops the session's private pgbouncer (started on first use by the tests and backends that
    reach PostgreSQL through it) at the end of the session."""
    yield
    stop_shared_pgbouncer()


@pytest.fixture
def pgbouncer(pgbouncer_session: None) -> PgBouncer:
    """The session's private pgbouncer (transaction pooling, in front of the test server); the
    test is skipped if pgbouncer is not installed."""
    return shared_pgbouncer(POSTGRES_URL)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A started ``redis-server`` of the test's own, for tests that kill or pause it."""
    own = RedisServer(tmp_path)
    own.start()
    try:
        yield own
    finally:
        own.kill()
