"""Small helpers shared by tests (import as ``from helpers import ...``)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def trace_statements(monkeypatch: Any) -> tuple[list[str], Callable[[], None]]:
    """Every statement run on a SQLite connection opened from now on, in order (the
    store's, the readers', the CLI's: ``sqlite3.connect`` traced); call the returned
    function to stop opening traced connections."""
    seen: list[str] = []
    real_connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    return seen, lambda: monkeypatch.setattr(sqlite3, "connect", real_connect)


def is_pg(db: Path | str) -> bool:
    return str(db).startswith(("postgresql://", "postgres://"))


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Poll ``cond`` until it is truthy and return its value; a generous deadline (a loaded
    machine), then an AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout:g}s: {what}")
        time.sleep(0.02)


def rows(db: Path | str, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Rows of ``sql`` (``?`` placeholders) on a SQLite file or a PostgreSQL URL."""
    from tracescore.store.compat import connect_reader

    conn = connect_reader(str(db))
    try:
        out = [dict(r) for r in conn.execute(sql, args).fetchall()]
        conn.commit()  # an UPDATE … RETURNING in a test
        return out
    finally:
        conn.close()


def execute(db: Path | str, *stmts: str) -> None:
    """Run ``stmts`` (DDL, updates: no parameters) on a SQLite file or a PostgreSQL URL, in
    order, committed (e.g. to put a database back as an older version left it)."""
    if is_pg(db):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as pg:
            for stmt in stmts:
                pg.execute(stmt)
        return
    import sqlite3

    conn = sqlite3.connect(str(db))
    try:
        for stmt in stmts:
            conn.execute(stmt)
        conn.commit()
    finally:
        conn.close()


def cli_script() -> list[str]:
    """The installed console script, else the module (same code, still a real process)."""
    beside = Path(sys.executable).with_name("tracescore")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("tracescore")
    return [found] if found else [sys.executable, "-m", "tracescore.cli"]


def run_cli(*args: Any) -> Any:
    """``tracescore ARGS`` in this process (click's runner)."""
    from click.testing import CliRunner

    from tracescore.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def assert_no_content_kept(db: Path, exporter: Any, query: str, answer: str) -> None:
    """``capture_content=False``: the one record has no text, its text metrics are skipped,
    and neither the spans nor the database file contain the query or the answer."""
    [rec] = records(db)
    assert rec["query"] is None and rec["answer"] is None and rec["contexts"] == []
    assert rec["content_captured"] == 0
    assert {j["status"] for j in jobs(db, rec["record_id"]).values()} == {"skipped"}
    raw = Path(db).read_bytes()
    for span in exporter.get_finished_spans():
        for value in span.attributes.values():
            assert query not in str(value) and answer not in str(value)
    assert query.encode() not in raw and answer.encode() not in raw


def records(db: Path | str) -> list[dict[str, Any]]:
    out = rows(db, "SELECT * FROM records ORDER BY created_at, "
               + ("record_id" if is_pg(db) else "rowid"))
    for r in out:
        r["contexts"] = json.loads(r["contexts"])
        r["ground_truths"] = json.loads(r["ground_truths"])
        r["metadata"] = json.loads(r["metadata"])
    return out


def scores(db: Path | str, record_id: str | None = None) -> dict[str, dict[str, Any]]:
    sql = "SELECT * FROM scores" + (" WHERE record_id = ?" if record_id else "")
    got = rows(db, sql, *([record_id] if record_id else []))
    return {r["name"]: r for r in got} if record_id else {str(r["score_id"]): r for r in got}


def jobs(db: Path | str, record_id: str) -> dict[str, dict[str, Any]]:
    return {r["metric"]: r for r in rows(db, "SELECT * FROM jobs WHERE record_id=?", record_id)}


def stored_scores(db: Path | str, record_id: str) -> dict[str, dict[str, Any]]:
    """A record's scores by name, with their details parsed."""
    out = {}
    for r in rows(db, "SELECT * FROM scores WHERE record_id=?", record_id):
        r["details"] = json.loads(r["details"] or "{}")
        out[r["name"]] = r
    return out


# -- scripted judge verdicts (for ScriptedJudgeServer responders) --------------------------
class Script:
    """A responder: per step, a constant reply or a function of the step's DATA document.

    A step without an entry is recorded in ``unexpected`` (and answered with junk), so a test
    can assert that the metrics asked for exactly the steps it scripted; every (step, data)
    is kept in ``seen``.
    """

    def __init__(self, **steps: Any) -> None:
        self.steps = steps
        self.unexpected: list[str] = []
        self.seen: list[tuple[str, Any]] = []

    def __call__(self, step: str, data: Any, request: dict[str, Any]) -> Any:
        self.seen.append((step, data))
        reply = self.steps.get(step)
        if reply is None:
            self.unexpected.append(step)
            return {"unexpected": step}
        return reply(data) if callable(reply) else reply

    def data(self, step: str) -> list[Any]:
        return [d for s, d in self.seen if s == step]


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


#: The hand-counted verdicts of the ``statements`` step both metric suites' tests use:
#: per answer statement (relevant, supported by the contexts, [in reference 0, in reference 1])
ANSWER_VERDICTS = [("yes", "yes", [True, False]), ("idk", "idk", [True, True]),
                   ("no", "no", [False, True])]
#: per reference statement (attributable to the contexts, covered by the answer)
REFERENCE_VERDICTS = [[(True, True), (False, True), (False, False)], [(True, True), (False, True)]]


def statements_reply() -> dict[str, Any]:
    """The ``statements`` step's reply built from ANSWER_VERDICTS and REFERENCE_VERDICTS."""
    return {
        "answer_statements": [{"index": i, "relevant": r, "supported": s,
                               "in_reference": [yes(x) for x in inref]}
                              for i, (r, s, inref) in enumerate(ANSWER_VERDICTS)],
        "reference_verdicts": [[{"index": i, "attributable": yes(a), "covered": yes(c)}
                                for i, (a, c) in enumerate(ref)] for ref in REFERENCE_VERDICTS],
    }


# -- two tiny metrics the capture tests use to see what a record carried --------------------
from tracescore import Metric  # noqa: E402
from tracescore.testing import ScriptedMetric  # noqa: E402


class ContextCount(Metric):
    name = "context_count"
    requires = frozenset({"contexts"})
    threshold = None

    def __call__(self, record: Any) -> Any:
        return self.result(len(record.contexts), f"{len(record.contexts)} contexts")


class AnswerLength(Metric):
    name = "answer_length"
    requires = frozenset({"answer"})
    threshold = None

    def __call__(self, record: Any) -> Any:
        return self.result(len(record.answer))


def capture_metrics() -> list[Metric]:
    return [ContextCount(), AnswerLength()]


# -- agent capture tests (LangChain/LangGraph and LlamaIndex share the questions) -------------
AGENT_Q1 = "What battery capacity does the Cargo have?"
AGENT_Q2 = "How long does charging take?"
#: what the scripted model asks its tool, per user question (an agent's own wording)
TOOL_QUERY = {AGENT_Q1: "cargo battery capacity", AGENT_Q2: "charging time"}
AGENT_ANSWER = {AGENT_Q1: "The Cargo has a 750 Wh battery.",
                AGENT_Q2: "A full charge takes about four hours."}


def _full(r: Any) -> float:
    return 1.0


#: scored only when the record has all three: a score on the root span proves they were there
FULL = ScriptedMetric(_full, name="full", requires=frozenset({"query", "contexts", "answer"}))


class WebhookReceiver:
    """A real webhook receiver on 127.0.0.1 that records every POST body (``status``: what it
    answers; a body is recorded only when it answers 200)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.status = 200
        hook = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if hook.status == 200:
                    hook.bodies.append(json.loads(body))
                self.send_response(hook.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StoreClock:
    """Stands in for the ``time`` module inside the store modules: ``time()`` is ours."""

    def __init__(self, t: float) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    def __getattr__(self, name: str) -> Any:
        import time

        return getattr(time, name)


def store_clock(monkeypatch: Any, t: float) -> StoreClock:
    """Both stores' clock set to ``t`` (move it with ``.t``) for the test's duration."""
    import tracescore.store.postgres as pg_mod
    import tracescore.store.postgres_jobs as pg_jobs_mod
    import tracescore.store.sqlite as sqlite_mod
    import tracescore.store.sqlite_jobs as sqlite_jobs_mod

    c = StoreClock(t)
    # (each backend's jobs role is a module of its own: its clock too)
    for mod in (sqlite_mod, sqlite_jobs_mod, pg_mod, pg_jobs_mod):
        monkeypatch.setattr(mod, "time", c)
    return c
