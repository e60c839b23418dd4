"""A trace's records without ``idx_records_trace_id`` (issue 19, schema version 6 on SQLite).

Every ``record_id`` is ``TRACE-SPAN``, so on SQLite a trace's records are one range of the
primary key (:func:`tracescore.store.compat.trace_records` / ``trace_join`` /
``trace_prefix``); PostgreSQL keeps its index and the plain ``trace_id =``. Each rewritten
lookup is checked against the query it replaced (``trace_id = ?``, which still answers without
the index, by a scan) on a database with many traces, traces of several records and trace ids
that are near neighbours (``…0f`` / ``…10``, long shared prefixes); on SQLite, the query plan
of every statement these lookups run seeks the primary key and never scans ``records``. A
database written before version 6 loses the index when opened and answers the same.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import rows

from tracescore.monitor.judge_drift_labels import live_identities
from tracescore.read.records import find_records
from tracescore.read.trust_pairs import _JOBS, _SCORES, read_pairs, unmatched_labels
from tracescore.read.trust_pairs import LABELLED_SCORES as _LABELLED_SCORES
from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, migrations, open_store
from tracescore.store.compat import connect_reader, trace_join, trace_records
from tracescore.store.retention import Retention, count_eligible, prune

NOW = 1_790_000_000.0
DAY = 86400.0
METRICS = ("grounded", "quality")
#: ids sharing their first 24 hex digits, the last 8 counting up (…0f, …10, …ff, …100)
SHARED = "ab" * 12


def _near(i: int) -> str:
    return f"{SHARED}{i:08x}"


class World:
    """What was written: trace → its record ids (oldest first)."""

    def __init__(self) -> None:
        self.traces: dict[str, list[str]] = {}

    @property
    def absent(self) -> list[str]:
        """Trace ids with no record that sort right beside ones that have."""
        return [_near(0x0b), _near(0x24), _near(0xfe), _near(0x102), _near(0x0fff_fffe),
                "f" * 32, "0" * 31 + "1"]


def _register(store: Any) -> None:
    from tracescore.metrics.base import Metric

    class _M(Metric):
        kind = "judge"
        version = "1"
        requires = frozenset()
        binary = True
        higher_is_better = True
        threshold = None

        def __init__(self, name: str) -> None:
            self.name = self.description = name

        def score(self, record: RagRecord) -> Any:  # pragma: no cover - never scored
            raise NotImplementedError

    store.register_metrics([_M(m) for m in METRICS])


@pytest.fixture
def world(db: str) -> World:
    """~160 traces of 1-3 records, every record scored (``grounded``, ``quality``; a third
    of the ``quality`` jobs left open), labels on a quarter of the traces (by trace and by
    record, one on a trace with no records), feedback (some on traces with no records)."""
    rng = random.Random(19)
    w = World()
    ids = [_near(i) for i in (*range(0x0c, 0x24), 0xff, 0x100, 0x101, 0x0fff_ffff)]
    ids += [f"{rng.getrandbits(128):032x}" for _ in range(120)]
    ids += [ids[-1][:31] + c for c in "0123456789abcdef" if ids[-1][:31] + c != ids[-1]][:3]
    store = open_store(db)
    try:
        _register(store)
        t = NOW - 40 * DAY
        for k, trace in enumerate(ids):
            batch = []
            for j in range(1 + k % 3):
                t += 600.0
                rec = RagRecord(trace_id=trace, span_id=f"{rng.getrandbits(64):016x}",
                                query=f"q{k}.{j}", answer="a",
                                start_time_ns=int((t - 1) * 1e9), end_time_ns=int(t * 1e9))
                batch.append((rec, Decision(0.5, METRICS)))
                w.traces.setdefault(trace, []).append(rec.record_id)
            store.write_batch(batch, [NewJob(r.record_id, m, "1") for r, _ in batch
                                      for m in METRICS], None)
        while jobs := store.lease_jobs("t", 200, 60.0, list(METRICS)):
            done = [(j, [Score(j.metric, rng.random(), metric=j.metric)]) for j in jobs
                    if j.metric == "grounded" or j.job_id % 3]
            store.complete_jobs("t", done, "none")
            for j in jobs:
                if not (j.metric == "grounded" or j.job_id % 3):
                    store.release_job(j, "t")
            if not done:
                break
        labelled = list(w.traces)[::4]
        store.add_labels(
            [{"trace_id": tr, "name": "grounded", "value": float(i % 2), "annotator": "a"}
             for i, tr in enumerate(labelled)]
            + [{"record_id": w.traces[tr][-1], "name": "grounded", "value": 1.0,
                "annotator": "b", "metric_version": "1"} for tr in labelled[::3]]
            + [{"trace_id": w.absent[0], "name": "grounded", "value": 1.0, "annotator": "a"}])
        for i, tr in enumerate([*list(w.traces)[1::5], *w.absent[:3]]):
            store.add_feedback(tr, "user", float(i % 2), None, None, NOW - (50 - i % 3) * DAY)
    finally:
        store.close()
    return w


def _ids(db: str, sql: str, *args: Any) -> list[Any]:
    return sorted(tuple(r.values()) for r in rows(db, sql, *args))


# -- the records of one trace ----------------------------------------------------------------
def test_the_records_of_a_trace_are_the_same_as_by_trace_id(db: str, world: World) -> None:
    assert all(rid.startswith(tr + "-") for tr, rids in world.traces.items() for rid in rids)
    store = open_store(db)
    try:
        for trace in [*world.traces, *world.absent]:
            old = _ids(db, "SELECT record_id FROM records WHERE trace_id = ?", trace)
            assert old == sorted((r,) for r in world.traces.get(trace, []))
            assert sorted((r.record_id,) for r in store.records_for_trace(trace)) == old
        # one trace's ground truths, not its neighbours'
        trace = _near(0x0f)
        got = store.set_ground_truths(trace, ["the truth"])
        assert sorted(r.record_id for r in got) == sorted(world.traces[trace])
        assert all(r.ground_truths == ("the truth",) for r in got)
    finally:
        store.close()
    changed = rows(db, "SELECT record_id FROM records WHERE ground_truths LIKE '%the truth%'")
    assert sorted(r["record_id"] for r in changed) == sorted(world.traces[_near(0x0f)])


def test_show_finds_a_trace_and_its_prefixes_as_before(db: str, world: World) -> None:
    conn = connect_reader(db)
    try:
        for trace in [*world.traces, *world.absent]:
            recs, cands = find_records(conn, trace.upper())
            old = [dict(r) for r in conn.execute(
                "SELECT * FROM records WHERE trace_id = ? ORDER BY created_at, record_id",
                (trace,)).fetchall()]
            assert (recs, cands) == (old, [])
        for prefix in ("a", "ab", SHARED, SHARED + "0000000", SHARED + "000000", SHARED + "0000001",
                       next(iter(world.traces))[:5], _near(0x0f)[:31], "0", "fff", "g"):
            old_ids = [r[0] for r in conn.execute(
                "SELECT DISTINCT trace_id FROM records WHERE trace_id >= ? AND trace_id < ?"
                " ORDER BY trace_id", (prefix, prefix + "g")).fetchall()]
            recs, cands = find_records(conn, prefix)
            if len(old_ids) == 1:
                assert cands == [] and {r["trace_id"] for r in recs} == set(old_ids)
                assert len(recs) == len(world.traces[old_ids[0]])
            else:
                assert recs == [] and len(cands) == min(11, len(old_ids))
                assert set(cands) <= set(old_ids)
                if len(old_ids) <= 11:
                    assert set(cands) == set(old_ids)
    finally:
        conn.close()


# -- labels: the record a label by trace binds to; the readers of labelled pairs ---------------
_OLD_RECORD_OF_TRACE = (
    "SELECT r.record_id FROM records r WHERE r.trace_id = ? ORDER BY EXISTS (SELECT 1 FROM"
    " scores s WHERE s.record_id = r.record_id AND s.name = ?) DESC, r.created_at DESC,"
    " r.record_id DESC LIMIT 1")


def test_a_label_by_trace_binds_the_record_the_old_query_chose(db: str, world: World) -> None:
    for trace in [*list(world.traces)[1::7], *world.absent[1:3]]:
        for name in ("quality", "grounded", "nothing"):
            want = rows(db, _OLD_RECORD_OF_TRACE, trace, name)
            store = open_store(db)
            try:
                store.add_label(trace, name, 1.0, annotator="binds")
            finally:
                store.close()
            [got] = rows(db, "SELECT record_id FROM labels WHERE trace_id = ? AND name = ?"
                         " AND annotator = 'binds'", trace, name)
            assert got["record_id"] == (want[0]["record_id"] if want else None)


_OLD_SCORES = (
    "SELECT r.trace_id, s.record_id, s.score_id, s.value, s.metric_version, s.seg_id,"
    " s.judge_model, s.created_at, s.metric, r.created_at FROM scores s JOIN records r"
    " ON r.record_id = s.record_id WHERE s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL"
    " AND r.trace_id IN (SELECT trace_id FROM labels WHERE name = ? AND value IS NOT NULL)")
_OLD_JOBS = (
    "SELECT j.record_id, j.metric, j.metric_version, j.created_at, j.job_id FROM jobs j"
    " JOIN records r ON r.record_id = j.record_id WHERE r.trace_id IN"
    " (SELECT trace_id FROM labels WHERE name = ? AND value IS NOT NULL"
    " AND metric_version IS NULL)")
_OLD_ELIGIBLE = (
    "SELECT s.score_id FROM scores s WHERE s.name = ? AND s.status = 'ok'"
    " AND s.value IS NOT NULL AND s.record_id IN (SELECT r.record_id FROM records r JOIN"
    " labels l ON l.trace_id = r.trace_id AND l.name = ?)")
_NEW_ELIGIBLE = (
    "SELECT s.score_id FROM scores s WHERE s.name = ? AND s.status = 'ok'"
    " AND s.value IS NOT NULL AND s.record_id IN (SELECT r.record_id FROM labels l"
    " CROSS JOIN records r ON {join} WHERE l.name = ?)")
_OLD_UNMATCHED = (
    "SELECT count(*) FROM labels l WHERE l.name = ? AND l.value IS NOT NULL AND NOT EXISTS"
    " (SELECT 1 FROM records r JOIN scores s ON s.record_id = r.record_id AND s.name = ?"
    " AND s.status = 'ok' AND s.value IS NOT NULL WHERE r.trace_id = l.trace_id"
    " AND (l.record_id IS NULL OR r.record_id = l.record_id))")
_OLD_DRIFT = (
    "SELECT s.record_id, s.created_at, s.details FROM scores s JOIN records r"
    " ON r.record_id = s.record_id WHERE s.name = ? AND s.status = 'ok' AND r.trace_id"
    " IN (SELECT trace_id FROM labels WHERE name = ? AND value IS NOT NULL)")


def test_the_labelled_pairs_read_the_same_rows_as_before(db: str, world: World) -> None:
    conn = connect_reader(db)
    try:
        join = trace_join(conn, "l.trace_id")

        def same(new: str, old: str, args: tuple[Any, ...]) -> int:
            got = sorted(tuple(r) for r in conn.execute(new, args).fetchall())
            assert got == sorted(tuple(r) for r in conn.execute(old, args).fetchall())
            return len(got)

        for name in ("grounded", "quality"):
            same(_SCORES.format(join=join), _OLD_SCORES, (name, name))
            same(_JOBS.format(join=join), _OLD_JOBS, (name,))
            same(_NEW_ELIGIBLE.format(join=join), _OLD_ELIGIBLE, (name, name))
            same(_LABELLED_SCORES.format(join=join), _OLD_DRIFT, (name, name))
            old_unmatched = conn.execute(_OLD_UNMATCHED, (name, name)).fetchone()[0]
            assert unmatched_labels(conn, name) == old_unmatched
        assert len(conn.execute(_OLD_SCORES, ("grounded", "grounded")).fetchall()) > 40
        assert conn.execute(_OLD_UNMATCHED, ("grounded", "grounded")).fetchone()[0] >= 1
        lp = read_pairs(conn, "grounded")
        assert len(lp.pairs) > 20 and lp.unmatched >= 1
        live_identities(conn, "grounded")  # (runs; its rows are the query above)
    finally:
        conn.close()


def test_label_import_counts_unknown_traces_as_before(db: str, world: World,
                                                      tmp_path: Path) -> None:
    import json

    from helpers import run_cli

    traces = [*list(world.traces)[::9], *world.absent]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"trace_id": t, "name": "grounded", "value": 1,
                                        "annotator": "imp"}) + "\n" for t in traces))
    unknown = sum(not rows(db, "SELECT 1 FROM records WHERE trace_id = ?", t) for t in traces)
    assert unknown == len(world.absent)
    res = run_cli("label", "--db", db, "--import", path)
    assert res.exit_code == 0, res.output
    assert f"{unknown} of them match no record" in res.output


# -- retention: labelled traces held, feedback of traces without records pruned --------------
def test_retention_holds_labelled_traces_and_prunes_orphan_feedback_as_before(
        db: str, world: World) -> None:
    cutoff = NOW - 30 * DAY
    held_by_label = rows(db, "SELECT count(*) AS n FROM records r WHERE r.created_at < ? AND"
                             " r.trace_id IN (SELECT trace_id FROM labels)", cutoff)[0]["n"]
    open_or_undelivered = rows(
        db, "SELECT count(*) AS n FROM records r WHERE r.created_at < ? AND (r.record_id IN"
            " (SELECT record_id FROM jobs WHERE status IN ('pending', 'leased')) OR"
            " r.record_id IN (SELECT record_id FROM scores WHERE delivery IS NULL))",
        cutoff)[0]["n"]
    both = rows(db, "SELECT count(*) AS n FROM records r WHERE r.created_at < ? AND"
                    " r.trace_id IN (SELECT trace_id FROM labels) AND (r.record_id IN"
                    " (SELECT record_id FROM jobs WHERE status IN ('pending', 'leased')) OR"
                    " r.record_id IN (SELECT record_id FROM scores WHERE delivery IS NULL))",
                cutoff)[0]["n"]
    older = rows(db, "SELECT count(*) AS n FROM records WHERE created_at < ?", cutoff)[0]["n"]
    assert held_by_label > 0 and older > held_by_label
    store = open_store(db)
    try:
        eligible, n_older = count_eligible(store, cutoff)
        assert (eligible, n_older) == (older - held_by_label - open_or_undelivered + both,
                                       older)
        res = prune(store, Retention(max_age_s=30 * DAY), now=NOW)
    finally:
        store.close()
    assert res.records == eligible
    # every old record of a labelled trace is still there; old feedback of a trace without
    # records is gone, the rest kept
    assert rows(db, "SELECT count(*) AS n FROM records r WHERE r.created_at < ? AND"
                    " r.trace_id IN (SELECT trace_id FROM labels)", cutoff)[0]["n"] \
        == held_by_label
    left = rows(db, "SELECT f.trace_id, f.created_at, EXISTS (SELECT 1 FROM records r WHERE"
                    " r.trace_id = f.trace_id) AS has FROM feedback f")
    assert left and all(r["has"] or r["created_at"] >= cutoff for r in left)
    assert any(r["has"] for r in left)


# -- SQLite: the plans ---------------------------------------------------------------------
def _pk_index(conn: sqlite3.Connection) -> str:
    [name] = [r[1] for r in conn.execute("PRAGMA index_list(records)") if r[3] == "pk"]
    return str(name)


def _record_aliases(sql: str) -> set[str]:
    return {"records"} | set(re.findall(r"\brecords\s+(?:AS\s+)?(\w+)", sql, re.IGNORECASE)) - {
        "WHERE", "SET", "ON", "JOIN", "CROSS", "LEFT", "ORDER", "LIMIT", "GROUP"}


def _statements(conn: sqlite3.Connection, run: Callable[[], Any]) -> list[str]:
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        run()
    finally:
        conn.set_trace_callback(None)
    return [s for s in seen if re.search(r"\brecords\b", s) and "trace_id" in s
            and not s.lstrip().upper().startswith(("INSERT", "CREATE", "PRAGMA"))]


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_every_trace_lookup_seeks_the_primary_key_on_sqlite(db: str, world: World) -> None:
    trace = _near(0x10)
    store = open_store(db)
    reader = sqlite3.connect(db)
    reader.row_factory = sqlite3.Row
    try:
        pk = _pk_index(store.conn)
        names = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
        assert "idx_records_trace_id" not in names
        stmts = _statements(store.conn, lambda: (
            store.records_for_trace(trace), store.set_ground_truths(trace, ["x"]),
            store.add_labels([{"trace_id": trace, "name": "quality", "value": 1.0}]),
            count_eligible(store, NOW - 30 * DAY),
            prune(store, Retention(max_age_s=30 * DAY), now=NOW)))
        stmts += _statements(reader, lambda: (
            find_records(reader, trace), find_records(reader, trace[:30]),
            read_pairs(reader, "grounded"), unmatched_labels(reader, "grounded"),
            live_identities(reader, "grounded")))
        from tracescore.cli.label import _unknown

        stmts += _statements(store.conn, lambda: _unknown(store, [
            {"record_id": None, "trace_id": trace}, {"record_id": None, "trace_id": "f" * 32}]))
        kinds = {re.sub(r"'[^']*'|[0-9.e+-]+", "", s)[:60] for s in stmts}
        assert len(kinds) >= 10, kinds  # every lookup above ran a statement by trace
        for sql in stmts:
            # (the trace callback's SQL has its parameters inlined; ±infinity as "Inf")
            plan = [r[3] for r in store.conn.execute(
                "EXPLAIN QUERY PLAN " + re.sub(r"\bInf\b", "9e999", sql))]
            aliases = _record_aliases(sql)
            for step in plan:
                m = re.match(r"(SCAN|SEARCH) (\w+)", step)
                if m and m.group(2) in aliases:
                    assert m.group(1) == "SEARCH" and "AUTOMATIC" not in step, (sql, plan)
            if re.search(r"record_id >= ", sql):
                assert any(f"USING INDEX {pk} (record_id>? AND record_id<?)" in s
                           for s in plan), (sql, plan)
    finally:
        reader.close()
        store.close()


# -- the schema ------------------------------------------------------------------------------
def _records_indexes(db: str) -> set[str]:
    if db.startswith("postgresql://"):
        return {r["indexname"] for r in rows(
            db, "SELECT indexname FROM pg_indexes WHERE tablename = 'records'")}
    return {r["name"] for r in rows(db, "SELECT name FROM sqlite_master WHERE type = 'index'"
                                        " AND tbl_name = 'records'")}


def test_a_new_database_has_no_trace_index_on_sqlite_and_keeps_it_on_postgres(
        db: str, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    if db.startswith("postgresql://"):
        assert "idx_records_trace_id" in _records_indexes(db)
        assert trace_records(connect_reader(db), "t") == ("trace_id = ?", ("t",))
        return
    assert "idx_records_trace_id" not in _records_indexes(db)
    assert all(name != "idx_records_trace_id" for name, _ in migrations.REBUILT_INDEXES)
    # a bulk prune drops and rebuilds its indexes: never this one
    from tracescore.store import retention

    monkeypatch.setattr(retention, "BULK_MIN_RECORDS", 1)  # (a bulk run on a small database)
    store = open_store(db)
    try:
        res = prune(store, Retention(max_age_s=DAY), now=NOW + 60 * DAY)
        assert res.records > 0 and res.bulk_indexes == ["idx_scores_name_value"]
    finally:
        store.close()
    assert "idx_records_trace_id" not in _records_indexes(db)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_version_5_database_loses_the_index_and_answers_the_same(db: str,
                                                                    world: World) -> None:
    # what version 5 left: the same tables plus the index (version 1's DDL)
    conn = sqlite3.connect(db)
    conn.execute("CREATE INDEX idx_records_trace_id ON records(trace_id)")
    conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    before = {t: _ids(db, "SELECT record_id FROM records WHERE trace_id = ?", t)
              for t in world.traces}
    store = open_store(db)  # the upgrade
    try:
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                                  ).fetchone()[0] == str(migrations.SQLITE_MIGRATIONS[-1].version)
        assert "idx_records_trace_id" not in _records_indexes(db)
        for t in [*world.traces, *world.absent]:
            assert sorted((r.record_id,) for r in store.records_for_trace(t)) \
                == before.get(t, [])
    finally:
        store.close()
    store = open_store(db)  # opened again: nothing to migrate, nothing built back
    try:
        assert store._schema_ready()
    finally:
        store.close()
    assert "idx_records_trace_id" not in _records_indexes(db)
