"""The pure-Python Student t and normal functions (tracescore/stats/student_t.py) against
scipy.special itself, on a grid of degrees of freedom and probabilities."""

from __future__ import annotations

import math

import pytest
import scipy.special as sp

from tracescore.stats.student_t import ndtr, ndtri, stdtr, stdtrit

DFS = [1, 1.5, 2, 2.5, 3, 4, 5, 7, 10, 19, 30, 49, 100, 999, 1e4, 99_999, 1e5, 1e6, 1e8,
       1e11, 1e13, 1e16]
PS = [1e-300, 1e-100, 1e-20, 1e-12, 1e-9, 1e-6, 1e-4, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.45,
      0.49999, 0.5, 0.6, 0.75, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999, 0.9999, 1 - 1e-7]
TS = [-50, -10, -5, -3, -2, -1.96, -1, -0.5, -0.01, 0, 0.01, 0.5, 1, 2, 3, 5, 10, 50]


@pytest.mark.parametrize("df", DFS)
def test_quantile_matches_scipy(df: float) -> None:
    for p in PS:
        ours, ref = stdtrit(df, p), float(sp.stdtrit(df, p))
        # ours is a root of scipy's own CDF, to 1e-9 of the tail probability
        back = float(sp.stdtr(df, ours))
        assert abs(back - p) <= 1e-9 * min(p, 1 - p) + 1e-15, (df, p, ours, back)
        if math.isclose(ours, ref, rel_tol=1e-9, abs_tol=1e-300):
            continue
        # where scipy's inversion is off (near p = 0.5 by ~1e-12 absolute; in the far tail
        # of small df by a factor, e.g. df 2.5 at p 1e-200), its own CDF says ours is the
        # better root
        assert abs(back - p) <= abs(float(sp.stdtr(df, ref)) - p), (df, p, ours, ref)


@pytest.mark.parametrize("df", DFS)
def test_cdf_matches_scipy(df: float) -> None:
    for t in TS:
        assert math.isclose(stdtr(df, t), float(sp.stdtr(df, t)), rel_tol=1e-9,
                            abs_tol=1e-300), (df, t)


def test_normal_and_edges() -> None:
    for x in [-37, -30, -8.5, -3, -1, 0, 0.3, 2, 9]:
        assert math.isclose(ndtr(x), float(sp.ndtr(x)), rel_tol=1e-12, abs_tol=1e-300)
    for p in [1e-300, 1e-12, 0.025, 0.5, 0.975, 1 - 1e-12]:
        assert math.isclose(ndtri(p), float(sp.ndtri(p)), rel_tol=1e-13, abs_tol=1e-15)
    assert ndtri(0) == -math.inf and ndtri(1) == math.inf
    assert stdtrit(5, 0) == -math.inf and stdtrit(5, 1) == math.inf and stdtrit(5, 0.5) == 0
    assert math.isnan(stdtrit(5, math.nan)) and math.isnan(stdtr(5, math.nan))
    assert stdtr(3, math.inf) == 1.0 and stdtr(3, -math.inf) == 0.0
    with pytest.raises(ValueError):
        stdtrit(0, 0.5)
    with pytest.raises(ValueError):
        stdtr(-1, 0.5)
