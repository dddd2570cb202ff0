"""What the host's endpoints share about HTTP: the typed error body, which clients are loopback,
what ended a failed run (as a protocol error code and an HTTP status), and the access log."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import re
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any, Final, Literal, TypeVar, cast

import pydantic
from fastapi.responses import JSONResponse
from starlette.datastructures import URL
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
from ..tools import FunctionTool
from ._turns import TurnConflictError

M = TypeVar("M", bound=pydantic.BaseModel)

__all__ = [
    "MAX_CONVERSATION_ID",
    "STATUS_OF",
    "AccessLog",
    "HTTPProblem",
    "conversation_id_problem",
    "declared_tools",
    "error_response",
    "is_loopback",
    "parsed",
    "requested_host",
    "run_error",
    "spanned",
]

access_log = logging.getLogger("agentkeep.host.access")

_LOOPBACK_NAMES: Final = frozenset({"localhost"})

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
    """A request refused with ``status``, answered as :func:`error_response`."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        details: Any = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status, self.kind, self.message, self.details = status, kind, message, details
        self.param, self.headers = param, headers
        super().__init__(message)

    def response(self) -> JSONResponse:
        extra = {} if self.details is None else {"details": self.details}
        return error_response(
            self.status, self.kind, self.message, param=self.param, headers=self.headers, **extra
        )


def error_response(
    status: int,
    kind: str,
    message: str,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """The host's error answer: ``{"error": {"type", "code", "message", "param"}}`` (``code`` is
    ``type``, as OpenAI's SDKs read it; ``param`` the request field at fault, or ``null``)."""
    body = {"type": kind, "code": kind, "message": message, "param": param, **extra}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def parsed(model: type[M], raw: bytes, *, what: str, status: int = 400) -> M:
    """``raw`` as ``model``.

    Raises:
        HTTPProblem: It is not one (``status``, with pydantic's error list as details).
    """
    try:
        return model.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        details = exc.errors(include_url=False, include_input=False)
        raise HTTPProblem(status, "invalid_request", f"not {what}", details=details) from exc


def declared_tools(
    specs: Iterable[Mapping[str, Any]], *, shape: Literal["flat", "typed", "nested"], status: int = 400
) -> list[FunctionTool]:
    """The caller-run tools a request declares (the model may call them, the caller runs them),
    from its tool list in one of the three shapes the protocols use: ``flat`` (``name``,
    ``description``, ``parameters``: AG-UI), ``typed`` (the same with ``"type": "function"``:
    the Responses API) or ``nested`` (``{"type": "function", "function": {...}}``: Chat Completions).

    Raises:
        HTTPProblem: ``status`` for a tool of another type or shape, or an invalid name or
            parameters.
    """
    declared: list[FunctionTool] = []
    for tool in specs:
        spec: Mapping[str, Any] = tool
        if shape != "flat" and tool.get("type") != "function":
            raise HTTPProblem(
                status, "invalid_request", f"tools of type {tool.get('type')!r} are not supported"
            )
        if shape == "nested":
            nested = tool.get("function")
            if not isinstance(nested, Mapping):
                raise HTTPProblem(
                    status, "invalid_request", "tools are {'type': 'function', 'function': {...}}"
                )
            spec = cast("Mapping[str, Any]", nested)
        try:
            declared.append(
                FunctionTool.declaration(
                    str(spec.get("name", "")),
                    description=str(spec.get("description") or ""),
                    parameters=spec.get("parameters"),
                )
            )
        except ToolError as exc:
            raise HTTPProblem(status, "invalid_request", str(exc)) from exc
    return declared


MAX_CONVERSATION_ID: Final = 256
"""The longest conversation id a client may name (characters)."""

_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: one scan in C per turn


def conversation_id_problem(value: str) -> str | None:
    """Why a conversation id a client names cannot be used (``None``: it can).

    Every id a turn may store must be one the sessions API can address in a URL path and a log
    line can show as one line: 1 to :data:`MAX_CONVERSATION_ID` characters of valid Unicode text,
    with no ``/`` or ``\\`` (path separators: ``/`` cannot travel in a path segment even
    percent-encoded) and no control characters.
    """
    if not value:
        return "a conversation id is not empty"
    if len(value) > MAX_CONVERSATION_ID:
        return f"a conversation id is at most {MAX_CONVERSATION_ID} characters"
    if "/" in value or "\\" in value:
        return "a conversation id holds no '/' or '\\'"
    if _CONTROL.search(value):
        return "a conversation id holds no control characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "a conversation id is valid Unicode text"
    return None


def requested_host(scope: Scope) -> str | None:
    """The host name a request is sent to, as starlette's ``request.url.hostname`` reads it (its
    first valid ``Host`` header, else the server's own address), worked out once per header and
    server instead of building each request's URL."""
    host = None
    for name, value in scope["headers"]:
        if name == b"host":
            host = value
            break
    server = scope.get("server")
    return _hostname(scope.get("scheme", "http"), host, None if server is None else tuple(server))


@functools.lru_cache(maxsize=256)  # a client sends the same header every time
def _hostname(scheme: str, host: bytes | None, server: tuple[str, int] | None) -> str | None:
    headers = [] if host is None else [(b"host", host)]
    return URL(
        scope={"type": "http", "scheme": scheme, "path": "/", "headers": headers, "server": server}
    ).hostname


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a client address or a host name) is this machine's loopback."""
    return host is not None and _is_loopback(host)


@functools.lru_cache(maxsize=256)
def _is_loopback(host: str) -> bool:  # asked twice per request: parsing the address costs more
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


class AccessLog:
    """ASGI middleware: one span (``agentkeep.host.request``) and one access-log line per request,
    covering the whole response, a streamed one included (a plain ASGI wrapper: no extra task or
    buffering between the app and the server)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        state = scope.setdefault("state", {})
        method, path = scope["method"], scope["path"]
        with telemetry.span(
            "agentkeep.host.request", **{"http.request.method": method, "url.path": path}
        ) as span:
            state["span"] = span
            try:
                await self.app(scope, receive, sending)
            finally:
                tenant = state.get("tenant", "-")
                span.set(**{"http.response.status_code": status, "agentkeep.tenant": tenant})
                access_log.info(
                    "%s %s %d %.1fms tenant=%s",
                    method,
                    path,
                    status,
                    (time.perf_counter() - start) * 1000,
                    tenant,
                )
