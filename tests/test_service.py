"""Issue 35: the one background-service base (tracescore/_internal/service.py) that the daemon
loops hold: start, wake/run_now, stop with a deadline, errors counted (never a dead loop),
on_exit, after-fork re-creation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

from tracescore._internal.errors import internal_error_counts
from tracescore._internal.service import Service, deadline_left


def test_first_wait_then_a_wake_runs_a_step_at_once() -> None:
    steps: list[int] = []
    svc = Service("ts-test-wake", lambda: steps.append(1) or None, interval_s=3600,
                  first_wait_s=3600)
    svc.start()
    try:
        assert svc.alive and steps == []  # waits its first_wait_s
        svc.run_now()
        wait_for(lambda: len(steps) == 1, what="the woken step")
        svc.wake()
        wait_for(lambda: len(steps) == 2, what="a second woken step")
        assert svc.runs == 2 and svc.errors == 0
    finally:
        assert svc.stop(10)
    assert not svc.alive


def test_step_returns_its_next_wait() -> None:
    """A step's return value is the next wait (the notifier's next due row)."""
    steps: list[int] = []

    def step() -> float:
        steps.append(1)
        return 0.0 if len(steps) < 5 else 3600.0

    svc = Service("ts-test-next", step, interval_s=3600)
    svc.start()
    try:
        wait_for(lambda: len(steps) >= 5, what="five steps without waiting")
    finally:
        svc.stop(10)
    assert len(steps) == 5


@pytest.mark.allow_internal_errors
def test_a_failing_step_is_counted_and_the_loop_goes_on() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError(f"boom {len(calls)} sk-abcdefghijklmnopqrstuvwxyz123456")
        return None

    before = internal_error_counts().get("ts-test-errors", 0)
    svc = Service("ts-test-errors", step, interval_s=0.01)
    svc.start()
    try:
        wait_for(lambda: svc.runs >= 1, what="a step that passes after two failures")
    finally:
        svc.stop(10)
    assert svc.errors == 2
    assert svc.last_error is not None and svc.last_error.startswith("RuntimeError: boom 2")
    assert "sk-abcdefghijklmnopqrstuvwxyz123456" not in svc.last_error  # scrubbed
    assert internal_error_counts()["ts-test-errors"] - before == 2


def test_on_error_chooses_the_wait_and_on_exit_runs_once() -> None:
    seen: list[str] = []
    exits: list[int] = []
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        raise ValueError("no")

    def on_error(exc: Exception) -> float:
        seen.append(str(exc))
        return 0.0 if len(seen) < 3 else 3600.0

    svc = Service("ts-test-onerror", step, interval_s=3600, on_error=on_error,
                  on_exit=lambda: exits.append(1))
    before = internal_error_counts().get("ts-test-onerror", 0)
    svc.start()
    wait_for(lambda: len(seen) == 3, what="three failed steps")
    assert svc.stop(10)
    assert len(calls) == 3 and exits == [1]
    # the handler took the error: it is not also counted by the funnel
    assert internal_error_counts().get("ts-test-onerror", 0) == before


@pytest.mark.allow_internal_errors
def test_a_failing_on_error_handler_does_not_end_the_loop() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first")

    def bad_handler(exc: Exception) -> float:
        raise KeyError("handler")

    svc = Service("ts-test-badhandler", step, interval_s=0.01, on_error=bad_handler)
    svc.start()
    try:
        wait_for(lambda: svc.runs >= 1, what="the loop after a failing handler")
    finally:
        svc.stop(10)
    assert internal_error_counts().get("ts-test-badhandler.on_error", 0) >= 1


def test_stop_has_a_deadline_and_a_long_step_sees_stopping() -> None:
    entered = threading.Event()
    release = threading.Event()

    def step() -> None:
        entered.set()
        release.wait(60)

    svc = Service("ts-test-deadline", step, interval_s=3600)
    svc.start()
    assert entered.wait(30)
    assert svc.stop(0.05) is False  # the step still runs: the deadline passed
    assert svc.stopping.is_set() and svc.alive
    release.set()
    wait_for(lambda: not svc.alive, what="the thread's end after its step")
    assert svc.stop(10) is True


def test_stopped_service_starts_again_and_start_is_idempotent() -> None:
    steps: list[int] = []
    svc = Service("ts-test-restart", lambda: steps.append(1) or None, interval_s=3600)
    svc.start()
    svc.start()  # no second thread
    wait_for(lambda: len(steps) == 1, what="the first step")
    names = [t.name for t in threading.enumerate()].count("ts-test-restart")
    assert names == 1
    assert svc.stop(10)
    svc.start()
    wait_for(lambda: len(steps) == 2, what="the first step after a restart")
    assert svc.stop(10)


def test_stop_before_start_is_fine() -> None:
    svc = Service("ts-test-never", lambda: None, interval_s=1)
    assert svc.stop(1) is True and not svc.alive and not svc.started


def test_deadline_left() -> None:
    import time

    assert deadline_left(None) is None
    assert deadline_left(time.monotonic() - 5) == 0.0
    assert 0 < deadline_left(time.monotonic() + 100) <= 100  # type: ignore[operator]


FORK = textwrap.dedent("""
    import json, os, sys, threading, time
    from tracescore._internal.service import Service

    steps = {"again": [], "reset": []}
    forked = []
    again = Service("again", lambda: steps["again"].append(os.getpid()) or None,
                    interval_s=0.01, restart_after_fork=True,
                    on_fork=lambda: forked.append((os.getpid(), again.thread is None)))
    reset = Service("reset", lambda: steps["reset"].append(os.getpid()) or None,
                    interval_s=0.01)
    again.start(); reset.start()
    while not (steps["again"] and steps["reset"]):
        time.sleep(0.01)
    pid = os.fork()
    if pid == 0:
        deadline = time.monotonic() + 60
        while os.getpid() not in steps["again"] and time.monotonic() < deadline:
            time.sleep(0.01)
        out = {"again_alive": again.alive, "reset_alive": reset.alive,
               "again_ran": os.getpid() in steps["again"],
               "reset_ran": os.getpid() in steps["reset"],
               "on_fork_before_restart": forked == [(os.getpid(), True)]}
        reset.start()  # a reset service starts again when asked
        while os.getpid() not in steps["reset"] and time.monotonic() < deadline:
            time.sleep(0.01)
        out["reset_restarted"] = os.getpid() in steps["reset"]
        out["stopped"] = again.stop(10) and reset.stop(10)
        print(json.dumps(out), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    again.stop(10); reset.stop(10)
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no os.fork")
def test_after_fork_the_child_restarts_or_resets(tmp_path: Path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(FORK)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    child: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert child == {"again_alive": True, "reset_alive": False, "again_ran": True,
                     "reset_ran": False, "reset_restarted": True, "stopped": True,
                     "on_fork_before_restart": True}
