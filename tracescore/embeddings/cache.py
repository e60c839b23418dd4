"""Embedding cache: one vector per (model, SHA-256 of the text), in the tracescore database.

The table and its SQL are the store's (:mod:`tracescore.store.embedding_cache`, which picks the
backend). Like judge steps, a text is never
embedded twice by the same model: rescoring a record, adding a metric later, or the same
reference/answer/question on another record all reuse the stored vector. Concurrent requests
for the same text on one event loop share one in-flight computation.

Vectors go through float32 on the way in, so a fresh vector and a cached one are identical.

Threads: the scoring worker calls :meth:`CachedEmbedder.embed` on its event loop; the cache's
connection is opened lazily (and again after a fork), guarded by a lock.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Sequence
from typing import Any

from .._internal.vectors import as_float32
from ..store.embedding_cache import EmbeddingCache, open_embedding_cache  # noqa: F401
from . import Embedder, EmbeddingError

Vector = list[float]


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class CachedEmbedder:
    """Wraps an :class:`~tracescore.embeddings.Embedder`: each text is embedded once per model,
    then read from ``embedding_cache``. Only the texts missing from the cache reach the backend,
    in one batch. Counts ``hits`` and ``computed`` texts."""

    def __init__(self, inner: Embedder, db_path: str) -> None:
        self.inner = inner
        self.model = inner.model
        self.cache: Any = open_embedding_cache(db_path)
        self.hits = 0
        self.computed = 0
        self._inflight: dict[str, asyncio.Future[Vector]] = {}

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r})"

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}")
        keys = [text_key(t) for t in texts]
        unique = dict(zip(keys, texts))
        found = self.cache.get_many(self.model, unique)
        self.hits += len(found)
        loop = asyncio.get_running_loop()
        waiting: dict[str, asyncio.Future[Vector]] = {}
        todo: list[str] = []
        for k in unique:
            if k in found:
                continue
            fut = self._inflight.get(k)
            if fut is not None and fut.get_loop() is loop:
                waiting[k] = fut
            else:
                todo.append(k)
        if todo:
            mine = {k: loop.create_future() for k in todo}
            self._inflight.update(mine)
            try:
                vectors = _checked(await self.inner.embed([unique[k] for k in todo]), len(todo),
                                   self.model)
                self.cache.put_many(self.model, zip(todo, vectors))
                self.computed += len(todo)
                for k, v in zip(todo, vectors):
                    found[k] = v
                    mine[k].set_result(v)
            except BaseException as exc:
                for f in mine.values():
                    if not f.done():
                        f.set_exception(exc)
                        f.exception()  # retrieved: waiters re-raise it, nobody else must log it
                raise
            finally:
                for k, f in mine.items():
                    if self._inflight.get(k) is f:
                        del self._inflight[k]
        for k, fut in waiting.items():
            found[k] = await asyncio.shield(fut)
        return [found[k] for k in keys]

    async def aclose(self) -> None:
        self.close()
        await self.inner.aclose()

    def close(self) -> None:
        """Close the cache's database connection (the backend keeps working; reopens on use)."""
        self.cache.close()


def _checked(vectors: Any, n: int, model: str) -> list[Vector]:
    """Backends are third-party code or servers: check what they return before storing it."""
    try:
        out = [as_float32(v) for v in vectors]
    except (TypeError, ValueError, OverflowError) as exc:
        raise EmbeddingError(f"embedder {model!r} returned something that is not a list of "
                             f"vectors: {exc}") from exc
    if len(out) != n:
        raise EmbeddingError(f"embedder {model!r} returned {len(out)} vectors for {n} texts")
    dims = {len(v) for v in out}
    if len(dims) > 1 or 0 in dims:
        raise EmbeddingError(f"embedder {model!r} returned vectors of lengths {sorted(dims)}")
    if any(not math.isfinite(x) for v in out for x in v):
        raise EmbeddingError(f"embedder {model!r} returned a non-finite value")
    return out
