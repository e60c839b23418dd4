"""A new user's first hour (issue 18, "First-hour defects"): a missing framework gives the pip
command, ``tracescore worker`` stops cleanly on a SIGTERM at any moment of its start-up,
``prune`` finds the demo's database, CLI errors name options, the docs say what the code does,
the fleet's database role works with exactly the privileges docs/fleet.md grants, and the
README's quick start runs.

Real processes throughout (the console script, ``python examples/quickstart.py``), a real
PostgreSQL server for the role, a real judge server on 127.0.0.1 for the judge metrics.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import cli_script, rows, run_cli

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 120.0  # generous: a loaded 2-core machine takes seconds to import


def _python(code: str, *args: str, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=DEADLINE_S)


# -- 1. a framework that is not installed -------------------------------------------------------
#: run first in the child: the framework's top-level package made unimportable, as when it is
#: not installed (the import system answers ModuleNotFoundError for it and its submodules)
BLOCK = "import sys; sys.modules[sys.argv[1]] = None\n"


@pytest.mark.parametrize("package, method, extra", [
    ("llama_index", "instrument_llama_index", "llama-index"),
    ("langchain_core", "instrument_langchain", "langchain"),
    ("langchain_core", "langchain_handler", "langchain"),
])
def test_instrument_without_the_framework_says_which_extra(tmp_path: Path, package: str,
                                                          method: str, extra: str) -> None:
    out = _python(BLOCK + textwrap.dedent("""
        import tracescore
        ts = tracescore.init(db=sys.argv[2], metrics=["token_f1"])
        try:
            getattr(ts, sys.argv[3])()
        except Exception as exc:
            print(type(exc).__name__, exc)
        finally:
            ts.shutdown()
        """), package, str(tmp_path / "ts.db"), method)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("ImportError "), line  # not a bare ModuleNotFoundError
    assert f"pip install 'tracescore[{extra}]'" in line


@pytest.mark.parametrize("package, framework", [("llama_index", "llama-index"),
                                                ("langchain_core", "langchain")])
def test_demo_without_the_framework_is_one_line_and_an_exit_code(tmp_path: Path, package: str,
                                                                 framework: str) -> None:
    out = _python(BLOCK + textwrap.dedent("""
        from tracescore.cli import main
        main(["demo", "--framework", sys.argv[2], "--db", sys.argv[3]])
        """), package, framework, str(tmp_path / "demo.db"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("Error: ") and f"pip install 'tracescore[{framework}]'" in lines[0]


# -- 2. `import tracescore` is light; the worker takes a SIGTERM at any moment -------------------
def test_import_tracescore_loads_no_store_and_no_pandas() -> None:
    """The store (sqlite-utils → pandas → numpy) loads on first use, not on import."""
    out = _python("""
        import sys, tracescore
        heavy = [m for m in ("sqlite_utils", "pandas", "numpy", "tracescore.store")
                 if m in sys.modules]
        print(heavy)
        from tracescore import Retention, add_label, Metric, Tracescore  # still there, lazily
        print(Retention.__name__, add_label.__name__, Metric.__name__, Tracescore.__name__)
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "Retention add_label Metric Tracescore"]


def test_the_command_line_loads_no_store_before_a_command_runs() -> None:
    """``tracescore --help`` and a starting worker do not pay for the store; the report's
    default --worst is the same number as the report module's."""
    out = _python("""
        import sys, tracescore.cli
        print([m for m in ("sqlite_utils", "pandas", "tracescore.store") if m in sys.modules])
        """)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    from tracescore.cli.commands import DEFAULT_WORST
    from tracescore.reports.report import DEFAULT_WORST as REPORT_WORST

    assert DEFAULT_WORST == REPORT_WORST


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (``SigCgt`` in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def _loaded(pid: int, name: str) -> bool:
    return name in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
@pytest.mark.parametrize("after_s", [0.0, 0.1, 0.3, 0.6, 1.2])
def test_worker_sigterm_during_start_up_exits_0_with_start_and_stop_lines(
        tmp_path: Path, after_s: float) -> None:
    """SIGTERM at several instants of the start-up. A process cannot catch a signal before
    its interpreter runs its first line, so: (1) the handler is in place before anything
    heavy is loaded (numpy is not mapped yet when it appears: an order, not a timing); (2) a
    SIGTERM ``after_s`` after the spawn (or as soon as the handler is in place, if later on a
    loaded machine; 0.0: at once) ends the worker with exit code 0, a start and a stop line."""
    t0 = time.monotonic()
    p = subprocess.Popen([*cli_script(), "worker", "--db", str(tmp_path / "w.db"),
                          "--stop-timeout", "2"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        while not _catches_sigterm(p.pid):
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            assert time.monotonic() - t0 < DEADLINE_S, "no SIGTERM handler"
            time.sleep(0.002)
        assert not _loaded(p.pid, "numpy"), "the SIGTERM handler came after the heavy imports"
        time.sleep(max(0.0, t0 + after_s - time.monotonic()))
        p.send_signal(signal.SIGTERM)
        code = p.wait(DEADLINE_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = p.stderr.read() if p.stderr else ""
    assert code == 0, err
    assert re.search(r"^tracescore worker: scoring \d+ metrics? from .*w\.db", err, re.M), err
    assert re.search(r"^tracescore worker: stopped", err, re.M), err


# -- 3. prune finds the demo's database as report does -------------------------------------------
def test_prune_falls_back_to_the_demo_database_like_report(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tracescore.cli.demo import DEFAULT_DB as DEMO_DB
    from tracescore.store import open_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRACESCORE_DB", raising=False)
    open_store(str(tmp_path / DEMO_DB)).close()
    report = run_cli("report", "--json")
    prune = run_cli("prune", "--dry-run", "--json")
    assert report.exit_code == 0, report.output
    assert prune.exit_code == 0, prune.output
    said = f"reading {DEMO_DB}, written by `tracescore demo`"
    assert said in report.stderr and said in prune.stderr
    assert '"would_delete_records": 0' in prune.stdout


# -- 4. CLI errors speak options, not keyword arguments ------------------------------------------
@pytest.fixture
def keep_signal_handlers() -> Iterator[None]:
    """``tracescore worker`` installs SIGTERM/SIGINT handlers in this process: put them back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("args, said, python", [
    (["worker", "--metric", "faithfulness"], "pass --judge 'openai:MODEL'", "judge="),
    (["worker", "--metric", "answer_similarity"], "pass --embedder 'local'", "embedder="),
    (["worker", "--judge-daily-budget-usd", "5"],
     "--judge-daily-budget-usd needs --judge-price IN,OUT", "judge_price"),
    (["worker", "--judge-price", "1,-2"], "--judge-price must be IN,OUT", "usd_per_mtok"),
    (["worker", "--db", ":memory:"], "--db ':memory:' cannot be shared", "db="),
    (["worker", "--judge", "openai:some-model", "--metric", "faithfulness"],
     "set OPENAI_API_KEY", "api_key="),
    (["worker", "--judge", "nope"], "unknown judge 'nope'", "LangChain chat model"),
    (["demo", "--judge", "nope"], "unknown judge 'nope'", "tracescore.judge.Judge"),
])
def test_cli_errors_name_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    keep_signal_handlers: None, args: list[str], said: str,
                                    python: str) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    if "--db" not in args:
        args = [*args, "--db", str(tmp_path / "ts.db")]
    out = run_cli(*args)
    assert out.exit_code == 2, out.output
    assert said in out.output and python not in out.output, out.output


@pytest.mark.parametrize("arg, bad", [
    ("concurrency", 0), ("lease_seconds", -1.0), ("sample_rate", 2.0),
    ("judge_calls_per_minute", -1.0), ("judge_price", (1.0, -2.0)), ("db", ":memory:"),
    ("judge", "nope"), ("embedder", "nope"),
])
def test_every_mapped_init_error_names_its_option(tmp_path: Path, arg: str, bad: Any) -> None:
    """Each ``init`` argument the CLI sets: its error, through :func:`cli_message`, names the
    option (and no longer the keyword)."""
    import tracescore
    from tracescore.cli._messages import INIT_OPTIONS, cli_message

    kw: dict[str, Any] = {"db": str(tmp_path / "ts.db"), "metrics": ["token_f1"], arg: bad}
    with pytest.raises((ValueError, TypeError)) as caught:
        tracescore.init(**kw)
    text = cli_message(caught.value)
    option = INIT_OPTIONS[arg][0]
    assert option in text or f"unknown {arg}" in text, text
    assert f"{arg}=" not in text and not text.startswith(f"{arg} "), text


# -- 5. the docs say what the code does ----------------------------------------------------------
def test_readme_and_metrics_doc_agree_that_retries_count_against_the_budget() -> None:
    """What the code does (``JudgeSession._admit`` runs before every request, retries and
    repairs included; tests/test_judge_faults.py::test_calls_per_minute_budget_counts_retries
    measures it): both documents say so, neither says the opposite."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    metrics = " ".join((ROOT / "docs" / "metrics.md").read_text().split())
    assert "every request counts against the calls-per-minute budget, retries and JSON " \
           "repairs included" in readme
    assert "The per-minute budget counts every request sent to the judge, retries and repair " \
           "calls included" in metrics
    for text in (readme, metrics):
        assert "not charged" not in text


def test_judge_metrics_are_exported_as_docs_backends_says(tmp_path: Path) -> None:
    """A real pipeline with a judge and a metric reader: each request to the judge, the
    retried one too, reaches ``tracescore.judge.calls``; the failed one ``judge.errors``."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tracescore import attributes as A
    from tracescore._internal.json_server import Fault
    from tracescore.judge.openai_judge import OpenAIJudge
    from tracescore.testing import in_memory
    from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

    doc = " ".join((ROOT / "docs" / "backends.md").read_text().split())
    assert "nothing feeds them" not in doc
    assert "every request sent to the judge, retries and repair calls included, adds one to " \
           "`tracescore.judge.calls`" in doc
    reader = InMemoryMetricReader()
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(Fault(500))
        ts, _ = in_memory(tmp_path / "ts.db", metrics=["coherence"], metric_reader=reader,
                          judge=OpenAIJudge("scripted-judge", base_url=srv.base_url),
                          judge_canary=False, judge_backoff_s=(0.01, 0.05))
        try:
            ts.log_record(query="q", contexts=["The sky is blue."], answer="The sky is blue.")
            assert ts.flush(60)
        finally:
            ts.shutdown(timeout=30)
        requests = srv.total_calls
    assert requests == 2  # the 500, then its retry

    def total(name: str) -> float:
        data = reader.get_metrics_data()
        assert data is not None
        return float(sum(getattr(p, "value", 0) for rm in data.resource_metrics
                         for sm in rm.scope_metrics for m in sm.metrics if m.name == name
                         for p in m.data.data_points))

    assert total(A.METRIC_JUDGE_CALLS) == requests
    assert total(A.METRIC_JUDGE_ERRORS) == 1
    assert total(A.METRIC_JUDGE_TOKENS) > 0
    assert scores_ok(tmp_path / "ts.db", "coherence") == 1


def scores_ok(db: Path | str, name: str) -> int:
    return int(rows(db, "SELECT count(*) AS n FROM scores WHERE name = ? AND error IS NULL",
                    name)[0]["n"])


def _fleet_sql() -> list[str]:
    """The ```sql blocks of docs/fleet.md, in order."""
    text = (ROOT / "docs" / "fleet.md").read_text()
    return re.findall(r"```sql\n(.*?)```", text, re.S)


def _run_sql(url: str, block: str, names: dict[str, str]) -> None:
    import psycopg

    for old, new in names.items():
        block = re.sub(rf"\b{old}\b", new, block)
    with psycopg.connect(url, autocommit=True) as conn:  # CREATE DATABASE: no transaction
        for stmt in block.split(";"):
            body = "\n".join(x for x in stmt.splitlines() if not x.strip().startswith("--"))
            if body.strip():
                conn.execute(body.encode())


def _as_user(url: str, user: str, password: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{parts.hostname}:{parts.port}"))


APP = """
import sys, tracescore
ts = tracescore.init(db=sys.argv[1], score=False, metrics=["token_f1"])
for i in range(5):
    ts.log_record(query=f"q{i}", answer="the answer", ground_truths=["the answer"])
assert ts.flush(60)
ts.shutdown(timeout=30)
print("captured", ts.queue.written)
"""


@pytest.mark.integration
@pytest.mark.parametrize("layout", ["own database", "own schema", "grant on public"])
def test_fleet_role_with_exactly_the_documented_privileges(pg_server: str, tmp_path: Path,
                                                           layout: str) -> None:
    """docs/fleet.md's SQL, run as written (names made unique) on a real PostgreSQL: a
    non-superuser role with those privileges runs a capture-only app, a worker that scores
    its jobs, and ``report``. Without the grant, the documented error."""
    import psycopg
    from pg import with_db

    blocks = _fleet_sql()
    assert len(blocks) == 3, blocks
    own, schema, public = blocks
    tag = uuid.uuid4().hex[:8]
    role, appdb = f"ts_role_{tag}", f"ts_app_{tag}"
    names = {"tracescore": role, "appdb": appdb, "change-me": f"pw-{tag}"}
    superuser = with_db(pg_server, "postgres")
    user_url = _as_user(with_db(pg_server, role if layout == "own database" else appdb),
                        role, f"pw-{tag}")
    try:
        _run_sql(superuser, own, names)  # CREATE ROLE, CREATE DATABASE … OWNER
        with psycopg.connect(superuser) as conn:
            flags = conn.execute("SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles "
                                 "WHERE rolname = %s", (role,)).fetchone()
        assert flags == (False, False, False)
        if layout != "own database":
            _run_sql(superuser, f"CREATE DATABASE {appdb}", {})
            denied = _python("import sys, tracescore; tracescore.init(db=sys.argv[1])",
                             user_url)
            assert "permission denied for schema public" in denied.stderr, denied.stderr
            _run_sql(with_db(pg_server, appdb), schema if layout == "own schema" else public,
                     names)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        app = _python(APP, user_url, cwd=tmp_path, env=env)
        assert app.returncode == 0 and "captured 5" in app.stdout, app.stderr
        worker = subprocess.Popen([*cli_script(), "worker", "--db", user_url, "--metric",
                                   "token_f1", "--lease-seconds", "5", "--stop-timeout", "5"],
                                  cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while scores_ok(user_url, "token_f1") < 5:
                assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
                assert time.monotonic() < deadline, "the worker scored nothing"
                time.sleep(0.1)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(DEADLINE_S) == 0, worker.stderr.read() if worker.stderr else ""
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        report = subprocess.run([*cli_script(), "report", "--json", "--db", user_url],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=DEADLINE_S)
        assert report.returncode == 0, report.stderr
        assert '"token_f1"' in report.stdout
        if layout == "own schema":
            tables = rows(user_url, "SELECT count(*) AS n FROM information_schema.tables "
                                    "WHERE table_schema = ?", role)[0]["n"]
            assert tables > 0  # in the role's schema, not in public
    finally:
        with psycopg.connect(superuser, autocommit=True) as conn:
            for db in (role, appdb):
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
            conn.execute(f'DROP ROLE IF EXISTS "{role}"'.encode())


# -- 6. the README's quick start runs as written ---------------------------------------------------
QUICKSTART = ROOT / "examples" / "quickstart.py"


def _quickstart_code() -> str:
    """examples/quickstart.py without its module docstring."""
    text = QUICKSTART.read_text()
    doc = ast.parse(text).body[0]
    assert isinstance(doc, ast.Expr) and doc.end_lineno is not None
    return "\n".join(text.splitlines()[doc.end_lineno:]).lstrip("\n") + "\n"


def test_readme_quick_start_is_examples_quickstart() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    assert block.group(1) == _quickstart_code()
    assert "examples/quickstart.py" in section.split("```python", 1)[0]


def test_quickstart_runs_offline_and_scores_its_request(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "OPENAI_", "TRACESCORE_"))}
    run = subprocess.run([sys.executable, str(QUICKSTART)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=DEADLINE_S)
    assert run.returncode == 0, run.stderr
    q, a, nxt = run.stdout.strip().splitlines()[-3:]
    assert q.startswith("Q: ") and a.startswith("A: ") and len(a) > 10
    trace_id = nxt.removeprefix("Next: tracescore show ")
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id), nxt
    show = subprocess.run([*cli_script(), "show", trace_id, "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert show.returncode == 0, show.stderr
    import json

    (record,) = json.loads(show.stdout)["records"]
    scored = {s["name"]: s for s in record["scores"]}
    # the thumbs down forced scoring whatever the 10 % rate; the reference reached rouge/F1
    assert {"rouge1", "rouge_l", "token_f1", "rgb_rejection"} <= set(scored)
    assert all(s["status"] == "ok" for s in scored.values()), scored
    assert scored["token_f1"]["value"] > 0.5
