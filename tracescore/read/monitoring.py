"""What a monitor is measured on: its observations read in order after a position, the worst
records of a breach, and the pipeline's own figures (counters, backlog age, judge cost).

The monitor (:mod:`tracescore.monitor.measure`, :mod:`tracescore.monitor.active_monitor`,
:mod:`tracescore.monitor.preview`) evaluates over these; the SQL is here. Every function
takes a read connection and returns rows or numbers; ``filt`` is the ``(sql, args)`` pair of
:func:`where_filter`. Blocking I/O, bounded by the caller's ``limit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .window import SegmentIndex, score_dim_clause, seg_clause

Filter = tuple[str, list[Any]]


def where_filter(seg: SegmentIndex, where: Mapping[str, str], alias: str = "", *,
                 records: bool = False) -> Filter:
    """SQL for a monitor's ``where`` on ``scores`` (or ``records``: record dimensions only),
    columns prefixed with ``alias`` (e.g. ``"r."``)."""
    sql, args = seg_clause(seg.matching(where), f"{alias}seg_id")
    if records:
        return sql, args
    dim_sql, dim_args = score_dim_clause(where, alias)
    return sql + dim_sql, args + dim_args


def record_errors(conn: Any, start: float, until: float, after: float,
                  filt: Filter) -> list[tuple[float, Any]]:
    """(created_at, error) of the records in [start, until) created after ``after``, in
    order."""
    sql, args = filt
    return conn.execute(
        "SELECT created_at, error FROM records WHERE created_at >= ? AND created_at < ?"
        " AND created_at > ?" + sql + " ORDER BY created_at",
        (start, until, after, *args)).fetchall()


def score_rows(conn: Any, name: str, start: float, until: float, last: tuple[float, int], *,
               labelled: bool, filt: Filter, limit: int) -> list[tuple[Any, ...]]:
    """(created_at, score_id, value, label) of score ``name``'s ok values in [start, until)
    after position ``last`` (created_at, score_id), in that order, at most ``limit``;
    ``labelled``: only those with a pass/fail label."""
    cond = "status = 'ok' AND value IS NOT NULL"
    if labelled:
        cond += " AND label IS NOT NULL"
    sql, args = filt
    return conn.execute(
        "SELECT created_at, score_id, value, label FROM scores WHERE name = ? AND " + cond
        + " AND created_at >= ? AND created_at < ?"
        " AND (created_at > ? OR (created_at = ? AND score_id > ?))" + sql
        + " ORDER BY created_at, score_id LIMIT ?",
        (name, start, until, last[0], last[0], last[1], *args, limit)).fetchall()


def worst_trace_ids(conn: Any, name: str, since: float, *, lowest: bool, filt: Filter,
                    limit: int = 3) -> list[str]:
    """The trace ids of score ``name``'s lowest (``lowest``) or highest ok values since
    ``since``, newest first among equals."""
    sql, args = filt
    order = "ASC" if lowest else "DESC"
    return [r[0] for r in conn.execute(
        "SELECT trace_id FROM scores WHERE name = ? AND status = 'ok' AND value IS NOT NULL"
        " AND created_at >= ?" + sql + f" ORDER BY value {order}, score_id DESC LIMIT {int(limit)}",
        (name, since, *args)).fetchall()]


def metric_of(conn: Any, name: str) -> str:
    """The metric that emits score ``name`` (from the rollups); ``name`` when unknown."""
    row = conn.execute(
        "SELECT metric FROM hourly_scores WHERE name = ? LIMIT 1", (name,)).fetchone()
    return str(row[0]) if row and row[0] else name


def counter_total(conn: Any, name: str) -> float:
    """A running counter's total (0 when never counted)."""
    return float(conn.execute("SELECT coalesce(max(value), 0) FROM counters"
                              " WHERE name = ?", (name,)).fetchone()[0])


def oldest_open_job(conn: Any) -> float | None:
    """When the oldest pending or leased scoring job was created; None without one."""
    oldest = conn.execute("SELECT min(created_at) FROM jobs WHERE status IN"
                          " ('pending', 'leased')").fetchone()[0]
    return None if oldest is None else float(oldest)


def judge_cost_since(conn: Any, since: float) -> float:
    """The judge calls' cost (USD) since ``since``; 0 without a ``judge_calls`` table."""
    from ..store.compat import has_table

    if not has_table(conn, "judge_calls"):
        return 0.0
    return float(conn.execute("SELECT coalesce(sum(cost_usd), 0) FROM judge_calls"
                              " WHERE created_at >= ?", (since,)).fetchone()[0])


def judged_within_budget(conn: Any, metric: str, since: float) -> bool:
    """Whether ``metric`` has adaptive judge decisions since ``since``."""
    from ..store.compat import has_table

    if not has_table(conn, "judge_decisions"):
        return False
    return conn.execute(
        "SELECT 1 FROM judge_decisions WHERE metric = ? AND created_at >= ? LIMIT 1",
        (metric, since)).fetchone() is not None


def decision_rows(conn: Any, score: str, metric: str, start: float, until: float,
                  last: tuple[float, str], *, filt: Filter, limit: int
                  ) -> list[tuple[Any, ...]]:
    """The judge decisions of ``metric`` in [start, until) after position ``last``
    (created_at, record_id), joined with score ``score`` of the decided record:
    (created_at, record_id, proxy, pi, selected, value, status), in that order, at most
    ``limit`` rows (a record with several scores of the name has a row each). ``filt``
    filters the records (alias ``r.``)."""
    sql, args = filt
    return conn.execute(
        "SELECT d.created_at, d.record_id, d.proxy, d.pi, d.selected, s.value,"
        " s.status FROM judge_decisions d JOIN records r ON r.record_id = d.record_id"
        " LEFT JOIN scores s ON s.rec = r.seq AND s.name = ?"
        " WHERE d.metric = ? AND d.created_at >= ? AND d.created_at < ?"
        " AND (d.created_at > ? OR (d.created_at = ? AND d.record_id > ?))"
        + sql + " ORDER BY d.created_at, d.record_id LIMIT ?",
        (score, metric, start, until, last[0], last[0], last[1], *args, limit)).fetchall()


def judge_models_seen(conn: Any) -> list[tuple[str, float]]:
    """The models the scores report (``judge_model``), each with the rollup hour it was first
    seen, oldest first (from the hourly rollups: cheap)."""
    rows = conn.execute(
        "SELECT judge_model, min(hour) FROM hourly_scores WHERE judge_model IS NOT NULL"
        " AND judge_model != '' GROUP BY judge_model").fetchall()
    return sorted(((str(m), float(h)) for m, h in rows), key=lambda r: (r[1], r[0]))
