"""The LLM-judge session metrics (DeepEval's conversation relevancy and knowledge
retention): their formulas on hand-counted verdicts, and end to end as judge jobs on a closed
session's record, scripted through a real OpenAI-compatible server — each verdict a cached
step, so a late turn costs only its own verdicts and the scores are replaced."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import Script, rows, stored_scores, wait_for
from judge_pairs import ScriptedJudgeServer

from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.sessions.judged import relevancy_score, resolve_session_metrics, retention_score
from tracescore.store.sessions import session_record_id
from tracescore.testing import ScriptedMetric

IDLE = 60.0
MODEL = "scripted-judge"


# -- DeepEval's formulas ----------------------------------------------------------------------
# DeepEval's own tests of these metrics call a live LLM (no fixed vectors): the formulas are
# checked on verdict lists counted by hand from conversation_relevancy.py/_calculate_score and
# knowledge_retention.py/_calculate_score.
@pytest.mark.parametrize("verdicts, want", [
    ([], 1.0),                        # no verdict: DeepEval scores 1
    (["yes", "yes", "no"], 2 / 3),
    (["no"], 0.0),
    ([" YES ", "idk"], 1.0),          # anything but "no" counts as relevant (DeepEval)
])
def test_conversation_relevancy_formula(verdicts: list[str], want: float) -> None:
    assert relevancy_score(verdicts) == pytest.approx(want)


@pytest.mark.parametrize("verdicts, want", [
    ([], None),                       # DeepEval: 0; skipped here (docs/sessions.md)
    (["no", "no", "yes", "no"], 3 / 4),  # "yes" = attrition
    (["yes"], 0.0),
])
def test_knowledge_retention_formula(verdicts: list[str], want: float | None) -> None:
    got = retention_score(verdicts)
    assert got == (None if want is None else pytest.approx(want))


def test_session_metrics_are_named_and_need_a_judge(make_ts: Any) -> None:
    assert [m.name for m in resolve_session_metrics(["conversation_relevancy",
                                                     "session.knowledge_retention"])] == [
        "session.conversation_relevancy", "session.knowledge_retention"]
    with pytest.raises(ValueError, match="unknown session metric"):
        resolve_session_metrics(["faithfulness"])
    with pytest.raises(ValueError, match="need an LLM judge"):
        make_ts(session_metrics=["conversation_relevancy"])


# -- end to end -------------------------------------------------------------------------------
QUESTIONS = ["I'm Ana and I ride a Cargo. How far can it go?",
             "How long does charging take?",
             "What was my bike again?"]
ANSWERS = ["About 80 km on one charge.", "About four and a half hours.",
           "Which bike do you ride?"]  # forgets the Cargo: attrition


def relevancy(data: dict[str, Any]) -> dict[str, Any]:
    last = data["turns"][-1]
    ok = "Which bike" not in last["actual_output"]
    return {"verdict": "yes" if ok else "no", "reason": "" if ok else "asks back"}


def facts(data: dict[str, Any]) -> dict[str, Any]:
    if "Ana" in data["message"]:
        return {"facts": [{"what": "name", "value": "Ana"}, {"what": "bike",
                                                             "value": "Cargo"}]}
    return {"facts": []}


def retention(data: dict[str, Any]) -> dict[str, Any]:
    forgot = "Which bike" in data["message"]
    return {"verdict": "yes" if forgot else "no", "reason": "the bike is known" if forgot
            else ""}


def test_judged_session_scores_replace_and_reuse_verdicts(make_ts: Any, db_path: Any) -> None:
    script = Script(session_relevancy=relevancy, session_facts=facts,
                    session_retention=retention)
    with ScriptedJudgeServer(script) as srv:
        ts, _ = make_ts(metrics=[ScriptedMetric(name="m")], judge_canary=False,
                        judge=OpenAIJudge(MODEL, base_url=srv.base_url), session_idle=IDLE,
                        session_metrics=["conversation_relevancy", "knowledge_retention"])
        for q, a in zip(QUESTIONS[:2], ANSWERS[:2]):
            ts.log_record(query=q, answer=a, session_id="ana")
        assert ts.flush(30)
        assert ts.close_sessions(now=time.time() + IDLE + 1).closed == ["ana"]
        trace, span = session_record_id("ana")
        rid = f"{trace}-{span}"

        def judged() -> dict[str, Any]:
            got = stored_scores(db_path, rid)
            names = ("session.conversation_relevancy", "session.knowledge_retention")
            return got if all(n in got for n in names) else {}

        got = wait_for(judged, what="the session's judge scores")
        assert got["session.conversation_relevancy"]["value"] == 1.0
        assert got["session.knowledge_retention"]["value"] == 1.0  # 2 verdicts, no attrition
        assert got["session.knowledge_retention"]["details"]["verdicts"] == 2
        assert got["session.conversation_relevancy"]["details"]["judge_model"] == MODEL
        first_calls = dict(srv.calls)
        assert first_calls["session_relevancy"] == 2 and first_calls["session_facts"] == 2

        # a late third turn that forgets what the user said: the session closes again; only
        # the new turn's verdicts are asked (the others come from the judge cache)
        ts.log_record(query=QUESTIONS[2], answer=ANSWERS[2], session_id="ana")
        assert ts.flush(30)
        wait_for(lambda: rows(db_path, "SELECT 1 FROM sessions WHERE status = 'open'"),
                 what="the session re-opened")
        assert ts.close_sessions(now=time.time() + IDLE + 1).closed == ["ana"]
        wait_for(lambda: stored_scores(db_path, rid)["session.knowledge_retention"]["value"]
                 != 1.0 and not rows(db_path, "SELECT 1 FROM jobs WHERE record_id = ? AND"
                                              " status <> 'done'", rid),
                 what="the re-scored session")
        got = stored_scores(db_path, rid)
        assert got["session.conversation_relevancy"]["value"] == pytest.approx(2 / 3)
        assert got["session.knowledge_retention"]["value"] == pytest.approx(2 / 3)
        assert got["session.knowledge_retention"]["details"]["attritions"][0]["turn"] == 3
        assert srv.calls["session_relevancy"] == first_calls["session_relevancy"] + 1
        assert srv.calls["session_facts"] == first_calls["session_facts"] + 1
        assert srv.calls["session_retention"] == first_calls["session_retention"] + 1
        # replaced, counted once
        [roll] = rows(db_path, "SELECT sum(n_ok) AS n FROM hourly_scores"
                               " WHERE name = 'session.knowledge_retention'")
        assert roll["n"] == 1
        assert script.unexpected == []
