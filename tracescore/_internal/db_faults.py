"""Faults of the database that pass (a full disk, an I/O error, a lock), and what is said of them.

:func:`storage_fault` names the kind of such a fault from the exception a driver raised, for
both backends: the writer and the scorer then keep their work in memory (bounded) and retry,
instead of losing it or burning a job's attempts. :class:`FaultNotice` says it once: one WARNING
per database when writes start to fail (naming the path and what happens to records and
scores), one INFO once every part of the process that saw it (writer, scorer) writes again — so
a disk that fills for an hour costs two log lines, not a traceback per batch.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import tempfile
import threading
import time

log = logging.getLogger("tracescore")

#: :func:`storage_fault` kinds; each is also the ``stats()["lost"]`` reason of records dropped
#: at the full in-memory buffer while the fault lasts
DISK_FULL, IO_ERROR, UNAVAILABLE = "disk_full", "db_io_error", "db_unavailable"

# SQLite primary result codes (``sqlite_errorcode & 0xff``, Python >= 3.11)
_BUSY, _LOCKED, _READONLY, _IOERR, _FULL, _CANTOPEN, _PROTOCOL = 5, 6, 8, 10, 13, 14, 15
_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
#: PostgreSQL's SQLSTATE for "disk_full" (class 53, insufficient resources)
_PG_DISK_FULL = "53100"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (a wrapper must not hide a full disk)."""
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(out) < 8 and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _sqlite_kind(e: sqlite3.Error) -> str | None:
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int):
        primary = code & 0xFF
        if primary == _FULL:
            return DISK_FULL
        if primary == _IOERR:
            return IO_ERROR
        if primary in (_BUSY, _LOCKED, _READONLY, _CANTOPEN, _PROTOCOL):
            return UNAVAILABLE
        return None
    if not isinstance(e, sqlite3.OperationalError):  # (Python 3.10: no error codes)
        return None
    msg = str(e).lower()
    if "full" in msg:
        return DISK_FULL
    if "disk i/o" in msg:
        return IO_ERROR
    if any(w in msg for w in ("locked", "busy", "readonly", "unable to open")):
        return UNAVAILABLE
    return None


def storage_fault(exc: BaseException) -> str | None:
    """The kind of passing fault ``exc`` is — :data:`DISK_FULL` (SQLite's ``SQLITE_FULL``, on
    the database, its WAL or the temp directory SQLite uses; ``ENOSPC``/``EDQUOT``;
    PostgreSQL's ``disk_full``), :data:`IO_ERROR` (``SQLITE_IOERR`` and its extended codes,
    such as a WAL index that could not grow), :data:`UNAVAILABLE` (locked, busy, read-only,
    cannot open) — or None for a bad statement or bad data, which retrying cannot cure."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return DISK_FULL
        if getattr(e, "sqlstate", None) == _PG_DISK_FULL:
            return DISK_FULL
        if isinstance(e, sqlite3.Error):
            kind = _sqlite_kind(e)
            if kind is not None:
                return kind
    return None


def _free_bytes(path: str) -> tuple[int, int] | None:
    """(device, bytes free) of the file system holding ``path``, or None."""
    try:
        st = os.statvfs(path)
        return os.stat(path).st_dev, st.f_bavail * st.f_frsize
    except OSError:
        return None


def _sqlite_temp_dir() -> str:
    """The directory SQLite puts its temporary files in (its own search order on Unix)."""
    for d in (os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), "/var/tmp",
              "/usr/tmp", "/tmp"):
        if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    return tempfile.gettempdir()


def full_place(db: str) -> str:
    """What is full, for the warning: the database's file system, or SQLite's temp directory
    when that one is on another file system and has less room (a sort or a statement journal
    spilled there). A URL (PostgreSQL) is named as given (the caller redacts it)."""
    if "://" in db:
        return db
    here = _free_bytes(os.path.dirname(os.path.abspath(db)) or ".")
    tmp_dir = _sqlite_temp_dir()
    tmp = _free_bytes(tmp_dir)
    if here is not None and tmp is not None and tmp[0] != here[0] and tmp[1] < here[1] \
            and here[1] > 16 * 2**20:
        return f"the temporary directory {tmp_dir} that SQLite uses (for {db})"
    return db


class FaultNotice:
    """One WARNING when a database starts refusing writes, one INFO when writes resume.

    Per database and per process: the writer and the scorer each report their part
    (:meth:`fault`, :meth:`resumed`); the WARNING comes with the first part to fail, the INFO
    once no part is failing any more. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: database → (kind, parts failing, since)
        self._open: dict[str, tuple[str, set[str], float]] = {}

    def fault(self, db: str, part: str, kind: str, detail: str) -> None:
        with self._lock:
            episode = self._open.get(db)
            new = episode is None
            if episode is None:
                episode = (kind, set(), time.monotonic())
                self._open[db] = episode
            episode[1].add(part)
        if kind == DISK_FULL:
            TIGHT.mark(db)
        if new:
            log.warning(_fault_message(db, kind, detail))

    def resumed(self, db: str, part: str, note: str = "") -> None:
        with self._lock:
            episode = self._open.get(db)
            if episode is None or part not in episode[1]:
                return
            episode[1].discard(part)
            if episode[1]:
                return
            del self._open[db]
        log.info("tracescore writes its database %s again (it could not for %.0fs)%s",
                 _shown(db), time.monotonic() - episode[2], f"; {note}" if note else "")

    def active(self, db: str) -> str | None:
        """The kind of fault ``db`` has now, or None."""
        with self._lock:
            episode = self._open.get(db)
        return None if episode is None else episode[0]


def _shown(db: str) -> str:
    from .db_urls import redact_url

    return redact_url(db)


def _fault_message(db: str, kind: str, detail: str) -> str:
    waits = ("Records wait in memory and scores wait with their jobs; both are written when "
             "writes succeed again (no restart needed). Records beyond the in-memory buffer "
             f"(max_queue) are dropped and counted in stats()['lost']['{kind}']. App fine, "
             "telemetry degraded.")
    if kind == DISK_FULL:
        return (f"tracescore cannot write its database: the disk is full at "
                f"{_shown(full_place(db))} ({detail}). {waits}")
    if kind == IO_ERROR:
        return f"tracescore cannot write its database {_shown(db)}: I/O error ({detail}). {waits}"
    return f"tracescore cannot write its database {_shown(db)} ({detail}). {waits}"


class TightDisks:
    """SQLite databases on a disk with little room: one whose disk filled up in this process,
    until its file system has ``room_bytes`` free again, and one whose file system has less
    than that free when it is looked at (every ``check_every_s`` per database, one
    ``statvfs``).

    While a disk is tight the store checkpoints the WAL after each commit (passive: never
    waiting). Otherwise the WAL grows to ~4 MB before SQLite checkpoints it, and its frames are
    pages the database file must find room for again when they are checkpointed: on a disk with
    less room than that the WAL takes the last free bytes (and, after a full disk, the space
    just freed), and its checkpoint then cannot grow the database file: stuck until more space
    is freed. Being tight before the disk is full is what keeps the first fill from leaving a
    WAL that needs more room than the disk will ever have (issue 31)."""

    def __init__(self, room_bytes: int = 64 * 2**20, check_every_s: float = 5.0) -> None:
        self.room_bytes = room_bytes
        self.check_every_s = check_every_s
        #: database → (tight?, when last looked at)
        self._state: dict[str, tuple[bool, float]] = {}

    def mark(self, db: str) -> None:
        if "://" not in db:
            self._state[os.path.abspath(db)] = (True, time.monotonic())

    def __contains__(self, db: str) -> bool:
        if "://" in db or db in ("", ":memory:") or db.startswith("file:"):
            return False
        key = os.path.abspath(db)
        state = self._state.get(key)
        now = time.monotonic()
        if state is not None and now - state[1] < self.check_every_s:
            return state[0]  # the common case: one dict lookup per commit
        free = _free_bytes(os.path.dirname(key))
        tight = free is not None and free[1] < self.room_bytes
        self._state[key] = (tight, now)
        return tight


#: the process's notices (the writer and the scorer of one database share an episode)
NOTICE = FaultNotice()
#: databases on a disk that filled up (see :class:`TightDisks`)
TIGHT = TightDisks()
