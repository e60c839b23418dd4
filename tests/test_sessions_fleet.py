"""Sessions in a fleet (PostgreSQL): capture-only app processes write the turns, two
``tracescore worker --session-idle`` processes close the sessions — each exactly once — with
the turn-level aggregates of the scores the workers computed."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import uuid
from pathlib import Path

from helpers import cli_script, rows, wait_for

import tracescore
from tracescore.testing import ScriptedMetric

METRICS = textwrap.dedent("""
    from tracescore.testing import ScriptedMetric

    class Graded(ScriptedMetric):
        threshold = 0.5

    METRICS = [Graded(lambda r: 0.9 if "good" in r.answer else 0.1, name="graded")]
""")


def test_two_workers_close_each_session_once(pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "sessionmetrics.py").write_text(METRICS)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    # capture only (score=False): no closer, no scoring in the app
    app = tracescore.init(db=pg_url, metrics=[ScriptedMetric(name="graded")], score=False,
                          session_idle="5m")
    assert app.sessions is None
    keys = [f"chat-{i}" for i in range(6)]
    for i, key in enumerate(keys):
        for t in range(3):
            app.log_record(query=f"{key} q{t}", answer="good" if t != i % 3 else "bad",
                           session_id=key)
    assert app.queue.flush(60)
    app.shutdown(30)

    workers = []
    for _ in range(2):
        health = tmp_path / f"w-{uuid.uuid4().hex[:8]}.ready"
        workers.append(subprocess.Popen(
            [*cli_script(), "worker", "--db", pg_url, "--metrics-module", "sessionmetrics",
             "--session-idle", "0.3", "--health-file", str(health), "--stop-timeout", "2"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True))
    try:
        wait_for(lambda: rows(pg_url, "SELECT count(*) AS n FROM sessions WHERE status ="
                                      " 'closed'")[0]["n"] == len(keys),
                 timeout=180, what="every session closed by the workers")
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(60) == 0, w.stderr.read() if w.stderr else ""
    assert {r["closes"] for r in rows(pg_url, "SELECT closes FROM sessions")} == {1}
    got = rows(pg_url, "SELECT r.session_id, s.value FROM scores s JOIN records r ON"
                       " r.record_id = s.record_id WHERE s.name = 'session.graded.passing'"
                       " ORDER BY r.session_id")
    assert [(g["session_id"], round(g["value"], 3)) for g in got] == [
        (k, round(2 / 3, 3)) for k in keys]
    [roll] = rows(pg_url, "SELECT sum(n_ok) AS n FROM hourly_scores WHERE name ="
                          " 'session.turns'")
    assert roll["n"] == len(keys)
