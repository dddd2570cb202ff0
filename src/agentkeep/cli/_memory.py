"""``agentkeep memory list|search|forget``: a user's long-term memories in a memory store
(:mod:`agentkeep.memory`), with the commands' errors."""

from __future__ import annotations

from ..errors import MemoryFormatError
from ..memory import MemoryHit, MemoryRecord, MemoryScope, MemoryStore
from ._stores import CLIError

__all__ = ["forget_user", "list_user", "scope_of", "search_user"]


def scope_of(user: str, tenant: str | None, agent: str | None) -> MemoryScope:
    """The scope the options name.

    Raises:
        CLIError: A malformed id.
    """
    try:
        return MemoryScope(user, tenant_id=tenant, agent_id=agent)
    except MemoryFormatError as exc:
        raise CLIError(str(exc)) from exc


async def list_user(
    store: MemoryStore, scope: MemoryScope, *, kind: str | None, limit: int | None
) -> list[MemoryRecord]:
    """The scope's current memories, newest first."""
    return await store.list_memories(scope, kind=kind, limit=limit)


async def search_user(store: MemoryStore, scope: MemoryScope, query: str, *, k: int) -> list[MemoryHit]:
    """The scope's memories that best match ``query``, by meaning (the packaged embedding model)
    and by words, fused.

    Raises:
        CLIError: An empty query.
        ImportError: The embedding model's extra is missing (the message names it).
    """
    if not query.strip():
        raise CLIError("give a query to search for")
    from ..memory.embedders import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    try:
        (vector,) = await embedder.embed([query])
    finally:
        await embedder.aclose()
    return await store.search(scope, vector, k=k, text=query)  # by meaning and words, fused


async def forget_user(store: MemoryStore, *, user: str, tenant: str | None) -> int:
    """Remove everything of the user in the tenant (every agent); returns how many records."""
    scope_of(user, tenant, None)  # the ids are checked before anything is removed
    return await store.forget(user_id=user, tenant_id=tenant)
