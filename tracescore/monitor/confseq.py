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

The pieces, with the papers they come from:

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

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from tracescore.monitor.stats import Moments

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

OK = "OK"
WARNING = "WARNING"
ALERT = "ALERT"
NO_DATA = "NO_DATA"
STATES = (OK, WARNING, ALERT, NO_DATA)

# Truncation of the bets: the paper suggests c = 1/2 or 3/4; 1/2 is also the authors' default in
# their `confseq` package and keeps -log(1 - lambda) - lambda, the variance penalty, small.
DEFAULT_TRUNCATION = 0.5

Direction = Literal["below", "above"]


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def window_alpha(alpha: float, k: int) -> float:
    """The error budget of window k = 1, 2, ...: alpha / (k (k + 1)), which sums to alpha.

    The classes' default schedule (``"quadratic"``), kept for their callers and for states
    saved before session 11. It decays fast: a monitor of hourly windows gives window 168 (a
    week in) alpha / 28,392, and a window of a few hundred records can then no longer see a
    drop of 0.05. The monitors of ``tracescore check`` use :func:`window_alpha_log` and longer
    windows when a window holds too few records (:mod:`.sight`).
    """
    _check_alpha(alpha)
    if k < 1:
        raise ValueError(f"window index k starts at 1, got {k!r}")
    return alpha / (k * (k + 1))


#: Spending schedules across windows (both sum to alpha over an unbounded life):
#: ``"quadratic"`` is :func:`window_alpha`; ``"log"`` is :func:`window_alpha_log`.
SCHEDULES = ("quadratic", "log")


def window_alpha_log(alpha: float, k: int) -> float:
    """A heavier-tailed budget for window k = 1, 2, ...:
    alpha * ln 2 * (1 / ln(k + 1) - 1 / ln(k + 2)), about alpha ln 2 / (k ln^2 k).

    The terms telescope, so the first K sum to alpha (1 - ln 2 / ln(K + 2)) < alpha, exactly
    alpha in the limit. Against alpha / (k (k + 1)) it leaves window 24 (a day of hourly
    windows) 1.6x, window 168 (a week) 4.4x and window 720 (a month) 11x more alpha, so
    log(1/alpha_k), which sets the width of a window's interval, grows like log k instead of
    2 log k; window 1 gets 0.74x. bench/monitor_sim.py (session 11) measures the difference.
    """
    _check_alpha(alpha)
    if k < 1:
        raise ValueError(f"window index k starts at 1, got {k!r}")
    return alpha * math.log(2) * (1 / math.log(k + 1) - 1 / math.log(k + 2))


def spend(alpha: float, k: int, schedule: str = "quadratic") -> float:
    """Window k's budget under ``schedule`` (one of :data:`SCHEDULES`)."""
    if schedule == "log":
        return window_alpha_log(alpha, k)
    if schedule == "quadratic":
        return window_alpha(alpha, k)
    raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")


def mixture_rho(n_opt: float, alpha: float) -> float:
    """The mixture precision rho that makes ``mixture_radius`` tightest near n = n_opt.

    rho = v / (2 log(1/alpha) + log(1 + 2 log(1/alpha))) at intrinsic time v = n_opt / 4: the
    approximate minimiser of the boundary at v (Howard et al. 2021, sec. 3.5; the same formula
    as `TwoSidedNormalMixture::best_rho` in the authors' confseq package). The boundary is
    valid for every rho > 0; rho only decides where it is tightest.
    """
    _check_alpha(alpha)
    if n_opt <= 0:
        raise ValueError(f"n_opt must be > 0, got {n_opt!r}")
    log_inv = math.log(1 / alpha)
    return (n_opt / 4) / (2 * log_inv + math.log(1 + 2 * log_inv))


def mixture_radius(n: int, alpha: float, rho: float) -> float:
    """Half-width of the normal-mixture CS for a mean of [0, 1] observations after n of them.

    With S_n = sum(x_i - mu) and intrinsic time v = n / 4 (sigma = 1/2):
    P(exists n: |S_n| >= sqrt((v + rho) (log(1 + v / rho) + 2 log(1 / alpha)))) <= alpha
    (Howard et al. 2021, eq. (14), two-sided). Returns that boundary divided by n, so that
    mean +- radius is a (1 - alpha) confidence sequence; inf for n == 0.
    """
    _check_alpha(alpha)
    if rho <= 0:
        raise ValueError(f"rho must be > 0, got {rho!r}")
    if n <= 0:
        return math.inf
    v = n / 4
    return math.sqrt((v + rho) * (math.log1p(v / rho) + 2 * math.log(1 / alpha))) / n


def _eb_path(
    x: npt.NDArray[np.float64],
    alpha: float,
    truncation: float,
    state: tuple[Any, Any, Any, Any, Any, Any] | None = None,
) -> dict[str, npt.NDArray[np.float64]]:
    """PrPl-EB running sums after each observation along the last axis of x.

    state = (t, S, Q, L, LX, P) before x: the count, sum x_i, sum (x_i - mu_i)^2,
    sum lambda_i, sum lambda_i x_i and sum v_i psi_E(lambda_i), scalars or arrays of x.shape[:-1].
    Following Waudby-Smith & Ramdas, Theorem 2 and eqs. (15)-(16):
      mu_t = (1/2 + sum_{i<=t} x_i) / (t + 1),   sigma2_t = (1/4 + sum_{i<=t} (x_i - mu_i)^2) / (t + 1)
      lambda_t = min(c, sqrt(2 log(2/alpha) / (sigma2_{t-1} t log(1 + t))))
      v_i psi_E(lambda_i) = 4 (x_i - mu_{i-1})^2 (-log(1 - lambda_i) - lambda_i) / 4
      CS_t = sum lambda_i x_i / sum lambda_i -+ (log(2/alpha) + sum v_i psi_E(lambda_i)) / sum lambda_i
    """
    import numpy as np

    t0, s0, q0, l0, lx0, p0 = state if state is not None else (0, 0.0, 0.0, 0.0, 0.0, 0.0)
    m = x.shape[-1]
    t = np.asarray(t0, dtype=float)[..., None] + np.arange(1, m + 1, dtype=float)
    s = np.asarray(s0, dtype=float)[..., None] + np.cumsum(x, axis=-1)
    s_prev = s - x
    mu_prev = (0.5 + s_prev) / t
    dev2 = (x - (0.5 + s) / (t + 1)) ** 2  # (x_t - mu_t)^2, mu_t including x_t
    q = np.asarray(q0, dtype=float)[..., None] + np.cumsum(dev2, axis=-1)
    q_prev = q - dev2
    sigma2_prev = (0.25 + q_prev) / t
    lam = np.minimum(truncation, np.sqrt(2 * math.log(2 / alpha) / (sigma2_prev * t * np.log1p(t))))
    psi = (x - mu_prev) ** 2 * (-np.log1p(-lam) - lam)
    return {
        "t": t,
        "s": s,
        "q": q,
        "l": np.asarray(l0, dtype=float)[..., None] + np.cumsum(lam, axis=-1),
        "lx": np.asarray(lx0, dtype=float)[..., None] + np.cumsum(lam * x, axis=-1),
        "p": np.asarray(p0, dtype=float)[..., None] + np.cumsum(psi, axis=-1),
        "lam": lam,
    }


def eb_confidence_sequence(
    x: Any, alpha: float = 0.05, truncation: float = DEFAULT_TRUNCATION
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The PrPl-EB CS (lower, upper) after each observation along the last axis of x.

    Vectorised over leading axes (many streams at once: simulations and benchmarks); the same
    arithmetic as ``EBSequence``. Values must lie in [0, 1].
    """
    import numpy as np

    _check_alpha(alpha)
    arr = np.asarray(x, dtype=float)
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1):
        raise ValueError("observations must lie in [0, 1]; rescale or clamp scores first")
    sums = _eb_path(arr, alpha, truncation)
    centre = sums["lx"] / sums["l"]
    margin = (math.log(2 / alpha) + sums["p"]) / sums["l"]
    return np.maximum(0.0, centre - margin), np.minimum(1.0, centre + margin)


class EBSequence:
    """Incremental PrPl-EB confidence sequence for the mean of observations in [0, 1].

    ``alpha`` is the level the bets are tuned for and the default level of ``interval()``.
    Feed observations in arrival order with ``update``; ``interval()`` may be asked after any
    update, as often as wanted. The state is six running sums (``to_json``/``from_json``).
    Not thread-safe: one owner at a time.
    """

    __slots__ = ("alpha", "truncation", "n", "_s", "_q", "_l", "_lx", "_p")

    def __init__(self, alpha: float = 0.05, truncation: float = DEFAULT_TRUNCATION) -> None:
        _check_alpha(alpha)
        if not 0.0 < truncation < 1.0:
            raise ValueError(f"truncation must be in (0, 1), got {truncation!r}")
        self.alpha = alpha
        self.truncation = truncation
        self.n = 0
        self._s = self._q = self._l = self._lx = self._p = 0.0

    @property
    def mean(self) -> float | None:
        """The plain mean of the observations so far (None before the first)."""
        return self._s / self.n if self.n else None

    def update(self, xs: Iterable[float]) -> None:
        """Add observations in order. Raises ValueError (and adds none) if any is outside [0, 1]."""
        import numpy as np

        arr = np.fromiter((float(v) for v in xs), dtype=float)
        if arr.size == 0:
            return
        bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
        if bad.any():
            raise ValueError(
                f"observation {arr[bad][0]!r} is outside [0, 1]: scores fed to a confidence "
                "sequence must be rescaled or clamped to [0, 1] first")
        sums = _eb_path(arr, self.alpha, self.truncation,
                        (self.n, self._s, self._q, self._l, self._lx, self._p))
        self.n += int(arr.size)
        self._s, self._q = float(sums["s"][-1]), float(sums["q"][-1])
        self._l, self._lx, self._p = float(sums["l"][-1]), float(sums["lx"][-1]), float(sums["p"][-1])

    def interval(self, alpha: float | None = None) -> tuple[float, float]:
        """The (lower, upper) bounds now; (0, 1) before any observation.

        ``alpha`` defaults to the level the bets were tuned for; any other level is valid too
        (Theorem 2 holds for any predictable bets), only less tight.
        """
        a = self.alpha if alpha is None else alpha
        _check_alpha(a)
        if self.n == 0:
            return 0.0, 1.0
        centre = self._lx / self._l
        margin = (math.log(2 / a) + self._p) / self._l
        return max(0.0, centre - margin), min(1.0, centre + margin)

    def to_json(self) -> dict[str, Any]:
        """The state as a JSON-serialisable dict (floats round-trip exactly through json)."""
        return {"v": 1, "alpha": self.alpha, "truncation": self.truncation, "n": self.n,
                "s": self._s, "q": self._q, "l": self._l, "lx": self._lx, "p": self._p}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EBSequence:
        if data.get("v") != 1:
            raise ValueError(f"unknown EBSequence state version {data.get('v')!r}")
        seq = cls(float(data["alpha"]), float(data["truncation"]))
        seq.n = int(data["n"])
        seq._s, seq._q = float(data["s"]), float(data["q"])
        seq._l, seq._lx, seq._p = float(data["l"]), float(data["lx"]), float(data["p"])
        return seq


class Status(NamedTuple):
    """A monitor's state now, with the window's mean, its interval and n."""

    state: str
    estimate: float | None
    lo: float | None
    hi: float | None
    n: int


def _check_direction(direction: str) -> None:
    if direction not in ("below", "above"):
        raise ValueError(f"direction must be 'below' or 'above', got {direction!r}")


def _status_from_json(data: Any) -> Status | None:
    return None if data is None else Status(*data)


class _WindowedMonitor:
    """Tumbling windows, each with its own EBSequence at its share of alpha."""

    kind = ""

    def __init__(self, direction: Direction, alpha: float, window: int | None, min_n: int,
                 schedule: str = "quadratic") -> None:
        _check_direction(direction)
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        self.schedule = schedule
        _check_alpha(alpha)
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
            return Status(NO_DATA, None, None, None, 0)
        lo, hi = seq.interval()
        # The sequence is centred on the bet-weighted mean, which leaves the plain mean (the
        # figure shown beside it) outside when the values drift within the window ("mean 0.600
        # [0.632, 0.726]"). The interval reported, and judged, is the hull of both: still a
        # valid confidence sequence (a superset), and its ALERTs a subset of the sequence's, so
        # the lifetime bound holds and no verdict stands on an interval that leaves out the mean
        lo, hi = min(lo, mean), max(hi, mean)
        if seq.n < self.min_n:
            return Status(NO_DATA, mean, lo, hi, seq.n)
        return Status(self._judge(mean, lo, hi), mean, lo, hi, seq.n)

    def _judge(self, mean: float, lo: float, hi: float) -> str:
        raise NotImplementedError

    def _base_json(self) -> dict[str, Any]:
        return {"v": 1, "kind": self.kind, "direction": self.direction, "alpha": self.alpha,
                "window": self.window, "min_n": self.min_n, "k": self.window_index,
                "schedule": self.schedule,
                "seq": self._seq.to_json(),
                "prev": None if self._prev is None else list(self._prev)}

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


def empirical_bernstein_bound(m: Moments, delta: float, side: Direction) -> float:
    """A one-sided fixed-sample (1 - delta) bound on the mean of i.i.d. values in [0, 1].

    Maurer & Pontil, "Empirical Bernstein bounds and sample variance penalization", COLT 2009,
    Theorem 4: with probability >= 1 - delta, mu >= mean - sqrt(2 V ln(2/delta) / n)
    - 7 ln(2/delta) / (3 (n - 1)), V the sample variance (ddof=1); "above" gives the mirror upper
    bound. Trivial (0 or 1) when n < 2.
    """
    _check_alpha(delta)
    _check_direction(side)
    mean, var = m.mean, m.var
    if mean is None or var is None:
        return 0.0 if side == "below" else 1.0
    log_term = math.log(2 / delta)
    width = math.sqrt(2 * var * log_term / m.n) + 7 * log_term / (3 * (m.n - 1))
    return max(0.0, mean - width) if side == "below" else min(1.0, mean + width)


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
            return status._replace(state=NO_DATA)
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
