"""The embedding cache's table (the store's cache role for :mod:`tracescore.embeddings.cache`):
one vector per (model, SHA-256 of the text). :func:`open_embedding_cache` picks the backend —
the SQLite class here, or :class:`~.postgres_embeddings.PostgresEmbeddingCache` — so the
embedder never asks which one it has, nor opens a connection itself.

Table ``embedding_cache``: ``model``, ``text_sha256``, ``dim``, ``vector`` (float32,
little-endian), ``created_at``. On SQLite it is created here (in the tracescore database); the
connection is opened lazily (and again after a fork), guarded by a lock, and its reads and
writes are short (the WAL database is shared with the record writer, hence a busy timeout).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from .._internal.db_urls import is_postgres
from .._internal.vectors import pack as _pack
from .._internal.vectors import unpack as _unpack

Vector = list[float]

__all__ = ["EmbeddingCache", "open_embedding_cache"]

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


def open_embedding_cache(db_path: str) -> Any:
    """The embedding cache of ``db_path``: PostgreSQL's for a ``postgresql://`` URL (shared by
    the fleet), else SQLite's. Opens nothing yet (the connection comes at first use)."""
    if is_postgres(db_path):
        from .postgres_embeddings import PostgresEmbeddingCache

        return PostgresEmbeddingCache(str(db_path))
    return EmbeddingCache(db_path)
