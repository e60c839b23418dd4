"""What a judge server or a judged text puts in the database reaches neither the terminal nor
``tracescore ui`` raw: the judge's model name is cleaned when stored and escaped when printed,
``export --format csv`` escapes control characters as ``label --export`` does, and a key the
judge quoted is scrubbed before its reply is cached."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from test_hardening_output import NASTY, RAW_BYTES, _write

from tracescore.cli import main
from tracescore.judge.base import JudgeReply
from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, open_store
from tracescore.store.segments import SegmentSpec

MODEL = f"gpt-4o{NASTY}"  # what a hostile proxy could answer as its model


def _clean(out: bytes) -> None:
    for raw in RAW_BYTES:
        assert raw not in out, (raw, out[:400])


def test_a_reported_model_name_is_cleaned() -> None:
    reply = JudgeReply(text="{}", model=MODEL)
    assert reply.model == "gpt-4o]52;c;ZWNobyBwd25lZA==[2Jevil31mhidden"
    assert JudgeReply(text="{}", model="gpt-4o-mini").model == "gpt-4o-mini"


def _judged(db: str, trace: str, release: str, judge_model: str) -> None:
    store = open_store(db)
    try:
        rec = RagRecord(trace_id=trace, span_id="00000000000000a1", query="q", answer="a",
                        start_time_ns=1_700_000_000_000_000_000,
                        end_time_ns=1_700_000_000_500_000_000, model="app")
        store.write_batch([(rec, Decision(0.1, ("m",)))], [NewJob(rec.record_id, "m", "1")],
                          segments=SegmentSpec(release=release))
        [job] = store.lease_jobs("t", 10, 60.0, ["m"])
        assert store.complete_job(job, "t", [Score("m", 0.5, metric="m")], "none",
                                  judge_model=judge_model) is not None
    finally:
        store.close()


def test_compare_and_check_errors_print_a_stored_model_name_escaped(tmp_path: Path) -> None:
    """A database written before the model was cleaned (or by another tool): the error that
    lists the judge models escapes them. Before: the title change, clipboard write and screen
    clear went to the terminal."""
    db = str(tmp_path / "ts.db")
    for i in range(3):
        _judged(db, f"{i + 1:032x}", "r1", MODEL)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT DISTINCT judge_model FROM scores").fetchall() == [(MODEL,)]
    conn.close()
    compare = CliRunner().invoke(main, ["compare", "--db", db, "--by", "judge_model"])
    assert compare.exit_code == 2, compare.output
    _clean(compare.stdout_bytes + compare.stderr_bytes)
    assert "gpt-4o\\x1b]52" in compare.output
    check = CliRunner().invoke(main, ["check", "--db", db, "--compare",
                                      f"judge_model=x:{MODEL}"])
    assert check.exit_code == 2, check.output
    _clean(check.stdout_bytes + check.stderr_bytes)


def test_export_csv_escapes_control_characters_like_label_export(tmp_path: Path) -> None:
    db = str(tmp_path / "ts.db")
    _write(db, f"{1:032x}", "r1")
    out = CliRunner().invoke(main, ["export", "--db", db, "--format", "csv"])
    assert out.exit_code == 0, out.output
    _clean(out.stdout_bytes.replace(b"\r\n", b"\n"))  # (CSV's own line ends)
    assert "\\x1b]52;c;" in out.stdout
    raw = CliRunner().invoke(main, ["export", "--db", db, "--format", "csv", "--raw-csv"])
    assert b"\x1b]52;c;" in raw.stdout_bytes  # --raw-csv: exactly as stored


def test_a_key_the_judge_quoted_is_scrubbed_before_caching(tmp_path: Path,
                                                           monkeypatch: Any) -> None:
    """The cached reply is served again (and shown by ``tracescore ui``): before, the key
    stayed in ``judge_cache.value``."""
    key = "sk-proj-CachedKey0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    db = str(tmp_path / "ts.db")
    store = open_store(db)
    try:
        data = {"statements": [f"the config says api_key={key}", "fine"],
                "raw": f"Authorization: Bearer {key}"}
        store.judge_cache_put("k1", "extract", f"judge{NASTY}", "1", data, 10, 5)
        got = store.judge_cache_get("k1")
    finally:
        store.close()
    assert key not in json.dumps(got)
    assert got["statements"][1] == "fine"
    conn = sqlite3.connect(db)
    (value, model), = conn.execute("SELECT value, model FROM judge_cache").fetchall()
    conn.close()
    assert key not in value and "\x1b" not in model
