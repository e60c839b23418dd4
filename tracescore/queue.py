"""The hot-path buffer and the background writer that persists records and jobs.

:meth:`RecordQueue.put` is what the app's thread calls: one ``len`` check and a
``deque.append`` (both atomic under the GIL). It never blocks and never raises; when the buffer
is full the item is dropped and counted, with a rate-limited warning. A daemon writer thread,
woken by an ``Event`` when a batch is ready or every ``interval_s``, writes records and their
scoring jobs to SQLite in one transaction per batch, then wakes the scoring worker. Each
record's segment (release, environment, model, declared metadata keys) is resolved there too,
on the writer thread, never on the app's.
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
from ._internal.losses import Losses
from ._internal.validate import InvalidRecord, sanitize_record
from .record import RagRecord
from .sampling import Decision
from .store import NewJob, SegmentSpec, StoreAPI, open_store

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
        losses: Losses | None = None,
        keep_full_text: bool = True,
        segments: SegmentSpec | None = None,
    ) -> None:
        self.db_path = db_path
        #: what records are segmented by (resolved by the store, on the writer thread)
        self.segments = segments
        #: False: records no metric sampled are stored compact (no text), here on the writer.
        self.keep_full_text = keep_full_text
        self.plan_jobs = plan_jobs
        self.on_ground_truth = on_ground_truth
        self.max_size = max_size
        self.batch_size = batch_size
        self.interval_s = interval_s
        self.on_written = on_written
        #: how long one write waits for a lock before the writer backs off and retries
        self.busy_timeout_s = 5.0
        self.dropped = 0
        self.dropped_other = 0
        self.written = 0
        self.failed = 0
        #: what was accepted and then could not be stored, by reason (see stats())
        self.losses = losses if losses is not None else Losses()
        #: the database refused writes (locked, full, I/O error): records wait in memory
        self.db_unavailable: str | None = None
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
        backoff = 0.0
        while True:
            self._event.wait(max(self.interval_s, backoff))
            self._event.clear()
            try:
                if store is None:
                    store = open_store(self.db_path, timeout_s=self.busy_timeout_s)
                self._drain(store)
                backoff = 0.0
                self.db_unavailable = None
            except _DbUnavailable as exc:
                # Locked or full: the records are back at the front of the buffer (bounded:
                # new ones are dropped and counted meanwhile); try again with backoff.
                if self.db_unavailable is None:
                    log.warning("tracescore cannot write its database (%s); records wait in "
                                "memory (app fine, telemetry degraded)", exc)
                self.db_unavailable = str(exc)
                backoff = min(max(0.1, backoff * 2), 2.0)
                if self._stop:
                    break  # shutting down: what is still buffered is counted as lost
            except Exception as exc:  # the db is unusable now; try again on the next wake
                record_internal_error("queue.writer", exc)
                time.sleep(min(1.0, self.interval_s * 5))
            if self._stop and not self._buf:
                break
        if any(isinstance(item, tuple) for item in self._buf):
            self.lose_buffered()  # stopped with the database unavailable: counted, not silent
        if store is not None:
            store.close()

    def _drain(self, store: StoreAPI) -> None:
        while self._buf:
            records: list[tuple[RagRecord, Decision]] = []
            markers: list[_Marker] = []
            taken: list[Any] = []
            n = 0
            while self._buf and n < self.batch_size:
                item = self._buf[0]
                if isinstance(item, (GroundTruthUpdate, FeedbackUpdate)) and records:
                    break  # write the records before it first, so it finds them
                self._buf.popleft()
                n += 1
                if isinstance(item, _Marker):
                    taken.append(item)
                    markers.append(item)
                elif callable(item):
                    # Deferred hot-path work (materialising child spans): run it here.
                    try:
                        item()
                    except Exception as exc:
                        record_internal_error("queue.task", exc)
                elif isinstance(item, (GroundTruthUpdate, FeedbackUpdate)):
                    try:
                        self._apply_ground_truth(store, item)
                    except _DbUnavailable:
                        self._buf.appendleft(item)
                        self._buf.extendleft(reversed(taken))
                        raise
                    break
                else:
                    taken.append(item)
                    records.append(item)
            if records:
                try:
                    self._write(store, records)
                except _DbUnavailable:
                    self._buf.extendleft(reversed(taken))  # in order, before newer items
                    raise
            for m in markers:
                m.done.set()
            if self.on_written is not None:
                self.on_written()

    def _write(self, store: StoreAPI, records: list[tuple[RagRecord, Decision]]) -> None:
        good: list[tuple[RagRecord, Decision]] = []
        for rec, decision in records:
            try:
                good.append((sanitize_record(rec), decision))
            except InvalidRecord as exc:
                self.failed += 1
                self.losses.add(exc.reason, 1, str(exc))
        drops = self._unsaved_drops
        lost = self.losses.take_unsaved()
        counters = {"records_dropped": drops, "records_seen": len(records) + drops,
                    **{f"lost.{k}": v for k, v in lost.items()}}
        try:
            self._write_good(store, good, counters)
        except BaseException:
            self.losses.give_back(lost)
            raise
        self._unsaved_drops -= drops

    def _write_good(self, store: StoreAPI, records: list[tuple[RagRecord, Decision]],
                    counters: dict[str, int]) -> None:
        try:
            jobs: list[NewJob] = []
            for rec, decision in records:
                jobs.extend(self.plan_jobs(rec, decision))
            store.write_batch(records, jobs, counters, keep_full_text=self.keep_full_text,
                              segments=self.segments)
            self.written += len(records)
            return
        except Exception as exc:
            if store.unavailable(exc):
                raise _DbUnavailable(str(exc)) from exc
            record_internal_error("queue.write_batch", exc)
        # The batch as a whole failed on its content: write one record at a time so a single
        # bad record costs only itself, and count what could not be stored, by reason.
        for rec, decision in records:
            try:
                store.write_batch([(rec, decision)], self.plan_jobs(rec, decision), None,
                                  keep_full_text=self.keep_full_text, segments=self.segments)
                self.written += 1
            except Exception as exc:
                if store.unavailable(exc):
                    raise _DbUnavailable(str(exc)) from exc
                self._lose(exc)
        store.bump_counters({**counters, **{f"lost.{k}": v for k, v in
                                            self.losses.take_unsaved().items()}})

    def _lose(self, exc: BaseException) -> None:
        self.failed += 1
        self.losses.add(f"write_failed:{type(exc).__name__}", 1, str(exc))

    def lose_buffered(self) -> int:
        """Count what is still buffered as lost (shutdown while the database is unavailable)."""
        n = sum(1 for item in self._buf if isinstance(item, tuple))
        self.losses.add("unwritten_at_shutdown", n, self.db_unavailable)
        return n

    def _apply_ground_truth(self, store: StoreAPI, upd: GroundTruthUpdate | FeedbackUpdate) -> None:
        try:
            self.on_ground_truth(store, upd)
        except Exception as exc:
            if store.unavailable(exc):
                raise _DbUnavailable(str(exc)) from exc
            self.losses.add(f"update_failed:{type(exc).__name__}", 1, str(exc))
            record_internal_error("queue.ground_truth", exc)


class _DbUnavailable(Exception):
    """The database refused a write for a reason that passes (locked, busy, full, I/O)."""

