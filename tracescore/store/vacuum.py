"""Giving a SQLite file's free pages back to the file system (incremental vacuum), and the
pause that lets other writers in between two write transactions. Used by the store
(:meth:`.sqlite.Store.give_back_space`) and by retention (:mod:`.retention`). Blocking I/O on
the caller's connection; never on the app's request path."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

__all__ = ["incremental_vacuum", "rest"]


def rest(pause_s: float, busy_s: float) -> None:
    """The pause after a write transaction that took ``busy_s``: as long as the transaction,
    at most ``pause_s``. The writer and the scoring worker get the lock at least half of the
    time, and a short batch is not followed by a long sleep (issue 19: a fixed 50 ms after
    each 500-record batch was a minute of sleeping per 600,000 records)."""
    time.sleep(max(0.0, min(pause_s, busy_s)))


def incremental_vacuum(conn: sqlite3.Connection, pages_per_step: int, *, pause_s: float,
                       stop: threading.Event | None = None, budget_s: float | None = None,
                       result: Any = None, max_hold_s: float | None = None) -> tuple[int, int]:
    """Return free pages to the file system: SQLite's incremental vacuum on ``conn``,
    ``pages_per_step`` pages per write transaction, for at most ``budget_s`` seconds (None: all
    of them), then truncate the WAL. Returns (pages given back, steps); ``result.free_pages_left`` gets the
    free pages left for a later run (new rows reuse them meanwhile).

    ``PRAGMA incremental_vacuum(N)`` frees one page per ``sqlite3_step`` of its statement,
    and Python's ``execute`` steps a statement that returns no rows exactly once: the
    store's loop (``execute`` + ``fetchall``) freed ONE page per step and then slept, ~20
    pages a second (issue 19). ``executescript`` steps each statement to its end, so a step
    frees its N pages; it runs outside a transaction, so the pragma is its own write
    transaction (and waits for the lock like any other). ``max_hold_s``: steps shrink below
    ``pages_per_step`` to hold the lock about that long (at 1M records a page took ~0.5 ms:
    2,048 pages held it ~1 s)."""

    def free_pages() -> int:
        return int(conn.execute("PRAGMA freelist_count").fetchone()[0])

    done = steps = 0
    free = free_pages()
    step = pages_per_step
    t0 = time.perf_counter()
    while free and not (stop is not None and stop.is_set()):
        t = time.perf_counter()
        if budget_s is not None and steps and t - t0 >= budget_s:
            break
        conn.executescript(f"PRAGMA incremental_vacuum({int(min(free, step))});")
        took = time.perf_counter() - t
        if result is not None:
            result.longest_hold_s = max(result.longest_hold_s, took)
        if max_hold_s is not None and took > 0:
            step = max(16, min(pages_per_step, int(step * min(1.5, 0.8 * max_hold_s / took))))
        steps += 1
        left = free_pages()
        if left >= free:
            break  # (nothing went: do not spin)
        done += free - left
        free = left
        if free:
            rest(pause_s, time.perf_counter() - t)
    if result is not None:
        result.free_pages_left = free
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return done, steps
