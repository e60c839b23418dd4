"""The raw reads behind "which population a score speaks for"
(:mod:`tracescore.reports.inclusion`): the sampling bracket of a metric's rate among the
unforced records, the window's ok scores summed by why their record was chosen, and whether
any record may have been chosen at another probability. Each is one aggregate in the
database: a handful of rows back whatever the number of records. Blocking I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ..stats import Moments
from . import query as Q

__all__ = ["LOOKBACK_S", "sampling_bracket", "scored_groups", "selection_possible"]


def _like(metric: str) -> str:
    token = json.dumps(metric, ensure_ascii=False)
    return "%" + token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def sampling_bracket(conn: Any, metric: str, window: Q.Window, ids: set[int] | None
                     ) -> tuple[int, int, float | None, float | None]:
    """Among the window's unforced records (``ids``: their segments): (how many, how many
    ``metric`` sampled, the largest hash fraction ``sample_u`` of those sampled, the smallest
    of those not) — the bracket the metric's rate lies in."""
    seg_sql, seg_args = Q.seg_clause(ids)
    pat = _like(metric)
    lo, hi = window.bounds()
    row = conn.execute(
        "SELECT count(*),"
        " sum(CASE WHEN sampled_metrics LIKE ? ESCAPE '\\' THEN 1 ELSE 0 END),"
        " max(CASE WHEN sampled_metrics LIKE ? ESCAPE '\\' THEN sample_u END),"
        " min(CASE WHEN sampled_metrics LIKE ? ESCAPE '\\' THEN NULL ELSE sample_u END)"
        " FROM records WHERE forced IS NULL AND sample_u IS NOT NULL"
        " AND created_at >= ? AND created_at < ?" + seg_sql,
        (pat, pat, pat, lo, hi, *seg_args)).fetchone()
    return (int(row[0] or 0), int(row[1] or 0), None if row[2] is None else float(row[2]),
            None if row[3] is None else float(row[3]))


def scored_groups(conn: Any, name: str, window: Q.Window, where: Mapping[str, str] | None,
                  seg: Q.SegmentIndex) -> list[tuple[str | None, bool, bool, Moments]]:
    """The ok scores of ``name`` created in the window, matching ``where``, summed by why
    their record was chosen: (forced reason, negative feedback on the trace, has a record
    row, moments of the values). The database sums them (an index range on the scores'
    (name, created_at), one feedback probe per score): a handful of rows whatever n."""
    seg_sql, seg_args = Q.seg_clause(seg.matching(where), "s.seg_id")
    dim_sql, dim_args = Q.score_dim_clause(where, "s.")
    lo, hi = window.bounds()
    rows = conn.execute(
        "SELECT forced, neg, has_record, count(*), sum(v), sum(v * v) FROM ("
        "SELECT s.value AS v, r.forced AS forced,"
        " CASE WHEN r.record_id IS NULL THEN 0 ELSE 1 END AS has_record,"
        " CASE WHEN EXISTS (SELECT 1 FROM feedback f WHERE f.trace_id = s.trace_id"
        " AND f.value < 0.5) THEN 1 ELSE 0 END AS neg"
        " FROM scores s LEFT JOIN records r ON r.record_id = s.record_id"
        " WHERE s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL"
        " AND s.created_at >= ? AND s.created_at < ?" + seg_sql + dim_sql
        + ") t GROUP BY forced, neg, has_record",
        (name, lo, hi, *seg_args, *dim_args)).fetchall()
    return [(forced, bool(neg), bool(has), Moments(int(n), float(sx or 0.0), float(sxx or 0.0)))
            for forced, neg, has, n, sx, sxx in rows]


#: How far before the window the forced records are looked for (a record scored in the window
#: may have been created a little before it).
LOOKBACK_S = 86400.0


def selection_possible(conn: Any, window: Q.Window, ids: set[int] | None) -> bool:
    """Whether any score of the window may have been chosen with another probability than the
    rest: a forced record near the window (the partial index ``idx_records_forced``: no read
    of the other records) or any negative feedback (a small table). False: every score of
    the window was chosen at its metric's rate, and no raw row need be read."""
    # ``+seg_id``: not an index term, so the planner takes the partial index of the forced
    # records (a few entries) rather than the segments' index, which reads every record of
    # the window's segments when none is forced (0.4 s at 300k records, growing with them)
    seg_sql, seg_args = Q.seg_clause(ids, "+seg_id")
    lo = Q._num(-math.inf if window.since is None else window.since - LOOKBACK_S)
    hi = Q._num(math.inf if window.until is None else window.until)
    if conn.execute("SELECT 1 FROM records WHERE forced IS NOT NULL AND created_at >= ?"
                    " AND created_at < ?" + seg_sql + " LIMIT 1",
                    (lo, hi, *seg_args)).fetchone() is not None:
        return True
    return conn.execute("SELECT 1 FROM feedback WHERE value < 0.5 LIMIT 1").fetchone() \
        is not None
