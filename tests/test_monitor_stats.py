"""tracescore.stats against scipy / statsmodels, verdict edge cases, seeded simulations.

statsmodels is a test-only dependency: it is the independent reference for the intervals.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportion_confint,
    proportions_ztest,
)
from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

from tracescore.stats import (
    CHANGED,
    IMPROVED,
    NO_CHANGE,
    NO_EVIDENCE,
    NO_SPREAD,
    NOT_ENOUGH_DATA,
    REGRESSED,
    VERDICTS,
    Difference,
    Moments,
    adjust_pvalues,
    mean_ci,
    mean_difference,
    rate_ci,
    rate_difference,
    verdict,
)

TOL = 1e-9


def _data(seed: int, a: float, b: float, n: int) -> np.ndarray:
    return np.random.default_rng(seed).beta(a, b, n)


def _bins(xs: np.ndarray) -> list[tuple[float, float]]:
    """100 equal bins over [0, 1] as the rollups store them: (midpoint, count)."""
    idx = np.clip((xs * 100).astype(int), 0, 99)
    counts = np.bincount(idx, minlength=100)
    return [((i + 0.5) / 100, float(c)) for i, c in enumerate(counts) if c]


# --- Moments ---------------------------------------------------------------------------------

def test_moments_match_numpy_and_add() -> None:
    xs = _data(1, 8, 2, 57)
    m = Moments.from_values(xs)
    assert m.n == 57
    assert m.mean == pytest.approx(float(np.mean(xs)), abs=TOL)
    assert m.var == pytest.approx(float(np.var(xs, ddof=1)), abs=TOL)
    both = Moments.from_values(xs[:20]) + Moments.from_values(xs[20:])
    assert both.n == m.n and both.s == pytest.approx(m.s, abs=TOL)
    assert both.ss == pytest.approx(m.ss, abs=TOL)
    assert Moments(0, 0.0, 0.0).mean is None and Moments(1, 0.5, 0.25).var is None
    assert Moments.from_values([0.3] * 1000).var == 0.0  # clipped, never a tiny negative


# --- single-sample intervals -----------------------------------------------------------------

@pytest.mark.parametrize("seed,n", [(2, 5), (3, 40), (4, 1000)])
@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_mean_ci_equals_statsmodels_t_interval(seed: int, n: int, conf: float) -> None:
    xs = _data(seed, 5, 3, n)
    est = mean_ci(Moments.from_values(xs), conf)
    lo, hi = DescrStatsW(xs).tconfint_mean(alpha=1 - conf)
    assert est.method == "t" and est.n == n
    assert est.value == pytest.approx(float(np.mean(xs)), abs=TOL)
    assert est.lo == pytest.approx(lo, abs=TOL) and est.hi == pytest.approx(hi, abs=TOL)


def test_mean_ci_degenerate_sizes() -> None:
    assert mean_ci(Moments(0, 0.0, 0.0)).value is None
    one = mean_ci(Moments(1, 0.7, 0.49))
    assert one.value == 0.7 and one.lo is None and one.hi is None
    assert json.loads(json.dumps(one.to_json()))["value"] == 0.7
    with pytest.raises(ValueError):
        mean_ci(Moments(3, 1.0, 0.5), conf=1.0)


@pytest.mark.parametrize("c,n", [(1.0, 80), (0.0, 30), (0.7, 40), (1.0, 2)])
def test_mean_ci_of_equal_values_is_never_zero_width(c: float, n: int) -> None:
    """Issue 29: an all-equal sample got a zero-width "95 %" interval such as [1.000, 1.000].
    For scores in [0, 1] it now gets the exact range bound (Clopper-Pearson at c = 0 or 1);
    without a known range, no interval; the note says why."""
    m = Moments.from_values([c] * n)
    est = mean_ci(m, bounded=True)
    assert est.method == "range bound" and est.note == NO_SPREAD
    assert est.lo is not None and est.hi is not None
    assert est.lo <= c <= est.hi and est.hi - est.lo > 0
    if c in (0.0, 1.0):
        lo, hi = proportion_confint(int(c) * n, n, alpha=0.05, method="beta")
        assert est.lo == pytest.approx(lo, abs=TOL) and est.hi == pytest.approx(hi, abs=TOL)
    else:  # P(n equal values) = q^n with q = P(X = c) <= (mean - 0) / c on the low side
        assert est.lo == pytest.approx(c * 0.025 ** (1 / n), abs=TOL)
    plain = mean_ci(m)
    assert plain.lo is None and plain.hi is None and plain.note == NO_SPREAD
    assert "note" in plain.to_json() and "note" not in mean_ci(Moments(3, 1.0, 0.5)).to_json()


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (7, 30), (412, 500), (1, 100000)])
@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_rate_ci_equals_statsmodels_wilson(k: int, n: int, conf: float) -> None:
    est = rate_ci(k, n, conf)
    lo, hi = proportion_confint(k, n, alpha=1 - conf, method="wilson")
    assert est.method == "wilson" and est.value == k / n
    assert est.lo == pytest.approx(lo, abs=TOL) and est.hi == pytest.approx(hi, abs=TOL)


def test_rate_ci_empty_and_bad_counts() -> None:
    assert rate_ci(0, 0).value is None
    with pytest.raises(ValueError):
        rate_ci(5, 3)


# --- differences -----------------------------------------------------------------------------

@pytest.mark.parametrize("seeds,sizes", [((5, 6), (60, 45)), ((7, 8), (500, 500)),
                                         ((9, 10), (12, 300))])
@pytest.mark.parametrize("conf", [0.9, 0.95])
def test_welch_equals_scipy_and_statsmodels(seeds: tuple[int, int], sizes: tuple[int, int],
                                            conf: float) -> None:
    cur = _data(seeds[0], 8, 2, sizes[0])
    base = _data(seeds[1], 6, 3, sizes[1])
    d = mean_difference(Moments.from_values(cur), Moments.from_values(base), conf)
    assert d.method == "welch"
    assert d.estimate == pytest.approx(float(cur.mean() - base.mean()), abs=TOL)
    # p from the raw data (scipy) vs ours from the sufficient statistics only
    assert d.p_value == pytest.approx(float(sps.ttest_ind(cur, base, equal_var=False).pvalue),
                                      abs=TOL)
    lo, hi = CompareMeans(DescrStatsW(cur), DescrStatsW(base)).tconfint_diff(
        alpha=1 - conf, usevar="unequal")
    assert d.lo == pytest.approx(lo, abs=TOL) and d.hi == pytest.approx(hi, abs=TOL)


@pytest.mark.parametrize("k1,n1,k2,n2", [(40, 50, 30, 50), (400, 500, 380, 500),
                                         (3, 20, 9, 25), (0, 30, 2, 40), (950, 1000, 900, 1000)])
@pytest.mark.parametrize("conf", [0.9, 0.95])
def test_newcombe_equals_statsmodels(k1: int, n1: int, k2: int, n2: int, conf: float) -> None:
    d = rate_difference(k1, n1, k2, n2, conf)
    lo, hi = confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff",
                                        alpha=1 - conf)
    assert d.estimate == pytest.approx(k1 / n1 - k2 / n2, abs=TOL)
    assert d.lo == pytest.approx(lo, abs=TOL) and d.hi == pytest.approx(hi, abs=TOL)


def test_rate_difference_p_values_score_or_fisher() -> None:
    big = rate_difference(400, 500, 380, 500)
    assert big.method == "newcombe+score"
    _, p = proportions_ztest([400, 380], [500, 500])
    assert big.p_value == pytest.approx(p, abs=TOL)
    small = rate_difference(1, 20, 6, 25)  # expected failures in a cell < 5 -> exact test
    assert small.method == "newcombe+fisher"
    assert small.p_value == pytest.approx(sps.fisher_exact([[1, 19], [6, 19]]).pvalue, abs=TOL)
    assert rate_difference(0, 0, 3, 10).estimate is None


def test_skewed_sides_with_spread_keep_welch_and_match_scipy() -> None:
    # A pass/fail-like score at 0.97 (skewness ~ -5.5) with spread on both sides: Welch, as
    # scipy computes it from the raw values (the old histogram bootstrap is gone, issue 29).
    rng = np.random.default_rng(11)
    cur = (rng.random(200) < 0.93).astype(float)
    base = (rng.random(200) < 0.97).astype(float)
    mc, mb = Moments.from_values(cur), Moments.from_values(base)
    d = mean_difference(mc, mb, bins_current=_bins(cur), bins_baseline=_bins(base), seed=3)
    assert d.method == "welch" and d.note == ""
    assert d.p_value == pytest.approx(float(sps.ttest_ind(cur, base, equal_var=False).pvalue),
                                      abs=TOL)
    assert d.lo is not None and d.hi is not None and d.lo < d.estimate < d.hi


def test_near_constant_side_is_not_regressed() -> None:
    """Issue 29: 40 x 1.0 against 39 x 1.0 + one 0.2 was REGRESSED at p ~ 0.0005 (the shifted
    histogram bootstrap); Welch says p = 0.32. Now: the MOVER interval with the range bound for
    the constant side, p > 0.05, an interval that holds 0, and no verdict."""
    base = np.full(40, 1.0)
    cur = np.array([1.0] * 39 + [0.2])
    mc, mb = Moments.from_values(cur), Moments.from_values(base)
    d = mean_difference(mc, mb, bins_current=_bins(cur), bins_baseline=_bins(base))
    assert d.method == "mover+range" and d.note == NO_SPREAD
    assert d.estimate == pytest.approx(-0.02, abs=TOL)
    assert d.lo is not None and d.hi is not None and d.lo < 0.0 < d.hi
    assert d.p_value is not None and d.p_value > 0.3
    welch = sps.ttest_ind_from_stats(float(cur.mean()), float(cur.std(ddof=1)), 40,
                                     1.0, 0.0, 40, equal_var=False).pvalue
    assert welch == pytest.approx(0.32, abs=0.01)  # the reference figure
    assert _v(d, n_current=40, n_baseline=40) == NO_EVIDENCE


def test_mover_interval_and_p_agree_and_match_their_parts() -> None:
    # MOVER by hand from statsmodels' t interval and the exact Clopper-Pearson bound of the
    # all-1.0 side (the range bound at c = 1 is Clopper-Pearson's n successes in n).
    cur = _data(21, 8, 2, 60)
    base = np.full(45, 1.0)
    mc, mb = Moments.from_values(cur), Moments.from_values(base)
    for conf in (0.9, 0.95, 0.99):
        d = mean_difference(mc, mb, conf, bounded=True)
        t_lo, t_hi = DescrStatsW(cur).tconfint_mean(alpha=1 - conf)
        cp_lo, cp_hi = proportion_confint(45, 45, alpha=1 - conf, method="beta")
        est = float(cur.mean()) - 1.0
        assert d.lo == pytest.approx(est - math.hypot(cur.mean() - t_lo, cp_hi - 1.0), abs=TOL)
        assert d.hi == pytest.approx(est + math.hypot(t_hi - cur.mean(), 1.0 - cp_lo), abs=TOL)
        # the p-value is the level at which the interval touches 0
        assert d.p_value is not None
        at_p = mean_difference(mc, mb, 1 - d.p_value, bounded=True)
        assert at_p.hi == pytest.approx(0.0, abs=1e-7)
    # both sides without spread: an honest interval of positive width, p = 1
    same = mean_difference(Moments.from_values([1.0] * 50), Moments.from_values([1.0] * 50),
                           bounded=True)
    assert same.estimate == 0.0 and same.p_value == 1.0 and same.note == NO_SPREAD
    assert same.lo is not None and same.hi is not None and same.lo < 0.0 < same.hi
    assert same.hi == pytest.approx(1 - 0.025 ** (1 / 50), abs=TOL)


def test_aa_near_constant_score_false_verdicts_and_coverage() -> None:
    """Issue 29, seeded A/A: a score that is 1.0 in 97 % of records, else uniform, n = 50 per
    side, 300 replicates, compared as ``compare`` compares it (histograms given). The old
    bootstrap gave a false verdict in ~30 % and covered 0 in ~63 %."""
    reps, n = 300, 50
    rng = np.random.default_rng(2900)
    false, covered = 0, 0
    for _ in range(reps):
        a, b = np.ones(n), np.ones(n)
        for x in (a, b):
            hit = rng.random(n) < 0.03
            x[hit] = rng.random(int(hit.sum()))
        d = mean_difference(Moments.from_values(a), Moments.from_values(b),
                            bins_current=_bins(a), bins_baseline=_bins(b))
        false += _v(d, n_current=n, n_baseline=n) in (REGRESSED, IMPROVED)
        covered += d.lo is not None and d.hi is not None and d.lo <= 0.0 <= d.hi
    assert false / reps <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps), false / reps
    assert covered / reps >= 0.93, covered / reps


def test_mean_difference_without_enough_data() -> None:
    d = mean_difference(Moments(1, 0.5, 0.25), Moments(40, 30.0, 23.0))
    assert d.estimate == pytest.approx(0.5 - 0.75) and d.lo is None and d.p_value is None
    both_const = mean_difference(Moments(5, 5.0, 5.0), Moments(5, 2.5, 1.25))
    assert both_const.lo is None and both_const.p_value is None
    assert json.loads(json.dumps(both_const.to_json()))["method"] == "welch"
    # not known to be in [0, 1]: no interval, and the reason says so
    assert mean_difference(Moments(5, 5.0, 5.0), Moments(5, 5.0, 5.0)).note == NO_SPREAD


# --- multiple comparisons --------------------------------------------------------------------

@pytest.mark.parametrize("method", ["holm", "fdr_bh"])
def test_adjust_pvalues_equals_statsmodels(method: str) -> None:
    ps = [0.01, 0.04, 0.03, 0.005, 0.5, 0.2, 0.04, 0.9]
    ours = adjust_pvalues(ps, method)
    ref = multipletests(ps, method=method)[1]
    for a, b in zip(ours, ref):
        assert a == pytest.approx(float(b), abs=TOL)
    with_none = adjust_pvalues([None, *ps, None], method)
    assert with_none[0] is None and with_none[-1] is None
    assert with_none[1:-1] == ours


def test_adjust_pvalues_errors_and_empty() -> None:
    assert adjust_pvalues([None, None]) == [None, None]
    assert adjust_pvalues([]) == []
    with pytest.raises(ValueError):
        adjust_pvalues([0.1], "bonferroni")
    with pytest.raises(ValueError):
        adjust_pvalues([1.5])


# --- verdicts --------------------------------------------------------------------------------

def _v(d: Difference, **kw: object) -> str:
    args: dict[str, object] = {"n_current": 100, "n_baseline": 100, "higher_is_better": True,
                               "p_adjusted": None}
    args.update(kw)
    return verdict(d, **args)  # type: ignore[arg-type]


def test_verdict_edge_cases() -> None:
    drop = Difference(-0.05, -0.08, -0.02, 0.001, "welch")
    assert _v(drop) == REGRESSED
    assert _v(drop, higher_is_better=False) == IMPROVED
    assert _v(drop, higher_is_better=None) == CHANGED
    assert _v(drop, n_current=29) == NOT_ENOUGH_DATA
    assert _v(drop, n_baseline=10, min_n=11) == NOT_ENOUGH_DATA
    # adjusted p decides when given
    assert _v(drop, p_adjusted=0.2) == NO_EVIDENCE
    assert _v(Difference(-0.05, -0.08, -0.02, 0.2, "welch"), p_adjusted=0.01) == REGRESSED
    # significant but practically nil: the interval lies inside +-min_effect
    tiny = Difference(-0.005, -0.008, -0.002, 1e-6, "welch")
    assert _v(tiny) == NO_CHANGE
    assert _v(tiny, min_effect=0.0) == REGRESSED
    # interval on the min_effect edge counts as inside
    assert _v(Difference(0.0, -0.02, 0.02, 0.9, "welch")) == NO_CHANGE
    assert _v(Difference(0.0, -0.03, 0.02, 0.9, "welch")) == NO_EVIDENCE
    # no interval -> not enough data, whatever n says
    assert _v(Difference(0.1, None, None, None, "welch")) == NOT_ENOUGH_DATA
    # improvement on a higher-is-better score
    assert _v(Difference(0.06, 0.03, 0.09, 0.0001, "newcombe+score")) == IMPROVED
    assert set(VERDICTS) == {REGRESSED, IMPROVED, CHANGED, NO_CHANGE, NO_EVIDENCE,
                             NOT_ENOUGH_DATA}


# --- seeded simulations ----------------------------------------------------------------------

SEEDS = 400
N = 500


def _beta_params(mean: float, concentration: float = 10.0) -> tuple[float, float]:
    return mean * concentration, (1 - mean) * concentration


def _mean_verdicts(mean_cur: float, mean_base: float, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    cur = rng.beta(*_beta_params(mean_cur), size=(SEEDS, N))
    base = rng.beta(*_beta_params(mean_base), size=(SEEDS, N))
    out = []
    for i in range(SEEDS):
        mc = Moments(N, float(cur[i].sum()), float((cur[i] ** 2).sum()))
        mb = Moments(N, float(base[i].sum()), float((base[i] ** 2).sum()))
        d = mean_difference(mc, mb)
        out.append(verdict(d, n_current=N, n_baseline=N, higher_is_better=True,
                           p_adjusted=d.p_value))
    return out


def _rate_verdicts(p_cur: float, p_base: float, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    k_cur = rng.binomial(N, p_cur, SEEDS)
    k_base = rng.binomial(N, p_base, SEEDS)
    out = []
    for kc, kb in zip(k_cur, k_base):
        d = rate_difference(int(kc), N, int(kb), N)
        out.append(verdict(d, n_current=N, n_baseline=N, higher_is_better=True,
                           p_adjusted=d.p_value))
    return out


def test_aa_pairs_rarely_regress() -> None:
    for verdicts in (_mean_verdicts(0.8, 0.8, 100), _rate_verdicts(0.8, 0.8, 101)):
        share = verdicts.count(REGRESSED) / SEEDS
        assert share <= 0.05, share


def test_ab_drop_of_005_at_500_per_side_is_found() -> None:
    # Scores Beta-distributed (concentration 10, sd ~0.12): 0.80 -> 0.75.
    found = _mean_verdicts(0.75, 0.80, 102).count(REGRESSED) / SEEDS
    assert found >= 0.80, found
    # Pass rates 0.95 -> 0.90: ~85 % power in theory. (0.80 -> 0.75 has only ~47 % power at
    # n = 500: no test can find it 80 % of the time; bench/monitor_sim.py reports it.)
    found_rate = _rate_verdicts(0.90, 0.95, 103).count(REGRESSED) / SEEDS
    assert found_rate >= 0.80, found_rate
    power = sps.norm.cdf(0.05 / math.sqrt(0.95 * 0.05 / N + 0.9 * 0.1 / N) - 1.959964)
    assert abs(found_rate - power) < 0.06


def test_verdict_never_contradicts_its_interval() -> None:
    """Issue 29: where the p-value and the interval come from different tests (Newcombe's
    interval with the score test), p < 0.05 with an interval holding 0 said "regressed"."""
    d = rate_difference(3, 20, 16, 40)
    assert d.p_value is not None and d.p_value < 0.05
    assert d.lo is not None and d.hi is not None and d.lo < 0.0 < d.hi
    assert _v(d, n_current=20, n_baseline=40, min_n=10) == NO_EVIDENCE
    assert _v(Difference(-0.05, -0.08, -0.02, 0.001, "welch")) == REGRESSED


@pytest.mark.parametrize("n", [1, 7, 80, 1000])
def test_wilson_bounds_are_exact_at_all_and_none(n: int) -> None:
    """At k = n the computed upper bound was 0.9999999999999999: the rate 1.0 printed outside
    its own interval (issue 29). The exact bounds are 1 and 0."""
    assert rate_ci(n, n).hi == 1.0 and rate_ci(0, n).lo == 0.0
    assert rate_ci(n, n).lo == pytest.approx(proportion_confint(n, n, method="wilson")[0],
                                              abs=TOL)
