"""Stores from URLs: one place that turns a URL into a message store, history provider or session store.

The CLI's ``--store`` option and the HTTP host accept the same forms:

========================================================  =====================================
URL                                                       store
========================================================  =====================================
(none), ``sqlite://``                                     SQLite at the default path
                                                          (:func:`~agentkeep._db.sqlite.default_database_path`)
``sqlite:///abs/path.db``, ``sqlite://rel/path.db``       SQLite file (``~`` is expanded)
``redis://[:password@]host:port/db?key_prefix=P``         Redis (``rediss://``, ``unix://`` too)
``postgresql://user@host:port/db?schema=S``               PostgreSQL (``postgres://`` too)
``memory://``                                             process memory (nothing survives)
``file:///abs/folder``                                    a folder of session files (session
                                                          stores only)
========================================================  =====================================

``key_prefix`` and ``schema`` are agentkeep's own query parameters (the stores' defaults apply
when they are left out); every other parameter goes to the driver. The Redis and PostgreSQL
drivers are optional dependencies, imported only when such a URL is used (a missing one raises
an ``ImportError`` naming the extra to install).

* :func:`open_message_store`: a :class:`~agentkeep.storage.base.MessageStore`;
* :func:`open_history_provider`: a :class:`~agentkeep.providers.storage.StorageHistoryProvider`
  that owns a message store opened from the URL;
* :func:`open_session_store`: an :class:`~agentkeep.stores.base.AgentSessionStore`;
* :func:`open_memory_store`: a :class:`~agentkeep.memory.MemoryStore` (SQLite, PostgreSQL or memory).

What they return owns what it opened: close it with ``await ....aclose()``. Nothing is connected
yet; the first operation (or ``await store.setup()``) reaches the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Unpack
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from .errors import StoreURLError

if TYPE_CHECKING:
    from .encryption import KeyRing
    from .memory import MemoryStore
    from .providers.history import HistoryOptions
    from .providers.storage import StorageHistoryProvider
    from .storage.base import MessageStore
    from .stores.base import AgentSessionStore

__all__ = [
    "DEFAULT_HISTORY_SOURCE_ID",
    "STORE_URL_HELP",
    "StoreBackend",
    "StoreLocation",
    "describe_store",
    "open_history_provider",
    "open_memory_store",
    "open_message_store",
    "open_session_store",
    "parse_store_url",
    "redact_url",
]

STORE_URL_HELP = "sqlite:///path/to/file.db, redis://host:6379/0, postgresql://user@host:5432/db or memory://"
"""The accepted URL forms, for help texts and error messages."""

DEFAULT_HISTORY_SOURCE_ID = "history"
"""The ``source_id`` (and session-state key) of a history provider opened from a URL."""

StoreBackend = Literal["sqlite", "redis", "postgres", "memory", "file"]

_SCHEMES: dict[str, StoreBackend] = {
    "sqlite": "sqlite",
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
    "postgres": "postgres",
    "postgresql": "postgres",
    "memory": "memory",
    "file": "file",
}
_OWN_PARAMETERS: dict[StoreBackend, str] = {"redis": "key_prefix", "postgres": "schema"}


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """A parsed store URL.

    Attributes:
        backend: ``"sqlite"``, ``"redis"``, ``"postgres"``, ``"memory"`` or ``"file"``.
        url: The URL for the driver (agentkeep's own query parameters removed); else the URL as
            given.
        path: The SQLite file or the session folder (``None`` for the others).
        options: agentkeep's own parameters found in the query (``key_prefix``, ``schema``).
    """

    backend: StoreBackend
    url: str
    path: Path | None = None
    options: dict[str, str] = field(default_factory=dict[str, str])


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparsable URL>"
    if not password:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def parse_store_url(url: str | None) -> StoreLocation:
    """Parse a store URL (see the module docs for the forms).

    Raises:
        StoreURLError: An unknown scheme or a malformed URL.
    """
    if not url:
        from ._db.sqlite import default_database_path

        return StoreLocation("sqlite", "sqlite://", default_database_path())
    scheme, separator, rest = url.partition("://")
    backend = _SCHEMES.get(scheme.lower()) if separator else None
    if backend is None:
        raise StoreURLError(f"unsupported store URL {redact_url(url)!r}: expected {STORE_URL_HELP}")
    if backend in ("sqlite", "file", "memory"):
        return _parse_local(url, backend, rest)
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        raise StoreURLError(f"invalid store URL {redact_url(url)!r}: {exc}") from exc
    own = _OWN_PARAMETERS[backend]
    options: dict[str, str] = {}
    query: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == own:
            if not value:
                raise StoreURLError(f"store URL {redact_url(url)!r}: {own} must not be empty")
            options[name] = value
        else:
            query.append((name, value))
    driver_url = urlunsplit(parts._replace(query=urlencode(query)))
    return StoreLocation(backend, driver_url, None, options)


def _parse_local(url: str, backend: StoreBackend, rest: str) -> StoreLocation:
    if "?" in rest or "#" in rest:
        raise StoreURLError(f"store URL {url!r}: a {backend} URL takes no query (write {backend}:///path)")
    if backend == "memory":
        if rest:
            raise StoreURLError(f"store URL {url!r}: write memory:// (it names no place)")
        return StoreLocation("memory", url)
    if not rest:
        if backend == "file":
            raise StoreURLError(f"store URL {url!r}: name the folder (file:///path/to/sessions)")
        return parse_store_url(None)
    return StoreLocation(backend, url, Path(unquote(rest)).expanduser())


def open_message_store(
    url: str | None = None,
    *,
    max_messages: int | None = None,
    ttl: float | None = None,
    timeout: float = 5.0,
    key_ring: KeyRing | None = None,
) -> MessageStore:
    """A new message store for ``url``; the caller owns it (``await store.aclose()``).

    Args:
        url: The store URL (``None``: the default SQLite file).
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires.
        timeout: Seconds to wait for a lock, a connection or a reply.
        key_ring: Encrypt what is stored (see :mod:`agentkeep.encryption`); ``memory://`` keeps
            nothing at rest and ignores it.

    Raises:
        StoreURLError: An unknown scheme, a malformed URL, or ``file://`` (no message store).
        ImportError: The backend's driver is not installed (the message names the extra).
    """
    location = parse_store_url(url)
    if location.backend == "sqlite":
        from .storage.sqlite import SQLiteMessageStore

        return SQLiteMessageStore(
            location.path, max_messages=max_messages, ttl=ttl, timeout=timeout, key_ring=key_ring
        )
    if location.backend == "memory":
        from .storage.memory import InMemoryMessageStore

        return InMemoryMessageStore(max_messages=max_messages, ttl=ttl)
    if location.backend == "file":
        raise StoreURLError(f"store URL {url!r}: file:// holds session files, not message history")
    try:
        if location.backend == "redis":
            from .storage.redis import RedisMessageStore

            return RedisMessageStore.from_url(
                location.url,
                key_prefix=location.options.get("key_prefix", RedisMessageStore.DEFAULT_KEY_PREFIX),
                max_messages=max_messages,
                ttl=ttl,
                timeout=timeout,
                key_ring=key_ring,
            )
        from .storage.postgres import PostgresMessageStore

        return PostgresMessageStore.from_url(
            location.url,
            schema=location.options.get("schema", PostgresMessageStore.DEFAULT_SCHEMA),
            max_messages=max_messages,
            ttl=ttl,
            timeout=timeout,
            key_ring=key_ring,
        )
    except (ValueError, TypeError) as exc:  # the driver rejected the URL
        raise StoreURLError(f"invalid store URL {redact_url(url or '')!r}: {exc}") from exc


def open_history_provider(
    url: str | None = None,
    *,
    source_id: str = DEFAULT_HISTORY_SOURCE_ID,
    load_limit: int | None = None,
    max_messages: int | None = None,
    ttl: float | None = None,
    timeout: float = 5.0,
    key_ring: KeyRing | None = None,
    **options: Unpack[HistoryOptions],
) -> StorageHistoryProvider:
    """A history provider on a message store opened from ``url`` (the provider owns and closes it).

    Args:
        url: The store URL (``None``: the default SQLite file).
        source_id: The provider's id and session-state key.
        load_limit: Load at most this many of the newest view messages per run.
        max_messages: Keep only the newest ``max_messages`` raw messages per conversation.
        ttl: Seconds of inactivity after which a conversation expires.
        timeout: Seconds to wait for a lock, a connection or a reply.
        key_ring: Encrypt what is stored (see :mod:`agentkeep.encryption`).
        **options: The :class:`~agentkeep.providers.history.HistoryProvider` options.

    Raises:
        StoreURLError: As :func:`open_message_store`.
        ImportError: The backend's driver is not installed.
    """
    from .providers.storage import StorageHistoryProvider

    store = open_message_store(url, max_messages=max_messages, ttl=ttl, timeout=timeout, key_ring=key_ring)
    return StorageHistoryProvider(store, source_id, load_limit=load_limit, owns_store=True, **options)


def open_session_store(
    url: str | None = None,
    *,
    ttl: float | None = None,
    timeout: float = 5.0,
    key_ring: KeyRing | None = None,
) -> AgentSessionStore:
    """A new session store for ``url``; the caller owns it (``await store.aclose()``).

    Args:
        url: The store URL (``None``: the default SQLite file, shared with message history).
        ttl: Seconds after its last save at which a session expires (Redis only).
        timeout: Seconds to wait for a lock, a connection or a reply.
        key_ring: Encrypt session payloads (see :mod:`agentkeep.encryption`); ``memory://``
            keeps nothing at rest and ignores it.

    Raises:
        StoreURLError: An unknown scheme, a malformed URL, or ``ttl`` for a store without expiry.
        ImportError: The backend's driver is not installed (the message names the extra).
    """
    location = parse_store_url(url)
    if ttl is not None and location.backend != "redis":
        raise StoreURLError(f"store URL {redact_url(url or '')!r}: only Redis session stores expire (ttl)")
    if location.backend == "sqlite":
        from .stores.sqlite import SQLiteSessionStore

        return SQLiteSessionStore(location.path, timeout=timeout, key_ring=key_ring)
    if location.backend == "memory":
        from .stores.memory import InMemorySessionStore

        return InMemorySessionStore()
    if location.backend == "file":
        from .stores.filesystem import FileSystemSessionStore

        return FileSystemSessionStore(location.path, key_ring=key_ring)
    try:
        if location.backend == "redis":
            from .stores.redis import RedisSessionStore

            prefix = location.options.get("key_prefix", RedisSessionStore.DEFAULT_KEY_PREFIX)
            return RedisSessionStore.from_url(
                location.url, key_prefix=prefix, ttl=ttl, timeout=timeout, key_ring=key_ring
            )
        from .stores.postgres import PostgresSessionStore

        schema = location.options.get("schema", PostgresSessionStore.DEFAULT_SCHEMA)
        return PostgresSessionStore.from_url(location.url, schema=schema, timeout=timeout, key_ring=key_ring)
    except (ValueError, TypeError) as exc:  # the driver rejected the URL
        raise StoreURLError(f"invalid store URL {redact_url(url or '')!r}: {exc}") from exc


def describe_store(store: object) -> str:
    """Where ``store`` keeps its data, for messages: ``"sqlite at /path"``, ``"redis at host:port/0"``."""
    backend = str(getattr(store, "backend", type(store).__name__))
    for attribute in ("path", "root_dir", "address"):
        where = getattr(store, attribute, None)
        if where is not None:
            return f"{backend} at {where}"
    for attribute in ("connection", "database"):
        address = getattr(getattr(store, attribute, None), "address", None)
        if address is not None:
            return f"{backend} at {address}"
    return backend


def open_memory_store(
    url: str | None = None, *, dimensions: int = 384, ttl: float | None = None, timeout: float = 5.0
) -> MemoryStore:
    """A new long-term memory store for ``url``; the caller owns it (``await store.aclose()``).

    Args:
        url: The store URL (``None``: the default SQLite file, shared with message history).
        dimensions: The length of the embeddings (384: all-MiniLM-L6-v2).
        ttl: Seconds after its last update at which a memory expires.
        timeout: Seconds to wait for another process's write lock (SQLite).

    Raises:
        StoreURLError: An unknown scheme, a malformed URL, or a backend that keeps no memories yet.
        ImportError: The SQLite memory store's extra is not installed (the message names it).
    """
    location = parse_store_url(url)
    if location.backend == "sqlite":
        from .memory.sqlite import SQLiteMemoryStore

        return SQLiteMemoryStore(location.path, dimensions=dimensions, ttl=ttl, timeout=timeout)  # pyright: ignore[reportArgumentType]
    if location.backend == "memory":
        from .memory import InMemoryMemoryStore

        return InMemoryMemoryStore(dimensions=dimensions, ttl=ttl)
    if location.backend == "postgres":
        from .memory.postgres import PostgresMemoryStore

        schema = location.options.get("schema", "agentkeep")
        return PostgresMemoryStore(
            location.url, schema=schema, dimensions=dimensions, ttl=ttl, timeout=timeout
        )
    raise StoreURLError(
        f"store URL {redact_url(url or '')!r}: long-term memory is kept in SQLite, PostgreSQL or memory://"
    )
