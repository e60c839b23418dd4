"""The data every renderer takes: plain frozen dataclasses, no connection, no I/O.

Built by :mod:`.report` and :mod:`.compare` from the query layer (:mod:`.query`); rendered as
text (:mod:`.report_text`), JSON (``to_json``) and HTML (:mod:`.html`). A number a user decides
on carries its n and its 95 % interval (``lo``/``hi``) and the method that gave it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..stats.estimate import CarriesEstimate, CarriesStoredEstimate, Estimate

__all__ = ["FeedbackSummary", "GroupSummary", "Histogram", "JudgeUsage", "MetricSummary",
           "MonitorStatus", "PendingReason", "Report", "ReportPage", "TimeBucket", "Usage",
           "WorstRecord"]


@dataclass(frozen=True, slots=True)
class MetricSummary(CarriesEstimate):
    """One score name (``scores.name``); a metric such as rouge emits several."""

    name: str
    metric: str
    higher_is_better: bool | None  # None: the metric declares no direction (no "worst")
    count: int  # ok scores
    #: the mean (a yes/no metric: the rate) with its 95 % interval — Student t, Wilson, or
    #: the active-inference estimate of a budgeted judge metric — (``mean``, ``lo``, ``hi``,
    #: ``ci_method`` read through it)
    estimate: Estimate
    p10: float | None
    p50: float | None
    p90: float | None
    fail_rate: float | None  # share of ok scores labelled "fail"; None when none has a label
    labelled: int  # ok scores with a pass/fail label
    errors: int  # scores with status "error"
    skipped: int  # records the metric skipped (missing inputs, content capture off)
    threshold: float | None = None  # the pass/fail threshold the metric declares, if any
    #: a yes/no metric (values 0/1): shown as a rate, not percentiles (p10/p50/p90 are None)
    binary: bool = False
    yes: int | None = None  # binary only: ok scores with value 1
    rate: float | None = None  # binary only: yes / count
    #: why records were skipped, most frequent first: (reason, records)
    skip_reasons: tuple[tuple[str, int], ...] = ()
    #: jobs that ended in an error / were skipped, over every job of the score (with Wilson
    #: intervals in to_json): a release that errors more has regressed, whatever its mean
    error_rate: float | None = None
    #: "" (the plain figure over the scored records) or "active": a judge metric judged
    #: within a budget, whose mean/lo/hi are the active-inference estimate over ``proxied``
    #: records (:mod:`tracescore.monitor.active_summary`); ``judged_mean``: the judged records' plain (biased) mean
    estimator: str = ""
    judged_mean: float | None = None
    proxied: int | None = None

    @property
    def mean(self) -> float | None:
        return self.estimate.value

    @property
    def ci_method(self) -> str:
        return self.estimate.method

    @property
    def mostly_skipped(self) -> bool:
        """More than half of the metric's jobs in the window were skipped."""
        return self.skipped * 2 > self.skipped + self.count + self.errors

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in _SUMMARY_KEYS}
        out["skip_reasons"] = [{"reason": r, "records": n} for r, n in self.skip_reasons]
        out["mostly_skipped"] = self.mostly_skipped
        # reports.inclusion: weighted to all records; monitor.active_summary: budgeted judge metrics
        out["population"] = ("all decided records (active inference)"
                             if self.estimator == "active" else "scored records")
        return out


#: :meth:`MetricSummary.to_json`'s keys, in the order of the flat fields it had before it
#: carried an :class:`Estimate` (the JSON of ``report``/``compare`` is unchanged)
_SUMMARY_KEYS = ("metric", "higher_is_better", "count", "mean", "p10", "p50", "p90", "fail_rate",
                 "labelled", "errors", "skipped", "threshold", "binary", "yes", "rate", "lo",
                 "hi", "ci_method", "error_rate", "estimator", "judged_mean", "proxied")


@dataclass(frozen=True, slots=True)
class WorstRecord:
    name: str
    value: float
    label: str | None
    trace_id: str
    record_id: str
    query: str | None


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Open scoring jobs that share a state and a reason ("waiting for the judge at URL
    (unreachable since T: connection refused)"; "not started: ..."; "being scored now")."""

    state: str  # "pending" | "leased"
    reason: str
    jobs: int

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "jobs": self.jobs}


@dataclass(frozen=True, slots=True)
class FeedbackSummary(CarriesEstimate):
    """Users' feedback of one name (``ts.add_feedback(name=...)``) in the report's window.

    Positive: a value >= 0.5, or (no value) a label read as positive; negative likewise.
    ``rate`` is positive / (positive + negative) with its Wilson 95 % interval."""

    name: str
    count: int  # feedback entries
    traces: int  # distinct traces they are about
    valued: int  # entries with a value
    mean: float | None  # mean value of those
    positive: int
    negative: int
    #: the rate, its Wilson interval and n = positive + negative (``rate``, ``lo``, ``hi``,
    #: ``n`` read through it)
    estimate: Estimate = Estimate(0, None, None, None, "wilson")
    comments: int = 0
    last_at: float | None = None
    #: the most frequent labels: (label, entries)
    labels: tuple[tuple[str, int], ...] = ()

    @property
    def rate(self) -> float | None:
        return self.estimate.value

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "traces": self.traces, "valued": self.valued,
                "mean": self.mean, "positive": self.positive, "negative": self.negative,
                "rate": self.rate, "lo": self.lo, "hi": self.hi, "comments": self.comments,
                "last_at": self.last_at, "labels": {label: n for label, n in self.labels}}


@dataclass(frozen=True, slots=True)
class Report:
    db: str
    since: float | None
    generated_at: float
    records: int
    sampled: int
    dropped: int
    pending_jobs: int
    scores: int
    #: scores not (yet) confirmed as exported: held, in flight, or their export failed
    undelivered: int = 0
    metrics: list[MetricSummary] = field(default_factory=list)
    worst: dict[str, list[WorstRecord]] = field(default_factory=dict)
    judges: list[dict[str, Any]] = field(default_factory=list)
    #: accepted and then lost, by reason (the ``lost.<reason>`` counters; all time)
    lost: dict[str, int] = field(default_factory=dict)
    #: the monitors' current states (``tracescore check`` / ``monitor`` write them)
    monitors: list[MonitorStatus] = field(default_factory=list)
    #: segment values past the per-dimension limit, counted as ``other``: dimension → values
    overflow: dict[str, int] = field(default_factory=dict)
    #: ``report --by KEY``: the dimension, and one summary per value
    by: str | None = None
    groups: list[GroupSummary] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)
    #: why the open jobs are not scored, most jobs first (current, not windowed)
    pending_reasons: list[PendingReason] = field(default_factory=list)
    #: users' feedback in the window, per feedback name
    feedback: list[FeedbackSummary] = field(default_factory=list)
    #: score names with human labels in the window: agreement, corrected estimate
    #: (:class:`.trust.TrustSummary`)
    trust: list[Any] = field(default_factory=list)
    #: per score name: the population its figures speak for, and the figure weighted to all
    #: records (:class:`.inclusion.PopulationSummary`)
    population: list[Any] = field(default_factory=list)
    #: per score name of a judge metric judged within a budget: the active-inference
    #: estimate (:class:`.active.ActiveSummary`)
    active: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "judge_budget": {name: a.to_json() for name, a in self.active.items()},
            "monitors": [m.to_json() for m in self.monitors],
            "segment_overflow": dict(self.overflow),
            "by": self.by,
            "where": dict(self.where),
            "groups": [g.to_json() for g in self.groups],
            "db": self.db,
            "since": self.since,
            "generated_at": self.generated_at,
            "records": self.records,
            "sampled": self.sampled,
            "dropped": self.dropped,
            "pending_jobs": self.pending_jobs,
            "pending_reasons": [p.to_json() for p in self.pending_reasons],
            "feedback": {f.name: f.to_json() for f in self.feedback},
            "scores": self.scores,
            "undelivered_scores": self.undelivered,
            "lost": dict(self.lost),
            "metrics": {m.name: m.to_json() for m in self.metrics},
            "worst": {
                name: [{k: v for k, v in asdict(w).items() if k != "name"} for w in rows]
                for name, rows in self.worst.items()
            },
            "judges": self.judges,
            "judge_vs_humans": {t.name: t.to_json() for t in self.trust},
            "population": {p.name: p.to_json() for p in self.population},
        }

@dataclass(frozen=True, slots=True)
class Histogram:
    """Ok values of one score name in equal bins over ``[lo, hi]`` (the last bin is closed).

    Each bin is split by label: ``passed``, ``failed`` and ``unlabelled`` (no threshold).
    """

    lo: float
    hi: float
    passed: list[int]
    failed: list[int]
    unlabelled: list[int]

    @property
    def counts(self) -> list[int]:
        return [p + f + u for p, f, u in zip(self.passed, self.failed, self.unlabelled)]

@dataclass(frozen=True, slots=True)
class TimeBucket(CarriesEstimate):
    start: float  # unix seconds, a multiple of the bucket size (UTC-aligned)
    #: the bucket's mean (or active estimate) with its 95 % interval (None with fewer than 2
    #: values); ``count`` is its n (``mean``, ``lo``, ``hi`` read through it)
    estimate: Estimate
    failed: int = 0
    labelled: int = 0

    @property
    def count(self) -> int:
        return self.estimate.n

    @property
    def mean(self) -> float:
        value = self.estimate.value
        return math.nan if value is None else value


@dataclass(frozen=True, slots=True)
class JudgeUsage:
    """LLM-judge calls of one (model, step) from the ``judge_calls`` table."""

    model: str
    step: str
    calls: int
    errors: int  # calls that failed (the error column is set)
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None when no call had a known price


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens the app used (records) and what the LLM judge cost (judge_calls), in a window."""

    records: int
    with_usage: int  # records that reported token usage
    input_tokens: int
    output_tokens: int
    models: dict[str, int]  # app model -> records
    judge_scores: int  # scores of metrics declared as kind "judge"
    judge: list[JudgeUsage]  # most expensive first

    @property
    def judge_cost_usd(self) -> float | None:
        costs = [j.cost_usd for j in self.judge if j.cost_usd is not None]
        return math.fsum(costs) if costs else None



@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One value of the ``report --by`` dimension: its records and its scores."""

    value: str | None
    records: int
    sampled: int
    metrics: list[MetricSummary]

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "records": self.records, "sampled": self.sampled,
                "metrics": {m.name: m.to_json() for m in self.metrics}}


@dataclass(frozen=True, slots=True)
class MonitorStatus(CarriesStoredEstimate):
    """A monitor's stored state (``monitor_state``), for the report's first lines.

    ``value``, ``lo``, ``hi``, ``n`` read through ``estimate`` (the table keeps no method);
    ``n`` is None where the stored n is NULL (``n_stored`` False: a state written before
    every evaluation stored its n), and its JSON prints null there."""

    name: str
    state: str  # OK | WARNING | ALERT | NO_DATA
    since: float | None
    checked_at: float | None
    estimate: Estimate
    summary: str = ""
    n_stored: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "since": self.since,
                "checked_at": self.checked_at, "value": self.value, "lo": self.lo,
                "hi": self.hi, "n": self.n, "summary": self.summary}


@dataclass(frozen=True, slots=True)
class ReportPage:
    """Everything the HTML report draws, built once by :func:`.report.build_page`."""

    report: Report
    span: tuple[float, float] | None
    bucket: tuple[float, str] | None
    histograms: dict[str, Histogram | None]
    timelines: dict[str, list[TimeBucket]]
    usage: Usage
    #: the worst records in full (:func:`.show.record_details`), by record id
    records: dict[str, dict[str, Any]]
