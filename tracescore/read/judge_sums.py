"""The adaptive judge's decisions of a window as additive sums
(:class:`~tracescore.stats.active_totals.ActiveTotals`): the whole hours from the hourly sums
(``hourly_judge_decisions``, ``hourly_judge_scores``: :mod:`tracescore.store.judge_rollup`),
an hour the window's edge cuts from its raw rows — the way the report reads the scores'
rollups (:func:`.window._hours`, :func:`.window._edges`). A database without the tables (an
older schema read by ``report --db``) is read from its rows, through the same sums.

So a window's active estimate reads O(hours × segments) rows, not one per decision.
Blocking I/O on a read connection (SQLite or PostgreSQL, ``?`` SQL).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..stats.active_totals import DECISION_FIELDS, JUDGED_FIELDS, ActiveTotals
from ..store.judge_rollup import DECISIONS_SQL, JUDGED_FROM, JUDGED_SQL, JUDGED_WHERE
from .window import HOUR, Window, _edges, _hours, _num, seg_clause

__all__ = ["has_rollup", "metrics_in", "timeline_totals", "totals", "totals_from_rows"]


def has_rollup(conn: Any) -> bool:
    from ..store.compat import has_table

    return has_table(conn, "hourly_judge_scores")


def _sum_cols(fields: Iterable[str]) -> str:
    return ", ".join(f"sum({c})" for c in fields)


def _rows_sums(conn: Any, metric: str, names: list[str], t0: float, t1: float,
               ids: set[int] | None) -> tuple[Any, list[Any]]:
    """The sums of the raw decisions of ``metric`` created in [t0, t1): the decision sums
    and (name, judged sums…) per score name in ``names``."""
    seg_sql, seg_args = seg_clause(ids, "r.seg_id")
    join = " JOIN records r ON r.record_id = d.record_id" if ids is not None else ""
    dec = conn.execute(
        f"SELECT {DECISIONS_SQL} FROM judge_decisions d{join} WHERE d.metric = ?"
        " AND d.created_at >= ? AND d.created_at < ?" + seg_sql,
        (metric, _num(t0), _num(t1), *seg_args)).fetchone()
    if not names:
        return dec, []
    judged = conn.execute(
        f"SELECT s.name, {JUDGED_SQL}{JUDGED_FROM} WHERE{JUDGED_WHERE}"  # (joins records r)
        " AND d.metric = ? AND d.created_at >= ? AND d.created_at < ?"
        f" AND s.name IN ({','.join('?' * len(names))})" + seg_sql + " GROUP BY s.name",
        (metric, _num(t0), _num(t1), *names, *seg_args)).fetchall()
    return dec, judged


def _fold(out: dict[str, ActiveTotals], dec: Any, judged: list[Any]) -> None:
    for t in out.values():
        t.add_decisions(dec or ())
    for row in judged:
        if str(row[0]) in out:
            out[str(row[0])].add_judged(row[1:])


def totals_from_rows(conn: Any, metric: str, names: Iterable[str], window: Window,
                     ids: set[int] | None) -> dict[str, ActiveTotals]:
    """:func:`totals` from the raw rows of the whole window (no rollup)."""
    names = sorted(set(names))
    out = {n: ActiveTotals() for n in names}
    lo, hi = window.bounds()
    _fold(out, *_rows_sums(conn, metric, names, lo, hi, ids))
    return out


def totals(conn: Any, metric: str, names: Iterable[str], window: Window,
           ids: set[int] | None) -> dict[str, ActiveTotals]:
    """Per score name of ``metric``: the sums of the window's decisions on the records of
    segments ``ids`` (None: all)."""
    if not has_rollup(conn):
        return totals_from_rows(conn, metric, names, window, ids)
    names = sorted(set(names))
    out = {n: ActiveTotals() for n in names}
    lo, hi = _hours(window)
    if lo < hi:
        seg_sql, seg_args = seg_clause(ids)
        dec = conn.execute(
            f"SELECT {_sum_cols(DECISION_FIELDS)} FROM hourly_judge_decisions WHERE metric = ?"
            " AND hour >= ? AND hour < ?" + seg_sql,
            (metric, _num(lo), _num(hi), *seg_args)).fetchone()
        judged = conn.execute(
            f"SELECT name, {_sum_cols(JUDGED_FIELDS)} FROM hourly_judge_scores"
            " WHERE metric = ? AND hour >= ? AND hour < ?"
            f" AND name IN ({','.join('?' * len(names))})" + seg_sql + " GROUP BY name",
            (metric, _num(lo), _num(hi), *names, *seg_args)).fetchall() if names else []
        _fold(out, dec, judged)
    for _h, t0, t1 in _edges(window):
        _fold(out, *_rows_sums(conn, metric, names, t0, t1, ids))
    return out


def metrics_in(conn: Any, window: Window) -> list[str]:
    """The metrics with decisions in the window (from the hourly sums where it has them;
    none on a database from before the judge budget)."""
    from ..store.compat import has_table

    if not has_table(conn, "judge_decisions"):
        return []
    if not has_rollup(conn):
        lo, hi = window.bounds()
        return sorted({str(r[0]) for r in conn.execute(
            "SELECT DISTINCT metric FROM judge_decisions WHERE created_at >= ?"
            " AND created_at < ?", (lo, hi)).fetchall()})
    lo, hi = _hours(window)
    got: set[str] = set()
    if lo < hi:
        got.update(str(r[0]) for r in conn.execute(
            "SELECT DISTINCT metric FROM hourly_judge_decisions WHERE hour >= ? AND hour < ?"
            " AND decided > 0", (_num(lo), _num(hi))).fetchall())
    for _h, t0, t1 in _edges(window):
        got.update(str(r[0]) for r in conn.execute(
            "SELECT DISTINCT metric FROM judge_decisions WHERE created_at >= ?"
            " AND created_at < ?", (t0, t1)).fetchall())
    return sorted(got)


def timeline_totals(conn: Any, name: str, metric: str, bucket_s: float, since: float | None,
                    ids: set[int] | None) -> dict[float, ActiveTotals] | None:
    """The sums per ``bucket_s`` of decision time since ``since`` (to now), keyed by the
    bucket's start; None when the buckets are not whole hours or there is no rollup (the
    caller reads the rows)."""
    if not has_rollup(conn) or bucket_s <= 0 or bucket_s % HOUR:
        return None
    out: dict[float, ActiveTotals] = {}

    def bucket(t: float) -> ActiveTotals:
        k = float(int(t // bucket_s) * bucket_s)
        return out.setdefault(k, ActiveTotals())

    window = Window(since, None)
    lo, hi = _hours(window)
    seg_sql, seg_args = seg_clause(ids)
    for row in conn.execute(
            f"SELECT hour, {_sum_cols(DECISION_FIELDS)} FROM hourly_judge_decisions"
            " WHERE metric = ? AND hour >= ?" + seg_sql + " GROUP BY hour",
            (metric, _num(lo), *seg_args)).fetchall():
        bucket(float(row[0])).add_decisions(row[1:])
    for row in conn.execute(
            f"SELECT hour, {_sum_cols(JUDGED_FIELDS)} FROM hourly_judge_scores"
            " WHERE metric = ? AND name = ? AND hour >= ?" + seg_sql + " GROUP BY hour",
            (metric, name, _num(lo), *seg_args)).fetchall():
        bucket(float(row[0])).add_judged(row[1:])
    assert math.isinf(hi)
    for h, t0, t1 in _edges(window):  # the first hour, cut by ``since``
        dec, judged = _rows_sums(conn, metric, [name], t0, t1, ids)
        if dec is not None and dec[0]:
            t = bucket(float(h))
            t.add_decisions(dec)
            for row in judged:
                t.add_judged(row[1:])
    return out
