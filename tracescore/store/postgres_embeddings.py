"""The embedding cache's table on PostgreSQL (the store's cache role for
:mod:`tracescore.embeddings.cache`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._internal.vectors import pack, unpack
from .compat import connect

if TYPE_CHECKING:
    import psycopg


class PostgresEmbeddingCache:
    """The ``embedding_cache`` table on PostgreSQL (same methods as the SQLite
    :class:`~tracescore.embeddings.cache.EmbeddingCache`), shared by the fleet. Thread-safe
    (one connection behind a lock, reopened after a fork or a broken connection)."""

    def __init__(self, url: str) -> None:
        import os
        import threading

        self.url = url
        self._conn: psycopg.Connection[Any] | None = None
        self._pid = 0
        self._lock = threading.Lock()
        self._getpid = os.getpid

    def _db(self) -> psycopg.Connection[Any]:
        c = self._conn
        if c is None or c.closed or c.broken or self._pid != self._getpid():
            c = self._conn = connect(self.url)
            self._pid = self._getpid()
        return c

    def get_many(self, model: str, keys: Iterable[str]) -> dict[str, list[float]]:
        with self._lock:
            rows = self._db().execute(
                "SELECT text_sha256, vector FROM embedding_cache WHERE model=%s "
                "AND text_sha256 = ANY(%s)", (model, list(dict.fromkeys(keys)))).fetchall()
        return {k: unpack(bytes(blob)) for k, blob in rows}

    def put_many(self, model: str, items: Iterable[tuple[str, Sequence[float]]]) -> None:
        now = time.time()
        rows = [(model, key, len(vec), pack(vec), now) for key, vec in items]
        if not rows:
            return
        with self._lock:
            conn = self._db()
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO embedding_cache VALUES (%s,%s,%s,%s,%s) ON CONFLICT "
                    "(model, text_sha256) DO UPDATE SET dim=excluded.dim, "
                    "vector=excluded.vector, created_at=excluded.created_at", rows)

    def count(self, model: str | None = None) -> int:
        with self._lock:
            if model:
                row = self._db().execute("SELECT count(*) FROM embedding_cache WHERE model=%s",
                                         (model,)).fetchone()
            else:
                row = self._db().execute("SELECT count(*) FROM embedding_cache").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == self._getpid():
                self._conn.close()
            self._conn = None
