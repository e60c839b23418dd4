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
    """A point estimate with its n and confidence interval (None where it cannot be computed)."""

    n: int
    value: float | None
    lo: float | None
    hi: float | None
    method: str
    #: what a reader must know to read the interval right (e.g. :data:`NO_SPREAD`), or ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "value": self.value, "lo": self.lo, "hi": self.hi,
                               "method": self.method}
        if self.note:
            out["note"] = self.note
        return out


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
