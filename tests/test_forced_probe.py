"""Whether a window holds forced records is read from the partial index of the forced records,
also when the report is split by segment (``compare --by release``, ``check --compare``): the
probe must not read the window's other records (it read every one of them through the segments'
index before, 0.4 s at 300k records and growing with them)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import tracescore
from tracescore.read.db import open_db
from tracescore.read.query import SegmentIndex, Window
from tracescore.reports.inclusion import selection_possible
from tracescore.sampling import FORCE_SAMPLE_KEY


def _fill(db: str, *, forced: bool) -> None:
    for release in ("v1", "v2"):
        ts = tracescore.init(db=db, metrics=["exact_match"], sample_rate=0.0, release=release)
        for i in range(30):
            meta = {FORCE_SAMPLE_KEY: True} if forced and release == "v2" and i == 7 else {}
            ts.log_record(query=f"q{i}", answer=f"a{i}", contexts=[f"c{i}"],
                          ground_truths=[f"a{i}"], metadata=meta)
        assert ts.flush(30)
        ts.shutdown()


def _segments(conn: object, release: str) -> set[int]:
    ids = SegmentIndex(conn).matching({"release": release})
    assert ids is not None
    return ids


@pytest.mark.parametrize("forced", [False, True])
def test_forced_records_of_a_segment_are_found(db: str, forced: bool) -> None:
    _fill(db, forced=forced)
    conn = open_db(db)
    try:
        v1, v2 = _segments(conn, "v1"), _segments(conn, "v2")
        assert v1 and v2 and not v1 & v2
        assert not selection_possible(conn, Window(), v1)
        assert selection_possible(conn, Window(), v2) is forced
        assert selection_possible(conn, Window(), None) is forced
        assert not selection_possible(conn, Window(), set())
    finally:
        conn.close()


def test_the_probe_uses_the_partial_index_with_segments(db_path: Path) -> None:
    db = str(db_path)
    _fill(db, forced=False)
    conn = open_db(db)
    seen: list[str] = []
    try:
        v2 = _segments(conn, "v2")
        raw = sqlite3.connect(db)
        conn.set_trace_callback(seen.append)
        selection_possible(conn, Window(), v2)
        probe = next(s for s in seen if "forced IS NOT NULL" in s)
        plan = " ".join(str(r[3]) for r in raw.execute("EXPLAIN QUERY PLAN " + probe))
        raw.close()
    finally:
        conn.close()
    assert "idx_records_forced" in plan, plan
