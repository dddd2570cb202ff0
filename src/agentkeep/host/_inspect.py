"""``agentkeep inspect``: the session inspector over a store, with no agent that runs.

An :class:`InspectorHost` serves only the sessions and memory APIs, the inspector page and the health
endpoints, over one store URL (its message log and its sessions, under the agent name ``chat``
that ``agentkeep serve`` uses). Without API keys it serves loopback clients only and shows them
the whole store, every conversation under its stored id (the operator of the store can read it
anyway): ``alice::chat-1`` from a keyed ``agentkeep serve``, ``demo-1`` from ``agentkeep chat``.
With keys, each tenant sees its own sessions, as on any host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from fastapi import FastAPI

from ..agent import Agent
from ..clients.base import BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate
from ..encryption import KeyRing
from ..errors import ModelUnavailableError
from ..messages import Message
from ..store_urls import open_history_provider, open_memory_store, open_session_store
from ._app import AgentHost
from ._auth import WHOLE_STORE, ApiKeys
from ._limits import ConnectionLimits
from ._memory import install_memory_api
from ._serve import is_loopback_address
from ._sessions_api import install_sessions_api
from .inspector import install_inspector

__all__ = ["InspectorHost", "build_inspector", "serve_inspector"]

AGENT_NAME = "chat"


class InspectorHost(AgentHost):
    """A host that only shows sessions (see the module docs): no AG-UI, Responses or Chat
    Completions endpoints; without keys, loopback clients see the whole store."""

    local_tenant = WHOLE_STORE

    def _install(self, app: FastAPI) -> None:
        install_sessions_api(self, app)
        install_memory_api(self, app)
        install_inspector(self, app)


class _NoModel(BaseChatClient[ChatOptions]):
    """The inspector's agent has no model: it only names the store's history and sessions."""

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        raise ModelUnavailableError("agentkeep inspect runs no model")

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        raise ModelUnavailableError("agentkeep inspect runs no model")
        yield  # pragma: no cover - an async generator that never yields


def build_inspector(
    store_url: str | None, *, api_key_file: str | Path | None = None, memory_store_url: str | None = None
) -> InspectorHost:
    """The inspector host over ``store_url`` (default: the embedded SQLite file), with the users'
    memories in ``memory_store_url`` when given (searched with the packaged embedding model,
    loaded on the first search).

    Raises:
        ApiKeyFileError, KeyRingError, StoreURLError: A bad key file, key ring or store URL.
        ImportError: A missing optional dependency (named).
    """
    api_keys = None if api_key_file is None else ApiKeys.from_file(api_key_file)
    key_ring = KeyRing.from_env()
    history = open_history_provider(store_url, key_ring=key_ring)
    agent = Agent(_NoModel(), name=AGENT_NAME, context_providers=[history])
    sessions = open_session_store(store_url, key_ring=key_ring)
    memory_store = None if memory_store_url is None else open_memory_store(memory_store_url)
    embedder = None
    if memory_store is not None:
        from ..memory.embedders import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    host = InspectorHost(api_keys=api_keys, memory_store=memory_store, memory_embedder=embedder)
    if embedder is not None:
        host.on_shutdown.append(embedder.aclose)
    host.add_agent(AGENT_NAME, agent, session_store=sessions)
    host.on_shutdown.append(history.aclose)
    return host


def serve_inspector(
    store_url: str | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key_file: str | Path | None = None,
    memory_store_url: str | None = None,
    limits: ConnectionLimits | None = None,
) -> None:
    """Serve the inspector until interrupted, its connections bounded by ``limits`` (default:
    :class:`ConnectionLimits`'s).

    Raises:
        ValueError: A non-loopback ``host`` without API keys.
    """
    if api_key_file is None and not is_loopback_address(host):
        raise ValueError(
            f"refusing to listen on {host} without API keys: anyone who can reach it would see the "
            "whole store; give --api-key-file (agentkeep api-keys add TENANT --file F makes one)"
        )
    from ._server import run_server  # uvicorn, imported only to serve

    run_server(
        build_inspector(store_url, api_key_file=api_key_file, memory_store_url=memory_store_url).app,
        host=host,
        port=port,
        limits=limits or ConnectionLimits(),
    )
