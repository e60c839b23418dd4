"""The population mean of a judge metric under adaptive (budgeted) judge selection: active
inference (Zrnic & Candès, *Active Statistical Inference*, ICML 2024).

Every decided record i has the cheap proxy f_i and its inclusion probability π_i (stored with
the decision, :mod:`tracescore.store.judge_budget`); ξ_i = 1 when it was judged, with the
judge's score y_i. The estimate of the mean of y over the N decided records is

    μ̂ = (1/N) Σ_i [ g_i + (ξ_i/π_i)(y_i − g_i) ],    g_i = a + b·f_i,

the proxy's mean corrected by the inverse-probability-weighted error of the judged records
(the "difference" or model-assisted estimator of survey sampling, Särndal, Swensson & Wretman
1992 §6.3). (a, b) is the weighted least-squares line of y on f over the judged records
(weights (1 − π)/π², which minimise the variance below; this is the paper's "power tuning"
with an intercept): a useless proxy gets b ≈ 0 and the estimate falls back to a weighted mean
of the judged records — never worse than ignoring the proxy. Each record is selected on its own
(Poisson sampling: its hash against π_i), so E[ξ_i/π_i] = 1 and μ̂ is unbiased for any fixed
(a, b); estimating (a, b) costs O(1/n).

The interval is μ̂ ± z·√V̂ with the design-based variance over the selection of the records
that occurred (the window's records: the same population as the Hájek figures of
:mod:`.weighted`)

    V̂ = (1/N²) Σ_judged (1 − π_i)/π_i² · (y_i − g_i)²,

a normal (CLT) interval. Pure computation; numpy/scipy imported lazily.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import Estimate, z_quantile

__all__ = ["ACTIVE", "NO_RESIDUAL", "ActiveMean", "active_mean", "fit_line"]

ACTIVE = "active (proxy + 1/pi-weighted correction, normal)"
#: the note of an interval of no width: the line through the proxy matched every judged score
NO_RESIDUAL = ("the proxy's line matched every judged score exactly: the interval has no "
               "width, which more judged records may not bear out")


@dataclass(frozen=True)
class ActiveMean:
    """The active-inference estimate: ``estimate`` (n = records judged), ``n_proxied`` (N:
    records with a proxy and a decision), the fitted line (a, b), the proxy's plain mean and
    the standard error."""

    estimate: Estimate
    n_proxied: int
    se: float | None
    a: float
    b: float
    proxy_mean: float | None
    #: the standard error from the variance of the per-record terms, sd(z)/√N (the paper's
    #: interval: for the mean of the process the records come from, not of the window's
    #: records; it adds their spread Var(y)/N)
    se_terms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.estimate.to_json(), "estimator": "active", "n_judged": self.estimate.n,
                "n_proxied": self.n_proxied, "se": self.se, "proxy_line": [self.a, self.b],
                "proxy_mean": self.proxy_mean, "se_per_record_terms": self.se_terms,
                "population": "all decided records (active inference)"}


def fit_line(f: Any, y: Any, pi: Any) -> tuple[float, float]:
    """Weighted least squares y ≈ a + b·f over judged records, weights (1 − π)/π² (1/π where
    every π is 1: a census has no variance to minimise). Where the records of positive
    weight have one proxy value (the normal equations are singular: e.g. one judged record
    with π < 1 beside records judged with π = 1, whose weight is 0) the line is flat at
    their weighted mean — as :mod:`.active_totals` computes it from sums (not the
    least-norm line of the singular system)."""
    import numpy as np

    v = (1.0 - pi) / (pi * pi)
    if not np.any(v > 0):
        v = 1.0 / pi
    sw = np.sqrt(v)
    x = np.column_stack([np.ones_like(f), f])
    if f.size == 0 or np.ptp(f[v > 0]) == 0.0:
        return float(np.dot(v, y) / v.sum()) if v.sum() > 0 else 0.0, 0.0
    coef, *_ = np.linalg.lstsq(x * sw[:, None], y * sw, rcond=None)
    return float(coef[0]), float(coef[1])


def active_mean(proxy: Any, pi: Any, selected: Any, y: Any, conf: float = 0.95) -> ActiveMean:
    """The estimate over N decided records: ``proxy`` f (N,), ``pi`` (N,) in (0, 1],
    ``selected`` (N,) bool, ``y`` (N,) the judge's score where selected (anything elsewhere).
    value None without 2 judged records."""
    import numpy as np

    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf!r}")
    f = np.asarray(proxy, dtype=float)
    p = np.asarray(pi, dtype=float)
    sel = np.asarray(selected, dtype=bool)
    n_all = int(f.size)
    if not (p.size == sel.size == n_all == np.asarray(y).size):
        raise ValueError("proxy, pi, selected and y differ in length")
    if n_all and (not np.all(np.isfinite(f)) or not np.all((p > 0) & (p <= 1))):
        raise ValueError("proxies must be finite and every pi in (0, 1]")
    yv = np.where(sel, np.asarray(y, dtype=float), 0.0)
    if np.any(sel) and not np.all(np.isfinite(yv[sel])):
        raise ValueError("every judged record needs a finite score")
    n = int(sel.sum())
    pm = float(f.mean()) if n_all else None
    if n < 2:
        return ActiveMean(Estimate(n, None, None, None, ACTIVE), n_all, None, 0.0, 0.0, pm)
    a, b = fit_line(f[sel], yv[sel], p[sel])
    g = a + b * f
    resid = np.where(sel, yv - g, 0.0)
    if np.max(np.abs(resid)) <= 1e-9 * max(1.0, float(np.max(np.abs(yv)))):
        resid[:] = 0.0  # an exact fit, up to the rounding of the line's fit
    z = g + np.where(sel, resid / p, 0.0)
    mean = float(z.mean())
    var = float(np.sum(np.where(sel, (1.0 - p) / (p * p) * resid * resid, 0.0))) / n_all ** 2
    se = math.sqrt(max(0.0, var))
    half = z_quantile(0.5 + conf / 2) * se
    note = ""
    if se == 0.0 and np.any(sel & (p < 1)):
        note = NO_RESIDUAL
    se_terms = float(z.std(ddof=1)) / math.sqrt(n_all) if n_all > 1 else None
    return ActiveMean(Estimate(n, mean, mean - half, mean + half, ACTIVE, note), n_all, se, a,
                      b, pm, se_terms)
