"""Scoring must not stop silently (issue 18): a metric's ``sys.exit()`` is an error score, the
scorer loop is supervised and its health visible, ``tracescore worker`` stops cleanly at any
moment of its start-up, its health server cannot be exhausted by open connections, and
``log_record`` keeps the caller's work bounded whatever the input size."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import cli_script, rows

from tracescore import Metric
from tracescore.record import RagRecord
from tracescore.testing import ScriptedMetric


class AsyncInterrupt(Metric):
    """A coroutine metric whose library raises KeyboardInterrupt."""

    name = "async_interrupt"
    requires = frozenset({"answer"})

    async def __call__(self, record: RagRecord) -> Any:
        await asyncio.sleep(0)
        raise KeyboardInterrupt


def _exit3(_record: RagRecord) -> float:
    sys.exit(3)


def _wait(cond: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    return cond()


# -- 1. a metric's SystemExit / KeyboardInterrupt ------------------------------------------------
def test_metric_sys_exit_is_an_error_score_and_scoring_goes_on(make_ts: Any,
                                                                db_path: Path) -> None:
    exits = ScriptedMetric(_exit3, name="exits")
    ts, _ = make_ts(metrics=["token_f1", exits, AsyncInterrupt()])
    for i in range(4):
        ts.log_record(query=f"q{i}", answer="the answer", ground_truths=["the answer"])
    t0 = time.monotonic()
    assert ts.flush(30)  # before: the scorer thread died and flush waited its whole timeout
    assert time.monotonic() - t0 < 25
    got = rows(db_path, "SELECT name, status, value, error FROM scores")
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in got:
        by_name.setdefault(r["name"], []).append(r)
    assert [r["status"] for r in by_name["token_f1"]] == ["ok"] * 4  # the others go on
    assert {(r["status"], r["error"]) for r in by_name["exits"]} == {
        ("error", "metric raised SystemExit(3)")}
    assert {(r["status"], r["error"]) for r in by_name["async_interrupt"]} == {
        ("error", "metric raised KeyboardInterrupt()")}
    # every job is done, none left leased to kill a restarted scorer again; each ran once
    assert rows(db_path, "SELECT DISTINCT status FROM jobs") == [{"status": "done"}]
    assert exits.calls == 4
    scorer = ts.stats()["scorer"]
    assert scorer["alive"] and scorer["restarts"] == 0 and scorer["last_error"] is None
    t0 = time.monotonic()
    assert ts.shutdown(timeout=20)
    assert time.monotonic() - t0 < 15


def test_a_dead_scorer_loop_is_restarted_and_its_jobs_given_back(make_ts: Any,
                                                                 db_path: Path) -> None:
    """Whatever escapes the loop (here an injected KeyboardInterrupt from its own code, as a
    ``redact`` or a bug could raise) ends that run of the loop, not scoring: the jobs it held
    are given back at once and scored by the restarted loop; stats() shows it."""
    gate = threading.Event()
    slow = ScriptedMetric(lambda r: 0.5, name="slow", gate=gate)
    ts, _ = make_ts(metrics=[slow])
    worker = ts.worker
    worker.restart_backoff_s = (0.05, 0.2)
    ts.log_record(query="q", answer="a")
    assert _wait(lambda: slow.calls >= 1)  # its job is leased and in flight
    real = worker._read_snapshot
    fired: list[bool] = []

    def boom(store: Any) -> None:
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt("injected")
        real(store)

    worker._read_snapshot = boom
    assert _wait(lambda: worker.restarts == 1 and worker.alive)
    gate.set()
    assert ts.flush(30)
    scorer = ts.stats()["scorer"]
    assert scorer["alive"] and scorer["restarts"] == 1 and not scorer["gave_up"]
    assert scorer["last_error"] == "KeyboardInterrupt: injected"
    assert rows(db_path, "SELECT status, value FROM scores") == [{"status": "ok", "value": 0.5}]
    job = rows(db_path, "SELECT status, attempts FROM jobs")
    assert job == [{"status": "done", "attempts": 2}]  # given back, then leased again


def test_a_scorer_that_keeps_dying_gives_up_visibly(make_ts: Any) -> None:
    """Restarts are bounded: past ``max_restarts`` in a row it stays dead, stats() and the
    worker's /readyz say so, and flush() returns False at once instead of waiting."""
    from tracescore.cli.worker import WorkerHealth

    ts, _ = make_ts(metrics=["token_f1"])
    worker = ts.worker
    worker.restart_backoff_s = (0.01, 0.02)
    worker.max_restarts = 2

    def boom(_store: Any) -> None:
        raise SystemExit(7)

    health = WorkerHealth(worker)
    server = health.serve(0, "127.0.0.1")
    port = server.server_address[1]
    try:
        # ready once the scorer has run and read the database (a loaded machine takes a while)
        assert _wait(lambda: _get(port, "/readyz") == 200)
        worker.db_snapshot_every_s = 0.0
        worker._read_snapshot = boom
        assert _wait(lambda: worker.gave_up)
        scorer = ts.stats()["scorer"]
        assert scorer == {**scorer, "alive": False, "restarts": 2, "gave_up": True,
                          "last_error": "SystemExit: 7"}
        assert _get(port, "/readyz") == 503
        assert _get(port, "/livez") == 503
        ts.log_record(query="q", answer="a", ground_truths=["a"])
        t0 = time.monotonic()
        assert not ts.flush(20)
        assert time.monotonic() - t0 < 10
    finally:
        server.shutdown()
        server.server_close()


def test_a_stop_during_the_restart_backoff_ends_it_and_the_thread(make_ts: Any) -> None:
    """The scorer's thread is a background service (issue 35): a loop that died waits its
    backoff there, and ``stop()`` ends that wait — no restart, the thread gone, well inside
    the backoff."""
    ts, _ = make_ts(metrics=["token_f1"])
    worker = ts.worker
    worker.restart_backoff_s = (60.0, 60.0)
    assert _wait(lambda: worker.alive)

    def boom(_store: Any) -> None:
        raise KeyboardInterrupt("injected")

    worker.db_snapshot_every_s = 0.0
    worker._read_snapshot = boom
    assert _wait(lambda: worker.last_error == "KeyboardInterrupt: injected"
                 and not worker.alive)
    thread = worker._thread
    assert thread is not None and thread.name == "tracescore-scorer" and thread.is_alive()
    t0 = time.monotonic()
    worker.stop(30)
    assert not thread.is_alive() and time.monotonic() - t0 < 30  # (the backoff: 60 s)
    assert worker.restarts == 0 and not worker.gave_up
    del worker._read_snapshot
    worker.start()  # and it starts again, with a loop of its own
    assert _wait(lambda: worker.alive) and worker._thread is not thread


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


# -- 2. SIGTERM during the worker's start-up ---------------------------------------------------
SLOW_IMPORT = textwrap.dedent("""
    # a metrics module as slow to import as one that loads a model: it waits for a gate file
    import os, time
    from pathlib import Path
    from tracescore.testing import ScriptedMetric

    Path(os.environ["IMPORTING"]).touch()
    deadline = time.monotonic() + 60
    while not Path(os.environ["GATE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    METRICS = [ScriptedMetric(lambda r: 1.0, name="gated")]
""")


def test_worker_sigterm_during_start_up_exits_0_with_a_start_line(tmp_path: Path) -> None:
    (tmp_path / "slowmod.py").write_text(SLOW_IMPORT)
    importing, gate = tmp_path / "importing", tmp_path / "gate"
    db = tmp_path / "w.db"
    env = {**os.environ, "IMPORTING": str(importing), "GATE": str(gate),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([*cli_script(), "worker", "--db", str(db), "--metrics-module",
                          "slowmod", "--exporter", "none", "--stop-timeout", "1"],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert _wait(importing.exists, 120)  # in its start-up, before the metrics are loaded
        p.terminate()
        time.sleep(0.2)
        gate.touch()
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err  # before: -15 (killed by the signal; 143 from a shell)
    lines = [ln for ln in err.splitlines() if ln.startswith("tracescore worker:")]
    assert lines == [f"tracescore worker: scoring 1 metric from {db} (pid {p.pid})",
                     f"tracescore worker: stopped (pid {p.pid})"], err


# -- 3. the health server's bounds -------------------------------------------------------------
class _Beat:
    """What WorkerHealth reads of a worker: a loop that turns and a database that answers."""

    def __init__(self) -> None:
        self.heartbeat = self.db_ok_at = time.time()
        self._running_jobs = 0
        self.alive = True
        self.gave_up = False


def _threads_named(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def test_health_server_idle_connections_cost_no_thread_and_time_out() -> None:
    from tracescore.cli.worker import WorkerHealth

    health = WorkerHealth(_Beat())
    health.conn_timeout_s = 1.0
    server = health.serve(0, "127.0.0.1")
    port = server.server_address[1]
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(100)]
    try:
        assert _get(port, "/livez") == 200  # at once, beside 100 idle connections
        assert _get(port, "/readyz") == 200
        assert threading.active_count() <= before + 2  # before: one thread per connection
        # idle ones are closed after conn_timeout_s (the server's side: EOF here)
        assert all(s.recv(1) == b"" for s in idle[:5])
        assert _wait(lambda: server.timed_out >= 100, 10)
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()


def test_health_server_half_sent_requests_cost_no_thread_and_end_at_the_deadline() -> None:
    """Half-sent requests are read by the accept loop, not a handler thread each (they used to
    fill ``max_handlers`` threads and shut further requests out); each is closed when its
    ``conn_timeout_s`` runs out, and probes answer all along."""
    from tracescore.cli.worker import WorkerHealth

    health = WorkerHealth(_Beat())
    health.conn_timeout_s = 1.0
    server = health.serve(0, "127.0.0.1")
    port = server.server_address[1]
    before = threading.active_count()
    half = []
    try:
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /livez HTTP/1.1\r\n")  # no end of headers
            half.append(s)
        assert _get(port, "/livez") == 200
        assert threading.active_count() <= before + 2
        assert _wait(lambda: server.timed_out >= 10, 10)
        assert all(s.recv(1) == b"" for s in half)
        assert _get(port, "/livez") == 200
    finally:
        for s in half:
            s.close()
        server.shutdown()
        server.server_close()


def test_worker_health_host_option_binds_that_address(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([*cli_script(), "worker", "--db", str(tmp_path / "w.db"),
                          "--metric", "token_f1", "--exporter", "none", "--health-port",
                          str(port), "--health-host", "127.0.0.1", "--stop-timeout", "1"],
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        def up() -> bool:
            assert p.poll() is None, p.communicate()[1]  # (an unknown option: exit 2)
            try:
                return _get(port, "/livez") == 200
            except OSError:
                return False
        assert _wait(up, 120)
        listening = Path("/proc/net/tcp").read_text()
        assert f"0100007F:{port:04X}" in listening  # 127.0.0.1, not 0.0.0.0
        p.terminate()
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    finally:
        if p.poll() is None:
            p.kill()


# -- 4. log_record's work is bounded -----------------------------------------------------------
def test_log_record_keeps_a_bounded_number_of_contexts(make_ts: Any, db_path: Path) -> None:
    from tracescore import client

    ts, _ = make_ts(metrics=["token_f1"])
    huge = [f"context {i}" for i in range(100_000)]
    rec = ts.log_record(query="q", answer="a", contexts=huge, ground_truths=["a"])
    # the request path built, checked (and would redact) at most MAX_LOG_CONTEXTS contexts
    assert len(rec.contexts) == client.MAX_LOG_CONTEXTS == 1_000
    assert [c.text for c in rec.contexts] == huge[:1_000]
    assert rec.metadata["tracescore.contexts_dropped"] == 99_000
    assert rec.metadata["tracescore.truncated"] == ["contexts"]
    assert ts.stats()["contexts_dropped"] == 99_000
    # a generator is bounded the same way (and its rest counted)
    rec2 = ts.log_record(query="q", answer="a", contexts=(c for c in huge[:1_500]))
    assert len(rec2.contexts) == 1_000 and rec2.metadata["tracescore.contexts_dropped"] == 500
    # and by characters: 3 contexts of 900,000 characters keep 2 (2,000,000 in all)
    big = ["x" * 900_000] * 3
    rec3 = ts.log_record(query="q", answer="a", contexts=big)
    assert len(rec3.contexts) == 2 and rec3.metadata["tracescore.contexts_dropped"] == 1
    assert ts.stats()["contexts_dropped"] == 99_501
    # a record within the bounds is untouched
    rec4 = ts.log_record(query="q", answer="a", contexts=["c1", "c2"], metadata={"k": 1})
    assert rec4.metadata == {"k": 1} and len(rec4.contexts) == 2
    assert ts.flush(60)
    stored = rows(db_path, "SELECT record_id, metadata FROM records")
    assert len(stored) == 4
    md = json.loads(next(r["metadata"] for r in stored if r["record_id"] == rec.record_id))
    assert md["tracescore.contexts_dropped"] == 99_000  # the note is stored with the record


def test_log_record_still_checks_the_contexts_it_keeps(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=["token_f1"])
    with pytest.raises(TypeError, match=r"contexts\[3\] must be a str or Context"):
        ts.log_record(query="q", contexts=["a", "b", "c", 4])
    with pytest.raises(TypeError, match=r"ground_truths\[1\] must be a str"):
        ts.log_record(query="q", ground_truths=["a", 2])
