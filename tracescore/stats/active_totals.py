"""The active-inference estimate of :func:`.active.active_mean` — its value, its interval, the
per-record-terms standard error and the counts a reader prints — as a function of additive
sums, so a window's estimate is read from hourly sums (``hourly_judge_*``,
:mod:`tracescore.store.judge_rollup`) in O(hours) instead of O(decisions).

For one score name of one budgeted judge metric, every decision i of the window has its proxy
f_i, its π_i, whether it was selected, and (if selected) whether the judge's score y_i is ok.
The reader keeps a decision as an estimate term when π_i > 0 and it is not "selected without
an ok score". Writing u = 1/π and v = (1 − π)/π², the sums are

- over every decision: ``decided``; ``unrep`` (π ≤ 0); ``selected``;
- over kept decisions not selected: ``n_u``, Σf, Σf²;
- over judged decisions (selected, π > 0, ok score): ``n``, ``n_sub1`` (π < 1), Σf, Σf², Σy,
  Σy², and with each weight w ∈ {v, u}: Σw, Σwf, Σwf², Σwy, Σwfy, Σwy².

Then N = n_u + n, ΣF = Σf_u + Σf_j (the proxy mean), the line (a, b) is the weighted least
squares of :func:`.active.fit_line` from the normal equations of the w-sums (w = v; u when no
judged π is below 1), and with r = y − a − b·f

    Σ_j u·r = Σuy − aΣu − bΣuf,    Σ_j w·r² = Σwy² − 2aΣwy − 2bΣwfy + a²Σw + 2abΣwf + b²Σwf²,

    μ̂ = (aN + bΣF + Σ_j u·r)/N,    V̂ = Σ_j v·r² / N²,

and the per-record terms z = g + ξ·r/π have Σz = N·μ̂ and Σz² = Σ_all g² + 2Σ_j u·g·r +
Σ_j (u + v)·r², with Σ_all g² = a²N + 2abΣF + b²ΣF² and Σ_j u·g·r = aΣ_j u·r + bΣ_j u·f·r.

Two tests of :func:`.active.active_mean` look at single records and are restated on sums
(the only differences from the row estimator, both at the level of rounding):

- "the judged proxies are all equal" (``ptp(f) == 0``) becomes "the normal equations are
  singular": det = Σw·Σwf² − (Σwf)² ≤ 1e-12·Σw·Σwf²;
- "every residual is within 1e-9 of zero" (an exact fit: no correction, an interval of no
  width) becomes "the u-weighted residual sum of squares is within :data:`EXACT_RTOL` of the
  size of its terms" — the level the cancellation of the expansion above leaves; likewise a
  v-weighted one that small is a variance of 0 (the records judged with π < 1 are on the
  line: the row estimator's variance is then of the order of 1e-30, the expansion's of its
  rounding, about 1e-16 of its terms).

The sums are floating point: the estimate equals the row estimator's within about 1e-12
relative (tests: ``tests/test_judge_rollup.py``). Pure computation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from .._internal.judge_terms import (
    DECISION_FIELDS,
    DECISION_INTS,
    JUDGED_FIELDS,
    JUDGED_INTS,
    judged_terms,
)
from . import Estimate, z_quantile
from .active import ACTIVE, NO_RESIDUAL, ActiveMean

__all__ = ["DECISION_FIELDS", "EXACT_RTOL", "JUDGED_FIELDS", "ActiveTotals", "active_from_totals"]

#: a weighted residual sum of squares at most this share of its terms' size is an exact fit
EXACT_RTOL = 1e-10
_EPS = 2.220446049250313e-16

@dataclass
class ActiveTotals:
    """The additive sums of one (metric, score name) over a set of decisions (see the module
    docstring). ``+`` adds two sets; :meth:`add_row` adds one decision."""

    decided: int = 0
    unrep: int = 0
    selected: int = 0
    n_u: int = 0
    sf_u: float = 0.0
    sff_u: float = 0.0
    n: int = 0
    n_sub1: int = 0
    sf: float = 0.0
    sff: float = 0.0
    sy: float = 0.0
    syy: float = 0.0
    sv: float = 0.0
    svf: float = 0.0
    svff: float = 0.0
    svy: float = 0.0
    svfy: float = 0.0
    svyy: float = 0.0
    su: float = 0.0
    suf: float = 0.0
    suff: float = 0.0
    suy: float = 0.0
    sufy: float = 0.0
    suyy: float = 0.0

    def __add__(self, other: ActiveTotals) -> ActiveTotals:
        return ActiveTotals(*(getattr(self, f.name) + getattr(other, f.name)
                              for f in fields(self)))

    def add_decisions(self, values: Any) -> None:
        """Add a row of :data:`DECISION_FIELDS` (NULLs as 0)."""
        for name, x in zip(DECISION_FIELDS, values):
            setattr(self, name, getattr(self, name) + _num(name, x))

    def add_judged(self, values: Any) -> None:
        """Add a row of :data:`JUDGED_FIELDS` (NULLs as 0)."""
        for name, x in zip(JUDGED_FIELDS, values):
            setattr(self, name, getattr(self, name) + _num(name, x))

    def add_row(self, proxy: float, pi: float, selected: bool, ok: bool,
                y: float | None) -> None:
        """One decision: ``ok`` when its score of the name is ok with a value ``y``."""
        self.decided += 1
        if pi <= 0:
            self.unrep += 1
        if selected:
            self.selected += 1
        if pi <= 0:
            return
        f = float(proxy)
        if not selected:
            self.n_u += 1
            self.sf_u += f
            self.sff_u += f * f
            return
        if not ok or y is None:
            return
        self.add_judged(judged_terms(f, float(pi), float(y)))

    @property
    def missing(self) -> int:
        """Selected decisions without an ok score (left out, counted)."""
        return self.selected - self.n

    @property
    def kept(self) -> int:
        """N: the decisions the estimate speaks for."""
        return self.n_u + self.n


def _num(name: str, x: Any) -> Any:
    if x is None:
        return 0 if name in _INTS else 0.0
    return int(x) if name in _INTS else float(x)


_INTS = frozenset({*DECISION_INTS, *JUDGED_INTS})


def _rss(s0: float, s1: float, s11: float, sy: float, s1y: float, syy: float, a: float,
         b: float) -> tuple[float, float]:
    """Σw·r² of the line (a, b) and the size of its terms (for the exact-fit test)."""
    rss = syy - 2 * a * sy - 2 * b * s1y + a * a * s0 + 2 * a * b * s1 + b * b * s11
    size = (abs(syy) + 2 * abs(a * sy) + 2 * abs(b * s1y) + a * a * abs(s0)
            + 2 * abs(a * b * s1) + b * b * abs(s11))
    return rss, size


def line_from_totals(t: ActiveTotals) -> tuple[float, float]:
    """:func:`.active.fit_line` on the judged records, from their sums."""
    if t.n_sub1 > 0:
        s0, s1, s11, sy, s1y = t.sv, t.svf, t.svff, t.svy, t.svfy
    else:
        s0, s1, s11, sy, s1y = t.su, t.suf, t.suff, t.suy, t.sufy
    if s0 <= 0:
        return 0.0, 0.0
    det = s0 * s11 - s1 * s1
    if det <= 1e-12 * s0 * s11:
        return sy / s0, 0.0
    b = (s0 * s1y - s1 * sy) / det
    return (sy - b * s1) / s0, b


def active_from_totals(t: ActiveTotals, conf: float = 0.95) -> ActiveMean:
    """:func:`.active.active_mean` of the decisions ``t`` sums (the kept ones)."""
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf!r}")
    n_all = t.kept
    big_f = t.sf_u + t.sf
    big_ff = t.sff_u + t.sff
    pm = big_f / n_all if n_all else None
    if t.n < 2 or n_all == 0:
        return ActiveMean(Estimate(t.n, None, None, None, ACTIVE), n_all, None, 0.0, 0.0, pm)
    a, b = line_from_totals(t)
    ru = t.suy - a * t.su - b * t.suf          # Σ_j u·r
    rfu = t.sufy - a * t.suf - b * t.suff      # Σ_j u·f·r
    rss_u, size_u = _rss(t.su, t.suf, t.suff, t.suy, t.sufy, t.suyy, a, b)
    if t.n_sub1 > 0:
        rss_v, size_v = _rss(t.sv, t.svf, t.svff, t.svy, t.svfy, t.svyy, a, b)
        if rss_v <= EXACT_RTOL * size_v:  # the records of weight > 0 are on the line
            rss_v = 0.0
    else:
        rss_v = 0.0  # every judged π is 1: no sampling variance
    if rss_u <= EXACT_RTOL * size_u:  # an exact fit, up to the rounding of the sums
        ru = rfu = rss_u = rss_v = 0.0
    total = a * n_all + b * big_f + ru
    mean = total / n_all
    var = max(0.0, rss_v) / n_all ** 2
    se = math.sqrt(var)
    half = z_quantile(0.5 + conf / 2) * se
    note = NO_RESIDUAL if se == 0.0 and t.n_sub1 > 0 else ""
    se_terms = None
    if n_all > 1:
        g2 = a * a * n_all + 2 * a * b * big_f + b * b * big_ff
        zz = g2 + 2 * (a * ru + b * rfu) + max(0.0, rss_u) + max(0.0, rss_v)
        spread = zz - total * total / n_all
        if spread <= 4 * n_all * _EPS * abs(zz):
            spread = 0.0
        se_terms = math.sqrt(spread / (n_all - 1)) / math.sqrt(n_all)
    return ActiveMean(Estimate(t.n, mean, mean - half, mean + half, ACTIVE, note), n_all, se,
                      a, b, pm, se_terms)
