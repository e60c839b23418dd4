"""The PostgreSQL backend (psycopg 3): one database shared by a fleet of app replicas and
scoring workers.

Same method set and semantics as the SQLite :class:`~.sqlite.Store` (see
:class:`~.base.StoreAPI`); every SQL statement of this backend is in this module. Jobs are a
distributed queue: :meth:`PostgresStore.lease_jobs` is one ``UPDATE … WHERE job_id IN
(SELECT … FOR UPDATE SKIP LOCKED) RETURNING …`` statement, so any number of workers on any
number of hosts lease disjoint jobs without waiting on each other; completion is guarded by the
lease owner exactly as on SQLite, so each persisted job is scored once. The hourly rollups are
updated in the writing transaction as on SQLite (:mod:`.rollup`); locks are taken in one order
everywhere — records (by id), jobs, rollup rows (by key) — so concurrent writers never deadlock.

One store per thread (one connection, autocommit; :meth:`transaction` opens a real
transaction, nested ones are savepoints). A broken connection (the server restarted, a
network cut) is replaced on the next call: the caller sees one error, never a dead store.
Every method blocks and must never run on the app's request path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .._internal.secrets import scrub_value
from .._internal.validate import clean_name
from ..record import RagRecord
from ..sampling import Decision
from ..score import Score
from .compat import connect
from .labels import LabelsMixin
from .migrations import OPEN_JOBS, REC_OF, migrate_postgres
from .postgres_embeddings import PostgresEmbeddingCache
from .postgres_jobs import PgJobs
from .postgres_sql import (  # noqa: F401 (re-exported: their old home)
    _LEASE,
    _LEASE_LOST,
    NOW,
    _nul_free,
)
from .rollup import Delta, QmarkConnection, count_skips
from .rows import (
    _CREATED,
    _NO_SEGMENTS,
    _RECORD_COLS,
    _SEG,
    METRIC_COLS,
    NewJob,
    add_record_row,
    clean_text,
    dumps,
    metric_row,
    record_row,
)
from .segments import NONE_SEG, OVERFLOW_COUNTER, SegmentResolver, SegmentSpec
from .sessions import note_turns

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("a postgresql:// database needs psycopg: "
                      "pip install 'tracescore[postgres]'") from exc

__all__ = ["PostgresEmbeddingCache", "PostgresStore", "connect", "open_jobs"]

#: tracescore's tables (sizes for :meth:`PostgresStore.used_bytes`)
TABLES = ("records", "jobs", "scores", "counters", "metrics", "judge_cache", "judge_calls",
          "feedback", "judge_health", "embedding_cache", "rate_limits", "meta",
          "segments", "segment_values", "hourly_records", "hourly_scores", "hourly_bins",
          "hourly_skips", "hourly_judge_decisions", "hourly_judge_scores", "labels",
          "label_plan", "judge_canary")


#: a row's ``rec`` in its VALUES (the triggers fire only without it: schema 14)
_REC_OF = REC_OF.replace("?", "%s")


def open_jobs(url: str, metrics: Sequence[str] | None) -> tuple[int, float]:
    """(open jobs, seconds since the oldest open job was created/re-opened/leased) on a short
    connection: the queue depth a worker Deployment is scaled on (metric reader thread)."""
    sql = f"SELECT count(*), min(coalesce(updated_at, created_at)) FROM jobs WHERE {OPEN_JOBS}"
    args: tuple[Any, ...] = ()
    if metrics is not None:
        sql += " AND metric = ANY(%s)"
        args = (list(metrics),)
    with connect(url, timeout_s=2.0) as conn:
        n, oldest = conn.execute(sql, args).fetchone()  # type: ignore[misc]
    return int(n), (max(0.0, time.time() - float(oldest)) if oldest is not None else 0.0)


class PostgresStore(PgJobs, LabelsMixin):
    """The PostgreSQL backend of :class:`~.base.StoreAPI` (labels:
    :class:`.labels.LabelsMixin`)."""

    dialect = "postgres"
    #: many hosts: redelivery must leave the scores of live workers alone
    shared = True

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        from .._internal.db_urls import redact_url

        self.url = url
        self.name = redact_url(url)
        self.path = self.name  # messages name the database as on SQLite
        self.timeout_s = timeout_s
        self._conn: psycopg.Connection[Any] | None = None
        #: records → seg_id (cached per store object, so per thread)
        self.segmenter = SegmentResolver()
        migrate_postgres(self)

    @property
    def conn(self) -> psycopg.Connection[Any]:
        c = self._conn
        if c is None or c.closed or c.broken:
            if c is not None:
                c.close()
            c = self._conn = connect(self.url, timeout_s=self.timeout_s)
        return c

    def _drop_connection(self) -> None:
        # After an OperationalError the connection may be half-dead (e.g. a server shutdown
        # caught mid-pipeline, not yet flagged broken): the next call opens a fresh one.
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass

    def _x(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()) -> psycopg.Cursor[Any]:
        try:
            return self.conn.execute(sql, args)
        except psycopg.OperationalError:
            self._drop_connection()
            raise

    def _row(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        """The one row an aggregate or RETURNING statement gives."""
        row = self._x(sql, args).fetchone()
        assert row is not None, sql
        return row

    def _many_returning(self, sql: str, rows: Iterable[Sequence[Any]]) -> list[Any]:
        """``executemany`` of a ``… RETURNING`` statement: every row returned."""
        rows = list(rows)
        if not rows:
            return []
        out: list[Any] = []
        try:
            with self.conn.cursor() as cur:
                cur.executemany(sql, rows, returning=True)
                while True:
                    out.extend(cur.fetchall())
                    if not cur.nextset():
                        break
        except psycopg.OperationalError:
            self._drop_connection()
            raise
        return out

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """``executemany``; returns the rows affected, summed over the statements."""
        rows = list(rows)
        if not rows:
            return 0
        try:
            with self.conn.cursor() as cur:
                cur.executemany(sql, rows)
                return max(cur.rowcount, 0)
        except psycopg.OperationalError:
            self._drop_connection()
            raise

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self.conn
        with conn.transaction():
            yield conn

    def unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the server cannot be reached or cannot take the write right
        now (connection lost, shutting down, disk full, lock timeout: psycopg's
        ``OperationalError``), not a bad statement: the writer then keeps its batch and
        retries instead of dropping it."""
        return isinstance(exc, psycopg.OperationalError)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- retention (:mod:`.retention`): the PostgreSQL part of pruning ------------------------
    def used_bytes(self) -> tuple[int, int]:
        """(bytes of tracescore's tables with their indexes and TOAST, bytes of the whole
        database). Deleted rows do not make either smaller: autovacuum keeps their space for
        new rows (so the pruner applies no size limit on PostgreSQL)."""
        row = self._row(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0), "
            "pg_database_size(current_database()) FROM pg_class c "
            "WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace "
            "AND c.relname = ANY(%s)", (list(TABLES),))
        return int(row[0]), int(row[1])

    def auto_vacuum_mode(self) -> str:
        return "autovacuum"

    def give_back_space(self, pages_per_step: int = 2048, *, pause_s: float = 0.05,
                        stop: Any = None) -> int:
        """Nothing to do: autovacuum makes the space of deleted rows reusable."""
        return 0

    def vacuum_full(self) -> None:
        """Nothing to do (``tracescore prune --vacuum`` says so): autovacuum reclaims the
        space of deleted rows for new ones; a ``VACUUM FULL`` to shrink the files would lock
        the tables against the fleet and is left to the database's operators."""

    # -- feedback, metrics, counters ---------------------------------------------------------
    def add_feedback(self, trace_id: str, name: str, value: float | None, label: str | None,
                     comment: str | None, created_at: float) -> None:
        self._x("INSERT INTO feedback(trace_id, name, value, label, comment, created_at) "
                "VALUES (%s,%s,%s,%s,%s,%s)",
                (trace_id, name, value, label,
                 _nul_free(clean_text(comment)) if comment else None, created_at))

    def register_metrics(self, metrics: Sequence[Any]) -> None:
        now = time.time()
        with self.transaction():
            self._many(
                "INSERT INTO metrics(" + ",".join(METRIC_COLS) + ") VALUES ("
                + ",".join(["%s"] * len(METRIC_COLS)) + ") ON CONFLICT (metric) DO UPDATE SET "
                + ", ".join(f"{c}=excluded.{c}" for c in METRIC_COLS[1:]),
                [metric_row(m, now) for m in metrics],
            )

    def bump_counters(self, counters: Mapping[str, int]) -> None:
        self._many(
            "INSERT INTO counters(name, value) VALUES (%s, %s) ON CONFLICT (name) "
            "DO UPDATE SET value = counters.value + excluded.value",
            [(k, v) for k, v in sorted(counters.items()) if v],
        )

    def counters(self) -> dict[str, int]:
        return {k: int(v) for k, v in self._x("SELECT name, value FROM counters")}

    # -- judge ---------------------------------------------------------------------------------
    def judge_cache_get(self, key: str) -> Any:
        row = self._x("SELECT value FROM judge_cache WHERE key=%s", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def judge_cache_put(self, key: str, step: str, model: str, version: str, value: Any,
                        input_tokens: int, output_tokens: int) -> None:
        self._x(
            "INSERT INTO judge_cache VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (key) DO "
            "UPDATE SET value=excluded.value, input_tokens=excluded.input_tokens, "
            "output_tokens=excluded.output_tokens, created_at=excluded.created_at",
            # a reply may quote a key (the judge read it somewhere): scrubbed like a score
            (key, step, clean_name(model), version, _nul_free(dumps(scrub_value(value))),
             input_tokens, output_tokens, time.time()),
        )

    def judge_call_log(self, *, record_id: str | None, step: str, model: str,
                       input_tokens: int, output_tokens: int, latency_ms: float,
                       cost_usd: float | None, error: str | None) -> None:
        self._x(
            "INSERT INTO judge_calls(record_id, step, model, input_tokens, output_tokens, "
            "latency_ms, cost_usd, error, created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (record_id, step, model, input_tokens, output_tokens, latency_ms, cost_usd,
             _nul_free(error), time.time()),
        )

    def judge_cost_today(self) -> float:
        day = time.time() - time.time() % 86400
        row = self._row("SELECT coalesce(sum(cost_usd), 0) FROM judge_calls "
                        "WHERE created_at >= %s", (day,))
        return float(row[0])

    def set_judge_health(self, model: str, agreement: float, cases: int, degenerate: bool,
                         detail: Any) -> None:
        self._x(
            "INSERT INTO judge_health VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT (model) DO UPDATE "
            "SET agreement=excluded.agreement, cases=excluded.cases, "
            "degenerate=excluded.degenerate, detail=excluded.detail, "
            "checked_at=excluded.checked_at",
            (model, agreement, cases, int(degenerate), _nul_free(dumps(detail)), time.time()),
        )

    def take_rate_token(self, name: str, per_minute: float, burst: float) -> float:
        """A fleet-wide token bucket held in ``rate_limits`` (the database's clock): 0.0 when
        a token was taken, else the seconds until one is due. One row lock per call, so
        workers on every host draw from the same bucket."""
        rate = per_minute / 60.0
        refill = (f"LEAST(%(cap)s, rate_limits.tokens + ({NOW} - rate_limits.updated_at)"
                  " * %(rate)s)")
        args = {"name": name, "cap": burst, "rate": rate}
        row = self._x(
            f"INSERT INTO rate_limits(name, tokens, updated_at) VALUES (%(name)s, "
            f"%(cap)s - 1, {NOW}) ON CONFLICT (name) DO UPDATE SET tokens = {refill} - 1, "
            f"updated_at = {NOW} WHERE {refill} >= 1 RETURNING tokens", args,
        ).fetchone()
        if row is not None:
            return 0.0
        row = self._x(f"SELECT (1 - {refill}) / %(rate)s FROM rate_limits WHERE name=%(name)s",
                      args).fetchone()
        return max(0.01, float(row[0])) if row is not None else 0.01

    # -- writer side ---------------------------------------------------------------------------
    def write_batch(self, records: Sequence[tuple[RagRecord, Decision]], jobs: Sequence[NewJob],
                    counters: Mapping[str, int] | None = None, *,
                    keep_full_text: bool = True, segments: SegmentSpec | None = None,
                    scored: Sequence[tuple[NewJob, Sequence[Score]]] = (),
                    delivery: str | None = None) -> list[list[tuple[int, Score]] | None]:
        """Persist records and their jobs in one transaction (idempotent on replays), with
        their contribution to the hourly rollups (only rows the inserts returned count);
        ``keep_full_text=False``: unsampled records are stored compact (as on SQLite);
        ``segments``, ``scored`` and ``delivery``: as on SQLite."""
        now = time.time()
        spec = segments or _NO_SEGMENTS
        try:
            segs = self.segmenter.resolve(self, [r for r, _ in records], spec, now)
            rows = [tuple(_nul_free(v) for v in record_row(r, d, now, keep_full_text, spec,
                                                           seg_id))
                    for (r, d), (seg_id, _) in zip(records, segs)]
            with self.transaction():
                inserted = {r[0] for r in self._many_returning(
                    "INSERT INTO records(" + ",".join(_RECORD_COLS) + ") VALUES ("
                    + ",".join(["%s"] * len(_RECORD_COLS)) + ") ON CONFLICT DO NOTHING "
                    "RETURNING record_id", rows)}
                delta = Delta()
                overflow: dict[str, int] = {}
                facts: dict[str, tuple[float, int]] = {}
                new_rows: list[tuple[Any, ...]] = []  # (the rows this batch inserted)
                for row, (_, over) in zip(rows, segs):
                    if row[0] not in inserted or row[0] in facts:
                        continue  # a replay (or twice in the batch: the first one went in)
                    add_record_row(delta, row)
                    facts[row[0]] = (row[_CREATED], row[_SEG])
                    new_rows.append(row)
                    for dim in over:
                        overflow[OVERFLOW_COUNTER + dim] = overflow.get(OVERFLOW_COUNTER + dim,
                                                                        0) + 1
                created = self._insert_jobs(jobs, now)
                refs: list[list[tuple[int, Score]] | None] = []
                if scored:
                    self._hold_records([j for j, _ in scored])
                    for job, scores in scored:
                        row = self._x(
                            "INSERT INTO jobs(record_id, metric, metric_version, status, "
                            "attempts, created_at, updated_at, rec) VALUES (%s,%s,%s,'done',1,"
                            "%s,%s," + _REC_OF + ") ON CONFLICT DO NOTHING RETURNING job_id",
                            (job.record_id, job.metric, job.metric_version, now,
                             now, job.record_id)).fetchone()
                        if row is None:
                            refs.append(None)
                            continue
                        fact = facts.get(job.record_id) \
                            or self._record_facts([job.record_id]).get(job.record_id)
                        refs.append(self._put_scores(
                            int(row[0]), job.record_id, job.metric, scores, delivery, "", now,
                            NONE_SEG if fact is None else fact[1], delta))
                count_skips(delta, [(j, None) for j in created], facts, self._record_facts)
                delta.write(QmarkConnection(self.conn))
                note_turns(QmarkConnection(self.conn), new_rows, now)
                if counters or overflow:
                    self.bump_counters({**(counters or {}), **overflow})
            return refs
        except BaseException:
            self.segmenter.reset()  # part of a caller's transaction that is rolled back
            raise

    def _hold_records(self, jobs: Sequence[NewJob]) -> None:
        """``FOR KEY SHARE`` on the records of ``jobs`` (inside the caller's transaction): a
        pruner locks the records it deletes ``FOR UPDATE SKIP LOCKED``, so it skips a record
        that is getting a job, and a job waits for a record being pruned (then finds it gone)
        — a record is never deleted under a job created for it."""
        ids = sorted({j.record_id for j in jobs})
        if ids:
            self._x("SELECT 1 FROM records WHERE record_id = ANY(%s) ORDER BY record_id "
                    "FOR KEY SHARE", (ids,))

    def _insert_jobs(self, jobs: Sequence[NewJob], now: float) -> list[NewJob]:
        """Insert the jobs that do not exist (inside the caller's transaction); the ones the
        insert returned, i.e. created now."""
        if not jobs:
            return []
        self._hold_records(jobs)
        made = {tuple(r) for r in self._many_returning(
            "INSERT INTO jobs(record_id, metric, metric_version, status, attempts, reason, "
            "created_at, updated_at, rec) VALUES (%s,%s,%s,%s,0,%s,%s,%s," + _REC_OF + ") "
            "ON CONFLICT DO NOTHING RETURNING record_id, metric, metric_version",
            [(j.record_id, j.metric, j.metric_version, j.status, j.reason, now, now,
              j.record_id) for j in jobs])}
        created = []
        for j in jobs:
            key = (j.record_id, j.metric, j.metric_version)
            if key in made:
                made.discard(key)
                created.append(j)
        return created

    def _record_facts(self, ids: Iterable[str], *, lock: bool = False
                      ) -> dict[str, tuple[float, int]]:
        """record_id → (created_at, seg_id) of the stored records among ``ids``; ``lock``:
        ``FOR NO KEY UPDATE`` in id order, so completions of one record's scores (on any
        worker) replace each other's rows one at a time."""
        ids = sorted(set(ids))
        if not ids:
            return {}
        rows = self._x("SELECT record_id, created_at, seg_id FROM records WHERE record_id = "
                       "ANY(%s) ORDER BY record_id" + (" FOR NO KEY UPDATE" if lock else ""),
                       (ids,)).fetchall()
        return {rid: (created or 0.0, NONE_SEG if seg is None else int(seg))
                for rid, created, seg in rows}

    def set_ground_truths(self, trace_id: str, ground_truths: Sequence[str]) -> list[RagRecord]:
        self._x("UPDATE records SET ground_truths = %s WHERE trace_id = %s",
                (_nul_free(dumps([clean_text(g) for g in ground_truths])), trace_id))
        return self.records_for_trace(trace_id)

    def insert_jobs_if_missing(self, jobs: Sequence[NewJob]) -> int:
        """Create the jobs that do not exist yet; returns how many were created."""
        with self.transaction():
            created = self._insert_jobs(jobs, time.time())
            delta = Delta()
            count_skips(delta, [(j, None) for j in created], {}, self._record_facts)
            delta.write(QmarkConnection(self.conn))
        return len(created)

    def upsert_jobs(self, jobs: Sequence[NewJob]) -> int:
        """Create jobs, or re-open skipped/done ones (new inputs arrived). Returns how many.

        Each job: its row is read ``FOR UPDATE`` (the old status and reason, for the skip
        rollup), then updated — or inserted ``ON CONFLICT DO NOTHING``, and read again if
        another process inserted it meanwhile."""
        now = time.time()
        n = 0
        changes: list[tuple[NewJob, Any]] = []
        with self.transaction():
            self._hold_records(jobs)
            for j in jobs:
                key = (j.record_id, j.metric, j.metric_version)
                while True:
                    old = self._x("SELECT job_id, status, reason FROM jobs WHERE rec = (SELECT seq"
                                  " FROM records WHERE record_id = %s) AND metric=%s"
                                  " AND metric_version=%s FOR UPDATE", key
                                  ).fetchone()
                    if old is None:
                        if self._x(
                                "INSERT INTO jobs(record_id, metric, metric_version, status, "
                                "attempts, reason, created_at, updated_at, rec) VALUES "
                                "(%s,%s,%s,%s,0,%s,%s,%s," + _REC_OF + ") ON CONFLICT DO "
                                "NOTHING RETURNING 1",
                                (*key, j.status, j.reason, now, now, j.record_id)
                        ).fetchone() is None:
                            continue  # inserted by another process just now: read it
                        changes.append((j, None))
                        n += 1
                    elif old[1] in ("skipped", "done"):
                        self._x("UPDATE jobs SET status=%s, reason=%s, attempts=0, "
                                "lease_owner=NULL, lease_until=NULL, updated_at=%s "
                                "WHERE job_id=%s", (j.status, j.reason, now, old[0]))
                        changes.append((j, (old[1], old[2])))
                        n += 1
                    break
            delta = Delta()
            count_skips(delta, changes, {}, self._record_facts)
            delta.write(QmarkConnection(self.conn))
        return n
