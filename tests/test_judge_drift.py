"""Judge drift (issue 17, section 4), end to end against a real OpenAI-compatible server.

The scripted judge on 127.0.0.1 answers the canary's known-answer cases correctly and reports
model "judge-a"; mid-stream it switches to answering "yes" to everything and reports
"judge-b". The real pipeline (``tracescore.init`` with an OpenAI judge, a faithfulness metric,
the canary every 0.3 s, the built-in monitors beside scoring) must: keep every canary run in
``judge_canary``, put the reported model on each score (``scores.judge_model`` and the details'
``judge``), raise the ``judge_drift`` ALERT naming the model change (monitor API, webhook,
``report``), and show both models as segments in ``compare --by judge_model``. The same run
with a stable judge over as many canary runs raises no alert. Waits poll for states with a
generous deadline; nothing is timed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import WebhookReceiver as Hook
from helpers import rows, run_cli

from tracescore.judge.canary import CASES
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.monitor import judge_drift as drift
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

DEADLINE_S = 180.0
CONFIGURED = "provider/judge-latest"
#: claim → supported?, (question, context) → relevant? — the canary's own answers
CLAIMS = {c: ok for _, _, claims, _ in CASES for c, ok in claims}
RELEVANT = {(q, o): rel for ctx, q, _, others in CASES for o, rel in [(ctx, True), *others]}
QUESTIONS = {q for _, q, _, _ in CASES}


class DriftingJudge(ScriptedJudgeServer):
    """Answers correctly as "judge-a" until :meth:`switch`; then "yes" to every verdict as
    "judge-b". Behaviour and reported name change together (one attribute read per request)."""

    def __init__(self) -> None:
        self.judge = ("correct", "judge-a")
        self._local = threading.local()
        super().__init__(self._respond)

    def switch(self) -> None:
        self.judge = ("yes", "judge-b")

    def _answer(self, step: str, data: Any, req: dict[str, Any], fault: Any) -> Any:
        self._local.judge = mode, model = self.judge
        status, body, headers = super()._answer(step, data, req, fault)
        if status == 200:
            envelope = json.loads(body)
            envelope["model"] = model
            body = json.dumps(envelope).encode()
        return status, body, headers

    def _respond(self, step: str, data: Any, req: dict[str, Any]) -> Any:
        mode = self._local.judge[0]
        canary = isinstance(data, dict) and data.get("question") in QUESTIONS
        if step == "statements" and (canary or mode == "yes"):
            return {"answer_statements": [
                {"index": i, "relevant": "yes",
                 "supported": "yes" if mode == "yes" or CLAIMS[s] else "no",
                 "in_reference": ["yes"] * len(data["reference_statements"])}
                for i, s in enumerate(data["answer_statements"])],
                "reference_verdicts": [[{"index": i, "attributable": "yes", "covered": "yes"}
                                        for i, _ in enumerate(r)]
                                       for r in data["reference_statements"]]}
        if step == "contexts" and (canary or mode == "yes"):
            q = data["question"]
            return {"contexts": [
                {"index": i, "relevant": "yes" if mode == "yes" or RELEVANT[(q, c)] else "no",
                 "useful": ["yes"] * len(data["references"]), "contradicted": "no",
                 "reason": "scripted"} for i, c in enumerate(data["contexts"])]}
        return lexical_responder(step, data, req)




@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


def wait_for(what: str, cond: Callable[[], Any], tick: Callable[[], None] = lambda: None) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        tick()
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def canary_runs(db: str) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM judge_canary ORDER BY at, id")


class Traffic:
    """App traffic in the background: a record every few ms, so the scorer keeps scoring (the
    canary's schedule is checked after each judge score)."""

    def __init__(self, ts: Any) -> None:
        self.ts = ts
        self.stop = threading.Event()
        self.n = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.n += 1
            self.ts.log_record(
                query=f"What battery does the Cargo {self.n} have?",
                contexts=["The Cargo ships with a 750 Wh battery.", "Warranty lasts two years."],
                answer=f"The Cargo {self.n} ships with a 750 Wh battery.")
            self.stop.wait(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def start(db: str, srv: DriftingJudge, hook: Hook, monkeypatch: pytest.MonkeyPatch) -> Any:
    import tracescore

    monkeypatch.setenv("TRACESCORE_JUDGE_CANARY_EVERY", "0.3")
    return tracescore.init(
        db=db, metrics=["faithfulness"], judge=OpenAIJudge(CONFIGURED, base_url=srv.base_url),
        hold_seconds=0, monitors={"monitor": [], "channels": {
            "team": {"kind": "webhook", "url": hook.url}}})


def drift_state(ts: Any) -> Any:
    return next((e for e in ts.monitors.last if e.monitor == drift.MONITOR), None)


def run_until(ts: Any, db: str, runs: int) -> None:
    wait_for(f"{runs} canary runs", lambda: len(canary_runs(db)) >= runs, ts.monitors.wake)


def test_a_judge_that_changes_mid_stream_raises_the_drift_alert(
        db: str, hook: Hook, monkeypatch: pytest.MonkeyPatch) -> None:
    srv = DriftingJudge()
    with srv:
        ts = start(db, srv, hook, monkeypatch)
        traffic = Traffic(ts)
        try:
            # the baseline: the start-up run and scheduled runs, all with judge-a
            run_until(ts, db, drift.BASELINE_RUNS)
            wait_for("the monitor's first verdict", lambda: (s := drift_state(ts)) is not None
                     and s.state == "OK", ts.monitors.wake)
            srv.switch()
            alert = wait_for("the drift ALERT", lambda: (s := drift_state(ts)) is not None
                             and s.state == "ALERT" and s, ts.monitors.wake)
            wait_for("the webhook", lambda: any(b["state"] == "ALERT" for b in hook.bodies),
                     ts.monitors.wake)
        finally:
            traffic.close()
            ts.shutdown(30)
    assert "judge model changed from judge-a to judge-b" in alert.summary
    assert alert.detail["model_change"]["from"] == "judge-a"
    assert alert.hi < alert.detail["baseline_bound"] - drift.MIN_EFFECT
    [body] = [b for b in hook.bodies if b["state"] == "ALERT"]
    assert body["monitor"] == drift.MONITOR and "judge-b" in json.dumps(body)

    # the canary history holds both judges' runs, each with its reported model and trigger
    runs = canary_runs(db)
    a = [r for r in runs if r["reported_model"] == "judge-a"]
    b = [r for r in runs if r["reported_model"] == "judge-b"]
    assert len(a) >= drift.BASELINE_RUNS and b
    assert {r["agreed"] for r in a} == {a[0]["cases"]}  # judge-a knows every answer
    assert {r["yes_share"] for r in b} == {1.0} and all(r["degenerate"] for r in b)
    assert a[0]["trigger"] == "startup" and "schedule" in {r["trigger"] for r in a}
    assert b[0]["trigger"] == "model_changed"
    assert {r["judge_model"] for r in runs} == {CONFIGURED}
    assert len({r["prompt_version"] for r in runs}) == 1 and runs[0]["prompt_version"]

    # every judge score names its judge; the reported model is the scores' segment
    scores = rows(db, "SELECT judge_model, details, created_at FROM scores"
                      " WHERE status = 'ok'")
    assert {s["judge_model"] for s in scores} == {"judge-a", "judge-b"}
    for s in scores:
        s["judge"] = judge = json.loads(s["details"])["judge"]
        assert judge["configured"] == CONFIGURED and judge["reported"] in ("judge-a", "judge-b")
        assert judge["prompt_version"] == scores[0]["judge"]["prompt_version"] != ""
    # the column is each score's own reported model, also for jobs stored together in one
    # transaction across the switch
    assert all(s["judge_model"] == s["judge"]["reported"] for s in scores)

    # `compare --by judge_model` shows the two models as the two sides
    out = run_cli("compare", "--db", db, "--by", "judge_model", "--min-n", "1", "--json")
    assert out.exit_code == 0, out.output
    cmp = json.loads(out.output)
    assert (cmp["current"], cmp["baseline"]) == ("judge_model=judge-b", "judge_model=judge-a")
    sides = cmp["scores"]["faithfulness"]
    assert sides["current"]["n"] + sides["baseline"]["n"] == len(scores)
    # `report` shows the stored state first
    rep = run_cli("report", "--db", db)
    assert "judge_drift" in rep.output and "ALERT" in rep.output, rep.output
    # and `tracescore check` (cron, deployment gates) evaluates the built-in monitor too
    toml = Path(db).with_name("monitors.toml") if "://" not in db else None
    if toml is not None:
        toml.write_text('[[monitor]]\nname = "faith"\nscore = "faithfulness"\n'
                        'threshold = 0.1\n')
        chk = run_cli("check", "--db", db, "--monitors", str(toml), "--no-notify", "--json")
        assert chk.exit_code == 1, chk.output
        states = {m["monitor"]: m["state"] for m in json.loads(chk.output)["monitors"]}
        assert states["judge_drift"] == "ALERT", states


def test_a_stable_judge_over_the_same_span_raises_no_alert(
        db: str, hook: Hook, monkeypatch: pytest.MonkeyPatch) -> None:
    states: list[str] = []
    srv = DriftingJudge()
    with srv:
        ts = start(db, srv, hook, monkeypatch)
        traffic = Traffic(ts)

        def tick() -> None:
            ts.monitors.wake()
            s = drift_state(ts)
            if s is not None:
                states.append(s.raw)

        try:
            # the span of the drifting test and more: the baseline and a whole window
            n = drift.BASELINE_RUNS + drift.WINDOW_RUNS + 2
            wait_for(f"{n} canary runs", lambda: len(canary_runs(db)) >= n, tick)
            wait_for("an evaluation of them all", lambda: (s := drift_state(ts)) is not None
                     and s.detail.get("runs", 0) >= n, tick)
        finally:
            traffic.close()
            ts.shutdown(30)
    assert "ALERT" not in states and states[-1] == "OK", states
    assert not hook.bodies
    runs = canary_runs(db)
    assert {r["reported_model"] for r in runs} == {"judge-a"}
    assert all(r["agreed"] == r["cases"] for r in runs)


# -- the human-label half: `judge_drift_labels` ------------------------------------------------
from contextlib import contextmanager  # noqa: E402

from tracescore.monitor import judge_drift_labels as drift_labels  # noqa: E402
from tracescore.testing import ScriptedMetric  # noqa: E402

LABELLED = drift_labels.MIN_PAIRS + 10


def truth(answer: str) -> float:
    """The humans' verdict on a record: yes for every even-numbered answer."""
    return float(int(answer.rsplit(" ", 1)[1]) % 2 == 0)


class Verdict(ScriptedMetric):
    """A yes/no judge metric scripted as judge ``model``: it agrees with the humans, or gives
    the opposite verdict. Its scores carry the judge identity as a real judge's do."""

    name = "grounded"
    version = "1"
    binary = True
    kind = "judge"

    def __init__(self, model: str, *, agrees: bool) -> None:
        super().__init__(self._verdict)
        self.model, self.agrees = model, agrees

    def _verdict(self, record: Any) -> Any:
        t = truth(record.answer)
        return self.result(t if self.agrees else 1.0 - t, details={"judge": {
            "configured": CONFIGURED, "reported": self.model, "prompt_version": "p1"}})


@contextmanager
def pipeline(db: str, metric: Verdict) -> Iterator[Any]:
    """A real pipeline scoring ``metric``. Its judge (a real OpenAI judge on a scripted server
    on 127.0.0.1, the canary off) is configured but never called: ``metric`` is the script."""
    import tracescore

    with ScriptedJudgeServer(lexical_responder) as srv:
        ts = tracescore.init(db=db, metrics=[metric], hold_seconds=0, judge_canary=False,
                             judge=OpenAIJudge(CONFIGURED, base_url=srv.base_url))
        try:
            yield ts
            assert ts.flush(60)
        finally:
            ts.shutdown(30)


def score_records(db: str, metric: Verdict, first: int, n: int) -> list[str]:
    """``n`` records scored by ``metric`` through the real pipeline; their trace ids."""
    with pipeline(db, metric) as ts:
        return [ts.log_record(query=f"Is claim {i} grounded?", contexts=["c"],
                              answer=f"answer {i}").trace_id for i in range(first, first + n)]


def rescore(db: str, metric: Verdict) -> None:
    """Re-open every done job of the metric (as new ground truths do) and score them again,
    by a new process configured with ``metric``."""
    from tracescore.store import open_store
    from tracescore.store.sqlite import NewJob

    store = open_store(db)
    try:
        jobs = [NewJob(r["record_id"], r["metric"], r["metric_version"]) for r in
                rows(db, "SELECT record_id, metric, metric_version FROM jobs")]
        assert store.upsert_jobs(jobs) == len(jobs)
    finally:
        store.close()
    with pipeline(db, metric):
        pass  # the new process picks the re-opened jobs up; leaving it flushes them


def label(db: str, traces: list[str]) -> None:
    from tracescore.store import open_store

    store = open_store(db)
    try:
        answers = {r["trace_id"]: r["answer"] for r in rows(db, "SELECT trace_id, answer "
                                                                "FROM records")}
        store.add_labels([{"trace_id": t, "name": "grounded", "value": truth(answers[t]),
                           "annotator": "ana"} for t in traces])
    finally:
        store.close()


def check(db: str, tmp_path: Path, hook: Hook) -> tuple[int, dict[str, Any]]:
    """``tracescore check`` with a webhook channel: (exit code, judge_drift_labels' state)."""
    toml = tmp_path / "monitors.toml"
    toml.write_text('[[monitor]]\nname = "grounded-rate"\nscore = "grounded"\n'
                    f'threshold = 0.01\n\n[channels.team]\nkind = "webhook"\nurl = "{hook.url}"\n')
    out = run_cli("check", "--db", db, "--monitors", str(toml), "--json")
    assert out.exit_code in (0, 1), out.output
    [state] = [m for m in json.loads(out.output)["monitors"]
               if m["monitor"] == drift_labels.MONITOR]
    return out.exit_code, state


@pytest.mark.parametrize("how", ["rescored", "new records"])
def test_a_new_judge_that_disagrees_with_the_humans_raises_the_label_drift_alert(
        db: str, tmp_path: Path, hook: Hook, how: str) -> None:
    traces = score_records(db, Verdict("judge-a", agrees=True), 0, LABELLED)
    label(db, traces)
    code, state = check(db, tmp_path, hook)
    assert (code, state["state"]) == (0, "OK"), state
    assert "one judge identity" in state["summary"] and "judge-a" in state["summary"]
    judge_b = Verdict("judge-b", agrees=False)
    if how == "rescored":
        rescore(db, judge_b)
        # one row per (record, name): judge-a's verdicts are gone from `scores` — the
        # monitor's snapshot is the only place they survive
        assert {r["judge_model"] for r in rows(db, "SELECT judge_model FROM scores")} == {
            "judge-b"}
    else:
        label(db, score_records(db, judge_b, LABELLED, LABELLED))
    code, state = check(db, tmp_path, hook)
    assert (code, state["state"]) == (1, "ALERT"), state
    assert "judge changed from judge-a to judge-b" in state["summary"], state["summary"]
    [detail] = state["detail"]["scores"].values()
    assert detail["change"]["from"][0] == "judge-a" and detail["change"]["to"][0] == "judge-b"
    assert state["hi"] < detail["baseline_bound"] - drift_labels.MIN_EFFECT
    assert state["value"] == 0.0 and detail["baseline_mean"] == 1.0
    assert state["n"] == LABELLED and detail["baseline_n"] == LABELLED
    wait_for("the webhook", lambda: any(b["state"] == "ALERT" and b["monitor"]
                                        == drift_labels.MONITOR for b in hook.bodies))
    [body] = [b for b in hook.bodies if b["monitor"] == drift_labels.MONITOR]
    assert "judge-b" in json.dumps(body)
    # stored (state, history) and shown by `report`
    [stored] = rows(db, "SELECT state FROM monitor_state WHERE monitor = ?", drift_labels.MONITOR)
    assert stored["state"] == "ALERT"
    hist = rows(db, "SELECT state FROM monitor_history WHERE monitor = ? ORDER BY id",
                drift_labels.MONITOR)
    assert [h["state"] for h in hist] == ["OK", "ALERT"]
    rep = run_cli("report", "--db", db)
    assert rep.exit_code == 0 and drift_labels.MONITOR in rep.output, rep.output
    assert "judge changed from judge-a to judge-b" in " ".join(rep.output.split())


def test_a_stable_judge_over_the_same_span_raises_no_label_drift_alert(
        db: str, tmp_path: Path, hook: Hook) -> None:
    traces = score_records(db, Verdict("judge-a", agrees=True), 0, LABELLED)
    label(db, traces)
    assert check(db, tmp_path, hook)[1]["state"] == "OK"
    rescore(db, Verdict("judge-a", agrees=True))
    label(db, score_records(db, Verdict("judge-a", agrees=True), LABELLED, LABELLED))
    code, state = check(db, tmp_path, hook)
    assert (code, state["state"]) == (0, "OK"), state
    assert state["n"] == 2 * LABELLED and state["value"] == 1.0
    assert not [b for b in hook.bodies if b["monitor"] == drift_labels.MONITOR]


def test_too_few_labels_is_no_data_on_either_side(db: str, tmp_path: Path, hook: Hook) -> None:
    few = drift_labels.MIN_PAIRS // 3
    label(db, score_records(db, Verdict("judge-a", agrees=True), 0, few))
    code, state = check(db, tmp_path, hook)
    assert (code, state["state"]) == (0, "NO_DATA"), state
    assert "not enough labels" in state["summary"] and f"{few} of the" in state["summary"]
    # a formed baseline, then a new judge with too few labels of its own: NO_DATA, named
    label(db, score_records(db, Verdict("judge-a", agrees=True), few, LABELLED))
    label(db, score_records(db, Verdict("judge-b", agrees=False), 2 * LABELLED, few))
    code, state = check(db, tmp_path, hook)
    assert (code, state["state"]) == (0, "NO_DATA"), state
    assert "judge changed from judge-a to judge-b" in state["summary"]
    assert "not enough labels for the new judge" in state["summary"]
    assert not hook.bodies


def test_label_drift_measure_spends_alpha_per_new_judge_and_reads_the_scale() -> None:
    """Pure: the k-th identity after the baseline gets alpha/(2k(k+1)); a numeric score's
    agreement is 1 - MAE on its scale; a local metric's labels (no judge) are not watched."""
    def ident(model: str, first: float, pairs: list[tuple[float, float]]) -> dict[str, Any]:
        return {"first": first, "pairs": {f"r{i}": [j, h] for i, (j, h) in enumerate(pairs)}}

    n = drift_labels.MIN_PAIRS
    ids = {drift_labels.identity_key(m, "p", "1"): ident(m, t, [(4.0, 5.0)] * n)
           for m, t in (("a", 1.0), ("b", 2.0), ("c", 3.0))}
    r = drift_labels.measure("g_eval", ids, scale=(1.0, 5.0))
    assert r is not None and r.state == "OK" and r.detail["k"] == 2
    assert r.detail["current_alpha"] == pytest.approx(0.025 / 6)
    assert r.value == pytest.approx(0.75) and r.detail["baseline_mean"] == pytest.approx(0.75)
    assert "judge changed from a to c" in r.summary
    assert drift_labels.measure("g_eval", {}) is None
