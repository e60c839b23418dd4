"""The SQLite backend's plumbing: the write transaction (:class:`_Tx`), multi-row inserts,
and the lazily opened sqlite-utils view (:class:`_LazyDatabase`)."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from .._internal.db_faults import TIGHT
from ..score import Score
from .rollup import multi_row_sql, values_group
from .rows import (
    _json_safe,
    clean_text,
    dumps,
)
from .vacuum import WAITING


class _TxHost(Protocol):
    """What a transaction needs of the SQLite store (:class:`.sqlite.Store`), named here so
    that this floor does not import the store class built on it."""

    conn: sqlite3.Connection
    path: str
    broken: BaseException | None
    _tx_depth: int
    _ckpt_off: bool

    def recover(self) -> None: ...

    def give_back_wal(self) -> None: ...


class _Tx:
    """BEGIN IMMEDIATE … COMMIT/ROLLBACK on an autocommit connection; re-entrant.

    A failed COMMIT is rolled back; a ROLLBACK is sent only while a transaction is open (after
    ``SQLITE_FULL`` or ``SQLITE_IOERR`` SQLite may have rolled back already, and "cannot
    rollback" would hide the error that matters); a ROLLBACK that fails marks the store
    broken, so its next transaction starts on a new connection."""

    def __init__(self, store: _TxHost) -> None:
        self.store = store
        self.conn = store.conn
        self.outer = False

    def __enter__(self) -> sqlite3.Connection:
        self.outer = self.store._tx_depth == 0
        if self.outer and self.conn.in_transaction:
            # a transaction left open outside any of ours (a failed one SQLite kept): the
            # outer transaction must not run inside it and never commit
            self._rollback()
            if self.store.broken is not None:
                self.store.recover()
                self.conn = self.store.conn
        if self.outer:
            # (while a pruning run of this process works on the database, its commits do not
            # checkpoint: the run does, once per 1 GiB of WAL — vacuum._Waiting.is_pruning)
            pruning = WAITING.is_pruning(self.store.path, self.conn)
            if pruning != self.store._ckpt_off:
                self.conn.execute(f"PRAGMA wal_autocheckpoint={0 if pruning else 1000}")
                self.store._ckpt_off = pruning
            # (a pruning run on another connection of this process lets waiters in as soon as
            # its batch commits: vacuum.Pauses)
            since = WAITING.enter(self.store.path)
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            finally:
                WAITING.leave(self.store.path, since)
        self.store._tx_depth += 1
        return self.conn

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.store._tx_depth -= 1
        if not self.outer:
            return
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
            if self.store.path in TIGHT:  # (see TightDisks: keep the WAL small)
                self.store.give_back_wal()
        else:
            self._rollback()

    def _rollback(self) -> None:
        if not self.conn.in_transaction:
            return  # SQLite rolled back by itself
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            self.store.broken = exc


def _insert_rows(conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> int:
    """``executemany(sql, rows)`` in a few statements: rows go in as multi-row ``VALUES``
    lists of 2**k rows (``sql`` is an ``INSERT … VALUES (…)``; each statement text is cached
    by the sqlite3 module). Returns the rows inserted.

    Why: SQLite runs each row of an ``executemany`` as a step of its own and the sqlite3
    module lets go of the GIL around every step; while the app's threads keep the GIL busy,
    each step then waits for it (up to ``sys.getswitchinterval()``, 5 ms). Thousands of steps
    per batch starved the writer behind a busy app (in a tight ``log_record`` loop it stored
    ~170 records/s and dropped the rest); a few statements per batch do not. Each statement
    still costs a wait for the GIL (5 ms behind a busy app thread, ~25 ms measured on a
    loaded machine), so they are as big as SQLite's limit on bound values allows (~900 record
    rows), and for an ``INSERT OR IGNORE`` the rows left over after the full statements go in
    one statement of the next cached size up, filled with copies of its last row (a copy has
    that row's key: SQLite ignores it, and the count is of rows inserted) instead of a
    statement per power of two."""
    pad = sql.startswith("INSERT OR IGNORE ")
    if len(rows) < 4 and not pad:
        return int(conn.executemany(sql, rows).rowcount)
    return sum(conn.execute(text, values).rowcount
               for text, values, _ in _statements(sql, rows, pad))


def _statements(sql: str, rows: Sequence[Sequence[Any]],
                pad: bool) -> Iterator[tuple[str, list[Any], int]]:
    """:func:`_insert_rows`' statements for ``rows``: (text, values, how many of ``rows``
    it holds) of 2**k rows each, as many as SQLite's bound-value limit allows; ``pad``: the
    rows left over go in one statement of the next size up, filled with copies of its last
    row (for statements that ignore a row whose key exists), else in one statement per power
    of two."""
    width = max(1, values_group(sql)[1].count("?"))
    biggest = min(_MAX_ROWS, max(1, _MAX_VARIABLES // width))
    i = 0
    while i < len(rows):
        left = len(rows) - i
        k = biggest
        if pad:
            while k // 2 >= left:  # (the smallest size of the ladder that holds them all)
                k //= 2
        else:
            while k > left:
                k //= 2
        chunk = rows[i:i + k]
        real = len(chunk)
        if real < k:
            chunk = [*chunk, *[chunk[-1]] * (k - real)]
        yield multi_row_sql(sql, k), list(_chain(chunk)), real
        i += k


def _score_values(job_id: int, record_id: str, trace_id: str, job_metric: str, s: Score,
                  now: float, delivery: str | None) -> tuple[Any, ...]:
    """A score row's first 15 columns (``_INSERT_SCORE``'s order; ``s`` scrubbed already)."""
    return (job_id, record_id, trace_id, s.name, s.metric or job_metric, s.metric_version,
            s.value, s.label, clean_text(s.explanation) if s.explanation else None, s.status,
            clean_text(s.error) if s.error else None, s.duration_ms,
            dumps(_json_safe(dict(s.details))), now, delivery)


def _insert_keyed(conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]],
                  table: str, key_cols: Sequence[str], key_at: Sequence[int]
                  ) -> dict[tuple[Any, ...], int]:
    """Insert ``rows`` with ``sql`` (an ``INSERT … VALUES (…)`` into ``table`` that skips a row
    whose key exists), as :func:`_insert_rows` does; the rows inserted, key → rowid. The key
    of a row: its values at ``key_at``, the columns ``key_cols``.

    No ``RETURNING``: each row it returns is a step of its own, and each step lets go of the
    GIL and waits to get it back behind a busy app (:func:`_insert_rows`). A statement that
    inserted every row of its own gave them consecutive rowids, in order, up to the cursor's
    ``lastrowid`` (SQLite gives a new row the largest rowid + 1; inside the caller's write
    transaction nothing else inserts meanwhile — as :meth:`Store._insert_or_ignore`
    assumes). When some rows were skipped (a replay, a key twice), the ones inserted are read
    back by rowid."""
    out: dict[tuple[Any, ...], int] = {}
    cols = ", ".join(key_cols)
    i = 0
    for text, values, k in _statements(sql, rows, pad=True):
        chunk = rows[i:i + k]
        i += k
        cur = conn.execute(text, values)
        n, last = cur.rowcount, cur.lastrowid
        if n <= 0 or last is None:
            continue
        if n == len(chunk):
            for j, row in enumerate(chunk):
                out[tuple(row[a] for a in key_at)] = last - n + 1 + j
            continue
        for rowid, *key in conn.execute(
                f"SELECT rowid, {cols} FROM {table} WHERE rowid > ?", (last - n,)):
            out[tuple(key)] = int(rowid)
    return out


_chain = itertools.chain.from_iterable
#: At most this many rows per statement of :func:`_insert_rows`, and bound values (SQLite's
#: default limit is 32,766 since 3.32; 999 before)
_MAX_ROWS = 1024
_MAX_VARIABLES = 32_766 if sqlite3.sqlite_version_info >= (3, 32) else 999


class _LazyDatabase:
    """``Store.db``: a ``sqlite_utils.Database`` on the store's connection, made at first use.

    Only schema migrations use it (creating tables of a new database). ``sqlite_utils.db``
    imports pandas (and numpy) when they are installed — tens of MB in an app process whose
    writer needs plain ``sqlite3`` only — so an up-to-date database never imports it:
    :meth:`table_names` (what every open asks) is answered here, everything else goes to the
    real object."""

    __slots__ = ("conn", "_db")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._db: Any = None

    def table_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]

    def __getattr__(self, name: str) -> Any:
        db = self._db
        if db is None:
            import sqlite_utils

            db = self._db = sqlite_utils.Database(self.conn)
        return getattr(db, name)
