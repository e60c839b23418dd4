"""Judge vs humans, the data: the labelled pairs of a score — for each labelled record, the
judge's stored value and the human value — read from the database (schema v4's ``labels``),
with the rules that bind a label to its record and metric version (see :mod:`.trust`).

Blocking database reads on the caller's connection (SQLite or PostgreSQL, through the same
SQL)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..store.compat import trace_join
from . import query as Q

#: ``labels.source`` of a label drawn by a plan: ``plan:<plan_id>``.
PLAN_PREFIX = "plan:"


@dataclass(frozen=True, slots=True)
class Pair:
    """One labelled record: the judge's stored value and the humans' (mean of annotators)."""

    trace_id: str
    judge: float
    human: float
    annotators: tuple[tuple[str, float], ...]
    source: str
    seg_id: int | None
    judge_model: str | None
    metric_version: str | None
    record_id: str | None = None


@dataclass(frozen=True)
class LabelledPairs:
    """The pairs of one score name in a window, and what was left out (and why)."""

    name: str
    metric: str
    pairs: list[Pair]
    #: labels bound to another metric version than the record's scores in the window
    stale: int = 0
    #: labels whose record (or trace) has no ok score of that name at all
    unmatched: int = 0

    @property
    def labels(self) -> int:
        return sum(len(p.annotators) for p in self.pairs)

    @property
    def annotators(self) -> list[str]:
        return sorted({a for p in self.pairs for a, _ in p.annotators})


def label_names(conn: Any) -> list[str]:
    """The score names with at least one human label (empty before schema v4)."""
    from ..store.compat import has_table

    if not has_table(conn, "labels"):
        return []
    return sorted(str(n) for (n,) in conn.execute(
        "SELECT DISTINCT name FROM labels WHERE value IS NOT NULL").fetchall())


#: The labels of a name (with a value).
_LABELS = (
    "SELECT trace_id, record_id, value, metric_version, annotator, source, created_at"
    " FROM labels WHERE name = ? AND value IS NOT NULL ORDER BY created_at, id")
#: The traces with labels of a name (each once), read first: ``{join}`` then finds their
#: records (:func:`..store.compat.trace_join`, a primary-key range on SQLite; ``CROSS JOIN``
#: keeps that order on SQLite, a plain join on PostgreSQL) — labels are few, scores many.
_LABELLED = "(SELECT DISTINCT trace_id FROM labels WHERE name = ? AND value IS NOT NULL"
#: Every ok score of a name on the traces with labels of that name (window or not: a label's
#: version is bound to the record's scores of its time).
_SCORES = (
    "SELECT r.trace_id, s.record_id, s.score_id, s.value, s.metric_version, s.seg_id,"
    " s.judge_model, s.created_at, s.metric, r.created_at FROM " + _LABELLED + ") l"
    " CROSS JOIN records r ON {join} CROSS JOIN scores s ON s.rec = r.seq"
    " AND s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL")


#: The scoring jobs (record, metric, version, created) of the traces with labels of a name.
_JOBS = (
    "SELECT j.record_id, j.metric, j.metric_version, j.created_at, j.job_id FROM "
    + _LABELLED + " AND metric_version IS NULL) l CROSS JOIN records r ON {join}"
    " CROSS JOIN jobs j ON j.rec = r.seq")


@dataclass(frozen=True, slots=True)
class _Score:
    score_id: int
    value: float
    version: str | None
    seg_id: int | None
    judge_model: str | None
    created_at: float


def _bind_record(records: Mapping[str, tuple[float, list[_Score]]], record_id: str | None,
                 at: float) -> str | None:
    """The record a label is about: its own, else (a label by trace before the records
    arrived) the trace's newest record created at or before the label, else its oldest."""
    if record_id is not None:
        return record_id if record_id in records else None
    if not records:
        return None
    ordered = sorted(records.items(), key=lambda kv: (kv[1][0], kv[0]))
    before = [rid for rid, (created, _) in ordered if created <= at]
    return before[-1] if before else ordered[0][0]


def _bind_version(scores: list[_Score], jobs: list[tuple[float, int, str]],
                  version: str | None, at: float) -> str | None:
    """A label's metric version: its own, else the version of the record's newest scoring
    job (created, id, version) created at or before the label, else of its first job, else
    (no job) of its newest score created at or before the label, else of its first score."""
    if version is not None:
        return version
    if jobs:
        ordered_jobs = sorted(jobs)
        before_jobs = [j for j in ordered_jobs if j[0] <= at]
        return (before_jobs[-1] if before_jobs else ordered_jobs[0])[2]
    if not scores:
        return None
    ordered = sorted(scores, key=lambda s: (s.created_at, s.score_id))
    before = [s for s in ordered if s.created_at <= at]
    return (before[-1] if before else ordered[0]).version


def read_pairs(conn: Any, name: str, window: Q.Window = Q.Window(), *,
               where: Mapping[str, str] | None = None,
               seg: Q.SegmentIndex | None = None) -> LabelledPairs:
    """The labelled pairs of score ``name`` whose score lies in ``window`` and matches
    ``where`` (record and score dimensions, as the report's filter): one per labelled record
    (module docstring: how a label finds its record and its metric version)."""
    seg = seg or Q.SegmentIndex(conn)
    seg_sql, seg_args = Q.seg_clause(seg.matching(where), "s.seg_id")
    dim_sql, dim_args = Q.score_dim_clause(where, "s.")
    lo, hi = window.bounds()
    join = trace_join(conn, "l.trace_id")
    # trace -> record -> (record's created_at, its scores)
    traces: dict[str, dict[str, tuple[float, list[_Score]]]] = {}
    metric = name
    for (trace, rid, sid, sv, sver, seg_id, jm, created, smetric,
         rcreated) in conn.execute(_SCORES.format(join=join), (name, name)).fetchall():
        metric = smetric or metric
        recs = traces.setdefault(str(trace), {})
        entry = recs.setdefault(str(rid), (float(rcreated or 0.0), []))
        entry[1].append(_Score(int(sid), float(sv), sver, None if seg_id is None
                               else int(seg_id), jm, float(created)))
    # record -> metric -> its jobs (created, id, version): binds labels without a version
    jobs: dict[str, dict[str, list[tuple[float, int, str]]]] = {}
    for rid, jmetric, jver, jcreated, jid in conn.execute(_JOBS.format(join=join),
                                                         (name,)).fetchall():
        jobs.setdefault(str(rid), {}).setdefault(str(jmetric), []).append(
            (float(jcreated or 0.0), int(jid), str(jver)))
    eligible = {int(sid) for (sid,) in conn.execute(
        "SELECT s.score_id FROM scores s WHERE s.name = ? AND s.status = 'ok'"
        " AND s.value IS NOT NULL AND s.created_at >= ? AND s.created_at < ?"
        " AND s.rec IN (SELECT r.seq FROM labels l CROSS JOIN records r ON "
        + join + " WHERE l.name = ?)" + seg_sql + dim_sql,
        (name, lo, hi, name, *seg_args, *dim_args)).fetchall()}
    # record -> annotator -> (value, bound version, source); the newest label of a key wins
    labels: dict[str, dict[str, tuple[float, str | None, str]]] = {}
    trace_of: dict[str, str] = {}
    unmatched = 0
    for trace, rid, lv, lver, annotator, source, at in conn.execute(
            _LABELS, (name,)).fetchall():
        records = traces.get(str(trace), {})
        record = _bind_record(records, None if rid is None else str(rid), float(at))
        if record is None:
            unmatched += 1
            continue
        version = _bind_version(records[record][1], jobs.get(record, {}).get(metric, []), lver,
                                float(at))
        labels.setdefault(record, {})[str(annotator or "")] = (
            float(lv), version, str(source or "manual"))
        trace_of[record] = str(trace)
    pairs: list[Pair] = []
    stale = 0
    for record in sorted(labels):
        in_window = [s for s in traces[trace_of[record]][record][1] if s.score_id in eligible]
        if not in_window:
            continue  # scored outside the window or the filter: not this report's business
        # the newest score first; labels bind to their version's newest score
        ranked = sorted(in_window, key=lambda s: (s.created_at, s.score_id), reverse=True)
        wanted = {ver for _, ver, _ in labels[record].values() if ver is not None}
        chosen = next((s for s in ranked if not wanted or s.version in wanted), None)
        if chosen is None:
            stale += len(labels[record])
            continue
        kept = []
        for annotator, (value, ver, _src) in sorted(labels[record].items()):
            if ver is not None and ver != chosen.version:
                stale += 1
            else:
                kept.append((annotator, value))
        if not kept:
            continue
        sources = Counter(src for _, (_, _, src) in labels[record].items())
        pairs.append(Pair(trace_of[record], chosen.value,
                          math.fsum(v for _, v in kept) / len(kept), tuple(kept),
                          sources.most_common(1)[0][0], chosen.seg_id, chosen.judge_model,
                          chosen.version, record))
    return LabelledPairs(name, metric, pairs, stale, unmatched)


def unmatched_labels(conn: Any, name: str) -> int:
    """How many labels of ``name`` match no scored record (their record or trace has no ok
    score of that name): labels imported ahead of their records, or of another database."""
    from ..store.compat import has_table

    if not has_table(conn, "labels"):
        return 0
    return int(conn.execute(
        "SELECT count(*) FROM labels l WHERE l.name = ? AND l.value IS NOT NULL AND NOT EXISTS"
        " (SELECT 1 FROM records r CROSS JOIN scores s ON s.rec = r.seq"
        " AND s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL WHERE "
        + trace_join(conn, "l.trace_id") + " AND (l.record_id IS NULL"
        " OR r.record_id = l.record_id))",
        (name, name)).fetchone()[0])


#: The ok scores of a name on the traces labelled under it, with their details: from the
#: labelled traces (few) to their records — ``{join}``: :func:`..store.compat.trace_join`, a
#: primary-key range on SQLite (``CROSS JOIN`` keeps that order there; a plain join on
#: PostgreSQL) — to the records' scores.
LABELLED_SCORES = (
    "SELECT s.record_id, s.created_at, s.details FROM (SELECT DISTINCT trace_id FROM labels"
    " WHERE name = ? AND value IS NOT NULL) l CROSS JOIN records r ON {join}"
    " CROSS JOIN scores s ON s.rec = r.seq AND s.name = ? AND s.status = 'ok'")


def labelled_score_details(conn: Any, name: str) -> list[tuple[Any, Any, Any]]:
    """(record_id, created_at, details) of the ok scores of ``name`` on the traces labelled
    under it (the details as stored: JSON text on SQLite, a dict on PostgreSQL)."""
    return conn.execute(LABELLED_SCORES.format(join=trace_join(conn, "l.trace_id")),
                        (name, name)).fetchall()


def plan_strata(conn: Any, plan_id: str, name: str) -> list[str]:
    """The strata of label plan ``plan_id`` for score ``name``, sorted."""
    return sorted({str(s) for (s,) in conn.execute(
        "SELECT DISTINCT stratum FROM label_plan WHERE plan_id = ? AND name = ?",
        (plan_id, name)).fetchall() if s is not None})


def value_counts(conn: Any, name: str, window: Q.Window, where: Mapping[str, str] | None,
                 seg: Q.SegmentIndex) -> list[tuple[float, int | None, int]]:
    """(value, seg_id, count) of the ok scores of ``name`` in the window: one row per distinct
    value and segment (a yes/no judge's window is a handful of rows)."""
    seg_sql, seg_args = Q.seg_clause(seg.matching(where), "s.seg_id")
    dim_sql, dim_args = Q.score_dim_clause(where, "s.")
    lo, hi = window.bounds()
    return [(float(v), None if sid is None else int(sid), int(n)) for v, sid, n in conn.execute(
        "SELECT s.value, s.seg_id, count(*) FROM scores s WHERE s.name = ? AND s.status = 'ok'"
        " AND s.value IS NOT NULL AND s.created_at >= ? AND s.created_at < ?" + seg_sql
        + dim_sql + " GROUP BY s.value, s.seg_id", (name, lo, hi, *seg_args, *dim_args))]
