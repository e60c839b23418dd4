"""The active estimate from additive sums (:mod:`tracescore.stats.active_totals`) against the
row estimator :func:`tracescore.stats.active.active_mean` — value, interval, standard errors,
line, note — on random windows, including the restated edge cases: all judged proxies equal,
every judged π = 1, an exact linear fit (two judged records, or y = a + b·f), and sums split
into parts and added back."""

from __future__ import annotations

import numpy as np
import pytest

from tracescore.stats.active import NO_RESIDUAL, active_mean
from tracescore.stats.active_totals import ActiveTotals, active_from_totals


def _totals(f, pi, sel, y, parts: int = 1) -> ActiveTotals:
    chunks = [ActiveTotals() for _ in range(parts)]
    for i in range(len(f)):
        chunks[i % parts].add_row(f[i], pi[i], bool(sel[i]), True, y[i])
    out = ActiveTotals()
    for c in chunks:
        out = out + c
    return out


def _check(f, pi, sel, y, parts: int = 1) -> None:
    want = active_mean(f, pi, sel, y)
    got = active_from_totals(_totals(f, pi, sel, y, parts))
    for a, b in ((got.estimate.value, want.estimate.value), (got.estimate.lo, want.estimate.lo),
                 (got.estimate.hi, want.estimate.hi), (got.se, want.se),
                 (got.se_terms, want.se_terms), (got.proxy_mean, want.proxy_mean)):
        if b is None:
            assert a is None
        else:
            assert a == pytest.approx(b, rel=1e-9, abs=1e-13)
    assert (got.estimate.n, got.n_proxied, got.estimate.note) == (
        want.estimate.n, want.n_proxied, want.estimate.note)


@pytest.mark.parametrize("seed", range(40))
def test_the_sums_give_the_row_estimate(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 600))
    f = rng.random(n)
    pi = np.clip(rng.random(n), 0.01, 1.0)
    sel = rng.random(n) < pi
    y = (rng.random(n) < f).astype(float) if seed % 2 else np.clip(f + rng.normal(0, .2, n), 0, 1)
    _check(f, pi, sel, y, parts=1 + seed % 5)


def test_the_restated_edge_cases() -> None:
    rng = np.random.default_rng(7)
    n = 300
    f, pi = rng.random(n), np.clip(rng.random(n), 0.05, 1)
    sel = rng.random(n) < pi
    y = rng.random(n)
    _check(np.full(n, 0.4), pi, sel, y)                 # every proxy equal: a flat line
    _check(f, np.ones(n), np.ones(n, bool), y)          # a census: no sampling variance
    _check(f, pi, sel, 0.1 + 0.7 * f)                   # y on the line: no width, the note
    assert active_from_totals(_totals(f, pi, sel, 0.1 + 0.7 * f)).estimate.note == NO_RESIDUAL
    two = np.zeros(n, bool)
    two[[3, 9]] = True
    _check(f, np.full(n, 0.2), two, y)                  # two judged: an exact line
    _check(f, pi, np.zeros(n, bool), y)                 # none judged: no estimate


def test_the_counts_the_reader_prints() -> None:
    t = ActiveTotals()
    t.add_row(0.5, 0.0, False, False, None)   # budget spent: not represented
    t.add_row(0.5, 0.5, True, False, None)    # judged, no ok score: missing
    t.add_row(0.2, 0.5, True, True, 0.3)
    t.add_row(0.9, 0.5, False, True, 1.0)     # an ok score of an unselected record: a proxy
    assert (t.decided, t.unrep, t.selected, t.missing, t.kept, t.n) == (4, 1, 2, 1, 2, 1)
