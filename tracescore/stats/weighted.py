"""Estimates that account for how records were chosen: inclusion probabilities and the Hájek
(ratio) mean with its linearised variance.

tracescore scores a record for metric m when its hash fraction u is below m's rate, **or** when
a rule forces it (an error, a metadata flag, negative feedback). The scored records are then not
a uniform sample of all records: forced ones are picked with certainty, and they are rarely
typical (a failed run scores low). Their plain mean speaks for the **scored records**; to speak
for **all records**, each scored record i is weighted by 1/π_i, its inclusion probability:

- π = 1 for a record forced by a rule (the rule picks every record it holds, whatever u) and for
  a record with negative feedback (feedback forces every metric on its trace);
- π = max(p, r_m) for a record a priority rule picked (:func:`tracescore.sampling.priority`:
  the rule samples the records it holds at p on the same hash; the metric's rate r_m still
  applies to the rest of them);
- π = r_m otherwise (u < r_m).

A priority rule's records that it did not pick (u ≥ p) are stored unforced; the ones of them a
metric scored (u < r_m) have π = max(p, r_m) = r_m all the same, so π is right for every scored
record, which is all Horvitz-Thompson needs.

The estimator is Hájek's ratio of Horvitz-Thompson totals (Särndal, Swensson & Wretman 1992,
*Model Assisted Survey Sampling*, §5.7; Horvitz & Thompson 1952):

    μ̂ = Σ_s x_i/π_i / N̂,   N̂ = Σ_s 1/π_i,

and as tracescore's sampling is Poisson sampling (each record decided on its own hash, so the
joint inclusion probability is π_i π_j), its linearised variance is

    V̂(μ̂) = Σ_s (1 − π_i)/π_i² · (x_i − μ̂)² / N̂²

(Särndal et al. (5.7.7) with the Poisson π_ij). It is the variance over the sampling of the
records that occurred (a finite population: the window's records); records taken with certainty
add nothing to it. The interval is μ̂ ± t_{n−1}·√V̂. Hájek rather than Horvitz-Thompson's
Σ x_i/π_i / N: the window's N of the metric's scorable records is not known (skipped and failed
jobs), and the ratio is invariant to a constant factor in π (a slightly wrong rate does not move
it when nothing was forced).

Pure computation on the caller's thread; numpy is imported lazily. (statsmodels is not a
dependency of the package: the tests check these figures against its ``DescrStatsW`` — the
weighted mean, and its ``std_mean`` with weights (1 − π)/π² as the Poisson variance — and
against a direct transcription of the formulas.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import Estimate, Moments, t_quantile

#: The population an estimate speaks for (every estimate of the read side says one of these).
SCORED = "scored records"
ALL_WEIGHTED = "all records (weighted)"

#: The start of a ``records.forced`` reason written by :func:`tracescore.sampling.priority`:
#: ``"priority 0.5: premium tier"``.
PRIORITY_PREFIX = "priority "
NEGATIVE_FEEDBACK = "negative feedback"

HAJEK = "hajek (1/pi weights, linearised variance, t)"


def priority_rate(forced: str | None) -> float | None:
    """The rate p of a priority rule's ``forced`` reason (``"priority 0.5: ..."``), else None."""
    if not forced or not forced.startswith(PRIORITY_PREFIX):
        return None
    head = forced[len(PRIORITY_PREFIX):].split(":", 1)[0].strip()
    try:
        p = float(head)
    except ValueError:
        return None
    return p if 0.0 < p <= 1.0 else None


def inclusion_probability(forced: str | None, negative_feedback: bool, rate: float) -> float:
    """π of one scored record for a metric sampled at ``rate`` (module docstring)."""
    if negative_feedback:
        return 1.0
    if forced:
        p = priority_rate(forced)
        return 1.0 if p is None else max(p, rate)
    return rate


@dataclass(frozen=True)
class WeightedMean:
    """A Hájek mean: the :class:`~.stats.Estimate` (population :data:`ALL_WEIGHTED`), its
    standard error, N̂ = Σ 1/π (the records it speaks for) and Kish's design effect of the
    weights (1 + CV² of the weights: how much the unequal weights cost in effective n)."""

    estimate: Estimate
    se: float | None
    n_hat: float
    deff: float

    def __post_init__(self) -> None:
        if not self.estimate.population:  # what a Hájek mean speaks for: every record
            object.__setattr__(self, "estimate",
                               dataclasses.replace(self.estimate, population=ALL_WEIGHTED))

    def to_json(self) -> dict[str, Any]:
        return {**self.estimate.to_json(), "se": self.se, "n_hat": self.n_hat,
                "design_effect": self.deff}


def hajek_mean(values: Sequence[float], pis: Sequence[float], conf: float = 0.95
               ) -> WeightedMean:
    """The Hájek mean of ``values`` with inclusion probabilities ``pis`` (each in (0, 1]).

    value None for no values; lo/hi None for fewer than 2 values. Every π = 1 (a census of the
    window) gives the exact mean with a zero-width interval, method "census".
    """
    import numpy as np

    if len(values) != len(pis):
        raise ValueError(f"values and pis differ in length: {len(values)} vs {len(pis)}")
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf!r}")
    x = np.asarray(values, dtype=float)
    pi = np.asarray(pis, dtype=float)
    if x.size and (not np.all(np.isfinite(x)) or not np.all((pi > 0) & (pi <= 1))):
        raise ValueError("values must be finite and every pi in (0, 1]")
    n = int(x.size)
    if n == 0:
        return WeightedMean(Estimate(0, None, None, None, HAJEK), None, 0.0, 1.0)
    w = 1.0 / pi
    n_hat = float(w.sum())
    mean = float(np.dot(w, x)) / n_hat
    deff = float(n * np.sum(w * w) / (n_hat * n_hat))
    if n < 2:
        return WeightedMean(Estimate(n, mean, None, None, HAJEK), None, n_hat, deff)
    var = float(np.sum((1.0 - pi) / (pi * pi) * (x - mean) ** 2)) / (n_hat * n_hat)
    se = math.sqrt(max(0.0, var))
    if np.all(pi == 1.0):
        return WeightedMean(Estimate(n, mean, mean, mean, "census (every record scored)"),
                            0.0, n_hat, deff)
    half = t_quantile(0.5 + conf / 2, n - 1) * se
    return WeightedMean(Estimate(n, mean, mean - half, mean + half, HAJEK), se, n_hat, deff)


def hajek_from_moments(groups: Sequence[tuple[float, Moments]], conf: float = 0.95
                       ) -> WeightedMean:
    """:func:`hajek_mean` from groups of records sharing one π: (π, their n, Σx, Σx²).

    The same figures as :func:`hajek_mean` on the records themselves (the variance's
    Σ (1 − π)/π² (x − μ̂)² expands to (1 − π)/π² (Σx² − 2μ̂Σx + nμ̂²) per group), so a reader
    can let the database sum a window's scores by why they were chosen instead of returning a
    row per record."""
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf!r}")
    used = [(float(pi), m) for pi, m in groups if m.n > 0]
    if any(not 0.0 < pi <= 1.0 for pi, _ in used):
        raise ValueError("every pi must be in (0, 1]")
    n = sum(m.n for _, m in used)
    if n == 0:
        return WeightedMean(Estimate(0, None, None, None, HAJEK), None, 0.0, 1.0)
    n_hat = sum(m.n / pi for pi, m in used)
    mean = sum(m.s / pi for pi, m in used) / n_hat
    deff = n * sum(m.n / (pi * pi) for pi, m in used) / (n_hat * n_hat)
    if n < 2:
        return WeightedMean(Estimate(n, mean, None, None, HAJEK), None, n_hat, deff)
    if all(pi == 1.0 for pi, _ in used):
        return WeightedMean(Estimate(n, mean, mean, mean, "census (every record scored)"),
                            0.0, n_hat, deff)
    var = sum((1.0 - pi) / (pi * pi) * max(0.0, m.ss - 2 * mean * m.s + m.n * mean * mean)
              for pi, m in used) / (n_hat * n_hat)
    se = math.sqrt(var)
    half = t_quantile(0.5 + conf / 2, n - 1) * se
    return WeightedMean(Estimate(n, mean, mean - half, mean + half, HAJEK), se, n_hat, deff)


__all__ = ["ALL_WEIGHTED", "HAJEK", "NEGATIVE_FEEDBACK", "PRIORITY_PREFIX", "SCORED",
           "WeightedMean", "hajek_from_moments", "hajek_mean", "inclusion_probability",
           "priority_rate"]
