"""The hot-path buffer and the background writer that persists records and jobs.

:meth:`RecordQueue.put` is what the app's thread calls: one ``len`` check and a
``deque.append`` (both atomic under the GIL). It never blocks and never raises; when the buffer
is full the item is dropped and counted, with a rate-limited warning. A daemon writer thread,
woken by an ``Event`` when a batch is ready or every ``interval_s``, writes records and their
scoring jobs to SQLite in one transaction per batch, then wakes the scoring worker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._internal.errors import record_internal_error
from .record import RagRecord
from .sampling import Decision
from .store import NewJob, StoreAPI, open_store

log = logging.getLogger("tracescore")


@dataclass(frozen=True, slots=True)
class GroundTruthUpdate:
    trace_id: str
    ground_truths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FeedbackUpdate:
    """A user's verdict on a trace: ``value`` in [0, 1] (thumbs up = 1) and/or a label."""

    trace_id: str
    name: str
    value: float | None
    label: str | None
    comment: str | None
    created_at: float


class _Marker:
    """Put in the queue by :meth:`RecordQueue.flush`; set once everything before it is written."""

    def __init__(self) -> None:
        self.done = threading.Event()


Planner = Callable[[RagRecord, Decision], Sequence[NewJob]]
GroundTruthHandler = Callable[[StoreAPI, "GroundTruthUpdate | FeedbackUpdate"], None]


class RecordQueue:
    def __init__(
        self,
        db_path: str,
        plan_jobs: Planner,
        on_ground_truth: GroundTruthHandler,
        *,
        max_size: int = 10_000,
        batch_size: int = 512,
        interval_s: float = 0.2,
        on_written: Callable[[], None] | None = None,
    ) -> None:
        self.db_path = db_path
        self.plan_jobs = plan_jobs
        self.on_ground_truth = on_ground_truth
        self.max_size = max_size
        self.batch_size = batch_size
        self.interval_s = interval_s
        self.on_written = on_written
        self.dropped = 0
        self.dropped_other = 0
        self.written = 0
        self.failed = 0
        self._unsaved_drops = 0
        self._last_warn = 0.0
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # After fork the child has the deque and locks but no writer thread: start afresh.
        self._buf: deque[Any] = deque()
        self._event = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- hot path -----------------------------------------------------------------------------
    def put(self, item: Any, *, record: bool = True) -> bool:
        """Enqueue without blocking; returns False (and counts a drop) when full.

        ``record=False`` for everything that is not a record (deferred span work, ground-truth
        and feedback updates): their drops are counted apart, not as dropped records.
        """
        if len(self._buf) >= self.max_size or self._stop:
            if not record:
                self.dropped_other += 1
                return False
            self.dropped += 1
            self._unsaved_drops += 1
            now = time.monotonic()
            if now - self._last_warn > 10.0:
                self._last_warn = now
                log.warning(
                    "tracescore queue full (%d); dropped %d records so far "
                    "(app fine, telemetry degraded)", self.max_size, self.dropped,
                )
            return False
        self._buf.append(item)
        if self._thread is None:
            self._start()
        if len(self._buf) >= self.batch_size:
            self._event.set()
        return True

    @property
    def depth(self) -> int:
        return len(self._buf)

    # -- control ----------------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name="tracescore-writer", daemon=True)
                t.start()
                self._thread = t

    def flush(self, timeout: float | None = None) -> bool:
        """Block until everything enqueued before this call is written. Not for the hot path."""
        if self._thread is None and not self._buf:
            return True
        marker = _Marker()
        self._buf.append(marker)  # markers are never dropped
        if self._thread is None:
            self._start()
        self._event.set()
        return marker.done.wait(timeout)

    def shutdown(self, timeout: float | None = None) -> bool:
        ok = self.flush(timeout)
        self._stop = True
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return ok

    # -- writer thread -------------------------------------------------------------------------
    def _run(self) -> None:
        store: StoreAPI | None = None
        while True:
            self._event.wait(self.interval_s)
            self._event.clear()
            try:
                if store is None:
                    store = open_store(self.db_path)
                self._drain(store)
            except Exception as exc:  # the db is unusable now; try again on the next wake
                record_internal_error("queue.writer", exc)
                time.sleep(min(1.0, self.interval_s * 5))
            if self._stop and not self._buf:
                break
        if store is not None:
            store.close()

    def _drain(self, store: StoreAPI) -> None:
        while self._buf:
            records: list[tuple[RagRecord, Decision]] = []
            markers: list[_Marker] = []
            n = 0
            while self._buf and n < self.batch_size:
                item = self._buf[0]
                if isinstance(item, (GroundTruthUpdate, FeedbackUpdate)) and records:
                    break  # write the records before it first, so it finds them
                self._buf.popleft()
                n += 1
                if isinstance(item, _Marker):
                    markers.append(item)
                elif callable(item):
                    # Deferred hot-path work (materialising child spans): run it here.
                    try:
                        item()
                    except Exception as exc:
                        record_internal_error("queue.task", exc)
                elif isinstance(item, (GroundTruthUpdate, FeedbackUpdate)):
                    self._apply_ground_truth(store, item)
                    break
                else:
                    records.append(item)
            if records:
                self._write(store, records)
            for m in markers:
                m.done.set()
            if self.on_written is not None:
                self.on_written()

    def _write(self, store: StoreAPI, records: list[tuple[RagRecord, Decision]]) -> None:
        drops, self._unsaved_drops = self._unsaved_drops, 0
        counters = {"records_dropped": drops, "records_seen": len(records) + drops}
        jobs: list[NewJob] = []
        for rec, decision in records:
            jobs.extend(self.plan_jobs(rec, decision))
        for attempt in range(3):
            try:
                store.write_batch(records, jobs, counters)
                self.written += len(records)
                return
            except Exception as exc:
                unavailable = getattr(store, "unavailable", None)
                if unavailable is not None and unavailable(exc):
                    # The database server is unreachable (a fleet's PostgreSQL restarting):
                    # the batch goes back to the front of the bounded buffer and waits; new
                    # records beyond the bound are dropped and counted by put().
                    self._buf.extendleft(reversed(records))
                    self._unsaved_drops += drops
                    raise
                if attempt == 2:
                    break
                record_internal_error("queue.write_batch", exc)
                time.sleep(0.05 * (attempt + 1))
        # The batch as a whole keeps failing: write one record at a time so a single bad
        # record costs only itself, and count what could not be stored.
        for rec, decision in records:
            try:
                store.write_batch([(rec, decision)], self.plan_jobs(rec, decision), None)
                self.written += 1
            except Exception as exc:
                self.failed += 1
                record_internal_error("queue.write_record", exc)
        store.bump_counters(counters)

    def _apply_ground_truth(self, store: StoreAPI, upd: GroundTruthUpdate | FeedbackUpdate) -> None:
        try:
            self.on_ground_truth(store, upd)
        except Exception as exc:
            record_internal_error("queue.ground_truth", exc)
