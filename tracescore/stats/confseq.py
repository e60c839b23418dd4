"""Anytime-valid confidence sequences for the mean of values in [0, 1]: the maths.

Pure computation, no I/O and no state beyond the objects' own sums; the monitors that run these
sequences window by window and alert on them (``ThresholdMonitor``, ``BaselineMonitor``) are in
:mod:`tracescore.monitor.confseq`, whose docstring states the alert rule and its guarantee.

- ``EBSequence`` / ``eb_confidence_sequence``: the predictable plug-in empirical Bernstein CS
  (PrPl-EB) of I. Waudby-Smith and A. Ramdas, "Estimating means of bounded random variables by
  betting", JRSS-B 86(1), 2024 (arXiv:2010.09686), Theorem 2 with the bets lambda_t of eqs.
  (15)-(16) and truncation c = 1/2. It needs the observations in order but keeps only six
  running sums, so its state is a small JSON object.
- ``mixture_radius``: the two-sided normal-mixture (Robbins) boundary for 1/2-sub-Gaussian
  increments (any variable in [0, 1], by Hoeffding's lemma) of S. R. Howard, A. Ramdas,
  J. McAuliffe and J. Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence
  sequences", Ann. Statist. 49(2), 2021, eq. (14). It depends on n and the sum only.
- ``window_alpha`` / ``window_alpha_log`` / ``spend``: alpha spending across windows by the
  union bound.
- ``empirical_bernstein_bound``: a one-sided fixed-sample bound (Maurer & Pontil 2009, Thm. 4).

numpy is imported lazily, inside the functions that need it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from .moments import Moments

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# Truncation of the bets: the paper suggests c = 1/2 or 3/4; 1/2 is also the authors' default in
# their `confseq` package and keeps -log(1 - lambda) - lambda, the variance penalty, small.
DEFAULT_TRUNCATION = 0.5

Direction = Literal["below", "above"]


def check_alpha(alpha: float) -> None:
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
    check_alpha(alpha)
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
    check_alpha(alpha)
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
    check_alpha(alpha)
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
    check_alpha(alpha)
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

    check_alpha(alpha)
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
        check_alpha(alpha)
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
        check_alpha(a)
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


def check_direction(direction: str) -> None:
    if direction not in ("below", "above"):
        raise ValueError(f"direction must be 'below' or 'above', got {direction!r}")



def empirical_bernstein_bound(m: Moments, delta: float, side: Direction) -> float:
    """A one-sided fixed-sample (1 - delta) bound on the mean of i.i.d. values in [0, 1].

    Maurer & Pontil, "Empirical Bernstein bounds and sample variance penalization", COLT 2009,
    Theorem 4: with probability >= 1 - delta, mu >= mean - sqrt(2 V ln(2/delta) / n)
    - 7 ln(2/delta) / (3 (n - 1)), V the sample variance (ddof=1); "above" gives the mirror upper
    bound. Trivial (0 or 1) when n < 2.
    """
    check_alpha(delta)
    check_direction(side)
    mean, var = m.mean, m.var
    if mean is None or var is None:
        return 0.0 if side == "below" else 1.0
    log_term = math.log(2 / delta)
    width = math.sqrt(2 * var * log_term / m.n) + 7 * log_term / (3 * (m.n - 1))
    return max(0.0, mean - width) if side == "below" else min(1.0, mean + width)
