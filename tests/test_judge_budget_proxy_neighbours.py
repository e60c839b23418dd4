"""Issue 33 item 2: the judge's past verdicts on *similar* records as a feature of the judge
budget's proxy (tracescore/budget/neighbours.py) — end to end with the scripted judge server
and the scripted embedding server over real HTTP (SQLite; the ``db`` tests on PostgreSQL
too): learned when verdicts follow topics the other features cannot see, not used when they
do not; and no leakage (a record is never its own neighbour, a training record's neighbours
were judged before it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import rows

from tracescore.budget.combine import fit_groups
from tracescore.budget.features import local_features
from tracescore.budget.neighbours import KEYS, Index, K, means, ordered_means, unit_vector
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.store import open_store
from tracescore.testing import in_memory
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "Warranty lasts two years."]
FORCE = {"tracescore.force_sample": True}
TOPICS = ("alpha", "beta", "gamma", "delta")
GOOD_TOPICS = ("alpha", "gamma")


def _topic_vectors(text: str) -> list[float]:
    """One axis per topic word, and a constant one: texts of a topic are alike, and every
    answer is as close to the contexts (which name no topic) and to its own question as any
    other answer."""
    t = text.lower()
    return [*(1.0 if w in t else 0.0 for w in TOPICS), 0.1]


def _topic_responder(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    """The lexical judge, except that a statement is supported iff its topic is a good one."""
    out = lexical_responder(step, data, request)
    if step == "statements":
        for row, s in zip(out["answer_statements"], data["answer_statements"]):
            row["supported"] = "yes" if any(w in s.lower() for w in GOOD_TOPICS) else "no"
    return out


def _marker_responder(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    """The lexical judge, except that a statement is supported iff it says "verified" (which
    the topic vectors do not see): verdicts do not follow topics."""
    out = lexical_responder(step, data, request)
    if step == "statements":
        for row, s in zip(out["answer_statements"], data["answer_statements"]):
            row["supported"] = "yes" if "verified" in s.lower() else "no"
    return out


def _run(db: str, responder: Any, answer: Any, learn: int = 64, later: int = 12,
         views_size: int | None = None) -> tuple[Any, dict[str, int]]:
    from tracescore.embeddings import OpenAIEmbedder
    from tracescore.testing.embeddings import ScriptedEmbeddingServer

    with ScriptedJudgeServer(responder) as srv, \
            ScriptedEmbeddingServer(_topic_vectors) as emb:
        embedder = OpenAIEmbedder("topics", base_url=emb.base_url, api_key="test")
        ts, _ = in_memory(db, metrics=["faithfulness"], embedder=embedder,
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget="1000/day")
        try:
            model = ts.worker.judging.proxies
            model.refit_s = 0.0  # fit again at every decision
            if views_size is not None:
                model.views_size = views_size
            for i in range(learn):  # judged (forced: π = 1) to learn from
                ts.log_record(query=f"What about the {TOPICS[i % 4]} model, {i}?",
                              contexts=CONTEXTS, answer=answer(i), metadata=FORCE)
                if i % 16 == 15:
                    assert ts.flush(180)  # (decided in order: the ordered neighbours)
            assert ts.flush(180)
            before = dict(ts.worker.judging.counts)
            # the first decision fits; decisions made while a fit runs use the last one
            for batch in (range(learn, learn + 1), range(learn + 1, learn + later)):
                for i in batch:
                    ts.log_record(query=f"What about the {TOPICS[i % 4]} model, {i}?",
                                  contexts=CONTEXTS, answer=answer(i))
                assert ts.flush(180)
            counts = {k: v - before.get(k, 0) for k, v in ts.worker.judging.counts.items()}
        finally:
            ts.shutdown()
    return model, counts


def _decided(db: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    store = open_store(db)
    try:
        ids = [r["record_id"] for r in rows(db, "SELECT record_id FROM records")]
        records = store.load_records(ids)
    finally:
        store.close()
    learned = [d for d in rows(db, "SELECT * FROM judge_decisions") if d["reason"] != "forced"]
    return learned, records


def test_verdicts_that_follow_topics_are_learned_from_the_neighbours(db):
    # (few vectors remembered: a refit reads most judged records' vectors again, from the
    # embedding cache)
    model, counts = _run(db, _topic_responder,
                         lambda i: f"The Cargo has a 750 Wh battery, {TOPICS[i % 4]} {i}.",
                         views_size=8)
    learned, records = _decided(db)
    assert len(learned) == 12 and counts["proxy_fit"] == 12
    # the lexical features are the same for every record: they cannot tell the topics apart
    support = {local_features(records[d["record_id"]])["ctx_support"] for d in learned}
    assert len(support) == 1
    # the kept fit uses a neighbour feature
    _, fits, index = model._fits["faithfulness"]
    [fit] = fits.values()
    assert set(fit.keys) & set(KEYS)
    assert fit.loo_rmse < 0.5 * fit.base_rmse
    for d in learned:
        rec = records[d["record_id"]]
        want = 1.0 if any(w in rec.answer for w in GOOD_TOPICS) else 0.0
        assert d["proxy"] == pytest.approx(want, abs=0.1)
    assert len(model._views) <= 8
    # the neighbours are the judged records the fit read; no later record is among them
    assert set(index.ids[KEYS[1]]) <= {d for d in records} - {d["record_id"] for d in learned
                                                                if not d["selected"]}


def test_neighbours_are_not_used_when_verdicts_do_not_follow_topics(db):
    marks = np.random.default_rng(11).random(100) < 0.5  # (no order a neighbour could see)
    model, counts = _run(
        db, _marker_responder,
        lambda i: f"The Cargo has a 750 Wh battery, {TOPICS[i % 4]} "
                  f"{'verified' if marks[i] else 'unchecked'} {i}.")
    learned, _ = _decided(db)
    assert len(learned) == 12
    _, fits, index = model._fits["faithfulness"]
    assert index.ids  # the neighbour features were computed ...
    for fit in fits.values():  # ... and not kept: they do not beat the fit without them
        assert not set(fit.keys) & set(KEYS)
    # (nothing else tracks the judge either: the overlap proxy)
    assert fits == {} and counts["proxy_overlap"] == 12 and counts["proxy_fit"] == 0


def test_a_record_is_not_its_own_neighbour():
    rng = np.random.default_rng(3)
    V = rng.normal(size=(30, 6))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    y = rng.random(30)
    # training: the neighbours of row i are the K nearest rows judged before it, weighted by
    # their similarity (brute force here)
    got = ordered_means(V, y, k=K, min_prior=5)
    assert np.isnan(got[:5]).all()
    for i in range(5, 30):
        sims = V[:i] @ V[i]
        top = np.argsort(-sims)[:K]
        w = np.clip(sims[top], 0, None)
        want = (w * y[top]).sum() / w.sum() if w.sum() > 0 else y[top].mean()
        assert got[i] == pytest.approx(want, rel=1e-12)
    # a record's own verdict never enters its feature, whatever it is
    y2 = y.copy()
    y2[17] = 1.0 - y[17]
    assert ordered_means(V, y2)[17] == pytest.approx(got[17])
    # at decision time: a record already in the index (decided again) is left out by id
    ids = [f"r{i}" for i in range(30)]
    index = Index.build([(rid, {KEYS[1]: v}, float(t)) for rid, v, t in zip(ids, V, y)])
    own = index.features("r17", {KEYS[1]: V[17]})[KEYS[1]]
    others = np.arange(30) != 17
    assert own == pytest.approx(float(means(V[others], y[others], V[17][None])[0]))
    assert own != pytest.approx(float(means(V, y, V[17][None])[0]))
    # a new record sees every indexed one
    assert index.features("new", {KEYS[1]: V[17]})[KEYS[1]] == \
        pytest.approx(float(means(V, y, V[17][None])[0]))


def test_unit_vector():
    u = unit_vector([3.0, 0.0], [0.0, 2.0])
    assert np.allclose(u, [2 ** -0.5, 2 ** -0.5])
    assert unit_vector([0.0, 0.0]) is None and unit_vector([1.0], [1.0, 0.0]) is None


def _samples(rng: np.random.Generator, n: int, by_topic: bool, lexical: bool) -> list[Any]:
    topic = rng.integers(0, 20, n)
    level = rng.beta(4, 1.5, 20)
    q = level[topic] if by_topic else rng.beta(4, 1.5, n)
    y = np.clip(q + rng.normal(0, 0.05, n), 0, 1)
    centres = rng.normal(size=(20, 8))
    V = centres[topic] + rng.normal(0, 0.2, (n, 8))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    nn = ordered_means(V, y)
    overlap = np.clip((q if lexical else rng.random(n)) + rng.normal(0, 0.3, n), 0, 1)
    emb = q + rng.normal(0, 0.05, n) if lexical else rng.normal(0.5, 0.2, n)
    return [({"ctx_support": float(o), "emb_answer_contexts": float(e),
              **({KEYS[1]: float(m)} if np.isfinite(m) else {})}, float(o), 1.0, float(t))
            for o, e, m, t in zip(overlap, emb, nn, y)]


def test_the_fit_keeps_a_neighbour_feature_only_when_it_helps():
    rng = np.random.default_rng(5)
    key = ("ctx_support", "emb_answer_contexts", KEYS[1])
    # verdicts by topic, other features blind: the neighbours' fit is kept
    fit = fit_groups(_samples(rng, 400, by_topic=True, lexical=False))[key]
    assert KEYS[1] in fit.keys and fit.loo_rmse < 0.7 * fit.base_rmse
    # verdicts not by topic, the embedding similarity tracks the judge: the fit without the
    # neighbours is that feature set's
    fit = fit_groups(_samples(rng, 400, by_topic=False, lexical=True))[key]
    assert fit.keys == ("ctx_support", "emb_answer_contexts")
    # nothing tracks the judge: no fit at all
    assert key not in fit_groups(_samples(rng, 400, by_topic=False, lexical=False))
