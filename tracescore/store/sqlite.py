"""The SQLite backend (through sqlite-utils): records, jobs, scores, counters.

One :class:`Store` per thread (SQLite connections are not shared across threads). WAL mode lets
the writer, the scoring worker and readers (CLI, reports) work at once. The database is the
source of truth: the full context text of sampled records lives here even when span attributes
are truncated (unsampled records are compact: :mod:`.compact`; old ones are pruned:
:mod:`.retention`). Each write also updates the hourly rollups per segment in the same
transaction (:mod:`.rollup`, :mod:`.segments`).

Every method does blocking I/O and must never be called on the app's request path.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._internal.db_faults import storage_fault
from .._internal.secrets import scrub, scrub_value
from .._internal.validate import clean_name
from . import migrations as _migrations
from .labels import LabelsMixin
from .migrations import SQLITE_MIGRATIONS, migrate_sqlite
from .rows import (  # noqa: F401 (re-exported: callers name them here)
    METRIC_COLS,
    Job,
    NewJob,
    clean_text,
    dumps,
    metric_row,
)
from .segments import SegmentResolver
from .sqlite_jobs import SqliteJobs
from .sqlite_sql import (  # noqa: F401 (re-exported: their old home)
    _insert_keyed,
    _insert_rows,
    _LazyDatabase,
    _Tx,
)
from .vacuum import wal_mtime

#: 1: the first schema; 2: compact rows and rollups of pruned rows; 3: segments and hourly
#: rollups kept up to date on write; 4: human labels, label plans, canary history; 5: retrieval
#: candidates; 6: no index of records by trace id (see .migrations).
SCHEMA_VERSION = SQLITE_MIGRATIONS[-1].version

def _create_private(path: str) -> None:
    """Create a new database file readable by its owner only (0600): it holds every captured
    query and document. SQLite creates the -wal and -shm files with the database file's
    permissions, so they are private too. An existing file keeps its mode."""
    if path in ("", ":memory:") or path.startswith("file:"):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # sqlite3.connect reports the problem (missing folder, no permission) itself
    os.close(fd)


def open_jobs(db_path: str, metrics: Sequence[str]) -> tuple[int, float]:
    """(open jobs of ``metrics``, seconds since the oldest of them was created, re-opened or
    leased) on a short-lived read-only connection (the metric reader's thread, never the
    app's)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1.0)
    try:
        marks = ",".join("?" * len(metrics))
        n, oldest = conn.execute(
            "SELECT count(*), min(coalesce(updated_at, created_at)) FROM jobs "
            f"WHERE status IN ('pending', 'leased') AND metric IN ({marks})", tuple(metrics),
        ).fetchone()
    finally:
        conn.close()
    return int(n), (max(0.0, time.time() - float(oldest)) if oldest is not None else 0.0)


class Store(SqliteJobs, LabelsMixin):
    """The SQLite backend of :class:`~.base.StoreAPI` (labels: :class:`.labels.LabelsMixin`)."""

    dialect = "sqlite"
    #: one host: a process that starts may redeliver every score a dead one left
    shared = False

    def __init__(self, path: str | Path, *, timeout_s: float = 30.0) -> None:
        self.path = str(path)
        self.timeout_s = timeout_s
        _create_private(self.path)
        #: a failed transaction could not be rolled back (the error): the connection is opened
        #: again before the next transaction (see :meth:`recover`)
        self.broken: BaseException | None = None
        self._tx_depth = 0
        #: when another connection may last have written, as this store opened: the WAL
        #: file's mtime (None: no WAL, so no connection had the database open), and this
        #: connection's first ``data_version`` (later commits of others change it) — a
        #: pruning run starts from them (:func:`.vacuum.quiet_at_open`)
        self.wal_mtime_at_open = wal_mtime(self.path)
        self._connect()
        self.data_version_at_open = self.conn.execute("PRAGMA data_version").fetchone()[0]
        #: records → seg_id (cached per store object, so per thread)
        self.segmenter = SegmentResolver()
        self._ensure_schema()

    def _connect(self) -> None:
        conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        try:
            deadline = time.monotonic() + self.timeout_s
            # Must come before the first table (and before WAL): on an existing database it is
            # a no-op until a full VACUUM (`tracescore prune --vacuum`); pruned pages are reused.
            _pragma(conn, "PRAGMA auto_vacuum=INCREMENTAL", deadline)
            _pragma(conn, "PRAGMA journal_mode=WAL", deadline)
            # A WAL that grew for a large transaction or a backlog gives its room back when it
            # is next reset (a checkpoint brought it all into the database file), instead of
            # keeping its largest size for ever: on a small disk that room is the next write's.
            _pragma(conn, "PRAGMA journal_size_limit=1048576", deadline)
            _pragma(conn, "PRAGMA synchronous=NORMAL", deadline)
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self.db = _LazyDatabase(conn)
        #: this connection's autocheckpoint is off while a pruning run works (:class:`_Tx`)
        self._ckpt_off = False

    def recover(self) -> None:
        """After a fault that passes (a full disk, an I/O error): open the connection again,
        then try to checkpoint and truncate the WAL.

        SQLite rolls a transaction back by itself on some of these errors and not on others,
        and a connection that met an I/O error may keep a stale WAL index or an open read
        snapshot (which stops every checkpoint, so the WAL would grow for ever). A fresh
        connection is the one state known to be right; the old one is closed (which rolls back
        whatever it still held). If opening fails, the old connection stays and the caller
        retries later. The checkpoint matters on a full disk: the WAL holds every page written
        since the last one (up to ~4 MB before SQLite checkpoints by itself), mostly pages the
        database file already has room for, so truncating it is often what gives the next
        write its room. Best effort: it fails when the database file itself cannot grow."""
        old = self.conn
        self._connect()
        try:
            old.close()
        except sqlite3.Error:
            pass
        self.broken = None
        self.segmenter.reset()
        try:
            self.checkpoint("TRUNCATE", wait_s=0.2)
        except sqlite3.Error:
            pass

    def give_back_wal(self) -> None:
        """On a tight disk, after each commit: checkpoint the WAL and truncate it to zero bytes,
        never waiting (a reader or the other writer makes it return busy; the next commit tries
        again). A passive checkpoint alone leaves the WAL file at its largest size up to
        ``journal_size_limit`` (1 MiB), and on a 4 MiB disk those already-copied frames were
        the room the database file needed to grow into: the last jobs' scores could then never
        be written (issue 31's 250 × 10 KB records: 89 jobs open for ever, a 680 KB WAL of
        stale frames on a full disk)."""
        try:
            self.conn.execute("PRAGMA busy_timeout=0")
            try:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                self.conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
        except sqlite3.Error:
            pass  # committed all the same; the next commit tries again

    def checkpoint(self, mode: str = "TRUNCATE", *,
                   wait_s: float | None = None) -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint(mode)``: (busy, WAL frames, frames checkpointed); busy is 1
        when a reader or writer stopped it. ``wait_s``: how long to wait for them (default:
        the store's lock timeout)."""
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        if wait_s is not None:
            self.conn.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
        try:
            row = self.conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        finally:
            if wait_s is not None:
                self.conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
        return int(row[0]), int(row[1]), int(row[2])

    # -- schema -------------------------------------------------------------------------------
    def _schema_ready(self) -> bool:
        """Read-only check: is the current schema all there? (Then opening needs no write
        lock: readers and stats-like callers do not wait for a writer holding the database.)"""
        conn = self.conn
        try:
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            return False
        if row is None or str(row[0]) != str(_migrations.SQLITE_MIGRATIONS[-1].version):
            return False
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        cols = {r[1] for r in conn.execute("PRAGMA table_info(records)")}
        metric_cols = {r[1] for r in conn.execute("PRAGMA table_info(metrics)")}
        return {"prompt", "retrieval_queries", "agent"} <= cols and "is_binary" in metric_cols and {"judge_cache", "judge_calls", "feedback", "judge_health",
                                     "idx_jobs_open_job_id", "idx_feedback_trace"} <= names \
            and {name for name, _ in _migrations.REBUILT_INDEXES} <= names  # (retention's)

    def _ensure_schema(self) -> None:
        if self._schema_ready():
            return
        # The ordered, versioned steps live in .migrations (one list per backend).
        migrate_sqlite(self)

    def _ensure_judge_tables(self) -> None:
        """Tables and indexes added after the first schema: created if missing."""
        cols = {r[1] for r in self.conn.execute("PRAGMA table_info(records)")}
        if cols and "prompt" not in cols:
            self.conn.execute("ALTER TABLE records ADD COLUMN prompt TEXT")
        if cols and "retrieval_queries" not in cols:
            self.conn.execute("ALTER TABLE records ADD COLUMN retrieval_queries TEXT")
        metric_cols = {r[1] for r in self.conn.execute("PRAGMA table_info(metrics)")}
        if metric_cols and "is_binary" not in metric_cols:
            self.conn.execute("ALTER TABLE metrics ADD COLUMN is_binary INTEGER")
        # (executescript would commit the surrounding transaction: one statement at a time)
        for stmt in """
            CREATE TABLE IF NOT EXISTS judge_cache (
                key TEXT PRIMARY KEY, step TEXT, model TEXT, prompt_version TEXT,
                value TEXT, input_tokens INTEGER, output_tokens INTEGER, created_at REAL);
            CREATE TABLE IF NOT EXISTS judge_calls (
                call_id INTEGER PRIMARY KEY, record_id TEXT, step TEXT, model TEXT,
                input_tokens INTEGER, output_tokens INTEGER, latency_ms REAL, cost_usd REAL,
                error TEXT, created_at REAL);
            CREATE INDEX IF NOT EXISTS idx_judge_calls_created_at ON judge_calls(created_at);
            CREATE TABLE IF NOT EXISTS feedback (
                feedback_id INTEGER PRIMARY KEY, trace_id TEXT, name TEXT, value REAL,
                label TEXT, comment TEXT, created_at REAL);
            CREATE INDEX IF NOT EXISTS idx_feedback_trace ON feedback(trace_id);
            CREATE TABLE IF NOT EXISTS judge_health (
                model TEXT PRIMARY KEY, agreement REAL, cases INTEGER, degenerate INTEGER,
                detail TEXT, checked_at REAL)
            """.split(";"):
            self.conn.execute(stmt)

    # -- feedback ----------------------------------------------------------------------------
    def add_feedback(self, trace_id: str, name: str, value: float | None, label: str | None,
                     comment: str | None, created_at: float) -> None:
        with self.transaction():
            self.conn.execute(
                "INSERT INTO feedback(trace_id, name, value, label, comment, created_at) "
                "VALUES (?,?,?,?,?,?)",
                (trace_id, name, value, label, clean_text(comment) if comment else None,
                 created_at),
            )

    # -- judge -------------------------------------------------------------------------------
    def judge_cache_get(self, key: str) -> Any:
        row = self.conn.execute("SELECT value FROM judge_cache WHERE key=?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def judge_cache_put(self, key: str, step: str, model: str, version: str, value: Any,
                        input_tokens: int, output_tokens: int) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO judge_cache VALUES (?,?,?,?,?,?,?,?)",
            # a reply may quote a key (the judge read it somewhere): scrubbed like a score
            (key, step, clean_name(model), version, dumps(scrub_value(value)), input_tokens,
             output_tokens, time.time()),
        )

    def judge_call_log(self, *, record_id: str | None, step: str, model: str,
                       input_tokens: int, output_tokens: int, latency_ms: float,
                       cost_usd: float | None, error: str | None) -> None:
        self.conn.execute(
            "INSERT INTO judge_calls(record_id, step, model, input_tokens, output_tokens, "
            "latency_ms, cost_usd, error, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (record_id, step, model, input_tokens, output_tokens, latency_ms, cost_usd,
             scrub(error) if error else error, time.time()),
        )

    def judge_cost_today(self) -> float:
        day = time.time() - time.time() % 86400
        row = self.conn.execute(
            "SELECT coalesce(sum(cost_usd), 0) FROM judge_calls WHERE created_at >= ?", (day,)
        ).fetchone()
        return float(row[0])

    def set_judge_health(self, model: str, agreement: float, cases: int, degenerate: bool,
                         detail: Any) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO judge_health VALUES (?,?,?,?,?,?)",
            (model, agreement, cases, int(degenerate), dumps(detail), time.time()),
        )

    # -- retention (issue 13): the SQLite-specific part of pruning --------------------------
    def used_bytes(self) -> tuple[int, int]:
        """(bytes in use, file bytes): pages not on the freelist, and the whole file (plus WAL)."""
        page = int(self.conn.execute("PRAGMA page_size").fetchone()[0])
        pages = int(self.conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(self.conn.execute("PRAGMA freelist_count").fetchone()[0])
        wal = Path(self.path + "-wal")
        file_bytes = pages * page + (wal.stat().st_size if wal.exists() else 0)
        return (pages - free) * page, file_bytes

    def auto_vacuum_mode(self) -> str:
        mode = int(self.conn.execute("PRAGMA auto_vacuum").fetchone()[0])
        return {0: "none", 1: "full", 2: "incremental"}.get(mode, str(mode))

    def give_back_space(self, pages_per_step: int = 2048, *, pause_s: float = 0.05,
                        stop: Any = None) -> int:
        """Return free pages to the file system, ``pages_per_step`` per write transaction
        (incremental vacuum), then truncate the WAL. A database created before schema version 2
        has no incremental vacuum: its free pages are reused by new rows instead (see
        :meth:`vacuum_full`). Returns the pages given back."""
        if self.auto_vacuum_mode() != "incremental":
            return 0
        from .vacuum import incremental_vacuum

        return incremental_vacuum(self.conn, pages_per_step, pause_s=pause_s, stop=stop)[0]

    def vacuum_full(self) -> None:
        """Switch to incremental auto-vacuum and rewrite the whole file (``VACUUM``): needs
        free disk space of the database's size and blocks every writer while it runs — only
        from ``tracescore prune --vacuum``, never from a running app."""
        self.conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        self.conn.execute("VACUUM")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def transaction(self) -> _Tx:
        if self.broken is not None:  # (top level: a broken flag is set when the outer one ends)
            self.recover()
        return _Tx(self)

    def unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a fault that passes (another process's lock, a full disk — the
        database's, its WAL's or SQLite's temp directory's —, an I/O error), not a bad
        statement: the writer then keeps its batch in memory and retries, the scorer keeps its
        scores (:func:`~tracescore._internal.db_faults.storage_fault` names the kind)."""
        return storage_fault(exc) is not None

    def close(self) -> None:
        self.conn.close()

    def register_metrics(self, metrics: Sequence[Any]) -> None:
        """Record what the configured metrics declare (direction, threshold, score names)."""
        now = time.time()
        with self.transaction():
            self.conn.executemany(
                "INSERT OR REPLACE INTO metrics(" + ",".join(METRIC_COLS) + ") VALUES ("
                + ",".join("?" * len(METRIC_COLS)) + ")",
                [metric_row(m, now) for m in metrics],
            )


def _pragma(conn: sqlite3.Connection, sql: str, deadline: float) -> None:
    """``conn.execute(sql)``, again after a lock error until ``deadline`` (monotonic).

    SQLite answers "database is locked" at once, without waiting in the busy handler, where
    waiting could deadlock: ``PRAGMA journal_mode=WAL`` on a database still in rollback mode
    while another connection is inside a write transaction (processes of a fleet opening a
    new database together; tests/test_store_open.py). The other transaction ends soon, so
    trying again is what a busy handler would have done."""
    pause = 0.005
    while True:
        try:
            conn.execute(sql).fetchall()
            return
        except sqlite3.OperationalError as exc:
            msg = str(exc).lower()
            if ("locked" not in msg and "busy" not in msg) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
