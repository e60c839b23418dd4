"""The pipeline's own state and the report's raw reads: counters, open jobs and why they
wait, scores not yet delivered, the worst records of a window, the judge canary's health,
the monitors' stored states, and the token usage of the app and of the judge.

Everything else of ``tracescore report`` comes from the rollups (:mod:`.query`); these are
the few raw reads, each bounded (an index range, a GROUP BY over open jobs, a small table).
Blocking I/O on a read connection.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..stats.estimate import stored_estimate
from . import query as Q
from .model import (
    JudgeUsage,
    MetricSummary,
    MonitorStatus,
    PendingReason,
    Usage,
    WorstRecord,
)

if TYPE_CHECKING:
    from ..store.monitor_state import HistoryRow

__all__ = ["MAX_PENDING_REASONS", "RANGE_MAX", "counters", "judge_health", "monitor_statuses",
           "open_jobs", "pending_reasons", "undelivered", "usage_summary", "worst_records"]


def counters(conn: Any) -> dict[str, int]:
    """Every running counter (``counters``): records dropped, losses, segment overflows."""
    return {str(k): int(v) for k, v in conn.execute(
        "SELECT name, value FROM counters").fetchall()}


def open_jobs(conn: Any) -> int:
    """Scoring jobs pending or leased now."""
    return int(conn.execute(
        "SELECT count(*) FROM jobs WHERE status IN ('pending', 'leased')").fetchone()[0])


def undelivered(conn: Any, since: float | None) -> int:
    """Scores since ``since`` (None: all) not yet delivered to the span / the exporter."""
    cutoff = since if since is not None else -math.inf
    return int(conn.execute(
        "SELECT count(*) FROM scores WHERE delivery IS NULL AND created_at >= ?",
        (Q._num(cutoff),)).fetchone()[0])


#: Distinct reasons listed for open jobs; the rest are summed into one line.
MAX_PENDING_REASONS = 5


def pending_reasons(conn: Any, now: float | None = None) -> list[PendingReason]:
    """Why the open jobs are not scored yet, most jobs first: the reason a job was deferred
    or given back with (``jobs.reason``: "waiting for the judge at URL (unreachable since T:
    connection refused)", a budget, "worker stopped"), "not started" for a job no pipeline
    has taken yet, "being scored now" for a leased one. Read from the database, so any
    process shows what the scoring process knew."""
    now = time.time() if now is None else now
    groups: dict[tuple[str, str], int] = {}
    for status, reason, expired, n in conn.execute(
        "SELECT status, reason, CASE WHEN lease_until < ? THEN 1 ELSE 0 END, count(*)"
        " FROM jobs WHERE status IN ('pending', 'leased') GROUP BY 1, 2, 3",
        (now,)).fetchall():
        if status == "leased":
            why = ("lease expired (the process scoring it stopped): taken again by the next "
                   "running pipeline" if expired else "being scored now")
        else:
            why = reason or ("not started: waiting for a running pipeline (the app with "
                             "tracescore, or `tracescore worker`)")
        groups[(str(status), why)] = groups.get((str(status), why), 0) + int(n)
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [PendingReason(state, why, n) for (state, why), n in ranked[:MAX_PENDING_REASONS]]
    rest = sum(n for _, n in ranked[MAX_PENDING_REASONS:])
    if rest:
        out.append(PendingReason("pending", f"{len(ranked) - MAX_PENDING_REASONS} other "
                                 "reasons (`tracescore show TRACE_ID` names each job's)", rest))
    return out


def worst_records(conn: Any, metrics: list[MetricSummary], n: int, since: float | None,
                  until: float | None, seg_ids: set[int] | None = None
                  ) -> dict[str, list[WorstRecord]]:
    """The ``n`` worst stored records per score in the window, at a cost that does not grow
    with the score's row count: a window with few scores (``RANGE_MAX``, known from the
    rollups) sorts its rows; a larger one walks the (name, value) index from the worst end and
    stops after ``n`` rows in the window — about n × (all rows / rows in the window) index
    entries when values do not depend on time."""
    out: dict[str, list[WorstRecord]] = {}
    if n <= 0:
        return out
    lo = Q._num(-math.inf if since is None else since)
    hi = Q._num(math.inf if until is None else until)
    seg_sql, seg_args = Q.seg_clause(seg_ids, "s.seg_id")
    for m in metrics:
        if not m.count or m.higher_is_better is None:
            continue
        order = "ASC" if m.higher_is_better else "DESC"
        sql = ("SELECT s.value, s.label, s.trace_id, s.record_id, r.query FROM scores s{hint}"
               " LEFT JOIN records r ON r.record_id = s.record_id"
               " WHERE s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL"
               " AND s.created_at >= ? AND s.created_at < ?" + seg_sql
               # (value, score_id) in one direction: the order of the (name, value[, rowid])
               # index, so the walk needs no sort
               + f" ORDER BY s.value {order}, s.score_id {order} LIMIT ?")
        args = (m.name, lo, hi, *seg_args, n)
        rows = None
        if m.count > RANGE_MAX:
            try:  # SQLite's planner would pick the time range and sort it all: say which
                rows = conn.execute(sql.format(hint=" INDEXED BY idx_scores_name_value"),
                                    args).fetchall()
            except sqlite3.OperationalError:  # a database without the index
                rows = None
        if rows is None:
            rows = conn.execute(sql.format(hint=""), args).fetchall()
        out[m.name] = [WorstRecord(m.name, r[0], r[1], r[2], r[3], r[4]) for r in rows]
    return out


#: Windows with at most this many scores of a name find their worst rows by sorting them.
RANGE_MAX = 5000


def judge_health(conn: Any) -> list[dict[str, Any]]:
    """The judge canary's verdict per judge model (empty when no judge was checked)."""
    try:
        rows = conn.execute(
            "SELECT model, agreement, cases, degenerate, detail, checked_at FROM judge_health "
            "ORDER BY checked_at DESC").fetchall()
    except sqlite3.Error:  # a database from before the judge tables existed
        return []
    return [{"model": m, "agreement": a, "cases": c, "degenerate": bool(d),
             "reason": (json.loads(detail or "{}") or {}).get("reason", ""), "checked_at": t}
            for m, a, c, d, detail, t in rows]


def monitor_statuses(conn: Any) -> list[MonitorStatus]:
    """The monitors' stored states, alerts first (empty before any ``check``)."""
    from ..store.compat import has_table

    if not has_table(conn, "monitor_state"):
        return []
    order = {"ALERT": 0, "WARNING": 1, "NO_DATA": 2, "OK": 3}
    out = []
    for name, state, since, checked, value, lo, hi, n, detail in conn.execute(
        "SELECT monitor, state, since, checked_at, value, lo, hi, n, detail FROM monitor_state"
    ).fetchall():
        try:
            summary = (json.loads(detail or "{}") or {}).get("summary", "")
        except (TypeError, ValueError):
            summary = ""
        est, n_stored = stored_estimate(value, lo, hi, None if n is None else int(n))
        out.append(MonitorStatus(name, state, since, checked, est, summary, n_stored))
    return sorted(out, key=lambda m: (order.get(m.state, 9), m.name))


def usage_summary(conn: Any, *, since: float | None = None,
                  where: Mapping[str, str] | None = None) -> Usage:
    """Token usage of the app (record rollups) and of the LLM judge (``judge_calls``)."""
    from ..store.compat import has_table

    window = Q.Window(since, None)
    seg = Q.SegmentIndex(conn)
    recs = Q.merge_records(Q.record_aggs(conn, window, where=where, seg=seg).values())
    cutoff = Q._num(since if since is not None else -math.inf)
    judge_scores = 0
    judge: list[JudgeUsage] = []
    if has_table(conn, "metrics"):
        kinds = {m for (m,) in conn.execute("SELECT metric FROM metrics WHERE kind = 'judge'")}
        judge_scores = sum(a.n_jobs for a in Q.merge(
            Q.score_aggs(conn, window, where=where, seg=seg).values()).values()
            if a.metric in kinds)
    if has_table(conn, "judge_calls"):
        judge = [
            JudgeUsage(model or "unknown", step or "-", calls, int(errors),
                       int(tin_j), int(tout_j), cost)
            for model, step, calls, errors, tin_j, tout_j, cost in conn.execute(
                "SELECT model, step, count(*),"
                " coalesce(sum(CASE WHEN error IS NOT NULL THEN 1 ELSE 0 END), 0),"
                " coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),"
                " sum(cost_usd) FROM judge_calls WHERE created_at >= ?"
                " GROUP BY model, step ORDER BY coalesce(sum(cost_usd), 0) DESC,"
                " sum(input_tokens) + sum(output_tokens) DESC, model, step",
                (cutoff,),
            )
        ]
    models = dict(sorted(recs.models.items(), key=lambda kv: (-kv[1], kv[0])))
    return Usage(records=recs.records, with_usage=recs.with_usage,
                 input_tokens=recs.input_tokens, output_tokens=recs.output_tokens,
                 models=models, judge_scores=judge_scores, judge=judge)


def monitor_history(conn: Any, since: float | None, limit: int) -> list[HistoryRow]:
    """The monitors' state changes since ``since`` (None: all), newest first, at most
    ``limit``: the store's one row type of ``monitor_history``; empty before any ``check``."""
    from ..store.compat import has_table
    from ..store.monitor_state import HISTORY_COLS, history_row

    if not has_table(conn, "monitor_history"):
        return []
    cutoff = Q._num(-math.inf if since is None else since)
    return [history_row(r) for r in conn.execute(
        f"SELECT {HISTORY_COLS} FROM monitor_history WHERE at >= ? ORDER BY at DESC, id DESC"
        " LIMIT ?", (cutoff, limit)).fetchall()]


def judge_calls_since(conn: Any, since: float) -> int:
    """The judge calls made since ``since`` (0 before the judge tables existed)."""
    try:
        return int(conn.execute("SELECT count(*) FROM judge_calls WHERE created_at >= ?",
                                (since,)).fetchone()[0])
    except sqlite3.Error:
        return 0


def has_judge_decisions(conn: Any) -> bool:
    """Whether any metric was ever judged within a budget (``judge_decisions`` has a row)."""
    from ..store.compat import has_table

    return has_table(conn, "judge_decisions") and conn.execute(
        "SELECT 1 FROM judge_decisions LIMIT 1").fetchone() is not None
