"""A deterministic embedder for tests: :class:`HashingEmbedder`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

from ..memory.base import normalized

__all__ = ["HashingEmbedder"]

_WORD: Final = re.compile(r"\w+")


class HashingEmbedder:
    """Texts to vectors by feature hashing: each lower-cased word adds 1 to the component its
    SHA-256 picks, and the vector is normalized. Texts that share words score high, texts that
    share none score 0 (up to collisions): enough to test recall, filters and isolation without a
    model, the same on every machine. Not a model of meaning ("dog" and "puppy" are unrelated).

    Args:
        dimensions: The length of every vector.
    """

    def __init__(self, dimensions: int = 384) -> None:
        if dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        self._dimensions = dimensions
        self.calls = 0
        """How many ``embed`` calls were made."""

    @property
    def dimensions(self) -> int:
        """The length of every vector."""
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order (a text without words gets a fixed vector of its own)."""
        self.calls += 1
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self._dimensions
        words = _WORD.findall(text.lower()) or [""]
        for word in words:
            digest = hashlib.sha256(word.encode("utf-8", "surrogatepass")).digest()
            vector[int.from_bytes(digest[:8], "big") % self._dimensions] += 1.0
        return normalized(vector)
