"""Serve agents over HTTP (extra ``[host]``): :class:`AgentHost`.

* ``POST /agents/{name}``: the AG-UI protocol (server-sent events), ``threadId`` = conversation id.
* ``/v1/responses``, ``/v1/conversations``, ``/v1/chat/completions``: the OpenAI-compatible APIs.
* ``/api/agents/{name}/sessions``: the tenant's sessions; ``/inspector/``: a web page over them.
* ``GET /healthz`` (the process answers) and ``GET /readyz`` (every agent's session store answers).

:func:`serve` runs ``agentkeep serve`` (its :class:`ServeSettings`), :func:`serve_inspector` runs
``agentkeep inspect``, both under uvicorn with the :class:`ConnectionLimits` they are given (header,
body and keep-alive timeouts, a cap on open connections).

Each agent has its own session store; every request runs as the tenant its API key names, through
a per-request :class:`~agentkeep.session_stores.IsolationKeyScopedSessionStore` view, so tenants never
reach each other's conversations. Turns of one conversation take turns inside a process; across
processes the stores' versions decide (see :mod:`agentkeep.host._turns`). See ``docs/host.md``.
"""

from __future__ import annotations

try:
    import ag_ui.core as _ag_ui_core
    import fastapi as _fastapi
    import jinja2 as _jinja2
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "agentkeep.host needs FastAPI, uvicorn, ag-ui-protocol and Jinja2: pip install 'agentkeep[host]'"
    ) from exc

from ._app import AgentHost, HostedAgent
from ._auth import LOCAL_TENANT, ApiKeyFileError, ApiKeys
from ._inspect import serve_inspector
from ._limits import ConnectionLimits
from ._serve import ServeSettings, serve
from ._turns import TurnConflictError

del _ag_ui_core, _fastapi, _jinja2

__all__ = [
    "LOCAL_TENANT",
    "AgentHost",
    "ApiKeyFileError",
    "ApiKeys",
    "ConnectionLimits",
    "HostedAgent",
    "ServeSettings",
    "TurnConflictError",
    "serve",
    "serve_inspector",
]
