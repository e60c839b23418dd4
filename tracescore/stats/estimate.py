"""The one estimate type of the read side, and the difference of two.

Every number that reports, checks, monitors and trust pages print with an interval is an
:class:`Estimate`: a value, its interval ``lo``..``hi`` (None where it cannot be computed), the
n it rests on, the method that made the interval, a note a reader must know to read it right,
and what it speaks for (``population``: e.g. "judge scores", "human labels"; "" when the
context says it). A value type: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its n and confidence interval (None where it cannot be computed).

    n: the observations it rests on; method: how ``lo``..``hi`` was computed (a reader's words:
    "t", "wilson", "anytime-valid CS ...", "count (no interval ...)"); note: what a reader must
    know to read the interval right (e.g. :data:`tracescore.stats.NO_SPREAD`), or "";
    population: what it speaks for ("judge scores", "human labels", a segment), or "" when the
    carrier says it. ``to_json`` writes ``note`` and ``population`` only when set, so the JSON
    of every existing output keeps its keys.
    """

    n: int
    value: float | None
    lo: float | None
    hi: float | None
    method: str
    note: str = ""
    population: str = ""

    @classmethod
    def missing(cls, method: str, n: int = 0, value: float | None = None) -> Estimate:
        """An estimate without an interval (too few observations, no data): ``value`` may
        still carry the plain figure seen so far."""
        return cls(n, value, None, None, method)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "value": self.value, "lo": self.lo, "hi": self.hi,
                               "method": self.method}
        if self.note:
            out["note"] = self.note
        if self.population:
            out["population"] = self.population
        return out


class _CarriesInterval:
    """Read-through of a carrier's ``estimate``: value, interval and method."""

    __slots__ = ()
    estimate: Estimate

    @property
    def value(self) -> float | None:
        return self.estimate.value

    @property
    def lo(self) -> float | None:
        return self.estimate.lo

    @property
    def hi(self) -> float | None:
        return self.estimate.hi

    @property
    def method(self) -> str:
        return self.estimate.method


class CarriesEstimate(_CarriesInterval):
    """Read-through of a carrier's :class:`Estimate` (a dataclass with an ``estimate`` field):
    ``value``, ``lo``, ``hi``, ``n`` and ``method`` as attributes, so its readers and its JSON
    keep their names while the estimate travels as one object."""

    __slots__ = ()

    @property
    def n(self) -> int:
        return self.estimate.n


class CarriesStoredEstimate(_CarriesInterval):
    """:class:`CarriesEstimate` for a stored row whose n column may be NULL (a monitor state
    written before every evaluation stored its n): the carrier's ``n_stored`` field says
    whether the row had one; ``n`` reads None where it had not (the estimate's own ``n`` is
    then 0: :meth:`Estimate.missing`), so what printed null still prints null."""

    __slots__ = ()
    n_stored: bool

    @property
    def n(self) -> int | None:
        return self.estimate.n if self.n_stored else None


def stored_estimate(value: float | None, lo: float | None, hi: float | None, n: int | None,
                    method: str = "") -> tuple[Estimate, bool]:
    """A stored row's ``value, lo, hi, n`` columns as (:class:`Estimate`, n_stored): a NULL
    n becomes n = 0 and ``n_stored`` False (see :class:`CarriesStoredEstimate`)."""
    return Estimate(0 if n is None else int(n), value, lo, hi, method), n is not None


@dataclass(frozen=True)
class Difference:
    """current - baseline, with its confidence interval and two-sided p-value."""

    estimate: float | None
    lo: float | None
    hi: float | None
    p_value: float | None
    method: str
    #: what a reader must know to read the interval right (e.g. :data:`NO_SPREAD`), or ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"estimate": self.estimate, "lo": self.lo, "hi": self.hi,
                               "p_value": self.p_value, "method": self.method}
        if self.note:
            out["note"] = self.note
        return out
