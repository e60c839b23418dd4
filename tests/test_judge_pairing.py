"""``extract`` and ``contexts`` in one judge call (tracescore/judge/pairing.py), end to end.

Real pipelines, the real ``openai`` client, :class:`ScriptedJudgeServer` on 127.0.0.1. What is
checked: the paired call is made when a record needs both steps and neither is cached, with
each step's own task, data and schema; each part is cached under the single step's key, so a
metric added later, or a run with one of the steps cached, reuses it; an invalid part is asked
again alone with the single step's prompt; the calls, rows and tokens add up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, stored_scores
from judge_pairs import PAIR, ScriptedJudgeServer

from tracescore._internal.json_server import Fault
from tracescore.judge import prompts as P
from tracescore.judge import schemas as SC
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.judge.session import content_key
from tracescore.testing.judge import lexical_responder, parse_prompt

MODEL = "scripted-judge"
Q = "What battery does the Cargo have?"
CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "The Commuter has a 500 Wh battery.",
            "Warranty lasts two years."]
ANSWER = "The Cargo ships with a 750 Wh battery. It is heavy."
GT = "The Cargo has a 750 Wh battery."
RECORD = dict(query=Q, answer=ANSWER, contexts=CONTEXTS, ground_truths=[GT])
#: statement metrics (extract, statements) and context metrics (contexts)
STATEMENT_METRICS = ["faithfulness", "answer_correctness"]
CONTEXT_METRICS = ["context_relevance", "hallucination"]


def start(make_ts: Any, srv: Any, metrics: list[str], **kw: Any) -> Any:
    ts, _ = make_ts(metrics=metrics, judge=OpenAIJudge(MODEL, base_url=srv.base_url),
                    judge_canary=False, **kw)
    return ts


def score(make_ts: Any, srv: Any, metrics: list[str], db: Path,
          record: dict[str, Any] = RECORD) -> dict[str, dict[str, Any]]:
    """One pipeline on ``db``: log ``record``, flush, shut down; the record's stored scores."""
    ts = start(make_ts, srv, metrics, db=db)
    rec = ts.log_record(**record)
    assert ts.flush(30)
    ts.shutdown()
    return stored_scores(db, rec.record_id)


def outcome(scores: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {k: (r["status"], r["value"], r["explanation"]) for k, r in scores.items()}


def data_of(request: dict[str, Any]) -> Any:
    return json.loads(request["messages"][1]["content"].split("\n\nDATA\n", 1)[1])


def schema_of(request: dict[str, Any]) -> Any:
    return request["response_format"]["json_schema"]["schema"]


def in_pair(request: dict[str, Any]) -> bool:
    return parse_prompt(request["messages"])[0].startswith(PAIR)


def test_both_steps_needed_share_one_call_with_each_steps_own_prompt(make_ts, tmp_path):
    """Alone, each metric group asks its single step; together, one paired call carries
    exactly the two single steps' data and schemas, and the scores are the same."""
    singles: dict[str, dict[str, Any]] = {}
    with ScriptedJudgeServer(lexical_responder) as srv:
        alone = {**score(make_ts, srv, STATEMENT_METRICS, tmp_path / "a.db"),
                 **score(make_ts, srv, CONTEXT_METRICS, tmp_path / "b.db")}
        assert dict(srv.calls) == {"extract": 1, "statements": 1, "contexts": 1}
        for req in srv.requests:
            singles[parse_prompt(req["messages"])[0]] = req
        srv.calls.clear()
        srv.requests.clear()
        together = score(make_ts, srv, STATEMENT_METRICS + CONTEXT_METRICS, tmp_path / "c.db")
        assert dict(srv.calls) == {PAIR: 1, "statements": 1}
        [pair] = [r for r in srv.requests if in_pair(r)]
    assert outcome(together) == outcome(alone)
    assert data_of(pair) == {"extract": data_of(singles["extract"]),
                             "contexts": data_of(singles["contexts"])}
    # each part: the single step's task and reply format word for word, its exact schema
    head = pair["messages"][1]["content"].split("\n\nDATA\n", 1)[0]
    for text in (P.EXTRACT_TASK, P.CONTEXTS_TASK, P.EXTRACT_FORMAT, P.CONTEXTS_FORMAT):
        assert text in head
    assert pair["messages"][0] == singles["extract"]["messages"][0]  # the same guard
    assert schema_of(pair) == SC.pair({"extract": schema_of(singles["extract"]),
                                       "contexts": schema_of(singles["contexts"])})
    assert schema_of(pair)["required"] == ["extract", "contexts"]


def test_each_part_is_cached_under_the_single_steps_key(make_ts, db_path):
    """After a paired call, metrics added later (and the same content in a new record) cost
    nothing: each part sits under the key the single step reads."""
    with ScriptedJudgeServer(lexical_responder) as srv:
        first = score(make_ts, srv, [STATEMENT_METRICS[0], CONTEXT_METRICS[0]], db_path)
        assert dict(srv.calls) == {PAIR: 1, "statements": 1}
        later = ["context_precision", "hallucination", "answer_relevance", "context_recall",
                 "answer_correctness", "context_relevance"]
        added = score(make_ts, srv, later, db_path)
        assert dict(srv.calls) == {PAIR: 1, "statements": 1}  # no new call at all
    assert all(r["status"] == "ok" for r in added.values())
    assert added["context_relevance"]["value"] == first["context_relevance"]["value"]
    for r in added.values():
        assert r["details"]["judge_calls"] == 0 and r["details"]["judge_cached_steps"] >= 1
    payload = {"question": Q, "contexts": CONTEXTS, "answer": ANSWER, "references": [GT]}
    key = content_key("contexts", MODEL, P.CONTEXTS_VERSION, payload)
    cached = {r["key"]: r["step"] for r in rows(db_path, "SELECT key, step FROM judge_cache")}
    assert cached[key] == "contexts"
    assert sorted(s for s in cached.values() if s == "extract-text") == ["extract-text"] * 2


@pytest.mark.parametrize(("cached_first", "then_asked"), [
    (CONTEXT_METRICS, {"extract": 1, "statements": 1}),
    (STATEMENT_METRICS, {"contexts": 1}),
])
def test_with_one_part_cached_the_other_is_asked_with_its_single_prompt(
        make_ts, db_path, cached_first, then_asked):
    with ScriptedJudgeServer(lexical_responder) as srv:
        score(make_ts, srv, cached_first, db_path)
        before = dict(srv.calls)
        srv.calls.clear()
        both = score(make_ts, srv, STATEMENT_METRICS + CONTEXT_METRICS, db_path)
        assert dict(srv.calls) == then_asked  # no paired call: one part was cached
    assert PAIR not in before
    assert all(r["status"] == "ok" for r in both.values())


def bad_in_pair(part: str) -> Any:
    """The lexical judge, except that in a paired call ``part`` gets a wrong number of rows
    (contexts) or a text missing (extract); asked alone it answers well."""

    def respond(step: str, data: Any, req: dict[str, Any]) -> Any:
        out = lexical_responder(step, data, req)
        if step == part and in_pair(req):
            if part == "contexts":
                out["contexts"] = out["contexts"][:1]
            else:
                out["texts"].pop("answer")
        return out

    return respond


@pytest.mark.parametrize("bad", ["contexts", "extract"])
def test_an_invalid_half_is_asked_again_alone(make_ts, tmp_path, bad):
    metrics = STATEMENT_METRICS + CONTEXT_METRICS
    with ScriptedJudgeServer(lexical_responder) as good:
        expected = outcome(score(make_ts, good, metrics, tmp_path / "good.db"))
    with ScriptedJudgeServer(bad_in_pair(bad)) as srv:
        got = score(make_ts, srv, metrics, tmp_path / "bad.db")
        assert dict(srv.calls) == {PAIR: 1, bad: 1, "statements": 1}  # the valid half kept
        [again] = [r for r in srv.requests if parse_prompt(r["messages"])[0] == bad]
    assert outcome(got) == expected
    # the part asked again with the single step's own prompt
    assert again["messages"][1]["content"].startswith(
        "TASK\n" + (P.CONTEXTS_TASK if bad == "contexts" else P.EXTRACT_TASK))
    assert_accounting(tmp_path / "bad.db", got, srv, rows_by_step={PAIR: 1, bad: 1,
                                                                   "statements": 1})


def assert_accounting(db: Path, got: dict[str, dict[str, Any]], srv: Any,
                      rows_by_step: dict[str, int]) -> None:
    """Calls in the scores' details = calls at the server; one judge_calls row per step
    asked; tokens in the details = tokens in judge_calls."""
    calls = rows(db, "SELECT * FROM judge_calls")
    steps: dict[str, int] = {}
    for c in calls:
        steps[c["step"]] = steps.get(c["step"], 0) + 1
    assert steps == rows_by_step
    details = [r["details"] for r in got.values()]
    assert sum(d["judge_calls"] for d in details) == srv.total_calls
    for k in ("input_tokens", "output_tokens"):
        assert sum(d[f"judge_{k}"] for d in details) == sum(c[k] for c in calls)


def test_a_half_invalid_alone_too_fails_only_its_own_metrics(make_ts, db_path):
    def respond(step: str, data: Any, req: dict[str, Any]) -> Any:
        out = lexical_responder(step, data, req)
        if step == "contexts":
            out["contexts"] = out["contexts"][:1]  # always one row short
        return out

    with ScriptedJudgeServer(respond) as srv:
        got = score(make_ts, srv, STATEMENT_METRICS + CONTEXT_METRICS, db_path)
        assert dict(srv.calls) == {PAIR: 1, "contexts": 1, "contexts:repair": 1,
                                   "statements": 1}
    for m in CONTEXT_METRICS:
        assert got[m]["status"] == "error" and "invalid JSON twice" in got[m]["error"]
        assert "must have 3 entries" in got[m]["error"]
    for m in STATEMENT_METRICS:
        assert got[m]["status"] == "ok"


def test_a_paired_reply_unusable_twice_leaves_both_parts_to_their_single_steps(
        make_ts, db_path):
    with ScriptedJudgeServer(lexical_responder) as srv:
        # the first two requests (the paired call and its repair) get no JSON at all
        srv.inject(*[Fault(status=200, body="Sure! Both tasks are done.")] * 2)
        got = score(make_ts, srv, STATEMENT_METRICS + CONTEXT_METRICS, db_path)
        assert dict(srv.calls) == {PAIR: 1, f"{PAIR}:repair": 1, "extract": 1, "contexts": 1,
                                   "statements": 1}
    assert all(r["status"] == "ok" for r in got.values())
    [failed] = rows(db_path, "SELECT * FROM judge_calls WHERE step=?", PAIR)
    assert "invalid JSON twice" in failed["error"]
    # the two paired calls are in the opener's details (tokens unknown, as in judge_calls)
    assert sum(r["details"]["judge_calls"] for r in got.values()) == srv.total_calls == 5
