"""``agentkeep serve``: one agent, ``chat``, on a store URL and a model, behind an :class:`AgentHost`.

The agent keeps its history in the store's message log (a durable history provider loading the
newest ``history_limit`` messages) and its session in the same store's session part, so any
number of processes on one PostgreSQL or Redis store serve the same conversations: that is how
the server scales out. With ``--memory`` the agent also keeps long-term memory of each user
(:mod:`agentkeep.host._memory` says how a request names its user) in ``--memory-store`` (by
default the history's SQLite file or PostgreSQL database). Worker processes (``workers > 1``)
build their host from the settings in the environment variable :data:`SETTINGS_VARIABLE`
(:func:`create_app` is uvicorn's factory). The server bounds its connections
(:mod:`agentkeep.host._server`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from ..agent import Agent
from ..clients.base import ChatClient
from ..clients.selection import SupportsAclose, SupportsLoad, open_chat_client
from ..encryption import KeyRing
from ..providers.context import ContextProvider
from ..store_urls import open_history_provider, open_memory_store, open_session_store
from ._app import AgentHost
from ._auth import ApiKeys
from ._limits import ConnectionLimits

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ..memory import MemoryStore
    from ..memory.embedders import CachedEmbedder, MiniLMEmbedder

__all__ = ["SETTINGS_VARIABLE", "ServeSettings", "build_host", "create_app", "is_loopback_address", "serve"]

SETTINGS_VARIABLE: Final = "AGENTKEEP_SERVE_SETTINGS"
DEFAULT_INSTRUCTIONS: Final = "You are a helpful assistant. Answer briefly."
MEMORY_KINDS: Final = ("recall", "facts", "blocks")


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """What ``agentkeep serve`` runs (see the command's options)."""

    store_url: str | None = None
    model_path: str | None = None
    base_url: str | None = None
    api_model: str | None = None
    api_key_file: str | None = None
    instructions: str | None = DEFAULT_INSTRUCTIONS
    history_limit: int = 50
    max_tokens: int | None = None
    agent_name: str = "chat"
    memory: tuple[str, ...] = ()
    """The memory providers: ``recall`` (semantic recall of what the user said), ``facts``
    (semantic recall of facts the model extracts; instead of ``recall``), ``blocks`` (memory
    blocks the model edits)."""
    memory_store_url: str | None = None
    """Where memories live (``None``: the history store's URL, when that is SQLite or PostgreSQL)."""

    def __post_init__(self) -> None:
        unknown = set(self.memory) - set(MEMORY_KINDS)
        if unknown:
            raise ValueError(f"unknown memory {sorted(unknown)}: choose from {', '.join(MEMORY_KINDS)}")
        if {"recall", "facts"} <= set(self.memory):
            raise ValueError("choose recall or facts, not both: facts is recall of extracted facts")

    def to_json(self) -> str:
        return msgspec.json.encode(asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        fields = msgspec.json.decode(text)
        fields["memory"] = tuple(fields.get("memory", ()))
        return cls(**fields)


def build_host(settings: ServeSettings) -> AgentHost:
    """The host ``settings`` describe (nothing is loaded or connected until the app starts).

    Raises:
        ValueError: Conflicting model options.
        ApiKeyFileError, KeyRingError, StoreURLError: A bad key file, key ring or store URL.
        ImportError: A missing optional dependency (named).
    """
    api_keys = None if settings.api_key_file is None else ApiKeys.from_file(settings.api_key_file)
    key_ring = KeyRing.from_env()
    client = open_chat_client(
        model_path=None if settings.model_path is None else Path(settings.model_path),
        base_url=settings.base_url,
        api_model=settings.api_model,
        max_tokens=settings.max_tokens,
    )
    history = open_history_provider(settings.store_url, load_limit=settings.history_limit, key_ring=key_ring)
    memory = _memory(settings, client)
    agent = Agent(
        client,
        instructions=settings.instructions,
        name=settings.agent_name,
        context_providers=[history, *memory.providers],
    )
    host = AgentHost(api_keys=api_keys, memory_store=memory.store, memory_embedder=memory.embedder)
    if memory.model is not None:
        host.on_startup.append(memory.model.load)  # the first turn does not wait for the model
        host.on_shutdown.append(memory.model.aclose)
    host.add_agent(
        settings.agent_name, agent, session_store=open_session_store(settings.store_url, key_ring=key_ring)
    )
    if isinstance(client, SupportsLoad):
        host.on_startup.append(client.load)  # the first request does not wait for the model
    host.on_shutdown.append(history.aclose)
    if isinstance(client, SupportsAclose):
        host.on_shutdown.append(client.aclose)
    return host


@dataclass(slots=True)
class _Memory:
    store: MemoryStore | None = None
    model: MiniLMEmbedder | None = None
    embedder: CachedEmbedder | None = None
    providers: list[ContextProvider] = field(default_factory=list[ContextProvider])


def _memory(settings: ServeSettings, client: ChatClient) -> _Memory:
    """The memory store, embedder and providers ``settings.memory`` asks for (none: nothing).

    Raises:
        StoreURLError: No store that keeps memories.
        ImportError: The memory or embeddings extra is missing (named).
    """
    if not settings.memory:
        return _Memory()
    from ..memory import MemoryBlocksProvider, SemanticMemoryProvider
    from ..memory.embedders import CachedEmbedder, MiniLMEmbedder
    from ..memory.semantic import FactExtractor

    store = open_memory_store(settings.memory_store_url or settings.store_url)
    made = _Memory(store)
    if "recall" in settings.memory or "facts" in settings.memory:
        made.model = MiniLMEmbedder()
        made.embedder = CachedEmbedder(made.model)
        extractor = FactExtractor(client) if "facts" in settings.memory else None
        made.providers.append(SemanticMemoryProvider(store, made.embedder, extractor=extractor))
    if "blocks" in settings.memory:
        made.providers.append(MemoryBlocksProvider(store))
    return made


def with_server_model(settings: ServeSettings) -> ServeSettings:
    """``settings`` with the model name settled before any process starts: a model server named
    without a model (no ``api_model``, no ``OPENAI_MODEL``) is asked for its model list, and its
    only model is used (so every worker asks for the same one).

    Raises:
        ChatRequestError: The server offers none or several models (named).
        ModelUnavailableError: The server cannot be reached.
    """
    if settings.base_url is None or settings.api_model or os.environ.get("OPENAI_MODEL"):
        return settings
    from ..clients.openai import OpenAIChatClient

    async def ask() -> str:
        async with OpenAIChatClient(base_url=settings.base_url, max_retries=0) as client:
            await client.load()
            return str(client.model)

    return replace(settings, api_model=asyncio.run(ask()))


def create_app() -> FastAPI:
    """The app of the settings in :data:`SETTINGS_VARIABLE` (for uvicorn worker processes)."""
    return build_host(ServeSettings.from_json(os.environ[SETTINGS_VARIABLE])).app


def is_loopback_address(host: str) -> bool:
    """Whether binding to ``host`` serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    settings: ServeSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    limits: ConnectionLimits | None = None,
) -> None:
    """Run the server until interrupted, its connections bounded by ``limits`` (default:
    :class:`ConnectionLimits`'s; ``max_connections`` is per worker process).

    Raises:
        ValueError: A non-loopback ``host`` without API keys.
        ChatRequestError: A model server without a model name, which offers none or several.
        ModelUnavailableError: That server cannot be reached to ask.
    """
    if settings.api_key_file is None and not is_loopback_address(host):
        raise ValueError(
            f"refusing to listen on {host} without API keys: anyone who can reach it would share one "
            "tenant; give --api-key-file (agentkeep api-keys add TENANT --file F makes one)"
        )
    from ._server import run_server  # uvicorn, imported only to serve

    settings = with_server_model(settings)
    limits = limits or ConnectionLimits()
    if workers > 1:
        os.environ[SETTINGS_VARIABLE] = settings.to_json()
        run_server(
            "agentkeep.host._serve:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            limits=limits,
        )
        return
    run_server(build_host(settings).app, host=host, port=port, limits=limits)
