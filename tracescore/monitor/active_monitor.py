"""Measuring a monitor on a judge metric judged within a budget (issue 33): its figure is the
active-inference estimate over every decided record, never the plain mean of the judged
records (adaptive selection judges the records the proxy is least sure of more often, so that
mean is biased).

- ``rule = "anytime"`` (threshold or baseline): the window's decided records are read
  incrementally, in decision order (``judge_decisions`` joined to the judge's scores), and fed
  to :class:`.active_cs.ActiveSequence`, a confidence sequence over the per-record active
  terms. The value shown is the active estimate (the report's figure, from running sums); the
  interval is the sequence's, widened to contain the estimate. ALERT when that interval lies
  beyond the threshold; WARNING when only the estimate does; NO_DATA below ``min_n`` judged
  records. Windows and the α schedule are those of :mod:`.measure` (window k spends
  :func:`.confseq.spend` (α, k, "log"), only windows that reached ``min_n`` count); a baseline
  monitor splits the share in two: half for the current window's sequence, half for the
  baseline's (the same sequence run over the baseline's decided records, read once a window,
  its far end the bound compared with).
- ``rule = "fixed"``: the trailing window's active estimate and its normal interval, exactly
  the report's (:func:`.active_summary.active_summaries`), against the threshold.

A judged record whose score is not there yet stops the reading for up to
:data:`PENDING_WAIT_S` (the records after it wait, so the order holds); after that, and for a
judge error, it is left out and counted (assumed missing at random, as in the report). A
record decided after the day's budget was spent (π = 0) is not represented: counted. Only
``mean`` and ``rate`` have an active estimate; a percentile or fail share of such a metric,
or a ``where`` on a score dimension, is NO_DATA with the reason.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from ..read import monitoring as RM
from ..stats import Estimate
from ..stats.active_cs import ActiveSequence
from ..stats.confseq import spend
from ..store import monitor_state as S
from . import confseq
from .config import Monitor, format_duration

__all__ = ["PENDING_WAIT_S", "budgeted_metric", "measure_active"]

#: How long a judged record's missing score holds up the reading before it is counted missing.
PENDING_WAIT_S = 3600.0
#: the ``method`` of an active monitor's window status (the evaluation names its window and alpha)
ACTIVE_CS_METHOD = "active estimate, anytime-valid empirical-Bernstein confidence sequence"


def budgeted_metric(ctx: Any, m: Monitor, metric: str) -> bool:
    """Whether ``m`` watches a score of ``metric`` while it is judged within a budget: its
    judge decisions reach into the last two windows."""
    if m.is_pipeline_figure or m.score == "error_rate":
        return False
    return RM.judged_within_budget(ctx.reader, metric, ctx.now - 2 * m.window_s)


def _fmt(v: float | None, d: int = 3) -> str:
    return "-" if v is None else f"{v:.{d}f}"


class _Reader:
    """Decided records of one metric, in decision order, after a position."""

    def __init__(self, ctx: Any, m: Monitor, metric: str) -> None:
        self.ctx, self.m, self.metric = ctx, m, metric
        self.filt = RM.where_filter(ctx.seg, m.where, "r.", records=True)
        self.missing = self.unrepresented = 0

    def read(self, start: float, until: float, pos: tuple[float, str], *,
             wait: bool = True) -> tuple[list[tuple[float, float, bool, float]],
                                         tuple[float, str]]:
        """(proxy, π, judged, y) rows in [start, until) after ``pos``, and the new
        position. Stops before a judged record still waiting for its score (``wait``)."""
        from .measure_base import CHUNK, MAX_ROWS

        out: list[tuple[float, float, bool, float]] = []
        last = pos
        read = 0
        while read < MAX_ROWS:
            rows = RM.decision_rows(self.ctx.reader, self.m.score, self.metric, start, until,
                                    last, filt=self.filt, limit=CHUNK)
            read += len(rows)
            groups: dict[str, list[Any]] = {}
            order: list[str] = []
            for r in rows:
                rid = str(r[1])
                if rid not in groups:
                    order.append(rid)
                    groups[rid] = []
                groups[rid].append(r)
            # the last record of a full chunk may continue in the next: read it again there
            if len(rows) >= CHUNK and len(order) > 1:
                order.pop()
            for rid in order:
                g = groups[rid]
                t, proxy, pi, sel = float(g[0][0]), float(g[0][2]), float(g[0][3]), bool(g[0][4])
                ok = [float(r[5]) for r in g if r[6] == "ok" and r[5] is not None]
                if pi <= 0:
                    self.unrepresented += 1
                elif sel and not ok:
                    if wait and all(r[6] is None for r in g) \
                            and t > self.ctx.now - PENDING_WAIT_S:
                        return out, last  # its score may still come: wait for it
                    self.missing += 1
                else:
                    y = min(max(ok[-1], 0.0), 1.0) if sel else 0.0
                    out.append((proxy, pi, sel, y))
                last = (t, rid)
            if len(rows) < CHUNK:
                break
        return out, last


def _feed(seq: ActiveSequence, rows: list[tuple[float, float, bool, float]]) -> None:
    if rows:
        f, pi, sel, y = zip(*rows, strict=True)
        seq.update(f, pi, sel, y)


def _status(seq: ActiveSequence, m: Monitor, judge: Any) -> confseq.Status:
    est = seq.sums.estimate()
    if est.value is None:
        return confseq.Status("NO_DATA", Estimate.missing(ACTIVE_CS_METHOD, seq.n))
    lo, hi = seq.interval()
    v = est.value
    lo, hi = min(lo, v), max(hi, v)
    state = "NO_DATA" if seq.n < m.min_n else judge(v, lo, hi)
    return confseq.Status(state, Estimate(seq.n, v, lo, hi, ACTIVE_CS_METHOD))


def _what(seq: ActiveSequence) -> str:
    return f"active estimate, {seq.n} judged / {seq.sums.N} proxied"


def _no(m: Monitor, why: str, keep: Any = None) -> Any:
    from .measure_base import _Result

    return _Result("NO_DATA", Estimate.missing("active estimate (not available)"), why, keep,
                   detail={"condition": f"{m.statistic} of {m.score}", "estimator": "active"})


def _baseline(ctx: Any, m: Monitor, metric: str, start: float, alpha: float,
              direction: str) -> dict[str, Any] | None:
    """The baseline's active estimate and its bound (the far end of the sequence over the
    baseline's records at ``alpha``), or None without one; also the current side's where."""
    from ..read import query as Q
    from .measure_base import _release_pair

    where = dict(m.where)
    cur_where = dict(where)
    if m.baseline == "previous_window":
        lo, hi, text = start - m.window_s, start, "the previous window"
    elif m.baseline == "previous_release":
        pair = _release_pair(ctx, m)
        if pair is None:
            return {"missing": "no previous release to compare with"}
        cur, older = pair
        cur_where["release"], where["release"] = cur, older
        lo, hi, text = -math.inf, math.inf, f"release {older} (current: {cur})"
    else:
        span = m.baseline_s or 7 * 86400.0
        lo, hi, text = start - span, start, f"the {format_duration(span)} before the window"
    import dataclasses

    bm = dataclasses.replace(m, where=where)
    reader = _Reader(ctx, bm, metric)
    seq = ActiveSequence(alpha)
    rows, _ = reader.read(Q._num(lo), Q._num(hi), (Q._num(-math.inf), ""), wait=False)
    _feed(seq, rows)
    est = seq.sums.estimate()
    if est.value is None:
        return {"missing": f"no judged records in the baseline ({text})"}
    b_lo, b_hi = seq.interval()
    bound = min(b_lo, est.value) if direction == "below" else max(b_hi, est.value)
    return {"bound": bound, "mean": est.value, "n": seq.n, "N": seq.sums.N, "text": text,
            "cur_where": cur_where if m.baseline == "previous_release" else None}


def measure_active(ctx: Any, m: Monitor, prior: S.StateRow | None, direction: str,
                   metric: str) -> Any:
    """:func:`.measure._measure` for a monitor on a budgeted judge metric."""
    from ..read.query import SCORE_DIMS
    from .measure_base import (
        SCHEDULE,
        _describe,
        _describe_baseline,
        _Result,
        _window_start,
        _with_where,
        _worst,
    )

    dims = [d for d in m.where if d in SCORE_DIMS]
    if dims:
        return _no(m, f"{m.score} is judged within a judge budget: no active estimate by "
                      f"{dims[0]} (docs/judge_budget.md)")
    if m.statistic not in ("mean", "rate"):
        return _no(m, f"{m.score} is judged within a judge budget: {m.statistic} has no active "
                      "estimate (only mean and rate; the judged records' share is biased, "
                      "docs/judge_budget.md)")
    if m.rule == "fixed":
        return _fixed(ctx, m, direction, metric)
    W = m.window_s
    saved = prior.test_state if prior is not None and isinstance(prior.test_state, dict) \
        else None
    if saved is not None and (saved.get("def") != m.definition_hash()
                              or not saved.get("active")):
        saved = None
    t0 = float(saved["t0"]) if saved is not None else ctx.now
    w_index = 1 if ctx.now < t0 + W else int(math.floor((ctx.now - t0) / W)) + 1
    start = _window_start(t0, W, w_index)
    until = ctx.now - 5.0  # measure.GRACE_S: a transaction may still be committing
    k = int(saved.get("k", 1)) if saved is not None else 1
    half = 2.0 if m.baseline is not None else 1.0
    prev = None
    seq: ActiveSequence | None = None
    base: dict[str, Any] | None = None
    pos: tuple[float, str] = (start, "")
    counts = {"missing": 0, "unrepresented": 0}
    if saved is not None:
        prev = saved.get("prev")
        base = saved.get("base")
        counts = dict(saved.get("counts", counts))
        if saved.get("seq"):
            seq = ActiveSequence.from_json(saved["seq"])
            pos = (float(saved["pos"][0]), str(saved["pos"][1]))
        if int(saved.get("w", w_index)) != w_index and seq is not None:
            # finish the window that ended: its last records count for its final verdict
            old_w = int(saved["w"])
            old_m = m if not (base or {}).get("cur_where") else _with_where(
                m, base["cur_where"])
            rd = _Reader(ctx, old_m, metric)
            rows, _ = rd.read(_window_start(t0, W, old_w), min(t0 + old_w * W, until), pos,
                              wait=False)
            _feed(seq, rows)
            st = _status(seq, m, _judge_for(m, direction, base))
            prev = st.to_json() if seq.sums.N else prev
            if seq.n >= m.min_n:
                k += 1
            seq, base = None, None
            counts = {"missing": 0, "unrepresented": 0}
    alpha = spend(m.alpha, k, SCHEDULE) / half
    if seq is None:
        seq = ActiveSequence(alpha)
        pos = (start, "")
        if m.baseline is not None:
            base = _baseline(ctx, m, metric, start, alpha, direction)
    if base is not None and "missing" in base:
        keep = {"def": m.definition_hash(), "active": 1, "t0": t0, "w": w_index, "k": k,
                "prev": prev, "seq": None, "base": None, "counts": counts}
        return _Result("NO_DATA", Estimate.missing("-"), f"no baseline: {base['missing']}",
                       keep, detail={"condition": f"regressed against {m.baseline}",
                                     "estimator": "active"})
    cur_m = m if not (base or {}).get("cur_where") else _with_where(m, base["cur_where"])
    rd = _Reader(ctx, cur_m, metric)
    rows, pos = rd.read(start, until, pos)
    _feed(seq, rows)
    counts["missing"] += rd.missing
    counts["unrepresented"] += rd.unrepresented
    judge = _judge_for(m, direction, base)
    st = _status(seq, m, judge)
    carried = st.state == "NO_DATA" and seq.n < m.min_n and prev is not None
    if carried:
        st = confseq.Status.from_json(prev, ACTIVE_CS_METHOD)
    stat = m.statistic
    if m.baseline is None:
        thr = float(m.threshold if m.threshold is not None else 0.0)
        summary = _describe(m, stat, st, direction, thr, "anytime")
        condition = f"{stat} {direction} {m.threshold}"
    else:
        shim = SimpleNamespace(baseline_bound=base["bound"], min_effect=float(m.min_effect or 0),
                               baseline=SimpleNamespace(mean=base["mean"], n=base["n"]))
        summary = _describe_baseline(m, stat, st, direction, shim,  # type: ignore[arg-type]
                                     f"{base['text']}: active estimate, {base['n']} judged / "
                                     f"{base['N']} proxied")
        condition = f"{stat} regressed against {base['text']}"
    summary = summary.replace(f" (n={st.n})", f" ({_what(seq)})" if not carried
                              else f" (n={st.n} judged, the previous window's)", 1)
    state = st.state
    if state == "OK" and m.warning is not None and st.value is not None and (
            st.value < m.warning if direction == "below" else st.value > m.warning):
        state = "WARNING"
        summary += f"; {st.value:.3f} is beyond the warning level {m.warning:g}"
    notes = []
    if counts["unrepresented"]:
        notes.append(f"{counts['unrepresented']} records came after the day's judge budget was "
                     "spent: not represented")
    if counts["missing"]:
        notes.append(f"{counts['missing']} judged records without an ok score: left out "
                     "(assumed missing at random)")
    if notes:
        summary += "; " + "; ".join(notes)
    method = (f"active inference: the active estimate; anytime-valid empirical-Bernstein "
              f"confidence sequence over the per-record active terms, window {k} at alpha "
              f"{alpha:.2g}")
    test_state = {"def": m.definition_hash(), "active": 1, "t0": t0, "w": w_index, "k": k,
                  "prev": prev, "seq": seq.to_json(), "pos": [pos[0], pos[1]], "base": base,
                  "counts": counts}
    return _Result(
        state, replace(st.estimate, method=method), summary, test_state,
        _worst(ctx, cur_m, start, direction) if state in ("ALERT", "WARNING") else [],
        {"condition": condition, "window_start": start, "carried": carried,
         "estimator": "active", "alpha": alpha, "n_judged": seq.n, "n_proxied": seq.sums.N,
         "judged_without_score": counts["missing"],
         "not_represented_budget_spent": counts["unrepresented"],
         "bets_capped_by_smallest_pi": seq.reduced,
         "baseline": None if base is None else {k2: base[k2] for k2 in ("bound", "mean", "n",
                                                                         "N", "text")}})


def _judge_for(m: Monitor, direction: str, base: dict[str, Any] | None) -> Any:
    if m.baseline is None or base is None:
        thr = float(m.threshold if m.threshold is not None else 0.0)
        if direction == "below":
            return lambda v, lo, hi: "ALERT" if hi < thr else "WARNING" if v < thr else "OK"
        return lambda v, lo, hi: "ALERT" if lo > thr else "WARNING" if v > thr else "OK"
    if "missing" in base:
        return lambda v, lo, hi: "NO_DATA"
    eff = float(m.min_effect or 0.0)
    bound, bmean = float(base["bound"]), float(base["mean"])
    if int(base["n"]) < m.min_n:
        return lambda v, lo, hi: "NO_DATA"
    if direction == "below":
        return lambda v, lo, hi: ("ALERT" if hi < bound - eff else "WARNING"
                                  if v < bmean - eff else "OK")
    return lambda v, lo, hi: ("ALERT" if lo > bound + eff else "WARNING"
                              if v > bmean + eff else "OK")


def _fixed(ctx: Any, m: Monitor, direction: str, metric: str) -> Any:
    """The fixed rule: the trailing window's active estimate (the report's) against the
    threshold."""
    from ..read import query as Q
    from .active_summary import active_summaries
    from .measure_base import _Result, _worst

    got = active_summaries(ctx.reader, Q.Window(ctx.now - m.window_s, None),
                           {m.score: metric}, where=m.where, seg=ctx.seg).get(m.score)
    e = got.active.estimate if got is not None else None
    n = e.n if e is not None else 0
    if e is None or e.value is None or n < m.min_n:
        return _Result("NO_DATA", Estimate.missing("fixed window: active estimate", n,
                                                   None if e is None else e.value),
                       f"not enough data (n={n} judged < {m.min_n}; active estimate)", None,
                       detail={"estimator": "active"})
    thr = float(m.threshold if m.threshold is not None else 0.0)
    bad = e.value < thr if direction == "below" else e.value > thr
    what = f"active estimate, {n} judged / {got.active.n_proxied} proxied"
    method = ("fixed window: active estimate, normal interval (fires on noise; see "
              "docs/monitoring.md)")
    return _Result("ALERT" if bad else "OK", Estimate(n, e.value, e.lo, e.hi, method),
                   f"{m.statistic} {_fmt(e.value)} [{_fmt(e.lo)}, {_fmt(e.hi)}] ({what}) "
                   f"{'is' if bad else 'is not'} {direction} {thr} (fixed rule: the window's "
                   "estimate alone, no anytime-valid interval)", None,
                   _worst(ctx, m, ctx.now - m.window_s, direction) if bad else [],
                   {"condition": f"{m.statistic} {direction} {thr}", "estimator": "active",
                    "n_judged": n, "n_proxied": got.active.n_proxied,
                    "judged_records_plain_mean": got.judged_plain.value})
