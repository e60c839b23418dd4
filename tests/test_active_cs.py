"""The monitors' active-inference pieces (tracescore/stats/active_cs.py) against direct
computations: the running sums against :func:`active_mean` and statsmodels' WLS, the
confidence sequence against a per-record transcription of its formulas and, for a census,
against the PrPl-EB sequence of :mod:`tracescore.monitor.confseq`; and its coverage in
seeded simulations (not timed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracescore.stats.active import active_mean, fit_line
from tracescore.stats.active_cs import ActiveSequence, ActiveSums
from tracescore.stats.confseq import eb_confidence_sequence


def _world(rng: np.random.Generator, n: int, quality: float = 0.7, noise: float = 0.1):
    f = rng.uniform(0, 1, n)
    y = np.clip(0.2 + quality * f + rng.normal(0, noise, n), 0, 1)
    # adaptive: the records whose proxy is unsure (near 0.5) are judged more often
    pi = np.clip(0.05 + 0.4 * (0.5 - np.abs(f - 0.5)), 0.02, 1)
    sel = rng.uniform(size=n) < pi
    return f, pi, sel, y


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sums_give_the_active_mean_and_its_line(seed):
    import statsmodels.api as sm

    rng = np.random.default_rng(seed)
    f, pi, sel, y = _world(rng, 2500)
    sums = ActiveSums()
    for c in range(0, f.size, 700):  # added in pieces, as a monitor reads them
        sums.add(f[c:c + 700], pi[c:c + 700], sel[c:c + 700], y[c:c + 700])
    want = active_mean(f, pi, sel, y).estimate
    got = sums.estimate()
    assert got.n == want.n == int(sel.sum())
    assert (got.value, got.lo, got.hi) == pytest.approx((want.value, want.lo, want.hi),
                                                        rel=1e-9)
    v = (1 - pi[sel]) / pi[sel] ** 2
    wls = sm.WLS(y[sel], sm.add_constant(f[sel]), weights=v).fit()
    assert sums.line() == pytest.approx(tuple(wls.params), rel=1e-8)
    assert fit_line(f[sel], y[sel], pi[sel]) == pytest.approx(tuple(wls.params), rel=1e-8)
    # and the json round trip keeps every figure
    again = ActiveSums.from_json(sums.to_json())
    assert again.estimate() == got


def test_sums_flat_proxy_and_census_edge_cases():
    # a constant proxy: a flat line at the weighted mean (as fit_line)
    f = np.full(50, 0.4)
    pi = np.linspace(0.2, 1.0, 50)
    sel = np.arange(50) % 2 == 0
    y = np.linspace(0, 1, 50)
    s = ActiveSums()
    s.add(f, pi, sel, y)
    assert s.estimate().value == pytest.approx(active_mean(f, pi, sel, y).estimate.value)
    # every pi = 1: the mean of the scores, no width
    s = ActiveSums()
    s.add(f, np.ones(50), np.ones(50, bool), y)
    e = s.estimate()
    assert e.value == pytest.approx(float(y.mean())) and e.hi - e.lo == pytest.approx(0.0)


def _transcribed(f, pi, sel, y, alpha, c=0.5, refit=256, min_line=10):
    """The sequence record by record, from the module docstring's formulas."""
    a, b = 0.0, 1.0
    s = q = w_sum = wx = p_sum = 0.0
    pmin = 1.0
    fs, ps, ss, ys = [], [], [], []
    for i in range(len(f)):
        if i and i % refit == 0 and int(np.sum(ss)) >= min_line:
            a, b = fit_line(np.array(fs)[ss], np.array(ys)[ss], np.array(ps)[ss])
        g = min(max(a + b * f[i], 0.0), 1.0)
        phi = g + (y[i] - g) / pi[i] if sel[i] else g
        t = i + 1
        mu_prev = min(max((0.5 + s) / t, 0.0), 1.0)
        sigma2_prev = (0.25 + q) / t
        bet = math.sqrt(2 * math.log(2 / alpha) / (sigma2_prev * t * math.log1p(t)))
        pmin = min(pmin, pi[i])
        w = min(bet, c * pmin)
        lam = w / pi[i]
        assert 0 < lam <= c
        z = (phi - g * (1 - 1 / pi[i])) * pi[i]
        assert -1e-12 <= z <= 1 + 1e-12  # the term's range is known: Z in [0, 1]
        p_sum += ((phi - mu_prev) * pi[i]) ** 2 * (-math.log1p(-lam) - lam)
        w_sum += w
        wx += w * phi
        s += phi
        q += (phi - (0.5 + s) / (t + 1)) ** 2
        fs.append(f[i]), ps.append(pi[i]), ss.append(bool(sel[i])), ys.append(y[i])
    centre, margin = wx / w_sum, (math.log(2 / alpha) + p_sum) / w_sum
    return max(0.0, centre - margin), min(1.0, centre + margin)


def test_sequence_matches_its_formulas_record_by_record():
    rng = np.random.default_rng(7)
    f, pi, sel, y = _world(rng, 1300)
    seq = ActiveSequence(0.01)
    for c in range(0, f.size, 333):
        seq.update(f[c:c + 333], pi[c:c + 333], sel[c:c + 333], y[c:c + 333])
    assert seq.interval() == pytest.approx(_transcribed(f, pi, sel, y, 0.01), rel=1e-9)
    again = ActiveSequence.from_json(seq.to_json())
    assert again.interval() == seq.interval() and again.n == seq.n == int(sel.sum())


def test_a_census_is_the_prpl_eb_sequence_of_the_scores():
    rng = np.random.default_rng(3)
    y = rng.beta(8, 2, 900)
    seq = ActiveSequence(0.05)
    seq.update(rng.uniform(size=900), np.ones(900), np.ones(900, bool), y)
    lo, hi = eb_confidence_sequence(y, 0.05)
    assert seq.interval() == pytest.approx((lo[-1], hi[-1]), rel=1e-9)


@pytest.mark.parametrize("quality", [0.7, 0.0])  # an informative proxy, a useless one
def test_sequence_covers_the_window_mean_at_every_check(quality):
    """Seeded: 200 streams of 2,000 records, adaptive pi, checked every 100 records at
    alpha 0.1: the window's mean of the judge scores must stay inside in >= 90 % of streams
    (the bound is conservative: the simulation finds far fewer misses)."""
    rng = np.random.default_rng(42)
    streams, n, step = 200, 2000, 100
    misses = 0
    for _ in range(streams):
        f, pi, sel, y = _world(rng, n, quality=quality, noise=0.15)
        seq = ActiveSequence(0.1)
        miss = False
        for c in range(0, n, step):
            seq.update(f[c:c + step], pi[c:c + step], sel[c:c + step], y[c:c + step])
            lo, hi = seq.interval()
            miss |= not lo <= float(y[:c + step].mean()) <= hi
        misses += miss
    assert misses / streams <= 0.1


def test_sequence_narrows_and_refuses_bad_input():
    rng = np.random.default_rng(9)
    f, pi, sel, y = _world(rng, 4000)
    seq = ActiveSequence(0.05)
    seq.update(f[:500], pi[:500], sel[:500], y[:500])
    w500 = np.subtract(*reversed(seq.interval()))
    seq.update(f[500:], pi[500:], sel[500:], y[500:])
    assert np.subtract(*reversed(seq.interval())) < w500
    with pytest.raises(ValueError, match="pi in"):
        seq.update([0.5], [0.0], [False], [0.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        seq.update([0.5], [0.5], [True], [1.5])
