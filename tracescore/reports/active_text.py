"""The judge-budget block of ``report``: for each judge metric judged within a budget, the
active-inference estimate, what it rests on, and the judged records' plain mean beside it
(labelled biased). Takes :class:`~.active.ActiveSummary` data; no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .textfmt import WIDTH
from .textfmt import table as _table
from .textfmt import wrap as _wrap

__all__ = ["ACTIVE_MARK", "active_lines"]

#: after a score's name in the score tables: its figure is the active estimate
ACTIVE_MARK = " †"

LEGEND = ("† judged within a judge budget, records chosen adaptively (those the cheap proxy "
          "is least sure of are judged more often): the figure is the active-inference "
          "estimate over every decided record — the proxy's mean corrected by the "
          "1/pi-weighted judge-minus-proxy error of the judged records, 95 % normal "
          "interval — never the plain mean of the judged records, which over-represents the "
          "hard ones (docs/judge_budget.md)")


def _fmt(v: float | None, lo: float | None = None, hi: float | None = None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if lo is None or hi is None else f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def active_lines(active: Mapping[str, Any], width: int = WIDTH) -> list[str]:
    if not active:
        return []
    rows = []
    for name, a in sorted(active.items()):
        e = a.active.estimate
        rows.append([name, _fmt(e.value, e.lo, e.hi), str(a.judged), str(a.active.n_proxied),
                     _fmt(a.active.proxy_mean), _fmt(a.judged_plain.value)])
    out = ["", *_wrap("Judge budget (estimator: active):", width)]
    out += ["  " + line for line in _table(
        ["score", "estimate [95% CI]", "n judged", "N proxied", "proxy mean",
         "judged mean (biased)"], rows, "<>>>>>")]
    out += _wrap(LEGEND, width, "  ")
    for name, a in sorted(active.items()):
        for note in a.notes:
            out += _wrap(f"{name}: {note}", width, "  ")
    return out
