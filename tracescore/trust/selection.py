"""Do the labelled records look like a random draw from the scored ones? The check beside
every judge-corrected (PPI) estimate.

PPI (:mod:`.ppi`) is unbiased only when the labelled records are a random sample of the
records the judge scored (or a stratified one with known probabilities: a label plan). Labels
given to the records someone complained about, or to the lowest judge scores, void that: the
judge-minus-human difference on them is not the difference elsewhere, and the "corrected"
mean can be further from the truth than the judge's own (issue 29: only the lowest judge
scores labelled gave 0.404 [0.380, 0.429] against a true 0.665).

Humans' values are known only on the labelled records, but the judge's are known on all of
them, so the draw can be tested on the judge's scores: under a random draw, the labelled
records' judge scores and the unlabelled records' are two samples of one population.

- **Labels assumed a random sample**: Welch's unequal-variance t test of the labelled vs the
  unlabelled judge scores (``scipy.stats.ttest_ind_from_stats``: it needs only n, mean and
  variance of each side, so the unlabelled side comes from the rollups however many records
  the window holds). A mean difference is what biases PPI's correction, and Welch's test is
  the one that looks for it; its size holds for a random split however the scores are
  distributed once n is moderate (PPI needs 50 labels anyway).
- **Labels drawn by a plan** (stratified): within each stratum the labels should be a random
  draw; the check is the weighted sum of the per-stratum differences,
  D = Σ_k w_k (f̄_lab,k − f̄_unl,k), with Var D = Σ_k w_k² (s²_lab,k/n_k + s²_unl,k/U_k),
  against the normal (the plan's probabilities n_k/N_k make the labels unequal across strata
  on purpose; only a departure *within* strata — an annotator skipping hard records — is a
  problem).

The warning is given at α = :data:`ALPHA` (0.01), so it fires on about 1 % of honest random
draws (bench/selection_sim.py measures both rates). A warning does not prove the labels are
biased, and its absence does not prove them random (a draw on something the judge does not
see passes); it says what the judge's scores show. Pure computation; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..stats import Moments

#: The level of the draw check's warning.
ALPHA = 0.01

WELCH = "welch t (labelled vs unlabelled judge scores)"
STRATIFIED = "stratified z (labelled vs unlabelled judge scores within the plan's strata)"


@dataclass(frozen=True)
class DrawCheck:
    """The check's result: the labelled and unlabelled judge means (stratum-weighted for a
    plan), the test, its statistic and p-value. ``p_value`` None: the test could not be made
    (``reason``)."""

    test: str
    labelled_mean: float | None
    unlabelled_mean: float | None
    n_labelled: int
    n_unlabelled: int
    statistic: float | None
    p_value: float | None
    alpha: float = ALPHA
    reason: str | None = None

    @property
    def warn(self) -> bool:
        return self.p_value is not None and self.p_value < self.alpha

    @property
    def warning(self) -> str | None:
        """The words to print beside the corrected estimate, None when the draw looks random."""
        if not self.warn:
            return None
        return (f"WARNING: the labelled records do not look like a random draw from the scored "
                f"ones (judge mean {self.labelled_mean:.3f} on the {self.n_labelled} labelled "
                f"vs {self.unlabelled_mean:.3f} on the {self.n_unlabelled} others; "
                f"{_p(self.p_value)}, {self.test.split(' (')[0]}): the corrected estimate "
                "assumes a random draw and may be biased; label a random sample "
                "(tracescore label --plan N)")

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, "labelled_judge_mean": self.labelled_mean,
                "unlabelled_judge_mean": self.unlabelled_mean, "n_labelled": self.n_labelled,
                "n_unlabelled": self.n_unlabelled, "statistic": self.statistic,
                "p_value": self.p_value, "alpha": self.alpha, "warning": self.warning,
                "reason": self.reason}


def _p(p: float | None) -> str:
    return "p < 0.0001" if p is not None and p < 1e-4 else f"p = {p:.4f}"


def _unlabelled(unlabelled: Moments, lab: Moments, includes: bool) -> Moments:
    if not includes:
        return unlabelled
    u = Moments(unlabelled.n - lab.n, unlabelled.s - lab.s, unlabelled.ss - lab.ss)
    return u if u.n > 0 else Moments(0, 0.0, 0.0)


def _var(m: Moments) -> float:
    return m.var or 0.0


def draw_check(labelled: Sequence[float], unlabelled: Moments, *,
               unlabelled_includes_labelled: bool = False, alpha: float = ALPHA) -> DrawCheck:
    """Welch's test of the labelled judge scores against the unlabelled ones (moments).

    ``unlabelled_includes_labelled``: ``unlabelled`` holds every scored record (the rollups);
    the labelled ones are taken out first.
    """
    from scipy.stats import ttest_ind_from_stats

    lab = Moments.from_values(labelled)
    u = _unlabelled(unlabelled, lab, unlabelled_includes_labelled)
    if lab.n < 2 or u.n < 2:
        return DrawCheck(WELCH, lab.mean, u.mean, lab.n, u.n, None, None, alpha,
                         "fewer than 2 labelled or 2 unlabelled judge scores")
    va, vb = _var(lab), _var(u)
    if va == 0 and vb == 0:  # both constant: the test is undefined; equal means are no evidence
        same = abs((lab.mean or 0.0) - (u.mean or 0.0)) < 1e-12
        return DrawCheck(WELCH, lab.mean, u.mean, lab.n, u.n, None if same else math.inf,
                         1.0 if same else 0.0, alpha)
    res = ttest_ind_from_stats(lab.mean, math.sqrt(va), lab.n, u.mean, math.sqrt(vb), u.n,
                               equal_var=False)
    return DrawCheck(WELCH, lab.mean, u.mean, lab.n, u.n, float(res.statistic),
                     float(res.pvalue), alpha)


def stratified_draw_check(strata: Sequence[tuple[float, Sequence[float], Moments]], *,
                          unlabelled_includes_labelled: bool = False,
                          alpha: float = ALPHA) -> DrawCheck:
    """The within-strata check of a plan's labels: ``strata`` as (weight w_k, labelled judge
    scores, unlabelled moments); strata without labels or without unlabelled records add
    nothing (a fully labelled stratum is no draw)."""
    from scipy.stats import norm

    d = var = 0.0
    lab_mean = unl_mean = 0.0
    n_lab = n_unl = 0
    used = 0.0
    for w, fs, unlabelled in strata:
        lab = Moments.from_values(fs)
        u = _unlabelled(unlabelled, lab, unlabelled_includes_labelled)
        n_lab += lab.n
        n_unl += u.n
        if lab.n == 0 or u.n == 0:
            continue
        used += w
        lab_mean += w * (lab.mean or 0.0)
        unl_mean += w * (u.mean or 0.0)
        d += w * ((lab.mean or 0.0) - (u.mean or 0.0))
        var += w * w * (_var(lab) / lab.n + _var(u) / u.n)
    if used == 0 or n_lab < 2:
        return DrawCheck(STRATIFIED, None, None, n_lab, n_unl, None, None, alpha,
                         "no stratum with both labelled and unlabelled judge scores")
    lm, um = lab_mean / used, unl_mean / used
    if var == 0:
        same = abs(d) < 1e-12
        return DrawCheck(STRATIFIED, lm, um, n_lab, n_unl, None if same else math.inf,
                         1.0 if same else 0.0, alpha)
    z = d / math.sqrt(var)
    return DrawCheck(STRATIFIED, lm, um, n_lab, n_unl, z, float(2 * norm.sf(abs(z))), alpha)


__all__ = ["ALPHA", "DrawCheck", "draw_check", "stratified_draw_check"]
