"""Adaptive judge selection: how likely each record is to be judged, and how many a day.

Pure computation (numpy, lazily imported), shared by the scoring worker
(:mod:`tracescore.budget.selector`) and the simulation (``bench/judge_budget_sim.py``).

**Inclusion probability.** Active inference (Zrnic & Candès, *Active Statistical Inference*,
ICML 2024) judges record i with probability π_i that grows with how wrong the cheap proxy f(x_i)
is likely to be; under a budget the variance of the estimate is smallest with π ∝ the proxy's
root-mean-square error at x (their §3). That error is not known: :class:`ErrorModel` learns it
per proxy bin from the records judged so far (inverse-probability weighted, shrunk to the
overall error, and exactly uniform until :data:`MIN_JUDGED` records were judged). A badly
learned error model must not make things worse than uniform sampling, so π is mixed with the
uniform rate (robust sampling, Li, Zrnic & Candès, NeurIPS 2025):

    π(x) = clip((1 − λ)·r·e(x)/ē + λ·r,  floor·r, 1)

with r the target rate (the budget's :class:`Pacer`), e(x) the learned RMS error of the proxy
in x's bin, ē its mean over the traffic (so the expected judged share is r), λ = 0.3 and a
floor of 0.02·r (π bounded away from 0: the mix already keeps π ≥ λ·r).

**Pacing.** :class:`Pacer` turns "N judged records a day" into the rate r for the next record:
what is left of today's budget over the records still expected today, from the traffic seen
so far today (blended with yesterday's when known), capped at ``max_rate``. A spike raises the
expected traffic and so lowers r at once; a quiet afternoon raises it; the hard cap (the
durable counter, :mod:`tracescore.store.judge_budget`) never lets a day go over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BINS", "DAY", "FLOOR", "LAMBDA", "MIN_JUDGED", "ErrorModel", "Pacer", "inclusion",
           "proxy_bin"]

#: proxy bins of the error model (the proxy is in [0, 1])
BINS = 10
#: the robust mix's weight on uniform sampling
LAMBDA = 0.3
#: π never below FLOOR × the target rate
FLOOR = 0.02
#: judged records before the error model leaves uniform
MIN_JUDGED = 30
#: pseudo-count of the shrinkage of a bin's error to the overall error
PSEUDO = 20.0
DAY = 86400.0
HOUR = 3600.0


def proxy_bin(f: float) -> int:
    """The error model's bin of a proxy value in [0, 1] (values outside are clamped)."""
    if not math.isfinite(f):
        return 0
    return min(BINS - 1, max(0, int(f * BINS)))


def inclusion(err: Any, mean_err: float, rate: float, lam: float = LAMBDA,
              floor: float = FLOOR) -> Any:
    """π for records with proxy RMS errors ``err`` (array) at target ``rate`` (module
    docstring). ``rate`` 0: every π is 0 (the budget is spent)."""
    import numpy as np

    err = np.asarray(err, dtype=float)
    if rate <= 0:
        return np.zeros_like(err)
    if not math.isfinite(mean_err) or mean_err <= 0:
        adaptive = np.full_like(err, rate)
    else:
        adaptive = rate * err / mean_err
    pi = (1.0 - lam) * adaptive + lam * rate
    return np.clip(pi, floor * rate, 1.0)


#: columns of :attr:`ErrorModel.sums` per bin: records decided, records judged (with an ok
#: score), and Σw, Σwf, Σwy, Σwf², Σwfy, Σwy² over the judged ones, w = 1/π
COLS = ("seen", "n", "w", "wf", "wy", "wff", "wfy", "wyy")


@dataclass
class ErrorModel:
    """The proxy's error per bin, learned from judged records (y: the judge's score, f: the
    proxy, π: their inclusion probability). ``sums``: BINS rows of :data:`COLS`."""

    sums: Any = field(default=None)

    def __post_init__(self) -> None:
        import numpy as np

        if self.sums is None:
            self.sums = np.zeros((BINS, len(COLS)))

    def add(self, bins: Any, f: Any, pi: Any, selected: Any, y: Any) -> None:
        """Add decided records (arrays; ``y`` ignored where not ``selected``)."""
        import numpy as np

        bins = np.asarray(bins, dtype=int)
        f = np.asarray(f, dtype=float)
        sel = np.asarray(selected, dtype=bool)
        yv = np.where(sel, np.asarray(y, dtype=float), 0.0)
        w = np.where(sel, 1.0 / np.where(sel, pi, 1.0), 0.0)
        cols = [np.ones_like(f), sel.astype(float), w, w * f, w * yv, w * f * f,
                w * f * yv, w * yv * yv]
        for j, c in enumerate(cols):
            self.sums[:, j] += np.bincount(bins, weights=c, minlength=BINS)[:BINS]

    def fit(self) -> tuple[float, float]:
        """(a, b) of the weighted least-squares line y ≈ a + b·f over the judged records."""
        s = self.sums.sum(axis=0)
        w, wf, wy, wff, wfy = s[2], s[3], s[4], s[5], s[6]
        if w <= 0:
            return 0.0, 0.0
        det = w * wff - wf * wf
        if det <= 1e-12 * max(1.0, w * wff):
            return wy / w, 0.0
        b = (w * wfy - wf * wy) / det
        return (wy - b * wf) / w, b

    def errors(self) -> tuple[Any, float]:
        """(per-bin RMS error of the fitted line, its mean over the decided records). All
        ones before :data:`MIN_JUDGED` judged records (uniform selection)."""
        import numpy as np

        s = self.sums
        seen = s[:, 0]
        total_seen = seen.sum()
        if s[:, 1].sum() < MIN_JUDGED:
            return np.ones(BINS), 1.0
        a, b = self.fit()
        w, wf, wy, wff, wfy, wyy = (s[:, j] for j in range(2, 8))
        sse = wyy - 2 * a * wy - 2 * b * wfy + a * a * w + 2 * a * b * wf + b * b * wff
        sse = np.maximum(sse, 0.0)
        overall = sse.sum() / w.sum() if w.sum() > 0 else 1.0
        n = s[:, 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            per = np.where(w > 0, sse / np.where(w > 0, w, 1.0), overall)
        mse = (n * per + PSEUDO * overall) / (n + PSEUDO)
        err = np.sqrt(np.maximum(mse, 1e-6))
        mean = float((seen * err).sum() / total_seen) if total_seen > 0 else float(err.mean())
        return err, mean


@dataclass
class Pacer:
    """Today's target rate for a budget of ``per_day`` judged records (module docstring).

    ``max_rate``: the cap on the rate; ``prior_weight_s``: how many seconds of yesterday's
    traffic rate the estimate of today's starts from; ``slack_s``/``min_share``: the
    schedule cap (:meth:`rate`)."""

    per_day: float
    max_rate: float = 1.0
    prior_weight_s: float = 3600.0
    #: how far ahead of an even spend over the day the budget may run
    slack_s: float = 2 * HOUR
    #: the window of the recent traffic rate
    recent_s: float = HOUR
    #: the rate ahead of schedule, as a share of the day's flat rate
    min_share: float = 0.25

    def rate(self, spent: float, seen: float, now: float,
             yesterday_seen: float | None = None, recent: float | None = None,
             started: float | None = None) -> float:
        """The rate for the next record: ``spent``/``seen``: judged/decided records today
        (UTC day of ``now``), ``yesterday_seen``: records decided yesterday (None: unknown),
        ``recent``: records decided in the ``recent_s`` before ``now`` (None: unknown),
        ``started``: today's first decision (None: midnight) — a pipeline started at noon
        spreads the budget over the afternoon, and its traffic is measured from then.

        The traffic still expected today is the recent rate (it follows the time of day, and
        a spike within minutes) once ``recent_s`` of traffic has been seen, else the average
        rate so far, started from yesterday's average (``prior_weight_s``) when known."""
        remaining = self.per_day - spent
        if remaining <= 0:
            return 0.0
        day0 = math.floor(now / DAY) * DAY
        t0 = day0 if started is None else min(now, max(day0, started))
        elapsed = now - t0
        left = day0 + DAY - now
        if recent is not None and elapsed >= self.recent_s:
            per_s = max(recent, 1.0) / self.recent_s
        elif yesterday_seen:
            prior = yesterday_seen / DAY
            per_s = (seen + prior * self.prior_weight_s) / (elapsed + self.prior_weight_s)
        else:
            per_s = max(seen, 1.0) / max(elapsed, 60.0)
        expected = per_s * left
        rate = min(self.max_rate, remaining / max(expected, 1.0))
        # the schedule: at any time at most an even share of the budget over the part of the
        # day since ``started``, plus ``slack_s`` worth, has been spent — so a spike (or a
        # first day without a traffic estimate) cannot spend the budget by noon; ahead of it
        # the rate drops to ``min_share`` of an even spend's (never 0 before the budget is
        # spent: every record stays represented, with a bounded weight)
        span = day0 + DAY - t0
        allowance = self.per_day * min(1.0, (elapsed + self.slack_s) / span)
        flat = self.per_day / max(per_s * span, self.per_day)
        if spent >= allowance:
            return float(min(rate, self.min_share * flat))
        return float(rate)
