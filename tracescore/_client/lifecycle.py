"""The pipeline's life cycle (:class:`Lifecycle`, a part :class:`tracescore.client.Tracescore`
holds; its documented methods delegate here and carry these docstrings): ``flush`` (wait until
every record is stored and scored and its spans exported), ``shutdown`` and ``stats``.
``flush`` and ``shutdown`` block the calling thread (never call them on the request path);
``stats`` reads in-memory counters and a cached database snapshot."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._internal import capture_degraded as _degraded
from .._internal.errors import record_internal_error
from .._internal.losses import Losses
from ..export import ExportLoss
from ..processor import ScoreAttachingProcessor, release_processors
from ..queue import RecordQueue
from ..store import open_store
from ..telemetry import PipelineSnapshot, Telemetry, flush_within, open_jobs

if TYPE_CHECKING:  # (the worker is a stage above the client's parts)
    from ..worker import ScoringWorker


class Lifecycle:
    """Flush, shutdown and stats of one client, with explicit inputs: the stages it waits
    for and stops (``queue``, ``worker``, ``attacher``, ``telemetry``, the background
    services ``retention``, ``monitors``, ``sessions``, the ``embedder``), what ``stats()``
    reads (``losses``, ``export_loss``, ``judge_session``, and ``counts()``: the client's
    records seen, sampled, contexts dropped — plain ints the request path bumps), and
    callbacks into the client: ``scoring()`` (whether this process scores: a ``tracescore
    worker`` turns it off before its shutdown), ``closing()`` (the client takes no more
    records; under the shutdown lock) and ``uninstrument()``. ``otel_capture`` is set once
    ``capture="otel"`` has attached."""

    def __init__(self, db_path: str, metric_names: Sequence[str], *, queue: RecordQueue,
                 worker: ScoringWorker, attacher: ScoreAttachingProcessor | None,
                 telemetry: Telemetry, losses: Losses, export_loss: ExportLoss,
                 judge_session: Any, services: tuple[Any, Any, Any], embedder: Any,
                 adopted: bool, scoring: Callable[[], bool],
                 counts: Callable[[], tuple[int, int, int]], closing: Callable[[], None],
                 uninstrument: Callable[[], None]) -> None:
        self.db_path = db_path
        self._metric_names = metric_names
        self.queue, self.worker, self.attacher = queue, worker, attacher
        self.telemetry, self.losses, self.export_loss = telemetry, losses, export_loss
        self.judge_session = judge_session
        self.retention, self.monitors, self.sessions = services
        self.embedder = embedder
        self._adopted = adopted
        self.scoring, self.counts = scoring, counts
        self.closing, self.uninstrument = closing, uninstrument
        self.otel_capture: Any = None
        self._closed = False
        self._lock = threading.Lock()
        #: flush()'s connection per flushing thread (see _open_jobs)
        self._flush_readers = threading.local()

    def flush(self, timeout: float = 30.0) -> bool:
        """Block until everything submitted so far is stored, scored and exported.

        Returns False if ``timeout`` passed first. Not for the request path.
        """
        import time

        deadline = time.monotonic() + timeout
        otel = self.otel_capture
        if otel is not None:  # capture="otel": the traces still waiting become records now
            otel.assemble_all()
        if not self.queue.flush(timeout):
            return False
        # Capture only (score=False): stored is this process's part; workers elsewhere score.
        # Scored: the scorer is idle (it found nothing to lease and has nothing in flight) and
        # the database has no open job of our metrics. While the scorer works through a
        # backlog only its in-memory idle flag is read (issue 19: a query every poll, 262 of
        # them while a 43k-job backlog drained); the database is asked when the scorer
        # looks idle — a job deferred for the judge, leased by another process or committed
        # after the scorer's last look is still open — at widening intervals while it stays so.
        if self.scoring():
            self.worker.wake()
            pause, db_gap, next_check, was_idle = 0.002, 0.005, 0.0, False
            while True:
                if self.worker.gave_up:
                    return False  # (a scorer that is not restarted any more: at once)
                idle = self.worker.idle
                if idle and (not was_idle or time.monotonic() >= next_check):
                    if not self._metric_names:
                        break
                    open_jobs = self._open_jobs(deadline)
                    if open_jobs is None:
                        return False
                    if not open_jobs:
                        break
                    self.worker.wake()  # (it may not have looked since the last commit)
                    db_gap = db_gap * 2 if was_idle else 0.005
                    next_check = time.monotonic() + min(db_gap, 0.25)
                was_idle = idle
                if time.monotonic() > deadline:
                    return False
                time.sleep(pause)
                pause = min(pause * 2, 0.02)  # an in-memory flag: cheap to read often
        ok = True
        # On helper threads: the SDK's batch processors ignore the flush timeout, and with the
        # backend down the exporters retry for their own timeout per batch.
        if self.attacher is not None:
            ok = flush_within(self.attacher.force_flush, deadline - time.monotonic(), "spans")
            # exported spans confirmed their scores' delivery: have the worker write that down
            ok = self.worker.deliveries.sync(deadline - time.monotonic()) and ok
        if self.telemetry.enabled:
            ok = flush_within(self.telemetry.force_flush, deadline - time.monotonic(),
                              "logs-metrics") and ok
        return ok

    def _open_jobs(self, deadline: float) -> bool | None:
        """Whether the database has open jobs of our metrics; None: it cannot be opened
        before ``deadline``. Asked through a connection kept per flushing thread (opening
        one, with its schema check, cost each ``flush()`` ~2 ms of CPU: a serverless app
        flushes once per request); one that fails is opened again once."""
        import time

        cache = self._flush_readers
        for attempt in (0, 1):
            store = getattr(cache, "store", None)
            if store is not None and cache.pid != os.getpid():
                store = None  # (a forked child: the parent's connection is not ours to use)
            if store is None:
                try:  # bounded by the deadline, also when another process holds the database
                    store = open_store(self.db_path,
                                       timeout_s=max(0.05, deadline - time.monotonic()))
                except Exception:
                    return None
                cache.store, cache.pid = store, os.getpid()
            try:
                return bool(store.has_open_jobs(self._metric_names))
            except Exception:  # locked for longer than the wait, or the server away
                cache.store = None
                try:
                    store.close()
                except Exception:
                    pass
                if attempt:
                    return True  # (still open, as far as we can tell)
        return True

    def _close_flush_reader(self) -> None:
        cache = self._flush_readers
        store = getattr(cache, "store", None)
        if store is not None and cache.pid == os.getpid():
            cache.store = None
            try:
                store.close()
            except Exception:
                pass

    def close_sessions(self, now: float | None = None) -> Any:
        """Close the sessions idle for ``session_idle`` as of ``now`` (default: the clock) at
        once, on the caller's thread, and return what was done
        (:class:`~tracescore.sessions.closer.CloseResult`). The background closer does the
        same every few seconds; this is for tests (a clock moved on instead of a sleep) and
        scripts. Blocking; raises ``RuntimeError`` without ``session_idle``."""
        closer = self.sessions
        if closer is None:
            raise RuntimeError("sessions are not closed here: pass session_idle to init "
                               "(and score=True on PostgreSQL)")
        from ..store.base import open_store

        store = open_store(self.db_path)
        try:
            return closer.close_now(store, now)
        finally:
            store.close()

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Flush, stop the background threads, and shut down the span pipeline.

        Returns within about ``timeout`` seconds in all (every step gets what is left of it;
        what is still unwritten then, e.g. with the database locked, is counted in
        ``stats()["lost"]`` as ``unwritten_at_shutdown``).
        """
        import time

        deadline = time.monotonic() + max(0.0, timeout)

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        with self._lock:
            if self._closed:
                return True
            ok = self.flush(timeout)
            self._closed = True
            self.closing()
        self.uninstrument()
        if self.retention is not None:
            self.retention.stop(left())
        if self.monitors is not None:
            self.monitors.stop(min(5.0, left()))
        if self.sessions is not None:
            self.sessions.stop(min(5.0, left()))
        # (what the writer could not store by then is counted as lost when it stops)
        ok = self.queue.shutdown(left()) and ok
        self.worker.stop(left())
        attacher = self.attacher
        if attacher is not None:
            if self._adopted:  # the app's processors: give them back, never shut them down
                release_processors(attacher)
                flush_within(_returning_true(lambda _ms: attacher.close(shutdown_inner=False)),
                             left(), "close")
            else:
                flush_within(_returning_true(lambda _ms: attacher.shutdown()), left(),
                             "shutdown")
        if self.telemetry.enabled:
            flush_within(_returning_true(self.telemetry.shutdown), left(), "telemetry")
        close = getattr(self.embedder, "close", None)
        if close is not None:
            close()
        self._close_flush_reader()
        return ok

    def stats(self) -> dict[str, Any]:
        """Counters of this process plus the database's, answered at once from memory.

        Never blocks on the database and never raises: ``open_jobs`` and ``db_counters`` are
        what the scoring worker last read (``db_checked_at``, a ``time.time()``; None before the
        first read). ``lost`` counts, by reason, what was accepted and then could not be kept
        (``queue_full``, ``disk_full`` — records beyond the in-memory buffer while the disk was
        full —, ``invalid_trace_id``, ``write_failed:<error>``, ``unwritten_at_shutdown``, ...);
        ``db_unavailable`` is the database error the writer or the scorer is waiting out (a
        full disk, a lock), or None: records and scores wait in memory meanwhile and are
        written when it passes. ``scorer`` is the scoring loop's health (``alive``, ``restarts``,
        ``gave_up``, ``last_error``): a loop that dies is restarted with a backoff.
        ``capture`` counts, per cause, the fallbacks capture took when a framework's run had a
        shape it does not understand (process-wide; docs/capture.md).
        """
        try:
            return self._stats()
        except Exception as exc:  # a counter read must never break the caller
            record_internal_error("stats", exc)
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _stats(self) -> dict[str, Any]:
        db = self.worker.db_snapshot
        seen, sampled, contexts_dropped = self.counts()
        lost = self.losses.snapshot()
        # drops at the full buffer: under the database fault that filled it (``disk_full``,
        # ``db_io_error``, ``db_unavailable``), else ``queue_full`` (the app outpaced the writer)
        by_fault = dict(self.queue.dropped_by)
        if self.queue.dropped - sum(by_fault.values()) > 0:
            lost["queue_full"] = self.queue.dropped - sum(by_fault.values())
        for reason, n in by_fault.items():
            lost[reason] = lost.get(reason, 0) + n
        judge = None
        if self.judge_session is not None:
            j = self.judge_session.judge
            judge = {
                "model": self.judge_session.model, "calls": j.calls, "failures": j.failures,
                "breaker_state": j.breaker.state, "breaker_opened": j.breaker.opened,
                "health": dict(self.judge_session.health),
                # the current outage in one line (None while the judge answers)
                "unavailable": j.outage.current,
            }
        return {
            "queue_depth": self.queue.depth,
            "dropped": self.queue.dropped,
            # capture fallbacks taken, per cause (process-wide; docs/capture.md)
            "capture": _degraded.counts(),
            "dropped_other": self.queue.dropped_other,
            "written": self.queue.written,
            "lost": lost,
            "db_unavailable": self.queue.db_unavailable or self.worker.db_unavailable,
            "scored_jobs": self.worker.scored,
            "error_scores": self.worker.errors,
            # metrics whose every record so far failed (logged once at ERROR): {name:
            # {"errors": n, "reason": the first error}}
            "failing_metrics": self.worker.failing.snapshot(),
            "open_jobs": db.get("open_jobs"),
            "records_seen": seen,
            "records_sampled": sampled,
            "contexts_dropped": contexts_dropped,
            "export_failures": sum(self.export_loss.failures.values()),
            "export_lost": self.export_loss.lost,
            # scores whose span failed to export (they stay undelivered), and scores sent
            # again on a carrier span by the redelivery sweep
            "scores_export_failed": (self.attacher.export_failed_scores
                                     if self.attacher is not None else 0),
            "scores_redelivered": self.worker.redelivered,
            "spans_held": self.attacher.held if self.attacher is not None else 0,
            "deferred_jobs": self.worker.deferred,
            "judge": judge,
            # judge budgets (docs/judge_budget.md): this process's decisions, by outcome
            "judge_budget": (None if self.worker.judging is None else
                             {"budgets": dict(self.worker.judging.budgets),
                              **self.worker.judging.counts}),
            # the scoring loop's health (None in a capture-only process): alive, restarts
            # (it is restarted after a fault), gave_up, last_error
            "scorer": self.worker.health() if self.scoring() else None,
            # the session closer of this process (None without session_idle): sessions closed,
            # passes made (docs/sessions.md)
            "sessions": None if self.sessions is None else {
                "closed": self.sessions.closed, "passes": self.sessions.passes},
            "db_counters": dict(db.get("counters") or {}),
            "db_checked_at": db.get("checked_at"),
        }

    def snapshot(self) -> PipelineSnapshot:
        """For the observable metrics (metric reader thread): counters plus one SQL query."""
        n_open, lag = open_jobs(self.db_path, self._metric_names)
        seen, sampled, _ = self.counts()
        return PipelineSnapshot(
            records_seen=seen, records_sampled=sampled,
            records_dropped=self.queue.dropped, queue_depth=self.queue.depth,
            open_jobs=n_open, scoring_lag_s=lag,
        )


def _returning_true(stop: Callable[[int], Any]) -> Callable[[int], bool]:
    """A shutdown step (returns None) for :func:`flush_within` (which wants a result)."""
    def run(millis: int) -> bool:
        stop(millis)
        return True

    return run
