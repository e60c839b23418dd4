"""The oracle's side: every figure recomputed from the raw rows with scipy/statsmodels.

Nothing here calls tracescore's statistics or query layer. The rows are the ``records`` /
``scores`` / skipped ``jobs`` rows read by :func:`.build.raw` before any prune; a window's
rows are chosen by their own ``created_at`` (``[since, until)``), except in an hour whose
raw rows were pruned, which — as the readers document — counts whole when it starts inside
the window and not at all otherwise (the rollups' granularity).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportion_confint,
    proportions_ztest,
)

HOUR = 3600.0
Z95 = 0.95


def hour_of(t: float) -> float:
    return math.floor(t / HOUR) * HOUR


@dataclass(frozen=True)
class View:
    """The raw rows of one built database, with which hours lost raw rows to the prune."""

    rows: dict[str, list[dict[str, Any]]]

    @property
    def pruned_ids(self) -> set[str]:
        return {r["record_id"] for r in self.rows.get("pruned", [])}

    def pruned_score_hours(self) -> set[float]:
        gone = self.pruned_ids
        return {hour_of(s["created_at"]) for s in self.rows["scores"] if s["record_id"] in gone}

    def pruned_record_hours(self) -> set[float]:
        gone = self.pruned_ids
        return {hour_of(r["created_at"]) for r in self.rows["records"] if r["record_id"] in gone}

    def scores(self, since: float | None = None, until: float | None = None,
               where: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        ph = self.pruned_score_hours()
        return [s for s in self.rows["scores"]
                if _inside(s["created_at"], since, until, ph) and (where is None or where(s))]

    def records(self, since: float | None = None, until: float | None = None,
                where: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        ph = self.pruned_record_hours()
        return [r for r in self.rows["records"]
                if _inside(r["created_at"], since, until, ph) and (where is None or where(r))]


def _inside(t: float, since: float | None, until: float | None, pruned: set[float]) -> bool:
    h = hour_of(t)
    cut = (since is not None and h < since < h + HOUR) or (
        until is not None and h < until < h + HOUR)
    if h in pruned and cut:
        return (since is None or h >= since) and (until is None or h < until)
    return (since is None or t >= since) and (until is None or t < until)


# -- per score name -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Side:
    """One score name's raw rows in one window/segment."""

    values: tuple[float, ...]
    errors: int
    labelled: int
    failed: int

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.values)) if self.values else None

    @property
    def yes(self) -> int:
        return sum(1 for v in self.values if v >= 0.5)

    @property
    def constant(self) -> bool:
        return len(set(self.values)) <= 1


def side(rows: Iterable[dict[str, Any]], name: str) -> Side:
    vals, errors, labelled, failed = [], 0, 0, 0
    for s in rows:
        if s["name"] != name:
            continue
        if s["status"] == "ok" and s["value"] is not None:
            vals.append(float(s["value"]))
            if s["label"] is not None:
                labelled += 1
                failed += s["label"] == "fail"
        elif s["status"] == "error":
            errors += 1
    return Side(tuple(vals), errors, labelled, failed)


def t_interval(values: Sequence[float], clip: bool = True) -> tuple[float, float] | None:
    """Student t 95 % interval of the mean (None below two values)."""
    if len(values) < 2:
        return None
    a = np.asarray(values, dtype=float)
    sem = sps.sem(a)
    if sem == 0:
        m = float(a.mean())
        return (m, m)
    lo, hi = sps.t.interval(Z95, len(a) - 1, loc=float(a.mean()), scale=sem)
    if clip and a.min() >= 0 and a.max() <= 1:
        lo, hi = max(0.0, lo), min(1.0, hi)
    return float(lo), float(hi)


def wilson(k: int, n: int) -> tuple[float, float]:
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return float(lo), float(hi)


def newcombe(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    lo, hi = confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff",
                                        alpha=0.05)
    return float(lo), float(hi)


def rate_p(k1: int, n1: int, k2: int, n2: int) -> tuple[float, str]:
    """Two-sided p of a difference of proportions: Fisher's exact test when an expected cell
    is below 5, else the pooled two-proportion z test; with the method's name."""
    k, n = k1 + k2, n1 + n2
    expected = (n1 * k / n, n1 * (n - k) / n, n2 * k / n, n2 * (n - k) / n)
    if min(expected) < 5:
        return float(sps.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]])[1]), "fisher"
    return float(proportions_ztest([k1, k2], [n1, n2])[1]), "score"


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's t test of mean(a) - mean(b): (p, lo, hi)."""
    import warnings

    with warnings.catch_warnings():  # a constant side: scipy warns of its moment's precision
        warnings.simplefilter("ignore", RuntimeWarning)
        r = sps.ttest_ind(np.asarray(a, float), np.asarray(b, float), equal_var=False)
    ci = r.confidence_interval(Z95)
    return float(r.pvalue), float(ci.low), float(ci.high)


def holm(ps: Sequence[float]) -> list[float]:
    from statsmodels.stats.multitest import multipletests

    if not ps:
        return []
    return [float(x) for x in multipletests(list(ps), method="holm")[1]]


def verdict(d: dict[str, Any], n_cur: int, n_base: int, p_adj: float | None,
            higher: bool | None, *, min_n: int = 30, min_effect: float = 0.02,
            alpha: float = 0.05) -> str:
    """The documented verdict rule applied to the printed numbers (``compare --help``)."""
    if n_cur < min_n or n_base < min_n or d["lo"] is None or d["hi"] is None \
            or d["estimate"] is None:
        return "not enough data"
    p = p_adj if p_adj is not None else d["p_value"]
    inside = -min_effect <= d["lo"] and d["hi"] <= min_effect
    if p is not None and p < alpha and not inside and d["estimate"] != 0:
        if higher is None:
            return "changed"
        return "improved" if (d["estimate"] > 0) == higher else "regressed"
    return "no change" if inside else "no evidence"
