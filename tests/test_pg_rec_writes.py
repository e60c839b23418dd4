"""PostgreSQL schema 14 (issue 33, session 15): the store's own inserts of jobs and scores give
their ``rec`` (the record's ``seq``) in their VALUES, so the per-row safety-net triggers
(``scores_rec`` / ``jobs_rec``) fire only for a row inserted without it — and still fill it
then (a row written by another tool, ``copy-to-postgres``)."""

from __future__ import annotations

from typing import Any

import psycopg

from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, open_store

#: the trigger function made to fail: any row the store writes through it fails the test
FAILING = ("CREATE OR REPLACE FUNCTION tracescore_rec() RETURNS trigger AS $$ BEGIN"
           " RAISE EXCEPTION 'tracescore_rec fired for %', TG_TABLE_NAME; END $$"
           " LANGUAGE plpgsql")


def _records(n: int, start: int = 1) -> list[RagRecord]:
    return [RagRecord(trace_id=f"{i:032x}", span_id=f"{i:016x}", query=f"q{i}", answer="a")
            for i in range(start, start + n)]


def _unkeyed(conn: Any) -> list[Any]:
    return conn.execute(
        "SELECT 'job', j.job_id FROM jobs j JOIN records r ON r.record_id = j.record_id"
        " WHERE j.rec IS DISTINCT FROM r.seq UNION ALL"
        " SELECT 'score', s.score_id FROM scores s JOIN records r ON r.record_id = s.record_id"
        " WHERE s.rec IS DISTINCT FROM r.seq").fetchall()


def test_the_stores_inserts_give_rec_and_fire_no_trigger(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            defs = [r[0] for r in admin.execute(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
                " WHERE tgname IN ('scores_rec', 'jobs_rec') ORDER BY tgname").fetchall()]
            assert len(defs) == 2 and all("WHEN ((new.rec IS NULL))" in d for d in defs), defs
            admin.execute(FAILING)
        recs = _records(4)
        # the writer: records and their jobs; a record with its scores already computed
        store.write_batch([(r, Decision(1.0, ("m1", "m2"))) for r in recs[:3]],
                          [NewJob(r.record_id, m, "1") for r in recs[:3] for m in ("m1", "m2")])
        store.write_batch([(recs[3], Decision(1.0, ("m1",)))], [],
                          scored=[(NewJob(recs[3].record_id, "m1", "1"), [Score("m1", 0.5)])])
        # the worker: jobs leased and completed (scores inserted, then one replaced)
        jobs = store.lease_jobs("w", 10, 60.0, ["m1", "m2"])
        assert len(jobs) == 6
        assert all(x is not None for x in store.complete_jobs(
            "w", [(j, [Score(j.metric, 0.25)]) for j in jobs]))
        # jobs re-opened and created by new inputs; created if missing
        assert store.upsert_jobs([NewJob(recs[0].record_id, "m1", "2"),
                                  NewJob(recs[0].record_id, "m3", "1")]) == 2
        assert store.insert_jobs_if_missing([NewJob(recs[1].record_id, "m3", "1")]) == 1
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert _unkeyed(conn) == []
            assert conn.execute("SELECT count(*) FROM scores").fetchone()[0] == 7
            assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 10
    finally:
        store.close()


def test_a_row_inserted_without_rec_still_gets_it(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        rec = _records(1)[0]
        store.write_batch([(rec, Decision(0.0, ()))], [])
    finally:
        store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO jobs(record_id, metric, metric_version, status, attempts,"
                     " created_at) VALUES (%s, 'm', '1', 'done', 1, 0)", (rec.record_id,))
        conn.execute("INSERT INTO scores(record_id, trace_id, name, metric, metric_version,"
                     " value, status, created_at) VALUES (%s, %s, 'm', 'm', '1', 0.5, 'ok', 0)",
                     (rec.record_id, rec.trace_id))
        seq = conn.execute("SELECT seq FROM records").fetchone()[0]
        assert seq is not None
        assert conn.execute("SELECT rec FROM jobs").fetchall() == [(seq,)]
        assert conn.execute("SELECT rec FROM scores").fetchall() == [(seq,)]
        assert _unkeyed(conn) == []
