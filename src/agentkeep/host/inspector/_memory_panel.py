"""The inspector's memory panel: a tenant's users and what long-term memory keeps of each, over the
queries of the memory API (:class:`~agentkeep.host._memory.MemoryAPI`).

* ``GET /inspector/memory/users?q=&offset=&tenant=``: the users with memories (a row per user and
  agent scope), most recently updated first, 50 a page.
* ``GET /inspector/memory?user=&agent=&tenant=``: one user's newest memories (kind, key, text,
  source session, times), each keyed one with its history a click away.
* ``GET /inspector/memory/search?user=&agent=&q=&tenant=``: the memories nearest in meaning, with
  their scores (a host with an embedder).
* ``GET /inspector/memory/history?user=&agent=&key=&tenant=``: every value a key held.
* ``DELETE /inspector/memory/record?user=&agent=&id=&tenant=``: one memory.
* ``DELETE /inspector/memory/user?user=&tenant=``: forget the user (every agent's memories, their
  history and embeddings).

``tenant=`` counts only on a host that shows the whole store (``agentkeep inspect`` without keys);
elsewhere a request sees its own tenant's users. The deletions need the page's ``HX-Request``
header, as the session inspector's changes do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import Response

from .._memory import MemoryAPI
from ._pages import from_this_page, render

if TYPE_CHECKING:
    from .._app import AgentHost

__all__ = ["MEMORIES_SHOWN", "USERS_PER_PAGE", "install_memory_panel"]

USERS_PER_PAGE = 50
MEMORIES_SHOWN = 200


def _query(user: str, agent: str | None, tenant: str | None) -> dict[str, str]:
    """The parameters that name a scope again in the fragments' links."""
    found = {"user": user}
    if agent:
        found["agent"] = agent
    if tenant:
        found["tenant"] = tenant
    return found


class _MemoryPanel:
    def __init__(self, host: AgentHost) -> None:
        self.host = host
        self.api = MemoryAPI(host)

    def _tenant(self, request: Request, tenant: str | None) -> str | None:
        return self.api.tenant(self.host.tenant_of(request), tenant)

    async def users(
        self, request: Request, q: str = "", offset: int = 0, tenant: str | None = None
    ) -> Response:
        named = self._tenant(request, tenant)
        page = await self.api.users(named, q=q, limit=USERS_PER_PAGE, offset=offset)
        return render("memory_users.html", page=page, q=q, tenant=tenant or "")

    async def memories(
        self, request: Request, user: str = "", agent: str | None = None, tenant: str | None = None
    ) -> Response:
        scope = self.api.scope(self._tenant(request, tenant), user, agent)
        memories = await self.api.memories(scope, kind=None, limit=MEMORIES_SHOWN)
        return render(
            "memory.html",
            scope=scope,
            memories=memories,
            shown=MEMORIES_SHOWN,
            query=_query(scope.user_id, scope.agent_id, tenant),
            searchable=self.host.memory_embedder is not None,
        )

    async def search(
        self,
        request: Request,
        user: str = "",
        agent: str | None = None,
        q: str = "",
        tenant: str | None = None,
    ) -> Response:
        scope = self.api.scope(self._tenant(request, tenant), user, agent)
        hits = await self.api.search(scope, q, k=10)
        return render("memory_hits.html", hits=hits, q=q, query=_query(scope.user_id, scope.agent_id, tenant))

    async def history(
        self,
        request: Request,
        user: str = "",
        agent: str | None = None,
        key: str = "",
        tenant: str | None = None,
    ) -> Response:
        scope = self.api.scope(self._tenant(request, tenant), user, agent)
        return render("memory_history.html", key=key, versions=await self.api.history(scope, key))

    async def delete(
        self,
        request: Request,
        user: str = "",
        agent: str | None = None,
        id: str = "",
        tenant: str | None = None,
    ) -> Response:
        scope = self.api.scope(self._tenant(request, tenant), user, agent)
        from_this_page(request)
        await self.api.delete(scope, id)
        response = Response(status_code=200)  # htmx removes the memory's row
        response.headers["HX-Trigger"] = "memory-changed"
        return response

    async def forget(self, request: Request, user: str = "", tenant: str | None = None) -> Response:
        named = self._tenant(request, tenant)
        from_this_page(request)
        removed = await self.api.forget(named, user)
        response = render("memory_forgotten.html", user=user, removed=removed)
        response.headers["HX-Trigger"] = "memory-changed"  # the users list loads again
        return response


def install_memory_panel(host: AgentHost, app: FastAPI) -> None:
    """Add the memory panel's fragments to ``app``."""
    panel = _MemoryPanel(host)
    app.get("/inspector/memory/users", response_model=None, include_in_schema=False)(panel.users)
    app.get("/inspector/memory", response_model=None, include_in_schema=False)(panel.memories)
    app.get("/inspector/memory/search", response_model=None, include_in_schema=False)(panel.search)
    app.get("/inspector/memory/history", response_model=None, include_in_schema=False)(panel.history)
    app.delete("/inspector/memory/record", response_model=None, include_in_schema=False)(panel.delete)
    app.delete("/inspector/memory/user", response_model=None, include_in_schema=False)(panel.forget)
