"""Hourly rollups per segment, kept up to date as rows are written (schema version 3).

Every write that adds or changes a row the readers aggregate also adds its contribution to
the ``hourly_*`` tables, **in the same transaction**:

- :meth:`write_batch <.sqlite.Store.write_batch>`: each record actually inserted →
  ``hourly_records`` (by ``records.created_at`` and the record's ``seg_id``); each skipped job
  actually created → ``hourly_skips`` (by the *record's* hour, with the job's reason);
- ``complete_job(s)``: each score → ``hourly_scores`` and ``hourly_bins`` (by
  ``scores.created_at``, the record's ``seg_id``, ``metric_version`` and ``judge_model``); a
  score that replaces an earlier one of the same (record, name) first takes the old row's
  contribution away (n, Σx, Σx², its bin, label and status counts);
- ``insert_jobs_if_missing`` / ``upsert_jobs``: a skipped job created → +1, a skipped job
  re-opened → −1 (with its old reason), in ``hourly_skips``;
- the pruner's deferred compaction: ``hourly_records.compact`` +1 per record made text-less.

So the rollups always hold every row ever written, and the pruner (:mod:`.retention`) only
deletes raw rows: every aggregate is the same before and after ``prune``. Replays (``INSERT
OR IGNORE`` of rows already there) add nothing: the callers pass only rows that were inserted.

Aggregation is done here, once, in Python (:class:`Delta`): a batch is summed in memory, then
written with one ``executemany`` per table — portable ``INSERT … ON CONFLICT (key) DO UPDATE
SET n = table.n + excluded.n`` with ``?`` placeholders, run as is on SQLite and through
:func:`.compat.translate` on PostgreSQL (:class:`QmarkConnection`). Rows are upserted in key
order, so concurrent writers on PostgreSQL lock rollup rows in the same order (no deadlock);
every transaction writes the tables in the same order too (records, scores, bins, skips).

Hours are UTC hours, ``hour = floor(t / 3600) * 3600`` (an integer). Bins per (hour, name,
segment, label): bin 0 holds values of exactly 0 (or below), bin 101 values of exactly 1 (or
above), bins 1..100 the 0.01-wide intervals of (0, 1) (:func:`value_bin`).
Which rows count: ``hourly_scores`` counts score rows (``n_ok`` with a value, ``n_error``,
``n_skipped`` — a metric that skipped a record it was asked to score); ``hourly_skips`` counts
*jobs* that were never run because the record lacks what the metric needs (status
``skipped``), per metric. Blocking I/O, off the request path (writer thread, worker, pruner).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from .compat import translate

#: a skipped job's status (as the stores write it)
SKIPPED = "skipped"

__all__ = ["BINS", "DDL", "HOUR", "V2_DDL", "Delta", "QmarkConnection", "bin_mid", "ddl",
           "hour_of", "qmark", "qmark_tx", "value_bin"]

HOUR = 3600
BINS = 100
#: Skip reasons are cut to this many characters (they are a key of ``hourly_skips``).
MAX_REASON_CHARS = 200

#: Schema version 3's rollup tables (portable DDL: BIGINT / DOUBLE PRECISION / TEXT; see
#: :func:`ddl` for the one SQLite-only clause).
DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS hourly_records (
        hour BIGINT NOT NULL, seg_id BIGINT NOT NULL, records BIGINT NOT NULL,
        sampled BIGINT NOT NULL, compact BIGINT NOT NULL, errors BIGINT NOT NULL,
        with_usage BIGINT NOT NULL, input_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL, latency_n BIGINT NOT NULL,
        latency_ms_sum DOUBLE PRECISION NOT NULL, PRIMARY KEY (hour, seg_id))""",
    """CREATE TABLE IF NOT EXISTS hourly_scores (
        hour BIGINT NOT NULL, name TEXT NOT NULL, seg_id BIGINT NOT NULL,
        metric_version TEXT NOT NULL, judge_model TEXT NOT NULL, metric TEXT NOT NULL,
        n_ok BIGINT NOT NULL, value_sum DOUBLE PRECISION NOT NULL,
        value_sumsq DOUBLE PRECISION NOT NULL, n_labelled BIGINT NOT NULL,
        n_fail BIGINT NOT NULL, n_error BIGINT NOT NULL, n_skipped BIGINT NOT NULL,
        PRIMARY KEY (hour, name, seg_id, metric_version, judge_model))""",
    """CREATE TABLE IF NOT EXISTS hourly_bins (
        hour BIGINT NOT NULL, name TEXT NOT NULL, seg_id BIGINT NOT NULL, bin INTEGER NOT NULL,
        label TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (hour, name, seg_id, bin, label))""",
    """CREATE TABLE IF NOT EXISTS hourly_skips (
        hour BIGINT NOT NULL, metric TEXT NOT NULL, seg_id BIGINT NOT NULL,
        reason TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (hour, metric, seg_id, reason))""",
)



def ddl(dialect: str) -> tuple[str, ...]:
    """:data:`DDL` for ``dialect``. On SQLite the tables are ``WITHOUT ROWID``: their rows are
    stored in primary-key order, so an upsert touches one B-tree instead of a table and its
    key index — and each commit of the writer and the worker writes fewer pages."""
    if dialect == "sqlite":
        return tuple(stmt + " WITHOUT ROWID" for stmt in DDL)
    return DDL


#: Schema version 2's rollup tables (of pruned rows only). Created by the version-2 step;
#: the version-3 step folds their rows into ``hourly_*`` and drops them.
V2_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS rollup_records (
        hour BIGINT NOT NULL PRIMARY KEY, records BIGINT NOT NULL, sampled BIGINT NOT NULL,
        compact BIGINT NOT NULL, errors BIGINT NOT NULL, with_usage BIGINT NOT NULL,
        input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL, latency_n BIGINT NOT NULL,
        latency_ms_sum DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS rollup_models (
        hour BIGINT NOT NULL, model TEXT NOT NULL, n BIGINT NOT NULL,
        PRIMARY KEY (hour, model))""",
    """CREATE TABLE IF NOT EXISTS rollup_scores (
        hour BIGINT NOT NULL, name TEXT NOT NULL, metric TEXT NOT NULL, n_ok BIGINT NOT NULL,
        value_sum DOUBLE PRECISION NOT NULL, n_labelled BIGINT NOT NULL,
        n_fail BIGINT NOT NULL, n_error BIGINT NOT NULL, n_skipped BIGINT NOT NULL,
        PRIMARY KEY (hour, name))""",
    """CREATE TABLE IF NOT EXISTS rollup_score_bins (
        hour BIGINT NOT NULL, name TEXT NOT NULL, bin INTEGER NOT NULL, label TEXT NOT NULL,
        n BIGINT NOT NULL, PRIMARY KEY (hour, name, bin, label))""",
    """CREATE TABLE IF NOT EXISTS rollup_skips (
        hour BIGINT NOT NULL, metric TEXT NOT NULL, n BIGINT NOT NULL,
        PRIMARY KEY (hour, metric))""",
)
V2_TABLES = ("rollup_records", "rollup_models", "rollup_scores", "rollup_score_bins",
             "rollup_skips")


class Connection(Protocol):
    """The DB-API subset used here (sqlite3 connections and :class:`QmarkConnection`)."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...

    def executemany(self, sql: str, params: Any) -> Any: ...


class QmarkConnection:
    """A psycopg connection (inside the caller's transaction) that runs ``?`` SQL."""

    dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(translate(sql), tuple(params))

    def executemany(self, sql: str, rows: Any) -> Any:
        cur = self._conn.cursor()
        cur.executemany(translate(sql), list(rows))
        return cur


def qmark(store: Any, conn: Any = None) -> Any:
    """``store``'s connection (or ``conn``) as one that takes ``?`` SQL."""
    conn = store.conn if conn is None else conn
    return QmarkConnection(conn) if getattr(store, "dialect", "sqlite") == "postgres" else conn


@contextmanager
def qmark_tx(store: Any) -> Iterator[Any]:
    """One write transaction on ``store`` (nested: part of the caller's), yielding a
    connection that takes ``?`` SQL."""
    with store.transaction() as conn:
        yield qmark(store, conn)


def hour_of(ts: float) -> int:
    return int(math.floor(ts / HOUR)) * HOUR


def value_bin(value: float) -> int:
    """A score's histogram bin: 0 for exactly 0 (or below), ``BINS + 1`` for exactly 1 (or
    above), else 1..``BINS`` for the 0.01-wide bins of (0, 1) — so the many scores of exactly
    0 or 1 keep their value, and a p90 of perfect answers reads 1.000, not 0.995."""
    if value <= 0.0:
        return 0
    if value >= 1.0:
        return BINS + 1
    return 1 + min(int(math.floor(value * BINS)), BINS - 1)


def bin_mid(b: int) -> float:
    """The value a bin stands for: 0, 1, or the middle of its 0.01-wide interval."""
    if b <= 0:
        return 0.0
    if b >= BINS + 1:
        return 1.0
    return (b - 0.5) / BINS


def v2_bin(b: int) -> int:
    """A schema-2 bin (100 bins over [0, 1], clamped) in the schema-3 numbering: its end bins
    held the 0s and 1s of yes/no scores, so they become the exact-0 and exact-1 bins."""
    return 0 if b <= 0 else BINS + 1 if b >= BINS - 1 else b + 1


_UPSERT_RECORDS = (
    "INSERT INTO hourly_records (hour, seg_id, records, sampled, compact, errors, with_usage,"
    " input_tokens, output_tokens, latency_n, latency_ms_sum) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (hour, seg_id) DO UPDATE SET"
    " records = hourly_records.records + excluded.records,"
    " sampled = hourly_records.sampled + excluded.sampled,"
    " compact = hourly_records.compact + excluded.compact,"
    " errors = hourly_records.errors + excluded.errors,"
    " with_usage = hourly_records.with_usage + excluded.with_usage,"
    " input_tokens = hourly_records.input_tokens + excluded.input_tokens,"
    " output_tokens = hourly_records.output_tokens + excluded.output_tokens,"
    " latency_n = hourly_records.latency_n + excluded.latency_n,"
    " latency_ms_sum = hourly_records.latency_ms_sum + excluded.latency_ms_sum")
_UPSERT_SCORES = (
    "INSERT INTO hourly_scores (hour, name, seg_id, metric_version, judge_model, metric, n_ok,"
    " value_sum, value_sumsq, n_labelled, n_fail, n_error, n_skipped)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (hour, name, seg_id, metric_version, judge_model) DO UPDATE SET"
    " n_ok = hourly_scores.n_ok + excluded.n_ok,"
    " value_sum = hourly_scores.value_sum + excluded.value_sum,"
    " value_sumsq = hourly_scores.value_sumsq + excluded.value_sumsq,"
    " n_labelled = hourly_scores.n_labelled + excluded.n_labelled,"
    " n_fail = hourly_scores.n_fail + excluded.n_fail,"
    " n_error = hourly_scores.n_error + excluded.n_error,"
    " n_skipped = hourly_scores.n_skipped + excluded.n_skipped")
_UPSERT_BINS = (
    "INSERT INTO hourly_bins (hour, name, seg_id, bin, label, n) VALUES (?,?,?,?,?,?)"
    " ON CONFLICT (hour, name, seg_id, bin, label) DO UPDATE SET n = hourly_bins.n + excluded.n")
_UPSERT_SKIPS = (
    "INSERT INTO hourly_skips (hour, metric, seg_id, reason, n) VALUES (?,?,?,?,?)"
    " ON CONFLICT (hour, metric, seg_id, reason) DO UPDATE SET n = hourly_skips.n + excluded.n")


class Delta:
    """What a batch adds to (or takes from) the hourly rollups, summed in memory.

    Not thread-safe: one per transaction. ``sign=-1`` takes a row's contribution away (a
    replaced score, a re-opened skipped job). :meth:`write` applies it in key order.
    """

    __slots__ = ("bins", "records", "scores", "skips")

    def __init__(self) -> None:
        #: (hour, seg_id) → [records, sampled, compact, errors, with_usage, input_tokens,
        #: output_tokens, latency_n, latency_ms_sum]
        self.records: dict[tuple[int, int], list[Any]] = {}
        #: (hour, name, seg_id, metric_version, judge_model) → [metric, n_ok, value_sum,
        #: value_sumsq, n_labelled, n_fail, n_error, n_skipped]
        self.scores: dict[tuple[int, str, int, str, str], list[Any]] = {}
        #: (hour, name, seg_id, bin, label) → n
        self.bins: dict[tuple[int, str, int, int, str], int] = {}
        #: (hour, metric, seg_id, reason) → n
        self.skips: dict[tuple[int, str, int, str], int] = {}

    def __bool__(self) -> bool:
        return bool(self.records or self.scores or self.bins or self.skips)

    def _rec(self, created_at: float | None, seg_id: int) -> list[Any]:
        key = (hour_of(created_at or 0.0), int(seg_id))
        a = self.records.get(key)
        if a is None:
            a = self.records[key] = [0, 0, 0, 0, 0, 0, 0, 0, 0.0]
        return a

    def add_record(self, created_at: float | None, seg_id: int, sampled: Any,
                   text_kept: Any, error: Any, input_tokens: int | None,
                   output_tokens: int | None, latency_ms: float | None) -> None:
        """One stored record (a compact one has ``text_kept == 0``)."""
        a = self._rec(created_at, seg_id)
        a[0] += 1
        a[1] += 1 if sampled else 0
        a[2] += 1 if text_kept == 0 else 0
        a[3] += 1 if error else 0
        if input_tokens is not None or output_tokens is not None:
            a[4] += 1
            a[5] += input_tokens or 0
            a[6] += output_tokens or 0
        if latency_ms is not None:
            a[7] += 1
            a[8] += latency_ms

    def add_compacted(self, created_at: float | None, seg_id: int) -> None:
        """A stored record whose text the pruner dropped later (deferred compaction)."""
        self._rec(created_at, seg_id)[2] += 1

    def add_score(self, created_at: float | None, name: str, seg_id: int,
                  metric_version: str | None, judge_model: str | None, metric: str | None,
                  value: float | None, label: str | None, status: str | None,
                  sign: int = 1) -> None:
        """One score row (``sign=-1``: the row a new score replaces)."""
        h = hour_of(created_at or 0.0)
        key = (h, name, int(seg_id), metric_version or "", judge_model or "")
        a = self.scores.get(key)
        if a is None:
            a = self.scores[key] = [metric or name, 0, 0.0, 0.0, 0, 0, 0, 0]
        if status == "ok" and value is not None:
            a[1] += sign
            a[2] += sign * value
            a[3] += sign * value * value
            if label is not None:
                a[4] += sign
                a[5] += sign if label == "fail" else 0
            k = (h, name, int(seg_id), value_bin(value), label or "")
            self.bins[k] = self.bins.get(k, 0) + sign
        elif status == "error":
            a[6] += sign
        elif status == "skipped":
            a[7] += sign

    def add_skip(self, created_at: float | None, metric: str, seg_id: int,
                 reason: str | None, sign: int = 1) -> None:
        """A skipped job of a record created at ``created_at`` (the record's time)."""
        key = (hour_of(created_at or 0.0), metric, int(seg_id),
               (reason or "")[:MAX_REASON_CHARS])
        self.skips[key] = self.skips.get(key, 0) + sign

    def merge_raw(self, table: str, key: tuple[Any, ...], values: Sequence[Any]) -> None:
        """Add a row of aggregates as it is (the migration's fold of version-2 rollups)."""
        target: dict[Any, Any] = getattr(self, table)
        if table in ("bins", "skips"):
            target[key] = target.get(key, 0) + int(values[0])
            return
        a = target.get(key)
        if a is None:
            target[key] = list(values)
            return
        start = 1 if table == "scores" else 0  # scores' first value is the metric name
        for i in range(start, len(values)):
            a[i] += values[i]

    def write(self, conn: Connection) -> None:
        """Apply the delta (inside the caller's transaction): one ``executemany`` per table,
        in key order; all-zero rows are left out (a score replaced by an equal one)."""
        for sql, rows in (
                (_UPSERT_RECORDS, [(*k, *a) for k, a in sorted(self.records.items()) if any(a)]),
                (_UPSERT_SCORES, [(*k, *a) for k, a in sorted(self.scores.items())
                                  if any(a[1:])]),
                (_UPSERT_BINS, [(*k, n) for k, n in sorted(self.bins.items()) if n]),
                (_UPSERT_SKIPS, [(*k, n) for k, n in sorted(self.skips.items()) if n])):
            if len(rows) == 1:  # (one job's score: a plain execute costs less)
                conn.execute(sql, rows[0])
            elif rows and isinstance(conn, sqlite3.Connection):
                # One statement of many rows, not one step per row (SQLite's executemany):
                # each step lets go of the GIL and waits to get it back behind a busy app.
                for i in range(0, len(rows), 512):
                    chunk = rows[i:i + 512]
                    conn.execute(multi_row_sql(sql, len(chunk)),
                                 [v for row in chunk for v in row])
            elif rows:
                conn.executemany(sql, rows)


def multi_row_sql(sql: str, k: int) -> str:
    """``sql`` (an ``INSERT … VALUES (…) …`` of one row) with ``k`` rows of values: one
    statement of many rows instead of an ``executemany`` (SQLite's writers: here and
    :mod:`.sqlite`)."""
    head, group, tail = values_group(sql)
    return head + " VALUES " + ",".join(["(" + group + ")"] * k) + tail


def values_group(sql: str) -> tuple[str, str, str]:
    """``sql`` (an ``INSERT … VALUES (…) …`` of one row) as (what precedes ``VALUES``, the
    row's values, what follows them); a value may be a parenthesised subquery."""
    head, _, rest = sql.partition(" VALUES (")
    depth = 1
    for i, ch in enumerate(rest):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return head, rest[:i], rest[i + 1:]
    raise ValueError(f"no VALUES (…) in {sql!r}")


def count_skips(delta: Delta, changes: Sequence[tuple[Any, Any]],
                facts: dict[str, tuple[float, int]],
                record_facts: Callable[[list[str]], dict[str, tuple[float, int]]]) -> None:
    """Skipped jobs into ``delta`` (both stores): each change is (the job as now stored,
    (old status, old reason) or None) — +1 for a skip created, −1 for one re-opened. ``facts``
    (record id → (created_at, seg_id)) is filled through ``record_facts`` where missing; a
    skip of a record not stored is not counted (as readers join)."""
    todo = [(j, old) for j, old in changes
            if j.status == SKIPPED or (old is not None and old[0] == SKIPPED)]
    if not todo:
        return
    missing = [j.record_id for j, _ in todo if j.record_id not in facts]
    if missing:
        facts.update(record_facts(missing))
    for j, old in todo:
        fact = facts.get(j.record_id)
        if fact is None:
            continue
        if old is not None and old[0] == SKIPPED:
            delta.add_skip(fact[0], j.metric, fact[1], old[1], -1)
        if j.status == SKIPPED:
            delta.add_skip(fact[0], j.metric, fact[1], j.reason, 1)
