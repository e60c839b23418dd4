"""Versioned schema migrations on both backends, and moving a SQLite history to PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, run_cli

import tracescore
from tracescore.store import migrations, open_store
from tracescore.store.migrations import Migration, SchemaTooNew
from tracescore.testing import ScriptedMetric


def _version(db: str) -> int:
    return int(rows(db, "SELECT value FROM meta WHERE key='schema_version'")[0]["value"])


def test_a_new_step_upgrades_an_existing_database_once(db: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A database written by today's release (version 1) gets a later step applied once, in
    order, with its data kept; a database newer than the code is refused."""
    ts = tracescore.init(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    ts.log_record(query="q", answer="a")
    assert ts.flush(20)
    ts.shutdown()
    pg = db.startswith("postgresql://")
    name = "POSTGRES_MIGRATIONS" if pg else "SQLITE_MIGRATIONS"
    latest = getattr(migrations, name)[-1].version
    assert _version(db) == latest
    applied: list[int] = []

    def step_next(store: Any) -> None:
        applied.append(latest + 1)
        store.conn.execute("ALTER TABLE records ADD COLUMN retention_class TEXT")

    monkeypatch.setattr(migrations, name, (*getattr(migrations, name),
                                           Migration(latest + 1, "test step", step_next)))
    open_store(db).close()
    open_store(db).close()
    assert applied == [latest + 1] and _version(db) == latest + 1
    assert [r["query"] for r in rows(db, "SELECT query, retention_class FROM records")] == ["q"]
    monkeypatch.setattr(migrations, name, getattr(migrations, name)[:-1])
    with pytest.raises(SchemaTooNew, match="newer than this tracescore"):
        open_store(db)
    report = run_cli("report", "--db", db)
    assert report.exit_code == 2 and "upgrade tracescore" in report.output


def test_a_new_sqlite_file_has_every_step(tmp_path: Path) -> None:
    """A new file runs every step, the first release's tables among them (an existing
    version-1 file is upgraded in place: tests/test_retention.py)."""
    db = tmp_path / "v1.db"
    open_store(str(db)).close()
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert {"records", "jobs", "scores", "counters", "metrics", "meta", "judge_cache",
            "judge_calls", "feedback", "judge_health", "rollup_records"} <= tables
    assert _version(str(db)) == migrations.SQLITE_MIGRATIONS[-1].version


def test_copy_a_sqlite_history_into_postgres(tmp_path: Path, pg_url: str) -> None:
    src = tmp_path / "history.db"
    metrics = [ScriptedMetric(lambda r: len(r.answer) / 10, name="m")]
    ts = tracescore.init(db=src, metrics=metrics)
    recs = [ts.log_record(query=f"q{i}", answer="a" * i) for i in range(1, 8)]
    ts.add_feedback(recs[0].trace_id, "down", comment="wrong")
    assert ts.flush(20)
    ts.shutdown()
    store = open_store(str(src))
    store.judge_cache_put("k1", "extract", "gpt", "1", {"texts": {}}, 10, 2)
    store.judge_call_log(record_id=recs[0].record_id, step="extract", model="gpt",
                         input_tokens=10, output_tokens=2, latency_ms=5.0, cost_usd=0.001,
                         error=None)
    store.write_batch([], [])
    store.close()
    # one job still open in the file (its process died): it must arrive pending
    conn = sqlite3.connect(src)
    with conn:
        conn.execute("UPDATE jobs SET status='leased', lease_owner='dead', lease_until=1e12 "
                     "WHERE record_id=?", (recs[-1].record_id,))
        conn.execute("DELETE FROM scores WHERE record_id=?", (recs[-1].record_id,))
    conn.close()

    result = run_cli("copy-to-postgres", "--db", src, "--to", pg_url)
    assert result.exit_code == 0, result.output
    assert "7 records" in result.output
    for table in ("records", "feedback", "judge_cache", "judge_calls", "metrics"):
        assert rows(pg_url, f"SELECT count(*) AS n FROM {table}") == \
            rows(str(src), f"SELECT count(*) AS n FROM {table}"), table
    assert rows(pg_url, "SELECT status, count(*) AS n FROM jobs GROUP BY status ORDER BY 1") \
        == [{"status": "done", "n": 6}, {"status": "pending", "n": 1}]
    # every score points at its own job in the target
    assert rows(pg_url, "SELECT count(*) AS n FROM scores s JOIN jobs j ON j.job_id = s.job_id"
                        " AND j.record_id = s.record_id") == [{"n": 6}]
    src_report = json.loads(run_cli("report", "--json", "--db", src).output)
    pg_report = json.loads(run_cli("report", "--json", "--db", pg_url).output)
    for key in ("records", "scores", "metrics", "worst"):
        assert pg_report[key] == src_report[key], key
    # a second copy would double the counters: refused
    again = run_cli("copy-to-postgres", "--db", src, "--to", pg_url)
    assert again.exit_code == 2 and "already copied" in again.output
    # the fleet's workers score the job that was open
    ts = tracescore.init(db=pg_url, metrics=metrics)
    assert ts.flush(20)
    ts.shutdown()
    assert rows(pg_url, "SELECT count(*) AS n FROM scores") == [{"n": 7}]
