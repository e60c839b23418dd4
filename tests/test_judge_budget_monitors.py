"""Issue 33, follow-up: monitors on a judge metric judged within a budget evaluate the
active-inference estimate (never the judged records' plain mean). A real SQLite store filled
by ``init(judge_budget=...)`` with the scripted judge server over real HTTP; the monitor's
figures recomputed here from the raw rows."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from helpers import StoreClock, rows

from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.monitor.config import monitors_from_objects
from tracescore.monitor.evaluate import Evaluator
from tracescore.stats.active import active_mean
from tracescore.stats.active_cs import ActiveSequence
from tracescore.testing import in_memory
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "Warranty lasts two years."]
GOOD = "The Cargo ships with a 750 Wh battery."


class Clock(StoreClock):
    step = 0.0

    def time(self) -> float:
        t = self.t
        self.t += self.step
        return t


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    import time

    import tracescore.budget.selector as selector

    c = Clock(math.floor(time.time() / 86400) * 86400 + 12 * 3600)
    monkeypatch.setattr(selector, "time", c)
    return c


def _log(db: str, budget: str, answers: list[bool], feedback_on_bad: bool = False) -> None:
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts, _ = in_memory(db, metrics=["faithfulness"],
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget=budget)
        try:
            bad = []
            for i, good in enumerate(answers):
                rec = ts.log_record(query=f"What battery, {i}?", contexts=CONTEXTS,
                                    answer=GOOD if good else f"The moon is cheese, case {i}.")
                if not good:
                    bad.append(rec.trace_id)
            assert ts.flush(120)
            if feedback_on_bad:
                # users complain about the bad answers: each is judged (pi = 1), so the
                # judged records over-represent them
                for trace in bad:
                    ts.add_feedback(trace, 0.0)
                assert ts.flush(120)
        finally:
            ts.shutdown()


def _raw(db: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    decisions = rows(db, "SELECT * FROM judge_decisions WHERE pi > 0 ORDER BY created_at,"
                         " record_id")
    scores = {s["record_id"]: s for s in rows(
        db, "SELECT * FROM scores WHERE name = 'faithfulness' AND status = 'ok'")}
    return decisions, scores


def _monitors(**kw: Any) -> Any:
    spec = {"name": "faith", "score": "faithfulness", "window": "1d", "threshold": 0.8,
            "min_n": 10, **kw}
    return monitors_from_objects({"monitor": [spec]})


def test_monitor_reads_the_active_estimate_not_the_judged_mean(db, clock):
    clock.step = 300.0  # 120 records over 10 hours, ~290 a day: the budget binds
    rnd = random.Random(11)
    _log(db, "40/day", [rnd.random() < 0.75 for _ in range(120)], feedback_on_bad=True)
    decisions, scores = _raw(db)
    judged = [d for d in decisions if d["selected"]]
    y = [scores[d["record_id"]]["value"] if d["selected"] else 0.0 for d in decisions]
    want = active_mean([d["proxy"] for d in decisions], [d["pi"] for d in decisions],
                       [bool(d["selected"]) for d in decisions], y).estimate
    plain = sum(scores[d["record_id"]]["value"] for d in judged) / len(judged)
    # the set-up is what it must be: forced complaints bias the judged records low
    assert any(d["pi"] < 1 for d in judged) and any(d["pi"] == 1 for d in judged)
    assert plain < want.value - 0.1
    now = clock.t + 60
    for rule in ("anytime", "fixed"):
        ev = Evaluator(db, _monitors(rule=rule, name=f"faith-{rule}"), clock=lambda: now)
        try:
            (e,) = ev.run_once()
        finally:
            ev.close()
        assert e.value == pytest.approx(want.value, abs=1e-9), rule
        assert e.n == len(judged)
        assert e.detail["estimator"] == "active"
        assert f"active estimate, {len(judged)} judged / {len(decisions)} proxied" in e.summary
        if rule == "fixed":  # the report's interval
            assert (e.lo, e.hi) == pytest.approx((want.lo, want.hi))
        else:  # the confidence sequence over the active terms, rebuilt from the rows
            seq = ActiveSequence(e.detail["alpha"])
            seq.update([d["proxy"] for d in decisions], [d["pi"] for d in decisions],
                       [bool(d["selected"]) for d in decisions], y)
            lo, hi = seq.interval()
            assert (e.lo, e.hi) == pytest.approx((min(lo, want.value), max(hi, want.value)))
            assert e.lo <= want.value <= e.hi


def test_monitor_on_a_budgeted_metric_alerts_on_a_real_drop(db, clock):
    clock.step = 60.0
    mons = _monitors(window="1d", min_n=20)
    _log(db, "100000/day", [True] * 60)
    t = [clock.t + 60]
    ev = Evaluator(db, mons, clock=lambda: t[0])
    try:
        (e,) = ev.run_once()
        assert e.state == "OK" and e.value > 0.8
        rnd = random.Random(5)
        _log(db, "100000/day", [rnd.random() < 0.2 for _ in range(100)])
        t[0] = clock.t + 60
        (e,) = ev.run_once()
        decisions, scores = _raw(db)
        y = [scores[d["record_id"]]["value"] if d["selected"] else 0.0 for d in decisions]
        want = active_mean([d["proxy"] for d in decisions], [d["pi"] for d in decisions],
                           [bool(d["selected"]) for d in decisions], y).estimate
        assert e.state == "ALERT", e.summary
        assert e.value == pytest.approx(want.value, abs=1e-9)
        assert e.hi < 0.8 and "the whole anytime-valid interval is below 0.8" in e.summary
        assert "active estimate" in e.summary
    finally:
        ev.close()


def test_percentile_monitor_on_a_budgeted_metric_says_why_it_has_no_figure(db, clock):
    clock.step = 60.0
    _log(db, "100000/day", [True] * 12)
    ev = Evaluator(db, _monitors(statistic="p10", threshold=0.5), clock=lambda: clock.t + 60)
    try:
        (e,) = ev.run_once()
    finally:
        ev.close()
    assert e.state == "NO_DATA" and e.value is None
    assert "p10 has no active estimate" in e.summary
    assert rows(db, "SELECT count(*) AS n FROM scores WHERE status = 'ok'")[0]["n"] > 0


def test_html_timeline_is_the_active_estimate_per_bucket_and_the_rest_is_labelled(
        db, clock, tmp_path):
    """``report --html``: every figure of a budgeted metric is the active estimate (headline,
    interval, the timeline's points, recomputed here per bucket from the raw rows) or is
    labelled as the judged records' (the histogram, the worst records)."""
    from helpers import run_cli

    from tracescore.monitor.active_summary import active_timeline
    from tracescore.reports.report import build_page, build_report
    from tracescore.reports.trend import build_trend
    from tracescore.store.compat import connect_reader

    clock.step = 300.0
    rnd = random.Random(3)
    _log(db, "40/day", [rnd.random() < 0.75 for _ in range(120)], feedback_on_bad=True)
    bucket_s = 3600.0
    decisions, scores = _raw(db)
    by_bucket: dict[float, list[dict[str, Any]]] = {}
    for d in decisions:
        by_bucket.setdefault(d["created_at"] // bucket_s * bucket_s, []).append(d)
    want = {}
    for t, ds in by_bucket.items():
        y = [scores[d["record_id"]]["value"] if d["selected"] else 0.0 for d in ds]
        e = active_mean([d["proxy"] for d in ds], [d["pi"] for d in ds],
                        [bool(d["selected"]) for d in ds], y).estimate
        if e.value is not None:
            want[t] = e
    conn = connect_reader(db)
    try:
        points = active_timeline(conn, "faithfulness", "faithfulness", bucket_s=bucket_s)
        page = build_page(conn, build_report(conn, db=db))
        # the page's timeline of the metric is the active one, in the page's buckets (the
        # test's clock dates decisions apart from their records: see the docstring above)
        assert page.timelines["faithfulness"] == active_timeline(
            conn, "faithfulness", "faithfulness", bucket_s=page.bucket[0])
        trend = build_trend(conn)  # the page's trend section: hourly, the same estimates
        [series] = [s for s in trend.series if s.name == "faithfulness"]
        assert trend.bucket_s == bucket_s and series.ci_method == "active"
        assert [(p.start, p.value, p.lo, p.hi, p.n) for p in series.points] == [
            (p.start, p.mean, p.lo, p.hi, p.count) for p in points]
    finally:
        conn.close()
    assert len(want) >= 3 and {p.start for p in points} == set(want)
    for p in points:
        e = want[p.start]
        assert (p.mean, p.lo, p.hi, p.count) == pytest.approx((e.value, e.lo, e.hi, e.n))
    out = tmp_path / "r.html"
    result = run_cli("report", "--db", db, "--html", str(out))
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "judged records only" in html and "worst judged records" in html
    assert "The timeline below is the active estimate per bucket" in html
    assert "each point is the active estimate over the bucket" in html  # the trend card
    for p in page.timelines["faithfulness"]:  # the points' tooltips
        assert f"active estimate {p.mean:.3f}" in html


def test_ui_canned_means_say_judged_records_only_for_a_budgeted_metric(tmp_path, clock):
    from tracescore.reports.ui import canned_queries, query_params

    db = str(tmp_path / "ui.db")  # (tracescore ui serves SQLite files only)
    clock.step = 60.0
    _log(db, "100000/day", [True] * 5)
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        for name in ("daily_summary", "failure_rate_by_hour"):
            q = canned_queries(has_judge_decisions=True)[name]
            cur = conn.execute(q["sql"], {p: "" for p in query_params(q["sql"])})
            cols = [c[0] for c in cur.description]
            got = {r[cols.index("name")]: r[cols.index("population")] for r in cur}
            assert got["faithfulness"].startswith("judged records only"), name
    finally:
        conn.close()


def test_check_compare_by_judge_model_gives_a_budgeted_metric_no_figure(db, clock):
    """``check --compare`` (a deployment gate) by a score dimension: decisions are per
    record, so a budgeted metric has no active estimate there — no figure and 'not enough
    data', never the judged records' biased means compared (nor one estimate on both sides)."""
    import json

    from helpers import run_cli

    clock.step = 60.0
    _log(db, "100000/day", [True] * 20)
    for model in ("scripted-b",):
        with ScriptedJudgeServer(lexical_responder) as srv:
            ts, _ = in_memory(db, metrics=["faithfulness"],
                              judge=OpenAIJudge(model, base_url=srv.base_url),
                              judge_canary=False, judge_budget="100000/day")
            try:
                for i in range(20):
                    ts.log_record(query=f"b{i}", contexts=CONTEXTS, answer=f"No idea {i}.")
                assert ts.flush(120)
            finally:
                ts.shutdown()
    models = [r["judge_model"] for r in rows(
        db, "SELECT DISTINCT judge_model FROM scores WHERE status = 'ok'")]
    assert len(models) == 2
    result = run_cli("check", "--db", db, "--compare",
                     f"judge_model={models[1]}:{models[0]}", "--json")
    assert result.exit_code in (0, 1), result.output
    [gate] = json.loads(result.output)["gates"]
    [row] = [r for r in gate["scores"].values() if r["name"] == "faithfulness"] \
        if isinstance(gate["scores"], dict) else [r for r in gate["scores"]
                                                  if r["name"] == "faithfulness"]
    assert row["current"]["value"] is None and row["baseline"]["value"] is None
    assert row["verdict"] == "not enough data"
    assert row["population"].startswith("none (judge budget")


def test_baseline_monitor_on_a_budgeted_metric_compares_active_estimates(db, clock):
    """``baseline = "2h"``: the baseline's figure is the active estimate of its decided
    records (recomputed here), its bound the far end of the same sequence over them; a real
    regression alerts."""
    clock.step = 60.0
    t_start = clock.t
    _log(db, "100000/day", [True] * 60)  # the baseline hour: good answers
    clock.t += 3600.0
    clock.step = 30.0
    rnd = random.Random(8)
    _log(db, "100000/day", [rnd.random() < 0.2 for _ in range(100)])  # then mostly bad
    now = clock.t + 60
    mons = monitors_from_objects({"monitor": [{
        "name": "faith-base", "score": "faithfulness", "window": "1h", "baseline": "2h",
        "min_n": 20}]})
    ev = Evaluator(db, mons, clock=lambda: now)
    try:
        (e,) = ev.run_once()
    finally:
        ev.close()
    decisions, scores = _raw(db)

    def est(ds: list[dict[str, Any]]) -> Any:
        y = [scores[d["record_id"]]["value"] if d["selected"] else 0.0 for d in ds]
        return active_mean([d["proxy"] for d in ds], [d["pi"] for d in ds],
                           [bool(d["selected"]) for d in ds], y).estimate

    base = [d for d in decisions if t_start - 1 <= d["created_at"] < now - 3600]
    cur = [d for d in decisions if d["created_at"] >= now - 3600]
    assert len(base) == 60 and len(cur) == 100
    assert e.detail["baseline"]["mean"] == pytest.approx(est(base).value, abs=1e-9)
    assert e.detail["baseline"]["n"] == sum(d["selected"] for d in base)
    assert e.value == pytest.approx(est(cur).value, abs=1e-9)
    assert e.state == "ALERT", e.summary
    assert e.hi < e.detail["baseline"]["bound"] <= e.detail["baseline"]["mean"]
    assert "active estimate" in e.summary and "regressed" in e.detail["condition"]


def test_init_warns_only_for_a_monitor_without_an_active_figure(db, caplog):
    import logging

    with ScriptedJudgeServer(lexical_responder) as srv:
        with caplog.at_level(logging.WARNING, logger="tracescore"):
            ts, _ = in_memory(db, metrics=["faithfulness"],
                              judge=OpenAIJudge("scripted", base_url=srv.base_url),
                              judge_canary=False, judge_budget="50/day",
                              monitors=[{"name": "m-mean", "score": "faithfulness",
                                         "threshold": 0.8},
                                        {"name": "m-p10", "score": "faithfulness",
                                         "statistic": "p10", "threshold": 0.5}])
            ts.shutdown()
    said = [r.getMessage() for r in caplog.records if "judge budget" in r.getMessage()]
    assert len(said) == 1 and "'m-p10'" in said[0] and "NO_DATA" in said[0]


def test_active_monitor_rolls_over_to_the_next_window(db, clock):
    """Window 1 (good answers) ends; window 2 (bad ones) has its own sequence at the next
    share of alpha, and its value is the active estimate of window 2's records only."""
    from tracescore.stats import confseq

    clock.step = 30.0
    _log(db, "100000/day", [True] * 60)
    t = [clock.t + 60]
    t0 = t[0]
    mons = _monitors(window="1h", min_n=20)
    ev = Evaluator(db, mons, clock=lambda: t[0])
    try:
        (e1,) = ev.run_once()
        assert e1.state == "OK" and "window 1 at alpha" in e1.method
        clock.t = t0 + 3600 + 60  # window 2: [t0 + 1h, t0 + 2h)
        _log(db, "100000/day", [False] * 60)
        t[0] = clock.t + 60
        (e2,) = ev.run_once()
    finally:
        ev.close()
    decisions, scores = _raw(db)
    second = [d for d in decisions if d["created_at"] >= t0 + 3600]
    y = [scores[d["record_id"]]["value"] if d["selected"] else 0.0 for d in second]
    want = active_mean([d["proxy"] for d in second], [d["pi"] for d in second],
                       [bool(d["selected"]) for d in second], y).estimate
    assert len(second) == 60
    assert e2.value == pytest.approx(want.value, abs=1e-9)
    assert f"window 2 at alpha {confseq.spend(0.05, 2, 'log'):.2g}" in e2.method
    assert e2.state == "ALERT", e2.summary
