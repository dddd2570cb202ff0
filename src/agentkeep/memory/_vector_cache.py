"""An in-process cache of large scopes' vectors, for exact search in memory.

A search of a scope with many memories is a scan of all its vectors, whatever the store. sqlite-vec
scans them in plain C (39 to 104 ms for 100,000 vectors of 384 dimensions on this project's
machine, by the day); PostgreSQL has to ship them to the client first. Held in memory, the same
scan is bounded by memory bandwidth, and by less of it when read as int8 (below). The stores
keep such matrices per large scope here and keep them *coherent* with the database by a
per-scope change log:

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

The search stays exact, in two passes. The first scores every vector of the scope by a copy
quantized to int8 (a quarter of the bytes to read, by simsimd's integer dot product) and bounds
each true score within a margin that the quantization errors prove (see :meth:`ScopeVectors.nearest`);
the second scores the few vectors whose upper bound reaches the ``k``-th best lower bound with
float32, the same cosine similarity as without the cache (the stored vectors are unit length, so
it is a dot product). No vector that could be among the ``k`` best is left out, so the answer is
the one a full float32 scan gives (100,000 vectors of 384 dimensions: 2.9 ms, where the float32
scan on 2 cores took 8.9 ms and on one 17 ms; a random query leaves about 100 candidates). Only the
:class:`VectorCache`'s byte budget decides which scopes are held; a scope it cannot hold is
searched by the store's own path. Everything here runs on one thread at a time (the store's).

Beside each vector a row holds its memory's kind, ``updated_at`` and ``created_at`` (when it was
said, which no update changes), so a search filters by kind, expiry and time window in memory
(:meth:`ScopeVectors.nearest`), and a store can tell which of its word index's matches, ranked
over the whole file, a search keeps (:meth:`ScopeVectors.held`) without reading their rows.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Final

try:
    import numpy as np
    import numpy.typing as npt
    import simsimd
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the memory stores' search cache needs numpy and simsimd: pip install 'agentkeep[memory]'"
    ) from exc

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_MIN_VECTORS",
    "LOG_KEEP",
    "DamagedVector",
    "ScopeVectors",
    "VectorCache",
    "behind",
    "vector_matrix",
]

DEFAULT_CACHE_BYTES: Final = 256 * 1024 * 1024
"""The default byte budget of a store's cache: 100,000 vectors of 384 dimensions take about 220 MiB
(the float32 vectors, their int8 copies and room to grow)."""

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
# Per row besides the vector and its int8 copy: row id, kind, updated_at, created_at, scale, error.
_ROW_BYTES: Final = 8 + 4 + 8 + 8 + 4 + 4
# Matrices of at least twice this many rows are scored in parts on helper threads: one core
# reads short of the memory's bandwidth (int8 first pass at 100,000 x 384: 2.9 ms with a helper,
# 4.5 ms without).
_PART_ROWS: Final = 16_384
_HELPERS: Final = min(3, (os.cpu_count() or 1) - 1)
# The arrays with a row per vector (one capacity, one order).
_ROW_ARRAYS: Final = ("_matrix", "_codes", "_scales", "_errors", "_rowids", "_kinds", "_updated", "_said")
# Rows quantized at once when a scope is loaded (bounds the float32 temporaries to a few MiB).
_QUANTIZE_ROWS: Final = 4_096

FloatArray = npt.NDArray[np.float32]
Int8Array = npt.NDArray[np.int8]


class DamagedVector(ValueError):
    """A stored vector of the wrong length, or holding NaN or an infinity.

    Attributes:
        rowid: The row it was read from.
    """

    def __init__(self, rowid: int, reason: str) -> None:
        self.rowid = rowid
        super().__init__(reason)


_UNIT_TOLERANCE: Final = 1e-3
"""How far from 1 a stored (normalized, float32) vector's length may be."""


def vector_matrix(rowids: Sequence[int], vectors: Sequence[bytes], dimensions: int) -> FloatArray:
    """The float32 ``vectors`` (one per row id) as a matrix, each checked: ``dimensions`` floats of
    length 1, as the stores write them (so none holds NaN or an infinity: a search must never score
    a damaged vector). Cost: one join and one vectorized pass.

    Raises:
        DamagedVector: Naming the first damaged row.
    """
    size = dimensions * 4
    joined = b"".join(vectors)
    if len(joined) != size * len(vectors):
        at = next(i for i, vector in enumerate(vectors) if len(vector) != size)
        raise DamagedVector(rowids[at], f"its embedding has {len(vectors[at])} bytes, not {size}")
    matrix = np.frombuffer(joined, dtype=np.float32).reshape(len(vectors), dimensions)
    with np.errstate(over="ignore", invalid="ignore"):  # a damaged vector's square may overflow
        lengths = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
        unit = np.abs(lengths - 1.0) <= _UNIT_TOLERANCE  # False for NaN and infinities too
    if not unit.all():
        at = int(np.argmin(unit))
        raise DamagedVector(rowids[at], f"its embedding has length {lengths[at]}, not 1 (stored normalized)")
    return matrix


def _check_fields(rowid: int, kind: object, updated: object, said: object) -> None:
    """Refuse a vector row whose kind, ``updated_at`` or ``created_at`` a damaged row replaced
    with another type."""
    if type(kind) is not str or type(updated) is not int or type(said) is not int:
        raise DamagedVector(
            rowid, f"its kind {kind!r}, updated_at {updated!r} or created_at {said!r} is damaged"
        )


class ScopeVectors:
    """One scope's current vectors as of change ``seq`` of the scope row ``scope_id``.

    Rows sit in the first ``len(self)`` rows of a matrix with spare capacity, so an added vector is
    a copy into place; a removed one is replaced by the last row (order carries no meaning). Each
    row also has its int8 copy: ``codes * scale`` approximates the vector within ``error`` (the
    Euclidean length of the difference).

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
        self._codes: Int8Array = np.empty((capacity, dimensions), dtype=np.int8)
        self._scales: FloatArray = np.empty(capacity, dtype=np.float32)
        self._errors: FloatArray = np.empty(capacity, dtype=np.float32)
        self._rowids = np.empty(capacity, dtype=np.int64)
        self._kinds = np.empty(capacity, dtype=np.int32)
        self._updated = np.empty(capacity, dtype=np.int64)
        self._said = np.empty(capacity, dtype=np.int64)
        self._count = 0
        self._position: dict[int, int] = {}
        self._kind_codes: dict[str, int] = {}
        # The length of the longest vector held so far (only ever raised): a bound the first
        # pass needs, and stored vectors are unit length, so it stays about 1.
        self._longest = 0.0

    @classmethod
    def loaded(
        cls,
        *,
        scope_id: int,
        seq: int,
        dimensions: int,
        rows: Sequence[tuple[int, str, int, int, bytes]],
    ) -> ScopeVectors:
        """A scope's vectors from its rows ``(row id, kind, updated_at in µs, created_at in µs,
        float32 bytes)``."""
        count = len(rows)
        vectors = cls(scope_id=scope_id, seq=seq, dimensions=dimensions, capacity=_grown(count))
        if count:
            rowids = [row[0] for row in rows]
            vectors._matrix[:count] = vector_matrix(rowids, [row[4] for row in rows], dimensions)
            for start in range(0, count, _QUANTIZE_ROWS):
                vectors._quantize(start, min(count, start + _QUANTIZE_ROWS))
            vectors._rowids[:count] = rowids
            for rowid, kind, updated, said, _ in rows:
                _check_fields(rowid, kind, updated, said)
            vectors._updated[:count] = [row[2] for row in rows]
            vectors._said[:count] = [row[3] for row in rows]
            vectors._kinds[:count] = [vectors._code(row[1]) for row in rows]
            vectors._position = {row[0]: at for at, row in enumerate(rows)}
            vectors._count = count
        return vectors

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """What the vectors take in memory (arrays at capacity, and the position map)."""
        arrays = sum(array.nbytes for array in self._row_arrays())
        return arrays + len(self._position) * _MAP_ENTRY_BYTES

    def put(self, rowid: int, kind: str, updated: int, said: int, vector: bytes) -> None:
        """Add the vector of ``rowid`` (its memory's kind, ``updated_at`` and ``created_at`` in
        µs), or replace the one it had.

        Raises:
            DamagedVector: ``vector`` is damaged (nothing changes).
        """
        checked = vector_matrix((rowid,), (vector,), self.dimensions)
        _check_fields(rowid, kind, updated, said)
        at = self._position.get(rowid)
        if at is None:
            if self._count == len(self._rowids):
                self._reserve(_grown(self._count + 1))
            at = self._count
            self._count += 1
            self._position[rowid] = at
            self._rowids[at] = rowid
        self._matrix[at] = checked[0]
        self._quantize(at, at + 1)
        self._kinds[at] = self._code(kind)
        self._updated[at] = updated
        self._said[at] = said

    def remove(self, rowid: int) -> None:
        """Drop the vector of ``rowid`` (nothing if it has none here)."""
        at = self._position.pop(rowid, None)
        if at is None:
            return
        last = self._count - 1
        if at != last:
            moved = int(self._rowids[last])
            for array in self._row_arrays():
                array[at] = array[last]
            self._position[moved] = at
        self._count = last

    def similarities(self, query: FloatArray, rowids: Iterable[int]) -> dict[int, float]:
        """The cosine similarity to the unit vector ``query`` of each of ``rowids`` held here."""
        found = {rowid: self._position[rowid] for rowid in rowids if rowid in self._position}
        if not found:
            return {}
        scores = np.vecdot(self._matrix[list(found.values())], query)
        return {rowid: float(score) for rowid, score in zip(found, scores, strict=True)}

    def held(
        self,
        ranked: Sequence[tuple[int, float]],
        *,
        kind: str | None = None,
        cutoff: int | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> list[tuple[int, float]]:
        """Those of ``ranked`` (row id, score) whose rows are held here and kept by the filters
        of :meth:`nearest`, in their order: of the ranked rows of a whole file, the current ones
        of this scope that a search keeps."""
        if not ranked:
            return []
        rowids = (rowid for rowid, _ in ranked)
        at = np.fromiter(map(self._position.get, rowids, itertools.repeat(-1)), np.int64, len(ranked))
        (listed,) = np.nonzero(at >= 0)
        keep = self._kept(kind, cutoff, since, until, at[listed])
        return [ranked[index] for index in (listed if keep is None else listed[keep]).tolist()]

    def count(
        self,
        *,
        kind: str | None = None,
        cutoff: int | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> int:
        """How many rows the filters of :meth:`nearest` keep."""
        keep = self._kept(kind, cutoff, since, until)
        return self._count if keep is None else int(np.count_nonzero(keep))

    def _kept(
        self,
        kind: str | None,
        cutoff: int | None,
        since: int | None,
        until: int | None,
        positions: npt.NDArray[np.int64] | None = None,
    ) -> npt.NDArray[np.bool_] | None:
        """Which of the rows at ``positions`` (all rows, by default) the filters keep (``None``:
        all of them)."""

        def column(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return values[: self._count] if positions is None else values[positions]

        keep: npt.NDArray[np.bool_] | None = None
        if kind is not None:
            keep = column(self._kinds) == self._kind_codes.get(kind, -1)
        for bound, values, at_least in (
            (cutoff, self._updated, True),
            (since, self._said, True),
            (until, self._said, False),
        ):
            if bound is not None:
                kept = column(values) >= bound if at_least else column(values) < bound
                keep = kept if keep is None else keep & kept
        return keep

    def nearest(
        self,
        query: FloatArray,
        k: int,
        *,
        kind: str | None = None,
        cutoff: int | None = None,
        since: int | None = None,
        until: int | None = None,
        helpers: Executor | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` row ids most similar to the unit vector ``query``, best first, with their
        cosine similarity; only of ``kind``, updated at ``cutoff`` or later, and created at
        ``since`` or later and before ``until`` (µs), when given.
        ``helpers`` (threads) share the first pass over a large matrix with the calling thread.

        With the query quantized the same way (``query ≈ q * step``, off by ``query_error``), each
        row's integer dot product ``d`` gives ``approx = d * scale * step``, and for the true dot
        product (Cauchy-Schwarz on the two differences)::

            |query · v - approx| <= |query| * error + query_error * (|v| + error)

        plus a float rounding margin that covers both this arithmetic and the float32 scores'
        own. A row whose upper bound is below the ``k``-th best lower bound cannot be among the
        ``k`` best, so only the others are scored in float32.
        """
        count = self._count
        keep = self._kept(kind, cutoff, since, until)
        kept = count if keep is None else int(np.count_nonzero(keep))
        if kept == 0:
            return []
        if kept <= k:
            positions = np.arange(count) if keep is None else np.flatnonzero(keep)
        else:
            positions = self._candidates(query, k, keep, helpers)
        scores = np.vecdot(self._matrix[positions], query)
        if k < len(scores):
            best = np.argpartition(-scores, k - 1)[:k]
            order = best[np.argsort(-scores[best], kind="stable")]
        else:
            order = np.argsort(-scores, kind="stable")
        rowids = self._rowids[positions]
        return [(int(rowids[at]), float(scores[at])) for at in order]

    def _candidates(
        self,
        query: FloatArray,
        k: int,
        keep: npt.NDArray[np.bool_] | None,
        helpers: Executor | None,
    ) -> npt.NDArray[np.intp]:
        """The positions (ascending) of the rows that may be among the ``k`` best (:meth:`nearest`);
        ``keep`` holds more than ``k`` rows."""
        count = self._count
        step = float(np.abs(query).max()) / 127.0 or 1.0
        query_codes = np.rint(query / np.float32(step)).astype(np.int8)
        query_error = float(np.linalg.norm(query - query_codes.astype(np.float32) * np.float32(step)))
        query_length = float(np.linalg.norm(query))
        approx = _integer_dots(self._codes[:count], query_codes, helpers)
        approx *= self._scales[:count]
        approx *= step
        width = self._errors[:count] * (query_length + query_error)
        # Float32 dot products of d terms are off by at most about d * 2**-24 * |query| * |v|:
        # the rounding margin is eight times that.
        rounding = (query_length * self._longest * self.dimensions + 1.0) * 2.0**-21
        slack = query_error * self._longest + rounding
        lower = approx - width
        if keep is None:
            kth_lower = float(np.partition(lower, count - k)[count - k])
        else:  # the k-th best of the rows kept (``keep`` holds more than k)
            among = lower[keep]
            kth_lower = float(np.partition(among, len(among) - k)[len(among) - k])
        approx += width
        reach = approx >= kth_lower - 2.0 * slack
        if keep is not None:
            reach &= keep
        return np.flatnonzero(reach)

    def _quantize(self, start: int, end: int) -> None:
        """Make the int8 copies (codes, scale, error) of rows ``start`` to ``end``."""
        rows = self._matrix[start:end]
        scales = np.abs(rows).max(axis=1) / np.float32(127.0)
        scales[scales == 0] = 1.0
        codes = np.rint(rows / scales[:, None])
        self._codes[start:end] = codes
        self._scales[start:end] = scales
        codes *= scales[:, None]
        np.subtract(rows, codes, out=codes)
        self._errors[start:end] = np.sqrt(np.vecdot(codes, codes))
        longest = float(np.sqrt(np.vecdot(rows, rows).max()))
        self._longest = max(self._longest, longest)

    def _code(self, kind: str) -> int:
        return self._kind_codes.setdefault(kind, len(self._kind_codes))

    def _row_arrays(self) -> list[npt.NDArray[np.generic]]:
        return [getattr(self, name) for name in _ROW_ARRAYS]

    def _reserve(self, capacity: int) -> None:
        count = self._count
        for name, old in zip(_ROW_ARRAYS, self._row_arrays(), strict=True):
            new = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
            new[:count] = old[:count]
            setattr(self, name, new)


def _integer_dots(codes: Int8Array, query: Int8Array, helpers: Executor | None) -> npt.NDArray[np.float64]:
    """The exact integer dot products of each row of ``codes`` with ``query`` (as float64)."""
    dots = np.empty((1, len(codes)), dtype=np.float64)
    one = query[None]
    if helpers is None or len(codes) < 2 * _PART_ROWS:
        simsimd.cdist(one, codes, metric="dot", out=dots)
        return dots[0]
    parts = min(1 + _HELPERS, len(codes) // _PART_ROWS)
    bounds = [len(codes) * part // parts for part in range(parts + 1)]
    futures = [
        helpers.submit(simsimd.cdist, one, codes[start:end], metric="dot", out=dots[:, start:end])
        for start, end in itertools.pairwise(bounds[1:])
    ]
    simsimd.cdist(one, codes[: bounds[1]], metric="dot", out=dots[:, : bounds[1]])
    for future in futures:
        future.result()
    return dots[0]


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
        return capacity * (dimensions * 5 + _ROW_BYTES) + vectors * _MAP_ENTRY_BYTES <= self.max_bytes

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
        """Threads that share the first pass over a large scope (``None``: one core only)."""
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
