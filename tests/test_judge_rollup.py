"""Issue 33, session 14: the adaptive judge's estimates read from hourly sums
(``hourly_judge_decisions``, ``hourly_judge_scores``) instead of every decision row.

Real stores on both backends (SQLite file, PostgreSQL cluster of the ``db`` fixture): decisions
made through :func:`tracescore.store.judge_budget.decide`, scores written by
``complete_job(s)``, negative feedback reopening a decision, the pruner. The sums are checked
against the same sums recomputed from the raw rows after every lifecycle event, and the
readers' estimates against the row path (every decision row and
:func:`tracescore.stats.active.active_mean`)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from helpers import execute, is_pg, rows, store_clock

from tracescore.monitor import active_summary as AS
from tracescore.read.window import SegmentIndex, Window
from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, open_store
from tracescore.store import judge_rollup as JR
from tracescore.store.compat import connect_reader
from tracescore.store.judge_budget import decide
from tracescore.store.segments import SegmentSpec

HOUR = 3600
T0 = math.floor(1_780_000_000 / HOUR) * HOUR  # an hour's start
METRIC = "faith"
REL = 1e-9


def _rid(i: int) -> str:
    return f"{i + 1:032x}"


def _write_records(store: Any, n: int, start: int = 0) -> list[RagRecord]:
    recs = []
    for i in range(start, start + n):
        rec = RagRecord(trace_id=_rid(i), span_id=f"{i + 1:016x}", query=f"q{i}", answer="a")
        store.write_batch([(rec, Decision(0.1, (METRIC,)))], [NewJob(rec.record_id, METRIC, "1")],
                          None, segments=SegmentSpec(release=f"v{i % 2 + 1}"))
        recs.append(rec)
    return recs


def _decide(store: Any, rid: str, t: float, proxy: float, pi: float, wanted: bool,
            trace_id: str | None = None) -> Any:
    return decide(store, METRIC, rid, proxy, 0, t, 1e9, lambda _s, _n, _f: (pi, wanted),
                  trace_id=trace_id)


def _complete(store: Any, scores: dict[str, Score], version: str = "1") -> None:
    """Score ``scores`` (record id → score): new jobs of ``version`` when not "1"."""
    if version != "1":
        store.write_batch([], [NewJob(rid, METRIC, version) for rid in scores])
    jobs = [j for j in store.lease_jobs("w", 10_000, 60.0, [METRIC]) if j.record_id in scores]
    store.complete_jobs("w", [(j, [scores[j.record_id]]) for j in jobs], "none",
                        judge_models={j.job_id: "judge" for j in jobs})


def _fill(store: Any, n: int = 240, seed: int = 3) -> dict[str, dict[str, Any]]:
    """``n`` records over about 6.5 hours: proxies, π (some 0, some 1), selections; the
    selected scored ok (most), error, or not yet; a few unselected with an ok score anyway."""
    rng = random.Random(seed)
    _write_records(store, n)
    facts: dict[str, dict[str, Any]] = {}
    scores: dict[str, Score] = {}
    for i in range(n):
        rid = _rid(i) + "-" + f"{i + 1:016x}"
        f = rng.random()
        pi = 0.0 if rng.random() < 0.08 else 1.0 if rng.random() < 0.1 else rng.uniform(0.05, 1)
        want = rng.random() < pi
        d = _decide(store, rid, T0 + 1000 + i * 97.3, f, pi, want)
        facts[rid] = {"selected": d.selected, "pi": d.pi, "proxy": f}
        y = min(1.0, max(0.0, f + rng.gauss(0, 0.25)))
        u = rng.random()
        if d.selected and u < 0.85:
            scores[rid] = Score(METRIC, y)
        elif d.selected and u < 0.93:
            scores[rid] = Score.failed(METRIC, "judge down")
        elif not d.selected and u < 0.05:
            scores[rid] = Score(METRIC, y)  # not selected: not a judged term
    _complete(store, scores)
    return facts


def _table(db: str) -> dict[tuple[Any, ...], list[float]]:
    out = {}
    for r in rows(db, "SELECT * FROM hourly_judge_decisions"):
        out[("d", int(r["hour"]), r["metric"], int(r["seg_id"]))] = [float(r[c]) for c in JR.DECISION_FIELDS]
    for r in rows(db, "SELECT * FROM hourly_judge_scores"):
        out[("j", int(r["hour"]), r["metric"], r["name"], int(r["seg_id"]))] = [
            float(r[c]) for c in JR.JUDGED_FIELDS]
    return out


def _rebuilt(db: str) -> dict[tuple[Any, ...], list[float]]:
    conn = connect_reader(db)
    try:
        delta = JR.sums_from_rows(conn, "postgres" if is_pg(db) else "sqlite")
    finally:
        conn.close()
    out = {("d", *k): [float(x) for x in a] for k, a in delta.decisions.items()}
    out.update({("j", *k): [float(x) for x in a] for k, a in delta.judged.items()})
    return out


def _same(got: dict[Any, list[float]], want: dict[Any, list[float]]) -> None:
    """Equal up to float rounding; a key present on one side only must be all zeros."""
    for key in set(got) | set(want):
        g, w = got.get(key), want.get(key)
        size = len(g if g is not None else w)  # type: ignore[arg-type]
        g, w = g or [0.0] * size, w or [0.0] * size
        for a, b in zip(g, w):
            assert a == pytest.approx(b, rel=1e-9, abs=1e-9), (key, g, w)


# ------------------------------------------------------------------------------------------
def test_every_lifecycle_event_changes_the_sums_as_the_rows_do(db: str,
                                                               monkeypatch: Any) -> None:
    store_clock(monkeypatch, T0 + 12 * HOUR)
    store = open_store(db)
    try:
        facts = _fill(store)
        got = _table(db)
        assert any(k[0] == "j" for k in got) and any(k[0] == "d" for k in got)
        _same(got, _rebuilt(db))
        unselected = [r for r, f in facts.items() if not f["selected"] and f["pi"] > 0]
        errored = [r["record_id"] for r in rows(
            db, "SELECT s.record_id FROM scores s JOIN judge_decisions d ON d.record_id ="
                " s.record_id WHERE s.status = 'error' AND d.selected = 1")]
        judged_ok = [r["record_id"] for r in rows(
            db, "SELECT s.record_id FROM scores s JOIN judge_decisions d ON d.record_id ="
                " s.record_id WHERE s.status = 'ok' AND d.selected = 1")]
        assert unselected and errored and judged_ok

        def totals() -> tuple[float, float, float]:
            t = _table(db)
            dec = [sum(a[i] for k, a in t.items() if k[0] == "d") for i in (2, 3)]
            return dec[0], dec[1], sum(a[0] for k, a in t.items() if k[0] == "j")

        sel0, nu0, n0 = totals()
        # negative feedback reopens an unselected decision: π → 1, selected, not judged yet
        rid = unselected[0]
        store.add_feedback(rid.split("-")[0], "thumbs", 0.0, None, None, T0 + 5 * HOUR)
        assert _decide(store, rid, T0 + 11 * HOUR, 0.5, 0.3, False,
                       trace_id=rid.split("-")[0]).pi == 1.0
        assert totals() == (sel0 + 1, nu0 - 1, n0)
        _same(_table(db), _rebuilt(db))
        # its judged score lands (π = 1); an error is replaced by an ok score; an ok score by
        # an error
        _complete(store, {rid: Score(METRIC, 0.25), errored[0]: Score(METRIC, 0.75),
                          judged_ok[0]: Score.failed(METRIC, "timeout")}, version="2")
        assert totals() == (sel0 + 1, nu0 - 1, n0 + 1)
        _same(_table(db), _rebuilt(db))
        # an ok value replaced by another ok value: the sums move, the count does not
        before = _table(db)
        _complete(store, {judged_ok[1]: Score(METRIC, 0.123)}, version="3")
        assert totals() == (sel0 + 1, nu0 - 1, n0 + 1) and _table(db) != before
        _same(_table(db), _rebuilt(db))
        # a replay of a decision changes nothing
        before = _table(db)
        _decide(store, judged_ok[2], T0 + 11 * HOUR, 0.5, 0.5, True)
        assert _table(db) == before
    finally:
        store.close()


def _close(a: Any, b: Any, what: str) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=REL, abs=1e-12), what
    else:
        assert a == b, what


def _same_summary(got: Any, want: Any) -> None:
    assert (got is None) == (want is None)
    if got is None:
        return
    for attr in ("decided", "judged", "not_represented", "missing", "notes"):
        _close(getattr(got, attr), getattr(want, attr), attr)
    for attr in ("n", "value", "lo", "hi", "note", "method"):
        _close(getattr(got.active.estimate, attr), getattr(want.active.estimate, attr), attr)
        _close(getattr(got.judged_plain, attr), getattr(want.judged_plain, attr),
               "plain " + attr)
    for attr in ("n_proxied", "se", "se_terms", "proxy_mean", "a", "b"):
        _close(getattr(got.active, attr), getattr(want.active, attr), attr)


WINDOWS = [Window(None, None), Window(T0 + 1234.5, T0 + 5 * HOUR + 77),
           Window(T0 + HOUR, T0 + 4 * HOUR), Window(T0 + 2 * HOUR + 10, T0 + 2 * HOUR + 2000),
           Window(T0 + 3 * HOUR + 5, None)]


@pytest.mark.parametrize("where", [None, {"release": "v1"}])
def test_the_readers_equal_the_row_path(db: str, monkeypatch: Any,
                                        where: dict[str, str] | None) -> None:
    store_clock(monkeypatch, T0 + 12 * HOUR)
    store = open_store(db)
    try:
        _fill(store, seed=11)
    finally:
        store.close()
    conn = connect_reader(db)
    try:
        seg = SegmentIndex(conn)
        ids = seg.matching(where)
        for w in WINDOWS:
            got = AS.active_summaries(conn, w, {METRIC: METRIC}, where=where, seg=seg)
            want = AS.summary_from_rows(conn, METRIC, METRIC, w, ids)
            assert want is not None and want.active.estimate.value is not None
            _same_summary(got.get(METRIC), want)
        for bucket_s, since in ((HOUR, None), (2 * HOUR, T0 + 1800.5), (1800, T0)):
            got_t = AS.active_timeline(conn, METRIC, METRIC, bucket_s=bucket_s, since=since,
                                       where=where, seg=seg)
            want_t = AS.timeline_from_rows(conn, METRIC, METRIC, bucket_s=bucket_s,
                                           since=since, ids=ids)
            assert len(got_t) == len(want_t) >= 2
            for g, x in zip(got_t, want_t):
                assert (g.start, g.count) == (x.start, x.count)
                for a, b in ((g.mean, x.mean), (g.lo, x.lo), (g.hi, x.hi)):
                    assert a == pytest.approx(b, rel=REL)
    finally:
        conn.close()


def test_prune_leaves_the_sums_and_the_estimate(db: str, monkeypatch: Any) -> None:
    """Like every ``hourly_*`` table, the sums hold every row ever written: a window of whole
    hours gives the same estimate after its raw decisions and scores are pruned."""
    from tracescore.store.retention import prune
    from tracescore.store.retention_policy import Retention

    store_clock(monkeypatch, T0 + 12 * HOUR)
    store = open_store(db)
    try:
        _fill(store, seed=5)
        before = _table(db)
        w = Window(T0, T0 + 8 * HOUR)
        conn = connect_reader(db)
        try:
            est0 = AS.active_summaries(conn, w, {METRIC: METRIC})[METRIC]
        finally:
            conn.close()
        res = prune(store, Retention(max_age_s=86400, pause_s=0.0), now=T0 + 90 * HOUR,
                    vacuum=False)
        assert res.judge_decisions > 0
        assert _table(db) == before
        conn = connect_reader(db)
        try:
            _same_summary(AS.active_summaries(conn, w, {METRIC: METRIC})[METRIC], est0)
            # (the raw rows left speak for fewer decisions: prune took the others)
            rest = AS.summary_from_rows(conn, METRIC, METRIC, w, None)
            assert rest is None or rest.decided == est0.decided - res.judge_decisions
        finally:
            conn.close()
    finally:
        store.close()


def test_the_migration_fills_the_sums_of_an_existing_database(db: str,
                                                              monkeypatch: Any) -> None:
    from tracescore.store import migrations

    store_clock(monkeypatch, T0 + 12 * HOUR)
    store = open_store(db)
    try:
        _fill(store, seed=8)
    finally:
        store.close()
    want = _table(db)
    assert want
    steps = migrations.POSTGRES_MIGRATIONS if is_pg(db) else migrations.SQLITE_MIGRATIONS
    at = next(i for i, s in enumerate(steps) if "judge's decisions" in s.description)
    # back to the version before the sums' step (the steps after it run again: each may)
    execute(db, "DROP TABLE hourly_judge_decisions", "DROP TABLE hourly_judge_scores",
            f"UPDATE meta SET value = '{steps[at - 1].version}' WHERE key = 'schema_version'")
    open_store(db).close()
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'")[0]["value"] == str(
        steps[-1].version)
    _same(_table(db), want)


@pytest.mark.parametrize("older_source", [False, True])
def test_copy_to_postgres_brings_the_sums(tmp_path: Any, pg_url: str, monkeypatch: Any,
                                          older_source: bool) -> None:
    """``copy-to-postgres`` adds the source's sums to the target's (segments mapped); a
    source from before the sums has them computed from its rows. The target's estimate is
    the source's."""
    from tracescore.store.copy import copy_sqlite_to_postgres

    src = str(tmp_path / "history.db")
    store_clock(monkeypatch, T0 + 12 * HOUR)
    store = open_store(src)
    try:
        _fill(store, seed=21)
    finally:
        store.close()
    if older_source:
        execute(src, "DROP TABLE hourly_judge_decisions", "DROP TABLE hourly_judge_scores")
    open_store(pg_url).close()
    copy_sqlite_to_postgres(src, pg_url)
    for w in (Window(None, None), Window(T0 + 3 * HOUR, T0 + 6 * HOUR)):
        got = []
        for db in (src, pg_url):
            conn = connect_reader(db)
            try:
                got.append(AS.active_summaries(conn, w, {METRIC: METRIC},
                                               where={"release": "v2"})[METRIC])
            finally:
                conn.close()
        _same_summary(got[1], got[0])
    assert len(rows(pg_url, "SELECT * FROM hourly_judge_scores")) > 0


def test_a_database_without_the_sums_is_read_from_its_rows(tmp_path: Any,
                                                           monkeypatch: Any) -> None:
    """``report --db`` on a database not migrated yet (no sums; or no judge tables at all)
    reads the rows, through the same sums."""
    db = str(tmp_path / "old.db")
    store_clock(monkeypatch, T0 + 12 * HOUR)
    store = open_store(db)
    try:
        _fill(store, seed=2)
    finally:
        store.close()
    w = Window(T0 + 1800, T0 + 5 * HOUR)
    conn = connect_reader(db)
    try:
        with_sums = AS.active_summaries(conn, w, {METRIC: METRIC})[METRIC]
    finally:
        conn.close()
    execute(db, "DROP TABLE hourly_judge_decisions", "DROP TABLE hourly_judge_scores")
    conn = connect_reader(db)
    try:
        _same_summary(AS.active_summaries(conn, w, {METRIC: METRIC})[METRIC], with_sums)
    finally:
        conn.close()
    execute(db, "DROP TABLE judge_decisions")
    conn = connect_reader(db)
    try:
        assert AS.active_summaries(conn, w, {METRIC: METRIC}) == {}
    finally:
        conn.close()
