"""Stores from URLs: one place that turns a URL into a message store, history provider or session store.

The CLI's ``--store`` option and the HTTP host accept the same forms:

========================================================  =====================================
URL                                                       store
========================================================  =====================================
(none), ``sqlite://``                                     SQLite at the default path
                                                          (:func:`~agentkeep._db.sqlite.default_database_path`)
``sqlite:///abs/path.db``, ``sqlite://rel/path.db``       SQLite file (``~`` is expanded)
``redis://[:password@]host:port/db?key_prefix=P``         Redis (``rediss://``, ``unix://`` too)
``redis+cluster://host:port[,host:port...]?key_prefix=P``  Redis Cluster (``rediss+cluster://``
                                                          with TLS): the nodes to start from
``postgresql://user@host:port/db?schema=S``               PostgreSQL (``postgres://`` too;
                                                          ``&pooler=transaction`` behind a
                                                          transaction pooler; ``&pool_size=N``
                                                          connections at most, for the pool
                                                          all stores on the database share)
``memory://``                                             process memory (nothing survives)
``file:///abs/folder``                                    a folder of session files (session
                                                          stores only)
========================================================  =====================================

``key_prefix``, ``schema``, ``pooler`` and ``pool_size`` are agentkeep's own query parameters (the
stores' defaults apply when they are left out); every other parameter goes to the driver. The
Redis and PostgreSQL drivers are optional dependencies, imported only when such a URL is used (a
missing one raises an ``ImportError`` naming the extra to install).

* :func:`open_message_store`: a :class:`~agentkeep.message_stores.base.MessageStore`;
* :func:`open_history_provider`: a :class:`~agentkeep.providers.storage.StorageHistoryProvider`
  that owns a message store opened from the URL;
* :func:`open_session_store`: an :class:`~agentkeep.session_stores.base.AgentSessionStore`;
* :func:`open_memory_store`: a :class:`~agentkeep.memory.MemoryStore` (SQLite, PostgreSQL or memory).

What they return owns what it opened: close it with ``await ....aclose()``. Nothing is connected
yet; the first operation (or ``await store.setup()``) reaches the backend.

Each backend is one entry of a table: its URL schemes, its own query parameter, and an opener per
kind of store it holds (agentkeep's openers call the store class's ``from_url``, which every
backend has beside its ``X(client_or_pool, *, options)`` constructor; see "Store contracts" in
docs/architecture.md). agentkeep's backends are registered at import like any other; a backend of
another package registers its schemes with :func:`register_store_backend`, and then its URLs
work wherever a store URL is accepted (the CLI's ``--store``, ``agentkeep serve``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypedDict, Unpack, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._files import path_from_url
from .errors import AgentkeepError, StoreURLError

if TYPE_CHECKING:
    from .encryption import KeyRing
    from .memory import MemoryStore
    from .message_stores.base import MessageStore
    from .providers.history import HistoryOptions
    from .providers.storage import StorageHistoryProvider
    from .session_stores.base import AgentSessionStore

__all__ = [
    "DEFAULT_HISTORY_SOURCE_ID",
    "STORE_URL_HELP",
    "MemoryStoreOptions",
    "MessageStoreOptions",
    "SessionStoreOptions",
    "StoreBackend",
    "StoreKind",
    "StoreLocation",
    "describe_store",
    "open_history_provider",
    "open_memory_store",
    "open_message_store",
    "open_session_store",
    "parse_store_url",
    "redact_url",
    "register_store_backend",
]

STORE_URL_HELP = "sqlite:///path/to/file.db, redis://host:6379/0, postgresql://user@host:5432/db or memory://"
"""The accepted URL forms, for help texts and error messages."""

DEFAULT_HISTORY_SOURCE_ID = "history"
"""The ``source_id`` (and session-state key) of a history provider opened from a URL."""

StoreBackend = str
"""A backend's name: ``"sqlite"``, ``"redis"``, ``"postgres"``, ``"memory"``, ``"file"``, or one
registered with :func:`register_store_backend`."""

StoreKind = Literal["message", "session", "memory"]
"""What a URL is opened as: a message store, a session store or a long-term memory store."""

MessageStoreOpener = Callable[["StoreLocation", "MessageStoreOptions"], "MessageStore"]
SessionStoreOpener = Callable[["StoreLocation", "SessionStoreOptions"], "AgentSessionStore"]
MemoryStoreOpener = Callable[["StoreLocation", "MemoryStoreOptions"], "MemoryStore"]


class MessageStoreOptions(TypedDict):
    """What :func:`open_message_store` hands a backend's opener."""

    max_messages: int | None
    ttl: float | None
    timeout: float
    key_ring: KeyRing | None


class SessionStoreOptions(TypedDict):
    """What :func:`open_session_store` hands a backend's opener."""

    ttl: float | None
    timeout: float
    key_ring: KeyRing | None


class MemoryStoreOptions(TypedDict):
    """What :func:`open_memory_store` hands a backend's opener."""

    dimensions: int
    ttl: float | None
    timeout: float


@dataclass(frozen=True, slots=True)
class _Backend:
    name: str
    local: bool
    own_parameters: tuple[str, ...]
    openers: dict[StoreKind, Callable[..., object]]
    default_path: Callable[[], Path] | None


_BACKENDS: dict[str, _Backend] = {}
_SCHEMES: dict[str, _Backend] = {}


def register_store_backend(
    name: str,
    *,
    schemes: Sequence[str],
    local: bool = False,
    own_parameter: str | Sequence[str] | None = None,
    default_path: Callable[[], Path] | None = None,
    message_store: MessageStoreOpener | None = None,
    session_store: SessionStoreOpener | None = None,
    memory_store: MemoryStoreOpener | None = None,
) -> None:
    """Make ``schemes`` URLs open stores of the backend ``name`` (how agentkeep's own backends are
    registered too; a later registration of a name or scheme replaces the earlier one).

    Args:
        name: The backend's name (:attr:`StoreLocation.backend`).
        schemes: The URL schemes that name it (``"mydb"`` for ``mydb://...``).
        local: URLs name a path (``scheme:///path``, no query), not a server; whether one that
            names none (``scheme://``) is valid is for the opener to say.
        default_path: For a local backend: the path of ``scheme://`` (the SQLite backend's
            default file).
        own_parameter: A query parameter (or several) the opener reads from
            :attr:`StoreLocation.options` instead of the driver (``key_prefix``; ``schema`` and
            ``pooler``).
        message_store: ``opener(location, options)`` for :func:`open_message_store`.
        session_store: ``opener(location, options)`` for :func:`open_session_store`.
        memory_store: ``opener(location, options)`` for :func:`open_memory_store`.

    Raises:
        ValueError: No scheme, or a scheme that is not a valid URL scheme.
    """
    if not schemes:
        raise ValueError("register_store_backend needs at least one scheme")
    for scheme in schemes:
        if not (scheme[:1].isalpha() and all(c.isalnum() or c in "+-." for c in scheme)):
            raise ValueError(f"{scheme!r} is not a URL scheme")
    openers: dict[StoreKind, Callable[..., object]] = {}
    for kind, opener in (("message", message_store), ("session", session_store), ("memory", memory_store)):
        if opener is not None:
            openers[cast(StoreKind, kind)] = opener
    own = (own_parameter,) if isinstance(own_parameter, str) else tuple(own_parameter or ())
    backend = _Backend(name, local, own, openers, default_path)
    _BACKENDS[name] = backend
    for scheme in schemes:
        _SCHEMES[scheme.lower()] = backend


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """A parsed store URL.

    Attributes:
        backend: ``"sqlite"``, ``"redis"``, ``"postgres"``, ``"memory"``, ``"file"`` or a
            registered backend's name.
        url: The URL for the driver (agentkeep's own query parameters removed); else the URL as
            given.
        path: The SQLite file, the session folder or a local backend's path (``None`` for the
            others, and for a local URL that names none).
        options: agentkeep's own parameters found in the query (``key_prefix``, ``schema``,
            ``pooler``).
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
        url = "sqlite://"
    scheme, separator, _ = url.partition("://")
    backend = _SCHEMES.get(scheme.lower()) if separator else None
    if backend is None:
        raise StoreURLError(f"unsupported store URL {redact_url(url)!r}: expected {STORE_URL_HELP}")
    if backend.local:
        return _parse_local(url, scheme.lower(), backend)
    try:
        parts = urlsplit(url)
        if "," not in parts.netloc:  # a cluster's URL lists several nodes: its driver checks them
            _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        raise StoreURLError(f"invalid store URL {redact_url(url)!r}: {exc}") from exc
    options: dict[str, str] = {}
    query: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in backend.own_parameters:
            if not value:
                raise StoreURLError(f"store URL {redact_url(url)!r}: {name} must not be empty")
            options[name] = value
        else:
            query.append((name, value))
    driver_url = urlunsplit(parts._replace(query=urlencode(query)))
    return StoreLocation(backend.name, driver_url, None, options)


def _parse_local(url: str, scheme: str, backend: _Backend) -> StoreLocation:
    path = path_from_url(url, scheme=scheme)
    if path is None and backend.default_path is not None:
        path = backend.default_path()
    return StoreLocation(backend.name, url, path)


_NOT_HELD: Final[dict[StoreKind, str]] = {
    "message": "message history",
    "session": "sessions",
    "memory": "long-term memory (it is kept in SQLite, PostgreSQL or memory://)",
}


def _open(kind: StoreKind, url: str | None, options: Mapping[str, object]) -> object:
    """The store of ``kind`` for ``url``, by the opener its backend registered."""
    location = parse_store_url(url)
    opener = _BACKENDS[location.backend].openers.get(kind)
    if opener is None:
        raise StoreURLError(
            f"store URL {redact_url(url or '')!r}: a {location.backend} store holds no {_NOT_HELD[kind]}"
        )
    return opener(location, options)


@contextmanager
def _driver_checks(location: StoreLocation) -> Generator[None]:
    """A server backend's driver rejecting the URL (``ValueError`` / ``TypeError``) as a
    :class:`~agentkeep.errors.StoreURLError`."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        if isinstance(exc, AgentkeepError):
            raise
        raise StoreURLError(f"invalid store URL {redact_url(location.url)!r}: {exc}") from exc


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
    options = MessageStoreOptions(max_messages=max_messages, ttl=ttl, timeout=timeout, key_ring=key_ring)
    return cast("MessageStore", _open("message", url, options))


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
    options = SessionStoreOptions(ttl=ttl, timeout=timeout, key_ring=key_ring)
    return cast("AgentSessionStore", _open("session", url, options))


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
    options = MemoryStoreOptions(dimensions=dimensions, ttl=ttl, timeout=timeout)
    return cast("MemoryStore", _open("memory", url, options))


# -- agentkeep's own backends -----------------------------------------------------------------------


# Each opener is one call of the backend's ``from_url``: the URL (for a server, without
# agentkeep's own query parameter, which the opener passes as an option) and the options the
# backend takes.


def _sqlite_messages(location: StoreLocation, options: MessageStoreOptions) -> MessageStore:
    from .message_stores.sqlite import SQLiteMessageStore

    return SQLiteMessageStore.from_url(location.url, **options)


def _sqlite_sessions(location: StoreLocation, options: SessionStoreOptions) -> AgentSessionStore:
    from .session_stores.sqlite import SQLiteSessionStore

    _no_ttl(location, options)
    return SQLiteSessionStore.from_url(location.url, timeout=options["timeout"], key_ring=options["key_ring"])


def _sqlite_memories(location: StoreLocation, options: MemoryStoreOptions) -> MemoryStore:
    from .memory.sqlite import SQLiteMemoryStore

    return SQLiteMemoryStore.from_url(location.url, **options)


def _memory_messages(location: StoreLocation, options: MessageStoreOptions) -> MessageStore:
    from .message_stores.memory import InMemoryMessageStore

    return InMemoryMessageStore.from_url(
        location.url, max_messages=options["max_messages"], ttl=options["ttl"]
    )


def _memory_sessions(location: StoreLocation, options: SessionStoreOptions) -> AgentSessionStore:
    from .session_stores.memory import InMemorySessionStore

    _no_ttl(location, options)
    return InMemorySessionStore.from_url(location.url)


def _memory_memories(location: StoreLocation, options: MemoryStoreOptions) -> MemoryStore:
    from .memory import InMemoryMemoryStore

    return InMemoryMemoryStore.from_url(location.url, dimensions=options["dimensions"], ttl=options["ttl"])


def _file_sessions(location: StoreLocation, options: SessionStoreOptions) -> AgentSessionStore:
    from .session_stores.filesystem import FileSystemSessionStore

    _no_ttl(location, options)
    return FileSystemSessionStore.from_url(location.url, key_ring=options["key_ring"])


def _redis_messages(location: StoreLocation, options: MessageStoreOptions) -> MessageStore:
    from .message_stores.redis import RedisMessageStore

    prefix = location.options.get("key_prefix", RedisMessageStore.DEFAULT_KEY_PREFIX)
    with _driver_checks(location):
        return RedisMessageStore.from_url(location.url, key_prefix=prefix, **options)


def _redis_sessions(location: StoreLocation, options: SessionStoreOptions) -> AgentSessionStore:
    from .session_stores.redis import RedisSessionStore

    prefix = location.options.get("key_prefix", RedisSessionStore.DEFAULT_KEY_PREFIX)
    with _driver_checks(location):
        return RedisSessionStore.from_url(location.url, key_prefix=prefix, **options)


def _postgres_messages(location: StoreLocation, options: MessageStoreOptions) -> MessageStore:
    from .message_stores.postgres import PostgresMessageStore

    schema = location.options.get("schema", PostgresMessageStore.DEFAULT_SCHEMA)
    pooler, pool_size = _pooler(location), _pool_size(location)
    with _driver_checks(location):
        return PostgresMessageStore.from_url(
            location.url, schema=schema, pooler=pooler, pool_size=pool_size, **options
        )


def _postgres_sessions(location: StoreLocation, options: SessionStoreOptions) -> AgentSessionStore:
    from .session_stores.postgres import PostgresSessionStore

    _no_ttl(location, options)
    schema = location.options.get("schema", PostgresSessionStore.DEFAULT_SCHEMA)
    pooler, pool_size = _pooler(location), _pool_size(location)
    with _driver_checks(location):
        return PostgresSessionStore.from_url(
            location.url,
            schema=schema,
            pooler=pooler,
            pool_size=pool_size,
            timeout=options["timeout"],
            key_ring=options["key_ring"],
        )


def _postgres_memories(location: StoreLocation, options: MemoryStoreOptions) -> MemoryStore:
    from .memory.postgres import PostgresMemoryStore

    schema = location.options.get("schema", PostgresMemoryStore.DEFAULT_SCHEMA)
    pooler, pool_size = _pooler(location), _pool_size(location)
    with _driver_checks(location):
        return PostgresMemoryStore.from_url(
            location.url, schema=schema, pooler=pooler, pool_size=pool_size, **options
        )


def _pool_size(location: StoreLocation) -> int | None:
    """The ``pool_size`` query parameter of a PostgreSQL URL: a whole number from 1, or absent."""
    text = location.options.get("pool_size")
    if text is None:
        return None
    if not text.isdigit() or not 1 <= int(text) <= _MOST_POOL_SIZE:
        raise StoreURLError(
            f"store URL {redact_url(location.url)!r}: pool_size must be a whole number from 1 to "
            f"{_MOST_POOL_SIZE}, not {text!r}"
        )
    return int(text)


_MOST_POOL_SIZE: Final = 1000


def _pooler(location: StoreLocation) -> Literal["transaction"] | None:
    """The ``pooler`` query parameter of a PostgreSQL URL: ``transaction`` or absent."""
    pooler = location.options.get("pooler")
    if pooler is None:
        return None
    if pooler != "transaction":
        raise StoreURLError(
            f"store URL {redact_url(location.url)!r}: pooler must be 'transaction' (a pooler in "
            f"transaction pooling mode), not {pooler!r}"
        )
    return pooler


def _no_ttl(location: StoreLocation, options: SessionStoreOptions) -> None:
    if options["ttl"] is not None:
        raise StoreURLError(f"store URL {redact_url(location.url)!r}: only Redis session stores expire (ttl)")


def _default_sqlite_file() -> Path:
    from ._db.sqlite import default_database_path

    return default_database_path()


register_store_backend(
    "sqlite",
    schemes=["sqlite"],
    local=True,
    default_path=_default_sqlite_file,
    message_store=_sqlite_messages,
    session_store=_sqlite_sessions,
    memory_store=_sqlite_memories,
)
register_store_backend(
    "memory",
    schemes=["memory"],
    local=True,
    message_store=_memory_messages,
    session_store=_memory_sessions,
    memory_store=_memory_memories,
)


def _file_messages(location: StoreLocation, options: MessageStoreOptions) -> MessageStore:
    raise StoreURLError(f"store URL {location.url!r}: file:// holds session files, not message history")


register_store_backend(
    "file", schemes=["file"], local=True, message_store=_file_messages, session_store=_file_sessions
)
register_store_backend(
    "redis",
    schemes=["redis", "rediss", "unix", "redis+cluster", "rediss+cluster"],
    own_parameter="key_prefix",
    message_store=_redis_messages,
    session_store=_redis_sessions,
)
register_store_backend(
    "postgres",
    schemes=["postgres", "postgresql"],
    own_parameter=("schema", "pooler", "pool_size"),
    message_store=_postgres_messages,
    session_store=_postgres_sessions,
    memory_store=_postgres_memories,
)
