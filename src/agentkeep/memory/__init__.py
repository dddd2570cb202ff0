"""Long-term memory: facts and conversation chunks kept across sessions, by tenant, user and
agent, with embeddings and a full-text index for recall by meaning and words (the guide is
``docs/memory.md``).

What lives where:

* :mod:`.records` — :class:`MemoryRecord`, :class:`MemoryScope`, :class:`MemoryHit`,
  :class:`MemoryScopeSummary`;
* :mod:`.base` — the :class:`MemoryStore` contract (and :data:`SearchMode`);
* :mod:`.in_memory` — :class:`InMemoryMemoryStore`; :mod:`.sqlite` —
  :class:`~agentkeep.memory.sqlite.SQLiteMemoryStore`, vector search with sqlite-vec (extra
  ``[memory]``); :mod:`.postgres` — :class:`~agentkeep.memory.postgres.PostgresMemoryStore`
  (extras ``[postgres]``, ``[memory]``); import these two from their modules;
* :mod:`.embedders` — :class:`Embedder`, :class:`MiniLMEmbedder` (offline, extra
  ``[embeddings]``), :class:`CachedEmbedder`;
* the providers: :mod:`.semantic` (:class:`SemanticMemoryProvider`, recall across sessions, and
  :func:`set_memory_user`), :mod:`.profile` (:class:`ProfileMemoryProvider`), :mod:`.blocks`
  (:class:`MemoryBlocksProvider`, blocks the model edits with tools).
"""

from .base import MemoryStore, SearchMode, cosine, normalized
from .blocks import MemoryBlock, MemoryBlocksProvider
from .embedders import CachedEmbedder, Embedder, MiniLMEmbedder
from .in_memory import InMemoryMemoryStore
from .profile import ProfileMemoryProvider
from .records import (
    MAX_MEMORY_TEXT,
    MemoryHit,
    MemoryRecord,
    MemoryScope,
    MemoryScopeSummary,
    check_embedding,
)
from .semantic import (
    MEMORY_USER_KEY,
    ExtractedFact,
    ExtractedFacts,
    FactExtractor,
    SemanticMemoryProvider,
    memory_scope,
    set_memory_user,
)

__all__ = [
    "MAX_MEMORY_TEXT",
    "MEMORY_USER_KEY",
    "CachedEmbedder",
    "Embedder",
    "ExtractedFact",
    "ExtractedFacts",
    "FactExtractor",
    "InMemoryMemoryStore",
    "MemoryBlock",
    "MemoryBlocksProvider",
    "MemoryHit",
    "MemoryRecord",
    "MemoryScope",
    "MemoryScopeSummary",
    "MemoryStore",
    "MiniLMEmbedder",
    "ProfileMemoryProvider",
    "SearchMode",
    "SemanticMemoryProvider",
    "check_embedding",
    "cosine",
    "memory_scope",
    "normalized",
    "set_memory_user",
]
