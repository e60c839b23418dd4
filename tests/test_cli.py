"""The `tracescore` command line: demo, report, show (click's CliRunner and the real script)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest

pytest.importorskip("langchain_core")

from helpers import cli_script, rows, run_cli
from tracescore.examples.langchain_rag import load_questions

from tracescore import Metric, RagRecord, Score
from tracescore.cli import main
from tracescore.client import DEFAULT_METRICS
from tracescore.read.db import parse_since
from tracescore.reports.report import percentile
from tracescore.store import Store

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
QUESTIONS = load_questions()
N = 5
# The score names the default metrics emit (rouge emits four).
SCORE_NAMES = {"rouge1", "rouge2", "rouge_l", "rouge_lsum"} | (set(DEFAULT_METRICS) - {"rouge"})
# The yes/no ones (Metric.binary): reported as a rate, not percentiles.
BINARY = {"exact_match", "rgb_accuracy", "rgb_rejection"}


def _json(*args: Any) -> dict[str, Any]:
    result = run_cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One real `tracescore demo` process; returns the db and what it printed."""
    cwd = tmp_path_factory.mktemp("demo")
    # (no wall-clock bound: on a loaded 2-core machine this took over 30 s and every test of
    # the module failed with it; the demo's speed is a benchmark, not a unit test)
    proc = subprocess.run(
        [*cli_script(), "demo", "--n", str(N)], cwd=cwd, capture_output=True, text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return cwd / "tracescore-demo.db", proc.stdout


# -- demo ------------------------------------------------------------------------------------
def test_demo_stores_records_ground_truths_and_scores(demo_db: tuple[Path, str]) -> None:
    db, out = demo_db
    assert f"wrote {db.resolve()}" in out
    recs = rows(db, "SELECT * FROM records ORDER BY created_at")
    assert [r["query"] for r in recs] == [q["question"] for q in QUESTIONS[:N]]
    assert [json.loads(r["ground_truths"]) for r in recs] == [[q["reference"]] for q in
                                                              QUESTIONS[:N]]
    assert all(r["sampled"] == 1 and r["source"] == "langchain" for r in recs)
    assert all(r["answer"] and r["n_contexts"] > 0 for r in recs)
    jobs = rows(db, "SELECT metric, status FROM jobs")
    assert {j["status"] for j in jobs} == {"done"}
    assert sorted(j["metric"] for j in jobs) == sorted(list(DEFAULT_METRICS) * N)
    got = rows(db, "SELECT record_id, name, status FROM scores")
    assert {s["status"] for s in got} == {"ok"}
    by_record: dict[str, set[str]] = {}
    for s in got:
        by_record.setdefault(s["record_id"], set()).add(s["name"])
    assert by_record == {r["record_id"]: SCORE_NAMES for r in recs}
    # The printed report is the database's: the summary line and one row per score name.
    assert f"{N} records, {N} sampled (100%), 0 dropped; {len(got)} scores, 0 errors;" in out
    for name in SCORE_NAMES:
        assert re.search(rf"^{name}(?: [·↓])?\s+{N}\s", out, re.M), name


def test_report_json_matches_the_database(demo_db: tuple[Path, str]) -> None:
    db, _ = demo_db
    rep = _json("report", "--db", db, "--worst", 2)
    assert rep["records"] == rows(db, "SELECT count(*) AS n FROM records")[0]["n"] == N
    assert rep["sampled"] == N
    assert rep["pending_jobs"] == 0 and rep["dropped"] == 0
    assert rep["scores"] == len(SCORE_NAMES) * N
    assert set(rep["metrics"]) == SCORE_NAMES
    for name, m in rep["metrics"].items():
        scored = rows(db, "SELECT value, label FROM scores WHERE name=? AND status='ok'", name)
        values = sorted(s["value"] for s in scored)
        assert m["count"] == len(values) == N
        assert m["mean"] == pytest.approx(statistics.fmean(values))
        assert m["binary"] is (name in BINARY)
        if name in BINARY:  # no interpolated percentiles of 0s and 1s: a rate and a count
            assert set(values) <= {0.0, 1.0}
            assert (m["p10"], m["p50"], m["p90"]) == (None, None, None)
            assert m["yes"] == values.count(1.0) and m["rate"] == pytest.approx(m["yes"] / N)
        else:  # percentiles come from the hourly rollups' 100 bins over [0, 1]
            assert m["p50"] == pytest.approx(statistics.median(values), abs=0.01)
            assert m["lo"] <= m["mean"] <= m["hi"]
            assert m["yes"] is None and m["rate"] is None
        labels = [s["label"] for s in scored]
        if all(lab is None for lab in labels):
            assert m["fail_rate"] is None  # rgb_rejection has no threshold
        else:
            assert m["fail_rate"] == pytest.approx(labels.count("fail") / N)
        assert m["errors"] == 0 and m["skipped"] == 0
        if m["higher_is_better"] is None:  # no direction: no "worst" list
            assert name not in rep["worst"] or rep["worst"][name] == []
        else:
            assert [w["value"] for w in rep["worst"][name]] == values[:2]
    assert rep["metrics"]["rgb_rejection"]["fail_rate"] is None
    assert rep["metrics"]["rgb_rejection"]["higher_is_better"] is None


def test_second_demo_run_appends(demo_db: tuple[Path, str], tmp_path: Path) -> None:
    db = tmp_path / "again.db"
    shutil.copy(demo_db[0], db)
    before = {r["trace_id"] for r in rows(db, "SELECT trace_id FROM records")}
    result = run_cli("demo", "--db", db, "--n", 2, "--worst", 0)
    assert result.exit_code == 0, result.output
    assert f"appended to {db.resolve()}" in result.stdout
    recs = rows(db, "SELECT trace_id, query, ground_truths FROM records")
    new = [r for r in recs if r["trace_id"] not in before]
    assert len(recs) == N + 2 and len(new) == 2
    assert sorted(r["query"] for r in new) == sorted(q["question"] for q in QUESTIONS[:2])
    n_scores = rows(db, "SELECT count(*) AS n FROM scores WHERE status='ok'")[0]["n"]
    assert n_scores == len(SCORE_NAMES) * (N + 2)
    assert _json("report", "--db", db)["records"] == N + 2


def test_demo_sample_rate_zero_scores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    result = run_cli("demo", "--db", db, "--n", 3, "--sample-rate", 0)
    assert result.exit_code == 0, result.output
    assert rows(db, "SELECT count(*) AS n, sum(sampled) AS s FROM records")[0] == {"n": 3, "s": 0}
    assert rows(db, "SELECT count(*) AS n FROM scores")[0]["n"] == 0
    rep = _json("report", "--db", db)
    assert rep["records"] == 3 and rep["sampled"] == 0 and rep["metrics"] == {}


# -- report ----------------------------------------------------------------------------------
def test_report_on_an_empty_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    Store(db).close()
    rep = _json("report", "--db", db)
    assert (rep["records"], rep["sampled"], rep["scores"], rep["pending_jobs"]) == (0, 0, 0, 0)
    assert rep["metrics"] == {} and rep["worst"] == {}
    result = run_cli("report", "--db", db)
    assert result.exit_code == 0
    assert "0 records" in result.stdout and "No records yet." in result.stdout


class _AnswerLength(Metric):
    """Lower is better; registered so the report can look its direction up."""

    name = "test_cli_answer_length"
    requires = frozenset({"answer"})
    higher_is_better = False
    threshold = None

    def __call__(self, record: RagRecord) -> Score:
        if "boom" in (record.query or ""):
            raise RuntimeError("boom query")
        return self.result(len(record.answer or ""))


def test_report_counts_errors_skips_and_honours_direction(db: str) -> None:
    """On SQLite and PostgreSQL (``db``): report, report --json and show."""
    import tracescore

    # Not registered in this process: the report learns its direction from the database.
    ts = tracescore.init(db=db, metrics=["token_f1", _AnswerLength()])
    answers = ["a", "a much longer answer here", "medium answer"]
    for i, answer in enumerate(answers):
        ts.log_record(query=f"q{i}", answer=answer, ground_truths=["an answer"] if i else [])
    ts.log_record(query="boom", answer="x", ground_truths=["x"])
    assert ts.flush(timeout=20)
    ts.shutdown()

    rep = _json("report", "--db", db)
    f1, length = rep["metrics"]["token_f1"], rep["metrics"]["test_cli_answer_length"]
    assert (f1["count"], f1["skipped"], f1["errors"]) == (3, 1, 0)  # q0 has no ground truth
    assert (length["count"], length["skipped"], length["errors"]) == (3, 0, 1)
    assert length["higher_is_better"] is False and length["fail_rate"] is None
    # Lower is better, so the worst are the longest answers.
    assert [w["value"] for w in rep["worst"]["test_cli_answer_length"]] == [
        float(len(a)) for a in sorted(answers, key=len, reverse=True)]
    assert rep["records"] == 4 and rep["scores"] == 3 + 4
    human = run_cli("report", "--db", db).stdout
    assert re.search(r"^test_cli_answer_length ↓\s+3\s.*\s1\s+0$", human, re.M), human
    assert re.search(r"^token_f1\s+3\s.*\s0\s+1$", human, re.M), human
    boom = rows(db, "SELECT trace_id FROM records WHERE query='boom'")[0]["trace_id"]
    out = run_cli("show", boom, "--db", db).stdout
    assert re.search(r"^  test_cli_answer_length\s+error\s", out, re.M)
    assert "RuntimeError: boom query" in out
    q0 = rows(db, "SELECT trace_id FROM records WHERE query='q0'")[0]["trace_id"]
    assert "token_f1: skipped: record has no ground_truths" in run_cli("show", q0, "--db", db).stdout


def test_report_human_table_fits_80_columns(demo_db: tuple[Path, str]) -> None:
    result = run_cli("report", "--db", demo_db[0])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[1].startswith(f"{N} records, {N} sampled")
    assert str(demo_db[0]) in lines[0]  # the one line allowed to be as long as the path
    assert max(len(line) for line in lines[1:]) <= 80
    header = next(line for line in lines if line.startswith("score "))
    checks = next(line for line in lines if line.startswith("yes/no check "))
    # Aligned: every metric row has its count right under the "n" column of its table.
    for name in SCORE_NAMES:
        col = (checks if name in BINARY else header).index(" n ") + 1
        row = next(line for line in lines if line.startswith(name + " "))
        assert row[col] == str(N)[-1]
        if name in BINARY:  # "yes/n" and a rate, never a p90 between 0 and 1
            assert re.search(rf"\s\d+/{N}\s+\d+\.\d%", row), row


def test_parse_since_and_percentile() -> None:
    assert parse_since("all") is None
    assert parse_since("30m", now=10_000.0) == 10_000.0 - 1800
    assert parse_since("2d", now=1e6) == 1e6 - 2 * 86400
    with pytest.raises(ValueError):
        parse_since("1y")
    values = sorted([0.3, 0.1, 0.9, 0.5, 0.7, 0.2, 1.0])
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    assert percentile(values, 0.1) == pytest.approx(deciles[0])
    assert percentile(values, 0.9) == pytest.approx(deciles[-1])
    assert percentile([], 0.5) is None


# -- show ------------------------------------------------------------------------------------
def test_show_a_known_trace(demo_db: tuple[Path, str]) -> None:
    db, _ = demo_db
    rec = rows(db, "SELECT * FROM records ORDER BY created_at")[0]
    scores = rows(db, "SELECT * FROM scores WHERE record_id=?", rec["record_id"])
    for ident in (rec["trace_id"], rec["trace_id"][:12].upper(), rec["record_id"]):
        result = run_cli("show", ident, "--db", db)
        assert result.exit_code == 0, result.output
        out = result.stdout
        flat = " ".join(out.split())  # long fields are wrapped
        assert rec["record_id"] in out
        assert rec["query"] in flat and QUESTIONS[0]["reference"] in flat
        assert " ".join(rec["answer"].split()) in flat
        for c in json.loads(rec["contexts"]):
            assert f"id={c['id']}" in out
        for s in scores:
            assert re.search(rf"^  {s['name']}\s+{s['value']:.3f}\s+{s['label'] or '-'}\s",
                             out, re.M), s["name"]
    shown = _json("show", rec["trace_id"], "--db", db)["records"]
    assert [r["record_id"] for r in shown] == [rec["record_id"]]
    assert {s["name"]: s["value"] for s in shown[0]["scores"]} == {
        s["name"]: s["value"] for s in scores}
    assert shown[0]["ground_truths"] == [QUESTIONS[0]["reference"]]


def test_show_unknown_and_ambiguous(demo_db: tuple[Path, str]) -> None:
    db, _ = demo_db
    result = run_cli("show", "f" * 32, "--db", db)
    assert result.exit_code == 1
    assert "no record" in result.output and "Traceback" not in result.output
    assert run_cli("show", "not-a-trace", "--db", db).exit_code == 1
    ids = [r["trace_id"] for r in rows(db, "SELECT trace_id FROM records")]
    first = {i[0] for i in ids}
    shared = next((c for c in first if sum(i.startswith(c) for i in ids) > 1), None)
    if shared is not None:  # random ids: a shared first hex digit is likely, not certain
        result = run_cli("show", shared, "--db", db)
        assert result.exit_code == 1 and "several traces" in result.output


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["report"], ["report", "--json"], ["show", "abc"]])
def test_missing_or_bad_database_exits_2(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nope.db"
    result = run_cli(*command, "--db", missing)
    assert result.exit_code == 2
    assert "database not found" in result.output and str(missing) in result.output
    assert isinstance(result.exception, SystemExit)  # a message, not a traceback
    assert not missing.exists()  # a report never creates a database
    junk = tmp_path / "junk.db"
    junk.write_text("not a database at all " * 100)
    result = run_cli(*command, "--db", junk)
    assert result.exit_code == 2 and "SQLite" in result.output
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    result = run_cli(*command, "--db", other)
    assert result.exit_code == 2 and "not a tracescore database" in result.output


def test_demo_on_a_bad_database_path_exits_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database at all " * 100)
    for db in (junk, tmp_path / "no-such-folder" / "x.db"):
        result = run_cli("demo", "--db", db, "--n", 1)
        assert result.exit_code == 2, result.output
        assert str(db) in result.output and isinstance(result.exception, SystemExit)
        assert "Asking" not in result.output  # no progress bar for a run that cannot start


def test_the_installed_script_reports_a_missing_database(tmp_path: Path) -> None:
    proc = subprocess.run([*cli_script(), "report", "--db", tmp_path / "x.db"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "database not found" in proc.stderr and "Traceback" not in proc.stderr


# -- help and docs ---------------------------------------------------------------------------
def test_every_command_and_option_has_help_and_a_docs_section() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## tracescore (\S+)\n(.*?)(?=^## |\Z)", docs, re.M | re.S))
    ctx = click.Context(main)
    commands = main.list_commands(ctx)
    assert set(commands) == set(sections)
    for name in commands:
        cmd = main.get_command(ctx, name)
        assert cmd is not None and cmd.help and cmd.get_short_help_str()
        result = run_cli(name, "--help")
        assert result.exit_code == 0 and "Usage: " in result.stdout
        for param in cmd.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.opts}"
                assert any(opt in sections[name] for opt in param.opts), (name, param.opts)


def test_demo_llama_index_framework(tmp_path: Path) -> None:
    db = tmp_path / "li.db"
    result = run_cli("demo", "--db", db, "--n", 3, "--framework", "llama-index", "--worst", 0)
    assert result.exit_code == 0, result.output
    recs = rows(db, "SELECT source, query, answer, ground_truths, n_contexts FROM records")
    assert len(recs) == 3
    questions = load_questions()[:3]
    assert [r["query"] for r in recs] == [q["question"] for q in questions]
    assert all(r["source"] == "llama_index" and r["n_contexts"] > 0 and r["answer"] for r in recs)
    assert [json.loads(r["ground_truths"]) for r in recs] == [[q["reference"]] for q in questions]
    n_scores = rows(db, "SELECT count(*) AS n FROM scores WHERE status='ok'")[0]["n"]
    assert n_scores == 3 * len(SCORE_NAMES)


# -- the first hour: what --help suggests, as a new user types it ------------------------------
def test_demo_then_report_in_the_same_folder(demo_db: tuple[Path, str], tmp_path: Path) -> None:
    help_text = subprocess.run([*cli_script(), "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    assert "Start with `tracescore demo`, then `tracescore report`" in help_text
    cwd = demo_db[0].parent  # where `tracescore demo` ran: only tracescore-demo.db is there
    assert not (cwd / "tracescore.db").exists()
    env = {k: v for k, v in os.environ.items() if k != "TRACESCORE_DB"}
    for args in (["report"], ["report", "--json"], ["export", "--format", "csv"]):
        proc = subprocess.run([*cli_script(), *args], cwd=cwd, capture_output=True, text=True,
                              timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "reading tracescore-demo.db" in proc.stderr  # said, on stderr
    assert json.loads(subprocess.run(
        [*cli_script(), "report", "--json"], cwd=cwd, capture_output=True, text=True,
        timeout=60, env=env).stdout)["records"] == N
    # An explicit --db or TRACESCORE_DB is never replaced by the demo's database.
    for extra_env, args in (({}, ["report", "--db", "tracescore.db"]),
                            ({"TRACESCORE_DB": "tracescore.db"}, ["report"])):
        proc = subprocess.run([*cli_script(), *args], cwd=cwd, capture_output=True, text=True,
                              timeout=60, env={**env, **extra_env})
        assert proc.returncode == 2 and "database not found: tracescore.db" in proc.stderr
    # Once the app's own tracescore.db exists, it is the default again.
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(demo_db[0], mine / "tracescore-demo.db")
    Store(mine / "tracescore.db").close()
    proc = subprocess.run([*cli_script(), "report", "--json"], cwd=mine, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout)["records"] == 0
    assert "tracescore-demo.db" not in proc.stderr


def test_demo_and_report_list_the_same_worst_records(demo_db: tuple[Path, str]) -> None:
    db, printed = demo_db
    ctx = click.Context(main)
    worst = {name: p.default for name in ("demo", "report")
             for p in main.get_command(ctx, name).params  # type: ignore[union-attr]
             if p.name == "worst"}
    assert worst["demo"] == worst["report"] == 3  # one default
    report = run_cli("report", "--db", db).stdout
    assert "Worst 3 records per score" in printed
    # The demo prints what `tracescore report` prints (bar the Next: hint after it).
    assert report.split("\n", 1)[1] in printed


class _Refused(Metric):
    """A custom yes/no metric, declared binary: not registered in the reading process."""

    name = "test_cli_refused"
    requires = frozenset({"answer"})
    higher_is_better = None
    threshold = None
    binary = True

    def __call__(self, record: RagRecord) -> Score:
        return self.result(float("sorry" in (record.answer or "")))


class _HasDigit(Metric):
    """Undeclared, but every value is 0 or 1: reported as a rate all the same."""

    name = "test_cli_has_digit"
    requires = frozenset({"answer"})

    def __call__(self, record: RagRecord) -> Score:
        return self.result(float(any(c.isdigit() for c in record.answer or "")))


def test_binary_metrics_are_rates_from_their_declaration(tmp_path: Path) -> None:
    import tracescore

    db = tmp_path / "binary.db"
    ts = tracescore.init(db=db, metrics=["exact_match", "token_f1", _Refused(), _HasDigit()])
    answers = ["sorry, I cannot say", "30 days", "sorry", "It ships in 2 days", "no idea",
               "30 days"]
    for i, answer in enumerate(answers):
        ts.log_record(query=f"q{i}", answer=answer, ground_truths=["30 days"])
    assert ts.flush(timeout=20)
    ts.shutdown()
    declared = {r["metric"]: r["is_binary"]
                for r in rows(db, "SELECT metric, is_binary FROM metrics")}
    assert declared == {"exact_match": 1, "token_f1": 0, "test_cli_refused": 1,
                        "test_cli_has_digit": 0}

    rep = _json("report", "--db", db)["metrics"]
    refused = rep["test_cli_refused"]
    assert refused["binary"] is True and (refused["yes"], refused["count"]) == (2, 6)
    assert refused["rate"] == pytest.approx(2 / 6) and refused["p90"] is None
    assert rep["exact_match"]["binary"] is True and rep["exact_match"]["yes"] == 2
    # Declared not binary: percentiles, even though these values happen to be 0 and 1.
    assert rep["test_cli_has_digit"]["binary"] is False
    assert rep["test_cli_has_digit"]["p90"] is not None
    assert rep["token_f1"]["binary"] is False and rep["token_f1"]["rate"] is None
    human = run_cli("report", "--db", db).stdout
    # rate, its 95 % Wilson interval, fail rate, errors, skipped
    assert re.search(r"^test_cli_refused ·\s+6\s+2/6\s+33\.3%\s+9\.7–70\.0%\s+-\s+0\s+0$",
                     human, re.M), human
    assert re.search(r"^exact_match\s+6\s+2/6\s+33\.3%\s+9\.7–70\.0%\s+66\.7%", human,
                     re.M), human

    # A database written before metrics declared binarity: the values decide, for a metric
    # this process does not know.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE metrics SET is_binary = NULL")
    conn.close()
    rep = _json("report", "--db", db)["metrics"]
    assert rep["test_cli_has_digit"]["binary"] is True  # all 0/1, not in the registry
    assert rep["exact_match"]["binary"] is True  # the registry's declaration
    assert rep["token_f1"]["binary"] is False


def test_mostly_skipped_metrics_say_why(tmp_path: Path) -> None:
    import tracescore

    # An agent whose records have no answer: answer metrics skip nearly everything.
    db = tmp_path / "agent.db"
    ts = tracescore.init(db=db, metrics=["token_f1", "rgb_rejection"])
    for i in range(5):
        ts.log_record(query=f"q{i}", contexts=["some context"], ground_truths=["ref"],
                      answer="the answer" if i == 0 else None)
    assert ts.flush(timeout=20)
    ts.shutdown()
    rep = _json("report", "--db", db)["metrics"]
    for name in ("token_f1", "rgb_rejection"):
        assert rep[name]["skipped"] == 4 and rep[name]["mostly_skipped"] is True
        assert rep[name]["skip_reasons"] == [{"reason": "record has no answer", "records": 4}]
    human = run_cli("report", "--db", db).stdout
    first_page = "\n".join(human.splitlines()[:24])
    assert "Mostly skipped" in first_page
    # One line for the metrics skipped alike.
    assert ("rgb_rejection, token_f1: skipped 4 of 5 records: record has no answer (4)"
            in first_page)
    # A metric that skips a few records only is not called out.
    db2 = tmp_path / "fine.db"
    ts = tracescore.init(db=db2, metrics=["token_f1"])
    for i in range(4):
        ts.log_record(query=f"q{i}", answer="a", ground_truths=["a"] if i else [])
    assert ts.flush(timeout=20)
    ts.shutdown()
    one = _json("report", "--db", db2)["metrics"]["token_f1"]
    assert one["skipped"] == 1 and one["mostly_skipped"] is False
    assert one["skip_reasons"] == [{"reason": "record has no ground_truths", "records": 1}]
    assert "Mostly skipped" not in run_cli("report", "--db", db2).stdout


def test_judge_demo_asks_few_questions_and_counts_judge_calls(tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    from tracescore.cli.demo import JUDGE_QUESTIONS, expected_judge_calls
    from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

    db = tmp_path / "judged.db"
    with ScriptedJudgeServer(lexical_responder) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        result = run_cli("demo", "--db", db, "--judge", "openai:test-judge")
    assert result.exit_code == 0, result.output
    assert f"A judge demo asks {JUDGE_QUESTIONS} questions" in result.output
    assert f"Ran {JUDGE_QUESTIONS} questions" in result.output
    assert rows(db, "SELECT count(*) AS n FROM records")[0]["n"] == JUDGE_QUESTIONS
    # 2 shared calls per record and the canary's 6: every call the bar counted reached the
    # server, and the report shows the canary's verdict (the demo waited for it).
    logged = rows(db, "SELECT count(*) AS n FROM judge_calls")[0]["n"]
    assert srv.total_calls == logged == expected_judge_calls(JUDGE_QUESTIONS) == 12
    assert "Judge calls" in result.output  # the progress bar (stderr, mixed in here)
    assert "judge test-judge: agreed with" in result.output
    assert rows(db, "SELECT count(*) AS n FROM scores WHERE name='faithfulness'")[0]["n"] == 3


def test_local_judge_demo_plan_fits_in_two_minutes() -> None:
    from tracescore.cli.demo import judge_plan

    # The bundled 135M model takes 5-45 s a call on 2 cores: one question, no canary.
    assert judge_plan("local", None) == (1, False)
    assert expected_judge_calls_for("local") == 3  # (asked one step at a time: in-process)
    assert judge_plan("local", 5) == (5, False)  # --n still asks what it is told
    assert judge_plan("openai:gpt-4o-mini", None) == (3, True)
    assert expected_judge_calls_for("openai:gpt-4o-mini") == 12
    assert judge_plan(None, None) == (None, False)


def expected_judge_calls_for(judge: str) -> int:
    from tracescore.cli.demo import expected_judge_calls, judge_pairs, judge_plan

    n, canary = judge_plan(judge, None)
    assert n is not None
    return expected_judge_calls(n, canary, paired=judge_pairs(judge))
