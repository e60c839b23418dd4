"""The pieces a monitor's measurement is made of, shared by the fixed-rule and anytime
measurements (:mod:`.measure`) and the active-inference one for budgeted judge metrics
(:mod:`.active_monitor`): the result type, the reading limits, the verdict's words, the
windows. (Both measurements import this module; neither imports the other's internals.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..read import monitoring as RM
from ..stats import CarriesEstimate, Estimate
from . import confseq
from .config import Monitor

#: Scores younger than this are read at the next evaluation: a transaction that stamped its
#: rows a moment ago may still be committing (several workers on PostgreSQL).
GRACE_S = 5.0


#: Rows read per query when a monitor catches up on a backlog.
CHUNK = 20_000


#: Reads per evaluation at most, so one evaluation stays bounded (the rest next time).
MAX_ROWS = 500_000


# -- the pieces ---------------------------------------------------------------------------------
@dataclass
class _Context:
    reader: Any
    seg: Any
    info: Any
    now: float


@dataclass
class _Result(CarriesEstimate):
    """One measurement: the verdict, the estimate it rests on, and the words for it."""

    state: str
    estimate: Estimate
    summary: str
    test_state: Any
    worst: Sequence[str] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _digits(*pairs: tuple[float | None, float | None]) -> int:
    """The fewest decimals (3 to 6) at which every pair of different numbers prints
    differently, so that a message comparing them never reads "0.800 is below 0.800"."""
    for d in range(3, 7):
        if all(a is None or b is None or a == b or round(a, d) != round(b, d)
               for a, b in pairs):
            return d
    return 6


def _describe(m: Monitor, stat: str, st: confseq.Status, direction: str,
              level: float, rule: str, note: str = "") -> str:
    """The verdict in words, naming the level the decision compared with (``level``: the
    threshold, or for a percentile the share of values that decides it) and printing each
    number with enough digits that the comparison word is true as printed."""
    d = _digits((st.value, level), (st.hi, level), (st.lo, level))
    est = f"{stat} {_fmt(st.value, d)}"
    if st.lo is not None and st.hi is not None:
        est += f" [{_fmt(st.lo, d)}, {_fmt(st.hi, d)}]"
    est += f" (n={st.n})"
    side = "below" if direction == "below" else "above"
    lv = f"{level:.{d}f}".rstrip("0").rstrip(".") if level == round(level, 3) \
        else f"{level:.{d}f}"
    lv += note
    if st.state == "NO_DATA":
        return f"{est}: not enough data (fewer than {m.min_n} in the window)"
    if st.state == "ALERT":
        why = ("the whole anytime-valid interval is" if rule == "anytime"
               else "the window's mean is")
        return f"{est}: {why} {side} {lv}"
    if st.state == "WARNING":
        return f"{est}: the estimate is {side} {lv}, the interval does not confirm it yet"
    return f"{est}: not {side} {lv}"


def _describe_baseline(m: Monitor, stat: str, st: confseq.Status, direction: str,
                       test: confseq.BaselineMonitor, base_text: str) -> str:
    """A baseline verdict in words. ALERT compares the interval's far end with the
    baseline's bound moved by ``min_effect``; WARNING and OK compare the estimate with the
    baseline's mean moved by ``min_effect``: each message names the number it compared."""
    bound, eff = test.baseline_bound, test.min_effect
    bmean = test.baseline.mean
    sign = -1.0 if direction == "below" else 1.0
    cut_alert = bound + sign * eff
    cut_warn = None if bmean is None else bmean + sign * eff
    d = _digits((st.hi, cut_alert), (st.lo, cut_alert), (st.value, cut_warn),
                (bound, cut_alert), (bmean, cut_warn))
    est = f"{stat} {_fmt(st.value, d)}"
    if st.lo is not None and st.hi is not None:
        est += f" [{_fmt(st.lo, d)}, {_fmt(st.hi, d)}]"
    est += f" (n={st.n})"
    side = "below" if direction == "below" else "above"
    op = "−" if direction == "below" else "+"
    if st.state == "NO_DATA":
        if test.baseline.n < m.min_n:
            return (f"{est}: not enough data in the baseline (n={test.baseline.n} < "
                    f"{m.min_n}; {base_text})")
        return f"{est}: not enough data (fewer than {m.min_n} in the window)"
    if st.state == "ALERT":
        return (f"{est}: the whole anytime-valid interval is {side} {_fmt(cut_alert, d)} "
                f"(the baseline's bound {_fmt(bound, d)} {op} min_effect {eff:g}; "
                f"{base_text}, baseline mean {_fmt(bmean, d)}, n={test.baseline.n})")
    what = (f"{_fmt(cut_warn, d)} (the baseline's mean {_fmt(bmean, d)} {op} min_effect "
            f"{eff:g}; {base_text}, n={test.baseline.n})")
    if st.state == "WARNING":
        return f"{est}: the estimate is {side} {what}, the interval does not confirm it yet"
    return f"{est}: not {side} {what}"


def _seg_filter(ctx: _Context, m: Monitor, alias: str = "", *,
                records: bool = False) -> tuple[str, list[Any]]:
    """SQL for the monitor's ``where`` on ``scores`` (or ``records``: record dimensions
    only)."""
    return RM.where_filter(ctx.seg, m.where, alias, records=records)


def _release_pair(ctx: _Context, m: Monitor) -> tuple[str, str] | None:
    """(current, previous) release of a ``previous_release`` monitor, read now: the newest
    release (or the one its ``where`` names) and the one before it; None without two."""
    from ..read import query as Q

    releases = [v for v, _ in Q.values_of(ctx.reader, "release", Q.Window(), ctx.seg)]
    cur: str | None
    if "release" in m.where:
        cur = m.where["release"]
        older = releases[:releases.index(cur)] if cur in releases else []
    else:
        cur = releases[-1] if releases else None
        older = releases[:-1]
    return None if cur is None or not older else (cur, older[-1])


def _worst(ctx: _Context, m: Monitor, start: float, direction: str) -> list[str]:
    if m.is_pipeline_figure:
        return []
    return RM.worst_trace_ids(ctx.reader, m.score, start, lowest=direction == "below",
                              filt=_seg_filter(ctx, m))


#: The schedule new monitors spend alpha by (states saved before keep theirs).
SCHEDULE = "log"


#: Longest a window may grow to when it holds too few records to see its drop.
MAX_SPAN_S = 7 * 86400.0


def _window_start(t0: float, W: float, k: int) -> float:
    """Start of window ``k`` (1-based) of a monitor first evaluated at ``t0``."""
    return t0 - W if k <= 1 else t0 + (k - 1) * W


def _with_where(m: Monitor, where: Mapping[str, str]) -> Monitor:
    import dataclasses

    return dataclasses.replace(m, where=dict(where))
