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

import itertools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._internal.db_faults import TIGHT, storage_fault
from .._internal.secrets import scrub, scrub_score, scrub_value
from .._internal.validate import clean_name
from ..record import RagRecord
from ..sampling import Decision
from ..score import Score
from . import migrations as _migrations
from .compat import trace_records
from .labels import LabelsMixin
from .migrations import OPEN_JOBS, SQLITE_MIGRATIONS, migrate_sqlite
from .rollup import Delta, count_skips, multi_row_sql
from .rows import (
    _CREATED,
    _FACTS_OF,
    _INSERT_SCORE,
    _NO_SEGMENTS,
    _OLD_SCORES,
    _RECORD_COLS,
    _SEG,
    METRIC_COLS,
    Job,
    NewJob,
    _chunks,
    _json_safe,
    clean_text,
    dumps,
    metric_row,
    record_row,
    row_to_record,
)
from .segments import NONE_SEG, OVERFLOW_COUNTER, SegmentResolver, SegmentSpec
from .sessions import note_turns
from .vacuum import WAITING, wal_mtime

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


class Store(LabelsMixin):
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
            # Must come before the first table (and before WAL): on an existing database it is
            # a no-op until a full VACUUM (`tracescore prune --vacuum`); pruned pages are reused.
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("PRAGMA journal_mode=WAL")
            # A WAL that grew for a large transaction or a backlog gives its room back when it
            # is next reset (a checkpoint brought it all into the database file), instead of
            # keeping its largest size for ever: on a small disk that room is the next write's.
            conn.execute("PRAGMA journal_size_limit=1048576")
            conn.execute("PRAGMA synchronous=NORMAL")
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

    # -- writer side ------------------------------------------------------------------------
    def write_batch(
        self,
        records: Sequence[tuple[RagRecord, Decision]],
        jobs: Sequence[NewJob],
        counters: Mapping[str, int] | None = None,
        *,
        keep_full_text: bool = True,
        segments: SegmentSpec | None = None,
        scored: Sequence[tuple[NewJob, Sequence[Score]]] = (),
        delivery: str | None = None,
    ) -> list[list[tuple[int, Score]] | None]:
        """Persist records and their jobs in one transaction (idempotent on replays), with
        their contribution to the hourly rollups (only rows actually inserted count).

        ``scored``: jobs of these records already scored on the writer (scores on write,
        :mod:`tracescore.scoring.on_write`): each is stored ``done`` after one run, with its
        scores (``delivery`` as :meth:`complete_job` takes it), in the same transaction as
        its record. Returns their ``(score_id, score)`` pairs, in order; None for a job that
        existed already (a replay: nothing of it is stored twice).

        ``keep_full_text=False``: records that no metric sampled are stored compact (no text;
        lengths and hashes instead, see :mod:`.compact`). ``segments``: the process's release,
        environment and declared metadata keys (each record's ``seg_id``; new segment values
        are admitted in a short transaction of their own first)."""
        now = time.time()
        spec = segments or _NO_SEGMENTS
        try:
            only = getattr(records, "records", None)  # (the writer's batch: queue._Pairs)
            segs = self.segmenter.resolve(
                self, only() if only is not None else [r for r, _ in records], spec, now)
            rows = [record_row(r, d, now, keep_full_text, spec, seg_id)
                    for (r, d), (seg_id, _) in zip(records, segs)]
            with self.transaction():
                inserted = self._insert_or_ignore(
                    "records", "record_id",
                    "INSERT OR IGNORE INTO records(" + ",".join(_RECORD_COLS) + ") VALUES ("
                    + ",".join("?" * len(_RECORD_COLS)) + ")",
                    rows, lambda i: rows[i][0])
                delta = Delta()
                overflow: dict[str, int] = {}
                add, facts_of = delta.add_record, _FACTS_OF
                for i in inserted:
                    add(*facts_of(rows[i]))
                    for dim in segs[i][1]:
                        overflow[OVERFLOW_COUNTER + dim] = overflow.get(OVERFLOW_COUNTER + dim,
                                                                        0) + 1
                created = self._insert_jobs(jobs, now)
                refs = self._scored_on_write(
                    scored, {rows[i][0]: rows[i][_SEG] for i in inserted} if scored else {},
                    delivery, now, delta)

                def record_facts(ids: Iterable[str]) -> dict[str, tuple[float, int]]:
                    # (only a batch with skipped jobs asks: no dict per record otherwise)
                    ours = {rows[i][0]: (rows[i][_CREATED], rows[i][_SEG]) for i in inserted}
                    out = {rid: ours[rid] for rid in ids if rid in ours}
                    rest = [rid for rid in ids if rid not in ours]
                    return {**out, **self._record_facts(rest)} if rest else out

                count_skips(delta, [(j, None) for j in created], {}, record_facts)
                delta.write(self.conn)
                note_turns(self.conn, (rows[i] for i in inserted), now)
                if counters or overflow:
                    self.bump_counters({**(counters or {}), **overflow})
            return refs
        except BaseException:
            # Part of a caller's transaction that is rolled back: forget what was admitted.
            self.segmenter.reset()
            raise

    def _insert_or_ignore(self, table: str, key_cols: str, sql: str,
                          rows: Sequence[Sequence[Any]],
                          key: Callable[[int], Any]) -> Sequence[int]:
        """``executemany`` an ``INSERT OR IGNORE`` into ``table`` (inside the caller's write
        transaction, which no other connection can interleave); the indexes of the rows it
        inserted (``key(i)``: row i's key; of equal keys the first row goes in). The common
        case — every row new — costs no query: the row count says so. Otherwise (a replay)
        the ``n`` rows inserted are those with the ``n`` largest rowids, up to the last one
        inserted (SQLite gives a new row the largest rowid + 1; no other connection writes
        meanwhile, and none of ours either: the statements run back to back)."""
        if not rows:
            return []
        n = _insert_rows(self.conn, sql, rows)
        if n == len(rows):
            return range(len(rows))
        if n == 0:
            return []
        last = self.conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        new = {r[0] if len(r) == 1 else tuple(r) for r in self.conn.execute(
            f"SELECT {key_cols} FROM {table} WHERE rowid > ?", (last - n,))}
        first: dict[Any, int] = {}
        for i in range(len(rows)):
            first.setdefault(key(i), i)
        return sorted(i for k, i in first.items() if k in new)

    def _existing_jobs(self, jobs: Sequence[NewJob]) -> dict[tuple[str, str, str],
                                                            tuple[str, str | None]]:
        """(record, metric, version) → (status, reason) of the jobs of ``jobs``' records."""
        out: dict[tuple[str, str, str], tuple[str, str | None]] = {}
        for chunk in _chunks(list(dict.fromkeys(j.record_id for j in jobs))):
            for rid, metric, version, status, reason in self.conn.execute(
                    "SELECT record_id, metric, metric_version, status, reason FROM jobs"
                    " WHERE record_id IN (" + ",".join("?" * len(chunk)) + ")", chunk):
                out[(rid, metric, version)] = (status, reason)
        return out

    def _insert_jobs(self, jobs: Sequence[NewJob], now: float) -> list[NewJob]:
        """INSERT OR IGNORE ``jobs`` (inside the caller's transaction); the ones created."""
        inserted = self._insert_or_ignore(
            "jobs", "record_id, metric, metric_version",
            "INSERT OR IGNORE INTO jobs(record_id, metric, metric_version, status, attempts,"
            " reason, created_at, updated_at) VALUES (?,?,?,?,0,?,?,?)",
            [(j.record_id, j.metric, j.metric_version, j.status, j.reason, now, now)
             for j in jobs],
            lambda i: (jobs[i].record_id, jobs[i].metric, jobs[i].metric_version))
        return [jobs[i] for i in inserted]

    def _record_facts(self, ids: Iterable[str]) -> dict[str, tuple[float, int]]:
        """record_id → (created_at, seg_id) of the stored records among ``ids``."""
        out: dict[str, tuple[float, int]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids))):
            for rid, created, seg in self.conn.execute(
                    "SELECT record_id, created_at, seg_id FROM records WHERE record_id IN ("
                    + ",".join("?" * len(chunk)) + ")", chunk):
                out[rid] = (created or 0.0, NONE_SEG if seg is None else int(seg))
        return out

    def bump_counters(self, counters: Mapping[str, int]) -> None:
        # one statement, not one step per counter (each step is a wait for the GIL: see
        # _insert_rows)
        rows = [(k, v) for k, v in counters.items() if v]
        if rows:
            self.conn.execute(
                "INSERT INTO counters(name, value) VALUES " + ",".join(["(?, ?)"] * len(rows))
                + " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                [x for row in rows for x in row])

    def counters(self) -> dict[str, int]:
        return {k: v for k, v in self.conn.execute("SELECT name, value FROM counters")}

    def set_ground_truths(self, trace_id: str, ground_truths: Sequence[str]) -> list[RagRecord]:
        """Replace the ground truths of every record in a trace; returns the updated records."""
        of_trace, args = trace_records(self, trace_id)
        with self.transaction():
            self.conn.execute(f"UPDATE records SET ground_truths = ? WHERE {of_trace}",
                              (dumps([clean_text(g) for g in ground_truths]), *args))
        return self.records_for_trace(trace_id)

    def insert_jobs_if_missing(self, jobs: Sequence[NewJob]) -> int:
        """Create the jobs that do not exist yet; returns how many were created (a skipped
        one counts in ``hourly_skips``)."""
        now = time.time()
        with self.transaction():
            created = self._insert_jobs(jobs, now)
            delta = Delta()
            count_skips(delta, [(j, None) for j in created], {}, self._record_facts)
            delta.write(self.conn)
        return len(created)

    def upsert_jobs(self, jobs: Sequence[NewJob]) -> int:
        """Create jobs, or re-open skipped/done ones (new inputs arrived). Returns how many.
        A skipped job re-opened leaves ``hourly_skips`` (−1), one created or re-opened as
        skipped enters it (+1)."""
        now = time.time()
        n = 0
        changes: list[tuple[NewJob, Any]] = []
        with self.transaction():
            existing = self._existing_jobs(jobs)
            for j in jobs:
                cur = self.conn.execute(
                    "INSERT INTO jobs(record_id, metric, metric_version, status, attempts, reason,"
                    " created_at, updated_at) VALUES (?,?,?,?,0,?,?,?) "
                    "ON CONFLICT(record_id, metric, metric_version) DO UPDATE SET "
                    "status = excluded.status, reason = excluded.reason, attempts = 0, "
                    "lease_owner = NULL, lease_until = NULL, updated_at = excluded.updated_at "
                    "WHERE jobs.status IN ('skipped', 'done')",
                    (j.record_id, j.metric, j.metric_version, j.status, j.reason, now, now),
                )
                if cur.rowcount > 0:
                    key = (j.record_id, j.metric, j.metric_version)
                    changes.append((j, existing.get(key)))
                    existing[key] = (j.status, j.reason)
                n += cur.rowcount
            delta = Delta()
            count_skips(delta, changes, {}, self._record_facts)
            delta.write(self.conn)
        return n

    # -- worker side ------------------------------------------------------------------------
    def lease_jobs(
        self, owner: str, limit: int, lease_s: float, metrics: Sequence[str]
    ) -> list[Job]:
        """Atomically take up to ``limit`` pending jobs of ``metrics``. The lease costs no
        attempt (attempts count runs: a failed run when the job is given back, a lost one
        when :meth:`lease_lost_job` takes it, the last one when it is done); jobs whose lease
        ran out are not taken here, :meth:`lease_lost_job` takes them alone."""
        now = time.time()
        marks = ",".join("?" * len(metrics))
        with self.transaction():
            # (status, job_id) of the open jobs: index-friendly, also with a large backlog
            rows = self.conn.execute(
                "UPDATE jobs SET status='leased', lease_owner=?, lease_until=?, updated_at=? "
                f"WHERE job_id IN (SELECT job_id FROM jobs WHERE {OPEN_JOBS} AND "
                "status='pending' AND "
                "(lease_until IS NULL OR lease_until <= ?) AND metric IN (" + marks + ") "
                "ORDER BY job_id LIMIT ?) "
                "RETURNING job_id, record_id, metric, metric_version, attempts, created_at",
                (owner, now + lease_s, now, now, *metrics, limit),
            ).fetchall()
            if len(rows) >= limit:
                # (Fewer rows than the limit: every pending job is taken, its record's
                # siblings too — the transaction is exclusive.)
                # A record's jobs go out together (the limit may cut the last record's jobs,
                # and a pool with one free slot would take one job a time): its judge jobs
                # then run at the same moment and share calls (judge/pairing.py). So up to
                # len(metrics) - 1 jobs beyond ``limit``.
                for chunk in _chunks(list(dict.fromkeys(r[1] for r in rows))):
                    rows += self.conn.execute(
                        "UPDATE jobs SET status='leased', lease_owner=?, lease_until=?, "
                        "updated_at=? WHERE record_id IN (" + ",".join("?" * len(chunk))
                        + ") AND metric IN (" + marks + ") AND status='pending' AND "
                        "(lease_until IS NULL OR lease_until <= ?) RETURNING job_id, "
                        "record_id, metric, metric_version, attempts, created_at",
                        (owner, now + lease_s, now, *chunk, *metrics, now)).fetchall()
        return sorted((Job(*r) for r in rows), key=lambda j: j.job_id)

    def lease_lost_job(self, owner: str, lease_s: float, metrics: Sequence[str]) -> Job | None:
        """Take a job of ``metrics`` whose lease ran out (its holder died or hung), alone,
        counting the lost run as an attempt; None if there is none. The caller runs it holding
        no other job: a job that kills its process each time then spends its own attempts
        only, not those of jobs leased beside it. Fewest attempts first, then the oldest: a
        job lost again waits behind the others, so a run of kills (a crash loop) does not hit
        the same innocent job again and again."""
        now = time.time()
        with self.transaction():
            row = self.conn.execute(
                "UPDATE jobs SET status='leased', lease_owner=?, lease_until=?, "
                "attempts = attempts + 1, updated_at=? WHERE job_id = (SELECT job_id FROM jobs "
                f"WHERE {OPEN_JOBS} AND status='leased' AND lease_until < ? AND metric IN ("
                + ",".join("?" * len(metrics)) + ") ORDER BY attempts, job_id LIMIT 1) "
                "RETURNING job_id, record_id, metric, metric_version, attempts, created_at",
                (owner, now + lease_s, now, now, *metrics)).fetchone()
        return None if row is None else Job(*row)

    def has_lost_jobs(self, metrics: Sequence[str]) -> bool:
        """A job of ``metrics`` waits whose lease ran out (a read: (status, lease_until))."""
        return self.conn.execute(
            f"SELECT 1 FROM jobs WHERE {OPEN_JOBS} AND status='leased' AND lease_until < ?"
            " AND metric IN ("
            + ",".join("?" * len(metrics)) + ") LIMIT 1",
            (time.time(), *metrics)).fetchone() is not None

    def complete_jobs(
        self, owner: str, done: Sequence[tuple[Job, Sequence[Score]]],
        delivery: str | None = None, *, judge_models: Mapping[int, str] | None = None,
    ) -> list[list[tuple[int, Score]] | None]:
        """:meth:`complete_job` for several jobs in one transaction (one commit);
        ``judge_models``: job id → the judge model of its scores (judge metrics)."""
        jm = judge_models or {}
        with self.transaction():
            return self._complete_many(owner, [(j, s, jm.get(j.job_id, "")) for j, s in done],
                                       delivery)

    def complete_job(
        self, job: Job, owner: str, scores: Sequence[Score], delivery: str | None = None, *,
        judge_model: str = "",
    ) -> list[tuple[int, Score]] | None:
        """Store a job's scores and mark it done, atomically, only if ``owner`` still holds it.

        Returns ``(score_id, score)`` pairs, or None (and stores nothing) when the lease was lost
        to another process: that process stores the scores instead, so each job is scored
        exactly once. ``delivery``: already known (``"none"``: there is no span pipeline).
        ``judge_model``: the model that judged (``""`` for a local metric). The scores enter
        the hourly rollups under the record's segment; a score replacing an older one of the
        same (record, name) first takes the old row's contribution away.
        """
        with self.transaction():
            return self._complete_many(owner, [(job, scores, judge_model)], delivery)[0]

    def _complete_many(self, owner: str, items: Sequence[tuple[Job, Sequence[Score], str]],
                       delivery: str | None) -> list[list[tuple[int, Score]] | None]:
        # (inside the caller's transaction, which is exclusive on SQLite)
        now = time.time()
        delta = Delta()
        out: list[list[tuple[int, Score]] | None] = []
        owned: set[int] | None = None
        if len(items) > 1:  # one statement marks them all; it says which were still ours
            owned = set()
            for chunk in _chunks([job.job_id for job, _, _ in items]):
                owned.update(r[0] for r in self.conn.execute(
                    "UPDATE jobs SET status='done', lease_owner=NULL, lease_until=NULL, "
                    "attempts = attempts + 1, updated_at=?, reason=NULL WHERE job_id IN ("
                    + ",".join("?" * len(chunk))
                    + ") AND status='leased' AND lease_owner=? RETURNING job_id",
                    (now, *chunk, owner)))
        for job, scores, judge_model in items:
            if owned is None:
                cur = self.conn.execute(
                    "UPDATE jobs SET status='done', lease_owner=NULL, lease_until=NULL, "
                    "attempts = attempts + 1, updated_at=?, reason=NULL WHERE job_id=? "
                    "AND status='leased' AND lease_owner=?", (now, job.job_id, owner))
                mine = cur.rowcount == 1
            else:
                mine = job.job_id in owned
                owned.discard(job.job_id)  # (a job twice in one call is stored once)
            if not mine:
                out.append(None)
                continue
            out.append(self._insert_scores(job.job_id, job.record_id, job.metric, scores,
                                           judge_model, delivery, now, delta))
        delta.write(self.conn)
        return out

    def _scored_on_write(self, scored: Sequence[tuple[NewJob, Sequence[Score]]],
                         segs: Mapping[str, Any], delivery: str | None, now: float,
                         delta: Delta) -> list[list[tuple[int, Score]] | None]:
        """:meth:`write_batch`'s ``scored`` jobs, stored ``done`` with their scores (inside
        its transaction): two statements for the whole batch, not two per job (each
        statement lets go of the GIL and waits to get it back behind a busy app: see
        :func:`_insert_rows`). ``segs``: record id -> seg_id of the records this batch
        inserted."""
        refs: list[list[tuple[int, Score]] | None] = [None] * len(scored)
        if not scored:
            return refs
        made = _insert_keyed(
            self.conn, "INSERT OR IGNORE INTO jobs(record_id, metric, metric_version, status,"
            " attempts, created_at, updated_at) VALUES (?,?,?,'done',1,?,?)",
            [(j.record_id, j.metric, j.metric_version, now, now) for j, _ in scored],
            "jobs", ("record_id", "metric", "metric_version"), (0, 1, 2))
        rest = [j.record_id for j, _ in scored if j.record_id not in segs]
        facts = self._record_facts(rest) if rest else {}
        values: list[tuple[Any, ...]] = []
        where: list[tuple[int, Score, int]] = []  # (index in scored, score, seg_id)
        for i, (job, scores) in enumerate(scored):
            job_id = made.pop((job.record_id, job.metric, job.metric_version), None)
            if job_id is None:
                continue  # it existed already (a replay), or twice in the batch
            seg = segs.get(job.record_id)
            seg_id = (NONE_SEG if seg is None else int(seg)) if job.record_id in segs \
                else facts.get(job.record_id, (0.0, NONE_SEG))[1]
            trace_id = job.record_id.split("-", 1)[0]
            refs[i] = []
            # Keys out of the texts (as in _insert_scores)
            for sc in (scrub_score(x) for x in scores):
                values.append((*_score_values(job_id, job.record_id, trace_id, job.metric, sc,
                                              now, delivery), seg_id, ""))
                where.append((i, sc, seg_id))
        ids = _insert_keyed(
            self.conn, "INSERT INTO scores(job_id, record_id, trace_id, name, metric,"
            " metric_version, value, label, explanation, status, error, duration_ms, details,"
            " created_at, delivery, seg_id, judge_model) VALUES"
            " (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(record_id, name) DO NOTHING",
            values, "scores", ("record_id", "name"), (1, 3)) if values else {}
        for row, (i, sc, seg_id) in zip(values, where):
            score_id = ids.pop((row[1], row[3]), None)
            if score_id is None:  # the record has this score already: replace the row
                score_id, seg_id = self._replace_score(row[1], row[:15], "", delta)
            delta.add_score(now, sc.name, seg_id, sc.metric_version, "", row[4], sc.value,
                            sc.label, sc.status)
            out = refs[i]
            assert out is not None
            out.append((score_id, sc))
        return refs

    def _insert_scores(self, job_id: int, record_id: str, job_metric: str,
                       scores: Sequence[Score], judge_model: str, delivery: str | None,
                       now: float, delta: Delta) -> list[tuple[int, Score]]:
        """Store one job's scores (inside the caller's transaction) and add them to
        ``delta``; their ``(score_id, score)`` pairs."""
        trace_id = record_id.split("-", 1)[0]
        ids: dict[str, int] = {}
        # Keys out of the texts (a judge's reason may quote the key it was sent): stored
        # and, through the returned scores, exported scrubbed.
        scores = [scrub_score(s) for s in scores]
        for s in scores:
            metric = s.metric or job_metric
            values = _score_values(job_id, record_id, trace_id, job_metric, s, now, delivery)
            # The common case in one statement: a new (record, name) row, with its
            # record's segment looked up on the way (RETURNING tells both).
            row = self.conn.execute(_INSERT_SCORE, (*values, record_id, NONE_SEG,
                                                    judge_model)).fetchone()
            if row is None:  # the record has this score already: replace the row
                row = self._replace_score(record_id, values, judge_model, delta)
            ids[s.name], seg_id = int(row[0]), int(row[1])
            delta.add_score(now, s.name, seg_id, s.metric_version, judge_model, metric,
                            s.value, s.label, s.status)
        return [(ids[s.name], s) for s in scores]

    def _replace_score(self, record_id: str, values: tuple[Any, ...], judge_model: str,
                       delta: Delta) -> tuple[int, int]:
        """Replace the record's stored score of the same name (an earlier job's, or a
        re-scored one): its contribution leaves the rollups first. (score_id, seg_id)."""
        name = values[3]
        prev = self.conn.execute(_OLD_SCORES + " AND name = ?", (record_id, name)).fetchone()
        if prev is not None and prev[2] is not None:  # NULL seg_id: never rolled up
            delta.add_score(prev[1], prev[0], prev[2], prev[3], prev[4], prev[5], prev[6],
                            prev[7], prev[8], -1)
        seg = self.conn.execute("SELECT seg_id FROM records WHERE record_id = ?",
                                (record_id,)).fetchone()
        seg_id = NONE_SEG if seg is None or seg[0] is None else int(seg[0])
        row = self.conn.execute(
            "UPDATE scores SET job_id=?, metric_version=?, value=?, label=?, explanation=?,"
            " status=?, error=?, duration_ms=?, details=?, created_at=?, delivery=?, seg_id=?,"
            " judge_model=? WHERE record_id=? AND name=? RETURNING score_id",
            (values[0], *values[5:], seg_id, judge_model, record_id, name)).fetchone()
        return int(row[0]), seg_id

    def renew_leases(self, owner: str, job_ids: Sequence[int], lease_s: float) -> None:
        """Extend the leases ``owner`` holds on ``job_ids`` (jobs still being scored)."""
        until = time.time() + lease_s
        with self.transaction():
            self.conn.executemany(
                "UPDATE jobs SET lease_until=? WHERE job_id=? AND lease_owner=? "
                "AND status='leased'",
                [(until, j, owner) for j in job_ids],
            )

    def release_job(self, job: Job, owner: str, reason: str | None = None) -> None:
        """Give a leased job back for another attempt after a failed run (it counts)."""
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status='pending', lease_owner=NULL, lease_until=NULL, "
                "attempts = attempts + 1, reason=? WHERE job_id=? AND lease_owner=?",
                (scrub(reason) if reason else reason, job.job_id, owner),
            )

    def defer_job(self, job: Job, owner: str, delay_s: float, reason: str) -> None:
        """Put a job back to wait ``delay_s`` (judge down / over budget, the database
        refusing writes, the worker stopping); no attempt is counted. The wait is bounded by
        the worker's ``judge_max_wait_s``."""
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status='pending', lease_owner=NULL, lease_until=?, "
                "reason=? WHERE job_id=? AND lease_owner=?",
                (time.time() + max(0.0, delay_s), scrub(reason)[:500], job.job_id, owner),
            )

    def has_open_jobs(self, metrics: Sequence[str]) -> bool:
        """Cheap (LIMIT 1) check used while waiting in flush."""
        sql = (f"SELECT 1 FROM jobs WHERE {OPEN_JOBS} AND metric IN ("
               + ",".join("?" * len(metrics)) + ") LIMIT 1")
        return self.conn.execute(sql, tuple(metrics)).fetchone() is not None

    def open_job_count(self, metrics: Sequence[str] | None = None) -> int:
        sql = f"SELECT count(*) FROM jobs WHERE {OPEN_JOBS}"
        args: tuple[str, ...] = ()
        if metrics is not None:
            sql += " AND metric IN (" + ",".join("?" * len(metrics)) + ")"
            args = tuple(metrics)
        return int(self.conn.execute(sql, args).fetchone()[0])

    def open_jobs_for(self, record_id: str) -> int:
        return int(self.conn.execute(
            f"SELECT count(*) FROM jobs WHERE record_id=? AND {OPEN_JOBS}",
            (record_id,),
        ).fetchone()[0])

    def load_records(self, record_ids: Iterable[str]) -> dict[str, RagRecord]:
        ids = list(dict.fromkeys(record_ids))
        out: dict[str, RagRecord] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            cur = self.conn.execute(
                "SELECT * FROM records WHERE record_id IN (" + ",".join("?" * len(chunk)) + ")",
                chunk,
            )
            cols = [c[0] for c in cur.description]
            for row in cur:
                rec = row_to_record(dict(zip(cols, row)))
                out[rec.record_id] = rec
        return out

    def records_for_trace(self, trace_id: str) -> list[RagRecord]:
        # (a range of the primary key: records have no trace_id index, see .compat)
        of_trace, args = trace_records(self, trace_id)
        cur = self.conn.execute(f"SELECT * FROM records WHERE {of_trace}", args)
        cols = [c[0] for c in cur.description]
        return [row_to_record(dict(zip(cols, row))) for row in cur]

    def scores_for(self, record_id: str, undelivered_only: bool = False) -> list[dict[str, Any]]:
        sql = "SELECT * FROM scores WHERE record_id=?"
        if undelivered_only:
            sql += " AND delivery IS NULL"
        cur = self.conn.execute(sql + " ORDER BY score_id", (record_id,))
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur]

    def mark_delivered(self, score_ids: Sequence[int], how: str) -> None:
        self.mark_delivered_many([(score_ids, how)])

    def mark_delivered_many(self, batches: Sequence[tuple[Sequence[int], str]]) -> None:
        """Several (score ids, how) deliveries in one transaction."""
        with self.transaction():
            self.conn.executemany(
                "UPDATE scores SET delivery=? WHERE score_id=? AND delivery IS NULL",
                [(how, i) for ids, how in batches for i in ids],
            )

    def undelivered_record_ids(self, limit: int = 1000,
                               older_than: float | None = None) -> list[str]:
        """Records whose scores were stored but never exported (a previous process died, or
        the export failed); ``older_than``: only scores stored before that time."""
        rows = self.conn.execute(
            "SELECT DISTINCT s.record_id FROM scores s WHERE s.delivery IS NULL "
            "AND s.created_at <= ? AND NOT EXISTS "
            "(SELECT 1 FROM jobs j WHERE j.record_id = s.record_id AND j.status IN "
            "('pending','leased')) LIMIT ?",
            (float("inf") if older_than is None else older_than, limit),
        ).fetchall()
        return [r[0] for r in rows]


class _Tx:
    """BEGIN IMMEDIATE … COMMIT/ROLLBACK on an autocommit connection; re-entrant.

    A failed COMMIT is rolled back; a ROLLBACK is sent only while a transaction is open (after
    ``SQLITE_FULL`` or ``SQLITE_IOERR`` SQLite may have rolled back already, and "cannot
    rollback" would hide the error that matters); a ROLLBACK that fails marks the store
    broken, so its next transaction starts on a new connection."""

    def __init__(self, store: Store) -> None:
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
    width = max(1, sql.partition(" VALUES (")[2].partition(")")[0].count("?"))
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
