"""The SQLite backend's records-and-jobs and scores roles (:class:`SqliteJobs`, part of
:class:`~.sqlite.Store`): the writer's batches, the worker's leases and completions, stored
scores and their delivery marks. State (the connection, the segment resolver) is the store's.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from .._internal.secrets import scrub, scrub_score
from ..record import RagRecord
from ..sampling import Decision
from ..score import Score
from .compat import trace_records
from .judge_rollup import JudgeDelta, judged_decisions, judged_scores
from .migrations import OPEN_JOBS, REC_OF
from .rollup import Delta, count_skips
from .rows import (
    _CREATED,
    _FACTS_OF,
    _INSERT_SCORE,
    _NO_SEGMENTS,
    _OLD_SCORES,
    _RECORD_COLS,
    _SEG,
    Job,
    NewJob,
    clean_text,
    dumps,
    record_row,
    row_to_record,
)
from .segments import NONE_SEG, OVERFLOW_COUNTER, SegmentResolver, SegmentSpec, _chunks
from .sessions import note_turns
from .sqlite_sql import _insert_keyed, _insert_rows, _score_values


class SqliteJobs:
    """Records and jobs (:class:`~.roles.RecordsJobs`), scores and their delivery
    (:class:`~.roles.Scores`) on SQLite."""

    # The host's (:class:`~.sqlite.Store`), declared so type checkers see what this role
    # reads of it: the connection, the database path, the segment resolver, the transaction.
    conn: sqlite3.Connection
    path: str
    segmenter: SegmentResolver
    if TYPE_CHECKING:
        def transaction(self) -> AbstractContextManager[Any]: ...

    # -- writer side ------------------------------------------------------------------------
    def write_batch(
        self,
        records: Sequence[tuple[RagRecord, Decision]],
        jobs: Sequence[NewJob],
        counters: Mapping[str, int] | None = None,
        *,
        keep_full_text: bool = True,
        segments: SegmentSpec | None = None,
        scored: Sequence[tuple[NewJob, Sequence[Score]]] = (),
        delivery: str | None = None,
    ) -> list[list[tuple[int, Score]] | None]:
        """Persist records and their jobs in one transaction (idempotent on replays), with
        their contribution to the hourly rollups (only rows actually inserted count).

        ``scored``: jobs of these records already scored on the writer (scores on write,
        :mod:`tracescore.scoring.on_write`): each is stored ``done`` after one run, with its
        scores (``delivery`` as :meth:`complete_job` takes it), in the same transaction as
        its record. Returns their ``(score_id, score)`` pairs, in order; None for a job that
        existed already (a replay: nothing of it is stored twice).

        ``keep_full_text=False``: records that no metric sampled are stored compact (no text;
        lengths and hashes instead, see :mod:`.compact`). ``segments``: the process's release,
        environment and declared metadata keys (each record's ``seg_id``; new segment values
        are admitted in a short transaction of their own first)."""
        now = time.time()
        spec = segments or _NO_SEGMENTS
        try:
            only = getattr(records, "records", None)  # (the writer's batch: queue._Pairs)
            segs = self.segmenter.resolve(
                self, only() if only is not None else [r for r, _ in records], spec, now)
            rows = [record_row(r, d, now, keep_full_text, spec, seg_id)
                    for (r, d), (seg_id, _) in zip(records, segs)]
            with self.transaction():
                # (each record's sequence given here, the next after the stored ones: the
                # records' insert trigger then does nothing, and this batch's jobs and scores
                # get their ``rec`` without a lookup — a replayed record keeps its own)
                top = int(self.conn.execute("SELECT coalesce(max(seq), 0) FROM records")
                          .fetchone()[0])
                inserted = self._insert_or_ignore(
                    "records", "record_id",
                    "INSERT OR IGNORE INTO records(" + ",".join(_RECORD_COLS) + ", seq) VALUES ("
                    + ",".join("?" * (len(_RECORD_COLS) + 1)) + ")",
                    [(*row, top + 1 + i) for i, row in enumerate(rows)], lambda i: rows[i][0])
                seq_of = {rows[i][0]: top + 1 + i for i in inserted}
                delta = Delta()
                overflow: dict[str, int] = {}
                add, facts_of = delta.add_record, _FACTS_OF
                for i in inserted:
                    add(*facts_of(rows[i]))
                    for dim in segs[i][1]:
                        overflow[OVERFLOW_COUNTER + dim] = overflow.get(OVERFLOW_COUNTER + dim,
                                                                        0) + 1
                created = self._insert_jobs(jobs, now, seq_of)
                refs = self._scored_on_write(
                    scored, {rows[i][0]: rows[i][_SEG] for i in inserted} if scored else {},
                    delivery, now, delta, seq_of)

                def record_facts(ids: Iterable[str]) -> dict[str, tuple[float, int]]:
                    # (only a batch with skipped jobs asks: no dict per record otherwise)
                    ours = {rows[i][0]: (rows[i][_CREATED], rows[i][_SEG]) for i in inserted}
                    out = {rid: ours[rid] for rid in ids if rid in ours}
                    rest = [rid for rid in ids if rid not in ours]
                    return {**out, **self._record_facts(rest)} if rest else out

                count_skips(delta, [(j, None) for j in created], {}, record_facts)
                delta.write(self.conn)
                note_turns(self.conn, (rows[i] for i in inserted), now)
                if counters or overflow:
                    self.bump_counters({**(counters or {}), **overflow})
            return refs
        except BaseException:
            # Part of a caller's transaction that is rolled back: forget what was admitted.
            self.segmenter.reset()
            raise

    def _insert_or_ignore(self, table: str, key_cols: str, sql: str,
                          rows: Sequence[Sequence[Any]],
                          key: Callable[[int], Any]) -> Sequence[int]:
        """``executemany`` an ``INSERT OR IGNORE`` into ``table`` (inside the caller's write
        transaction, which no other connection can interleave); the indexes of the rows it
        inserted (``key(i)``: row i's key; of equal keys the first row goes in). The common
        case — every row new — costs no query: the row count says so. Otherwise (a replay)
        the ``n`` rows inserted are those with the ``n`` largest rowids, up to the last one
        inserted (SQLite gives a new row the largest rowid + 1; no other connection writes
        meanwhile, and none of ours either: the statements run back to back)."""
        if not rows:
            return []
        n = _insert_rows(self.conn, sql, rows)
        if n == len(rows):
            return range(len(rows))
        if n == 0:
            return []
        last = self.conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        new = {r[0] if len(r) == 1 else tuple(r) for r in self.conn.execute(
            f"SELECT {key_cols} FROM {table} WHERE rowid > ?", (last - n,))}
        first: dict[Any, int] = {}
        for i in range(len(rows)):
            first.setdefault(key(i), i)
        return sorted(i for k, i in first.items() if k in new)

    def _existing_jobs(self, jobs: Sequence[NewJob]) -> dict[tuple[str, str, str],
                                                            tuple[str, str | None]]:
        """(record, metric, version) → (status, reason) of the jobs of ``jobs``' records."""
        out: dict[tuple[str, str, str], tuple[str, str | None]] = {}
        for chunk in _chunks(list(dict.fromkeys(j.record_id for j in jobs))):
            for rid, metric, version, status, reason in self.conn.execute(
                    "SELECT record_id, metric, metric_version, status, reason FROM jobs"
                    " WHERE rec IN (SELECT seq FROM records WHERE record_id IN ("
                    + ",".join("?" * len(chunk)) + "))", chunk):
                out[(rid, metric, version)] = (status, reason)
        return out

    def _insert_jobs(self, jobs: Sequence[NewJob], now: float,
                     seq_of: Mapping[str, int] | None = None) -> list[NewJob]:
        """INSERT OR IGNORE ``jobs`` (inside the caller's transaction); the ones created.
        ``seq_of``: the sequence of records written in this transaction (the others' is
        looked up)."""
        seq = seq_of or {}
        inserted = self._insert_or_ignore(
            "jobs", "record_id, metric, metric_version",
            "INSERT OR IGNORE INTO jobs(record_id, rec, metric, metric_version, status, attempts,"
            f" reason, created_at, updated_at) VALUES (?,coalesce(?,{REC_OF}),?,?,?,0,?,?,?)",
            [(j.record_id, seq.get(j.record_id), j.record_id, j.metric, j.metric_version,
              j.status, j.reason, now, now) for j in jobs],
            lambda i: (jobs[i].record_id, jobs[i].metric, jobs[i].metric_version))
        return [jobs[i] for i in inserted]

    def _record_facts(self, ids: Iterable[str]) -> dict[str, tuple[float, int]]:
        """record_id → (created_at, seg_id) of the stored records among ``ids``."""
        out: dict[str, tuple[float, int]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids))):
            for rid, created, seg in self.conn.execute(
                    "SELECT record_id, created_at, seg_id FROM records WHERE record_id IN ("
                    + ",".join("?" * len(chunk)) + ")", chunk):
                out[rid] = (created or 0.0, NONE_SEG if seg is None else int(seg))
        return out

    def bump_counters(self, counters: Mapping[str, int]) -> None:
        # one statement, not one step per counter (each step is a wait for the GIL: see
        # _insert_rows)
        rows = [(k, v) for k, v in counters.items() if v]
        if rows:
            self.conn.execute(
                "INSERT INTO counters(name, value) VALUES " + ",".join(["(?, ?)"] * len(rows))
                + " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                [x for row in rows for x in row])

    def counters(self) -> dict[str, int]:
        return {k: v for k, v in self.conn.execute("SELECT name, value FROM counters")}

    def set_ground_truths(self, trace_id: str, ground_truths: Sequence[str]) -> list[RagRecord]:
        """Replace the ground truths of every record in a trace; returns the updated records."""
        of_trace, args = trace_records(self, trace_id)
        with self.transaction():
            self.conn.execute(f"UPDATE records SET ground_truths = ? WHERE {of_trace}",
                              (dumps([clean_text(g) for g in ground_truths]), *args))
        return self.records_for_trace(trace_id)

    def insert_jobs_if_missing(self, jobs: Sequence[NewJob]) -> int:
        """Create the jobs that do not exist yet; returns how many were created (a skipped
        one counts in ``hourly_skips``)."""
        now = time.time()
        with self.transaction():
            created = self._insert_jobs(jobs, now)
            delta = Delta()
            count_skips(delta, [(j, None) for j in created], {}, self._record_facts)
            delta.write(self.conn)
        return len(created)

    def upsert_jobs(self, jobs: Sequence[NewJob]) -> int:
        """Create jobs, or re-open skipped/done ones (new inputs arrived). Returns how many.
        A skipped job re-opened leaves ``hourly_skips`` (−1), one created or re-opened as
        skipped enters it (+1)."""
        now = time.time()
        n = 0
        changes: list[tuple[NewJob, Any]] = []
        with self.transaction():
            existing = self._existing_jobs(jobs)
            for j in jobs:
                cur = self.conn.execute(
                    "INSERT INTO jobs(record_id, rec, metric, metric_version, status, attempts,"
                    f" reason, created_at, updated_at) VALUES (?,{REC_OF},?,?,?,0,?,?,?) "
                    "ON CONFLICT(rec, metric, metric_version) DO UPDATE SET "
                    "status = excluded.status, reason = excluded.reason, attempts = 0, "
                    "lease_owner = NULL, lease_until = NULL, updated_at = excluded.updated_at "
                    "WHERE jobs.status IN ('skipped', 'done')",
                    (j.record_id, j.record_id, j.metric, j.metric_version, j.status, j.reason,
                     now, now),
                )
                if cur.rowcount > 0:
                    key = (j.record_id, j.metric, j.metric_version)
                    changes.append((j, existing.get(key)))
                    existing[key] = (j.status, j.reason)
                n += cur.rowcount
            delta = Delta()
            count_skips(delta, changes, {}, self._record_facts)
            delta.write(self.conn)
        return n

    # -- worker side ------------------------------------------------------------------------
    def lease_jobs(
        self, owner: str, limit: int, lease_s: float, metrics: Sequence[str]
    ) -> list[Job]:
        """Atomically take up to ``limit`` pending jobs of ``metrics``. The lease costs no
        attempt (attempts count runs: a failed run when the job is given back, a lost one
        when :meth:`lease_lost_job` takes it, the last one when it is done); jobs whose lease
        ran out are not taken here, :meth:`lease_lost_job` takes them alone."""
        now = time.time()
        marks = ",".join("?" * len(metrics))
        with self.transaction():
            # (status, job_id) of the open jobs: index-friendly, also with a large backlog
            rows = self.conn.execute(
                "UPDATE jobs SET status='leased', lease_owner=?, lease_until=?, updated_at=? "
                f"WHERE job_id IN (SELECT job_id FROM jobs WHERE {OPEN_JOBS} AND "
                "status='pending' AND "
                "(lease_until IS NULL OR lease_until <= ?) AND metric IN (" + marks + ") "
                "ORDER BY job_id LIMIT ?) "
                "RETURNING job_id, record_id, metric, metric_version, attempts, created_at",
                (owner, now + lease_s, now, now, *metrics, limit),
            ).fetchall()
            if len(rows) >= limit:
                # (Fewer rows than the limit: every pending job is taken, its record's
                # siblings too — the transaction is exclusive.)
                # A record's jobs go out together (the limit may cut the last record's jobs,
                # and a pool with one free slot would take one job a time): its judge jobs
                # then run at the same moment and share calls (judge/pairing.py). So up to
                # len(metrics) - 1 jobs beyond ``limit``.
                for chunk in _chunks(list(dict.fromkeys(r[1] for r in rows))):
                    rows += self.conn.execute(
                        "UPDATE jobs SET status='leased', lease_owner=?, lease_until=?, "
                        "updated_at=? WHERE rec IN (SELECT seq FROM records WHERE record_id IN ("
                        + ",".join("?" * len(chunk))
                        + ")) AND metric IN (" + marks + ") AND status='pending' AND "
                        "(lease_until IS NULL OR lease_until <= ?) RETURNING job_id, "
                        "record_id, metric, metric_version, attempts, created_at",
                        (owner, now + lease_s, now, *chunk, *metrics, now)).fetchall()
        return sorted((Job(*r) for r in rows), key=lambda j: j.job_id)

    def lease_lost_job(self, owner: str, lease_s: float, metrics: Sequence[str]) -> Job | None:
        """Take a job of ``metrics`` whose lease ran out (its holder died or hung), alone,
        counting the lost run as an attempt; None if there is none. The caller runs it holding
        no other job: a job that kills its process each time then spends its own attempts
        only, not those of jobs leased beside it. Fewest attempts first, then the oldest: a
        job lost again waits behind the others, so a run of kills (a crash loop) does not hit
        the same innocent job again and again."""
        now = time.time()
        with self.transaction():
            row = self.conn.execute(
                "UPDATE jobs SET status='leased', lease_owner=?, lease_until=?, "
                "attempts = attempts + 1, updated_at=? WHERE job_id = (SELECT job_id FROM jobs "
                f"WHERE {OPEN_JOBS} AND status='leased' AND lease_until < ? AND metric IN ("
                + ",".join("?" * len(metrics)) + ") ORDER BY attempts, job_id LIMIT 1) "
                "RETURNING job_id, record_id, metric, metric_version, attempts, created_at",
                (owner, now + lease_s, now, now, *metrics)).fetchone()
        return None if row is None else Job(*row)

    def has_lost_jobs(self, metrics: Sequence[str]) -> bool:
        """A job of ``metrics`` waits whose lease ran out (a read: (status, lease_until))."""
        return self.conn.execute(
            f"SELECT 1 FROM jobs WHERE {OPEN_JOBS} AND status='leased' AND lease_until < ?"
            " AND metric IN ("
            + ",".join("?" * len(metrics)) + ") LIMIT 1",
            (time.time(), *metrics)).fetchone() is not None

    def complete_jobs(
        self, owner: str, done: Sequence[tuple[Job, Sequence[Score]]],
        delivery: str | None = None, *, judge_models: Mapping[int, str] | None = None,
    ) -> list[list[tuple[int, Score]] | None]:
        """:meth:`complete_job` for several jobs in one transaction (one commit);
        ``judge_models``: job id → the judge model of its scores (judge metrics)."""
        jm = judge_models or {}
        with self.transaction():
            return self._complete_many(owner, [(j, s, jm.get(j.job_id, "")) for j, s in done],
                                       delivery)

    def complete_job(
        self, job: Job, owner: str, scores: Sequence[Score], delivery: str | None = None, *,
        judge_model: str = "",
    ) -> list[tuple[int, Score]] | None:
        """Store a job's scores and mark it done, atomically, only if ``owner`` still holds it.

        Returns ``(score_id, score)`` pairs, or None (and stores nothing) when the lease was lost
        to another process: that process stores the scores instead, so each job is scored
        exactly once. ``delivery``: already known (``"none"``: there is no span pipeline).
        ``judge_model``: the model that judged (``""`` for a local metric). The scores enter
        the hourly rollups under the record's segment; a score replacing an older one of the
        same (record, name) first takes the old row's contribution away.
        """
        with self.transaction():
            return self._complete_many(owner, [(job, scores, judge_model)], delivery)[0]

    def _complete_many(self, owner: str, items: Sequence[tuple[Job, Sequence[Score], str]],
                       delivery: str | None) -> list[list[tuple[int, Score]] | None]:
        # (inside the caller's transaction, which is exclusive on SQLite)
        now = time.time()
        delta = Delta()
        # (a job's scores change neither the decisions nor their records: read once)
        judged = judged_decisions(self.conn, (job.record_id for job, _, _ in items))
        judged_before = judged_scores(self.conn, judged)
        out: list[list[tuple[int, Score]] | None] = []
        owned: set[int] | None = None
        if len(items) > 1:  # one statement marks them all; it says which were still ours
            owned = set()
            for chunk in _chunks([job.job_id for job, _, _ in items]):
                owned.update(r[0] for r in self.conn.execute(
                    "UPDATE jobs SET status='done', lease_owner=NULL, lease_until=NULL, "
                    "attempts = attempts + 1, updated_at=?, reason=NULL WHERE job_id IN ("
                    + ",".join("?" * len(chunk))
                    + ") AND status='leased' AND lease_owner=? RETURNING job_id",
                    (now, *chunk, owner)))
        for job, scores, judge_model in items:
            if owned is None:
                cur = self.conn.execute(
                    "UPDATE jobs SET status='done', lease_owner=NULL, lease_until=NULL, "
                    "attempts = attempts + 1, updated_at=?, reason=NULL WHERE job_id=? "
                    "AND status='leased' AND lease_owner=?", (now, job.job_id, owner))
                mine = cur.rowcount == 1
            else:
                mine = job.job_id in owned
                owned.discard(job.job_id)  # (a job twice in one call is stored once)
            if not mine:
                out.append(None)
                continue
            out.append(self._insert_scores(job.job_id, job.record_id, job.metric, scores,
                                           judge_model, delivery, now, delta))
        delta.write(self.conn)
        judge_sums = JudgeDelta()  # the adaptive judge's hourly sums (.judge_rollup)
        judge_sums.change(judged_before,
                          judged_scores(self.conn, judged))
        judge_sums.write(self.conn)
        return out

    def _scored_on_write(self, scored: Sequence[tuple[NewJob, Sequence[Score]]],
                         segs: Mapping[str, Any], delivery: str | None, now: float,
                         delta: Delta, seq_of: Mapping[str, int]
                         ) -> list[list[tuple[int, Score]] | None]:
        """:meth:`write_batch`'s ``scored`` jobs, stored ``done`` with their scores (inside
        its transaction): two statements for the whole batch, not two per job (each
        statement lets go of the GIL and waits to get it back behind a busy app: see
        :func:`_insert_rows`). ``segs``: record id -> seg_id of the records this batch
        inserted."""
        refs: list[list[tuple[int, Score]] | None] = [None] * len(scored)
        if not scored:
            return refs
        made = _insert_keyed(
            self.conn, "INSERT OR IGNORE INTO jobs(record_id, rec, metric, metric_version,"
            " status, attempts, created_at, updated_at) VALUES"
            f" (?,coalesce(?,{REC_OF}),?,?,'done',1,?,?)",
            [(j.record_id, seq_of.get(j.record_id), j.record_id, j.metric, j.metric_version,
              now, now) for j, _ in scored],
            "jobs", ("record_id", "metric", "metric_version"), (0, 3, 4))
        rest = [j.record_id for j, _ in scored if j.record_id not in segs]
        facts = self._record_facts(rest) if rest else {}
        values: list[tuple[Any, ...]] = []
        where: list[tuple[int, Score, int]] = []  # (index in scored, score, seg_id)
        for i, (job, scores) in enumerate(scored):
            job_id = made.pop((job.record_id, job.metric, job.metric_version), None)
            if job_id is None:
                continue  # it existed already (a replay), or twice in the batch
            seg = segs.get(job.record_id)
            seg_id = (NONE_SEG if seg is None else int(seg)) if job.record_id in segs \
                else facts.get(job.record_id, (0.0, NONE_SEG))[1]
            trace_id = job.record_id.split("-", 1)[0]
            refs[i] = []
            # Keys out of the texts (as in _insert_scores)
            for sc in (scrub_score(x) for x in scores):
                values.append((*_score_values(job_id, job.record_id, trace_id, job.metric, sc,
                                              now, delivery), seg_id, "",
                               seq_of.get(job.record_id), job.record_id))
                where.append((i, sc, seg_id))
        ids = _insert_keyed(
            self.conn, "INSERT INTO scores(job_id, record_id, trace_id, name, metric,"
            " metric_version, value, label, explanation, status, error, duration_ms, details,"
            " created_at, delivery, seg_id, judge_model, rec) VALUES"
            f" (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,coalesce(?,{REC_OF}))"
            " ON CONFLICT(rec, name) DO NOTHING",
            values, "scores", ("record_id", "name"), (1, 3)) if values else {}
        for row, (i, sc, seg_id) in zip(values, where):
            score_id = ids.pop((row[1], row[3]), None)
            if score_id is None:  # the record has this score already: replace the row
                score_id, seg_id = self._replace_score(row[1], row[:15], "", delta)
            delta.add_score(now, sc.name, seg_id, sc.metric_version, "", row[4], sc.value,
                            sc.label, sc.status)
            out = refs[i]
            assert out is not None
            out.append((score_id, sc))
        return refs

    def _insert_scores(self, job_id: int, record_id: str, job_metric: str,
                       scores: Sequence[Score], judge_model: str, delivery: str | None,
                       now: float, delta: Delta) -> list[tuple[int, Score]]:
        """Store one job's scores (inside the caller's transaction) and add them to
        ``delta``; their ``(score_id, score)`` pairs."""
        trace_id = record_id.split("-", 1)[0]
        ids: dict[str, int] = {}
        # Keys out of the texts (a judge's reason may quote the key it was sent): stored
        # and, through the returned scores, exported scrubbed.
        scores = [scrub_score(s) for s in scores]
        for s in scores:
            metric = s.metric or job_metric
            values = _score_values(job_id, record_id, trace_id, job_metric, s, now, delivery)
            # The common case in one statement: a new (record, name) row, with its
            # record's segment looked up on the way (RETURNING tells both).
            row = self.conn.execute(_INSERT_SCORE, (*values, record_id, NONE_SEG,
                                                    judge_model, record_id)).fetchone()
            if row is None:  # the record has this score already: replace the row
                row = self._replace_score(record_id, values, judge_model, delta)
            ids[s.name], seg_id = int(row[0]), int(row[1])
            delta.add_score(now, s.name, seg_id, s.metric_version, judge_model, metric,
                            s.value, s.label, s.status)
        return [(ids[s.name], s) for s in scores]

    def _replace_score(self, record_id: str, values: tuple[Any, ...], judge_model: str,
                       delta: Delta) -> tuple[int, int]:
        """Replace the record's stored score of the same name (an earlier job's, or a
        re-scored one): its contribution leaves the rollups first. (score_id, seg_id)."""
        name = values[3]
        prev = self.conn.execute(_OLD_SCORES + " AND name = ?", (record_id, name)).fetchone()
        if prev is not None and prev[2] is not None:  # NULL seg_id: never rolled up
            delta.add_score(prev[1], prev[0], prev[2], prev[3], prev[4], prev[5], prev[6],
                            prev[7], prev[8], -1)
        seg = self.conn.execute("SELECT seg_id FROM records WHERE record_id = ?",
                                (record_id,)).fetchone()
        seg_id = NONE_SEG if seg is None or seg[0] is None else int(seg[0])
        row = self.conn.execute(
            "UPDATE scores SET job_id=?, metric_version=?, value=?, label=?, explanation=?,"
            " status=?, error=?, duration_ms=?, details=?, created_at=?, delivery=?, seg_id=?,"
            f" judge_model=? WHERE rec = {REC_OF} AND name=? RETURNING score_id",
            (values[0], *values[5:], seg_id, judge_model, record_id, name)).fetchone()
        return int(row[0]), seg_id

    def renew_leases(self, owner: str, job_ids: Sequence[int], lease_s: float) -> None:
        """Extend the leases ``owner`` holds on ``job_ids`` (jobs still being scored)."""
        until = time.time() + lease_s
        with self.transaction():
            self.conn.executemany(
                "UPDATE jobs SET lease_until=? WHERE job_id=? AND lease_owner=? "
                "AND status='leased'",
                [(until, j, owner) for j in job_ids],
            )

    def release_job(self, job: Job, owner: str, reason: str | None = None) -> None:
        """Give a leased job back for another attempt after a failed run (it counts)."""
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status='pending', lease_owner=NULL, lease_until=NULL, "
                "attempts = attempts + 1, reason=? WHERE job_id=? AND lease_owner=?",
                (scrub(reason) if reason else reason, job.job_id, owner),
            )

    def defer_job(self, job: Job, owner: str, delay_s: float, reason: str) -> None:
        """Put a job back to wait ``delay_s`` (judge down / over budget, the database
        refusing writes, the worker stopping); no attempt is counted. The wait is bounded by
        the worker's ``judge_max_wait_s``."""
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status='pending', lease_owner=NULL, lease_until=?, "
                "reason=? WHERE job_id=? AND lease_owner=?",
                (time.time() + max(0.0, delay_s), scrub(reason)[:500], job.job_id, owner),
            )

    def has_open_jobs(self, metrics: Sequence[str]) -> bool:
        """Cheap (LIMIT 1) check used while waiting in flush."""
        sql = (f"SELECT 1 FROM jobs WHERE {OPEN_JOBS} AND metric IN ("
               + ",".join("?" * len(metrics)) + ") LIMIT 1")
        return self.conn.execute(sql, tuple(metrics)).fetchone() is not None

    def open_job_count(self, metrics: Sequence[str] | None = None) -> int:
        sql = f"SELECT count(*) FROM jobs WHERE {OPEN_JOBS}"
        args: tuple[str, ...] = ()
        if metrics is not None:
            sql += " AND metric IN (" + ",".join("?" * len(metrics)) + ")"
            args = tuple(metrics)
        return int(self.conn.execute(sql, args).fetchone()[0])

    def open_jobs_for(self, record_id: str) -> int:
        return int(self.conn.execute(
            f"SELECT count(*) FROM jobs WHERE rec = {REC_OF} AND {OPEN_JOBS}",
            (record_id,),
        ).fetchone()[0])

    def load_records(self, record_ids: Iterable[str]) -> dict[str, RagRecord]:
        ids = list(dict.fromkeys(record_ids))
        out: dict[str, RagRecord] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            cur = self.conn.execute(
                "SELECT * FROM records WHERE record_id IN (" + ",".join("?" * len(chunk)) + ")",
                chunk,
            )
            cols = [c[0] for c in cur.description]
            for row in cur:
                rec = row_to_record(dict(zip(cols, row)))
                out[rec.record_id] = rec
        return out

    def records_for_trace(self, trace_id: str) -> list[RagRecord]:
        # (a range of the primary key: records have no trace_id index, see .compat)
        of_trace, args = trace_records(self, trace_id)
        cur = self.conn.execute(f"SELECT * FROM records WHERE {of_trace}", args)
        cols = [c[0] for c in cur.description]
        return [row_to_record(dict(zip(cols, row))) for row in cur]

    def scores_for(self, record_id: str, undelivered_only: bool = False) -> list[dict[str, Any]]:
        # (a score whose record is not stored has no rec: found by its record id, among the
        # few rows of no record)
        sql = f"SELECT * FROM scores WHERE (rec = {REC_OF} OR (rec IS NULL AND record_id = ?))"
        if undelivered_only:
            sql += " AND delivery IS NULL"
        cur = self.conn.execute(sql + " ORDER BY score_id", (record_id, record_id))
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur]

    def mark_delivered(self, score_ids: Sequence[int], how: str) -> None:
        self.mark_delivered_many([(score_ids, how)])

    def mark_delivered_many(self, batches: Sequence[tuple[Sequence[int], str]]) -> None:
        """Several (score ids, how) deliveries in one transaction."""
        with self.transaction():
            self.conn.executemany(
                "UPDATE scores SET delivery=? WHERE score_id=? AND delivery IS NULL",
                [(how, i) for ids, how in batches for i in ids],
            )

    def undelivered_record_ids(self, limit: int = 1000,
                               older_than: float | None = None) -> list[str]:
        """Records whose scores were stored but never exported (a previous process died, or
        the export failed); ``older_than``: only scores stored before that time."""
        rows = self.conn.execute(
            "SELECT DISTINCT s.record_id FROM scores s WHERE s.delivery IS NULL "
            "AND s.created_at <= ? AND NOT EXISTS "
            "(SELECT 1 FROM jobs j WHERE j.rec = s.rec AND j.status IN "
            "('pending','leased')) LIMIT ?",
            (float("inf") if older_than is None else older_than, limit),
        ).fetchall()
        return [r[0] for r in rows]
