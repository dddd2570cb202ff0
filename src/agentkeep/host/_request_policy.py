"""What the host checks of every request before any endpoint sees it, and the headers it adds to
every answer (:class:`RequestPolicy`, the outermost layer after the access log).

**No cross-site writes.** A web page of another site can make the user's browser send a
"simple" request to the host (a form post, or a ``fetch`` with ``Content-Type: text/plain``)
without asking the host first, and a host without API keys trusts every loopback client: such a
page could inject a message into the user's agent. So a request that changes something
(``POST``, ``PUT``, ``PATCH``) outside the inspector must say its body is JSON
(``application/json`` or a ``+json`` type; 415 otherwise), which a browser sends cross-site only
after a CORS preflight the host never grants. And on a host without API keys, a changing request
(those and ``DELETE``) that a browser marks as coming from another origin (``Sec-Fetch-Site``
other than ``same-origin`` / ``none``, or an ``Origin`` that is not the host's own) is refused
with 403. Clients that are not browsers send neither header and are not affected. The inspector
page's own changes carry ``HX-Request``, which a cross-site page cannot send without a preflight
either (see :mod:`agentkeep.host.inspector`).

**One key.** A request with more than one ``Authorization`` header is refused (400): servers and
proxies disagree on which one counts.

**Turns counted.** A turn an endpoint admitted (:meth:`~agentkeep.host.AgentHost.admit_turn`)
counts against its tenant's bound until the request ends here, however it ends.

**Answers.** Every answer carries ``X-Content-Type-Options: nosniff`` and, unless it set its own,
``Cache-Control: no-store`` (answers hold conversation data; nothing of them belongs in a cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._http import error_response

if TYPE_CHECKING:
    from ._app import AgentHost

__all__ = ["TURN_SLOT", "RequestPolicy"]

TURN_SLOT: Final = "agentkeep.turn_slot"
"""Where a request's scope state names the tenant whose turn it counts
(:meth:`~agentkeep.host.AgentHost.admit_turn`), ended when the request is."""

_WITH_BODY: Final = frozenset({"POST", "PUT", "PATCH"})
_CHANGING: Final = _WITH_BODY | {"DELETE"}
_INSPECTOR: Final = "/inspector"
_SAME_ORIGIN: Final = frozenset({b"same-origin", b"none"})
_NOSNIFF: Final = (b"x-content-type-options", b"nosniff")
_NO_STORE: Final = (b"cache-control", b"no-store")


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _same_origin(origin: bytes, scope: Scope, host: bytes | None) -> bool:
    """Whether the ``Origin`` header names the host the request was sent to."""
    if host is None:
        return False
    parts = urlsplit(origin.decode("latin-1"))
    scheme = scope.get("scheme", "http")
    if parts.scheme != scheme or not parts.netloc:
        return False
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    named = host.decode("latin-1").lower()
    given = parts.netloc.lower()
    return given == named or given + default == named or given == named + default


class RequestPolicy:
    """ASGI middleware: the checks and headers of the module docs, in front of ``app``."""

    def __init__(self, app: ASGIApp, *, host: AgentHost) -> None:
        self.app = app
        self.host = host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            status, kind, message = refusal
            await error_response(status, kind, message)(scope, receive, self._headed(send))
            return
        try:
            await self.app(scope, receive, self._headed(send))
        finally:  # the request is over, its streamed answer too (or the client went away)
            tenant = scope.get("state", {}).pop(TURN_SLOT, None)
            if tenant is not None:
                self.host.tenant_turns.leave(tenant)

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        method: str = scope["method"]
        authorization = 0
        content_type = origin = fetch_site = host = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization += 1
            elif name == b"content-type":
                content_type = value
            elif name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                fetch_site = value
            elif name == b"host":
                host = value
        if authorization > 1:
            return 400, "invalid_request", "send one Authorization header"
        if method not in _CHANGING:
            return None
        if self.host.api_keys is None and (
            (fetch_site is not None and fetch_site.lower() not in _SAME_ORIGIN)
            or (origin is not None and not _same_origin(origin, scope, host))
        ):
            return 403, "forbidden", "a host without API keys refuses changes sent from another site"
        path: str = scope["path"]
        if method in _WITH_BODY and not path.startswith(_INSPECTOR) and not _is_json(content_type):
            return 415, "unsupported_media_type", "send the body as application/json"
        return None

    @staticmethod
    def _headed(send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {name.lower() for name, _ in headers}
                if b"cache-control" not in names:
                    headers.append(_NO_STORE)
                if b"x-content-type-options" not in names:
                    headers.append(_NOSNIFF)
                message["headers"] = headers
            await send(message)

        return sending
