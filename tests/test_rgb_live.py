"""RGB's four abilities on live records: ``rgb_noise`` per record, ``report --rgb`` in aggregate.

Records are hand-built with ``ts.log_record``; the judge is a real local HTTP server
(:class:`~tracescore.testing.judge.ScriptedJudgeServer`) whose replies follow markers in the
context texts: ``REL`` relevant, ``NOISE`` not relevant, ``CF`` counterfactual (relevant, but
contradicting the reference). A context supports a statement when it contains the statement's
text. Every expected number below is counted by hand from those markers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import jobs, rows

from tracescore.cli import main
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.judge.rgb_steps import RGB_TASK, rgb_schema
from tracescore.metrics import registry
from tracescore.metrics.rgb_abilities import integration_need, noise_bucket
from tracescore.read.db import open_db
from tracescore.reports.rgb import RecordFacts, aggregate, format_rgb, record_facts, rgb_live
from tracescore.testing.judge import ScriptedJudgeServer, parse_prompt

MODEL = "scripted-judge"
LOCAL = ["rgb_accuracy", "rgb_rejection", "rgb_error_detection", "rgb_error_correction"]

#: Reference text → its statements (what the scripted extraction returns).
REF_STATEMENTS = {"Paris and Berlin": ["Paris", "Berlin"],
                  "Rome and Madrid": ["Rome", "Madrid"],
                  "Oslo and Bergen": ["Oslo", "Bergen"]}


def responder(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    if step == "extract":
        return {"texts": {k: {"statements": REF_STATEMENTS.get(t, [t]),
                              **({"opinions": []} if k in data["opinions_for"] else {})}
                          for k, t in data["texts"].items()}}
    if step == "contexts":
        return {"contexts": [
            {"index": i, "relevant": "yes" if c.startswith(("REL", "CF")) else "no",
             "useful": ["no"] * len(data["references"]), "contradicted": "no",
             "reason": "scripted"} for i, c in enumerate(data["contexts"])]}
    if step == "rgb":
        ctx = data["contexts"]
        return {
            "contexts": [{"index": i, "counterfactual": "yes" if c.startswith("CF") else "no",
                          "reason": "scripted"} for i, c in enumerate(ctx)],
            "statements": [{"index": j, "supported_by": [
                i for i, c in enumerate(ctx) if not c.startswith("NOISE")
                and s.lower() in c.lower()]} for j, s in enumerate(data["statements"])],
        }
    if step == "statements":  # only for the shared-steps test (faithfulness)
        return {"answer_statements": [{"index": i, "relevant": "yes", "supported": "yes",
                                       "in_reference": ["yes"] * len(
                                           data["reference_statements"])}
                                      for i, _ in enumerate(data["answer_statements"])],
                "reference_verdicts": [[{"index": i, "attributable": "yes", "covered": "yes"}
                                        for i, _ in enumerate(r)]
                                       for r in data["reference_statements"]]}
    raise AssertionError(f"unexpected judge step {step}")


def noise(k: int) -> list[str]:
    return [f"NOISE unrelated text number {i}" for i in range(k)]


def rel(k: int, fact: str = "Paris") -> list[str]:
    return [f"REL the answer is {fact} (source {i})" for i in range(k)]


# (key, contexts, answer, ground truths) -- the hand-counted records
RECORDS: list[tuple[str, list[str], str, list[str]]] = [
    # noise robustness (accuracy by bucket; floor to 20 %)
    ("A", rel(5), "It is Paris.", ["Paris"]),                    # 0/5 noise → 0 %, correct
    ("B", rel(4) + noise(1), "Paris it is.", ["Paris"]),         # 1/5 → 20 %, correct
    ("C", rel(4) + noise(1), "It is Lyon.", ["Paris"]),          # 1/5 → 20 %, wrong
    ("F", rel(2) + noise(1), "Paris, surely.", ["Paris"]),       # 1/3 = 33 % → 20 %, correct
    ("D", rel(2) + noise(3), "Paris.", ["Paris"]),               # 3/5 → 60 %, correct
    ("E", rel(1) + noise(9), "Lyon.", ["Paris"]),                # 9/10 → 80 %, wrong
    # information integration (also in the noise curve)
    ("G", ["REL Paris is one", "REL Berlin is two"] + noise(1),  # 1/3 → 20 %; needs both
     "Paris and Berlin.", ["Paris and Berlin"]),
    ("H", ["REL Rome is one", "REL Madrid is two"],              # 0/2 → 0 %; needs both; wrong
     "Only Rome.", ["Rome and Madrid"]),
    ("I", ["REL Oslo and Bergen", "REL Bergen and Oslo again"],  # one context suffices
     "Oslo and Bergen.", ["Oslo and Bergen"]),                   # 0 %, correct
    # negative rejection (no context relevant)
    ("J", noise(2), "I don't have enough information to answer.", ["Paris"]),  # refused
    ("K", noise(3), "The answer is 42.", ["Paris"]),                            # answered
    ("L", noise(1), "Insufficient information.", []),                          # refused
    ("M", [], "Insufficient information.", []),      # no context retrieved: separate line
    # counterfactual robustness
    ("N", ["CF The tower is in Rome", "REL The tower is in Paris"],
     "There are factual errors in the provided documents; the tower is in Paris.", ["Paris"]),
    ("O", ["CF The tower is in Rome"], "The tower is in Rome.", ["Paris"]),
    ("P", ["CF The tower is in Rome"],
     "The documents contain incorrect information; the tower is in Lyon.", ["Paris"]),
]

# Hand-computed from the table above.
NOISE_RATIO = {"A": 0.0, "B": 0.2, "C": 0.2, "F": 1 / 3, "D": 0.6, "E": 0.9, "G": 1 / 3,
               "H": 0.0, "I": 0.0, "J": 1.0, "K": 1.0, "L": 1.0, "N": 0.0, "O": 0.0, "P": 0.0}
# bucket → (records with a verdict, correct): 0 %: A, H(wrong), I; 20 %: B, C(wrong), F, G;
# 40 %: none; 60 %: D; 80 %: E(wrong)
BUCKETS = {"0%": (3, 2), "20%": (4, 3), "40%": (0, 0), "60%": (1, 1), "80%": (1, 0)}


def expected_json() -> dict[str, Any]:
    return {
        "records": 16, "profiled": 16, "unprofiled": 0,
        "buckets": {k: {"n": n, "correct": c, "accuracy": c / n if n else None,
                        "unscored": 0} for k, (n, c) in BUCKETS.items()},
        "rejection": {"n": 3, "refused": 2, "rate": 2 / 3, "unscored": 0},
        "no_contexts": {"n": 1, "refused": 1, "rate": 1.0, "unscored": 0},
        "integration": {"n": 2, "correct": 1, "accuracy": 0.5, "unscored": 0},
        "single": {"n": 7, "correct": 5, "accuracy": 5 / 7, "unscored": 0},
        "detection": {"n": 3, "detected": 2, "rate": 2 / 3, "unscored": 0},
        "correction": {"detected": 2, "corrected": 1, "rate": 0.5, "unscored": 0},
    }


def run_records(make_ts: Any, srv: ScriptedJudgeServer, metrics: list[str]) -> dict[str, str]:
    ts, _ = make_ts(metrics=metrics, judge=OpenAIJudge(MODEL, base_url=srv.base_url),
                    judge_canary=False)
    ids = {}
    for key, contexts, answer, gts in RECORDS:
        rec = ts.log_record(query=f"Question {key}: where is it?", contexts=contexts,
                            answer=answer, ground_truths=gts)
        ids[key] = rec.record_id
    assert ts.flush(timeout=60)
    return ids


def check_live(db: Path, sources: dict[str, dict[str, int]]) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["report", "--rgb", "--json", "--db", str(db)])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    want = expected_json()
    assert (got["records"], got["profiled"], got["unprofiled"]) == \
        (want["records"], want["profiled"], want["unprofiled"])
    buckets = {b["noise"]: {k: b[k] for k in ("n", "correct", "accuracy", "unscored")}
               for b in got["noise_robustness"]["buckets"]}
    assert buckets == want["buckets"]
    assert [b["lower"] for b in got["noise_robustness"]["buckets"]] == [0, .2, .4, .6, .8]
    rej = got["negative_rejection"]
    assert {k: rej[k] for k in ("n", "refused", "rate", "unscored")} == want["rejection"]
    assert rej["no_contexts"] == want["no_contexts"]
    integ = got["information_integration"]
    assert {k: integ[k] for k in ("n", "correct", "accuracy", "unscored")} == \
        want["integration"]
    assert integ["single_context"] == want["single"]
    cf = got["counterfactual_robustness"]
    assert cf["n"] == 3
    assert cf["error_detection"] == want["detection"]
    assert cf["error_correction"] == want["correction"]
    assert got["sources"] == sources
    return got


# -- per-record: the metric's verdicts in the score details --------------------------------------
def test_rgb_noise_scores_and_aggregates_every_bucket(make_ts: Any, db_path: Path) -> None:
    with ScriptedJudgeServer(responder) as srv:
        ids = run_records(make_ts, srv, ["rgb_noise", *LOCAL])
        with_contexts = sum(1 for _, c, _, _ in RECORDS if c)
        # 3 calls per record with contexts (contexts, extract, rgb); M has none: skipped
        assert srv.calls == {"contexts": with_contexts, "extract": with_contexts,
                             "rgb": with_contexts}
    scores = {r["record_id"]: r for r in rows(db_path, "SELECT * FROM scores WHERE "
                                              "name = 'rgb_noise'")}
    for key, ratio in NOISE_RATIO.items():
        s = scores[ids[key]]
        assert s["status"] == "ok" and s["value"] == pytest.approx(ratio), key
        assert s["label"] is None  # no pass/fail threshold
    assert ids["M"] not in scores  # no contexts: the job is skipped, not scored
    assert jobs(db_path, ids["M"])["rgb_noise"]["status"] == "skipped"
    d = {k: json.loads(scores[ids[k]]["details"]) for k in NOISE_RATIO}
    assert d["E"]["n_contexts"] == 10 and d["E"]["n_relevant"] == 1
    assert d["E"]["noise_bucket"] == 80 and d["F"]["noise_bucket"] == 20
    assert d["J"]["noise_bucket"] is None  # 100 % noise: negative rejection, not a bucket
    assert d["G"]["needs_integration"] and d["G"]["supporting_contexts"] == [0, 1]
    assert d["G"]["statement_support"] == [[[0], [1]]]  # Paris ← #0, Berlin ← #1
    assert d["H"]["needs_integration"]
    assert not d["I"]["needs_integration"] and d["I"]["statement_support"] == [[[0, 1],
                                                                                [0, 1]]]
    assert d["N"]["counterfactual_contexts"] == [0] and d["A"]["counterfactual_contexts"] == []
    assert d["L"]["statements_from"] == "answer" and d["A"]["statements_from"] == "reference"
    assert d["A"]["judge_calls"] == 3
    assert "counterfactual: #1" in scores[ids["N"]]["explanation"]

    got = check_live(db_path, {"accuracy": {"rgb_accuracy": 9},
                               "refusal": {"rgb_rejection": 4},
                               "error_detection": {"rgb_error_detection": 3}})
    assert got["db"] == str(db_path)

    text = CliRunner().invoke(main, ["report", "--rgb", "--db", str(db_path)])
    assert text.exit_code == 0, text.output
    out = text.stdout
    assert "Noise robustness" in out and "Negative rejection" in out
    assert "Information integration" in out and "Counterfactual robustness" in out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln[:1].isdigit() and "%" in
             ln.split()[0]}
    assert "n/a (no records)" in lines["40%"]
    assert "66.7%" in lines["0%"] and "#" * 13 + "." * 7 in lines["0%"]  # 2/3 of 20 chars
    assert "75.0%" in lines["20%"] and "#" * 15 + "." * 5 in lines["20%"]
    assert "100.0%" in lines["60%"] and "#" * 20 in lines["60%"]
    assert "0.0%" in lines["80%"] and "." * 20 in lines["80%"]
    assert "refused 2 of 3 (66.7%)" in out
    assert "no context retrieved (not in the rate): refused 1 of 1 (100.0%)" in out
    assert "1 of 2 correct (50.0%)" in out
    assert "error detection: 2 of 3 flagged the error (66.7%)" in out
    assert "error correction: 1 of 2 detections also gave the reference (50.0%)" in out
    assert "accuracy from: rgb_accuracy 9" in out


def test_without_local_rgb_scores_the_same_checks_run_on_the_stored_text(
        make_ts: Any, db_path: Path) -> None:
    """Only rgb_noise configured: accuracy, refusal and error flags come from RGB's checks run
    at report time on the stored answers; the numbers are the same, the source says so."""
    with ScriptedJudgeServer(responder) as srv:
        run_records(make_ts, srv, ["rgb_noise"])
    check_live(db_path, {"accuracy": {"computed": 9}, "refusal": {"computed": 4},
                         "error_detection": {"computed": 3}})
    out = CliRunner().invoke(main, ["report", "--rgb", "--db", str(db_path)]).stdout
    assert "accuracy from: RGB check computed on the stored answer 9" in out


def test_rgb_noise_costs_one_call_when_the_rag_set_runs(make_ts: Any, db_path: Path) -> None:
    """The contexts and extract steps are shared (cached): rgb_noise adds only its rgb step."""
    with ScriptedJudgeServer(responder) as srv:
        ts, _ = make_ts(metrics=["context_relevance", "faithfulness", "rgb_noise"],
                        judge=OpenAIJudge(MODEL, base_url=srv.base_url), judge_canary=False)
        ts.log_record(query="Where?", contexts=rel(2) + noise(2), answer="Paris.",
                      ground_truths=["Paris"])
        assert ts.flush(timeout=60)
        assert srv.calls == {"extract+contexts": 1, "statements": 1, "rgb": 1}
    got = {r["name"]: r["value"] for r in rows(db_path, "SELECT name, value FROM scores")}
    assert got["context_relevance"] == 0.5 and got["rgb_noise"] == 0.5


def test_a_reference_that_arrives_later_rescores_rgb_noise(make_ts: Any, db_path: Path) -> None:
    """Without a reference, integration is judged on the answer's statements; when the
    reference arrives (``add_ground_truth``), ``rgb_noise`` (which *uses* a reference when
    there is one, see ``Metric.uses``) is scored again on the reference's statements."""
    with ScriptedJudgeServer(responder) as srv:
        ts, _ = make_ts(metrics=["rgb_noise"], judge=OpenAIJudge(MODEL, base_url=srv.base_url),
                        judge_canary=False)
        rec = ts.log_record(query="Which two?", answer="Paris.",
                            contexts=["REL Paris is one", "REL Berlin is two"] + noise(1))
        assert ts.flush(timeout=60)
        before = rows(db_path, "SELECT score_id, details FROM scores WHERE name='rgb_noise'")
        ts.add_ground_truth(rec.trace_id, ["Paris and Berlin"])
        assert ts.flush(timeout=60)
        after = rows(db_path, "SELECT score_id, details FROM scores WHERE name='rgb_noise'")
        # again: contexts (now judged against the reference too), extract (the reference's
        # statements) and rgb
        assert srv.calls == {"contexts": 2, "extract": 2, "rgb": 2}
    assert len(before) == len(after) == 1 and before[0]["score_id"] == after[0]["score_id"]
    b, a = json.loads(before[0]["details"]), json.loads(after[0]["details"])
    assert (b["statements_from"], b["needs_integration"]) == ("answer", False)
    assert (a["statements_from"], a["needs_integration"]) == ("reference", True)
    assert a["supporting_contexts"] == [0, 1]
    assert jobs(db_path, rec.record_id)["rgb_noise"]["status"] == "done"


def test_a_record_whose_profile_failed_is_counted_apart(make_ts: Any, db_path: Path) -> None:
    def broken(step: str, data: Any, request: dict[str, Any]) -> Any:
        if step == "rgb":
            return {"contexts": "not a list"}
        return responder(step, data, request)

    with ScriptedJudgeServer(broken) as srv:
        ts, _ = make_ts(metrics=["rgb_noise", "rgb_accuracy"],
                        judge=OpenAIJudge(MODEL, base_url=srv.base_url), judge_canary=False)
        ts.log_record(query="Where?", contexts=rel(1), answer="Paris.", ground_truths=["P"])
        assert ts.flush(timeout=60)
        assert (srv.calls["rgb"], srv.calls["rgb:repair"]) == (1, 1)  # one repair, then error
    s = rows(db_path, "SELECT status, error FROM scores WHERE name='rgb_noise'")[0]
    assert s["status"] == "error" and "contexts must be a list" in s["error"]
    conn = open_db(db_path)
    try:
        live = rgb_live(conn)
    finally:
        conn.close()
    assert (live.records, live.profiled) == (1, 0)
    assert all(b.accuracy.n == 0 for b in live.noise)
    assert "1 record; 0 placed, 1 without an rgb_noise score" in format_rgb(live)


def test_empty_database_prints_n_a_everywhere(tmp_path: Path) -> None:
    from tracescore.store import Store

    db = tmp_path / "empty.db"
    Store(db).close()
    result = CliRunner().invoke(main, ["report", "--rgb", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("n/a (no records)") == 5 + 3
    got = json.loads(CliRunner().invoke(main, ["report", "--rgb", "--json", "--db",
                                               str(db)]).stdout)
    assert got["records"] == 0
    assert got["negative_rejection"]["rate"] is None
    assert got["counterfactual_robustness"]["error_correction"]["rate"] is None
    bad = CliRunner().invoke(main, ["report", "--rgb", "--html", "-", "--db", str(db)])
    assert bad.exit_code == 2 and "cannot be combined" in bad.output


# -- pure parts ------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "relevant", "bucket"), [
    (5, 5, 0), (5, 4, 20), (5, 3, 40), (5, 2, 60), (5, 1, 80), (5, 0, None),
    (10, 9, 0), (10, 8, 20), (10, 7, 20), (3, 2, 20), (3, 1, 60), (0, 0, None), (1, 1, 0),
    (7, 1, 80),  # 6/7 = 85.7 %
])
def test_noise_buckets_floor_to_20_percent(n: int, relevant: int, bucket: int | None) -> None:
    assert noise_bucket(n, relevant) == bucket


@pytest.mark.parametrize(("groups", "needs", "supporting"), [
    ([[[0], [1]]], True, [0, 1]),                  # each context one part
    ([[[0, 1], [1]]], False, [0, 1]),              # context 1 alone supports both
    ([[[0], []]], False, [0]),                     # one part unsupported: one context suffices
    ([[[], []]], False, []),                       # nothing supported
    ([[[0], [1]], [[2]]], False, [0, 1, 2]),       # the second reference needs one context
    ([[[0], [1]], [[2], [3]]], True, [0, 1, 2, 3]),
    ([[[0], [1]], []], True, [0, 1]),              # a reference without statements is ignored
    ([], False, []),
])
def test_integration_needs_two_contexts_none_of_which_suffices(
        groups: list[list[list[int]]], needs: bool, supporting: list[int]) -> None:
    assert integration_need(groups) == (needs, supporting)


def test_record_facts_sources_and_precedence() -> None:
    profile = {"n_contexts": 5, "n_relevant": 4, "counterfactual_contexts": [],
               "needs_integration": True}
    # stored rgb_accuracy beats saga_correctness beats the computed check
    f = record_facts(5, True, "Lyon", ["Paris"], {"rgb_accuracy": 1.0,
                                                  "saga_correctness": 0.0}, profile)
    assert (f.place, f.bucket, f.integration, f.correct, f.correct_from) == \
        ("noise", 20, True, True, "rgb_accuracy")
    f = record_facts(5, True, "Lyon", ["Paris"], {"saga_correctness": 1.0}, profile)
    assert (f.correct, f.correct_from) == (True, "saga_correctness")
    f = record_facts(5, True, "Lyon", ["Paris"], {}, profile)
    assert (f.correct, f.correct_from) == (False, "computed")
    f = record_facts(5, True, "Lyon", [], {}, profile)  # no reference: no verdict
    assert (f.correct, f.correct_from) == (None, None)
    # no relevant context: the refusal judge when the phrase check did not run
    none_rel = {**profile, "n_relevant": 0}
    f = record_facts(5, True, "It is Paris", [], {"saga_negative_rejection": 1.0}, none_rel)
    assert (f.place, f.refused, f.refused_from) == ("rejection", True,
                                                    "saga_negative_rejection")
    # counterfactual wins over everything else; correction needs a reference
    cf = {**profile, "counterfactual_contexts": [2]}
    f = record_facts(5, True, "There are factual errors; Paris.", [], {}, cf)
    assert (f.place, f.detected, f.detected_from, f.corrected) == \
        ("counterfactual", True, "computed", None)
    # no rgb_noise score: unprofiled unless nothing was retrieved
    assert record_facts(3, True, "x", [], {}, None).place == "unprofiled"
    assert record_facts(0, True, "x", [], {}, None).place == "no_contexts"
    assert record_facts(0, False, None, [], {}, None).place == "unprofiled"
    assert record_facts(5, True, "x", [], {}, {"n_contexts": 2, "n_relevant": 3}).place == \
        "unprofiled"


def test_aggregate_by_hand() -> None:
    facts = [RecordFacts("noise", 0, False, True, "rgb_accuracy"),
             RecordFacts("noise", 0, True, False, "rgb_accuracy"),
             RecordFacts("noise", 40, False, None),
             RecordFacts("counterfactual", detected=False, detected_from="computed"),
             RecordFacts("counterfactual", detected=True, detected_from="computed",
                         corrected=None),
             RecordFacts("unprofiled")]
    live = aggregate(facts)
    assert (live.records, live.profiled) == (6, 5)
    b = {x.lower: x.accuracy for x in live.noise}
    assert (b[0].n, b[0].hits, b[0].rate) == (2, 1, 0.5)
    assert (b[40].n, b[40].unscored, b[40].rate) == (0, 1, None)
    assert (live.integration.n, live.integration.hits) == (1, 0)
    assert (live.detection.n, live.detection.hits) == (2, 1)
    assert live.correction.n == 0 and live.correction.rate is None  # no reference to check
    assert "error correction: 0 of 0 detections also gave the reference (n/a (no detections))" \
        in format_rgb(live)


def test_rgb_step_prompt_is_recognised_and_schema_is_sized() -> None:
    assert registry.get("rgb_noise").kind == "judge"
    step, _ = parse_prompt([{"role": "user", "content": f"TASK\n{RGB_TASK}\n\nDATA\n{{}}"}])
    assert step == "rgb"
    schema = rgb_schema(3, 2)
    ctx = schema["properties"]["contexts"]
    assert (ctx["minItems"], ctx["maxItems"]) == (3, 3)
    st = schema["properties"]["statements"]
    assert (st["minItems"], st["maxItems"]) == (2, 2)
    assert st["items"]["properties"]["supported_by"]["items"]["maximum"] == 2
