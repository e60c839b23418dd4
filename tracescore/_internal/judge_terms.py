"""One decision's terms in the adaptive judge's additive sums — shared by the estimator
(:mod:`tracescore.stats.active_totals`) and the hourly rollup the store keeps
(:mod:`tracescore.store.judge_rollup`), which may not import each other. Pure; no imports.

With u = 1/π and v = (1 − π)/π² (see :mod:`tracescore.stats.active_totals`)."""

from __future__ import annotations

from typing import Any

__all__ = ["DECISION_FIELDS", "DECISION_INTS", "JUDGED_FIELDS", "JUDGED_INTS", "decision_terms",
           "judged_terms"]

#: the sums over every decision, in the rollup's column order
DECISION_FIELDS = ("decided", "unrep", "selected", "n_u", "sf_u", "sff_u")
DECISION_INTS = ("decided", "unrep", "selected", "n_u")
#: the sums over the judged decisions (selected, π > 0, an ok score), in column order
JUDGED_FIELDS = ("n", "n_sub1", "sf", "sff", "sy", "syy",
                 "sv", "svf", "svff", "svy", "svfy", "svyy",
                 "su", "suf", "suff", "suy", "sufy", "suyy")
JUDGED_INTS = ("n", "n_sub1")


def decision_terms(proxy: float, pi: float, selected: bool) -> tuple[Any, ...]:
    """One decision's :data:`DECISION_FIELDS`."""
    f = float(proxy)
    rest = (1, f, f * f) if pi > 0 and not selected else (0, 0.0, 0.0)
    return (1, 1 if pi <= 0 else 0, 1 if selected else 0, *rest)


def judged_terms(f: float, pi: float, y: float) -> tuple[Any, ...]:
    """One judged decision's :data:`JUDGED_FIELDS` (π in (0, 1])."""
    u = 1.0 / pi
    v = (1.0 - pi) / (pi * pi)
    return (1, 1 if pi < 1.0 else 0, f, f * f, y, y * y,
            v, v * f, v * f * f, v * y, v * f * y, v * y * y,
            u, u * f, u * f * f, u * y, u * f * y, u * y * y)
