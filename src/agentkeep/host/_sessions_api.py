"""The sessions API under ``/api/``: a tenant's own conversations of an agent, as its history
provider stores them (the agent needs a :class:`~agentkeep.providers.StorageHistoryProvider`).

* ``GET /api/agents/{name}/sessions?limit=&after=&q=``: a page of the tenant's conversations, most
  recently active first, with their message counts; ``next`` is the ``after`` of the next page
  (``null`` at the end). ``q`` (a part of the id) filters within a bounded scan
  (:data:`SCAN_LIMIT` conversations per request, counted in ``scanned``).
* ``GET /api/agents/{name}/sessions/{id}/messages?raw=&limit=&offset=``: the compacted view (what
  the next run loads) or the raw log (every original, excluded ones flagged), paged from the
  newest: ``offset`` messages back from the end, ``limit`` of them, oldest first.
* ``GET /api/agents/{name}/sessions/{id}/groups?tokenizer=estimate|openai:<encoding>``: the view's
  message groups (kind, messages, tokens with the tokenizer named, turn).
* ``POST /api/agents/{name}/sessions/{id}/compaction/preview``: a compaction plan (``strategies``
  with ``keep`` / ``max_tokens`` / ``target_tokens``, ``tokenizer``; see
  :mod:`agentkeep.compaction.plans`) run on the view: groups, messages and tokens before and
  after, what it would exclude and add. Nothing is written.
* ``POST /api/agents/{name}/sessions/{id}/compaction``: the same, recorded non-destructively (the
  raw log keeps every original); 409 if another compaction was recorded meanwhile.
* ``GET /api/agents/{name}/sessions/{id}/export?format=json|markdown``: the JSON export (see
  :mod:`agentkeep.transfer`) or a Markdown transcript of the view.
* ``DELETE /api/agents/{name}/sessions/{id}``: the conversation's history and session.

Conversation ids are the tenant's own (``chat-1``); another tenant's are not there (404).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final, Literal

import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ..compaction import CharacterEstimatorTokenizer, MessageIndex, Tokenizer
from ..compaction.plans import (
    CompactionPlanError,
    CompactionReport,
    StrategyName,
    ViewCounts,
    compact_conversation,
    make_tokenizer,
    plan_compaction,
)
from ..errors import ConflictError, ListingCursorError
from ..message_stores.base import (
    ConversationInfo,
    StoredMessage,
    SupportsListing,
    read_listing_cursor,
    tenant_prefix,
)
from ..providers.storage import StorageHistoryProvider
from ..session_stores import IsolationKeyScopedSessionStore
from ..sessions import ISOLATION_SEPARATOR
from ..transfer import export_conversation, render_markdown
from ._auth import WHOLE_STORE
from ._http import HTTPProblem, parsed
from ._schemas import CompactionResult, ErrorBody, GroupsPage, MessagesPage, SessionList

if TYPE_CHECKING:
    from ..messages import Message
    from ._app import AgentHost, HostedAgent

__all__ = [
    "DEFAULT_SESSIONS_PER_PAGE",
    "MAX_SESSIONS_PER_PAGE",
    "SCAN_BATCH",
    "SCAN_LIMIT",
    "SessionsAPI",
    "install_sessions_api",
]

DEFAULT_SESSIONS_PER_PAGE: Final = 50
"""The sessions list's page without ``limit``."""

MAX_SESSIONS_PER_PAGE: Final = 500
"""The largest ``limit`` of the sessions list."""

SCAN_LIMIT: Final = 1000
"""The most conversations one sessions-list request looks at to find those matching ``q``."""

SCAN_BATCH: Final = 200
"""The fewest conversations a sessions-list request with ``q`` reads from the store at a time."""


def _entry(entry: StoredMessage) -> dict[str, Any]:
    message = entry.message
    return {
        "seq": entry.seq,
        "id": message.message_id,
        "role": message.role,
        "author_name": message.author_name,
        "created_at": None if message.created_at is None else message.created_at.isoformat(),
        "text": message.text,
        "contents": [content.to_dict() for content in message.contents],
        "excluded": entry.excluded,
        "replaces": list(entry.replaces),
    }


def _check_cursor(cursor: str, prefix: str) -> None:
    """Refuse a cursor that no listing issued, or one of another tenant's listing (the store
    would only go on from its position; a cursor is meant for the listing that gave it)."""
    try:
        _, conversation_id = read_listing_cursor(cursor)
    except ListingCursorError as exc:
        raise HTTPProblem(400, "invalid_request", f"after: {exc}") from exc
    if not conversation_id.startswith(prefix):
        raise HTTPProblem(400, "invalid_request", "after: a cursor of another tenant's listing")


def _tokenizer(spec: str) -> tuple[Tokenizer, str]:
    """The tokenizer ``spec`` names (see :func:`~agentkeep.compaction.plans.make_tokenizer`) and its
    name for answers."""
    try:
        made = make_tokenizer(spec)
    except (ValueError, ImportError) as exc:
        raise HTTPProblem(400, "invalid_request", str(exc)) from exc
    if isinstance(made, CharacterEstimatorTokenizer):
        return made, f"estimate ({made.chars_per_token} characters per token)"
    return made, spec.strip()


class CompactionRequest(pydantic.BaseModel):
    """The body of the compaction endpoints (see :mod:`agentkeep.compaction.plans`)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    strategies: list[StrategyName]
    keep: int | None = pydantic.Field(default=None, ge=0)
    max_tokens: int | None = pydantic.Field(default=None, ge=1)
    target_tokens: int | None = pydantic.Field(default=None, ge=1)
    tokenizer: str = "estimate"


def _counts(counts: ViewCounts) -> dict[str, Any]:
    return {
        "groups": counts.group_count,
        "by_kind": counts.groups,
        "messages": counts.messages,
        "tokens": counts.tokens,
    }


def _report(session_id: str, report: CompactionReport) -> dict[str, Any]:
    return {
        "session": session_id,
        "plan": report.plan.describe(),
        "tokenizer": report.tokenizer,
        "before": _counts(report.before),
        "after": _counts(report.after),
        "excluded": report.excluded,
        "summaries": [
            {"id": s.message.message_id, "text": s.message.text, "replaces": list(s.replaces)}
            for s in report.summaries
        ],
        "changed": report.changed,
        "recorded": report.epoch is not None,
        "epoch": report.epoch,
    }


class SessionsAPI:
    """The sessions API's endpoints, and the queries behind them (the inspector's too)."""

    def __init__(self, host: AgentHost) -> None:
        self.host = host

    def history(self, name: str) -> tuple[HostedAgent, StorageHistoryProvider]:
        """The agent ``name`` and its durable history provider (404 if either is missing)."""
        hosted = self.host.agents.get(name)
        if hosted is None:
            raise HTTPProblem(404, "not_found", f"no agent named {name!r}")
        provider = hosted.agent.history_provider()
        if isinstance(provider, StorageHistoryProvider):
            return hosted, provider
        raise HTTPProblem(404, "not_found", f"agent {name!r} keeps no durable history to show")

    def _key(self, tenant: str, conversation_id: str) -> str:
        if not conversation_id:
            raise HTTPProblem(404, "not_found", "no such session")
        return conversation_id if tenant == WHOLE_STORE else f"{tenant}{ISOLATION_SEPARATOR}{conversation_id}"

    async def sessions_page(
        self, tenant: str, name: str, *, limit: int, after: str | None, q: str
    ) -> dict[str, Any]:
        """A page of the tenant's conversations of agent ``name``, most recently active first, from
        the listing position ``after`` (the ``next`` of the previous page), as the list endpoint
        answers it.

        Without ``q`` this is one store listing of ``limit`` rows. With ``q`` (a part of the id)
        the listing is read on until ``limit`` conversations match or :data:`SCAN_LIMIT` rows have
        been looked at, so a rare ``q`` costs a bounded request; ``next`` then goes on after the
        last row looked at, matched or not, and ``scanned`` says how many that was.
        """
        if not 1 <= limit <= MAX_SESSIONS_PER_PAGE:
            raise HTTPProblem(400, "invalid_request", f"limit is 1 to {MAX_SESSIONS_PER_PAGE}")
        _, history = self.history(name)
        store = history.store
        if not isinstance(store, SupportsListing):
            raise HTTPProblem(404, "not_found", f"the {store.backend} store cannot list its conversations")
        scope = None if tenant == WHOLE_STORE else tenant
        prefix = tenant_prefix(scope)
        if after is not None:
            _check_cursor(after, prefix)
        found: list[ConversationInfo] = []
        scanned = 0
        position, more = after, True
        while more and len(found) < limit and scanned < SCAN_LIMIT:
            wanted = limit if not q else min(max(limit, SCAN_BATCH), SCAN_LIMIT - scanned)
            try:
                rows = await store.list_conversations(tenant=scope, after=position, limit=wanted)
            except ListingCursorError as exc:
                raise HTTPProblem(400, "invalid_request", f"after: {exc}") from exc
            more = len(rows) == wanted
            for index, info in enumerate(rows):
                scanned += 1
                position = info.cursor
                if q in info.conversation_id[len(prefix) :]:
                    found.append(info)
                    if len(found) == limit:
                        more = more or index < len(rows) - 1  # rows after it are still to look at
                        break
        return {
            "sessions": [
                {
                    "id": info.conversation_id[len(prefix) :],
                    "messages": info.message_count,
                    "last_seq": info.last_seq,
                    "updated_at": None if info.updated_at is None else info.updated_at.isoformat(),
                }
                for info in found
            ],
            "limit": limit,
            "next": position if more else None,
            "scanned": scanned,
        }

    async def list_sessions(
        self,
        name: str,
        request: Request,
        limit: int = DEFAULT_SESSIONS_PER_PAGE,
        after: str | None = None,
        q: str = "",
        offset: str | None = None,
    ) -> Response:
        tenant = self.host.tenant_of(request)
        if offset is not None:
            raise HTTPProblem(
                400,
                "invalid_request",
                "offset is not a parameter of the sessions list: page on with after=<the next of the "
                "previous page>",
            )
        return JSONResponse(await self.sessions_page(tenant, name, limit=limit, after=after, q=q))

    async def messages_page(
        self, tenant: str, name: str, session_id: str, *, raw: bool, limit: int, offset: int
    ) -> dict[str, Any]:
        """``limit`` messages of the view (or with ``raw`` the raw log) ending ``offset`` messages
        before the newest, oldest first, as the messages endpoint answers them."""
        if not 1 <= limit <= 1000 or offset < 0:
            raise HTTPProblem(400, "invalid_request", "limit is 1 to 1000, offset at least 0")
        _, history = self.history(name)
        view = await history.store.read(self._key(tenant, session_id), raw=raw, last=offset + limit)
        if not view.entries and view.last_seq == 0:
            raise HTTPProblem(404, "not_found", f"no session {session_id!r}")
        window = view.entries[: max(len(view.entries) - offset, 0)]
        return {
            "session": session_id,
            "raw": raw,
            "epoch": view.epoch,
            "last_seq": view.last_seq,
            "offset": offset,
            "messages": [_entry(entry) for entry in window],
            "more": len(view.entries) == offset + limit,
        }

    async def messages(
        self,
        name: str,
        session_id: str,
        request: Request,
        raw: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> Response:
        tenant = self.host.tenant_of(request)
        page = await self.messages_page(tenant, name, session_id, raw=raw, limit=limit, offset=offset)
        return JSONResponse(page)

    async def groups_page(self, tenant: str, name: str, session_id: str, *, tokenizer: str) -> dict[str, Any]:
        """The view's message groups, as the groups endpoint answers them."""
        counter, label = _tokenizer(tokenizer)
        _, history = self.history(name)
        view = await history.store.read(self._key(tenant, session_id))
        if not view.entries and view.last_seq == 0:
            raise HTTPProblem(404, "not_found", f"no session {session_id!r}")
        # as long as the conversation: on a worker thread, so the host goes on answering meanwhile
        return await asyncio.to_thread(_groups_page, session_id, view.messages, counter, label)

    async def groups(
        self, name: str, session_id: str, request: Request, tokenizer: str = "estimate"
    ) -> Response:
        tenant = self.host.tenant_of(request)
        return JSONResponse(await self.groups_page(tenant, name, session_id, tokenizer=tokenizer))

    async def compaction(
        self, tenant: str, name: str, session_id: str, body: CompactionRequest, *, dry_run: bool
    ) -> dict[str, Any]:
        """The compaction ``body`` plans, run on the view (recorded unless ``dry_run``), as the
        compaction endpoints answer it."""
        counter, _ = _tokenizer(body.tokenizer)
        try:
            plan = plan_compaction(
                body.strategies, keep=body.keep, max_tokens=body.max_tokens, target_tokens=body.target_tokens
            )
        except CompactionPlanError as exc:
            raise HTTPProblem(422, "invalid_request", f"{exc.option}: {exc}") from exc
        hosted, history = self.history(name)
        key = self._key(tenant, session_id)
        try:
            report = await compact_conversation(history.store, key, plan, tokenizer=counter, dry_run=dry_run)
        except LookupError as exc:
            raise HTTPProblem(404, "not_found", f"no session {session_id!r}") from exc
        except ConflictError as exc:
            raise HTTPProblem(
                409, "conflict", "another compaction was recorded meanwhile; try again"
            ) from exc
        if report.epoch is not None:
            self.host.sessions.pop((tenant, hosted.name, session_id))  # its loaded view is stale
        return _report(session_id, report)

    async def _compact(self, name: str, session_id: str, request: Request, *, dry_run: bool) -> Response:
        tenant = self.host.tenant_of(request)
        raw = await self.host.body_of(request)
        body = parsed(CompactionRequest, raw, what="a compaction request", status=422)
        return JSONResponse(await self.compaction(tenant, name, session_id, body, dry_run=dry_run))

    async def preview(self, name: str, session_id: str, request: Request) -> Response:
        return await self._compact(name, session_id, request, dry_run=True)

    async def apply(self, name: str, session_id: str, request: Request) -> Response:
        return await self._compact(name, session_id, request, dry_run=False)

    async def export(
        self, name: str, session_id: str, request: Request, format: Literal["json", "markdown"] = "json"
    ) -> Response:
        tenant = self.host.tenant_of(request)
        _, history = self.history(name)
        key = self._key(tenant, session_id)
        if format == "markdown":  # the view alone: one read
            view = await history.store.read(key)
            if not view.entries and view.last_seq == 0:
                raise HTTPProblem(404, "not_found", f"no session {session_id!r}")
            text = await asyncio.to_thread(
                render_markdown, session_id, view.entries
            )  # as long as the session
            return PlainTextResponse(text, media_type="text/markdown")
        try:
            exported = await export_conversation(history.store, key)
        except LookupError as exc:
            raise HTTPProblem(404, "not_found", f"no session {session_id!r}") from exc
        exported.conversation_id = session_id  # the tenant's name for it
        return Response(await asyncio.to_thread(exported.to_json), media_type="application/json")

    async def delete_session(self, tenant: str, name: str, session_id: str) -> None:
        """Delete the tenant's conversation ``session_id``: its history and its session."""
        hosted, history = self.history(name)
        removed = await history.store.delete(self._key(tenant, session_id))
        sessions = (
            hosted.session_store
            if tenant == WHOLE_STORE
            else IsolationKeyScopedSessionStore(hosted.session_store, isolation_key=tenant)
        )
        removed = await sessions.delete_session(hosted.agent, session_id) or removed
        if not removed:
            raise HTTPProblem(404, "not_found", f"no session {session_id!r}")
        self.host.sessions.pop((tenant, hosted.name, session_id))

    async def delete(self, name: str, session_id: str, request: Request) -> Response:
        await self.delete_session(self.host.tenant_of(request), name, session_id)
        return Response(status_code=204)


def _groups_page(session_id: str, messages: list[Message], counter: Tokenizer, label: str) -> dict[str, Any]:
    index = MessageIndex(messages, tokenizer=counter)
    groups = [
        {
            "kind": group.kind.value,
            "turn": group.turn,
            "messages": [message.message_id for message in group.messages],
            "tokens": group.token_count,
        }
        for group in index.groups
    ]
    return {
        "session": session_id,
        "tokenizer": label,
        "messages": index.message_count,
        "turns": index.turn_count,
        "tokens": index.token_count,
        "groups": groups,
    }


def install_sessions_api(host: AgentHost, app: FastAPI) -> None:
    """Add the sessions API of ``host`` to ``app``."""
    api = SessionsAPI(host)
    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorBody} for code in (400, 401, 404, 409, 422)
    }

    def documented(model: type[Any]) -> dict[int | str, dict[str, Any]]:
        return {200: {"model": model}, **errors}

    base = "/api/agents/{name}/sessions"
    app.get(base, response_model=None, responses=documented(SessionList))(api.list_sessions)
    app.get(f"{base}/{{session_id}}/messages", response_model=None, responses=documented(MessagesPage))(
        api.messages
    )
    app.get(f"{base}/{{session_id}}/groups", response_model=None, responses=documented(GroupsPage))(
        api.groups
    )
    app.post(
        f"{base}/{{session_id}}/compaction/preview",
        response_model=None,
        responses=documented(CompactionResult),
    )(api.preview)
    app.post(
        f"{base}/{{session_id}}/compaction", response_model=None, responses=documented(CompactionResult)
    )(api.apply)
    export: dict[int | str, dict[str, Any]] = {
        200: {"content": {"application/json": {}, "text/markdown": {}}},
        **errors,
    }
    app.get(f"{base}/{{session_id}}/export", response_model=None, responses=export)(api.export)
    app.delete(f"{base}/{{session_id}}", response_model=None, status_code=204, responses=errors)(api.delete)
