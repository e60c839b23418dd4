"""The record sequence (issue 33, schema SQLite 13 / PostgreSQL 12): scores and jobs keyed per
record by ``rec`` (their record's ``seq``) instead of the random ``record_id``. A database of
the previous version, with rows, migrates and prunes correctly; new rows get their keys; a
record's scores and jobs are still found through indexes by its ``record_id``."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import rows

import tracescore
from tracescore.store import migrations, open_store
from tracescore.store.compat import connect_reader
from tracescore.store.retention import Retention, prune
from tracescore.testing import ScriptedMetric

DAY = 86400.0
NOW = time.time()
#: (record id, age in days, job status): old ones are pruned unless their job is open
RECORDS = [(f"{i:032x}-{i:016x}", age, status) for i, (age, status) in enumerate(
    [(40, "done"), (50, "done"), (35, "skipped"), (45, "pending"), (5, "done"), (1, "done"),
     (60, "done"), (2, "skipped")], start=7)]
#: per record: two metrics' jobs, three score names (the first two metrics' and one more)
SCORES = ("faithfulness", "relevancy", "extra")


def _old_database(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database as the previous version left it, with records, jobs and scores (rows in
    an order unrelated to their ids, as an app writes them)."""
    name = "POSTGRES_MIGRATIONS" if db.startswith("postgresql://") else "SQLITE_MIGRATIONS"
    steps = getattr(migrations, name)
    at = next(i for i, s in enumerate(steps) if "records: a sequence" in s.description)
    with monkeypatch.context() as m:
        m.setattr(migrations, name, steps[:at])
        open_store(db).close()
    conn = connect_reader(db)
    try:
        for rid, age, status in sorted(RECORDS, key=lambda r: -r[1]):  # (written in time order)
            t = NOW - age * DAY
            conn.execute("INSERT INTO records(record_id, trace_id, span_id, created_at, query,"
                         " answer, contexts, sampled, text_kept, content_captured) VALUES"
                         " (?,?,?,?,'q','a','[]',1,1,1)",
                         (rid, rid.split("-")[0], rid.split("-")[1], t))
            for metric in SCORES[:2]:
                conn.execute("INSERT INTO jobs(record_id, metric, metric_version, status,"
                             " attempts, created_at) VALUES (?,?,'1',?,1,?)",
                             (rid, metric, status, t))
            for score in SCORES:
                conn.execute("INSERT INTO scores(record_id, trace_id, name, metric,"
                             " metric_version, value, status, created_at, delivery) VALUES"
                             " (?,?,?,?,'1',0.5,'ok',?,'span')",
                             (rid, rid.split("-")[0], score, score, t))
        conn.commit()
    finally:
        conn.close()


def test_a_previous_version_database_with_rows_migrates_and_prunes(
        db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _old_database(db, monkeypatch)
    store = open_store(db)  # (migrates)
    try:
        recs = rows(db, "SELECT record_id, seq, created_at FROM records ORDER BY created_at")
        # every record has a sequence, unique, in the order they were written (time here)
        assert [r["seq"] for r in recs] == sorted({r["seq"] for r in recs})
        assert None not in [r["seq"] for r in recs] and len(recs) == len(RECORDS)
        seq_of = {r["record_id"]: r["seq"] for r in recs}
        for table in ("scores", "jobs"):
            got = rows(db, f"SELECT record_id, rec FROM {table}")
            assert got and all(r["rec"] == seq_of[r["record_id"]] for r in got), table
        # the per-record unique keys hold on rec: a duplicate (record, name) is refused
        with pytest.raises(Exception, match="(?i)unique|duplicate"):
            conn = connect_reader(db)
            try:
                rid = RECORDS[0][0]
                conn.execute("INSERT INTO scores(record_id, rec, name, status) VALUES"
                             " (?, ?, 'extra', 'ok')", (rid, seq_of[rid]))
                conn.commit()
            finally:
                conn.close()
        res = prune(store, Retention(max_age_s=30 * DAY), now=NOW)
    finally:
        store.close()
    old = [rid for rid, age, _ in RECORDS if age > 30]
    gone = [rid for rid, age, status in RECORDS if age > 30 and status != "pending"]
    assert res.records == len(gone)
    assert res.scores == len(gone) * len(SCORES) and res.jobs == len(gone) * 2
    left = {r["record_id"] for r in rows(db, "SELECT record_id FROM records")}
    assert left == {rid for rid, _, _ in RECORDS} - set(gone) and set(old) - set(gone) <= left
    for table in ("scores", "jobs"):  # exactly the kept records' rows are left
        kept = rows(db, f"SELECT record_id, rec FROM {table}")
        assert {r["record_id"] for r in kept} == left
        assert all(r["rec"] == seq_of[r["record_id"]] for r in kept)

    # rows written after the migration get their keys: a record's seq after every old one,
    # its jobs' and scores' rec = that seq
    ts = tracescore.init(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")],
                         retention=None)
    ts.log_record(query="q", answer="a")
    assert ts.flush(20)
    ts.shutdown()
    new = rows(db, "SELECT record_id, seq FROM records WHERE seq > ?", max(seq_of.values()))
    assert len(new) == 1
    for table in ("scores", "jobs"):
        got = rows(db, f"SELECT rec FROM {table} WHERE record_id = ?", new[0]["record_id"])
        assert got and {r["rec"] for r in got} == {new[0]["seq"]}, table


def _plans(conn: sqlite3.Connection, statements: list[str]) -> dict[str, list[str]]:
    """EXPLAIN QUERY PLAN of each traced statement that reads or writes scores or jobs."""
    out = {}
    for sql in statements:
        low = sql.lower()
        if not any(t in low for t in (" scores", " jobs")) or not low.lstrip().startswith(
                ("select", "update", "delete", "insert", "with")):
            continue
        # (the trace expands a bound infinity as Inf, which is no SQL literal)
        text = re.sub(r"\bInf\b", "1e999", sql)
        out[sql] = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + text)]
    return out


def test_a_records_scores_and_jobs_are_found_by_record_id_through_indexes(
        tmp_path: Path) -> None:
    """The lookups by record id (the worker's, show's, feedback's, the prune's) SEARCH
    indexes: no statement of them scans scores or jobs."""
    from tracescore.read.records import find_records, record_details, score_details

    db = str(tmp_path / "ts.db")
    ts = tracescore.init(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")],
                         retention=None)
    for i in range(3):
        ts.log_record(query=f"q{i}", answer="a")
    assert ts.flush(20)
    ts.shutdown()
    rid = rows(db, "SELECT record_id FROM records LIMIT 1")[0]["record_id"]
    store = open_store(db)
    seen: list[str] = []
    try:
        store.conn.set_trace_callback(seen.append)
        store.scores_for(rid)
        store.scores_for(rid, undelivered_only=True)
        store.open_jobs_for(rid)
        store.undelivered_record_ids()
        reader = sqlite3.connect(db)
        reader.row_factory = sqlite3.Row
        reader.set_trace_callback(seen.append)
        found, _ = find_records(reader, rid)
        detail: Any = record_details(reader, found[0])
        score_details(reader, rid)
        reader.set_trace_callback(None)
        reader.close()
        res = prune(store, Retention(max_age_s=30 * DAY), now=NOW + 40 * DAY)
        store.conn.set_trace_callback(None)
        plans = _plans(store.conn, seen)
    finally:
        store.close()
    assert detail["record_id"] == rid and detail["scores"]  # (found through rec)
    assert res.records == 3 and res.scores == 3 and res.jobs == 3
    assert len(plans) >= 6, plans  # (the statements above were traced)
    for sql, plan in plans.items():
        scans = [p for p in plan if p.startswith("SCAN") and (" scores" in p or " jobs" in p
                                                              or p.endswith((" s", " j")))]
        assert not scans, (sql, plan)
