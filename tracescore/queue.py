"""The hot-path buffer and the background writer that persists records and jobs.

:meth:`RecordQueue.put` is what the app's thread calls: one ``len`` check and a
``deque.append`` (both atomic under the GIL). It never blocks and never raises; when the buffer
is full the item is dropped and counted, with a rate-limited warning. A daemon writer thread,
woken by an ``Event`` when a batch is ready or every ``interval_s``, writes records and their
scoring jobs to SQLite in one transaction per batch, then wakes the scoring worker when the
batch opened jobs for it. The cheap built-in local metrics of a sampled record are scored by
the writer itself, in the record's transaction, while it keeps up (scores on write:
:mod:`tracescore.scoring.on_write`). Each record's segment (release, environment, model,
declared metadata keys) is resolved there too, on the writer thread, never on the app's.

When the database refuses writes for a reason that passes (a full disk, an I/O error, a lock:
:func:`~tracescore._internal.db_faults.storage_fault`), the batch goes back to the front of the
buffer and the writer retries with a backoff — on a new connection after a full disk or an I/O
error, with smaller batches after a full disk (a batch larger than the room freed would never
commit), and, once writes pass again, with the WAL checkpointed and truncated so its space goes
back to the file system. Meanwhile the buffer stays bounded: records beyond it are dropped and
counted under the fault's reason (``disk_full``, ...). One WARNING when writes start failing,
one INFO when they resume (:data:`~tracescore._internal.db_faults.NOTICE`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ._internal import capture_degraded as _degraded
from ._internal.db_faults import DISK_FULL, IO_ERROR, NOTICE, TIGHT, storage_fault
from ._internal.errors import record_internal_error
from ._internal.losses import Losses
from ._internal.service import Service
from ._internal.validate import (
    InvalidRecord,
    is_sanitized,
    sanitize_record,
)
from .lazy_record import LazyRecord
from .record import RagRecord
from .sampling import Decision
from .store import PENDING, NewJob, SegmentSpec, StoreAPI, open_store
from .store.batch import Pairs
from .updates import FeedbackUpdate, GroundTruthUpdate
from .write_port import OnWriteScorer, WritePort

#: records per transaction while the database's disk is tight (db_faults.TightDisks)
TIGHT_BATCH = 16

log = logging.getLogger("tracescore")


#: writers' connections a forked child inherited: never used nor closed there (see _reset)
_INHERITED: list[Any] = []


class _Marker:
    """Put in the queue by :meth:`RecordQueue.flush`; set once everything before it is written."""

    def __init__(self) -> None:
        self.done = threading.Event()


class RecordQueue:
    """The hot path's bounded buffer and the writer thread behind it. ``port``: everything
    the writer asks of the stages above it (:class:`~tracescore.write_port.WritePort`)."""

    def __init__(self, db_path: str, port: WritePort, *, max_size: int = 10_000,
                 batch_size: int = 512, interval_s: float = 0.2, linger_s: float = 0.03,
                 losses: Losses | None = None, keep_full_text: bool = True,
                 segments: SegmentSpec | None = None) -> None:
        self.db_path = db_path
        #: what records are segmented by (resolved by the store, on the writer thread)
        self.segments = segments
        #: False: records no metric sampled are stored compact (no text), here on the writer.
        self.keep_full_text = keep_full_text
        self.port = port
        self.max_size = max_size
        self.batch_size = batch_size
        self.interval_s = interval_s
        #: Woken by a sampled record (not a full batch, not a flush) while records arrive
        #: faster than one per ``linger_s / 4`` (a busy app), the writer waits this long for
        #: more before it writes: each transaction costs the writer (and the scorer it wakes)
        #: about as much as dozens of records' rows, and one transaction per request doubled
        #: the background CPU per record. Requests further apart are written at once. Scores
        #: reach a busy app's spans within ~``linger_s`` more. "Faster" is the records' mean
        #: gap, or the last one: a burst after a quiet spell lingers from its second record
        #: on, not only once the mean has come down (a dozen records later, each of them a
        #: transaction of its own). Records that come in while a batch is being written
        #: linger with the ones after them too (see ``_drain``).
        self.linger_s = linger_s
        #: records' mean gap (s, moving average) and the last one, kept by put(): a float op
        #: or two per record
        self._gap = 1.0
        self._last_gap = 1.0
        self._last_put = 0.0
        self._opened = False
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
        #: records dropped at the full buffer while the database refused writes, by the
        #: fault's kind (``disk_full``, ``db_io_error``, ``db_unavailable``); the other drops
        #: are ``queue_full`` (the app outpaced the writer)
        self.dropped_by: dict[str, int] = {}
        self._drop_reason: str | None = None
        self._unsaved_drop_reasons: dict[str, int] = {}
        #: records per transaction now: halved at each full-disk refusal, doubled back to
        #: ``batch_size`` at each write that passes
        self._batch_limit = batch_size
        self._truncate_wal = False
        self._unsaved_drops = 0
        self._last_warn = 0.0
        #: the writer's thread: waits on ``self._event`` (put sets it), runs ``_step``; after
        #: a stop, ``_drain_on_stop`` until the buffer is empty or the stop's deadline passes
        self._svc = Service("tracescore-writer", self._step, interval_s=interval_s,
                            first_wait_s=interval_s, drain=self._drain_on_stop,
                            on_exit=self._writer_ended, on_fork=self._reset)
        self._store: StoreAPI | None = None
        self._reset()

    def _reset(self) -> None:
        # After fork (the service's on_fork; its fresh wake event is ours) the child has no
        # writer thread: start afresh. The parent's connection is kept aside, never closed.
        if self._store is not None:
            _INHERITED.append(self._store)
        self._store = None
        self._backoff = 0.0
        self._retry_at = 0.0
        #: a write refused while stopping: what is buffered is lost (counted), no more tries
        self._gave_up = False
        self._buf: deque[Any] = deque()
        self._event = self._svc.wake_event
        #: set for work that must not linger: a full batch, a flush, shutdown
        self._now = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- hot path -----------------------------------------------------------------------------
    def put(self, item: Any, *, record: bool = True, wake: bool = False) -> bool:
        """Enqueue without blocking; returns False (and counts a drop) when full.

        ``record=False`` for everything that is not a record (deferred span work, ground-truth
        and feedback updates): their drops are counted apart, not as dropped records.
        ``wake``: wake the writer for it, as for a sampled record (span work a held span
        waits for: its record may have been written before this came). A record
        is a ``(record, decision)`` pair, or a :class:`RagRecord` alone when no metric sampled
        it and no rule forced it (its decision is made again on the writer:
        :class:`~tracescore.store.batch.Pairs`).
        """
        if len(self._buf) >= self.max_size or self._stop:
            if not record:
                self.dropped_other += 1
                return False
            self.dropped += 1
            self._unsaved_drops += 1
            reason = self._drop_reason
            if reason is not None:
                # the database refuses writes: its one warning said records beyond the
                # buffer are dropped and counted under this reason
                self.dropped_by[reason] = self.dropped_by.get(reason, 0) + 1
                unsaved = self._unsaved_drop_reasons
                unsaved[reason] = unsaved.get(reason, 0) + 1
                return False
            now = time.monotonic()
            if now - self._last_warn > 10.0:
                self._last_warn = now
                log.warning(
                    "tracescore queue full (%d); dropped %d records so far "
                    "(app fine, telemetry degraded)", self.max_size, self.dropped,
                )
            return False
        self._buf.append(item)
        if record:
            now = time.monotonic()
            gap = self._last_gap = min(now - self._last_put, 1.0)
            self._gap += (gap - self._gap) * 0.2
            self._last_put = now
        if self._thread is None:
            self._start()
        # Wake the writer at once for a full batch, and for a record some metric sampled: its
        # scores wait on it (a span held for them). The others ride along with the next
        # batch or the next ``interval_s``; a busy writer takes whatever has piled up.
        if len(self._buf) >= self.batch_size:
            self._now.set()
            self._event.set()
        elif (wake or record and (item[1].metrics if type(item) is tuple else
                                  type(item) is LazyRecord and item.decision is not None)) \
                and not self._event.is_set():  # (already woken: no lock, no syscall)
            self._event.set()
        return True

    @property
    def depth(self) -> int:
        return len(self._buf)

    # -- control ----------------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._svc.first_wait_s = self.interval_s
                self._svc.start()
                self._thread = self._svc.thread

    def flush(self, timeout: float | None = None) -> bool:
        """Block until everything enqueued before this call is written. Not for the hot path."""
        if self._thread is None and not self._buf:
            return True
        marker = _Marker()
        self._buf.append(marker)  # markers are never dropped
        if self._thread is None:
            self._start()
        self._now.set()
        self._event.set()
        return marker.done.wait(timeout)

    def shutdown(self, timeout: float | None = None) -> bool:
        ok = self.flush(timeout)
        self._stop = True
        self._now.set()
        if self._thread is not None:
            self._svc.stop(timeout)  # (wakes it; it drains the buffer up to the deadline)
        return ok

    # -- writer thread -------------------------------------------------------------------------
    def _step(self) -> float:  # (the service's step: linger, wait out a backoff, write)
        if self._svc.woken and not self._backoff and self._may_linger():
            # a sampled record of a busy stream woke us: let more join its transaction
            self._now.wait(self.linger_s)
        self._now.clear()
        # (a new batch or a flush must not cut a backoff short: no retry storm)
        while not self._stop and time.monotonic() < self._retry_at:
            self._event.wait(self._retry_at - time.monotonic())
            self._event.clear()
        self._write_out()
        return max(self.interval_s, self._backoff)

    def _drain_on_stop(self) -> bool:
        """The service's drain: True once the buffer is empty or a write was refused while
        stopping (what is left is counted as lost at exit)."""
        if not self._gave_up:
            self._write_out()
        return self._gave_up or not self._buf

    def _write_out(self) -> None:
        """Write what is buffered; a refusal that passes starts (or doubles) a backoff."""
        try:
            store = self._store
            if store is None:
                store = self._store = self._open()
            if self._drop_reason == DISK_FULL and self._buf:
                self._wal_absorbed(store)
            self._drain(store)
            self._backoff = 0.0
            self._written_ok()  # (also when the buffer held only updates and markers)
            if self._truncate_wal:
                self._give_back_wal(store)
        except _DbUnavailable as exc:
            # Locked, full, I/O error: the records are back at the front of the buffer
            # (bounded: new ones are dropped and counted meanwhile); try again with backoff.
            if self._store is not None and exc.kind in (DISK_FULL, IO_ERROR):
                self._recover(self._store)
            self._fault(exc)
            self._backoff = min(max(0.1, self._backoff * 2), 2.0)
            self._retry_at = time.monotonic() + self._backoff
            if self._stop:
                self._gave_up = True  # shutting down: what is still buffered is counted as lost
        except Exception as exc:  # the db is unusable now; try again on the next wake
            record_internal_error("queue.writer", exc)
            time.sleep(min(1.0, self.interval_s * 5))

    def _writer_ended(self) -> None:
        """The service's on_exit: what is still buffered (stopped with the database
        unavailable, or at the stop's deadline) is counted as lost; the connection closed."""
        self.lose_buffered()  # (nothing counted when no record is left)
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def _may_linger(self) -> bool:
        """Lingering is on, nothing asked for a write now (a full batch, a flush, shutdown),
        and the stream is busy."""
        return self.linger_s > 0 and not self._now.is_set() and not self._stop \
            and self._busy()

    def _busy(self) -> bool:
        """Records arrive faster than one per ``linger_s / 4``: by their mean gap, or by the
        last one (see ``linger_s``)."""
        return min(self._gap, self._last_gap) * 4 < self.linger_s

    def _open(self) -> StoreAPI:
        try:
            return open_store(self.db_path, timeout_s=self.busy_timeout_s)
        except Exception as exc:
            kind = storage_fault(exc)
            if kind is None:
                raise
            raise _DbUnavailable(str(exc), kind) from exc

    def _recover(self, store: StoreAPI) -> None:
        """After a full disk or an I/O error: a new connection for the next try (SQLite may
        leave the old one mid-transaction or with a stale snapshot)."""
        recover = getattr(store, "recover", None)
        if recover is None:
            return
        try:
            recover()
        except Exception as exc:  # cannot open again yet (still full): the next try does
            if storage_fault(exc) is None:
                record_internal_error("queue.recover", exc)

    def _fault(self, exc: _DbUnavailable) -> None:
        self.db_unavailable = str(exc)
        self._drop_reason = exc.kind
        if exc.kind == DISK_FULL:
            self._batch_limit = max(1, self._batch_limit // 2)
            self._truncate_wal = True
        NOTICE.fault(self.db_path, "writer", exc.kind, str(exc))

    def _written_ok(self) -> None:
        """A batch was stored: batches grow back, and a fault, if any, is over."""
        if self._batch_limit < self.batch_size:
            self._batch_limit = min(self.batch_size, self._batch_limit * 2)
        if self.db_unavailable is None:
            return
        self.db_unavailable = None
        self._drop_reason = None
        dropped = sum(self.dropped_by.values())
        NOTICE.resumed(self.db_path, "writer",
                       f"{len(self._buf)} records still wait in memory; {dropped} were dropped "
                       "meanwhile or before (stats()['lost'])" if dropped else
                       f"{len(self._buf)} records still wait in memory, none was dropped")

    def _give_back_wal(self, store: StoreAPI) -> None:
        """After a full disk, after each batch until batches are full-size again and once the
        buffer is written: checkpoint the WAL and truncate it. Its frames (those of the failed
        tries too) would otherwise keep their room while the checkpoint needs as much again in
        the database file: on a tight disk the backlog then needs the database plus one batch,
        not twice the backlog. Best effort: a reader holding an old snapshot makes it wait for
        the next time."""
        checkpoint = getattr(store, "checkpoint", None)
        if checkpoint is None:
            self._truncate_wal = False
            return
        try:
            busy, _, _ = checkpoint("TRUNCATE")
        except Exception as exc:
            if storage_fault(exc) is None:
                record_internal_error("queue.checkpoint", exc)
            return
        self._truncate_wal = bool(busy) or self._batch_limit < self.batch_size

    def _wal_absorbed(self, store: StoreAPI) -> None:
        """While the disk is full: write only once the WAL is checkpointed into the database
        file (raises :class:`_DbUnavailable` until then). The WAL's frames are pages the
        database must find room for at the checkpoint; a batch written before it would take
        the room just freed for more WAL frames, and the checkpoint, then the writer, would
        wait for ever for room that never comes (issue 31: 306 jobs pending, nothing stored
        30 s after the space came back)."""
        checkpoint = getattr(store, "checkpoint", None)
        if checkpoint is None:
            return
        try:
            busy, frames, done = checkpoint("TRUNCATE", wait_s=0.2)
        except Exception as exc:
            kind = storage_fault(exc)
            if kind is None:
                raise
            raise _DbUnavailable(str(exc), kind) from exc
        if frames > 0 and done < frames:  # (-1, -1: not a WAL database; busy: readers)
            raise _DbUnavailable("database or disk is full (the WAL is not checkpointed "
                                 "yet)", DISK_FULL)

    def _drain(self, store: StoreAPI) -> None:
        while self._buf:
            records: list[Any] = []  # (record, decision) pairs, or a record alone (Pairs)
            markers: list[_Marker] = []
            taken: list[Any] = []
            n = 0
            limit = self._batch_limit
            if limit >= self.batch_size:
                # A backlog goes in larger transactions (up to 8 batches): each statement
                # costs the writer a wait for the GIL while the app's threads run, so fewer
                # statements per record keep up with a busy app. Not after a full disk:
                # then batches shrink (see _fault).
                limit = max(limit, min(len(self._buf), self.batch_size * 8))
            if self.db_path in TIGHT:
                # A disk with little room: small transactions. Each one's pages sit in the WAL
                # until the checkpoint after its commit moves them into the database file, so
                # the disk must hold the database plus one transaction; a backlog written in
                # one 4,000-record transaction took the last room for WAL frames that could
                # then never be checkpointed (issue 31).
                limit = min(limit, TIGHT_BATCH)
            buf = self._buf
            while buf and n < limit:
                item = buf[0]
                if type(item) is tuple or type(item) is RagRecord:  # records: most items
                    buf.popleft()
                    n += 1
                    taken.append(item)
                    records.append(item)
                    continue
                if type(item) is LazyRecord:  # an unsampled request's record, built here
                    buf.popleft()
                    n += 1
                    rec = item.resolve(self.losses)
                    if rec is not None:
                        taken.append(rec)
                        records.append(rec)
                    continue
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
                    self._opened = True  # (it may open jobs)
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
            if self._opened:
                # (a batch whose jobs were all scored on write or skipped: nothing to lease)
                self._opened = False
                self.port.jobs_opened()
            if records and self._buf and len(self._buf) < self.batch_size \
                    and self._may_linger():
                # Records of a busy stream that came in while this batch was written: they
                # wait for the next wake and linger with the ones after them (a sampled one
                # among them has set the event), instead of a transaction of one or two of
                # their own right now — a batch costs the writer ~0.7 ms whatever its size.
                return

    def _write(self, store: StoreAPI, records: list[Any]) -> None:
        good: list[Any] = []
        for item in records:
            rec = item if type(item) is RagRecord else item[0]
            if is_sanitized(rec):
                good.append(item)  # (as it is: no new object for the collector to track)
                continue
            try:
                good.append((sanitize_record(rec), Pairs.decision(item)))
            except InvalidRecord as exc:
                self.failed += 1
                self.losses.add(exc.reason, 1, str(exc))
        drops = self._unsaved_drops
        lost = self.losses.take_unsaved()
        by_reason, self._unsaved_drop_reasons = self._unsaved_drop_reasons, {}
        degraded = _degraded.take_unwritten()
        counters = {"records_dropped": drops, "records_seen": len(records) + drops,
                    **{f"lost.{k}": v for k, v in lost.items()}}
        if degraded:  # capture fallbacks taken (integrations/_degraded.py)
            counters["capture_degraded"] = degraded
        for k, v in by_reason.items():
            counters[f"lost.{k}"] = counters.get(f"lost.{k}", 0) + v
        try:
            self._write_good(store, Pairs(good), counters)
        except BaseException:
            self.losses.give_back(lost)
            _degraded.give_back(degraded)
            for k, v in by_reason.items():
                self._unsaved_drop_reasons[k] = self._unsaved_drop_reasons.get(k, 0) + v
            raise
        self._unsaved_drops -= drops
        self._written_ok()
        if self._truncate_wal:
            self._give_back_wal(store)

    def _write_good(self, store: StoreAPI, records: Sequence[tuple[RagRecord, Decision]],
                    counters: dict[str, int]) -> None:
        try:
            jobs: list[NewJob] = []
            scored: list[tuple[NewJob, list[Any]]] = []
            port = self.port
            ow = on_write = port.on_write()
            if ow is not None and (len(self._buf) > self.batch_size or not ow.open()):
                ow = None  # behind (a backlog), or no worker: the worker scores them all
            until = time.perf_counter() + ow.budget_s if ow is not None else 0.0
            for item in getattr(records, "items", records):
                if type(item) is not tuple:  # (a record alone: no metric sampled it, no jobs)
                    continue
                for job in port.plan_jobs(item[0], item[1]):
                    if ow is not None and job.status == PENDING:
                        scores = ow.score_now(item[0], job)
                        if scores is not None:
                            scored.append((job, scores))
                            if time.perf_counter() > until:
                                ow = None  # this batch's budget is spent
                            continue
                    jobs.append(job)
            refs = store.write_batch(
                records, jobs, counters, keep_full_text=self.keep_full_text,
                segments=self.segments, scored=scored,
                delivery=on_write.delivery if scored and on_write is not None else None)
            self.written += len(records)
            if not self._opened:
                self._opened = any(j.status == PENDING for j in jobs)
            if scored and on_write is not None:
                _scored_on_write(on_write, scored, refs)
            return
        except Exception as exc:
            if store.unavailable(exc):
                raise _DbUnavailable.of(exc) from exc
            record_internal_error("queue.write_batch", exc)
        self._opened = True
        # The batch as a whole failed on its content: write one record at a time so a single
        # bad record costs only itself, and count what could not be stored, by reason.
        for rec, decision in records:
            try:
                store.write_batch([(rec, decision)], self.port.plan_jobs(rec, decision), None,
                                  keep_full_text=self.keep_full_text, segments=self.segments)
                self.written += 1
            except Exception as exc:
                if store.unavailable(exc):
                    raise _DbUnavailable.of(exc) from exc
                self._lose(exc)
        store.bump_counters({**counters, **{f"lost.{k}": v for k, v in
                                            self.losses.take_unsaved().items()}})

    def _lose(self, exc: BaseException) -> None:
        self.failed += 1
        self.losses.add(f"write_failed:{type(exc).__name__}", 1, str(exc))

    def lose_buffered(self) -> int:
        """Count what is still buffered as lost (shutdown while the database is unavailable)."""
        n = sum(1 for item in self._buf
                if type(item) is RagRecord or type(item) is LazyRecord or isinstance(item, tuple))
        self.losses.add("unwritten_at_shutdown", n, self.db_unavailable)
        return n

    def _apply_ground_truth(self, store: StoreAPI, upd: GroundTruthUpdate | FeedbackUpdate) -> None:
        try:
            self.port.apply_update(store, upd)
        except Exception as exc:
            if store.unavailable(exc):
                raise _DbUnavailable.of(exc) from exc
            self.losses.add(f"update_failed:{type(exc).__name__}", 1, str(exc))
            record_internal_error("queue.ground_truth", exc)


def _scored_on_write(on_write: OnWriteScorer, scored: Sequence[tuple[NewJob, list[Any]]],
                     refs: Sequence[Any]) -> None:
    """Committed: the scores stored on write go to the exporter and the span attacher
    (isolated: the batch is written, a failure here must not write it again)."""
    for (job, scores), ids in zip(scored, refs):
        if ids is None:
            continue  # a replay: its job existed already
        try:
            on_write.stored(job.record_id, scores, ids)
        except Exception as exc:
            record_internal_error("queue.scored_on_write", exc)


class _DbUnavailable(Exception):
    """The database refused a write for a reason that passes (locked, busy, full, I/O);
    ``kind``: :func:`~tracescore._internal.db_faults.storage_fault`'s name for it."""

    def __init__(self, message: str, kind: str = "db_unavailable") -> None:
        super().__init__(message)
        self.kind = kind

    @classmethod
    def of(cls, exc: BaseException) -> _DbUnavailable:
        return cls(str(exc), storage_fault(exc) or "db_unavailable")

