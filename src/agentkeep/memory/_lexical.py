"""What hybrid recall shares across the memory stores: a search's checked request
(:class:`SearchRequest`: its mode, vector, query words and time window), the words of a text, the
query each backend's lexical index reads (SQLite FTS5, PostgreSQL ``tsquery``), a small BM25 for
the in-process store, and reciprocal rank fusion of a vector ranking with a lexical one.

Each store ranks by words with its own index (FTS5's BM25 with the Porter stemmer, PostgreSQL's
``ts_rank_cd`` over ``english`` vectors, :class:`BM25` here), so their lexical scores differ
in scale; fusion reads only ranks, so the fused order does not depend on that scale.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, TypeVar

__all__ = [
    "BM25",
    "CANDIDATES",
    "FUSION_K",
    "LEXICAL_WEIGHT",
    "STOPWORDS",
    "VECTOR_WEIGHT",
    "SearchMode",
    "SearchRequest",
    "fts5_query",
    "fused",
    "query_terms",
    "ranked",
    "stem",
    "tsquery",
    "words",
]

SearchMode = Literal["hybrid", "vector", "lexical"]
"""How a search ranks: by meaning and words fused (``"hybrid"``), by meaning (``"vector"``,
cosine similarity of embeddings), or by words (``"lexical"``, the store's full-text index)."""

FUSION_K: Final = 60
"""Reciprocal rank fusion's constant: a memory at rank ``r`` (from 1) of a ranking adds
``weight / (FUSION_K + r)`` to its fused score (the constant of Cormack et al., 2009)."""

VECTOR_WEIGHT: Final = 1.0
LEXICAL_WEIGHT: Final = 1.0
"""The weights of the two rankings in fusion (measured with ``bench/eval_memory.py``; see
docs/memory.md)."""

CANDIDATES: Final = 50
"""How many memories each ranking contributes to fusion at least (``4 * k`` if more)."""

_MAX_TERMS: Final = 32

_STOPWORDS_TEXT: Final = """a about above after again against all am an and any are as at be because
been before being below between both but by can could did do does doing down during each few for
from further had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours ourselves
out over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which while
who whom why will with would you your yours yourself yourselves s t don ll ve re d m o y ever also
tell know remember ask asked said say says"""

STOPWORDS: Final = frozenset(_STOPWORDS_TEXT.split())
"""Words a query's lexical side leaves out: they say how a question is asked, not what about
(each backend indexes every word of a memory; only the query is thinned)."""

_WORD: Final = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The words of ``text``, lower-cased (runs of letters and digits)."""
    return _WORD.findall(text.lower())


def query_terms(text: str) -> list[str]:
    """The distinct words of a query that carry its subject (no :data:`STOPWORDS`), in order,
    at most 32."""
    kept = dict.fromkeys(w for w in words(text) if w not in STOPWORDS)
    return list(kept)[:_MAX_TERMS]


def fts5_query(terms: Iterable[str]) -> str:
    """An FTS5 query that matches any of ``terms`` (words only: quoted, nothing to escape)."""
    return " OR ".join(f'"{term}"' for term in terms)


def tsquery(terms: Iterable[str]) -> str:
    """A ``to_tsquery`` text that matches any of ``terms`` (words only: no operators inside)."""
    return " | ".join(terms)


def stem(word: str) -> str:
    """A light English stem (plural and verb endings), so "dogs" finds "dog" in the in-process
    store (FTS5 and PostgreSQL use their own stemmers)."""
    for suffix, replacement in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: len(word) - len(suffix)] + replacement
    return word


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """A search, checked (what :func:`~agentkeep.memory.base.search_request` builds)."""

    mode: SearchMode
    vector: list[float] | None
    terms: tuple[str, ...]
    since: datetime | None
    until: datetime | None

    @property
    def windowed(self) -> bool:
        """Whether the search keeps only memories of a time window."""
        return self.since is not None or self.until is not None

    def pool(self, k: int) -> int:
        """How many candidates each ranking gives a fused search of ``k``."""
        return k if self.mode != "hybrid" else max(CANDIDATES, 4 * k)


class BM25:
    """Okapi BM25 over one scope's memories (the in-process store's lexical index): each
    memory's stemmed word counts are kept as it is written; a search reads them all (exact,
    O(memories) per search, as the store's vector search is).

    Args:
        k1: Term frequency saturation.
        b: Length normalization.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._docs: dict[str, Counter[str]] = {}
        self._lengths: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._docs)

    def put(self, key: str, text: str) -> None:
        terms = [stem(w) for w in words(text)]
        self._docs[key] = Counter(terms)
        self._lengths[key] = len(terms)

    def remove(self, key: str) -> None:
        self._docs.pop(key, None)
        self._lengths.pop(key, None)

    def scores(self, terms: Sequence[str], keys: Iterable[str]) -> dict[str, float]:
        """The BM25 score of each of ``keys`` (indexed ones) that holds a term of ``terms``."""
        stems = list(dict.fromkeys(stem(t) for t in terms))
        if not stems or not self._docs:
            return {}
        count = len(self._docs)
        average = sum(self._lengths.values()) / count or 1.0
        frequency = {s: sum(1 for doc in self._docs.values() if s in doc) for s in stems}
        idf = {s: math.log(1 + (count - n + 0.5) / (n + 0.5)) for s, n in frequency.items() if n}
        found: dict[str, float] = {}
        for key in keys:
            doc = self._docs.get(key)
            if doc is None:
                continue
            norm = self.k1 * (1 - self.b + self.b * self._lengths[key] / average)
            score = sum(
                weight * doc[s] * (self.k1 + 1) / (doc[s] + norm) for s, weight in idf.items() if s in doc
            )
            if score > 0:
                found[key] = score
        return found


K = TypeVar("K", bound=Hashable)


def fused(
    vector: Sequence[K],
    lexical: Sequence[K],
    *,
    vector_weight: float = VECTOR_WEIGHT,
    lexical_weight: float = LEXICAL_WEIGHT,
) -> list[K]:
    """Reciprocal rank fusion of two rankings (best first each): every item's score is the sum
    of ``weight / (FUSION_K + rank)`` over the rankings it is in; best first, ties in the order
    of the vector ranking, then of the lexical one."""
    scores: dict[K, float] = {}
    for ranking, weight in ((vector, vector_weight), (lexical, lexical_weight)):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (FUSION_K + rank)
    order = {item: at for at, item in enumerate(scores)}
    return sorted(scores, key=lambda item: (-scores[item], order[item]))


def ranked(
    nearest: Sequence[tuple[int, float]],
    lexical: Sequence[tuple[int, float]],
    *,
    mode: SearchMode,
    k: int,
    min_score: float | None,
) -> tuple[list[int], dict[int, float]]:
    """The rows a search returns, best first, and the similarity of those found by meaning:
    ``nearest`` (row, cosine; the ones under ``min_score`` left out, a NaN kept for the caller to
    refuse) alone, or fused with ``lexical`` (row, word score) in ``"hybrid"`` mode, ``k`` at
    most. Rows found by words only have no similarity here: the store reads theirs."""
    kept = [(row, score) for row, score in nearest if min_score is None or not score < min_score]
    if mode == "hybrid":
        order = fused([row for row, _ in kept], [row for row, _ in lexical])[:k]
    else:
        order = [row for row, _ in kept]
    return order, dict(kept)
