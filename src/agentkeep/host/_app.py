"""``AgentHost``: agents by name, each with its session store, behind one ASGI app."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..clients.selection import SupportsReadyCheck
from ..errors import StorageUnavailableError
from ..session_stores import AgentSessionStore, NoopSessionStore
from ._agui_endpoint import AGUIRoute, agui_openapi
from ._auth import LOCAL_TENANT, ApiKeys
from ._chat_completions import install_chat_completions
from ._http import AccessLog, HTTPProblem, error_response, is_loopback, requested_host
from ._memory import install_memory_api
from ._request_policy import TURN_SLOT, RequestPolicy
from ._responses import install_responses
from ._sessions_api import install_sessions_api
from ._turns import ConversationLocks, SessionCache, TenantTurns
from .inspector import install_inspector

if TYPE_CHECKING:
    from ..agent import Agent
    from ..memory import Embedder, MemoryStore

__all__ = ["AgentHost", "HostedAgent"]

log = logging.getLogger("agentkeep.host")


@dataclass(slots=True)
class HostedAgent:
    """An agent served by a host, with the store its sessions live in."""

    name: str
    agent: Agent
    session_store: AgentSessionStore
    _stateless: Agent | None = None

    @property
    def stateless(self) -> Agent:
        """The agent without its context providers, for requests that keep nothing (their
        providers keep per-session data, and such a request has no session)."""
        if self._stateless is None or self._stateless.client is not self.agent.client:
            bare = copy.copy(self.agent)
            bare.context_providers = ()
            bare.default_history_provider = None
            self._stateless = bare
        return self._stateless


async def _refused(_: Request, exc: Exception) -> JSONResponse:
    """A route's :class:`HTTPProblem`, answered in the host's error shape (the AG-UI endpoint,
    in front of the router, answers its own)."""
    assert isinstance(exc, HTTPProblem)
    return exc.response()


async def _invalid_parameters(_: Request, exc: Exception) -> JSONResponse:
    """A query or path parameter of the wrong type, answered in the host's error shape."""
    errors: Any = exc.errors() if isinstance(exc, RequestValidationError) else []
    details = [{k: v for k, v in error.items() if k in ("type", "loc", "msg")} for error in errors]
    param = next((str(error["loc"][-1]) for error in errors if error.get("loc")), None)
    return error_response(422, "invalid_request", "invalid parameters", param=param, details=details)


_KIND_OF_STATUS: dict[int, str] = {404: "not_found", 405: "method_not_allowed"}


async def _no_route(_: Request, exc: Exception) -> JSONResponse:
    """The router's own refusals (no such path, another method), in the host's error shape."""
    assert isinstance(exc, StarletteHTTPException)
    kind = _KIND_OF_STATUS.get(exc.status_code, "invalid_request" if exc.status_code < 500 else "error")
    message = str(exc.detail)
    if exc.status_code == 404 and message == "Not Found":
        message = "no such endpoint"
    elif exc.status_code == 405 and message == "Method Not Allowed":
        message = "this endpoint takes another method"
    return error_response(exc.status_code, kind, message, headers=exc.headers)


async def _store_unavailable(_: Request, exc: Exception) -> JSONResponse:
    """A store that cannot be reached, for every endpoint that reads one: 503, retry later."""
    log.warning("a store is unavailable: %s", exc)
    return error_response(503, "store_unavailable", str(exc), headers={"Retry-After": "1"})


async def _failed(_: Request, exc: Exception) -> JSONResponse:
    """Anything else that went wrong, answered as 500 in the host's error shape (the server logs
    it: Starlette raises it on after answering)."""
    return error_response(500, "internal_error", "the host failed; see its log")


class AgentHost:
    """Agents served over HTTP: AG-UI at ``POST /agents/{name}``, the OpenAI Responses API at
    ``/v1/responses`` (``model`` = the agent's name) with the Conversations subset, the stateless
    ``/v1/chat/completions``, the sessions and memory APIs under ``/api/``, ``/healthz`` and
    ``/readyz``.

    Args:
        api_keys: The keys requests authenticate with (``Authorization: Bearer``), each mapped to
            its tenant. Without keys every request is the tenant ``"local"`` and only loopback
            clients are served.
        max_body_bytes: The largest request body accepted (413 beyond).
        max_messages: The most messages one request may carry (413 beyond).
        run_timeout: Seconds a run may take before it is stopped (``RUN_ERROR`` ``timeout``);
            nothing of it is stored.
        save_attempts: How often a session save that meets another writer's version is merged
            and tried again before the turn reports a conflict.
        warm_sessions: How many conversations' session objects (and their providers' caches,
            such as the loaded history) are kept between turns.
        memory_store: The long-term memory the agents' memory providers keep, shown by the memory
            API and the inspector (closed with the host). Which user a turn's memories belong
            to is what the request names (``X-Agentkeep-User``; see ``docs/host.md``).
        memory_embedder: What the memory API and the inspector search memories with (``None``:
            listing only).
        max_turns_per_tenant: How many turns (AG-UI runs, responses, chat completions) one tenant
            may run at once in this process; beyond it a request is refused with 429 and
            ``Retry-After`` (``None``: no bound).
        api_docs: Serve the OpenAPI document and its pages (``/openapi.json``, ``/docs``,
            ``/redoc``); ``None``: only on a host without API keys (a keyed host shows nothing
            to a caller without a key).

    Example:
        ```python
        host = AgentHost()
        host.add_agent("chat", agent, session_store=InMemorySessionStore())
        # uvicorn.run(host.app, host="127.0.0.1", port=8000)
        ```
    """

    local_tenant: str = LOCAL_TENANT
    """The tenant of every request when the host has no API keys."""

    def __init__(
        self,
        *,
        api_keys: ApiKeys | None = None,
        max_body_bytes: int = 1 << 20,
        max_messages: int = 10_000,
        run_timeout: float = 300.0,
        save_attempts: int = 3,
        warm_sessions: int = 1024,
        memory_store: MemoryStore | None = None,
        memory_embedder: Embedder | None = None,
        api_docs: bool | None = None,
        max_turns_per_tenant: int | None = 256,
    ) -> None:
        self.api_keys = api_keys
        self.tenant_turns = TenantTurns(max_turns_per_tenant)
        self.api_docs = api_keys is None if api_docs is None else api_docs
        self.max_body_bytes = max_body_bytes
        self.max_messages = max_messages
        self.run_timeout = run_timeout
        self.save_attempts = save_attempts
        self.agents: dict[str, HostedAgent] = {}
        self.locks = ConversationLocks()
        self.sessions = SessionCache(warm_sessions)
        self.memory_store = memory_store
        self.memory_embedder = memory_embedder
        self.on_startup: list[Callable[[], Awaitable[object]]] = []
        """Called (awaited, in order) when the app starts: load a model, open a pool."""
        self.on_shutdown: list[Callable[[], Awaitable[object]]] = []
        """Called when the app stops, after the session stores are closed: close what you own."""
        self._app: FastAPI | None = None

    def add_agent(
        self, name: str, agent: Agent, *, session_store: AgentSessionStore | None = None
    ) -> HostedAgent:
        """Serve ``agent`` as ``name``; its sessions live in ``session_store`` (default:
        :class:`~agentkeep.session_stores.NoopSessionStore`, which remembers nothing between requests).

        Raises:
            ValueError: The name is taken or not a URL path segment.
        """
        if not name or not all(c.isalnum() or c in "-_." for c in name):
            raise ValueError(f"an agent name is letters, digits, '-', '_' and '.', not {name!r}")
        if name in self.agents:
            raise ValueError(f"an agent named {name!r} is served already")
        store = NoopSessionStore() if session_store is None else session_store
        hosted = HostedAgent(name, agent, store)
        self.agents[name] = hosted
        return hosted

    @property
    def app(self) -> FastAPI:
        """The ASGI app (made once); mount it in an app of your own or run it with uvicorn."""
        if self._app is None:
            self._app = self._make_app()
        return self._app

    async def aclose(self) -> None:
        """Close every agent's session store and the memory store, then run :attr:`on_shutdown`."""
        for hosted in self.agents.values():
            await hosted.session_store.aclose()
        if self.memory_store is not None:
            await self.memory_store.aclose()
        for close in self.on_shutdown:
            await close()

    # -- the app ------------------------------------------------------------------------------------
    def _make_app(self) -> FastAPI:
        docs = self.api_docs
        app = FastAPI(
            title="agentkeep host",
            version="1",
            lifespan=self._lifespan,
            openapi_url="/openapi.json" if docs else None,
            docs_url="/docs" if docs else None,
            redoc_url="/redoc" if docs else None,
        )
        app.add_exception_handler(RequestValidationError, _invalid_parameters)
        app.add_exception_handler(HTTPProblem, _refused)
        app.add_exception_handler(StarletteHTTPException, _no_route)
        app.add_exception_handler(StorageUnavailableError, _store_unavailable)
        app.add_exception_handler(Exception, _failed)
        self._install(app)
        app.add_middleware(RequestPolicy, host=self)  # before any endpoint, AG-UI's included
        app.add_middleware(AccessLog)  # outermost of the middleware: AG-UI turns are logged too
        app.get("/healthz")(self._healthz)
        app.get("/readyz", response_model=None)(self._readyz)
        return app

    def _install(self, app: FastAPI) -> None:
        """The endpoints: the agents' protocols, the sessions API, the inspector."""
        app.add_middleware(AGUIRoute, host=self)  # POST /agents/{name}, in front of the router
        documented = app.openapi

        def openapi() -> dict[str, Any]:
            return agui_openapi(documented())

        app.openapi = openapi
        install_responses(self, app)
        install_sessions_api(self, app)
        install_memory_api(self, app)
        install_chat_completions(self, app)
        install_inspector(self, app)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: FastAPI) -> AsyncGenerator[None]:
        for hosted in self.agents.values():
            if isinstance(hosted.session_store, NoopSessionStore):
                log.warning(
                    "agent %r has no session store: nothing is remembered between requests "
                    "(give add_agent a session_store)",
                    hosted.name,
                )
        for start in self.on_startup:
            await start()
        try:
            yield
        finally:
            await self.aclose()

    def timed(self) -> asyncio.Timeout:
        """The time limit of one run (:attr:`run_timeout`)."""
        return asyncio.timeout(self.run_timeout)

    def hosted_agent(self, name: str, *, as_model: bool = False) -> HostedAgent:
        """The agent served as ``name``.

        Raises:
            HTTPProblem: 404 when there is none (``model_not_found`` for the OpenAI-compatible
                APIs, which name agents as models).
        """
        hosted = self.agents.get(name)
        if hosted is None:
            if as_model:
                raise HTTPProblem(404, "model_not_found", f"the model {name!r} does not exist")
            raise HTTPProblem(404, "not_found", f"no agent named {name!r}")
        return hosted

    def admit_turn(self, request: Request, tenant: str) -> None:
        """Count a turn of ``tenant`` for the rest of ``request`` (its streamed answer included;
        the request policy counts it as ended when the request is), or refuse it.

        Raises:
            HTTPProblem: 429 with ``Retry-After`` when the tenant runs
                :attr:`TenantTurns.limit` turns already.
        """
        if not self.tenant_turns.admit(tenant):
            raise HTTPProblem(
                429,
                "rate_limited",
                f"this tenant runs {self.tenant_turns.limit} turns at once already; retry shortly",
                headers={"Retry-After": "1"},
            )
        request.scope.setdefault("state", {})[TURN_SLOT] = tenant

    def check_message_count(self, count: int, what: str = "messages") -> None:
        """Refuse a request of more than :attr:`max_messages` messages (or input items).

        Raises:
            HTTPProblem: 413.
        """
        if count > self.max_messages:
            raise HTTPProblem(413, "too_large", f"more than {self.max_messages} {what}")

    def tenant_of(self, request: Request) -> str:
        """The tenant ``request`` runs as (recorded on ``request.state`` for the access log).

        Raises:
            HTTPProblem: 401 without a valid key; 403 for a non-loopback client of a host without keys.
        """
        if self.api_keys is None:
            if not is_loopback(request.client.host if request.client else None):
                raise HTTPProblem(
                    403, "forbidden", "this host serves loopback clients only (it has no API keys)"
                )
            if not is_loopback(requested_host(request.scope)):
                # A page of another site whose name was made to point at 127.0.0.1 (DNS
                # rebinding) is "same origin" to the browser, but still names its own host.
                raise HTTPProblem(403, "forbidden", "a host without API keys answers to loopback names only")
            tenant = self.local_tenant
        else:
            found = self.api_keys.tenant_of(request.headers.get("authorization"))
            if found is None:
                raise HTTPProblem(
                    401, "unauthorized", "a valid API key is needed: Authorization: Bearer <key>"
                )
            tenant = found
        request.state.tenant = tenant
        return tenant

    async def body_of(self, request: Request) -> bytes:
        """The request body, at most :attr:`max_body_bytes` (413 beyond)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise HTTPProblem(413, "too_large", f"the body is larger than {self.max_body_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise HTTPProblem(413, "too_large", f"the body is larger than {self.max_body_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    async def _readyz(self) -> JSONResponse:
        """Ready when every agent's session store answers and its model can answer now (a client
        that can tell: :class:`~agentkeep.clients.selection.SupportsReadyCheck`)."""
        report: dict[str, str] = {}
        ready = True
        for hosted in self.agents.values():
            client = hosted.agent.client
            try:
                async with asyncio.timeout(10):
                    await hosted.session_store.get_session(hosted.agent, "agentkeep-readyz")
                    if isinstance(client, SupportsReadyCheck):
                        await client.check_ready()
                report[hosted.name] = "ok"
            except Exception as exc:  # every failure makes the host not ready
                ready = False
                report[hosted.name] = f"{type(exc).__name__}: {exc}"
        return JSONResponse({"ready": ready, "agents": report}, status_code=200 if ready else 503)
