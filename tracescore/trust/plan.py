"""Which records to label (``tracescore label --plan N``): a stratified random design.

Goal: for the labels spent, a judge-corrected estimate (``tracescore.stats.ppi``) that is both
*valid* (its interval covers the human mean at the stated rate) and *tight*. Labelling the newest
or the most suspicious records is neither: a convenience sample makes the correction biased. So
the plan is a stratified random sample (Cochran 1977, Sampling Techniques, ch. 5), the design
stratified PPI assumes (Fisch et al. 2024, "Stratified prediction-powered inference for hybrid
language model evaluation", NeurIPS):

0. **Population**: records, not traces (a trace with two records has two candidates; a label
   is about the record the annotator reads). ``tracescore label --plan`` leaves out records
   without text to label (``capture_content=False``, compact, redacted) and says how many.
1. **Strata** = the judge's score band × (optionally) a segment — the CLI uses the release
   only (the segment a release comparison needs; more dimensions would split N thinly). Bands: for a
   yes/no judge (every score 0 or 1) the two verdicts; otherwise ``bands`` quantile bands of the
   candidates' scores (edges rounded to 4 significant digits, ties merged), so bands are about
   equally full. Each stratum's name says what it holds ("0.5 <= judge < 0.8 | release=1.2") and
   :func:`parse_stratum` turns it back into a rule, so a report can put every record of the
   population back into its stratum.
2. **Allocation**: Neyman-type — stratum k gets labels in proportion to N_k·S_k (its size times
   the spread of the human label expected there), with at least 2 labels per non-empty stratum
   (a stratum's variance needs 2) and at most N_k. The integer allocation is the greedy one of
   Wright (2012, "The equivalence of Neyman optimum allocation for sampling and equal
   proportions for apportioning the U.S. House of Representatives", Am. Stat. 66:217): start
   at the floors and give each next label to the stratum with the largest N_k·S_k/√(n_k(n_k+1)),
   which minimises Σ N_k²S_k²/n_k exactly.
   S_k is a proxy from the judge's scores, since the labels do not exist yet: with u the score
   on a [0, 1] scale (scores outside [0, 1] are min-max scaled), a human label near a judge
   score u varies by about u(1 − u) (the Bernoulli variance a calibrated judge predicts), so
   S_k² = max(mean_k u(1 − u), 0.09). The floor 0.09 (a judge wrong on 1 record in 10) stands
   where the judge's scores claim certainty (0 or 1): they say nothing about where a judge
   errs, so a yes/no judge's bands get labels in proportion to their size.
3. **Coarsening**: if some stratum has fewer than 2 records or 2 labels per stratum do not fit
   in N, fewer bands are tried (down to 1), then the same without segments.
4. **Draws**: within each stratum a simple random sample of n_k records without replacement
   (``random.Random(seed)``: the same candidates and seed give the same plan on every platform;
   candidates are sorted by trace id first, so their order does not matter). Positions are a
   seeded random permutation of all draws, so a plan labelled only in part is still a random
   sample within each stratum: the estimator then uses each stratum's labelled count as n_k.
   An annotator who skips records by content breaks this; skips should be rare and said.

Output rows carry the stratum, its size N_k and its draws n_k, matching the ``label_plan``
table; the stratified estimator weights strata by N_k / N. Pure computation; no I/O.
"""

from __future__ import annotations

import heapq
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tracescore.stats import Moments

#: Labels every non-empty stratum gets at least (a stratum's variance needs two).
MIN_PER_STRATUM = 2
#: Floor of the per-stratum variance proxy: a judge wrong on 1 record in 10 (0.1 x 0.9).
VARIANCE_FLOOR = 0.09
#: The segment name of candidates without one, when others have one.
NO_SEGMENT = "(no segment)"
ALL = "all"


class Candidate(NamedTuple):
    """A record that may be labelled: its trace id, the judge's score, its segment (or None)
    and its record id (None: the trace stands for its record)."""

    trace_id: str
    value: float
    segment: str | None = None
    record_id: str | None = None


@dataclass(frozen=True)
class StratumRule:
    """A stratum as a rule: lo <= judge < hi (None: unbounded) and, if set, the segment."""

    lo: float | None
    hi: float | None
    segment: str | None

    def contains(self, value: float, segment: str | None = None) -> bool:
        if self.lo is not None and value < self.lo:
            return False
        if self.hi is not None and value >= self.hi:
            return False
        if self.segment is None:
            return True
        return (segment if segment is not None else NO_SEGMENT) == self.segment


@dataclass(frozen=True)
class PlanStratum:
    """One stratum of a plan: its name, size N_k, draws n_k, judge moments and S_k proxy."""

    name: str
    size: int
    draws: int
    judge: Moments
    sd_proxy: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "draws": self.draws,
                "judge_mean": self.judge.mean, "sd_proxy": self.sd_proxy}


@dataclass(frozen=True)
class PlanRow:
    """One record to label, in the order the annotator should see them (position from 0)."""

    position: int
    trace_id: str
    stratum: str
    stratum_size: int
    stratum_draws: int
    value: float
    segment: str | None
    record_id: str | None = None

    def to_row(self, plan_id: str, name: str, created_at: float) -> dict[str, Any]:
        """The row of the ``label_plan`` table."""
        return {"plan_id": plan_id, "position": self.position, "trace_id": self.trace_id,
                "record_id": self.record_id, "name": name, "stratum": self.stratum, "stratum_size": self.stratum_size,
                "stratum_draws": self.stratum_draws, "created_at": created_at}


@dataclass(frozen=True)
class LabelPlan:
    """A stratified random sample of records to label; ``notes`` say what was adjusted."""

    rows: tuple[PlanRow, ...]
    strata: tuple[PlanStratum, ...]
    population: int
    seed: int
    notes: tuple[str, ...] = ()

    def table_rows(self, plan_id: str, name: str, created_at: float) -> list[dict[str, Any]]:
        """All rows for ``store.add_label_plan(plan_id, rows)``."""
        return [r.to_row(plan_id, name, created_at) for r in self.rows]

    def to_json(self) -> dict[str, Any]:
        return {"population": self.population, "seed": self.seed, "notes": list(self.notes),
                "strata": [s.to_json() for s in self.strata],
                "rows": [{"position": r.position, "trace_id": r.trace_id,
                          "record_id": r.record_id, "stratum": r.stratum}
                         for r in self.rows]}


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def band_name(lo: float | None, hi: float | None) -> str:
    if lo is None and hi is None:
        return ALL
    if lo is None:
        return f"judge < {_fmt(hi)}"  # type: ignore[arg-type]
    if hi is None:
        return f"judge >= {_fmt(lo)}"
    return f"{_fmt(lo)} <= judge < {_fmt(hi)}"


def stratum_name(lo: float | None, hi: float | None, segment: str | None) -> str:
    band = band_name(lo, hi)
    return band if segment is None else f"{band} | {segment}"


_BAND = re.compile(r"^(?:judge < (?P<hi1>\S+)|judge >= (?P<lo1>\S+)|"
                   r"(?P<lo2>\S+) <= judge < (?P<hi2>\S+)|all)$")


def parse_stratum(name: str) -> StratumRule:
    """The rule a stratum name stands for (the inverse of the names plans write)."""
    band, sep, segment = name.partition(" | ")
    m = _BAND.match(band)
    if m is None:
        raise ValueError(f"not a stratum name: {name!r}")
    lo, hi = m["lo1"] or m["lo2"], m["hi1"] or m["hi2"]
    return StratumRule(float(lo) if lo else None, float(hi) if hi else None,
                       segment if sep else None)


def score_edges(values: Sequence[float], bands: int) -> tuple[float, ...]:
    """Band edges: 0.5 for a yes/no judge, else quantile edges (4 significant digits).

    An edge e splits "judge < e" from "judge >= e"; edges leaving a band empty are dropped.
    """
    if not values or bands <= 1:
        return ()
    if all(v in (0.0, 1.0) for v in values):
        return (0.5,) if 0.0 in values and 1.0 in values else ()
    xs = sorted(values)
    edges: list[float] = []
    for i in range(1, bands):
        e = float(_fmt(xs[min(len(xs) - 1, (i * len(xs)) // bands)]))
        if xs[0] < e <= xs[-1] and (not edges or e > edges[-1]):
            edges.append(e)
    return tuple(edges)


def _band(value: float, edges: Sequence[float]) -> tuple[float | None, float | None]:
    i = sum(1 for e in edges if value >= e)
    return (edges[i - 1] if i else None, edges[i] if i < len(edges) else None)


def _sd_proxy(values: Sequence[float], lo: float, hi: float) -> float:
    span = hi - lo
    us = [(v - lo) / span if span > 0 else 0.5 for v in values]
    v = sum(u * (1 - u) for u in us) / len(us)
    return math.sqrt(max(v, VARIANCE_FLOOR))


def _allocate(sizes: Sequence[int], sds: Sequence[float], n: int) -> list[int]:
    """Neyman allocation with floor MIN_PER_STRATUM and cap N_k (Wright 2012's greedy)."""
    draws = [min(MIN_PER_STRATUM, s) for s in sizes]
    left = n - sum(draws)
    heap = [(-sizes[k] * sds[k] / math.sqrt(draws[k] * (draws[k] + 1)), k)
            for k in range(len(sizes)) if draws[k] < sizes[k]]
    heapq.heapify(heap)
    while left > 0 and heap:
        _, k = heapq.heappop(heap)
        draws[k] += 1
        left -= 1
        if draws[k] < sizes[k]:
            heapq.heappush(heap, (-sizes[k] * sds[k] / math.sqrt(draws[k] * (draws[k] + 1)), k))
    return draws


def make_plan(
    candidates: Iterable[Candidate | tuple[str, float, str | None]],
    n: int,
    *,
    bands: int = 4,
    by_segment: bool = True,
    seed: int = 0,
) -> LabelPlan:
    """Choose n of the candidates to label: stratified by score band (x segment), seeded.

    by_segment: stratify by the candidates' segment too (when any has one). Raises ValueError
    for n < 2, duplicate candidates (same trace and record id) or a non-finite score. n above the number of candidates
    labels them all (said in ``notes``).
    """
    cands = sorted((Candidate(*c) for c in candidates),
                   key=lambda c: (c.trace_id, c.record_id or ""))
    if n < MIN_PER_STRATUM:
        raise ValueError(f"a plan needs at least {MIN_PER_STRATUM} labels, got n={n}")
    if bands < 1:
        raise ValueError(f"bands must be >= 1, got {bands}")
    ids = [(c.trace_id, c.record_id) for c in cands]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate candidates (trace and record id) among the candidates")
    if not all(math.isfinite(float(c.value)) for c in cands):
        raise ValueError("candidate scores must be finite numbers")
    if len(cands) < MIN_PER_STRATUM:
        raise ValueError(f"{len(cands)} candidate(s): a plan needs at least {MIN_PER_STRATUM}")
    notes: list[str] = []
    if n > len(cands):
        notes.append(f"asked for {n} labels but there are {len(cands)} candidates: all of them")
        n = len(cands)
    values = [float(c.value) for c in cands]
    lo, hi = (0.0, 1.0) if min(values) >= 0 and max(values) <= 1 else (min(values), max(values))
    segmented = by_segment and any(c.segment is not None for c in cands)
    tries = [(b, s) for s in ((True, False) if segmented else (False,))
             for b in range(bands, 0, -1)]
    groups: dict[str, list[Candidate]] = {}
    for b, use_seg in tries:
        edges = score_edges(values, b)
        groups = {}
        for c in cands:
            seg = (c.segment if c.segment is not None else NO_SEGMENT) if use_seg else None
            groups.setdefault(stratum_name(*_band(float(c.value), edges), seg), []).append(c)
        if (all(len(g) >= MIN_PER_STRATUM for g in groups.values())
                and MIN_PER_STRATUM * len(groups) <= n):
            if (b, use_seg) != tries[0]:
                notes.append(f"coarsened to {b} score band(s)"
                             f"{' x segment' if use_seg else ', no segments'} so that every "
                             f"stratum has {MIN_PER_STRATUM} records and labels")
            break
    def order(name: str) -> tuple[str, float]:
        rule = parse_stratum(name)
        return (rule.segment or "", -math.inf if rule.lo is None else rule.lo)

    names = sorted(groups, key=order)
    sizes = [len(groups[k]) for k in names]
    sds = [_sd_proxy([float(c.value) for c in groups[k]], lo, hi) for k in names]
    draws = _allocate(sizes, sds, n)
    rng = random.Random(seed)
    picked: list[tuple[Candidate, str, int, int]] = []
    strata = []
    for name, size, sd, k in zip(names, sizes, sds, draws):
        for c in rng.sample(groups[name], k):
            picked.append((c, name, size, k))
        strata.append(PlanStratum(name, size, k,
                                  Moments.from_values(float(c.value) for c in groups[name]), sd))
    rng.shuffle(picked)
    rows = tuple(PlanRow(i, c.trace_id, name, size, k, float(c.value), c.segment, c.record_id)
                 for i, (c, name, size, k) in enumerate(picked))
    return LabelPlan(rows, tuple(strata), len(cands), seed, tuple(notes))


__all__ = [
    "MIN_PER_STRATUM", "NO_SEGMENT", "VARIANCE_FLOOR", "Candidate", "LabelPlan", "PlanRow",
    "PlanStratum", "StratumRule", "make_plan", "parse_stratum", "score_edges", "stratum_name",
]
