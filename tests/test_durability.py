"""Crash/restart exactly-once, and internal failures never reaching the app."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import is_pg, records, rows

from tracescore.testing import ScriptedMetric, production_errors


@pytest.fixture
def db_path(db: str) -> str:
    """This module's database: a SQLite path, then a PostgreSQL URL (conftest ``db``)."""
    return db


WORKER_SCRIPT = textwrap.dedent("""
    import sys, time
    import tracescore
    from tracescore.testing import ScriptedMetric

    db, mode, log = sys.argv[1], sys.argv[2], sys.argv[3]

    def slow(record):
        with open(log, "a") as f:
            f.write(record.record_id + "\\n")
        time.sleep(0.05)
        return 1.0

    ts = tracescore.init(db=db, metrics=[ScriptedMetric(slow, name="slow")],
                         lease_seconds=1.0, concurrency=2)
    if mode == "produce":
        for i in range(60):
            ts.log_record(query=f"q{i}", answer="a")
        assert ts.queue.flush(10)
        print("persisted", flush=True)
        time.sleep(120)
    else:
        print("flushed", ts.flush(60), flush=True)
        ts.shutdown()
""")


def test_sigkill_mid_scoring_then_restart_scores_every_job_exactly_once(tmp_path: Path,
                                                                       db: str):
    log, script = tmp_path / "calls.log", tmp_path / "w.py"
    script.write_text(WORKER_SCRIPT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(db), "produce", str(log)],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "persisted"
        deadline = time.time() + 30
        while time.time() < deadline:
            n = rows(db, "SELECT count(*) AS n FROM scores")[0]["n"]
            if n >= 10:
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = {r["record_id"] for r in rows(db, "SELECT record_id FROM scores")}
    assert 10 <= len(before) < 60, "kill should land mid-scoring"
    held = {r["record_id"] for r in rows(db, "SELECT record_id FROM jobs WHERE status='leased'")}
    assert held  # the dead process held leases

    out = subprocess.run([sys.executable, str(script), str(db), "resume", str(log)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "flushed True" in out.stdout

    recs = records(db)
    assert len(recs) == 60
    per_record = rows(db, "SELECT record_id, count(*) AS n FROM scores GROUP BY record_id")
    assert len(per_record) == 60 and {r["n"] for r in per_record} == {1}
    assert rows(db, "SELECT DISTINCT status FROM jobs") == [{"status": "done"}]
    assert {r["status"] for r in rows(db, "SELECT status FROM scores")} == {"ok"}
    calls = log.read_text().split()
    # Jobs finished before the kill were not run again; only in-flight ones were (≤ concurrency),
    # once, and only jobs the dead process held.
    assert all(calls.count(rid) == 1 for rid in before)
    again = {rid for rid in calls if calls.count(rid) > 1}
    assert again <= held and all(calls.count(rid) == 2 for rid in again)
    assert len(calls) - 60 <= 2
    # attempts count runs: the held jobs' lost run and their scored one, the others' one
    attempts = {r["record_id"]: r["attempts"] for r in rows(db, "SELECT record_id, attempts "
                                                               "FROM jobs")}
    assert {attempts[rid] for rid in held} == {2}
    assert {a for rid, a in attempts.items() if rid not in held} == {1}


@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("stage,target,attr", [
    ("capture", "tracescore.integrations.langchain.TracescoreCallbackHandler", "_start"),
    ("record", "tracescore.integrations.langchain.TracescoreCallbackHandler", "_emit_record"),
    ("sample", "tracescore.sampling.Sampler", "decide"),
    ("queue", "tracescore.queue.RecordQueue", "put"),
    ("store", "STORE", "write_batch"),
    ("score", "tracescore.worker.ScoringWorker", "score"),
    ("store scores", "STORE", "complete_job"),
    ("attach", "tracescore.processor.ScoreAttachingProcessor", "job_done"),
    ("export", "tracescore.processor.ScoreAttachingProcessor", "_release"),
])
def test_an_exception_in_any_stage_never_reaches_the_app(
    make_ts: Any, db_path: str, monkeypatch: pytest.MonkeyPatch, stage: str, target: str,
    attr: str,
) -> None:
    import importlib

    from tracescore.examples.langchain_rag import build_chain

    ts, exporter = make_ts(metrics=[ScriptedMetric(lambda r: 0.5, name="m")], hold_seconds=0.2)
    chain = build_chain()
    expected = chain.invoke("How heavy is the Trail?")
    if target == "STORE":  # the backend's store class
        target = ("tracescore.store.postgres.PostgresStore" if is_pg(db_path)
                  else "tracescore.store.sqlite.Store")
    mod_name, cls_name = target.rsplit(".", 1)
    cls = getattr(importlib.import_module(mod_name), cls_name)

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError(f"injected failure in {stage}")

    monkeypatch.setattr(cls, attr, broken)
    with production_errors():
        for _ in range(3):
            got = chain.invoke("How heavy is the Trail?",
                               config={"callbacks": [ts.langchain_handler()]})
            assert got == expected
        ts.flush(3)
    monkeypatch.undo()
    # The pipeline recovers once the fault is gone: a new run is stored and scored.
    chain.invoke("How heavy is the Trail?", config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(60)  # (the jobs the fault hit are retried too: generous on a loaded machine)
    last = records(db_path)[-1]
    got_scores = rows(db_path, "SELECT * FROM scores WHERE record_id=?", last["record_id"])
    assert [s["value"] for s in got_scores] == [0.5]
    # a fault that persisted for seconds was retried with a backoff, not in a tight loop (it
    # was: thousands of attempts, and a job given back then leased again by its own worker
    # before its task ended was skipped and stayed leased to nobody until its lease ran out)
    attempts = [j["attempts"] for j in rows(db_path, "SELECT attempts FROM jobs")]
    assert max(attempts) <= 12, attempts
