"""Sufficient statistics of a sample: n, the sum and the sum of squares.

The rollups keep these per hour x score x segment, so every figure of :mod:`tracescore.stats`
computed from them gives the same answer before and after raw rows are pruned. A value type:
no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

_EPS = 2.220446049250313e-16  # float64 machine epsilon


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
        # ss - s^2/n of equal values comes out a hair off zero (either side) by cancellation:
        # within the rounding of n additions it is zero, so "no spread" is recognised as such
        spread = self.ss - self.s * self.s / self.n
        if spread <= 4 * self.n * _EPS * abs(self.ss):
            return 0.0
        return spread / (self.n - 1)

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
