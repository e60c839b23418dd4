"""The judge metrics judged within a budget (adaptive selection, issue 33): their population
mean by active inference (:func:`tracescore.stats.active.active_mean`), read from the
decisions the scoring worker stored (``judge_decisions``: proxy, π, judged) joined to the
judge's scores.

The window is the decisions' ``created_at`` (when the worker decided; a judged record's score
is written moments later). Each decided record is one term of the estimate:

- π = 0 (the day's budget was spent when it came): it could not be judged, so it is not
  represented — left out, counted, and said in a note;
- judged but without an ok score (the judge failed on it, or its score is still pending):
  left out and counted (the estimate then assumes those are missing at random);
- otherwise: its proxy, π, and the judge's score when judged.

How it is read: the estimate is a function of additive sums (:mod:`tracescore.stats.
active_totals`), kept per hour and segment as the decisions and the judge's scores are
written (:mod:`tracescore.store.judge_rollup`); a window reads its whole hours' sums and the
raw rows of the hours its edges cut (:mod:`tracescore.read.judge_sums`) — O(hours), not
O(decisions). :func:`summary_from_rows` is the row path (every decision row of the window,
the estimator :func:`~tracescore.stats.active.active_mean` on them): the tests' oracle, equal
within float rounding. Blocking reads on the caller's connection (SQLite or PostgreSQL,
through the same SQL).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..read import decisions as D
from ..read import judge_sums as JS
from ..read import query as Q
from ..stats import Estimate, Moments, mean_ci
from ..stats.active import ActiveMean, active_mean
from ..stats.active_totals import ActiveTotals, active_from_totals

#: what the judged records' plain mean speaks for (biased under adaptive selection)
JUDGED = "judged records (biased)"

__all__ = ["ActiveSummary", "active_summaries", "adaptive_metrics", "apply_active",
           "summary_from_rows", "summary_from_totals", "without_figure"]


@dataclass(frozen=True)
class ActiveSummary:
    """One score name of a budgeted judge metric in a window."""

    name: str
    metric: str
    active: ActiveMean
    #: the plain mean of the judged records (biased under adaptive selection: shown only as
    #: what it is, never as the population mean)
    judged_plain: Estimate
    decided: int
    judged: int
    not_represented: int = 0
    missing: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "estimate": self.active.to_json(),
                "judged_records_plain_mean": self.judged_plain.to_json(),
                "decided": self.decided, "judged": self.judged,
                "not_represented_budget_spent": self.not_represented,
                "judged_without_score": self.missing, "notes": list(self.notes)}


def adaptive_metrics(conn: Any, window: Q.Window) -> list[str]:
    """The metrics with judge decisions in the window (:func:`tracescore.read.decisions.
    adaptive_metrics`)."""
    return JS.metrics_in(conn, window)


def _notes(n_unrep: int, n_rest: int, note: str, n_missing: int) -> tuple[str, ...]:
    notes = []
    if n_unrep:
        notes.append(f"{n_unrep} records came after the day's judge budget was spent "
                     "(pi = 0): not represented, the estimate speaks for the other "
                     f"{n_rest}")
    if note:
        notes.append(note)
    if n_missing:
        notes.append(f"{n_missing} selected records have no ok score (judge error or still "
                     "pending): left out, assumed missing at random")
    return tuple(notes)


def summary_from_totals(name: str, metric: str, t: ActiveTotals) -> ActiveSummary | None:
    """The summary of the decisions ``t`` sums (None without a decision)."""
    if not t.decided:
        return None
    est = active_from_totals(t)
    plain = dataclasses.replace(
        mean_ci(Moments(t.n, t.sy, t.syy)) if t.n else Estimate(0, None, None, None, ""),
        population=JUDGED)
    return ActiveSummary(name, metric, est, plain, t.decided, t.n, t.unrep, t.missing,
                         _notes(t.unrep, t.decided - t.unrep, est.estimate.note, t.missing))


def summary_from_rows(conn: Any, metric: str, name: str, window: Q.Window, ids: set[int] | None
             ) -> ActiveSummary | None:
    """The row path: every decision row of the window and :func:`active_mean` on them (the
    readers' code before the hourly sums; the tests' oracle of :func:`summary_from_totals`)."""
    import numpy as np

    rows = D.decisions(conn, name, metric, window, ids)
    if not rows:
        return None
    f = np.array([float(r[0]) for r in rows])
    pi = np.array([float(r[1]) for r in rows])
    sel = np.array([bool(r[2]) for r in rows])
    ok = np.array([r[4] == "ok" and r[3] is not None for r in rows])
    y = np.array([float(r[3]) if r[3] is not None else 0.0 for r in rows])
    unrepresented = pi <= 0
    missing = sel & ~ok
    keep = ~unrepresented & ~missing
    est = active_mean(f[keep], pi[keep], sel[keep], y[keep])
    judged_y = y[sel & ok]
    plain = dataclasses.replace(
        mean_ci(Moments.from_values(judged_y.tolist())) if judged_y.size
        else Estimate(0, None, None, None, ""), population=JUDGED)
    n_unrep, n_missing = int(unrepresented.sum()), int(missing.sum())
    return ActiveSummary(name, metric, est, plain, int(len(rows)), int((sel & ok).sum()),
                         n_unrep, n_missing, _notes(n_unrep, int((~unrepresented).sum()),
                                                    est.estimate.note, n_missing))


def active_summaries(conn: Any, window: Q.Window, names: Mapping[str, str], *,
                     where: Mapping[str, str] | None = None,
                     seg: Q.SegmentIndex | None = None) -> dict[str, ActiveSummary]:
    """Per score name (``names``: score name → metric) of a metric with judge decisions in
    the window: its :class:`ActiveSummary`."""
    metrics = set(adaptive_metrics(conn, window))
    if not metrics:
        return {}
    seg = seg or Q.SegmentIndex(conn)
    ids = seg.matching(where)
    by_metric: dict[str, list[str]] = {}
    for name, metric in sorted(names.items()):
        if metric in metrics:
            by_metric.setdefault(metric, []).append(name)
    out = {}
    for metric, ns in sorted(by_metric.items()):
        for name, t in JS.totals(conn, metric, ns, window, ids).items():
            s = summary_from_totals(name, metric, t)
            if s is not None:
                out[name] = s
    return dict(sorted(out.items()))


def apply_active(m: Any, a: ActiveSummary) -> Any:
    """A :class:`~.model.MetricSummary` whose figure is the active estimate: mean (rate) and
    interval from it; the percentiles and the fail share of the judged records (biased under
    adaptive selection) are not shown; ``judged_mean`` keeps their plain mean."""
    from dataclasses import replace

    e = a.active.estimate
    return replace(m, estimate=e, p10=None, p50=None,
                   p90=None, fail_rate=None, rate=e.value if m.binary else m.rate,
                   estimator="active", judged_mean=a.judged_plain.value,
                   proxied=a.active.n_proxied)


def without_figure(m: Any) -> Any:
    """A budgeted judge metric's summary where no active estimate can be made (a group by a
    score dimension, records without the dimension): no mean, interval or percentiles — the
    judged records' plain mean would be read as the population's."""
    from dataclasses import replace

    return replace(m, estimate=Estimate.missing("", n=m.count), p10=None, p50=None,
                   p90=None, fail_rate=None, rate=None if m.binary else m.rate,
                   estimator="active", judged_mean=m.mean, proxied=None)


def active_timeline(conn: Any, name: str, metric: str, *, bucket_s: float,
                    since: float | None = None, where: Mapping[str, str] | None = None,
                    seg: Q.SegmentIndex | None = None) -> list[Any]:
    """The active estimate per ``bucket_s`` of decision time, with its 95 % interval: the
    HTML timeline of a budgeted judge metric (the judged records' mean per bucket would be
    biased). ``count`` is the bucket's judged records; a bucket with fewer than 2 judged has
    no estimate and no point. Buckets of whole hours read the hourly sums
    (:func:`tracescore.read.judge_sums.timeline_totals`); others one read of the window's
    decisions."""
    from ..read.model import TimeBucket

    seg = seg or Q.SegmentIndex(conn)
    ids = seg.matching(where)
    sums = JS.timeline_totals(conn, name, metric, bucket_s, since, ids)
    if sums is None:
        return timeline_from_rows(conn, name, metric, bucket_s=bucket_s, since=since, ids=ids)
    out = []
    for t, tot in sorted(sums.items()):
        est = active_from_totals(tot).estimate
        if est.value is not None:
            out.append(TimeBucket(t, est))
    return out


def timeline_from_rows(conn: Any, name: str, metric: str, *, bucket_s: float,
                       since: float | None, ids: set[int] | None) -> list[Any]:
    """:func:`active_timeline` from every decision row since ``since`` (the row path)."""
    import numpy as np

    from ..read.model import TimeBucket

    rows = D.decisions_since(conn, name, metric, since, ids)
    buckets: dict[float, list[Any]] = {}
    for r in rows:
        buckets.setdefault(float(int(float(r[0]) // bucket_s) * bucket_s), []).append(r)
    out = []
    for t, rs in sorted(buckets.items()):
        pi = np.array([float(r[2]) for r in rs])
        sel = np.array([bool(r[3]) for r in rs])
        ok = np.array([r[5] == "ok" and r[4] is not None for r in rs])
        keep = (pi > 0) & ~(sel & ~ok)
        y = np.array([float(r[4]) if r[4] is not None else 0.0 for r in rs])
        est = active_mean(np.array([float(r[1]) for r in rs])[keep], pi[keep], sel[keep],
                          y[keep]).estimate
        if est.value is not None:
            out.append(TimeBucket(t, est))
    return out
