"""Ragas metrics end to end: real pipeline, real ``openai`` clients, real HTTP servers.

The judge is :class:`~tracescore.testing.judge.ScriptedJudgeServer` and, where a test needs
exact cosines, the embedder is :class:`~tracescore.testing.embeddings.ScriptedEmbeddingServer`
with vectors chosen by hand (``VECTORS``); elsewhere it is the real all-MiniLM-L6-v2, checked
against numbers that sentence-transformers computed (see tests/test_embeddings.py). Every
expected value is computed by hand from the scripted verdicts and vectors, next to it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import Script, rows, statements_reply, stored_scores, yes
from judge_pairs import PAIR, ScriptedJudgeServer

import tracescore
from tracescore.embeddings import OpenAIEmbedder
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.metrics import registry
from tracescore.metrics.judged import precision_at_k
from tracescore.metrics.ragas import (
    RAGAS_METRICS,
    RagasAnswerCorrectness,
    RagasAnswerRelevancy,
    cosine,
    normalize_entity,
    statement_f1,
)
from tracescore.testing.embeddings import ScriptedEmbeddingServer, hashed_bag_of_words

DOCS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
RAGAS = [cls.name for cls in RAGAS_METRICS]

Q = "What battery does the Cargo have?"
ANSWER = "The Cargo ships with a 750 Wh battery. It weighs 30 kg. It is red."
GT0 = "The Cargo has a 750 Wh battery, made in Berlin."
GT1 = "Like the Commuter, the Cargo has a battery pack from 2024."
CONTEXTS = ["The Cargo ships with a 750 Wh battery. It weighs 30 kg.",
            "The Commuter has a 500 Wh battery.",
            "Warranty lasts two years. Batteries are covered. Frames are covered too.",
            "Our shop opens at 9."]
GENERATED = ["Which battery is in the Cargo?", "How big is the Cargo's battery?",
             "Is the Cargo heavy?"]

# Hand-picked vectors (not unit length on purpose: the metrics normalise).
VECTORS: dict[str, list[float]] = {
    Q: [2.0, 0.0, 0.0],
    GENERATED[0]: [1.0, 0.0, 0.0],   # cos with Q = 1
    GENERATED[1]: [3.0, 4.0, 0.0],   # cos with Q = 0.6
    GENERATED[2]: [0.0, 5.0, 0.0],   # cos with Q = 0
    ANSWER: [1.0, 0.0, 0.0],
    GT0: [6.0, 8.0, 0.0],            # cos with the answer = 0.6
    GT1: [0.5, 0.0, 0.0],            # cos with the answer = 1
    "Hi there!": [0.0, 0.0, 1.0],
    "Hello!": [0.0, 0.6, 0.8],       # cos with "Hi there!" = 0.8
}


def vectors(text: str) -> list[float]:
    return VECTORS.get(text) or hashed_bag_of_words(text, 3)


# -- scripted judge ---------------------------------------------------------------------------
STATEMENTS = {ANSWER: ["a1", "a2", "a3"], GT0: ["r0a", "r0b", "r0c"], GT1: ["r1a", "r1b"]}


def scripted_extract(data: dict[str, Any]) -> dict[str, Any]:
    return {"texts": {k: {"statements": STATEMENTS.get(t, []),
                          **({"opinions": []} if k in data["opinions_for"] else {})}
                      for k, t in data["texts"].items()}}


def scripted_statements(data: dict[str, Any]) -> dict[str, Any]:
    assert data["answer_statements"] == STATEMENTS[ANSWER]
    return statements_reply()  # the verdicts: helpers.ANSWER_VERDICTS, REFERENCE_VERDICTS


def scripted_contexts(data: dict[str, Any]) -> dict[str, Any]:
    # useful (for any reference) = [no, yes, yes, no]
    useful = [(False, False), (True, False), (False, True), (False, False)]
    return {"contexts": [{"index": i, "relevant": "yes", "useful": [yes(u) for u in us],
                          "contradicted": "no", "reason": "scripted"}
                         for i, us in enumerate(useful)]}


def scripted_questions(data: dict[str, Any]) -> dict[str, Any]:
    assert data == {"answer": ANSWER, "n": 3}
    return {"questions": [{"question": q, "noncommittal": 0} for q in GENERATED]}


ENTITIES = {
    GT0: ["Cargo", "750 Wh", "Berlin"],
    GT1: ["Cargo", "Commuter", "battery pack", "2024"],
    CONTEXTS[0]: ["the Cargo", "750 WH.", "30 kg"],
    CONTEXTS[1]: ["Commuter", "500 Wh"],
    CONTEXTS[2]: [],
    CONTEXTS[3]: ["9"],
}


def scripted_entities(data: dict[str, Any]) -> dict[str, Any]:
    return {"texts": {k: {"entities": ENTITIES[t]} for k, t in data["texts"].items()}}


def scripted_sentences(data: dict[str, Any]) -> dict[str, Any]:
    # 2 + 1 + 3 + 1 sentences; needed: the first of context 0 and the second of context 2
    assert len(data["sentences"]) == 7 and data["question"] == Q
    return {"verdicts": ["yes", "no", "no", "no", "yes", "no", "no"]}


FULL = dict(extract=scripted_extract, statements=scripted_statements,
            contexts=scripted_contexts, ragas_questions=scripted_questions,
            ragas_entities=scripted_entities, ragas_sentences=scripted_sentences)


def start(db: Path, judge: ScriptedJudgeServer, metrics: list[Any], embedder: Any,
          **kw: Any) -> Any:
    kw.setdefault("judge_canary", False)
    return tracescore.init(db=db, metrics=metrics, judge=OpenAIJudge(
        "scripted-judge", base_url=judge.base_url), embedder=embedder, **kw)


def scripted_embedder(srv: ScriptedEmbeddingServer) -> OpenAIEmbedder:
    return OpenAIEmbedder("scripted-embedder", base_url=srv.base_url)


stored = stored_scores


def run(db: Path, script: Script, metrics: list[Any], records: list[dict[str, Any]],
        embedder: Any = "scripted", **kw: Any) -> tuple[list[dict[str, dict[str, Any]]], Any]:
    """One pipeline: log the records, flush, return their stored scores (and the servers)."""
    with ScriptedJudgeServer(script) as judge, ScriptedEmbeddingServer(vectors) as emb:
        ts = start(db, judge, metrics,
                   scripted_embedder(emb) if embedder == "scripted" else embedder, **kw)
        try:
            recs = [ts.log_record(**r) for r in records]
            assert ts.flush(30)
        finally:
            ts.shutdown(10)
    assert script.unexpected == []
    return [stored(db, r.record_id) for r in recs], (judge, emb)


RECORD = dict(query=Q, answer=ANSWER, contexts=CONTEXTS, ground_truths=[GT0, GT1])


# -- every formula, from scripted verdicts and vectors ---------------------------------------
def test_every_ragas_metric_and_its_valor_counterpart(db_path: Path) -> None:
    metrics = [*RAGAS, "faithfulness", "context_precision", "context_recall",
               "answer_correctness"]
    (got,), (judge, emb) = run(db_path, Script(**FULL), metrics, [RECORD])
    assert {k: r["status"] for k, r in got.items()} == {m: "ok" for m in metrics}
    expected = {
        # supported = [yes, idk, no]: "idk" (unrelated to the contexts) counts against
        "faithfulness": 1 / 3, "ragas_faithfulness": 1 / 3,
        # useful = [no, yes, yes, no]: (P@2 + P@3) / (2 useful) = (1/2 + 2/3) / 2 — Ragas
        # adds 1e-10 to the denominator
        "context_precision": (1 / 2 + 2 / 3) / 2,
        "ragas_context_precision": (1 / 2 + 2 / 3) / (2 + 1e-10),
        # ref 0: 1 of 3 statements attributable, ref 1: 1 of 2 → best 0.5
        "context_recall": 0.5, "ragas_context_recall": 0.5,
        # cos(Q, generated) = 1, 0.6, 0 (vectors above); none noncommittal → mean
        "ragas_answer_relevancy": (1 + 0.6 + 0) / 3,
        # cos(answer, GT0) = 0.6, cos(answer, GT1) = 1 → best 1
        "answer_similarity": 1.0,
        # statement F1: ref 0: TP = a1, a2; FP = a3; FN = r0c → 2 / (2 + 1) = 2/3
        #               ref 1: TP = a2, a3; FP = a1; FN = none → 2 / (2 + 0.5) = 0.8
        "answer_correctness": 0.8,  # Valor: F1 only, best reference
        # Ragas: 0.75·F1 + 0.25·similarity: ref 0: 0.75·2/3 + 0.25·0.6 = 0.65,
        #                                   ref 1: 0.75·0.8 + 0.25·1 = 0.85 → 0.85
        "ragas_answer_correctness": 0.85,
        # ref 0 entities {cargo, 750 wh, berlin}: cargo and 750 wh are in the contexts
        # ("the Cargo", "750 WH." normalise to them) → 2/3; ref 1: cargo, commuter of 4 → 0.5
        "context_entity_recall": 2 / 3,
        # 2 of 7 context sentences needed
        "ragas_context_relevancy": 2 / 7,
    }
    values = {k: got[k]["value"] for k in expected}
    assert values == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # The two precision flavours differ by the epsilon only: visible at full precision.
    assert got["context_precision"]["value"] != got["ragas_context_precision"]["value"]

    ar = got["ragas_answer_relevancy"]["details"]
    assert ar["generated_questions"] == GENERATED and ar["noncommittal"] == [False] * 3
    assert ar["cosines"] == pytest.approx([1.0, 0.6, 0.0])
    assert ar["embedding_model"] == "openai:scripted-embedder"
    assert ar["judge_calls"] == 1  # usage accounting from JudgeMetric
    ac = got["ragas_answer_correctness"]
    assert "reference #2" in ac["explanation"]
    assert ac["details"]["per_reference"] == [
        {"tp": 2, "fp": 1, "fn": 1, "f1": pytest.approx(2 / 3), "similarity": pytest.approx(0.6),
         "score": pytest.approx(0.65)},
        {"tp": 2, "fp": 1, "fn": 0, "f1": pytest.approx(0.8), "similarity": pytest.approx(1.0),
         "score": pytest.approx(0.85)}]
    assert got["answer_similarity"]["details"]["cosines"] == pytest.approx([0.6, 1.0])
    assert got["answer_similarity"]["explanation"] == "best of 2 references, reference #2: " \
        "cosine 1.000"
    ce = got["context_entity_recall"]
    assert "reference #1: 2 of 3 entities" in ce["explanation"] and "Berlin" in ce["explanation"]
    assert ce["details"]["per_reference"][1]["missing"] == ["battery pack", "2024"]
    assert got["ragas_context_relevancy"]["details"]["relevant_per_context"] == [
        [1, 2], [0, 1], [1, 3], [0, 1]]
    assert got["ragas_context_relevancy"]["label"] == "fail"  # 0.29 < 0.5

    # Judge calls: the shared extract/contexts/statements (3 steps, 2 calls: extract and
    # contexts share one) serve six of these metrics; each Ragas-only step is one more: 5 calls
    # for 12 metrics.
    assert dict(judge.calls) == {PAIR: 1, "statements": 1, "ragas_questions": 1,
                                 "ragas_entities": 1, "ragas_sentences": 1}
    # Each text embedded once, though three metrics embed the answer and references.
    assert sorted(emb.inputs) == sorted([Q, *GENERATED, ANSWER, GT0, GT1])


#: Ragas' five classic metrics (issue 19: "the five Ragas metrics", Ragas itself: 10 calls)
RAGAS_FIVE = ["ragas_faithfulness", "ragas_answer_relevancy", "ragas_context_precision",
              "ragas_context_recall", "ragas_answer_correctness"]


def test_the_five_ragas_metrics_cost_three_calls(db_path: Path) -> None:
    """extract and contexts share one call; statements and ragas_questions are one each."""
    (got,), (judge, _) = run(db_path, Script(**FULL), RAGAS_FIVE, [RECORD])
    assert {k: r["status"] for k, r in got.items()} == {m: "ok" for m in RAGAS_FIVE}
    assert dict(judge.calls) == {PAIR: 1, "statements": 1, "ragas_questions": 1}
    assert sum(r["details"]["judge_calls"] for r in got.values()) == 3


def test_rescoring_repeats_no_judge_call_and_no_embedding(db_path: Path) -> None:
    run(db_path, Script(**FULL), RAGAS, [RECORD])
    (got,), (judge, emb) = run(db_path, Script(**FULL), RAGAS, [RECORD])  # same db: cache
    assert {k: r["status"] for k, r in got.items()} == {m: "ok" for m in RAGAS}
    assert judge.total_calls == 0 and emb.requests == []


# -- ragas_answer_relevancy edge cases ----------------------------------------------------------
QUESTION_REPLIES = {
    "normal": [(GENERATED[0], 0), (GENERATED[1], 0), (GENERATED[2], 0)],
    "all noncommittal": [(GENERATED[0], 1), (GENERATED[1], 1), (GENERATED[2], 1)],
    "one noncommittal": [(GENERATED[0], 1), (GENERATED[1], 0), (GENERATED[2], 0)],
    "all empty": [("", 0), ("  ", 0), ("", 1)],
    "one empty": [("", 0), (GENERATED[1], 0), (GENERATED[2], 0)],
}


def questions_by_answer(data: dict[str, Any]) -> dict[str, Any]:
    return {"questions": [{"question": q, "noncommittal": f}
                          for q, f in QUESTION_REPLIES[data["answer"]]]}


@pytest.mark.parametrize("rule", ["all", "any"])
def test_answer_relevancy_noncommittal_and_empty_questions(db_path: Path, rule: str) -> None:
    records = [dict(query=Q, answer=a) for a in QUESTION_REPLIES]
    got, (judge, _) = run(db_path, Script(ragas_questions=questions_by_answer),
                          [RagasAnswerRelevancy(noncommittal=rule)], records)
    scores = {a: g["ragas_answer_relevancy"] for a, g in zip(QUESTION_REPLIES, got)}
    assert scores["normal"]["value"] == pytest.approx(1.6 / 3)  # (1 + 0.6 + 0) / 3
    # every generation noncommittal → 0 under either rule (the cosines are kept in details)
    assert scores["all noncommittal"]["value"] == 0.0
    assert "noncommittal" in scores["all noncommittal"]["explanation"]
    assert scores["all noncommittal"]["details"]["mean_cosine"] == pytest.approx(1.6 / 3)
    # one of three noncommittal: the issue's rule ("all") keeps the mean; Ragas' ("any") → 0
    assert scores["one noncommittal"]["value"] == pytest.approx(1.6 / 3 if rule == "all"
                                                                else 0.0)
    # empty generated questions are left out of the mean: (0.6 + 0) / 2
    assert scores["one empty"]["value"] == pytest.approx(0.3)
    # all empty → an error score with the reason (Ragas: NaN), never a silent 0
    empty = scores["all empty"]
    assert empty["status"] == "error" and empty["value"] is None
    assert "empty questions" in empty["error"]
    assert judge.calls["ragas_questions"] == 5


def test_answer_relevancy_strictness_is_the_number_of_questions(db_path: Path) -> None:
    five = [f"Question {i}?" for i in range(5)]
    script = Script(ragas_questions=lambda d: {"questions": [
        {"question": q, "noncommittal": 0} for q in five[:d["n"]]]})
    (got,), _ = run(db_path, script, [RagasAnswerRelevancy(strictness=5)],
                    [dict(query=Q, answer=ANSWER)])
    assert script.data("ragas_questions") == [{"answer": ANSWER, "n": 5}]
    assert got["ragas_answer_relevancy"]["details"]["generated_questions"] == five


def test_answer_relevancy_rejects_a_reply_with_the_wrong_number_of_questions(
        db_path: Path) -> None:
    script = Script(ragas_questions={"questions": [{"question": "Only one?",
                                                    "noncommittal": 0}]})
    (got,), (judge, _) = run(db_path, script, ["ragas_answer_relevancy"],
                             [dict(query=Q, answer=ANSWER)])
    s = got["ragas_answer_relevancy"]
    assert s["status"] == "error" and "3 entries" in s["error"]
    assert judge.total_calls == 2  # one repair attempt, then the error


# -- the real local model ----------------------------------------------------------------------
# cos(Q, Q) = 1; cos(Q, "Paris is the capital of France.") = -0.0058257, and
# cos(ANSWER_1, Q) = 0.7168740: sentence-transformers' numbers (tests/test_embeddings.py).
ANSWER_1 = "The Cargo ships with a 750 Wh battery."
PARIS = "Paris is the capital of France."


def test_local_model_similarity_and_relevancy(db_path: Path) -> None:
    script = Script(ragas_questions={"questions": [{"question": Q, "noncommittal": 0},
                                                   {"question": PARIS, "noncommittal": 0}]})
    records = [
        dict(query=Q, answer=ANSWER_1, ground_truths=[Q]),
        dict(query=Q, answer="The battery of the Cargo e-bike holds 750 watt-hours.",
             ground_truths=["The Cargo bike has a 750 Wh battery."]),
        dict(query=Q, answer="Our office is closed on public holidays.",
             ground_truths=["The Cargo bike has a 750 Wh battery."]),
    ]
    got, (_, emb) = run(db_path, script,
                        ["answer_similarity", RagasAnswerRelevancy(strictness=2)],
                        records, embedder="local")
    assert emb.requests == []  # nothing went to the scripted server: the local model did it
    sims = [g["answer_similarity"]["value"] for g in got]
    assert sims[0] == pytest.approx(0.7168740, abs=2e-6)
    assert sims[1] > 0.7 > 0.2 > sims[2]  # paraphrase vs unrelated
    assert got[0]["answer_similarity"]["details"]["embedding_model"] == "local:all-MiniLM-L6-v2"
    # (cos(Q, Q) + cos(Q, PARIS)) / 2; a negative cosine is kept as it is (Ragas too)
    rel = got[0]["ragas_answer_relevancy"]
    assert rel["value"] == pytest.approx((1 + -0.0058257) / 2, abs=2e-6)
    assert rel["details"]["cosines"][1] < 0
    n = rows(db_path, "SELECT COUNT(*) AS n FROM embedding_cache WHERE model=?",
             "local:all-MiniLM-L6-v2")[0]["n"]
    # Q (answer_similarity's reference, relevancy's query and a generated question), ANSWER_1,
    # PARIS, two more answers and their shared reference: each embedded once
    assert n == 6


def test_answer_similarity_binary_threshold(db_path: Path) -> None:
    from tracescore.metrics.ragas import AnswerSimilarity

    records = [dict(query=Q, answer=ANSWER, ground_truths=[GT0]),   # cosine 0.6
               dict(query=Q, answer=ANSWER, ground_truths=[GT1])]   # cosine 1.0
    got, _ = run(db_path, Script(), [AnswerSimilarity(threshold=0.7, binary=True)], records)
    assert [g["answer_similarity"]["value"] for g in got] == [0.0, 1.0]
    assert [g["answer_similarity"]["label"] for g in got] == ["fail", "pass"]
    assert "cosine 0.600 < 0.7 → 0" in got[0]["answer_similarity"]["explanation"]
    with pytest.raises(ValueError, match="needs a threshold"):
        AnswerSimilarity(threshold=None, binary=True)


# -- ragas_answer_correctness weights and edge cases ---------------------------------------------
@pytest.mark.parametrize("weights, expected, best", [
    # per reference (F1, similarity) = (2/3, 0.6) and (0.8, 1.0)
    ((0.75, 0.25), 0.85, 2),                    # max(0.5 + 0.15, 0.6 + 0.25)
    ((3, 1), 0.85, 2),                          # weights are normalised: same as above
    ((0.5, 0.5), 0.9, 2),                       # max(1/3 + 0.3, 0.4 + 0.5)
    ((0, 1), 1.0, 2),                           # similarity only: max(0.6, 1.0)
    ((1, 0), 0.8, 2),                           # F1 only = Valor's answer_correctness
])
def test_answer_correctness_weights(db_path: Path, weights: tuple[float, float],
                                    expected: float, best: int) -> None:
    script = Script(extract=scripted_extract, statements=scripted_statements)
    metric = RagasAnswerCorrectness(weights=weights)
    embedder = None if weights[1] == 0 else "scripted"  # F1 alone needs no embedder
    (got,), (_, emb) = run(db_path, script, [metric], [RECORD], embedder=embedder)
    s = got["ragas_answer_correctness"]
    assert s["value"] == pytest.approx(expected)
    assert f"reference #{best}" in s["explanation"]
    if embedder is None:
        assert emb.requests == [] and "embedding_model" not in s["details"]


def test_answer_correctness_with_no_statements_on_either_side(db_path: Path) -> None:
    # Neither text has statements: Ragas counts F1 = 1 (Valor: 0); similarity 0.8
    script = Script(extract=scripted_extract)
    (got,), (judge, _) = run(db_path, script, ["ragas_answer_correctness", "answer_correctness"],
                             [dict(query=Q, answer="Hi there!", ground_truths=["Hello!"])])
    assert got["ragas_answer_correctness"]["value"] == pytest.approx(0.75 * 1 + 0.25 * 0.8)
    assert got["answer_correctness"]["value"] == 0.0
    assert dict(judge.calls) == {"extract": 1}  # no statements: no verdict call


@pytest.mark.parametrize("weights, error", [
    ((1,), "two numbers"), ((-1, 1), ">= 0"), ((0, 0), "at least one"),
    ((math.nan, 1), "finite"),
])
def test_answer_correctness_rejects_bad_weights(weights: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        RagasAnswerCorrectness(weights=weights)


def test_which_metrics_need_an_embedder() -> None:
    needs = {name for name in RAGAS if getattr(registry.get(name), "needs_embedder", False)}
    assert needs == {"answer_similarity", "ragas_answer_relevancy", "ragas_answer_correctness"}
    assert RagasAnswerCorrectness(weights=(1, 0)).needs_embedder is False


# -- context_entity_recall edge cases ------------------------------------------------------------
def test_entity_recall_without_reference_entities_is_an_error(db_path: Path) -> None:
    script = Script(ragas_entities=lambda d: {"texts": {
        k: {"entities": [] if k.startswith("reference") else ["Cargo"]} for k in d["texts"]}})
    (got,), _ = run(db_path, script, ["context_entity_recall"],
                    [dict(query=Q, answer=ANSWER, contexts=["The Cargo."],
                          ground_truths=["Yes, it does."])])
    s = got["context_entity_recall"]
    assert s["status"] == "error" and "no entities" in s["error"]


def test_entity_extraction_is_cached_per_text(db_path: Path) -> None:
    script = Script(ragas_entities=scripted_entities)
    with ScriptedJudgeServer(script) as judge:
        ts = start(db_path, judge, ["context_entity_recall"], None)
        try:
            first = ts.log_record(query=Q, contexts=CONTEXTS, ground_truths=[GT0])
            assert ts.flush(30)
            second = ts.log_record(query=Q, contexts=CONTEXTS[:2], ground_truths=[GT1])
            assert ts.flush(30)
        finally:
            ts.shutdown(10)
    assert stored(db_path, first.record_id)["context_entity_recall"]["value"] == \
        pytest.approx(2 / 3)
    assert stored(db_path, second.record_id)["context_entity_recall"]["value"] == \
        pytest.approx(2 / 4)
    asked = [sorted(d["texts"].values()) for d in script.data("ragas_entities")]
    # the first record sends its 4 contexts (one without entities included) and GT0; the
    # second only GT1: its contexts were read before
    assert asked == [sorted([GT0, *CONTEXTS]), [GT1]]


# -- ragas_context_relevancy edge case ----------------------------------------------------------
def test_context_relevancy_with_no_sentences_is_an_error(db_path: Path) -> None:
    (got,), (judge, _) = run(db_path, Script(), ["ragas_context_relevancy"],
                             [dict(query=Q, contexts=["   ", "\n"])])
    s = got["ragas_context_relevancy"]
    assert s["status"] == "error" and "no sentences" in s["error"]
    assert judge.total_calls == 0


# -- faithfulness / precision / recall: where the flavours differ --------------------------------
def test_faithfulness_without_claims_differs(db_path: Path) -> None:
    (got,), _ = run(db_path, Script(extract=scripted_extract),
                    ["faithfulness", "ragas_faithfulness"],
                    [dict(query=Q, answer="Hmm.", contexts=CONTEXTS)])
    assert got["faithfulness"]["value"] == 1.0  # no claims → 1 (tracescore/Valor)
    s = got["ragas_faithfulness"]
    assert s["status"] == "error" and "no claims" in s["error"]  # Ragas: NaN


def test_context_recall_without_reference_statements_is_an_error_in_both(db_path: Path) -> None:
    (got,), _ = run(db_path, Script(extract=scripted_extract),
                    ["context_recall", "ragas_context_recall"],
                    [dict(query=Q, contexts=CONTEXTS, ground_truths=["Yes."])])
    assert got["context_recall"]["status"] == got["ragas_context_recall"]["status"] == "error"


@pytest.mark.parametrize("useful, valor, ragas", [
    ([False, True, True, False], (1 / 2 + 2 / 3) / 2, (1 / 2 + 2 / 3) / (2 + 1e-10)),
    ([True, False, True], (1 / 1 + 2 / 3) / 2, (1 / 1 + 2 / 3) / (2 + 1e-10)),
    ([True], 1.0, 1 / (1 + 1e-10)),
    ([False, False], 0.0, 0.0),  # Valor: 0 by rule; Ragas: 0 / 1e-10 = 0
    ([], 0.0, 0.0),
])
def test_context_precision_both_definitions(useful: list[bool], valor: float,
                                            ragas: float) -> None:
    assert precision_at_k(useful) == valor
    assert precision_at_k(useful, 1e-10) == ragas


# -- helpers ---------------------------------------------------------------------------------------
def test_formula_helpers() -> None:
    assert statement_f1(2, 1, 1) == pytest.approx(2 / 3)
    assert statement_f1(0, 3, 2) == 0.0
    assert cosine([3, 4], [6, 8]) == pytest.approx(1.0)
    assert cosine([1, 0], [0, 2]) == 0.0
    assert cosine([1, 0], [-1, 0]) == -1.0
    with pytest.raises(ValueError, match="zero vector"):
        cosine([0, 0], [1, 0])
    assert normalize_entity("The Eiffel Tower.") == normalize_entity("eiffel  tower") == \
        "eiffel tower"
    assert normalize_entity("“Paris”") == "paris"
    assert normalize_entity("21,196 kilometers") == "21,196 kilometers"
    assert normalize_entity("ＡＤ 70") == "ad 70"  # NFKC folds full-width forms


def test_registered_with_snake_case_names_and_descriptions() -> None:
    assert set(RAGAS) == {"ragas_faithfulness", "ragas_context_precision",
                          "ragas_context_recall", "ragas_answer_relevancy", "answer_similarity",
                          "ragas_answer_correctness", "context_entity_recall",
                          "ragas_context_relevancy"}
    for name in RAGAS:
        m = registry.get(name)
        assert m.name == name and re.fullmatch(r"[a-z][a-z0-9_]*", name)
        assert m.description and m.version
    assert set(RAGAS) <= set(tracescore.available_metrics())


def test_docs_have_a_section_per_ragas_metric() -> None:
    doc = DOCS.read_text(encoding="utf-8")
    headings = set(re.findall(r"^## (\S+)\s*$", doc, flags=re.MULTILINE))
    for name in RAGAS:
        assert name in headings, f"docs/metrics.md lacks '## {name}'"
        section = doc.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for word in ("Suite", "Inputs", "Formula", "Edge cases", "Threshold", "Judge calls"):
            assert f"**{word}" in section, f"'## {name}' lacks **{word}**"
        assert "Ragas" in section
