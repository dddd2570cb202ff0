"""Long-term memory in the host: whose memories a turn reads and writes, and the memory API under
``/api/memory/`` (what the inspector's memory panel shows, too).

**Whose memories.** The tenant comes from the API key; the user is whom the tenant's own
application says it is serving: the ``X-Agentkeep-User`` header on any protocol, or the Responses
API's own ``user`` field (both at once must agree). The first turn that names a user binds the
conversation to that user (:func:`~agentkeep.memory.semantic.set_memory_user`, kept in the
session's state and saved before the run); a later turn may leave the user out, and one that
names another user is refused as not found. A request naming no user acts for the tenant. A turn
of a conversation with no user reads and writes no memories. A tenant can only ever name users of
its own: every memory scope carries the tenant. The ``/api/`` endpoints are the tenant's
administration: they see all its users.

**The API**, over the host's memory store (``AgentHost(memory_store=...)``; 404 on a host with none):

* ``GET /api/memory/users?q=&limit=&after=``: the tenant's users with memories (one row per user
  and agent scope), most recently updated first (``q``: a part of the user id); ``next`` is the
  cursor of the page after it (``offset=`` still works, at the cost of what it skips).
* ``GET /api/memory/memories?user=&agent=&kind=&limit=``: a user's current memories, newest first
  (``agent`` left out: the memories the user's agents share).
* ``GET /api/memory/search?user=&agent=&q=&k=``: the memories nearest in meaning to ``q`` (needs
  the host's embedder: ``AgentHost(memory_embedder=...)``; 501 without one).
* ``GET /api/memory/history?user=&agent=&key=``: every value a key held, oldest first.
* ``DELETE /api/memory/memories/{id}?user=&agent=``: one memory.
* ``DELETE /api/memory/memories?user=``: every memory of the user in the tenant, every agent's,
  with their history and embeddings (what a request to erase a person's data needs).

A host without API keys that shows the whole store (``agentkeep inspect``) has no tenant of its
own: there ``tenant=`` names the tenant to look at (absent: the scopes without one).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ..errors import ChatClientError, IsolationError, ListingCursorError, MemoryFormatError, StorageError
from ..memory import MemoryRecord, MemoryScope, MemoryStore
from ..memory.semantic import memory_scope, set_memory_user
from ._auth import WHOLE_STORE
from ._http import HTTPProblem
from ._schemas import ErrorBody, MemoryHits, MemoryList, MemoryUsers

if TYPE_CHECKING:
    from ..sessions import AgentSession
    from ._app import AgentHost

__all__ = [
    "USER_HEADER",
    "MemoryAPI",
    "bind_user",
    "install_memory_api",
    "memory_json",
    "readable_by",
    "user_of",
]

USER_HEADER: Final = "X-Agentkeep-User"
MAX_USER_ID: Final = 256
MAX_PAGE: Final = 500
"""The most users one page of ``/api/memory/users`` lists."""
MAX_OFFSET: Final = 1_000_000_000
MAX_MEMORIES: Final = 1_000
"""The most memories one ``/api/memory/memories`` answer lists (newest first)."""


def checked_user(user: str) -> str:
    """``user`` if it can name a user (see :class:`~agentkeep.memory.MemoryScope`), at most
    :data:`MAX_USER_ID` characters, without surrounding white space (``" maren"`` is not another
    user: it is refused).

    Raises:
        HTTPProblem: 400.
    """
    if len(user) > MAX_USER_ID:
        raise HTTPProblem(400, "invalid_request", f"a user id is at most {MAX_USER_ID} characters")
    if user != user.strip():
        raise HTTPProblem(400, "invalid_request", "a user id has no white space around it")
    try:
        MemoryScope(user)
    except MemoryFormatError as exc:
        raise HTTPProblem(400, "invalid_request", str(exc)) from exc
    return user


def _header(request: Request) -> str | None:
    """The ``X-Agentkeep-User`` header as UTF-8 (Starlette's own reading is Latin-1), once.

    Raises:
        HTTPProblem: 400 for two of them, or bytes that are not UTF-8.
    """
    name = USER_HEADER.lower().encode("ascii")
    values: list[bytes] = [value for key, value in request.scope.get("headers", ()) if key.lower() == name]
    if not values:
        return None
    if len(values) > 1:
        raise HTTPProblem(400, "invalid_request", f"one {USER_HEADER} header, not {len(values)}")
    try:
        return values[0].decode("utf-8").strip(" \t")  # HTTP's optional white space
    except UnicodeDecodeError as exc:
        raise HTTPProblem(400, "invalid_request", f"the {USER_HEADER} header is not UTF-8") from exc


def user_of(request: Request, named: str | None = None) -> str | None:
    """The user ``request`` names (see the module docs): its ``X-Agentkeep-User`` header or
    ``named`` (a protocol's own field), ``None`` if neither.

    Raises:
        HTTPProblem: 400 for a malformed id, or two that differ.
    """
    header = _header(request)
    if header is not None and named is not None and header != named:
        raise HTTPProblem(400, "invalid_request", f"the {USER_HEADER} header and the body name two users")
    user = header if header is not None else named
    return None if user is None else checked_user(user)


def bind_user(session: AgentSession, user_id: str | None, *, conversation_id: str) -> bool:
    """Bind ``session`` to ``user_id`` on its first turn that names one (see the module docs);
    whether it was bound just now (the caller saves it before the run, so that of two turns
    naming two users at once only one can own the conversation).

    Raises:
        IsolationError: The conversation is another user's (answered as not found).
    """
    if user_id is None:
        return False
    bound = memory_scope(session)
    if bound is None:
        set_memory_user(session, user_id)
        return True
    if bound.user_id != user_id:
        raise IsolationError(
            f"conversation {conversation_id!r} belongs to another user",
            backend="host",
            conversation_id=conversation_id,
        )
    return False


def readable_by(session: AgentSession, user_id: str | None) -> bool:
    """Whether a request naming ``user_id`` may read ``session`` (a user-bound conversation is
    hidden from a request naming another user; one naming none reads as the tenant)."""
    bound = memory_scope(session)
    return user_id is None or bound is None or bound.user_id == user_id


def memory_json(record: MemoryRecord) -> dict[str, Any]:
    """A memory as the API shows it (its embedding left out)."""
    return {
        "id": record.id,
        "text": record.text,
        "kind": record.kind,
        "key": record.key,
        "source_session_id": record.source_session_id,
        "metadata": record.metadata,
        "created_at": record.created_at.isoformat(),
        "updated_at": None if record.updated_at is None else record.updated_at.isoformat(),
        "superseded_by": record.superseded_by,
    }


def _text(value: str | None, name: str, *, required: bool = True) -> str | None:
    if value is None or not value.strip():
        if required:
            raise HTTPProblem(400, "invalid_request", f"give {name}")
        return None
    return value


@contextlib.asynccontextmanager
async def _store_errors() -> AsyncGenerator[None]:
    """The memory store's failures as answers: bad input 400, a store that cannot answer 503."""
    try:
        yield
    except (MemoryFormatError, ValueError) as exc:
        raise HTTPProblem(400, "invalid_request", str(exc)) from exc
    except StorageError as exc:
        raise HTTPProblem(503, "store_unavailable", str(exc)) from exc


class MemoryAPI:
    """The memory queries of a host, for the JSON API and the inspector (see the module docs)."""

    def __init__(self, host: AgentHost) -> None:
        self.host = host

    @property
    def store(self) -> MemoryStore:
        """The host's memory store.

        Raises:
            HTTPProblem: 404 on a host that keeps no memories.
        """
        if self.host.memory_store is None:
            raise HTTPProblem(404, "not_found", "this host keeps no long-term memory")
        return self.host.memory_store

    def tenant(self, tenant: str, named: str | None) -> str | None:
        """The memory tenant of a request of ``tenant`` (``named``: the ``tenant=`` parameter,
        honoured only on a host that shows the whole store).

        Raises:
            HTTPProblem: 403 for another tenant's name.
        """
        if tenant == WHOLE_STORE:
            return named or None
        if named not in (None, "", tenant):
            raise HTTPProblem(403, "forbidden", "a request sees its own tenant's memories only")
        return tenant

    def scope(self, tenant: str | None, user: str | None, agent: str | None = None) -> MemoryScope:
        """The scope a request names.

        Raises:
            HTTPProblem: 400 for a missing or malformed id.
        """
        named = checked_user(str(_text(user, "user")))
        try:
            return MemoryScope(named, tenant_id=tenant, agent_id=agent or None)
        except MemoryFormatError as exc:
            raise HTTPProblem(400, "invalid_request", str(exc)) from exc

    async def users(
        self, tenant: str | None, *, q: str, limit: int, offset: int, after: str | None = None
    ) -> dict[str, Any]:
        """A page of the tenant's memory scopes (one more is asked for, to tell if there are more),
        after the cursor ``after`` (``next`` of the previous page: a page costs what it holds)."""
        if not 1 <= limit <= MAX_PAGE or not 0 <= offset <= MAX_OFFSET:
            raise HTTPProblem(400, "invalid_request", f"limit is 1 to {MAX_PAGE}, offset 0 to {MAX_OFFSET:,}")
        if after is not None and offset:
            raise HTTPProblem(400, "invalid_request", "give after or offset, not both")
        async with _store_errors():
            try:
                found = await self.store.scopes(
                    tenant_id=tenant, q=q or None, limit=limit + 1, offset=offset, after=after
                )
            except ListingCursorError as exc:
                raise HTTPProblem(400, "invalid_request", f"after: {exc}") from exc
        return {
            "tenant": tenant,
            "users": [
                {
                    "user": s.scope.user_id,
                    "agent": s.scope.agent_id,
                    "memories": s.memories,
                    "updated_at": s.updated_at.isoformat(),
                }
                for s in found[:limit]
            ],
            "offset": offset,
            "limit": limit,
            "more": len(found) > limit,
            "next": found[limit - 1].cursor if len(found) > limit else None,
        }

    async def memories(self, scope: MemoryScope, *, kind: str | None, limit: int) -> list[dict[str, Any]]:
        if not 1 <= limit <= MAX_MEMORIES:
            raise HTTPProblem(400, "invalid_request", f"limit is 1 to {MAX_MEMORIES:,}")
        async with _store_errors():
            records = await self.store.list_memories(scope, kind=kind or None, limit=limit)
        return [memory_json(r) for r in records]

    async def search(self, scope: MemoryScope, query: str | None, *, k: int) -> list[dict[str, Any]]:
        """The ``k`` memories of ``scope`` that best match ``query`` (by meaning and words, fused),
        with their cosine scores.

        Raises:
            HTTPProblem: 501 on a host without an embedder; 400 for an empty query or a bad ``k``.
        """
        text = str(_text(query, "a query (q)"))
        if not 1 <= k <= 100:
            raise HTTPProblem(400, "invalid_request", "k is 1 to 100")
        embedder = self.host.memory_embedder
        if embedder is None:
            raise HTTPProblem(501, "not_supported", "this host has no embedder to search memories with")
        try:
            (vector,) = await embedder.embed([text])
        except (ImportError, ChatClientError) as exc:
            raise HTTPProblem(503, "model_unavailable", f"the embedding model cannot run: {exc}") from exc
        async with _store_errors():
            hits = await self.store.search(scope, vector, k=k, text=text)  # meaning and words, fused
        return [{"score": round(hit.score, 4), **memory_json(hit.record)} for hit in hits]

    async def history(self, scope: MemoryScope, key: str | None) -> list[dict[str, Any]]:
        async with _store_errors():
            return [memory_json(r) for r in await self.store.history(scope, str(_text(key, "key")))]

    async def delete(self, scope: MemoryScope, memory_id: str) -> None:
        async with _store_errors():
            deleted = await self.store.delete(scope, memory_id)
        if not deleted:
            raise HTTPProblem(404, "not_found", f"no memory {memory_id!r} of {scope.user_id!r}")

    async def forget(self, tenant: str | None, user: str | None) -> int:
        """Remove every memory of the user in the tenant (every agent's); how many were removed."""
        scope = self.scope(tenant, user)
        async with _store_errors():
            return await self.store.forget(user_id=scope.user_id, tenant_id=tenant)


class _Routes:
    """The JSON endpoints over :class:`MemoryAPI`."""

    def __init__(self, host: AgentHost) -> None:
        self.host = host
        self.api = MemoryAPI(host)

    def _scope(
        self, request: Request, user: str | None, agent: str | None, tenant: str | None
    ) -> MemoryScope:
        named = self.api.tenant(self.host.tenant_of(request), tenant)
        return self.api.scope(named, user, agent)

    async def users(
        self,
        request: Request,
        q: str = "",
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
        tenant: str | None = None,
    ) -> Response:
        named = self.api.tenant(self.host.tenant_of(request), tenant)
        return JSONResponse(await self.api.users(named, q=q, limit=limit, offset=offset, after=after))

    async def memories(
        self,
        request: Request,
        user: str | None = None,
        agent: str | None = None,
        kind: str | None = None,
        limit: int = MAX_MEMORIES,
        tenant: str | None = None,
    ) -> Response:
        scope = self._scope(request, user, agent, tenant)
        return JSONResponse({"memories": await self.api.memories(scope, kind=kind, limit=limit)})

    async def search(
        self,
        request: Request,
        user: str | None = None,
        agent: str | None = None,
        q: str | None = None,
        k: int = 5,
        tenant: str | None = None,
    ) -> Response:
        scope = self._scope(request, user, agent, tenant)
        return JSONResponse({"hits": await self.api.search(scope, q, k=k)})

    async def history(
        self,
        request: Request,
        user: str | None = None,
        agent: str | None = None,
        key: str | None = None,
        tenant: str | None = None,
    ) -> Response:
        scope = self._scope(request, user, agent, tenant)
        return JSONResponse({"memories": await self.api.history(scope, key)})

    async def delete(
        self,
        memory_id: str,
        request: Request,
        user: str | None = None,
        agent: str | None = None,
        tenant: str | None = None,
    ) -> Response:
        await self.api.delete(self._scope(request, user, agent, tenant), memory_id)
        return Response(status_code=204)

    async def forget(self, request: Request, user: str | None = None, tenant: str | None = None) -> Response:
        named = self.api.tenant(self.host.tenant_of(request), tenant)
        return JSONResponse({"removed": await self.api.forget(named, user)})


def install_memory_api(host: AgentHost, app: FastAPI) -> None:
    """Add the memory API of ``host`` to ``app``."""
    routes = _Routes(host)
    errors: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 403, 404)}

    def documented(model: type[Any]) -> dict[int | str, dict[str, Any]]:
        return {200: {"model": model}, **errors}

    app.get("/api/memory/users", response_model=None, responses=documented(MemoryUsers))(routes.users)
    app.get("/api/memory/memories", response_model=None, responses=documented(MemoryList))(routes.memories)
    app.get(
        "/api/memory/search",
        response_model=None,
        responses={**documented(MemoryHits), 501: {"model": ErrorBody}},
    )(routes.search)
    app.get("/api/memory/history", response_model=None, responses=documented(MemoryList))(routes.history)
    app.delete("/api/memory/memories/{memory_id}", response_model=None, status_code=204, responses=errors)(
        routes.delete
    )
    app.delete("/api/memory/memories", response_model=None, responses=errors)(routes.forget)
