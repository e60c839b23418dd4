"""Issue 33: the statistics of budgeted, adaptive judge selection — the active-inference
estimator against a direct statsmodels/numpy computation, its unbiasedness and coverage in a
seeded simulation (a fast version of bench/judge_budget_sim.py), the inclusion probabilities,
the pacer under bursty traffic, and the ``judge_budget`` argument's validation."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from tracescore.budget.policy import (
    BINS,
    DAY,
    FLOOR,
    LAMBDA,
    MIN_JUDGED,
    ErrorModel,
    Pacer,
    inclusion,
    proxy_bin,
)
from tracescore.budget.spec import parse_budget, resolve_budgets
from tracescore.stats.active import ACTIVE, NO_RESIDUAL, active_mean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


def _data(rng: np.random.Generator, n: int, rate: float):
    q = rng.beta(6, 1.2, n)
    y = rng.binomial(4, q) / 4
    f = np.clip(q + rng.normal(0, 0.05, n), 0, 1)
    pi = np.clip(rate * (0.3 + 0.7 * 2 * np.sqrt(f * (1 - f)) / 0.6), 0.001, 1)
    sel = rng.random(n) < pi
    return f, pi, sel, y


def test_active_mean_matches_a_direct_computation():
    """The line from statsmodels' WLS (weights (1 − π)/π²), the estimate as the proxy's mean
    plus the 1/π-weighted residuals, the variance Σ (1 − π)/π² r² / N², a normal quantile from
    scipy.stats."""
    rng = np.random.default_rng(7)
    f, pi, sel, y = _data(rng, 5000, 0.08)
    got = active_mean(f, pi, sel, np.where(sel, y, np.nan))
    fit = sm.WLS(y[sel], sm.add_constant(f[sel]), weights=(1 - pi[sel]) / pi[sel] ** 2).fit()
    a, b = fit.params
    assert (got.a, got.b) == pytest.approx((a, b), rel=1e-9)
    g = a + b * f
    mu = g.mean() + np.sum((y[sel] - g[sel]) / pi[sel]) / f.size
    var = np.sum((1 - pi[sel]) / pi[sel] ** 2 * (y[sel] - g[sel]) ** 2) / f.size ** 2
    z = stats.norm.ppf(0.975)
    e = got.estimate
    assert e.value == pytest.approx(mu, rel=1e-12)
    assert (e.lo, e.hi) == pytest.approx((mu - z * math.sqrt(var), mu + z * math.sqrt(var)),
                                         rel=1e-12)
    assert e.n == int(sel.sum()) and got.n_proxied == f.size and e.method == ACTIVE
    terms = g + np.where(sel, (y - g) / pi, 0.0)
    assert got.se_terms == pytest.approx(stats.sem(terms), rel=1e-9)
    assert got.se_terms > got.se  # it adds the records' own spread


def test_a_useless_proxy_falls_back_to_the_weighted_mean_of_the_judged():
    """With a proxy independent of y the line is flat (b ≈ 0) and the estimate is close to the
    Hájek mean of the judged records; with uniform π it is exactly the plain mean then when b
    is forced to 0 (constant proxy)."""
    rng = np.random.default_rng(3)
    n = 20000
    y = rng.beta(5, 2, n)
    f = np.full(n, 0.5)
    pi = np.full(n, 0.1)
    sel = rng.random(n) < pi
    got = active_mean(f, pi, sel, y)
    assert got.b == 0.0
    assert got.estimate.value == pytest.approx(y[sel].mean(), rel=1e-12)


def test_no_judged_records_no_estimate_and_bad_input_refused():
    e = active_mean([0.5, 0.6], [0.5, 0.5], [False, True], [0, 1]).estimate
    assert e.value is None and e.n == 1
    with pytest.raises(ValueError):
        active_mean([0.5], [0.0], [True], [1.0])
    with pytest.raises(ValueError):
        active_mean([0.5, 0.2], [0.5, 0.5], [True, True], [1.0, float("nan")])


def test_exact_proxy_gives_a_zero_width_interval_with_a_note():
    f = np.array([0.0, 1.0] * 50)
    sel = np.arange(100) % 3 == 0
    got = active_mean(f, np.full(100, 0.4), sel, f)
    assert got.estimate.lo == got.estimate.hi == pytest.approx(0.5)
    assert got.estimate.note == NO_RESIDUAL


def test_simulation_is_unbiased_and_covers():
    """A fast run of bench/judge_budget_sim.py (fixed seed, 100 days of 8,000 records, budget
    500/day): for each proxy the mean error is small against the interval's width and the
    95 % intervals cover the day's true mean in at least 85 % of the days (the full run:
    BENCHMARKS.md)."""
    import judge_budget_sim as sim

    rows = sim.summarise(sim.simulate(100, 8000, 500.0, seed=5))
    for r in rows:
        assert r["coverage"] >= 0.85, r
        assert abs(r["bias"]) < 0.25 * r["width"], r
        assert r["budget_min"] > 0.95 and r["budget_mean"] <= 1.0, r
    ratio = {(r["proxy"], r["arm"]): r["width_ratio"] for r in rows}
    assert ratio[("good", "adaptive")] < 0.9
    assert ratio[("useless", "adaptive")] < 1.1


def test_inclusion_mixes_with_uniform_and_keeps_the_mean_rate():
    err = np.array([0.05, 0.1, 0.4])
    share = np.array([0.6, 0.3, 0.1])  # the traffic in each error level
    mean_err = float(np.dot(share, err))
    pi = inclusion(err, mean_err, 0.1)
    assert np.dot(share, pi) == pytest.approx(0.1)  # the budget's rate, in expectation
    assert pi.min() >= LAMBDA * 0.1 - 1e-12 and pi.min() >= FLOOR * 0.1
    assert np.all(np.diff(pi) > 0)
    assert np.all(inclusion(err, mean_err, 0.0) == 0)
    assert np.all(inclusion(err, mean_err, 5.0) == 1.0)
    assert proxy_bin(1.0) == BINS - 1 and proxy_bin(-1) == 0 and proxy_bin(float("nan")) == 0


def test_error_model_is_uniform_until_it_has_judged_records_then_learns():
    rng = np.random.default_rng(11)
    model = ErrorModel()
    err, mean = model.errors()
    assert np.all(err == 1.0) and mean == 1.0
    n = 4000
    f = rng.random(n)
    y = np.clip(f + rng.normal(0, 0.02 + 0.3 * (f > 0.5), n), 0, 1)  # noisy above 0.5
    pi = np.full(n, 0.2)
    sel = rng.random(n) < pi
    model.add(np.minimum(BINS - 1, (f * BINS).astype(int)), f, pi, sel, y)
    assert model.sums[:, 1].sum() >= MIN_JUDGED
    err, mean = model.errors()
    assert err[8] > 2 * err[1]
    assert min(err) < mean < max(err)


def _day(per_slot: np.ndarray, pacer: Pacer, slot_s: float) -> tuple[list[int], list[float]]:
    spent = seen = 0
    spent_by = []
    rng = np.random.default_rng(0)
    for s, c in enumerate(per_slot):
        last = float(per_slot[max(0, s - int(3600 / slot_s)):s].sum())
        r = pacer.rate(spent, seen, s * slot_s, None, last if s * slot_s >= 3600 else None)
        take = int((rng.random(int(c)) < r).sum())
        spent = min(int(pacer.per_day), spent + take)
        seen += int(c)
        spent_by.append(spent)
    return spent_by, []


def test_pacer_spreads_the_budget_through_a_morning_spike():
    """Traffic of 20,000 records a day with 10× for the hour after 09:00, a first day (no
    traffic known from yesterday): by noon at most the day's share so far plus the pacer's
    two hours of slack are spent, and by the end of the day at least 98 % of it."""
    slot_s = 300.0
    slots = int(DAY // slot_s)
    per_slot = np.full(slots, 20000 / slots)
    per_slot[108:120] *= 10  # 09:00-10:00
    pacer = Pacer(1000)
    spent_by, _ = _day(np.random.default_rng(1).poisson(per_slot), pacer, slot_s)
    noon = 144
    assert spent_by[noon - 1] <= 1000 * (12 + 2) / 24 + 25
    assert spent_by[-1] >= 980


@pytest.mark.parametrize("value, per_day", [("2000/day", 2000.0), (" 50 / d ", 50.0),
                                            (300, 300.0), ("12.5/day", 12.5)])
def test_budget_forms(value, per_day):
    assert parse_budget(value) == per_day


@pytest.mark.parametrize("value, words", [
    ("$5/day", "dollars"), ("2000/hour", "not understood"), ("0/day", "at least 1"),
    (True, "must be"), ([1], "must be"), (float("inf"), "at least 1")])
def test_budget_errors(value, words):
    with pytest.raises((ValueError, TypeError), match=words):
        parse_budget(value)


def test_per_metric_budgets():
    got = resolve_budgets("100/day", {"faithfulness": "10/day"}, ["faithfulness", "coherence"],
                          ["faithfulness", "coherence", "token_f1"])
    assert got == {"faithfulness": 10.0, "coherence": 100.0}
    with pytest.raises(ValueError, match="not a judge metric"):
        resolve_budgets(None, {"token_f1": 5}, ["faithfulness"], ["faithfulness", "token_f1"])
    with pytest.raises(ValueError, match="not configured"):
        resolve_budgets(None, {"nope": 5}, ["faithfulness"], ["faithfulness"])
