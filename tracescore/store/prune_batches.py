"""One batch of a pruning run (:mod:`.retention`): eligible records deleted in chunks, in one
transaction, with their scores, jobs and judge-budget decisions. Both backends: the SQL is
written once with ``?`` placeholders (:func:`.rollup.qmark_tx`); PostgreSQL locks a chunk's
record rows (:data:`_LOCK`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

from .rollup import qmark_tx
from .vacuum import WAITING

if TYPE_CHECKING:
    from .retention_policy import PruneResult


# -- the dialects ----------------------------------------------------------------------------
def _is_pg(store: Any) -> bool:
    return getattr(store, "dialect", "sqlite") == "postgres"


#: One write transaction on a store, yielding a connection that takes ``?`` SQL.
_tx = qmark_tx


#: Row locks of a batch's records: PostgreSQL only (SQLite's write transaction is exclusive).
_LOCK = {"sqlite": "", "postgres": " FOR UPDATE OF r SKIP LOCKED"}


def _lock(store: Any) -> str:
    return _LOCK["postgres" if _is_pg(store) else "sqlite"]


# -- the batch -------------------------------------------------------------------------------
#: Records that may go: older than the cutoff, no open job, no undelivered score, no human
#: label on their trace (labels and labelled traces are the calibration set: kept).
#: Keyset continuation (``created_at >= ?``, the last batch's newest record): the records a
#: batch skipped (held) are not read again by every later batch of the run.
_ELIGIBLE = (
    "SELECT r.record_id, r.created_at, r.seq FROM records r WHERE r.created_at < ?"
    " AND r.created_at >= ?"
    " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.rec = r.seq"
    " AND j.status IN ('pending', 'leased'))"
    " AND NOT EXISTS (SELECT 1 FROM scores s WHERE s.rec = r.seq"
    " AND s.delivery IS NULL)"
    " AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.trace_id = r.trace_id)"  # calibration set
    " ORDER BY r.created_at LIMIT ?"
)


def _marks(n: int) -> str:
    return ",".join("?" * n)


def prune_batch(store: Any, cutoff: float, limit: int, result: PruneResult,
                since: float = float("-inf"), *, hold_s: float = 0.0,
                max_records: int | None = None, commit_s: float = 0.0,
                waited_hold_s: float | None = None) -> Batch:
    """Delete eligible records with ``since <= created_at < cutoff`` (their rollups stay) in
    one transaction, in chunks of ``limit``: after the first, more chunks while the
    transaction, with one more chunk as long as the last and its commit (``commit_s``, the
    last batch's), holds the lock for at most ``hold_s``, and no connection of this process
    (SQLite: the app's writer, the scorer) would by then have waited for the lock longer than
    ``waited_hold_s`` (default ``hold_s``; a long idle batch lets them in after the current
    chunk), the last chunk was full, and fewer than ``max_records`` went. Returns a
    :class:`Batch`.

    Fewer, larger transactions write less (issue 33): each one appends every page it
    touches to the WAL, and a record's entry in the records' random ``record_id`` key is on
    a randomly placed page. Its scores and jobs are deleted by the record's sequence
    (``rec``, schema 13 / PostgreSQL 12): their per-record indexes are in time order, so a
    transaction touches only the pages it frees there (keyed by ``record_id`` they made each
    transaction rewrite most of those indexes' leaf pages, however few records it deleted).

    Their judge-call log rows go in :func:`.retention._prune_unreferenced` (by ``created_at``, which is
    indexed): ``judge_calls.record_id`` has no index, so deleting them here scanned the whole
    table once per batch."""
    waiting = None if _is_pg(store) else getattr(store, "path", None)
    n = 0
    full = False
    t0 = time.perf_counter()
    with _tx(store) as conn:
        while True:
            t = time.perf_counter()
            step = limit if max_records is None else min(limit, max_records - n)
            got, since = _delete_chunk(store, conn, cutoff, step, since, result)
            n += got
            full = got == step
            now = time.perf_counter()
            # (the next chunk, as long as this one, and the commit must fit in the hold; a
            # writer of this process that waits must have the lock within waited_hold_s of
            # when it started waiting — maybe before this batch began)
            rest = (now - t) + commit_s
            waited = WAITING.waited_s(waiting) if waiting is not None else 0.0
            if (not full or now - t0 + rest > hold_s
                    or (max_records is not None and n >= max_records)
                    or (waited > 0 and waited + rest
                        > (hold_s if waited_hold_s is None else waited_hold_s))):
                break
        t = time.perf_counter()
    commit = time.perf_counter() - t
    if n:
        result.records += n
        result.batches += 1
    return Batch(n, since, full, commit)


class Batch(NamedTuple):
    """What one :func:`prune_batch` did."""

    #: records deleted
    n: int
    #: the newest deleted record's created_at (the next batch's keyset position)
    since: float
    #: the last chunk was full: more eligible records may follow
    more: bool
    #: seconds its commit took (SQLite: writing the WAL)
    commit_s: float


def _delete_chunk(store: Any, conn: Any, cutoff: float, limit: int, since: float,
                  result: PruneResult) -> tuple[int, float]:
    """One chunk of :func:`prune_batch`, inside its transaction: (records deleted, since)."""
    rows = conn.execute(_ELIGIBLE + _lock(store), (cutoff, since, limit)).fetchall()
    if not rows:
        return 0, since
    ids = [r[0] for r in rows]
    seqs = [r[2] for r in rows]  # (their scores and jobs by record sequence: time-ordered)
    m = _marks(len(ids))
    result.scores += conn.execute(f"DELETE FROM scores WHERE rec IN ({m})", seqs).rowcount
    result.jobs += conn.execute(f"DELETE FROM jobs WHERE rec IN ({m})", seqs).rowcount
    # the judge budget's decisions go with their records (keyed by record: its primary
    # key's prefix), or they would grow by a row per candidate record for ever
    result.judge_decisions += conn.execute(
        f"DELETE FROM judge_decisions WHERE record_id IN ({m})", ids).rowcount
    n = int(conn.execute(f"DELETE FROM records WHERE record_id IN ({m})", ids).rowcount)
    return n, float(rows[-1][1])


