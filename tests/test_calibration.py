"""Judge calibration against user feedback: Valor's classification metrics, by hand.

The pure functions are checked against values computed by hand (and ROC AUC against the
pairwise definition on random data); ``tracescore calibrate`` end to end on a real pipeline
whose judge is a scripted local HTTP server, with feedback given through ``ts.add_feedback``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracescore.cli import main
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.reports.calibration import (
    THRESHOLDS,
    Counts,
    best_threshold,
    compact_curve,
    confusion,
    feedback_verdict,
    pr_curve,
    roc_auc,
    scale_for,
)
from tracescore.testing.judge import ScriptedJudgeServer

T, F = True, False


# -- precision, recall, F1, accuracy (Valor: 0.0 on a zero denominator) ------------------------
def test_counts_by_hand() -> None:
    c = confusion([T, T, T, F, F], [T, F, T, T, F])
    assert c == Counts(tp=2, fp=1, fn=1, tn=1)
    assert (c.precision, c.recall, c.f1, c.accuracy) == pytest.approx((2 / 3, 2 / 3, 2 / 3,
                                                                      3 / 5))


def test_zero_denominators_give_zero_like_valor() -> None:
    nothing_predicted = confusion([T, F, T], [F, F, F])
    assert (nothing_predicted.precision, nothing_predicted.recall, nothing_predicted.f1) == \
        (0.0, 0.0, 0.0)
    assert nothing_predicted.accuracy == pytest.approx(1 / 3)
    no_positives = confusion([F, F], [T, F])
    assert (no_positives.recall, no_positives.precision, no_positives.f1) == (0.0, 0.0, 0.0)
    assert Counts().accuracy == 0.0
    with pytest.raises(ValueError):
        confusion([T], [T, F])


# -- ROC AUC -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("actual", "scores", "auc"), [
    ([T, F, T, F], [0.9, 0.8, 0.7, 0.1], 3 / 4),     # 0.7 loses to 0.8: 3 of 4 pairs
    ([T, F, T, F], [0.5, 0.5, 0.9, 0.1], 3.5 / 4),   # one tie (pos 0.5, neg 0.5) counts 1/2
    ([T, T, F, F], [1, 0, 1, 0], 0.5),               # a binary judge no better than chance
    ([T, T, F, F], [0.3, 0.3, 0.3, 0.3], 0.5),       # all tied
    ([T, T, F], [0.9, 0.8, 0.1], 1.0),
    ([T, T, F], [0.1, 0.2, 0.9], 0.0),
])
def test_roc_auc_by_hand(actual: list[bool], scores: list[float], auc: float) -> None:
    assert roc_auc(actual, scores) == pytest.approx(auc)


@pytest.mark.parametrize("actual", [[T, T, T], [F, F], []])
def test_roc_auc_is_undefined_with_one_class(actual: list[bool]) -> None:
    assert roc_auc(actual, [0.5] * len(actual)) is None


def test_roc_auc_equals_the_pairwise_rank_statistic() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 30)
        actual = [rng.random() < 0.5 for _ in range(n)]
        scores = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(n)]  # many ties
        pos = [s for a, s in zip(actual, scores) if a]
        neg = [s for a, s in zip(actual, scores) if not a]
        if not pos or not neg:
            assert roc_auc(actual, scores) is None
            continue
        u = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
        assert roc_auc(actual, scores) == pytest.approx(u / (len(pos) * len(neg)))


# -- the precision-recall curve ----------------------------------------------------------------
def test_pr_curve_and_best_threshold_by_hand() -> None:
    assert THRESHOLDS[0] == 0.05 and THRESHOLDS[-1] == 0.95 and len(THRESHOLDS) == 19
    actual, scores = [T, F, T, F], [0.9, 0.8, 0.3, 0.2]
    curve = pr_curve(actual, scores)
    at = {p.threshold: p.counts for p in curve}
    assert at[0.05] == at[0.2] == Counts(tp=2, fp=2)                 # everything positive
    assert at[0.25] == at[0.3] == Counts(tp=2, fp=1, tn=1)           # 0.3 >= 0.3 (Valor's >=)
    assert at[0.35] == at[0.8] == Counts(tp=1, fp=1, fn=1, tn=1)
    assert at[0.85] == at[0.9] == Counts(tp=1, fn=1, tn=2)
    assert at[0.95] == Counts(fn=2, tn=2)
    assert at[0.25].f1 == pytest.approx(0.8) and at[0.05].f1 == pytest.approx(2 / 3)
    assert best_threshold(curve) == (0.25, pytest.approx(0.8), 0.3)
    assert [(lo, hi) for lo, hi, _ in compact_curve(curve)] == [
        (0.05, 0.2), (0.25, 0.3), (0.35, 0.8), (0.85, 0.9), (0.95, 0.95)]
    assert best_threshold([]) is None


def test_scales_map_to_higher_is_better_in_0_1() -> None:
    lower = scale_for([0.0, 0.2, 0.8, 1.0], higher_is_better=False)
    assert [lower.norm(v) for v in (0.0, 0.2, 0.8, 1.0)] == pytest.approx([1, 0.8, 0.2, 0])
    assert lower.raw(0.25) == pytest.approx(0.75)  # good when value <= 0.75
    rating = scale_for([1.0, 3.0, 5.0], higher_is_better=True)
    assert [rating.norm(v) for v in (1, 3, 5)] == [0.0, 0.5, 1.0] and rating.raw(0.5) == 3.0
    other = scale_for([-2.0, 8.0], higher_is_better=True)
    assert other.norm(3.0) == 0.5 and "observed" in other.how


@pytest.mark.parametrize(("value", "label", "verdict"), [
    (1.0, None, T), (0.5, None, T), (0.49, None, F), (0.0, "good", F),  # the value wins
    (None, "Good", T), (None, "thumbs-up", T), (None, "hallucination", F), (None, "meh", None),
])
def test_feedback_verdicts(value: float | None, label: str | None, verdict: bool | None) -> None:
    assert feedback_verdict(value, label) is verdict


# -- end to end: tracescore calibrate ----------------------------------------------------------
# key: (saga correctness verdict, contexts (REL = relevant), feedback [(value, label)...])
TRACES: dict[str, tuple[str, list[str], list[tuple[Any, str | None]]]] = {
    "1": ("Y", ["REL a", "REL b"], [("up", None)]),
    "2": ("Y", ["REL a", "x"], [("up", None)]),
    "3": ("Y", ["x", "y"], [("down", None)]),
    "4": ("N", ["REL a", "REL b"], [("down", None), ("up", None)]),  # the latest wins
    "5": ("N", ["REL a", "x"], [("down", None)]),
    "6": ("N", ["x", "y"], [(False, None)]),
    "7": ("Y", ["REL a", "REL b"], [(None, "good")]),
    "8": ("N", ["x", "y"], [(None, "meh")]),  # neither positive nor negative: ignored
    "9": ("Y", ["REL a", "x"], []),  # no feedback: not a pair
}


def judge(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    if step == "binary":
        verdict = "Y" if "right" in data["answer"] else "N"
        return {c: {"value": verdict if c == "correctness" else "Y", "reasoning": "scripted"}
                for c in data["checks"]}
    if step == "contexts":
        return {"contexts": [{"index": i, "relevant": "yes" if c.startswith("REL") else "no",
                              "useful": ["no"] * len(data["references"]),
                              "contradicted": "no" if c.startswith("REL") else "yes",
                              "reason": "scripted"} for i, c in enumerate(data["contexts"])]}
    raise AssertionError(step)


@pytest.fixture
def db_path(db: str) -> str:
    """The feedback database: SQLite, then PostgreSQL (conftest ``db``)."""
    return db


@pytest.fixture
def feedback_db(make_ts: Any, db_path: Path) -> Path:
    with ScriptedJudgeServer(judge) as srv:
        ts, _ = make_ts(metrics=["saga_correctness", "context_relevance", "hallucination"],
                        judge=OpenAIJudge("scripted", base_url=srv.base_url),
                        judge_canary=False)
        for key, (verdict, contexts, feedback) in TRACES.items():
            answer = f"Answer {key}: " + ("right" if verdict == "Y" else "wrong")
            rec = ts.log_record(query=f"Question {key}?", contexts=contexts, answer=answer,
                                ground_truths=["right"])
            for value, label in feedback:
                ts.add_feedback(rec.trace_id, value, label=label)
            if key in "12345":
                ts.add_feedback(rec.trace_id, "up", name="allgood")
            if key == "1":
                ts.add_feedback(rec.trace_id, 0.2, name="expert")
        assert ts.flush(timeout=60)
    return db_path


def calibrate_json(db: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["calibrate", "--db", str(db), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_calibrate_json_by_hand(feedback_db: Path) -> None:
    got = calibrate_json(feedback_db)
    assert (got["feedback"], got["traces"], got["positives"], got["negatives"]) == \
        ("user", 7, 4, 3)
    assert got["unusable_labels"] == {"meh": 1}
    assert got["other_feedback"] == {"allgood": 5, "expert": 1}
    assert list(got["metrics"]) == ["context_relevance", "hallucination", "saga_correctness"]

    # saga_correctness: actual (liked) 1 2 4 7; judge passed (Y) 1 2 3 7
    sc = got["metrics"]["saga_correctness"]
    assert (sc["n"], sc["positives"], sc["negatives"], sc["kind"], sc["threshold"]) == \
        (7, 4, 3, "binary", 1.0)
    assert (sc["tp"], sc["fp"], sc["fn"], sc["tn"]) == (3, 1, 1, 2)
    assert (sc["precision"], sc["recall"], sc["f1"], sc["accuracy"]) == \
        pytest.approx((0.75, 0.75, 0.75, 5 / 7))
    # positives score 1,1,0,1; negatives 1,0,0: 3·(0.5 + 1 + 1) + 1·(0 + 0.5 + 0.5) = 8.5 of 12
    assert sc["roc_auc"] == pytest.approx(8.5 / 12) and sc["roc_auc_note"] is None
    assert (sc["best_threshold"], sc["best_threshold_up_to"]) == (0.05, 0.95)  # flat: 0/1
    assert sc["best_f1"] == pytest.approx(0.75)
    assert len(sc["curve"]) == 19 and {p["f1"] for p in sc["curve"]} == {0.75}

    # context_relevance: values 1 .5 0 1 .5 0 1; threshold 0.5 → judge passed 1 2 4 5 7
    cr = got["metrics"]["context_relevance"]
    assert (cr["kind"], cr["threshold"], cr["scale"]) == ("thresholded", 0.5, "0-1")
    assert (cr["tp"], cr["fp"], cr["fn"], cr["tn"]) == (4, 1, 0, 2)
    assert (cr["precision"], cr["recall"], cr["accuracy"]) == pytest.approx((0.8, 1.0, 6 / 7))
    assert cr["f1"] == pytest.approx(2 * 0.8 / 1.8)
    # positives 1 .5 1 1, negatives 0 .5 0: 3·3 + (1 + 0.5 + 1) = 11.5 of 12
    assert cr["roc_auc"] == pytest.approx(11.5 / 12)
    curve = {p["threshold"]: p for p in cr["curve"]}
    assert curve[0.5]["f1"] == pytest.approx(2 * 0.8 / 1.8)
    assert curve[0.55]["f1"] == pytest.approx(2 * 0.75 / 1.75)  # only the 1.0s pass
    assert (cr["best_threshold"], cr["best_threshold_up_to"]) == (0.05, 0.5)
    assert cr["best_threshold_raw"] == 0.05

    # hallucination = 1 - context relevance here, lower is better (passes at value <= 0.5):
    # reversed onto the same scores, it agrees with the feedback exactly as context_relevance
    h = got["metrics"]["hallucination"]
    assert h["scale"] == "0-1, reversed (lower is better)"
    same = ("tp", "fp", "fn", "tn", "precision", "recall", "f1", "accuracy", "roc_auc",
            "best_threshold", "best_threshold_up_to", "curve")
    assert {k: h[k] for k in same} == {k: cr[k] for k in same}
    assert h["best_threshold_raw"] == pytest.approx(0.95)  # good when hallucination <= 0.95


def test_calibrate_edge_cases(feedback_db: Path) -> None:
    few = calibrate_json(feedback_db, "--feedback", "expert")
    assert few["traces"] == 1
    for m in few["metrics"].values():
        assert m == {"metric": m["metric"], "n": 1, "positives": 0, "negatives": 1,
                     "enough": False, "reason": "not enough feedback (n=1)"}
    one_class = calibrate_json(feedback_db, "--feedback", "allgood", "--metric",
                               "saga_correctness")
    sc = one_class["metrics"]["saga_correctness"]
    assert (sc["n"], sc["positives"], sc["roc_auc"]) == (5, 5, None)
    assert "one class" in sc["roc_auc_note"]
    assert (sc["tp"], sc["fn"], sc["precision"], sc["recall"]) == (3, 2, 1.0, 0.6)  # Y: 1 2 3
    unknown = calibrate_json(feedback_db, "--metric", "no_such_score")
    assert unknown["metrics"]["no_such_score"]["reason"] == "no ok scores with this name"

    out = CliRunner().invoke(main, ["calibrate", "--db", str(feedback_db), "--feedback",
                                    "allgood"]).stdout
    assert "ROC AUC undefined (one class of feedback)" in out
    out = CliRunner().invoke(main, ["calibrate", "--db", str(feedback_db), "--feedback",
                                    "expert"]).stdout
    assert "saga_correctness: not enough feedback (n=1)" in out
    out = CliRunner().invoke(main, ["calibrate", "--db", str(feedback_db), "--feedback",
                                    "nobody"]).stdout
    assert "Feedback: none named 'nobody'" in out and "allgood (5 traces)" in out


def test_calibrate_text(feedback_db: Path) -> None:
    result = CliRunner().invoke(main, ["calibrate", "--db", str(feedback_db)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "7 traces with feedback: 4 positive, 3 negative" in out
    assert max(map(len, out.splitlines()[1:])) <= 80  # (the first line names the db)
    assert "ignored labels (neither positive nor negative): meh (1)" in out
    assert "saga_correctness (binary, n=7: 4 liked, 3 not)" in out
    assert "at threshold 1: precision 0.750, recall 0.750, F1 0.750, accuracy 0.714" in out
    assert "TP 3, FP 1, FN 1, TN 2; ROC AUC 0.708" in out
    assert "best threshold by F1: 0.05 (same F1 up to 0.95) → F1 0.750" in out
    assert "0.05-0.95" in out  # a binary judge's curve is one row
    cr = out.split("context_relevance (", 1)[1].split("hallucination (", 1)[0]
    rows = [ln.split() for ln in cr.splitlines() if ln.strip()[:1] == "0"]
    assert [r[0] for r in rows] == ["0.05-0.50", "0.55-0.95"]
    assert rows[0][-1] == "*" and rows[0][5] == "4/1/0/2" and rows[1][5] == "3/0/1/3"
    assert "(in the metric's own units: good when value <= 0.95)" in out  # hallucination


def test_calibrate_on_a_database_without_feedback(tmp_path: Path) -> None:
    from tracescore.store import Store

    db = tmp_path / "empty.db"
    Store(db).close()
    result = CliRunner().invoke(main, ["calibrate", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "ts.add_feedback(trace_id, value) records some" in result.stdout
    assert "No judge score has human labels yet" in result.stdout
    missing = CliRunner().invoke(main, ["calibrate", "--db", str(tmp_path / "nope.db")])
    assert missing.exit_code == 2 and "database not found" in missing.output
