"""The session inspector: a web page, served by the host at ``/inspector/``, to look at what an
agent remembers (the tenant's own sessions only).

Server-rendered HTML (Jinja2 templates, every value escaped) with htmx for the parts that load
into the page; all assets ship in ``static/`` (htmx with its licence), nothing is fetched from
elsewhere. The page itself holds no data; what it loads comes from fragment endpoints that
authenticate like the rest of the host: the API key the person types is kept in the tab's
``sessionStorage`` and sent as an ``Authorization`` header by ``static/inspector.js`` (never a
cookie, so another site cannot make a browser send it). With no keys configured, the host serves
loopback clients as the local tenant, the page included.

* ``GET /inspector/``: the page (agents to pick from, the key, a search box, two panels).
* ``GET /inspector/sessions?agent=&q=``: the sessions list, newest first, its first page; with
  ``after=`` (the sessions API's ``next``) the rows of the page after it, which the "more" button
  appends to the list.
* ``GET /inspector/session?agent=&id=&raw=``: one session: the compacted view (what the next
  run loads) or the raw log (excluded originals marked), its newest messages.
* ``GET /inspector/messages?agent=&id=&raw=&offset=``: the page of messages before those shown.
* ``GET /inspector/groups?agent=&id=``: the view's message groups and a compaction form.
* ``POST /inspector/compaction?agent=&id=[&apply=true]`` (form: ``strategy``, ``keep``,
  ``max_tokens``, ``target_tokens``): the preview (before/after counts, the groups that would go),
  or with ``apply`` the same recorded non-destructively.
* ``DELETE /inspector/session?agent=&id=``: the session's history and session.
* ``/inspector/memory...``: the memory panel, on a host that keeps long-term memory (a tenant's
  users, each one's memories, search, a key's history, delete, forget; see :mod:`._memory_panel`).

Every answer carries a Content-Security-Policy that lets only the page's own files run (no inline
script, nothing from another origin, no framing), and htmx is configured not to evaluate code from
attributes. What changes data (compaction, delete) also needs the ``HX-Request`` header htmx sends: a page of
another site cannot send it without the browser asking the host first (CORS), so with no keys on
loopback it still cannot make a person's browser compact or delete. Exports are fetched by the
script from the sessions API (with the key) and saved as files.

The data comes from the sessions API's queries (:class:`~agentkeep.host._sessions_api.SessionsAPI`)
and the memory API's (:class:`~agentkeep.host._memory.MemoryAPI`). The templates, the headers
and the check on changes live in :mod:`._pages`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from ...compaction.plans import StrategyName
from .._auth import WHOLE_STORE
from .._http import HTTPProblem
from .._sessions_api import CompactionRequest, SessionsAPI
from ._memory_panel import install_memory_panel
from ._pages import PACKAGE, from_this_page, render

if TYPE_CHECKING:
    from .._app import AgentHost

__all__ = ["install_inspector"]

SESSIONS_PER_PAGE = 50
MESSAGES_PER_PAGE = 50


def _results(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Tool results by call id, to fold them into their calls."""
    found: dict[str, str] = {}
    for message in messages:
        for content in message["contents"]:
            if content.get("type") == "function_result":
                value = content.get("exception") or content.get("result")
                found[str(content.get("call_id"))] = value if isinstance(value, str) else repr(value)
    return found


class _Inspector:
    def __init__(self, host: AgentHost) -> None:
        self.host = host
        self.api = SessionsAPI(host)

    async def page(self) -> HTMLResponse:
        whole_store = self.host.api_keys is None and self.host.local_tenant == WHOLE_STORE
        return render(
            "page.html",
            agents=list(self.host.agents),
            memory=self.host.memory_store is not None,
            whole_store=whole_store,
        )

    async def sessions(self, request: Request, agent: str = "", q: str = "", after: str = "") -> Response:
        tenant = self.host.tenant_of(request)
        page = await self.api.sessions_page(tenant, agent, limit=SESSIONS_PER_PAGE, after=after or None, q=q)
        if after:  # the rows that go where the "more" row was, and the next "more" row
            return render("session_rows.html", page=page, agent=agent, q=q, first=False)
        store = self.host.agents[agent].session_store.backend
        return render("sessions.html", page=page, agent=agent, q=q, store=store, first=True)

    async def _messages(
        self, request: Request, agent: str, session_id: str, raw: bool, offset: int
    ) -> dict[str, Any]:
        tenant = self.host.tenant_of(request)
        page = await self.api.messages_page(
            tenant, agent, session_id, raw=raw, limit=MESSAGES_PER_PAGE, offset=offset
        )
        results = _results(page["messages"])
        _, history = self.api.history(agent)
        return {
            "page": page,
            "agent": agent,
            "limit": MESSAGES_PER_PAGE,
            "results": results,
            "source": history.source_id,
        }

    async def session(self, request: Request, agent: str = "", id: str = "", raw: bool = False) -> Response:
        return render("session.html", **await self._messages(request, agent, id, raw, 0))

    async def groups(self, request: Request, agent: str = "", id: str = "") -> Response:
        tenant = self.host.tenant_of(request)
        groups = await self.api.groups_page(tenant, agent, id, tokenizer="estimate")
        return render(
            "groups.html",
            groups=groups,
            agent=agent,
            going=[],
            strategies=[strategy.value for strategy in StrategyName],
            turns=_tokens_per_turn(groups),
        )

    async def messages(
        self, request: Request, agent: str = "", id: str = "", raw: bool = False, offset: int = 0
    ) -> Response:
        return render("messages.html", **await self._messages(request, agent, id, raw, offset))


def _form_number(form: dict[str, list[str]], name: str) -> int | None:
    value = (form.get(name) or [""])[0].strip()
    if not value:
        return None
    if not value.isdigit():
        raise HTTPProblem(422, "invalid_request", f"{name} is a whole number")
    return int(value)


def _tokens_per_turn(groups: dict[str, Any]) -> list[tuple[str, int, float]]:
    """The chart's bars: each turn (``system`` for what precedes the first) with its tokens and its
    share of the largest turn's."""
    totals: dict[str, int] = {}
    for group in groups["groups"]:
        turn = "system" if group["turn"] is None else str(group["turn"] + 1)
        totals[turn] = totals.get(turn, 0) + group["tokens"]
    largest = max(totals.values(), default=0) or 1
    return [(turn, tokens, tokens / largest) for turn, tokens in totals.items()]


def _going(groups: dict[str, Any], excluded: list[str]) -> list[int]:
    """The indexes of the groups a compaction takes out of the view whole."""
    out = set(excluded)
    return [
        index
        for index, group in enumerate(groups["groups"])
        if group["messages"] and all(message_id in out for message_id in group["messages"])
    ]


class _Changes:
    """The inspector's endpoints that change data."""

    def __init__(self, inspector: _Inspector) -> None:
        self.inspector = inspector

    async def compaction(
        self, request: Request, agent: str = "", id: str = "", apply: bool = False
    ) -> Response:
        host, api = self.inspector.host, self.inspector.api
        tenant = host.tenant_of(request)
        from_this_page(request)
        form = parse_qs((await host.body_of(request)).decode("utf-8", "replace"))
        strategy = (form.get("strategy") or [""])[0]
        if strategy not in set(StrategyName):
            raise HTTPProblem(422, "invalid_request", f"no strategy {strategy!r}")
        body = CompactionRequest(
            strategies=[StrategyName(strategy)],
            keep=_form_number(form, "keep"),
            max_tokens=_form_number(form, "max_tokens"),
            target_tokens=_form_number(form, "target_tokens"),
        )
        groups = await api.groups_page(tenant, agent, id, tokenizer="estimate")
        report = await api.compaction(tenant, agent, id, body, dry_run=not apply)
        return render(
            "compaction.html",
            report=report,
            groups=groups,
            going=_going(groups, report["excluded"]),
            query={"agent": agent, "id": id},
        )

    async def delete(self, request: Request, agent: str = "", id: str = "") -> Response:
        host, api = self.inspector.host, self.inspector.api
        tenant = host.tenant_of(request)
        from_this_page(request)
        await api.delete_session(tenant, agent, id)
        response = render("deleted.html", session=id)
        response.headers["HX-Trigger"] = "reload"  # the sessions list loads again
        return response


def install_inspector(host: AgentHost, app: FastAPI) -> None:
    """Add the inspector's page, fragments and static files to ``app``."""
    inspector = _Inspector(host)

    async def to_page() -> RedirectResponse:
        return RedirectResponse("inspector/", status_code=307)

    app.get("/inspector", include_in_schema=False)(to_page)
    app.get("/inspector/", response_class=HTMLResponse, include_in_schema=False)(inspector.page)
    app.get("/inspector/sessions", response_model=None, include_in_schema=False)(inspector.sessions)
    app.get("/inspector/session", response_model=None, include_in_schema=False)(inspector.session)
    app.get("/inspector/messages", response_model=None, include_in_schema=False)(inspector.messages)
    app.get("/inspector/groups", response_model=None, include_in_schema=False)(inspector.groups)
    changes = _Changes(inspector)
    app.post("/inspector/compaction", response_model=None, include_in_schema=False)(changes.compaction)
    app.delete("/inspector/session", response_model=None, include_in_schema=False)(changes.delete)
    install_memory_panel(host, app)
    app.mount(
        "/inspector/static",
        StaticFiles(directory=str(PACKAGE / "static"), check_dir=False),
        name="inspector-static",
    )
