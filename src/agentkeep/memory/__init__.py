"""Long-term memory: facts and conversation chunks kept across sessions, by tenant, user and
agent, with embeddings for recall.

What lives where: :mod:`.records` (:class:`MemoryRecord`, :class:`MemoryScope`,
:class:`MemoryHit`), :mod:`.base` (the :class:`MemoryStore` contract), :mod:`.in_memory`
(:class:`InMemoryMemoryStore`), :mod:`.sqlite` (:class:`~agentkeep.memory.sqlite.SQLiteMemoryStore`,
vector search with sqlite-vec; extra ``[memory]``). The guide is ``docs/memory.md``.
"""

from .base import MemoryStore, cosine, normalized
from .in_memory import InMemoryMemoryStore
from .records import MAX_MEMORY_TEXT, MemoryHit, MemoryRecord, MemoryScope, check_embedding

__all__ = [
    "MAX_MEMORY_TEXT",
    "InMemoryMemoryStore",
    "MemoryHit",
    "MemoryRecord",
    "MemoryScope",
    "MemoryStore",
    "check_embedding",
    "cosine",
    "normalized",
]
