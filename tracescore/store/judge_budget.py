"""Schema version 10 (SQLite; PostgreSQL's 9): judge budgets and adaptive judge decisions —
their DDL and every statement on them, written once for both backends (``?`` SQL; on
PostgreSQL it runs through :func:`.rollup.qmark`).

- ``judge_budget``: one row per (judge metric, UTC day): records decided (``seen``),
  records sent to the judge (``spent``), the budget and the day's first decision. Both are counted in the decision's transaction, the
  spend by a conditional ``UPDATE … WHERE spent < limit`` — atomic on both engines (on
  PostgreSQL the row lock serialises the workers of a fleet), so a day never goes over its
  budget however many workers share it.
- ``judge_decisions``: one row per (record, judge metric): the proxy f, its bin, the inclusion
  probability π the decision used (0 when the budget was spent: the record is not
  represented) and whether it was judged. The read side (:mod:`tracescore.monitor.active_summary`)
  weights the judged records by 1/π; the selector learns the proxy's error from them.

Each decision stored or reopened also changes the hourly sums the readers estimate from
(:mod:`.judge_rollup`), in the same transaction.

Blocking, like every store method: the scoring worker calls them on its loop's connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import judge_rollup as JR
from .rollup import qmark, qmark_tx

__all__ = ["CACHED", "FORCED", "Decided", "day_of", "ddl", "decide", "decision_sums", "recent_seen",
           "not_judged_metrics", "usage"]

_TYPES = {"sqlite": {"real": "REAL", "int": "INTEGER"},
          "postgres": {"real": "double precision", "int": "bigint"}}


def ddl(dialect: str) -> list[str]:
    t = _TYPES[dialect]
    return [
        f"CREATE TABLE IF NOT EXISTS judge_budget (metric TEXT NOT NULL, day TEXT NOT NULL,"
        f" seen {t['int']} NOT NULL DEFAULT 0, spent {t['int']} NOT NULL DEFAULT 0,"
        f" budget {t['real']}, first_at {t['real']}, PRIMARY KEY (metric, day))",
        f"CREATE TABLE IF NOT EXISTS judge_decisions (record_id TEXT NOT NULL,"
        f" metric TEXT NOT NULL, created_at {t['real']} NOT NULL, proxy {t['real']} NOT NULL,"
        f" bin {t['int']} NOT NULL, pi {t['real']} NOT NULL, selected {t['int']} NOT NULL,"
        " reason TEXT, PRIMARY KEY (record_id, metric))",
        "CREATE INDEX IF NOT EXISTS idx_judge_decisions_metric_created"
        " ON judge_decisions(metric, created_at)",
    ]


def day_of(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision: judged or not, the π it used, and whether it was made before (a job
    leased again after a crash finds its decision, and the budget is not counted twice)."""

    selected: bool
    pi: float
    proxy: float
    again: bool = False
    reason: str | None = None


#: the reason of a decision a rule or negative feedback forced (π = 1)
FORCED = "forced"
#: the reason of a record judged for free: the judge's verdict was cached (π = 1)
CACHED = "cached"


def _forced(conn: Any, record_id: str, trace_id: str | None) -> bool:
    """Whether a rule (not a priority rule: its records are a random share of those it holds,
    decided on the same hash as the rest) or negative feedback forces the record: it is then
    judged with π = 1, as :mod:`tracescore.stats.weighted` counts such records."""
    from ..sampling import PRIORITY_PREFIX

    row = conn.execute("SELECT forced FROM records WHERE record_id = ?", (record_id,)).fetchone()
    if row is not None and row[0] and not str(row[0]).startswith(PRIORITY_PREFIX):
        return True
    if trace_id is None:
        return False
    return conn.execute("SELECT 1 FROM feedback WHERE trace_id = ? AND value < 0.5 LIMIT 1",
                        (trace_id,)).fetchone() is not None


def decide(store: Any, metric: str, record_id: str, proxy: float, bin_: int,
           now: float, budget: float,
           choose: Callable[[int, int, float], tuple[float, bool]],
           trace_id: str | None = None, free: bool = False) -> Decided:
    """One decision, in one transaction: the record's earlier decision if any; else count it
    seen today, ask ``choose(spent, seen, first decision today)`` for (π, wanted), take one unit of today's budget
    if wanted (refused when spent: the record is then not judged, π 0, reason "budget
    spent"), and store the decision.

    A record a rule or negative feedback forces (:func:`_forced`; ``trace_id`` given) is
    judged with π = 1 and counted against the budget without a refusal — also when it was
    decided "not judged" before the feedback came (the decision is then turned to judged: the
    feedback forces every metric on its trace, as everywhere in tracescore).

    ``free``: the judge's verdict is in its cache already (judging costs no call): the record
    is judged with π = 1, reason :data:`CACHED`, and takes no unit of the budget."""
    day = day_of(now)
    with qmark_tx(store) as conn:
        old = conn.execute("SELECT selected, pi, proxy, reason FROM judge_decisions"
                           " WHERE record_id = ? AND metric = ?", (record_id, metric)).fetchone()
        forced = _forced(conn, record_id, trace_id)
        if old is not None:
            if old[0] or not forced:
                return Decided(bool(old[0]), float(old[1]), float(old[2]), True, old[3])
            before = _sums_of(conn, record_id, metric)
            conn.execute("UPDATE judge_decisions SET selected = 1, pi = 1.0, reason = ?"
                         " WHERE record_id = ? AND metric = ?", (FORCED, record_id, metric))
            _sums_changed(conn, record_id, metric, before)
            conn.execute("UPDATE judge_budget SET spent = spent + 1 WHERE metric = ?"
                         " AND day = ?", (metric, day))
            return Decided(True, 1.0, float(old[2]), False, FORCED)
        conn.execute("INSERT INTO judge_budget(metric, day, seen, spent, budget, first_at)"
                     " VALUES (?, ?, 1, 0, ?, ?) ON CONFLICT (metric, day)"
                     " DO UPDATE SET seen = judge_budget.seen + 1, budget = excluded.budget",
                     (metric, day, float(budget), now))
        spent, seen, first_at = conn.execute(
            "SELECT spent, seen, first_at FROM judge_budget WHERE metric = ? AND day = ?",
            (metric, day)).fetchone()
        pi, wanted = choose(int(spent), int(seen) - 1, float(first_at or now))
        selected, reason = False, None
        if free and not forced:
            pi, selected, reason = 1.0, True, CACHED
        elif forced:
            conn.execute("UPDATE judge_budget SET spent = spent + 1 WHERE metric = ?"
                         " AND day = ?", (metric, day))
            pi, selected, reason = 1.0, True, FORCED
        elif pi <= 0.0:
            reason = "budget spent"
            pi = 0.0
        elif wanted:
            cur = conn.execute("UPDATE judge_budget SET spent = spent + 1 WHERE metric = ?"
                               " AND day = ? AND spent < ?", (metric, day, float(budget)))
            selected = cur.rowcount == 1
            if not selected:
                pi, reason = 0.0, "budget spent"
        conn.execute("INSERT INTO judge_decisions(record_id, metric, created_at, proxy, bin,"
                      " pi, selected, reason) VALUES (?,?,?,?,?,?,?,?)",
                      (record_id, metric, now, float(proxy), int(bin_), float(pi),
                       1 if selected else 0, reason))
        _sums_changed(conn, record_id, metric, (None, {}))
    return Decided(selected, float(pi), float(proxy), False, reason)


_Sums = tuple["JR.DecisionRow | None", "dict[tuple[str, str, str], JR.JudgedRow]"]


def _sums_of(conn: Any, record_id: str, metric: str) -> _Sums:
    """The decision's terms in the hourly judge sums (:mod:`.judge_rollup`): its decision row
    and its judged rows."""
    return (JR.decision_row(conn, record_id, metric),
            JR.judged_snapshot(conn, [record_id], metric))


def _sums_changed(conn: Any, record_id: str, metric: str, before: _Sums) -> None:
    """Apply the change of the decision's terms since ``before`` to the hourly judge sums
    (in the decision's transaction)."""
    old_dec, old_judged = before
    new_dec, new_judged = _sums_of(conn, record_id, metric)
    delta = JR.JudgeDelta()
    if old_dec != new_dec:
        if old_dec is not None:
            delta.add_decision(*old_dec, sign=-1)
        if new_dec is not None:
            delta.add_decision(*new_dec)
    delta.change(old_judged, new_judged)
    delta.write(conn)


def not_judged_metrics(store: Any, record_id: str) -> set[str]:
    """The metrics whose judge decision on the record was "not judged"."""
    return {str(r[0]) for r in qmark(store).execute(
        "SELECT metric FROM judge_decisions WHERE record_id = ? AND selected = 0",
        (record_id,)).fetchall()}


def usage(store: Any, metric: str, day: str) -> tuple[int, int, float | None]:
    """(seen, spent, budget) of ``metric`` on ``day`` (zeros without a row)."""
    row = qmark(store).execute("SELECT seen, spent, budget FROM judge_budget WHERE metric = ?"
                               " AND day = ?", (metric, day)).fetchone()
    if row is None:
        return 0, 0, None
    return int(row[0]), int(row[1]), None if row[2] is None else float(row[2])


def recent_seen(store: Any, metric: str, now: float, window_s: float) -> int:
    """Decisions on ``metric`` in the ``window_s`` before ``now`` (the pacer's traffic
    rate)."""
    row = qmark(store).execute("SELECT count(*) FROM judge_decisions WHERE metric = ?"
                               " AND created_at >= ? AND created_at < ?",
                               (metric, now - window_s, now)).fetchone()
    return int(row[0] or 0)


def decision_sums(store: Any, metric: str, score_name: str, since: float
                  ) -> list[tuple[int, int, int, float, float, float, float, float, float]]:
    """Per proxy bin since ``since``: (bin, decided, judged with an ok score, Σw, Σwf, Σwy,
    Σwf², Σwfy, Σwy²), w = 1/π — the error model's sums
    (:class:`tracescore.budget.policy.ErrorModel`)."""
    rows = qmark(store).execute(
        "SELECT d.bin, count(*),"
        " sum(CASE WHEN s.value IS NOT NULL THEN 1 ELSE 0 END),"
        " sum(CASE WHEN s.value IS NOT NULL THEN 1.0 / d.pi ELSE 0 END),"
        " sum(CASE WHEN s.value IS NOT NULL THEN d.proxy / d.pi ELSE 0 END),"
        " sum(CASE WHEN s.value IS NOT NULL THEN s.value / d.pi ELSE 0 END),"
        " sum(CASE WHEN s.value IS NOT NULL THEN d.proxy * d.proxy / d.pi ELSE 0 END),"
        " sum(CASE WHEN s.value IS NOT NULL THEN d.proxy * s.value / d.pi ELSE 0 END),"
        " sum(CASE WHEN s.value IS NOT NULL THEN s.value * s.value / d.pi ELSE 0 END)"
        " FROM judge_decisions d LEFT JOIN records dr ON dr.record_id = d.record_id"
        " LEFT JOIN scores s ON s.rec = dr.seq"
        " AND s.name = ? AND s.status = 'ok' AND d.selected = 1"
        " WHERE d.metric = ? AND d.created_at >= ? AND d.pi > 0 GROUP BY d.bin",
        (score_name, metric, since)).fetchall()
    return [(int(b), int(n), int(j or 0), *(float(x or 0.0) for x in rest))
            for b, n, j, *rest in rows]
