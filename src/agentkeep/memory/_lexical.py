"""What hybrid recall shares across the memory stores: a search's checked request
(:class:`SearchRequest`: its mode, vector, query words and time window), the words of a text, the
query each backend's lexical index reads (SQLite FTS5, PostgreSQL ``tsquery``), what a memory's
words are indexed with, a small BM25 for the in-process store, and the fusion of a vector ranking
with a lexical one by score (which also prefers memories said by someone the query names, and
said in a period it names: :mod:`._dates`).

Each store ranks by words with its own index (FTS5's BM25 with the Porter stemmer, PostgreSQL's
``ts_rank_cd`` over ``english`` vectors, :class:`BM25` here), so their lexical scores differ
in scale; fusion divides each ranking's scores by its best, so the fused order does not depend
on that scale.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, TypeVar

__all__ = [
    "BM25",
    "CANDIDATES",
    "DATE_BOOST",
    "INDEXED_METADATA",
    "LEXICAL_WEIGHT",
    "SPEAKER_BOOST",
    "STOPWORDS",
    "VECTOR_WEIGHT",
    "SearchMode",
    "SearchRequest",
    "blended",
    "fts5_query",
    "indexed_text",
    "names_in",
    "query_terms",
    "ranked",
    "said_in",
    "standout",
    "stem",
    "tsquery",
    "without_names",
    "words",
]

SearchMode = Literal["hybrid", "vector", "lexical"]
"""How a search ranks: by meaning and words fused (``"hybrid"``), by meaning (``"vector"``,
cosine similarity of embeddings), or by words (``"lexical"``, the store's full-text index)."""

VECTOR_WEIGHT: Final = 0.6
LEXICAL_WEIGHT: Final = 0.4
SPEAKER_BOOST: Final = 0.5
DATE_BOOST: Final = 0.5
"""The weights of fusion (:func:`blended`): the prior of the cosine and of the word score (each
multiplied, per search, by the square of how far its ranking's best stands out from the
candidates: :func:`standout`; then the two made to sum to 1), what a memory said by someone the
query names adds, and what a memory said in a period the query names adds (a day or a month:
:func:`~._dates.named_periods`); measured with ``bench/eval_memory.py``, see docs/memory.md."""

CANDIDATES: Final = 50
"""How many memories each ranking contributes to fusion at least (``4 * k`` if more)."""

_MAX_TERMS: Final = 32

INDEXED_METADATA: Final = ("speaker", "context")
"""The metadata a memory's words are indexed with besides its text, when they are strings: who
said it, and what was said just before (the semantic provider keeps ``"speaker: text"`` of the
message before a remembered one), so a reply ("Yes, twice last year!") is found by the words of
what it answers. Only the index reads them: the memory's text stays what was said."""

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


def indexed_text(text: str, metadata: Mapping[str, object]) -> str:
    """The text a memory's word index holds: its ``text`` and the string values of its
    :data:`INDEXED_METADATA`, one per line."""
    extra = [value for name in INDEXED_METADATA if isinstance(value := metadata.get(name), str) and value]
    return "\n".join((text, *extra)) if extra else text


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
    periods: tuple[tuple[int, int], ...] = ()
    """The periods the query's text names, in microseconds (:func:`~._dates.named_periods`; read
    by a fused search only)."""

    @property
    def windowed(self) -> bool:
        """Whether the search keeps only memories of a time window."""
        return self.since is not None or self.until is not None

    def pool(self, k: int) -> int:
        """How many candidates each ranking gives a fused search of ``k``."""
        return k if self.mode != "hybrid" else max(CANDIDATES, 4 * k)


class BM25:
    """Okapi BM25 over one scope's memories (the in-process store's lexical index): each
    memory's stemmed word counts are kept as it is written, with the number of memories holding
    each word and the total length; a search scores the memories asked about (exact, O(memories)
    per search, as the store's vector search is).

    Args:
        k1: Term frequency saturation.
        b: Length normalization.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._docs: dict[str, Counter[str]] = {}
        self._lengths: dict[str, int] = {}
        self._holding: Counter[str] = Counter()  # how many memories hold each stem
        self._total = 0

    def __len__(self) -> int:
        return len(self._docs)

    def put(self, key: str, text: str) -> None:
        self.remove(key)
        terms = [stem(w) for w in words(text)]
        doc = Counter(terms)
        self._docs[key] = doc
        self._lengths[key] = len(terms)
        self._holding.update(doc.keys())
        self._total += len(terms)

    def remove(self, key: str) -> None:
        doc = self._docs.pop(key, None)
        if doc is None:
            return
        self._total -= self._lengths.pop(key)
        self._holding.subtract(doc.keys())
        for gone in [s for s in doc if self._holding[s] <= 0]:
            del self._holding[gone]

    def scores(self, terms: Sequence[str], keys: Iterable[str]) -> dict[str, float]:
        """The BM25 score of each of ``keys`` (indexed ones) that holds a term of ``terms``."""
        stems = list(dict.fromkeys(stem(t) for t in terms))
        if not stems or not self._docs:
            return {}
        count = len(self._docs)
        average = self._total / count or 1.0
        idf = {
            s: math.log(1 + (count - n + 0.5) / (n + 0.5)) for s in stems if (n := self._holding.get(s, 0))
        }
        if not idf:
            return {}
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


def standout(scores: Sequence[float]) -> float:
    """How far the best of ``scores`` stands out from them all: (best - mean) / standard
    deviation (0 for fewer than two scores, or all equal). The same whatever the scores' scale,
    so the backends' different word scores give the same figure."""
    count = len(scores)
    if count < 2:
        return 0.0
    mean = math.fsum(scores) / count
    spread = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / count)
    return (max(scores) - mean) / spread if spread > 0 else 0.0


def blended(
    nearest: Sequence[tuple[K, float]],
    lexical: Sequence[tuple[K, float]],
    similarity: Mapping[K, float],
    named: Collection[K] = (),
    dated: Collection[K] = (),
    *,
    vector_weight: float = VECTOR_WEIGHT,
    lexical_weight: float = LEXICAL_WEIGHT,
    speaker_boost: float = SPEAKER_BOOST,
    date_boost: float = DATE_BOOST,
) -> list[K]:
    """Fusion by score of two rankings' candidates (``nearest``: item, cosine; ``lexical``: item,
    word score; each best first), best first: each candidate scores its cosine (``similarity``
    holds every candidate's; below 0 counts 0) over the best cosine, times the vector side's
    weight, plus its word score over the best word score (0 when the words did not find it),
    times the word side's weight, plus ``speaker_boost`` when it is in ``named`` (said by someone
    the query names), plus ``date_boost`` when it is in ``dated`` (said in a period the query
    names). The weights adapt to the search: ``vector_weight`` and ``lexical_weight``
    are each multiplied by the square of their side's :func:`standout` over all the candidates
    (a ranking whose best stands far out of the rest is trusted more; on a question that shares
    a rare name with one memory the words stand out, on one asked in other words the cosines
    do), then made to sum to 1 (the priors alone when neither stands out).
    Ties in the order of the vector ranking, then of the lexical one."""
    words = dict(lexical)
    order = {
        item: at for at, item in enumerate(dict.fromkeys([i for i, _ in nearest] + [i for i, _ in lexical]))
    }
    cosines = [max(similarity.get(item, 0.0), 0.0) for item in order]
    matched = [words.get(item, 0.0) for item in order]
    best_cosine = max(cosines, default=0.0) or 1.0
    best_words = max(matched, default=0.0) or 1.0
    by_meaning = vector_weight * standout(cosines) ** 2
    by_words = lexical_weight * standout(matched) ** 2
    if by_meaning + by_words <= 0:
        by_meaning, by_words = vector_weight, lexical_weight
    total = by_meaning + by_words
    by_meaning, by_words = by_meaning / total / best_cosine, by_words / total / best_words
    named, dated = set(named), set(dated)
    scores = {
        item: by_meaning * cosine
        + by_words * word
        + (speaker_boost if item in named else 0.0)
        + (date_boost if item in dated else 0.0)
        for item, cosine, word in zip(order, cosines, matched, strict=True)
    }
    return sorted(order, key=lambda item: (-scores[item], order[item]))


def names_in(terms: Collection[str], speaker: object) -> bool:
    """Whether a query of ``terms`` names ``speaker`` (every word of the name is a term)."""
    if not isinstance(speaker, str):
        return False
    name = words(speaker)
    return bool(name) and all(part in terms for part in name)


def without_names(text: str, names: Iterable[str]) -> str:
    """``text`` with every word of ``names`` left out (whole words, any case, with a possessive
    ``'s``), spaces closed up; ``text`` itself when nothing would be left but :data:`STOPWORDS`.

    What a search by meaning embeds of a question that names speakers (:meth:`~agentkeep.memory.
    semantic.SemanticMemoryProvider.unnamed`): left in the embedding, a name pulls the question
    toward any memory that mentions it rather than toward what was said about the subject; a
    fused search matches it by its speaker preference."""
    parts = sorted({w for name in names for w in words(name)}, key=len, reverse=True)
    if not parts:
        return text
    pattern = r"(?<![^\W_])(?:" + "|".join(map(re.escape, parts)) + r")(?:['\u2019]s)?(?![^\W_])"
    kept = " ".join(re.sub(pattern, " ", text, flags=re.IGNORECASE).split())
    kept = re.sub(r" (?=[?!.,;:])", "", kept)
    return kept if query_terms(kept) else text


def said_in(periods: Sequence[tuple[int, int]], said_at: int) -> bool:
    """Whether ``said_at`` (microseconds since the epoch) falls in one of ``periods``."""
    return any(start <= said_at < end for start, end in periods)


def ranked(
    nearest: Sequence[tuple[K, float]],
    lexical: Sequence[tuple[K, float]],
    *,
    mode: SearchMode,
    k: int,
    min_score: float | None,
    similarity: Mapping[K, float] | None = None,
    named: Collection[K] = (),
    dated: Collection[K] = (),
) -> tuple[list[K], dict[K, float]]:
    """The items a search returns, best first, and the similarity of those it knows: ``nearest``
    (item, cosine; the ones under ``min_score`` left out, a NaN kept for the caller to refuse)
    alone, or blended with ``lexical`` (item, word score) in ``"hybrid"`` mode (:func:`blended`;
    ``similarity``: the cosines of the items found by words only, ``named``: the candidates said
    by someone the query names, ``dated``: those said in a period it names), ``k`` at most."""
    kept = [(item, score) for item, score in nearest if min_score is None or not score < min_score]
    scores = dict(kept)
    if mode == "hybrid":
        known = {**(similarity or {}), **dict(nearest)}  # those under min_score too: found by words
        order = blended(kept, lexical, known, named, dated)[:k]
        scores.update((item, known[item]) for item in order if item in known)
    else:
        order = [item for item, _ in kept]
    return order, scores
