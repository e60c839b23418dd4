"""Issue 35, session 14: what the service base gives the queue's writer — the holder's own wake
event, what started a step (a wake or the end of the wait), a drain after the stop bounded by
the stop's deadline, the fork — and the writer on it (a real RecordQueue, a real SQLite file)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, wait_for

from tracescore._internal.service import Service
from tracescore.queue import RecordQueue
from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.store import NewJob, StoreAPI
from tracescore.write_port import OnWriteScorer


def test_the_holders_event_wakes_it_with_a_bare_set() -> None:
    ev = threading.Event()
    woken: list[bool] = []
    svc = Service("ts-test-holder-event", lambda: woken.append(svc.woken) or None,
                  interval_s=3600, first_wait_s=3600, wake_event=ev)
    assert svc.wake_event is ev
    svc.start()
    try:
        ev.set()  # what a request path does: no call into the service
        wait_for(lambda: woken == [True], what="the step a bare set started")
        ev.set()
        wait_for(lambda: woken == [True, True], what="a second one")
    finally:
        assert svc.stop(10)


def test_woken_tells_a_wake_from_the_end_of_the_wait() -> None:
    woken: list[bool] = []

    def step() -> float:
        woken.append(svc.woken)
        return 3600.0  # after the first step: only a wake starts the next

    svc = Service("ts-test-woken", step, interval_s=3600, first_wait_s=0.05)
    svc.start()
    try:
        wait_for(lambda: woken == [False], what="the step the first wait's end started")
        svc.wake()
        wait_for(lambda: woken == [False, True], what="the step a wake started")
    finally:
        assert svc.stop(10)
    assert woken == [False, True]  # the stop's wake started no step (a drain would run)


def test_a_stop_drains_until_done_then_on_exit() -> None:
    left = list(range(5))
    seen: list[Any] = []
    svc: Service

    def drain() -> bool:
        seen.append(("drain", svc.stopping.is_set(), left.pop()))
        return not left

    svc = Service("ts-test-drain", lambda: seen.append("step") or None, interval_s=3600,
                  first_wait_s=3600, drain=drain, on_exit=lambda: seen.append("exit"))
    svc.start()
    assert svc.stop(10)
    assert seen == [("drain", True, 4), ("drain", True, 3), ("drain", True, 2),
                    ("drain", True, 1), ("drain", True, 0), "exit"]
    assert left == [] and svc.runs == 5


def test_a_drain_that_never_ends_is_bounded_by_the_stop_deadline() -> None:
    calls = [0]
    never = threading.Event()
    exited = threading.Event()

    def drain() -> bool:
        calls[0] += 1
        never.wait(0.01)
        return False

    svc = Service("ts-test-drain-deadline", lambda: None, interval_s=3600,
                  first_wait_s=3600, drain=drain, on_exit=exited.set)
    svc.start()
    svc.stop(0.2)  # (may return before the thread has ended on a loaded machine)
    wait_for(exited.is_set, what="the drain's end at the deadline and on_exit")
    wait_for(lambda: not svc.alive, what="the thread's end")
    assert calls[0] >= 2  # it went on after the first pass, until the deadline


def test_a_drain_runs_once_even_when_the_deadline_has_passed() -> None:
    calls: list[int] = []
    svc = Service("ts-test-drain-once", lambda: None, interval_s=3600, first_wait_s=3600,
                  drain=lambda: calls.append(1) is not None)  # (never done)
    svc.start()
    svc.stop(0)
    wait_for(lambda: not svc.alive, what="the thread's end")
    assert calls == [1]


@pytest.mark.allow_internal_errors
def test_a_drain_that_raises_is_counted_and_tried_again() -> None:
    tries: list[int] = []

    def drain() -> bool:
        tries.append(1)
        if len(tries) < 3:
            raise RuntimeError("not yet")
        return True

    svc = Service("ts-test-drain-raises", lambda: None, interval_s=0.01, first_wait_s=3600,
                  drain=drain)
    svc.start()
    assert svc.stop(30)
    assert len(tries) == 3 and svc.errors == 2 and "not yet" in (svc.last_error or "")


FORK = textwrap.dedent("""
    import json, os, threading, time
    from tracescore._internal.service import Service

    holder = {"event": threading.Event(), "woken": [], "drained": []}
    svc = Service("holder", lambda: holder["woken"].append((os.getpid(), svc.woken)) or 3600.0,
                  interval_s=3600, first_wait_s=3600, wake_event=holder["event"],
                  drain=lambda: holder["drained"].append(os.getpid()) is None,
                  on_fork=lambda: holder.update(event=svc.wake_event))
    svc.start()
    parent_event = holder["event"]
    parent_event.set()
    while not holder["woken"]:
        time.sleep(0.01)
    pid = os.fork()
    if pid == 0:
        out = {"fresh_event": holder["event"] is not parent_event
                              and holder["event"] is svc.wake_event,
               "thread_after_fork": svc.thread is not None}
        svc.start()
        holder["event"].set()  # the holder's bare set, on the child's event
        deadline = time.monotonic() + 60
        while (os.getpid(), True) not in holder["woken"] and time.monotonic() < deadline:
            time.sleep(0.01)
        out["woken_in_child"] = (os.getpid(), True) in holder["woken"]
        out["stopped"] = svc.stop(10)
        out["drained_in_child"] = holder["drained"] == [os.getpid()]
        print(json.dumps(out), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    svc.stop(10)
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no os.fork")
def test_after_fork_the_holder_gets_a_fresh_event_that_wakes_the_child(tmp_path: Path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(FORK)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    child: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert child == {"fresh_event": True, "thread_after_fork": False, "woken_in_child": True,
                     "stopped": True, "drained_in_child": True}


# -- the writer on the base ---------------------------------------------------------------------
def rec(i: int) -> RagRecord:
    return RagRecord(trace_id=format(0xE000 + i, "032x"), span_id=format(0xF000 + i, "016x"),
                     query=f"q{i}", answer=f"a{i}")


class GatedPort:
    """A WritePort whose first plan_jobs waits for a gate: the writer is held mid-step."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.inside = threading.Event()

    def plan_jobs(self, record: RagRecord, decision: Decision) -> Sequence[NewJob]:
        self.inside.set()
        self.gate.wait(60)
        return [NewJob(record.record_id, m, "1") for m in decision.metrics]

    def apply_update(self, store: StoreAPI, update: Any) -> None:
        raise AssertionError("no updates here")

    def jobs_opened(self) -> None:
        pass

    def on_write(self) -> OnWriteScorer | None:
        return None


def test_the_writer_is_the_services_thread_and_put_sets_its_event(tmp_path: Path) -> None:
    q = RecordQueue(str(tmp_path / "w.db"), GatedPort(), interval_s=3600, linger_s=0)
    q.port.gate.set()  # type: ignore[attr-defined]
    assert q._event is q._svc.wake_event and q._thread is None
    assert q.put((rec(0), Decision(u=0.0, metrics=("m",))))
    assert q._thread is q._svc.thread and q._thread is not None
    assert q._thread.name == "tracescore-writer"
    wait_for(lambda: q.written == 1, what="the record the put's wake wrote")
    assert q.shutdown(10)
    assert not q._svc.alive


def test_a_stop_writes_what_came_in_during_the_step_in_progress(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    port = GatedPort()
    q = RecordQueue(str(db), port, interval_s=3600, linger_s=0)
    assert q.put((rec(0), Decision(u=0.0, metrics=("m",))))
    wait_for(port.inside.is_set, what="the writer held in its step")
    for i in range(1, 51):
        assert q.put(rec(i))  # unsampled: no wake; they wait behind the held step
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(q.shutdown(0.2)))
    t.start()
    wait_for(lambda: q._svc.stopping.is_set(), what="the stop requested")
    port.gate.set()  # the step in progress ends; what is buffered is written after the stop
    t.join(30)
    wait_for(lambda: not q._svc.alive, what="the writer's end")
    assert rows(db, "SELECT count(*) AS n FROM records")[0]["n"] == 51
    assert q.written == 51 and q.losses.snapshot() == {} and not q._buf
    assert not q.put(rec(99))  # stopped: refused, counted
    assert q.dropped == 1


PG_FORK = textwrap.dedent("""
    import gc, json, os, sys
    import tracescore
    from tracescore.testing import ScriptedMetric

    url = sys.argv[1]
    ts = tracescore.init(db=url, metrics=[ScriptedMetric(lambda r: 1.0, name="m")])
    ts.log_record(query="parent before", answer="a")
    assert ts.flush(30)  # the writer holds its PostgreSQL connection now
    pid = os.fork()
    if pid == 0:
        gc.collect()  # what the child dropped of the parent's writer must not end its session
        for i in range(20):
            ts.log_record(query=f"child {i}", answer="a")
        ok = ts.flush(60)
        print(json.dumps({"child_ok": ok}), flush=True)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    ts.log_record(query="parent after", answer="a")  # on the parent's own connection
    ok = ts.flush(60)
    print(json.dumps({"child_status": status, "parent_ok": ok,
                      "lost": ts.stats()["lost"]}), flush=True)
    ts.shutdown(30)
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no os.fork")
def test_a_forked_child_leaves_the_parents_postgres_writer_working(
        pg_url: str, tmp_path: Path) -> None:
    script = tmp_path / "pgfork.py"
    script.write_text(PG_FORK)
    out = subprocess.run([sys.executable, str(script), pg_url], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.strip().splitlines() if x.startswith("{")]
    assert {"child_ok": True} in lines
    assert lines[-1] == {"child_status": 0, "parent_ok": True, "lost": {}}
    assert rows(pg_url, "SELECT count(*) AS n FROM records")[0]["n"] == 22


def test_a_stop_while_the_writer_waits_writes_the_buffer_in_its_drain(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    port = GatedPort()
    port.gate.set()
    q = RecordQueue(str(db), port, interval_s=3600, linger_s=0)
    assert q.put((rec(0), Decision(u=0.0, metrics=("m",))))
    wait_for(lambda: q.written == 1, what="the woken step")
    runs = q._svc.runs
    for i in range(1, 31):
        assert q.put(rec(i))  # unsampled, far from a full batch: nothing wakes the writer
    q._stop = True  # what shutdown does after its flush (no flush here: no step first)
    assert q._svc.stop(30)
    assert q._svc.runs == runs + 1  # no step: one pass of the drain wrote them
    assert q.written == 31 and not q._buf and q.losses.snapshot() == {}
    assert rows(db, "SELECT count(*) AS n FROM records")[0]["n"] == 31
