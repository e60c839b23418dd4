"""Fixed-sample statistics computed from sufficient statistics.

The rollups keep, per hour x score x segment, the count n, the sum and the sum of squares of the
scores (plus a 100-bin histogram over [0, 1]), so every figure here is computed from those and
gives the same answer before and after raw rows are pruned.

What each function uses (and what ``method`` says in its result):

- ``mean_ci``: Student t interval for a mean (``"t"``); for a sample of scores in [0, 1] whose
  values are all equal (no spread, where t gives a zero-width interval), the exact bound over
  every distribution on [0, 1] (``"range bound"``, see :func:`range_bound`).
- ``rate_ci``: Wilson score interval for a proportion (``"wilson"``).
- ``mean_difference``: Welch's unequal-variance t test and interval (``"welch"``) when both
  sides have spread; for scores in [0, 1] with a side without spread, the MOVER interval of Zou
  & Donner (2008) built from each side's own interval (the range bound for that side) and its
  inverted p-value (``"mover+range"``); see ``mean_difference``.
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
from collections.abc import Sequence

from .estimate import Difference, Estimate
from .moments import Moments
from .student_t import ndtr, ndtri, stdtr, stdtrit

REGRESSED = "regressed"
IMPROVED = "improved"
CHANGED = "changed"
NO_CHANGE = "no change"
NO_EVIDENCE = "no evidence"
NOT_ENOUGH_DATA = "not enough data"
VERDICTS = (REGRESSED, IMPROVED, CHANGED, NO_CHANGE, NO_EVIDENCE, NOT_ENOUGH_DATA)

Bins = Sequence[tuple[float, float]]

def check_conf(conf: float) -> None:
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf!r}")


def t_quantile(p: float, df: float) -> float:
    """Student t quantile, scipy.special.stdtrit's value (what scipy.stats.t.ppf evaluates),
    computed in pure Python (:mod:`.student_t`: a read command needs no numpy)."""
    return stdtrit(df, p)


def z_quantile(p: float) -> float:
    """Standard normal quantile (scipy.special.ndtri, as scipy.stats.norm.ppf)."""
    return ndtri(p)


def range_bound(value: float, n: int, conf: float = 0.95) -> tuple[float, float]:
    """The exact interval for the mean of scores in [0, 1] when all n observed values equal
    ``value`` (c): ``[c * q, c + (1 - c) * (1 - q)]`` with ``q = ((1 - conf) / 2) ** (1 / n)``.

    Why it holds for every distribution on [0, 1]: n values all equal to c have probability
    P(X = c)^n; a distribution with P(X = c) = q has mean at least q*c (the rest at 0) and at
    most q*c + (1 - q) (the rest at 1), so a mean outside the interval makes seeing n equal
    values less likely than (1 - conf)/2 on that side. For c = 1 (or 0) it is the
    Clopper-Pearson interval of n successes (failures) in n trials; it never has zero width.
    """
    check_conf(conf)
    if n < 1 or not 0.0 <= value <= 1.0:
        raise ValueError(f"need n >= 1 and a value in [0, 1], got n={n!r}, value={value!r}")
    return _range_limits(value, n, 1 - conf)


def _range_limits(value: float, n: int, alpha: float) -> tuple[float, float]:
    # alpha, not conf: 1 - alpha is 1.0 in floating point for the p-value search's tiny alphas
    q = math.pow(alpha / 2, 1 / n)
    return value * q, value + (1 - value) * (1 - q)


#: the note of an interval made for a side whose values are all equal
NO_SPREAD = "no spread: every value is equal"


def mean_ci(m: Moments, conf: float = 0.95, *, bounded: bool = False) -> Estimate:
    """Student t interval for the mean: mean +- t_{n-1} * sd / sqrt(n).

    value is None when n == 0; lo and hi are None when n < 2. When every value is equal (zero
    sample variance) the t interval has zero width, which no sample justifies: for scores known
    to lie in [0, 1] (``bounded``) the interval is then :func:`range_bound` (method
    ``"range bound"``), else lo and hi are None; either way ``note`` is :data:`NO_SPREAD`.
    """
    check_conf(conf)
    mean, var = m.mean, m.var
    if mean is None or var is None:
        return Estimate(m.n, mean, None, None, "t")
    if var == 0.0:
        if bounded and -1e-12 <= mean <= 1.0 + 1e-12:
            lo, hi = range_bound(min(1.0, max(0.0, mean)), m.n, conf)
            # min/max: a mean a rounding error outside [0, 1] stays inside its own interval
            return Estimate(m.n, mean, min(lo, mean), max(hi, mean), "range bound", NO_SPREAD)
        return Estimate(m.n, mean, None, None, "t", NO_SPREAD)
    half = t_quantile(0.5 + conf / 2, m.n - 1) * math.sqrt(var / m.n)
    return Estimate(m.n, mean, mean - half, mean + half, "t")


def _wilson(k: float, n: float, z: float) -> tuple[float, float]:
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at k == 0 or k == n the exact bound is 0 or 1; computed, it misses by a rounding error
    # (0.9999999999999999), which would leave the rate 1.0 outside its own interval
    lo = 0.0 if k <= 0 else max(0.0, centre - half)
    hi = 1.0 if k >= n else min(1.0, centre + half)
    return lo, hi


def _check_counts(k: int, n: int) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k!r}, n={n!r}")


def rate_ci(k: int, n: int, conf: float = 0.95) -> Estimate:
    """Wilson score interval for a proportion k/n (Wilson 1927); value None when n == 0."""
    check_conf(conf)
    _check_counts(k, n)
    if n == 0:
        return Estimate(0, None, None, None, "wilson")
    z = z_quantile(0.5 + conf / 2)
    lo, hi = _wilson(k, n, z)
    return Estimate(n, k / n, lo, hi, "wilson")


def _side_limits(m: Moments, alpha: float, bounded: bool) -> tuple[float, float]:
    """One side's distances (below, above) from its mean to its 1 - alpha interval's limits:
    the t interval with spread, the range bound without."""
    mean, var = m.mean, m.var
    assert mean is not None and var is not None
    if var == 0.0 and bounded:
        lo, hi = _range_limits(min(1.0, max(0.0, mean)), m.n, alpha)
        return mean - lo, hi - mean
    # t_{1-alpha/2} as -t_{alpha/2}: exact for the tiny alphas the p-value search visits
    half = -t_quantile(alpha / 2, m.n - 1) * math.sqrt(var / m.n)
    return half, half


def _mover(current: Moments, baseline: Moments, alpha: float,
           bounded: bool) -> tuple[float, float]:
    """Zou & Donner's MOVER interval for current - baseline (Newcombe's method 10 is its form
    for two proportions): d - sqrt(l1^2 + u2^2), d + sqrt(u1^2 + l2^2), with (l, u) each side's
    distances from its estimate to its own limits."""
    assert current.mean is not None and baseline.mean is not None
    d = current.mean - baseline.mean
    l1, u1 = _side_limits(current, alpha, bounded)
    l2, u2 = _side_limits(baseline, alpha, bounded)
    return d - math.hypot(l1, u2), d + math.hypot(u1, l2)


def _mover_p(current: Moments, baseline: Moments, bounded: bool) -> float:
    """The p-value of the MOVER interval: the smallest alpha whose 1 - alpha interval leaves
    out 0 (1 when every interval holds 0), found by root search on log(alpha). The verdict
    from p and the one from the interval then agree at every level."""
    assert current.mean is not None and baseline.mean is not None
    d = current.mean - baseline.mean
    if d == 0.0:
        return 1.0

    def gap(log_alpha: float) -> float:  # > 0: the interval leaves out 0
        lo, hi = _mover(current, baseline, math.exp(log_alpha), bounded)
        return lo if d > 0 else -hi

    top, bottom = math.log(1.0 - 1e-12), math.log(1e-300)
    if gap(top) <= 0:
        return 1.0
    if gap(bottom) > 0:
        return 1e-300
    from scipy.optimize import brentq

    return float(math.exp(brentq(gap, bottom, top, xtol=1e-12, rtol=1e-10)))


def mean_difference(
    current: Moments,
    baseline: Moments,
    conf: float = 0.95,
    *,
    bins_current: Bins | None = None,
    bins_baseline: Bins | None = None,
    seed: int = 0,
    bounded: bool | None = None,
) -> Difference:
    """The difference of means (current - baseline), its interval and p-value.

    Both sides with spread: Welch. p from the t distribution with the Welch-Satterthwaite
    degrees of freedom (as scipy.stats.ttest_ind_from_stats(equal_var=False)); the interval is
    the estimate +- t * SE. method "welch".

    A side without spread (every value equal; Welch's t and df are undefined or lean on that
    side being known exactly) for scores in [0, 1] (``bounded``; given histograms imply it):
    the MOVER interval (Zou & Donner 2008, "Construction of confidence limits about effect
    measures", Stat. Med. 27:1693), which combines each side's own interval — the t interval
    for a side with spread, the exact :func:`range_bound` for a side without — and the p-value
    found by inverting it (the smallest 1 - conf that leaves 0 out). method "mover+range",
    note :data:`NO_SPREAD`. This replaces the percentile bootstrap over the histograms that
    earlier versions used here: a bootstrap cannot see spread a side does not show, so it
    gave zero-width intervals for constant sides and false "regressed" verdicts for nearly
    constant ones (bench/compare_sim.py measures both methods).

    Not bounded, with a side without spread: Welch from the other side's variance alone; both
    sides without spread: interval and p None (note :data:`NO_SPREAD`). With fewer than 2
    observations on a side the interval and p are None: "not enough data". ``bins_*`` and
    ``seed`` are accepted for compatibility and only imply ``bounded``.
    """
    del seed
    check_conf(conf)
    if bounded is None:
        bounded = bins_current is not None and bins_baseline is not None
    mc, mb = current.mean, baseline.mean
    estimate = None if mc is None or mb is None else mc - mb
    vc, vb = current.var, baseline.var
    if estimate is None or vc is None or vb is None:
        return Difference(estimate, None, None, None, "welch")
    if vc == 0.0 or vb == 0.0:
        in_range = all(-1e-12 <= m <= 1.0 + 1e-12 for m in (mc, mb) if m is not None)
        if bounded and in_range:
            lo, hi = _mover(current, baseline, 1 - conf, True)
            return Difference(estimate, lo, hi, _mover_p(current, baseline, True),
                              "mover+range", NO_SPREAD)
        if vc == 0.0 and vb == 0.0:
            return Difference(estimate, None, None, None, "welch", NO_SPREAD)
    a, b = vc / current.n, vb / baseline.n
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a * a / (current.n - 1) + b * b / (baseline.n - 1))
    half = t_quantile(0.5 + conf / 2, df) * se
    # Welch's t test (as scipy.stats.ttest_ind_from_stats(equal_var=False), checked against
    # it in the tests), from the t distribution's CDF (.student_t, scipy.special.stdtr's
    # value): scipy.stats costs a second to import, more than a whole report
    p_value = 2 * stdtr(df, -abs(estimate) / se)
    return Difference(estimate, estimate - half, estimate + half, p_value, "welch")


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
    check_conf(conf)
    _check_counts(k_cur, n_cur)
    _check_counts(k_base, n_base)
    if n_cur == 0 or n_base == 0:
        return Difference(None, None, None, None, "newcombe+score")
    z = z_quantile(0.5 + conf / 2)
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
    p_value = 2 * ndtr(-abs(d) / se)
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
    - REGRESSED / IMPROVED: p (p_adjusted, else the unadjusted diff.p_value) < alpha, the
      interval lies wholly on one side of 0 and not entirely inside +-min_effect; the direction
      from the estimate's sign and higher_is_better. CHANGED when higher_is_better is None.
      (Where p and the interval come from different tests — Newcombe's interval with the score
      or Fisher's test — both must agree, so a printed verdict never contradicts its interval.)
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
    one_side = diff.lo > 0 or diff.hi < 0
    if p is not None and p < alpha and one_side and not inside and diff.estimate != 0:
        if higher_is_better is None:
            return CHANGED
        return IMPROVED if (diff.estimate > 0) == higher_is_better else REGRESSED
    return NO_CHANGE if inside else NO_EVIDENCE
