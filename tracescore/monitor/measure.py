"""Measuring one monitor: its observations, read incrementally from the scores, its
statistic and its anytime-valid (or fixed-rule) verdict, as a :class:`_Result` for
:mod:`.evaluate` to turn into a state. Reads only (the query layer's SQL on a read
connection); blocking; never on the app's request path."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import confseq
from . import state as S
from .config import Monitor, format_duration
from .stats import Moments, mean_ci

#: Scores younger than this are read at the next evaluation: a transaction that stamped its
#: rows a moment ago may still be committing (several workers on PostgreSQL).
GRACE_S = 5.0
#: Rows read per query when a monitor catches up on a backlog.
CHUNK = 20_000
#: Reads per evaluation at most, so one evaluation stays bounded (the rest next time).
MAX_ROWS = 500_000


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
    if m.score in ("skip_rate", "dropped_records", "backlog_age", "judge_cost_per_day",
                   "capture_degraded"):
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
    elif m.score in ("dropped_records", "capture_degraded"):
        # the counter is a running total: the figure is its growth over the window, from
        # the total seen at the window's start (kept in the monitor's state)
        counter = "records_dropped" if m.score == "dropped_records" else "capture_degraded"
        total = float(r.execute("SELECT coalesce(max(value), 0) FROM counters"
                                " WHERE name = ?", (counter,)).fetchone()[0])
        saved = prior.test_state if prior is not None and isinstance(prior.test_state, dict) \
            else {}
        base_t, base = float(saved.get("t", ctx.now)), float(saved.get("total", total))
        if ctx.now - base_t >= m.window_s or total < base:
            base_t, base = ctx.now, total
        test_state = {"t": base_t, "total": base}
        value = total - base
        what = (f"{'records dropped' if counter == 'records_dropped' else 'capture fallbacks'}"
                f" since {format_duration(ctx.now - base_t) if ctx.now > base_t else 'now'}")
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
