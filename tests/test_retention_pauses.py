"""The pauses of a pruning run (issue 19): let other writers in, and do not sleep when there
is nobody to let in. Real SQLite files, real connections and threads; the module's time
constants are shortened where a test would otherwise wait seconds for a state."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from helpers import rows, wait_for

from tracescore.record import RagRecord
from tracescore.store import Store, vacuum
from tracescore.store.retention import Retention, prune
from tracescore.store.vacuum import WAITING, Pauses

DAY = 86400.0


def _conn(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def test_pauses_are_skipped_while_nobody_else_commits_and_kept_once_someone_does(
        tmp_path, monkeypatch):
    monkeypatch.setattr(vacuum, "IDLE_S", 3600.0)  # (however slow the machine: still active)
    monkeypatch.setattr(vacuum, "PROBE_EVERY_S", 3600.0)
    path = tmp_path / "p.db"
    mine, other = _conn(path), _conn(path)
    mine.execute("CREATE TABLE t(x)")
    pauses = Pauses(mine, str(path), pause_s=0.05)
    pauses(0.02)  # a run starts as if others write: a real pause
    assert pauses.skipped == 0 and pauses.slept_s >= 0.02
    monkeypatch.setattr(vacuum, "IDLE_S", 0.05)
    time.sleep(0.06)  # (longer than IDLE_S: nobody committed since)
    mine.execute("INSERT INTO t VALUES (1)")  # (its own commits do not count)
    slept = pauses.slept_s
    pauses(0.02)
    assert pauses.skipped == 1 and pauses.slept_s - slept < 0.02
    other.execute("INSERT INTO t VALUES (2)")  # another connection commits
    pauses(0.02)
    assert pauses.skipped == 1 and pauses.slept_s - slept >= 0.02
    mine.close()
    other.close()


def test_an_idle_run_still_pauses_long_enough_for_a_busy_handler_now_and_then(
        tmp_path, monkeypatch):
    monkeypatch.setattr(vacuum, "IDLE_S", 0.0)
    monkeypatch.setattr(vacuum, "PROBE_EVERY_S", 0.0)
    monkeypatch.setattr(vacuum, "PROBE_PAUSE_S", 0.03)
    path = tmp_path / "p.db"
    mine = _conn(path)
    pauses = Pauses(mine, str(path), pause_s=0.001)
    pauses(0.0)  # busy 0: rest() would not sleep at all
    assert pauses.skipped == 0 and pauses.slept_s >= 0.03
    mine.close()


def test_the_probe_pause_outlasts_sqlites_longest_busy_sleep():
    # sqlite3's busy handler sleeps at most 100 ms between two tries (sqliteDefaultBusyCallback)
    assert vacuum.PROBE_PAUSE_S > 0.1 and vacuum.PROBE_EVERY_S <= 2.0


def test_a_waiting_writer_of_this_process_gets_the_lock_at_the_next_pause(tmp_path,
                                                                          monkeypatch):
    """The pruner's pause lasts until the app's waiting writer has the lock, however long
    SQLite's busy handler sleeps between its tries (the pause alone is 1 ms here)."""
    monkeypatch.setattr(vacuum, "IN_PROCESS_WAIT_S", 60.0)
    path = tmp_path / "ts.db"
    pruner = Store(path)
    order: list[str] = []
    opened, go = threading.Event(), threading.Event()

    def app_writes() -> None:
        app = Store(path)
        opened.set()
        go.wait(30)
        try:
            with app.transaction() as conn:
                conn.execute("INSERT INTO meta(key, value) VALUES ('app', 'x')")
                order.append("app")
        finally:
            app.close()

    t = threading.Thread(target=app_writes)
    t.start()
    assert opened.wait(30)
    with pruner.transaction() as conn:
        conn.execute("INSERT INTO meta(key, value) VALUES ('p1', 'x')")
        go.set()
        wait_for(lambda: WAITING.count(pruner.path) == 1, what="the app waits for the lock")
        time.sleep(0.15)  # (its busy handler is now in its long sleeps)
    pauses = Pauses(pruner.conn, pruner.path, pause_s=0.001)
    pauses(0.2)
    assert WAITING.count(pruner.path) == 0  # the app has the lock ...
    with pruner.transaction() as conn:  # ... so the pruner's next batch comes after it
        conn.execute("INSERT INTO meta(key, value) VALUES ('p2', 'x')")
        order.append("p2")
    t.join(30)
    assert order == ["app", "p2"]
    pruner.close()


def _rec(i: int, created: float) -> RagRecord:
    t = int(created * 1e9)
    return RagRecord(trace_id=format(0xC000_0000 + i, "032x"), span_id=format(0xD000 + i, "016x"),
                     query=f"q{i}", answer=f"a{i}", start_time_ns=t - 1000, end_time_ns=t)


def test_a_prune_nobody_else_writes_to_skips_its_pauses_and_deletes_the_same(
        make_ts, db_path, monkeypatch):
    monkeypatch.setattr(vacuum, "IDLE_S", 0.0)
    monkeypatch.setattr(vacuum, "PROBE_EVERY_S", 3600.0)
    now = time.time()
    ts, _ = make_ts(metrics=[], retention=None)
    for i in range(300):
        ts.submit(_rec(i, now - 40 * DAY + i if i % 3 else now - 60), hold_span=False)
    assert ts.flush(30)
    ts.shutdown(timeout=10)
    store = Store(db_path)
    try:
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=10, pause_s=1.0,
                                     max_hold_s=0), now=now)  # (batches of 10: pauses)
    finally:
        store.close()
    assert res.records == 200 and res.batches >= 3
    assert res.pauses_skipped >= res.batches - 1  # every pause after a deleting batch
    assert rows(db_path, "SELECT count(*) AS n FROM records")[0]["n"] == 100


@pytest.mark.parametrize("idle_s", [0.0, 3600.0], ids=["idle", "active"])
def test_a_writer_of_another_process_is_never_shut_out(tmp_path, monkeypatch, idle_s):
    """A connection the pruner cannot see waiting (another process's) still gets the lock
    between batches: at the latest at the next probe pause when the run thinks it is idle."""
    monkeypatch.setattr(vacuum, "IDLE_S", idle_s)
    monkeypatch.setattr(vacuum, "PROBE_EVERY_S", 0.2)
    path = tmp_path / "p.db"
    mine = _conn(path)
    mine.execute("CREATE TABLE t(x)")
    other = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    got = threading.Event()

    def other_writes() -> None:  # (a raw connection: not registered in WAITING)
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t VALUES ('other')")
        other.execute("COMMIT")
        got.set()

    pauses = Pauses(mine, str(path), pause_s=0.05)
    t = None
    batches = 0
    while not got.is_set():
        assert batches < 2000, "the other writer never got the lock"
        t0 = time.perf_counter()
        mine.execute("BEGIN IMMEDIATE")
        mine.execute("INSERT INTO t VALUES ('mine')")
        time.sleep(0.02)  # (a batch holding the lock)
        mine.execute("COMMIT")
        if t is None:
            t = threading.Thread(target=other_writes)
            t.start()
        pauses(time.perf_counter() - t0)
        batches += 1
    t.join(30)
    assert mine.execute("SELECT count(*) FROM t WHERE x = 'other'").fetchone()[0] == 1
    mine.close()
    other.close()
