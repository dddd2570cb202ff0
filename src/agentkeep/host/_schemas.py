"""The JSON bodies of the sessions and memory APIs (``/api/``), as pydantic models for the app's OpenAPI
document. The endpoints build these bodies themselves; the models describe them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "CompactionCounts",
    "CompactionResult",
    "ErrorBody",
    "GroupsPage",
    "MemoryHit",
    "MemoryHits",
    "MemoryInfo",
    "MemoryList",
    "MemoryScopeInfo",
    "MemoryUsers",
    "MessageGroupInfo",
    "MessagesPage",
    "SessionInfo",
    "SessionList",
    "StoredEntry",
    "SummaryInfo",
]


class ErrorDetail(BaseModel):
    type: str = Field(description="What went wrong: invalid_request, unauthorized, not_found, conflict, ...")
    code: str = Field(description="The same as type (OpenAI's SDKs read it as the error's code)")
    message: str
    param: str | None = Field(default=None, description="The request field at fault, if one is")
    details: Any = Field(default=None, description="For a malformed body: the validation errors")


class ErrorBody(BaseModel):
    """Every error answer outside a stream."""

    error: ErrorDetail


class SessionInfo(BaseModel):
    id: str = Field(description="The conversation id as the tenant names it")
    messages: int = Field(description="Raw messages stored")
    last_seq: int
    updated_at: str | None = Field(description="ISO time of the newest message")


class SessionList(BaseModel):
    sessions: list[SessionInfo] = Field(description="Most recently active first")
    limit: int
    next: str | None = Field(
        description="Pass as after= for the next page; null when the listing has no more (a full "
        "page may still be followed by an empty one)"
    )
    scanned: int = Field(
        description="Conversations looked at for this page: with q, at most 1000 per request, so a "
        "page can hold fewer than limit sessions and still have a next"
    )


class StoredEntry(BaseModel):
    seq: int
    id: str | None
    role: str
    author_name: str | None
    created_at: str | None
    text: str
    contents: list[dict[str, Any]] = Field(description="The message's contents in agentkeep's wire form")
    excluded: bool = Field(description="Raw log only: excluded from the view by a compaction")
    replaces: list[str] = Field(description="For a summary: the ids of the messages it replaces")


class MessagesPage(BaseModel):
    session: str
    raw: bool
    epoch: int = Field(description="The compaction epoch")
    last_seq: int
    offset: int = Field(description="Messages skipped from the newest end")
    messages: list[StoredEntry] = Field(description="Oldest first")
    more: bool = Field(description="Whether older messages remain")


class MessageGroupInfo(BaseModel):
    kind: str = Field(description="system, user, assistant_text, tool_call or summary")
    turn: int | None
    messages: list[str | None] = Field(description="The ids of the group's messages")
    tokens: int


class GroupsPage(BaseModel):
    session: str
    tokenizer: str = Field(description="How tokens were counted")
    messages: int
    turns: int
    tokens: int
    groups: list[MessageGroupInfo]


class CompactionCounts(BaseModel):
    groups: int
    by_kind: dict[str, int]
    messages: int
    tokens: int


class SummaryInfo(BaseModel):
    id: str | None
    text: str
    replaces: list[str]


class CompactionResult(BaseModel):
    session: str
    plan: str = Field(description="The strategies run, for people")
    tokenizer: str
    before: CompactionCounts
    after: CompactionCounts
    excluded: list[str] = Field(description="Ids newly excluded from the view")
    summaries: list[SummaryInfo]
    changed: bool
    recorded: bool = Field(description="Whether the compaction was recorded (never on a preview)")
    epoch: int | None


class MemoryScopeInfo(BaseModel):
    user: str
    agent: str | None = Field(description="None: the memories the user's agents share")
    memories: int = Field(description="Current memories")
    updated_at: str = Field(description="ISO time of the newest change")


class MemoryUsers(BaseModel):
    tenant: str | None
    users: list[MemoryScopeInfo] = Field(description="Most recently updated first")
    offset: int
    limit: int
    more: bool
    next: str | None = Field(description="The cursor of the next page (pass it as after), if there is one")


class MemoryInfo(BaseModel):
    id: str
    text: str
    kind: str = Field(description="fact, chunk, profile, block, ...")
    key: str | None = Field(description="What it is about; a newer memory of the key replaces it")
    source_session_id: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str | None
    superseded_by: str | None = Field(description="The memory that replaced it (history only)")


class MemoryList(BaseModel):
    memories: list[MemoryInfo]


class MemoryHit(MemoryInfo):
    score: float = Field(description="Cosine similarity to the query")


class MemoryHits(BaseModel):
    hits: list[MemoryHit] = Field(description="Best first")
