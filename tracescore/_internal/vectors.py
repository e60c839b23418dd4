"""Embedding vectors as stored in ``embedding_cache.vector``: little-endian float32 bytes.

Shared by the SQLite cache (``tracescore.embeddings.cache``) and the PostgreSQL one
(``tracescore.store.postgres``) so that neither imports the other for it (they used to import
each other: the embeddings cache picks the Postgres backend, which borrowed its packing).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Sequence

__all__ = ["as_float32", "cosine_or_zero", "pack", "unpack"]


def pack(vec: Sequence[float]) -> bytes:
    a = array("f", vec)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def unpack(blob: bytes) -> list[float]:
    a = array("f")
    a.frombytes(blob)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


def as_float32(vec: Sequence[float]) -> list[float]:
    """The vector as stored: float32 values (as Python floats)."""
    return array("f", vec).tolist()


def cosine_or_zero(u: Sequence[float], v: Sequence[float]) -> float:
    """Cosine similarity of two vectors, 0.0 when either is all zeros (a feature or a
    threshold test, where "no direction" means "not similar"; the Ragas metrics' own
    ``tracescore.metrics.ragas.cosine`` refuses a zero vector instead)."""
    nu = math.sqrt(sum(x * x for x in u))
    nv = math.sqrt(sum(x * x for x in v))
    if nu == 0.0 or nv == 0.0:
        return 0.0
    return sum(x * y for x, y in zip(u, v)) / (nu * nv)
