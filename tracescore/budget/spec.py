"""The ``judge_budget`` / ``judge_budgets`` arguments of :func:`tracescore.init`: judged
records a day per judge metric."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._internal.validate import is_number

__all__ = ["parse_budget", "resolve_budgets"]

_FORM = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*/\s*(day|d)\s*$", re.IGNORECASE)
_HELP = ("a judge budget is judged records a day per judge metric: '2000/day' or 2000 "
         "(an int)")


def parse_budget(value: Any, what: str = "judge_budget") -> float:
    """Records a day from ``"2000/day"`` or a number; a clear ``ValueError`` otherwise."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be '2000/day' or a number, got {value!r}")
    if is_number(value):
        n = float(value)
    elif isinstance(value, str):
        if value.strip().startswith("$"):
            raise ValueError(
                f"{what}={value!r}: a budget in dollars is not supported (the dollars a judged "
                "record costs are not known before it is judged); give judged records a day "
                "('2000/day'), and cap spend with judge_daily_budget_usd and judge_price")
        m = _FORM.match(value)
        if m is None:
            raise ValueError(f"{what}={value!r} is not understood: {_HELP}")
        n = float(m.group(1))
    else:
        raise TypeError(f"{what} must be '2000/day' or a number, got {type(value).__name__}")
    if not math.isfinite(n) or n < 1:
        raise ValueError(f"{what} must be at least 1 judged record a day, got {value!r}")
    return n


def resolve_budgets(default: Any, per_metric: Mapping[str, Any] | None,
                    judge_metrics: Sequence[str], all_metrics: Sequence[str]
                    ) -> dict[str, float]:
    """Judged records a day per judge metric: ``default`` for each judge metric, then the
    ``per_metric`` overrides (judge metrics only; a metric not configured, or a local one, is
    an error)."""
    out: dict[str, float] = {}
    if default is not None:
        n = parse_budget(default)
        out = {m: n for m in judge_metrics}
    if per_metric is None:
        return out
    if not isinstance(per_metric, Mapping):
        raise TypeError("judge_budgets must be a mapping of judge metric name to budget "
                        f"('faithfulness': '500/day'), got {type(per_metric).__name__}")
    for name, value in per_metric.items():
        if name not in all_metrics:
            raise ValueError(f"judge_budgets names a metric that is not configured: {name!r}")
        if name not in judge_metrics:
            raise ValueError(f"judge_budgets: {name!r} is not a judge metric (budgets apply "
                             "to LLM-judge metrics only)")
        out[name] = parse_budget(value, f"judge_budgets[{name!r}]")
    return out
