"""The start-up judge canary of a short-lived process (issue 31): a batch job that writes its
records and calls ``shutdown()`` finishes the canary run or leaves none — never half of one,
never one without the model that answered it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from helpers import rows

from tracescore.judge.canary import CASES
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

MODEL = "canary-judge"
CANARY_CALLS = 2 * len(CASES)  # statements + contexts per case


def start(make_ts: Any, srv: ScriptedJudgeServer, db: Path, **kw: Any) -> Any:
    ts, _ = make_ts(db=db, metrics=["exact_match", "coherence"],
                    judge=OpenAIJudge(MODEL, base_url=srv.base_url), judge_canary=True, **kw)
    return ts


def canary_runs(db: Path) -> list[dict[str, Any]]:
    return rows(db, "SELECT trigger, judge_model, reported_model, cases FROM judge_canary")


def test_a_batch_job_that_shuts_down_at_once_stores_its_canary_whole(
        make_ts: Any, tmp_path: Path) -> None:
    db = tmp_path / "batch.db"
    with ScriptedJudgeServer(lexical_responder, delay_s=0.05) as srv:
        ts = start(make_ts, srv, db)
        for i in range(40):
            ts.log_record(query=f"q{i}", answer="a", ground_truths=["a"])
        assert ts.shutdown(timeout=60)
    [run] = canary_runs(db)
    assert run == {"trigger": "startup", "judge_model": MODEL, "reported_model": MODEL,
                   "cases": sum(len(c[2]) + 1 + len(c[3]) for c in CASES)}


def test_a_canary_cut_off_stores_nothing_and_the_next_start_runs_it(
        make_ts: Any, tmp_path: Path) -> None:
    db = tmp_path / "cut.db"
    with ScriptedJudgeServer(lexical_responder, delay_s=5.0) as srv:
        ts = start(make_ts, srv, db)
        deadline = time.monotonic() + 30
        while srv.total_calls == 0:  # the canary's first call is out
            assert time.monotonic() < deadline
            time.sleep(0.01)
        ts.shutdown(timeout=1)  # far less than the canary needs
    assert canary_runs(db) == []  # not half a run
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts = start(make_ts, srv, db)
        assert ts.worker.canary_done.wait(30)
        ts.shutdown()
    [run] = canary_runs(db)
    assert run["reported_model"] == MODEL and run["trigger"] == "startup"


def test_a_start_up_run_from_cached_steps_names_the_model(make_ts: Any,
                                                          tmp_path: Path) -> None:
    db = tmp_path / "cached.db"
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts = start(make_ts, srv, db)
        assert ts.worker.canary_done.wait(30)
        ts.shutdown()
        assert srv.total_calls == CANARY_CALLS
        rows(db, "DELETE FROM judge_canary")  # the steps are cached, the run was never stored
        ts = start(make_ts, srv, db)
        assert ts.worker.canary_done.wait(30)
        ts.shutdown()
    [run] = canary_runs(db)
    assert run["reported_model"] == MODEL
