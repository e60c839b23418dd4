"""Fixed-sample statistics computed from sufficient statistics.

The rollups keep, per hour x score x segment, the count n, the sum and the sum of squares of the
scores (plus a 100-bin histogram over [0, 1]), so every figure here is computed from those and
gives the same answer before and after raw rows are pruned.

What each function uses (and what ``method`` says in its result):

- ``mean_ci``: Student t interval for a mean (``"t"``).
- ``rate_ci``: Wilson score interval for a proportion (``"wilson"``).
- ``mean_difference``: Welch's unequal-variance t test and interval (``"welch"``), or a seeded
  percentile bootstrap over the two histograms (``"bootstrap"``) when Welch's normal
  approximation is not trusted; see ``mean_difference`` for the rule.
- ``rate_difference``: Newcombe's hybrid score interval (method 10 of Newcombe 1998, built from
  the two Wilson intervals) with the pooled two-proportion score (z) test, or Fisher's exact test
  when an expected cell count is below 5 (``"newcombe+score"`` / ``"newcombe+fisher"``).
- ``adjust_pvalues``: Holm (default) or Benjamini-Hochberg across the scores compared.
- ``verdict``: the word a user acts on, including "not enough data".

Everything is pure computation on the caller's thread: no I/O, no shared state, safe to call
from any thread. scipy and numpy are imported lazily inside the functions that need them, so
importing this module is cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

REGRESSED = "regressed"
IMPROVED = "improved"
CHANGED = "changed"
NO_CHANGE = "no change"
NO_EVIDENCE = "no evidence"
NOT_ENOUGH_DATA = "not enough data"
VERDICTS = (REGRESSED, IMPROVED, CHANGED, NO_CHANGE, NO_EVIDENCE, NOT_ENOUGH_DATA)

# Bootstrap resamples for mean_difference; 4,000 keeps the Monte Carlo error of a 95 % percentile
# bound well under the bin width (0.01) while costing a few milliseconds.
BOOTSTRAP_RESAMPLES = 4000

Bins = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Moments:
    """Sufficient statistics of a sample: its size, sum and sum of squares."""

    n: int
    s: float
    ss: float

    @property
    def mean(self) -> float | None:
        """The sample mean, or None for an empty sample."""
        return self.s / self.n if self.n > 0 else None

    @property
    def var(self) -> float | None:
        """The sample variance (ddof=1), or None when n < 2."""
        if self.n < 2:
            return None
        # Clipped: ss - s^2/n may come out a hair below zero by cancellation for constant data.
        return max(0.0, (self.ss - self.s * self.s / self.n) / (self.n - 1))

    @classmethod
    def from_values(cls, xs: Iterable[float]) -> Moments:
        n, s, ss = 0, 0.0, 0.0
        for x in xs:
            x = float(x)
            n += 1
            s += x
            ss += x * x
        return cls(n, s, ss)

    def __add__(self, other: Moments) -> Moments:
        if not isinstance(other, Moments):
            return NotImplemented
        return Moments(self.n + other.n, self.s + other.s, self.ss + other.ss)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its n and confidence interval (None where it cannot be computed)."""

    n: int
    value: float | None
    lo: float | None
    hi: float | None
    method: str

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "value": self.value, "lo": self.lo, "hi": self.hi,
                "method": self.method}


@dataclass(frozen=True)
class Difference:
    """current - baseline, with its confidence interval and two-sided p-value."""

    estimate: float | None
    lo: float | None
    hi: float | None
    p_value: float | None
    method: str

    def to_json(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "lo": self.lo, "hi": self.hi,
                "p_value": self.p_value, "method": self.method}


def _check_conf(conf: float) -> None:
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf!r}")


def _t_quantile(p: float, df: float) -> float:
    """Student t quantile (scipy.special.stdtrit: the same function scipy.stats.t.ppf
    evaluates, without scipy.stats' second of import time)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def _z_quantile(p: float) -> float:
    """Standard normal quantile (scipy.special.ndtri, as scipy.stats.norm.ppf)."""
    from scipy.special import ndtri

    return float(ndtri(p))


def mean_ci(m: Moments, conf: float = 0.95) -> Estimate:
    """Student t interval for the mean: mean +- t_{n-1} * sd / sqrt(n).

    value is None when n == 0; lo and hi are None when n < 2.
    """
    _check_conf(conf)
    mean, var = m.mean, m.var
    if mean is None or var is None:
        return Estimate(m.n, mean, None, None, "t")
    half = _t_quantile(0.5 + conf / 2, m.n - 1) * math.sqrt(var / m.n)
    return Estimate(m.n, mean, mean - half, mean + half, "t")


def _wilson(k: float, n: float, z: float) -> tuple[float, float]:
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # max/min only absorb rounding at k == 0 or k == n, where the exact bound is 0 or 1.
    return max(0.0, centre - half), min(1.0, centre + half)


def _check_counts(k: int, n: int) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k!r}, n={n!r}")


def rate_ci(k: int, n: int, conf: float = 0.95) -> Estimate:
    """Wilson score interval for a proportion k/n (Wilson 1927); value None when n == 0."""
    _check_conf(conf)
    _check_counts(k, n)
    if n == 0:
        return Estimate(0, None, None, None, "wilson")
    z = _z_quantile(0.5 + conf / 2)
    lo, hi = _wilson(k, n, z)
    return Estimate(n, k / n, lo, hi, "wilson")


def _skewness(bins: Bins) -> float | None:
    """Adjusted Fisher-Pearson sample skewness G1 from (midpoint, count) bins."""
    n = sum(c for _, c in bins)
    if n < 3:
        return None
    mean = sum(x * c for x, c in bins) / n
    m2 = sum(c * (x - mean) ** 2 for x, c in bins) / n
    m3 = sum(c * (x - mean) ** 3 for x, c in bins) / n
    if m2 <= 0:
        return None
    g1 = m3 / math.pow(m2, 1.5)
    return g1 * math.sqrt(n * (n - 1)) / (n - 2)


def _normal_enough(n: int, bins: Bins | None) -> bool:
    """Sugden, Smith & Jones (2000) refinement of Cochran's rule: n > 28 + 25 * G1**2.

    Cochran (1977, Sampling Techniques, sec. 2.15) asks n > 25 * G1**2 for the sample mean of a
    skewed population to be near normal; Sugden et al. ("Cochran's rule for simple random
    sampling", JRSS-B 62) showed that adding 28 keeps a 95 % interval's tail errors balanced.
    Without bins the skewness is unknown and the rule cannot fail.
    """
    if bins is None:
        return True
    g1 = _skewness(bins)
    if g1 is None:
        return True
    return n > 28 + 25 * g1 * g1


def mean_difference(
    current: Moments,
    baseline: Moments,
    conf: float = 0.95,
    *,
    bins_current: Bins | None = None,
    bins_baseline: Bins | None = None,
    seed: int = 0,
) -> Difference:
    """The difference of means (current - baseline): Welch, or a bootstrap where Welch fails.

    Welch: p from scipy.stats.ttest_ind_from_stats(equal_var=False); the interval uses the
    Welch-Satterthwaite degrees of freedom and the t quantile. method "welch".

    Welch's assumptions are judged to fail, and a seeded percentile bootstrap over the two
    histograms is used instead (method "bootstrap"), when histograms are given for both sides and
    either (a) a side has zero sample variance (the t statistic and its df are undefined), or
    (b) a side is too skewed for its size by the Sugden-Smith-Jones form of Cochran's rule,
    n <= 28 + 25 * G1**2, with G1 the sample skewness of its histogram. The bootstrap resamples
    each side's n from its binned distribution (multinomial over bin midpoints), shifts the
    resampled differences by (exact difference - binned difference) so the 100-bin rounding does
    not bias the interval, and takes the percentile interval; p is twice the smaller tail share
    of resampled differences on either side of zero ((count + 1) / (B + 1) each).

    With fewer than 2 observations on a side (or zero variance and no bins) the interval and p
    are None: a verdict on such data is "not enough data".
    """
    _check_conf(conf)
    mc, mb = current.mean, baseline.mean
    estimate = None if mc is None or mb is None else mc - mb
    vc, vb = current.var, baseline.var
    if estimate is None or vc is None or vb is None:
        return Difference(estimate, None, None, None, "welch")
    zero_var = vc == 0.0 or vb == 0.0
    have_bins = bins_current is not None and bins_baseline is not None
    if have_bins and (zero_var or not _normal_enough(current.n, bins_current)
                      or not _normal_enough(baseline.n, bins_baseline)):
        assert bins_current is not None and bins_baseline is not None
        boot = _bootstrap_difference(current, baseline, bins_current, bins_baseline,
                                     estimate, conf, seed)
        if boot is not None:
            return boot
    if vc == 0.0 and vb == 0.0:
        return Difference(estimate, None, None, None, "welch")
    a, b = vc / current.n, vb / baseline.n
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a * a / (current.n - 1) + b * b / (baseline.n - 1))
    half = _t_quantile(0.5 + conf / 2, df) * se
    # Welch's t test (as scipy.stats.ttest_ind_from_stats(equal_var=False), checked against
    # it in the tests), from the t distribution's CDF in scipy.special: scipy.stats costs a
    # second to import, more than a whole report
    from scipy.special import stdtr

    p_value = float(2 * stdtr(df, -abs(estimate) / se))
    return Difference(estimate, estimate - half, estimate + half, p_value, "welch")


def _bootstrap_difference(
    current: Moments, baseline: Moments, bins_c: Bins, bins_b: Bins, estimate: float,
    conf: float, seed: int,
) -> Difference | None:
    import numpy as np

    rng = np.random.default_rng(seed)
    means = []
    binned = []
    for m, bins in ((current, bins_c), (baseline, bins_b)):
        mids = np.array([x for x, _ in bins], dtype=float)
        counts = np.array([c for _, c in bins], dtype=float)
        total = counts.sum()
        if total <= 0:
            return None
        p = counts / total
        draws = rng.multinomial(m.n, p, size=BOOTSTRAP_RESAMPLES)
        means.append(draws @ mids / m.n)
        binned.append(float(p @ mids))
    diffs = means[0] - means[1] + (estimate - (binned[0] - binned[1]))
    tail = (1 - conf) / 2
    lo, hi = np.quantile(diffs, [tail, 1 - tail])
    below = (np.count_nonzero(diffs <= 0) + 1) / (BOOTSTRAP_RESAMPLES + 1)
    above = (np.count_nonzero(diffs >= 0) + 1) / (BOOTSTRAP_RESAMPLES + 1)
    p_value = min(1.0, 2 * min(below, above))
    return Difference(estimate, float(lo), float(hi), p_value, "bootstrap")


def rate_difference(
    k_cur: int, n_cur: int, k_base: int, n_base: int, conf: float = 0.95
) -> Difference:
    """The difference of proportions (current - baseline).

    Interval: Newcombe's hybrid score interval (Newcombe 1998, Stat. Med. 17:873, method 10):
    d -+ sqrt of the squared distances from each proportion to its Wilson limits.
    p-value: the pooled two-proportion score (z) test, unless an expected count of the 2x2 table
    is below 5 (Cochran's rule for chi-square tests), where Fisher's exact test
    (scipy.stats.fisher_exact, two-sided) is used instead. method "newcombe+score" or
    "newcombe+fisher". All None when a side has n == 0.
    """
    _check_conf(conf)
    _check_counts(k_cur, n_cur)
    _check_counts(k_base, n_base)
    if n_cur == 0 or n_base == 0:
        return Difference(None, None, None, None, "newcombe+score")
    z = _z_quantile(0.5 + conf / 2)
    p1, p2 = k_cur / n_cur, k_base / n_base
    l1, u1 = _wilson(k_cur, n_cur, z)
    l2, u2 = _wilson(k_base, n_base, z)
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    k, n = k_cur + k_base, n_cur + n_base
    expected = (n_cur * k / n, n_cur * (n - k) / n, n_base * k / n, n_base * (n - k) / n)
    if min(expected) < 5:
        from scipy import stats  # only here: scipy.stats is slow to import

        table = [[k_cur, n_cur - k_cur], [k_base, n_base - k_base]]
        p_value = float(stats.fisher_exact(table)[1])  # a tuple before scipy 1.11
        return Difference(d, lo, hi, p_value, "newcombe+fisher")
    pooled = k / n
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_cur + 1 / n_base))
    from scipy.special import ndtr

    p_value = float(2 * ndtr(-abs(d) / se))
    return Difference(d, lo, hi, p_value, "newcombe+score")


def adjust_pvalues(
    pvalues: Sequence[float | None], method: str = "holm"
) -> list[float | None]:
    """Adjust a family of p-values for multiple comparisons; None entries stay None.

    "holm" (default): Holm's step-down (1979) controls the family-wise error rate, the chance of
    even one false finding among all scores compared. That is the error a deployment gate must
    bound: one false "regressed" blocks a release, so FWER, not the false discovery proportion,
    is what a user pays for; Holm is uniformly more powerful than Bonferroni and needs no
    independence between scores (which share records).
    "fdr_bh": Benjamini-Hochberg (scipy.stats.false_discovery_control) controls the expected
    share of false findings; better for exploring many segments than for gating.
    """
    pairs = [(i, float(p)) for i, p in enumerate(pvalues) if p is not None]
    idx, ps = [i for i, _ in pairs], [p for _, p in pairs]
    for p in ps:
        if not 0.0 <= p <= 1.0 or math.isnan(p):
            raise ValueError(f"p-values must be in [0, 1], got {p!r}")
    out: list[float | None] = [None] * len(pvalues)
    if not ps:
        return out
    if method == "holm":
        m = len(ps)
        order = sorted(range(m), key=lambda j: ps[j])
        running = 0.0
        adjusted = [0.0] * m
        for rank, j in enumerate(order):
            running = max(running, min(1.0, (m - rank) * ps[j]))
            adjusted[j] = running
    elif method == "fdr_bh":
        from scipy import stats

        adjusted = [float(v) for v in stats.false_discovery_control(ps, method="bh")]
    else:
        raise ValueError(f"unknown method {method!r}: use 'holm' or 'fdr_bh'")
    for i, v in zip(idx, adjusted):
        out[i] = v
    return out


def verdict(
    diff: Difference,
    *,
    n_current: int,
    n_baseline: int,
    min_n: int = 30,
    min_effect: float = 0.02,
    higher_is_better: bool | None,
    p_adjusted: float | None,
    alpha: float = 0.05,
) -> str:
    """The verdict on a difference (current - baseline); one of VERDICTS.

    - NOT_ENOUGH_DATA: a side has fewer than min_n observations, or no interval could be made.
    - REGRESSED / IMPROVED: p (p_adjusted, else the unadjusted diff.p_value) < alpha and the
      interval is not entirely inside +-min_effect; the direction from the estimate's sign and
      higher_is_better. CHANGED when higher_is_better is None.
    - NO_CHANGE: the interval lies inside [-min_effect, +min_effect] (an equivalence verdict;
      it includes statistically significant differences too small to matter).
    - NO_EVIDENCE: otherwise (the interval is too wide to say either).
    """
    if n_current < min_n or n_baseline < min_n:
        return NOT_ENOUGH_DATA
    if diff.estimate is None or diff.lo is None or diff.hi is None:
        return NOT_ENOUGH_DATA
    p = p_adjusted if p_adjusted is not None else diff.p_value
    inside = -min_effect <= diff.lo and diff.hi <= min_effect
    if p is not None and p < alpha and not inside and diff.estimate != 0:
        if higher_is_better is None:
            return CHANGED
        return IMPROVED if (diff.estimate > 0) == higher_is_better else REGRESSED
    return NO_CHANGE if inside else NO_EVIDENCE
