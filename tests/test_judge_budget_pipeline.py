"""Issue 33 end to end: ``init(judge_budget=...)`` with a real store (SQLite and PostgreSQL),
the scripted judge server over real HTTP, and ``tracescore report``; the budget counter shared
by two workers' connections at once."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import threading
from typing import Any

import pytest
from helpers import StoreClock, rows

from tracescore.budget.selector import NOT_SELECTED, judge_fraction
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.stats.active import active_mean
from tracescore.store import judge_budget as JB
from tracescore.store import open_store
from tracescore.testing import in_memory
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "Warranty lasts two years."]
GOOD = "The Cargo ships with a 750 Wh battery."
BUDGET = 20
RECORDS = 60


class Clock(StoreClock):
    """The selector's clock: from 12:00 UTC today, ``step`` seconds further at each read
    (one read per decision: records that arrive ``step`` apart)."""

    step = 0.0

    def time(self) -> float:
        t = self.t
        self.t += self.step
        return t


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Pacing depends on the time of day and the traffic: the tests set both."""
    import time

    import tracescore.budget.selector as selector

    c = Clock(math.floor(time.time() / 86400) * 86400 + 12 * 3600)
    monkeypatch.setattr(selector, "time", c)
    return c


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "tracescore.cli", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def _run(db: str) -> tuple[Any, int]:
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts, _ = in_memory(db, metrics=["faithfulness"],
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget=f"{BUDGET}/day")
        try:
            rnd = random.Random(4)
            for i in range(RECORDS):
                answer = GOOD if rnd.random() < 0.7 else f"The moon is cheese, case {i}."
                ts.log_record(query=f"What battery, {i}?", contexts=CONTEXTS, answer=answer)
            assert ts.flush(120)
            counts = dict(ts.worker.judging.counts)
            stats = ts.stats()["judge_budget"]
            assert stats["budgets"] == {"faithfulness": float(BUDGET)}
            assert {k: stats[k] for k in counts} == counts
        finally:
            ts.shutdown()
        return counts, srv.total_calls


def test_budgeted_adaptive_judging_end_to_end(db, clock, tmp_path):
    clock.step = 300.0  # 60 records over 5 hours, ~290 a day: the budget binds
    counts, calls = _run(db)
    decisions = rows(db, "SELECT * FROM judge_decisions ORDER BY record_id")
    assert len(decisions) == RECORDS and {d["metric"] for d in decisions} == {"faithfulness"}
    judged = [d for d in decisions if d["selected"]]
    # the budget holds: at most BUDGET records judged, and the judge asked only for them
    assert 1 <= len(judged) <= BUDGET
    assert counts["judged"] == len(judged)
    assert 0 < calls <= 3 * len(judged)  # faithfulness: at most 3 judge calls a record
    [usage] = rows(db, "SELECT * FROM judge_budget")
    assert (usage["seen"], usage["spent"]) == (RECORDS, len(judged))
    # pi stored with every decision; each decision is the record's hash against its pi
    for d in decisions:
        if d["reason"] is None:
            assert 0 < d["pi"] <= 1
            assert bool(d["selected"]) == (judge_fraction(d["record_id"]) < d["pi"])
        else:
            assert d["reason"] == "budget spent" and d["pi"] == 0 and not d["selected"]
    scores = {s["record_id"]: s for s in rows(db, "SELECT * FROM scores")}
    for d in decisions:
        s = scores[d["record_id"]]
        if d["selected"]:
            assert s["status"] == "ok"
        else:
            assert s["status"] == "skipped" and s["error"] in (
                NOT_SELECTED, "not judged: the day's judge budget is spent")

    # the report: the active estimate, recomputed here from the raw rows
    keep = [d for d in decisions if d["pi"] > 0]
    y = [scores[d["record_id"]]["value"] if d["selected"] else 0.0 for d in keep]
    want = active_mean([d["proxy"] for d in keep], [d["pi"] for d in keep],
                       [bool(d["selected"]) for d in keep], y).estimate
    data = json.loads(cli("report", "--db", db, "--json").stdout)
    got = data["judge_budget"]["faithfulness"]
    assert got["estimate"]["estimator"] == "active"
    assert got["estimate"]["n_judged"] == len(judged)
    assert got["estimate"]["n_proxied"] == len(keep)
    assert got["estimate"]["value"] == pytest.approx(want.value)
    m = data["metrics"]["faithfulness"]
    assert m["estimator"] == "active" and m["mean"] == pytest.approx(want.value)
    assert m["population"] == "all decided records (active inference)"
    assert "faithfulness" not in data["population"]  # not shown as a uniform sample
    text = cli("report", "--db", db).stdout
    assert "Judge budget (estimator: active)" in text and "faithfulness †" in text
    assert f"{want.value:.3f}" in text
    page = tmp_path / "report.html"
    cli("report", "--db", db, "--html", str(page))
    html = page.read_text()
    assert 'data-estimator="active"' in html and f"{want.value:.3f}" in html


def test_compare_uses_the_active_estimates(db, tmp_path):
    """Two releases, each judged within the budget (a large one: the wiring, not the
    selection, is under test): ``compare`` compares their active estimates (each side's
    estimate and n judged as ``report --where`` gives them)."""
    for release in ("r1", "r2"):
        with ScriptedJudgeServer(lexical_responder) as srv:
            ts, _ = in_memory(db, metrics=["faithfulness"], release=release,
                              judge=OpenAIJudge("scripted", base_url=srv.base_url),
                              judge_canary=False, judge_budget="100000/day")
            try:
                rnd = random.Random(release)
                for i in range(30):
                    ok = rnd.random() < (0.8 if release == "r1" else 0.4)
                    ts.log_record(query=f"{release} q{i}", contexts=CONTEXTS,
                                  answer=GOOD if ok else f"The moon is cheese {i}.")
                assert ts.flush(120)
            finally:
                ts.shutdown()
    data = json.loads(cli("compare", "--db", db, "--by", "release", "--current", "r2",
                          "--baseline", "r1", "--json").stdout)
    row = data["scores"]["faithfulness"]
    assert row["population"] == "all decided records (active inference)"
    for side, release in (("current", "r2"), ("baseline", "r1")):
        rep = json.loads(cli("report", "--db", db, "--json", "--where",
                             f"release={release}").stdout)
        est = rep["judge_budget"]["faithfulness"]["estimate"]
        assert row[side]["value"] == pytest.approx(est["value"])
        assert row[side]["n"] == est["n_judged"]
    assert row["difference"]["estimate"] == pytest.approx(
        row["current"]["value"] - row["baseline"]["value"])
    groups = json.loads(cli("report", "--db", db, "--json", "--by", "release").stdout)["groups"]
    by_release = {g["value"]: g["metrics"]["faithfulness"] for g in groups}
    for side, release in (("current", "r2"), ("baseline", "r1")):
        assert by_release[release]["estimator"] == "active"
        assert by_release[release]["mean"] == pytest.approx(row[side]["value"])
    by_model = json.loads(cli("report", "--db", db, "--json", "--by", "judge_model").stdout)
    judged = [g["metrics"]["faithfulness"] for g in by_model["groups"]
              if g["metrics"].get("faithfulness", {}).get("count")]
    assert judged  # no active estimate per judge model: no figure at all
    assert all(m["mean"] is None and m["estimator"] == "active" for m in judged)
    assert "faithfulness" not in data["population"]["current"]


def test_negative_feedback_turns_a_record_not_judged_into_a_judged_one(db):
    """Feedback forces every metric on its trace, whatever was decided before: a record the
    budget did not send to the judge is judged once it gets negative feedback, with π = 1
    (the weight the read side gives forced records) and a unit of the budget."""
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts, _ = in_memory(db, metrics=["faithfulness"],
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget="3/day")
        try:
            traces = [ts.log_record(query=f"q{i}", contexts=CONTEXTS, answer=GOOD).trace_id
                      for i in range(20)]
            assert ts.flush(120)
            skipped = rows(db, "SELECT d.record_id, r.trace_id FROM judge_decisions d JOIN"
                               " records r ON r.record_id = d.record_id WHERE d.selected = 0")
            assert skipped and all(t["trace_id"] in traces for t in skipped)
            target = skipped[0]
            spent = rows(db, "SELECT spent FROM judge_budget")[0]["spent"]
            ts.add_feedback(target["trace_id"], 0.0)
            assert ts.flush(120)
        finally:
            ts.shutdown()
    [d] = rows(db, "SELECT * FROM judge_decisions WHERE record_id = ?", target["record_id"])
    assert (d["selected"], d["pi"], d["reason"]) == (1, 1.0, "forced")
    [score] = rows(db, "SELECT * FROM scores WHERE record_id = ? AND name = 'faithfulness'"
                       " ORDER BY score_id DESC LIMIT 1", target["record_id"])
    assert score["status"] == "ok"
    assert rows(db, "SELECT spent FROM judge_budget")[0]["spent"] == spent + 1


def test_a_decision_is_made_once(db):
    store = open_store(db)
    try:
        calls = []

        def choose(spent: int, seen: int, started: float) -> tuple[float, bool]:
            calls.append((spent, seen, started))
            return 0.5, True

        first = JB.decide(store, "m", "r1", 0.3, 3, 1_000_000.0, 10, choose)
        again = JB.decide(store, "m", "r1", 0.9, 9, 1_000_001.0, 10, choose)
        assert first.selected and not first.again
        assert again.again and again.selected and again.pi == 0.5 and again.proxy == 0.3
        assert calls == [(0, 0, 1_000_000.0)]
        assert JB.usage(store, "m", JB.day_of(1_000_000.0)) == (1, 1, 10.0)
    finally:
        store.close()


def test_two_workers_share_one_budget(db):
    """Two connections decide 2 × 80 records at once, every one wanted: exactly the budget is
    judged, the rest are refused ("budget spent"), and every record is seen once."""
    budget, per_worker = 37, 80
    open_store(db).close()  # the schema, once
    results: list[list[bool]] = [[], []]
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def worker(k: int) -> None:
        store = open_store(db)
        try:
            barrier.wait()
            for i in range(per_worker):
                d = JB.decide(store, "faithfulness", f"w{k}-{i}", 0.5, 5, 2_000_000.0, budget,
                              lambda spent, seen, started: (1.0, True))
                results[k].append(d.selected)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the test's thread)
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sum(map(sum, results)) == budget
    [usage] = rows(db, "SELECT * FROM judge_budget")
    assert (usage["seen"], usage["spent"]) == (2 * per_worker, budget)
    refused = rows(db, "SELECT count(*) AS n FROM judge_decisions WHERE reason = 'budget spent'"
                   " AND pi = 0")
    assert refused[0]["n"] == 2 * per_worker - budget


@pytest.mark.parametrize("kwargs, words", [
    ({"metrics": ["token_f1"], "judge_budget": "100/day"}, "no judge metric"),
    ({"metrics": ["faithfulness"], "judge": "local", "judge_budget": "$5/day"}, "dollars"),
    ({"metrics": ["faithfulness"], "judge": "local", "judge_budget": "100/week"},
     "not understood"),
    ({"metrics": ["faithfulness", "token_f1"], "judge": "local",
      "judge_budgets": {"token_f1": "5/day"}}, "not a judge metric"),
])
def test_init_refuses_a_bad_budget(tmp_path, kwargs, words):
    import tracescore

    with pytest.raises((ValueError, TypeError), match=words):
        tracescore.init(db=str(tmp_path / "x.db"), **kwargs)


def test_worker_command_takes_a_budget_and_names_its_option(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tracescore.cli", "worker", "--db",
                           str(tmp_path / "w.db"), "--metric", "token_f1", "--judge-budget",
                           "100/day"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--judge-budget is set but no judge metric is configured" in proc.stderr


def test_decisions_are_pruned_with_their_records_and_copied_to_postgres(tmp_path, clock,
                                                                        pg_url):
    """The per-record decisions must not outlive their records (one row per candidate record
    and budgeted metric: unbounded otherwise), and ``copy-to-postgres`` carries them (the
    active estimates need each record's proxy and inclusion probability)."""
    import time

    from helpers import run_cli

    from tracescore.store.retention import Retention, prune

    clock.step = 300.0
    src = str(tmp_path / "history.db")
    _run(src)
    before = rows(src, "SELECT count(*) AS n FROM judge_decisions")[0]["n"]
    assert before == RECORDS
    result = run_cli("copy-to-postgres", "--db", src, "--to", pg_url)
    assert result.exit_code == 0, result.output
    got = rows(pg_url, "SELECT record_id, metric, proxy, pi, selected FROM judge_decisions"
                       " ORDER BY record_id")
    want = rows(src, "SELECT record_id, metric, proxy, pi, selected FROM judge_decisions"
                     " ORDER BY record_id")
    assert got == want
    assert rows(pg_url, "SELECT spent FROM judge_budget") == rows(
        src, "SELECT spent FROM judge_budget")
    store = open_store(src)
    try:
        res = prune(store, Retention(max_age_s=86400.0), now=time.time() + 10 * 86400,
                    vacuum=False)
    finally:
        store.close()
    left = rows(src, "SELECT count(*) AS n FROM records")[0]["n"]
    assert res.records > 0 and res.judge_decisions == res.records
    assert rows(src, "SELECT count(*) AS n FROM judge_decisions")[0]["n"] == left
    assert rows(src, "SELECT count(*) AS n FROM judge_decisions d WHERE NOT EXISTS ("
                     "SELECT 1 FROM records r WHERE r.record_id = d.record_id)")[0]["n"] == 0
