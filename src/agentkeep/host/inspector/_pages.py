"""What every page and fragment of the inspector shares: the templates (read once, at import),
the security headers of every answer, and the check that a change comes from the page itself."""

from __future__ import annotations

import mimetypes
from importlib import resources
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse

from .._http import HTTPProblem

__all__ = ["HEADERS", "PACKAGE", "TEMPLATES", "from_this_page", "render"]

mimetypes.init()  # Starlette names static files' types with it; its first use reads system files
PACKAGE = resources.files("agentkeep.host.inspector")
TEMPLATES = jinja2.Environment(
    # read once, at import: rendering in the event loop never touches the disk
    loader=jinja2.DictLoader(
        {item.name: item.read_text("utf-8") for item in (PACKAGE / "templates").iterdir() if item.is_file()}
    ),
    autoescape=True,  # message text is untrusted: everything is escaped
    undefined=jinja2.StrictUndefined,
)


HEADERS: dict[str, str] = {
    # Only the page's own files run or load: no inline script, no other origin, no framing.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def render(name: str, **values: Any) -> HTMLResponse:
    """The template ``name`` filled with ``values`` (escaped), with the inspector's headers."""
    return HTMLResponse(TEMPLATES.get_template(name).render(**values), headers=HEADERS)


def from_this_page(request: Request) -> None:
    """Refuse a change not made by the page's own script (see the inspector's module docs).

    Raises:
        HTTPProblem: 403.
    """
    if request.headers.get("hx-request") != "true":
        raise HTTPProblem(403, "forbidden", "changes are made from the inspector page")
