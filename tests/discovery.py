"""Plug-in discovery for the conformance suites: every ``backend_<name>.py`` module of a package."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

__all__ = ["backend_modules"]


def backend_modules(package: str) -> list[ModuleType]:
    """The ``backend_*`` modules of ``package`` (e.g. ``"tests.storage"``), imported, sorted by name."""
    folders = importlib.import_module(package).__path__
    return [
        importlib.import_module(f"{package}.{info.name}")
        for info in sorted(pkgutil.iter_modules(folders), key=lambda i: i.name)
        if info.name.startswith("backend_")
    ]
