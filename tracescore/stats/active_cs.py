"""Monitors on a judge metric judged within a budget (adaptive selection, issue 33): the
active-inference estimate kept incrementally, and an anytime-valid confidence sequence over
the per-record active terms.

Every decided record i (in the order the worker decided) has its proxy f_i, its inclusion
probability π_i in (0, 1], ξ_i (judged or not) and, when judged, the judge's score y_i in
[0, 1]. With a line g through the proxy that is fixed *before* record i's selection (a
predictable line: fitted on the records before it, clipped to [0, 1]), the active term

    φ_i = g_i + (ξ_i/π_i)(y_i − g_i)

has, over the selection (the hash against π_i; y_i and the past held fixed), the mean y_i.
Given g_i and π_i it lies in the known range [g_i(1 − 1/π_i), g_i + (1 − g_i)/π_i], of
width R_i = 1/π_i, which contains [0, 1]. So Z_i = (φ_i − l_i)/R_i is in [0, 1], and the
predictable plug-in empirical-Bernstein supermartingale of Waudby-Smith & Ramdas (JRSS-B
2024, Theorem 2; :mod:`.confseq`) applies to Z with any predictable bets λ_i in (0, c] and
any predictable centre in [0, 1]. Its sum Σ λ_i (Z_i − E Z_i) = Σ w_i (φ_i − y_i) with
w_i = λ_i/R_i = λ_i π_i, so with probability ≥ 1 − α, at every time at once,

    |Σ w_i φ_i − Σ w_i y_i| ≤ log(2/α) + Σ ψ_E(λ_i)·4(Z_i − ẑ_i)²  (ψ_E as in confseq).

The bets are chosen on the original scale so that the weight does not depend on the record:
w_i = min(w_t, c·min_{j≤i} π_j), with w_t the PrPl-EB bet (eqs. 15–16) from the running
variance of the terms φ (π_i is known before record i's selection, so the running minimum is
predictable, and λ_i = w_i/π_i ≤ c). A weight that followed each record's own π would tilt
the sequence toward the records judged more often — the bias adaptive selection brings — so
the weights change with time only, as PrPl-EB's do. The sequence is centred on the w-weighted mean of the terms and covers
the w-weighted mean of the window's true scores — with equal weights, the window's mean —
which is what the Hájek figures of :mod:`.weighted` and the report's estimate speak for too.

The point estimate a monitor prints is the report's: :func:`tracescore.stats.active.
active_mean` over the window's records (the line fitted on all of them), which
:class:`ActiveSums` computes from running sums, so a monitor never re-reads its window.

Pure computation; numpy imported lazily. Not thread-safe (one owner, like the monitors).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from . import Estimate, z_quantile
from .active import ACTIVE
from .confseq import DEFAULT_TRUNCATION, check_alpha

__all__ = ["ActiveSequence", "ActiveSums", "active_terms"]

#: judged records before the sequence's line leaves g = f (the proxy itself)
MIN_LINE = 10
#: records between two refits of the sequence's predictable line
REFIT = 256


@dataclass
class ActiveSums:
    """Running sums of decided records from which :func:`~.active.active_mean` (value and
    normal interval) is recomputed exactly (up to rounding): N and Σf over every record; over
    the judged ones, weighted sums with v = (1 − π)/π² and w = 1/π."""

    N: int = 0
    sf: float = 0.0
    n: int = 0
    fmin: float = math.inf
    fmax: float = -math.inf
    sv: float = 0.0
    svf: float = 0.0
    svy: float = 0.0
    svff: float = 0.0
    svfy: float = 0.0
    svyy: float = 0.0
    sw: float = 0.0
    swf: float = 0.0
    swy: float = 0.0
    swff: float = 0.0
    swfy: float = 0.0

    def add(self, f: Any, pi: Any, sel: Any, y: Any) -> None:
        import numpy as np

        f = np.asarray(f, dtype=float)
        if f.size == 0:
            return
        p = np.asarray(pi, dtype=float)
        s = np.asarray(sel, dtype=bool)
        self.N += int(f.size)
        self.sf += float(f.sum())
        if not s.any():
            return
        fj, pj, yj = f[s], p[s], np.asarray(y, dtype=float)[s]
        self.n += int(s.sum())
        self.fmin = min(self.fmin, float(fj.min()))
        self.fmax = max(self.fmax, float(fj.max()))
        v, w = (1.0 - pj) / (pj * pj), 1.0 / pj
        self.sv += float(v.sum())
        self.svf += float(v @ fj)
        self.svy += float(v @ yj)
        self.svff += float(v @ (fj * fj))
        self.svfy += float(v @ (fj * yj))
        self.svyy += float(v @ (yj * yj))
        self.sw += float(w.sum())
        self.swf += float(w @ fj)
        self.swy += float(w @ yj)
        self.swff += float(w @ (fj * fj))
        self.swfy += float(w @ (fj * yj))

    def line(self) -> tuple[float, float]:
        """:func:`~.active.fit_line` from the sums (weights v; 1/π where every π is 1)."""
        if self.n == 0:
            return 0.0, 0.0
        if self.sv > 0:
            s0, s1, sy, s11, s1y = self.sv, self.svf, self.svy, self.svff, self.svfy
        else:
            s0, s1, sy, s11, s1y = self.sw, self.swf, self.swy, self.swff, self.swfy
        det = s0 * s11 - s1 * s1
        if self.fmax - self.fmin == 0.0 or det <= 1e-12 * max(1.0, s0 * s11):
            return (sy / s0 if s0 > 0 else 0.0), 0.0
        b = (s0 * s1y - s1 * sy) / det
        return (sy - b * s1) / s0, b

    def estimate(self, conf: float = 0.95) -> Estimate:
        """The active estimate of the records added (value None below 2 judged)."""
        if self.n < 2 or self.N == 0:
            return Estimate(self.n, None, None, None, ACTIVE)
        a, b = self.line()
        mean = a + b * self.sf / self.N + (self.swy - a * self.sw - b * self.swf) / self.N
        var = (self.svyy + a * a * self.sv + b * b * self.svff - 2 * a * self.svy
               - 2 * b * self.svfy + 2 * a * b * self.svf) / (self.N * self.N)
        half = z_quantile(0.5 + conf / 2) * math.sqrt(max(0.0, var))
        return Estimate(self.n, mean, mean - half, mean + half, ACTIVE)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["fmin"] = None if math.isinf(self.fmin) else self.fmin
        out["fmax"] = None if math.isinf(self.fmax) else self.fmax
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ActiveSums:
        s = cls()
        for f in fields(cls):
            if f.name in data and data[f.name] is not None:
                setattr(s, f.name, type(getattr(s, f.name))(data[f.name]))
        return s


def active_terms(f: Any, pi: Any, sel: Any, y: Any, a: float, b: float) -> Any:
    """The active terms φ with the line g = clip(a + b·f, 0, 1) (each in a range of width
    1/π that contains [0, 1]: [g(1 − 1/π), g + (1 − g)/π])."""
    import numpy as np

    s = np.asarray(sel, dtype=bool)
    p = np.asarray(pi, dtype=float)
    g = np.clip(a + b * np.asarray(f, dtype=float), 0.0, 1.0)
    return np.where(s, g + (np.where(s, np.asarray(y, dtype=float), g) - g) / p, g)


class ActiveSequence:
    """The confidence sequence over the active terms (module docstring), and the active
    estimate (:class:`ActiveSums`) of the same records. Feed decided records in decision order
    with :meth:`update`; :meth:`interval` may be asked at any time. State: a few sums and the
    line in use (``to_json``)."""

    def __init__(self, alpha: float = 0.05, truncation: float = DEFAULT_TRUNCATION) -> None:
        check_alpha(alpha)
        self.alpha = alpha
        self.truncation = truncation
        self.t = 0
        self._s = self._q = self._w = self._wx = self._p = 0.0
        #: records whose bet the smallest π so far capped below the PrPl-EB bet
        self.reduced = 0
        self._pmin = 1.0
        self.sums = ActiveSums()
        self.a, self.b = 0.0, 1.0  # g = f until MIN_LINE records were judged
        self._since_fit = 0

    @property
    def n(self) -> int:
        """Judged records so far (what the estimate rests on)."""
        return self.sums.n

    def _refit(self) -> None:
        if self.sums.n >= MIN_LINE:
            self.a, self.b = self.sums.line()
        self._since_fit = 0

    def update(self, f: Any, pi: Any, sel: Any, y: Any) -> None:
        """Add decided records (arrays of one length: proxy, π in (0, 1], judged, the judge's
        score in [0, 1] where judged) in decision order."""
        import numpy as np

        f = np.asarray(f, dtype=float)
        p = np.asarray(pi, dtype=float)
        s = np.asarray(sel, dtype=bool)
        yv = np.asarray(y, dtype=float)
        if not (f.size == p.size == s.size == yv.size):
            raise ValueError("proxy, pi, selected and y differ in length")
        if f.size and (not np.all((p > 0) & (p <= 1)) or not np.all(np.isfinite(f))):
            raise ValueError("proxies must be finite and every pi in (0, 1]")
        ys = yv[s]
        if ys.size and (not np.all(np.isfinite(ys)) or ys.min() < 0 or ys.max() > 1):
            raise ValueError("judged scores fed to a monitor must lie in [0, 1]")
        i = 0
        while i < f.size:
            room = REFIT - self._since_fit
            j = min(f.size, i + room)
            self._chunk(f[i:j], p[i:j], s[i:j], np.where(s[i:j], yv[i:j], 0.0))
            self.sums.add(f[i:j], p[i:j], s[i:j], yv[i:j])
            self._since_fit += j - i
            if self._since_fit >= REFIT:
                self._refit()
            i = j

    def _chunk(self, f: Any, p: Any, sel: Any, y: Any) -> None:
        import numpy as np

        phi = active_terms(f, p, sel, y, self.a, self.b)
        m = phi.size
        t = self.t + np.arange(1, m + 1, dtype=float)
        s = self._s + np.cumsum(phi)
        s_prev = s - phi
        mu_prev = np.clip((0.5 + s_prev) / t, 0.0, 1.0)
        dev2 = (phi - (0.5 + s) / (t + 1)) ** 2
        q = self._q + np.cumsum(dev2)
        sigma2_prev = (0.25 + q - dev2) / t
        bet = np.sqrt(2 * math.log(2 / self.alpha) / (sigma2_prev * t * np.log1p(t)))
        # one weight for every record at a time: w_i = min(w_t, c·min_{j≤i} π_j) (π_i is
        # known before record i's selection, so the running minimum is predictable)
        pmin = np.minimum.accumulate(np.minimum(p, self._pmin))
        w = np.minimum(bet, self.truncation * pmin)
        lam = w / p  # λ_i = w_i·R_i ≤ c, R_i = 1/π_i
        z_dev = (phi - mu_prev) * p  # Z_i − ẑ_i, both on the [0, 1] scale
        psi = z_dev * z_dev * (-np.log1p(-lam) - lam)
        self.reduced += int(np.sum(bet > self.truncation * pmin))
        self._pmin = float(pmin[-1])
        self.t += m
        self._s, self._q = float(s[-1]), float(q[-1])
        self._w += float(w.sum())
        self._wx += float(w @ phi)
        self._p += float(psi.sum())

    def interval(self, alpha: float | None = None) -> tuple[float, float]:
        """(lower, upper) now, clipped to [0, 1]; (0, 1) before any record."""
        a = self.alpha if alpha is None else alpha
        check_alpha(a)
        if self.t == 0 or self._w <= 0:
            return 0.0, 1.0
        centre = self._wx / self._w
        margin = (math.log(2 / a) + self._p) / self._w
        return max(0.0, centre - margin), min(1.0, centre + margin)

    def to_json(self) -> dict[str, Any]:
        return {"v": 1, "alpha": self.alpha, "truncation": self.truncation, "t": self.t,
                "s": self._s, "q": self._q, "w": self._w, "wx": self._wx, "p": self._p,
                "reduced": self.reduced, "pmin": self._pmin, "line": [self.a, self.b],
                "since_fit": self._since_fit, "sums": self.sums.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ActiveSequence:
        if data.get("v") != 1:
            raise ValueError(f"unknown ActiveSequence state version {data.get('v')!r}")
        seq = cls(float(data["alpha"]), float(data["truncation"]))
        seq.t = int(data["t"])
        seq._s, seq._q = float(data["s"]), float(data["q"])
        seq._w, seq._wx, seq._p = float(data["w"]), float(data["wx"]), float(data["p"])
        seq.reduced = int(data.get("reduced", 0))
        seq._pmin = float(data.get("pmin", 1.0))
        seq.a, seq.b = (float(v) for v in data["line"])
        seq._since_fit = int(data.get("since_fit", 0))
        seq.sums = ActiveSums.from_json(data["sums"])
        return seq
