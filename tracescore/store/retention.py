"""Retention: prune old records in small background batches (issue 13).

:func:`prune` deletes records older than :attr:`Retention.max_age_s` (and, with
:attr:`Retention.max_bytes`, the oldest records until the database's used space fits), with
their scores and their finished jobs; then judge-cache entries, judge calls (those of the
pruned records included) and feedback older than the window that no remaining record
references. Each batch
is one transaction. The hourly rollups already hold every row (they are updated as rows are
written: :mod:`.rollup`), so pruning only deletes raw rows and every aggregate is the same
before and after it; deferred compaction (``keep_full_text="2h"``) counts the records it makes
text-less in ``hourly_records.compact``.

Never pruned: a record with an open job (pending or leased, including jobs waiting for the
judge) or with a score not yet delivered to the span exporter; they go once that is done. Nor
labels, nor the records and scores of labelled traces (the calibration set).

The background :class:`RetentionThread` runs :func:`prune` every ``interval_s`` on its own
connection, ``batch_size`` records per transaction with a pause between batches, so the writer
thread and the scoring worker take the write lock between batches and are never held up for
more than one small batch. Space goes back to the file system by SQLite's incremental vacuum
in steps of ``vacuum_pages`` (:func:`give_back_space`; a database created before schema
version 2 reuses the freed pages instead, until ``tracescore prune --vacuum`` converts it
once, offline). At scale (issue 19, bench/prune.py) a run's cost is the index pages it
rewrites — several randomly placed ones per record — so a run reads each old record once
(keyset continuation), pauses no longer than its batch took (and lets this process's waiting
writers in at once, and skips pauses while nobody else writes: :class:`.vacuum.Pauses`),
and gives back pages by the thousand per step instead of one, for at most
``vacuum_budget_s`` per run: moving a page out of the file's tail costs ~0.2 ms of CPU, so a backlog's free pages go back over several runs and
new rows reuse them meanwhile. Batches (and vacuum steps) are sized to hold the lock about
``max_hold_s``; a large backlog is deleted without the scores' (name, value) index, built
again after it (:func:`_bulk_mode`), and the WAL is checkpointed every 1 GiB at most.

Write amplification (issue 33: a run wrote 6–16× the bytes it freed): every transaction
appends each page it touches to the WAL, and an index keyed by the random record id puts a
batch's entries on most of its leaf pages, so the bytes written followed the number of
transactions more than the records. Scores and jobs are keyed per record by the record's
time-ordered sequence since schema 13 (:mod:`.migrations.record_seq`: 2–3× instead of 5–13×
with a busy writer); the records' own record-id key remains. A batch is therefore
chunks in one transaction (:func:`prune_batch`) for as long as it may hold the lock: about
``max_hold_s`` while others write, up to :data:`.vacuum.IDLE_HOLD` × that while nobody does
(:meth:`.vacuum.Pauses.hold_s`), cut at 0.8 × ``max_hold_s`` once a writer of this process
waits (:data:`HOLD_TARGET`); and this process's other connections leave checkpoints to the run
(:meth:`.vacuum._Waiting.is_pruning`).

Both backends: the SQL here is written once, with ``?`` placeholders; every dialect
difference is in :func:`.rollup.qmark_tx` (``?`` → ``%s`` by :func:`.compat.translate`)
and :data:`.prune_batches._LOCK` (PostgreSQL locks a batch's record rows ``FOR UPDATE OF r SKIP LOCKED``, so
several pruners — one per worker of a fleet — take disjoint batches, never compact a record
twice, and never delete a record a writer is adding a job to: the PostgreSQL store takes ``FOR KEY
SHARE`` on a record before it creates or re-opens its jobs). The engine-specific store methods
are ``used_bytes`` and ``give_back_space`` (on PostgreSQL: table sizes, and a no-op —
autovacuum makes freed space reusable). ``max_bytes`` applies on SQLite only: a PostgreSQL
database does not shrink when rows are deleted, so a size limit there would delete everything.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._internal.errors import record_internal_error
from .._internal.service import Service
from .compact import compact_stored_contexts, text_facts
from .compat import trace_join
from .migrations import REBUILT_INDEXES, ensure_rebuilt_indexes
from .prune_batches import _is_pg, _lock, _tx, prune_batch  # (a run calls retention.prune_batch)
from .retention_policy import (  # noqa: F401 (the policy's names: retention's too)
    DAY,
    MIN_AGE_S,
    PruneResult,
    Retention,
    parse_age,
    parse_duration,
    parse_size,
)
from .rollup import Delta
from .vacuum import WAITING, Pauses, drop_wal_cache, incremental_vacuum, quiet_at_open

log = logging.getLogger("tracescore")


def _held(store: Any) -> str:
    """Records kept whatever their age: an open job, an undelivered score, a label on the
    trace (the complement of :data:`.prune_batches._ELIGIBLE`'s conditions). Read from the indexes of those
    few rows (open jobs, undelivered scores, labels; a labelled trace's records by
    :func:`.compat.trace_join`), never by visiting every old record."""
    return (
        "SELECT count(*) FROM records r WHERE r.created_at < ? AND r.record_id IN ("
        "SELECT j.record_id FROM jobs j WHERE j.status IN ('pending', 'leased')"
        " UNION SELECT s.record_id FROM scores s WHERE s.delivery IS NULL"
        " UNION SELECT r2.record_id FROM labels l CROSS JOIN records r2 ON "
        + trace_join(store, "l.trace_id", "r2") + ")")


def count_eligible(store: Any, cutoff: float) -> tuple[int, int]:
    """(records older than ``cutoff`` that may go, all records older than it): a dry run.

    Two counts in one transaction, in constant memory: all older records (an index range
    count), minus the older ones held by an open job, an undelivered score or a label (found
    from those rows' own indexes), so the cost follows the backlog, not the history (issue 19:
    every eligible id used to be fetched into a list to be counted)."""
    with _tx(store) as conn:
        older = int(conn.execute("SELECT count(*) FROM records WHERE created_at < ?",
                                 (cutoff,)).fetchone()[0])
        held = int(conn.execute(_held(store), (cutoff,)).fetchone()[0]) if older else 0
    return older - held, older


#: Why ``max_bytes`` is not applied on PostgreSQL.
PG_NO_MAX_BYTES = ("a size limit (max_bytes, --max-size) is not applied on PostgreSQL: the "
                   "database does not shrink when rows are deleted (autovacuum keeps the space "
                   "for new rows), so it would delete every record; use an age limit")


_COMPACTABLE = (
    "SELECT r.record_id, r.query, r.answer, r.contexts, r.created_at, r.seg_id FROM records r"
    " WHERE r.created_at < ? AND r.text_kept = 1 AND r.sampled = 0 AND r.content_captured = 1"
    " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.rec = r.seq)"
    " AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.trace_id = r.trace_id)"
    " ORDER BY r.created_at LIMIT ?"
)


def compact_batch(store: Any, before: float, limit: int, result: PruneResult) -> int:
    """Deferred compaction (``keep_full_text="2h"``): drop the text of up to ``limit``
    unsampled records older than ``before`` that nothing asked to score (no job at all: a
    record forced by feedback or a late reference keeps its text). One transaction, which
    also counts them in ``hourly_records.compact``."""
    with _tx(store) as conn:
        rows = conn.execute(_COMPACTABLE + _lock(store), (before, limit)).fetchall()
        updates = []
        delta = Delta()
        for record_id, query, answer, contexts, created, seg_id in rows:
            delta.add_compacted(created, 0 if seg_id is None else int(seg_id))
            try:
                items = json.loads(contexts or "[]")
            except ValueError:
                items = []
            q_chars, q_hash = text_facts(query)
            a_chars, a_hash = text_facts(answer)
            updates.append((json.dumps(compact_stored_contexts(items), ensure_ascii=False),
                            q_chars, q_hash, a_chars, a_hash, record_id))
        conn.executemany(
            "UPDATE records SET query = NULL, answer = NULL, prompt = NULL, contexts = ?,"
            " candidates = NULL, agent = NULL, text_kept = 0, query_chars = ?, query_hash = ?,"
            " answer_chars = ?, answer_hash = ? WHERE record_id = ? AND text_kept = 1", updates)
        # (the rows are locked / the SQLite transaction is exclusive: every update applied)
        delta.write(conn)
    result.compacted += len(updates)
    return len(updates)


def _prune_unreferenced(store: Any, cutoff: float, limit: int, result: PruneResult,
                        stop: threading.Event | None, pauses: Callable[[float], None]) -> None:
    """Judge calls, judge-cache entries, feedback and closed sessions older than ``cutoff``
    that no remaining record references: the judge calls of the records just pruned (a call made after the
    cutoff for a record pruned now goes in a later run, once it is older than the cutoff)."""
    steps = (
        ("judge_calls", "DELETE FROM judge_calls WHERE call_id IN (SELECT call_id FROM "
         "judge_calls c WHERE c.created_at < ? AND (c.record_id IS NULL OR NOT EXISTS "
         "(SELECT 1 FROM records r WHERE r.record_id = c.record_id)) LIMIT ?)"),
        ("judge_cache", "DELETE FROM judge_cache WHERE key IN (SELECT key FROM judge_cache "
         "WHERE created_at < ? LIMIT ?)"),
        ("feedback", "DELETE FROM feedback WHERE feedback_id IN (SELECT feedback_id FROM "
         "feedback f WHERE f.created_at < ? AND NOT EXISTS (SELECT 1 FROM records r "
         f"WHERE {trace_join(store, 'f.trace_id')}) LIMIT ?)"),
        # a closed session whose turns and own record are all gone (an open one stays: its
        # next turn, or its close, still needs the state)
        ("sessions", "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM "
         "sessions s WHERE s.status = 'closed' AND s.touched_at < ? AND NOT EXISTS (SELECT 1 "
         "FROM records r WHERE r.session_id = s.session_id) LIMIT ?)"),
    )
    _run_steps(store, steps, cutoff, limit, result, stop, pauses)


def _run_steps(store: Any, steps: tuple[tuple[str, str], ...], cutoff: float, limit: int,
               result: PruneResult, stop: threading.Event | None,
               pauses: Callable[[float], None]) -> None:
    for attr, sql in steps:
        while not (stop is not None and stop.is_set()):
            t = time.perf_counter()
            with _tx(store) as conn:
                n = int(conn.execute(sql, (cutoff, limit)).rowcount)
            setattr(result, attr, getattr(result, attr) + n)
            if n < limit:
                break
            pauses(time.perf_counter() - t)


#: Pages of SQLite page cache for a pruning connection, per record of a batch: deleting a
#: record touches several randomly placed index pages (records by id, and by trace before
#: schema version 6; its scores by record and by value; its jobs by record); with SQLite's
#: default 2 MB cache a
#: batch spilled them to the WAL before its commit and read them back. At most
#: ``_CACHE_MAX_PAGES`` (128 MiB of 4 KiB pages) for the largest batch (MAX_GROWTH ×).
_CACHE_PAGES_PER_RECORD = 16
_CACHE_MAX_PAGES = 32768
#: WAL frames before the pruner's own commits checkpoint (SQLite's default is 1,000 = 4 MB):
#: a batch writes thousands of index pages and the next batches write many of the same
#: pages again; checkpointing every 1 GiB copies each page back to the database once per
#: checkpoint instead of once per batch, and syncs the file 16× less often than every 64 MiB
#: (issue 19, 1M records: 84 s with 256 MiB, 75 s with 1 GiB; the fdatasyncs alone were
#: ~13 s with 256 MiB). The WAL may grow that large during a run: never more than 1/16 of the
#: disk's free space, never less than 64 MiB; it is truncated when the run ends.
_WAL_CHECKPOINT_PAGES = 262144
_WAL_CHECKPOINT_MIN_PAGES = 16384


def _checkpoint_pages(store: Any, page_size: int) -> int:
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(store.path))).free
    except (OSError, AttributeError, TypeError):
        return _WAL_CHECKPOINT_MIN_PAGES
    return max(_WAL_CHECKPOINT_MIN_PAGES, min(_WAL_CHECKPOINT_PAGES, free // 16 // page_size))


@contextmanager
def _pruning_connection(store: Any, batch: int) -> Iterator[None]:
    """SQLite only: a page cache that holds one batch and fewer checkpoints, on the store's
    own connection for the length of one run (restored after)."""
    if _is_pg(store):
        yield
        return
    conn = store.conn
    with WAITING.pruning(store.path, conn), _sqlite_pruning(store, conn, batch):
        yield


@contextmanager
def _sqlite_pruning(store: Any, conn: sqlite3.Connection, batch: int) -> Iterator[None]:
    cache = int(conn.execute("PRAGMA cache_size").fetchone()[0])
    ckpt = int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    pages = max(2000, min(_CACHE_PAGES_PER_RECORD * batch * MAX_GROWTH, _CACHE_MAX_PAGES))
    conn.execute(f"PRAGMA cache_size={pages}")  # (> 0: pages, whatever their size)
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA wal_autocheckpoint={max(ckpt, _checkpoint_pages(store, page_size))}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA cache_size={cache}")
        conn.execute(f"PRAGMA wal_autocheckpoint={ckpt}")
        try:  # (the WAL keeps its size until truncated: also after a run without vacuum;
            # a PASSIVE checkpoint first copies it without holding the write lock)
            store.checkpoint("PASSIVE", wait_s=1.0)
            drop_wal_cache(store.path)  # (outside the TRUNCATE's hold of the lock)
            store.checkpoint("TRUNCATE", wait_s=1.0)
        except sqlite3.Error:  # (best effort: a reader holds it; the next run truncates it)
            pass


def give_back_space(store: Any, pages_per_step: int, *, pause_s: float,
                    stop: threading.Event | None = None, budget_s: float | None = None,
                    result: PruneResult | None = None, max_hold_s: float | None = None,
                    pauses: Callable[[float], None] | None = None) -> tuple[int, int]:
    """Return free pages to the file system for at most ``budget_s`` seconds (None: all of
    them); (pages given back, steps). SQLite with incremental auto-vacuum:
    :func:`.vacuum.incremental_vacuum`. PostgreSQL, and a SQLite database without
    incremental auto-vacuum: the store's own method (nothing to do)."""
    if _is_pg(store) or store.auto_vacuum_mode() != "incremental":
        return int(store.give_back_space(pages_per_step, pause_s=pause_s, stop=stop)), 0
    return incremental_vacuum(store.conn, pages_per_step, pause_s=pause_s, stop=stop,
                              budget_s=budget_s, result=result, max_hold_s=max_hold_s,
                              pauses=pauses)


def prune(store: Any, policy: Retention | None, *, now: float | None = None,
          stop: threading.Event | None = None, vacuum: bool = True,
          max_batches: int | None = None, compact_after_s: float | None = None) -> PruneResult:
    """Apply ``policy`` once: by age, then by size, then unreferenced rows, then give space
    back. Blocks (SQLite I/O, pauses between batches); never call it on the app's thread.

    ``now``: the clock (tests pass simulated time). ``stop``: set it to end early, between
    batches. ``max_batches``: bound the work of one run (the next run continues).
    ``compact_after_s``: first drop the text of unsampled records older than this
    (``keep_full_text="2h"``). ``policy=None``: only that.
    """
    t0 = time.perf_counter()
    now = time.time() if now is None else now
    res = PruneResult()
    res.used_bytes_before, res.file_bytes_before = store.used_bytes()
    batch = policy.batch_size if policy is not None else Retention().batch_size
    pause = policy.pause_s if policy is not None else Retention().pause_s
    if compact_after_s is not None:
        while (not (stop is not None and stop.is_set())
               and compact_batch(store, now - compact_after_s, batch, res) == batch):
            time.sleep(pause)
    if policy is None:
        res.used_bytes_after, res.file_bytes_after = store.used_bytes()
        res.seconds = time.perf_counter() - t0
        return res

    def more() -> bool:
        if stop is not None and stop.is_set():
            res.stopped = True
            return False
        return max_batches is None or res.batches < max_batches

    if _is_pg(store):
        pauses = Pauses(None, None, policy.pause_s)
    else:
        quiet_s, version = quiet_at_open(store)
        pauses = Pauses(store.conn, store.path, policy.pause_s, quiet_s=quiet_s,
                        version=version)
    with _pruning_connection(store, policy.batch_size):
        _prune_rows(store, policy, now, res, more, stop, pauses, bulk=max_batches is None)
        # (also after a run that deleted nothing: the pages an earlier run's budget left)
        if vacuum and not res.stopped and (res.records or _free_pages_left(store)):
            if res.rebuild_s:  # (the rebuild's hold, like a batch's, is followed by a pause:
                # a writer of this process that waited through it got in only after the
                # first vacuum step too — 1.2 s at 200k records, BENCHMARKS "Session 15")
                pauses(res.rebuild_s)
            res.pages_given_back, res.vacuum_steps = give_back_space(
                store, policy.vacuum_pages, pause_s=policy.pause_s, stop=stop,
                budget_s=policy.vacuum_budget_s, result=res, max_hold_s=policy.max_hold_s,
                pauses=pauses)
    res.paused_s, res.pauses_skipped = pauses.slept_s, pauses.skipped
    res.used_bytes_after, res.file_bytes_after = store.used_bytes()
    res.seconds = time.perf_counter() - t0
    return res


def _free_pages_left(store: Any) -> bool:
    """SQLite with incremental vacuum only: are there free pages to give back?"""
    if _is_pg(store) or store.auto_vacuum_mode() != "incremental":
        return False
    return int(store.conn.execute("PRAGMA freelist_count").fetchone()[0]) > 0


def _prune_rows(store: Any, policy: Retention, now: float, res: PruneResult,
                more: Callable[[], bool], stop: threading.Event | None,
                pauses: Pauses, bulk: bool) -> None:
    """By age, then by size, then unreferenced rows; one keyset position for the whole run
    (a record a batch skipped is held: no later batch of this run reads it again)."""
    since = float("-inf")
    size = policy.batch_size
    commit_s = 0.0

    def batch(cutoff: float, limit: int, hold_s: float) -> tuple[int, bool]:
        nonlocal since, size, commit_s
        t = time.perf_counter()
        done = prune_batch(store, cutoff, limit, res, since, hold_s=hold_s, commit_s=commit_s,
                           waited_hold_s=HOLD_TARGET * policy.max_hold_s)
        took = time.perf_counter() - t
        since = done.since
        res.longest_hold_s = max(res.longest_hold_s, took)
        if done.n:
            size = _next_size(limit, done.n, took - done.commit_s, policy)
            commit_s = done.commit_s
            pauses(took)
        return done.n, done.more

    def full(cutoff: float) -> bool:  # (a batch sized by the lock's hold: more may follow)
        return batch(cutoff, size, HOLD_TARGET * pauses.hold_s(policy.max_hold_s))[1]

    if policy.max_age_s is not None:
        cutoff = now - policy.max_age_s
        with _bulk_mode(store, res, cutoff, bulk):
            while more() and full(cutoff):
                pass
    if policy.max_bytes is not None and _is_pg(store):
        res.notes.append(PG_NO_MAX_BYTES)
    elif policy.max_bytes is not None:
        before = res.records
        while more() and store.used_bytes()[0] > policy.max_bytes:
            # (by size: batch_size records at a time, so it stops close to the limit)
            if batch(now, policy.batch_size, 0.0)[0] == 0:
                res.notes.append("the size limit cannot be met: every remaining record has an "
                                 "open job or an undelivered score, or is labelled, or is "
                                 "newer than now")
                break
        res.by_size = res.records - before
        if res.by_size and more():  # (their judge calls: no age cutoff to take them later)
            _run_steps(store, (("judge_calls", _ORPHAN_CALLS),), now, policy.batch_size * 4,
                       res, stop, pauses)
    if policy.max_age_s is not None and more():
        _prune_unreferenced(store, now - policy.max_age_s, policy.batch_size * 4, res, stop,
                            pauses)
    if policy.max_age_s is not None:
        with _tx(store) as conn:
            res.held = int(conn.execute("SELECT count(*) FROM records WHERE created_at < ?",
                                        (now - policy.max_age_s,)).fetchone()[0])


#: The indexes a large backlog is deleted without (of :data:`.migrations.REBUILT_INDEXES`).
BULK_INDEXES: tuple[str, ...] = ("idx_scores_name_value",)
#: A run is a bulk run when the records older than its cutoff are at least this share of
#: all records and at least this many: rebuilding costs a sort of the rows left, skipping the
#: indexes saves ~2 randomly placed page writes per deleted record (issue 19).
BULK_SHARE = 0.1
BULK_MIN_RECORDS = 20_000


@contextmanager
def _bulk_mode(store: Any, res: PruneResult, cutoff: float, allowed: bool) -> Iterator[None]:
    """SQLite, a large backlog: delete it without :data:`BULK_INDEXES` and build them again
    after (one sort each, one transaction each; their holds are in ``res.rebuild_s`` and
    ``res.longest_hold_s``).

    Each of those indexes orders by a value unrelated to time (a score's value), so deleting
    a record rewrote one randomly placed page of it per entry (2 of ~6.35 pages per record at
    1M: bench/prune.py). Meanwhile the queries that use them are slower — the report's worst
    records of a score sort the window instead of walking the index. A run stopped in between
    (a crash, SIGKILL) leaves them missing: opening a store builds them again, and so does
    every later run (below), so a crash costs one index build, never the data. (A store
    opened by another process during a bulk run builds them too, waiting for the lock; the
    rest of the run then keeps them up to date: slower, still correct.)"""
    names: list[str] = []
    if allowed and not _is_pg(store):
        with _tx(store) as conn:
            existing = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index'")}
            missing = [n for n, _ in REBUILT_INDEXES if n not in existing]
            older = int(conn.execute("SELECT count(*) FROM records WHERE created_at < ?",
                                     (cutoff,)).fetchone()[0])
            total = int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
        if missing:  # (an earlier run died in bulk mode: build them at the end of this one)
            names = missing
        if older >= BULK_MIN_RECORDS and older >= BULK_SHARE * total:
            names = sorted({*names, *(n for n in BULK_INDEXES if n in existing)})
            for name in names:
                t = time.perf_counter()
                with _tx(store) as conn:
                    conn.execute(f"DROP INDEX IF EXISTS {name}")
                res.longest_hold_s = max(res.longest_hold_s, time.perf_counter() - t)
        res.bulk_indexes = names
    try:
        yield
    finally:
        for name in names:
            t = time.perf_counter()
            with _tx(store) as conn:
                ensure_rebuilt_indexes(conn, (name,))
            took = time.perf_counter() - t
            res.rebuild_s += took
            res.longest_hold_s = max(res.longest_hold_s, took)


#: A chunk of a batch (:func:`prune_batch`) grows to at most this many times
#: ``Retention.batch_size`` records.
MAX_GROWTH = 8
#: A batch aims at this share of its hold (``max_hold_s``, or the longer one while nobody
#: else writes; ``max_hold_s`` once a writer of this process waits), leaving the rest for
#: the commit and a chunk longer than the last: a writer of another process waiting in
#: SQLite's busy handler retries every 100 ms after its first ~230 ms, and after a hold
#: longer than ~0.2 s it missed the 50 ms pause more often (its longest wait at 60k records,
#: beside a prune: 0.18 s with holds of ~0.16 s, 0.33–0.73 s with holds of ~0.2–0.28 s).
HOLD_TARGET = 0.8
#: A chunk is sized to take about this share of a batch's hold, so a writer of this process
#: that starts waiting during a batch gets the lock within about one chunk.
CHUNK_SHARE = 0.25


def _next_size(size: int, n: int, took_s: float, policy: Retention) -> int:
    """The next batch's chunk size, from a batch of ``n`` records that took ``took_s``:
    scaled towards :data:`CHUNK_SHARE` of 80 % of ``policy.max_hold_s``, at most ×1.5, within
    [batch_size, MAX_GROWTH × batch_size]."""
    target = CHUNK_SHARE * 0.8 * policy.max_hold_s
    if took_s <= 0:
        scaled = size * 2 if target > 0 else 0
    else:
        scaled = int(min(size * 1.5, n * target / took_s))
    return max(policy.batch_size, min(scaled, policy.batch_size * MAX_GROWTH))


#: Judge calls of records that are gone (size pruning: there is no age cutoff for them).
_ORPHAN_CALLS = (
    "DELETE FROM judge_calls WHERE call_id IN (SELECT call_id FROM judge_calls c"
    " WHERE c.created_at < ? AND c.record_id IS NOT NULL AND NOT EXISTS"
    " (SELECT 1 FROM records r WHERE r.record_id = c.record_id) LIMIT ?)")


# -- the background thread -------------------------------------------------------------------
class RetentionThread:
    """Runs :func:`prune` every ``policy.interval_s`` on a daemon thread with its own store.

    The thread is a :class:`~tracescore._internal.service.Service` it holds. :meth:`start` and
    :meth:`stop` may be called from any thread; nothing here touches the app's request path.
    A failing run is logged (and re-raised under pytest) and retried at the next interval.
    """

    def __init__(self, db_path: str, policy: Retention | None,
                 compact_after_s: float | None = None) -> None:
        self.db_path = db_path
        self.policy = policy
        self.compact_after_s = compact_after_s
        self.runs = 0
        self.last: PruneResult | None = None
        rules = policy or Retention()
        first = rules.first_run_s
        if compact_after_s is not None:  # compact well within the window's length
            first = min(first, compact_after_s / 4)
        self._service = Service("tracescore-retention", self._prune_once,
                                interval_s=self._interval(), first_wait_s=first,
                                on_error=self._failed)

    def _interval(self) -> float:
        delay = (self.policy or Retention()).interval_s
        if self.compact_after_s is not None:
            delay = min(delay, max(1.0, self.compact_after_s / 4))
        return delay

    def start(self) -> None:
        self._service.start()

    def run_now(self) -> None:
        """Wake the thread for a run now (tests, and after a large import)."""
        self._service.run_now()

    def stop(self, timeout: float | None = 10.0) -> None:
        self._service.stop(timeout)

    def _prune_once(self) -> None:
        from .base import open_store

        store = open_store(self.db_path)
        try:
            self.last = prune(store, self.policy, stop=self._service.stopping,
                              compact_after_s=self.compact_after_s)
        finally:
            store.close()
        self.runs += 1
        if self.last.records and self.policy is not None:
            log.info("tracescore pruned %d records (%d scores) older than %s",
                     self.last.records, self.last.scores, self.policy.describe())

    @staticmethod
    def _failed(exc: Exception) -> None:
        from .._internal.db_faults import storage_fault

        if storage_fault(exc) is not None:  # locked, disk full, I/O: the next run
            log.debug("tracescore prune deferred: %s", exc)  # (the writer says it)
        else:
            record_internal_error("retention.prune", exc)
