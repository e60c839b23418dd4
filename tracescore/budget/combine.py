"""The judge budget's learned proxy: the features of :mod:`.features` combined into one number
in [0, 1], fitted to the judge's scores of the records judged so far.

Pure computation (numpy, lazily imported). For each set of features a record can have (a
metric's records usually all have the same: with or without ground truths, with or without
an embedder) :func:`fit_groups` fits a weighted least-squares line

    y ≈ β₀ + Σ_k β_k·x_k

over the judged records that have exactly that set, y the judge's score on [0, 1], weights
1/π (capped at :data:`W_CAP`: the judged records stand for the traffic, as in the estimate)
and a small ridge penalty (not on β₀). A fit is kept only when it predicts the judge better
than the line through the overlap proxy alone, by leave-one-out error (closed form, through
the hat matrix; at least :data:`MARGIN` lower): a feature set that does not help is never used, and the proxy stays
:func:`.proxy.overlap_proxy`. It needs :data:`MIN_FIT` judged records (and 8 per
coefficient) first.

The neighbours' verdicts (:mod:`.neighbours`, :data:`OPTIONAL`) are extra features of a set:
the set is fitted with each subset of them and without them, and one with some of them is
kept only when its leave-one-out error is :data:`MARGIN` below the fit without them (and the
overlap line) and their coefficients are positive (the judge agreeing with its verdicts on
similar records; a negative one only fits noise). A training record's neighbour features
come from the records judged before it (:func:`.neighbours.ordered_means`).

Validity: the fit uses only records judged before the decision it serves, and the value it
gives is what the decision stores (``judge_decisions.proxy``); the estimate fits its own line
through the stored values (:mod:`tracescore.stats.active`), so the proxy need not be
calibrated, and a proxy whose definition changes between refits is still a number fixed
before each record's selection.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MARGIN", "MIN_FIT", "OPTIONAL", "RIDGE", "W_CAP", "Combined", "fit_groups"]

#: judged records a feature set needs before it is fitted
MIN_FIT = 40
#: the largest weight 1/π of a record in the fit
W_CAP = 50.0
#: ridge penalty, relative to the mean diagonal of XᵀWX
RIDGE = 1e-3
#: a fit is kept when its leave-one-out mean squared error is this much below the overlap
#: proxy's line's (a feature that only fits noise does not get used)
MARGIN = 0.02
#: features a fit uses only when they beat the fit without them (:mod:`.neighbours`)
OPTIONAL = ("nn_answer_contexts", "nn_question_answer")

#: one judged record: (its features, its overlap proxy, π, the judge's score on [0, 1])
Sample = tuple[Mapping[str, float], float, float, float]


@dataclass(frozen=True)
class Combined:
    """A fitted combination: ``beta`` over ``(1, *keys)``; its leave-one-out RMS error
    ``loo_rmse`` and that of the line through the overlap proxy alone, on ``n`` records."""

    keys: tuple[str, ...]
    beta: tuple[float, ...]
    n: int
    loo_rmse: float
    base_rmse: float

    def predict(self, features: Mapping[str, float]) -> float:
        v = self.beta[0] + sum(b * float(features[k]) for b, k in zip(self.beta[1:], self.keys))
        return min(1.0, max(0.0, v)) if math.isfinite(v) else 0.5


def _wls_loo(X: Any, y: Any, w: Any, ridge: float) -> tuple[Any, float]:
    """(β, weighted leave-one-out mean squared error) of the ridge WLS fit of y on X (first
    column the intercept, not penalised)."""
    import numpy as np

    xtw = X.T * w
    A = xtw @ X
    pen = ridge * float(np.trace(A)) / A.shape[0] * np.eye(A.shape[0])
    pen[0, 0] = 0.0
    Ainv = np.linalg.pinv(A + pen)
    beta = Ainv @ (xtw @ y)
    h = np.einsum("ij,jk,ik->i", X, Ainv, X) * w
    resid = (y - X @ beta) / np.clip(1.0 - h, 1e-6, None)
    return beta, float((w * resid * resid).sum() / w.sum())


def _fit(rows: Sequence[Sample], use: tuple[str, ...], y: Any, w: Any, ridge: float,
         min_fit: int) -> tuple[Any, float] | None:
    """:func:`_wls_loo` of the features ``use`` of ``rows`` (None: none, too few rows for
    them, or not finite)."""
    import numpy as np

    if not use or len(rows) < max(min_fit, 8 * (len(use) + 1)):
        return None
    X = np.array([[1.0, *(float(f[k]) for k in use)] for f, _, _, _ in rows])
    return _wls_loo(X, y, w, ridge) if np.isfinite(X).all() else None


def fit_groups(samples: Sequence[Sample], min_fit: int = MIN_FIT,
               ridge: float = RIDGE, optional: Sequence[str] = OPTIONAL
               ) -> dict[tuple[str, ...], Combined]:
    """The kept fit of each feature set of ``samples`` (module docstring). A feature set with
    ``optional`` features (the neighbours' verdicts) is fitted with each subset of them and
    without them: one with some is kept only when its leave-one-out error is :data:`MARGIN`
    below that of the fit without them (and of the overlap line); else the fit without them
    (its ``keys`` leave them out) is that set's, when kept."""
    import itertools

    import numpy as np

    groups: dict[tuple[str, ...], list[Sample]] = {}
    for s in samples:
        if s[2] > 0:
            groups.setdefault(tuple(sorted(s[0])), []).append(s)
    out: dict[tuple[str, ...], Combined] = {}
    for keys, rows in groups.items():
        if not keys or len(rows) < max(min_fit, 16):
            continue
        base = np.array([[1.0, float(o)] for _, o, _, _ in rows])
        y = np.array([float(r[3]) for r in rows])
        w = np.minimum(1.0 / np.array([float(r[2]) for r in rows]), W_CAP)
        if not np.isfinite(y).all():
            continue
        _, base_mse = _wls_loo(base, y, w, ridge)

        plain = tuple(k for k in keys if k not in optional)
        extra = [k for k in keys if k in optional]
        best: tuple[tuple[str, ...], Any, float] | None = None
        got = _fit(rows, plain, y, w, ridge, min_fit)
        if got is not None and got[1] < (1.0 - MARGIN) * base_mse:
            best = (plain, got[0], got[1])
        bar = base_mse if got is None else min(base_mse, got[1])
        nn: tuple[tuple[str, ...], Any, float] | None = None
        for r in range(1, len(extra) + 1):
            for sub in itertools.combinations(extra, r):
                use = tuple(sorted((*plain, *sub)))
                got = _fit(rows, use, y, w, ridge, min_fit)
                # (a similar record judged better making this one worse is noise: the
                # neighbours' coefficients must be positive)
                pos = got is not None and all(
                    float(got[0][1 + i]) > 0 for i, k in enumerate(use) if k in sub)
                if got is not None and pos and (nn is None or got[1] < nn[2]):
                    nn = (use, got[0], got[1])
        if nn is not None and nn[2] < (1.0 - MARGIN) * bar:
            best = nn
        if best is not None:
            use, beta, mse = best
            out[keys] = Combined(use, tuple(float(b) for b in beta), len(rows),
                                 math.sqrt(mse), math.sqrt(base_mse))
    return out
