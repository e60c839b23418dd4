"""What a monitor can see: its minimum detectable effect for the traffic it has.

An anytime-valid monitor pays for being checked at any time over its whole life with a
shrinking share of alpha per window (:func:`.confseq.spend`). With few records per window its
interval is then too wide to ever lie beyond the threshold for the drop it is meant to catch:
the monitor is blind, and says nothing. This module computes, from a window's n, the alpha the
window may spend and the score's spread, the smallest drop the window's test detects with
probability ``POWER`` by the window's end (the *minimum detectable effect*, MDE), and how many
records a window needs for a given drop — so ``tracescore check`` can state it and warn.

The arithmetic is the PrPl-EB confidence sequence's (:mod:`.confseq`, Waudby-Smith & Ramdas
2024, Theorem 2, eqs. (15)-(16)) with every squared deviation replaced by its expectation, the
variance ``var``: the bets are then deterministic, the margin is
``(log(2/a) + var * sum psi_E(lambda_t)) / sum lambda_t``, and the centre (the lambda-weighted
mean) has standard deviation ``sd * sqrt(sum lambda_t^2) / sum lambda_t``. The MDE is
``margin + z_POWER * that``: a drop this large puts the interval's far end beyond the level
with probability about ``POWER`` at the window's end (and a monitor checked along the way
only does better). bench/monitor_sim.py checks the figure against simulated streams.

Pure computation (numpy imported lazily); thread-safe.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from .confseq import DEFAULT_TRUNCATION, check_alpha

#: The probability of detection the MDE is stated for.
POWER = 0.8
#: The drop a monitor is meant to catch when it does not say (``detect`` in its declaration).
DEFAULT_DETECT = 0.05
#: Largest n searched for (a window that needs more is reported as needing "more than" it).
MAX_N = 1_000_000
#: A score with no spread seen yet is assumed to have this variance (a Beta-like score with
#: sd 0.15) rather than none; rates use p (1 - p) from their own data.
DEFAULT_VAR = 0.15 ** 2


def _sums(n: int, alpha: float, var: float, truncation: float) -> tuple[float, float, float]:
    """(sum lambda, sum psi_E(lambda), sum lambda^2) over t = 1..n with expected deviations."""
    import numpy as np

    t = np.arange(1, n + 1, dtype=float)
    sigma2_prev = (0.25 + var * (t - 1)) / t
    lam = np.minimum(truncation, np.sqrt(2 * math.log(2 / alpha) / (sigma2_prev * t
                                                                      * np.log1p(t))))
    psi = -np.log1p(-lam) - lam
    return float(lam.sum()), float(psi.sum()), float((lam * lam).sum())


def margin(n: int, alpha: float, var: float,
           truncation: float = DEFAULT_TRUNCATION) -> float:
    """The expected half-width of a PrPl-EB sequence at level ``alpha`` after ``n``
    observations of variance ``var`` (inf for n = 0)."""
    check_alpha(alpha)
    if n <= 0:
        return math.inf
    sl, sp, _ = _sums(n, alpha, max(var, 1e-12), truncation)
    return (math.log(2 / alpha) + max(var, 0.0) * sp) / sl


def detectable(n: int, alpha: float, var: float, *, power: float = POWER,
               truncation: float = DEFAULT_TRUNCATION) -> float:
    """The minimum detectable effect: the distance beyond the level at which a window of
    ``n`` observations (variance ``var``), tested at ``alpha``, alerts by its end with
    probability about ``power``. inf for n = 0."""
    check_alpha(alpha)
    if n <= 0:
        return math.inf
    v = max(var, 1e-12)
    sl, sp, sl2 = _sums(n, alpha, v, truncation)
    m = (math.log(2 / alpha) + v * sp) / sl
    return m + NormalDist().inv_cdf(power) * math.sqrt(v * sl2) / sl


def records_needed(gap: float, alpha: float, var: float, *, extra: float = 0.0,
                   power: float = POWER) -> int | None:
    """The fewest observations a window needs so that ``detectable(n) + extra <= gap``;
    None when no n up to :data:`MAX_N` does (or ``gap <= extra``). Cheap: an exponential
    then a binary search, O(answer) numpy work per step, and cached (a monitor asks it at
    every evaluation with the same inputs, its variance rounded to 3 significant digits)."""
    if gap - extra <= 0:
        return None
    return _needed(round(gap - extra, 6), alpha, float(f"{max(var, 1e-12):.3g}"), power)


@functools.lru_cache(maxsize=4096)
def _needed(room: float, alpha: float, var: float, power: float) -> int | None:
    lo, hi = 1, 64
    while detectable(hi, alpha, var, power=power) > room:
        if hi >= MAX_N:
            return None
        lo, hi = hi + 1, min(hi * 4, MAX_N)
    while lo < hi:  # the MDE falls with n
        mid = (lo + hi) // 2
        if detectable(mid, alpha, var, power=power) <= room:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Sight:
    """A monitor's sight now: with ``n`` records a window at ``alpha`` (its window's share)
    and variance ``var``, it detects a drop of ``mde`` (with probability ``POWER``); it is
    meant to catch ``gap``; a window needs ``needed`` records for that (None: unreachable)."""

    n: int
    alpha: float
    var: float
    mde: float
    gap: float
    needed: int | None

    @property
    def blind(self) -> bool:
        """Whether the monitor cannot see the drop it is meant to catch."""
        return not self.mde <= self.gap

    def text(self) -> str:
        sd = math.sqrt(max(self.var, 0.0))
        if not math.isfinite(self.mde):
            base = f"sees nothing (no records in a window, alpha {self.alpha:.2g})"
        else:
            base = (f"detects a drop of {self.mde:.3f} with {POWER:.0%} probability "
                    f"(n={self.n} a window, alpha {self.alpha:.2g}, sd {sd:.3f})")
        if not self.blind:
            return base
        need = (f"a window needs about {self.needed:,} records" if self.needed is not None
                else "no window size is enough")
        return f"{base}: BLIND to the {self.gap:g} it is meant to catch ({need})"

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "alpha": self.alpha, "sd": math.sqrt(max(self.var, 0.0)),
                "mde": self.mde if math.isfinite(self.mde) else None, "gap": self.gap,
                "needed": self.needed, "blind": self.blind}


def sight(n: int, alpha: float, var: float | None, gap: float, *,
          extra: float = 0.0) -> Sight:
    """:class:`Sight` for a window of ``n`` records at ``alpha`` (``extra``: what the
    comparison adds to the drop, e.g. a baseline bound's distance from its mean plus
    ``min_effect``)."""
    v = DEFAULT_VAR if var is None or not math.isfinite(var) else max(var, 1e-6)
    mde = detectable(n, alpha, v) + extra if n > 0 else math.inf
    return Sight(n, alpha, v, mde, gap, records_needed(gap, alpha, v, extra=extra))
