"""``tracescore compare``: two segments (releases, environments, judge models, …) or two time
windows, per score, with honest statistics — as data.

Per score: n and the mean (or, for a yes/no metric, the rate) on each side with its 95 %
interval; the difference *current − baseline* with its 95 % interval (Welch for means,
Newcombe's hybrid score interval for rates; where a side of a score in [0, 1] has no spread,
the MOVER interval built from that side's exact range bound — each row says which); p-values
adjusted across every row compared
(Holm by default: a deployment gate must bound the chance of *any* false "regressed" among all
the scores, which is Holm's family-wise guarantee; Benjamini–Hochberg, which bounds the share
of false discoveries instead, on request); and a verdict from
:func:`tracescore.stats.verdict`. Error and skip rates are compared too: a release that
errors more has regressed, whatever its mean.

Everything comes from the query layer (:mod:`.query`): rollups, so the answer is the same
before and after ``prune``, and the cost does not grow with the number of records.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._internal.durations import format_duration
from ..read import query as Q
from ..read.metric_info import MetricInfo

__all__ = ["Comparison", "CompareError", "ScoreComparison", "TrustComparison",
           "build_comparison"]

#: Verdicts that fail a deployment gate.
BAD = ("regressed",)


class CompareError(ValueError):
    """The comparison cannot be made as asked (unknown dimension, value, or window)."""


@dataclass(frozen=True, slots=True)
class ScoreComparison:
    name: str
    metric: str
    #: "mean", "rate" (a yes/no metric), "error rate" or "skip rate"
    kind: str
    higher_is_better: bool | None
    current: Any  # stats.Estimate
    baseline: Any  # stats.Estimate
    diff: Any  # stats.Difference
    p_adjusted: float | None
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric, "kind": self.kind,
                "higher_is_better": self.higher_is_better,
                "current": self.current.to_json(), "baseline": self.baseline.to_json(),
                "difference": self.diff.to_json(), "p_adjusted": self.p_adjusted,
                "verdict": self.verdict,
                "population": ("all decided records (active inference)"
                               if self.diff.method == ACTIVE_DIFF else
                               "none (judge budget: no active estimate by this dimension)"
                               if self.diff.method == ACTIVE_NONE else "scored records")}


@dataclass(frozen=True, slots=True)
class Comparison:
    db: str
    #: the dimension compared (``release``, ``metadata.route``, …) or ``time``
    by: str
    current_label: str
    baseline_label: str
    current_window: Q.Window
    baseline_window: Q.Window
    where: dict[str, str]
    min_n: int
    min_effect: float
    alpha: float
    adjust: str
    rows: list[ScoreComparison] = field(default_factory=list)
    generated_at: float = 0.0
    current_records: int = 0
    baseline_records: int = 0
    #: score names with human labels on either side: corrected estimates and their difference
    trust: list[TrustComparison] = field(default_factory=list)
    #: per side ("current", "baseline"): the population of its score figures and the figure
    #: weighted to all records (:class:`.inclusion.PopulationSummary`)
    population: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def regressed(self) -> list[ScoreComparison]:
        return [r for r in self.rows if r.verdict in BAD]

    def to_json(self) -> dict[str, Any]:
        return {
            "db": self.db, "by": self.by, "current": self.current_label,
            "baseline": self.baseline_label,
            "current_window": [self.current_window.since, self.current_window.until],
            "baseline_window": [self.baseline_window.since, self.baseline_window.until],
            "where": dict(self.where), "min_n": self.min_n, "min_effect": self.min_effect,
            "alpha": self.alpha, "adjust": self.adjust, "generated_at": self.generated_at,
            "current_records": self.current_records,
            "baseline_records": self.baseline_records,
            "scores": {r.name if r.kind in ("mean", "rate") else f"{r.name} ({r.kind})":
                       r.to_json() for r in self.rows},
            "regressed": [r.name for r in self.regressed],
            "corrected": {t.name: t.to_json() for t in self.trust},
            "population": {side: {p.name: p.to_json() for p in pops}
                           for side, pops in self.population.items()},
        }


@dataclass(frozen=True, slots=True)
class TrustComparison:
    """A score with human labels on at least one side: each side's judge mean and corrected
    estimate (:class:`.trust.TrustSummary`, None without labels there) and, when both sides
    have a corrected estimate, current − baseline with SE = sqrt(se_a^2 + se_b^2)."""

    name: str
    current: Any
    baseline: Any
    diff: Any  # stats.Difference (estimate None unless both sides are corrected)

    def to_json(self) -> dict[str, Any]:
        def side(s: Any) -> Any:
            if s is None:
                return None
            c = s.correction
            return {"judge_mean": {"value": s.judge_mean, "n": s.judge_n,
                                   "label": "judge mean (uncorrected)"},
                    "labelled_traces": s.pairs,
                    "corrected": None if c is None else c.to_json()}

        return {"current": side(self.current), "baseline": side(self.baseline),
                "difference": self.diff.to_json(),
                "difference_label": "current - baseline of the corrected estimates"}


def _side(conn: Any, seg: Q.SegmentIndex, window: Q.Window, where: Mapping[str, str]
          ) -> tuple[dict[str, Q.Agg], int, dict[str, int]]:
    scores = Q.merge(Q.score_aggs(conn, window, where=where, seg=seg).values())
    records = Q.merge_records(Q.record_aggs(conn, window, where=where, seg=seg).values())
    skips = Q.merge_skips(Q.skip_aggs(conn, window, where=where, seg=seg).values())
    return scores, records.records, {m: sum(r.values()) for m, r in skips.items()}


def build_comparison(
    conn: Any, *, by: str = "release", current: str | None = None,
    baseline: str | None = None, current_window: float | None = None,
    baseline_window: float | None = None, since: float | None = None,
    where: Mapping[str, str] | None = None, min_n: int = 30, min_effect: float = 0.02,
    alpha: float = 0.05, adjust: str = "holm", db: str = "", now: float | None = None,
) -> Comparison:
    """Compare ``current`` with ``baseline``.

    By segment (``by`` a dimension of :func:`.query.dims_of`): the two values, default the two
    newest (by when each was first seen), over ``[since, now)``. Over time (``by="time"``):
    ``current_window`` seconds up to now against the ``baseline_window`` seconds before it.
    Raises :class:`CompareError` with a clear message when that cannot be done.
    """
    from .. import stats
    from ..monitor.active_summary import active_summaries
    from .inclusion import population_summaries

    now = time.time() if now is None else now
    seg = Q.SegmentIndex(conn)
    where = dict(where or {})
    if adjust not in ("holm", "fdr_bh"):
        raise CompareError(f"--adjust must be holm or fdr_bh, got {adjust!r}")
    if by == "time":
        if not current_window or not baseline_window:
            raise CompareError("a comparison over time needs --current and --baseline "
                               "durations, e.g. --current 1d --baseline 7d")
        cw = Q.Window(now - current_window, now)
        bw = Q.Window(now - current_window - baseline_window, now - current_window)
        cur_where, base_where = where, where
        cur_label = f"last {format_duration(current_window)}"
        base_label = f"the {format_duration(baseline_window)} before"
    else:
        dims = seg.dims()
        if by not in dims:
            raise CompareError(f"unknown dimension {by!r}; this database has: "
                               f"{', '.join(dims)} (metadata keys come from "
                               "init(segments=[...]))")
        values = [v for v, _ in Q.values_of(conn, by, Q.Window(since, None), seg)]
        if current is None or baseline is None:
            rest = [v for v in values if v not in (current, baseline)]
            if current is None:
                current = rest.pop() if rest else None
            if baseline is None:
                baseline = rest.pop() if rest else None
        if current is None or baseline is None:
            raise CompareError(
                f"need two values of {by} to compare; the database has "
                f"{len(values)}: {', '.join(values) or 'none'}"
                + ("" if by != "release" else
                   " (set release= in tracescore.init, service.version in the OTel resource,"
                   " or TRACESCORE_RELEASE)"))
        for v in (current, baseline):
            if v not in values:
                hint = ""
                if v.startswith(f"{by}="):  # --current release=r2: the dimension given twice
                    hint = (f" (--current and --baseline take a value of --by {by}: "
                            f"give {v[len(by) + 1:]!r}, not {v!r})")
                raise CompareError(f"{by}={v!r} has no records"
                                   + (" in the window" if since is not None else "")
                                   + f"; values: {', '.join(values) or 'none'}{hint}")
        cw = bw = Q.Window(since, None)
        cur_where, base_where = {**where, by: current}, {**where, by: baseline}
        cur_label, base_label = f"{by}={current}", f"{by}={baseline}"

    cur, cur_n, cur_skips = _side(conn, seg, cw, cur_where)
    base, base_n, base_skips = _side(conn, seg, bw, base_where)
    info = MetricInfo(conn)
    names = {n: a.metric for n, a in {**base, **cur}.items()}
    # by (or where) a judge model or metric version, a budgeted judge metric has no active
    # estimate (decisions are per record, not per judge model): no figure for it, never the
    # judged records' biased mean
    blind: set[str] = set()
    if by in Q.SCORE_DIMS or any(k in Q.SCORE_DIMS for k in where):
        from ..monitor.active_summary import adaptive_metrics

        budgeted = set(adaptive_metrics(conn, cw)) | set(adaptive_metrics(conn, bw))
        blind = {n for n, metric in names.items() if metric in budgeted}
        act_cur: Mapping[str, Any] = {}
        act_base: Mapping[str, Any] = {}
    else:
        act_cur = active_summaries(conn, cw, names, where=cur_where, seg=seg)
        act_base = active_summaries(conn, bw, names, where=base_where, seg=seg)
    pending: list[tuple[str, str, str, bool | None, Any, Any, Any, int, int]] = []
    for name in sorted(set(cur) | set(base),
                       key=lambda n: ((cur.get(n) or base[n]).metric, n)):
        a = cur.get(name) or Q.Agg(name, base[name].metric)
        b = base.get(name) or Q.Agg(name, a.metric)
        hib = info.higher_is_better(a.metric)
        zero_one = all(x.n_ok == 0 or abs(x.ss - x.s) < 1e-9 for x in (a, b))
        binary = info.binary(a.metric, zero_one, a.n_ok + b.n_ok)
        if binary:
            ea, eb = a.estimate(binary=True), b.estimate(binary=True)
            diff = stats.rate_difference(a.yes, a.n_ok, b.yes, b.n_ok)
            kind = "rate"
        else:
            ea, eb = a.estimate(), b.estimate()
            # scores in [0, 1] (as the sums tell): a side without spread gets the range
            # bound, not a zero-width interval (stats.mean_difference)
            diff = stats.mean_difference(a.moments(), b.moments(),
                                         bounded=a.unit_range and b.unit_range)
            kind = "mean"
        n_a, n_b = a.n_ok, b.n_ok
        if name in act_cur or name in act_base:  # a budgeted judge metric: active estimates
            ea, eb, diff, n_a, n_b = _active_row(name, act_cur, act_base, ea, eb, n_a, n_b)
        elif name in blind:
            ea = stats.Estimate(n_a, None, None, None, ACTIVE_NONE)
            eb = stats.Estimate(n_b, None, None, None, ACTIVE_NONE)
            diff = stats.Difference(None, None, None, None, ACTIVE_NONE)
        pending.append((name, a.metric, kind, hib, ea, eb, diff, n_a, n_b))
    # pipeline rows: errors and skips over every job, lower is better
    for kind in ("error rate", "skip rate"):
        if kind == "error rate":
            kc = sum(v.n_error for v in cur.values())
            kb = sum(v.n_error for v in base.values())
        else:
            kc, kb = sum(cur_skips.values()), sum(base_skips.values())
        nc = sum(v.n_ok + v.n_error for v in cur.values()) + (
            sum(cur_skips.values()) if kind == "skip rate" else 0)
        nb = sum(v.n_ok + v.n_error for v in base.values()) + (
            sum(base_skips.values()) if kind == "skip rate" else 0)
        if not (kc or kb) or not (nc and nb):
            continue
        pending.append(("all scores", "", kind, False, stats.rate_ci(kc, nc),
                        stats.rate_ci(kb, nb), stats.rate_difference(kc, nc, kb, nb), nc, nb))
    adjusted = stats.adjust_pvalues([p[6].p_value for p in pending], method=adjust)
    rows = [
        ScoreComparison(name, metric, kind, hib, ea, eb, diff, p_adj, stats.verdict(
            diff, n_current=n_a, n_baseline=n_b, min_n=min_n, min_effect=min_effect,
            higher_is_better=hib, p_adjusted=p_adj, alpha=alpha))
        for (name, metric, kind, hib, ea, eb, diff, n_a, n_b), p_adj in zip(pending, adjusted)
    ]
    binaries = {r.name: r.kind == "rate" for r in rows}
    return Comparison(db, by, cur_label, base_label, cw, bw, where, min_n, min_effect, alpha,
                      adjust, rows, time.time(), cur_n, base_n,
                      _trust(conn, seg, info, (cw, cur_where, cur), (bw, base_where, base),
                             alpha),
                      {"current": population_summaries(
                          conn, cw, {k: v for k, v in cur.items()
                                     if k not in act_cur and k not in blind},
                          binaries, where=cur_where, seg=seg),
                       "baseline": population_summaries(
                           conn, bw, {k: v for k, v in base.items()
                                      if k not in act_base and k not in blind},
                           binaries, where=base_where, seg=seg)})


#: the method of a difference between two active estimates (or one and a plain figure)
ACTIVE_DIFF = "active (normal, se from each side)"
#: a budgeted judge metric compared by a judge model or metric version: no figure
ACTIVE_NONE = ("judged within a judge budget: no active estimate by judge model or metric "
               "version, and the judged records' mean is biased (docs/judge_budget.md)")


def _active_row(name: str, cur: Mapping[str, Any], base: Mapping[str, Any], ea: Any, eb: Any,
                n_a: int, n_b: int) -> tuple[Any, Any, Any, int, int]:
    """A budgeted judge metric's row: each side's active estimate where it has decisions
    (else its plain figure: a side judged before the budget, uniformly at its rate), the
    difference with SE = √(se_a² + se_b²) (a side's se from its 95 % interval) and a
    normal p-value."""
    from scipy.special import ndtr

    from ..stats import Difference, z_quantile

    if name in cur:
        ea, n_a = cur[name].active.estimate, cur[name].judged
    if name in base:
        eb, n_b = base[name].active.estimate, base[name].judged
    z = z_quantile(0.975)
    if ea.value is None or eb.value is None or None in (ea.lo, ea.hi, eb.lo, eb.hi):
        return ea, eb, Difference(None, None, None, None, ACTIVE_DIFF), n_a, n_b
    se = math.sqrt(((ea.hi - ea.lo) / (2 * z)) ** 2 + ((eb.hi - eb.lo) / (2 * z)) ** 2)
    d = ea.value - eb.value
    p = 1.0 if se == 0 and d == 0 else (0.0 if se == 0 else float(2 * ndtr(-abs(d) / se)))
    return ea, eb, Difference(d, d - z * se, d + z * se, p, ACTIVE_DIFF), n_a, n_b


def _trust(conn: Any, seg: Q.SegmentIndex, info: MetricInfo, current: tuple[Any, Any, Any],
           baseline: tuple[Any, Any, Any], alpha: float) -> list[TrustComparison]:
    """Corrected estimates per side for the score names with human labels (:mod:`.trust`)."""
    from .trust import corrected_difference, trust_summaries

    cur = {t.name: t for t in trust_summaries(conn, current[0], current[2], where=current[1],
                                              seg=seg, info=info)}
    base = {t.name: t for t in trust_summaries(conn, baseline[0], baseline[2],
                                               where=baseline[1], seg=seg, info=info)}
    return [TrustComparison(name, cur.get(name), base.get(name), corrected_difference(
        cur[name].correction if name in cur else None,
        base[name].correction if name in base else None, alpha))
        for name in sorted(set(cur) | set(base))]


def parse_where(items: Any) -> dict[str, str]:
    """``("environment=prod", "metadata.route=search")`` → a mapping (ValueError if malformed)."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise CompareError(f"--where takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out
