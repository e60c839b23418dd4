"""The adaptive judge's decisions (``judge_decisions``, issue 33) as the report and the trend
page read them: which metrics were judged within a budget in a window, and each decision of a
metric with the score it led to — the row path. The readers estimate from the hourly sums
instead (:mod:`.judge_sums`); these rows are the tests' oracle of them
(:func:`tracescore.monitor.active_summary.summary_from_rows`) and the timeline's reader for
buckets that are not whole hours. Blocking I/O.
"""

from __future__ import annotations

import math
from typing import Any

from .window import Window, _num, seg_clause

__all__ = ["adaptive_metrics", "decisions", "decisions_since"]


def adaptive_metrics(conn: Any, window: Window) -> list[str]:
    """The metrics with judge decisions in the window (empty on a database without the
    table: an older schema read by ``report --db``)."""
    lo, hi = window.bounds()
    try:
        return [str(r[0]) for r in conn.execute(
            "SELECT DISTINCT metric FROM judge_decisions WHERE created_at >= ?"
            " AND created_at < ?", (lo, hi)).fetchall()]
    except Exception:
        return []


def _segment_join(ids: set[int] | None) -> tuple[str, str, list[Any]]:
    seg_sql, seg_args = seg_clause(ids, "r.seg_id")
    join = " JOIN records r ON r.record_id = d.record_id" if ids is not None else ""
    return join, seg_sql, seg_args


def decisions(conn: Any, name: str, metric: str, window: Window, ids: set[int] | None
              ) -> list[tuple[Any, ...]]:
    """(proxy, pi, selected, value, status) of each decision of ``metric`` in the window on
    the records of segments ``ids`` (None: all), with score ``name`` of the decided record
    (value and status None when it has none)."""
    lo, hi = window.bounds()
    join, seg_sql, seg_args = _segment_join(ids)
    return conn.execute(
        "SELECT d.proxy, d.pi, d.selected, s.value, s.status FROM judge_decisions d"
        " LEFT JOIN records dr ON dr.record_id = d.record_id"
        " LEFT JOIN scores s ON s.rec = dr.seq AND s.name = ?" + join +
        " WHERE d.metric = ? AND d.created_at >= ? AND d.created_at < ?" + seg_sql,
        (name, metric, lo, hi, *seg_args)).fetchall()


def decisions_since(conn: Any, name: str, metric: str, since: float | None,
                    ids: set[int] | None) -> list[tuple[Any, ...]]:
    """(created_at, proxy, pi, selected, value, status) of each decision of ``metric`` since
    ``since`` (None: all), as :func:`decisions`."""
    join, seg_sql, seg_args = _segment_join(ids)
    lo = _num(-math.inf if since is None else since)
    return conn.execute(
        "SELECT d.created_at, d.proxy, d.pi, d.selected, s.value, s.status FROM"
        " judge_decisions d LEFT JOIN records dr ON dr.record_id = d.record_id"
        " LEFT JOIN scores s ON s.rec = dr.seq AND s.name = ?"
        + join + " WHERE d.metric = ? AND d.created_at >= ?" + seg_sql,
        (name, metric, lo, *seg_args)).fetchall()
