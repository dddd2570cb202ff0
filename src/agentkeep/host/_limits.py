"""How long each phase of a connection to ``agentkeep serve`` or ``agentkeep inspect`` may last, and
how many connections may be open: :class:`ConnectionLimits` (the server that applies them is
:mod:`agentkeep.host._server`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Final

if sys.platform != "win32":  # Windows has no limit of open files to read or raise
    import resource

__all__ = ["ConnectionLimits", "default_max_connections", "raise_open_file_limit"]

MAX_CONNECTIONS_CEILING: Final = 10_000
"""The default cap however many files the process may open (each connection also costs memory)."""
RESERVED_FILES: Final = 256
"""Descriptors kept for what is not a client connection: stores, pools, the model, logs."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long each phase of a connection may last, and how many connections may be open."""

    header_timeout: float = 10.0
    """Seconds for a request's head to arrive whole: from the connection's start, or from the first
    byte of the next request on a kept-alive connection."""
    keep_alive_timeout: float = 5.0
    """Seconds a connection may stay idle after a response."""
    body_timeout: float = 30.0
    """Seconds between two bytes of a request body (while the application reads it)."""
    max_connections: int | None = None
    """Open connections at most (``None``: :func:`default_max_connections` of the process's limit)."""

    def __post_init__(self) -> None:
        for name in ("header_timeout", "keep_alive_timeout", "body_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")

    def resolved(self) -> ConnectionLimits:
        """These limits with ``max_connections`` chosen when it is ``None``."""
        if self.max_connections is not None:
            return self
        return replace(self, max_connections=default_max_connections(_open_file_limit()))


def default_max_connections(open_files: int | None) -> int:
    """The cap for a process that may open ``open_files`` descriptors (``None``: no limit): a
    quarter of them (at least :data:`RESERVED_FILES`, at most half) kept for the rest of the
    process, and :data:`MAX_CONNECTIONS_CEILING` at most."""
    if open_files is None:
        return MAX_CONNECTIONS_CEILING
    reserved = min(open_files // 2, max(RESERVED_FILES, open_files // 4))
    return max(1, min(MAX_CONNECTIONS_CEILING, open_files - reserved))


def _open_file_limit() -> int | None:
    """The soft limit of open files (``None``: none)."""
    if sys.platform == "win32":
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_open_file_limit() -> int | None:
    """Raise the soft limit of open files to the hard limit (a process may, unprivileged); the soft
    limit in force afterwards (``None``: none)."""
    if sys.platform == "win32":
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # a platform that refuses (macOS above OPEN_MAX): keep it
            return soft
    return _open_file_limit()
