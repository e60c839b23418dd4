"""Opening a SQLite store while another connection writes (a fleet's processes starting on a
new database together): SQLite refuses ``PRAGMA journal_mode=WAL`` at once, without its busy
handler, while another connection is inside a write transaction on a database still in
rollback mode. The store tries again until its lock timeout instead of failing its open
(a concurrent-writers test lost a writer this way in CI)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tracescore.store import open_store


def _rollback_mode_db(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE app_table(x)")  # a database in rollback-journal mode
    conn.close()


def test_open_waits_for_a_write_transaction_instead_of_failing(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    _rollback_mode_db(db)
    other = sqlite3.connect(db, isolation_level=None, timeout=30)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO app_table VALUES (1)")
    # what SQLite itself does here (the reason for the retry): an immediate lock error
    probe = sqlite3.connect(db, isolation_level=None, timeout=30)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        probe.execute("PRAGMA journal_mode=WAL")
    probe.close()

    seen: list[tuple[str, list[tuple[int]]]] = []
    errors: list[BaseException] = []

    def open_it() -> None:  # (a store's connection is used on the thread that opened it)
        try:
            store = open_store(db)
            try:
                conn = store.conn  # type: ignore[attr-defined]
                seen.append((conn.execute("PRAGMA journal_mode").fetchone()[0],
                             conn.execute("SELECT x FROM app_table").fetchall()))
            finally:
                store.close()
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    t = threading.Thread(target=open_it)
    t.start()
    t.join(0.3)  # the open is waiting (or already failed: asserted below)
    other.execute("COMMIT")
    other.close()
    t.join(60)
    assert not errors, errors
    assert not t.is_alive()
    # the store is in WAL mode, and the other connection's write committed: nothing lost
    assert seen == [("wal", [(1,)])]


def test_a_lock_held_past_the_timeout_still_fails_the_open_clearly(tmp_path: Path) -> None:
    db = tmp_path / "held.db"
    _rollback_mode_db(db)
    other = sqlite3.connect(db, isolation_level=None, timeout=30)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO app_table VALUES (1)")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            open_store(db, timeout_s=0.3)
    finally:
        other.execute("ROLLBACK")
        other.close()
