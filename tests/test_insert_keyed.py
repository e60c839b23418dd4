"""The writer's multi-row inserts that tell each new row's id without RETURNING
(store/sqlite.py ``_insert_keyed``): the ids are the rows' real rowids, whether every row went
in or some were skipped (a replay, a key twice), at every statement size."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tracescore.store.sqlite import _insert_keyed

SQL = "INSERT OR IGNORE INTO t(k1, k2, v) VALUES (?,?,?)"


def _table(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k1 TEXT, k2 TEXT, v INTEGER)")
    conn.execute("CREATE UNIQUE INDEX t_key ON t(k1, k2)")
    return conn


def _truth(conn: sqlite3.Connection) -> dict[tuple[str, str], int]:
    return {(k1, k2): i for i, k1, k2 in conn.execute("SELECT id, k1, k2 FROM t")}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 1023, 1024, 1500, 2049])
def test_every_row_new(tmp_path: Path, n: int) -> None:
    conn = _table(tmp_path / "t.db")
    conn.execute("INSERT INTO t(k1, k2, v) VALUES ('old', 'x', 0)")
    rows = [(f"r{i}", "m", i) for i in range(n)]
    conn.execute("BEGIN IMMEDIATE")
    got = _insert_keyed(conn, SQL, rows, "t", ("k1", "k2"), (0, 1))
    conn.execute("COMMIT")
    truth = _truth(conn)
    assert len(got) == n
    assert all(got[k] == truth[k] for k in got)


@pytest.mark.parametrize("n", [2, 5, 9, 700])
def test_some_rows_skipped(tmp_path: Path, n: int) -> None:
    conn = _table(tmp_path / "t.db")
    conn.execute("BEGIN IMMEDIATE")
    first = _insert_keyed(conn, SQL, [(f"r{i}", "m", i) for i in range(0, n, 2)], "t",
                          ("k1", "k2"), (0, 1))
    # a replay of half of them, new ones between, and a key twice in one statement
    rows = [(f"r{i}", "m", i) for i in range(n)] + [(f"r{n - 1}", "m", -1), ("z", "m", 1)]
    got = _insert_keyed(conn, SQL, rows, "t", ("k1", "k2"), (0, 1))
    conn.execute("COMMIT")
    truth = _truth(conn)
    new = {k for k in truth if k not in first}
    assert set(got) == new  # only the rows this call inserted
    assert all(got[k] == truth[k] for k in got)
    assert all(first[k] == truth[k] for k in first)
