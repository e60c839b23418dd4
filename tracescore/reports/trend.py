"""The trend page as data: each score per day (or per hour) with its 95 % interval, the
releases on the time axis, the monitors' states and their history.

:func:`build_trend` reads the query layer (:mod:`.query`: hourly rollups, so the cost follows
hours × segments, never the number of records, and the numbers survive ``prune``) and the
monitor tables (``monitor_state``, ``monitor_history``; a database from before monitors has
neither, and then the page shows none). It returns a :class:`TrendPage`, which
:func:`tracescore.reports.html.render_html` / :func:`~tracescore.reports.html.render_trend_html`
draw without touching the database. Blocking I/O on the caller's thread.

Buckets are UTC days, or UTC hours when the data span less than :data:`HOURLY_BELOW`. A mean
carries its Student t interval, a yes/no metric's rate its Wilson interval
(:mod:`tracescore.stats`); an interval needs two values in the bucket (a rate: one).
The first bucket counts the whole rollup hour that ``since`` cuts (the rollups' granularity).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..read import query as Q
from ..read.metric_info import MetricInfo
from ..read.model import MonitorStatus
from ..stats.estimate import CarriesEstimate, Estimate

if TYPE_CHECKING:
    from ..store.monitor_state import HistoryRow

__all__ = ["HOURLY_BELOW", "ReleaseMark", "TrendPage", "TrendPoint", "TrendSeries",
           "build_trend"]

HOUR = 3600.0
DAY = 86400.0
#: Data spanning less than this are drawn per hour, longer spans per day.
HOURLY_BELOW = 3 * DAY
#: Monitor state changes kept for the page (newest first): enough for a strip per monitor
#: over weeks of a flapping-free monitor, bounded whatever the table holds.
HISTORY_LIMIT = 500


@dataclass(frozen=True, slots=True)
class TrendPoint(CarriesEstimate):
    """One bucket of one score: n ok values, the mean (or rate) and its 95 % interval
    (``value``, ``lo``, ``hi``, ``n`` read through ``estimate``). A point always has a
    value: the chart draws it."""

    start: float  # unix seconds, a multiple of the bucket (UTC)
    estimate: Estimate

    def __post_init__(self) -> None:
        if self.estimate.value is None:
            raise ValueError("a trend point needs a value")

    @property
    def value(self) -> float:
        v = self.estimate.value
        return 0.0 if v is None else v  # never None: __post_init__


@dataclass(frozen=True, slots=True)
class TrendSeries:
    """One score name over time."""

    name: str
    metric: str
    kind: str  # "mean", or "rate" for a yes/no metric
    higher_is_better: bool | None
    threshold: float | None
    ci_method: str  # "t" (Student t), "wilson", or "active" (a budgeted judge metric)
    points: list[TrendPoint]


@dataclass(frozen=True, slots=True)
class ReleaseMark:
    """A release and when it was first seen (its first record, among the filtered ones)."""

    release: str
    at: float


@dataclass(frozen=True, slots=True)
class TrendPage:
    """Everything the trend section draws; plain data, no connection."""

    db: str
    generated_at: float
    since: float | None
    #: (first, last) time with scores in the window; None when there are none
    span: tuple[float, float] | None
    bucket_s: float  # 3600 or 86400
    bucket_label: str  # "hour" or "day"
    series: list[TrendSeries] = field(default_factory=list)
    #: every release with when it was first seen, oldest first (the renderer marks those
    #: inside the time axis and names the one in effect at its start)
    releases: list[ReleaseMark] = field(default_factory=list)
    monitors: list[MonitorStatus] = field(default_factory=list)
    #: state changes in the window, newest first (at most :data:`HISTORY_LIMIT`): the
    #: store's rows of ``monitor_history``
    history: list[HistoryRow] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "db": self.db, "generated_at": self.generated_at, "since": self.since,
            "span": list(self.span) if self.span else None, "bucket_s": self.bucket_s,
            "where": dict(self.where),
            "series": {s.name: {"metric": s.metric, "kind": s.kind, "ci_method": s.ci_method,
                                "points": [[p.start, p.n, p.value, p.lo, p.hi]
                                           for p in s.points]} for s in self.series},
            "releases": [[r.release, r.at] for r in self.releases],
            "monitors": [m.to_json() for m in self.monitors],
            "history": [[h.monitor, h.previous, h.state, h.at] for h in self.history],
        }


def build_trend(conn: Any, *, since: float | None = None,
                where: Mapping[str, str] | None = None, by_hour: bool | None = None,
                db: str = "", now: float | None = None) -> TrendPage:
    """The trend of every score in ``[since, now)`` over the records matching ``where``.

    ``by_hour``: True per hour, False per day, None chooses from the data's span (per hour
    under :data:`HOURLY_BELOW`). Blocking I/O; reads rollups, ``segments`` and the monitor
    tables only.
    """
    from ..read.pipeline import monitor_statuses

    now = time.time() if now is None else now
    where = dict(where or {})
    window = Q.Window(since, None)
    seg = Q.SegmentIndex(conn)
    span = Q.time_span(conn, window)
    if by_hour is None:
        by_hour = span is None or span[1] - span[0] < HOURLY_BELOW
    bucket_s = HOUR if by_hour else DAY

    info = MetricInfo(conn)
    series: list[TrendSeries] = []
    raw = Q.score_series(conn, None, window, bucket_s, where=where, seg=seg) if span else {}
    for name, groups in raw.items():
        merged: dict[float, Q.Agg] = {}
        for points in groups.values():
            for t, a in points:
                merged.setdefault(t, Q.Agg(name, a.metric)).add(a)
        total = Q.merge([{name: a} for a in merged.values()]).get(name)
        if total is None or not total.n_ok:
            continue
        # a yes/no metric is decided once over the whole window, as the report decides it
        binary = info.binary(total.metric, abs(total.ss - total.s) < 1e-9, total.n_ok)
        pts = []
        for t, a in sorted(merged.items()):
            if not a.n_ok:
                continue
            # Agg.estimate, as the report: Σx counts a 0/1 metric's yeses exactly (rollups
            # carry no bins per bucket), a mean's interval is clipped to [0, 1] for scores in
            # it, and a bucket of equal values gets the range bound, not zero width
            est = a.estimate(binary)
            value = float(est.value if est.value is not None else a.s / a.n_ok)
            pts.append(TrendPoint(float(t), Estimate(a.n_ok, value, est.lo, est.hi,
                                                     est.method, est.note)))
        series.append(TrendSeries(name, total.metric, "rate" if binary else "mean",
                                  info.higher_is_better(total.metric),
                                  info.threshold(total.metric), "wilson" if binary else "t",
                                  pts))
    series = _active_series(conn, series, window, since, bucket_s, where, seg)
    series.sort(key=lambda s: (s.metric, s.name))

    monitors = monitor_statuses(conn)
    return TrendPage(
        db=db, generated_at=now, since=since, span=span, bucket_s=bucket_s,
        bucket_label="hour" if by_hour else "day", series=series,
        releases=_releases(conn, seg, where), monitors=monitors,
        history=_history(conn, since), where=where,
    )


def _releases(conn: Any, seg: Q.SegmentIndex, where: Mapping[str, str]) -> list[ReleaseMark]:
    """Each release with when it was first seen; under a filter, among the matching
    segments only (a release deployed to staging first reaches prod later)."""
    ids = seg.matching(where)
    if ids is None:
        return [ReleaseMark(v, t) for v, t in Q.values_of(conn, "release", seg=seg)]
    first: dict[str, float] = {}
    for sid in ids:
        v = seg.value(sid, "release")
        if v is not None:
            t = seg.first_seen.get(sid, 0.0)
            first[v] = min(first.get(v, t), t)
    return [ReleaseMark(v, t) for v, t in sorted(first.items(), key=lambda kv: (kv[1], kv[0]))]


def _history(conn: Any, since: float | None) -> list[HistoryRow]:
    from ..read.pipeline import monitor_history

    return monitor_history(conn, since, HISTORY_LIMIT)


#: ``ci_method`` of a budgeted judge metric's series: its points are active estimates
ACTIVE_SERIES = "active"


def _active_series(conn: Any, series: list[TrendSeries], window: Q.Window,
                   since: float | None, bucket_s: float, where: Mapping[str, str],
                   seg: Q.SegmentIndex) -> list[TrendSeries]:
    """A judge metric judged within a budget: each bucket's active estimate (its decided
    records), never the judged records' mean (biased under adaptive selection); ``n`` is
    the bucket's judged records. By a judge model or metric version no estimate exists: the
    series has no points."""
    from dataclasses import replace

    from ..monitor.active_summary import active_timeline, adaptive_metrics

    budgeted = set(adaptive_metrics(conn, window))
    if not budgeted:
        return series
    out = []
    for s in series:
        if s.metric not in budgeted:
            out.append(s)
            continue
        pts = [] if any(k in Q.SCORE_DIMS for k in where) else [
            TrendPoint(b.start, Estimate(b.count, b.mean, b.lo, b.hi, ACTIVE_SERIES))
            for b in active_timeline(
                conn, s.name, s.metric, bucket_s=bucket_s, since=since, where=where,
                seg=seg)]
        out.append(replace(s, ci_method=ACTIVE_SERIES, points=pts))
    return out
