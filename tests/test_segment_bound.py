"""The number of segments is bounded in all, not only per dimension: combinations of declared
keys past ``max_segments`` degrade to a segment that keeps release and environment and is
``other`` elsewhere, counted; and a ``--where`` read touches only the segments it needs.
Both backends."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from helpers import rows
from test_segments import counter, segments_of

from tracescore.read import query as Q
from tracescore.read.db import open_db
from tracescore.record import RagRecord
from tracescore.reports.report import build_report
from tracescore.reports.report_text import format_report
from tracescore.sampling import Decision
from tracescore.store import SegmentSpec, open_store
from tracescore.store.segments import OTHER, OVERFLOW_SLACK
from tracescore.testing import ScriptedMetric


def _recs(n: int, start: int, seed: int = 7) -> list[tuple[RagRecord, Decision]]:
    """Records whose three metadata keys (10 values each) make up to 1,000 combinations."""
    rng = random.Random(seed + start)
    now_ns = time.time_ns()
    return [(RagRecord(trace_id=format(0xE000_0000 + start + i, "032x"),
                       span_id=format(0xF000 + start + i, "016x"), query="q", answer="a",
                       metadata={"tenant": f"t{rng.randrange(10)}",
                                 "region": f"r{rng.randrange(10)}",
                                 "plan": f"p{rng.randrange(10)}"},
                       model="gpt-x", end_time_ns=now_ns),
             Decision(0.5, ())) for i in range(n)]


def test_combinations_past_max_segments_degrade_and_are_counted(db: str) -> None:
    """Before: every combination got its own segment (``segment_limit`` bounds values per key
    only), so 3 keys of 10 values made hundreds of segments here."""
    n, cap = 600, 20
    spec = SegmentSpec(release="v1", environment="prod", keys=("tenant", "region", "plan"),
                       max_segments=cap)
    store = open_store(db)
    try:
        for start in range(0, n, 100):
            store.write_batch(_recs(100, start), [], segments=spec)
    finally:
        store.close()
    segs = segments_of(db)
    assert len(segs) - 1 <= cap + OVERFLOW_SLACK  # (seg 0: the segment with no value)
    combos = [d for d in segs.values() if d.get("metadata.tenant") not in (None, OTHER)]
    assert len(combos) == cap  # the first cap combinations are kept as they are
    (stand_in,) = [d for d in segs.values() if d.get("metadata.tenant") == OTHER]
    assert stand_in == {"release": "v1", "environment": "prod", "model": OTHER,
                        "metadata.tenant": OTHER, "metadata.region": OTHER,
                        "metadata.plan": OTHER}
    in_stand_in = rows(db, "SELECT count(*) AS n FROM records r JOIN segments s"
                           " ON s.seg_id = r.seg_id WHERE s.meta LIKE '%\"other\"%'")[0]["n"]
    assert in_stand_in > 0
    assert counter(db, "segments.overflow.segments") == in_stand_in
    # every record still counted (the release filter still sees the degraded ones)
    assert rows(db, "SELECT sum(records) AS n FROM hourly_records") == [{"n": n}]
    conn = open_db(db)
    try:
        seg = Q.SegmentIndex(conn)
        aggs = Q.record_aggs(conn, where={"release": "v1"}, seg=seg)
        assert sum(a.records for a in aggs.values()) == n
        text = format_report(build_report(conn))
    finally:
        conn.close()
    assert f"segments ({in_stand_in} records)" in " ".join(text.split())


def test_the_bound_holds_across_concurrent_writers(db: str) -> None:
    cap, writers = 15, 4
    spec = SegmentSpec(release="v1", keys=("tenant", "region", "plan"), max_segments=cap)
    errors: list[BaseException] = []

    def write(w: int) -> None:
        store = open_store(db)
        try:
            for b in range(0, 200, 50):
                store.write_batch(_recs(50, w * 10_000 + b, seed=w), [], segments=spec)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    kept = [d for d in segments_of(db).values() if d.get("metadata.tenant") not in (None, OTHER)]
    assert len(kept) == cap
    assert rows(db, "SELECT sum(records) AS n FROM hourly_records") == [{"n": writers * 200}]


def test_max_segments_is_an_init_setting(tmp_path: Any, make_ts: Any) -> None:
    import tracescore

    with pytest.raises(ValueError, match="max_segments must be an int >= 1"):
        tracescore.init(db=str(tmp_path / "x.db"), metrics=[], max_segments=0)
    db = str(tmp_path / "ts.db")
    ts, _ = make_ts(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")],
                    segments=["tenant"], max_segments=3)
    for i in range(8):
        ts.log_record(query=f"q{i}", answer="a", metadata={"tenant": f"t{i}"})
    assert ts.flush(30)
    kept = [d for d in segments_of(db).values() if d.get("metadata.tenant") not in (None, OTHER)]
    assert len(kept) == 3
    assert counter(db, "segments.overflow.segments") == 5


def test_a_where_read_touches_only_the_segments_it_needs(tmp_path: Any) -> None:
    """Before: every read loaded the whole segments table into dicts (181k segments: 503 MB
    for ``report --where release=v1``)."""
    db = str(tmp_path / "ts.db")
    store = open_store(db)
    try:
        for rel in ("v1", "v2", "v3", "v4"):
            spec = SegmentSpec(release=rel, keys=("tenant", "region", "plan"),
                               max_segments=10_000)
            store.write_batch(_recs(100, {"v1": 0, "v2": 1000, "v3": 2000, "v4": 3000}[rel]),
                              [], segments=spec)
    finally:
        store.close()
    total = len(segments_of(db))
    conn = open_db(db)
    try:
        seg = Q.SegmentIndex(conn)
        ids = seg.matching({"release": "v2", "metadata.tenant": "t1"})
        assert ids and all(seg.value(i, "release") == "v2" for i in ids)
        v2 = rows(db, "SELECT count(*) AS n FROM segments WHERE release = 'v2'")[0]["n"]
        assert len(seg._rows) == v2 < total / 3  # read: v2's segments, no others
        Q.record_aggs(conn, where={"release": "v2"}, seg=seg)
        assert len(seg._rows) == v2
        assert len(seg.rows) == total  # the whole table when a read asks for it
    finally:
        conn.close()
