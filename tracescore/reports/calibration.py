"""Judge calibration: how well each judge metric agrees with users' feedback.

Users say thumbs up/down (or give a label, or a score in [0, 1]) on some traces with
``ts.add_feedback``. For each binary or thresholded judge metric, the records of those traces
are pairs (did the user like it?, what did the judge say?), scored with Valor's
classification metrics (``valor_lite/classification/computation.py``, Striveworks/valor):

- precision = TP / (TP + FP), recall = TP / (TP + FN), F1 = 2PR / (P + R),
  accuracy = (TP + TN) / n; **0.0 when a denominator is 0**, as Valor does;
- a score predicts positive at threshold t when ``score >= t`` (Valor's ``>=``);
- ROC AUC: the area under the ROC curve by the trapezoid rule, points sorted by score,
  descending. **Ties:** tied scores form one ROC point, so a tie between a positive and a
  negative counts 1/2 (equal to the Mann-Whitney rank statistic U / (P·N), sklearn's
  convention). Valor walks tied scores one by one in its label-index order, which makes its
  AUC on ties depend on the order it saw the labels in; we do not copy that. **One class
  only** (every pair positive, or every pair negative): AUC is undefined; Valor returns 0.0,
  we return None and say so.

Positive means "good": the user liked the trace (feedback value >= 0.5, or a label in
:data:`POSITIVE_LABELS`), and the judge passed the record (its value against the threshold
the metric declares, inclusive; its stored pass/fail label when it declares none). The precision-recall curve sweeps thresholds 0.05 to
0.95 (step 0.05) over the judge's score mapped to [0, 1] with "higher is better". Pure
functions and read-only queries; everything blocks on SQLite I/O only.
"""

from __future__ import annotations

import math
import sqlite3
import textwrap
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NEGATIVE_LABELS", "POSITIVE_LABELS", "THRESHOLDS", "Calibration", "Counts", "CurvePoint",
    "MetricCalibration", "best_threshold", "calibrate", "confusion", "format_calibration",
    "pr_curve", "roc_auc",
]

from ..read.feedback import NEGATIVE_LABELS as NEGATIVE_LABELS  # noqa: E402
from ..read.feedback import POSITIVE_LABELS as POSITIVE_LABELS  # noqa: E402

#: Thresholds of the precision-recall curve: 0.05, 0.10, ..., 0.95 (rounded: exact decimals).
THRESHOLDS: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 20))
MIN_PAIRS = 5


# -- pure classification metrics ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def accuracy(self) -> float:
        return (self.tp + self.tn) / self.n if self.n else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                "precision": self.precision, "recall": self.recall, "f1": self.f1,
                "accuracy": self.accuracy}


def confusion(actual: Sequence[bool], predicted: Sequence[bool]) -> Counts:
    """TP/FP/FN/TN of ``predicted`` against ``actual`` (same length)."""
    if len(actual) != len(predicted):
        raise ValueError("actual and predicted must have the same length")
    c = Counter(zip(map(bool, actual), map(bool, predicted)))
    return Counts(tp=c[True, True], fp=c[False, True], fn=c[True, False], tn=c[False, False])


def roc_auc(actual: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve (trapezoid; tied scores are one point, i.e. ties count 1/2).

    None when ``actual`` has only one class: the false- or true-positive rate has no
    denominator, and the area is undefined.
    """
    if len(actual) != len(scores):
        raise ValueError("actual and scores must have the same length")
    pos = sum(1 for a in actual if a)
    neg = len(actual) - pos
    if pos == 0 or neg == 0:
        return None
    by_score: dict[float, list[int]] = {}
    for a, s in zip(actual, scores):
        if not math.isfinite(s):
            raise ValueError(f"scores must be finite, got {s!r}")
        entry = by_score.setdefault(float(s), [0, 0])
        entry[0 if a else 1] += 1
    area = 0.0
    tp = fp = 0
    for s in sorted(by_score, reverse=True):
        dtp, dfp = by_score[s]
        # trapezoid from (fp, tp) to (fp + dfp, tp + dtp), in counts; scaled at the end
        area += dfp * (tp + dtp / 2)
        tp += dtp
        fp += dfp
    return area / (pos * neg)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    threshold: float
    counts: Counts

    def to_json(self) -> dict[str, Any]:
        return {"threshold": self.threshold, **self.counts.to_json()}


def pr_curve(actual: Sequence[bool], scores: Sequence[float],
             thresholds: Sequence[float] = THRESHOLDS) -> list[CurvePoint]:
    """Counts, precision, recall, F1 and accuracy with ``score >= t`` as positive, per t."""
    return [CurvePoint(t, confusion(actual, [s >= t for s in scores])) for t in thresholds]


def best_threshold(curve: Sequence[CurvePoint]) -> tuple[float, float, float] | None:
    """(threshold, F1, last threshold with the same F1) of the best F1 on the curve.

    The lowest threshold of the best F1 wins; the third value says how far the plateau of
    equally good thresholds extends (a binary judge's curve is one flat plateau). None for an
    empty curve.
    """
    if not curve:
        return None
    best = max(p.counts.f1 for p in curve)
    at = [p.threshold for p in curve if math.isclose(p.counts.f1, best, abs_tol=1e-12)]
    return at[0], best, at[-1]


# -- the database side --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Scale:
    """Maps a metric's values to [0, 1] with higher = better, and thresholds back."""

    lo: float
    hi: float
    higher_is_better: bool
    how: str

    def norm(self, v: float) -> float:
        x = (v - self.lo) / (self.hi - self.lo) if self.hi > self.lo else 0.5
        x = min(1.0, max(0.0, x))
        return x if self.higher_is_better else 1.0 - x

    def raw(self, t: float) -> float:
        x = t if self.higher_is_better else 1.0 - t
        return self.lo + x * (self.hi - self.lo)


def scale_for(values: Sequence[float], higher_is_better: bool) -> Scale:
    lo, hi = min(values), max(values)
    if lo >= 0.0 and hi <= 1.0:
        s = Scale(0.0, 1.0, higher_is_better, "0-1")
    elif lo >= 1.0 and hi <= 5.0:
        s = Scale(1.0, 5.0, higher_is_better, "1-5 rating, (v - 1) / 4")
    else:
        s = Scale(lo, hi, higher_is_better, f"observed range {lo:g} to {hi:g}")
    if not higher_is_better:
        s = Scale(s.lo, s.hi, False, s.how + ", reversed (lower is better)")
    return s


@dataclass(frozen=True)
class MetricCalibration:
    name: str
    metric: str
    n: int
    positives: int = 0  # pairs whose feedback is positive
    kind: str = ""  # "binary" (values 0/1) or "thresholded"
    threshold: float | None = None
    scale: str = ""
    at_threshold: Counts | None = None
    roc_auc: float | None = None
    curve: list[CurvePoint] = field(default_factory=list)
    best: tuple[float, float, float] | None = None
    best_raw: float | None = None
    reason: str | None = None  # why there are no numbers

    @property
    def enough(self) -> bool:
        return self.reason is None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metric": self.metric, "n": self.n, "positives": self.positives,
                               "negatives": self.n - self.positives}
        if self.reason is not None:
            return {**out, "enough": False, "reason": self.reason}
        assert self.at_threshold is not None
        out.update({
            "enough": True, "kind": self.kind, "threshold": self.threshold, "scale": self.scale,
            **{k: v for k, v in self.at_threshold.to_json().items()},
            "roc_auc": self.roc_auc,
            "roc_auc_note": None if self.roc_auc is not None else
            "undefined: the feedback has only one class",
            "best_threshold": self.best[0] if self.best else None,
            "best_threshold_up_to": self.best[2] if self.best else None,
            "best_threshold_raw": self.best_raw,
            "best_f1": self.best[1] if self.best else None,
            "curve": [p.to_json() for p in self.curve],
        })
        return out


@dataclass(frozen=True)
class Calibration:
    db: str
    feedback: str
    generated_at: float
    traces: int  # traces with usable feedback of that name
    positives: int
    negatives: int
    unusable: dict[str, int]  # labels that are neither positive nor negative → count
    other_feedback: dict[str, int]  # other feedback names in the database → traces
    metrics: list[MetricCalibration]

    def to_json(self) -> dict[str, Any]:
        return {"db": self.db, "feedback": self.feedback, "generated_at": self.generated_at,
                "traces": self.traces, "positives": self.positives,
                "negatives": self.negatives, "unusable_labels": self.unusable,
                "other_feedback": self.other_feedback,
                "metrics": {m.name: m.to_json() for m in self.metrics}}


def feedback_verdict(value: float | None, label: str | None) -> bool | None:
    """Positive (True), negative (False) or unusable (None) feedback."""
    if value is not None:
        return float(value) >= 0.5
    key = (label or "").strip().lower().replace(" ", "_").replace("-", "_")
    if key in POSITIVE_LABELS:
        return True
    if key in NEGATIVE_LABELS:
        return False
    return None


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    from ..store.compat import has_table

    return has_table(conn, name)


def _declared(conn: sqlite3.Connection) -> dict[str, tuple[str | None, bool | None,
                                                            float | None]]:
    """metric → (kind, higher_is_better, threshold), as the writing process declared them."""
    from ..read.calibrate import declared_metrics

    return declared_metrics(conn)


def _registry_info(metric: str) -> tuple[str | None, bool | None, float | None] | None:
    try:
        from ..metrics import registry

        m = registry.get(metric)
    except Exception:  # a custom metric of another process, unknown here
        return None
    thr = getattr(m, "threshold", None)
    hib = getattr(m, "higher_is_better", True)
    return (m.kind, None if hib is None else bool(hib),
            float(thr) if isinstance(thr, (int, float)) else None)


def calibrate(conn: sqlite3.Connection, *, metrics: Sequence[str] = (),
              feedback: str = "user", min_pairs: int = MIN_PAIRS, db: str = "") -> Calibration:
    """Agreement of judge metrics (score names) with the feedback named ``feedback``.

    Without ``metrics``: every score name of a judge metric (``metrics.kind = 'judge'``) that
    has a pass/fail threshold. The latest feedback of that name per trace wins; every scored
    record of a trace is one pair.
    """
    from ..read import calibrate as RC

    has_feedback = _has_table(conn, "feedback")
    verdicts: dict[str, bool] = {}
    unusable: Counter[str] = Counter()
    other: dict[str, int] = {}
    if has_feedback:
        for trace_id, value, label in RC.feedback_entries(conn, feedback):
            v = feedback_verdict(value, label)
            if v is None:  # counted and shown, never guessed
                unusable[str(label)] += 1
            else:
                verdicts[trace_id] = v
        other = RC.other_feedback(conn, feedback)

    declared = _declared(conn)
    names: dict[str, str] = {}  # score name → metric
    for name, metric in RC.scored_names(conn):
        names.setdefault(name, metric)

    def info(metric: str) -> tuple[str | None, bool | None, float | None]:
        if metric in declared:
            return declared[metric]
        return _registry_info(metric) or (None, True, None)

    if metrics:
        wanted = list(dict.fromkeys(metrics))
    else:
        wanted = sorted(n for n, m in names.items()
                        if info(m)[0] == "judge" and info(m)[2] is not None
                        and info(m)[1] is not None)

    out = []
    for name in wanted:
        metric = names.get(name, name)
        _, hib, threshold = info(metric)
        rows = []
        if verdicts and name in names:
            rows = RC.scores_with_feedback(conn, name, feedback)
        pairs = [(verdicts[t], float(v), lab) for t, v, lab in rows if t in verdicts]
        out.append(_one(name, metric, pairs, hib, threshold, min_pairs,
                        known=name in names))

    return Calibration(db=db, feedback=feedback, generated_at=time.time(),
                       traces=len(verdicts), positives=sum(verdicts.values()),
                       negatives=len(verdicts) - sum(verdicts.values()),
                       unusable=dict(unusable), other_feedback=other, metrics=out)


def _one(name: str, metric: str, pairs: list[tuple[bool, float, str | None]],
         hib: bool | None, threshold: float | None, min_pairs: int,
         known: bool) -> MetricCalibration:
    n = len(pairs)
    positives = sum(1 for a, _, _ in pairs if a)
    if not known:
        return MetricCalibration(name, metric, 0, reason="no ok scores with this name")
    if hib is None:
        return MetricCalibration(name, metric, n, positives, reason=(
            "the metric has no better direction, so no verdict of it means 'good'"))
    if n < min_pairs:
        return MetricCalibration(name, metric, n, positives,
                                 reason=f"not enough feedback (n={n})")
    actual = [a for a, _, _ in pairs]
    values = [v for _, v, _ in pairs]
    scale = scale_for(values, hib)
    scores = [scale.norm(v) for v in values]

    def passed(v: float, label: str | None, s: float) -> bool:
        # The declared threshold first, so the verdicts match the threshold printed beside
        # them even if the metric's threshold changed since the record was scored.
        if threshold is not None:
            return v >= threshold if hib else v <= threshold
        if label in ("pass", "fail"):
            return label == "pass"
        return s >= 0.5

    predicted = [passed(v, lab, s) for (_, v, lab), s in zip(pairs, scores)]
    curve = pr_curve(actual, scores)
    best = best_threshold(curve)
    kind = "binary" if set(values) <= {0.0, 1.0} else "thresholded"
    return MetricCalibration(
        name, metric, n, positives, kind=kind, threshold=threshold, scale=scale.how,
        at_threshold=confusion(actual, predicted), roc_auc=roc_auc(actual, scores),
        curve=curve, best=best, best_raw=None if best is None else scale.raw(best[0]),
    )


# -- text -------------------------------------------------------------------------------------
def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def compact_curve(curve: Sequence[CurvePoint]) -> list[tuple[float, float, Counts]]:
    """Runs of consecutive thresholds with the same counts: (first, last, counts)."""
    runs: list[tuple[float, float, Counts]] = []
    for p in curve:
        if runs and runs[-1][2] == p.counts:
            runs[-1] = (runs[-1][0], p.threshold, p.counts)
        else:
            runs.append((p.threshold, p.threshold, p.counts))
    return runs


def format_calibration(cal: Calibration) -> str:
    from .textfmt import table as _table

    out = [f"Judge calibration on {cal.db} against feedback {cal.feedback!r}",
           *textwrap.wrap(f"{cal.traces} traces with feedback: {cal.positives} positive, "
                          f"{cal.negatives} negative (positive: value >= 0.5, or a label "
                          "such as good/correct/up)", 80)]
    if cal.unusable:
        out.append("ignored labels (neither positive nor negative): "
                   + ", ".join(f"{k} ({v})" for k, v in sorted(cal.unusable.items())))
    if not cal.traces:
        others = ", ".join(f"{k} ({v} traces)" for k, v in cal.other_feedback.items())
        out.append(f"No usable feedback named {cal.feedback!r}"
                   + (f"; other feedback names: {others} (use --feedback NAME)" if others
                      else "; record some with ts.add_feedback(trace_id, value)"))
    if not cal.metrics:
        out.append("No binary or thresholded judge metric has scores; name one with "
                   "--metric NAME.")
    for m in cal.metrics:
        out.append("")
        if not m.enough:
            out.append(f"{m.name}: {m.reason}")
            continue
        assert m.at_threshold is not None
        c = m.at_threshold
        thr = "its labels" if m.threshold is None else f"threshold {m.threshold:g}"
        auc = _f(m.roc_auc) if m.roc_auc is not None else "undefined (one class of feedback)"
        out.append(f"{m.name} ({m.kind}, n={m.n}: {m.positives} liked, "
                   f"{m.n - m.positives} not)")
        out.append(f"  at {thr}: precision {_f(c.precision)}, recall {_f(c.recall)}, "
                   f"F1 {_f(c.f1)}, accuracy {_f(c.accuracy)}")
        out.append(f"  TP {c.tp}, FP {c.fp}, FN {c.fn}, TN {c.tn}; ROC AUC {auc}")
        if m.best is not None:
            lo, f1, hi = m.best
            span = f"{lo:.2f}" if lo == hi else f"{lo:.2f} (same F1 up to {hi:.2f})"
            out.append(f"  best threshold by F1: {span} → F1 {f1:.3f}")
            if m.best_raw is not None and m.scale != "0-1":
                good = ">=" if "reversed" not in m.scale else "<="
                out.append(f"  (in the metric's own units: good when value {good} "
                           f"{m.best_raw:g})")
        rows = []
        for lo, hi, cc in compact_curve(m.curve):
            star = "*" if m.best is not None and lo <= m.best[0] <= hi else ""
            rows.append([f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}", _f(cc.precision),
                         _f(cc.recall), _f(cc.f1), _f(cc.accuracy),
                         f"{cc.tp}/{cc.fp}/{cc.fn}/{cc.tn}", star])
        out += ["  " + line for line in _table(
            ["threshold", "precision", "recall", "F1", "accuracy", "TP/FP/FN/TN", "best"],
            rows, "<>>>>><")]
        out += textwrap.wrap(f"(score scale: {m.scale}; predicted good when score >= "
                             "threshold)", 78, initial_indent="  ", subsequent_indent="  ")
    from .textfmt import printable

    return printable("\n".join(out), keep="\n")

