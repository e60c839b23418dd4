"""Judge drift on human labels: the built-in monitor ``judge_drift_labels`` (issue 17, sec. 4).

:mod:`tracescore.monitor.judge_drift` watches the judge on the canary's known-answer cases. This
monitor watches it on **your** records: where labelled records are judged by a different
**judge identity** — the model the judge server reported (``scores.judge_model``), the prompt
version (the score details' ``judge.prompt_version``) and the metric version — it compares the
judge's agreement with the humans under the newest identity against the earliest one.

Agreement, per labelled pair, on [0, 1]: ``1 − |judge − human| / (high − low)`` on the score's
scale (the metric's ``value_range`` when known, else [0, 1], clipped). For a yes/no score that
is 1 when the judge agrees with the humans' majority and 0 when not (a tie is left out), so the
mean is the **accuracy**; for a numeric score it is **1 − MAE** (the human value being the mean
of the annotators). The pairs are :func:`tracescore.read.trust_pairs.read_pairs`' — a label pairs
only with a score of the metric version it was bound to; judge scores only (a local metric's
scores have no judge).

The snapshot (the assumption to know)
-------------------------------------
``scores`` keeps **one row per (record, name)**: re-scoring a labelled record (re-opened jobs
when ground truths arrive, a rescore after a model change) *replaces* the old judge's verdict.
So the monitor keeps its own snapshot, in its ``monitor_state.test_state``: per score name and
judge identity, the (judge, human) values of every labelled pair it has **seen**, in the order
first seen, plus when the identity was first seen. Each evaluation merges the live pairs into
it (a live pair refreshes its own entry; a pair that left the live data because its record was
re-scored keeps its last value). Hence both cases are covered: new records labelled after a
change (the two identities side by side in ``scores``) and labelled records re-scored by the
new judge (the old verdicts from the snapshot) — **provided the monitor evaluated at least once
between the labels and the re-scoring** (``tracescore monitor``, a worker with monitors,
``init(monitors=...)`` or ``tracescore check``). A snapshot is only written by the evaluator
holding the monitors' lease; it keeps at most ``MAX_RECORDS`` pairs per identity (the first
seen: the sequence's prefix stays fixed) and ``MAX_IDENTITIES`` identities per score (the
baseline and the newest).

The test (documented in docs/monitoring.md, "Judge drift")
----------------------------------------------------------
- **Baseline**: the earliest identity (first seen) with at least ``MIN_PAIRS`` pairs. Its
  agreements, in the order first seen, go to a PrPl-EB confidence sequence
  (:class:`tracescore.stats.confseq.EBSequence`, as :mod:`.judge_drift` does); lower bound at α/2.
- **Current**: the newest identity; the k-th identity after the baseline gets its own sequence
  at ``window_alpha(α/2, k)`` = α/(2k(k+1)). Fewer than ``MIN_PAIRS`` pairs on either side, or
  no baseline yet: NO_DATA ("not enough labels"). One identity only: OK (nothing changed).
- **Verdict**: ALERT when the current upper bound is below the baseline's lower bound minus
  ``MIN_EFFECT``; WARNING when only the current mean is below the baseline's mean minus it.
  The summary names the change ("judge changed from A to B").
- **Why confidence sequences, not the fixed-sample intervals of tracescore.stats**: the pairs
  arrive over time (labels added, records re-scored) and the monitor is checked every minute;
  a fixed-sample interval re-tested at every look would fire on noise sooner or later, while a
  confidence sequence is valid at every n at once. So while the current identity's agreement
  stays within ``MIN_EFFECT`` of the baseline's, P(any ALERT) <= α over the monitor's life
  (α/2 for the baseline, α/(2k(k+1)) for the k-th later identity), however often it is checked:
  a check re-reads stored pairs, and evidence grows only with new pairs. The price is power:
  comparing two intervals needs many labels (docs/monitoring.md gives the figures); a judge
  that collapses (all wrong) is caught with 30 pairs a side.
- Several score names: one state, the worst of them; the detail has each name's verdict.

Blocking database reads and one write (:func:`tracescore.monitor.state.save_evaluation`, under
the evaluator's lease, with the same outbox/notifier path as every monitor). Never on the
app's request path.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..stats import CarriesEstimate, Estimate
from ..stats.confseq import EBSequence, window_alpha
from .judge_drift import _RANK, _hysteresis

log = logging.getLogger("tracescore")

__all__ = ["MONITOR", "NameResult", "evaluate", "evaluate_with", "live_identities", "measure",
           "merge"]

#: The built-in monitor's name (``monitor_state.monitor``).
MONITOR = "judge_drift_labels"
ALPHA = 0.05
MIN_PAIRS = 30
MIN_EFFECT = 0.05
MAX_RECORDS = 2000
MAX_IDENTITIES = 6
#: the method of one name's agreement estimate (the monitor's words name the whole test)
_EST_METHOD = "agreement with human labels: anytime-valid empirical-Bernstein CS"

#: name -> identity key -> {"first": t, "pairs": {record_id: [judge, human]}}
Snapshot = dict[str, dict[str, dict[str, Any]]]


def identity_key(judge_model: str, prompt_version: str, metric_version: str) -> str:
    return json.dumps([judge_model, prompt_version, metric_version])


def describe(key: str, other: str | None = None) -> str:
    """An identity for people: its model, with its prompt version and metric version where
    they differ from ``other``'s (without ``other``: the model alone)."""
    model, prompt, version = json.loads(key)
    if other is None:
        return str(model)
    _, o_prompt, o_version = json.loads(other)
    extra = ([f"prompt {prompt}"] if prompt != o_prompt else []) + (
        [f"metric version {version}"] if version != o_version else [])
    return f"{model} ({', '.join(extra)})" if extra else str(model)


def _scale(name: str) -> tuple[float, float]:
    """The score's (low, high): the metric's ``value_range`` when known, else (0, 1)."""
    try:
        from ..labels import scale_for

        s = scale_for(name)
    except (ValueError, TypeError, ImportError):
        return 0.0, 1.0
    if s.low is None or s.high is None or not s.high > s.low:
        return 0.0, 1.0
    return s.low, s.high


def _human(judge: float, annotators: Sequence[tuple[str, float]]) -> float | None:
    """The humans' value: their majority for a yes/no pair (None on a tie), else their mean."""
    values = [v for _, v in annotators]
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    if judge in (0.0, 1.0) and all(v in (0.0, 1.0) for v in values):
        return None if mean == 0.5 else float(mean > 0.5)
    return mean


def live_identities(conn: Any, name: str) -> dict[str, dict[str, Any]]:
    """The labelled pairs of score ``name`` now in the database, by judge identity (judge
    scores only), each identity's pairs in the order its scores were written."""
    from ..read.trust_pairs import labelled_score_details, read_pairs

    lp = read_pairs(conn, name)
    if not lp.pairs:
        return {}
    extra: dict[str, tuple[float, str]] = {}
    for rid, created, details in labelled_score_details(conn, name):
        try:
            d = json.loads(details) if isinstance(details, str) else (details or {})
        except ValueError:
            d = {}
        judge = d.get("judge") if isinstance(d, Mapping) else None
        pv = judge.get("prompt_version") if isinstance(judge, Mapping) else None
        extra[str(rid)] = (float(created or 0.0), str(pv or ""))
    found: list[tuple[float, str, str, float, float]] = []
    for p in lp.pairs:
        if not p.judge_model or p.record_id is None:
            continue  # a local metric's score: no judge to drift
        human = _human(p.judge, p.annotators)
        if human is None:
            continue
        created, pv = extra.get(p.record_id, (0.0, ""))
        key = identity_key(str(p.judge_model), pv, str(p.metric_version or ""))
        found.append((created, p.record_id, key, p.judge, human))
    out: dict[str, dict[str, Any]] = {}
    for created, rid, key, judge, human in sorted(found):
        entry = out.setdefault(key, {"first": created, "pairs": {}})
        entry["first"] = min(entry["first"], created)
        entry["pairs"][rid] = [judge, human]
    return out


def merge(snapshot: Mapping[str, Any] | None, live: Mapping[str, Mapping[str, Any]], *,
          min_pairs: int = MIN_PAIRS) -> dict[str, dict[str, Any]]:
    """The snapshot of one score name brought up to date with its live pairs: the snapshot's
    order kept, live values refreshing their own entries, new pairs appended; bounded."""
    out: dict[str, dict[str, Any]] = {}
    for key, entry in (snapshot or {}).items():
        if isinstance(entry, Mapping) and isinstance(entry.get("pairs"), Mapping):
            out[str(key)] = {"first": float(entry.get("first") or 0.0),
                             "pairs": {str(r): [float(v[0]), float(v[1])]
                                       for r, v in entry["pairs"].items()}}
    for key, entry in live.items():
        cur = out.setdefault(key, {"first": float(entry["first"]), "pairs": {}})
        cur["first"] = min(cur["first"], float(entry["first"]))
        pairs = cur["pairs"]
        for rid, value in entry["pairs"].items():
            if rid in pairs or len(pairs) < MAX_RECORDS:
                pairs[rid] = [float(value[0]), float(value[1])]
    ordered = sorted(out, key=lambda k: (out[k]["first"], k))
    if len(ordered) > MAX_IDENTITIES:
        base = next((k for k in ordered if len(out[k]["pairs"]) >= min_pairs), ordered[0])
        keep = {base, *ordered[-(MAX_IDENTITIES - 1):]}
        out = {k: v for k, v in out.items() if k in keep}
    return out


@dataclass(frozen=True)
class NameResult(CarriesEstimate):
    """One score name's verdict (before hysteresis)."""

    name: str
    state: str
    estimate: Estimate
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)


def _agreements(pairs: Mapping[str, Sequence[float]], low: float, high: float) -> list[float]:
    span = high - low
    return [min(1.0, max(0.0, 1.0 - abs(float(j) - float(h)) / span))
            for j, h in pairs.values()]


def measure(name: str, identities: Mapping[str, Mapping[str, Any]], *,
            scale: tuple[float, float] = (0.0, 1.0), alpha: float = ALPHA,
            min_pairs: int = MIN_PAIRS, min_effect: float = MIN_EFFECT) -> NameResult | None:
    """The drift verdict of score ``name`` from its identities (a :func:`merge` result).
    None without any labelled judge pair. Pure."""
    if not identities:
        return None
    ordered = sorted(identities, key=lambda k: (float(identities[k]["first"]), k))
    sizes = {k: len(identities[k]["pairs"]) for k in ordered}
    newest = ordered[-1]
    base = next((k for k in ordered if sizes[k] >= min_pairs), None)
    detail: dict[str, Any] = {
        "identities": [{"judge_model": json.loads(k)[0], "prompt_version": json.loads(k)[1],
                        "metric_version": json.loads(k)[2], "pairs": sizes[k],
                        "first_seen": float(identities[k]["first"])} for k in ordered],
        "min_pairs": min_pairs, "min_effect": min_effect}
    if base is None:
        return NameResult(name, "NO_DATA", Estimate(sizes[newest], None, None, None, _EST_METHOD),
                          f"{name}: not enough labels — judge {describe(newest)} has "
                          f"{sizes[newest]} of the {min_pairs} labelled pairs a baseline needs",
                          detail)
    agree = {k: _agreements(identities[k]["pairs"], *scale) for k in (base, newest)}
    bseq = EBSequence(alpha / 2)
    bseq.update(agree[base])
    b_lo = bseq.interval()[0]
    b_mean = bseq.mean if bseq.mean is not None else 0.0
    detail.update({"baseline": describe(base), "baseline_mean": b_mean, "baseline_bound": b_lo,
                   "baseline_n": bseq.n})
    if newest == base:
        return NameResult(name, "OK",
                          Estimate(bseq.n, b_mean, b_lo, bseq.interval()[1], _EST_METHOD),
                          f"{name}: one judge identity on labelled records ({describe(base)}, "
                          f"agreement with humans {b_mean:.3f}, n={bseq.n}); nothing to compare",
                          detail)
    said = f"judge changed from {describe(base)} to {describe(newest, base)}"
    detail["change"] = {"from": json.loads(base), "to": json.loads(newest),
                        "at": float(identities[newest]["first"])}
    if sizes[newest] < min_pairs:
        return NameResult(name, "NO_DATA", Estimate(sizes[newest], None, None, None, _EST_METHOD),
                          f"{name}: {said}; not enough labels for the new judge "
                          f"({sizes[newest]} of {min_pairs} labelled pairs; baseline agreement "
                          f"{b_mean:.3f}, n={bseq.n})", detail)
    k = len(ordered) - ordered.index(base) - 1  # the newest is the k-th identity after it
    cseq = EBSequence(window_alpha(alpha / 2, k))
    cseq.update(agree[newest])
    lo, hi = cseq.interval()
    mean = cseq.mean if cseq.mean is not None else 0.0
    detail.update({"k": k, "current_alpha": window_alpha(alpha / 2, k)})
    where = (f"agreement with humans {mean:.3f} [{lo:.3f}, {hi:.3f}] (n={cseq.n}) against "
             f"{b_mean:.3f} (bound {b_lo:.3f}, n={bseq.n})")
    if hi < b_lo - min_effect:
        state, verdict = "ALERT", "the whole anytime-valid interval is below the baseline's " \
                                  f"bound − {min_effect:g}"
    elif mean < b_mean - min_effect:
        state, verdict = "WARNING", (f"below the baseline's mean − {min_effect:g}; the interval "
                                     "does not confirm it yet")
    else:
        state, verdict = "OK", "not below the baseline"
    return NameResult(name, state, Estimate(cseq.n, mean, lo, hi, _EST_METHOD),
                      f"{name}: {said}; {where}: {verdict}",
                      detail)


def evaluate(store: Any, reader: Any, *, owner: str, channels: Sequence[Any] = (),
             save: bool = True, otel_logger: Any = None, db_label: str = "",
             now: float | None = None) -> Any:
    """Evaluate ``judge_drift_labels`` on ``store`` (reading pairs through ``reader``, a
    :func:`tracescore.store.compat.connect_reader` connection to the same database) and, with
    ``save``, store it, its snapshot and its notifications to ``channels`` — only while
    ``owner`` holds the monitors' lease. Returns an
    :class:`tracescore.monitor.evaluate.Evaluation`, or None when no judge score has a human
    label (or the database is before schema 4). Blocking."""
    from ..read.trust_pairs import label_names
    from ..store import monitor_state as S
    from . import notify as N
    from .evaluate import Evaluation

    names = label_names(reader)
    if not names:
        return None
    t = S.db_now(store) if now is None else float(now)
    prior = S.load_states(store).get(MONITOR)
    stored = prior.test_state if prior is not None else None
    old: Mapping[str, Any] = (stored.get("names") or {}) if isinstance(stored, Mapping) else {}
    snapshot: Snapshot = {}
    results: list[NameResult] = []
    for name in names:
        snapshot[name] = merge(old.get(name), live_identities(reader, name))
        r = measure(name, snapshot[name], scale=_scale(name))
        if r is not None:
            results.append(r)
    for name, entry in old.items():  # a name whose labels are gone: keep what was seen
        snapshot.setdefault(str(name), dict(entry))
    if not results:
        return None
    worst = max(results, key=lambda r: (_RANK.get(r.state, 0), r.name))
    others = [r for r in results if r is not worst]
    summary = worst.summary + (f" (also: {', '.join(f'{r.name} {r.state}' for r in others)})"
                               if others else "")
    method = (f"judge vs human labels per judge identity (model, prompt version, metric "
              f"version): agreement (accuracy, or 1 − MAE) through anytime-valid "
              f"empirical-Bernstein confidence sequences — the k-th new judge at "
              f"alpha/(2k(k+1)) against the earliest judge's lower bound at alpha/2 "
              f"(alpha {ALPHA:g}, at least {MIN_PAIRS} pairs a side)")
    estimate = dataclasses.replace(worst.estimate, method=method)
    state, pending, streak = _hysteresis(prior, worst.state)
    previous = prior.state if prior is not None else None
    changed = previous != state
    detail = {"summary": summary, "method": method, "raw": worst.state, "worst": [],
              "score": worst.name, "scores": {r.name: {"state": r.state, "summary": r.summary,
                                                       **r.detail} for r in results}}
    saved = False
    if save:
        event = N.AlertEvent(
            monitor=MONITOR, state=state, previous=previous, score=worst.name,
            statistic="agreement with human labels", window_s=0.0, estimate=estimate,
            condition="the judge's agreement with human labels below its baseline judge's",
            verdict=summary, command="tracescore check", db=db_label, at=t)
        news = changed and (state in ("ALERT", "WARNING") or previous in ("ALERT", "WARNING"))
        items = N.outbox_items(event, channels) if news else None
        saved = S.save_evaluation(
            store, MONITOR, owner=owner, state=state,
            estimate=worst.estimate, detail=detail, test_state={"v": 1, "names": snapshot},
            streak=streak, pending=pending, notify=items, at=t)
        if saved and changed:
            N.emit_state_change(otel_logger, event)
    return Evaluation(MONITOR, state, previous, worst.state, estimate, summary, changed,
                      saved, (), None, detail)


def evaluate_with(evaluator: Any, *, save: bool = True) -> list[Any]:
    """``judge_drift_labels`` beside an :class:`tracescore.monitor.evaluate.Evaluator`'s
    monitors: on its store, under its lease, to every channel of its set. ``[]`` or one
    Evaluation."""
    store, reader = evaluator._open()
    ev = evaluate(store, reader, owner=evaluator.owner,
                  channels=tuple(evaluator.monitors.channels), save=save,
                  otel_logger=evaluator.otel_logger, db_label=evaluator.db_label)
    return [] if ev is None else [ev]
