"""API keys: who a request comes from.

A key file maps tenants to the SHA-256 digests of their keys, one ``<tenant> sha256:<hex>`` per
line (``#`` comments and blank lines skipped): the keys themselves are never stored. A request
names its key as ``Authorization: Bearer <key>``; its tenant is then the isolation key of every
session it touches. :meth:`ApiKeys.generate` makes a key and its line.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..errors import AgentkeepError
from ..sessions import check_isolation_key

__all__ = ["LOCAL_TENANT", "WHOLE_STORE", "ApiKeyFileError", "ApiKeys"]

LOCAL_TENANT: Final = "local"
"""The tenant of every request to a host without API keys (which serves loopback only)."""
WHOLE_STORE: Final = ""
"""The "tenant" of an inspector host without keys (``agentkeep inspect``): the store's operator, who
sees every conversation under its stored id (``alice::chat-1``, or ``demo-1`` as ``agentkeep chat``
stores it). No request of an :class:`~agentkeep.host.AgentHost` ever runs as it."""

_LINE: Final = re.compile(r"(?P<tenant>\S+)\s+sha256:(?P<digest>[0-9a-f]{64})")


class ApiKeyFileError(AgentkeepError, ValueError):
    """An API key file that cannot be used (names the file and line, never a key)."""


def _checked_tenant(tenant: str) -> str:
    if re.fullmatch(r"\S+", tenant) is None:
        raise ApiKeyFileError(f"a tenant is one word, not {tenant!r}")
    try:
        check_isolation_key(tenant)
    except ValueError as exc:
        raise ApiKeyFileError(f"tenant {tenant!r} cannot be used: {exc}") from exc
    return tenant


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class ApiKeys:
    """API key digests and the tenant each one belongs to.

    Args:
        digests: SHA-256 hex digest of a key to its tenant.

    Raises:
        ApiKeyFileError: A tenant that cannot be an isolation key, or a malformed digest.
    """

    def __init__(self, digests: Mapping[str, str]) -> None:
        self._tenants: dict[str, str] = {}
        for digest, tenant in digests.items():
            if re.fullmatch(r"[0-9a-f]{64}", digest) is None:
                raise ApiKeyFileError("an API key digest must be 64 lowercase hex digits")
            self._tenants[digest] = _checked_tenant(tenant)

    def __len__(self) -> int:
        return len(self._tenants)

    def __repr__(self) -> str:
        return f"ApiKeys({len(self._tenants)} keys, {len(set(self._tenants.values()))} tenants)"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ApiKeys:
        """The keys of a key file (see the module docs).

        Raises:
            ApiKeyFileError: The file cannot be read or has a malformed line.
        """
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ApiKeyFileError(f"API key file {str(where)!r} cannot be read: {exc}") from exc
        digests: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            found = _LINE.fullmatch(line)
            if found is None:
                raise ApiKeyFileError(
                    f"API key file {str(where)!r}, line {number}: not '<tenant> sha256:<hex>'"
                )
            digests[found["digest"]] = found["tenant"]
        if not digests:
            raise ApiKeyFileError(f"API key file {str(where)!r} holds no keys")
        return cls(digests)

    @staticmethod
    def generate(tenant: str) -> tuple[str, str]:
        """A new key for ``tenant`` and the key-file line that admits it.

        Raises:
            ApiKeyFileError: ``tenant`` cannot be an isolation key.
        """
        key = "ak_" + secrets.token_urlsafe(32)
        return key, f"{_checked_tenant(tenant)} sha256:{_digest(key)}"

    def tenant_of(self, authorization: str | None) -> str | None:
        """The tenant an ``Authorization`` header value belongs to, or ``None`` (no or unknown key)."""
        if not authorization:
            return None
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        return self._tenants.get(_digest(key.strip()))
