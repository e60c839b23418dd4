"""Versioned schema migrations on both backends, and moving a SQLite history to PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, rows, run_cli

import tracescore
from tracescore.store import migrations, open_store
from tracescore.store.migrations import Migration, SchemaTooNew
from tracescore.testing import ScriptedMetric


def _version(db: str) -> int:
    return int(rows(db, "SELECT value FROM meta WHERE key='schema_version'")[0]["value"])


def _latest(db: str) -> int:
    """The latest version of ``db``'s backend (SQLite's version 6 has no PostgreSQL step)."""
    pg = db.startswith("postgresql://")
    return (migrations.POSTGRES_MIGRATIONS if pg else migrations.SQLITE_MIGRATIONS)[-1].version


def _as_version_3(db: str) -> None:
    """Turn a database written by today's code into what version 3 left: without version 4's
    tables and version 5's record columns (today's write path cannot write a cut-down schema)."""
    execute(db, "DROP TABLE labels", "DROP TABLE label_plan", "DROP TABLE judge_canary",
            *(f"ALTER TABLE records DROP COLUMN {c}" for c, _, _ in migrations.V5_COLUMNS),
            "UPDATE meta SET value = '3' WHERE key = 'schema_version'")


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
            "judge_calls", "feedback", "judge_health", "segments", "segment_values",
            "hourly_records", "hourly_scores", "hourly_bins", "hourly_skips",
            "monitor_state", "labels", "label_plan", "judge_canary"} <= tables
    # version 2's rollups of pruned rows were folded into hourly_* and dropped by version 3
    assert not {t for t in tables if t.startswith("rollup_")}
    assert _version(str(db)) == migrations.SQLITE_MIGRATIONS[-1].version


def test_copy_a_sqlite_history_into_postgres(tmp_path: Path, pg_url: str) -> None:
    src = tmp_path / "history.db"
    metrics = [ScriptedMetric(lambda r: len(r.answer) / 10, name="m")]
    ts = tracescore.init(db=src, metrics=metrics)
    recs = [ts.log_record(query=f"q{i}", answer="a" * i, session_id="conv" if i < 4 else None)
            for i in range(1, 8)]
    ts.add_feedback(recs[0].trace_id, "down", comment="wrong")
    assert ts.flush(20)
    ts.shutdown()
    store = open_store(str(src))
    store.judge_cache_put("k1", "extract", "gpt", "1", {"texts": {}}, 10, 2)
    store.judge_call_log(record_id=recs[0].record_id, step="extract", model="gpt",
                         input_tokens=10, output_tokens=2, latency_ms=5.0, cost_usd=0.001,
                         error=None)
    store.write_batch([], [])
    store.add_label(recs[0].trace_id, "m", 0.25, annotator="ann", comment="too short")
    store.add_label_plan("p1", [{"trace_id": recs[1].trace_id, "name": "m", "stratum": "low",
                                 "stratum_size": 7, "stratum_draws": 1}])
    store.add_canary_run({"judge_model": "gpt", "trigger": "startup", "cases": 4, "agreed": 4,
                          "details": {"cases": []}})
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
    for table in ("records", "feedback", "judge_cache", "judge_calls", "metrics", "labels",
                  "label_plan", "judge_canary", "sessions"):
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
    label_cols = "trace_id, name, value, metric_version, annotator, comment, source, created_at"
    assert rows(pg_url, f"SELECT {label_cols} FROM labels") == \
        rows(str(src), f"SELECT {label_cols} FROM labels")
    assert rows(pg_url, "SELECT stratum, stratum_size FROM label_plan") == [
        {"stratum": "low", "stratum_size": 7}]
    again = run_cli("copy-to-postgres", "--db", src, "--to", pg_url)
    assert again.exit_code == 2 and "already copied" in again.output
    # the fleet's workers score the job that was open
    ts = tracescore.init(db=pg_url, metrics=metrics)
    assert ts.flush(20)
    ts.shutdown()
    assert rows(pg_url, "SELECT count(*) AS n FROM scores") == [{"n": 7}]


# -- version 2 → 3: existing rows and pruned rollups folded into the hourly rollups ----------
H1, H2 = 1_700_000_000 // 3600 * 3600, 1_700_000_000 // 3600 * 3600 + 3600  # pruned hours
T = 1_700_100_000.0  # raw rows, two hours later and more

V2_RECORDS = [  # record_id, created_at, model, sampled, text_kept, error, tin, tout, latency
    ("r1", T, "gpt-a", 1, 1, None, 10, 5, 100.0),
    ("r2", T + 10, "gpt-a", 1, 1, "ValueError: x", None, None, None),
    ("r3", T + 20, "gpt-a", 0, 0, None, 7, 3, 50.0),
    ("r4", T + 3600, None, 1, None, None, None, None, 20.0),
    ("r5", T + 3700, "gpt-b", 1, 1, None, 1, 1, 10.0),
    ("r6", T + 3800, "gpt-b", 0, 0, None, None, None, None),
]
V2_SCORES = [  # record_id, name, value, label, status, created_at
    ("r1", "m", 0.25, "fail", "ok", T + 60), ("r2", "m", None, None, "error", T + 70),
    ("r4", "m", 0.9, "pass", "ok", T + 3660), ("r5", "m", 1.0, "pass", "ok", T + 7300),
    ("r5", "yes", 1.0, None, "ok", T + 7300), ("r1", "yes", 0.0, None, "ok", T + 60),
    ("r4", "yes", None, None, "skipped", T + 3660),
]
V2_SKIPPED_JOBS = [("r3", "m", "record stored compact"), ("r6", "m", "record has no answer"),
                   ("r6", "yes", "record has no answer")]
V2_ROLLUPS = [
    ("INSERT INTO rollup_records VALUES (?,?,?,?,?,?,?,?,?,?)",
     [(H1, 4, 2, 2, 1, 3, 30, 12, 4, 400.0), (H2, 6, 3, 3, 0, 1, 5, 5, 6, 60.0)]),
    ("INSERT INTO rollup_models VALUES (?,?,?)",
     [(H1, "gpt-a", 4), (H2, "gpt-a", 2), (H2, "unknown", 1), (H2, "gpt-b", 3)]),
    ("INSERT INTO rollup_scores VALUES (?,?,?,?,?,?,?,?,?)",
     [(H1, "m", "m", 3, 1.5, 3, 1, 1, 0), (H1, "yes", "yes", 2, 1.0, 0, 0, 0, 1),
      (H2, "m", "m", 2, 0.4, 2, 2, 0, 0)]),
    ("INSERT INTO rollup_score_bins VALUES (?,?,?,?,?)",
     [(H1, "m", 20, "fail", 1), (H1, "m", 60, "pass", 1), (H1, "m", 70, "pass", 1),
      (H1, "yes", 0, "", 1), (H1, "yes", 99, "", 1), (H2, "m", 10, "fail", 1),
      (H2, "m", 30, "fail", 1)]),
    ("INSERT INTO rollup_skips VALUES (?,?,?)", [(H1, "m", 2), (H2, "yes", 1)]),
]


def _make_v2(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version-2 database (as the previous release wrote it): raw rows, and rollups of
    pruned hours."""
    from tracescore.store.compat import connect_reader

    name = "POSTGRES_MIGRATIONS" if db.startswith("postgresql://") else "SQLITE_MIGRATIONS"
    full = getattr(migrations, name)
    with monkeypatch.context() as m:
        m.setattr(migrations, name, full[:2])
        open_store(db).close()
    conn = connect_reader(db)
    try:
        for rid, created, model, sampled, kept, error, tin, tout, lat in V2_RECORDS:
            conn.execute("INSERT INTO records(record_id, trace_id, span_id, created_at, model,"
                         " sampled, text_kept, error, input_tokens, output_tokens, latency_ms,"
                         " content_captured) VALUES (?,?,?,?,?,?,?,?,?,?,?,1)",
                         (rid, rid, rid, created, model, sampled, kept, error, tin, tout, lat))
        for rid, name_, value, label, status, created in V2_SCORES:
            conn.execute("INSERT INTO jobs(record_id, metric, metric_version, status, attempts,"
                         " created_at) VALUES (?,?,'1','done',1,?) ON CONFLICT DO NOTHING",
                         (rid, name_, created))
            conn.execute("INSERT INTO scores(job_id, record_id, trace_id, name, metric,"
                         " metric_version, value, label, status, created_at, delivery) VALUES"
                         " ((SELECT job_id FROM jobs WHERE record_id = ? AND metric = ?),"
                         " ?,?,?,?,'1',?,?,?,?,'span')",
                         (rid, name_, rid, rid, name_, name_, value, label, status, created))
        for rid, metric, reason in V2_SKIPPED_JOBS:
            conn.execute("INSERT INTO jobs(record_id, metric, metric_version, status, attempts,"
                         " reason, created_at) VALUES (?,?,'1','skipped',0,?,?)",
                         (rid, metric, reason, T))
        for sql, data in V2_ROLLUPS:
            for r in data:
                conn.execute(sql, r)
        conn.commit()
    finally:
        conn.close()
    assert _version(db) == 2


def _sum(db: str, sql: str, *args: Any) -> Any:
    return next(iter(rows(db, sql, *args)[0].values()))


def test_a_version_2_database_with_pruned_rollups_upgrades_with_identical_totals(
        db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_v2(db, monkeypatch)
    # the totals as version 2's readers saw them: raw rows plus rollups of pruned hours
    rec_cols = ("records", "sampled", "compact", "errors", "with_usage", "input_tokens",
                "output_tokens", "latency_n", "latency_ms_sum")
    raw = {
        "records": len(V2_RECORDS), "sampled": sum(r[3] for r in V2_RECORDS),
        "compact": sum(1 for r in V2_RECORDS if r[4] == 0),
        "errors": sum(1 for r in V2_RECORDS if r[5]),
        "with_usage": sum(1 for r in V2_RECORDS if r[6] is not None or r[7] is not None),
        "input_tokens": sum(r[6] or 0 for r in V2_RECORDS),
        "output_tokens": sum(r[7] or 0 for r in V2_RECORDS),
        "latency_n": sum(1 for r in V2_RECORDS if r[8] is not None),
        "latency_ms_sum": sum(r[8] or 0 for r in V2_RECORDS),
    }
    rolled = [r for r in V2_ROLLUPS[0][1]]
    before = {c: raw[c] + sum(r[i + 1] for r in rolled) for i, c in enumerate(rec_cols)}

    open_store(db).close()  # the upgrade
    assert _version(db) == _latest(db)  # up to the latest: 3, 4 (labels), 5 (candidates), …
    from tracescore.store.compat import connect_reader, has_table

    conn = connect_reader(db)
    try:
        assert not any(has_table(conn, t) for t in ("rollup_records", "rollup_models",
                                                    "rollup_scores", "rollup_score_bins",
                                                    "rollup_skips"))
    finally:
        conn.close()
    after = rows(db, "SELECT " + ", ".join(f"sum({c}) AS {c}" for c in rec_cols)
                 + " FROM hourly_records")[0]
    assert {c: after[c] for c in rec_cols} == pytest.approx(before)
    # per model: raw rows, plus each pruned hour's rollup_models counts
    per_model = {r["model"]: r["n"] for r in rows(
        db, "SELECT s.model, sum(h.records) AS n FROM hourly_records h JOIN segments s"
            " ON s.seg_id = h.seg_id GROUP BY s.model")}
    assert per_model == {"gpt-a": 3 + 4 + 2, "gpt-b": 2 + 3, None: 1 + 1}
    # every record has its model's segment; release and environment unknown
    assert rows(db, "SELECT r.record_id, s.model, s.release, s.environment FROM records r"
                    " JOIN segments s ON s.seg_id = r.seg_id ORDER BY r.record_id") == [
        {"record_id": r[0], "model": r[2], "release": None, "environment": None}
        for r in V2_RECORDS]
    assert rows(db, "SELECT count(*) AS n FROM scores s JOIN records r ON r.record_id ="
                    " s.record_id WHERE s.seg_id = r.seg_id AND s.judge_model = ''") == [
        {"n": len(V2_SCORES)}]

    # scores: raw rows plus the pruned hours' rollups, per name
    for name in ("m", "yes"):
        mine = [s for s in V2_SCORES if s[1] == name]
        ok = [s for s in mine if s[4] == "ok"]
        rolled_s = [r for r in V2_ROLLUPS[2][1] if r[1] == name]
        got = rows(db, "SELECT sum(n_ok) AS n_ok, sum(value_sum) AS s, sum(n_labelled) AS lab,"
                       " sum(n_fail) AS fail, sum(n_error) AS err, sum(n_skipped) AS skip"
                       " FROM hourly_scores WHERE name = ?", name)[0]
        assert got["n_ok"] == len(ok) + sum(r[3] for r in rolled_s)
        assert got["s"] == pytest.approx(sum(s[2] for s in ok) + sum(r[4] for r in rolled_s))
        assert got["lab"] == sum(1 for s in ok if s[3]) + sum(r[5] for r in rolled_s)
        assert got["fail"] == sum(1 for s in ok if s[3] == "fail") + sum(r[6] for r in rolled_s)
        assert got["err"] == sum(1 for s in mine if s[4] == "error") + sum(r[7] for r in rolled_s)
        assert got["skip"] == sum(1 for s in mine if s[4] == "skipped") + sum(r[8]
                                                                            for r in rolled_s)
        bins = sum(r[4] for r in V2_ROLLUPS[3][1] if r[1] == name) + len(ok)
        assert _sum(db, "SELECT sum(n) FROM hourly_bins WHERE name = ?", name) == bins
    # Σx² of raw rows is exact; of a pruned yes/no hour too (x² = x)
    assert _sum(db, "SELECT sum(value_sumsq) FROM hourly_scores WHERE name = 'yes'") == \
        pytest.approx(1.0 + 1.0)
    # the pruned hour of "m" (values 0.2, 0.6, 0.7, in their bins): the binned variance
    # around the exact mean, so Σx² is good to about 0.01
    ss = _sum(db, "SELECT value_sumsq FROM hourly_scores WHERE name = 'm' AND hour = ?", H1)
    assert ss == pytest.approx(0.2 ** 2 + 0.6 ** 2 + 0.7 ** 2, abs=0.01)
    # skips: the raw skipped jobs (by their record's hour, with reasons) plus the pruned ones
    skips = {(r["metric"], r["reason"]): r["n"] for r in rows(
        db, "SELECT metric, reason, sum(n) AS n FROM hourly_skips GROUP BY metric, reason")}
    assert skips == {("m", "record stored compact"): 1, ("m", "record has no answer"): 1,
                     ("yes", "record has no answer"): 1, ("m", ""): 2, ("yes", ""): 1}

    # and the upgraded database takes new rows, counted on write
    ts = tracescore.init(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")],
                         release="v3")
    ts.log_record(query="q", answer="a")
    assert ts.flush(20)
    ts.shutdown()
    assert _sum(db, "SELECT sum(records) FROM hourly_records") == before["records"] + 1
    assert _sum(db, "SELECT sum(h.n_ok) FROM hourly_scores h JOIN segments s ON"
                    " s.seg_id = h.seg_id WHERE s.release = 'v3'") == 1


# -- version 3 → 4: human labels, label plans, judge canary history --------------------------
def test_a_version_3_database_upgrades_to_4_with_its_data_kept(
        db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracescore.store.compat import connect_reader, has_table

    ts = tracescore.init(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    recs = [ts.log_record(query=f"q{i}", answer="a") for i in range(3)]
    assert ts.flush(20)
    ts.shutdown()
    _as_version_3(db)  # what a version-3 release left: no labels tables, no v5 columns
    assert _version(db) == 3
    tables = ("records", "scores", "jobs", "hourly_records", "hourly_scores", "segments")
    before = {t: rows(db, f"SELECT * FROM {t} ORDER BY 1") for t in tables}
    conn = connect_reader(db)
    try:
        assert not has_table(conn, "labels")
    finally:
        conn.close()

    store = open_store(db)  # the upgrade
    try:
        assert _version(db) == _latest(db)
        after = {t: rows(db, f"SELECT * FROM {t} ORDER BY 1") for t in tables}
        # the old columns keep their values; version 5's new ones have their defaults
        assert {t: [{k: r[k] for k in old} for r, old in zip(after[t], before[t])]
                for t in tables} == before
        assert {(r["candidates"], r["complete"]) for r in after["records"]} == {(None, 1)}
        store.add_label(recs[0].trace_id, "m", 1.0, annotator="ann")
        [label] = store.labels()
        assert (label["trace_id"], label["metric_version"]) == (recs[0].trace_id, "1")
        assert store.label_plan("none") == [] and store.canary_runs() == []
    finally:
        store.close()
    open_store(db).close()  # once: a second open applies nothing
    assert _version(db) == _latest(db) and len(rows(db, "SELECT * FROM labels")) == 1
