"""Shared fixtures for the agentkeep test suite.

The local model's path and the ``llama_cpp.server`` serving it are session-wide, so every test
module that needs them (clients, CLI) shares one model file lookup and one server process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentkeep.clients.local import default_model_path
from tests.clients.servers import llama_server

__all__ = ["llama_server", "local_model_path"]


@pytest.fixture(scope="session")
def local_model_path() -> Path:
    """The packaged SmolLM2-135M-Instruct ``.gguf`` file."""
    return default_model_path()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Close the two ``/dev/null`` files llama_cpp opens at import and never closes."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        handle = getattr(utils, name, None)
        if handle is not None and hasattr(handle, "close"):
            handle.close()
