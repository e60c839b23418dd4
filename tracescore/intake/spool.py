"""The durable half of acknowledging: received spans are committed before the sender is
answered.

Request threads (HTTP handlers, gRPC workers) :meth:`Spool.submit` the rows of one request
and wait on the returned :class:`Ticket`; one writer thread commits every waiting request in
one transaction (group commit: one fsync for many requests), then wakes them. The spans wait
in memory only while their senders wait, and their number is bounded (``max_pending_spans``):
past it :meth:`Spool.submit` raises :class:`Overloaded` at once (HTTP 429 / gRPC
RESOURCE_EXHAUSTED, with a retry delay), it never queues more. A database that is down fails
the waiting requests with :class:`Unavailable` (HTTP 503 / gRPC UNAVAILABLE): nothing is
acknowledged that is not stored, and the sender retries.

A retried request stores nothing twice (the spans' primary key); spans that come for a trace
already assembled are stored too (they are forwarded) and counted in ``late_spans``.

The acknowledging commit goes first (issue 32: p99 acknowledgement at 5,000 spans/s while a
backlog is assembled and scored). The background writers of the process (assembler, pruning,
forwarder) start their transactions through :meth:`Spool.background`, which waits until the
requests waiting to be stored were committed, and the writer waits for a background
transaction in progress on a condition (woken when it commits) instead of SQLite's busy
handler, whose sleeps grow to 100 ms between tries. Under a sender that never stops, writer
batches and background transactions alternate; neither waits longer than ``yield_s``. The
assembler also calls :meth:`Spool.pause` between traces while requests are being answered (the
GIL and the CPU). On SQLite neither the writer's connection nor the assembler's checkpoints
the WAL on commit (``wal_autocheckpoint=0``): the assembler runs a passive checkpoint every
second outside any transaction (:meth:`~.assembler.Assembler.checkpoint`), so a
checkpoint's copying and fsync is never inside an acknowledgement nor inside a transaction
the writer waits for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..store import intake_spool
from .otlp import SpanRow

log = logging.getLogger("tracescore")

class Overloaded(RuntimeError):
    """More spans wait to be stored than the bound allows: retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(RuntimeError):
    """The database did not take the write (down, locked, full): retry later."""

    retry_after_s = 5.0


class Ticket:
    """One request's rows, waiting to be committed."""

    __slots__ = ("done", "error", "resources", "rows", "stored")

    def __init__(self, rows: Sequence[SpanRow], resources: dict[str, bytes]) -> None:
        self.rows = rows
        self.resources = resources
        self.done = threading.Event()
        self.error: BaseException | None = None
        #: spans this request added (a retried request adds none)
        self.stored = 0

    def wait(self, timeout: float) -> bool:
        """True once committed; raises the writer's error; False on timeout (the request
        is then not acknowledged, its rows may still be committed: a retry adds nothing)."""
        if not self.done.wait(timeout):
            return False
        if self.error is not None:
            raise self.error
        return True


class Spool:
    """The writer thread and the bound. Thread-safe; :meth:`submit` never blocks."""

    def __init__(self, db: str, *, grace_s: float = 5.0, max_pending_spans: int = 200_000,
                 max_batch_spans: int = 50_000, yield_s: float = 0.25) -> None:
        self.db = db
        self.yield_s = yield_s
        self.grace_s = grace_s
        self.max_pending_spans = max_pending_spans
        self.max_batch_spans = max_batch_spans
        self._queue: deque[Ticket] = deque()
        self._pending = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        #: notified when the writer finished a batch or a background transaction ended
        self._turn = threading.Condition(self._lock)
        self._writing = False
        #: batches written (a background transaction waits for the next one)
        self._seq = 0
        #: requests started and answered (:meth:`pause`)
        self._requests_started = 0
        self._requests_ended = 0
        #: whether background threads :meth:`pause` for requests under way
        self.pause_for_requests = True
        self._background = 0
        self._closed = False
        self._known_resources: set[str] = set()
        #: the SQLite connection whose autocheckpoint is off
        self._no_checkpoint: Any = None
        #: counters (read by stats and tests)
        self.spans_stored = 0
        self.spans_duplicate = 0
        self.late_spans = 0
        self.overloaded = 0
        self.batches = 0
        #: times a background transaction waited for acknowledgements, and the writer for a
        #: background transaction (each at most ``yield_s``)
        self.background_waits = 0
        self.writer_waits = 0
        #: times a background thread paused for requests under way
        self.pauses = 0
        self._thread = threading.Thread(target=self._run, name="tracescore-intake-writer",
                                        daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, rows: Sequence[SpanRow], resources: dict[str, bytes]) -> Ticket:
        """Queue one request's rows for the next commit; :class:`Overloaded` past the bound."""
        ticket = Ticket(rows, resources)
        with self._lock:
            if self._closed:
                raise Unavailable("the intake is shutting down")
            if self._pending and self._pending + len(rows) > self.max_pending_spans:
                self.overloaded += 1
                # the time the writer needs for what waits, at least a second
                raise Overloaded(f"{self._pending} spans are waiting to be stored (bound "
                                 f"{self.max_pending_spans})", 1.0)
            self._pending += len(rows)
            self._queue.append(ticket)
            self._wake.notify()
        return ticket

    def request_started(self) -> None:
        """A request is being decoded/stored (:meth:`~.server.Intake.store`): the background
        threads :meth:`pause` for it."""
        with self._lock:
            self._requests_started += 1

    def request_ended(self) -> None:
        with self._lock:
            self._requests_ended += 1
            self._turn.notify_all()

    def pause(self) -> None:
        """Called by background threads between units of CPU work (the assembler: between
        traces, at most once per switch interval of work): while requests are being answered, wait until those under way now were
        answered (at most ``yield_s``), so that they get the GIL and the CPU. Later requests do
        not hold it up again until its next unit: under a sender that never stops, the
        background still makes progress."""
        if self._requests_started == self._requests_ended or not self.pause_for_requests:
            return
        with self._lock:
            target = self._requests_started
            if self._requests_ended < target:
                self.pauses += 1
                self._turn.wait_for(lambda: self._requests_ended >= target,
                                    timeout=self.yield_s)

    @contextmanager
    def background(self) -> Iterator[None]:
        """Around a background write transaction on the same database: starts once the requests
        waiting to be stored now were committed (at most ``yield_s`` later); the writer waits
        for it to end before its next batch."""
        with self._lock:
            if self._pending or self._writing:
                # the batch the writer takes (or writes) now, not every one after it: under a
                # sender that never stops, batches and background transactions alternate
                self.background_waits += 1
                seq = self._seq
                self._turn.wait_for(lambda: self._seq != seq, timeout=self.yield_s)
            self._background += 1
        try:
            yield
        finally:
            with self._lock:
                self._background -= 1
                self._turn.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        """Commit what waits, then stop the writer."""
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)

    # -- writer thread ------------------------------------------------------------------------
    def _run(self) -> None:
        from ..store import open_store

        store: Any = None
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._wake.wait(1.0)
                if not self._queue and self._closed:
                    break
                batch: list[Ticket] = []
                n = 0
                while self._queue and (not batch or n + len(self._queue[0].rows)
                                       <= self.max_batch_spans):
                    t = self._queue.popleft()
                    batch.append(t)
                    n += len(t.rows)
                self._writing = True
                if self._background:
                    self.writer_waits += 1
                    self._turn.wait_for(lambda: not self._background, timeout=self.yield_s)
            try:
                if store is None:
                    store = open_store(self.db)
                self._write(store, batch)
                error: BaseException | None = None
            except Exception as exc:  # never dies: the senders get a retryable answer
                log.warning("tracescore serve: cannot store %d received spans (%s); answering "
                            "503/UNAVAILABLE, the senders retry", n, exc)
                error = Unavailable(f"the database did not take the spans: {exc}")
                self._known_resources.clear()
                if store is not None:
                    try:
                        store.close()
                    except Exception:  # noqa: S110 - a broken connection: opened again next
                        pass
                    store = None
            with self._lock:
                self._pending -= n
                self._writing = False
                self._seq += 1
                self._turn.notify_all()
            for t in batch:
                t.error = error
                t.done.set()
        if store is not None:
            store.close()

    def _write(self, store: Any, batch: list[Ticket]) -> None:
        pg = store.dialect == "postgres"
        now = time.time()
        resources: dict[str, bytes] = {}
        rows: dict[tuple[str, str], SpanRow] = {}
        for t in batch:
            for rid, body in t.resources.items():
                if rid not in self._known_resources:
                    resources[rid] = body
            for r in t.rows:
                rows.setdefault((r.trace_id, r.span_id), r)
        if not pg and self._no_checkpoint is not store.conn:
            # (again after the store opened a new connection, or a pruning run ended)
            intake_spool.autocheckpoint_off(store.conn)
            self._no_checkpoint = store.conn
        insert = intake_spool.insert_postgres if pg else intake_spool.insert_sqlite
        with store.transaction():
            inserted, traces, late = insert(store.conn, resources, rows, now, self.grace_s)
            self.late_spans += late
        self._known_resources.update(resources)
        if len(self._known_resources) > 100_000:
            self._known_resources.clear()
        stored = len(inserted)
        self.spans_stored += stored
        self.spans_duplicate += sum(len(t.rows) for t in batch) - stored
        self.batches += 1
        for t in batch:
            t.stored = sum(1 for r in t.rows if (r.trace_id, r.span_id) in inserted)
