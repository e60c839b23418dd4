"""A judge canary run during which the judge's reported model changes (some known-answer cases
answered by the old model, some by the new) measures neither model: it is asked again, and the
first whole run of the new model is stored as the ``model_changed`` run. (Under load the drift
test's switch fell inside a run now and then: a run stored as "judge-b" with judge-a's
answers mixed in, and no model_changed run after it.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from helpers import rows
from test_judge_drift import DriftingJudge

from tracescore.judge.canary import CASES, run_canary
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.judge.resilience import ResilientJudge
from tracescore.judge.session import JudgeSession


class SwitchingMidRun(DriftingJudge):
    """Switches to judge-b after its third request: inside the first canary run."""

    def __init__(self) -> None:
        self.asked = 0
        super().__init__()

    def _answer(self, step: str, data: Any, req: dict[str, Any], fault: Any) -> Any:
        self.asked += 1
        if self.asked == 4:
            self.switch()
        return super()._answer(step, data, req, fault)


def test_a_run_that_straddles_a_model_change_is_asked_again(tmp_path: Path) -> None:
    db = str(tmp_path / "c.db")

    async def run(srv: SwitchingMidRun) -> Any:
        judge = OpenAIJudge("provider/judge-latest", base_url=srv.base_url, api_key="sk-test")
        session = JudgeSession(ResilientJudge(judge), db)
        try:
            return await run_canary(session, trigger="schedule")
        finally:
            session.close()
            await judge.aclose()

    with SwitchingMidRun() as srv:
        result = asyncio.run(run(srv))
        assert srv.asked > 2 * len(CASES)  # the straddling run, then a whole one
    assert result.reported_model == "judge-b" and result.trigger == "model_changed"
    assert result.yes_share == 1.0 and result.degenerate  # judge-b alone: "yes" to all
    [stored] = rows(db, "SELECT reported_model, trigger, yes_share FROM judge_canary")
    assert stored == {"reported_model": "judge-b", "trigger": "model_changed",
                      "yes_share": 1.0}


def test_a_scheduled_run_that_first_meets_a_new_model_is_the_model_changed_run(
        tmp_path: Path) -> None:
    """The switch falls between two runs and the scheduled one asks before any score met the
    new model: that run is still the model_changed run (no later one repeats it)."""
    db = str(tmp_path / "c.db")

    async def run(srv: DriftingJudge) -> list[Any]:
        judge = OpenAIJudge("provider/judge-latest", base_url=srv.base_url, api_key="sk-test")
        session = JudgeSession(ResilientJudge(judge), db)
        try:
            first = await run_canary(session, trigger="schedule")
            srv.switch()
            return [first, await run_canary(session, trigger="schedule")]
        finally:
            session.close()
            await judge.aclose()

    with DriftingJudge() as srv:
        first, second = asyncio.run(run(srv))
    assert (first.reported_model, first.trigger) == ("judge-a", "schedule")
    assert (second.reported_model, second.trigger) == ("judge-b", "model_changed")
    assert [r["trigger"] for r in rows(db, "SELECT trigger FROM judge_canary ORDER BY id")] == \
        ["schedule", "model_changed"]
