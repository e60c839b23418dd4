"""The status indexes of ``jobs`` hold the open jobs only (schema version 7 on SQLite, 6 on
PostgreSQL; issue 19): skipped and done jobs cost no entry there, every reader of open jobs
still goes through an index, and older databases get them with their jobs kept."""

from __future__ import annotations

import re
import sqlite3
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, is_pg, rows, run_cli, trace_statements

import tracescore
from tracescore.store import migrations, open_store
from tracescore.telemetry import open_jobs
from tracescore.testing import ScriptedMetric

OPEN_INDEXES = {name for name, _ in migrations.OPEN_JOB_INDEXES}
OLD_INDEXES = {"idx_jobs_status_lease_until", "idx_jobs_status_job_id"}
UNDELIVERED = migrations.UNDELIVERED_INDEX[0]
#: a statement that reads jobs by an open status
_OPEN_READ = re.compile(r"status\s*(=|IN)\s*\(?\s*'(pending|leased)'", re.IGNORECASE)


def _metrics() -> list[Any]:
    """A local metric scored on the worker, and one that needs a reference answer (skipped
    without one)."""
    return [ScriptedMetric(lambda r: 0.5, name="m"), "exact_match"]


def _pipeline(db: str, n: int, *, score: bool = True, **kw: Any) -> None:
    ts = tracescore.init(db=db, metrics=_metrics(), score=score, **kw)
    for i in range(n):
        ts.log_record(query=f"q{i}", answer=f"a{i}", contexts=[f"c{i}"])
    assert ts.flush(30)
    ts.shutdown()


def _index_names(db: str) -> set[str]:
    sql = ("SELECT indexname AS name FROM pg_indexes WHERE tablename = 'jobs'" if is_pg(db)
           else "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='jobs'")
    return {r["name"] for r in rows(db, sql)}


def _as_older(db: str) -> None:
    """Put the status indexes back as the version before left them."""
    steps = migrations.POSTGRES_MIGRATIONS if is_pg(db) else migrations.SQLITE_MIGRATIONS
    # the version before the step that made them (later steps may follow it)
    before = next(m.version for m in steps if m.apply is migrations._v7_open_row_indexes) - 1
    execute(db, *(f"DROP INDEX {name}" for name in OPEN_INDEXES),
            "CREATE INDEX idx_jobs_status_lease_until ON jobs(status, lease_until)",
            "CREATE INDEX idx_jobs_status_job_id ON jobs(status, job_id)",
            f"UPDATE meta SET value = '{before}' WHERE key = 'schema_version'")


def test_an_older_database_gets_the_open_job_indexes_with_its_jobs_kept(db: str) -> None:
    """Capture-only records leave pending jobs; the database is put back as the previous
    version left it; opening it migrates: the old indexes are gone, the new ones there, the
    open jobs counted through them; then a scoring app drains them, each exactly once."""
    _pipeline(db, 12, score=False)
    _as_older(db)
    assert OLD_INDEXES <= _index_names(db)
    store = open_store(db)
    try:
        names = _index_names(db)
        assert OPEN_INDEXES <= names and not (OLD_INDEXES & names)
        assert store.open_job_count() == 12  # "m" pending; exact_match skipped (no reference)
        assert store.open_job_count(["exact_match"]) == 0
    finally:
        store.close()
    ts = tracescore.init(db=db, metrics=_metrics())
    assert ts.flush(30)
    ts.shutdown()
    store = open_store(db)
    try:
        assert store.open_job_count() == 0
    finally:
        store.close()
    statuses = Counter(r["status"] for r in rows(db, "SELECT status FROM jobs"))
    assert statuses == {"done": 12, "skipped": 12}
    assert rows(db, "SELECT count(*) AS n, count(DISTINCT record_id) AS records FROM scores"
                    " WHERE name = 'm'") == [{"n": 12, "records": 12}]


def test_every_reader_of_open_jobs_goes_through_an_index(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Every statement tracescore runs that reads jobs by an open status — the writer, the
    worker (lease, lost leases, flush), the report, retention's dry run and prune, the
    backlog gauge — is captured from every SQLite connection and explained: none scans the
    jobs table. (SQLite uses a partial index only when the query has its very term.)"""
    db = str(tmp_path / "ts.db")
    seen, stop_tracing = trace_statements(monkeypatch)
    _pipeline(db, 6, score=False)  # pending jobs
    _pipeline(db, 6)  # leased, done
    store = open_store(db)
    try:
        store.lease_jobs("w", 2, 60.0, ["m"])
        store.lease_lost_job("w", 60.0, ["m"])
        store.has_lost_jobs(["m"])
        store.has_open_jobs(["m"])
        store.open_job_count(["m"])
        store.undelivered_record_ids()
    finally:
        store.close()
    open_jobs(db, ["m", "exact_match"])
    assert run_cli("report", "--db", db).exit_code == 0
    assert run_cli("prune", "--db", db, "--older-than", "1d", "--dry-run").exit_code == 0
    stop_tracing()

    reads = {s for s in seen if re.search(r"\bjobs\b", s) and _OPEN_READ.search(s)}
    assert len(reads) >= 8, reads  # (the capture works: lease, lost, counts, report, prune)
    undelivered = {s for s in seen if re.search(r"\bscores\b", s)
                   and re.search(r"delivery IS NULL", s, re.IGNORECASE)
                   and not s.lstrip().upper().startswith("UPDATE")}
    assert len(undelivered) >= 3, undelivered  # (undelivered ids, report, prune)
    conn = sqlite3.connect(db)  # (untraced again)
    try:
        for stmt in sorted(undelivered):
            plan = [r[3] for r in conn.execute(
                "EXPLAIN QUERY PLAN " + re.sub(r"\bInf\b", "1e999", stmt))]
            scans = [p for p in plan if re.match(r"SCAN (scores|s)\b", p)
                     and UNDELIVERED not in p]
            assert not scans, (stmt, plan)
        for stmt in sorted(reads):
            # (the expanded text prints an infinite bound as Inf: 1e999 reads back as it)
            plan = [r[3] for r in conn.execute(
                "EXPLAIN QUERY PLAN " + re.sub(r"\bInf\b", "1e999", stmt))]
            scans = [p for p in plan if re.match(r"SCAN (jobs|j)\b", p)
                     and not any(n in p for n in OPEN_INDEXES)]
            assert not scans, (stmt, plan)
    finally:
        conn.close()


def _wal_pages(db: str) -> Counter[str]:
    """The b-trees the pages in ``db``'s WAL belong to (one count per frame)."""
    data = Path(db + "-wal").read_bytes()
    size = struct.unpack(">I", data[8:12])[0]
    pages = [struct.unpack(">I", data[off:off + 4])[0]
             for off in range(32, len(data) - 24 - size + 1, 24 + size)]
    conn = sqlite3.connect(db)
    try:
        owner = dict(conn.execute("SELECT pageno, name FROM dbstat"))
    finally:
        conn.close()
    return Counter(owner.get(p, "?") for p in pages)


def test_skipped_jobs_write_no_page_of_the_status_indexes(tmp_path: Path) -> None:
    """Records whose jobs all end skipped (no reference answer) write no page of the open
    jobs' indexes to the WAL; records whose jobs wait (capture only) do — so the check can
    tell."""
    db = str(tmp_path / "ts.db")
    needs_reference = ["exact_match", "rouge"]
    tracescore.init(db=db, metrics=needs_reference).shutdown()  # the file and its tables
    conn = sqlite3.connect(db)
    try:
        for capture_only in (False, True):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            assert busy == 0
            metrics: list[Any] = ([ScriptedMetric(lambda r: 0.5, name="m")] if capture_only
                                  else needs_reference)
            ts = tracescore.init(db=db, metrics=metrics, score=not capture_only)
            for i in range(20):
                ts.log_record(query=f"q{i}", answer=f"a{i}", contexts=[f"c{i}"])
            assert ts.flush(30)
            ts.shutdown()
            written = _wal_pages(db)
            assert written["jobs"] > 0 and written["records"] > 0  # (the WAL was read right)
            assert bool(OPEN_INDEXES & set(written)) is capture_only, written
    finally:
        conn.close()


def _index_entries(db: str, name: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT coalesce(sum(ncell), 0) FROM dbstat WHERE name = ?"
                                " AND pagetype = 'leaf'", (name,)).fetchone()[0])
    finally:
        conn.close()


def test_jobs_and_scores_leave_the_partial_indexes_when_they_are_done(tmp_path: Path) -> None:
    """Open jobs are in both status indexes; once scored, none is left there, nor are their
    delivered scores in the undelivered index (the rows stay)."""
    db = str(tmp_path / "ts.db")
    _pipeline(db, 10, score=False)
    assert {_index_entries(db, n) for n in OPEN_INDEXES} == {10}
    _pipeline(db, 0)  # a scoring app drains them
    assert {_index_entries(db, n) for n in OPEN_INDEXES} == {0}
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone() == (10,)
        assert conn.execute("SELECT count(*), count(delivery) FROM scores").fetchone() == (10, 10)
    finally:
        conn.close()
    assert _index_entries(db, UNDELIVERED) == 0


def test_the_lease_order_and_lost_leases_hold_with_the_new_indexes(tmp_path: Path) -> None:
    """Leasing takes the oldest pending jobs first, skips deferred ones until their time,
    and a lease that ran out is taken alone — the behaviours the old indexes served."""
    db = str(tmp_path / "ts.db")
    _pipeline(db, 5, score=False)
    store = open_store(db)
    try:
        first = store.lease_jobs("w1", 2, 60.0, ["m"])
        assert [j.job_id for j in first] == sorted(j.job_id for j in first)
        rest = store.lease_jobs("w1", 10, 60.0, ["m"])
        assert len(first) + len(rest) == 5
        assert max(j.job_id for j in first) < min(j.job_id for j in rest)
        store.defer_job(rest[0], "w1", 3600.0, "retry later")
        store.release_job(rest[1], "w1")
        again = store.lease_jobs("w2", 10, 60.0, ["m"])
        assert [j.job_id for j in again] == [rest[1].job_id]  # the deferred one waits
        store.renew_leases("w2", [again[0].job_id], -1.0)  # its lease has run out
        assert store.has_lost_jobs(["m"])
        lost = store.lease_lost_job("w3", 60.0, ["m"])
        assert lost is not None and lost.job_id == again[0].job_id
        assert store.open_job_count(["m"]) == 5
        assert store.open_jobs_for(first[0].record_id) == 1
    finally:
        store.close()
