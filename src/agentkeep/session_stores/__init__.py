"""Session stores (the hosting layer): save and restore whole sessions by conversation id.

* :class:`AgentSessionStore` — the contract (``save_session`` / ``get_session`` /
  ``delete_session``, optimistic versions); :class:`DelegatingSessionStore` — base for decorators.
* :class:`NoopSessionStore` — remembers nothing (the hosting default).
* :class:`InMemorySessionStore` — process memory (development, tests).
* :class:`FileSystemSessionStore` — one JSON file per session, atomic writes, safe across processes.
* :class:`IsolationKeyScopedSessionStore` — a per-tenant view of another store.
* :class:`SessionStore` / :class:`FileSessionStore` — the reference Python edition's stores, keyed
  by a session id alone (``get`` / ``set`` / ``delete``), in memory and as files.
* :class:`SupportsPayloadRewrite` / :class:`StoredPayload` — payloads as stored, for key rotation
  (``docs/encryption.md``); the durable stores take ``key_ring=`` to encrypt them.

The SQLite, Redis and PostgreSQL session stores live in their own modules
(``agentkeep.session_stores.sqlite``, ...) so that importing this package needs no database driver.
See ``docs/session-stores.md``.
"""

from .base import (
    AgentSessionStore,
    DelegatingSessionStore,
    StoredPayload,
    SupportsPayloadRewrite,
    agent_key,
    session_version,
    set_session_version,
)
from .by_session_id import FileSessionStore, SessionStore
from .filesystem import FileSystemSessionStore
from .isolation import IsolationKeyScopedSessionStore
from .memory import InMemorySessionStore, NoopSessionStore

__all__ = [
    "AgentSessionStore",
    "DelegatingSessionStore",
    "FileSessionStore",
    "FileSystemSessionStore",
    "InMemorySessionStore",
    "IsolationKeyScopedSessionStore",
    "NoopSessionStore",
    "SessionStore",
    "StoredPayload",
    "SupportsPayloadRewrite",
    "agent_key",
    "session_version",
    "set_session_version",
]
