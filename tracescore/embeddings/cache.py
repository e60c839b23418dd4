"""Embedding cache: one vector per (model, SHA-256 of the text), in SQLite.

Table ``embedding_cache`` (created here, in the tracescore database): ``model``, ``text_sha256``,
``dim``, ``vector`` (float32, little-endian), ``created_at``. Like judge steps, a text is never
embedded twice by the same model: rescoring a record, adding a metric later, or the same
reference/answer/question on another record all reuse the stored vector. Concurrent requests
for the same text on one event loop share one in-flight computation.

Vectors go through float32 on the way in, so a fresh vector and a cached one are identical.

Threads: the scoring worker calls :meth:`CachedEmbedder.embed` on its event loop; the SQLite
connection is opened lazily (and again after a fork), guarded by a lock, and its reads and
writes are short (the WAL database is shared with the record writer, hence a busy timeout).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from .._internal.vectors import as_float32
from .._internal.vectors import pack as _pack
from .._internal.vectors import unpack as _unpack
from . import Embedder, EmbeddingError

Vector = list[float]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID
"""


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()




class EmbeddingCache:
    """The ``embedding_cache`` table. Thread-safe (one connection behind a lock)."""

    def __init__(self, db_path: str, *, timeout_s: float = 30.0) -> None:
        self.db_path = str(db_path)
        self.timeout_s = timeout_s
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(self.db_path, timeout=self.timeout_s, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            conn.execute(_SCHEMA)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def get_many(self, model: str, keys: Iterable[str]) -> dict[str, Vector]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, Vector] = {}
        with self._lock:
            db = self._db()
            for i in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                part = keys[i:i + 500]
                marks = ",".join("?" * len(part))
                for key, blob in db.execute(
                        f"SELECT text_sha256, vector FROM embedding_cache WHERE model=? AND "
                        f"text_sha256 IN ({marks})", (model, *part)):
                    out[key] = _unpack(blob)
        return out

    def put_many(self, model: str, items: Iterable[tuple[str, Sequence[float]]]) -> None:
        now = time.time()
        rows = [(model, key, len(vec), _pack(vec), now) for key, vec in items]
        if not rows:
            return
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO embedding_cache VALUES (?,?,?,?,?)", rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def count(self, model: str | None = None) -> int:
        with self._lock:
            sql = "SELECT COUNT(*) FROM embedding_cache" + (" WHERE model=?" if model else "")
            return int(self._db().execute(sql, (model,) if model else ()).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


class CachedEmbedder:
    """Wraps an :class:`~tracescore.embeddings.Embedder`: each text is embedded once per model,
    then read from ``embedding_cache``. Only the texts missing from the cache reach the backend,
    in one batch. Counts ``hits`` and ``computed`` texts."""

    def __init__(self, inner: Embedder, db_path: str) -> None:
        self.inner = inner
        self.model = inner.model
        self.cache: Any = EmbeddingCache(db_path)
        if str(db_path).startswith(("postgresql://", "postgres://")):
            from ..store.postgres import PostgresEmbeddingCache

            self.cache = PostgresEmbeddingCache(str(db_path))
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
