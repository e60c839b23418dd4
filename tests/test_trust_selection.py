"""The judge-corrected (PPI) estimate and how the labelled records were chosen (issue 29,
part C): labels given to the lowest judge scores get a warning in every output that shows a
corrected estimate (report text, JSON and HTML; compare text and JSON), random labels do not;
labels drawn by a plan are weighted by the plan's probabilities — also when the window holds
records the plan did not draw from, where the estimate says which records it covers instead
of pooling the plan's labels as if drawn uniformly. On real SQLite, written through the
store's write path (the database of tests/test_trust_reports.py)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import StoreClock
from test_trust_reports import (  # the same world: a judge with a known bias
    DAY,
    NOW,
    World,
    _report,
    feed,
    label,
)
from test_trust_reports import clock as clock  # noqa: F401 (fixture)
from test_trust_reports import labelled as labelled  # noqa: F401 (fixture)

from tracescore.cli import main
from tracescore.read.db import open_db
from tracescore.reports.compare import build_comparison
from tracescore.reports.report_text import format_comparison, format_report
from tracescore.stats import Moments
from tracescore.stats.ppi import Stratum, stratified_ppi_mean
from tracescore.store import open_store
from tracescore.trust.selection import draw_check

WARNING = "WARNING: the labelled records do not look like a random draw"


def _lowest(world: World, traces: list[str], k: int) -> list[str]:
    return sorted(traces, key=lambda t: world.judge[t]["quality"])[:k]


def test_biased_labels_warn_in_every_output(db: str, clock: StoreClock, tmp_path: Any) -> None:
    world = World()
    a = feed(db, clock, world, release="v1", n=300, start=NOW - 6 * DAY, spread=2 * DAY,
             seed=41)
    b = feed(db, clock, world, release="v2", n=300, start=NOW - 3 * DAY, spread=2 * DAY,
             seed=42)
    # the annotators looked only at the records the judge scored lowest
    label(db, world, _lowest(world, a, 60))
    label(db, world, _lowest(world, b, 60))
    clock.t = NOW
    truth = sum(world.human[t]["quality"] for t in world.traces) / len(world.traces)

    rep = _report(db)
    q = {t.name: t for t in rep.trust}["quality"].correction
    assert q.ok and q.warning is not None and WARNING in q.warning
    # the corrected mean misses the truth, and the check is what says so
    c = q.result.corrected
    assert not (c.lo <= truth <= c.hi)
    d = q.draw
    assert d.p_value < 1e-6 and d.labelled_mean < d.unlabelled_mean
    fs = _lowest(world, a, 60) + _lowest(world, b, 60)
    ref = draw_check([world.judge[t]["quality"] for t in fs],
                     Moments.from_values(world.judge[t]["quality"] for t in world.traces),
                     unlabelled_includes_labelled=True)
    assert d.statistic == pytest.approx(ref.statistic, abs=1e-9)

    text = format_report(rep, width=120)
    block = text[text.index("Judge vs humans"):]
    # (the yes/no "grounded" is independent of quality here: its labels are a random draw
    # as far as its judge can tell, and it is not warned)
    assert block.count(WARNING) == 1
    assert block.index(WARNING) > block.index("quality: 120 labelled records")
    js = json.loads(CliRunner().invoke(main, ["report", "--db", db, "--json"]).output)
    corr = js["judge_vs_humans"]["quality"]["corrected"]
    assert WARNING in corr["warning"] and corr["label_draw"]["p_value"] < 0.01
    assert js["judge_vs_humans"]["grounded"]["corrected"]["label_draw"]["p_value"] > 0.01
    page = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", "--db", db, "--html", str(page)])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert html.count('data-warning="label-draw"') == 1 and "random draw" in html

    conn = open_db(db)
    try:
        cmp = build_comparison(conn, now=NOW)
    finally:
        conn.close()
    ctext = format_comparison(cmp, width=140)
    assert ctext.count(WARNING) == 2  # quality on both sides
    cjs = cmp.to_json()["corrected"]["quality"]
    assert WARNING in cjs["current"]["corrected"]["warning"]
    assert WARNING in cjs["baseline"]["corrected"]["warning"]


def test_random_labels_do_not_warn(labelled: tuple[str, World, list[str]]) -> None:
    db, _world, _sample = labelled
    rep = _report(db)
    for t in rep.trust:
        assert t.correction.draw is not None and t.correction.draw.p_value > 0.01
        assert t.correction.warning is None
    assert WARNING not in format_report(rep, width=120)
    js = rep.to_json()["judge_vs_humans"]["quality"]["corrected"]
    assert js["warning"] is None and js["label_draw"]["test"].startswith("welch")


def test_plan_labels_use_the_plans_probabilities_beside_records_it_did_not_draw(
        db: str, clock: StoreClock) -> None:
    from tracescore.trust.plan import make_plan, parse_stratum

    world = World()
    v1 = feed(db, clock, world, release="v1", n=300, start=NOW - 6 * DAY, spread=2 * DAY,
              seed=51)
    cands = [(t, world.judge[t]["quality"], "release=v1") for t in v1]
    plan = make_plan(cands, 70, seed=9)
    store = open_store(db)
    try:
        store.add_label_plan("p9", plan.table_rows("p9", "quality", NOW - 4 * DAY))
    finally:
        store.close()
    drawn = [r.trace_id for r in plan.rows]
    label(db, world, drawn, source="plan:p9", names=("quality",))
    # a newer release the plan never drew from
    feed(db, clock, world, release="v2", n=120, start=NOW - 3 * DAY, spread=DAY, seed=52)
    clock.t = NOW

    rep = _report(db)
    corr = {x.name: x for x in rep.trust}["quality"].correction
    assert corr.design == "plan" and corr.plan_id == "p9"
    assert "120 of the window's fall outside them" in corr.population
    assert "n_k/N_k" in corr.assumption
    # the stratified estimate over the plan's strata, each stratum weighted by its size:
    # the plan's inclusion probabilities n_k / N_k
    strata = []
    for s in plan.strata:
        rule = parse_stratum(s.name)
        members = [t for t in v1 if rule.contains(world.judge[t]["quality"], "release=v1")]
        assert len(members) == s.size
        lab = [t for t in sorted(drawn) if t in members]
        strata.append(Stratum(s.name, Moments.from_values(world.judge[t]["quality"]
                                                          for t in members),
                              [world.judge[t]["quality"] for t in lab],
                              [world.human[t]["quality"] for t in lab]))
    ref = stratified_ppi_mean(strata, unlabelled_includes_labelled=True)
    assert corr.result.corrected.value == pytest.approx(ref.corrected.value, abs=1e-9)
    assert corr.result.corrected.hi == pytest.approx(ref.corrected.hi, abs=1e-9)
    # a plan's labels are unequal across strata on purpose: the within-strata check passes
    assert corr.draw.test.startswith("stratified") and corr.warning is None
    text = format_report(rep, width=1000)
    assert "population: the 300 scored records in plan p9's strata" in text
    js = rep.to_json()["judge_vs_humans"]["quality"]["corrected"]
    assert js["design"] == "plan" and js["population"].startswith("the 300 scored records")


def test_draw_check_size_and_power() -> None:
    """Seeded: the check fires on about α of random draws and on nearly every draw of the
    lowest judge scores (bench/selection_sim.py measures both at length)."""
    rng = random.Random(2)
    fired_random = fired_biased = 0
    reps = 200
    for _ in range(reps):
        f = [rng.betavariate(5, 3) for _ in range(1000)]
        all_m = Moments.from_values(f)
        lab = rng.sample(f, 60)
        fired_random += draw_check(lab, all_m, unlabelled_includes_labelled=True).warn
        low = sorted(f)[:300]
        biased = rng.sample(low, 60)
        fired_biased += draw_check(biased, all_m, unlabelled_includes_labelled=True).warn
    assert fired_random <= 8  # α = 0.01: expect 2
    assert fired_biased == reps
