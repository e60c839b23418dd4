"""Bounded storage (issue 13): compact rows, retention pruning, rollups that survive it."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, run_cli

from tracescore.read.db import open_db
from tracescore.read.records import find_records, record_details
from tracescore.record import Candidate, Context, RagRecord
from tracescore.reports.report import build_report
from tracescore.reports.show import format_records
from tracescore.store import Store, open_store
from tracescore.store.compat import connect_reader
from tracescore.store.migrations import SQLITE_MIGRATIONS
from tracescore.store.retention import Retention, count_eligible, prune
from tracescore.testing import ScriptedMetric

DAY = 86400.0
CTX = "The Cargo has a 750 Wh battery and a range of 80 km. " * 40  # ~2 KB


def rec(i: int, created: float, *, error: str | None = None) -> RagRecord:
    t = int(created * 1e9)
    return RagRecord(
        trace_id=format(0xA000_0000 + i, "032x"), span_id=format(0xB000 + i, "016x"),
        query=f"question {i}: what battery does the Cargo have?",
        answer=f"A 750 Wh battery ({i}).",
        contexts=tuple(Context(text=f"[{k}] {CTX}", id=f"doc-{k}", score=0.5, source="bm25")
                       for k in range(4)),
        start_time_ns=t - 500_000_000, end_time_ns=t, model="m", error=error,
    )


def value_of(r: RagRecord) -> float:
    return (int(r.span_id, 16) % 10) / 10  # 0.0 … 0.9, deterministic per record


# -- compact rows ------------------------------------------------------------------------------
def test_unsampled_records_are_stored_compact_and_sampled_ones_in_full(make_ts, db_path):
    m = ScriptedMetric(lambda r: 0.9, name="m")
    ts, _ = make_ts(metrics=[m], sample_rate=0.5, retention=None)
    now = time.time()
    recs = [rec(i, now) for i in range(40)]
    decisions = [ts.submit(r, hold_span=False) for r in recs]
    assert ts.flush(20)
    by_id = {r["record_id"]: r for r in rows(db_path, "SELECT * FROM records")}
    n_compact = 0
    for r, d in zip(recs, decisions):
        row = by_id[r.record_id]
        assert d is not None
        if d.sampled:
            assert row["text_kept"] == 1 and row["query"] == r.query
            assert CTX in row["contexts"]
        else:
            n_compact += 1
            assert row["text_kept"] == 0 and row["query"] is None and row["answer"] is None
            assert row["query_chars"] == len(r.query or "") and len(row["query_hash"]) == 16
            ctxs = json.loads(row["contexts"])
            assert [c["chars"] for c in ctxs] == [len(c.text) for c in r.contexts]
            assert [c["id"] for c in ctxs] == ["doc-0", "doc-1", "doc-2", "doc-3"]
            assert "Cargo" not in row["contexts"] and row["n_contexts"] == 4
            assert row["latency_ms"] == pytest.approx(500.0) and row["model"] == "m"
    assert 5 < n_compact < 35
    # a compact row is < 10 % of a full one
    full = [len(by_id[r.record_id]["contexts"]) for r, d in zip(recs, decisions) if d.sampled]
    compact = [len(by_id[r.record_id]["contexts"]) for r, d in zip(recs, decisions)
               if not d.sampled]
    assert max(compact) * 10 < min(full)


def test_keep_full_text_keeps_every_record(make_ts, db_path):
    ts, _ = make_ts(metrics=["token_f1"], sample_rate=0.0, keep_full_text=True, retention=None)
    ts.submit(rec(1, time.time()), hold_span=False)
    assert ts.flush(10)
    [row] = rows(db_path, "SELECT * FROM records")
    assert row["text_kept"] == 1 and CTX in row["contexts"]


def test_negative_feedback_on_a_compact_record_skips_with_a_reason(make_ts, db_path):
    m = ScriptedMetric(lambda r: 0.5, name="m")
    ts, _ = make_ts(metrics=[m], sample_rate=0.0, retention=None)
    r = rec(1, time.time())
    ts.submit(r, hold_span=False)
    assert ts.flush(10)
    ts.add_feedback(r.trace_id, False)
    ts.add_ground_truth(r.trace_id, ["750 Wh"])
    assert ts.flush(10)
    assert m.calls == 0
    [job] = rows(db_path, "SELECT * FROM jobs")
    assert job["status"] == "skipped"
    assert job["reason"].startswith("record stored compact: text not kept (sample_rate 0")
    assert rows(db_path, "SELECT count(*) AS n FROM scores")[0]["n"] == 0
    conn = open_db(db_path)
    try:
        found, _ = find_records(conn, r.trace_id)
        text = " ".join(format_records([record_details(conn, x) for x in found]).split())
    finally:
        conn.close()
    assert "stored compact: text not kept" in text
    assert "scoring was asked for later" in text
    assert f"(not kept: {len(r.query or '')} chars" in text
    assert "record stored compact" in text  # the skipped job's reason


def test_keep_full_text_window_then_compacted_by_the_pruner(make_ts, db_path):
    m = ScriptedMetric(lambda r: 0.5, name="m")
    ts, _ = make_ts(metrics=[m], sample_rate=0.0, keep_full_text="1h", retention=None)
    now = time.time()
    dropped = Candidate("an unrelated page the reranker dropped", source="bm25", kept=False,
                        dropped_by="reranker")
    a, b = (dataclasses.replace(rec(i, now), candidates=(dropped,)) for i in (1, 2))
    ts.submit(a, hold_span=False)
    ts.submit(b, hold_span=False)
    assert ts.flush(10)
    ts.add_feedback(b.trace_id, False)  # within the window: scored from the full text
    assert ts.flush(10)
    assert m.calls == 1
    store = Store(db_path)
    try:
        assert prune(store, None, compact_after_s=3600, now=now + 60).compacted == 0
        res = prune(store, None, compact_after_s=3600, now=now + 7200)
    finally:
        store.close()
    assert res.compacted == 1
    kept = {r["record_id"]: r for r in rows(db_path, "SELECT * FROM records")}
    assert kept[a.record_id]["text_kept"] == 0 and kept[a.record_id]["query"] is None
    assert kept[a.record_id]["candidates"] is None  # the candidates' text goes with the rest
    assert kept[b.record_id]["text_kept"] == 1 and kept[b.record_id]["query"] == b.query
    assert "reranker dropped" in kept[b.record_id]["candidates"]


# -- retention ---------------------------------------------------------------------------------
def sql(db: Path | str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run write statements (``?`` placeholders) on a SQLite file or a PostgreSQL URL."""
    conn = connect_reader(str(db))
    try:
        for stmt, args in statements:
            conn.execute(stmt, args)
        conn.commit()
    finally:
        conn.close()


def fill_40_days(make_ts: Any, db_path: Path | str, now: float) -> list[RagRecord]:
    """One record every 6 hours over 40 days, half sampled and scored; then scores are dated
    at their record's time (as if scored then)."""
    ts, _ = make_ts(metrics=[ScriptedMetric(value_of, name="m")], sample_rate=0.5,
                    retention=None, db=db_path)
    # (+2 h: the record nearest the 30-day cutoff stays 2 h inside it, however slowly a
    # loaded machine reaches the prune; at +1 s a 41st record crossed it)
    recs = [rec(i, now - 40 * DAY + i * 6 * 3600 + 7200) for i in range(160)]
    for r in recs:
        ts.submit(r, hold_span=False)
    assert ts.flush(30)
    ts.shutdown(10)
    sql(db_path, ("UPDATE scores SET created_at = (SELECT r.created_at + 60 FROM records r"
                  " WHERE r.record_id = scores.record_id)", ()))
    return recs


def report_of(db_path: Path | str, since: str = "90d") -> Any:
    from tracescore.read.db import parse_since

    conn = open_db(db_path)
    try:
        return build_report(conn, since=parse_since(since), worst=0)
    finally:
        conn.close()


def test_40_days_with_30_day_retention(db, make_ts):
    db_path = db  # SQLite, then PostgreSQL
    now = time.time()
    recs = fill_40_days(make_ts, db_path, now)
    sampled_ids = {r["record_id"] for r in rows(db_path, "SELECT record_id FROM records"
                                                        " WHERE sampled = 1")}
    old = [r for r in recs if r.end_time_ns and r.end_time_ns / 1e9 < now - 30 * DAY]
    old_sampled = [r for r in old if r.record_id in sampled_ids]
    assert len(old) == 40 and len(old_sampled) >= 5
    # an old record with an open job and one with an undelivered score must stay
    sql(db_path,
        ("INSERT INTO jobs(record_id, metric, metric_version, status, attempts,"
         " created_at, updated_at) VALUES (?, 'other', '1', 'pending', 0, 0, 0)",
         (old[0].record_id,)),
        ("UPDATE scores SET delivery = NULL WHERE record_id = ?", (old_sampled[-1].record_id,)),
        ("INSERT INTO judge_cache VALUES ('k-old', 's', 'm', '1', '1', 1, 1, ?)",
         (now - 35 * DAY,)),
        ("INSERT INTO judge_cache VALUES ('k-new', 's', 'm', '1', '1', 1, 1, ?)",
         (now - DAY,)))
    before = report_of(db_path)
    before_7d = report_of(db_path, "7d")

    store = open_store(db_path)
    try:
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=7, pause_s=0,
                                     max_hold_s=0), now=now)  # (0: batches do not grow)
    finally:
        store.close()
    assert res.records == 38 and res.held == 2 and res.batches >= 6
    assert res.judge_cache == 1
    left = {r["record_id"] for r in rows(db_path, "SELECT record_id FROM records")}
    assert left == {r.record_id for r in recs if r not in old} | {
        old[0].record_id, old_sampled[-1].record_id}
    assert rows(db_path, "SELECT count(*) AS n FROM jobs WHERE status = 'pending'")[0]["n"] == 1
    assert rows(db_path, "SELECT count(*) AS n FROM scores WHERE delivery IS NULL")[0]["n"] == 1
    assert [r["key"] for r in rows(db_path, "SELECT key FROM judge_cache")] == ["k-new"]

    after = report_of(db_path)
    assert (after.records, after.sampled, after.scores) == (before.records, before.sampled,
                                                            before.scores)
    [mb], [ma] = before.metrics, after.metrics
    assert (ma.count, ma.labelled, ma.errors, ma.skipped) == (mb.count, mb.labelled, mb.errors,
                                                              mb.skipped)
    assert ma.mean == pytest.approx(mb.mean)
    assert ma.fail_rate == pytest.approx(mb.fail_rate)
    for q in ("p10", "p50", "p90"):  # bins of 0.01 over pruned hours
        assert getattr(ma, q) == pytest.approx(getattr(mb, q), abs=0.01)
    # a window with no pruned hour is unchanged, exactly
    assert report_of(db_path, "7d").metrics == before_7d.metrics
    # pruning again changes nothing (nothing counted twice)
    store = open_store(db_path)
    try:
        assert prune(store, Retention(max_age_s=30 * DAY), now=now).records == 0
    finally:
        store.close()
    again = report_of(db_path)
    assert (again.records, again.scores, again.metrics) == (after.records, after.scores,
                                                            after.metrics)


def test_prune_by_size_deletes_the_oldest_first(make_ts, db_path):
    now = time.time()
    ts, _ = make_ts(metrics=[], sample_rate=0.0, keep_full_text=True, retention=None)
    for i in range(300):
        ts.submit(rec(i, now - 300 + i), hold_span=False)
    assert ts.flush(20)
    store = Store(db_path)
    try:
        used = store.used_bytes()[0]
        res = prune(store, Retention(max_age_s=None, max_bytes=used // 2, batch_size=20,
                                     pause_s=0), now=now)
        assert store.used_bytes()[0] <= used // 2
        assert store.auto_vacuum_mode() == "incremental"
        assert res.file_bytes_after < res.file_bytes_before  # space given back
    finally:
        store.close()
    left = [r["created_at"] for r in rows(db_path, "SELECT created_at FROM records")]
    assert res.by_size == 300 - len(left) and 0 < len(left) < 200
    assert min(left) > now - 300 + res.by_size - 1  # the oldest went


@pytest.mark.parametrize("bulk", [False, True], ids=["batches", "bulk"])
def test_prune_while_the_app_writes_and_the_worker_scores(make_ts, db_path, monkeypatch, bulk):
    """Records arrive (old and new, half sampled), the worker scores them and a pruner runs
    over and over with tiny batches: nothing that should stay is lost, and every record and
    score is counted exactly once in the hourly rollups (kept on write; pruning only deletes
    raw rows). ``bulk``: every run drops the scores' value index and builds it again."""
    if bulk:
        bulk_always(monkeypatch)
    now = time.time()
    m = ScriptedMetric(value_of, name="m")
    ts, _ = make_ts(metrics=[m], sample_rate=0.5, retention=None)
    policy = Retention(max_age_s=30 * DAY, batch_size=3, pause_s=0.001)
    stop = threading.Event()
    runs = []

    def pruner() -> None:
        store = Store(db_path)
        try:
            while not stop.is_set():
                runs.append(prune(store, policy, now=now, vacuum=len(runs) % 5 == 0))
        finally:
            store.close()

    t = threading.Thread(target=pruner)
    t.start()
    recs = []
    try:
        for i in range(400):
            created = now - 40 * DAY + i * 60 if i % 2 else now - 100 + i * 0.1
            r = rec(i, created)
            recs.append(r)
            ts.submit(r, hold_span=False)
            if i % 50 == 0:
                time.sleep(0.02)
        assert ts.flush(60)
    finally:
        stop.set()
        t.join(60)
    store = Store(db_path)
    try:
        prune(store, policy, now=now)
    finally:
        store.close()
    sampled = sum(1 for r in recs if ts.sampler.decide(r, ("m",)).sampled)
    assert m.calls == sampled  # every sampled record scored exactly once
    left = {r["record_id"] for r in rows(db_path, "SELECT record_id FROM records")}
    fresh = {r.record_id for r in recs if (r.end_time_ns or 0) / 1e9 > now - DAY}
    assert fresh <= left  # nothing new went
    assert not any(r.record_id in left for r in recs if r.record_id not in fresh)
    rolled = rows(db_path, "SELECT coalesce(sum(records), 0) AS n FROM hourly_records")[0]["n"]
    assert rolled == len(recs) and len(left) < len(recs)
    n_scores = rows(db_path, "SELECT count(*) AS n FROM scores")[0]["n"]
    rolled_scores = rows(db_path, "SELECT coalesce(sum(n_ok + n_error + n_skipped), 0) AS n"
                                  " FROM hourly_scores")[0]["n"]
    assert rolled_scores == sampled and n_scores < sampled
    assert sum(r.records for r in runs) > 0  # the pruner did work while the app ran


def test_a_version_1_database_is_upgraded_in_place(db_path):
    store = Store(db_path)
    store.close()
    conn = sqlite3.connect(db_path)  # turn it back into a version-1 database with a row
    conn.execute("DROP INDEX idx_records_seg_created")
    for col in ("text_kept", "query_chars", "query_hash", "answer_chars", "answer_hash",
                "release", "environment", "seg_id"):
        conn.execute(f"ALTER TABLE records DROP COLUMN {col}")
    for col in ("seg_id", "judge_model"):
        conn.execute(f"ALTER TABLE scores DROP COLUMN {col}")
    for table in ("segments", "segment_values", "hourly_records", "hourly_scores",
                  "hourly_bins", "hourly_skips", "monitor_state", "monitor_history",
                  "monitor_lease", "monitor_outbox"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.execute("INSERT INTO records(record_id, trace_id, span_id, created_at, query, answer,"
                 " contexts, sampled, content_captured) VALUES ('t-s', 't', 's', 1.0, 'q', 'a',"
                 " '[]', 0, 1)")
    conn.commit()
    conn.execute("PRAGMA auto_vacuum=NONE")  # as databases were created before version 2
    conn.execute("VACUUM")
    conn.close()
    store = Store(db_path)
    try:
        latest = str(SQLITE_MIGRATIONS[-1].version)  # (schema 4 added labels: not 3)
        assert store.conn.execute("SELECT value FROM meta").fetchone()[0] == latest
        [r] = store.load_records(["t-s"]).values()
        assert r.query == "q" and not r.compact  # old rows keep their text
        # ... and are counted in the hourly rollups (under the segment "nothing known")
        assert store.conn.execute("SELECT hour, seg_id, records, sampled FROM hourly_records"
                                  ).fetchall() == [(0, 0, 1, 0)]
        assert store.auto_vacuum_mode() == "none"  # until `tracescore prune --vacuum`
    finally:
        store.close()
    result = run_cli("prune", "--db", db_path, "--vacuum", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["auto_vacuum"] == "incremental"


def test_cli_prune_and_report_after_it(db, make_ts):
    db_path = db  # SQLite, then PostgreSQL
    fill_40_days(make_ts, db_path, time.time())
    dry = run_cli("prune", "--db", db_path, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["would_delete_records"] == 40
    out = run_cli("prune", "--db", db_path, "--older-than", "30d")
    assert out.exit_code == 0, out.output
    assert "deleted 40 records" in out.output
    rep = run_cli("report", "--db", db_path, "--since", "90d", "--json")
    assert json.loads(rep.output)["records"] == 160
    bad = run_cli("prune", "--db", db_path, "--older-than", "2h")
    assert bad.exit_code == 2 and "shorter than one day" in bad.output
    vac = run_cli("prune", "--db", db_path, "--vacuum", "--json")
    assert vac.exit_code == 0, vac.output
    assert json.loads(vac.output.splitlines()[-1])["records"] <= 1  # (the clock moved on)
    if str(db_path).startswith("postgresql://"):
        assert "not needed on PostgreSQL" in vac.output
        size = run_cli("prune", "--db", db_path, "--max-size", "1GB")
        assert size.exit_code == 2 and "not applied on PostgreSQL" in size.output


def test_concurrent_pruners_on_postgres_count_every_record_once(pg_url, make_ts):
    """A fleet: several workers prune the same database at once. Each batch locks its
    records (SKIP LOCKED), so batches are disjoint: every record is deleted once, the hourly
    rollups (kept on write) are untouched, and the 90-day report is unchanged."""
    now = time.time()
    recs = fill_40_days(make_ts, pg_url, now)
    before = report_of(pg_url)
    policy = Retention(max_age_s=30 * DAY, batch_size=2, pause_s=0)
    results: list[Any] = []
    errors: list[BaseException] = []

    def pruner() -> None:
        store = open_store(pg_url)
        try:
            results.append(prune(store, policy, now=now))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=pruner) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sum(r.records for r in results) == 40
    left = rows(pg_url, "SELECT count(*) AS n FROM records")[0]["n"]
    rolled = rows(pg_url, "SELECT coalesce(sum(records), 0) AS n FROM hourly_records")[0]["n"]
    assert (left, rolled) == (len(recs) - 40, len(recs))
    after = report_of(pg_url)
    assert (after.records, after.sampled, after.scores) == (before.records, before.sampled,
                                                            before.scores)
    [mb], [ma] = before.metrics, after.metrics
    assert (ma.count, ma.labelled, ma.errors) == (mb.count, mb.labelled, mb.errors)
    assert ma.mean == pytest.approx(mb.mean)


def test_retention_runs_where_scoring_runs_on_postgres(pg_url, make_ts):
    app, _ = make_ts(db=pg_url, metrics=["token_f1"], score=False)
    assert app.retention is None  # a capture-only replica leaves pruning to the workers
    worker, _ = make_ts(db=pg_url, metrics=["token_f1"])
    assert worker.retention is not None


def test_init_validates_retention_and_keep_full_text(db_path):
    import tracescore

    for bad, err in (({"retention": "3x"}, ValueError), ({"retention": 5}, TypeError),
                     ({"retention": "2h"}, ValueError), ({"keep_full_text": "soon"}, ValueError),
                     ({"keep_full_text": [1]}, TypeError)):
        with pytest.raises(err):
            tracescore.init(db=db_path, **bad)
    assert Retention.resolve("2w") == Retention(max_age_s=14 * DAY)
    assert Retention.resolve({"max_bytes": "1GB", "max_age_s": None}).max_bytes == 10**9


# -- retention at scale (issue 19) -------------------------------------------------------------
def old_and_held(make_ts: Any, db_path: Path | str, now: float) -> list[RagRecord]:
    """fill_40_days, then three of the 40 old records held: an open job, an undelivered
    score, a human label on the trace (the calibration set)."""
    recs = fill_40_days(make_ts, db_path, now)
    sampled = {r["record_id"] for r in rows(db_path, "SELECT record_id FROM records"
                                                     " WHERE sampled = 1")}
    old = [r for r in recs if (r.end_time_ns or 0) / 1e9 < now - 30 * DAY]
    old_sampled = [r for r in old if r.record_id in sampled]
    labelled = next(r for r in old if r not in (old[0], old_sampled[-1]))
    sql(db_path,
        ("INSERT INTO jobs(record_id, metric, metric_version, status, attempts,"
         " created_at, updated_at) VALUES (?, 'other', '1', 'pending', 0, 0, 0)",
         (old[0].record_id,)),
        ("UPDATE scores SET delivery = NULL WHERE record_id = ?", (old_sampled[-1].record_id,)),
        ("INSERT INTO labels(trace_id, name, value, annotator, source, created_at)"
         " VALUES (?, 'm', 1, 'ann', 'manual', ?)", (labelled.trace_id, now - 35 * DAY)))
    return [old[0], old_sampled[-1], labelled]


def test_dry_run_counts_what_prune_deletes_without_reading_the_records(db, make_ts):
    """The dry run's count is the real prune's count, and it is two aggregate queries: no
    eligible id is fetched (a list of 610,000 ids was 140 MB and 4.7 s)."""
    now = time.time()
    held = old_and_held(make_ts, db, now)
    store = open_store(db)
    statements: list[str] = []
    sqlite = not str(db).startswith("postgresql://")
    try:
        if sqlite:
            store.conn.set_trace_callback(statements.append)
        eligible, older = count_eligible(store, now - 30 * DAY)
        if sqlite:
            store.conn.set_trace_callback(None)
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=4, pause_s=0), now=now)
    finally:
        store.close()
    assert (eligible, older) == (37, 40)
    assert res.records == eligible and res.held == older - eligible == len(held)
    left = {r["record_id"] for r in rows(db, "SELECT record_id FROM records")}
    assert {r.record_id for r in held} <= left  # the labelled trace's record stays
    assert rows(db, "SELECT count(*) AS n FROM labels")[0]["n"] == 1  # labels are never pruned
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert reads or not sqlite
    assert all(s.lstrip().startswith("SELECT count(*)") for s in reads), reads
    dry = run_cli("prune", "--db", db, "--dry-run", "--json")  # the CLI: the held ones
    assert dry.exit_code == 0, dry.output
    out = json.loads(dry.output)
    assert out["held"] == 3 and out["would_delete_records"] <= 1  # (the clock moved on)


def _old_and_new(make_ts: Any) -> float:
    """300 records 40 days old and 20 of the last minute, written and the pipeline shut down
    (so the test's own store is the only writer); returns the clock they were written at."""
    now = time.time()
    ts, _ = make_ts(metrics=[], sample_rate=0.0, keep_full_text=True, retention=None)
    for i in range(300):
        ts.submit(rec(i, now - 40 * DAY + i), hold_span=False)
    for i in range(20):
        ts.submit(rec(1000 + i, now - 60 + i), hold_span=False)
    assert ts.flush(20)
    ts.shutdown(10)
    return now


def test_prune_gives_space_back_many_pages_per_vacuum_step(make_ts, db_path):
    """The freed pages go back to the file system in steps of ``vacuum_pages``: Python's
    ``execute`` of ``PRAGMA incremental_vacuum(N)`` freed ONE page per call (then slept)."""
    now = _old_and_new(make_ts)
    store = Store(db_path)
    steps: list[str] = []
    try:
        pages_before = int(store.conn.execute("PRAGMA page_count").fetchone()[0])
        store.conn.set_trace_callback(
            lambda s: steps.append(s) if "incremental_vacuum" in s else None)
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=50, pause_s=0,
                                     vacuum_pages=64), now=now)
        store.conn.set_trace_callback(None)
        pages_after = int(store.conn.execute("PRAGMA page_count").fetchone()[0])
        assert int(store.conn.execute("PRAGMA freelist_count").fetchone()[0]) == 0
    finally:
        store.close()
    assert res.records == 300
    freed = pages_before - pages_after
    assert freed > 300 and res.file_bytes_after < res.file_bytes_before  # the file shrank
    assert 1 <= len(steps) <= freed // 64 + 2, (len(steps), freed)  # ~64 pages per step


def test_vacuum_budget_leaves_free_pages_for_the_next_runs(make_ts, db_path):
    """A run gives space back for at most ``vacuum_budget_s`` (issue 19: a 1M-record backlog
    left ~322,000 free pages, ~70 s of vacuum); it says how many free pages are left, and the
    next runs — even one that deletes nothing — give back more, until none are left."""
    now = _old_and_new(make_ts)
    with pytest.raises(ValueError):
        Retention(vacuum_budget_s=-1)
    # budget 0: one step per run (the first step always runs), 16 pages a step
    policy = Retention(max_age_s=30 * DAY, batch_size=50, pause_s=0, vacuum_pages=16,
                       vacuum_budget_s=0)
    store = Store(db_path)
    try:
        def free() -> int:
            return int(store.conn.execute("PRAGMA freelist_count").fetchone()[0])

        first = prune(store, policy, now=now)
        assert first.records == 300 and first.vacuum_steps == 1
        assert first.pages_given_back == 16
        assert first.free_pages_left == free() > 16
        second = prune(store, policy, now=now)  # nothing to delete: it still gives back
        assert second.records == 0 and second.vacuum_steps == 1
        assert second.free_pages_left == first.free_pages_left - 16 == free()
        assert second.file_bytes_after < second.file_bytes_before
        rest = prune(store, dataclasses.replace(policy, vacuum_budget_s=None), now=now)
        assert rest.pages_given_back == second.free_pages_left and free() == 0
        assert rest.free_pages_left == 0
        idle = prune(store, policy, now=now)  # nothing deleted, nothing free: no step
        assert idle.vacuum_steps == 0 and idle.pages_given_back == 0
        assert int(store.conn.execute("SELECT count(*) FROM records").fetchone()[0]) == 20
    finally:
        store.close()


def test_flush_waits_for_a_backlog_without_polling_the_database(db, make_ts, monkeypatch):
    """flush() while the scorer works through a backlog reads the scorer's in-memory idle
    flag, and asks the database only when the scorer looks idle: a handful of queries however
    long the backlog takes (it ran one every ≤ 100 ms). It still returns True only once
    everything is scored."""
    from tracescore.store.postgres import PostgresStore
    from tracescore.store.sqlite import Store as SqliteStore

    gate = threading.Event()
    m = ScriptedMetric(lambda r: 0.5, name="m", gate=gate)
    ts, _ = make_ts(db=db, metrics=[m], sample_rate=1.0, retention=None)
    flusher: list[int] = []
    asked: list[int] = []
    for cls in (SqliteStore, PostgresStore):
        real = cls.has_open_jobs

        def counting(self: Any, metrics: Any, _real: Any = real) -> bool:
            if threading.get_ident() in flusher:
                asked.append(1)
            return bool(_real(self, metrics))

        monkeypatch.setattr(cls, "has_open_jobs", counting)
    now = time.time()
    recs = [rec(i, now) for i in range(60)]
    for r in recs:
        ts.submit(r, hold_span=False)
    result: list[bool] = []

    def flush() -> None:
        flusher.append(threading.get_ident())
        result.append(ts.flush(120))

    t = threading.Thread(target=flush)
    t.start()
    deadline = time.monotonic() + 60
    while m.calls == 0 and time.monotonic() < deadline:  # the scorer holds a backlog
        time.sleep(0.01)
    assert m.calls > 0
    time.sleep(1.5)  # the flush waits for 1.5 s of backlog (the old loop asked ≥ 15 times)
    during = len(asked)
    gate.set()
    t.join(120)
    assert result == [True]
    assert m.calls == len(recs)
    assert rows(db, "SELECT count(*) AS n FROM jobs WHERE status <> 'done'")[0]["n"] == 0
    assert rows(db, "SELECT count(*) AS n FROM scores")[0]["n"] == len(recs)
    assert during <= 2 and len(asked) <= 4, (during, len(asked))


# -- a large backlog (issue 19) ----------------------------------------------------------------
def bulk_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run is a bulk run (the real threshold is 20,000 old records)."""
    import tracescore.store.retention as retention

    monkeypatch.setattr(retention, "BULK_MIN_RECORDS", 1)
    monkeypatch.setattr(retention, "BULK_SHARE", 0.0)


def index_names(db_path: Path | str) -> set[str]:
    return {r["name"] for r in rows(db_path, "SELECT name FROM sqlite_master"
                                             " WHERE type = 'index'")}


def test_a_large_backlog_is_deleted_without_the_value_index_then_it_is_rebuilt(
        db_path, make_ts, monkeypatch):
    """A bulk run drops the scores' (name, value) index, deletes exactly what the dry run
    counted (the held records stay), and builds the index again; batches grow while they
    hold the lock for less than ``max_hold_s``."""
    bulk_always(monkeypatch)
    now = time.time()
    held = old_and_held(make_ts, db_path, now)
    store = Store(db_path)
    try:
        eligible, older = count_eligible(store, now - 30 * DAY)
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=2, pause_s=0), now=now)
    finally:
        store.close()
    assert res.bulk_indexes == ["idx_scores_name_value"] and res.rebuild_s > 0
    assert res.records == eligible == 37 and res.held == older - eligible == len(held)
    assert res.batches < 37 / 2  # (batches grew: a two-record batch takes far below 0.25 s)
    assert 0 < res.longest_hold_s < 10
    assert "idx_scores_name_value" in index_names(db_path)
    left = {r["record_id"] for r in rows(db_path, "SELECT record_id FROM records")}
    assert {r.record_id for r in held} <= left


KILLED_PRUNE = r"""
import os, signal, sys
import tracescore.store.retention as retention
from tracescore.store import Store
retention.BULK_MIN_RECORDS, retention.BULK_SHARE = 1, 0.0
real, calls = retention.prune_batch, []

def dying(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:  # two batches committed, the value index dropped
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)

retention.prune_batch = dying
retention.prune(Store(sys.argv[1]), retention.Retention(max_age_s=30 * 86400, batch_size=2,
                pause_s=0, max_hold_s=0), now=float(sys.argv[2]))
"""


def test_a_prune_killed_in_bulk_mode_leaves_a_whole_database(db_path, make_ts):
    """SIGKILL between two batches of a bulk run: the index is missing, the batches done are
    whole (no score or job of a deleted record is left); opening the store builds the index
    again, and the next run deletes the rest, with the same count as a dry run."""
    import subprocess
    import sys

    now = time.time()
    held = old_and_held(make_ts, db_path, now)
    before = rows(db_path, "SELECT count(*) AS n FROM records")[0]["n"]
    p = subprocess.run([sys.executable, "-c", KILLED_PRUNE, str(db_path), repr(now)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    assert "idx_scores_name_value" not in index_names(db_path)
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for table in ("scores", "jobs"):
            orphans = conn.execute(f"SELECT count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1"
                                   " FROM records r WHERE r.record_id = t.record_id)").fetchone()
            assert orphans[0] == 0, table
        left = int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    finally:
        conn.close()
    assert left == before - 4  # (two batches of two records, max_hold_s=0: no growth)
    store = Store(db_path)  # opening builds the index again
    try:
        assert "idx_scores_name_value" in index_names(db_path)
        eligible, older = count_eligible(store, now - 30 * DAY)
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=4, pause_s=0), now=now)
    finally:
        store.close()
    assert res.records == eligible == 37 - 4 and res.held == len(held) == older - eligible
