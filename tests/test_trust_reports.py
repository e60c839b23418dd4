"""Judge vs humans in the readers: ``calibrate``'s agreement, ``report``'s and ``compare``'s
corrected estimates, the HTML section — on real SQLite and PostgreSQL (issue 17, parts 2-3).

A database of scored records is written through the store's write path with a scripted judge
whose bias is known: each trace has a human truth (yes/no ``grounded``, numeric ``quality``);
the judge says "yes" to 95 % of the humans' yes and to 40 % of their no, and scores quality
0.1 higher than the human plus noise. Labels are added through the store (``add_label``), as
``ts.add_label`` and ``tracescore label`` do. Every figure is checked against an independent
computation on the same pairs: statsmodels' Cohen's kappa, scipy's Spearman and paired t,
and :mod:`tracescore.stats.ppi` on moments computed here from the written values.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import StoreClock, store_clock

from tracescore.cli import main
from tracescore.read.db import open_db
from tracescore.record import RagRecord
from tracescore.reports.compare import build_comparison
from tracescore.reports.report import build_report
from tracescore.reports.report_text import format_comparison, format_report
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.stats import Moments
from tracescore.stats.ppi import Stratum, ppi_mean, stratified_ppi_mean
from tracescore.store import NewJob, open_store
from tracescore.store.segments import SegmentSpec

DAY = 86400.0
NOW = 1_780_000_000.0
METRICS = ("quality", "grounded")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> StoreClock:
    return store_clock(monkeypatch, NOW - 10 * DAY)


def _register(store: Any) -> None:
    from tracescore.metrics.base import Metric

    class _M(Metric):
        kind = "judge"
        version = "1"
        requires = frozenset()

        def __init__(self, name: str, binary: bool) -> None:
            self.name = name
            self.binary = binary
            self.higher_is_better = True
            self.threshold = None if binary else 0.5
            self.description = name

        def score(self, record: RagRecord) -> Any:  # pragma: no cover - never scored
            raise NotImplementedError

    store.register_metrics([_M("quality", False), _M("grounded", True)])


@dataclass
class World:
    """What was written: per trace the judge's values and the human truth."""

    traces: list[str] = field(default_factory=list)
    judge: dict[str, dict[str, float]] = field(default_factory=dict)
    human: dict[str, dict[str, float]] = field(default_factory=dict)
    release: dict[str, str] = field(default_factory=dict)


def feed(db: str, clock: StoreClock, world: World, *, release: str, n: int, start: float,
         spread: float, seed: int, yes: float = 0.7) -> list[str]:
    rng = random.Random(seed)
    store = open_store(db)
    out = []
    try:
        _register(store)
        spec = SegmentSpec(release=release, environment="prod")
        for i in range(n):
            t = start + spread * i / n
            clock.t = t
            trace = f"{seed:08x}{i:024x}"
            h_yes = 1.0 if rng.random() < yes else 0.0
            j_yes = 1.0 if rng.random() < (0.95 if h_yes else 0.4) else 0.0
            h_q = rng.betavariate(6, 3)
            j_q = min(1.0, max(0.0, h_q + 0.1 + rng.gauss(0, 0.08)))
            rec = RagRecord(trace_id=trace, span_id=f"{i:016x}", query=f"q{i}", answer="a",
                            end_time_ns=int(t * 1e9), start_time_ns=int((t - 0.5) * 1e9),
                            model="app-model")
            store.write_batch([(rec, Decision(0.1, METRICS))],
                              [NewJob(rec.record_id, m, "1") for m in METRICS], None,
                              segments=spec)
            jobs = store.lease_jobs("t", 10, 60.0, list(METRICS))
            done = []
            for j in jobs:
                if j.metric == "quality":
                    s = Score("quality", j_q, label="pass" if j_q >= 0.5 else "fail",
                              metric="quality")
                else:
                    s = Score("grounded", j_yes, metric="grounded")
                done.append((j, [s]))
            store.complete_jobs("t", done, "none")
            world.traces.append(trace)
            world.judge[trace] = {"quality": j_q, "grounded": j_yes}
            world.human[trace] = {"quality": h_q, "grounded": h_yes}
            world.release[trace] = release
            out.append(trace)
        return out
    finally:
        store.close()


def label(db: str, world: World, traces: list[str], *, annotator: str = "ann",
          source: str = "manual", names: tuple[str, ...] = METRICS) -> None:
    store = open_store(db)
    try:
        for t in traces:
            for name in names:
                store.add_label(t, name, world.human[t][name], annotator=annotator,
                                source=source, created_at=NOW - DAY)
    finally:
        store.close()


def _report(db: str, **kw: Any) -> Any:
    conn = open_db(db)
    try:
        return build_report(conn, **kw)
    finally:
        conn.close()


@pytest.fixture
def labelled(db: str, clock: StoreClock) -> tuple[str, World, list[str]]:
    """400 records of release v1, 80 of them labelled (a seeded random sample)."""
    world = World()
    traces = feed(db, clock, world, release="v1", n=400, start=NOW - 5 * DAY,
                  spread=4 * DAY, seed=11)
    sample = random.Random(5).sample(traces, 80)
    label(db, world, sample)
    clock.t = NOW
    return db, world, sample


# -- calibrate: agreement against statsmodels / scipy -----------------------------------------
def test_calibrate_agreement_equals_statsmodels_and_scipy(
        labelled: tuple[str, World, list[str]]) -> None:
    from scipy import stats
    from statsmodels.stats.inter_rater import cohens_kappa

    db, world, sample = labelled
    res = CliRunner().invoke(main, ["calibrate", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["labels"]
    g, q = out["metrics"]["grounded"], out["metrics"]["quality"]

    jg = [world.judge[t]["grounded"] for t in sorted(sample)]
    hg = [world.human[t]["grounded"] for t in sorted(sample)]
    ag = g["agreement"]
    assert ag["kind"] == "binary" and ag["n"] == 80
    table = [[sum(1 for j, h in zip(jg, hg) if h == r and j == c) for c in (0, 1)]
             for r in (0, 1)]
    ref = cohens_kappa(table)
    assert ag["kappa"]["value"] == pytest.approx(ref.kappa, abs=1e-9)
    assert ag["kappa"]["lo"] == pytest.approx(ref.kappa_low, abs=1e-9)
    assert ag["kappa"]["hi"] == pytest.approx(ref.kappa_upp, abs=1e-9)
    assert ag["accuracy"]["value"] == pytest.approx(
        sum(j == h for j, h in zip(jg, hg)) / 80, abs=1e-9)
    c = ag["confusion"]
    assert [[c["both_no"], c["judge_yes_human_no"]],
            [c["judge_no_human_yes"], c["both_yes"]]] == table
    tt = stats.ttest_rel(jg, hg)
    ci = tt.confidence_interval(0.95)
    assert ag["bias"]["estimate"] == pytest.approx(sum(jg) / 80 - sum(hg) / 80, abs=1e-9)
    assert (ag["bias"]["lo"], ag["bias"]["hi"]) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert ag["bias"]["estimate"] > 0.05  # the scripted judge says yes too often

    jq = [world.judge[t]["quality"] for t in sorted(sample)]
    hq = [world.human[t]["quality"] for t in sorted(sample)]
    aq = q["agreement"]
    assert aq["kind"] == "numeric"
    assert aq["spearman"]["value"] == pytest.approx(stats.spearmanr(jq, hq).statistic,
                                                    abs=1e-9)
    assert aq["mae"]["value"] == pytest.approx(
        math.fsum(abs(a - b) for a, b in zip(jq, hq)) / 80, abs=1e-9)
    tq = stats.ttest_rel(jq, hq)
    assert aq["bias"]["estimate"] == pytest.approx((math.fsum(jq) - math.fsum(hq)) / 80,
                                                   abs=1e-9)
    assert (aq["bias"]["lo"], aq["bias"]["hi"]) == pytest.approx(
        tuple(tq.confidence_interval(0.95)), abs=1e-9)
    assert aq["bias"]["p_value"] == pytest.approx(float(tq.pvalue), abs=1e-9)

    text = CliRunner().invoke(main, ["calibrate", "--db", db])
    assert text.exit_code == 0, text.output
    assert "Judge vs human labels" in text.output
    assert "Cohen's kappa" in text.output and "Spearman" in text.output
    assert "judge no" in text.output  # the confusion matrix
    # no feedback in this database: one line, not a section of empty tables before the labels
    assert "Judge calibration on" not in text.output and "No usable feedback" not in text.output
    assert text.output.startswith("Feedback: none named 'user'")


def test_calibrate_by_release_and_not_enough_labels(db: str, clock: StoreClock) -> None:
    world = World()
    a = feed(db, clock, world, release="v1", n=60, start=NOW - 3 * DAY, spread=DAY, seed=1)
    b = feed(db, clock, world, release="v2", n=60, start=NOW - 2 * DAY, spread=DAY, seed=2)
    label(db, world, a[:30])
    label(db, world, b[:4])
    clock.t = NOW
    res = CliRunner().invoke(main, ["calibrate", "--db", db, "--json", "--by", "release"])
    assert res.exit_code == 0, res.output
    groups = json.loads(res.output)["labels"]["metrics"]["grounded"]["groups"]
    assert groups["v1"]["agreement"]["n"] == 30 and groups["v1"]["agreement"]["status"] == "ok"
    assert groups["v2"]["agreement"]["status"] == "not enough data"
    assert "at least 10" in groups["v2"]["agreement"]["reason"]
    text = CliRunner().invoke(main, ["calibrate", "--db", db, "--by", "release"]).output
    assert "release = v2" in text and "not enough labels" in text


# -- report: the corrected estimate beside the judge mean -------------------------------------
def test_report_corrected_estimate_equals_ppi(labelled: tuple[str, World, list[str]]) -> None:
    db, world, sample = labelled
    rep = _report(db)
    trust = {t.name: t for t in rep.trust}
    assert set(trust) == {"grounded", "quality"}
    for name in METRICS:
        allf = [world.judge[t][name] for t in world.traces]
        fs = [world.judge[t][name] for t in sorted(sample)]
        ys = [world.human[t][name] for t in sorted(sample)]
        ref = ppi_mean(Moments.from_values(allf), fs, ys, unlabelled_includes_labelled=True)
        got = trust[name].correction
        assert got is not None and got.design == "random sample"
        c = got.result.corrected
        assert (c.value, c.lo, c.hi) == pytest.approx(
            (ref.corrected.value, ref.corrected.lo, ref.corrected.hi), abs=1e-9)
        # the plain judge mean is the report's own number
        m = next(m for m in rep.metrics if m.name == name)
        assert got.result.judge.value == pytest.approx(m.mean, abs=1e-9)
        assert trust[name].judge_mean == pytest.approx(m.mean, abs=1e-9)
    # the correction moves the biased yes/no judge towards the humans' rate
    human_rate = sum(world.human[t]["grounded"] for t in world.traces) / 400
    g = trust["grounded"].correction.result
    assert abs(g.corrected.value - human_rate) < abs(g.judge.value - human_rate)

    text = format_report(rep, width=100)
    assert "Judge vs humans" in text
    assert "judge mean (uncorrected)" in text and "corrected with 80 human labels" in text
    assert "labels are assumed a random sample of the window" in text
    js = rep.to_json()["judge_vs_humans"]["grounded"]
    assert js["corrected"]["corrected"]["kind"] == "ppi++"
    assert js["corrected"]["judge"]["kind"] == "judge"
    assert js["judge_mean"]["label"] == "judge mean (uncorrected)"

    res = CliRunner().invoke(main, ["report", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["judge_vs_humans"]["quality"]["corrected"]["corrected"][
        "value"] == pytest.approx(trust["quality"].correction.value, abs=1e-12)


def test_report_with_few_labels_says_not_enough(db: str, clock: StoreClock) -> None:
    world = World()
    traces = feed(db, clock, world, release="v1", n=100, start=NOW - 2 * DAY, spread=DAY,
                  seed=3)
    label(db, world, traces[:6])
    clock.t = NOW
    rep = _report(db)
    t = {x.name: x for x in rep.trust}["grounded"]
    assert t.correction is not None and t.correction.value is None
    assert t.agreement.status == "not enough data"
    text = format_report(rep, width=100)
    assert "not enough labels" in text and "judge mean (uncorrected)" in text


def test_report_stratified_for_plan_labels(db: str, clock: StoreClock) -> None:
    from tracescore.trust.plan import make_plan, parse_stratum

    world = World()
    traces = feed(db, clock, world, release="v1", n=300, start=NOW - 4 * DAY, spread=3 * DAY,
                  seed=21)
    clock.t = NOW
    cands = [(t, world.judge[t]["grounded"], "release=v1") for t in traces]
    plan = make_plan(cands, 60, seed=4)
    store = open_store(db)
    try:
        store.add_label_plan("p1", plan.table_rows("p1", "grounded", NOW))
    finally:
        store.close()
    drawn = [r.trace_id for r in plan.rows]
    label(db, world, drawn, source="plan:p1", names=("grounded",))
    rep = _report(db)
    corr = {x.name: x for x in rep.trust}["grounded"].correction
    assert corr is not None and corr.design == "plan" and corr.plan_id == "p1"
    strata = []
    for s in plan.strata:
        rule = parse_stratum(s.name)
        members = [t for t in traces if rule.contains(world.judge[t]["grounded"], "release=v1")]
        lab = [t for t in sorted(drawn) if t in members]
        strata.append(Stratum(s.name, Moments.from_values(world.judge[t]["grounded"]
                                                          for t in members),
                              [world.judge[t]["grounded"] for t in lab],
                              [world.human[t]["grounded"] for t in lab]))
    ref = stratified_ppi_mean(strata, unlabelled_includes_labelled=True)
    assert corr.result.corrected.value == pytest.approx(ref.corrected.value, abs=1e-9)
    assert corr.result.corrected.lo == pytest.approx(ref.corrected.lo, abs=1e-9)
    assert "labels drawn by plan p1, stratified" in format_report(rep, width=100)


# -- compare: per side and the difference -------------------------------------------------------
def test_compare_corrected_per_side_and_difference(db: str, clock: StoreClock) -> None:
    world = World()
    a = feed(db, clock, world, release="v1", n=300, start=NOW - 6 * DAY, spread=2 * DAY,
             seed=31, yes=0.8)
    b = feed(db, clock, world, release="v2", n=300, start=NOW - 3 * DAY, spread=2 * DAY,
             seed=32, yes=0.6)
    label(db, world, random.Random(1).sample(a, 70))
    label(db, world, random.Random(2).sample(b, 70))
    clock.t = NOW
    conn = open_db(db)
    try:
        c = build_comparison(conn, now=NOW)
    finally:
        conn.close()
    rows = {t.name: t for t in c.trust}
    g = rows["grounded"]
    cur, base = g.current.correction.result.corrected, g.baseline.correction.result.corrected
    assert c.current_label == "release=v2"
    assert g.diff.estimate == pytest.approx(cur.value - base.value, abs=1e-12)
    se = math.sqrt(cur.se ** 2 + base.se ** 2)
    assert g.diff.hi - g.diff.lo == pytest.approx(2 * 1.959963984540054 * se, abs=1e-9)
    assert g.diff.estimate < 0  # v2's humans say yes less often
    text = format_comparison(c, width=140)
    assert "corrected with human labels" in text and "judge mean" in text
    js = c.to_json()["corrected"]["grounded"]
    assert js["difference"]["estimate"] == pytest.approx(g.diff.estimate)
    assert js["current"]["judge_mean"]["label"] == "judge mean (uncorrected)"
    # the compare page shows the same section as the report page (issue 29)
    from tracescore.reports.html import render_comparison_html

    page = render_comparison_html(c)
    assert 'id="judge-vs-humans"' in page and "judge mean" in page
    assert f"{cur.value:.3f} [{cur.lo:.3f}, {cur.hi:.3f}]" in page
    assert f"{g.diff.estimate:+.3f} [{g.diff.lo:+.3f}, {g.diff.hi:+.3f}]" in page
    assert "Cohen" in page


# -- HTML --------------------------------------------------------------------------------------
def test_html_report_has_the_judge_vs_humans_section(
        labelled: tuple[str, World, list[str]], tmp_path: Any) -> None:
    db, _world, _sample = labelled
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", "--db", db, "--html", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert 'id="judge-vs-humans"' in page
    assert "corrected with 80 human labels" in page and "judge mean (uncorrected)" in page
    assert "Cohen" in page and "Spearman" in page


def test_a_degenerate_judge_warns_once_per_model_and_prompt_version(
        caplog: pytest.LogCaptureFixture) -> None:
    """The canary's scheduled runs would repeat the full WARNING every day: it is logged once
    per (model, prompt version), INFO after that; a recovery makes a relapse news again."""
    import logging

    from tracescore.judge import canary

    canary._WARNED.clear()
    caplog.set_level(logging.INFO, logger="tracescore")
    why = "the judge gave the same verdict to all 16 canary cases"

    def run(model: str, pv: str, reason: str, trigger: str = "schedule") -> list[str]:
        caplog.clear()
        canary.say_result(model, pv, trigger, reason, 0.5, 16)
        return [r.levelname for r in caplog.records if "canary" in r.getMessage()]

    assert run("m", "p1", why, "startup") == ["WARNING"]
    assert run("m", "p1", why) == ["INFO"] and run("m", "p1", why) == ["INFO"]
    assert run("m", "p2", why, "prompt_changed") == ["WARNING"]  # another prompt version
    assert run("other", "p1", why) == ["WARNING"]
    assert run("m", "p1", "") == ["INFO"]  # recovered
    assert run("m", "p1", why) == ["WARNING"]  # relapse: news again
    canary._WARNED.clear()


def test_calibrate_json_says_majority_for_yes_no_scores() -> None:
    from tracescore.reports.trust import LabelledPairs, Pair, summarise_pairs

    yes_no = [Pair(f"{i:032x}", float(i % 2), float(i % 2), (("a", float(i % 2)),), "manual",
                   None, None, "1", f"{i:032x}-{1:016x}") for i in range(12)]
    numeric = [Pair(p.trace_id, 0.3, 0.4, (("a", 0.4),), "manual", None, None, "1",
                    p.record_id) for p in yes_no]

    class Seg:
        def value(self, seg_id: Any, dim: str) -> None:
            return None

    for pairs, binary, want in ((yes_no, True, "majority"), (numeric, False, "mean")):
        lp = LabelledPairs("x", "x", pairs)
        s = summarise_pairs(None, lp, None, binary, None, None, Seg())  # type: ignore[arg-type]
        text = s.to_json()["human_value"]
        assert want in text and "per record" in text
        assert ("mean" not in text) if binary else ("majority" not in text)
