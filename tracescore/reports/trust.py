"""Judge vs humans, read from the database: labelled pairs, agreement, corrected estimates.

For every score name with human labels (``ts.add_label``, ``tracescore label``; schema v4's
``labels`` table) this module gives the readers (``report``, ``compare``, ``calibrate``, the
HTML page, the monitors) plain data — no formatting (:mod:`.trust_text`, :mod:`.html._trust`):

- **the labelled pairs** of a window and a segment filter: for each labelled **record** (a
  label is about the record the annotator read, ``labels.record_id``), the judge's value (the
  stored ok score of that name on that record, scored in the window, matching the filter; the
  newest of the label's metric version when it was scored several times) and the human value.
  A label without a record id (imported before its trace's records arrived) is about the
  trace's newest record created at or before the label, else its oldest record. A label
  without a metric version (written before its record was scored: ``log_record`` then
  ``add_label`` at once) is bound **when read** to the metric version the record was being
  scored with when the label was written: the version of the record's newest scoring job
  (``jobs``: one row per record, metric and version, kept as long as the record) created at
  or before the label, else of its first job (no job: its score's version) — so a later
  re-scoring by a new metric version does not pair with it. A label bound to another metric version than the window's scores of
  its record judged something else: it is left out and counted (``stale``); a label whose
  record (or trace) has no ok score of that name at all is counted as ``unmatched``. Several
  annotators on one record: the human value is **the mean of the annotators** for a numeric
  score and **their majority** for a yes/no one (a tie is left out of the yes/no tables and
  counted), and where two annotators labelled the same records their own agreement is given
  (``inter_annotator``) — the ceiling a judge can be held to.
- **agreement** (:mod:`tracescore.trust.agreement`): accuracy, Cohen's κ and the confusion
  matrix for a yes/no score; Spearman and MAE for a numeric one; the bias (judge mean − human
  mean) with its paired interval for both.
- **the corrected estimate** (:mod:`tracescore.trust.ppi`): the judge's mean over every scored
  record in the window — the rollups' n, Σf, Σf² (:func:`.query.score_aggs`), which include
  the labelled records, so ``unlabelled_includes_labelled=True`` takes them out — corrected by
  the judge-minus-human difference on the labelled ones (PPI++). Labels drawn by a label plan
  (``source = 'plan:<id>'``) get the stratified form with the plan's strata (each record of the
  window put back into its stratum by :func:`tracescore.trust.plan.parse_stratum`; the weights
  are the strata's sizes in the window, which are the plan's N_k when the window is the
  population the plan drew from); other labels are *assumed a random sample of the window*,
  and the output says which of the two it did.

Blocking database reads on the caller's connection (SQLite or PostgreSQL, through the same
SQL); everything else is pure computation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..monitor.stats import Difference, Moments, _z_quantile
from . import query as Q

__all__ = [
    "PLAN_PREFIX", "Correction", "LabelledPairs", "Pair", "TrustSummary", "corrected",
    "corrected_difference", "label_names", "read_pairs", "trust_summaries",
]

#: ``labels.source`` of a label drawn by a plan: ``plan:<plan_id>``.
PLAN_PREFIX = "plan:"
RANDOM = "random sample"
PLAN = "plan"
ASSUME_RANDOM = "labels are assumed a random sample of the window's scored records"


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
#: Every ok score of a name on the traces with labels of that name (window or not: a label's
#: version is bound to the record's scores of its time), through the records' trace index.
_SCORES = (
    "SELECT r.trace_id, s.record_id, s.score_id, s.value, s.metric_version, s.seg_id,"
    " s.judge_model, s.created_at, s.metric, r.created_at FROM scores s JOIN records r"
    " ON r.record_id = s.record_id WHERE s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL"
    " AND r.trace_id IN (SELECT trace_id FROM labels WHERE name = ? AND value IS NOT NULL)")


#: The scoring jobs (record, metric, version, created) of the traces with labels of a name.
_JOBS = (
    "SELECT j.record_id, j.metric, j.metric_version, j.created_at, j.job_id FROM jobs j"
    " JOIN records r ON r.record_id = j.record_id WHERE r.trace_id IN"
    " (SELECT trace_id FROM labels WHERE name = ? AND value IS NOT NULL"
    " AND metric_version IS NULL)")


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
    seg_sql, seg_args = Q._seg_clause(seg.matching(where), "s.seg_id")
    dim_sql, dim_args = Q._score_dim_clause(where, "s.")
    lo = Q._num(-math.inf if window.since is None else window.since)
    hi = Q._num(math.inf if window.until is None else window.until)
    # trace -> record -> (record's created_at, its scores)
    traces: dict[str, dict[str, tuple[float, list[_Score]]]] = {}
    metric = name
    for (trace, rid, sid, sv, sver, seg_id, jm, created, smetric,
         rcreated) in conn.execute(_SCORES, (name, name)).fetchall():
        metric = smetric or metric
        recs = traces.setdefault(str(trace), {})
        entry = recs.setdefault(str(rid), (float(rcreated or 0.0), []))
        entry[1].append(_Score(int(sid), float(sv), sver, None if seg_id is None
                               else int(seg_id), jm, float(created)))
    # record -> metric -> its jobs (created, id, version): binds labels without a version
    jobs: dict[str, dict[str, list[tuple[float, int, str]]]] = {}
    for rid, jmetric, jver, jcreated, jid in conn.execute(_JOBS, (name,)).fetchall():
        jobs.setdefault(str(rid), {}).setdefault(str(jmetric), []).append(
            (float(jcreated or 0.0), int(jid), str(jver)))
    eligible = {int(sid) for (sid,) in conn.execute(
        "SELECT s.score_id FROM scores s WHERE s.name = ? AND s.status = 'ok'"
        " AND s.value IS NOT NULL AND s.created_at >= ? AND s.created_at < ?"
        " AND s.record_id IN (SELECT r.record_id FROM records r JOIN labels l"
        " ON l.trace_id = r.trace_id AND l.name = ?)" + seg_sql + dim_sql,
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
        " (SELECT 1 FROM records r JOIN scores s ON s.record_id = r.record_id AND s.name = ?"
        " AND s.status = 'ok' AND s.value IS NOT NULL WHERE r.trace_id = l.trace_id"
        " AND (l.record_id IS NULL OR r.record_id = l.record_id))",
        (name, name)).fetchone()[0])


# -- agreement -----------------------------------------------------------------------------------
def _majority(p: Pair) -> float | None:
    """A yes/no pair's human verdict by majority of the annotators; None on a tie."""
    yes = sum(1 for _, v in p.annotators if v >= 0.5)
    no = len(p.annotators) - yes
    return None if yes == no else float(yes > no)


def _is_binary(lp: LabelledPairs, binary: bool | None) -> bool:
    if not lp.pairs:
        return bool(binary)
    zero_one = all(p.judge in (0.0, 1.0) and all(v in (0.0, 1.0) for _, v in p.annotators)
                   for p in lp.pairs)
    return zero_one if binary is None else (binary and zero_one)


def agreement(lp: LabelledPairs, binary: bool, *, min_n: int | None = None) -> Any:
    """Binary or numeric agreement of the judge with the humans on these pairs."""
    from ..trust import agreement as A

    kw = {} if min_n is None else {"min_n": min_n}
    if binary:
        js, hs = [], []
        for p in lp.pairs:
            h = _majority(p)
            if h is not None:
                js.append(p.judge)
                hs.append(h)
        return A.binary_agreement(js, hs, **kw)
    return A.numeric_agreement([p.judge for p in lp.pairs], [p.human for p in lp.pairs], **kw)


def inter_annotator(lp: LabelledPairs, binary: bool) -> dict[str, Any] | None:
    """Agreement between the two annotators who labelled the most records in common (None when
    no two annotators share a record)."""
    from ..trust import agreement as A

    per: dict[str, dict[str, float]] = {}
    for p in lp.pairs:
        for a, v in p.annotators:
            per.setdefault(a, {})[p.record_id or p.trace_id] = v
    best: tuple[int, str, str] | None = None
    names = sorted(per)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = len(per[a].keys() & per[b].keys())
            if shared and (best is None or shared > best[0]):
                best = (shared, a, b)
    if best is None:
        return None
    _, a, b = best
    common = sorted(per[a].keys() & per[b].keys())
    xa, xb = [per[a][t] for t in common], [per[b][t] for t in common]
    stats = (A.binary_agreement(xa, xb) if binary else A.numeric_agreement(xa, xb))
    return {"annotators": [a, b], "traces": len(common), "agreement": stats}


# -- corrected estimates -------------------------------------------------------------------------
@dataclass(frozen=True)
class Correction:
    """The corrected estimate of one score's mean in one window, and how it was made.

    design: "random sample" (PPI++) or "plan" (stratified PPI++ over ``plan_id``'s strata);
    assumption: the words to print beside it; result: the :class:`~tracescore.trust.ppi.
    PPIResult` (corrected, plain judge mean, labels only), None when it could not be made
    (``reason``)."""

    design: str
    assumption: str
    result: Any
    plan_id: str | None = None
    reason: str | None = None
    #: labels not used by the estimate (e.g. not drawn by the plan), with why
    unused: int = 0
    unused_reason: str | None = None

    @property
    def value(self) -> float | None:
        return None if self.result is None else self.result.corrected.value

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.corrected.value is not None

    def to_json(self) -> dict[str, Any]:
        return {"design": self.design, "plan_id": self.plan_id, "assumption": self.assumption,
                "reason": self.reason, "unused_labels": self.unused,
                "unused_reason": self.unused_reason,
                **(self.result.to_json() if self.result is not None else {})}


def _plan_strata(conn: Any, plan_id: str, name: str) -> list[str]:
    return sorted({str(s) for (s,) in conn.execute(
        "SELECT DISTINCT stratum FROM label_plan WHERE plan_id = ? AND name = ?",
        (plan_id, name)).fetchall() if s is not None})


def _population(conn: Any, name: str, window: Q.Window, where: Mapping[str, str] | None,
                seg: Q.SegmentIndex) -> list[tuple[float, int | None, int]]:
    """(value, seg_id, count) of the ok scores of ``name`` in the window: one row per distinct
    value and segment (a yes/no judge's window is a handful of rows)."""
    seg_sql, seg_args = Q._seg_clause(seg.matching(where), "s.seg_id")
    dim_sql, dim_args = Q._score_dim_clause(where, "s.")
    lo = Q._num(-math.inf if window.since is None else window.since)
    hi = Q._num(math.inf if window.until is None else window.until)
    return [(float(v), None if sid is None else int(sid), int(n)) for v, sid, n in conn.execute(
        "SELECT s.value, s.seg_id, count(*) FROM scores s WHERE s.name = ? AND s.status = 'ok'"
        " AND s.value IS NOT NULL AND s.created_at >= ? AND s.created_at < ?" + seg_sql
        + dim_sql + " GROUP BY s.value, s.seg_id", (name, lo, hi, *seg_args, *dim_args))]


def _release(seg: Q.SegmentIndex, seg_id: int | None) -> str | None:
    rel = seg.value(seg_id, "release")
    return None if rel is None else f"release={rel}"


def _stratified(conn: Any, lp: LabelledPairs, plan_id: str, window: Q.Window,
                where: Mapping[str, str] | None, seg: Q.SegmentIndex, alpha: float,
                min_n: int | None) -> Correction | str:
    """Stratified PPI++ over the plan's strata, or the reason it cannot be made."""
    from ..trust.plan import parse_stratum
    from ..trust.ppi import MIN_LABELS, Stratum, stratified_ppi_mean

    names = _plan_strata(conn, plan_id, lp.name)
    if not names:
        return f"plan {plan_id} has no rows for {lp.name!r}"
    rules = [(n, parse_stratum(n)) for n in names]

    def stratum_of(value: float, seg_id: int | None) -> str | None:
        segment = _release(seg, seg_id)
        return next((n for n, r in rules if r.contains(value, segment)), None)

    moments: dict[str, Moments] = {n: Moments(0, 0.0, 0.0) for n in names}
    outside = 0
    for value, seg_id, count in _population(conn, lp.name, window, where, seg):
        k = stratum_of(value, seg_id)
        if k is None:
            outside += count
        else:
            moments[k] = moments[k] + Moments(count, count * value, count * value * value)
    if outside:
        return (f"{outside} scored records in the window fall in none of plan {plan_id}'s "
                "strata (a release or score range the plan did not draw from)")
    mine = [p for p in lp.pairs if p.source == PLAN_PREFIX + plan_id]
    fs: dict[str, list[float]] = {n: [] for n in names}
    ys: dict[str, list[float]] = {n: [] for n in names}
    for p in mine:
        k = stratum_of(p.judge, p.seg_id)
        if k is not None:
            fs[k].append(p.judge)
            ys[k].append(p.human)
    result = stratified_ppi_mean(
        [Stratum(n, moments[n], fs[n], ys[n]) for n in names], alpha=alpha,
        unlabelled_includes_labelled=True, min_n=MIN_LABELS if min_n is None else min_n)
    unused = lp.labels - sum(len(p.annotators) for p in mine)
    return Correction(PLAN, f"labels drawn by plan {plan_id}, stratified over its "
                      f"{len(names)} strata", result, plan_id, result.corrected.reason,
                      unused, "not drawn by the plan" if unused else None)


def corrected(conn: Any, lp: LabelledPairs, unlabelled: Moments, window: Q.Window = Q.Window(),
              *, where: Mapping[str, str] | None = None, seg: Q.SegmentIndex | None = None,
              alpha: float = 0.05, min_n: int | None = None) -> Correction:
    """The judge-corrected mean of ``lp``'s score in ``window``.

    ``unlabelled``: the window's judge scores of that name as moments (n, Σf, Σf²: the
    rollups, labelled records included). Labels of a plan → stratified PPI++ over the plan's
    strata (the plan with the most labelled pairs here); if the window holds records outside
    the plan's strata, plain PPI++ over all labels instead, with the reason said.
    """
    from ..trust.ppi import MIN_LABELS, ppi_mean

    seg = seg or Q.SegmentIndex(conn)
    plans = Counter(p.source[len(PLAN_PREFIX):] for p in lp.pairs
                    if p.source.startswith(PLAN_PREFIX))
    fallback = None
    if plans:
        plan_id = plans.most_common(1)[0][0]
        got = _stratified(conn, lp, plan_id, window, where, seg, alpha, min_n)
        if isinstance(got, Correction):
            return got
        fallback = got
    assumption = ASSUME_RANDOM + (f" (no stratified estimate: {fallback})" if fallback else "")
    try:
        result = ppi_mean(unlabelled, [p.judge for p in lp.pairs], [p.human for p in lp.pairs],
                          alpha=alpha, unlabelled_includes_labelled=True,
                          min_n=MIN_LABELS if min_n is None else min_n)
    except ValueError as exc:  # the labelled scores are not among the rollups' (pruned hour)
        return Correction(RANDOM, assumption, None, reason=str(exc))
    return Correction(RANDOM, assumption, result, reason=result.corrected.reason)


def corrected_difference(a: Correction | None, b: Correction | None,
                         alpha: float = 0.05) -> Difference:
    """current − baseline of two corrected estimates on independent sides: SE = √(se_a² +
    se_b²), normal interval and two-sided p-value. Estimate None unless both sides have one."""
    method = "difference of corrected estimates, normal, SE = sqrt(se_a^2 + se_b^2)"
    if a is None or b is None or not a.ok or not b.ok:
        return Difference(None, None, None, None, method)
    ca, cb = a.result.corrected, b.result.corrected
    est = ca.value - cb.value
    if ca.se is None or cb.se is None:
        return Difference(est, None, None, None, method)
    se = math.sqrt(ca.se ** 2 + cb.se ** 2)
    if se == 0:
        return Difference(est, est, est, None, method)
    half = _z_quantile(1 - alpha / 2) * se
    p = math.erfc(abs(est) / se / math.sqrt(2))
    return Difference(est, est - half, est + half, p, method)


# -- per report ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrustSummary:
    """One score name with labels in a window: agreement and the corrected estimate."""

    name: str
    metric: str
    binary: bool
    pairs: int
    labels: int
    annotators: list[str]
    stale: int
    agreement: Any
    correction: Correction | None
    inter_annotator: dict[str, Any] | None = None
    #: the plain judge mean of the window (the report's number), for the side-by-side
    judge_mean: float | None = None
    judge_n: int = 0
    ties: int = 0  # yes/no traces whose annotators split evenly (out of the agreement table)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        ia = self.inter_annotator
        return {
            "metric": self.metric, "binary": self.binary, "labelled_traces": self.pairs,
            "labels": self.labels, "annotators": self.annotators,
            "stale_labels": self.stale, "annotator_ties": self.ties,
            "human_value": ("majority of the annotators per record (ties left out)"
                            if self.binary else "mean of the annotators per record"),
            "judge_mean": {"value": self.judge_mean, "n": self.judge_n,
                           "label": "judge mean (uncorrected)"},
            "agreement": self.agreement.to_json(),
            "inter_annotator": None if ia is None else {
                "annotators": ia["annotators"], "traces": ia["traces"],
                "agreement": ia["agreement"].to_json()},
            "corrected": None if self.correction is None else self.correction.to_json(),
        }


def summarise_pairs(conn: Any, lp: LabelledPairs, agg: Q.Agg | None, binary: bool | None,
                    window: Q.Window, where: Mapping[str, str] | None, seg: Q.SegmentIndex,
                    *, min_pairs: int | None = None, min_labels: int | None = None
                    ) -> TrustSummary:
    """Agreement and (with ``agg``, the window's rollup of the name) the corrected mean."""
    is_bin = _is_binary(lp, binary)
    corr = None
    if agg is not None:
        corr = corrected(conn, lp, agg.moments(), window, where=where, seg=seg,
                         min_n=min_labels)
    ties = sum(1 for p in lp.pairs if is_bin and _majority(p) is None)
    return TrustSummary(
        lp.name, lp.metric, is_bin, len(lp.pairs), lp.labels, lp.annotators, lp.stale,
        agreement(lp, is_bin, min_n=min_pairs), corr, inter_annotator(lp, is_bin),
        None if agg is None else agg.mean, 0 if agg is None else agg.n_ok, ties)


def trust_summaries(conn: Any, window: Q.Window, scores: Mapping[str, Q.Agg], *,
                    where: Mapping[str, str] | None = None, seg: Q.SegmentIndex | None = None,
                    info: Any = None) -> list[TrustSummary]:
    """Per score name of ``scores`` (the window's aggregates) that has labelled pairs in the
    window: agreement and the corrected estimate beside the plain judge mean."""
    names = [n for n in label_names(conn) if n in scores and scores[n].n_ok]
    if not names:
        return []
    seg = seg or Q.SegmentIndex(conn)
    out = []
    for name in names:
        lp = read_pairs(conn, name, window, where=where, seg=seg)
        if not lp.pairs:
            continue
        a = scores[name]
        binary = None if info is None else info.binary(
            a.metric, abs(a.ss - a.s) < 1e-9, a.n_ok)
        out.append(summarise_pairs(conn, lp, a, binary, window, where, seg))
    return out


def split_pairs(lp: LabelledPairs, by: str, seg: Q.SegmentIndex
                ) -> dict[str | None, LabelledPairs]:
    """``lp`` split by a dimension: a score's (judge_model, metric_version) or a record's."""
    groups: dict[str | None, list[Pair]] = {}
    for p in lp.pairs:
        if by == "judge_model":
            g = p.judge_model or None
        elif by == "metric_version":
            g = p.metric_version or None
        else:
            g = seg.value(p.seg_id, by)
        groups.setdefault(g, []).append(p)
    return {g: LabelledPairs(lp.name, lp.metric, ps)
            for g, ps in sorted(groups.items(), key=lambda kv: (kv[0] is None, str(kv[0])))}
