"""``tracescore report``: the summary of a window, per score, with intervals — as data.

:func:`build_report` reads the query layer (:mod:`.query`: hourly rollups plus the raw rows of
cut hours), so it costs in proportion to hours × segments whatever the number of records, and
gives the same numbers before and after ``prune``. Each mean carries its 95 % Student-t
interval, each rate its Wilson interval (:mod:`tracescore.stats`); percentiles come
from the rollups' 100 bins (±0.005 for scores in [0, 1]). The worst records are the only raw
read (an index range per score). :func:`build_page` gathers what the HTML page draws.
Blocking I/O; no formatting here (:mod:`.report_text`, :mod:`.html`).
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from ..read import pipeline as P
from ..read import query as Q
from ..read.metric_info import MetricInfo
from ..read.model import (
    GroupSummary,
    Histogram,
    MetricSummary,
    Report,
    ReportPage,
    TimeBucket,
)
from ..read.pipeline import usage_summary
from ..stats.estimate import Estimate
from ..store.rollup import bin_mid

__all__ = ["BUCKETS", "DEFAULT_WORST", "build_page", "build_report", "histogram",
           "percentile", "pick_bucket", "summarise", "timeline"]

#: Worst records listed per score, by ``report`` and by the report ``demo`` prints.
DEFAULT_WORST = 3


def percentile(sorted_values: Any, q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default) of already sorted values."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


#: The skip reason the report gives for scores a metric skipped when it ran (their reasons are
#: on each score row, shown by ``tracescore show``; the rollups count them, not why).
RUN_SKIP = "skipped by the metric when scored (each reason: tracescore show)"


def summarise(a: Q.Agg, info: MetricInfo, skipped: int = 0,
              reasons: tuple[tuple[str, int], ...] = ()) -> MetricSummary:
    """One score's aggregates as the report shows them, with its interval."""
    binary = info.binary(a.metric, a.n_ok > 0 and abs(a.ss - a.s) < 1e-9, a.n_ok)
    yes = a.yes if binary else None
    est = a.estimate(binary)
    # percentiles come from bins over [0, 1]: meaningless for scores outside it
    has_bins = bool(a.bins) and a.unit_range
    jobs = a.n_ok + a.n_error
    return MetricSummary(
        name=a.name, metric=a.metric, higher_is_better=info.higher_is_better(a.metric),
        count=a.n_ok,
        estimate=Estimate(a.n_ok, a.mean, est.lo, est.hi, est.method if a.n_ok else ""),
        p10=None if binary or not has_bins else a.percentile(0.1),
        p50=None if binary or not has_bins else a.percentile(0.5),
        p90=None if binary or not has_bins else a.percentile(0.9),
        fail_rate=a.n_fail / a.n_ok if a.n_labelled and a.n_ok else None,
        labelled=a.n_labelled, errors=a.n_error, skipped=skipped,
        threshold=info.threshold(a.metric), binary=binary, yes=yes,
        rate=yes / a.n_ok if yes is not None and a.n_ok else None,
        skip_reasons=reasons,
        error_rate=a.n_error / jobs if jobs else None,
    )


def _summaries(per_name: Mapping[str, Q.Agg], skips: Mapping[str, Mapping[str, int]],
               info: MetricInfo) -> list[MetricSummary]:
    aggs = dict(per_name)
    # metrics seen only through skipped jobs still get a row (everything skipped)
    for metric in skips:
        if not any(a.metric == metric for a in aggs.values()):
            for name in info.names(metric):
                aggs.setdefault(name, Q.Agg(name, metric))
    out = []
    for name in sorted(aggs, key=lambda n: (aggs[n].metric, n)):
        a = aggs[name]
        reasons = tuple(sorted(skips.get(a.metric, {}).items(), key=lambda kv: (-kv[1], kv[0])))
        if a.n_skipped:  # the metric ran and skipped the record (a score row, its own reason)
            reasons = tuple(sorted((*reasons, (RUN_SKIP, a.n_skipped)),
                                   key=lambda kv: (-kv[1], kv[0])))
        out.append(summarise(a, info, sum(n for _, n in reasons), reasons))
    return out


def build_report(conn: sqlite3.Connection, *, since: float | None = None,
                 until: float | None = None, worst: int = DEFAULT_WORST, db: str = "",
                 by: str | None = None, where: Mapping[str, str] | None = None) -> Report:
    """Summarise the window ``[since, until)`` (unix seconds; None: unbounded) per score name,
    over the records matching ``where``; ``by``: also one summary per value of that dimension.

    Records are counted by ``records.created_at``, scores by ``scores.created_at``, skipped
    jobs by their record's hour, feedback by its own time. ``dropped``, ``pending_jobs``
    (with :func:`pending_reasons`) and ``lost`` are the database's current totals.
    ``where``/``by`` name a dimension (:func:`.query.dims_of`).
    """
    from ..monitor.active_summary import active_summaries, apply_active, without_figure
    from ..read.feedback import feedback_summary
    from .inclusion import population_summaries
    from .trust import trust_summaries

    window = Q.Window(since, until)
    seg = Q.SegmentIndex(conn)
    where = dict(where or {})
    recs = Q.merge_records(Q.record_aggs(conn, window, where=where, seg=seg).values())
    scores = Q.merge(Q.score_aggs(conn, window, where=where, seg=seg).values())
    skips = Q.merge_skips(Q.skip_aggs(conn, window, where=where, seg=seg).values())
    info = MetricInfo(conn)
    metrics = _summaries(scores, skips, info)
    active = active_summaries(conn, window, {m.name: m.metric for m in metrics}, where=where,
                              seg=seg)
    metrics = [apply_active(m, active[m.name]) if m.name in active else m for m in metrics]

    counters = P.counters(conn)
    lost = {k[5:]: v for k, v in sorted(counters.items()) if k.startswith("lost.") and v > 0}
    overflow = {k[len("segments.overflow."):]: v for k, v in sorted(counters.items())
                if k.startswith("segments.overflow.") and v > 0}
    pending = P.open_jobs(conn)
    undelivered = P.undelivered(conn, since)

    groups: list[GroupSummary] = []
    if by is not None:
        g_recs = Q.record_aggs(conn, window, where=where, by=by, seg=seg)
        g_scores = Q.score_aggs(conn, window, where=where, by=by, seg=seg)
        g_skips = Q.skip_aggs(conn, window, where=where, by=by, seg=seg)
        keys = set(g_recs) | set(g_scores)
        for value in sorted(keys, key=lambda v: (v is None, str(v))):
            r = g_recs.get(value, Q.RecordAgg())
            g_metrics = _summaries(g_scores.get(value, {}), g_skips.get(value, {}), info)
            if active:
                # a budgeted judge metric's group: its active estimate where the group is a
                # set of records (a record dimension); else no figure (the judged records'
                # plain mean is biased, and decisions have no judge model or version)
                g_active = ({} if value is None or by in Q.SCORE_DIMS else active_summaries(
                    conn, window, {m.name: m.metric for m in g_metrics},
                    where={**where, by: str(value)}, seg=seg))
                g_metrics = [apply_active(m, g_active[m.name]) if m.name in g_active
                             else without_figure(m) if m.name in active else m
                             for m in g_metrics]
            groups.append(GroupSummary(value, r.records, r.sampled, g_metrics))

    return Report(
        db=db, since=since, generated_at=time.time(), records=recs.records,
        sampled=recs.sampled, dropped=counters.get("records_dropped", 0),
        pending_jobs=int(pending), undelivered=int(undelivered),
        scores=sum(a.n_jobs for a in scores.values()), metrics=metrics,
        worst=P.worst_records(conn, metrics, worst, since, until, seg.matching(where)),
        judges=P.judge_health(conn), lost=lost, monitors=P.monitor_statuses(conn),
        overflow=overflow, by=by, groups=groups, where=where,
        pending_reasons=P.pending_reasons(conn) if pending else [],
        feedback=feedback_summary(conn, since, until, seg.matching(where)),
        trust=trust_summaries(conn, window, scores, where=where, seg=seg, info=info),
        population=[p for p in population_summaries(
            conn, window, {k: v for k, v in scores.items() if k not in active},
            {m.name: m.binary for m in metrics}, where=where, seg=seg)],
        active=active,
    )


# -- distributions, time series and usage (the HTML page) --------------------------------------
#: Bucket sizes for time series, smallest first: (seconds, name). Sub-minute sizes let a
#: short run (a demo scored in two seconds) show a line rather than one dot.
BUCKETS: tuple[tuple[float, str], ...] = (
    (0.05, "50 ms"), (0.1, "100 ms"), (0.25, "250 ms"), (0.5, "500 ms"), (1, "second"),
    (5, "5 seconds"), (15, "15 seconds"),
    (60, "minute"), (300, "5 minutes"), (900, "15 minutes"), (3600, "hour"),
    (6 * 3600, "6 hours"), (86400, "day"), (7 * 86400, "week"),
)


def pick_bucket(first: float, last: float, max_buckets: int = 48) -> tuple[float, str]:
    """The smallest bucket of :data:`BUCKETS` that covers ``[first, last]`` in at most
    ``max_buckets`` buckets: the bucket follows the data's time span."""
    for seconds, label in BUCKETS:
        if int(last // seconds) - int(first // seconds) + 1 <= max_buckets:
            return seconds, label
    return BUCKETS[-1]


def histogram(conn: Any, name: str, *, since: float | None = None, bins: int = 10,
              where: Mapping[str, str] | None = None,
              seg: Q.SegmentIndex | None = None) -> Histogram | None:
    """Ok values of score ``name`` in ``bins`` equal bins over [0, 1], split by label, from the
    rollups' 100 bins (plus the raw rows of a cut hour). None when there are none."""
    counts = Q.label_bins(conn, name, Q.Window(since, None), where=where, seg=seg)
    if not counts:
        return None
    passed, failed, unlabelled = [0] * bins, [0] * bins, [0] * bins
    for (b100, label), n in counts.items():
        target = {"pass": passed, "fail": failed}.get(label, unlabelled)
        target[min(int(bin_mid(b100) * bins), bins - 1)] += n
    return Histogram(0.0, 1.0, passed, failed, unlabelled)


def timeline(conn: Any, name: str, *, bucket_s: float, since: float | None = None,
             where: Mapping[str, str] | None = None, seg: Q.SegmentIndex | None = None,
             binary: bool = False) -> list[TimeBucket]:
    """Mean ok value of score ``name`` per ``bucket_s`` seconds, with its 95 % interval
    (Wilson for a yes/no metric's rate)."""
    series = Q.score_series(conn, [name], Q.Window(since, None), bucket_s, where=where,
                            seg=seg)
    merged: dict[float, Q.Agg] = {}
    for points in series.get(name, {}).values():
        for t, a in points:
            if t not in merged:
                merged[t] = Q.Agg(name, a.metric)
            merged[t].add(a)
    return [_bucket(t, a, binary) for t, a in sorted(merged.items()) if a.n_ok]


def _bucket(t: float, a: Q.Agg, binary: bool = False) -> TimeBucket:
    est = a.estimate(binary)
    return TimeBucket(float(t), Estimate(a.n_ok, a.s / a.n_ok, est.lo, est.hi, est.method),
                      a.n_fail, a.n_labelled)


def build_page(conn: Any, report: Report, *, bins: int = 10) -> ReportPage:
    """Everything the HTML report draws for ``report`` (built on the same connection)."""
    from ..read.records import find_records, record_details

    where = report.where or None
    seg = Q.SegmentIndex(conn)
    span = Q.time_span(conn, Q.Window(report.since, None))
    bucket = pick_bucket(*span) if span else None
    hists: dict[str, Histogram | None] = {}
    lines: dict[str, list[TimeBucket]] = {}
    for m in report.metrics:
        h = histogram(conn, m.name, since=report.since, bins=bins, where=where, seg=seg)
        if h is not None and m.binary:  # a yes/no metric: two bars, not ten bins
            h = Histogram(0.0, 1.0, [sum(h.passed[:len(h.passed) // 2]),
                                     sum(h.passed[len(h.passed) // 2:])],
                          [sum(h.failed[:len(h.failed) // 2]),
                           sum(h.failed[len(h.failed) // 2:])],
                          [sum(h.unlabelled[:len(h.unlabelled) // 2]),
                           sum(h.unlabelled[len(h.unlabelled) // 2:])])
        hists[m.name] = h
        if bucket and m.name in report.active:
            # a budgeted judge metric: the active estimate per bucket, not the judged mean
            from ..monitor.active_summary import active_timeline

            lines[m.name] = active_timeline(conn, m.name, m.metric, bucket_s=bucket[0],
                                            since=report.since, where=where, seg=seg)
        else:
            lines[m.name] = (timeline(conn, m.name, bucket_s=bucket[0], since=report.since,
                                      where=where, seg=seg, binary=m.binary)
                             if bucket else [])
    records: dict[str, dict[str, Any]] = {}
    for items in report.worst.values():
        for w in items:
            if w.record_id not in records:
                rows, _ = find_records(conn, w.record_id)
                if rows:
                    records[w.record_id] = record_details(conn, rows[0])
    return ReportPage(report, span, bucket, hists, lines,
                      usage_summary(conn, since=report.since, where=where), records)
