"""Issue 33 item 2: the judge budget's richer proxy, end to end with the scripted judge server
over real HTTP (SQLite; the ``db`` tests on PostgreSQL too) — the judge's cached verdict for
a repeated record (judged free), embedding features with the local MiniLM model, a learned
combination when a feature tracks the judge, the overlap proxy with nothing; and the
combination's fit against statsmodels."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import numpy as np
import pytest
from helpers import rows

from tracescore.budget.combine import fit_groups
from tracescore.budget.features import local_features
from tracescore.budget.proxy import overlap_proxy
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.store import open_store
from tracescore.testing import in_memory
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "Warranty lasts two years."]
GOOD = "The Cargo ships with a 750 Wh battery."
FORCE = {"tracescore.force_sample": True}


def _decisions(db: str) -> dict[str, dict[str, Any]]:
    return {d["record_id"]: d for d in rows(db, "SELECT * FROM judge_decisions")}


def _scores(db: str) -> dict[str, dict[str, Any]]:
    return {s["record_id"]: s for s in rows(db, "SELECT * FROM scores")}


def _records(db: str) -> dict[str, Any]:
    store = open_store(db)
    try:
        ids = [r["record_id"] for r in rows(db, "SELECT record_id FROM records")]
        return store.load_records(ids)
    finally:
        store.close()


def test_repeated_record_gets_the_cached_verdict_and_is_judged_free(db):
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts, _ = in_memory(db, metrics=["faithfulness"],
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget="1/day")
        try:
            # judged first (forced: a rule, π = 1), so its steps are in the judge's cache; it
            # spends the day's one unit
            ts.log_record(query="What battery?", contexts=CONTEXTS, answer=GOOD, metadata=FORCE)
            assert ts.flush(60)
            calls = srv.total_calls
            assert calls > 0
            # the same question, contexts and answer again: an exact repeat
            ts.log_record(query="What battery?", contexts=CONTEXTS, answer=GOOD)
            assert ts.flush(60)
            assert srv.total_calls == calls  # judged from the cache: no call
            # another question: not a repeat (the statements step judges the question too);
            # the budget is spent, so it is not judged, and its cache probe calls nobody
            ts.log_record(query="How long is the warranty?", contexts=CONTEXTS,
                          answer="The warranty lasts two years, or ten.")
            assert ts.flush(60)
            calls_after = srv.total_calls
            counts = dict(ts.worker.judging.counts)
        finally:
            ts.shutdown()
    decisions, scores, records = _decisions(db), _scores(db), _records(db)
    assert len(decisions) == 3
    forced = [d for d in decisions.values() if d["reason"] == "forced"]
    cached = [d for d in decisions.values() if d["reason"] == "cached"]
    other = [d for d in decisions.values() if d["reason"] == "budget spent"]
    assert len(forced) == len(cached) == len(other) == 1
    first, again, fresh = forced[0], cached[0], other[0]
    # the repeat's proxy is the judge's earlier verdict, and it is judged with π = 1
    assert scores[first["record_id"]]["status"] == "ok"
    assert again["proxy"] == scores[first["record_id"]]["value"]
    assert (again["pi"], again["selected"]) == (1.0, 1)
    assert scores[again["record_id"]]["status"] == "ok"
    assert scores[again["record_id"]]["value"] == again["proxy"]
    assert json.loads(scores[again["record_id"]]["details"])["judge_calls"] == 0
    # judged free, after the budget was spent: counted seen, not spent
    [usage] = rows(db, "SELECT * FROM judge_budget")
    assert (usage["seen"], usage["spent"], usage["budget"]) == (3, 1, 1.0)
    # with no cached verdict and nothing learned yet: the overlap proxy
    assert fresh["proxy"] == pytest.approx(overlap_proxy(records[fresh["record_id"]]))
    assert (fresh["selected"], fresh["reason"]) == (0, "budget spent")
    assert calls_after == calls
    details = json.loads(scores[fresh["record_id"]]["details"])
    assert details["judge_proxy_kind"] == "overlap"
    assert details["judge_proxy"] == pytest.approx(fresh["proxy"])
    assert counts["proxy_cache"] == 1 and counts["proxy_overlap"] == 2
    assert counts["proxy_fit"] == 0


def _cos(u: Any, v: Any) -> float:
    u, v = np.asarray(u, dtype=float), np.asarray(v, dtype=float)
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def test_with_the_local_embedder_the_proxy_has_embedding_features(tmp_path):
    pytest.importorskip("tokenizers")
    from tracescore.embeddings import MiniLMEmbedder

    db = str(tmp_path / "ts.db")
    answers = [GOOD, "Bananas are yellow and grow in bunches.", "The warranty is two years."]
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts, _ = in_memory(db, metrics=["faithfulness"], embedder="local",
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget="100/day")
        try:
            for i, a in enumerate(answers):
                ts.log_record(query=f"What about the Cargo, {i}?", contexts=CONTEXTS, answer=a)
            assert ts.flush(120)
            model = ts.worker.judging.proxies
            assert model.embedder is ts.embedder
        finally:
            ts.shutdown()
    records = _records(db)
    assert len(records) == 3 and len(_decisions(db)) == 3
    direct = MiniLMEmbedder()
    for rid, rec in records.items():
        feats, overlap = model._memo[rid]
        vecs = asyncio.run(direct.embed([rec.answer, *CONTEXTS, rec.query]))
        assert feats["emb_answer_contexts"] == pytest.approx(
            max(_cos(vecs[0], vecs[1]), _cos(vecs[0], vecs[2])), abs=1e-5)
        assert feats["emb_query_answer"] == pytest.approx(_cos(vecs[0], vecs[3]), abs=1e-5)
        assert feats["ctx_support"] == pytest.approx(overlap_proxy(rec))
        assert overlap == pytest.approx(overlap_proxy(rec))
    # the supported answer is closer to its contexts than the unrelated one
    by_answer = {rec.answer: model._memo[rid][0] for rid, rec in records.items()}
    assert by_answer[GOOD]["emb_answer_contexts"] > \
        by_answer[answers[1]]["emb_answer_contexts"] + 0.2
    # the vectors are in the embedding cache (a refit reads them again for free)
    cached = rows(db, "SELECT count(*) AS n FROM embedding_cache")[0]["n"]
    assert cached >= len(set(answers)) + len(CONTEXTS)


PARAPHRASES = ["Its power pack stores seven hundred fifty watt hours.",
               "Its pack holds seven hundred fifty watt hours of energy.",
               "Cover for defects runs for twenty four months."]
UNRELATED = ["Bananas grow in tropical climates.", "Penguins live mostly in southern oceans.",
             "Jazz began in New Orleans."]


def _paraphrase_responder(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    """The lexical judge, except that a statement is supported iff it paraphrases a context
    (no word in common with them: the lexical features see nothing)."""
    out = lexical_responder(step, data, request)
    if step == "statements":
        for row, s in zip(out["answer_statements"], data["answer_statements"]):
            row["supported"] = "yes" if ("seven hundred" in s or "twenty four" in s) else "no"
    return out


def test_with_the_local_embedder_the_proxy_learns_what_words_miss(tmp_path):
    pytest.importorskip("tokenizers")
    db = str(tmp_path / "ts.db")
    answers = PARAPHRASES + UNRELATED
    with ScriptedJudgeServer(_paraphrase_responder) as srv:
        ts, _ = in_memory(db, metrics=["faithfulness"], embedder="local",
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget="1000/day")
        try:
            ts.worker.judging.proxies.refit_s = 0.0
            for i in range(48):  # judged (forced) to learn from
                ts.log_record(query=f"Tell me about the Cargo, {i}.", contexts=CONTEXTS,
                              answer=answers[i % len(answers)], metadata=FORCE)
            assert ts.flush(180)
            # (a forced record decided once 40 others are judged uses the fit too: count
            # from here, when the learning records are all decided)
            before = dict(ts.worker.judging.counts)
            for batch in (range(48, 49), range(49, 60)):
                for i in batch:
                    ts.log_record(query=f"Tell me about the Cargo, {i}.", contexts=CONTEXTS,
                                  answer=answers[i % len(answers)])
                assert ts.flush(180)
            counts = {k: v - before.get(k, 0) for k, v in ts.worker.judging.counts.items()}
        finally:
            ts.shutdown()
    decisions, records = _decisions(db), _records(db)
    learned = [d for d in decisions.values() if d["reason"] != "forced"]
    assert len(learned) == 12 and counts["proxy_fit"] == 12
    for d in learned:
        assert local_features(records[d["record_id"]])["ctx_support"] == 0.0
    good = [d["proxy"] for d in learned if records[d["record_id"]].answer in PARAPHRASES]
    bad = [d["proxy"] for d in learned if records[d["record_id"]].answer in UNRELATED]
    assert len(good) == len(bad) == 6
    assert min(good) > max(bad) + 0.5


def _marked_responder(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    """The lexical judge, except that a statement is supported iff it says "verified": a
    verdict the words shared with the contexts cannot tell (both kinds of answer share the
    same words with them)."""
    out = lexical_responder(step, data, request)
    if step == "statements":
        for row, s in zip(out["answer_statements"], data["answer_statements"]):
            row["supported"] = "yes" if "verified" in s.lower() else "no"
    return out


def _marked_vectors(text: str) -> list[float]:
    t = text.lower()
    return [1.0 if ("verified" in t or "warranty" in t) else 0.0,
            1.0 if "unchecked" in t else 0.0, 0.1]


def test_a_feature_that_tracks_the_judge_is_learned(db):
    from tracescore.embeddings import OpenAIEmbedder
    from tracescore.testing.embeddings import ScriptedEmbeddingServer

    with ScriptedJudgeServer(_marked_responder) as srv, \
            ScriptedEmbeddingServer(_marked_vectors) as emb:
        embedder = OpenAIEmbedder("marked", base_url=emb.base_url, api_key="test")
        ts, _ = in_memory(db, metrics=["faithfulness"], embedder=embedder,
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget="1000/day")
        try:
            ts.worker.judging.proxies.refit_s = 0.0  # fit again at every decision
            kinds = ("verified", "unchecked")
            # 48 judged records (forced: π = 1) to learn from
            for i in range(48):
                ts.log_record(query=f"What battery, {i}?", contexts=CONTEXTS,
                              answer=f"The Cargo has a 750 Wh battery, {kinds[i % 2]} {i}.",
                              metadata=FORCE)
            assert ts.flush(120)
            before = dict(ts.worker.judging.counts)  # (see the test above)
            # the first decision fits; decisions made while a fit runs use the last one
            for batch in (range(48, 49), range(49, 60)):
                for i in batch:
                    ts.log_record(query=f"What battery, {i}?", contexts=CONTEXTS,
                                  answer=f"The Cargo has a 750 Wh battery, {kinds[i % 2]} {i}.")
                assert ts.flush(120)
            counts = {k: v - before.get(k, 0) for k, v in ts.worker.judging.counts.items()}
        finally:
            ts.shutdown()
    decisions, scores, records = _decisions(db), _scores(db), _records(db)
    learned = [d for d in decisions.values() if d["reason"] != "forced"]
    assert len(learned) == 12 and counts["proxy_fit"] == 12
    for d in learned:
        rec = records[d["record_id"]]
        # the lexical features cannot tell the kinds apart; the learned proxy can
        assert local_features(rec)["ctx_support"] == pytest.approx(
            local_features(records[learned[0]["record_id"]])["ctx_support"])
        want = 1.0 if "verified" in rec.answer else 0.0
        assert d["proxy"] == pytest.approx(want, abs=0.05)
        s = scores[d["record_id"]]
        if d["selected"]:
            assert s["value"] == want
        else:
            assert json.loads(s["details"])["judge_proxy_kind"] == "fit"


def _samples(rng: np.random.Generator, n: int, informative: bool) -> list[Any]:
    q = rng.beta(4, 1.5, n)
    y = np.clip(q + rng.normal(0, 0.05, n), 0, 1)
    overlap = np.clip(q + rng.normal(0, 0.3, n), 0, 1)
    emb = q + rng.normal(0, 0.05, n) if informative else rng.normal(0.5, 0.2, n)
    pi = rng.uniform(0.05, 1.0, n)
    return [({"ctx_support": float(o), "emb_answer_contexts": float(e)}, float(o), float(p),
             float(v)) for o, e, p, v in zip(overlap, emb, pi, y)]


def test_the_fit_is_weighted_least_squares_and_leave_one_out(tmp_path):
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(7)
    samples = _samples(rng, 300, informative=True)
    [(keys, fit)] = fit_groups(samples, ridge=0.0).items()
    assert keys == ("ctx_support", "emb_answer_contexts")
    X = sm.add_constant(np.array([[s[0][k] for k in keys] for s in samples]))
    y = np.array([s[3] for s in samples])
    w = np.minimum(1 / np.array([s[2] for s in samples]), 50.0)
    ref = sm.WLS(y, X, weights=w).fit()
    assert np.allclose(fit.beta, ref.params, atol=1e-9)
    # leave-one-out error, by refitting without each record
    sse = 0.0
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        b = sm.WLS(y[keep], X[keep], weights=w[keep]).fit().params
        sse += w[i] * (y[i] - X[i] @ b) ** 2
    assert fit.loo_rmse == pytest.approx(math.sqrt(sse / w.sum()), rel=1e-9)
    assert fit.loo_rmse < fit.base_rmse
    assert 0.0 <= fit.predict({"ctx_support": 2.0, "emb_answer_contexts": 2.0}) <= 1.0


def test_a_feature_that_does_not_help_is_not_used():
    rng = np.random.default_rng(8)
    assert fit_groups(_samples(rng, 300, informative=False)) == {}
    # too few judged records: no fit yet
    assert fit_groups(_samples(rng, 20, informative=True)) == {}
