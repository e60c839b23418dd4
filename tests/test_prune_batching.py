"""Prune batches made of chunks in one transaction (issue 33: write amplification): longer
holds while nobody else writes, cut short for a waiting writer of this process; the app's
connections leave checkpoints to a running prune. Real SQLite files and a real PostgreSQL
server; the module's time constants are set where a test would otherwise depend on timing."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from helpers import rows, wait_for
from test_retention import DAY, old_and_held

from tracescore.store import Store, open_store, prune_batches, retention, vacuum
from tracescore.store.retention import PruneResult, Retention, count_eligible, prune
from tracescore.store.vacuum import WAITING, Pauses, quiet_at_open


def _whole(db: str) -> None:
    """No score, job or judge decision of a deleted record is left."""
    for table in ("scores", "jobs", "judge_decisions"):
        orphans = rows(db, f"SELECT count(*) AS n FROM {table} t WHERE NOT EXISTS (SELECT 1"
                           " FROM records r WHERE r.record_id = t.record_id)")
        assert orphans[0]["n"] == 0, table


def test_batches_of_many_chunks_delete_exactly_the_eligible_records(db, make_ts,
                                                                    monkeypatch):
    """Chunks of three records, batches allowed to run for a minute: a batch is many chunks
    in one transaction, and together they delete exactly what the dry run counted — the
    held records (open job, undelivered score, labelled trace) and every newer record stay,
    with their scores and jobs."""
    now = time.time()
    held = old_and_held(make_ts, db, now)
    ids_before = {r["record_id"] for r in rows(db, "SELECT record_id FROM records")}
    old_ids = {r["record_id"] for r in rows(
        db, "SELECT record_id FROM records WHERE created_at < ?", now - 30 * DAY)}
    chunks: list[int] = []
    real = prune_batches._delete_chunk

    def counted(*args, **kwargs):
        got = real(*args, **kwargs)
        chunks.append(got[0])
        return got

    monkeypatch.setattr(prune_batches, "_delete_chunk", counted)
    store = open_store(db)
    try:
        eligible, older = count_eligible(store, now - 30 * DAY)
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=3, pause_s=0,
                                     max_hold_s=60.0), now=now)
    finally:
        store.close()
    assert res.records == eligible == 37 and res.held == older - eligible == len(held)
    assert sum(chunks) == 37 and max(chunks) == 3  # (chunks never grow past MAX_GROWTH × 3)
    assert res.batches < len([c for c in chunks if c])  # several chunks per transaction
    left = {r["record_id"] for r in rows(db, "SELECT record_id FROM records")}
    assert left == (ids_before - old_ids) | {r.record_id for r in held}
    _whole(db)


def test_a_batch_ends_after_the_chunk_a_writer_of_this_process_starts_waiting_in(
        db_path, make_ts):
    """A long batch (hold 60 s) ends after the chunk during which the app's writer started
    waiting for the lock, once the batch has held it ``waited_hold_s`` (0 here); the writer
    then gets the lock, and the next batch goes on from where this one stopped."""
    now = time.time()
    old_and_held(make_ts, db_path, now)
    pruner = Store(db_path)
    opened, go, wrote = threading.Event(), threading.Event(), threading.Event()

    def app_writes() -> None:  # (the app's writer: its own store, opened before the run)
        app = Store(db_path)
        opened.set()
        go.wait(30)
        try:
            with app.transaction() as conn:
                conn.execute("INSERT INTO meta(key, value) VALUES ('app', 'x')")
            wrote.set()
        finally:
            app.close()

    writer = threading.Thread(target=app_writes)
    writer.start()
    assert opened.wait(30)
    real = prune_batches._delete_chunk

    def chunk_then_writer(*args, **kwargs):
        got = real(*args, **kwargs)
        if not go.is_set():  # (during the first chunk, the app's writer starts waiting)
            go.set()
            wait_for(lambda: WAITING.count(pruner.path) == 1, what="the app waits")
        return got

    res = PruneResult()
    try:
        prune_batches._delete_chunk = chunk_then_writer
        try:
            first = retention.prune_batch(pruner, now - 30 * DAY, 4, res, hold_s=60.0,
                                          waited_hold_s=0.0)
        finally:
            prune_batches._delete_chunk = real
        assert (first.n, first.more, res.batches) == (4, True, 1)  # one chunk, then commit
        assert wrote.wait(30)
        writer.join(30)
        rest = retention.prune_batch(pruner, now - 30 * DAY, 4, res, first.since,
                                     hold_s=60.0, waited_hold_s=0.0)
        assert rest.n == 37 - 4 and not rest.more and res.batches == 2
        assert res.records == 37
    finally:
        go.set()
        writer.join(30)
        pruner.close()
    assert rows(db_path, "SELECT value FROM meta WHERE key = 'app'")[0]["value"] == "x"
    _whole(db_path)


def _conn(path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def test_an_idle_run_may_hold_the_lock_longer_but_not_past_the_next_probe(
        tmp_path, monkeypatch):
    monkeypatch.setattr(vacuum, "IDLE_S", 0.05)
    monkeypatch.setattr(vacuum, "PROBE_EVERY_S", 3600.0)
    path = tmp_path / "p.db"
    mine, other = _conn(path), _conn(path)
    mine.execute("CREATE TABLE t(x)")
    pauses = Pauses(mine, str(path), pause_s=0.05)
    assert pauses.hold_s(0.2) == 0.2  # (a run starts as if others write)
    time.sleep(0.06)  # (longer than IDLE_S: nobody committed since)
    assert pauses.hold_s(0.2) == pytest.approx(vacuum.IDLE_HOLD * 0.2)
    other.execute("INSERT INTO t VALUES (1)")  # another connection commits
    assert pauses.hold_s(0.2) == 0.2
    time.sleep(0.06)
    monkeypatch.setattr(vacuum, "PROBE_EVERY_S", 0.5)  # the next probe is due in < 0.5 s
    assert 0.2 <= pauses.hold_s(0.2) < 0.5
    mine.close()
    other.close()


def test_a_store_opened_on_a_database_nobody_has_open_starts_idle(tmp_path, monkeypatch):
    """No WAL file when the store opened: nobody had the database open, so the run starts
    idle; a commit of another connection after the open is seen at the first check."""
    monkeypatch.setattr(vacuum, "IDLE_S", 3600.0)
    path = tmp_path / "ts.db"
    Store(path).close()  # (closing the last connection removes the WAL)
    store = Store(path)
    try:
        quiet_s, version = quiet_at_open(store)
        assert quiet_s == 3600.0 and version is not None
        pauses = Pauses(store.conn, store.path, 0.05, quiet_s=quiet_s, version=version)
        assert pauses.hold_s(0.2) > 0.2
        other = _conn(path)
        other.execute("INSERT INTO meta(key, value) VALUES ('other', 'x')")
        other.close()
        assert pauses.hold_s(0.2) == 0.2
    finally:
        store.close()
    with_wal = Store(path)
    app = Store(path)
    try:
        with app.transaction() as conn:  # (a running app: its WAL was just written)
            conn.execute("INSERT INTO meta(key, value) VALUES ('app', 'x')")
        third = Store(path)
        try:
            assert quiet_at_open(third)[0] < 3600.0
        finally:
            third.close()
    finally:
        app.close()
        with_wal.close()


def test_the_apps_connections_leave_checkpoints_to_a_running_prune(tmp_path):
    """While a prune of this process works on the database, a commit of the app's store
    does not checkpoint (each would copy the run's last batch into the database file
    again); after the run, its next transaction checkpoints as before."""
    path = tmp_path / "ts.db"
    pruner, app = Store(path), Store(path)

    def autocheckpoint(store: Store) -> int:
        return int(store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    def app_writes(key: str) -> None:
        with app.transaction() as conn:
            conn.execute("INSERT INTO meta(key, value) VALUES (?, 'x')", (key,))

    try:
        with retention._pruning_connection(pruner, 500):
            app_writes("during")
            assert autocheckpoint(app) == 0
            with pruner.transaction() as conn:  # (the run's own connection keeps its own)
                conn.execute("INSERT INTO meta(key, value) VALUES ('run', 'x')")
            assert autocheckpoint(pruner) > 1000
        app_writes("after")
        assert autocheckpoint(app) == 1000 and autocheckpoint(pruner) == 1000
    finally:
        pruner.close()
        app.close()
    assert not WAITING.is_pruning(str(path), None)
