"""Issue 18, output hardening: captured text cannot attack a terminal or a spreadsheet,
passwords and API keys stay out of what tracescore prints and stores, and the files it
creates are private (0600).

Real parts: the CLI through click's runner (its bytes) and as a real process, real SQLite
and PostgreSQL stores, a closed port on 127.0.0.1 for an unreachable server, real file modes.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import cli_script, rows

from tracescore.cli import main
from tracescore.record import Context, RagRecord
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, open_store
from tracescore.store.base import redact_url
from tracescore.store.segments import SegmentSpec

# OSC 52 (write the clipboard), clear the screen, a right-to-left override, a C1 CSI, a CR.
OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
CLEAR = "\x1b[2J"
RLO = "\u202e"
NASTY = f"{OSC52}{CLEAR}{RLO}evil\x9b31m\rhidden"
RAW_BYTES = (b"\x1b", b"\x07", RLO.encode(), "\x9b".encode(), b"\r")
ESCAPED = "\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b[2J\\u202eevil\\x9b31m\\x0dhidden"
NAME = f"m{CLEAR}x"  # a metric name with an escape sequence in it


def _seg(release: str) -> SegmentSpec:
    return SegmentSpec(release=release, environment=None, keys=())


def _write(db: str, trace: str, release: str, explanation: str = NASTY,
           query: str = f"query {NASTY}", value: float = 0.25,
           details: dict[str, Any] | None = None) -> list[tuple[int, Score]]:
    """One record with one score (two names) through the real store; returns the stored
    scores as complete_job hands them to the exporter."""
    store = open_store(db)
    try:
        rec = RagRecord(trace_id=trace, span_id="00000000000000a1", query=query,
                        answer=f"answer {NASTY}",
                        contexts=(Context(text=f"context {NASTY}", id=f"doc{NASTY}"),),
                        ground_truths=(f"truth {NASTY}",),
                        start_time_ns=1_700_000_000_000_000_000,
                        end_time_ns=1_700_000_000_500_000_000, model="app")
        store.write_batch([(rec, Decision(0.1, ("m",)))], [NewJob(rec.record_id, "m", "1")],
                          segments=_seg(release))
        [job] = store.lease_jobs("t", 10, 60.0, ["m"])
        scores = [Score("m", value, label="fail", explanation=explanation, metric="m",
                        details=details or {}),
                  Score(NAME, value, explanation=f"second {NASTY}", metric="m")]
        out = store.complete_job(job, "t", scores, "none")
        assert out is not None
        return out
    finally:
        store.close()


@pytest.fixture
def nasty_db(tmp_path: Path) -> str:
    db = str(tmp_path / "ts.db")
    for i in range(3):
        _write(db, f"{i + 1:032x}", "r1")
        _write(db, f"{i + 100:032x}", "r2")
    return db


def _cli(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def _assert_clean(out: bytes) -> None:
    for raw in RAW_BYTES:
        assert raw not in out, (raw, out[:400])


# -- 1. terminal safety -------------------------------------------------------------------
def test_printable_escapes_controls_and_bidi() -> None:
    from tracescore.reports.textfmt import printable

    text = printable(f"a{NASTY}\tb\nc\x7f\u2066")
    assert text == ("a\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b[2J\\u202eevil\\x9b31m\\x0dhidden"
                    "\\x09b\\x0ac\\x7f\\u2066")
    assert printable("a\nb\tc", keep="\n") == "a\nb\\x09c"
    assert printable(text) == text  # idempotent; plain text is untouched
    assert printable("héllo – ok") == "héllo – ok"


def test_show_report_compare_check_print_escapes_not_controls(nasty_db: str) -> None:
    show = _cli("show", f"{1:032x}", "--db", nasty_db)
    assert show.exit_code == 0, show.output
    out = show.stdout_bytes
    _assert_clean(out)
    text = out.decode()
    # query, answer, ground truth, context id and text, two explanations: all visible
    assert text.count(ESCAPED) == 7, text
    assert "m\\x1b[2Jx" in text and "doc\\x1b]52" in text

    report = _cli("report", "--db", nasty_db)
    assert report.exit_code == 0, report.output
    _assert_clean(report.stdout_bytes)
    assert "m\\x1b[2Jx" in report.stdout_bytes.decode()

    compare = _cli("compare", "--db", nasty_db, "--current", "r2", "--baseline", "r1",
                   "--min-n", "1")
    assert compare.exit_code == 0, compare.output
    _assert_clean(compare.stdout_bytes)
    assert "m\\x1b[2Jx" in compare.stdout_bytes.decode()

    check = _cli("check", "--db", nasty_db, "--compare", "release=r2:r1", "--min-n", "1")
    assert check.exit_code in (0, 1), check.output
    _assert_clean(check.stdout_bytes)
    assert "m\\x1b[2Jx" in check.stdout_bytes.decode()

    # JSON stays raw data: JSON escapes the C0 controls itself, the text round-trips.
    js = _cli("show", f"{1:032x}", "--db", nasty_db, "--json")
    assert b"\x1b" not in js.stdout_bytes
    assert json.loads(js.stdout)["records"][0]["query"] == f"query {NASTY}"


def test_show_in_a_real_process_writes_no_escape_sequence(nasty_db: str) -> None:
    proc = subprocess.run([*cli_script(), "show", f"{2:032x}", "--db", nasty_db],
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _assert_clean(proc.stdout)
    assert proc.stdout.decode().count(ESCAPED) == 7


# -- 2. CSV injection ---------------------------------------------------------------------
FORMULAS = {"=HYPERLINK(\"http://evil.example\",\"x\")", "+1+cmd|' /C calc'!A0", "-2+3",
            "@SUM(A1:A9)", "\t=1+1", "\r=1+1"}


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def test_csv_export_neutralises_formulas_unless_raw(tmp_path: Path) -> None:
    db = str(tmp_path / "ts.db")
    for i, f in enumerate(sorted(FORMULAS)):
        _write(db, f"{i + 1:032x}", "r1", explanation=f, query=f, value=-0.5)
    out = tmp_path / "x.csv"
    result = _cli("export", "--db", db, "--format", "csv", "-o", out)
    assert result.exit_code == 0, result.output
    got = _csv_rows(out.read_bytes().decode("utf-8"))
    # (a carriage return is a control character: shown as \x0d, which is no formula)
    shown = {"'" + f if f[0] != "\r" else "\\x0d" + f[1:] for f in FORMULAS}
    assert {r["query"] for r in got} == shown
    assert {r["score_explanation"] for r in got if r["score_name"] == "m"} == shown
    texts = [v for r in got for c, v in r.items() if c not in ("score_value", "latency_ms")]
    assert texts and all(not v or v[0] not in "=+-@\t\r" for v in texts)
    assert {r["score_value"] for r in got} == {"-0.5"}  # numbers are left as numbers

    raw = _cli("export", "--db", db, "--format", "csv", "--raw-csv")
    assert raw.exit_code == 0, raw.output
    assert {r["query"] for r in _csv_rows(raw.stdout)} == FORMULAS
    jsonl = _cli("export", "--db", db, "--format", "jsonl")
    assert {json.loads(line)["query"] for line in jsonl.stdout.splitlines()} == FORMULAS


# -- 3. passwords in URLs -----------------------------------------------------------------
@pytest.mark.parametrize("url, shown", [
    ("postgresql://bob:hunter2pw@db.example:5432/app",
     "postgresql://bob:***@db.example:5432/app"),
    ("postgresql://bob@db.example/app?password=hunter2pw",
     "postgresql://bob@db.example/app?password=***"),
    ("postgres://db.example/app?sslmode=require&PASSWORD=hunter2pw&application_name=x",
     "postgres://db.example/app?sslmode=require&PASSWORD=***&application_name=x"),
    ("postgresql://db.example/app?sslpassword=hunter2pw&password=hunter3pw",
     "postgresql://db.example/app?sslpassword=***&password=***"),
    ("postgresql://bob:hun/ter#2pw@db.example/app", "postgresql://***@db.example/app"),
    ("postgresql://bob:hun?ter2pw@db.example/app", "postgresql://***@db.example/app"),
    ("postgresql://bob:hun@ter2pw@db.example/app", "postgresql://bob:***@db.example/app"),
    ("postgresql://bob:hun%40ter2pw@h1:5432,h2:5433/app",
     "postgresql://bob:***@h1:5432,h2:5433/app"),
    ("postgresql://db.example/app?password=hun@ter#2pw&x=1",
     "postgresql://db.example/app?password=***&x=1"),
    ("postgresql://bob@db.example/app", "postgresql://bob@db.example/app"),
    ("/tmp/ts.db", "/tmp/ts.db"),
])
def test_redact_url_hides_every_form_of_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    for piece in ("hunter2pw", "hunter3pw", "hun", "ter"):
        assert piece not in redact_url(url) or piece in shown


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


@pytest.mark.parametrize("userinfo, query", [
    ("bob:hunter2pw@", ""), ("bob@", "?password=hunter2pw"), ("bob:hun/ter#2pw@", ""),
    ("bob:hunt@er2pw@", ""), ("", "?sslmode=disable&password=hunter2pw"),
])
def test_show_error_on_an_unreachable_server_hides_the_password(userinfo: str,
                                                                  query: str) -> None:
    url = f"postgresql://{userinfo}127.0.0.1:{_closed_port()}/app{query}"
    proc = subprocess.run([*cli_script(), "show", "abc", "--db", url], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "127.0.0.1" in proc.stderr or "***" in proc.stderr
    for piece in ("hunter2pw", "hun/ter", "ter#2pw", "er2pw"):
        assert piece not in proc.stderr + proc.stdout, proc.stderr


def test_report_header_on_postgres_hides_a_query_password(pg_url: str) -> None:
    open_store(pg_url).close()
    url = pg_url + ("&" if "?" in pg_url else "?") + "password=hunter2pw"
    result = _cli("report", "--db", url)
    assert result.exit_code == 0, result.output
    assert "hunter2pw" not in result.output
    assert "password=***" in result.output.splitlines()[0]


@pytest.mark.allow_internal_errors  # the scorer cannot reach the database either
def test_init_warning_hides_a_password_with_unencoded_slash_and_hash(
        caplog: pytest.LogCaptureFixture) -> None:
    from tracescore.testing import in_memory

    url = f"postgresql://bob:hun/ter#2pw@127.0.0.1:{_closed_port()}/app"
    with caplog.at_level(logging.WARNING, logger="tracescore"):
        ts, _ = in_memory(db=url)
        ts.shutdown(timeout=2)
    text = caplog.text
    assert "cannot reach postgresql://***@127.0.0.1" in text
    assert "hun/ter" not in text and "ter#2pw" not in text


def test_redact_text_hides_pieces_a_driver_quotes() -> None:
    from tracescore.store.base import redact_text

    url = "postgresql://bob:hunt@er2pw@127.0.0.1:1/app"
    msg = "failed to resolve host 'er2pw@127.0.0.1': postgresql://bob:hunt@er2pw@127.0.0.1"
    assert "er2pw" not in redact_text(msg, url) and "hunt" not in redact_text(msg, url)
    assert redact_text("a /tmp/x.db message", "/tmp/x.db") == "a /tmp/x.db message"


# -- 4. keys in explanations and details --------------------------------------------------
ENV_KEY = "hk-live-0123456789abcdefXYZ"
SK_KEY = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234"


@pytest.fixture
def env_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    yield ENV_KEY


def test_a_key_in_an_explanation_is_stored_and_exported_scrubbed(db: str, env_key: str,
                                                                  tmp_path: Path) -> None:
    reason = f"The context supports it. (key used: {env_key}; also {SK_KEY})"
    stored = _write(db, f"{7:032x}", "r1", explanation=reason,
                    details={"claims": [{"reason": f"echo {SK_KEY}"}], env_key: "x"})
    # what the exporter receives (the span's attributes come from these scores)
    for _, s in stored:
        text = json.dumps([s.explanation, s.error, dict(s.details)])
        assert env_key not in text and SK_KEY not in text
    [score] = rows(db, "SELECT explanation, details FROM scores WHERE name = 'm'")
    assert "[REDACTED]" in score["explanation"]
    for value in score.values():
        assert env_key not in str(value) and SK_KEY not in str(value)
    assert "The context supports it." in score["explanation"]
    if not db.startswith("postgres"):
        for args in (["show", f"{7:032x}"], ["export", "--format", "jsonl"]):
            out = _cli(*args, "--db", db)
            assert out.exit_code == 0, out.output
            assert env_key not in out.output and SK_KEY not in out.output


# -- 5. private files ---------------------------------------------------------------------
@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # the usual umask, under which files were created 0644
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_sqlite_database_wal_and_shm_are_private(tmp_path: Path, umask_022: None) -> None:
    db = tmp_path / "ts.db"
    store = open_store(db)
    try:
        _write(str(db), f"{1:032x}", "r1")  # a second connection while this one is open
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{db}{suffix}")
            assert path.exists(), path
            assert _mode(path) == 0o600, (path, oct(_mode(path)))
    finally:
        store.close()
    # an existing file keeps the mode its owner gave it
    shared = tmp_path / "shared.db"
    shared.touch()
    shared.chmod(0o640)
    open_store(shared).close()
    assert _mode(shared) == 0o640


def test_export_and_html_report_files_are_private(nasty_db: str, tmp_path: Path,
                                                  umask_022: None) -> None:
    outs = {"x.csv": ["export", "--format", "csv", "-o"],
            "x.jsonl": ["export", "--format", "jsonl", "-o"],
            "r.html": ["report", "--html"]}
    for name, args in outs.items():
        path = tmp_path / name
        result = _cli(*args, path, "--db", nasty_db)
        assert result.exit_code == 0, result.output
        assert _mode(path) == 0o600, (name, oct(_mode(path)))
    # a file the user made readable stays readable when it is written again
    again = tmp_path / "x.csv"
    again.chmod(0o644)
    assert _cli("export", "--format", "csv", "-o", again, "--db", nasty_db).exit_code == 0
    assert _mode(again) == 0o644


def test_cli_process_creates_private_files_under_umask_022(nasty_db: str,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "p.csv"
    proc = subprocess.run(["sh", "-c", 'umask 022 && exec "$@"', "sh", *cli_script(),
                           "export", "--format", "csv", "--db", nasty_db, "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert _mode(out) == 0o600
