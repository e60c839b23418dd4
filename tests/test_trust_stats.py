"""tracescore.trust: agreement, PPI / PPI++ / stratified PPI and label plans (issue 17).

References: statsmodels (kappa and its SE, Wilson, t intervals), scipy (Spearman, paired t),
ppi-python (``ppi_py``, the PPI reference code; test-only, skipped when missing) and, so the
checks stand without it, a direct numpy transcription of the papers' formulas.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.inter_rater import cohens_kappa as sm_kappa
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from tracescore.stats import NOT_ENOUGH_DATA, Moments
from tracescore.stats.ppi import (
    JUDGE,
    LABELS,
    PPI,
    PPI_PLUS,
    STRATIFIED_PPI_PLUS,
    Stratum,
    ppi_mean,
    stratified_ppi_mean,
    tuned_lambda,
)
from tracescore.trust.agreement import (
    MIN_PAIRS,
    Confusion,
    binary_agreement,
    cohens_kappa,
    numeric_agreement,
    paired_bias,
    spearman,
)
from tracescore.trust.plan import (
    MIN_PER_STRATUM,
    VARIANCE_FLOOR,
    Candidate,
    make_plan,
    parse_stratum,
    score_edges,
)

TOL = 1e-9


def _binary(seed: int, n: int, p: float = 0.7, fp: float = 0.3,
            fn: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < p).astype(float)
    u = rng.random(n)
    f = np.where(y == 1, u >= fn, u < fp).astype(float)
    return f, y


def _numeric(seed: int, n: int, bias: float = 0.08,
             noise: float = 0.12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.beta(6, 2, n)
    return np.clip(y + bias + rng.normal(0, noise, n), 0, 1), y


def _moments(x: np.ndarray) -> Moments:
    return Moments(int(x.size), float(x.sum()), float(np.dot(x, x)))


# --- agreement: yes/no -----------------------------------------------------------------------

@pytest.mark.parametrize("seed,n", [(1, 12), (2, 80), (3, 500)])
def test_binary_agreement_matches_statsmodels(seed: int, n: int) -> None:
    f, y = _binary(seed, n)
    a = binary_agreement(f.tolist(), y.tolist())
    assert a.status == "ok" and a.n == n
    counts = Counter(zip(y.astype(int).tolist(), f.astype(int).tolist()))  # (human, judge)
    table = [[counts[(0, 0)], counts[(0, 1)]], [counts[(1, 0)], counts[(1, 1)]]]
    assert [list(r) for r in a.confusion.matrix] == table
    ref = sm_kappa(np.array(table))
    assert a.kappa is not None and a.kappa.value is not None
    assert a.kappa.value == pytest.approx(ref.kappa, abs=TOL)
    assert a.kappa.se == pytest.approx(ref.std_kappa, abs=TOL)
    assert a.kappa.lo == pytest.approx(ref.kappa_low, abs=TOL)
    assert a.kappa.hi == pytest.approx(ref.kappa_upp, abs=TOL)
    agree = table[0][0] + table[1][1]
    lo, hi = proportion_confint(agree, n, alpha=0.05, method="wilson")
    assert a.accuracy is not None and a.accuracy.value == pytest.approx(agree / n, abs=TOL)
    assert (a.accuracy.lo, a.accuracy.hi) == (pytest.approx(lo, abs=TOL),
                                              pytest.approx(hi, abs=TOL))
    t = sps.ttest_rel(f, y)
    ci = t.confidence_interval(0.95)
    assert a.bias is not None and a.bias.estimate == pytest.approx(f.mean() - y.mean(), abs=TOL)
    assert a.bias.lo == pytest.approx(ci.low, abs=TOL)
    assert a.bias.hi == pytest.approx(ci.high, abs=TOL)
    assert a.bias.p_value == pytest.approx(t.pvalue, abs=TOL)
    assert a.judge_yes_rate == pytest.approx(f.mean()) and a.human_yes_rate == pytest.approx(
        y.mean())
    assert a.to_json()["kappa"]["value"] == a.kappa.value


def test_binary_agreement_matches_sklearn_when_installed() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    f, y = _binary(7, 300)
    a = binary_agreement(f.tolist(), y.tolist())
    assert [list(r) for r in a.confusion.matrix] == metrics.confusion_matrix(
        y, f, labels=[0, 1]).tolist()
    assert a.kappa is not None and a.kappa.value == pytest.approx(
        metrics.cohen_kappa_score(y, f), abs=TOL)


def test_binary_agreement_edge_cases() -> None:
    none = binary_agreement([], [])
    assert none.status == NOT_ENOUGH_DATA and none.n == 0 and none.kappa is None
    assert none.accuracy is None and "at least 10" in (none.reason or "")
    few = binary_agreement([1, 0, 1], [1, 1, 1])
    assert few.status == NOT_ENOUGH_DATA and few.confusion.n == 3
    assert few.confusion.both_yes == 2 and few.confusion.judge_no_human_yes == 1
    # humans all "yes": kappa is 0 by construction, so it is not given (the accuracy is)
    f, _ = _binary(4, 40)
    one_class = binary_agreement(f.tolist(), [1.0] * 40)
    assert one_class.status == "ok" and one_class.kappa is not None
    assert one_class.kappa.value is None and "every record 'yes'" in (one_class.kappa.reason or "")
    assert one_class.accuracy is not None and one_class.accuracy.value == pytest.approx(f.mean())
    # a judge that always says "yes" while humans vary: kappa is 0, which is informative
    _, y = _binary(5, 40)
    always = binary_agreement([1.0] * 40, y.tolist())
    assert always.kappa is not None and always.kappa.value == pytest.approx(0.0, abs=TOL)
    # perfect agreement: kappa 1; every difference 0, so the bias has no interval
    perfect = binary_agreement(y.tolist(), y.tolist())
    assert perfect.kappa is not None and perfect.kappa.value == pytest.approx(1.0)
    assert perfect.bias is not None and perfect.bias.estimate == 0 and perfect.bias.lo is None
    assert cohens_kappa(Confusion(0, 0, 0, 0)).value is None
    with pytest.raises(ValueError, match="0 or 1"):
        binary_agreement([0.5] * 10, [1] * 10)
    with pytest.raises(ValueError, match="length"):
        binary_agreement([1], [1, 0])
    assert MIN_PAIRS == 10 and binary_agreement([True] * 10, [True] * 10).n == 10


# --- agreement: numeric ----------------------------------------------------------------------

@pytest.mark.parametrize("seed,n", [(11, 10), (12, 60), (13, 400)])
def test_numeric_agreement_matches_scipy(seed: int, n: int) -> None:
    f, y = _numeric(seed, n)
    a = numeric_agreement(f.tolist(), y.tolist())
    assert a.status == "ok" and a.n == n and a.spearman is not None
    ref = sps.spearmanr(f, y)
    assert a.spearman.value == pytest.approx(ref.statistic, abs=TOL)
    assert a.spearman.p_value == pytest.approx(ref.pvalue, abs=TOL)
    # Fisher z with the Bonett-Wright SE, from the formula
    r = ref.statistic
    se = math.sqrt((1 + r * r / 2) / (n - 3))
    zq = sps.norm.ppf(0.975)
    assert a.spearman.lo == pytest.approx(math.tanh(math.atanh(r) - zq * se), abs=TOL)
    assert a.spearman.hi == pytest.approx(math.tanh(math.atanh(r) + zq * se), abs=TOL)
    assert a.mae is not None and a.mae.value == pytest.approx(np.mean(np.abs(f - y)), abs=TOL)
    lo, hi = DescrStatsW(np.abs(f - y)).tconfint_mean(alpha=0.05)
    assert (a.mae.lo, a.mae.hi) == (pytest.approx(lo, abs=TOL), pytest.approx(hi, abs=TOL))
    ci = sps.ttest_rel(f, y).confidence_interval(0.95)
    blo, bhi = DescrStatsW(f - y).tconfint_mean(alpha=0.05)
    assert a.bias is not None and a.bias.estimate == pytest.approx(f.mean() - y.mean(), abs=TOL)
    assert a.bias.lo == pytest.approx(ci.low, abs=TOL) == pytest.approx(blo, abs=TOL)
    assert a.bias.hi == pytest.approx(ci.high, abs=TOL) == pytest.approx(bhi, abs=TOL)
    assert a.judge_mean == pytest.approx(f.mean()) and a.human_mean == pytest.approx(y.mean())


def test_numeric_agreement_edge_cases() -> None:
    assert numeric_agreement([], []).status == NOT_ENOUGH_DATA
    one = numeric_agreement([0.5], [0.4], min_n=1)
    assert one.status == "ok" and one.spearman is not None and one.spearman.value is None
    assert one.bias is not None and one.bias.estimate == pytest.approx(0.1) and one.bias.lo is None
    f, y = _numeric(14, 30)
    const_judge = numeric_agreement([0.8] * 30, y.tolist())
    assert const_judge.spearman is not None and const_judge.spearman.value is None
    assert "judge values are all equal" in (const_judge.spearman.reason or "")
    assert const_judge.bias is not None and const_judge.bias.lo is not None
    const_human = numeric_agreement(f.tolist(), [1.0] * 30)
    assert const_human.spearman is not None and const_human.spearman.value is None
    assert "human" in (const_human.spearman.reason or "")
    three = spearman([0.1, 0.2, 0.3], [0.3, 0.1, 0.2])
    assert three.value is not None and three.lo is None and "n > 3" in (three.reason or "")
    perfect = spearman(y.tolist(), (2 * y).tolist())
    assert perfect.value == pytest.approx(1.0) and perfect.lo is not None
    assert perfect.lo <= 1.0 and not math.isnan(perfect.lo)
    assert paired_bias([1.0, 2.0], [1.0, 2.0]).lo is None
    with pytest.raises(ValueError, match="finite"):
        numeric_agreement([float("nan")] * 10, [0.0] * 10)


# --- PPI ---------------------------------------------------------------------------------------

def _ppi_direct(f: np.ndarray, y: np.ndarray, fu: np.ndarray, alpha: float,
                lam: float | None, small: bool = False) -> tuple[float, float, float, float]:
    """PPI / PPI++ for the mean transcribed from the papers (ADZ23's λ̂, clipped to [0, 1]);
    small: divisor n - 1 and a t quantile with Welch-Satterthwaite df."""
    n, big_n = len(f), len(fu)
    if lam is None:
        cov = np.mean((y - y.mean()) * (f - f.mean()))
        var = np.var(np.concatenate([f, fu]), ddof=1)
        lam = float(np.clip(cov / ((1 + n / big_n) * var), 0, 1))
    est = lam * fu.mean() + np.mean(y - lam * f)
    ddof = 1 if small else 0
    a, b = lam**2 * np.var(fu, ddof=ddof) / big_n, np.var(y - lam * f, ddof=ddof) / n
    se = math.sqrt(a + b)
    if small and a + b > 0:
        q = sps.t.ppf(1 - alpha / 2, (a + b) ** 2 / (a**2 / (big_n - 1) + b**2 / (n - 1)))
    else:
        q = sps.norm.ppf(1 - alpha / 2)
    return float(est), float(est - q * se), float(est + q * se), lam


CASES = [("binary", 21, 60, 3000), ("binary", 22, 200, 500), ("numeric", 23, 40, 10000),
         ("numeric", 24, 150, 800)]


def _case(kind: str, seed: int, n: int, big_n: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gen = _binary if kind == "binary" else _numeric
    f, y = gen(seed, n)
    fu, _ = gen(seed + 100, big_n)
    return f, y, fu


@pytest.mark.parametrize("kind,seed,n,big_n", CASES)
@pytest.mark.parametrize("alpha", [0.05, 0.1])
@pytest.mark.parametrize("lam", [None, 1.0, 0.0, 0.4])
@pytest.mark.parametrize("small", [True, False])
def test_ppi_matches_the_papers_formulas(kind: str, seed: int, n: int, big_n: int,
                                         alpha: float, lam: float | None, small: bool) -> None:
    f, y, fu = _case(kind, seed, n, big_n)
    res = ppi_mean(_moments(fu), f.tolist(), y.tolist(), alpha=alpha, lam=lam,
                   small_sample=small, min_n=2)
    est, lo, hi, lam_used = _ppi_direct(f, y, fu, alpha, lam, small)
    c = res.corrected
    assert c.kind == (PPI_PLUS if lam is None else PPI) and c.status == "ok"
    assert (c.n, c.N) == (n, big_n)
    assert c.value == pytest.approx(est, abs=TOL)
    assert c.lo == pytest.approx(lo, abs=TOL) and c.hi == pytest.approx(hi, abs=TOL)
    assert c.lam == pytest.approx(lam_used, abs=TOL)
    assert ("t (df" in c.method) == small
    # the comparisons, labelled for what they are
    allf = np.concatenate([fu, f])
    jlo, jhi = DescrStatsW(allf).tconfint_mean(alpha=alpha)
    assert res.judge.kind == JUDGE and "uncorrected" in res.judge.label
    assert res.judge.value == pytest.approx(allf.mean(), abs=TOL) and res.judge.N == n + big_n
    assert (res.judge.lo, res.judge.hi) == (pytest.approx(jlo, abs=TOL),
                                            pytest.approx(jhi, abs=TOL))
    llo, lhi = DescrStatsW(y).tconfint_mean(alpha=alpha)
    assert res.labels.kind == LABELS and res.labels.value == pytest.approx(y.mean(), abs=TOL)
    assert (res.labels.lo, res.labels.hi) == (pytest.approx(llo, abs=TOL),
                                              pytest.approx(lhi, abs=TOL))


@pytest.mark.parametrize("kind,seed,n,big_n", CASES)
@pytest.mark.parametrize("lam", [None, 1.0, 0.0])
def test_ppi_matches_ppi_python(kind: str, seed: int, n: int, big_n: int,
                                lam: float | None) -> None:
    ppi_py = pytest.importorskip("ppi_py")
    f, y, fu = _case(kind, seed, n, big_n)
    # ppi_py takes the unlabelled predictions themselves; ours their (N, sum, sum of squares)
    res = ppi_mean(_moments(fu), f.tolist(), y.tolist(), alpha=0.05, lam=lam,
                   small_sample=False, min_n=2).corrected
    lo, hi = ppi_py.ppi_mean_ci(y, f, fu, alpha=0.05, lam=lam)
    point = ppi_py.ppi_mean_pointestimate(y, f, fu, lam=lam)
    assert res.value == pytest.approx(float(np.squeeze(point)), abs=1e-6)
    assert res.lo == pytest.approx(float(np.squeeze(lo)), abs=1e-6)
    assert res.hi == pytest.approx(float(np.squeeze(hi)), abs=1e-6)


def test_ppi_rollup_moments_may_include_the_labelled_records() -> None:
    f, y, fu = _case("numeric", 31, 80, 2000)
    disjoint = ppi_mean(_moments(fu), f.tolist(), y.tolist())
    rollup = ppi_mean(_moments(np.concatenate([fu, f])), f.tolist(), y.tolist(),
                      unlabelled_includes_labelled=True)
    assert rollup.corrected.value == pytest.approx(disjoint.corrected.value, abs=TOL)
    assert rollup.corrected.lo == pytest.approx(disjoint.corrected.lo, abs=TOL)
    assert rollup.corrected.N == 2000 and rollup.judge.N == 2080
    with pytest.raises(ValueError, match="not part of"):
        ppi_mean(_moments(fu[:10]), f.tolist(), y.tolist(), unlabelled_includes_labelled=True)


def test_ppi_edge_cases() -> None:
    f, y, fu = _case("numeric", 41, 50, 1000)
    # N = 0: no unlabelled scores, lambda 0: the labels' mean with a normal interval
    empty = ppi_mean(Moments(0, 0.0, 0.0), f.tolist(), y.tolist()).corrected
    assert empty.lam == 0.0 and empty.value == pytest.approx(y.mean(), abs=TOL)
    assert "no unlabelled" in (empty.reason or "") and empty.N == 0
    assert empty.se == pytest.approx(np.std(y, ddof=1) / math.sqrt(50), abs=TOL)
    lo, hi = DescrStatsW(y).tconfint_mean(alpha=0.05)  # lambda 0, ddof 1, t: the t interval
    assert (empty.lo, empty.hi) == (pytest.approx(lo, abs=TOL), pytest.approx(hi, abs=TOL))
    # a constant judge carries no information: lambda 0 (ppi_py would divide by zero)
    const = ppi_mean(_moments(np.full(1000, 0.9)), [0.9] * 50, y.tolist()).corrected
    assert const.lam == 0.0 and const.value == pytest.approx(y.mean(), abs=TOL)
    # constant human labels: not an interval of width 0 (issue 29) but the exact range bound
    # of 50 equal values in [0, 1] (Clopper-Pearson of 50 in 50)
    flat = ppi_mean(_moments(fu), f.tolist(), [1.0] * 50)
    assert flat.labels.value == 1.0 and flat.labels.hi == 1.0
    assert flat.labels.lo == pytest.approx(0.025 ** (1 / 50), abs=TOL)
    assert flat.corrected.lam == 0.0 and flat.corrected.value == pytest.approx(1.0)
    # too few labels: said, not guessed
    for n in (0, 1, 49):
        few = ppi_mean(_moments(fu), f[:n].tolist(), y[:n].tolist())
        assert few.corrected.status == NOT_ENOUGH_DATA and few.corrected.value is None
        assert f"{n} label" in (few.corrected.reason or "")
        assert few.judge.status == "ok"
        if n < 2:
            assert few.labels.status == NOT_ENOUGH_DATA
        else:  # labels only: the t interval is valid below PPI's 50 labels (shown, not "-")
            lo, hi = DescrStatsW(y[:n]).tconfint_mean(alpha=0.05)
            assert few.labels.status == "ok" and few.labels.value == pytest.approx(
                y[:n].mean(), abs=TOL)
            assert (few.labels.lo, few.labels.hi) == (pytest.approx(lo, abs=TOL),
                                                      pytest.approx(hi, abs=TOL))
    assert ppi_mean(_moments(fu), f[:2].tolist(), y[:2].tolist(), min_n=2).corrected.lo is not None
    assert tuned_lambda([0.5], [0.5], _moments(fu)) == 0.0
    nothing = ppi_mean(Moments(0, 0.0, 0.0), [], [])
    assert nothing.judge.value is None and nothing.judge.status == NOT_ENOUGH_DATA
    with pytest.raises(ValueError, match="alpha"):
        ppi_mean(_moments(fu), f.tolist(), y.tolist(), alpha=0)
    with pytest.raises(ValueError, match="lam"):
        ppi_mean(_moments(fu), f.tolist(), y.tolist(), lam=2)
    assert set(ppi_mean(_moments(fu), f.tolist(), y.tolist()).to_json()) == {
        "alpha", "corrected", "judge", "labels", "strata"}


# --- stratified PPI ------------------------------------------------------------------------

def _strata_data(seed: int) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for k, (big_n, n, noise) in enumerate(((3000, 40, 0.05), (800, 25, 0.2), (200, 10, 0.1))):
        y = rng.beta(2 + 2 * k, 2, big_n + n)
        f = np.clip(y + 0.05 + rng.normal(0, noise, big_n + n), 0, 1)
        out.append((f"s{k}", f[:n], y[:n], f[n:]))
    return out


@pytest.mark.parametrize("lam,mode", [(None, "per_stratum"), (None, "pooled"),
                                      (1.0, "pooled")])
@pytest.mark.parametrize("small", [True, False])
def test_stratified_ppi_matches_the_formula(lam: float | None, mode: str, small: bool) -> None:
    data = _strata_data(51)
    strata = [Stratum(name, _moments(fu), f.tolist(), y.tolist()) for name, f, y, fu in data]
    res = stratified_ppi_mean(strata, lam=lam, lam_mode=mode, small_sample=small)
    sizes = np.array([len(fu) + len(f) for _, f, _, fu in data], dtype=float)
    w = sizes / sizes.sum()
    if lam is None and mode == "pooled":  # argmin of sum_k w_k^2 Var_k(lambda)
        num = den = 0.0
        for wk, (_, f, y, fu) in zip(w, data):
            nk, big = len(f), len(fu)
            num += wk**2 * np.mean((y - y.mean()) * (f - f.mean())) / nk
            den += wk**2 * np.var(np.concatenate([f, fu]), ddof=1) * (1 + nk / big) / nk
        lam = float(np.clip(num / den, 0, 1))
        assert res.corrected.lam == pytest.approx(lam, abs=TOL)
    ddof = 1 if small else 0
    ests, terms = [], []
    for wk, (_, f, y, fu) in zip(w, data):
        e, _, _, lk = _ppi_direct(f, y, fu, 0.05, lam)
        ests.append(e)
        terms.append((wk**2 * lk**2 * np.var(fu, ddof=ddof) / len(fu), len(fu) - 1))
        terms.append((wk**2 * np.var(y - lk * f, ddof=ddof) / len(f), len(f) - 1))
    est = float(np.dot(w, ests))
    var = sum(t for t, _ in terms)
    df = var**2 / sum(t**2 / d for t, d in terms)
    q = sps.t.ppf(0.975, df) if small else sps.norm.ppf(0.975)
    c = res.corrected
    assert c.kind == STRATIFIED_PPI_PLUS and c.n == 75 and c.N == 4000
    assert c.value == pytest.approx(est, abs=TOL)
    assert c.se == pytest.approx(math.sqrt(var), abs=TOL)
    assert c.lo == pytest.approx(est - q * math.sqrt(var), abs=TOL)
    assert c.hi == pytest.approx(est + q * math.sqrt(var), abs=TOL)
    if mode == "per_stratum":
        lams = [_ppi_direct(f, y, fu, 0.05, None)[3] for _, f, y, fu in data]
        assert [s.lam for s in res.strata] == [pytest.approx(x, abs=TOL) for x in lams]
    ybar = [y.mean() for _, _, y, _ in data]
    yvar = [np.var(y, ddof=ddof) / len(y) for _, _, y, _ in data]
    assert res.labels.value == pytest.approx(float(np.dot(w, ybar)), abs=TOL)
    assert res.labels.se == pytest.approx(math.sqrt(float(np.dot(w**2, yvar))), abs=TOL)
    allf = np.concatenate([np.concatenate([f, fu]) for _, f, _, fu in data])
    assert res.judge.value == pytest.approx(allf.mean(), abs=TOL)


def test_stratified_with_one_stratum_is_ppi_mean() -> None:
    f, y, fu = _case("numeric", 61, 70, 3000)
    plain = ppi_mean(_moments(fu), f.tolist(), y.tolist())
    for mode in ("pooled", "per_stratum"):
        one = stratified_ppi_mean([Stratum("all", _moments(fu), f.tolist(), y.tolist())],
                                  lam_mode=mode)
        assert one.corrected.value == pytest.approx(plain.corrected.value, abs=TOL)
        assert one.corrected.lo == pytest.approx(plain.corrected.lo, abs=TOL)
        assert one.corrected.hi == pytest.approx(plain.corrected.hi, abs=TOL)
        assert one.labels.lo == pytest.approx(plain.labels.lo, abs=TOL)


def test_stratified_not_enough_data() -> None:
    data = _strata_data(71)
    strata = [Stratum(name, _moments(fu), f.tolist(), y.tolist()) for name, f, y, fu in data]
    strata[2] = Stratum("s2", strata[2].unlabelled, [0.5], [0.6])
    res = stratified_ppi_mean(strata)
    assert res.corrected.status == NOT_ENOUGH_DATA and "s2" in (res.corrected.reason or "")
    assert res.labels.status == NOT_ENOUGH_DATA
    # an empty stratum (no records) is ignored
    strata[2] = Stratum("s2", Moments(0, 0.0, 0.0))
    assert stratified_ppi_mean(strata).corrected.status == "ok"
    with pytest.raises(ValueError, match="no strata"):
        stratified_ppi_mean([])
    with pytest.raises(ValueError, match="lam_mode"):
        stratified_ppi_mean(strata, lam_mode="each")


# --- label plans -------------------------------------------------------------------------------

def _candidates(seed: int, big_n: int, segments: int = 2,
                binary: bool = False) -> list[Candidate]:
    rng = np.random.default_rng(seed)
    vals = (rng.random(big_n) < 0.8).astype(float) if binary else rng.beta(5, 1.5, big_n)
    return [Candidate(f"t{i:05d}", float(v), f"release={i % segments}" if segments else None)
            for i, v in enumerate(vals)]


def test_plan_allocation_strata_and_rows() -> None:
    cands = _candidates(81, 3000)
    plan = make_plan(cands, 100, seed=5)
    assert len(plan.rows) == 100 and plan.population == 3000 and not plan.notes
    assert [r.position for r in plan.rows] == list(range(100))
    assert len({r.trace_id for r in plan.rows}) == 100
    assert len(plan.strata) == 8  # 4 score bands x 2 releases
    assert sum(s.size for s in plan.strata) == 3000 and sum(s.draws for s in plan.strata) == 100
    assert all(MIN_PER_STRATUM <= s.draws <= s.size for s in plan.strata)
    by_name = {s.name: s for s in plan.strata}
    rules = {name: parse_stratum(name) for name in by_name}
    for c in cands:  # every candidate falls in exactly one stratum's rule
        assert sum(rule.contains(c.value, c.segment) for rule in rules.values()) == 1
    for r in plan.rows:
        s = by_name[r.stratum]
        assert (r.stratum_size, r.stratum_draws) == (s.size, s.draws)
        assert rules[r.stratum].contains(r.value, r.segment)
        assert Counter(x.stratum for x in plan.rows)[r.stratum] == s.draws
    # Neyman: the draws beyond the floors follow N_k * S_k (within rounding)
    weights = np.array([s.size * s.sd_proxy for s in plan.strata])
    ideal = 100 * weights / weights.sum()
    got = np.array([s.draws for s in plan.strata])
    assert np.all(np.abs(got - np.maximum(ideal, MIN_PER_STRATUM)) <= 1.5)
    assert all(s.sd_proxy >= math.sqrt(VARIANCE_FLOOR) for s in plan.strata)
    row = plan.table_rows("p1", "faithfulness", 123.0)[0]
    assert set(row) == {"plan_id", "position", "trace_id", "record_id", "name", "stratum",
                        "stratum_size", "stratum_draws", "created_at"}
    assert row["plan_id"] == "p1" and row["name"] == "faithfulness"


def test_plan_is_seeded_and_ignores_input_order() -> None:
    cands = _candidates(82, 1000)
    a = make_plan(cands, 40, seed=3)
    b = make_plan(list(reversed(cands)), 40, seed=3)
    c = make_plan(cands, 40, seed=4)
    assert a.rows == b.rows
    assert [r.trace_id for r in a.rows] != [r.trace_id for r in c.rows]
    assert [s.draws for s in a.strata] == [s.draws for s in c.strata]


def test_plan_draws_are_uniform_within_a_stratum() -> None:
    cands = _candidates(83, 120, segments=0)
    hits: Counter[str] = Counter()
    reps = 400
    plans = [make_plan(cands, 12, bands=2, seed=s) for s in range(reps)]
    stratum_of = {r.trace_id: (r.stratum, r.stratum_size, r.stratum_draws)
                  for p in plans for r in p.rows}
    for p in plans:
        hits.update(r.trace_id for r in p.rows)
    # each record of stratum k is drawn with probability n_k / N_k
    for tid, (_, size, draws) in stratum_of.items():
        expect = reps * draws / size
        assert abs(hits[tid] - expect) < 5 * math.sqrt(expect), tid
    assert len(stratum_of) == 120  # every record was drawn at least once


def test_plan_binary_judge_and_coarsening() -> None:
    cands = _candidates(84, 1000, segments=0, binary=True)
    plan = make_plan(cands, 50)
    assert score_edges([c.value for c in cands], 4) == (0.5,)
    assert sorted(s.name for s in plan.strata) == ["judge < 0.5", "judge >= 0.5"]
    sizes = {s.name: s for s in plan.strata}
    # a yes/no judge's scores say nothing about where it errs: proportional allocation
    big = sizes["judge >= 0.5"]
    assert abs(big.draws - 50 * big.size / 1000) <= 1
    # too few labels for 8 strata: fewer bands first, segments kept
    small = make_plan(_candidates(85, 500), 6)
    assert sum(s.draws for s in small.strata) == 6 and len(small.strata) == 2
    assert all(" | release=" in s.name for s in small.strata) and small.notes
    # more labels than records: all of them
    tiny = make_plan(_candidates(86, 9, segments=0), 20)
    assert len(tiny.rows) == 9 and "all of them" in tiny.notes[0]
    # records without a segment among segmented ones get their own
    mixed = [Candidate("a", 0.5, None), Candidate("b", 0.6, None),
             Candidate("c", 0.5, "x"), Candidate("d", 0.7, "x")]
    m = make_plan(mixed, 4, bands=1)
    rules = [parse_stratum(s.name) for s in m.strata]
    assert sorted(s.name for s in m.strata) == ["all | (no segment)", "all | x"]
    assert sum(r.contains(0.5, None) for r in rules) == 1
    with pytest.raises(ValueError, match="at least 2"):
        make_plan(cands, 1)
    with pytest.raises(ValueError, match="duplicate"):
        make_plan([("a", 0.1, None), ("a", 0.2, None)], 2)
    with pytest.raises(ValueError, match="not a stratum"):
        parse_stratum("judge ~ 3")


# --- coverage (seeded, fast) --------------------------------------------------------------------

def test_ppi_plus_plus_covers_where_the_judge_mean_does_not() -> None:
    """200 seeded repetitions: a judge biased by +0.08 against Beta(6, 2) human scores."""
    rng = np.random.default_rng(2024)
    cover = {"ppi": 0, "judge": 0, "labels": 0}
    width = {"ppi": 0.0, "labels": 0.0}
    reps, big_n, n = 200, 2000, 100
    for _ in range(reps):
        y = rng.beta(6, 2, big_n)
        f = np.clip(y + 0.08 + rng.normal(0, 0.12, big_n), 0, 1)
        idx = rng.choice(big_n, n, replace=False)
        res = ppi_mean(_moments(f), f[idx].tolist(), y[idx].tolist(),
                       unlabelled_includes_labelled=True)
        for key, est in (("ppi", res.corrected), ("judge", res.judge), ("labels", res.labels)):
            assert est.lo is not None and est.hi is not None
            cover[key] += est.lo <= 0.75 <= est.hi
        width["ppi"] += res.corrected.hi - res.corrected.lo  # type: ignore[operator]
        width["labels"] += res.labels.hi - res.labels.lo  # type: ignore[operator]
    assert cover["ppi"] / reps >= 0.9
    assert cover["judge"] / reps < 0.1
    assert width["ppi"] < 0.8 * width["labels"]


def test_stratified_plan_estimate_covers() -> None:
    """100 seeded repetitions of plan -> labels -> stratified PPI++."""
    rng = np.random.default_rng(7)
    reps, big_n, n, hits = 100, 1500, 80, 0
    ids = [f"t{i:05d}" for i in range(big_n)]
    for rep in range(reps):
        y = rng.beta(6, 2, big_n)
        f = np.clip(y + 0.08 + rng.normal(0, 0.12, big_n), 0, 1)
        plan = make_plan(zip(ids, f.tolist(), [None] * big_n), n, seed=rep)
        members: dict[str, list[int]] = {}
        for r in plan.rows:
            members.setdefault(r.stratum, []).append(int(r.trace_id[1:]))
        strata = [Stratum(s.name, s.judge, f[members[s.name]].tolist(),
                          y[members[s.name]].tolist()) for s in plan.strata]
        res = stratified_ppi_mean(strata, unlabelled_includes_labelled=True)
        assert res.corrected.lo is not None and res.corrected.hi is not None
        hits += res.corrected.lo <= 0.75 <= res.corrected.hi
    assert hits / reps >= 0.88


def test_kappa_interval_is_raw_as_statsmodels_and_clipped_for_display() -> None:
    """A small, near-perfect table: the raw interval passes 1 (as statsmodels'); the JSON and
    the text show it clipped to [-1, 1] and say so."""
    from tracescore.reports.trust_text import agreement_lines
    from tracescore.trust.agreement import binary_agreement

    c = Confusion(both_no=5, judge_yes_human_no=0, judge_no_human_yes=1, both_yes=6)
    k = cohens_kappa(c)
    ref = sm_kappa(np.array(c.matrix))
    assert (k.lo, k.hi) == (pytest.approx(ref.kappa_low, abs=1e-9),
                            pytest.approx(ref.kappa_upp, abs=1e-9))
    assert k.hi is not None and k.hi > 1.0  # the raw upper bound is past kappa's range
    j = k.to_json()
    assert j["hi"] == 1.0 and j["raw_hi"] == k.hi and "clipped" in j["method"]
    ag = binary_agreement([0.0] * 5 + [0.0] + [1.0] * 6, [0.0] * 5 + [1.0] + [1.0] * 6,
                          min_n=2)
    text = " ".join(agreement_lines(ag))
    assert f"{k.value:.3f} [{k.lo:.3f}, 1.000]" in text
