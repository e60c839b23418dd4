"""Fleet mode on a real PostgreSQL: capture-only app processes, `tracescore worker` processes
killed and restarted, a fleet-wide judge budget, and the database going away under the app."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import cli_script, rows

import tracescore
from tracescore.testing import ScriptedMetric

pytestmark = pytest.mark.slow

FLEET_METRICS = textwrap.dedent("""
    import os, time
    from tracescore.testing import ScriptedMetric

    def slow(record):
        with open(os.environ["FLEET_CALLS"], "a") as f:
            f.write(record.record_id + "\\n")
        time.sleep(0.15)
        return 0.5

    METRICS = [ScriptedMetric(slow, name="fleet")]
""")

APP = textwrap.dedent("""
    import sys
    import tracescore
    from tracescore.testing import ScriptedMetric

    db, n, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # capture only: the same metric name (and version) as the workers, no scoring here
    ts = tracescore.init(db=db, metrics=[ScriptedMetric(lambda r: 0.0, name="fleet")],
                         score=False)
    for i in range(n):
        ts.log_record(query=f"{tag} question {i}", answer="an answer")
    assert ts.queue.flush(60)
    assert ts.worker._thread is None  # no scoring thread in a capture-only process
    ts.shutdown(timeout=30)
    print("captured", ts.queue.written, flush=True)
""")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "FLEET_CALLS": str(tmp_path / "calls.log"),
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
            **extra}


def _worker(db: str, tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A worker process; its health file (``p.health``) exists once it is live and ready."""
    health = tmp_path / f"worker-{uuid.uuid4().hex[:8]}.ready"
    p = subprocess.Popen(
        [*cli_script(), "worker", "--db", db, "--lease-seconds", "2", "--stop-timeout", "2",
         "--health-file", str(health), *args], cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    p.health = health  # type: ignore[attr-defined]
    return p


def _wait_ready(workers: list[subprocess.Popen[str]], timeout: float = 120.0) -> None:
    """Wait until every worker has started (its health file exists): a SIGTERM before the
    worker installs its handler would end it like an unhandled signal (a loaded machine
    takes seconds to import), which is not the graceful stop under test."""
    deadline = time.monotonic() + timeout
    for w in workers:
        while not w.health.exists():  # type: ignore[attr-defined]
            assert w.poll() is None, w.stderr.read() if w.stderr else ""
            assert time.monotonic() < deadline, "worker not ready"
            time.sleep(0.05)


def test_three_apps_three_workers_sigkilled_every_job_scored_exactly_once(
        pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "fleetmetrics.py").write_text(FLEET_METRICS)
    (tmp_path / "app.py").write_text(APP)
    env = _env(tmp_path)
    per_app, apps_n = 80, 3
    tracescore.store.open_store(pg_url).close()  # schema once, before the race (not needed)
    apps = [subprocess.Popen([sys.executable, str(tmp_path / "app.py"), pg_url, str(per_app),
                              f"app{i}"], env=env, stdout=subprocess.PIPE, text=True)
            for i in range(apps_n)]
    worker_args = ("--metrics-module", "fleetmetrics", "--concurrency", "3")
    workers = [_worker(pg_url, tmp_path, *worker_args, env=env) for _ in range(3)]
    rng = random.Random(12)
    kills = 0
    total = per_app * apps_n
    try:
        for app in apps:
            out, _ = app.communicate(timeout=60)
            assert app.returncode == 0 and f"captured {per_app}" in out
        deadline = time.monotonic() + 60
        next_kill = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            done = rows(pg_url, "SELECT count(*) AS n FROM jobs WHERE status='done'")[0]["n"]
            if done == total:
                break
            if time.monotonic() >= next_kill and kills < 8:
                i = rng.randrange(len(workers))
                workers[i].send_signal(signal.SIGKILL)
                workers[i].wait(10)
                kills += 1
                workers[i] = _worker(pg_url, tmp_path, *worker_args, env=env)
                next_kill = time.monotonic() + rng.uniform(0.8, 2.0)
            time.sleep(0.1)
        # a graceful stop: SIGTERM, exit 0, no lease left behind
        _wait_ready(workers)
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) == 0, w.stderr.read() if w.stderr else ""
    finally:
        for p in [*apps, *workers]:
            if p.poll() is None:
                p.kill()
    assert kills >= 3
    jobs = rows(pg_url, "SELECT status, count(*) AS n FROM jobs GROUP BY status")
    assert jobs == [{"status": "done", "n": total}]
    per_record = rows(pg_url, "SELECT s.record_id, count(*) AS n, min(s.job_id) AS job,"
                              " min(j.job_id) AS j FROM scores s JOIN jobs j"
                              " ON j.record_id = s.record_id GROUP BY s.record_id")
    assert len(per_record) == total
    assert {r["n"] for r in per_record} == {1} and all(r["job"] == r["j"] for r in per_record)
    assert {r["value"] for r in rows(pg_url, "SELECT DISTINCT value FROM scores")} == {0.5}
    calls = (tmp_path / "calls.log").read_text().split()
    assert set(calls) == {r["record_id"] for r in per_record}
    # Re-runs only for jobs in flight in a killed worker (≤ its concurrency per kill).
    assert len(calls) - total <= kills * 3


def test_three_workers_share_one_judge_budget(pg_url: str, tmp_path: Path) -> None:
    """60 calls/minute for the fleet (burst 10): three workers together stay inside the
    bucket's envelope, calls(t) <= 10 + t seconds, at every moment."""
    from tracescore.testing import ScriptedJudgeServer, lexical_responder

    stamps: list[float] = []
    lock = threading.Lock()

    def counting(step: str, data: Any, request: dict[str, Any]) -> Any:
        with lock:
            stamps.append(time.monotonic())
        return lexical_responder(step, data, request)

    ts = tracescore.init(db=pg_url, metrics=["context_relevance"], score=False)
    for i in range(80):
        ts.log_record(query=f"question {i} about bikes", contexts=[f"context {i} about bikes"],
                      answer="an answer")
    assert ts.queue.flush(30)
    ts.shutdown()
    with ScriptedJudgeServer(counting) as srv:
        env = _env(tmp_path, OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-test")
        args = ("--metric", "context_relevance", "--judge", "openai:scripted",
                "--judge-calls-per-minute", "60", "--no-judge-canary", "--concurrency", "4")
        t0 = time.monotonic()
        workers = [_worker(pg_url, tmp_path, *args, env=env) for _ in range(3)]
        try:
            time.sleep(20)
            _wait_ready(workers)
        finally:
            for w in workers:
                w.send_signal(signal.SIGTERM)
            for w in workers:
                assert w.wait(30) == 0, w.stderr.read() if w.stderr else ""
    assert len(stamps) >= 10  # the fleet did work
    first = stamps[0]
    for k, t in enumerate(sorted(stamps), start=1):
        # k calls by time t: at most the burst plus one per second since the first one
        assert k <= 10 + (t - first) + 1, (k, t - first)
    assert len(stamps) <= 10 + (time.monotonic() - t0) + 1
    done = rows(pg_url, "SELECT count(*) AS n FROM scores")[0]["n"]
    # one call per record (a call in flight at SIGTERM may end without its score stored)
    assert done <= len(stamps) <= done + 12


@pytest.mark.allow_internal_errors
def test_postgres_down_for_30_seconds_never_blocks_the_app(pg_server: str) -> None:
    """The app logs a record every 5 ms while its PostgreSQL is stopped for 30 s: no call
    waits on the database, what the bounded buffer cannot hold is dropped and counted, and
    capture, writing and scoring resume by themselves when the server is back."""
    from pg import Cluster, create_database

    cluster = Cluster()  # its own server: stopping it must not touch the other tests
    try:
        url, _drop = create_database(cluster.url)
        ts = tracescore.init(db=url, metrics=[ScriptedMetric(lambda r: 0.5, name="m")],
                             max_queue=2000)
        latencies: list[float] = []
        stop = threading.Event()

        def app() -> None:
            i = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                ts.log_record(query=f"q{i}", answer="a")
                latencies.append(time.perf_counter() - t0)
                i += 1
                time.sleep(0.005)

        thread = threading.Thread(target=app)
        thread.start()
        try:
            time.sleep(3)
            cluster.stop_server()
            down_at = len(latencies)
            time.sleep(30)
            during = latencies[down_at:]
            cluster.start_server()
            time.sleep(5)
        finally:
            stop.set()
            thread.join()
        # no lease left to expire: the worker gave back what failed. (A generous deadline:
        # at load 8 writing and scoring the ~2,000 buffered records took over 30 s; flush
        # returns as soon as all is done. On failure, what was still open.)
        assert ts.flush(120), ts.stats()
        submitted = len(latencies)
        stored = rows(url, "SELECT count(*) AS n FROM records")[0]["n"]
        counters = {r["name"]: r["value"] for r in rows(url, "SELECT * FROM counters")}
        open_jobs = rows(url, "SELECT count(*) AS n FROM jobs WHERE status IN "
                              "('pending', 'leased')")[0]["n"]
        ts.shutdown(timeout=30)
        # app latency unaffected while the database was down
        during.sort()
        assert during[len(during) // 2] < 0.002 and during[int(len(during) * 0.99)] < 0.02
        assert max(during) < 0.25
        # losses counted: the buffer (2,000) held part of the outage, the rest was dropped
        assert ts.queue.dropped > 0 and ts.queue.failed == 0
        assert stored + ts.queue.dropped == submitted
        assert counters["records_dropped"] == ts.queue.dropped
        assert counters["records_seen"] == submitted
        # recovery without operator action: everything stored was scored, exactly once
        assert open_jobs == 0
        assert rows(url, "SELECT count(*) AS n FROM scores")[0]["n"] == stored
    finally:
        cluster.destroy()


def test_worker_exports_scores_on_carriers_logs_and_metrics_with_health(
        pg_url: str, tmp_path: Path) -> None:
    """A remote worker's scores reach the OTLP backend on a carrier span linked to the app's
    span and as evaluation log records; its pipeline metrics (open jobs) go out too; /livez
    and /readyz answer; SIGTERM exits 0 with the deliveries written down."""
    import socket
    import urllib.error
    import urllib.request

    from tracescore import attributes as A
    from tracescore.testing import OtlpReceiver

    ts = tracescore.init(db=pg_url, metrics=["token_f1"], score=False)
    recs = [ts.log_record(query=f"q{i}", answer="the answer", ground_truths=["the answer"])
            for i in range(3)]
    assert ts.queue.flush(20)
    ts.shutdown()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with OtlpReceiver() as rx:
        env = _env(tmp_path, **rx.env(), OTEL_METRIC_EXPORT_INTERVAL="500",
                   OTEL_SERVICE_NAME="scorer")
        w = _worker(pg_url, tmp_path, "--metric", "token_f1", "--health-port", str(port),
                    env=env)
        try:
            def probe(path: str) -> int:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                                timeout=2) as r:
                        return int(r.status)
                except urllib.error.HTTPError as exc:
                    return int(exc.code)
                except OSError:
                    return 0
            assert rx.wait_for(lambda: probe("/readyz") == 200, timeout=30)
            assert probe("/livez") == 200 and probe("/nope") == 404

            def carriers_in() -> list[Any]:
                return [sp for sp in rx.spans()
                        if A.score_attribute("token_f1") in sp.attributes]
            assert rx.wait_for(lambda: len(carriers_in()) >= 3, timeout=30)
            carriers = carriers_in()
            assert len(carriers) == 3  # once each
            assert {(c.trace_id, c.attributes[A.SCORED_SPAN_ID]) for c in carriers} == {
                (r.trace_id, r.span_id) for r in recs}
            assert all(c.links == [(c.trace_id, c.attributes[A.SCORED_SPAN_ID])]
                       for c in carriers)
            logs = rx.wait_for(lambda: [lr for lr in rx.log_records()
                                        if lr.event_name == A.GEN_AI_EVALUATION_RESULT] or None,
                               timeout=30)
            assert {lr.trace_id for lr in logs} == {r.trace_id for r in recs}
            # its own pipeline metrics: the queue depth a worker Deployment scales on
            assert rx.wait_for(lambda: rx.metric_points(A.METRIC_JOBS_OPEN), timeout=30)
            assert carriers[0].resource.get("service.name") == "scorer"
        finally:
            w.send_signal(signal.SIGTERM)
            assert w.wait(30) == 0, w.stderr.read() if w.stderr else ""
    assert {r["delivery"] for r in rows(pg_url, "SELECT delivery FROM scores")} == {"carrier"}


def test_capture_only_needs_no_judge_and_starts_no_scoring(pg_url: str) -> None:
    ts = tracescore.init(db=pg_url, metrics=["faithfulness", "token_f1"], score=False,
                         judge="openai:never-called")
    try:
        assert ts.judge_session is None and ts.worker._thread is None
        rec = ts.log_record(query="q", contexts=["c"], answer="a", ground_truths=["a"])
        assert ts.flush(10)  # capture only: flush waits for the write, not for scores
        jobs = rows(pg_url, "SELECT metric, status FROM jobs WHERE record_id=? ORDER BY metric",
                    rec.record_id)
        assert jobs == [{"metric": "faithfulness", "status": "pending"},
                        {"metric": "token_f1", "status": "pending"}]
    finally:
        ts.shutdown()


def test_judge_and_embedding_caches_are_shared_by_the_fleet(pg_url: str) -> None:
    from tracescore.store.postgres import PostgresEmbeddingCache

    a, b = tracescore.store.open_store(pg_url), tracescore.store.open_store(pg_url)
    try:
        a.judge_cache_put("k", "extract", "model", "1", {"texts": {"a": 1}}, 3, 4)
        assert b.judge_cache_get("k") == {"texts": {"a": 1}}
    finally:
        a.close()
        b.close()
    one, other = PostgresEmbeddingCache(pg_url), PostgresEmbeddingCache(pg_url)
    try:
        one.put_many("m", [("h1", [0.5, 0.25])])
        assert other.get_many("m", ["h1", "h2"]) == {"h1": [0.5, 0.25]}
        assert other.count("m") == 1 and other.count() == 1
    finally:
        one.close()
        other.close()
