"""The scoring worker by composition (issue 35): it holds a batch runner and a completion
writer with explicit inputs instead of inheriting them; a setting set on the worker is the one
its parts read, and a real pipeline scores through them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import rows

from tracescore.score import Score
from tracescore.scoring.batches import BatchRunner
from tracescore.scoring.completions import CompletionWriter
from tracescore.testing import ScriptedMetric
from tracescore.worker import ScoringWorker


def test_the_worker_inherits_nothing_and_its_settings_are_its_parts(tmp_path: Path) -> None:
    assert ScoringWorker.__mro__ == (ScoringWorker, object)
    w = ScoringWorker(str(tmp_path / "w.db"), [ScriptedMetric(lambda r: 1.0, name="m")],
                      concurrency=0, metric_timeout_s=7.0)
    assert isinstance(w.batches, BatchRunner) and isinstance(w.writer, CompletionWriter)
    assert w.concurrency == w.limits.concurrency == 1  # (at least one)
    w.metric_timeout_s, w.max_attempts, w.judge_max_wait_s = 5.0, 9, 11.0
    assert w.batches.limits is w.limits
    assert (w.limits.metric_timeout_s, w.limits.max_attempts, w.limits.judge_max_wait_s) \
        == (5.0, 9, 11.0)
    w.straggle_s, w.local_window = 0.2, 3
    assert (w.batches.straggle_s, w.batches.local_window) == (0.2, 3)
    assert w.batches.free() == 1 * 3
    w.redact = lambda t: t.replace("secret", "***")
    assert w.writer.redact is w.redact
    cleaned = w.writer.clean(Score.failed("m", "a secret reason", metric="m"))
    assert cleaned.error == "a *** reason"


def test_a_pipeline_scores_through_the_parts(make_ts: Any, db_path: Path) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 0.25, name="m")])
    ts.worker.score_on_write = False  # (every job through the loop's batch runner)
    for i in range(5):
        ts.log_record(query=f"q{i}", answer="a")
    assert ts.flush(30)
    assert ts.worker.writer.scored == ts.worker._scored == 5 and ts.worker.scored == 5
    assert rows(db_path, "SELECT count(*) AS n FROM scores WHERE value = 0.25") == [{"n": 5}]
    assert not ts.worker.batches.open  # every batch's slots free again
