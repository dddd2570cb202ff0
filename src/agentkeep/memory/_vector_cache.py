"""An in-process cache of large scopes' vectors, for exact search with one matrix-vector product.

A search of a scope with many memories is a scan of all its vectors, whatever the store. sqlite-vec
scans them in plain C (about 39 ms for 100,000 vectors of 384 dimensions on this project's
machine); PostgreSQL has to ship them to the client first. Held as one float32 matrix, the same
scan is one BLAS matrix-vector product, bounded by memory bandwidth. The stores keep such a
matrix per large scope here and keep it *coherent* with the database by a per-scope change log:

* every write transaction that adds, removes or replaces a vector of a scope (or changes its
  ``updated_at``, which the expiry filter reads) bumps the scope's change counter (``seq``) and
  logs the memory's row id under the new ``seq``; writers of one scope are ordered, so ``seq``
  order is commit order;
* a search reads, in one snapshot, the scope's counter, the log entries after the ``seq`` its
  cached :class:`ScopeVectors` holds, the current vector rows of those row ids (a row that is
  gone is removed), and then the records of the ``k`` best: per search it reads only what
  changed since the last one, never the whole scope again;
* a gap in the log (entries pruned), or a scope row made anew (``forget`` then new memories: a new
  scope id), makes the cache rebuild from the scope's vectors.

The search stays exact: every current vector of the scope is scored, with the same cosine
similarity (the stored vectors are unit length, so it is a dot product). Only the
:class:`VectorCache`'s byte budget decides which scopes are held; a scope it cannot hold is
searched by the store's own path. Everything here runs on one thread at a time (the store's).
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_CACHE_BYTES", "DEFAULT_MIN_VECTORS", "LOG_KEEP", "ScopeVectors", "VectorCache", "behind"]

DEFAULT_CACHE_BYTES: Final = 256 * 1024 * 1024
"""The default byte budget of a store's cache: 100,000 vectors of 384 dimensions take 150 MiB."""

DEFAULT_MIN_VECTORS: Final = 5_000
"""Scopes with fewer vectors are searched by the store's own path. The cache is faster from a
few hundred vectors on, but a scope's first search in a process builds its matrix, at about ten
of sqlite-vec's searches of it (measured on SQLite, 2 busy cores: 1,000 vectors 1.4 ms by
sqlite-vec, 0.5 ms cached, 12 ms to build; 5,000: 6.2, 1.9 and 69 ms; 10,000: 11.2, 2.9 and
91 ms): below a few thousand the saving is a millisecond or two, not worth the memory and the
builds of a cache that many small users would churn."""

LOG_KEEP: Final = 4_096
"""Log entries kept per scope; a cache further behind than this rebuilds."""

# A row id's entry in the position map (dict slot, key and value ints), for the byte budget.
_MAP_ENTRY_BYTES: Final = 100
# Matrices of at least twice this many rows are scored in parts on helper threads: one core
# reads about 10 GB/s here, short of the memory's bandwidth (measured at 100,000 x 384: 17.8 ms
# on one thread, 8.9 ms on two).
_PART_ROWS: Final = 16_384
_HELPERS: Final = min(3, (os.cpu_count() or 1) - 1)

FloatArray = npt.NDArray[np.float32]


class ScopeVectors:
    """One scope's current vectors as of change ``seq`` of the scope row ``scope_id``.

    Rows sit in the first ``len(self)`` rows of a matrix with spare capacity, so an added vector is
    a copy into place; a removed one is replaced by the last row (order carries no meaning).

    Args:
        scope_id: The id of the scope's row in the store (a scope made anew gets another).
        seq: The scope's change counter the vectors are current for.
        dimensions: The length of every vector.
        capacity: Rows to reserve.
    """

    def __init__(self, *, scope_id: int, seq: int, dimensions: int, capacity: int = 0) -> None:
        self.scope_id = scope_id
        self.seq = seq
        self.dimensions = dimensions
        self._matrix: FloatArray = np.empty((capacity, dimensions), dtype=np.float32)
        self._rowids = np.empty(capacity, dtype=np.int64)
        self._kinds = np.empty(capacity, dtype=np.int32)
        self._updated = np.empty(capacity, dtype=np.int64)
        self._count = 0
        self._position: dict[int, int] = {}
        self._kind_codes: dict[str, int] = {}

    @classmethod
    def loaded(
        cls,
        *,
        scope_id: int,
        seq: int,
        dimensions: int,
        rows: Sequence[tuple[int, str, int, bytes]],
    ) -> ScopeVectors:
        """A scope's vectors from its rows ``(row id, kind, updated_at in µs, float32 bytes)``."""
        count = len(rows)
        vectors = cls(scope_id=scope_id, seq=seq, dimensions=dimensions, capacity=_grown(count))
        if count:
            matrix = np.frombuffer(b"".join(row[3] for row in rows), dtype=np.float32)
            vectors._matrix[:count] = matrix.reshape(count, dimensions)
            vectors._rowids[:count] = [row[0] for row in rows]
            vectors._updated[:count] = [row[2] for row in rows]
            vectors._kinds[:count] = [vectors._code(row[1]) for row in rows]
            vectors._position = {row[0]: at for at, row in enumerate(rows)}
            vectors._count = count
        return vectors

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """What the vectors take in memory (arrays at capacity, and the position map)."""
        arrays = self._matrix.nbytes + self._rowids.nbytes + self._kinds.nbytes + self._updated.nbytes
        return arrays + len(self._position) * _MAP_ENTRY_BYTES

    def put(self, rowid: int, kind: str, updated: int, vector: bytes) -> None:
        """Add the vector of ``rowid``, or replace the one it had."""
        at = self._position.get(rowid)
        if at is None:
            if self._count == len(self._rowids):
                self._reserve(_grown(self._count + 1))
            at = self._count
            self._count += 1
            self._position[rowid] = at
            self._rowids[at] = rowid
        self._matrix[at] = np.frombuffer(vector, dtype=np.float32)
        self._kinds[at] = self._code(kind)
        self._updated[at] = updated

    def remove(self, rowid: int) -> None:
        """Drop the vector of ``rowid`` (nothing if it has none here)."""
        at = self._position.pop(rowid, None)
        if at is None:
            return
        last = self._count - 1
        if at != last:
            moved = int(self._rowids[last])
            self._matrix[at] = self._matrix[last]
            self._rowids[at] = moved
            self._kinds[at] = self._kinds[last]
            self._updated[at] = self._updated[last]
            self._position[moved] = at
        self._count = last

    def nearest(
        self,
        query: FloatArray,
        k: int,
        *,
        kind: str | None = None,
        cutoff: int | None = None,
        helpers: Executor | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` row ids most similar to the unit vector ``query``, best first, with their
        cosine similarity; only of ``kind`` and updated at ``cutoff`` or later, when given.
        ``helpers`` (threads) score parts of a large matrix alongside the calling thread."""
        count = self._count
        scores = _scores(self._matrix[:count], query, helpers)
        rowids = self._rowids[:count]
        keep: npt.NDArray[np.bool_] | None = None
        if kind is not None:
            code = self._kind_codes.get(kind)
            if code is None:
                return []
            keep = self._kinds[:count] == code
        if cutoff is not None:
            fresh = self._updated[:count] >= cutoff
            keep = fresh if keep is None else keep & fresh
        if keep is not None:
            scores, rowids = scores[keep], rowids[keep]
        if len(scores) == 0:
            return []
        if k < len(scores):
            best = np.argpartition(-scores, k - 1)[:k]
            order = best[np.argsort(-scores[best], kind="stable")]
        else:
            order = np.argsort(-scores, kind="stable")
        return [(int(rowids[at]), float(scores[at])) for at in order]

    def _code(self, kind: str) -> int:
        return self._kind_codes.setdefault(kind, len(self._kind_codes))

    def _reserve(self, capacity: int) -> None:
        count = self._count
        matrix = np.empty((capacity, self.dimensions), dtype=np.float32)
        matrix[:count] = self._matrix[:count]
        self._matrix = matrix
        for name in ("_rowids", "_kinds", "_updated"):
            old: npt.NDArray[np.generic] = getattr(self, name)
            new = np.empty(capacity, dtype=old.dtype)
            new[:count] = old[:count]
            setattr(self, name, new)


def _scores(matrix: FloatArray, query: FloatArray, helpers: Executor | None) -> FloatArray:
    # np.vecdot, not matmul: matmul's matrix-vector product starts OpenBLAS's own threads,
    # which spin after each call; on 2 cores, next to the event loop and the store's thread,
    # that cost 4 to 8 ms per search (measured) where vecdot's per-row dot products take none.
    scores = np.empty(len(matrix), dtype=np.float32)
    if helpers is None or len(matrix) < 2 * _PART_ROWS:
        np.vecdot(matrix, query, out=scores)
        return scores
    parts = min(1 + _HELPERS, len(matrix) // _PART_ROWS)
    bounds = [len(matrix) * part // parts for part in range(parts + 1)]
    futures = [
        helpers.submit(np.vecdot, matrix[start:end], query, out=scores[start:end])
        for start, end in itertools.pairwise(bounds[1:])
    ]
    np.vecdot(matrix[: bounds[1]], query, out=scores[: bounds[1]])
    for future in futures:
        future.result()
    return scores


def _grown(count: int) -> int:
    """Capacity for ``count`` rows with room to grow (an eighth more), so adds rarely copy."""
    return count + count // 8 + 64


def behind(vectors: ScopeVectors, seq: int, logged: Iterable[int]) -> bool:
    """Whether ``vectors`` cannot be brought to ``seq`` by the log entries ``logged`` (their
    ``seq`` values after ``vectors.seq``, in order): some were pruned, so it must be rebuilt."""
    expected = vectors.seq + 1
    for logged_seq in logged:
        if logged_seq != expected:
            return True
        expected += 1
    return expected != seq + 1


class VectorCache:
    """Scopes' vectors by scope key, least recently used first out, within ``max_bytes``.

    Args:
        max_bytes: The budget (``0``: nothing is cached).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("the search cache's size must be 0 (off) or positive")
        self.max_bytes = max_bytes
        self._scopes: OrderedDict[str, ScopeVectors] = OrderedDict()
        self._helpers: ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return len(self._scopes)

    def __contains__(self, scope: str) -> bool:
        return scope in self._scopes

    @property
    def nbytes(self) -> int:
        """What the cached vectors take in memory."""
        return sum(vectors.nbytes for vectors in self._scopes.values())

    def fits(self, vectors: int, dimensions: int) -> bool:
        """Whether a scope of ``vectors`` vectors could be held at all."""
        capacity = _grown(vectors)
        return capacity * (dimensions * 4 + 20) + vectors * _MAP_ENTRY_BYTES <= self.max_bytes

    def get(self, scope: str) -> ScopeVectors | None:
        """The cached vectors of ``scope`` (now the most recently used), or ``None``."""
        vectors = self._scopes.get(scope)
        if vectors is not None:
            self._scopes.move_to_end(scope)
        return vectors

    def keep(self, scope: str, vectors: ScopeVectors) -> None:
        """Hold ``vectors`` for ``scope`` (again, after they changed), evicting the least recently
        used scopes past the budget; vectors bigger than the whole budget are not held."""
        self._scopes[scope] = vectors
        self._scopes.move_to_end(scope)
        total = self.nbytes
        while total > self.max_bytes and self._scopes:
            _, evicted = self._scopes.popitem(last=False)
            total -= evicted.nbytes

    @property
    def helpers(self) -> Executor | None:
        """Threads that score parts of a large scope's matrix (``None``: one core only)."""
        if self._helpers is None and _HELPERS > 0:
            self._helpers = ThreadPoolExecutor(max_workers=_HELPERS, thread_name_prefix="agentkeep-vectors")
        return self._helpers

    def drop(self, scope: str) -> None:
        """Forget the cached vectors of ``scope``, if any."""
        self._scopes.pop(scope, None)

    def close(self) -> None:
        """Forget every scope's vectors and stop the helper threads."""
        self._scopes.clear()
        if self._helpers is not None:
            self._helpers.shutdown(wait=False)
            self._helpers = None
