"""What the host's endpoints share about HTTP: the typed error body, which clients are loopback,
and what ended a failed run, as a protocol error code and an HTTP status."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import AsyncGenerator
from typing import Any, Final

from fastapi.responses import JSONResponse

from .. import telemetry
from ..errors import (
    AgentkeepError,
    ChatClientError,
    IsolationError,
    MessageFormatError,
    ModelUnavailableError,
    StorageUnavailableError,
    ToolError,
)
from ._turns import TurnConflictError

__all__ = ["STATUS_OF", "HTTPProblem", "error_response", "is_loopback", "run_error", "spanned"]

_LOOPBACK_NAMES: Final = frozenset({"localhost", "testclient"})

STATUS_OF: Final = {
    "timeout": 504,
    "conflict": 409,
    "not_found": 404,
    "store_unavailable": 503,
    "model_unavailable": 503,
    "model_error": 502,
    "invalid_request": 400,
    "error": 500,
    "internal_error": 500,
}
"""The HTTP status of each :func:`run_error` code (for the endpoints that answer in JSON)."""


class HTTPProblem(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        self.status, self.kind, self.message = status, kind, message
        super().__init__(message)


def error_response(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message, **extra}}, status_code=status)


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_error(exc: BaseException) -> tuple[str, str]:
    """The ``RUN_ERROR`` code and message for what ended a run."""
    if isinstance(exc, TimeoutError):
        return "timeout", "the run took longer than the host allows"
    if isinstance(exc, TurnConflictError):
        return "conflict", str(exc)
    if isinstance(exc, IsolationError):
        return "not_found", "no such conversation"
    if isinstance(exc, StorageUnavailableError):
        return "store_unavailable", str(exc)
    if isinstance(exc, ModelUnavailableError):
        return "model_unavailable", str(exc)
    if isinstance(exc, ChatClientError):
        return "model_error", str(exc)
    if isinstance(exc, MessageFormatError | ToolError):
        return "invalid_request", str(exc)
    if isinstance(exc, AgentkeepError):
        return "error", str(exc)
    return "internal_error", "the host failed; see its log"


@contextlib.asynccontextmanager
async def spanned(span: telemetry.Span) -> AsyncGenerator[None]:
    """``span`` current for the block (which may yield: one task runs it) and ended after it."""
    try:
        with span.current():
            yield
    finally:
        span.end()
