"""What a pruning run makes a writer of its process wait for, after its batches (issue 33,
session 15: the 200k-record prune's longest waits were the index rebuild followed at once by a
vacuum step of 2,048 pages, and the truncation of a large WAL inside the TRUNCATE checkpoint):

- the index rebuild's hold is followed by a pause before space is given back;
- with a hold bound, the incremental vacuum starts with a small step;
- the WAL's page cache is dropped between the PASSIVE and the TRUNCATE checkpoints, and the
  database is whole after it.

Real SQLite files; the events are recorded, not timed."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from test_retention import DAY, _old_and_new, bulk_always

import tracescore.store.retention as retention
from tracescore.store import Store, vacuum
from tracescore.store.retention import Retention, prune


def test_a_pause_follows_the_index_rebuild_before_space_is_given_back(
        make_ts: Any, db_path: Path, monkeypatch: Any) -> None:
    bulk_always(monkeypatch)
    now = _old_and_new(make_ts)
    events: list[tuple[str, float]] = []

    class Recorded(retention.Pauses):
        def __call__(self, busy_s: float) -> None:
            events.append(("pause", busy_s))
            super().__call__(busy_s)

    real_give_back = retention.give_back_space

    def give_back(*args: Any, **kwargs: Any) -> Any:
        events.append(("give back", 0.0))
        return real_give_back(*args, **kwargs)

    monkeypatch.setattr(retention, "Pauses", Recorded)
    monkeypatch.setattr(retention, "give_back_space", give_back)
    store = Store(db_path)
    try:
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=50, pause_s=0), now=now)
    finally:
        store.close()
    assert res.records == 300 and res.bulk_indexes and res.rebuild_s > 0
    at = events.index(("give back", 0.0))
    assert at > 0 and events[at - 1] == ("pause", res.rebuild_s), events[at - 2:at + 1]


def test_the_first_vacuum_step_is_small_with_a_hold_bound(
        make_ts: Any, db_path: Path) -> None:
    now = _old_and_new(make_ts)
    store = Store(db_path)
    steps: list[int] = []
    try:
        store.conn.set_trace_callback(lambda s: steps.extend(
            int(n) for n in re.findall(r"incremental_vacuum\((\d+)\)", s)))
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=50, pause_s=0,
                                     vacuum_pages=2048, max_hold_s=0.2), now=now)
        store.conn.set_trace_callback(None)
        assert int(store.conn.execute("PRAGMA freelist_count").fetchone()[0]) == 0
    finally:
        store.close()
    assert res.records == 300 and res.pages_given_back > vacuum.FIRST_STEP_PAGES
    assert steps[0] == vacuum.FIRST_STEP_PAGES, steps
    assert len(steps) >= 2 and sum(steps) >= res.pages_given_back


def test_without_a_hold_bound_a_step_is_vacuum_pages(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(os.urandom(3000),) for _ in range(400)])
    conn.execute("DELETE FROM t")
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    steps: list[int] = []
    conn.set_trace_callback(lambda s: steps.extend(
        int(n) for n in re.findall(r"incremental_vacuum\((\d+)\)", s)))
    done, _ = vacuum.incremental_vacuum(conn, 300, pause_s=0)
    conn.close()
    assert free > 300 and done == free
    assert steps[0] == 300, steps


def test_the_wal_cache_is_dropped_between_the_checkpoints_and_nothing_is_lost(
        tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "w.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t(i INTEGER, x BLOB)")
    blobs = [os.urandom(2000) for _ in range(500)]
    conn.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(blobs)))
    wal = Path(str(path) + "-wal")
    assert wal.stat().st_size > 1_000_000
    calls: list[tuple[str, int]] = []
    real = os.posix_fadvise

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(vacuum, "DROP_CACHE_BYTES", 1_000_000)
    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    vacuum.checkpoint_then_truncate(conn)
    conn.set_trace_callback(None)
    assert wal.stat().st_size == 0  # (truncated; still there while the connection is open)
    conn.close()
    assert calls == [(str(wal), os.POSIX_FADV_DONTNEED)]
    assert [s for s in traced if "wal_checkpoint" in s] == [
        "PRAGMA wal_checkpoint(PASSIVE)", "PRAGMA wal_checkpoint(TRUNCATE)"]
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [r[0] for r in check.execute("SELECT x FROM t ORDER BY i")] == blobs
    finally:
        check.close()
    vacuum.drop_wal_cache(str(tmp_path / "missing.db"))  # (no WAL: nothing, no error)


def test_a_small_wal_is_left_alone(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "s.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.execute("INSERT INTO t VALUES (1)")
    calls: list[Any] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda *a: calls.append(a))
    vacuum.drop_wal_cache(str(path))
    conn.close()
    assert calls == []
