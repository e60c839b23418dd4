"""Several ``tracescore serve`` processes on one PostgreSQL database: each trace becomes one
record, scored once; a ``kill -9`` of one of them mid-stream loses no acknowledged trace and
scores none twice (the survivor takes over its traces and jobs when their leases end)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from helpers import cli_script, rows, wait_for
from test_intake_protocol import genai_request, post, span_ids

TESTS = Path(__file__).parent


def start_serve(db: str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")])}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    proc = subprocess.Popen(
        [*cli_script(), "serve", "--db", db, "--otlp-http", "127.0.0.1:0",
         "--metrics-module", "intake_apps.fleet_metrics", "--grace-seconds", "0.3",
         "--lease-seconds", "3", *extra],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"http 127\.0\.0\.1:(\d+)", line)
    assert m, line + proc.stderr.read()[-2000:] if proc.poll() is not None else line
    return proc, int(m.group(1))


def test_two_serve_processes_and_a_kill_9_score_every_acknowledged_trace_once(pg_url):
    a, port_a = start_serve(pg_url)
    b, port_b = start_serve(pg_url)
    acked: list[str] = []
    try:
        for i in range(60):
            tid = os.urandom(16)
            # the load-balancing exporter: a whole trace to one replica; after the kill, the
            # dead replica's share goes to the survivor (the Collector's retry)
            port = port_b if i % 2 or i >= 30 else port_a
            if i == 30:
                a.send_signal(signal.SIGKILL)  # mid-stream: traces open, jobs leased
                a.wait(30)
            code, _, _ = post(port, genai_request(tid).SerializeToString())
            if code == 200:
                acked.append(tid.hex())
        assert len(acked) == 60

        def all_scored() -> bool:
            n = rows(pg_url, "SELECT count(DISTINCT record_id) AS n FROM scores")[0]["n"]
            return n >= len(acked)

        wait_for(all_scored, 120, "every acknowledged trace scored")
        got = rows(pg_url, "SELECT trace_id, count(*) AS n FROM records GROUP BY trace_id")
        assert sorted(r["trace_id"] for r in got) == sorted(acked)
        assert {r["n"] for r in got} == {1}
        twice = rows(pg_url, "SELECT record_id, name, count(*) AS n FROM scores "
                             "GROUP BY record_id, name HAVING count(*) > 1")
        assert twice == []
        per = rows(pg_url, "SELECT name, count(*) AS n FROM scores GROUP BY name")
        assert {r["name"]: r["n"] for r in per} == {"context_count": 60, "answer_length": 60}
        assert rows(pg_url, "SELECT count(*) AS n FROM intake_traces WHERE state <> 'done'"
                    )[0]["n"] == 0
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
    assert b.returncode == 0


def test_serve_process_stops_cleanly_on_sigterm(tmp_path):
    db = str(tmp_path / "s.db")
    proc, port = start_serve(db)
    try:
        assert post(port, genai_request().SerializeToString())[0] == 200
        wait_for(lambda: rows(db, "SELECT count(*) AS n FROM scores")[0]["n"] == 2, 60,
                 "the record scored")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0
    assert proc.stderr is not None and "stopped" in proc.stderr.read()


def test_two_serve_processes_forward_every_span_once_with_its_scores(pg_url):
    from collections import Counter

    from tracescore import attributes as A
    from tracescore.testing import OtlpReceiver

    with OtlpReceiver() as hop:
        a, port_a = start_serve(pg_url, "--forward", hop.endpoint, "--hold-seconds", "30")
        b, port_b = start_serve(pg_url, "--forward", hop.endpoint, "--hold-seconds", "30")
        try:
            tids = [os.urandom(16) for _ in range(20)]
            for i, tid in enumerate(tids):
                body = genai_request(tid).SerializeToString()
                assert post(port_a if i % 2 else port_b, body)[0] == 200
            spans = hop.wait_for(lambda: (lambda s: s if len(s) >= 60 else None)(hop.spans()),
                                 timeout=120)
            assert spans, f"{len(hop.spans())} spans forwarded of 60"
            counts = Counter((s.trace_id, s.span_id) for s in spans)
            assert len(counts) == 60 and set(counts.values()) == {1}
            root_ids = {span_ids(t)[0].hex() for t in tids}
            roots = [s for s in spans if s.span_id in root_ids]
            assert len(roots) == 20
            assert all(A.score_attribute("context_count") in r.attributes for r in roots)
        finally:
            for p in (a, b):
                p.send_signal(signal.SIGTERM)
                p.wait(60)
        assert len(hop.spans()) == 60  # nothing sent again at the stop
