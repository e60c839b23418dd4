"""A judge that cannot be reached is said out loud: one WARNING naming its URL and what
happens to the jobs, an INFO when it answers again, the reason beside "pending" in ``report``
(text, JSON, HTML, read by another process), and the CLI (``judge-check``, ``demo``) failing in
seconds with one line and exit code 3 instead of tracebacks or a hang.

The judges are real sockets on 127.0.0.1: a closed port, a server that accepts and never
answers, one that resets every connection, and a gate that forwards to the scripted judge
server once the test opens it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import rows

from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.testing.judge import Fault, ScriptedJudgeServer, lexical_responder

KEY = "sk-test-DO-NOT-SHOW-0123456789abcdef"
Q = "What battery does the Cargo have?"
CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "Warranty lasts two years."]
ANSWER = "The Cargo ships with a 750 Wh battery."


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()  # nothing listens there now: connections are refused
    return port


class Gate:
    """A TCP server on 127.0.0.1: ``hang`` accepts and never answers, ``reset`` resets every
    connection, ``forward`` pipes each connection to ``target`` (a real judge server)."""

    def __init__(self, mode: str, target: int | None = None) -> None:
        self.mode = mode
        self.target = target
        self._srv = socket.socket()
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(128)
        self.port = int(self._srv.getsockname()[1])
        self._held: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            if self.mode == "hang":
                self._held.append(conn)
            elif self.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            else:
                threading.Thread(target=self._forward, args=(conn,), daemon=True).start()

    def _forward(self, conn: socket.socket) -> None:
        assert self.target is not None
        up = socket.create_connection(("127.0.0.1", self.target))

        def pipe(a: socket.socket, b: socket.socket) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            finally:
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pipe, args=(up, conn), daemon=True).start()
        pipe(conn, up)

    def close(self) -> None:
        self._stop = True
        self._srv.close()
        for c in self._held:
            c.close()


@pytest.fixture
def gate() -> Iterator[Callable[..., Gate]]:
    made: list[Gate] = []

    def make(mode: str, target: int | None = None) -> Gate:
        g = Gate(mode, target)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def wait_until(cond: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def start(make_ts: Any, base_url: str, **kw: Any) -> Any:
    kw.setdefault("judge_canary", False)
    kw.setdefault("judge_backoff_s", (0.01, 0.05))
    kw.setdefault("judge_breaker", (5, 0.2))
    ts, _ = make_ts(metrics=["coherence", "faithfulness"],
                    judge=OpenAIJudge("judge-model", base_url=base_url, api_key=KEY), **kw)
    return ts


def ours(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("tracescore") and r.levelno == level]


def cli(*args: str, timeout: float = 90.0, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}
    full.update({"OPENAI_API_KEY": KEY, **(env or {})})
    return subprocess.run([sys.executable, "-m", "tracescore.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=full, cwd=cwd)


# -- the library: one WARNING, an INFO when it answers, the reason on the jobs ----------------
def test_one_warning_for_an_outage_and_an_info_when_the_judge_answers(make_ts, db_path, gate,
                                                                        caplog):
    caplog.set_level(logging.INFO, logger="tracescore")
    with ScriptedJudgeServer(lexical_responder) as srv:
        g = gate("reset", target=int(srv.base_url.split(":")[2].split("/")[0]))
        ts = start(make_ts, g.base_url)
        for i in range(4):
            ts.log_record(query=f"{Q} #{i}", answer=ANSWER, contexts=CONTEXTS)
        # several breaker cycles (probe, fail, open again): still one WARNING
        wait_until(lambda: ts.judge_session.judge.breaker.opened >= 4, "the breaker reopening")
        warnings = ours(caplog, logging.WARNING)
        assert len(warnings) == 1, warnings
        [w] = warnings
        assert g.base_url in w and "unreachable" in w and "connection reset by peer" in w
        assert "retried when it answers" in w and "error score" in w  # the jobs' fate
        assert "judge_max_wait_s" in w
        assert KEY not in caplog.text
        # the reason lives with the jobs in the database, for any process to read
        reasons = wait_until(lambda: {r["reason"] for r in rows(
            db_path, "SELECT reason FROM jobs WHERE status = 'pending' AND reason IS NOT NULL")},
            "a deferred job")
        assert any(r.startswith(f"waiting for the judge at {g.base_url} (unreachable since ")
                   and "connection reset by peer" in r for r in reasons), reasons
        assert ours(caplog, logging.INFO) == []

        g.mode = "forward"  # the judge is back
        assert ts.flush(60)
    assert len(ours(caplog, logging.WARNING)) == 1
    infos = [m for m in ours(caplog, logging.INFO) if "answers again" in m]
    assert len(infos) == 1 and g.base_url in infos[0]
    scores = rows(db_path, "SELECT status FROM scores")
    assert len(scores) >= 8 and {s["status"] for s in scores} == {"ok"}


def test_a_judge_that_accepts_and_never_answers_is_named_as_not_answering(make_ts, gate,
                                                                           caplog):
    caplog.set_level(logging.INFO, logger="tracescore")
    g = gate("hang")
    ts = start(make_ts, g.base_url, judge_timeout_s=0.3)
    ts.log_record(query=Q, answer=ANSWER, contexts=CONTEXTS)
    wait_until(lambda: ours(caplog, logging.WARNING), "the warning")
    [w] = ours(caplog, logging.WARNING)
    assert g.base_url in w and "not answering" in w and "no answer within 0.3 s" in w
    # (the judge never answers: the fixture's shutdown would wait its whole flush timeout)
    ts.shutdown(1)


def test_report_in_another_process_says_why_jobs_are_pending(make_ts, db_path, caplog,
                                                             tmp_path):
    caplog.set_level(logging.INFO, logger="tracescore")
    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    ts = start(make_ts, url)
    for i in range(3):
        ts.log_record(query=f"{Q} #{i}", answer=ANSWER, contexts=CONTEXTS)
    wait_until(lambda: ours(caplog, logging.WARNING), "the warning")
    [w] = ours(caplog, logging.WARNING)
    assert url in w and "connection refused" in w
    wait_until(lambda: len(rows(db_path, "SELECT 1 FROM jobs WHERE status = 'pending' AND "
                                "reason LIKE 'waiting for the judge%'")) == 6,
               "every job deferred")
    assert not ts.flush(0.5)
    ts.shutdown(1)  # (the deferred jobs are stored: the flush inside would only wait them out)

    want = f"waiting for the judge at {url} (unreachable since "
    text = cli("report", "--db", str(db_path))
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if "pending:" in x)
    assert line.strip().startswith("6 pending: waiting for the judge at")
    flat = " ".join(text.stdout.split())
    assert want in flat and "connection refused" in flat

    js = cli("report", "--db", str(db_path), "--json")
    data = json.loads(js.stdout)
    assert data["pending_jobs"] == 6
    [reason] = data["pending_reasons"]
    assert reason["jobs"] == 6 and reason["state"] == "pending"
    assert reason["reason"].startswith(want) and "connection refused" in reason["reason"]

    page = tmp_path / "r.html"
    html = cli("report", "--db", str(db_path), "--html", str(page))
    assert html.returncode == 0, html.stderr
    body = page.read_text()
    assert 'data-pending="pending"' in body and want in body and KEY not in body


# -- judge-check: one line and exit code 3 ----------------------------------------------------
def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr and KEY not in proc.stderr + proc.stdout
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_judge_check_closed_port_is_one_line_and_exit_3(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    t0 = time.monotonic()
    proc = cli("judge-check", "--judge", "openai:judge-model", "--db", str(tmp_path / "j.db"),
               env={"OPENAI_BASE_URL": url})
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 3, proc.stderr
    line = _one_line(proc)
    assert f"cannot reach the judge at {url}: connection refused" in line


@pytest.mark.parametrize("mode", ["hang", "reset"])
def test_judge_check_hanging_or_resetting_server_is_one_line_and_exit_3(tmp_path, gate, mode):
    g = gate(mode)
    proc = cli("judge-check", "--judge", "openai:judge-model", "--db", str(tmp_path / "j.db"),
               "--timeout", "1", env={"OPENAI_BASE_URL": g.base_url})
    assert proc.returncode == 3, proc.stderr
    line = _one_line(proc)
    assert g.base_url in line
    assert ("did not answer within 1 s" if mode == "hang" else "connection reset") in line


def test_judge_check_server_errors_exit_3_and_refusals_exit_4(tmp_path):
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(*[Fault(503)] * 1000)
        down = cli("judge-check", "--judge", "openai:judge-model", "--db",
                   str(tmp_path / "a.db"), env={"OPENAI_BASE_URL": srv.base_url})
        with srv._lock:
            srv.faults.clear()
        srv.inject(*[Fault(401)] * 1000)
        refused = cli("judge-check", "--judge", "openai:judge-model", "--db",
                      str(tmp_path / "b.db"), "--json", env={"OPENAI_BASE_URL": srv.base_url})
    assert down.returncode == 3, down.stderr
    assert f"the judge at {srv.base_url} keeps failing: judge server error (503)" in \
        _one_line(down)
    assert refused.returncode == 4, refused.stderr
    assert f"the judge at {srv.base_url} refused every request" in _one_line(refused)
    assert json.loads(refused.stdout)["exit_code"] == 4


def test_judge_check_help_documents_the_exit_codes():
    out = cli("judge-check", "--help").stdout
    assert "Exit codes" in out and "3  the judge cannot be reached" in out


# -- demo: a check up front, wording that fits the judge ---------------------------------------
def test_demo_with_an_unreachable_judge_fails_in_seconds(tmp_path, gate):
    for url in (f"http://127.0.0.1:{closed_port()}/v1", gate("hang").base_url):
        t0 = time.monotonic()
        proc = cli("demo", "--judge", "openai:judge-model", "--db", str(tmp_path / "d.db"),
                   env={"OPENAI_BASE_URL": url}, timeout=60)
        took = time.monotonic() - t0
        assert proc.returncode == 3, proc.stderr
        line = _one_line(proc)
        assert url in line and ("connection refused" in line or "did not answer" in line)
        assert "small local model" not in proc.stdout
        assert took < 45  # the check waits 10 s at most; the rest is Python starting


def test_demo_wording_fits_an_openai_judge(tmp_path):
    with ScriptedJudgeServer(lexical_responder) as srv:
        proc = cli("demo", "--judge", "openai:judge-model", "--db", str(tmp_path / "d.db"),
                   env={"OPENAI_BASE_URL": srv.base_url}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("A judge demo asks 3 questions")
    assert f"to the judge at {srv.base_url}" in first
    assert "local model" not in proc.stdout + proc.stderr
