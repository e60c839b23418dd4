"""Anytime-valid confidence sequences for the mean of scores in [0, 1], and the alert rule.

A monitor is checked again and again. A fixed-level test repeated every few minutes fires on
noise sooner or later; a confidence sequence (CS) is a sequence of intervals that contain the
mean at *every* time simultaneously with probability >= 1 - alpha, so it may be checked as
often as one likes (Ville's inequality for a nonnegative supermartingale).

The default alert rule (``ThresholdMonitor``)
---------------------------------------------
1. The score stream is cut into tumbling windows (a number of observations, or the caller's
   time windows via ``new_window()``); window k = 1, 2, ... gets the error budget
   ``window_alpha(alpha, k) = alpha / (k (k + 1))`` (or the heavier-tailed
   ``window_alpha_log``: ``schedule="log"``), which sums to alpha over the monitor's life. A
   window that ends with fewer than ``min_n`` observations could not alert and spends nothing:
   the next window keeps its index.
2. Within window k the observations are fed, in arrival order, to a PrPl-EB confidence sequence
   (``EBSequence``) at level window_alpha(alpha, k); it may be checked after every observation.
3. ALERT when the whole interval lies beyond the threshold (for "mean below 0.80": its upper
   end is below 0.80). WARNING, labelled as such, when only the window's mean is beyond it.
   NO_DATA while the window holds fewer than ``min_n`` observations (the previous window's
   final status is reported meanwhile, so a standing alert does not vanish at each rollover).
4. Guarantee: if the mean never crosses the threshold (each observation's conditional mean
   stays on the healthy side, not necessarily constant), P(any ALERT over the monitor's whole
   life) <= sum_k window_alpha(alpha, k) = alpha. The CS guarantee also holds for a mean that
   moves within a window, for the (lambda-weighted) average of the window's means
   (Waudby-Smith & Ramdas 2023, sec. 3.4), so a false alert needs that average beyond the
   threshold, which a healthy stream cannot produce.
``BaselineMonitor`` is the same rule against a baseline sample instead of a fixed threshold:
window k spends window_alpha(alpha, k) / 2 on the current window's CS and the other half on a
fixed-sample empirical Bernstein bound for the baseline's mean (Maurer & Pontil 2009, Thm. 4),
so the union bound still gives <= alpha over the life, even if the baseline changes between
windows (it is fixed within one).

Why windows, and why not a running intersection: a CS over the monitor's whole life would
estimate the all-time mean, which a recent drop hardly moves; windows keep the estimate
current. The running intersection of a CS is valid for a constant mean, but it turns empty
when the mean moves, which is what a monitor exists to catch, so the interval reported is the
one at the current time.

The pieces, with the papers they come from (their maths is in :mod:`tracescore.stats.confseq`;
this module keeps the monitors that run them window by window):

- ``EBSequence``: the predictable plug-in empirical Bernstein CS (PrPl-EB) of
  I. Waudby-Smith and A. Ramdas, "Estimating means of bounded random variables by betting",
  JRSS-B 86(1), 2024 (arXiv:2010.09686), Theorem 2 with the bets lambda_t of eqs. (15)-(16)
  and truncation c = 1/2. It needs the observations in order but keeps only six running sums,
  so its state is a small JSON object.
- ``mixture_radius``: the two-sided normal-mixture (Robbins) boundary for 1/2-sub-Gaussian
  increments (any variable in [0, 1], by Hoeffding's lemma) of S. R. Howard, A. Ramdas,
  J. McAuliffe and J. Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence
  sequences", Ann. Statist. 49(2), 2021, eq. (14). It depends on n and the sum only, so it can
  be evaluated from rollups in any order; it ignores the variance, so it is wider than
  PrPl-EB for scores with small spread.
- ``window_alpha``: alpha spending across windows by the union bound.

Everything here is pure computation on the caller's thread: no I/O, no locks. Monitor objects
are not thread-safe; one evaluator owns a monitor at a time (the lease in monitor/state.py).
numpy is imported lazily, inside the functions that need it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..stats.confseq import (
    SCHEDULES,
    Direction,
    EBSequence,
    check_alpha,
    check_direction,
    empirical_bernstein_bound,
    spend,
)
from ..stats.estimate import CarriesEstimate, Estimate
from ..stats.moments import Moments

OK = "OK"
WARNING = "WARNING"
ALERT = "ALERT"
NO_DATA = "NO_DATA"
STATES = (OK, WARNING, ALERT, NO_DATA)


#: the ``method`` of a :class:`Status`'s estimate
CS_METHOD = "anytime-valid empirical-Bernstein confidence sequence"


@dataclass(frozen=True, slots=True)
class Status(CarriesEstimate):
    """A monitor's state now, with the window's estimate: its mean (``value``), interval and
    n, read through ``estimate``."""

    state: str
    estimate: Estimate

    def to_json(self) -> list[Any]:
        """The stored form (in a monitor's saved test state): [state, mean, lo, hi, n]."""
        return [self.state, self.value, self.lo, self.hi, self.n]

    @classmethod
    def from_json(cls, data: Any, method: str = CS_METHOD) -> Status:
        state, value, lo, hi, n = data
        return cls(str(state), Estimate(int(n), value, lo, hi, method))


def _status_from_json(data: Any) -> Status | None:
    return None if data is None else Status.from_json(data)


class _WindowedMonitor:
    """Tumbling windows, each with its own EBSequence at its share of alpha."""

    kind = ""

    def __init__(self, direction: Direction, alpha: float, window: int | None, min_n: int,
                 schedule: str = "quadratic") -> None:
        check_direction(direction)
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        self.schedule = schedule
        check_alpha(alpha)
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 observations or None, got {window!r}")
        if min_n < 1:
            raise ValueError(f"min_n must be >= 1, got {min_n!r}")
        self.direction: Direction = direction
        self.alpha = alpha
        self.window = window
        self.min_n = min_n
        self.window_index = 1
        self._prev: Status | None = None
        self._seq = EBSequence(self._sequence_alpha(1))

    def _sequence_alpha(self, k: int) -> float:
        return spend(self.alpha, k, self.schedule)

    @property
    def window_alpha(self) -> float:
        """The error budget of the current window."""
        return spend(self.alpha, self.window_index, self.schedule)

    @property
    def carried(self) -> bool:
        """True while status() reports the previous window (the current one has < min_n)."""
        return self._seq.n < self.min_n and self._prev is not None

    def update(self, xs: Iterable[float]) -> None:
        """Feed observations in arrival order; rolls to a new window every ``window`` of them.

        Raises ValueError, adding none, if any value is outside [0, 1].
        """
        vals = [float(v) for v in xs]
        for v in vals:
            if not 0.0 <= v <= 1.0:  # also rejects NaN
                raise ValueError(f"observation {v!r} is outside [0, 1]: scores fed to a "
                                 "monitor must be rescaled or clamped to [0, 1] first")
        while vals:
            room = len(vals) if self.window is None else self.window - self._seq.n
            self._seq.update(vals[:room])
            vals = vals[room:]
            if self.window is not None and self._seq.n >= self.window:
                self.new_window()

    def new_window(self) -> None:
        """Close the current window and start the next (with a smaller share of alpha).

        A window that ended with fewer than ``min_n`` observations could not alert (its status
        was NO_DATA throughout), so it spent none of its budget: the next window reuses its
        index and share. A quiet night or an outage does not shorten the monitor's life."""
        if self._seq.n:
            self._prev = self._window_status()
        if self._seq.n >= self.min_n:
            self.window_index += 1
        self._seq = EBSequence(self._sequence_alpha(self.window_index))

    def status(self) -> Status:
        """OK / WARNING / ALERT / NO_DATA for the current window (see the module docstring)."""
        if self._seq.n < self.min_n and self._prev is not None:
            return self._prev
        return self._window_status()

    def _window_status(self) -> Status:
        seq = self._seq
        mean = seq.mean
        if mean is None:
            return Status(NO_DATA, Estimate.missing(CS_METHOD))
        lo, hi = seq.interval()
        # The sequence is centred on the bet-weighted mean, which leaves the plain mean (the
        # figure shown beside it) outside when the values drift within the window ("mean 0.600
        # [0.632, 0.726]"). The interval reported, and judged, is the hull of both: still a
        # valid confidence sequence (a superset), and its ALERTs a subset of the sequence's, so
        # the lifetime bound holds and no verdict stands on an interval that leaves out the mean
        lo, hi = min(lo, mean), max(hi, mean)
        est = Estimate(seq.n, mean, lo, hi, CS_METHOD)
        return Status(NO_DATA if seq.n < self.min_n else self._judge(mean, lo, hi), est)

    def _judge(self, mean: float, lo: float, hi: float) -> str:
        raise NotImplementedError

    def _base_json(self) -> dict[str, Any]:
        return {"v": 1, "kind": self.kind, "direction": self.direction, "alpha": self.alpha,
                "window": self.window, "min_n": self.min_n, "k": self.window_index,
                "schedule": self.schedule,
                "seq": self._seq.to_json(),
                "prev": None if self._prev is None else self._prev.to_json()}

    def _load_base(self, data: Mapping[str, Any]) -> None:
        # a state saved before schedules existed keeps the schedule it started with: switching
        # mid-life would break the sum over its windows
        self.schedule = str(data.get("schedule", "quadratic"))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}")
        self.window_index = int(data["k"])
        self._seq = EBSequence.from_json(data["seq"])
        self._prev = _status_from_json(data["prev"])


def _check_kind(data: Mapping[str, Any], kind: str) -> None:
    if data.get("v") != 1 or data.get("kind") != kind:
        raise ValueError(f"not a version-1 {kind} monitor state: "
                         f"v={data.get('v')!r}, kind={data.get('kind')!r}")


class ThresholdMonitor(_WindowedMonitor):
    """"Mean below (or above) a threshold", alerting with life-long false-alarm rate <= alpha.

    ALERT when the current window's CS at level window_alpha(alpha, k) lies entirely beyond the
    threshold; WARNING when only the window's mean does; NO_DATA below min_n observations.
    ``window``: observations per window, or None to let the caller call ``new_window()`` (e.g.
    at each hour or day). Serialisable with ``to_json``/``from_json``. Not thread-safe.
    """

    kind = "threshold"

    def __init__(self, threshold: float, direction: Direction = "below", alpha: float = 0.05,
                 window: int | None = None, min_n: int = 30, schedule: str = "quadratic") -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")
        self.threshold = threshold
        super().__init__(direction, alpha, window, min_n, schedule)

    def _judge(self, mean: float, lo: float, hi: float) -> str:
        if self.direction == "below":
            return ALERT if hi < self.threshold else WARNING if mean < self.threshold else OK
        return ALERT if lo > self.threshold else WARNING if mean > self.threshold else OK

    def to_json(self) -> dict[str, Any]:
        return {**self._base_json(), "threshold": self.threshold}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ThresholdMonitor:
        _check_kind(data, cls.kind)
        mon = cls(float(data["threshold"]), data["direction"], float(data["alpha"]),
                  data["window"], int(data["min_n"]))
        mon._load_base(data)
        return mon


class BaselineMonitor(_WindowedMonitor):
    """"Regressed against a baseline" (the previous 7 days, the previous release).

    The baseline is a fixed sample given as Moments of values in [0, 1]. Window k spends
    window_alpha(alpha, k) / 2 on the current window's CS and window_alpha(alpha, k) / 2 on the
    baseline's one-sided empirical Bernstein bound. direction "below" (lower is worse): ALERT when
    the CS's upper end < baseline lower bound - min_effect; WARNING when only the current mean
    < baseline mean - min_effect. "above" mirrors it. By the union bound the probability of any
    false ALERT over the life is <= alpha when the current mean never regresses by more than
    min_effect. ``new_window(baseline)`` may replace the baseline for the next window.
    status() reports the current window's mean and CS; ``baseline_bound`` the bound compared.
    """

    kind = "baseline"

    def __init__(self, baseline: Moments, direction: Direction = "below", alpha: float = 0.05,
                 min_effect: float = 0.0, window: int | None = None, min_n: int = 30,
                 schedule: str = "quadratic") -> None:
        if min_effect < 0:
            raise ValueError(f"min_effect must be >= 0, got {min_effect!r}")
        self.baseline = self._checked(baseline)
        self.min_effect = min_effect
        super().__init__(direction, alpha, window, min_n, schedule)

    @staticmethod
    def _checked(baseline: Moments) -> Moments:
        mean = baseline.mean
        if mean is not None and not 0.0 <= mean <= 1.0:
            raise ValueError(f"baseline mean {mean!r} is outside [0, 1]")
        return baseline

    def _sequence_alpha(self, k: int) -> float:
        return spend(self.alpha, k, self.schedule) / 2

    @property
    def baseline_bound(self) -> float:
        """The baseline's lower ("below") or upper ("above") bound used in this window."""
        return empirical_bernstein_bound(self.baseline, self.window_alpha / 2, self.direction)

    def new_window(self, baseline: Moments | None = None) -> None:
        """Start the next window, optionally against a new baseline sample."""
        super().new_window()
        if baseline is not None:
            self.baseline = self._checked(baseline)

    def _window_status(self) -> Status:
        status = super()._window_status()
        if status.state != NO_DATA and self.baseline.n < self.min_n:
            return replace(status, state=NO_DATA)
        return status

    def _judge(self, mean: float, lo: float, hi: float) -> str:
        base_mean = self.baseline.mean
        if base_mean is None:
            return NO_DATA
        bound, eff = self.baseline_bound, self.min_effect
        if self.direction == "below":
            return ALERT if hi < bound - eff else WARNING if mean < base_mean - eff else OK
        return ALERT if lo > bound + eff else WARNING if mean > base_mean + eff else OK

    def to_json(self) -> dict[str, Any]:
        b = self.baseline
        return {**self._base_json(), "min_effect": self.min_effect,
                "baseline": {"n": b.n, "s": b.s, "ss": b.ss}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BaselineMonitor:
        _check_kind(data, cls.kind)
        b = data["baseline"]
        mon = cls(Moments(int(b["n"]), float(b["s"]), float(b["ss"])), data["direction"],
                  float(data["alpha"]), float(data["min_effect"]), data["window"],
                  int(data["min_n"]))
        mon._load_base(data)
        return mon
