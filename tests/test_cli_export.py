"""`tracescore export` (JSON Lines / CSV, streamed) and `tracescore ui` (Datasette).

Real SQLite databases written through the Store (see ``build_db``); `ui` starts a real
Datasette on 127.0.0.1 and the tests GET its canned queries over HTTP.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import queue
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import click
import pytest
from helpers import cli_script, rows, run_cli
from test_html_report import Run, build_db, standard_runs

from tracescore import store as tracescore_store
from tracescore.read.db import open_db
from tracescore.read.rows import COLUMNS, iter_rows, write_csv
from tracescore.reports.ui import canned_queries, metadata, query_params
from tracescore.store import Store

UNICODE_ANSWER = "Café ✓ — 500 Wh, \"quoted\"\r\nand a second line"


def _runs() -> list[Run]:
    runs = standard_runs()
    runs[3].answer = UNICODE_ANSWER
    runs += [
        Run(query="only errors", answer="a", age_h=0.2, scores={"token_f1": "error: boom"}),
        Run(query="only skipped", answer="b", age_h=0.1,
            skipped={"token_f1": "record has no ground_truths",
                     "test_html_answer_length": "answer is empty"}),
    ]
    return runs


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """On SQLite and PostgreSQL; Datasette's (``ui``) tests take only the SQLite one."""
    path: Path | str = tmp_path / "export.db"
    if request.param == "postgres":
        path = request.getfixturevalue("pg_url")
    build_db(path, _runs())
    return path


SQLITE_ONLY = pytest.mark.parametrize("db", ["sqlite"], indirect=True)


def _iso_ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def _expected(db: Path, metrics: set[str] | None = None, scored_only: bool = False,
              since: float | None = None) -> list[dict[str, Any]]:
    """What the export must contain, computed from the tables one at a time."""
    out = []
    recs = rows(db, "SELECT * FROM records ORDER BY created_at, record_id")
    segs = {g["seg_id"]: g for g in rows(db, "SELECT * FROM segments")}
    scores = defaultdict(list)
    for s in rows(db, "SELECT * FROM scores ORDER BY name"):
        if metrics is None or s["name"] in metrics:
            scores[s["record_id"]].append(s)
    for r in recs:
        if since is not None and r["created_at"] < since:
            continue
        base = {k: r[k] for k in ("record_id", "trace_id", "span_id", "query", "answer",
                                  "n_contexts", "latency_ms", "input_tokens", "output_tokens",
                                  "model", "error")}
        base["created_at"] = r["created_at"]
        base["sampled"] = bool(r["sampled"])
        base["ground_truths"] = json.loads(r["ground_truths"])
        base["contexts"] = json.loads(r["contexts"])
        g = segs.get(r["seg_id"])
        base["release"] = None if g is None else g["release"]
        base["environment"] = None if g is None else g["environment"]
        base["segments"] = None if g is None else json.loads(g["meta"] or "{}")
        for s in scores[r["record_id"]] or ([] if scored_only else [None]):
            row = dict(base)
            for k in ("name", "metric", "value", "label", "explanation", "status", "error",
                      "metric_version", "judge_model", "duration_ms", "created_at"):
                row[f"score_{k}"] = None if s is None else s[k]
            out.append(row)
    return out


def _compare(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert list(g) == list(COLUMNS)
        for k in COLUMNS:
            if k in ("created_at", "score_created_at") and e[k] is not None:
                assert g[k].endswith("+00:00")
                assert _iso_ts(g[k]) == pytest.approx(e[k], abs=1e-3), k
            else:
                assert g[k] == e[k], (k, g, e)


# -- export ----------------------------------------------------------------------------------
def test_contexts_and_ground_truths_are_exported_unless_left_out(db: Path) -> None:
    nasty = rows(db, "SELECT record_id, contexts FROM records WHERE query LIKE 'Which%'")[0]
    stored = json.loads(nasty["contexts"])
    assert len(stored) == 2 and "\n" in stored[1]["text"]
    as_csv = run_cli("export", "--db", db, "--format", "csv")
    reader = csv.DictReader(io.StringIO(as_csv.stdout_bytes.decode("utf-8"), newline=""))
    got = [r for r in reader if r["record_id"] == nasty["record_id"]]
    assert got and all(json.loads(r["contexts"]) == stored for r in got)
    assert all(json.loads(r["ground_truths"]) == ["word word"] for r in got)
    assert [c["text"] for c in json.loads(got[0]["contexts"])] == [
        "Frames: <b>S</b>, M & L; see </details> for more", "Second context,\nwith a newline"]
    full = len(as_csv.stdout_bytes)
    for fmt in ("csv", "jsonl"):
        slim = run_cli("export", "--db", db, "--format", fmt, "--no-contexts")
        assert slim.exit_code == 0, slim.output
        if fmt == "csv":
            header = next(csv.reader(io.StringIO(slim.stdout)))
            assert "contexts" not in header and "ground_truths" in header
            assert "n_contexts" in header and len(header) == len(COLUMNS) - 1
            assert len(slim.stdout_bytes) < full
        else:
            first = json.loads(slim.stdout.splitlines()[0])
            assert "contexts" not in first and isinstance(first["ground_truths"], list)
            assert list(first) == [c for c in COLUMNS if c != "contexts"]


def test_jsonl_is_records_joined_with_scores(db: Path) -> None:
    result = run_cli("export", "--db", db, "--format", "jsonl")
    assert result.exit_code == 0, result.output
    got = [json.loads(line) for line in result.stdout.splitlines()]
    _compare(got, _expected(db))
    # One row per (record, score name); records without any score once, score fields empty.
    n_records = rows(db, "SELECT count(*) AS n FROM records")[0]["n"]
    assert len({g["record_id"] for g in got}) == n_records
    unscored = {g["query"] for g in got if g["score_name"] is None}
    assert unscored == {"question 7?", "only skipped"}  # not sampled; every metric skipped
    assert any(g["answer"] == UNICODE_ANSWER for g in got)
    assert "✓" in result.stdout  # UTF-8, not \\u escapes


def test_csv_quotes_newlines_and_matches_jsonl(db: Path) -> None:
    as_csv = run_cli("export", "--db", db, "--format", "csv")
    as_jsonl = run_cli("export", "--db", db, "--format", "jsonl")
    assert as_csv.exit_code == 0 and as_jsonl.exit_code == 0
    # stdout_bytes: Result.stdout turns every \r\n into \n, CSV's row ends and data alike.
    reader = csv.reader(io.StringIO(as_csv.stdout_bytes.decode("utf-8"), newline=""))
    header = next(reader)
    assert tuple(header) == COLUMNS
    got = [dict(zip(header, r)) for r in reader]
    expected = [json.loads(line) for line in as_jsonl.stdout.splitlines()]
    assert len(got) == len(expected)

    def cell(v: Any) -> str:
        if isinstance(v, (list, dict)):  # ground truths, contexts, segments: JSON text
            return json.dumps(v, ensure_ascii=False)
        return "" if v is None else ("true" if v is True else "false" if v is False else str(v))

    for g, e in zip(got, expected):
        assert g == {k: cell(v) for k, v in e.items()}
    queries = {g["query"] for g in got}
    answers = {g["answer"] for g in got}
    assert 'Which "bike", <script>alert("x")</script> & co\nsecond line?' in queries
    assert UNICODE_ANSWER in answers  # \r\n inside a field survives


def test_metric_filter_scored_only_and_since(db: Path) -> None:
    def export(*args: Any) -> list[dict[str, Any]]:
        result = run_cli("export", "--db", db, "--format", "jsonl", *args)
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines()]

    both = {"token_f1", "faithfulness"}
    got = export("--metric", "token_f1", "--metric", "faithfulness")
    _compare(got, _expected(db, metrics=both))
    assert {g["score_name"] for g in got} == both | {None}
    got = export("--metric", "token_f1", "--metric", "faithfulness", "--scored-only")
    _compare(got, _expected(db, metrics=both, scored_only=True))
    assert all(g["score_name"] in both for g in got)
    got = export("--since", "10h")
    _compare(got, _expected(db, since=time.time() - 10 * 3600))
    assert 0 < len({g["record_id"] for g in got}) < 20
    assert export("--metric", "no_such_score", "--scored-only") == []


def test_output_file_appears_complete(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "scores.csv"
    out.write_text("old contents")
    result = run_cli("export", "--db", db, "--format", "csv", "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    n = len(_expected(db))
    assert result.stderr.strip() == f"Wrote {n} rows to {out.resolve()}"
    with open(out, newline="", encoding="utf-8") as f:
        assert len(list(csv.reader(f))) == n + 1
    assert out.read_bytes() == run_cli("export", "--db", db, "--format", "csv").stdout_bytes
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("export.db")] == [
        "scores.csv"]  # and no temporary file left beside it


@pytest.mark.parametrize("args, message", [
    ([], "Missing option '--format'"),
    (["--format", "xml"], "'xml' is not one of"),
    (["--format", "csv", "--since", "yesterday"], "not a duration"),
])
def test_export_usage_errors(db: Path, args: list[str], message: str) -> None:
    result = run_cli("export", "--db", db, *args)
    assert result.exit_code == 2 and message in result.output


def test_export_missing_database_or_unwritable_output(db: Path, tmp_path: Path) -> None:
    result = run_cli("export", "--db", tmp_path / "nope.db", "--format", "csv")
    assert result.exit_code == 2 and "database not found" in result.output
    assert not (tmp_path / "nope.db").exists()
    result = run_cli("export", "--db", db, "--format", "csv", "-o", tmp_path / "no" / "x.csv")
    assert result.exit_code == 2 and "x.csv" in result.output
    assert isinstance(result.exception, SystemExit)


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3,000 records with 4 KB answers and two scores each: ~26 MB of export."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    answer = ("lorem ipsum, dolor \"sit\" amet\n" * 140)[:4096]
    with conn:
        conn.executemany(
            "INSERT INTO records(record_id, trace_id, span_id, created_at, query, answer,"
            " contexts, n_contexts, sampled) VALUES (?,?,?,?,?,?,'[]',0,1)",
            [(f"{i:032x}-{i:016x}", f"{i:032x}", f"{i:016x}", 1.7e9 + i, f"q{i}", answer)
             for i in range(3000)])
        conn.executemany(
            "INSERT INTO scores(record_id, trace_id, name, metric, value, status, created_at)"
            " VALUES (?,?,?,?,?,'ok',?)",
            [(f"{i:032x}-{i:016x}", f"{i:032x}", name, name, (i % 10) / 10, 1.7e9 + i)
             for i in range(3000) for name in ("bleu", "token_f1")])
    conn.close()
    return path


def test_export_streams_in_flat_memory(big_db: Path) -> None:
    class Sink(io.TextIOBase):
        chars = 0

        def write(self, s: str) -> int:
            self.chars += len(s)
            return len(s)

    conn = open_db(big_db)
    sink = Sink()
    tracemalloc.start()
    try:
        n = write_csv(iter_rows(conn), sink)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        conn.close()
    assert n == 6000 and sink.chars > 25_000_000
    # Holding the rows would take far more than the output; streaming holds a few rows.
    assert peak < 2_000_000, f"peak {peak:,} bytes while writing {sink.chars:,} chars"


def test_export_into_a_closed_pipe_is_quiet(big_db: Path) -> None:
    proc = subprocess.Popen([*cli_script(), "export", "--db", str(big_db), "--format", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = json.loads(proc.stdout.readline())
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert first["record_id"] == f"{0:032x}-{0:016x}" and "Traceback" not in err


# -- ui: the canned queries ------------------------------------------------------------------
def _canned(db: Path, name: str, **params: str) -> list[dict[str, Any]]:
    q = canned_queries()[name]
    args = {p: params.get(p, "") for p in query_params(q["sql"])}
    conn = open_db(db)
    try:
        return [dict(r) for r in conn.execute(q["sql"], args)]
    finally:
        conn.close()


@SQLITE_ONLY
def test_worst_scores_today(db: Path) -> None:
    day_ago = time.time() - 24 * 3600
    ok = rows(db, "SELECT s.record_id, s.value, s.created_at, r.query FROM scores s JOIN"
                  " records r USING (record_id) WHERE s.name = ? AND s.status = 'ok'",
              "token_f1")
    recent = sorted((s for s in ok if s["created_at"] >= day_ago),
                    key=lambda s: (s["value"], -s["created_at"]))
    got = _canned(db, "worst_scores_today", metric="token_f1")
    assert [g["record_id"] for g in got] == [s["record_id"] for s in recent]
    assert len(recent) < len(ok)  # records older than 24 hours are left out
    assert got[0]["query"] == recent[0]["query"] and got[0]["label"] == "fail"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", got[0]["scored_at_utc"])
    assert len(_canned(db, "worst_scores_today", metric="token_f1", hours="48")) == len(ok)
    # The default metric is faithfulness; lower-is-better metrics list the highest first.
    assert {g["name"] for g in _canned(db, "worst_scores_today")} == {"faithfulness"}
    lengths = [g["value"] for g in _canned(db, "worst_scores_today",
                                           metric="test_html_answer_length")]
    assert lengths == sorted(lengths, reverse=True) and len(set(lengths)) > 1


@SQLITE_ONLY
def test_failure_rate_by_hour(db: Path) -> None:
    expected: dict[tuple[str, str], dict[str, Any]] = {}
    for s in rows(db, "SELECT * FROM scores"):
        hour = dt.datetime.fromtimestamp(s["created_at"], dt.timezone.utc).strftime(
            "%Y-%m-%d %H:00")
        e = expected.setdefault((hour, s["name"]), {"scores": 0, "fails": 0, "labelled": 0,
                                                    "errors": 0})
        e["scores"] += 1
        e["errors"] += s["status"] == "error"
        if s["status"] == "ok" and s["label"] is not None:
            e["labelled"] += 1
            e["fails"] += s["label"] == "fail"
    got = _canned(db, "failure_rate_by_hour")
    # Newest hour first, names alphabetical within an hour (sorts are stable).
    order = sorted(sorted(expected, key=lambda k: k[1]), key=lambda k: k[0], reverse=True)
    assert [(g["hour_utc"], g["name"]) for g in got] == order
    for g in got:
        e = expected[(g["hour_utc"], g["name"])]
        assert (g["scores"], g["fails"], g["errors"]) == (e["scores"], e["fails"], e["errors"])
        want = round(e["fails"] / e["labelled"], 4) if e["labelled"] else None
        assert g["fail_rate"] == want
    only = _canned(db, "failure_rate_by_hour", metric="token_f1")
    assert {g["name"] for g in only} == {"token_f1"}


@SQLITE_ONLY
def test_records_without_scores_and_errors_by_reason(db: Path) -> None:
    got = {g["query"]: g for g in _canned(db, "records_without_scores")}
    assert set(got) == {"question 7?", "only errors", "only skipped"}
    assert got["question 7?"]["sampling"] == "not sampled" and got["question 7?"]["jobs"] is None
    assert got["only errors"]["scores"] == "token_f1: error (boom)"
    assert "token_f1: skipped (record has no ground_truths)" in got["only skipped"]["jobs"]
    reasons = {(g["kind"], g["metric"], g["reason"]): g["n"]
               for g in _canned(db, "errors_by_reason")}
    assert reasons == {
        ("error", "token_f1", "TimeoutError: the judge took too long"): 1,  # first line only
        ("error", "token_f1", "boom"): 1,
        ("skipped", "token_f1", "record has no ground_truths"): 2,
        ("skipped", "test_html_answer_length", "answer is empty"): 1,
    }
    daily = _canned(db, "daily_summary")
    ok = rows(db, "SELECT count(*) AS n FROM scores WHERE status = 'ok'")[0]["n"]
    assert sum(d["ok_scores"] for d in daily) == ok


@SQLITE_ONLY
def test_metadata_and_databases_without_a_metrics_table(db: Path, tmp_path: Path) -> None:
    meta = metadata(Path("/data/my-app.db"))
    queries = meta["databases"]["my-app"]["queries"]
    assert {"worst_scores_today", "failure_rate_by_hour", "records_without_scores"} <= set(
        queries)
    for q in queries.values():
        assert q["title"] and q["description"] and q["params"] == query_params(q["sql"])
    assert queries["worst_scores_today"]["params"] == ["metric", "hours"]
    old = tmp_path / "old.db"
    shutil.copy(db, old)
    conn = sqlite3.connect(old)
    conn.execute("DROP TABLE metrics")
    conn.close()
    conn = open_db(old)
    try:
        for q in canned_queries(has_metrics_table=False).values():
            conn.execute(q["sql"], {p: "" for p in query_params(q["sql"])}).fetchall()
    finally:
        conn.close()


# -- ui: Datasette for real ------------------------------------------------------------------
def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _refused(url: str, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
        except (urllib.error.URLError, OSError):
            return True
        time.sleep(0.2)
    return False


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.integration
@SQLITE_ONLY
def test_ui_serves_canned_queries_read_only(db: Path) -> None:
    pytest.importorskip("datasette")
    before = _digest(db)
    proc = subprocess.Popen([*cli_script(), "ui", "--db", str(db), "--port", "0", "--no-open"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                m = re.search(r"read-only at (http://127\.0\.0\.1:\d+/\S+)", lines.get(timeout=1))
            except queue.Empty:
                continue
            url = m.group(1) if m else None
        assert url is not None, "tracescore ui did not report its address"
        assert url.endswith("/export")  # Datasette names the database after the file
        got = _get_json(f"{url}/worst_scores_today.json?metric=token_f1&_shape=array")
        assert got == _canned(db, "worst_scores_today", metric="token_f1") and got
        hourly = _get_json(f"{url}/failure_rate_by_hour.json?_shape=array")
        assert hourly == _canned(db, "failure_rate_by_hour")
        # Writes are refused (and the file's hash, checked below, never changes).
        with pytest.raises(urllib.error.HTTPError):
            _get_json(f"{url}.json?sql=DELETE+FROM+records")
    finally:
        proc.terminate()  # SIGTERM to tracescore only: it must stop its Datasette
        code = proc.wait(timeout=30)
    assert code == 0
    assert _refused(url.rsplit("/", 1)[0] + "/-/versions.json")
    assert _digest(db) == before and rows(db, "SELECT count(*) AS n FROM records")[0]["n"] > 0


@pytest.mark.integration
@SQLITE_ONLY
def test_ui_opens_the_browser_unless_told_not_to(db: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasette")
    opened: list[tuple[str, Any]] = []

    def launch(url: str, *args: Any, **kwargs: Any) -> int:
        # Instead of a browser: check the page is live, then stop like Ctrl-C would.
        opened.append((url, _get_json(url + ".json")))
        raise KeyboardInterrupt

    monkeypatch.setattr(click, "launch", launch)
    result = run_cli("ui", "--db", db, "--port", 0)
    assert result.exit_code == 0, result.output
    assert len(opened) == 1
    url, page = opened[0]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/export", url)
    assert page["database"] == "export"
    assert _refused(url.rsplit("/", 1)[0] + "/-/versions.json")


@SQLITE_ONLY
def test_ui_without_datasette_says_how_to_install(db: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasette", None)  # import datasette -> ImportError
    monkeypatch.setattr(click, "launch", lambda *a, **k: pytest.fail("opened a browser"))
    result = run_cli("ui", "--db", db, "--no-open")
    assert result.exit_code == 2
    assert "pip install 'tracescore[ui]'" in result.output
    assert isinstance(result.exception, SystemExit)


def test_ui_on_a_missing_database_exits_2(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasette")
    monkeypatch.setattr(click, "launch", lambda *a, **k: pytest.fail("opened a browser"))
    result = run_cli("ui", "--db", tmp_path / "nope.db", "--port", 0)
    assert result.exit_code == 2 and "database not found" in result.output
    assert not (tmp_path / "nope.db").exists()


def test_worst_scores_today_defaults_to_a_metric_the_database_has(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracescore.reports import ui

    runs = _runs()
    for run in runs:  # like the demo's database: no faithfulness scores at all
        run.scores.pop("faithfulness", None)
    path = tmp_path / "nofaith.db"
    build_db(path, runs)
    conn = open_db(path)
    try:
        metric = ui.default_metric(conn)
        counts = rows(path, "SELECT name, count(*) AS n FROM scores WHERE status = 'ok'"
                            " GROUP BY name ORDER BY n DESC, name")
        assert metric == counts[0]["name"] == "test_html_answer_length"  # the most scored
        q = ui.canned_queries(metric=metric)["worst_scores_today"]
        assert f"default {metric}" in q["description"]
        got = [dict(r) for r in conn.execute(q["sql"], {"metric": "", "hours": "48"})]
    finally:
        conn.close()
    assert got and {g["name"] for g in got} == {metric}
    # With faithfulness scores, faithfulness stays the default.
    with_faith = tmp_path / "faith.db"
    build_db(with_faith, _runs())
    conn = open_db(with_faith)
    try:
        assert ui.default_metric(conn) == "faithfulness"
    finally:
        conn.close()
    # `tracescore ui` hands the database's default to Datasette's metadata.
    seen: dict[str, Any] = {}

    def serve(db: Path, **kw: Any) -> int:
        seen.update(kw, meta=ui.metadata(db, metric=kw["metric"]))
        return 0

    monkeypatch.setattr(ui, "datasette_available", lambda: True)
    monkeypatch.setattr(ui, "serve", serve)
    result = run_cli("ui", "--db", path, "--no-open")
    assert result.exit_code == 0, result.output
    assert seen["metric"] == metric
    [database] = seen["meta"]["databases"].values()
    assert f"'{metric}'" in database["queries"]["worst_scores_today"]["sql"]


def test_ui_on_a_postgres_url_says_it_serves_sqlite_only(pg_url: str) -> None:
    tracescore_store.open_store(pg_url).close()
    result = run_cli("ui", "--db", pg_url, "--no-open")
    assert result.exit_code == 2
    assert "serves a SQLite file only" in result.output and "report --html" in result.output
