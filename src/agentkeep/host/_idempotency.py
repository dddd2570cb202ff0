"""Retries of ``POST /v1/responses`` that store once: the ``Idempotency-Key`` request header.

A client that sends a request again after a dropped connection, a timeout or a crashed process
cannot know whether the first one was stored. With an ``Idempotency-Key`` (1 to 255 visible
ASCII characters, the client's choice, one per logical request) the host answers a request it has
answered before from what it stored: the same response (streamed again as events, when asked to
stream), nothing run or stored again. The same key with another body is refused (422
``idempotency_key_reused``): a key names one request (whether its answer is streamed or not).

Where the answer is found: a response's record (in its conversation's session, see
:mod:`agentkeep.host._conversations`) carries the key and the SHA-256 of the request body that
made it. A request with a key that starts a conversation, or branches from an earlier response,
does so under a conversation id derived from the tenant, the agent and the key
(:func:`keyed_conversation_id`) instead of a random one, so its retry finds it; one that
continues a conversation's newest response records the key in that conversation. The records
live as long as the response records do (the newest ``KEPT_RESPONSES`` of a conversation).
Two requests with one key at the same time in one process take turns on the conversation's lock
(the second finds the first's answer); across processes they may both run.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final

from fastapi import Request

from ._http import HTTPProblem

__all__ = ["HEADER", "IdempotencyKey", "keyed_conversation_id"]

HEADER: Final = "idempotency-key"
_KEY: Final = re.compile(r"[\x21-\x7e]{1,255}")


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """A request's ``Idempotency-Key`` and the SHA-256 of what it asks (its body, read)."""

    key: str
    fingerprint: str

    @classmethod
    def of(cls, request: Request, body: bytes) -> IdempotencyKey | None:
        """The key ``request`` names, if any, for a request that asks ``body`` (its body in a
        canonical form, without what does not change the answer, such as ``stream``).

        Raises:
            HTTPProblem: 400 for a malformed key or two of them.
        """
        given = request.headers.getlist(HEADER)
        if not given:
            return None
        if len(given) > 1 or _KEY.fullmatch(given[0]) is None:
            raise HTTPProblem(
                400,
                "invalid_request",
                "Idempotency-Key is one header of 1 to 255 visible ASCII characters",
                param="Idempotency-Key",
            )
        return cls(given[0], hashlib.sha256(body).hexdigest())

    def record(self) -> dict[str, str]:
        """What a response's record keeps of the key."""
        return {"key": self.key, "fingerprint": self.fingerprint}

    def answered(self, records: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """The response an earlier request with this key made, among a conversation's response
        ``records`` (``None``: none did).

        Raises:
            HTTPProblem: 422 when that request had another body.
        """
        for record in records.values():
            kept: Any = record.get("idempotency")
            if isinstance(kept, dict) and kept.get("key") == self.key:  # pyright: ignore[reportUnknownMemberType]
                if kept.get("fingerprint") != self.fingerprint:  # pyright: ignore[reportUnknownMemberType]
                    raise HTTPProblem(
                        422,
                        "idempotency_key_reused",
                        "this Idempotency-Key was sent with another request",
                        param="Idempotency-Key",
                    )
                response: dict[str, Any] = record["response"]
                return response
        return None


def keyed_conversation_id(tenant: str, agent: str, key: str) -> str:
    """The conversation a keyed request starts or branches into: ``conv_`` and 32 hex digits of
    the SHA-256 of tenant, agent and key."""
    digest = hashlib.sha256("\x00".join((tenant, agent, key)).encode()).hexdigest()
    return f"conv_{digest[:32]}"
