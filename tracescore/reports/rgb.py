"""RGB's four abilities on live traffic, aggregated from the database (``report --rgb``).

RGB (Chen et al. 2024) measures noise robustness, negative rejection, information integration
and counterfactual robustness on test sets built for each. Here every record is placed by the
verdicts its ``rgb_noise`` score stored (:mod:`tracescore.metrics.rgb_abilities`), and judged by
the scores it already has: accuracy, refusal, error detection and correction. Definitions and
formulas: docs/rgb.md.

Read-only: one streaming query over the records of the window, grouped per record, so memory
does not grow with the database. Blocks on SQLite I/O.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..metrics.rgb import find_error_flag, find_refusal, match_references
from ..metrics.rgb_abilities import BUCKETS, noise_bucket

__all__ = ["NoiseBucket", "Rate", "RgbLive", "RecordFacts", "aggregate", "format_rgb",
           "record_facts", "rgb_live"]

#: Score names read per record (status ok). The first of each tuple that is present wins.
ACCURACY = ("rgb_accuracy", "saga_correctness")
REFUSAL = ("rgb_rejection", "saga_negative_rejection")
DETECTION = ("rgb_error_detection",)
CORRECTION = ("rgb_error_correction",)
PROFILE = "rgb_noise"
_NAMES = (PROFILE, *ACCURACY, *REFUSAL, *DETECTION, *CORRECTION)
#: How a value was found when no stored score had it: RGB's checks run on the stored text.
COMPUTED = "computed"


@dataclass(frozen=True, slots=True)
class Rate:
    """``hits`` of ``n`` records; ``unscored``: records of the group without a verdict."""

    n: int = 0
    hits: int = 0
    unscored: int = 0

    @property
    def rate(self) -> float | None:
        return self.hits / self.n if self.n else None

    def add(self, verdict: bool | None) -> Rate:
        if verdict is None:
            return Rate(self.n, self.hits, self.unscored + 1)
        return Rate(self.n + 1, self.hits + int(verdict), self.unscored)

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "hits": self.hits, "rate": self.rate, "unscored": self.unscored}


@dataclass(frozen=True, slots=True)
class NoiseBucket:
    lower: int  # percent; the bucket holds lower <= noise ratio < lower + 20
    accuracy: Rate


@dataclass(frozen=True, slots=True)
class RecordFacts:
    """What one record contributes: its place (ability) and its verdicts, with their sources."""

    place: str  # "noise", "rejection", "no_contexts", "counterfactual", "unprofiled"
    bucket: int | None = None
    integration: bool = False
    correct: bool | None = None
    correct_from: str | None = None
    refused: bool | None = None
    refused_from: str | None = None
    detected: bool | None = None
    detected_from: str | None = None
    corrected: bool | None = None


@dataclass(frozen=True, slots=True)
class RgbLive:
    db: str
    since: float | None
    generated_at: float
    records: int
    profiled: int
    noise: list[NoiseBucket]
    rejection: Rate
    no_contexts: Rate
    integration: Rate
    single_context: Rate
    detection: Rate
    correction: Rate  # corrected of detected (RGB's CR), over records with a reference
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    #: RGB's ``all_rate`` at noise ratio 1 (evalue.py): refused *or* answered correctly, over
    #: the negative-rejection records; ``rejection`` counts refusals only
    rejection_all: Rate = field(default_factory=lambda: Rate())

    @property
    def counterfactual(self) -> int:
        return self.detection.n + self.detection.unscored

    def to_json(self) -> dict[str, Any]:
        noise_all = Rate(sum(b.accuracy.n for b in self.noise),
                         sum(b.accuracy.hits for b in self.noise),
                         sum(b.accuracy.unscored for b in self.noise))
        return {
            "db": self.db, "since": self.since, "generated_at": self.generated_at,
            "records": self.records, "profiled": self.profiled,
            "unprofiled": self.records - self.profiled,
            "noise_robustness": {
                "buckets": [{"noise": f"{b.lower}%", "lower": b.lower / 100,
                             "upper": (b.lower + 20) / 100, **_acc(b.accuracy)}
                            for b in self.noise],
                "all": _acc(noise_all),
            },
            "negative_rejection": {**_rate(self.rejection, "refused"),
                                   "rejection_rate": _rate(self.rejection, "refused"),
                                   "all_rate": _rate(self.rejection_all,
                                                     "refused_or_correct"),
                                   "no_contexts": _rate(self.no_contexts, "refused")},
            "information_integration": {**_acc(self.integration),
                                        "single_context": _acc(self.single_context)},
            "counterfactual_robustness": {
                "n": self.counterfactual,
                "error_detection": _rate(self.detection, "detected"),
                "error_correction": _rate(self.correction, "corrected", of="detected"),
            },
            "sources": self.sources,
        }


def _rate(r: Rate, hits: str, of: str = "n") -> dict[str, Any]:
    return {of: r.n, hits: r.hits, "rate": r.rate, "unscored": r.unscored}


def _acc(r: Rate) -> dict[str, Any]:
    return {"n": r.n, "correct": r.hits, "accuracy": r.rate, "unscored": r.unscored}


# -- per record ---------------------------------------------------------------------------------
def _first(values: dict[str, float], names: Iterable[str]) -> tuple[bool | None, str | None]:
    for name in names:
        if name in values:
            return values[name] >= 0.5, name
    return None, None


def _matches(answer: str | None, gts: list[str]) -> bool | None:
    if not answer or not gts:
        return None
    try:
        return match_references(answer, tuple(gts), " | ", False)[0]
    except ValueError:  # no reference has words left after normalisation
        return None


def record_facts(n_contexts: int, content_captured: bool, answer: str | None,
                 ground_truths: list[str], values: dict[str, float],
                 profile: dict[str, Any] | None) -> RecordFacts:
    """Place one record and collect its verdicts (pure; the rules of docs/rgb.md).

    ``values``: the record's ok score values by name; ``profile``: the details of its
    ``rgb_noise`` score, or None.
    """
    if profile is not None:
        n = int(profile.get("n_contexts") or 0)
        n_rel = int(profile.get("n_relevant") or 0)
        if not 0 <= n_rel <= n or n == 0:  # not what rgb_noise writes: do not guess
            return RecordFacts("unprofiled")
        if profile.get("counterfactual_contexts"):
            place = "counterfactual"
        elif n_rel == 0:
            place = "rejection"
        else:
            place = "noise"
        bucket = noise_bucket(n, n_rel) if place == "noise" else None
        integration = place == "noise" and bool(profile.get("needs_integration"))
    elif n_contexts == 0 and content_captured:
        place, bucket, integration = "no_contexts", None, False
    else:
        return RecordFacts("unprofiled")

    correct = correct_from = refused = refused_from = None
    detected = detected_from = corrected = None
    if place == "noise":
        correct, correct_from = _first(values, ACCURACY)
        if correct is None:
            correct = _matches(answer, ground_truths)
            correct_from = COMPUTED if correct is not None else None
    elif place in ("rejection", "no_contexts"):
        refused, refused_from = _first(values, REFUSAL)
        if refused is None and answer is not None:
            refused, refused_from = find_refusal(answer) is not None, COMPUTED
        # for RGB's all_rate, which also counts a correct answer at noise ratio 1 (its
        # source is not tallied: the accuracy sources describe the noise records)
        correct, _ = _first(values, ACCURACY)
        if correct is None:
            correct = _matches(answer, ground_truths)
    else:
        detected, detected_from = _first(values, DETECTION)
        if detected is None and answer is not None:
            detected, detected_from = find_error_flag(answer) is not None, COMPUTED
        corrected, _ = _first(values, CORRECTION)
        if corrected is None and detected is not None and ground_truths:
            match = _matches(answer, ground_truths)
            corrected = None if match is None else bool(detected and match)
    return RecordFacts(place, bucket, integration, correct, correct_from, refused,
                       refused_from, detected, detected_from, corrected)


def aggregate(facts: Iterable[RecordFacts], *, db: str = "", since: float | None = None
              ) -> RgbLive:
    """Sum record facts into the four abilities (pure)."""
    buckets = {b: Rate() for b in BUCKETS}
    rejection = no_ctx = integ = single = detection = correction = rejection_all = Rate()
    records = profiled = 0
    sources: dict[str, Counter[str]] = {"accuracy": Counter(), "refusal": Counter(),
                                        "error_detection": Counter()}
    for f in facts:
        records += 1
        if f.place == "unprofiled":
            continue
        profiled += 1
        if f.correct_from:
            sources["accuracy"][f.correct_from] += 1
        if f.refused_from:
            sources["refusal"][f.refused_from] += 1
        if f.detected_from:
            sources["error_detection"][f.detected_from] += 1
        if f.place == "noise":
            b = f.bucket if f.bucket in buckets else 0
            buckets[b] = buckets[b].add(f.correct)
            if f.integration:
                integ = integ.add(f.correct)
            else:
                single = single.add(f.correct)
        elif f.place == "rejection":
            rejection = rejection.add(f.refused)
            rejection_all = rejection_all.add(
                None if f.refused is None else bool(f.refused or f.correct))
        elif f.place == "no_contexts":
            no_ctx = no_ctx.add(f.refused)
        else:
            detection = detection.add(f.detected)
            # RGB's correction rate: corrected / detected, among records that can be checked
            if f.detected and f.corrected is not None:
                correction = correction.add(f.corrected)
    return RgbLive(
        db=db, since=since, generated_at=time.time(), records=records, profiled=profiled,
        noise=[NoiseBucket(b, r) for b, r in buckets.items()], rejection=rejection,
        no_contexts=no_ctx, integration=integ, single_context=single, detection=detection,
        correction=correction, sources={k: dict(sorted(v.items())) for k, v in sources.items()},
        rejection_all=rejection_all,
    )


def _loads(text: str | None, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except (TypeError, ValueError):
        return default


def iter_facts(conn: sqlite3.Connection, *, since: float | None = None
               ) -> Iterable[RecordFacts]:
    """Facts of every record created in the window (``records.created_at >= since``)."""
    from ..read.rgb_rows import record_rows

    for r in record_rows(conn, _NAMES, PROFILE, since=since):
        values = {n: r[f"v_{n}"] for n in _NAMES if r[f"v_{n}"] is not None}
        profile = _loads(r["profile"], None) if r["profile"] else None
        gts = _loads(r["ground_truths"], [])
        yield record_facts(int(r["n_contexts"] or 0), bool(r["content_captured"]), r["answer"],
                           [str(g) for g in gts] if isinstance(gts, list) else [], values,
                           profile if isinstance(profile, dict) else None)


def rgb_live(conn: sqlite3.Connection, *, since: float | None = None, db: str = "") -> RgbLive:
    """The four abilities over the records created in the window."""
    return aggregate(iter_facts(conn, since=since), db=db, since=since)


# -- text -------------------------------------------------------------------------------------
BAR = 20
WIDTH = 80


def _bar(rate: float | None) -> str:
    if rate is None:
        return ""
    filled = round(rate * BAR)
    return "#" * filled + "." * (BAR - filled)


def _pct(r: Rate) -> str:
    return "n/a (no records)" if r.rate is None else f"{100 * r.rate:.1f}%"


def _sources(counts: dict[str, int]) -> str:
    names = {COMPUTED: "RGB check computed on the stored answer"}
    return ", ".join(f"{names.get(k, k)} {v}" for k, v in counts.items()) or "none"


def _unscored(r: Rate) -> str:
    return f"; {r.unscored} without a verdict" if r.unscored else ""


def format_rgb(live: RgbLive) -> str:
    """The human ``report --rgb``: the accuracy-by-noise curve and the other three abilities."""
    from .textfmt import plural as _n
    from .textfmt import table as _table
    from .textfmt import when as _when

    window = "all time" if live.since is None else f"since {_when(live.since)}"
    out = [f"RGB abilities on {live.db} ({window})",
           *textwrap.wrap(f"{_n(live.records, 'record')}; {live.profiled} placed, "
                          f"{live.records - live.profiled} without an rgb_noise score (not "
                          "sampled, pending, failed, or rgb_noise not configured)", WIDTH),
           ""]

    out.append("Noise robustness: accuracy by share of contexts judged not relevant")
    rows = [[f"{b.lower}%", str(b.accuracy.n),
             str(b.accuracy.hits) if b.accuracy.n else "-",
             _pct(b.accuracy) if b.accuracy.n else "-",
             _bar(b.accuracy.rate) if b.accuracy.n else "n/a (no records)"]
            for b in live.noise]
    out += _table(["noise", "n", "correct", "accuracy", ""], rows, "<>>><")
    out.append("(buckets floor the noise: 20% holds 20% <= noise < 40%; 100% is rejection)")
    unscored = sum(b.accuracy.unscored for b in live.noise)
    if unscored:
        out.append(f"{_n(unscored, 'record')} without an accuracy verdict (no reference or "
                   "no answer) not counted")
    out.append(f"accuracy from: {_sources(live.sources.get('accuracy', {}))}")
    out.append("")

    rej = live.rejection
    out.append("Negative rejection (no context relevant): "
               + (f"refused {rej.hits} of {rej.n} ({_pct(rej)})" if rej.n else _pct(rej))
               + _unscored(rej))
    ra = live.rejection_all
    if ra.n:
        out.append(f"  RGB all_rate (refused or answered correctly): {ra.hits} of {ra.n} "
                   f"({_pct(ra)})")
    nc = live.no_contexts
    if nc.n or nc.unscored:
        out.append(f"  no context retrieved (not in the rate): refused {nc.hits} of {nc.n} "
                   f"({_pct(nc)}){_unscored(nc)}")
    out.append(f"refusal from: {_sources(live.sources.get('refusal', {}))}")
    out.append("")

    integ, single = live.integration, live.single_context
    out.append("Information integration (the reference needs >= 2 contexts): "
               + (f"{integ.hits} of {integ.n} correct ({_pct(integ)})" if integ.n
                  else _pct(integ)) + _unscored(integ))
    if single.n:
        out.append(f"  for comparison, answerable from one context: {single.hits} of "
                   f"{single.n} correct ({_pct(single)})")
    out.append("")

    det, cor = live.detection, live.correction
    out.append("Counterfactual robustness (a context contradicts the reference or known "
               f"facts): {live.counterfactual} records")
    if live.counterfactual:
        out.append(f"  error detection: {det.hits} of {det.n} flagged the error "
                   f"({_pct(det)}){_unscored(det)}")
        out.append(f"  error correction: {cor.hits} of {cor.n} detections also gave the "
                   f"reference ({'n/a (no detections)' if cor.rate is None else _pct(cor)})")
        out.append(f"error detection from: "
                   f"{_sources(live.sources.get('error_detection', {}))}")
    else:
        out.append("  n/a (no records)")
    from .textfmt import printable

    return printable("\n".join(out), keep="\n")

