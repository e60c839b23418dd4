"""How far a judge agrees with humans: yes/no and numeric agreement on labelled records.

Input: paired values, ``judge[i]`` and ``human[i]`` for the same record and score, in the
score's own scale (1/0 for yes/no, else the number). Output: small frozen dataclasses with n,
each statistic, its interval and, where a statistic cannot be given, ``None`` with the reason.

Yes/no (:func:`binary_agreement`):

- **confusion matrix** (rows: human no/yes, columns: judge no/yes — the layout of
  ``sklearn.metrics.confusion_matrix(human, judge, labels=[0, 1])``);
- **accuracy** (the share of records where judge and human agree) with its Wilson score
  interval (``tracescore.stats.rate_ci``);
- **Cohen's kappa** κ = (p_o − p_e) / (1 − p_e), agreement beyond what the two raters' yes-rates
  give by chance, with the large-sample interval κ ± z·SE. SE is the asymptotic standard error
  of Fleiss, Cohen & Everitt (1969, "Large sample standard errors of kappa and weighted kappa",
  Psychol. Bull. 72:323), the one ``statsmodels.stats.inter_rater.cohens_kappa`` reports as
  ``std_kappa`` (checked against it in the tests):
  SE² = [Σ_i p_ii (1 − (p_i. + p_.i)(1 − κ))² + (1 − κ)² Σ_{i≠j} p_ij (p_.i + p_j.)²
  − (κ − p_e(1 − κ))²] / ((1 − p_e)² n).
  κ is *undefined* (``None``, with the reason) when the humans used one class only: κ is then
  0 by construction whatever the judge does, so it says nothing — read the accuracy. A judge
  that always answers the same while humans vary gets κ = 0, which is informative ("no better
  than chance").
- **bias**: the judge's yes-rate minus the humans', with the paired t interval below.

Numeric (:func:`numeric_agreement`):

- **Spearman's ρ** (``scipy.stats.spearmanr``; ties get average ranks) with a Fisher-z interval
  tanh(atanh ρ ± z·SE) and the Bonett–Wright SE, √((1 + ρ²/2)/(n − 3)) (Bonett & Wright 2000,
  "Sample size requirements for estimating Pearson, Kendall and Spearman correlations",
  Psychometrika 65:23). We use Bonett–Wright rather than Fieller et al.'s √(1.06/(n − 3)):
  their simulations show it keeps coverage closer to nominal for Spearman's ρ as |ρ| grows.
  Undefined (``None``) when either side is constant.
- **MAE**, the mean absolute difference, with a t interval over the |judge − human|;
- **bias** = judge mean − human mean, the mean of the paired differences d = judge − human,
  with the paired t interval d̄ ± t_{n−1}·s_d/√n and its two-sided p-value (as
  ``scipy.stats.ttest_rel``).

"Not enough data": with fewer than ``min_n`` pairs (default :data:`MIN_PAIRS`) every statistic is
``None``, ``status`` is ``"not enough data"`` and ``reason`` says why; counts (n, the confusion
matrix) are still given. Ten is a floor, not a target: at n = 10 the 95 % Wilson interval of an
accuracy of 0.8 is [0.49, 0.94] and a κ interval is about ±0.5 wide — fine for "the judge is
broken", useless for "the judge is good". Roughly 100 labels bring the accuracy interval to
±0.08.

Assumptions: the labelled records are a random sample of the records the judge scores (or of a
segment of them); a convenience sample (only complaints, only the newest) gives agreement
figures for that sample only. Pure computation on the caller's thread; scipy is imported lazily.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracescore.stats import (
    NOT_ENOUGH_DATA,
    CarriesEstimate,
    Difference,
    Estimate,
    Moments,
    check_conf,
    mean_ci,
    rate_ci,
    z_quantile,
)
from tracescore.stats.student_t import stdtr

#: Fewest labelled pairs for which agreement statistics are reported (see the module docstring).
MIN_PAIRS = 10
OK = "ok"


@dataclass(frozen=True)
class Confusion:
    """The 2x2 table of judge vs human verdicts (counts of records)."""

    both_yes: int
    judge_yes_human_no: int
    judge_no_human_yes: int
    both_no: int

    @property
    def n(self) -> int:
        return self.both_yes + self.judge_yes_human_no + self.judge_no_human_yes + self.both_no

    @property
    def matrix(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Rows human no/yes, columns judge no/yes (sklearn's confusion_matrix layout)."""
        return ((self.both_no, self.judge_yes_human_no),
                (self.judge_no_human_yes, self.both_yes))

    def to_json(self) -> dict[str, Any]:
        return {"both_yes": self.both_yes, "judge_yes_human_no": self.judge_yes_human_no,
                "judge_no_human_yes": self.judge_no_human_yes, "both_no": self.both_no}


#: how :func:`cohens_kappa` computes its interval (the ``method`` of its JSON)
KAPPA_METHOD = ("cohen (Fleiss-Cohen-Everitt SE); lo/hi clipped to [-1, 1], raw_lo/raw_hi as "
                "computed (statsmodels' kappa_low/kappa_upp)")


@dataclass(frozen=True)
class Kappa(CarriesEstimate):
    """Cohen's kappa with its asymptotic SE and interval (``value``, ``lo``, ``hi``, ``n``
    read through ``estimate``: n the labelled pairs); value None when undefined."""

    estimate: Estimate
    se: float | None
    reason: str | None = None

    @property
    def shown_lo(self) -> float | None:
        """``lo`` clipped to [-1, 1] (kappa's range), as displayed; ``lo`` is the raw one."""
        return None if self.lo is None else max(-1.0, self.lo)

    @property
    def shown_hi(self) -> float | None:
        """``hi`` clipped to [-1, 1], as displayed; ``hi`` is the raw one."""
        return None if self.hi is None else min(1.0, self.hi)

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "lo": self.shown_lo, "hi": self.shown_hi,
                "raw_lo": self.lo, "raw_hi": self.hi, "se": self.se, "reason": self.reason,
                "method": self.method}


@dataclass(frozen=True)
class Correlation(CarriesEstimate):
    """A rank correlation with its Fisher-z interval (``value``, ``lo``, ``hi``, ``n``,
    ``method`` read through ``estimate``: n the pairs); value None when undefined."""

    estimate: Estimate
    p_value: float | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "p_value": self.p_value,
                "method": self.method, "reason": self.reason}


@dataclass(frozen=True)
class BinaryAgreement:
    """Judge vs human on a yes/no score. Statistics are None when status != "ok"."""

    n: int
    status: str
    reason: str | None
    confusion: Confusion
    accuracy: Estimate | None
    kappa: Kappa | None
    judge_yes_rate: float | None
    human_yes_rate: float | None
    bias: Difference | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "binary", "n": self.n, "status": self.status, "reason": self.reason,
            "confusion": self.confusion.to_json(),
            "accuracy": self.accuracy.to_json() if self.accuracy else None,
            "kappa": self.kappa.to_json() if self.kappa else None,
            "judge_yes_rate": self.judge_yes_rate, "human_yes_rate": self.human_yes_rate,
            "bias": self.bias.to_json() if self.bias else None,
        }


@dataclass(frozen=True)
class NumericAgreement:
    """Judge vs human on a numeric score. Statistics are None when status != "ok"."""

    n: int
    status: str
    reason: str | None
    spearman: Correlation | None
    mae: Estimate | None
    judge_mean: float | None
    human_mean: float | None
    bias: Difference | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "numeric", "n": self.n, "status": self.status, "reason": self.reason,
            "spearman": self.spearman.to_json() if self.spearman else None,
            "mae": self.mae.to_json() if self.mae else None,
            "judge_mean": self.judge_mean, "human_mean": self.human_mean,
            "bias": self.bias.to_json() if self.bias else None,
        }


def _pairs(judge: Sequence[float], human: Sequence[float]) -> tuple[list[float], list[float]]:
    if len(judge) != len(human):
        raise ValueError(f"judge and human differ in length: {len(judge)} vs {len(human)}")
    js, hs = [float(x) for x in judge], [float(y) for y in human]
    for v in (*js, *hs):
        if not math.isfinite(v):
            raise ValueError(f"values must be finite numbers, got {v!r}")
    return js, hs


def _as_yes_no(values: list[float], who: str) -> list[int]:
    out = []
    for v in values:
        if v not in (0.0, 1.0):
            raise ValueError(f"{who} values of a yes/no score must be 0 or 1, got {v!r}")
        out.append(int(v))
    return out


def paired_bias(judge: Sequence[float], human: Sequence[float],
                conf: float = 0.95) -> Difference:
    """judge mean − human mean: the mean of d = judge − human with the paired t interval.

    The same as ``scipy.stats.ttest_rel(judge, human)`` (its p-value and
    ``confidence_interval(conf)``). Interval and p are None when n < 2 or when every difference
    is the same (s_d = 0: the t statistic is undefined; the estimate is still given).
    method "paired t".
    """
    check_conf(conf)
    js, hs = _pairs(judge, human)
    d = Moments.from_values(j - h for j, h in zip(js, hs))
    est = mean_ci(d, conf)
    var = d.var
    if est.value is None or var is None or var == 0.0:
        return Difference(est.value, None, None, None, "paired t")
    se = math.sqrt(var / d.n)
    p_value = 2 * stdtr(d.n - 1, -abs(est.value) / se)
    return Difference(est.value, est.lo, est.hi, p_value, "paired t")


def cohens_kappa(confusion: Confusion, conf: float = 0.95) -> Kappa:
    """Cohen's kappa of a 2x2 table with the Fleiss-Cohen-Everitt asymptotic SE.

    Matches ``statsmodels.stats.inter_rater.cohens_kappa(confusion.matrix)``: ``kappa``,
    ``std_kappa`` and, at conf 0.95, ``kappa_low`` / ``kappa_upp``. ``lo``/``hi`` are not clipped
    to [-1, 1] (as statsmodels); displays use :attr:`Kappa.shown_lo`/``shown_hi``, clipped. None (with the reason) when n == 0 or the humans used one class only.
    """
    check_conf(conf)
    n = confusion.n
    if n == 0:
        return Kappa(Estimate.missing(KAPPA_METHOD), None, "no labelled pairs")
    table = [[c / n for c in row] for row in confusion.matrix]  # p_ij: i human, j judge
    row = [sum(r) for r in table]  # human marginals p_i.
    col = [table[0][j] + table[1][j] for j in range(2)]  # judge marginals p_.j
    if min(row) == 0.0:
        cls = "yes" if row[1] else "no"
        return Kappa(Estimate.missing(KAPPA_METHOD, n), None,
                     f"the humans labelled every record {cls!r}: kappa is 0 by construction "
                     "whatever the judge says; read the accuracy")
    p_o = table[0][0] + table[1][1]
    p_e = row[0] * col[0] + row[1] * col[1]
    kappa = (p_o - p_e) / (1 - p_e)
    term_a = sum(table[i][i] * (1 - (row[i] + col[i]) * (1 - kappa)) ** 2 for i in range(2))
    term_b = (1 - kappa) ** 2 * sum(
        table[i][j] * (col[i] + row[j]) ** 2 for i in range(2) for j in range(2) if i != j)
    term_c = (kappa - p_e * (1 - kappa)) ** 2
    var = max(0.0, (term_a + term_b - term_c) / (1 - p_e) ** 2 / n)
    se = math.sqrt(var)
    half = z_quantile(0.5 + conf / 2) * se
    return Kappa(Estimate(n, kappa, kappa - half, kappa + half, KAPPA_METHOD), se)


def binary_agreement(judge: Sequence[float], human: Sequence[float], *, conf: float = 0.95,
                     min_n: int = MIN_PAIRS) -> BinaryAgreement:
    """Agreement of a yes/no judge with human labels (values 1 = yes, 0 = no; bools work).

    Raises ValueError for unequal lengths or values other than 0/1.
    """
    check_conf(conf)
    js, hs = _pairs(judge, human)
    jb, hb = _as_yes_no(js, "judge"), _as_yes_no(hs, "human")
    counts = {(1, 1): 0, (1, 0): 0, (0, 1): 0, (0, 0): 0}
    for j, h in zip(jb, hb):
        counts[(j, h)] += 1
    confusion = Confusion(counts[(1, 1)], counts[(1, 0)], counts[(0, 1)], counts[(0, 0)])
    n = len(jb)
    if n < min_n:
        return BinaryAgreement(n, NOT_ENOUGH_DATA, _too_few(n, min_n), confusion,
                               None, None, None, None, None)
    agree = confusion.both_yes + confusion.both_no
    return BinaryAgreement(
        n, OK, None, confusion,
        accuracy=rate_ci(agree, n, conf),
        kappa=cohens_kappa(confusion, conf),
        judge_yes_rate=sum(jb) / n,
        human_yes_rate=sum(hb) / n,
        bias=paired_bias(js, hs, conf),
    )


def spearman(judge: Sequence[float], human: Sequence[float],
             conf: float = 0.95) -> Correlation:
    """Spearman's rho (scipy.stats.spearmanr) with the Bonett-Wright Fisher-z interval.

    The interval needs n > 3; rho is None when either side is constant (no ranks to correlate).
    """
    check_conf(conf)
    js, hs = _pairs(judge, human)
    n = len(js)
    method = "spearman, fisher-z (bonett-wright)"
    if n < 2:
        return Correlation(Estimate.missing(method, n), None, "fewer than 2 pairs")
    for side, vals in (("judge", js), ("human", hs)):
        if min(vals) == max(vals):
            return Correlation(Estimate.missing(method, n), None,
                               f"the {side} values are all equal: no ranks to correlate")
    from scipy import stats  # only here: scipy.stats is slow to import

    res = stats.spearmanr(js, hs)
    rho = float(res.statistic)
    p_value = float(res.pvalue)
    if n <= 3:
        return Correlation(Estimate.missing(method, n, rho), p_value,
                           "the interval needs n > 3")
    se = math.sqrt((1 + rho * rho / 2) / (n - 3))
    # atanh(+-1) is infinite: a perfect rank agreement gets the degenerate interval [rho, rho].
    z = math.atanh(max(-1 + 1e-15, min(1 - 1e-15, rho)))
    half = z_quantile(0.5 + conf / 2) * se
    return Correlation(Estimate(n, rho, math.tanh(z - half), math.tanh(z + half), method),
                       p_value)


def numeric_agreement(judge: Sequence[float], human: Sequence[float], *, conf: float = 0.95,
                      min_n: int = MIN_PAIRS) -> NumericAgreement:
    """Agreement of a numeric judge score with human labels on the same scale."""
    check_conf(conf)
    js, hs = _pairs(judge, human)
    n = len(js)
    if n < min_n:
        return NumericAgreement(n, NOT_ENOUGH_DATA, _too_few(n, min_n),
                                None, None, None, None, None)
    mae = mean_ci(Moments.from_values(abs(j - h) for j, h in zip(js, hs)), conf)
    return NumericAgreement(
        n, OK, None,
        spearman=spearman(js, hs, conf),
        mae=Estimate(mae.n, mae.value, mae.lo, mae.hi, "mean |judge - human|, t"),
        judge_mean=sum(js) / n,
        human_mean=sum(hs) / n,
        bias=paired_bias(js, hs, conf),
    )


def _too_few(n: int, min_n: int) -> str:
    return f"{n} labelled pair{'s' if n != 1 else ''}; at least {min_n} are needed"


__all__ = [
    "KAPPA_METHOD", "MIN_PAIRS", "BinaryAgreement", "Confusion", "Correlation", "Kappa",
    "NumericAgreement",
    "binary_agreement", "cohens_kappa", "numeric_agreement", "paired_bias", "spearman",
]
