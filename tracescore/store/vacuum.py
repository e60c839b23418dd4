"""Giving a SQLite file's free pages back to the file system (incremental vacuum), and the
pause that lets other writers in between two write transactions. Used by the store
(:meth:`.sqlite.Store.give_back_space`) and by retention (:mod:`.retention`). Blocking I/O on
the caller's connection; never on the app's request path."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["WAITING", "Pauses", "checkpoint_then_truncate", "drop_wal_cache",
           "incremental_vacuum", "quiet_at_open",
           "rest", "wal_mtime"]

#: A run that saw no other connection commit for this long pauses only to let a writer that
#: has just started waiting in (:class:`Pauses`).
IDLE_S = 1.0
#: While idle, one pause of :data:`PROBE_PAUSE_S` at least every this many seconds: a writer
#: of another process waits at most about this long once, after which the run pauses as usual
#: (a run's longest lock waits were 1.6–3.6 s before, issue 19's bench/prune.py --probe).
PROBE_EVERY_S = 2.0
#: Longer than the longest sleep of SQLite's busy handler between two tries (100 ms), so a
#: writer of another process that waits for the lock tries at least once inside it.
PROBE_PAUSE_S = 0.11
#: How long a pause waits for this process's waiting writers to get the lock.
IN_PROCESS_WAIT_S = 0.25
#: While nobody else writes (:data:`IDLE_S`), a pruning transaction may hold the write lock
#: up to this many times ``Retention.max_hold_s`` (0.2 s → 2 s), and never past the next
#: probe pause (:data:`PROBE_EVERY_S` after the last one), so a writer of another process
#: that starts waiting meanwhile still gets in within about :data:`PROBE_EVERY_S`, as with
#: short batches; one of this process gets in after the current chunk
#: (:func:`.retention.prune_batch`). Issue 33: every transaction rewrites the randomly placed
#: index pages it touches, so fewer, larger ones write less.
IDLE_HOLD = 10.0


def rest(pause_s: float, busy_s: float) -> None:
    """The pause after a write transaction that took ``busy_s``: as long as the transaction,
    at most ``pause_s``. The writer and the scoring worker get the lock at least half of the
    time, and a short batch is not followed by a long sleep (issue 19: a fixed 50 ms after
    each 500-record batch was a minute of sleeping per 600,000 records)."""
    time.sleep(max(0.0, min(pause_s, busy_s)))


class _Waiting:
    """The connections of this process waiting for a database's write lock (``BEGIN
    IMMEDIATE`` in :class:`.sqlite._Tx`), per database path: a pruning run on another
    connection lets them in as soon as it commits, instead of hoping that SQLite's busy
    handler, which sleeps up to 100 ms between tries, tries during a short pause."""

    def __init__(self) -> None:
        self._n: dict[str, int] = {}
        #: when each waiting connection started waiting, per path
        self._since: dict[str, list[float]] = {}
        self._cond = threading.Condition()
        #: databases pruning runs of this process work on: path → the runs' connections
        self._pruning: dict[str, list[Any]] = {}

    @contextmanager
    def pruning(self, path: str, conn: Any) -> Iterator[None]:
        """While a pruning run works on ``path`` on ``conn``: this process's other
        connections to it leave checkpoints to the run (:meth:`is_pruning`,
        :class:`.sqlite._Tx`)."""
        with self._cond:
            self._pruning.setdefault(path, []).append(conn)
        try:
            yield
        finally:
            with self._cond:
                runs = self._pruning.get(path, [])
                runs.remove(conn)
                if not runs:
                    self._pruning.pop(path, None)

    def is_pruning(self, path: str, conn: Any) -> bool:
        """Does a pruning run of this process work on ``path`` on a connection other than
        ``conn``? Then a commit on ``conn`` does not checkpoint the WAL (issue 33: the app's
        writer, committing after every batch of the run with SQLite's default autocheckpoint
        of 1,000 pages, copied each batch's pages into the database file again: 18× the
        bytes freed at 60k records); the run checkpoints every 1 GiB at most and truncates
        the WAL when it ends."""
        runs = self._pruning.get(path)
        return bool(runs) and any(c is not conn for c in runs)

    def enter(self, path: str) -> float:
        """A connection starts waiting for ``path``'s lock; returns the token for
        :meth:`leave` (when it started)."""
        t = time.monotonic()
        with self._cond:
            self._n[path] = self._n.get(path, 0) + 1
            self._since.setdefault(path, []).append(t)
        return t

    def leave(self, path: str, since: float | None = None) -> None:
        with self._cond:
            started = self._since.get(path)
            if started:
                started.remove(since if since in started else started[0])
                if not started:
                    self._since.pop(path, None)
            n = self._n.get(path, 0) - 1
            if n > 0:
                self._n[path] = n
            else:
                self._n.pop(path, None)
                self._cond.notify_all()

    def waited_s(self, path: str) -> float:
        """How long the longest-waiting connection of this process has waited for ``path``'s
        lock (0.0: none waits)."""
        started = self._since.get(path)
        try:
            return time.monotonic() - min(started) if started else 0.0
        except ValueError:  # (emptied meanwhile)
            return 0.0

    def count(self, path: str) -> int:
        return self._n.get(path, 0)

    def wait_clear(self, path: str, timeout: float) -> bool:
        """Until no connection of this process waits for ``path``'s lock (False: timed out)."""
        with self._cond:
            return self._cond.wait_for(lambda: path not in self._n, timeout)


WAITING = _Waiting()


def wal_mtime(path: str) -> float | None:
    """The mtime of ``path``'s WAL file (every commit appends to it), None if there is none."""
    try:
        return os.stat(path + "-wal").st_mtime
    except OSError:
        return None


def quiet_at_open(store: Any) -> tuple[float, Any]:
    """(seconds nobody else had written when ``store`` opened, its first ``data_version``):
    since the WAL was last written; :data:`IDLE_S` if there was no WAL (nobody had the
    database open); 0.0 if the store did not record it. Commits of others after the open
    change ``data_version``, so the run sees them at its first pause."""
    if not hasattr(store, "wal_mtime_at_open"):
        return 0.0, None
    mtime = store.wal_mtime_at_open
    quiet = IDLE_S if mtime is None else max(0.0, time.time() - mtime)
    return quiet, getattr(store, "data_version_at_open", None)


class Pauses:
    """The pauses of one pruning run between its write transactions, so other writers get
    the lock — and none when there is nobody to let in (issue 19: at 1M records a run's
    ~290 pauses of 50 ms were 14 s of a 82 s run on a database nobody else wrote to).

    - A connection of this process waits for the lock (the app's writer or scorer): wait
      until it has it (at most :data:`IN_PROCESS_WAIT_S`).
    - Another connection committed in the last :data:`IDLE_S` (``PRAGMA data_version``
      changes when one does, in any process): :func:`rest`, as long as the batch took, at
      most ``pause_s``.
    - Nobody did: no pause, except one of :data:`PROBE_PAUSE_S` at least every
      :data:`PROBE_EVERY_S`, so a writer of another process that has just started waiting
      gets in within about that long; once it commits, the run pauses as above again.

    ``conn=None`` (PostgreSQL: row locks, no ``data_version``): always :func:`rest`."""

    def __init__(self, conn: sqlite3.Connection | None, path: str | None,
                 pause_s: float, *, quiet_s: float = 0.0, version: Any = None) -> None:
        self.conn, self.path, self.pause_s = conn, path, pause_s
        self._version = self._data_version() if version is None else version
        now = time.monotonic()
        # (a run starts as if others wrote ``quiet_s`` ago — 0: just now — and ``version``,
        # the data_version then, tells of commits since: :func:`quiet_at_open`)
        self._active_at = now - quiet_s
        self._probed_at = now
        #: seconds slept, and pauses skipped because nobody else wrote (for bench/prune.py)
        self.slept_s = 0.0
        self.skipped = 0

    def _data_version(self) -> Any:
        if self.conn is None:
            return None
        try:
            return self.conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            return None

    def _others_wrote(self, t: float) -> bool:
        """Did another connection commit in the last :data:`IDLE_S` (now ``t``)?"""
        version = self._data_version()
        if version != self._version or version is None:
            self._version, self._active_at = version, t
        return t - self._active_at < IDLE_S

    def hold_s(self, max_hold_s: float) -> float:
        """How long the next write transaction may hold the lock: ``max_hold_s``, or while no
        other connection has committed for :data:`IDLE_S` and none of this process waits for
        the lock, up to :data:`IDLE_HOLD` × that, ending before the next probe pause is due.
        PostgreSQL (``conn=None``): always ``max_hold_s``."""
        if self.conn is None or self.path is None or WAITING.count(self.path):
            return max_hold_s
        t = time.monotonic()
        if self._others_wrote(t):
            return max_hold_s
        return max(max_hold_s, min(IDLE_HOLD * max_hold_s,
                                   self._probed_at + PROBE_EVERY_S - PROBE_PAUSE_S - t))

    def __call__(self, busy_s: float) -> None:
        t = time.monotonic()
        if self.conn is None or self.path is None:
            rest(self.pause_s, busy_s)
        elif WAITING.count(self.path):
            self._active_at = t
            WAITING.wait_clear(self.path, IN_PROCESS_WAIT_S)
        else:
            if self._others_wrote(t):
                rest(self.pause_s, busy_s)
            elif t - self._probed_at >= PROBE_EVERY_S:
                time.sleep(PROBE_PAUSE_S)
                self._probed_at = time.monotonic()
            else:
                self.skipped += 1
                time.sleep(0)  # (other threads of this process still get the GIL)
        self.slept_s += time.monotonic() - t


#: The first step of an incremental vacuum with a hold bound (pages).
FIRST_STEP_PAGES = 256


def incremental_vacuum(conn: sqlite3.Connection, pages_per_step: int, *, pause_s: float,
                       stop: threading.Event | None = None, budget_s: float | None = None,
                       result: Any = None, max_hold_s: float | None = None,
                       pauses: Callable[[float], None] | None = None) -> tuple[int, int]:
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
    2,048 pages held it ~1 s). ``pauses``: the run's :class:`Pauses` (default: :func:`rest`
    with ``pause_s``)."""

    def free_pages() -> int:
        return int(conn.execute("PRAGMA freelist_count").fetchone()[0])

    done = steps = 0
    free = free_pages()
    # With a hold bound, the first step is small and the steps grow to the bound (×1.5 a
    # step at most): a first step of ``pages_per_step`` held the lock 0.44 s at 200k records,
    # twice ``max_hold_s`` (BENCHMARKS.md, "Session 15").
    step = pages_per_step if max_hold_s is None else min(pages_per_step, FIRST_STEP_PAGES)
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
            if pauses is not None:
                pauses(time.perf_counter() - t)
            else:
                rest(pause_s, time.perf_counter() - t)
    if result is not None:
        result.free_pages_left = free
    checkpoint_then_truncate(conn)
    return done, steps


def checkpoint_then_truncate(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the database file, then truncate it. A TRUNCATE checkpoint holds
    the write lock while it copies; a PASSIVE one first copies while writers go on, so the
    TRUNCATE has (almost) nothing left to copy (issue 33: while a run works, this process's
    other connections leave checkpoints to it, and a TRUNCATE of the whole run's WAL held
    the app's writer ~0.6 s at 60k records)."""
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    row = conn.execute("PRAGMA database_list").fetchone()
    if row is not None and row[2]:
        drop_wal_cache(str(row[2]))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


#: A WAL at least this large has its cached pages dropped before it is truncated.
DROP_CACHE_BYTES = 64 << 20


def drop_wal_cache(path: str) -> None:
    """Drop the page cache of ``path``'s WAL (``POSIX_FADV_DONTNEED``), between the PASSIVE
    checkpoint that copied it and the TRUNCATE that empties it. Truncating a large WAL frees
    its cached pages inside the TRUNCATE, which holds the write lock: 0.26–0.42 s for a
    756 MB WAL, 0.11 s after this (0.14 s, no lock held); the app's writer waited 0.45–0.63 s
    for it at the end of a 200k-record prune (BENCHMARKS.md, "Session 15"). Only clean pages
    go (the kernel writes dirty ones first): nothing is lost, a later read is from the disk.
    Best effort (no ``posix_fadvise``, no WAL, an error: nothing)."""
    wal = path + "-wal"
    try:
        if not hasattr(os, "posix_fadvise") or os.stat(wal).st_size < DROP_CACHE_BYTES:
            return
        fd = os.open(wal, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except OSError:
        pass
