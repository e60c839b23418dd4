"""Hourly rollups: the aggregates that survive pruning (issue 13).

Before the pruner deletes a batch of records it folds them — records, their scores, their
skipped jobs — into per-hour rows, **in the same transaction** as the delete
(:func:`roll_up`). A row is therefore counted either raw (still in ``records``/``scores``) or in
a rollup (pruned), never both and never neither: readers add the two (:mod:`..reports.rollups`).

Hours are UTC hours, ``hour = floor(created_at / 3600) * 3600`` (an integer): records by
``records.created_at``, scores by ``scores.created_at`` (what the report filters on).
Percentiles over pruned hours come from ``rollup_score_bins``: 100 equal bins over [0, 1] per
(hour, score name, label); values outside [0, 1] land in the first/last bin, so percentiles of
pruned hours are exact to 0.01 for scores in [0, 1] and clamped for others.

Everything here is portable SQL (PostgreSQL accepts it as is, with ``%s`` placeholders):
``INSERT … ON CONFLICT (…) DO UPDATE SET n = table.n + excluded.n``, plain aggregates;
the binning is done in Python so no engine-specific ``floor``/``CAST`` semantics matter.
Rows are upserted in key order, so concurrent pruners on PostgreSQL lock rollup rows in the
same order (no deadlock).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

HOUR = 3600
BINS = 100

#: Schema version 2's rollup tables (portable DDL: BIGINT / DOUBLE PRECISION / TEXT).
DDL: tuple[str, ...] = (
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


class Cursorish(Protocol):
    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """The DB-API subset used here (sqlite3 and psycopg connections both fit)."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...

    def executemany(self, sql: str, params: Any) -> Any: ...


def hour_of(ts: float) -> int:
    return int(math.floor(ts / HOUR)) * HOUR


def value_bin(value: float) -> int:
    return min(max(int(math.floor(value * BINS)), 0), BINS - 1)


def bin_mid(b: int) -> float:
    return (b + 0.5) / BINS


def _marks(n: int) -> str:
    return ",".join("?" * n)


def roll_up(conn: Connection, record_ids: Sequence[str]) -> dict[str, int]:
    """Add ``record_ids`` (records, scores, skipped jobs) to the hourly rollups.

    Call inside the transaction that then deletes them. Returns counts (records, scores).
    """
    if not record_ids:
        return {"records": 0, "scores": 0}
    ids = list(record_ids)
    m = _marks(len(ids))
    recs: dict[int, list[float]] = {}
    models: dict[tuple[int, str], int] = {}
    hour_of_record: dict[str, int] = {}
    for rid, created, sampled, text_kept, error, tin, tout, latency, model in conn.execute(
        "SELECT record_id, created_at, sampled, text_kept, error, input_tokens, output_tokens,"
        f" latency_ms, model FROM records WHERE record_id IN ({m})", ids,
    ).fetchall():
        h = hour_of(created or 0.0)
        hour_of_record[rid] = h
        a = recs.setdefault(h, [0, 0, 0, 0, 0, 0, 0, 0, 0.0])
        a[0] += 1
        a[1] += 1 if sampled else 0
        a[2] += 1 if text_kept == 0 else 0
        a[3] += 1 if error else 0
        a[4] += 1 if tin is not None or tout is not None else 0
        a[5] += tin or 0
        a[6] += tout or 0
        if latency is not None:
            a[7] += 1
            a[8] += latency
        key = (h, model or "unknown")
        models[key] = models.get(key, 0) + 1

    scores: dict[tuple[int, str], list[Any]] = {}
    bins: dict[tuple[int, str, int, str], int] = {}
    skipped: set[tuple[str, str]] = set()  # (metric, record_id), as the report counts them
    n_scores = 0
    for rid, name, metric, value, label, status, created in conn.execute(
        "SELECT record_id, name, metric, value, label, status, created_at FROM scores"
        f" WHERE record_id IN ({m})", ids,
    ).fetchall():
        n_scores += 1
        h = hour_of(created or 0.0)
        # metric, n_ok, value_sum, n_labelled, n_fail, n_error, n_skipped
        a = scores.setdefault((h, name), [metric or name, 0, 0.0, 0, 0, 0, 0])
        if status == "ok" and value is not None:
            a[1] += 1
            a[2] += value
            if label is not None:
                a[3] += 1
                a[4] += 1 if label == "fail" else 0
            k = (h, name, value_bin(value), label or "")
            bins[k] = bins.get(k, 0) + 1
        elif status == "error":
            a[5] += 1
        elif status == "skipped":
            a[6] += 1
            skipped.add((metric or name, rid))
    for metric, rid in conn.execute(
        f"SELECT metric, record_id FROM jobs WHERE status = 'skipped' AND record_id IN ({m})",
        ids,
    ).fetchall():
        skipped.add((metric, rid))
    skips: dict[tuple[int, str], int] = {}
    for metric, rid in skipped:
        sk = (hour_of_record.get(rid, 0), metric)
        skips[sk] = skips.get(sk, 0) + 1

    conn.executemany(
        "INSERT INTO rollup_records (hour, records, sampled, compact, errors, with_usage,"
        " input_tokens, output_tokens, latency_n, latency_ms_sum) VALUES (?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT (hour) DO UPDATE SET records = rollup_records.records + excluded.records,"
        " sampled = rollup_records.sampled + excluded.sampled,"
        " compact = rollup_records.compact + excluded.compact,"
        " errors = rollup_records.errors + excluded.errors,"
        " with_usage = rollup_records.with_usage + excluded.with_usage,"
        " input_tokens = rollup_records.input_tokens + excluded.input_tokens,"
        " output_tokens = rollup_records.output_tokens + excluded.output_tokens,"
        " latency_n = rollup_records.latency_n + excluded.latency_n,"
        " latency_ms_sum = rollup_records.latency_ms_sum + excluded.latency_ms_sum",
        [(h, *a) for h, a in sorted(recs.items())],
    )
    conn.executemany(
        "INSERT INTO rollup_models (hour, model, n) VALUES (?,?,?) ON CONFLICT (hour, model)"
        " DO UPDATE SET n = rollup_models.n + excluded.n",
        [(h, model, n) for (h, model), n in sorted(models.items())],
    )
    conn.executemany(
        "INSERT INTO rollup_scores (hour, name, metric, n_ok, value_sum, n_labelled, n_fail,"
        " n_error, n_skipped) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (hour, name) DO UPDATE SET"
        " n_ok = rollup_scores.n_ok + excluded.n_ok,"
        " value_sum = rollup_scores.value_sum + excluded.value_sum,"
        " n_labelled = rollup_scores.n_labelled + excluded.n_labelled,"
        " n_fail = rollup_scores.n_fail + excluded.n_fail,"
        " n_error = rollup_scores.n_error + excluded.n_error,"
        " n_skipped = rollup_scores.n_skipped + excluded.n_skipped",
        [(h, name, *a) for (h, name), a in sorted(scores.items())],
    )
    conn.executemany(
        "INSERT INTO rollup_score_bins (hour, name, bin, label, n) VALUES (?,?,?,?,?)"
        " ON CONFLICT (hour, name, bin, label) DO UPDATE SET n = rollup_score_bins.n + excluded.n",
        [(*k, n) for k, n in sorted(bins.items())],
    )
    conn.executemany(
        "INSERT INTO rollup_skips (hour, metric, n) VALUES (?,?,?) ON CONFLICT (hour, metric)"
        " DO UPDATE SET n = rollup_skips.n + excluded.n",
        [(*k, n) for k, n in sorted(skips.items())],
    )
    return {"records": len(hour_of_record), "scores": n_scores}
