"""Opening a message store from a URL: what the CLI's ``--store`` option accepts.

=====================================================  ==========================================
URL                                                    store
=====================================================  ==========================================
(none), ``sqlite://``                                  SQLite at :func:`default_database_path`
``sqlite:///abs/path.db``, ``sqlite://rel/path.db``    SQLite file (``~`` is expanded)
``redis://[:password@]host:port/db?key_prefix=P``      Redis (``rediss://``, ``unix://`` too)
``postgresql://user@host:port/db?schema=S``            PostgreSQL (``postgres://`` too)
=====================================================  ==========================================

``key_prefix`` and ``schema`` are agentkeep's own query parameters (the stores' defaults apply
when they are left out); every other parameter goes to the driver. The Redis and PostgreSQL
drivers are optional dependencies, imported only when such a URL is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ..errors import CLIError
from ..storage.base import MessageStore

__all__ = ["CLIError", "StoreLocation", "describe_store", "open_store", "parse_store_url", "redact_url"]

STORE_URL_HELP = "sqlite:///path/to/file.db, redis://host:6379/0 or postgresql://user@host:5432/db"
"""The accepted URL forms, for help texts and error messages."""

Backend = Literal["sqlite", "redis", "postgres"]

_SCHEMES: dict[str, Backend] = {
    "sqlite": "sqlite",
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
    "postgres": "postgres",
    "postgresql": "postgres",
}
_OWN_PARAMETERS: dict[Backend, str] = {"redis": "key_prefix", "postgres": "schema"}


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """A parsed ``--store`` URL.

    Attributes:
        backend: ``"sqlite"``, ``"redis"`` or ``"postgres"``.
        url: The URL for the driver (agentkeep's own query parameters removed); for SQLite the
            URL as given.
        path: The SQLite file (``None`` for the servers).
        options: agentkeep's own parameters found in the query (``key_prefix``, ``schema``).
    """

    backend: Backend
    url: str
    path: Path | None = None
    options: dict[str, str] = field(default_factory=dict[str, str])


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages)."""
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
    """Parse a ``--store`` URL (see the module docs for the forms).

    Raises:
        CLIError: An unknown scheme or a malformed URL.
    """
    if not url:
        from ..storage.sqlite import default_database_path

        return StoreLocation("sqlite", "sqlite://", default_database_path())
    scheme, separator, rest = url.partition("://")
    backend = _SCHEMES.get(scheme.lower()) if separator else None
    if backend is None:
        raise CLIError(f"unsupported store URL {redact_url(url)!r}: expected {STORE_URL_HELP}")
    if backend == "sqlite":
        if "?" in rest or "#" in rest:
            raise CLIError(
                f"store URL {url!r}: a SQLite URL takes no query (write sqlite:///path/to/file.db)"
            )
        if not rest:
            return parse_store_url(None)
        return StoreLocation("sqlite", url, Path(unquote(rest)).expanduser())
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        raise CLIError(f"invalid store URL {redact_url(url)!r}: {exc}") from exc
    own = _OWN_PARAMETERS[backend]
    options: dict[str, str] = {}
    query: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == own:
            if not value:
                raise CLIError(f"store URL {redact_url(url)!r}: {own} must not be empty")
            options[name] = value
        else:
            query.append((name, value))
    driver_url = urlunsplit(parts._replace(query=urlencode(query)))
    return StoreLocation(backend, driver_url, None, options)


def open_store(url: str | None, *, timeout: float = 5.0) -> MessageStore:
    """A new message store for a ``--store`` URL; the caller owns it (``await store.aclose()``).

    Nothing is connected yet: call ``await store.setup()`` to reach the backend (and create or
    check its schema) before the first real operation, so an unreachable server fails early.

    Args:
        url: The store URL (``None``: the default SQLite file).
        timeout: Seconds to wait for a lock, a connection or a reply.

    Raises:
        CLIError: An unknown scheme or a malformed URL.
        ImportError: The backend's driver is not installed (the message names the extra).
    """
    location = parse_store_url(url)
    if location.backend == "sqlite":
        from ..storage.sqlite import SQLiteMessageStore

        return SQLiteMessageStore(location.path, timeout=timeout)
    try:
        if location.backend == "redis":
            from ..storage.redis import RedisMessageStore

            prefix = location.options.get("key_prefix")
            if prefix is None:
                return RedisMessageStore.from_url(location.url, timeout=timeout)
            return RedisMessageStore.from_url(location.url, key_prefix=prefix, timeout=timeout)
        from ..storage.postgres import PostgresMessageStore

        schema = location.options.get("schema")
        if schema is None:
            return PostgresMessageStore.from_url(location.url, timeout=timeout)
        return PostgresMessageStore.from_url(location.url, schema=schema, timeout=timeout)
    except (ValueError, TypeError) as exc:  # the driver rejected the URL
        raise CLIError(f"invalid store URL {redact_url(url or '')!r}: {exc}") from exc


def describe_store(store: MessageStore) -> str:
    """Where ``store`` keeps its data, for messages: ``"sqlite at /path"``, ``"redis at host:port/0"``."""
    for attribute in ("path", "address"):
        where = getattr(store, attribute, None)
        if where is not None:
            return f"{store.backend} at {where}"
    connection = getattr(store, "connection", None)
    address = getattr(connection, "address", None)
    return f"{store.backend} at {address}" if address is not None else store.backend
