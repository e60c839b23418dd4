"""``tracescore calibrate``'s human-labels part: per score name with labels, how far the
judge agrees with the humans — overall and, on request, per segment (``--by judge_model``,
``release``, …) — as data (:mod:`.trust` reads the pairs; :mod:`.trust_text` formats).

Per name: n, and for a yes/no score accuracy, Cohen's κ with its interval and the confusion
matrix; for a numeric one Spearman with its interval and MAE; for both the judge's bias
(judge mean − human mean) with its paired interval (:mod:`tracescore.trust.agreement`). Fewer
than :data:`tracescore.trust.agreement.MIN_PAIRS` pairs: "not enough data", said with n.
Blocking reads on the caller's connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..read import query as Q
from ..read.metric_info import MetricInfo
from .trust import (
    TrustSummary,
    label_names,
    read_pairs,
    split_pairs,
    summarise_pairs,
    unmatched_labels,
)

__all__ = ["LabelCalibration", "NameCalibration", "calibrate_labels"]


@dataclass(frozen=True)
class NameCalibration:
    """One score name: the overall agreement and, with ``by``, one per segment value."""

    summary: TrustSummary
    groups: dict[str | None, TrustSummary] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = self.summary.to_json()
        out.pop("corrected", None)
        out.pop("judge_mean", None)
        out["groups"] = {("(none)" if g is None else g): _agreement_only(s)
                         for g, s in self.groups.items()}
        return out


def _agreement_only(s: TrustSummary) -> dict[str, Any]:
    out = s.to_json()
    out.pop("corrected", None)
    out.pop("judge_mean", None)
    return out


@dataclass(frozen=True)
class LabelCalibration:
    """Every score name with labels (or the ones asked for), agreement per name."""

    by: str | None
    since: float | None
    names: list[NameCalibration]
    #: names asked for with ``--metric`` that have no labelled pairs
    missing: list[str] = field(default_factory=list)
    #: score name -> labels of it that match no scored record (imported ahead of, or without,
    #: their records)
    unmatched: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        from ..trust.agreement import MIN_PAIRS

        return {"by": self.by, "since": self.since, "min_pairs": MIN_PAIRS,
                "human_value": "per record: mean of the annotators (yes/no: their majority)",
                "metrics": {n.summary.name: n.to_json() for n in self.names},
                "without_labels": list(self.missing),
                "labels_matching_no_scored_record": dict(self.unmatched)}


def calibrate_labels(conn: Any, *, metrics: Sequence[str] = (), by: str | None = None,
                     since: float | None = None,
                     where: Mapping[str, str] | None = None) -> LabelCalibration:
    """Agreement of each labelled score name with its human labels (scores since ``since``).

    ``by``: a dimension of :func:`.query.dims_of` (ValueError when unknown)."""
    seg = Q.SegmentIndex(conn)
    if by is not None and by not in seg.dims():
        raise ValueError(f"unknown dimension {by!r}; this database has: "
                         f"{', '.join(seg.dims())}")
    window = Q.Window(since, None)
    info = MetricInfo(conn)
    have = label_names(conn)
    wanted = [m for m in dict.fromkeys(metrics)] if metrics else have
    out, missing = [], []
    unmatched = {name: k for name in wanted if name in have
                 for k in [unmatched_labels(conn, name)] if k}
    for name in wanted:
        lp = read_pairs(conn, name, window, where=where, seg=seg) if name in have else None
        if lp is None or not lp.pairs:
            missing.append(name)
            continue
        zero_one = all(p.judge in (0.0, 1.0) for p in lp.pairs)
        binary = info.binary(lp.metric, zero_one, len(lp.pairs))
        summary = summarise_pairs(conn, lp, None, binary, window, where, seg)
        groups = {}
        if by is not None:
            groups = {g: summarise_pairs(conn, part, None, summary.binary, window, where, seg)
                      for g, part in split_pairs(lp, by, seg).items()}
        out.append(NameCalibration(summary, groups))
    return LabelCalibration(by, since, out, missing, unmatched)
