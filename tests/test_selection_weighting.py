"""Estimates that account for how records were chosen (issue 29, part C): a database written
through the real write path (``tracescore.init`` on real SQLite, a sample rate, a rule that
forces records, a priority rule, negative feedback that forces scoring later) whose report
states the population of every figure and gives the weighted (Hájek) mean, which covers the
mean of all records where the plain mean of the scored ones does not; the Hájek mean and its
linearised variance against a direct transcription of the formulas."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracescore import Metric
from tracescore.cli import main
from tracescore.read.db import open_db
from tracescore.reports.compare import build_comparison
from tracescore.reports.report import build_report
from tracescore.reports.report_text import format_comparison, format_report
from tracescore.sampling import DEFAULT_RULES, PRIORITY_PREFIX, priority, trace_fraction
from tracescore.stats import weighted as W

RATE = 0.1
N = 2400


class Truth(Metric):
    """Scores a record with the value its metadata carries (the simulation's truth)."""

    name = "sel_truth"
    requires = frozenset()
    threshold = None

    def __call__(self, record: Any) -> Any:
        return self.result(float(record.metadata["truth"]))


def _complaint(record: Any) -> str | None:
    return "complaint" if record.metadata.get("kind") == "complaint" else None


def _premium(record: Any) -> bool:
    return record.metadata.get("kind") == "premium"


def _world(seed: int = 7) -> list[tuple[str, str, float]]:
    """(trace id, kind, truth): complaints score low and are forced, premium records score
    high and are sampled at 0.5, the rest at 0.1; some of the rest get negative feedback."""
    rng = random.Random(seed)
    out = []
    for i in range(N):
        r = rng.random()
        kind = "complaint" if r < 0.08 else "premium" if r < 0.28 else "plain"
        truth = (rng.betavariate(2, 8) if kind == "complaint" else
                 rng.betavariate(8, 2) if kind == "premium" else rng.betavariate(5, 4))
        out.append((f"{seed:08x}{i:024x}", kind, truth))
    return out


@pytest.fixture
def selected_db(make_ts: Any, db_path: Path) -> tuple[str, list[tuple[str, str, float]]]:
    world = _world()
    ts, _ = make_ts(metrics=[Truth()], sample_rate=RATE,
                    force_rules=(*DEFAULT_RULES, _complaint, priority(0.5, _premium, "premium")))
    for trace, kind, truth in world:
        ts.log_record(query="q", answer="a", trace_id=trace,
                      metadata={"truth": truth, "kind": kind})
    assert ts.flush(120)
    # negative feedback on the worst plain records, most of them not sampled: forced later
    for trace, kind, truth in world:
        if kind == "plain" and truth < 0.25:
            ts.add_feedback(trace, "down")
    assert ts.flush(120)
    ts.shutdown(10)
    return str(db_path), world


def test_report_states_the_population_and_weights_to_all_records(
        selected_db: tuple[str, list[tuple[str, str, float]]], tmp_path: Path) -> None:
    db, world = selected_db
    true_mean = sum(t for *_, t in world) / len(world)
    conn = open_db(db)
    try:
        rep = build_report(conn)
    finally:
        conn.close()
    pop = {p.name: p for p in rep.population}["sel_truth"]
    # who was scored, and with which probability: from the store alone
    kinds = {t: (k, v) for t, k, v in world}
    complaints = sum(1 for _, k, _ in world if k == "complaint")
    feedback = sum(1 for _, k, v in world if k == "plain" and v < 0.25)
    prio = sum(1 for t, k, _ in world if k == "premium" and trace_fraction(t) < 0.5)
    certain = dict(pop.certain)
    assert certain["complaint"] == complaints
    assert certain["negative feedback"] == feedback
    assert pop.priority == prio
    assert pop.rate.value == RATE and pop.rate.consistent
    assert pop.unequal
    # the plain mean of the scored records misses the mean of all records; the weighted
    # one covers it
    m = {x.name: x for x in rep.metrics}["sel_truth"]
    assert m.count == pop.scored.n
    assert not (m.lo <= true_mean <= m.hi)
    w = pop.weighted.estimate
    assert w.lo <= true_mean <= w.hi, (w, true_mean)
    assert abs(w.value - true_mean) < abs(m.mean - true_mean) / 3
    # the weights are the design's: recompute the Hájek mean from the world
    values, pis = [], []
    for trace, (kind, truth) in kinds.items():
        u = trace_fraction(trace)
        neg = kind == "plain" and truth < 0.25
        if kind == "complaint" or neg:
            values.append(truth)
            pis.append(1.0)
        elif kind == "premium" and u < 0.5:
            values.append(truth)
            pis.append(0.5)
        elif u < RATE:
            values.append(truth)
            pis.append(RATE)
    assert w.n == len(values)
    assert w.value == pytest.approx(sum(v / p for v, p in zip(values, pis))
                                    / sum(1 / p for p in pis), abs=1e-9)

    text = format_report(rep, width=120)
    assert "the figures above cover only the scored records" in text
    assert "all records (weighted)" in text and "scored records" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("sel_truth")
               and "[" in line and "complaint" in line)
    assert f"{w.value:.3f} [{w.lo:.3f}, {w.hi:.3f}]" in row

    res = CliRunner().invoke(main, ["report", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    js = json.loads(res.output)
    assert js["metrics"]["sel_truth"]["population"] == "scored records"
    p = js["population"]["sel_truth"]
    assert p["weighted"]["population"] == "all records (weighted)"
    assert p["scored"]["population"] == "scored records"
    assert p["weighted"]["value"] == pytest.approx(w.value)
    assert p["unequal_selection"] is True and p["rate"] == RATE

    page = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", "--db", db, "--html", str(page)])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert 'data-population="scored records only"' in html
    assert "all records (weighted)" in html and f"{w.value:.3f}" in html

    # compare: the rows are over the scored records; each side's population follows
    conn = open_db(db)
    try:
        cmp = build_comparison(conn, by="time", current_window=86400.0,
                               baseline_window=86400.0)
    finally:
        conn.close()
    cur = {p.name: p for p in cmp.population["current"]}["sel_truth"]
    assert cur.weighted.estimate.value == pytest.approx(w.value, abs=1e-12)
    cjs = cmp.to_json()
    assert cjs["scores"]["sel_truth"]["population"] == "scored records"
    assert cjs["population"]["current"]["sel_truth"]["weighted"]["population"] == \
        "all records (weighted)"
    ctext = format_comparison(cmp, width=120)
    assert "The verdicts above compare the scored records" in ctext
    assert "Population (current: last 1d)" in ctext and f"{w.value:.3f} [" in ctext


def test_a_uniform_sample_says_it_speaks_for_all_records(make_ts: Any, db_path: Path) -> None:
    ts, _ = make_ts(metrics=[Truth()], sample_rate=0.5)
    rng = random.Random(3)
    for i in range(200):
        ts.log_record(query="q", answer="a", trace_id=f"{i + 1:032x}",
                      metadata={"truth": rng.random()})
    assert ts.flush(60)
    ts.shutdown(10)
    conn = open_db(str(db_path))
    try:
        rep = build_report(conn)
    finally:
        conn.close()
    pop = rep.population[0]
    assert not pop.unequal and not pop.certain and pop.rate.source == "share"
    # nothing forced, no negative feedback: the rollups alone, the rate as the sampled share
    assert pop.rate.value == pytest.approx(rep.sampled / rep.records)
    assert pop.scored.value == pytest.approx(rep.metrics[0].mean, abs=1e-12)
    text = format_report(rep, width=400)
    assert (f"each scored with the same probability (sample rate about "
            f"{rep.sampled / rep.records:.3g}; no record forced): they speak for all records"
            in text)
    # equal weights: the weighted mean is the plain one
    from tracescore.read.query import SegmentIndex, Window
    from tracescore.reports.inclusion import selection_possible, summarise_population

    conn = open_db(str(db_path))
    try:
        assert not selection_possible(conn, Window(), None)
        exact = summarise_population(conn, "sel_truth", "sel_truth", False, Window(), None,
                                     SegmentIndex(conn))
    finally:
        conn.close()
    assert exact.rate.value == 0.5 and exact.rate.source == "decisions"
    assert exact.weighted.estimate.value == pytest.approx(pop.scored.value, abs=1e-12)


# -- the estimator against the formulas -------------------------------------------------------
def _direct(xs: list[float], pis: list[float]) -> tuple[float, float]:
    n_hat = sum(1 / p for p in pis)
    mu = sum(x / p for x, p in zip(xs, pis)) / n_hat
    var = sum((1 - p) / p ** 2 * (x - mu) ** 2 for x, p in zip(xs, pis)) / n_hat ** 2
    return mu, math.sqrt(var)


def test_hajek_mean_equals_the_direct_formula() -> None:
    from scipy.stats import t

    rng = random.Random(1)
    xs = [rng.random() for _ in range(300)]
    pis = [rng.choice([1.0, 0.5, 0.1, 0.05]) for _ in xs]
    got = W.hajek_mean(xs, pis)
    mu, se = _direct(xs, pis)
    assert got.estimate.value == pytest.approx(mu, abs=1e-12)
    assert got.se == pytest.approx(se, rel=1e-10)
    half = t.ppf(0.975, len(xs) - 1) * se
    assert (got.estimate.lo, got.estimate.hi) == pytest.approx((mu - half, mu + half),
                                                               abs=1e-12)
    assert got.to_json()["population"] == W.ALL_WEIGHTED
    # statsmodels' weighted statistics: the weighted mean; the variance Σ c_i (x_i − μ̂)² / N̂²
    # with c = (1 − π)/π² is DescrStatsW's var (ddof 0: Σ c (x − μ̂)² / Σ c) × Σ c / N̂²
    from statsmodels.stats.weightstats import DescrStatsW

    w = [1 / p for p in pis]
    assert got.estimate.value == pytest.approx(DescrStatsW(xs, weights=w).mean, abs=1e-12)
    c = [(1 - p) / p ** 2 for p in pis]
    around = DescrStatsW([x - mu for x in xs], weights=c)
    sm_var = (around.var + around.mean ** 2) * sum(c) / sum(w) ** 2
    assert got.se == pytest.approx(math.sqrt(sm_var), rel=1e-10)
    # equal probabilities: the plain mean; every pi = 1: the exact mean of a census
    assert W.hajek_mean(xs, [0.2] * len(xs)).estimate.value == pytest.approx(
        sum(xs) / len(xs), abs=1e-12)
    census = W.hajek_mean(xs, [1.0] * len(xs))
    assert census.se == 0 and census.estimate.method.startswith("census")
    # the reader's form: the database sums the values per pi
    from tracescore.stats import Moments

    groups = {p: Moments.from_values(x for x, q in zip(xs, pis) if q == p) for p in set(pis)}
    summed = W.hajek_from_moments(list(groups.items()))
    assert (summed.estimate.value, summed.se, summed.estimate.lo, summed.deff) == \
        pytest.approx((mu, se, got.estimate.lo, got.deff), rel=1e-9)


def test_inclusion_probabilities() -> None:
    assert PRIORITY_PREFIX == W.PRIORITY_PREFIX
    rule = priority(0.25, lambda r: True, "vip")
    from tracescore.record import RagRecord

    hits = [t for t in (f"{i + 1:032x}" for i in range(400)) if rule(RagRecord(
        trace_id=t, span_id="0" * 16, query="q", answer="a"))]
    assert all(trace_fraction(t) < 0.25 for t in hits) and 60 < len(hits) < 140
    reason = rule(RagRecord(trace_id=hits[0], span_id="0" * 16, query="q", answer="a"))
    assert W.priority_rate(reason) == 0.25
    assert W.inclusion_probability(reason, False, 0.1) == 0.25
    assert W.inclusion_probability(reason, False, 0.4) == 0.4
    assert W.inclusion_probability("error", False, 0.1) == 1.0
    assert W.inclusion_probability(None, True, 0.1) == 1.0
    assert W.inclusion_probability(None, False, 0.1) == 0.1
    with pytest.raises(ValueError):
        priority(0.0, lambda r: True, "x")


def test_the_weighted_figures_on_both_backends(db: str) -> None:
    """The store's write path on SQLite and PostgreSQL: forced, priority-picked, rate-sampled
    and feedback-forced records; the report's weighted figure is the Hájek mean of exactly
    those scores with their π (the reader's SQL on both engines)."""
    from tracescore.record import RagRecord
    from tracescore.sampling import Decision
    from tracescore.score import Score
    from tracescore.store import NewJob, open_store

    rng = random.Random(4)
    store = open_store(db)
    values, pis = [], []
    try:
        store.register_metrics([Truth()])
        for i in range(600):
            trace = f"{i + 1:032x}"
            u = trace_fraction(trace)
            x = rng.random()
            forced = ("error" if i % 10 == 0 else
                      "priority 0.5: premium" if i % 10 == 1 and u < 0.5 else None)
            negative = forced is None and i % 10 == 2 and x < 0.3
            sampled = forced is not None or u < RATE
            rec = RagRecord(trace_id=trace, span_id=f"{i + 1:016x}", query="q", answer="a")
            d = Decision(u, ("sel_truth",) if sampled else (), forced)
            scored = sampled or negative
            store.write_batch([(rec, d)], [NewJob(rec.record_id, "sel_truth", "1")]
                              if scored else [], None)
            if negative:
                store.add_feedback(trace, "user", 0.0, None, None, 0.0)
            if scored:
                jobs = store.lease_jobs("t", 10, 60.0, ["sel_truth"])
                store.complete_jobs("t", [(j, [Score("sel_truth", x, metric="sel_truth")])
                                          for j in jobs], "none")
                values.append(x)
                pis.append(1.0 if forced == "error" or negative else
                           0.5 if forced else RATE)
    finally:
        store.close()
    conn = open_db(db)
    try:
        rep = build_report(conn)
    finally:
        conn.close()
    pop = rep.population[0]
    assert pop.rate.value == RATE and pop.unequal
    ref = W.hajek_mean(values, pis)
    got = pop.weighted
    assert (got.estimate.value, got.se, got.estimate.n) == pytest.approx(
        (ref.estimate.value, ref.se, ref.estimate.n), rel=1e-9)
    assert dict(pop.certain)["error"] == 60
    assert dict(pop.certain)["negative feedback"] == sum(
        1 for v, p in zip(values, pis) if p == 1.0) - 60
