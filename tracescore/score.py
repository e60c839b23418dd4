"""`Score`: what a metric returns, stored and attached to spans."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "error", "skipped"]
PASS = "pass"
FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Score:
    """One metric value for one record.

    ``status`` is ``"ok"`` with a ``value``; ``"error"`` with ``value=None`` and the reason in
    ``error`` (never a silent 0); or ``"skipped"`` with the reason in ``error`` (the record lacks
    an input the metric needs, so it is not scored at all).
    """

    name: str
    value: float | None
    label: str | None = None
    explanation: str | None = None
    status: Status = "ok"
    error: str | None = None
    metric: str | None = None
    metric_version: str = "1"
    duration_ms: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def failed(cls, name: str, reason: str, **kw: Any) -> Score:
        return cls(name=name, value=None, status="error", error=reason, **kw)

    @classmethod
    def skipped(cls, name: str, reason: str, **kw: Any) -> Score:
        return cls(name=name, value=None, status="skipped", error=reason, **kw)


def label_for(value: float, threshold: float | None, higher_is_better: bool = True) -> str | None:
    """``"pass"``/``"fail"`` against ``threshold`` (inclusive), or None without one."""
    if threshold is None:
        return None
    ok = value >= threshold if higher_is_better else value <= threshold
    return PASS if ok else FAIL
