"""Which population a score's figures speak for: each scored record's inclusion probability,
read from what the store keeps, and the weighted (Hájek) mean over all records.

A score of metric m is stored for a record because (``records`` row, written with the
sampling decision; ``feedback`` table):

- a rule forced it (``records.forced``: "error", "metadata flag", a custom rule's reason):
  π = 1, the rule picks every record it holds;
- the trace got negative feedback (a ``feedback`` value < 0.5 forces every metric on the
  trace, whatever was decided before): π = 1;
- a priority rule picked it (``forced`` = "priority p: ..."): π = max(p, r_m);
- its hash fraction ``records.sample_u`` was below the metric's rate r_m: π = r_m.

The rate r_m is not a column: it is read back from the decisions themselves. Among records no
rule forced, m scored exactly those with u < r_m (``sampled_metrics``), so r_m lies in
(max u of those sampled for m, min u of those not] — a bracket about 1/N wide; the rate
reported is the shortest decimal inside it (0.1, not 0.10004). Where the bracket is empty the
rate changed inside the window (a restart with another ``sample_rate``); π is then the
window's sampled share of the unforced records, and the output says so.

The weighted mean (:func:`tracescore.stats.weighted.hajek_from_moments`) needs each scored
record's π, so it is read from the raw ``scores`` rows joined to their records (an index range
on (name, created_at), summed in the database by why each record was chosen: a handful of rows
back whatever n; the rate is one aggregate over the window's records per metric): hours whose rows were pruned (``tracescore prune``) are in the
rollups but not here — the weighted figure then covers the rows kept, and says how many
scores it left out. (Weighted sums in the rollups would keep it exact after a prune, but the
weight of a record can change after it was rolled up — feedback arriving later makes π = 1 —
so they would be wrong exactly where it matters.)

Blocking reads on the caller's connection (SQLite or PostgreSQL, through the same SQL).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..read import query as Q
from ..read.population import sampling_bracket, scored_groups, selection_possible
from ..stats import CarriesEstimate, Estimate, Moments
from ..stats.weighted import (
    ALL_WEIGHTED,
    NEGATIVE_FEEDBACK,
    SCORED,
    WeightedMean,
    hajek_from_moments,
    inclusion_probability,
    priority_rate,
)

__all__ = ["ALL_WEIGHTED", "SCORED", "PopulationSummary", "SampleRate", "population_summaries",
           "sample_rate", "scored_groups", "selection_possible"]


#: ``SampleRate.source``: read back from the decisions' hash fractions / the rollups' share
DECISIONS = "decisions"
SHARE = "share"


@dataclass(frozen=True, slots=True)
class SampleRate(CarriesEstimate):
    """A metric's rate read back from the unforced records' decisions in a window.

    ``estimate``: n the unforced records, value the rate: the
    shortest decimal in the bracket (lo, hi]; its method is the rate's source
    (``source``): "decisions" (read back from the hash fractions: lo..hi is that bracket,
    not a confidence interval), "share" (the rollups' sampled share of the window's records,
    shown as approximate where nothing was forced; no bracket) or "sessions".
    consistent False: the bracket is empty (the rate changed in the window), rate is then
    the sampled share ``share``."""

    estimate: Estimate
    consistent: bool
    sampled: int

    @property
    def source(self) -> str:
        return self.estimate.method

    @property
    def share(self) -> float | None:
        return self.sampled / self.n if self.n else None


def _shortest(lo: float, hi: float) -> float:
    """The decimal with the fewest digits in (lo, hi] (hi itself failing that)."""
    for d in range(1, 13):
        scale = 10.0 ** d
        c = (math.floor(lo * scale) + 1) / scale
        if lo < c <= hi:
            return c
    return hi


def sample_rate(conn: Any, metric: str, window: Q.Window, ids: set[int] | None) -> SampleRate:
    """The rate of ``metric`` over the window's unforced records (``ids``: their segments)."""
    unforced, sampled, top, bottom = sampling_bracket(conn, metric, window, ids)
    if not unforced:
        return SampleRate(Estimate.missing(DECISIONS), True, 0)
    if sampled == 0:  # nothing sampled by rate: the rate is at most the smallest u
        rate = 0.0 if bottom is None else _shortest(0.0, bottom)
        return SampleRate(Estimate(unforced, rate, 0.0, bottom, DECISIONS), True, 0)
    if bottom is None:  # every unforced record sampled: the rate is above the largest u
        return SampleRate(Estimate(unforced, 1.0, top, 1.0, DECISIONS), True, sampled)
    assert top is not None
    if top < bottom:
        return SampleRate(Estimate(unforced, _shortest(top, bottom), top, bottom, DECISIONS),
                          True, sampled)
    return SampleRate(Estimate(unforced, sampled / unforced, top, bottom, DECISIONS), False,
                      sampled)


@dataclass(frozen=True, slots=True)
class PopulationSummary:
    """One score name: the plain figure over the scored records beside the weighted one over
    all records, and why the two differ.

    scored: the plain mean (rate) over the scored rows read here (population
    :data:`SCORED`); weighted: the Hájek mean (population :data:`ALL_WEIGHTED`), None when
    no row has a known π. certain: scored records with π = 1, by reason; priority: scored
    records a priority rule picked; by_rate: the rest; unknown: scores without a record row
    (no sampling decision: left out of the weighted figure); pruned: ok scores of the window
    in the rollups whose raw rows are gone (left out of both figures here).
    """

    name: str
    metric: str
    binary: bool
    scored: Estimate
    weighted: WeightedMean | None
    rate: SampleRate
    certain: tuple[tuple[str, int], ...] = ()
    priority: int = 0
    by_rate: int = 0
    unknown: int = 0
    pruned: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def unequal(self) -> bool:
        """Some scored records were chosen with another probability than the rest."""
        return bool(self.certain or self.priority) and (self.by_rate > 0 or self.rate.value != 1)

    @property
    def statement(self) -> str:
        """What the report's plain figure speaks for, in words."""
        if self.rate.source == SESSIONS:
            return f"{SCORED}: every closed session (a census of sessions, not of requests)"
        if not self.unequal:
            r = self.rate.value
            if not self.certain and not self.priority and r is not None:
                said = f"{r:g}" if self.rate.source == "decisions" else f"about {r:.3g}"
                return (f"{SCORED}: a uniform sample (rate {said}) of all records, so they "
                        "speak for all records")
            return f"{SCORED}: every record scored"
        forced = ", ".join(f"{reason}: {n}" for reason, n in self.certain)
        return (f"{SCORED} only: {sum(n for _, n in self.certain) + self.priority} of the "
                f"{self.scored.n} were chosen with a higher probability ({forced}"
                f"{', priority rules: ' + str(self.priority) if self.priority else ''}); "
                f"{ALL_WEIGHTED} weights each by 1/pi")

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "binary": self.binary, "statement": self.statement,
            "unequal_selection": self.unequal,
            "scored": self.scored.to_json(),
            "weighted": None if self.weighted is None else self.weighted.to_json(),
            "rate": self.rate.value, "rate_bracket": [self.rate.lo, self.rate.hi],
            "rate_consistent": self.rate.consistent, "rate_source": self.rate.source,
            "certain": dict(self.certain), "priority": self.priority,
            "by_rate": self.by_rate, "unknown": self.unknown, "pruned": self.pruned,
            "notes": list(self.notes),
        }


def summarise_population(conn: Any, name: str, metric: str, binary: bool, window: Q.Window,
                         where: Mapping[str, str] | None, seg: Q.SegmentIndex,
                         rolled_up: int | None = None, rate: SampleRate | None = None
                         ) -> PopulationSummary:
    """The population figures of one score name (``rolled_up``: its ok scores in the rollups,
    to count pruned rows; ``rate``: the metric's :func:`sample_rate`, when known)."""
    groups = scored_groups(conn, name, window, where, seg)
    if rate is None:
        rate = sample_rate(conn, metric, window, seg.matching(where))
    r = rate.value
    weighted_groups: list[tuple[float, Moments]] = []
    certain: Counter[str] = Counter()
    priority = by_rate = unknown = 0
    total = Moments(0, 0.0, 0.0)
    for forced, negative, has_record, m in groups:
        total = total + m
        if not has_record:
            unknown += m.n
            continue
        if negative:
            certain[NEGATIVE_FEEDBACK] += m.n
        elif forced and priority_rate(forced) is None:
            certain[forced] += m.n
        elif forced:
            priority += m.n
        else:
            by_rate += m.n
        pi = inclusion_probability(forced, negative, r if r is not None else 0.0)
        if pi <= 0:  # sampled by rate where the window shows no rate: its decision is lost
            unknown += m.n
            continue
        weighted_groups.append((pi, m))
    plain = Estimate(0, None, None, None, "")
    if total.n:
        from ..stats import mean_ci, rate_ci

        plain = (rate_ci(min(total.n, max(0, round(total.s))), total.n) if binary
                 else mean_ci(total))
    plain = dataclasses.replace(plain, population=SCORED)
    notes = []
    if not rate.consistent:
        notes.append(f"the sample rate changed inside the window (hash fractions overlap): "
                     f"pi taken as the window's sampled share {rate.value:.4g} of the "
                     f"{rate.n} unforced records")
    pruned = max(0, rolled_up - total.n) if rolled_up is not None else 0
    if pruned:
        notes.append(f"{pruned} scores of the window were pruned (their rows folded into the "
                     "rollups): both figures here cover the rows kept")
    if unknown:
        notes.append(f"{unknown} scores without a sampling decision (no record row) left out "
                     "of the weighted figure")
    weighted = hajek_from_moments(weighted_groups) if weighted_groups else None
    if certain and not by_rate and not priority and (rate.n - rate.sampled) > 0:
        # only records taken with certainty were scored: the others are not represented
        weighted = None
        notes.append(f"no record was scored by the sample rate, only forced ones: the "
                     f"{rate.n} unforced records are not represented, no weighted "
                     "figure")
    return PopulationSummary(name, metric, binary, plain, weighted, rate,
                             tuple(sorted(certain.items(), key=lambda kv: (-kv[1], kv[0]))),
                             priority, by_rate, unknown, pruned, tuple(notes))


#: ``SampleRate.source`` of a session score: every closed session is scored, its population
#: is the sessions (:mod:`tracescore.sessions`), whatever the requests' sample rates
SESSIONS = "sessions"
#: the score names of sessions (:data:`tracescore.sessions.metrics.PREFIX`)
SESSION_PREFIX = "session."


def _sessions(a: Q.Agg, binary: bool) -> PopulationSummary:
    """A session score: a census of the closed sessions (each scored once, π = 1)."""
    est = a.estimate(binary)
    return PopulationSummary(a.name, a.metric, binary, est, None,
                             SampleRate(Estimate(a.n_ok, 1.0, None, None, SESSIONS), True,
                                        a.n_ok),
                             by_rate=a.n_ok)


def _uniform(a: Q.Agg, binary: bool, share: SampleRate) -> PopulationSummary:
    return PopulationSummary(a.name, a.metric, binary, a.estimate(binary), None, share,
                             by_rate=a.n_ok)


def population_summaries(conn: Any, window: Q.Window, scores: Mapping[str, Q.Agg],
                         binaries: Mapping[str, bool], *, where: Mapping[str, str] | None = None,
                         seg: Q.SegmentIndex | None = None) -> list[PopulationSummary]:
    """Per score name of ``scores`` with ok scores: :func:`summarise_population` (the rate
    read once per metric: a metric such as rouge emits several names). Where no record near
    the window was forced and no feedback was negative (:func:`selection_possible`), every
    score was chosen at its rate: the summaries come from the rollups alone (the rate shown
    is the window's sampled share), at the cost of two index probes."""
    seg = seg or Q.SegmentIndex(conn)
    ids = seg.matching(where)
    named = [(name, a) for name, a in sorted(scores.items()) if a.n_ok]
    if not named:
        return []
    if not selection_possible(conn, window, ids):
        recs = Q.merge_records(Q.record_aggs(conn, window, where=where, seg=seg).values())
        share = SampleRate(Estimate(recs.records, recs.sampled / recs.records
                                    if recs.records else None, None, None, SHARE),
                           True, recs.sampled)
        return [_sessions(a, binaries.get(name, False)) if a.metric.startswith(SESSION_PREFIX)
                else _uniform(a, binaries.get(name, False), share) for name, a in named]
    rates: dict[str, SampleRate] = {}
    out = []
    for name, a in named:
        if a.metric.startswith(SESSION_PREFIX):
            out.append(_sessions(a, binaries.get(name, False)))
            continue
        if a.metric not in rates:
            rates[a.metric] = sample_rate(conn, a.metric, window, ids)
        out.append(summarise_population(conn, name, a.metric, binaries.get(name, False),
                                        window, where, seg, a.n_ok, rates[a.metric]))
    return out
