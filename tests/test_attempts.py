"""Attempts count runs, not leases (issue 19): a lease is free, a run that fails in the worker
counts when the job is given back, a run lost with its process counts when the expired lease is
taken again, and such a lost job runs alone, so a job that kills its process every time ends in
a "gave up" error score after ``max_attempts`` runs without spending its neighbours' attempts.
On both backends."""

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
from helpers import rows, store_clock

from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, open_store
from tracescore.testing import ScriptedMetric, production_errors


@pytest.fixture
def db_path(db: str) -> str:
    """This module's database: a SQLite path, then a PostgreSQL URL (conftest ``db``)."""
    return db


def _write(store: Any, n: int, metrics: tuple[str, ...] = ("m",)) -> list[RagRecord]:
    recs = [RagRecord(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", query=f"q{i}",
                      answer="a") for i in range(n)]
    store.write_batch([(r, Decision(0.0, metrics)) for r in recs],
                      [NewJob(r.record_id, m, "1") for r in recs for m in metrics])
    return recs


def _attempts(db: str) -> dict[int, tuple[str, int]]:
    return {r["job_id"]: (r["status"], r["attempts"])
            for r in rows(db, "SELECT job_id, status, attempts FROM jobs")}


def test_a_lease_is_free_and_a_done_run_counts_one(db_path: str) -> None:
    store = open_store(db_path)
    try:
        _write(store, 3)
        jobs = store.lease_jobs("a", 10, 60.0, ["m"])
        assert [j.attempts for j in jobs] == [0, 0, 0]
        assert {a for _, a in _attempts(db_path).values()} == {0}
        assert store.complete_jobs("a", [(jobs[0], [Score("m", 1.0)])])[0] is not None
        assert store.complete_job(jobs[1], "a", [Score("m", 1.0)]) is not None
        got = _attempts(db_path)
        assert got[jobs[0].job_id] == got[jobs[1].job_id] == ("done", 1)
        assert got[jobs[2].job_id] == ("leased", 0)
    finally:
        store.close()


def test_defer_is_free_and_a_failed_run_counts(db_path: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    clock = store_clock(monkeypatch, 1_000_000.0)
    store = open_store(db_path)
    try:
        _write(store, 1)
        [job] = store.lease_jobs("a", 1, 60.0, ["m"])
        store.defer_job(job, "a", 5.0, "judge down")  # waits, at no attempt
        assert store.lease_jobs("a", 1, 60.0, ["m"]) == []
        clock.t += 5.0
        [job] = store.lease_jobs("a", 1, 60.0, ["m"])
        assert job.attempts == 0
        store.release_job(job, "a", "our failure")  # a failed run: counted once
        [job] = store.lease_jobs("b", 1, 60.0, ["m"])
        assert job.attempts == 1  # (leasing the given-back job again costs nothing)
        store.release_job(job, "a", "not the holder: nothing happens")
        assert _attempts(db_path)[job.job_id] == ("leased", 1)
        assert store.complete_job(job, "b", [Score("m", 1.0)]) is not None
        assert _attempts(db_path)[job.job_id] == ("done", 2)  # two runs in all
    finally:
        store.close()


def test_an_expired_lease_is_leased_alone_and_counts_the_lost_run(
        db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = store_clock(monkeypatch, 1_000_000.0)
    store = open_store(db_path)
    try:
        _write(store, 3, ("m", "n"))
        held = store.lease_jobs("dead", 10, 60.0, ["m", "n"])
        assert len(held) == 6 and not store.has_lost_jobs(["m", "n"])
        assert store.lease_lost_job("b", 60.0, ["m", "n"]) is None  # not expired yet
        clock.t += 61.0
        # the holder died: lease_jobs leaves its jobs alone, lease_lost_job takes them one
        # by one, oldest first, each counting the lost run exactly once
        assert store.has_lost_jobs(["m", "n"]) and not store.has_lost_jobs(["other"])
        assert store.lease_jobs("b", 10, 60.0, ["m", "n"]) == []
        first = store.lease_lost_job("b", 60.0, ["n"])
        assert first is not None
        assert (first.job_id, first.metric, first.attempts) == (
            min(j.job_id for j in held if j.metric == "n"), "n", 1)
        got = _attempts(db_path)
        assert got[first.job_id] == ("leased", 1)
        assert sorted(a for _, a in got.values()) == [0, 0, 0, 0, 0, 1]
        # the dead holder's late completion is refused: the job is the new owner's now
        assert store.complete_job(first, "dead", [Score("n", 0.0)]) is None
        taken = [first.job_id]
        while (job := store.lease_lost_job("b", 60.0, ["m", "n"])) is not None:
            assert job.attempts == 1
            taken.append(job.job_id)
        assert sorted(taken) == sorted(j.job_id for j in held)
        assert taken[1:] == sorted(taken[1:])
        assert not store.has_lost_jobs(["m", "n"])
        # lost again (b died too): the second lost run counts
        clock.t += 61.0
        again = store.lease_lost_job("c", 60.0, ["m", "n"])
        assert again is not None and (again.job_id, again.attempts) == (min(taken), 2)
        # c dies as well: the job lost twice waits behind the ones lost once (a crash loop
        # does not hit the same job again and again), then is taken with its third
        clock.t += 61.0
        order = []
        while (job := store.lease_lost_job("d", 60.0, ["m", "n"])) is not None:
            order.append((job.job_id, job.attempts))
        assert order == [*((j, 2) for j in sorted(taken) if j != again.job_id),
                         (again.job_id, 3)]
        assert store.complete_job(again, "d", [Score("m", 1.0)]) is not None
        assert _attempts(db_path)[again.job_id] == ("done", 4)
    finally:
        store.close()


# -- a job that kills its process every time ------------------------------------------------
POISON_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import tracescore
    from tracescore.testing import ScriptedMetric, production_errors

    db, log, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    def kills(record):
        with open(log, "a") as f:
            f.write(record.query + "\\n")
        if record.query == "poison":
            os.kill(os.getpid(), signal.SIGKILL)
        return 1.0

    ts = tracescore.init(db=db, metrics=[ScriptedMetric(kills, name="m")],
                         lease_seconds=1.0, concurrency=2)
    ts.worker.local_window = 16  # (the default is 1: a window of 32 jobs is what is tested)
    if mode == "produce":
        for i in range(24):
            ts.log_record(query="poison" if i == 5 else f"q{i}", answer="a")
    print("flushed", ts.flush(60), flush=True)
    ts.shutdown(timeout=10)
""")


def test_a_job_that_kills_its_process_gives_up_after_max_attempts_runs_alone(
        tmp_path: Path, db_path: str) -> None:
    """The poison record is leased in a window with its 23 neighbours (16 × concurrency 2)
    and SIGKILLs its process each time it runs. The window's jobs are lost with it once;
    taken again, each lost job runs alone, so the poison's next kills cost nobody else an
    attempt: after 3 runs it ends in "gave up after 3 attempts" and every neighbour is scored
    once, having spent at most the one lost run. (With attempts counted at the lease and
    lost jobs leased together again, every neighbour reached 3 as well.)"""
    log, script = tmp_path / "calls.log", tmp_path / "poison.py"
    script.write_text(POISON_SCRIPT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed = 0
    out = ""
    for run in range(8):
        proc = subprocess.run([sys.executable, str(script), db_path, str(log),
                               "produce" if run == 0 else "resume"],
                              capture_output=True, text=True, env=env, timeout=180)
        out = proc.stdout
        if proc.returncode == -signal.SIGKILL:
            killed += 1
            continue
        assert proc.returncode == 0, proc.stderr
        break
    assert "flushed True" in out
    calls = log.read_text().split()
    assert killed == calls.count("poison") == 3
    got = rows(db_path, "SELECT r.query, s.status, s.value, s.error, j.attempts "
                        "FROM scores s JOIN records r ON r.record_id = s.record_id "
                        "JOIN jobs j ON j.job_id = s.job_id")
    assert len(got) == 24 and len({g["query"] for g in got}) == 24  # one score per record
    poison = next(g for g in got if g["query"] == "poison")
    assert poison["status"] == "error"
    assert poison["error"].startswith("gave up after 3 attempts")
    neighbours = [g for g in got if g["query"] != "poison"]
    assert {(g["status"], g["value"]) for g in neighbours} == {("ok", 1.0)}
    # each neighbour: its scored run, plus at most the run lost with the first kill
    assert max(g["attempts"] for g in neighbours) <= 2
    assert rows(db_path, "SELECT DISTINCT status FROM jobs") == [{"status": "done"}]


@pytest.mark.allow_internal_errors
def test_a_run_that_fails_in_the_worker_counts_and_its_batch_neighbours_are_scored(
        make_ts: Any, db_path: str) -> None:
    """Our own failure on one job (here the app's ``redact`` raising on its explanation):
    that job is given back with its run counted, three times, then ends in a "gave up"
    error score; the jobs of its batch are scored on their first run."""

    def metric(record: RagRecord) -> Any:
        return m.result(1.0, "POISON" if record.query == "q3" else "fine")

    def redact(text: str) -> str:
        if text == "POISON":
            raise RuntimeError("redact broke")
        return text

    m = ScriptedMetric(metric, name="m")
    ts, _ = make_ts(metrics=[m])
    ts.worker.redact = redact
    with production_errors():
        for i in range(8):
            ts.log_record(query=f"q{i}", answer="a")
        assert ts.flush(60)
    got = rows(db_path, "SELECT r.query, s.status, s.error, j.attempts FROM scores s "
                        "JOIN records r ON r.record_id = s.record_id "
                        "JOIN jobs j ON j.job_id = s.job_id ORDER BY r.query")
    assert [g["query"] for g in got] == [f"q{i}" for i in range(8)]
    bad = got.pop(3)
    assert bad["status"] == "error" and bad["error"].startswith("gave up after 3 attempts")
    assert m.calls == 7 + 3  # the failing job ran three times, the others once
    assert {(g["status"], g["attempts"]) for g in got} == {("ok", 1)}


def test_stopping_gives_held_jobs_back_at_no_attempt(make_ts: Any, db_path: str) -> None:
    """A worker stopping with jobs in flight gives them back, free: stopping is not a failed
    run (their next run is their first attempt)."""
    import threading

    gate = threading.Event()
    m = ScriptedMetric(lambda r: 1.0, name="m", gate=gate)
    ts, _ = make_ts(metrics=[m])
    ts.worker.stop_grace_s = 0.0
    for i in range(3):
        ts.log_record(query=f"q{i}", answer="a")
    deadline = time.monotonic() + 30
    while m.calls < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert m.calls >= 1
    ts.worker.stop(timeout=0.5)
    gate.set()
    assert {(r["status"], r["attempts"]) for r in rows(
        db_path, "SELECT status, attempts FROM jobs")} == {("pending", 0)}
    # (the worker is stopped: nothing will score these jobs, so the fixture's shutdown would
    # wait its whole flush timeout for them; they stay pending in the database)
    ts.shutdown(timeout=1)
