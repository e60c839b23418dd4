"""A backlog deleted in tiles (issue 33): time slabs, each cut into record-id slices, one
write transaction per slice.

Why: a batch of records deleted in time order touches the pages of the tables and of the
time-ordered indexes once (old rows are together), but also most leaf pages of the three
indexes keyed by the random ``record_id`` (records' key, ``scores(record_id, name)``,
``jobs(record_id, metric, metric_version)``): each write transaction appends every page it
touches to the WAL, so when a run needs many short transactions (a busy writer: holds of
~0.16 s) those indexes are written again by every one of them — 6–7× the bytes freed at 60k
records (BENCHMARKS.md, issue 33). Deleting in record-id order would turn it round (the
tables' pages then written once per record).

A tile is both: the run takes the next *slab* of the backlog in time order, as many records
as ``slices`` transactions delete (``slices`` × the records the last ones deleted, at most
:data:`MAX_SLICES`), cuts it into ``slices`` record-id ranges of equal size (their bounds read
from the slab's rows, outside any write transaction), and deletes one range per transaction
(:func:`.prune_batches.prune_batch` with ``keys``: still in time order inside the range, and
still cut short by the lock's hold: a range some transactions could not finish is continued by
the next). So each transaction touches 1/``slices`` of the random indexes' pages, and each
table page is written by at most as many transactions as the slices its rows fall in.

Only SQLite (PostgreSQL's deletes do not append whole pages to one WAL per transaction the same
way, and its collation may not order the bounds as its comparisons do); a run whose first batch
takes the whole backlog (nobody else writes) never slices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from .prune_batches import NO_KEYS, Batch, Keys

#: At most this many record-id slices a slab: each adds one more write of a table page that
#: holds records of several slices (~5 records a page of ``records``, ~8 of ``scores``, ~13
#: of ``jobs`` at bench/prune.py's data), so past this the tables cost more than the random
#: indexes save (bench/prune.py, BENCHMARKS.md "Session 14").
MAX_SLICES = 8

#: One batch: (cutoff, keys, keyset start) → what it did.
BatchFn = Callable[[float, Keys, float], Batch]


def prune_tiles(conn: Any, batch: BatchFn, since: float, cutoff: float,
                more: Callable[[], bool]) -> float:
    """Delete the eligible records with ``since <= created_at < cutoff`` by batches of
    ``batch`` (a whole run's: it holds the lock, pauses, counts), in tiles once a batch
    could not take the rest; ``conn`` reads (SQLite, autocommit). Returns the keyset
    position the run ends at (the cutoff's side of every slab done)."""
    per_tx = 0
    while more():
        if per_tx:
            left = _count(conn, since, cutoff)
            slices = min(MAX_SLICES, math.ceil(left / per_tx))
        else:
            slices = 1
        if slices <= 1:  # (the first batch, or one may take the rest: time order)
            done = batch(cutoff, NO_KEYS, since)
            since = done.since
            if not done.more:
                return since
            per_tx = max(per_tx, done.n)
            continue
        end = slab_end(conn, since, cutoff, slices * per_tx)
        sizes: list[int] = []
        for keys in key_ranges(conn, since, end, slices):
            start = since
            while more():
                done = batch(end, keys, start)
                start = done.since
                if done.n:
                    sizes.append(done.n)
                if not done.more:
                    break
        if not more():
            return since  # (stopped inside the slab: the next run starts at its beginning)
        since = end
        if end >= cutoff:
            return since
        if sizes:  # (a slice's last transaction may be short: the largest is the capacity)
            per_tx = max(sizes)
    return since


def _count(conn: Any, since: float, end: float) -> int:
    return int(conn.execute("SELECT count(*) FROM records WHERE created_at >= ?"
                            " AND created_at < ?", (since, end)).fetchone()[0])


def slab_end(conn: Any, since: float, cutoff: float, n: int) -> float:
    """The ``created_at`` that ends a slab of about ``n`` records from ``since`` (below
    ``cutoff``; ``cutoff`` when fewer are left); past ``since``, so a slab is never empty
    however many records share a timestamp."""
    row = conn.execute("SELECT created_at FROM records WHERE created_at >= ? AND created_at < ?"
                       " ORDER BY created_at LIMIT 1 OFFSET ?", (since, cutoff, n)).fetchone()
    if row is None:
        return cutoff
    end = float(row[0])
    if end > since:
        return end
    row = conn.execute("SELECT min(created_at) FROM records WHERE created_at > ?"
                       " AND created_at < ?", (since, cutoff)).fetchone()
    return cutoff if row is None or row[0] is None else float(row[0])


def key_ranges(conn: Any, since: float, end: float, slices: int) -> Iterator[Keys]:
    """``slices`` record-id ranges holding about as many of the slab's records each, in key
    order: (None, b1), (b1, b2), … (bk, None). Reads the slab's ids in the record-id order of
    the database (a window function: the bounds only come back)."""
    n = _count(conn, since, end)
    step = max(1, math.ceil(n / slices))
    bounds = [r[0] for r in conn.execute(
        "SELECT record_id FROM (SELECT record_id, row_number() OVER (ORDER BY record_id) AS k"
        " FROM records WHERE created_at >= ? AND created_at < ?) WHERE k > 1 AND k % ? = 1"
        " ORDER BY k", (since, end, step))]
    lo: str | None = None
    for b in bounds:
        yield (lo, b)
        lo = b
    yield (lo, None)
