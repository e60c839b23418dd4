"""Judge vs humans, read from the database: labelled pairs (:mod:`.trust_pairs`), agreement,
corrected estimates.

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
- **the corrected estimate** (:mod:`tracescore.stats.ppi`): the judge's mean over every scored
  record in the window — the rollups' n, Σf, Σf² (:func:`.query.score_aggs`), which include
  the labelled records, so ``unlabelled_includes_labelled=True`` takes them out — corrected by
  the judge-minus-human difference on the labelled ones (PPI++). Labels drawn by a label plan
  (``source = 'plan:<id>'``) get the stratified form with the plan's strata (each record of the
  window put back into its stratum by :func:`tracescore.trust.plan.parse_stratum`; the weights
  are the strata's sizes in the window, which are the plan's N_k when the window is the
  population the plan drew from: the plan's inclusion probabilities n_k/N_k, never a pooled
  "random sample"; records of the window outside every stratum are left out of it, and its
  ``population`` says so); other labels are *assumed a random sample of the window*,
  and the output says which of the two it did. Both carry a check that the labels look like
  a random draw (:mod:`tracescore.trust.selection`: Welch's test of the labelled vs the
  unlabelled judge scores; within strata for a plan), whose warning every output prints.

Blocking database reads on the caller's connection (SQLite or PostgreSQL, through the same
SQL); everything else is pure computation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..read import query as Q
from ..read.trust_pairs import (  # noqa: F401 (re-exported)
    PLAN_PREFIX,
    LabelledPairs,
    Pair,
    label_names,
    read_pairs,
    unmatched_labels,
)
from ..stats import Difference, Moments, z_quantile

__all__ = [
    "PLAN_PREFIX", "Correction", "LabelledPairs", "Pair", "TrustSummary", "corrected",
    "corrected_difference", "label_names", "read_pairs", "trust_summaries",
]

RANDOM = "random sample"
PLAN = "plan"
ASSUME_RANDOM = "labels are assumed a random sample of the window's scored records"


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
    assumption: the words to print beside it; result: the :class:`~tracescore.stats.ppi.
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
    #: do the labelled records look like a random draw (within the plan's strata, for a
    #: plan)? :class:`~tracescore.trust.selection.DrawCheck`; None when not checked
    draw: Any = None
    #: the records the corrected estimate speaks for (a plan's: those in its strata)
    population: str = "scored records in the window"

    @property
    def warning(self) -> str | None:
        """The draw check's warning (every output showing the estimate prints it)."""
        return None if self.draw is None else self.draw.warning

    @property
    def value(self) -> float | None:
        return None if self.result is None else self.result.corrected.value

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.corrected.value is not None

    def to_json(self) -> dict[str, Any]:
        return {"design": self.design, "plan_id": self.plan_id, "assumption": self.assumption,
                "population": self.population, "warning": self.warning,
                "label_draw": None if self.draw is None else self.draw.to_json(),
                "reason": self.reason, "unused_labels": self.unused,
                "unused_reason": self.unused_reason,
                **(self.result.to_json() if self.result is not None else {})}


def _plan_strata(conn: Any, plan_id: str, name: str) -> list[str]:
    from ..read.trust_pairs import plan_strata

    return plan_strata(conn, plan_id, name)


def _population(conn: Any, name: str, window: Q.Window, where: Mapping[str, str] | None,
                seg: Q.SegmentIndex) -> list[tuple[float, int | None, int]]:
    """(value, seg_id, count) of the ok scores of ``name`` in the window: one row per distinct
    value and segment (a yes/no judge's window is a handful of rows)."""
    from ..read.trust_pairs import value_counts

    return value_counts(conn, name, window, where, seg)


def _release(seg: Q.SegmentIndex, seg_id: int | None) -> str | None:
    rel = seg.value(seg_id, "release")
    return None if rel is None else f"release={rel}"


def _stratified(conn: Any, lp: LabelledPairs, plan_id: str, window: Q.Window,
                where: Mapping[str, str] | None, seg: Q.SegmentIndex, alpha: float,
                min_n: int | None) -> Correction | str:
    """Stratified PPI++ over the plan's strata, or the reason it cannot be made."""
    from ..stats.ppi import MIN_LABELS, Stratum, stratified_ppi_mean
    from ..trust.plan import parse_stratum
    from ..trust.selection import stratified_draw_check

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
    inside = sum(m.n for m in moments.values())
    if not inside:
        return (f"none of the window's scored records falls in plan {plan_id}'s strata "
                "(a release or score range the plan did not draw from)")
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
    draw = stratified_draw_check([(moments[n].n / inside, fs[n], moments[n]) for n in names],
                                 unlabelled_includes_labelled=True)
    # The plan's known probabilities n_k/N_k: each stratum's labels stand for its records
    # (stratified PPI), never pooled as if drawn uniformly. Records outside every stratum
    # were not in the plan's population: the estimate speaks for the ones inside, and says so.
    population = "scored records in the window" if not outside else (
        f"the {inside} scored records in plan {plan_id}'s strata ({outside} of the window's "
        "fall outside them: a release or score range the plan did not draw from, not "
        "covered)")
    return Correction(PLAN, f"labels drawn by plan {plan_id}, stratified over its "
                      f"{len(names)} strata (weighted by the plan's inclusion probabilities "
                      "n_k/N_k)", result, plan_id, result.corrected.reason,
                      unused, "not drawn by the plan" if unused else None, draw, population)


def corrected(conn: Any, lp: LabelledPairs, unlabelled: Moments, window: Q.Window = Q.Window(),
              *, where: Mapping[str, str] | None = None, seg: Q.SegmentIndex | None = None,
              alpha: float = 0.05, min_n: int | None = None) -> Correction:
    """The judge-corrected mean of ``lp``'s score in ``window``.

    ``unlabelled``: the window's judge scores of that name as moments (n, Σf, Σf²: the
    rollups, labelled records included). Labels of a plan → stratified PPI++ over the plan's
    strata (the plan with the most labelled pairs here), over the window's records inside
    them (records outside every stratum are left out and the population says so); no record
    inside: plain PPI++ over all labels, with the reason said. Either way ``draw`` checks
    that the labels look like a random draw (:mod:`tracescore.trust.selection`).
    """
    from ..stats.ppi import MIN_LABELS, ppi_mean
    from ..trust.selection import draw_check

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
    draw = draw_check([p.judge for p in lp.pairs], unlabelled, unlabelled_includes_labelled=True)
    return Correction(RANDOM, assumption, result, reason=result.corrected.reason, draw=draw)


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
    half = z_quantile(1 - alpha / 2) * se
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
