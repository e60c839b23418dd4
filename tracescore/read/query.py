"""The query layer: aggregates over the hourly rollups, by segment, for every reader.

Every renderer (text, JSON, HTML) and every monitor reads through here and receives plain
data; nothing else in :mod:`tracescore.reports` aggregates raw rows. The store keeps the
``hourly_*`` tables up to date as records and scores are written (schema version 3,
:mod:`tracescore.store.rollup`), so a read costs in proportion to hours × segments, never to
the number of records:

- a window's *full* hours come from ``hourly_records`` / ``hourly_scores`` / ``hourly_bins`` /
  ``hourly_skips``;
- a window edge that falls inside an hour (``--since 30m``, a comparison's baseline that ends
  a day ago) reads that hour's raw rows for the part inside the window — at most two hours of
  rows. When the raw rows of that hour were pruned, the hour counts whole when it *starts*
  inside the window (the rollup's granularity).

Segments: ``release``, ``environment`` and ``model`` and the declared ``metadata.KEY``
dimensions belong to a record (the ``segments`` table, bounded by the per-dimension cardinality
limit, is read into memory); ``judge_model`` and ``metric_version`` belong to a score (columns of
``hourly_scores``). Percentiles come from 100 equal bins over [0, 1] (exact to ±0.005 for
scores in [0, 1]); counts, means, rates and Σx² are exact.

All functions block on database I/O; ``conn`` is a read-only connection from
:func:`tracescore.read.db.open_db` (SQLite or PostgreSQL: the SQL is written once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..store.rollup import BINS, bin_mid, value_bin
from .window import (
    HOUR,
    RECORD_DIMS,
    SCORE_DIMS,
    Group,
    SegmentIndex,
    Window,
    _edges,
    _hours,
    _names_clause,
    _names_in_hour,
    _num,
    dims_of,
    score_dim_clause,
    seg_clause,
    values_of,
)

__all__ = [
    "BINS", "merge", "merge_records", "merge_skips", "label_bins",
    "RECORD_DIMS", "SCORE_DIMS", "Agg", "RecordAgg", "SegmentIndex", "Window",
    "dims_of", "record_aggs", "score_aggs", "score_series", "skip_aggs", "time_span",
    "values_of",
]


# -- aggregates -------------------------------------------------------------------------------
@dataclass(slots=True)
class Agg:
    """One score name in one group: the sufficient statistics and the histogram."""

    name: str
    metric: str
    n_ok: int = 0
    s: float = 0.0
    ss: float = 0.0
    n_labelled: int = 0
    n_fail: int = 0
    n_error: int = 0
    n_skipped: int = 0
    bins: dict[int, int] = field(default_factory=dict)

    def add(self, other: Agg) -> None:
        self.n_ok += other.n_ok
        self.s += other.s
        self.ss += other.ss
        self.n_labelled += other.n_labelled
        self.n_fail += other.n_fail
        self.n_error += other.n_error
        self.n_skipped += other.n_skipped
        for b, n in other.bins.items():
            self.bins[b] = self.bins.get(b, 0) + n

    @property
    def mean(self) -> float | None:
        return self.s / self.n_ok if self.n_ok else None

    @property
    def yes(self) -> int:
        """A yes/no metric's 1s, exactly: Σx when every value is 0 or 1 (Σx² = Σx), which the
        sums carry in every split and time bucket — the histograms do not (they are kept per
        record segment and hour: none per judge model, metric version or series bucket).
        Other values: those in the upper half of [0, 1], from the histogram; where there is
        no histogram, Σx rounded (as the trend did), never 0 by default."""
        zero_one = self.s >= 0 and abs(self.ss - self.s) <= 1e-9 * max(1, self.n_ok)
        if self.n_ok and (zero_one or not self.bins):
            return max(0, min(self.n_ok, round(self.s)))
        return sum(n for b, n in self.bins.items() if bin_mid(b) >= 0.5)

    @property
    def n_jobs(self) -> int:
        return self.n_ok + self.n_error + self.n_skipped

    def moments(self) -> Any:
        from ..stats import Moments

        return Moments(self.n_ok, self.s, self.ss)

    @property
    def unit_range(self) -> bool:
        """Whether the values lie in [0, 1] as far as the sums tell (Σx ≥ 0 and Σx² ≤ Σx,
        which every set of values in [0, 1] satisfies): intervals are then clipped to it."""
        return self.s >= 0 and self.ss <= self.s + 1e-9 * max(1, self.n_ok)

    def estimate(self, binary: bool = False) -> Any:
        """The 95 % interval of the mean (Student t) or, for a yes/no metric, of the rate
        (Wilson); a mean's interval is clipped to [0, 1] for scores in [0, 1], and where all
        of those are equal it is their exact range bound (:func:`.stats.range_bound`)."""
        from dataclasses import replace

        from ..stats import mean_ci, rate_ci

        if binary:
            return rate_ci(self.yes, self.n_ok)
        est = mean_ci(self.moments(), bounded=self.unit_range)
        if self.unit_range and est.lo is not None and est.hi is not None:
            est = replace(est, lo=max(0.0, est.lo), hi=min(1.0, est.hi))
        return est

    def histogram(self) -> list[tuple[float, int]]:
        """(bin midpoint, count), ascending."""
        return [(bin_mid(b), n) for b, n in sorted(self.bins.items()) if n > 0]

    def percentile(self, q: float) -> float | None:
        """Linear-interpolated percentile over the bin midpoints (±0.005 for [0, 1] scores)."""
        pairs = self.histogram()
        total = sum(n for _, n in pairs)
        if not total:
            return None
        pos = (total - 1) * q
        lo_i = math.floor(pos)

        def at(k: int) -> float:
            seen = 0
            for v, n in pairs:
                seen += n
                if k < seen:
                    return v
            return pairs[-1][0]

        lo, hi = at(lo_i), at(min(lo_i + 1, total - 1))
        return lo + (hi - lo) * (pos - lo_i)


@dataclass(slots=True)
class RecordAgg:
    records: int = 0
    sampled: int = 0
    compact: int = 0
    errors: int = 0
    with_usage: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_n: int = 0
    latency_ms_sum: float = 0.0
    models: dict[str, int] = field(default_factory=dict)

    def add(self, o: RecordAgg) -> None:
        for f in ("records", "sampled", "compact", "errors", "with_usage", "input_tokens",
                  "output_tokens", "latency_n", "latency_ms_sum"):
            setattr(self, f, getattr(self, f) + getattr(o, f))
        for m, n in o.models.items():
            self.models[m] = self.models.get(m, 0) + n


def _group_of(by: str | None, seg: SegmentIndex, seg_id: int | None,
              row_dims: Mapping[str, Any]) -> Group:
    if by is None:
        return None
    if by in SCORE_DIMS:
        v = row_dims.get(by)
        return None if v in (None, "") else str(v)
    return seg.value(seg_id, by)


# -- scores ------------------------------------------------------------------------------------
def score_aggs(conn: Any, window: Window = Window(), *, where: Mapping[str, str] | None = None,
               by: str | None = None, names: Sequence[str] | None = None,
               seg: SegmentIndex | None = None) -> dict[Group, dict[str, Agg]]:
    """Per group (a value of ``by``, or None) and score name: the aggregates in ``window``
    over the records matching ``where``."""
    seg = seg or SegmentIndex(conn)
    ids = seg.matching(where)
    out: dict[Group, dict[str, Agg]] = {}

    def slot(group: Group, name: str, metric: str) -> Agg:
        per = out.setdefault(group, {})
        a = per.get(name)
        if a is None:
            a = per[name] = Agg(name, metric or name)
        return a

    lo, hi = _hours(window)
    seg_sql, seg_args = seg_clause(ids)
    dim_sql, dim_args = score_dim_clause(where)
    name_sql, name_args = _names_clause(names)
    if lo < hi:
        for (name, seg_id, jm, mv, metric, n_ok, s, ss, n_lab, n_fail, n_err,
             n_skip) in conn.execute(
            "SELECT name, seg_id, judge_model, metric_version, min(metric), sum(n_ok),"
            " sum(value_sum), sum(value_sumsq), sum(n_labelled), sum(n_fail), sum(n_error),"
            " sum(n_skipped) FROM hourly_scores WHERE hour >= ? AND hour < ?"
            + seg_sql + dim_sql + name_sql
            + " GROUP BY name, seg_id, judge_model, metric_version",
            (_num(lo), _num(hi), *seg_args, *dim_args, *name_args),
        ).fetchall():
            g = _group_of(by, seg, seg_id, {"judge_model": jm, "metric_version": mv})
            a = slot(g, name, metric)
            a.n_ok += int(n_ok or 0)
            a.s += float(s or 0.0)
            a.ss += float(ss or 0.0)
            a.n_labelled += int(n_lab or 0)
            a.n_fail += int(n_fail or 0)
            a.n_error += int(n_err or 0)
            a.n_skipped += int(n_skip or 0)
        if out:  # histograms: only for names with rows (GROUP BY on the bins' own key)
            bin_sql = (
                "SELECT b.name, b.seg_id, b.bin, sum(b.n) FROM hourly_bins b"
                " WHERE b.hour >= ? AND b.hour < ?" + seg_sql.replace("seg_id", "b.seg_id")
                + _names_clause(names, "b.name")[0] + " GROUP BY b.name, b.seg_id, b.bin")
            if by in SCORE_DIMS or dim_sql:
                # bins are kept per record segment, not per judge model / metric version:
                # split or filtered by those, percentiles are not available (None)
                pass
            else:
                for name, seg_id, b, n in conn.execute(
                    bin_sql, (_num(lo), _num(hi), *seg_args, *name_args)).fetchall():
                    g = _group_of(by, seg, seg_id, {})
                    per = out.get(g, {})
                    if name in per:
                        per[name].bins[int(b)] = per[name].bins.get(int(b), 0) + int(n)
    for hour, t0, t1 in _edges(window):
        _score_edge(conn, seg, out, slot, hour, t0, t1, window, ids, where, by, names)
    return out


def _score_edge(conn: Any, seg: SegmentIndex, out: dict[Group, dict[str, Agg]], slot: Any,
                hour: int, t0: float, t1: float, window: Window, ids: set[int] | None,
                where: Mapping[str, str] | None, by: str | None,
                names: Sequence[str] | None) -> None:
    """A cut hour: its raw rows inside the window, or the whole hour if they were pruned."""
    if names is None:  # the hour's score names: the raw reads then use (name, created_at)
        names = _names_in_hour(conn, hour)
    in_sql, in_args = _names_clause(names)
    raw_n = conn.execute("SELECT count(*) FROM scores WHERE created_at >= ? AND created_at < ?"
                         + in_sql, (hour, hour + HOUR, *in_args)).fetchone()[0]
    # the same names on both sides: with one name asked for, the hour's rollup of every name
    # outnumbered its raw rows and the hour looked pruned (issue 29: the first hour dropped)
    rolled_n = conn.execute(
        "SELECT coalesce(sum(n_ok + n_error + n_skipped), 0) FROM hourly_scores WHERE hour = ?"
        + in_sql, (hour, *in_args)).fetchone()[0]
    if int(raw_n) < int(rolled_n):  # pruned (partly): the hour counts whole if it starts inside
        if window.contains(hour):
            inner = score_aggs(conn, Window(hour, hour + HOUR), where=where, by=by,
                               names=names, seg=seg)
            for g, per in inner.items():
                for name, a in per.items():
                    slot(g, name, a.metric).add(a)
        return
    seg_sql, seg_args = seg_clause(ids)
    dim_sql, dim_args = score_dim_clause(where)
    name_sql, name_args = _names_clause(names)
    for name, metric, seg_id, jm, mv, value, label, status in conn.execute(
        "SELECT name, metric, seg_id, judge_model, metric_version, value, label, status"
        " FROM scores WHERE created_at >= ? AND created_at < ?" + seg_sql + dim_sql + name_sql,
        (t0, t1, *seg_args, *dim_args, *name_args),
    ).fetchall():
        g = _group_of(by, seg, seg_id, {"judge_model": jm, "metric_version": mv})
        a = slot(g, name, metric or name)
        if status == "ok" and value is not None:
            v = float(value)
            a.n_ok += 1
            a.s += v
            a.ss += v * v
            if label is not None:
                a.n_labelled += 1
                a.n_fail += label == "fail"
            if by not in SCORE_DIMS and not dim_sql:
                b = value_bin(v)
                a.bins[b] = a.bins.get(b, 0) + 1
        elif status == "error":
            a.n_error += 1
        elif status == "skipped":
            a.n_skipped += 1


# -- records -----------------------------------------------------------------------------------
def record_aggs(conn: Any, window: Window = Window(), *,
                where: Mapping[str, str] | None = None, by: str | None = None,
                seg: SegmentIndex | None = None) -> dict[Group, RecordAgg]:
    """Per group: record counts, usage and latency in ``window`` (score dimensions in ``by`` or
    ``where`` do not apply to records: they are ignored here)."""
    seg = seg or SegmentIndex(conn)
    ids = seg.matching(where)
    rby = None if by in SCORE_DIMS else by
    out: dict[Group, RecordAgg] = {}
    lo, hi = _hours(window)
    seg_sql, seg_args = seg_clause(ids)
    if lo < hi:
        for (seg_id, n, sampled, compact, errors, wu, tin, tout, ln,
             lsum) in conn.execute(
            "SELECT seg_id, sum(records), sum(sampled), sum(compact), sum(errors),"
            " sum(with_usage), sum(input_tokens), sum(output_tokens), sum(latency_n),"
            " sum(latency_ms_sum) FROM hourly_records WHERE hour >= ? AND hour < ?" + seg_sql
            + " GROUP BY seg_id", (_num(lo), _num(hi), *seg_args),
        ).fetchall():
            agg = RecordAgg(int(n or 0), int(sampled or 0), int(compact or 0), int(errors or 0),
                            int(wu or 0), int(tin or 0), int(tout or 0), int(ln or 0),
                            float(lsum or 0.0))
            model = seg.value(seg_id, "model") or "unknown"
            agg.models[model] = agg.records
            out.setdefault(_group_of(rby, seg, seg_id, {}), RecordAgg()).add(agg)
    for hour, t0, t1 in _edges(window):
        raw_n = conn.execute(
            "SELECT count(*) FROM records WHERE created_at >= ? AND created_at < ?",
            (hour, hour + HOUR)).fetchone()[0]
        rolled_n = conn.execute(
            "SELECT coalesce(sum(records), 0) FROM hourly_records WHERE hour = ?",
            (hour,)).fetchone()[0]
        if int(raw_n) < int(rolled_n):
            if window.contains(hour):
                for g, a in record_aggs(conn, Window(hour, hour + HOUR), where=where, by=by,
                                        seg=seg).items():
                    out.setdefault(g, RecordAgg()).add(a)
            continue
        for (seg_id, sampled, text_kept, error, tin, tout, latency, model) in conn.execute(
            "SELECT seg_id, sampled, text_kept, error, input_tokens, output_tokens,"
            " latency_ms, model FROM records WHERE created_at >= ? AND created_at < ?"
            + seg_sql, (t0, t1, *seg_args),
        ).fetchall():
            a = out.setdefault(_group_of(rby, seg, seg_id, {}), RecordAgg())
            a.records += 1
            a.sampled += 1 if sampled else 0
            a.compact += 1 if text_kept == 0 else 0
            a.errors += 1 if error else 0
            if tin is not None or tout is not None:
                a.with_usage += 1
            a.input_tokens += tin or 0
            a.output_tokens += tout or 0
            if latency is not None:
                a.latency_n += 1
                a.latency_ms_sum += latency
            m = model or "unknown"
            a.models[m] = a.models.get(m, 0) + 1
    return out


def skip_aggs(conn: Any, window: Window = Window(), *,
              where: Mapping[str, str] | None = None, by: str | None = None,
              seg: SegmentIndex | None = None) -> dict[Group, dict[str, dict[str, int]]]:
    """Per group and metric: records the metric skipped, by reason (hour granularity: an hour
    counts when it starts inside the window)."""
    seg = seg or SegmentIndex(conn)
    ids = seg.matching(where)
    rby = None if by in SCORE_DIMS else by
    seg_sql, seg_args = seg_clause(ids)
    lo = -math.inf if window.since is None else window.since
    hi = math.inf if window.until is None else window.until
    out: dict[Group, dict[str, dict[str, int]]] = {}
    for metric, seg_id, reason, n in conn.execute(
        "SELECT metric, seg_id, reason, sum(n) FROM hourly_skips WHERE hour >= ? AND hour < ?"
        + seg_sql + " GROUP BY metric, seg_id, reason", (_num(lo), _num(hi), *seg_args),
    ).fetchall():
        if not n:
            continue
        per = out.setdefault(_group_of(rby, seg, seg_id, {}), {}).setdefault(metric, {})
        key = reason or "no reason recorded"
        per[key] = per.get(key, 0) + int(n)
    return out


# -- time series --------------------------------------------------------------------------------
def score_series(conn: Any, names: Sequence[str] | None, window: Window, bucket_s: float, *,
                 where: Mapping[str, str] | None = None, by: str | None = None,
                 seg: SegmentIndex | None = None
                 ) -> dict[str, dict[Group, list[tuple[float, Agg]]]]:
    """Per score name and group: (bucket start, aggregates) per time bucket, ascending.

    ``bucket_s`` ≥ 1 hour reads the rollups for the window's whole hours and, for an hour the
    window cuts, that hour's raw rows inside it (as :func:`score_aggs`, so the buckets add up to
    the window's total); shorter buckets (a short demo run) read the
    raw rows of the window (only sensible for short windows: the caller picks the bucket from
    the data's span, :func:`pick_bucket`)."""
    seg = seg or SegmentIndex(conn)
    ids = seg.matching(where)
    out: dict[str, dict[Group, dict[float, Agg]]] = {}

    def slot(name: str, metric: str, g: Group, t: float) -> Agg:
        per = out.setdefault(name, {}).setdefault(g, {})
        a = per.get(t)
        if a is None:
            a = per[t] = Agg(name, metric or name)
        return a

    seg_sql, seg_args = seg_clause(ids)
    dim_sql, dim_args = score_dim_clause(where)
    name_sql, name_args = _names_clause(names)
    lo = -math.inf if window.since is None else window.since
    hi = math.inf if window.until is None else window.until
    if bucket_s >= HOUR:
        # the window's whole hours from the rollups; an hour the window cuts (--since 30m)
        # through score_aggs, as every other reader counts it (its raw rows inside the window)
        full_lo, full_hi = _hours(window)
        rows = conn.execute(
            "SELECT hour, name, seg_id, judge_model, metric_version, metric, n_ok, value_sum,"
            " value_sumsq, n_labelled, n_fail, n_error, n_skipped FROM hourly_scores"
            " WHERE hour >= ? AND hour < ?" + seg_sql + dim_sql + name_sql,
            (_num(full_lo), _num(full_hi), *seg_args, *dim_args, *name_args)
        ).fetchall() if full_lo < full_hi else []
        for hour, t0, t1 in _edges(window):
            t = float(int(hour) // int(bucket_s) * int(bucket_s))
            part = score_aggs(conn, Window(t0, t1), where=where, by=by, names=names, seg=seg)
            for g, per in part.items():
                for name, a in per.items():
                    edge = slot(name, a.metric, g, t)
                    edge.add(a)
                    edge.bins.clear()  # as the rollup buckets: no histograms per bucket
        for (hour, name, seg_id, jm, mv, metric, n_ok, s, ss, n_lab, n_fail, n_err,
             n_skip) in rows:
            t = float(int(hour) // int(bucket_s) * int(bucket_s))
            a = slot(name, metric, _group_of(by, seg, seg_id,
                                             {"judge_model": jm, "metric_version": mv}), t)
            a.n_ok += int(n_ok)
            a.s += float(s)
            a.ss += float(ss)
            a.n_labelled += int(n_lab)
            a.n_fail += int(n_fail)
            a.n_error += int(n_err)
            a.n_skipped += int(n_skip)
    else:
        for name, metric, seg_id, jm, mv, value, label, status, created in conn.execute(
            "SELECT name, metric, seg_id, judge_model, metric_version, value, label, status,"
            " created_at FROM scores WHERE created_at >= ? AND created_at < ?"
            + seg_sql + dim_sql + name_sql,
            (_num(lo), _num(hi), *seg_args, *dim_args, *name_args)).fetchall():
            t = math.floor(float(created) / bucket_s) * bucket_s
            a = slot(name, metric, _group_of(by, seg, seg_id,
                                             {"judge_model": jm, "metric_version": mv}), t)
            if status == "ok" and value is not None:
                a.n_ok += 1
                a.s += float(value)
                a.ss += float(value) ** 2
                if label is not None:
                    a.n_labelled += 1
                    a.n_fail += label == "fail"
            elif status == "error":
                a.n_error += 1
            elif status == "skipped":
                a.n_skipped += 1
    return {name: {g: sorted(per.items()) for g, per in groups.items()}
            for name, groups in out.items()}


def time_span(conn: Any, window: Window = Window()) -> tuple[float, float] | None:
    """(first, last) time with scores in the window: from the rollups' hours, refined by the
    raw rows at both ends (cheap: index range scans)."""
    lo = -math.inf if window.since is None else window.since
    hi = math.inf if window.until is None else window.until
    h = conn.execute(
        "SELECT min(hour), max(hour) FROM hourly_scores WHERE hour >= ? AND hour < ?",
        (_num(math.floor(lo / HOUR) * HOUR if math.isfinite(lo) else lo), _num(hi))).fetchone()
    if h[0] is None:
        return None
    h0, h1 = int(h[0]), int(h[1])

    def raw(agg: str, hour: int) -> float | None:
        in_sql, in_args = _names_clause(_names_in_hour(conn, hour))
        v = conn.execute(
            f"SELECT {agg}(created_at) FROM scores WHERE created_at >= ? AND created_at < ?"
            + in_sql, (max(hour, lo), min(hour + HOUR, hi), *in_args)).fetchone()[0]
        return None if v is None else float(v)

    # the first and last hours' raw rows refine the span; pruned ones leave the hour's bound
    first = raw("min", h0)
    last = raw("max", h1)
    return (first if first is not None else max(float(h0), lo),
            last if last is not None else min(float(h1) + HOUR - 1, hi))


def merge(groups: Iterable[Mapping[str, Agg]]) -> dict[str, Agg]:
    """Score aggregates of several groups added together."""
    out: dict[str, Agg] = {}
    for per in groups:
        for name, a in per.items():
            if name not in out:
                out[name] = Agg(name, a.metric)
            out[name].add(a)
    return out


def merge_records(groups: Iterable[RecordAgg]) -> RecordAgg:
    out = RecordAgg()
    for a in groups:
        out.add(a)
    return out


def merge_skips(groups: Iterable[Mapping[str, Mapping[str, int]]]
                ) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for per in groups:
        for metric, reasons in per.items():
            slot = out.setdefault(metric, {})
            for reason, n in reasons.items():
                slot[reason] = slot.get(reason, 0) + n
    return out


def label_bins(conn: Any, name: str, window: Window, *,
               where: Mapping[str, str] | None = None,
               seg: SegmentIndex | None = None) -> dict[tuple[int, str], int]:
    """(bin of 100, label or "") → ok values of score ``name`` in the window (whole hours
    from ``hourly_bins``, cut hours from raw rows)."""
    seg = seg or SegmentIndex(conn)
    ids = seg.matching(where)
    seg_sql, seg_args = seg_clause(ids)
    out: dict[tuple[int, str], int] = {}
    lo, hi = _hours(window)
    if lo < hi:
        for b, label, n in conn.execute(
            "SELECT bin, label, sum(n) FROM hourly_bins WHERE name = ? AND hour >= ?"
            " AND hour < ?" + seg_sql + " GROUP BY bin, label",
            (name, _num(lo), _num(hi), *seg_args)).fetchall():
            k = (int(b), label or "")
            out[k] = out.get(k, 0) + int(n)
    for _hour, t0, t1 in _edges(window):
        for value, label in conn.execute(
            "SELECT value, label FROM scores WHERE name = ? AND status = 'ok'"
            " AND value IS NOT NULL AND created_at >= ? AND created_at < ?" + seg_sql,
            (name, t0, t1, *seg_args)).fetchall():
            k = (value_bin(float(value)), label or "")
            out[k] = out.get(k, 0) + 1
    return out
