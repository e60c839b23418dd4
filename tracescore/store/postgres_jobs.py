"""The PostgreSQL backend's worker side of the records-and-jobs role and its scores role
(:class:`PgJobs`, part of :class:`~.postgres.PostgresStore`): leases with ``FOR UPDATE SKIP
LOCKED``, completions, stored scores and their delivery marks. State (the connection) is the
store's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from .._internal.secrets import scrub_score
from ..record import RagRecord
from ..score import Score
from .judge_rollup import JudgeDelta, judged_decisions, judged_scores
from .migrations import OPEN_JOBS
from .postgres_sql import _LEASE, _LEASE_LOST, _nul_free
from .rollup import Delta, QmarkConnection
from .rows import (
    _OLD_SCORES,
    Job,
    _json_safe,
    clean_text,
    dumps,
    row_to_record,
)
from .segments import NONE_SEG

if TYPE_CHECKING:
    import psycopg


class PgJobs:
    """The worker's leases and completions (:class:`~.roles.RecordsJobs`), scores and their
    delivery (:class:`~.roles.Scores`) on PostgreSQL."""

    # The host's (:class:`~.postgres.PostgresStore`), declared so type checkers see what this
    # role reads of it: the connection, its statement helpers, the transaction, record facts.
    if TYPE_CHECKING:
        @property
        def conn(self) -> psycopg.Connection[Any]: ...
        def _x(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()
               ) -> psycopg.Cursor[Any]: ...
        def _row(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()) -> Any: ...
        def transaction(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...
        def _record_facts(self, ids: Iterable[str], *, lock: bool = False
                          ) -> dict[str, tuple[float, int]]: ...

    # -- worker side ---------------------------------------------------------------------------
    def lease_jobs(self, owner: str, limit: int, lease_s: float,
                   metrics: Sequence[str]) -> list[Job]:
        """Atomically take up to ``limit`` pending jobs of ``metrics``, at no attempt; rows
        another worker is leasing right now are skipped, not waited for. Jobs whose lease ran
        out: :meth:`lease_lost_job`."""
        now = time.time()
        args = {"owner": owner, "until": now + lease_s, "now": now, "metrics": list(metrics),
                "limit": limit}
        with self.transaction():
            rows = self._x(_LEASE.format(which="ORDER BY job_id LIMIT %(limit)s"),
                           args).fetchall()
            if rows:
                # A record's jobs go out together (as on SQLite: its judge jobs then share
                # calls, judge/pairing.py): the rest of the leased records' open jobs.
                # (by the records' seq the first statement returned: a lookup of the
                # records by id inside it let a young table's generic plan probe the records
                # once per open job — 13 ms a lease at 12,000 open jobs)
                rows += self._x(_LEASE.format(which="AND rec = ANY(%(recs)s)"),
                                {**args, "recs": sorted({r[6] for r in rows
                                                         if r[6] is not None})}).fetchall()
        return sorted((Job(*r[:6]) for r in rows), key=lambda j: j.job_id)

    def lease_lost_job(self, owner: str, lease_s: float, metrics: Sequence[str]) -> Job | None:
        """As :meth:`.sqlite.Store.lease_lost_job`: a job whose lease ran out (fewest
        attempts, then oldest), alone, the lost run counted (rows another worker is taking
        right now are skipped)."""
        now = time.time()
        row = self._x(_LEASE_LOST, {"owner": owner, "until": now + lease_s, "now": now,
                                    "metrics": list(metrics)}).fetchone()
        return None if row is None else Job(*row)

    def has_lost_jobs(self, metrics: Sequence[str]) -> bool:
        return self._x(f"SELECT 1 FROM jobs WHERE {OPEN_JOBS} AND status='leased' "
                       "AND lease_until < %s "
                       "AND metric = ANY(%s) LIMIT 1",
                       (time.time(), list(metrics))).fetchone() is not None

    def complete_jobs(self, owner: str, done: Sequence[tuple[Job, Sequence[Score]]],
                      delivery: str | None = None, *,
                      judge_models: Mapping[int, str] | None = None
                      ) -> list[list[tuple[int, Score]] | None]:
        jm = judge_models or {}  # job id → the judge model of its scores
        with self.transaction():  # one transaction, no savepoint per job
            return self._complete_many(owner, [(j, s, jm.get(j.job_id, "")) for j, s in done],
                                       delivery)

    def complete_job(self, job: Job, owner: str, scores: Sequence[Score],
                     delivery: str | None = None, *,
                     judge_model: str = "") -> list[tuple[int, Score]] | None:
        """Store a job's scores and mark it done, atomically, only if ``owner`` still holds
        the lease; None (nothing stored) when another worker took it over. Rollups as on
        SQLite (the record's row is locked while its scores are replaced)."""
        with self.transaction():
            return self._complete_many(owner, [(job, scores, judge_model)], delivery)[0]

    def _complete_many(self, owner: str, items: Sequence[tuple[Job, Sequence[Score], str]],
                       delivery: str | None) -> list[list[tuple[int, Score]] | None]:
        # (inside the caller's transaction) Records first, in id order, then jobs, then the
        # rollup rows in key order: every writer takes its locks in this order.
        now = time.time()
        facts = self._record_facts((job.record_id for job, _, _ in items), lock=True)
        qconn = QmarkConnection(self.conn)
        # (a job's scores change neither the decisions nor their records: read once)
        judged = judged_decisions(qconn, (job.record_id for job, _, _ in items))
        judged_before = judged_scores(qconn, judged)
        delta = Delta()
        out: list[list[tuple[int, Score]] | None] = []
        for job, scores, judge_model in items:
            out.append(self._complete(job, owner, scores, delivery, judge_model, now,
                                      facts.get(job.record_id, (0.0, NONE_SEG))[1], delta))
        delta.write(qconn)
        judge_sums = JudgeDelta()  # the adaptive judge's hourly sums (.judge_rollup)
        judge_sums.change(judged_before,
                          judged_scores(qconn, judged))
        judge_sums.write(qconn)
        return out

    def _complete(self, job: Job, owner: str, scores: Sequence[Score], delivery: str | None,
                  judge_model: str, now: float, seg_id: int,
                  delta: Delta) -> list[tuple[int, Score]] | None:
        cur = self._x(
            "UPDATE jobs SET status='done', lease_owner=NULL, lease_until=NULL, "
            "attempts = attempts + 1, updated_at=%s, reason=NULL WHERE job_id=%s "
            "AND status='leased' AND lease_owner=%s", (now, job.job_id, owner))
        if cur.rowcount != 1:
            return None
        return self._put_scores(job.job_id, job.record_id, job.metric, scores, delivery,
                                judge_model, now, seg_id, delta)

    def _put_scores(self, job_id: int, record_id: str, job_metric: str,
                    scores: Sequence[Score], delivery: str | None, judge_model: str,
                    now: float, seg_id: int, delta: Delta) -> list[tuple[int, Score]]:
        """Store one job's scores (inside the caller's transaction) and add them to
        ``delta``, taking the contribution of the rows they replace away first."""
        names = {s.name for s in scores}
        for row in self._x(_OLD_SCORES.replace("?", "%s"), (record_id,)).fetchall():
            if row[0] in names and row[2] is not None:  # NULL seg_id: never rolled up
                delta.add_score(row[1], row[0], row[2], row[3], row[4], row[5], row[6], row[7],
                                row[8], -1)
        trace_id = record_id.split("-", 1)[0]
        ids: dict[str, int] = {}
        # Keys out of the texts (a judge's reason may quote the key it was sent): stored and,
        # through the returned scores, exported scrubbed.
        scores = [scrub_score(s) for s in scores]
        for s in scores:
            row = self._row(
                "INSERT INTO scores(job_id, record_id, trace_id, name, metric, "
                "metric_version, value, label, explanation, status, error, duration_ms, "
                "details, created_at, delivery, seg_id, judge_model, rec) VALUES "
                "(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,"
                "(SELECT seq FROM records WHERE record_id = %s)) "
                "ON CONFLICT (rec, name) DO UPDATE SET job_id=excluded.job_id, "
                "metric_version=excluded.metric_version, value=excluded.value, "
                "label=excluded.label, explanation=excluded.explanation, "
                "status=excluded.status, error=excluded.error, "
                "duration_ms=excluded.duration_ms, details=excluded.details, "
                "created_at=excluded.created_at, delivery=excluded.delivery, "
                "seg_id=excluded.seg_id, judge_model=excluded.judge_model "
                "RETURNING score_id",
                (job_id, record_id, trace_id, s.name, s.metric or job_metric,
                 s.metric_version, s.value, s.label,
                 _nul_free(clean_text(s.explanation)) if s.explanation else None, s.status,
                 _nul_free(clean_text(s.error)) if s.error else None, s.duration_ms,
                 _nul_free(dumps(_json_safe(dict(s.details)))), now, delivery, seg_id,
                 judge_model, record_id),
            )
            ids[s.name] = int(row[0])
            delta.add_score(now, s.name, seg_id, s.metric_version, judge_model,
                            s.metric or job_metric, s.value, s.label, s.status)
        return [(ids[s.name], s) for s in scores]

    def renew_leases(self, owner: str, job_ids: Sequence[int], lease_s: float) -> None:
        self._x("UPDATE jobs SET lease_until=%s WHERE job_id = ANY(%s) AND lease_owner=%s "
                "AND status='leased'", (time.time() + lease_s, list(job_ids), owner))

    def release_job(self, job: Job, owner: str, reason: str | None = None) -> None:
        self._x("UPDATE jobs SET status='pending', lease_owner=NULL, lease_until=NULL, "
                "attempts = attempts + 1, reason=%s WHERE job_id=%s AND lease_owner=%s",
                (_nul_free(reason), job.job_id, owner))

    def defer_job(self, job: Job, owner: str, delay_s: float, reason: str) -> None:
        self._x("UPDATE jobs SET status='pending', lease_owner=NULL, lease_until=%s, "
                "reason=%s WHERE job_id=%s AND lease_owner=%s",
                (time.time() + max(0.0, delay_s), _nul_free(reason[:500]), job.job_id, owner))

    def has_open_jobs(self, metrics: Sequence[str]) -> bool:
        return self._x(f"SELECT 1 FROM jobs WHERE {OPEN_JOBS} "
                       "AND metric = ANY(%s) LIMIT 1", (list(metrics),)).fetchone() is not None

    def open_job_count(self, metrics: Sequence[str] | None = None) -> int:
        sql = f"SELECT count(*) FROM jobs WHERE {OPEN_JOBS}"
        if metrics is None:
            return int(self._row(sql)[0])
        return int(self._row(sql + " AND metric = ANY(%s)", (list(metrics),))[0])

    def open_jobs_for(self, record_id: str) -> int:
        return int(self._row(f"SELECT count(*) FROM jobs WHERE rec = (SELECT seq FROM records"
                             f" WHERE record_id = %s) AND {OPEN_JOBS}", (record_id,))[0])

    def load_records(self, record_ids: Iterable[str]) -> dict[str, RagRecord]:
        ids = list(dict.fromkeys(record_ids))
        out: dict[str, RagRecord] = {}
        for i in range(0, len(ids), 500):
            cur = self._x("SELECT * FROM records WHERE record_id = ANY(%s)", (ids[i:i + 500],))
            cols = [c.name for c in cur.description or ()]
            for row in cur:
                rec = row_to_record(dict(zip(cols, row)))
                out[rec.record_id] = rec
        return out

    def records_for_trace(self, trace_id: str) -> list[RagRecord]:
        cur = self._x("SELECT * FROM records WHERE trace_id=%s", (trace_id,))
        cols = [c.name for c in cur.description or ()]
        return [row_to_record(dict(zip(cols, row))) for row in cur]

    def scores_for(self, record_id: str, undelivered_only: bool = False) -> list[dict[str, Any]]:
        # (a score whose record is not stored has no rec: found by its record id)
        sql = ("SELECT * FROM scores WHERE (rec = (SELECT seq FROM records WHERE record_id = %s)"
               " OR (rec IS NULL AND record_id = %s))")
        if undelivered_only:
            sql += " AND delivery IS NULL"
        cur = self._x(sql + " ORDER BY score_id", (record_id, record_id))
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, row)) for row in cur]

    def mark_delivered(self, score_ids: Sequence[int], how: str) -> None:
        self.mark_delivered_many([(score_ids, how)])

    def mark_delivered_many(self, batches: Sequence[tuple[Sequence[int], str]]) -> None:
        with self.transaction():
            for ids, how in batches:
                self._x("UPDATE scores SET delivery=%s WHERE score_id = ANY(%s) AND "
                        "(delivery IS NULL OR starts_with(delivery, 'redelivering:'))",
                        (how, list(ids)))

    def undelivered_record_ids(self, limit: int = 1000,
                               older_than: float | None = None) -> list[str]:
        rows = self._x(
            "SELECT DISTINCT s.record_id FROM scores s WHERE s.delivery IS NULL "
            "AND s.created_at <= %s AND NOT EXISTS (SELECT 1 FROM jobs j WHERE "
            "j.rec = s.rec AND j.status IN ('pending','leased')) LIMIT %s",
            (float("inf") if older_than is None else older_than, limit),
        ).fetchall()
        return [r[0] for r in rows]

    def claim_redelivery(self, record_id: str, owner: str,
                         older_than: float) -> list[dict[str, Any]]:
        """Take the undelivered scores of ``record_id`` for a carrier span, so that of several
        workers sweeping at once only one sends them: they are marked ``redelivering:<owner>``
        (the carrier's export then marks them delivered)."""
        cur = self._x(
            "UPDATE scores SET delivery=%s WHERE (rec = (SELECT seq FROM records WHERE"
            " record_id = %s) OR (rec IS NULL AND record_id = %s)) AND delivery IS NULL "
            "AND created_at <= %s RETURNING *",
            (f"redelivering:{owner}", record_id, record_id, older_than))
        cols = [c.name for c in cur.description or ()]
        return sorted((dict(zip(cols, row)) for row in cur), key=lambda r: r["score_id"])
