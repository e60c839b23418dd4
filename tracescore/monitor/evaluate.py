"""Evaluating monitors: each monitor's statistic, its anytime-valid verdict, its state.

One :class:`Evaluator` per database at a time (the lease in :mod:`.state`): ``tracescore
check`` (once), ``tracescore monitor`` / ``worker --monitors`` / ``init(monitors=...)`` (on a
schedule, :mod:`.runner`). An evaluation of a monitor:

1. **The window.** Time is cut into tumbling windows of the monitor's ``window``, anchored at
   the monitor's first evaluation t0: the first window is [t0 − window, t0 + window) (a first
   check sees the last window's history), then [t0 + (k−1)·window, t0 + k·window). Each new
   window starts a new sequential test with its share of α
   (:func:`.confseq.window_alpha`), so the probability of *any* false alert over the monitor's
   life stays ≤ α however often it is checked.
2. **The observations** are read incrementally, in order: the scores stored since the last
   evaluation (``(created_at, score_id)`` after the saved position, a few seconds behind now
   so a transaction still committing is not skipped), filtered by the monitor's segments.
   Each is turned into a number in [0, 1]: the score (clamped), a yes/no value, a "fail"
   label, or for a percentile ``pQ below t`` the indicator ``x < t`` (``pQ < t`` exactly when
   more than a share q of the values lie below t).
3. **The verdict** (``rule="anytime"``, the default): :class:`.confseq.ThresholdMonitor` or
   :class:`.confseq.BaselineMonitor` — ALERT when the window's confidence sequence lies wholly
   beyond the threshold (or the baseline's bound); WARNING when only the point estimate does,
   or when it crosses the monitor's ``warning`` level; NO_DATA with fewer than ``min_n``
   observations (the previous window's verdict is carried meanwhile). ``rule="fixed"`` is the
   peers' rule — the window's mean against the threshold, no interval — kept for comparison
   and documented as firing on noise. Pipeline counts (dropped records, backlog age, judge
   cost) are plain thresholds on the figure.
4. **The state**, with hysteresis: a worse state is taken at once; a better one only after
   ``hysteresis`` evaluations in a row agree. A change is stored with its history and its
   notifications in one transaction, only while this evaluator holds the lease
   (:func:`.state.save_evaluation`); a standing ALERT is sent again after ``renotify``.

Reads go through a read connection (the query layer's SQL); writes through a store. Blocking
I/O; never on the app's request path. Not thread-safe: one thread owns an Evaluator.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import confseq
from . import state as S
from .config import Monitor, MonitorSet, format_duration
from .stats import Moments, mean_ci

log = logging.getLogger("tracescore")

__all__ = ["Evaluation", "Evaluator", "worse"]

RANK = {"OK": 0, "NO_DATA": 1, "WARNING": 2, "ALERT": 3}
#: Scores younger than this are read at the next evaluation: a transaction that stamped its
#: rows a moment ago may still be committing (several workers on PostgreSQL).
GRACE_S = 5.0
#: Rows read per query when a monitor catches up on a backlog.
CHUNK = 20_000
#: Reads per evaluation at most, so one evaluation stays bounded (the rest next time).
MAX_ROWS = 500_000


def worse(a: str, b: str) -> bool:
    """Whether state ``a`` is worse than ``b`` (ALERT > WARNING > NO_DATA > OK)."""
    return RANK.get(a, 0) > RANK.get(b, 0)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One monitor's evaluation: the stored state after hysteresis and what was seen now."""

    monitor: str
    state: str
    previous: str | None
    #: this evaluation's own verdict (before hysteresis)
    raw: str
    value: float | None
    lo: float | None
    hi: float | None
    n: int
    summary: str
    method: str
    changed: bool
    saved: bool
    worst: tuple[str, ...] = ()
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"monitor": self.monitor, "state": self.state, "previous": self.previous,
                "raw": self.raw, "value": self.value, "lo": self.lo, "hi": self.hi,
                "n": self.n, "summary": self.summary, "method": self.method,
                "changed": self.changed, "saved": self.saved, "worst": list(self.worst),
                "error": self.error, "detail": self.detail}


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Evaluator:
    """Evaluates a :class:`MonitorSet` against the database ``db``.

    ``run_once()`` takes (or renews) the evaluator lease; without it the evaluation still runs
    but stores nothing and notifies nobody (``saved=False``): another evaluator owns the
    database's monitors. Opens its connections lazily on the calling thread.
    """

    def __init__(self, db: str, monitors: MonitorSet, *, owner: str | None = None,
                 otel_logger: Any = None, lease_ttl_s: float = 180.0, db_label: str = "",
                 clock: Any = time.time) -> None:
        self.db = str(db)
        self.monitors = monitors
        self.owner = owner or _owner()
        self.otel_logger = otel_logger
        self.lease_ttl_s = lease_ttl_s
        from ..store import redact_url

        self.db_label = db_label or redact_url(self.db)
        self.clock = clock
        self._store: Any = None
        self._reader: Any = None
        self.last: list[Evaluation] = []

    # -- connections ------------------------------------------------------------------------
    def _open(self) -> tuple[Any, Any]:
        if self._store is None:
            from ..store import open_store
            from ..store.compat import connect_reader

            self._store = open_store(self.db)
            S.ensure_tables(self._store)
            self._reader = connect_reader(self.db)
        return self._store, self._reader

    def close(self) -> None:
        for c in (self._reader, self._store):
            if c is not None:
                try:
                    c.close()
                except Exception:  # closing a broken connection: nothing left to do
                    pass
        self._store = self._reader = None

    def release(self) -> None:
        """Give the lease back (a stopping evaluator), so another takes over at once."""
        if self._store is not None:
            try:
                S.release_lease(self._store, S.DEFAULT_LEASE, self.owner)
            except Exception as exc:  # the database went away: the lease expires by itself
                log.debug("tracescore: could not release the monitor lease: %s", exc)

    # -- evaluation ---------------------------------------------------------------------------
    def run_once(self, now: float | None = None, *, save: bool = True,
                 only: Sequence[str] | None = None) -> list[Evaluation]:
        """Evaluate every monitor (or those named in ``only``) once; store and notify if this
        evaluator holds the lease and ``save``. Blocking."""
        store, reader = self._open()
        now = self.clock() if now is None else now
        held = save and S.acquire_lease(store, S.DEFAULT_LEASE, self.owner, self.lease_ttl_s)
        stored = S.load_states(store)
        from ..reports.metric_info import MetricInfo
        from ..reports.query import SegmentIndex

        ctx = _Context(reader, SegmentIndex(reader), MetricInfo(reader), now)
        out = []
        for m in self.monitors:
            if only is not None and m.name not in only:
                continue
            out.append(self._evaluate(store, ctx, m, stored.get(m.name), held))
        if hasattr(reader, "commit"):
            try:  # end the read transaction so the next run sees new rows
                reader.commit()
            except Exception:
                pass
        self.last = out
        return out

    def _evaluate(self, store: Any, ctx: _Context, m: Monitor, prior: S.StateRow | None,
                  held: bool) -> Evaluation:
        try:
            result = _measure(ctx, m, prior)
        except Exception as exc:  # a broken monitor must not stop the others
            log.warning("tracescore: monitor %s could not be evaluated: %s", m.name, exc)
            result = _Result("NO_DATA", None, None, None, 0, f"could not evaluate: {exc}",
                             "-", prior.test_state if prior else None, error=str(exc))
        raw = _apply_no_data(m, result.state)
        state, pending, streak = _hysteresis(m, prior, raw)
        previous = prior.state if prior else None
        changed = previous != state
        renotify = (not changed and state == "ALERT" and m.renotify_s is not None
                    and prior is not None
                    and (prior.notified_at or prior.since) + m.renotify_s <= ctx.now)
        detail = {"summary": result.summary, "method": result.method, "raw": raw,
                  "worst": list(result.worst), **result.detail}
        if result.error:
            detail["error"] = result.error
        saved = False
        if held:
            from . import notify as N

            event = N.AlertEvent(
                monitor=m.name, state=state, previous=previous, score=m.score,
                statistic=m.statistic, window_s=m.window_s, value=result.value,
                lo=result.lo, hi=result.hi, n=result.n, condition=_condition(m, result),
                verdict=result.summary, method=result.method,
                command=f"tracescore check --monitor {m.name}", db=self.db_label,
                at=ctx.now, where=dict(m.where), worst_trace_ids=result.worst)
            # a monitor's first state is news only when it is bad; later, every change is
            # (a recovery included)
            news = changed and (previous is not None or state in ("ALERT", "WARNING"))
            items = N.outbox_items(event, self.monitors.channels_for(m)) \
                if (news or renotify) else None
            saved = S.save_evaluation(
                store, m.name, owner=self.owner, state=state, value=result.value,
                lo=result.lo, hi=result.hi, n=result.n, detail=detail,
                test_state=result.test_state, streak=streak, pending=pending, notify=items,
                at=ctx.now, renotify=bool(renotify))
            if saved and changed:
                N.emit_state_change(self.otel_logger, event)
        return Evaluation(m.name, state, previous, raw, result.value, result.lo, result.hi,
                          result.n, result.summary, result.method, changed, saved,
                          tuple(result.worst), result.error, detail)


# -- the pieces ---------------------------------------------------------------------------------
@dataclass
class _Context:
    reader: Any
    seg: Any
    info: Any
    now: float


@dataclass
class _Result:
    state: str
    value: float | None
    lo: float | None
    hi: float | None
    n: int
    summary: str
    method: str
    test_state: Any
    worst: Sequence[str] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _apply_no_data(m: Monitor, state: str) -> str:
    if state != "NO_DATA":
        return state
    return {"ok": "OK", "alert": "ALERT"}.get(m.no_data, "NO_DATA")


def _hysteresis(m: Monitor, prior: S.StateRow | None, raw: str
                ) -> tuple[str, str | None, int]:
    """(state, pending, streak): worse states at once, better ones after ``hysteresis``
    evaluations in a row."""
    if prior is None or worse(raw, prior.state):
        return raw, None, 0
    if raw == prior.state:
        return raw, None, 0
    streak = prior.streak + 1 if prior.pending == raw else 1
    if streak >= m.hysteresis:
        return raw, None, 0
    return prior.state, raw, streak


def _condition(m: Monitor, r: _Result) -> str:
    return r.detail.get("condition") or (
        f"{m.statistic} {m.direction or ''} {m.threshold}" if m.threshold is not None
        else f"regressed against {m.baseline}")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _describe(m: Monitor, stat: str, st: confseq.Status, direction: str,
              level: float | str, rule: str) -> str:
    est = f"{stat} {_fmt(st.estimate)}"
    if st.lo is not None and st.hi is not None:
        est += f" [{_fmt(st.lo)}, {_fmt(st.hi)}]"
    est += f" (n={st.n})"
    side = "below" if direction == "below" else "above"
    if st.state == "NO_DATA":
        return f"{est}: not enough data (fewer than {m.min_n} in the window)"
    if st.state == "ALERT":
        why = ("the whole anytime-valid interval is" if rule == "anytime"
               else "the window's mean is")
        return f"{est}: {why} {side} {level}"
    if st.state == "WARNING":
        return f"{est}: the estimate is {side} {level}, the interval does not confirm it yet"
    return f"{est}: not {side} {level}"


def _seg_filter(ctx: _Context, m: Monitor, alias: str = "", *,
                records: bool = False) -> tuple[str, list[Any]]:
    """SQL for the monitor's ``where`` on ``scores`` (or ``records``: record dimensions
    only)."""
    from ..reports import query as Q

    ids = ctx.seg.matching(m.where)
    sql, args = Q._seg_clause(ids, f"{alias}seg_id")
    if records:
        return sql, args
    dim_sql, dim_args = Q._score_dim_clause(m.where, alias)
    return sql + dim_sql, args + dim_args


def _position(prior_test: Mapping[str, Any] | None, window_start: float) -> tuple[float, int]:
    pos = (prior_test or {}).get("pos")
    if not pos:
        return window_start, -1
    t, i = float(pos[0]), int(pos[1])
    return (t, i) if t >= window_start else (window_start, -1)


def _observations(ctx: _Context, m: Monitor, start: float, pos: tuple[float, int],
                  until: float) -> tuple[list[float], tuple[float, int]]:
    """The monitor's new observations in [start, until) after ``pos``, in order, as numbers in
    [0, 1]; and the new position."""
    stat = m.statistic
    t0, id0 = pos
    if m.score == "error_rate":
        seg_sql, seg_args = _seg_filter(ctx, m, records=True)
        out: list[float] = []
        rows = ctx.reader.execute(
            "SELECT created_at, error FROM records WHERE created_at >= ? AND created_at < ?"
            " AND created_at > ?" + seg_sql + " ORDER BY created_at",
            (start, until, t0 if id0 >= 0 else start - 1, *seg_args)).fetchall()
        for _created, error in rows:
            out.append(1.0 if error else 0.0)
        last = (float(rows[-1][0]), 0) if rows else pos
        return out, last
    seg_sql, seg_args = _seg_filter(ctx, m)
    obs: list[float] = []
    last = pos
    cond = "status = 'ok' AND value IS NOT NULL"
    if stat == "fail_rate":
        cond += " AND label IS NOT NULL"
    read = 0
    while read < MAX_ROWS:
        rows = ctx.reader.execute(
            "SELECT created_at, score_id, value, label FROM scores WHERE name = ? AND " + cond
            + " AND created_at >= ? AND created_at < ?"
            " AND (created_at > ? OR (created_at = ? AND score_id > ?))" + seg_sql
            + " ORDER BY created_at, score_id LIMIT ?",
            (m.score, start, until, last[0], last[0], last[1], *seg_args, CHUNK)).fetchall()
        for _created, _sid, value, label in rows:
            obs.append(_observation(m, float(value), label))
        read += len(rows)
        if rows:
            last = (float(rows[-1][0]), int(rows[-1][1]))
        if len(rows) < CHUNK:
            break
    return obs, last


def _observation(m: Monitor, value: float, label: str | None) -> float:
    stat = m.statistic
    if stat == "fail_rate":
        return 1.0 if label == "fail" else 0.0
    if stat in ("p10", "p50", "p90"):
        t = float(m.threshold if m.threshold is not None else 0.0)
        return 1.0 if (value < t if _pct_side(m) == "below" else value > t) else 0.0
    return min(max(value, 0.0), 1.0)


def _pct_side(m: Monitor) -> str:
    return m.direction or "below"


def _threshold_test(m: Monitor, direction: str) -> confseq.ThresholdMonitor:
    """A fresh sequential test for a threshold monitor. ``pQ below t`` is tested as "more than
    a share q of the values lie below t" (``pQ above t``: more than 1 − q lie above it)."""
    thr, d = float(m.threshold if m.threshold is not None else 0.0), direction
    if m.statistic in ("p10", "p50", "p90"):
        q = float(m.statistic[1:]) / 100
        thr, d = (q, "above") if _pct_side(m) == "below" else (1 - q, "above")
    thr = min(max(thr, 0.0), 1.0)
    return confseq.ThresholdMonitor(thr, d, m.alpha, None, m.min_n)  # type: ignore[arg-type]


def _stat_name(m: Monitor) -> str:
    if m.score == "error_rate":
        return "share of records with an error"
    if m.statistic in ("p10", "p50", "p90"):
        side = "below" if _pct_side(m) == "below" else "above"
        return f"share {side} {m.threshold}"
    return m.statistic


def _baseline_moments(ctx: _Context, m: Monitor, start: float) -> tuple[Moments, str,
                                                                       dict[str, str]]:
    """The baseline sample's moments (values in [0, 1]) for the window starting at
    ``start``, its description, and the ``where`` of the current side."""
    from ..reports import query as Q

    where = dict(m.where)
    cur_where = dict(where)
    if m.baseline == "previous_window":
        window, text = Q.Window(start - m.window_s, start), "the previous window"
    elif m.baseline == "previous_release":
        releases = [v for v, _ in Q.values_of(ctx.reader, "release", Q.Window(), ctx.seg)]
        cur: str | None
        if "release" in where:
            cur = where["release"]
            older = releases[:releases.index(cur)] if cur in releases else []
        else:
            cur = releases[-1] if releases else None
            older = releases[:-1]
        if cur is None or not older:
            raise _NoBaseline("no previous release to compare with")
        cur_where["release"] = cur
        where["release"] = older[-1]
        window, text = Q.Window(None, None), f"release {older[-1]} (current: {cur})"
    else:
        span = m.baseline_s or 7 * 86400.0
        window = Q.Window(start - span, start)
        text = f"the {format_duration(span)} before the window"
    aggs = Q.merge(Q.score_aggs(ctx.reader, window, where=where, names=[m.score],
                                seg=ctx.seg).values())
    a = aggs.get(m.score)
    if a is None or not a.n_ok:
        raise _NoBaseline(f"no scores in the baseline ({text})")
    if m.statistic == "fail_rate":
        mom = Moments(a.n_labelled, float(a.n_fail), float(a.n_fail))
    elif m.statistic in ("mean", "rate"):
        mom = Moments(a.n_ok, min(max(a.s, 0.0), float(a.n_ok)), min(max(a.ss, 0.0), a.s))
    else:
        raise _NoBaseline(f"a baseline for {m.statistic} is not supported: use a threshold")
    return mom, text, cur_where


class _NoBaseline(Exception):
    pass


def _worst(ctx: _Context, m: Monitor, start: float, direction: str) -> list[str]:
    if m.is_pipeline_figure:
        return []
    seg_sql, seg_args = _seg_filter(ctx, m)
    order = "ASC" if direction == "below" else "DESC"
    return [r[0] for r in ctx.reader.execute(
        "SELECT trace_id FROM scores WHERE name = ? AND status = 'ok' AND value IS NOT NULL"
        " AND created_at >= ?" + seg_sql + f" ORDER BY value {order}, score_id DESC LIMIT 3",
        (m.score, start, *seg_args)).fetchall()]


def _measure(ctx: _Context, m: Monitor, prior: S.StateRow | None) -> _Result:
    if m.score in ("skip_rate", "dropped_records", "backlog_age", "judge_cost_per_day"):
        return _figure(ctx, m, prior)
    direction = m.direction or ("above" if m.score == "error_rate" or m.statistic == "fail_rate"
                                else m.direction_for(ctx.info.higher_is_better(
                                    _metric_of(ctx, m.score))))
    if m.rule == "fixed":
        return _fixed(ctx, m, direction)
    W = m.window_s
    saved = prior.test_state if prior is not None and isinstance(prior.test_state, dict) \
        else None
    if saved is not None and saved.get("def") != m.definition_hash():
        saved = None  # the monitor's definition changed: its test starts afresh
    # Windows are anchored at the monitor's first evaluation t0: the first spans [t0 - W,
    # t0 + W) (so a first check sees the last window's history), then [t0 + (k-1)W, t0 + kW).
    t0 = float(saved["t0"]) if saved is not None and "t0" in saved else ctx.now
    w_index = 1 if ctx.now < t0 + W else int(math.floor((ctx.now - t0) / W)) + 1
    start = _window_start(t0, W, w_index)
    test: Any = None
    base_text = ""
    cur_where: dict[str, str] | None = None
    if saved is not None:
        data = saved.get("test")
        cls = confseq.BaselineMonitor if (data or {}).get("kind") == "baseline" \
            else confseq.ThresholdMonitor
        test = cls.from_json(data) if data else None
        base_text = saved.get("base_text", "")
        cur_where = saved.get("cur_where")
    new_window = saved is None or int(saved.get("w", -1)) != w_index
    if test is not None and new_window and saved is not None:
        # finish the window that ended: its last observations count for its final verdict
        old_w = int(saved.get("w", 1))
        old_start = _window_start(t0, W, old_w)
        old_end = t0 + old_w * W
        old_eff = m if cur_where is None else _with_where(m, cur_where)
        xs, _ = _observations(ctx, old_eff, old_start, _position(saved, old_start),
                              min(old_end, ctx.now - GRACE_S))
        if xs:
            test.update(xs)
    if test is None or new_window:
        if m.baseline is not None:
            try:
                mom, base_text, cur_where = _baseline_moments(ctx, m, start)
            except _NoBaseline as exc:
                return _Result("NO_DATA", None, None, None, 0, f"no baseline: {exc}", "-",
                               None, detail={"condition": f"regressed against {m.baseline}"})
            if test is None:
                test = confseq.BaselineMonitor(mom, direction, m.alpha,
                                               float(m.min_effect or 0.0), None, m.min_n)
            else:
                test.new_window(mom)
        elif test is None:
            test = _threshold_test(m, direction)
        else:
            test.new_window()
    eff = m if cur_where is None else _with_where(m, cur_where)
    pos = _position(saved if not new_window else None, start)
    until = ctx.now - GRACE_S
    xs, pos = _observations(ctx, eff, start, pos, until)
    if xs:
        test.update(xs)
    st = test.status()
    stat = _stat_name(m)
    if m.threshold is not None:
        level: float | str = m.threshold
        summary = _describe(m, stat, st, direction if m.statistic not in ("p10", "p50", "p90")
                            else "above", str(m.threshold), m.rule)
        condition = f"{stat} {direction} {m.threshold}" if m.statistic not in (
            "p10", "p50", "p90") else f"{m.statistic} {_pct_side(m)} {m.threshold}"
    else:
        bound = test.baseline_bound
        level = f"the baseline's bound {bound:.3f} ({base_text})"
        summary = _describe(m, stat, st, direction, level, m.rule)
        condition = f"{stat} regressed against {base_text}"
    state = st.state
    # a second, softer level: WARNING when the estimate crosses it
    if state == "OK" and m.warning is not None and st.estimate is not None and (
            st.estimate < m.warning if direction == "below" else st.estimate > m.warning):
        state = "WARNING"
        summary += f"; beyond the warning level {m.warning}"
    method = (f"anytime-valid empirical-Bernstein confidence sequence, window "
              f"{test.window_index} at alpha {test.window_alpha:.2g}")
    return _Result(
        state, st.estimate, st.lo, st.hi, st.n, summary, method,
        {"def": m.definition_hash(), "t0": t0, "w": w_index, "test": test.to_json(),
         "pos": [pos[0], pos[1]], "base_text": base_text, "cur_where": cur_where},
        _worst(ctx, eff, _window_start(t0, W, w_index - 1) if test.carried else start,
               direction) if state in ("ALERT", "WARNING") else [],
        {"condition": condition, "window_start": start, "carried": test.carried})


def _window_start(t0: float, W: float, k: int) -> float:
    """Start of window ``k`` (1-based) of a monitor first evaluated at ``t0``."""
    return t0 - W if k <= 1 else t0 + (k - 1) * W


def _with_where(m: Monitor, where: Mapping[str, str]) -> Monitor:
    import dataclasses

    return dataclasses.replace(m, where=dict(where))


def _metric_of(ctx: _Context, name: str) -> str:
    row = ctx.reader.execute(
        "SELECT metric FROM hourly_scores WHERE name = ? LIMIT 1", (name,)).fetchone()
    return str(row[0]) if row and row[0] else name


def _fixed(ctx: _Context, m: Monitor, direction: str) -> _Result:
    """The peers' rule: the trailing window's mean against the threshold, no interval test."""
    from ..reports import query as Q

    window = Q.Window(ctx.now - m.window_s, None)
    a = Q.merge(Q.score_aggs(ctx.reader, window, where=m.where, names=[m.score],
                             seg=ctx.seg).values()).get(m.score)
    n = a.n_ok if a else 0
    if a is None or n < m.min_n:
        return _Result("NO_DATA", a.mean if a else None, None, None, n,
                       f"not enough data (n={n} < {m.min_n})", "fixed window mean", None)
    if m.statistic == "fail_rate":
        value = a.n_fail / a.n_labelled if a.n_labelled else None
    elif m.statistic in ("p10", "p50", "p90"):
        value = a.percentile(float(m.statistic[1:]) / 100)
    else:
        value = a.mean
    est = mean_ci(a.moments())
    thr = float(m.threshold if m.threshold is not None else 0.0)
    bad = value is not None and (value < thr if direction == "below" else value > thr)
    state = "ALERT" if bad else "OK"
    return _Result(state, value, est.lo, est.hi, n,
                   f"{m.statistic} {_fmt(value)} (n={n}) {'is' if bad else 'is not'} "
                   f"{direction} {thr} (fixed rule: the window's mean alone, no interval)",
                   "fixed window mean (fires on noise; see docs/monitoring.md)", None,
                   _worst(ctx, m, ctx.now - m.window_s, direction) if bad else [],
                   {"condition": f"{m.statistic} {direction} {thr}"})


def _figure(ctx: _Context, m: Monitor, prior: S.StateRow | None = None) -> _Result:
    """Pipeline figures: counts and ages, compared with the threshold as they are."""
    from ..reports import query as Q

    r = ctx.reader
    test_state: Any = None
    direction = m.direction or "above"
    since = ctx.now - m.window_s
    n = 0
    if m.score == "skip_rate":
        skips = Q.merge_skips(Q.skip_aggs(r, Q.Window(since, None), where=m.where,
                                          seg=ctx.seg).values())
        aggs = Q.merge(Q.score_aggs(r, Q.Window(since, None), where=m.where,
                                    seg=ctx.seg).values())
        k = sum(sum(v.values()) for v in skips.values())
        n = k + sum(a.n_ok + a.n_error for a in aggs.values())
        value: float | None = k / n if n else None
        what = "share of scoring jobs skipped"
    elif m.score == "dropped_records":
        # the counter is a running total: the figure is its growth over the window, from
        # the total seen at the window's start (kept in the monitor's state)
        total = float(r.execute("SELECT coalesce(max(value), 0) FROM counters"
                                " WHERE name = 'records_dropped'").fetchone()[0])
        saved = prior.test_state if prior is not None and isinstance(prior.test_state, dict) \
            else {}
        base_t, base = float(saved.get("t", ctx.now)), float(saved.get("total", total))
        if ctx.now - base_t >= m.window_s or total < base:
            base_t, base = ctx.now, total
        test_state = {"t": base_t, "total": base}
        value = total - base
        what = f"records dropped since {format_duration(ctx.now - base_t) if ctx.now > base_t else 'now'}"
        n = 1
    elif m.score == "backlog_age":
        oldest = r.execute("SELECT min(created_at) FROM jobs WHERE status IN"
                           " ('pending', 'leased')").fetchone()[0]
        value = 0.0 if oldest is None else max(0.0, ctx.now - float(oldest))
        what = "age of the oldest pending scoring job (s)"
        n = 1
    else:
        from ..store.compat import has_table

        value = 0.0
        if has_table(r, "judge_calls"):
            value = float(r.execute("SELECT coalesce(sum(cost_usd), 0) FROM judge_calls"
                                    " WHERE created_at >= ?", (ctx.now - 86400,)).fetchone()[0])
        what = "judge cost over the last 24 h (USD)"
        n = 1
    thr = float(m.threshold if m.threshold is not None else 0.0)
    if value is None:
        return _Result("NO_DATA", None, None, None, 0, f"{what}: no data", "count", test_state)
    bad = value < thr if direction == "below" else value > thr
    warn = m.warning is not None and (value < m.warning if direction == "below"
                                      else value > m.warning)
    state = "ALERT" if bad else "WARNING" if warn else "OK"
    return _Result(state, value, None, None, n,
                   f"{what}: {value:.4g} {'is' if bad else 'is not'} {direction} {thr:g}",
                   "count (no interval: a pipeline figure, not an estimate)", test_state,
                   detail={"condition": f"{m.score} {direction} {thr:g}"})
