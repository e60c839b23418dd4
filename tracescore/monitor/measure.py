"""Measuring one monitor: its observations, read incrementally from the scores, its
statistic and its anytime-valid (or fixed-rule) verdict, as a :class:`_Result` for
:mod:`.evaluate` to turn into a state. Reads only (the query layer's SQL on a read
connection); blocking; never on the app's request path."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ..read import monitoring as RM
from ..stats import Estimate, Moments, mean_ci
from ..stats.sight import DEFAULT_DETECT, Sight, sight
from ..store import monitor_state as S
from . import confseq
from .active_monitor import budgeted_metric, measure_active
from .config import Monitor, format_duration
from .measure_base import (  # (measure's names since its split; the tests use them)
    CHUNK,
    GRACE_S,
    MAX_ROWS,
    MAX_SPAN_S,
    SCHEDULE,
    _Context,
    _describe,
    _describe_baseline,
    _digits,
    _fmt,
    _release_pair,
    _Result,
    _seg_filter,
    _window_start,
    _with_where,
    _worst,
)


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
        out: list[float] = []
        rows = RM.record_errors(ctx.reader, start, until, t0 if id0 >= 0 else start - 1,
                                _seg_filter(ctx, m, records=True))
        for _created, error in rows:
            out.append(1.0 if error else 0.0)
        last = (float(rows[-1][0]), 0) if rows else pos
        return out, last
    filt = _seg_filter(ctx, m)
    obs: list[float] = []
    last = pos
    read = 0
    while read < MAX_ROWS:
        rows = RM.score_rows(ctx.reader, m.score, start, until, last,
                             labelled=stat == "fail_rate", filt=filt, limit=CHUNK)
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
    return confseq.ThresholdMonitor(thr, d, m.alpha, None, m.min_n,  # type: ignore[arg-type]
                                    schedule=SCHEDULE)


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
    from ..read import query as Q

    where = dict(m.where)
    cur_where = dict(where)
    if m.baseline == "previous_window":
        window, text = Q.Window(start - m.window_s, start), "the previous window"
    elif m.baseline == "previous_release":
        pair = _release_pair(ctx, m)
        if pair is None:
            raise _NoBaseline("no previous release to compare with")
        cur, older = pair
        cur_where["release"] = cur
        where["release"] = older
        window, text = Q.Window(None, None), f"release {older} (current: {cur})"
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


def _measure(ctx: _Context, m: Monitor, prior: S.StateRow | None) -> _Result:
    if m.score in ("skip_rate", "dropped_records", "backlog_age", "judge_cost_per_day",
                   "capture_degraded"):
        return _figure(ctx, m, prior)
    direction = m.direction or ("above" if m.score == "error_rate" or m.statistic == "fail_rate"
                                else m.direction_for(ctx.info.higher_is_better(
                                    _metric_of(ctx, m.score))))
    metric = _metric_of(ctx, m.score)
    if budgeted_metric(ctx, m, metric):
        # judged within a budget: the active estimate, never the judged records' mean
        return measure_active(ctx, m, prior, direction, metric)
    if m.rule == "fixed":
        return _fixed(ctx, m, direction)
    W = m.window_s
    saved = prior.test_state if prior is not None and isinstance(prior.test_state, dict) \
        else None
    if saved is not None and (saved.get("def") != m.definition_hash() or saved.get("active")):
        saved = None  # the monitor's definition (or estimator) changed: it starts afresh
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
    # a window whose baseline was missing kept the test (and its place in the alpha
    # schedule) but ran none: it needs a baseline before anything else
    need_base = bool(saved is not None and saved.get("need_base"))
    new_window = saved is None or int(saved.get("w", -1)) != w_index
    # previous_release follows the newest release: a new release is a new comparison, at once
    pair_changed = False
    if m.baseline == "previous_release" and test is not None and not need_base:
        pair = _release_pair(ctx, m)
        old_pair = ((cur_where or {}).get("release"), saved.get("base_release")
                    if saved is not None else None)
        pair_changed = pair is not None and tuple(pair) != old_pair
    # the window's real start: it may have been extended over several time windows
    ws = float(saved.get("ws", start)) if saved is not None and test is not None else start
    extend = False
    if test is not None and new_window and not need_base and not pair_changed \
            and saved is not None:
        # finish the window that ended: its last observations count for its final verdict
        old_w = int(saved.get("w", 1))
        old_start = _window_start(t0, W, old_w)
        old_end = t0 + old_w * W
        old_eff = m if cur_where is None else _with_where(m, cur_where)
        xs, _ = _observations(ctx, old_eff, old_start, _position(saved, old_start),
                              min(old_end, ctx.now - GRACE_S))
        if xs:
            test.update(xs)
        # a window holding too few records to see the drop it is meant to catch goes on
        # into the next time window (up to MAX_SPAN_S): its test keeps its data and alpha
        needed = _sight(m, test).needed
        extend = (needed is not None and 0 < test._seq.n < needed
                  and start + W - ws <= max(MAX_SPAN_S, W))
    if not extend and (test is None or new_window or need_base or pair_changed):
        ws = start
        if m.baseline is not None:
            try:
                mom, base_text, cur_where = _baseline_moments(ctx, m, start)
            except _NoBaseline as exc:
                # keep the test, its place in the alpha schedule and the windows' anchor:
                # restarting at window 1 after each gap would make the bound alpha per gap
                keep = None if test is None else {
                    "def": m.definition_hash(), "t0": t0, "w": w_index,
                    "test": test.to_json(), "pos": [start, -1], "base_text": "",
                    "cur_where": None, "need_base": True, "ws": start}
                if test is None and saved is not None:
                    keep = {"def": m.definition_hash(), "t0": t0, "w": w_index}
                return _Result("NO_DATA", Estimate(0, None, None, None, "-"), f"no baseline: {exc}",
                               keep, detail={"condition": f"regressed against {m.baseline}"})
            if test is None:
                test = confseq.BaselineMonitor(mom, direction, m.alpha,
                                               float(m.min_effect or 0.0), None, m.min_n,
                                               schedule=SCHEDULE)
            else:
                test.new_window(mom)
                if pair_changed:
                    test._prev = None  # the old pair's verdict says nothing of the new one
        elif test is None:
            test = _threshold_test(m, direction)
        else:
            test.new_window()
    eff = m if cur_where is None else _with_where(m, cur_where)
    pos = _position(saved if not (new_window or need_base or pair_changed) else None, start)
    until = ctx.now - GRACE_S
    xs, pos = _observations(ctx, eff, start, pos, until)
    if xs:
        test.update(xs)
    st = test.status()
    stat = _stat_name(m)
    seen = _sight(m, test)
    if m.threshold is not None:
        pct = m.statistic in ("p10", "p50", "p90")
        side = "above" if pct else direction
        level = test.threshold
        note = (f" (the share that makes {m.statistic} {_pct_side(m)} {m.threshold})"
                if pct else "")
        summary = _describe(m, stat, st, side, level, m.rule, note)
        condition = f"{stat} {direction} {m.threshold}" if not pct \
            else f"{m.statistic} {_pct_side(m)} {m.threshold}"
    else:
        summary = _describe_baseline(m, stat, st, direction, test, base_text)
        condition = f"{stat} regressed against {base_text}"
    state = st.state
    # a second, softer level: WARNING when the estimate crosses it
    if state == "OK" and m.warning is not None and st.value is not None and (
            st.value < m.warning if direction == "below" else st.value > m.warning):
        state = "WARNING"
        d = _digits((st.value, m.warning))
        summary += f"; {_fmt(st.value, d)} is beyond the warning level {m.warning:g}"
    if seen.blind:
        summary += f"; {seen.text()}"
    span = f", window of {format_duration(start + W - ws)}" if ws < start else ""
    method = (f"anytime-valid empirical-Bernstein confidence sequence, window "
              f"{test.window_index} at alpha {test.window_alpha:.2g}{span}")
    return _Result(
        state, dataclasses.replace(st.estimate, method=method), summary,
        {"def": m.definition_hash(), "t0": t0, "w": w_index, "test": test.to_json(),
         "pos": [pos[0], pos[1]], "base_text": base_text, "cur_where": cur_where, "ws": ws,
         "base_release": (_base_release(base_text) if m.baseline == "previous_release"
                          else None)},
        _worst(ctx, eff, _window_start(t0, W, w_index - 1) if test.carried else ws,
               direction) if state in ("ALERT", "WARNING") else [],
        {"condition": condition, "window_start": ws, "carried": test.carried,
         "sight": seen.to_json()})


def _base_release(base_text: str) -> str | None:
    # "release v1 (current: v2)" -> "v1"
    if not base_text.startswith("release "):
        return None
    return base_text[len("release "):].rsplit(" (current: ", 1)[0]


def _sight(m: Monitor, test: Any) -> Sight:
    """What ``test`` can see with the traffic of its windows (see :mod:`.sight`)."""
    seq = test._seq
    n = max(seq.n, test._prev.n if test._prev is not None else 0)
    var = seq._q / seq.n if seq.n >= 2 else None
    gap = float(m.detect if m.detect is not None else DEFAULT_DETECT)
    extra = 0.0
    if isinstance(test, confseq.BaselineMonitor):
        if var is None:
            var = test.baseline.var
        bmean = test.baseline.mean
        extra = (abs(bmean - test.baseline_bound) if bmean is not None else 0.0) \
            + test.min_effect
    return sight(n, seq.alpha, var, gap, extra=extra)


def _metric_of(ctx: _Context, name: str) -> str:
    return RM.metric_of(ctx.reader, name)


def _fixed(ctx: _Context, m: Monitor, direction: str) -> _Result:
    """The peers' rule: the trailing window's mean against the threshold, no interval test."""
    from ..read import query as Q

    window = Q.Window(ctx.now - m.window_s, None)
    a = Q.merge(Q.score_aggs(ctx.reader, window, where=m.where, names=[m.score],
                             seg=ctx.seg).values()).get(m.score)
    n = a.n_ok if a else 0
    if a is None or n < m.min_n:
        return _Result("NO_DATA", Estimate.missing("fixed window mean", n, a.mean if a else None),
                       f"not enough data (n={n} < {m.min_n})", None)
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
    method = "fixed window mean (fires on noise; see docs/monitoring.md)"
    return _Result(state, Estimate(n, value, est.lo, est.hi, method),
                   f"{m.statistic} {_fmt(value)} (n={n}) {'is' if bad else 'is not'} "
                   f"{direction} {thr} (fixed rule: the window's mean alone, no interval)", None,
                   _worst(ctx, m, ctx.now - m.window_s, direction) if bad else [],
                   {"condition": f"{m.statistic} {direction} {thr}"})


def _figure(ctx: _Context, m: Monitor, prior: S.StateRow | None = None) -> _Result:
    """Pipeline figures: counts and ages, compared with the threshold as they are."""
    from ..read import query as Q

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
        total = RM.counter_total(r, counter)
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
        oldest = RM.oldest_open_job(r)
        value = 0.0 if oldest is None else max(0.0, ctx.now - oldest)
        what = "age of the oldest pending scoring job (s)"
        n = 1
    else:
        value = RM.judge_cost_since(r, ctx.now - 86400)
        what = "judge cost over the last 24 h (USD)"
        n = 1
    thr = float(m.threshold if m.threshold is not None else 0.0)
    if value is None:
        return _Result("NO_DATA", Estimate.missing("count"), f"{what}: no data", test_state)
    bad = value < thr if direction == "below" else value > thr
    warn = m.warning is not None and (value < m.warning if direction == "below"
                                      else value > m.warning)
    state = "ALERT" if bad else "WARNING" if warn else "OK"
    est = Estimate.missing("count (no interval: a pipeline figure, not an estimate)", n, value)
    return _Result(state, est,
                   f"{what}: {value:.4g} {'is' if bad else 'is not'} {direction} {thr:g}",
                   test_state,
                   detail={"condition": f"{m.score} {direction} {thr:g}"})
