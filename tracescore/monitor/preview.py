"""At load: what each monitor can see with the traffic the database has had.

For every anytime monitor of a score (but one on a judge metric judged within a budget, whose
active confidence sequence this does not model: it is left out rather than given the judged
records' figure): the records its last window held (the last ``window``
of scores, its segment), the spread of those scores, and the alpha it may spend now (its stored
window's share, or the first window's for a new monitor) give its minimum detectable effect
(:mod:`.sight`), compared with the drop it is meant to catch (``detect``). ``tracescore check``
and ``monitor`` print it when they load the monitors. Reads only; blocking.
"""

from __future__ import annotations

import math
from typing import Any

from ..stats import confseq
from ..stats.sight import DEFAULT_DETECT, Sight, sight
from .config import Monitor, MonitorSet


def preview(reader: Any, monitors: MonitorSet, now: float,
            states: dict[str, Any] | None = None) -> list[tuple[Monitor, Sight]]:
    """(monitor, sight) for each anytime monitor of a score, from the last window's rows."""
    from ..read import query as Q
    from .measure import SCHEDULE

    seg = Q.SegmentIndex(reader)
    out = []
    for m in monitors:
        if m.is_pipeline_figure or m.rule != "anytime" or m.statistic not in (
                "mean", "rate", "fail_rate", "p10", "p50", "p90"):
            continue
        if _budgeted(reader, m, now):
            continue  # the active sequence's sight is not modelled: no figure, not a wrong one
        a = Q.merge(Q.score_aggs(reader, Q.Window(now - m.window_s, now), where=m.where,
                                 names=[m.score], seg=seg).values()).get(m.score)
        n, var = 0, None
        if a is not None:
            if m.statistic == "fail_rate":
                n = a.n_labelled
                p = a.n_fail / n if n else None
                var = None if p is None else p * (1 - p)
            elif m.statistic in ("p10", "p50", "p90"):
                n = a.n_ok
                q = float(m.statistic[1:]) / 100
                var = q * (1 - q)
            else:
                n = a.n_ok
                var = a.moments().var
        k, schedule = 1, SCHEDULE
        st = (states or {}).get(m.name)
        test = (st.test_state or {}).get("test") if st is not None and isinstance(
            st.test_state, dict) else None
        if isinstance(test, dict) and "k" in test:
            k, schedule = int(test["k"]), str(test.get("schedule", "quadratic"))
        alpha = confseq.spend(m.alpha, k, schedule)
        gap = float(m.detect if m.detect is not None else DEFAULT_DETECT)
        extra = 0.0
        if m.baseline is not None:
            alpha /= 2  # half for the window's sequence, half for the baseline's bound
            extra = float(m.min_effect or 0.0)
        out.append((m, sight(n, alpha, var if var is None or math.isfinite(var) else None,
                             gap, extra=extra)))
    return out


def _budgeted(reader: Any, m: Monitor, now: float) -> bool:
    """Whether ``m`` watches a judge metric judged within a budget (:mod:`.active_monitor`):
    its sight would be that of the judged records' sequence, which it does not run."""
    from types import SimpleNamespace

    from ..read.monitoring import metric_of
    from .active_monitor import budgeted_metric

    metric = metric_of(reader, m.score)
    return budgeted_metric(SimpleNamespace(reader=reader, now=now), m, metric)


def lines(items: list[tuple[Monitor, Sight]]) -> list[str]:
    """One line per monitor: ``monitor NAME: detects a drop of ...``."""
    return [f"monitor {m.name}: {s.text()}" for m, s in items]
