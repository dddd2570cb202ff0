"""The ``--store`` option: :mod:`agentkeep.store_urls` with its URL errors reported as :class:`CLIError`.

The URL forms are documented once, in :mod:`agentkeep.store_urls` (and ``docs/cli.md``).
"""

from __future__ import annotations

from .. import store_urls
from ..encryption import KeyRing
from ..errors import CLIError, StoreURLError
from ..message_stores.base import MessageStore
from ..store_urls import STORE_URL_HELP, StoreLocation, describe_store, redact_url

__all__ = [
    "STORE_URL_HELP",
    "CLIError",
    "StoreLocation",
    "describe_store",
    "key_ring_from_env",
    "missing_session",
    "open_store",
    "parse_store_url",
    "redact_url",
]


def parse_store_url(url: str | None) -> StoreLocation:
    """:func:`agentkeep.store_urls.parse_store_url`.

    Raises:
        CLIError: An unknown scheme or a malformed URL.
    """
    try:
        return store_urls.parse_store_url(url)
    except StoreURLError as exc:
        raise CLIError(str(exc)) from exc


def open_store(url: str | None, *, timeout: float = 5.0) -> MessageStore:
    """:func:`agentkeep.store_urls.open_message_store`: a new store the caller owns, encrypting
    with :func:`key_ring_from_env`.

    Raises:
        CLIError: An unknown scheme or a malformed URL.
        ImportError: The backend's driver is not installed (the message names the extra).
    """
    try:
        return store_urls.open_message_store(url, timeout=timeout, key_ring=key_ring_from_env())
    except StoreURLError as exc:
        raise CLIError(str(exc)) from exc


def key_ring_from_env() -> KeyRing | None:
    """The key ring ``$AGENTKEEP_KEYS`` or ``$AGENTKEEP_KEYS_FILE`` gives (``None``: neither set):
    every command reads and writes encrypted stores with it (see :mod:`agentkeep.encryption`).

    Raises:
        KeyRingError: The variable or the file is malformed.
    """
    return KeyRing.from_env()


def missing_session(store: MessageStore, conversation_id: str) -> CLIError:
    """The error for a session ``store`` does not hold."""
    return CLIError(f"no session {conversation_id!r} in {describe_store(store)}")
