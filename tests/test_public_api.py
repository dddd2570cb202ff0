"""The public surface: every module declares a sorted ``__all__`` and the package re-exports it."""

from __future__ import annotations

import importlib
import pkgutil

import agentkeep


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(agentkeep.__path__, prefix="agentkeep.")
    if not name.rsplit(".", 1)[-1].startswith("_")
)


def test_every_module_declares_a_sorted_all() -> None:
    for name in MODULES:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} has no __all__"
        assert list(exported) == sorted(exported, key=_isort_key), f"{name}.__all__ is not sorted"
        for symbol in exported:
            assert hasattr(module, symbol), f"{name}.__all__ names missing {symbol}"


def test_package_reexports_the_public_classes() -> None:
    core = [
        "agentkeep.agent",
        "agentkeep.contents",
        "agentkeep.errors",
        "agentkeep.message_log",
        "agentkeep.messages",
        "agentkeep.providers",
        "agentkeep.sessions",
    ]
    for name in core:
        module = importlib.import_module(name)
        for symbol in module.__all__:
            if symbol[0].isupper():
                assert symbol in agentkeep.__all__, f"agentkeep does not re-export {name}.{symbol}"
                assert getattr(agentkeep, symbol) is getattr(module, symbol)
    assert list(agentkeep.__all__) == sorted(agentkeep.__all__, key=_isort_key)


def test_errors_share_one_root() -> None:
    from agentkeep import errors

    for symbol in errors.__all__:
        assert issubclass(getattr(errors, symbol), errors.AgentkeepError)


def test_the_version_is_the_installed_distributions() -> None:
    import importlib.metadata

    import agentkeep

    assert agentkeep.__version__ == importlib.metadata.version("agentkeep")
    namespace: dict[str, object] = {}
    exec("from agentkeep import *", namespace)
    assert namespace["__version__"] == agentkeep.__version__
