"""The scoring worker: leases jobs from SQLite, runs metrics, stores and attaches scores.

One daemon thread runs an asyncio loop. Local metrics run in a small thread pool (they are CPU
work); judge metrics are coroutines and share the loop. At most ``concurrency`` jobs run at once.
Each job is leased (status, owner, lease expiry, attempts), so a process that dies mid-scoring
leaves jobs that the next process on the same database picks up when the lease expires; the
score insert and the job's ``done`` mark are one transaction guarded by the lease owner, so every
persisted job is scored exactly once.

Everything here runs with OpenTelemetry instrumentation suppressed: the judge's own LLM calls are
never traced, captured and scored in a loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from opentelemetry import context as otel_context

from ._internal.db_faults import DISK_FULL, IO_ERROR, NOTICE, storage_fault
from ._internal.errors import record_internal_error
from ._internal.secrets import scrub
from ._internal.validate import valid_ids
from .judge.base import RetryLater
from .judge.session import JudgeSession
from .metrics.base import Metric, check_output
from .processor import ScoreAttachingProcessor, ScoreRef
from .record import RagRecord
from .score import Score
from .store import Job, StoreAPI, open_store
from .store.compact import skip_reason

log = logging.getLogger("tracescore")


class ScoringWorker:
    def __init__(
        self,
        db_path: str,
        metrics: Sequence[Metric],
        *,
        attacher: ScoreAttachingProcessor | None = None,
        concurrency: int = 4,
        lease_seconds: float = 120.0,
        max_attempts: int = 3,
        metric_timeout_s: float = 60.0,
        poll_seconds: float = 0.5,
        on_scores: Callable[[str, Sequence[ScoreRef]], None] | None = None,
    ) -> None:
        self.db_path = db_path
        self.metrics: Mapping[str, Metric] = {m.name: m for m in metrics}
        self.attacher = attacher
        self.concurrency = max(1, concurrency)
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.metric_timeout_s = metric_timeout_s
        self.poll_seconds = poll_seconds
        #: Called once per stored job with its scores (export: log records, histogram points).
        self.on_scores = on_scores
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        #: the app's redaction function (Tracescore sets it)
        self.redact: Callable[[str], str] | None = None
        self.scored = 0
        self.errors = 0
        self.deferred = 0
        #: The judge session of judge metrics (its SQLite connection lives on this loop).
        self.judge_session: JudgeSession | None = None
        self.judge_canary = False
        #: set once the start-up canary has finished (or failed): for callers that want its
        #: verdict before reporting, such as the demo
        self.canary_done = threading.Event()
        self.judge_timeout_s = 600.0
        #: how long a job may wait for the judge (breaker open, budget) before it fails
        self.judge_max_wait_s = 6 * 3600.0
        #: judge jobs leased per unit of concurrency (they wait far more than they compute)
        self.judge_window = 8
        #: Local jobs leased together are scored together (one executor call, one commit):
        #: one asyncio task and one executor hop per job cost the scorer more than most local
        #: metrics themselves. ``concurrency`` still bounds the local jobs in flight.
        self._local_open: set[int] = set()
        self._loop_state: Any = None
        #: local jobs leased per unit of ``concurrency`` (at most ``concurrency`` run at
        #: once whatever it is): larger leases make fewer, larger batches
        self.local_window = 16
        #: a batch's metric running this long: the scores ready so far are stored, and
        #: another pool thread takes the batch's next metrics (``first_call_straggle_s`` for
        #: a metric's first call here: it imports its libraries, and two threads importing
        #: one library at once can see it half-initialised)
        self.straggle_s = 0.05
        self.first_call_straggle_s = 5.0
        #: a wake that may mean new jobs (a write, a flush): the loop leases at its next turn;
        #: a wake for deliveries only does not (an empty lease is a write transaction)
        self._lease_hint = True
        self._batchable: dict[str, bool] = {}
        #: metrics that have run once here (see ``first_call_straggle_s``)
        self._warm: set[str] = set()
        self._delivered: list[tuple[list[int], str]] = []
        self._delivered_lock = threading.Lock()
        self._delivered_noted = 0
        self._delivered_written = 0
        self._completions: list[tuple[Job, list[Score], asyncio.Future[Any]]] = []
        self._running_jobs = 0
        #: scores still undelivered this long after they were stored go out again on a carrier
        self.redeliver_after_s = 120.0
        #: after a failed span export: first and longest wait before scores are sent again
        self.redeliver_backoff_s = (1.0, 60.0)
        self._backoff = 1.0
        self._retry_at: float | None = None
        self._last_retry = -1e9
        self._failed_seen = 0
        #: an exported span with no result after this long was dropped by the batch processor
        self.export_confirm_timeout_s = 600.0
        self.redelivered = 0
        #: stored records whose id cannot be a span's (their scores are not exported)
        self.bad_ids = 0
        #: what stats() shows of the database, read by this thread (never the caller's)
        self.db_snapshot: dict[str, Any] = {}
        self.db_snapshot_every_s = 1.0
        #: how long one statement waits for another process's lock; then the worker moves on
        #: (a refused release is retried each loop, a refused lease at the next wake)
        self.busy_timeout_s = 5.0
        #: the database error that stopped the last read/write here, or None
        self.db_unavailable: str | None = None
        #: a write refused for a reason that passes (disk full, I/O error, lock) and not yet
        #: followed by one that passed: scores wait in memory meanwhile (see _store_scores)
        self._write_fault: str | None = None
        self._recovered_at = 0.0
        #: job releases/deferrals the database refused: retried until it takes them
        self._unreleased: list[tuple[Job, float | None, str]] = []
        #: jobs leased by the loop and not finished by it (given back if the loop dies)
        self._held: set[int] = set()
        #: jobs a task of ours gave back while the task is still finishing: leased again, they
        #: are new work, not the in-flight task's own job whose lease ran out
        self._given_back: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.stop_grace_s = 5.0
        self._idle = threading.Event()
        self._started = threading.Event()
        self._executor: ThreadPoolExecutor | None = None
        #: time.time() of the loop's last turn, and of its last successful lease query
        #: (liveness and readiness of a `tracescore worker`)
        self.heartbeat = 0.0
        self.db_ok_at = 0.0
        #: Supervision of the scoring loop: anything escaping it (a BaseException from code we
        #: call) ends that run of the loop; the thread starts it again after a backoff
        #: (``restart_backoff_s``: first and longest wait), at most ``max_restarts`` times in a
        #: row (a run that lasted ``healthy_after_s`` resets the count), then stays dead.
        self.restarts = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.max_restarts = 10
        self.restart_backoff_s = (0.5, 30.0)
        self.healthy_after_s = 60.0
        self._loop_running = False
        self._gave_up = False
        self._halt = threading.Event()
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        """``os.fork()`` after init (gunicorn ``--preload``): the child has no scoring thread.
        Start one of its own, with its own lease owner, event loop and connections."""
        was_running = self._thread is not None and not self._stopping
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._loop = None
        self._wake = None
        self._thread = None
        self._executor = None
        self._idle = threading.Event()
        self._started = threading.Event()
        self._delivered_lock = threading.Lock()
        self._delivered = []
        self._completions = []
        self._running_jobs = 0
        self._unreleased = []
        self._loop_running = False
        self._halt = threading.Event()
        self._held = set()
        self._lease_hint = True
        self._local_open = set()
        if self.judge_session is not None:
            self.judge_session.after_fork()
        if was_running:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="tracescore-scorer",
                                            daemon=True)
            self._thread.start()

    # -- control (any thread) ----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping = False
        self._gave_up = False
        self._halt.clear()
        self._started.clear()
        self._thread = threading.Thread(target=self._run, name="tracescore-scorer", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def wake(self, jobs: bool = True) -> None:
        """Wake the loop (any thread). ``jobs=False``: only to write deliveries down."""
        if jobs:
            self._lease_hint = True
        loop, ev = self._loop, self._wake
        if loop is not None and ev is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(ev.set)
            except RuntimeError:  # loop closed between the check and the call
                pass

    def stop(self, timeout: float = 10.0) -> None:
        # in-flight jobs get part of the timeout to finish; the rest are given back
        self.stop_grace_s = max(0.0, min(5.0, timeout * 0.5))
        self._stopping = True
        self._halt.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout)

    def write_delivered(self) -> None:
        """After :meth:`stop`: write the deliveries noted since (spans flushed at the end)."""
        if self._thread is not None and self._thread.is_alive():
            return  # the loop writes them itself
        store = open_store(self.db_path)
        try:
            self._flush_delivered(store)
        finally:
            store.close()

    def note_delivered(self, score_ids: list[int], how: str) -> None:
        """Called by the attacher (any thread); written to the db by the worker thread."""
        with self._delivered_lock:
            self._delivered.append((score_ids, how))
            self._delivered_noted += 1
        self.wake(jobs=False)

    def sync_delivered(self, timeout: float) -> bool:
        """Wait until every delivery noted so far is written to the database."""
        with self._delivered_lock:
            target = self._delivered_noted
        deadline = time.monotonic() + max(0.0, timeout)
        pause = 0.002
        while self._delivered_written < target:
            if time.monotonic() > deadline or self._thread is None \
                    or not self._thread.is_alive():
                return self._delivered_written >= target
            self.wake(jobs=False)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return True

    @property
    def idle(self) -> bool:
        return self._idle.is_set()

    @property
    def alive(self) -> bool:
        """The scoring loop is running (False before start, after stop, while it waits to be
        restarted, and once it gave up)."""
        return self._loop_running and self._thread is not None and self._thread.is_alive()

    @property
    def gave_up(self) -> bool:
        """The loop died ``max_restarts`` times in a row and is not restarted any more."""
        return self._gave_up

    def health(self) -> dict[str, Any]:
        """The scorer's health for ``stats()`` and ``/readyz`` (any thread; plain reads)."""
        return {"alive": self.alive, "restarts": self.restarts, "gave_up": self._gave_up,
                "last_error": self.last_error, "last_error_at": self.last_error_at}

    # -- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        """The thread's body: runs the loop, and supervises it. Metrics are isolated in
        :meth:`score`; this catches what still escapes (a ``SystemExit`` from a ``redact``
        function or an ``on_scores`` callback, a bug of ours), so one fault cannot end scoring
        for the life of the process. Signals never arrive here (Python delivers them to the
        main thread), so catching ``BaseException`` does not swallow the process's shutdown."""
        token = otel_context.attach(
            otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True)
        )
        backoff: float | None = None  # None: the first wait, restart_backoff_s[0]
        in_a_row = 0
        try:
            while True:
                began = time.monotonic()
                try:
                    asyncio.run(self._main(restarted=in_a_row > 0 or self.restarts > 0))
                    return  # stopped
                except BaseException as exc:  # noqa: BLE001 - supervised: see the docstring
                    self._loop_running = False
                    self.last_error = scrub(f"{type(exc).__name__}: {exc}")[:500]
                    self.last_error_at = time.time()
                    lo, hi = self.restart_backoff_s
                    if backoff is None or time.monotonic() - began >= self.healthy_after_s:
                        backoff, in_a_row = lo, 0
                    self._release_held()
                    if self._stopping:
                        return
                    if in_a_row >= self.max_restarts:
                        self._gave_up = True
                        log.error("tracescore scorer died %d times in a row and is not restarted"
                                  " again; scoring has stopped in this process (pid %d). Last "
                                  "error: %s", in_a_row + 1, os.getpid(), self.last_error)
                        return
                    log.error("tracescore scorer died (%s); restarting it in %.1fs (restart "
                              "%d)", self.last_error, backoff, self.restarts + 1,
                              exc_info=exc)
                    if self._halt.wait(backoff):
                        return  # stop() during the backoff
                    self.restarts += 1
                    in_a_row += 1
                    backoff = min(backoff * 2, hi)
                    self._completions = []
                    self._running_jobs = 0
                    if self.judge_session is not None:
                        try:  # its locks, slots and client belong to the dead loop
                            self.judge_session.after_fork()
                        except Exception as reset_exc:
                            record_internal_error("worker.judge_reset", reset_exc)
        finally:
            self._loop_running = False
            self._started.set()  # a start() waiting for a loop that died at once
            otel_context.detach(token)

    async def _main(self, *, restarted: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._local_open = set()  # (a restarted loop: the dead one's batches are gone)
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tracescore-m")
        store = open_store(self.db_path, timeout_s=self.busy_timeout_s)
        self._loop_running = True
        self._started.set()
        inflight: set[asyncio.Task[None]] = set()
        wake_task: asyncio.Task[Any] | None = None
        # Judge jobs mostly wait (on the judge, or on a step another job of the same record
        # already asked for), so they get a wider window than CPU-bound local jobs; the judge
        # session caps the calls in flight at `concurrency` (JudgeSession.max_concurrency).
        # Local jobs are leased ``local_batch`` at a time, each lease one task (:meth:`_batch`).
        pools: list[tuple[list[str], int, set[asyncio.Task[None]], bool]] = [
            (sorted(n for n, m in self.metrics.items() if m.kind != "judge"),
             self.concurrency, set(), True),
            (sorted(n for n, m in self.metrics.items() if m.kind == "judge"),
             self.concurrency * self.judge_window, set(), False)]
        canary: asyncio.Task[Any] | None = None
        inflight_jobs: dict[int, asyncio.Task[None]] = {}
        # (for _refill: a batch leases the next local jobs itself, before its last commit)
        self._loop_state = (pools[0], inflight, inflight_jobs)
        last_renewal = time.monotonic()
        # Lease at a wake that may mean new jobs, while leases come back full, and at least
        # every poll_seconds (jobs deferred for the judge, leases of dead processes run out).
        lease_more, last_lease = True, 0.0
        try:
            # (after a restart, scores in flight in this process's attacher are not left behind)
            self._redeliver(store, at_start=not restarted)
            if self.judge_session is not None and self.judge_canary \
                    and not self.canary_done.is_set():
                canary = asyncio.create_task(self._canary())
            last_redelivery = time.monotonic()
            last_snapshot = 0.0
            while True:
                self.heartbeat = time.time()
                self._flush_delivered(store)
                if self._unreleased:
                    self._retry_releases(store)
                if time.monotonic() - last_snapshot >= self.db_snapshot_every_s:
                    last_snapshot = time.monotonic()
                    self._read_snapshot(store)
                if self._stopping:
                    break
                if time.monotonic() - last_redelivery > self.redeliver_after_s:
                    last_redelivery = time.monotonic()
                    self._redeliver(store)
                elif self._failed_export_due():
                    self._redeliver(store, older_than_s=1.0)
                leased: list[tuple[Job, set[asyncio.Task[None]], bool]] = []
                more = False  # a lease came back full: more may be waiting
                local_full = False
                lease_now = self._lease_hint or lease_more \
                    or time.monotonic() - last_lease >= self.poll_seconds
                if lease_now:
                    self._lease_hint = False
                    last_lease = time.monotonic()
                for names, limit, tasks, batched in pools:
                    free = (limit * self.local_window - len(self._local_open) if batched
                            else limit - len(tasks))
                    if free > 0 and names and lease_now:
                        want = free
                        try:
                            got = store.lease_jobs(self.owner, want, self.lease_seconds, names)
                            self.db_ok_at = time.time()
                        except Exception as exc:
                            if not self._db_fault(store, exc):
                                record_internal_error("worker.lease", exc)
                            more = True  # (tried again at the loop's next turn)
                            continue
                        if got:
                            self._db_ok()  # (an empty lease writes nothing: proves nothing)
                        more = more or len(got) >= want
                        if batched:
                            local_full = len(got) >= want
                        # a job of ours whose lease ran out while its scores waited for the
                        # database is still in flight here: not a second task for it
                        # (a job its task already gave back, leased again before that task
                        # ended, is new work: skipping it would leave it leased to nobody)
                        for j in got:
                            if j.job_id in inflight_jobs and j.job_id not in self._given_back:
                                continue
                            self._given_back.discard(j.job_id)
                            leased.append((j, tasks, batched))
                if lease_now:
                    lease_more = more
                now = time.monotonic()
                if inflight_jobs and now - last_renewal > self.lease_seconds / 3:
                    # Judge jobs can wait longer than a lease (slow judge, breaker open):
                    # renew what is in flight so no other worker takes it meanwhile.
                    last_renewal = now
                    try:
                        store.renew_leases(self.owner, list(inflight_jobs), self.lease_seconds)
                    except Exception as exc:
                        if not self._db_fault(store, exc):
                            record_internal_error("worker.renew", exc)
                if leased:
                    self._idle.clear()
                    records = store.load_records(j.record_id for j, _, _ in leased)
                    batch: list[Job] = []
                    for job, tasks, batched in leased:
                        self._held.add(job.job_id)
                        if batched and self._in_batch(job.metric):
                            batch.append(job)
                            continue
                        self._spawn(self._job(store, job, records.get(job.record_id)), [job],
                                    tasks, inflight, inflight_jobs)
                    if batch:
                        ids = [j.job_id for j in batch]
                        self._local_open.update(ids)
                        self._spawn(self._batch(store, batch, records, local_full), batch,
                                    pools[0][2], inflight, inflight_jobs).add_done_callback(
                            partial(_free_slots, self._local_open, ids))
                    if more and any(names and (len(self._local_open) < limit * self.local_window
                                               if batched else len(tasks) < limit)
                                    for names, limit, tasks, batched in pools):
                        continue
                if not inflight:
                    self._idle.set()
                if wake_task is None or wake_task.done():
                    self._wake.clear()
                    wake_task = asyncio.create_task(self._wake.wait())
                await asyncio.wait(
                    [*inflight, wake_task], timeout=self.poll_seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            # Stopping: let in-flight jobs finish for a moment, then give the rest back (at
            # once, so another worker of the fleet takes them without waiting for the lease).
            if inflight:
                await asyncio.wait(inflight, timeout=self.stop_grace_s)
            for job_id, task in list(inflight_jobs.items()):
                task.cancel()
                try:  # a done job's lease owner is already cleared: this cannot reopen it
                    store.release_job(Job(job_id, "", "", "", 0), self.owner, "worker stopped")
                except Exception as exc:
                    record_internal_error("worker.release", exc)
            self._held.clear()
            if wake_task is not None:
                wake_task.cancel()
            if canary is not None and not canary.done():
                canary.cancel()
            self._flush_delivered(store)
        finally:
            self._loop_state = None
            self._loop_running = False
            self._idle.set()
            self._executor.shutdown(wait=False, cancel_futures=True)
            if self.judge_session is not None:
                self.judge_session.close()
            store.close()

    def _spawn(self, work: Any, jobs: list[Job], tasks: set[asyncio.Task[None]],
               inflight: set[asyncio.Task[None]],
               inflight_jobs: dict[int, asyncio.Task[None]]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        inflight.add(task)
        tasks.add(task)
        for job in jobs:
            inflight_jobs[job.job_id] = task
        task.add_done_callback(inflight.discard)
        task.add_done_callback(tasks.discard)
        task.add_done_callback(partial(_forget, inflight_jobs, self._given_back,
                                       [j.job_id for j in jobs]))
        return task

    def _done_local(self, job_id: int) -> None:
        """A batched job is finished (stored, given back or taken over): its slot is free."""
        self._held.discard(job_id)
        self._local_open.discard(job_id)

    def _in_batch(self, metric: str) -> bool:
        """A plain (not coroutine) local metric: scored in :meth:`_batch`."""
        ok = self._batchable.get(metric)
        if ok is None:
            m = self.metrics.get(metric)
            ok = m is not None and m.kind != "judge" \
                and not inspect.iscoroutinefunction(m.__call__)
            self._batchable[metric] = ok
        return ok

    def _read_snapshot(self, store: StoreAPI) -> None:
        try:
            self.db_snapshot = {"open_jobs": store.open_job_count(list(self.metrics)),
                                "counters": store.counters(), "checked_at": time.time()}
            self.db_unavailable = self._write_fault  # (reads pass on a full disk)
        except Exception as exc:  # locked or broken: stats() shows the last good read
            self.db_unavailable = f"{type(exc).__name__}: {exc}"

    def _release(self, store: StoreAPI, job: Job, delay_s: float | None, reason: str) -> None:
        """Give a job back (``delay_s`` None: release; else defer). A refusal (database
        locked) is kept and retried each loop, so the job does not wait out its lease."""
        try:
            if delay_s is None:
                store.release_job(job, self.owner, reason)
            else:
                store.defer_job(job, self.owner, delay_s, reason)
            self._given_back.add(job.job_id)
        except Exception as exc:
            self._db_fault(store, exc)
            self.db_unavailable = f"{type(exc).__name__}: {exc}"
            self._unreleased.append((job, delay_s, reason))

    def _retry_releases(self, store: StoreAPI) -> None:
        pending, self._unreleased = self._unreleased, []
        for job, delay_s, reason in pending:
            self._release(store, job, delay_s, reason)

    async def _canary(self) -> None:
        from .judge.canary import run_canary

        assert self.judge_session is not None
        try:
            await run_canary(self.judge_session)
        except RetryLater:
            pass
        except Exception as exc:  # a broken judge shows up in the scores; log it once here
            log.warning("tracescore judge canary could not run: %s", exc)
        finally:
            self.canary_done.set()

    def _flush_delivered(self, store: StoreAPI) -> None:
        with self._delivered_lock:
            pending, self._delivered = self._delivered, []
            noted = self._delivered_noted
        if pending:
            try:
                store.mark_delivered_many(pending)  # one commit for all of them
            except Exception as exc:
                if self._db_fault(store, exc):
                    # kept for the next loop (else the sweep would export them a second time)
                    with self._delivered_lock:
                        self._delivered[:0] = pending
                    return
                record_internal_error("worker.mark_delivered", exc)
            else:
                self._db_ok()
        self._delivered_written = noted

    def _failed_export_due(self) -> bool:
        """Spans failed to export (backend down): sweep again after a backoff in seconds
        (1, 2, 4 … up to ``redeliver_backoff_s[1]``) while exports keep failing, instead of
        waiting for the periodic ``redeliver_after_s`` sweep."""
        if self.attacher is None:
            return False
        now = time.monotonic()
        failed = self.attacher.export_failed_scores
        if failed > self._failed_seen:
            self._failed_seen = failed
            if self._retry_at is None:
                lo, hi = self.redeliver_backoff_s
                if now - self._last_retry > 2 * self._backoff + 5.0:
                    self._backoff = lo  # a new outage: start again from the shortest wait
                self._retry_at = now + self._backoff
                self._backoff = min(self._backoff * 2, hi)
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            self._last_retry = now
            return True
        return False

    def _redeliver(self, store: StoreAPI, *, at_start: bool = False,
                   older_than_s: float | None = None) -> None:
        """Stored scores that never reached the backend go out on carrier spans: at start, all
        that a dead process left; later, those still undelivered ``redeliver_after_s`` after
        they were stored (their span's export failed, or the batch processor dropped it).
        Records whose scores are on their way (held, awaiting export) are left alone."""
        if self.attacher is None:
            return
        try:
            busy: set[int] = set()
            older_than = None
            if store.shared:
                # Other workers of the fleet may be exporting the scores they just stored:
                # only scores older than redeliver_after_s count as left behind.
                older_than = time.time() - self.redeliver_after_s
            if not at_start:
                busy = self.attacher.in_flight(older_than_s=self.export_confirm_timeout_s)
                self._flush_delivered(store)  # deliveries confirmed until now are in the db
                older_than = time.time() - (self.redeliver_after_s if older_than_s is None
                                            else older_than_s)
            for record_id in store.undelivered_record_ids(older_than=older_than):
                # One record at a time: a malformed stored id must not stop the others.
                try:
                    self._redeliver_one(store, record_id, busy, older_than)
                except Exception as exc:
                    record_internal_error("worker.redeliver_record", exc)
        except Exception as exc:
            record_internal_error("worker.redeliver", exc)

    def _redeliver_one(self, store: StoreAPI, record_id: str, busy: set[int],
                       older_than: float | None) -> None:
        assert self.attacher is not None
        trace_hex, _, span_hex = record_id.partition("-")
        if not valid_ids(trace_hex, span_hex):
            # No span can carry them: mark them so the sweep does not pick them again.
            self.bad_ids += 1
            log.warning("tracescore cannot export the scores of record %r: not a valid "
                        "trace/span id (marked delivery='invalid_id')", record_id[:80])
            rows = store.scores_for(record_id, undelivered_only=True)
            store.mark_delivered([r["score_id"] for r in rows], "invalid_id")
            return
        if int(span_hex, 16) in busy:
            return
        if store.shared:  # claimed atomically: one sweeping worker of the fleet sends them
            rows = store.claim_redelivery(  # type: ignore[attr-defined]
                record_id, self.owner, older_than or time.time())
        else:
            rows = store.scores_for(record_id, undelivered_only=True)
        refs = [(r["score_id"], _row_score(r)) for r in rows]
        if refs:
            self.redelivered += len(refs)
            self.attacher.emit_carrier(int(trace_hex, 16), int(span_hex, 16), refs)

    async def _job(self, store: StoreAPI, job: Job, record: RagRecord | None) -> None:
        self._running_jobs += 1
        try:
            await self._job_body(store, job, record)
            self._held.discard(job.job_id)  # stored, given back or taken over: not ours now
        finally:
            self._running_jobs -= 1

    def _release_held(self) -> None:
        """The loop died under its jobs: give them back now, not at the end of their lease
        (attempts count, so a job that kills the loop each time ends in a "gave up" error
        score instead of killing it forever). Releasing a finished job is a no-op (the lease
        owner guards it)."""
        held, self._held = self._held, set()
        if not held:
            return
        try:
            store = open_store(self.db_path, timeout_s=self.busy_timeout_s)
        except Exception as exc:
            record_internal_error("worker.release", exc)
            return
        try:
            for job_id in sorted(held):
                try:
                    store.release_job(Job(job_id, "", "", "", 0), self.owner,
                                      f"the scorer died: {self.last_error}"[:500])
                except Exception as exc:
                    record_internal_error("worker.release", exc)
        finally:
            store.close()

    async def _job_body(self, store: StoreAPI, job: Job, record: RagRecord | None) -> None:
        try:
            metric = self.metrics[job.metric]
            if record is None:
                scores = [Score.failed(n, "record not found in the database", metric=job.metric)
                          for n in metric.names()]
            elif job.attempts > self.max_attempts:
                scores = [Score.failed(
                    n, f"gave up after {job.attempts - 1} attempts: the process died or the "
                    "lease expired while scoring",
                    metric=metric.name,
                    metric_version=metric.version) for n in metric.names()]
            else:
                try:
                    scores = await self.score(metric, record)
                except RetryLater as later:
                    waited = time.time() - job.created_at if job.created_at else 0.0
                    if waited <= self.judge_max_wait_s:
                        self._release(store, job, later.delay_s, later.reason)
                        self.deferred += 1
                        return
                    # Waiting has a limit: a record the judge always fails on (or an outage
                    # longer than the limit) ends in an error score with the reason.
                    scores = [Score.failed(
                        n, f"judge unavailable for this record for {waited:.0f}s "
                        f"(judge_max_wait_s): {later.reason}", metric=metric.name,
                        metric_version=metric.version) for n in metric.names()]
            scores = [self._clean(s) for s in scores]
            refs = await self._store_scores(store, job, scores)
            if refs is None:
                return  # the lease went to another process, which stores the scores
            self.scored += 1
            self.errors += sum(1 for s in scores if s.status == "error")
            self._stored(job.record_id, refs)
            if self.attacher is not None:
                self.attacher.job_done(job.record_id, refs)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            if isinstance(exc, Exception) and _refused(store, exc):
                # stopping while the database refuses the write (full disk): the job waits
                # for the next process, and this attempt is not counted against it
                self._release(store, job, 0.0, f"database unavailable: {exc}"[:500])
                return
            # Our own failure, not the metric's (or the app's ``redact``/``on_scores`` calling
            # sys.exit()): give the job back so it is tried again (attempts count, so a
            # persistent fault ends in a "gave up" error score); the loop goes on.
            record_internal_error("worker.job", exc)
            if not self._stopping:  # a fault that persists must not spin: back off, holding
                # the job (its lease is renewed), 0.1 s doubling to 5 s by its attempts
                await asyncio.sleep(min(0.1 * 2 ** min(job.attempts, 6), 5.0))
            self._release(store, job, None, f"{type(exc).__name__}: {exc}"[:500])

    # -- local jobs, scored together ----------------------------------------------------------
    async def _batch(self, store: StoreAPI, jobs: list[Job],
                     records: Mapping[str, RagRecord], refill: bool = False) -> None:
        """What :meth:`_job` does, for several jobs of plain local metrics at once: their
        metrics run one after the other on a pool thread (:meth:`_run_local`: the per-metric
        timeout holds, and a slow metric neither holds back the scores of the others nor
        keeps them from running), their scores are stored in one transaction. A metric that
        raises is an error score with the reason; our own failure gives its job back."""
        done: list[tuple[Job, list[Score]]] = []
        failed: list[tuple[Job, BaseException]] = []
        try:
            work: list[tuple[Job, Metric, RagRecord]] = []
            for job in jobs:
                try:
                    metric = self.metrics[job.metric]
                    record = records.get(job.record_id)
                    early = self._early_scores(job, metric, record)
                except Exception as exc:
                    failed.append((job, exc))
                    continue
                if early is not None:
                    done.append((job, early))
                else:
                    assert record is not None
                    work.append((job, metric, record))
            if work:
                seen = 0
                async for ready in self._run_local([(m, r) for _, m, r in work]):
                    for i, res in ready:
                        job, metric, _ = work[i]
                        scores = self._local_result(store, job, metric, res, failed)
                        if scores is not None:
                            done.append((job, scores))
                    done, more = [], done
                    seen += len(ready)
                    if seen == len(work) and refill:
                        # The last metrics are done: their slots go to the next jobs, leased
                        # before these scores commit (the pool is never empty between two
                        # batches while jobs wait: a process killed then holds leases). Only
                        # after a full lease: else no job was left waiting.
                        self._local_open.difference_update(j.job_id for j, _ in more)
                        self._refill(store)
                    failed.extend(await self._store_batch(store, more))
            elif done:
                done, more = [], done
                failed.extend(await self._store_batch(store, more))
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            if isinstance(exc, Exception) and _refused(store, exc):
                for job in jobs:  # stopping while the database refuses: as in _job_body
                    if job.job_id in self._held:
                        self._release(store, job, 0.0, f"database unavailable: {exc}"[:500])
                        self._done_local(job.job_id)
                return
            failed.extend((job, exc) for job in jobs if job.job_id in self._held
                          and all(job is not j for j, _ in failed))
        if failed:
            # Our own failure (as in _job_body): back off once, holding the jobs, then give
            # them back (attempts count, so a persistent fault ends in a "gave up" score).
            for _, err in failed:
                record_internal_error("worker.job", err)
            if not self._stopping:
                worst = max(job.attempts for job, _ in failed)
                await asyncio.sleep(min(0.1 * 2 ** min(worst, 6), 5.0))
            for job, err in failed:
                self._release(store, job, None, f"{type(err).__name__}: {err}"[:500])
                self._done_local(job.job_id)

    def _local_result(self, store: StoreAPI, job: Job, metric: Metric,
                      res: tuple[bool, Any, float],
                      failed: list[tuple[Job, BaseException]]) -> list[Score] | None:
        """A batched job's cleaned scores, or None: deferred (``RetryLater``, as
        :meth:`_job_body` does) or failed (added to ``failed``)."""
        try:
            try:
                scores = self._local_scores(metric, res)
            except RetryLater as later:
                waited = time.time() - job.created_at if job.created_at else 0.0
                if waited <= self.judge_max_wait_s:
                    self._release(store, job, later.delay_s, later.reason)
                    self.deferred += 1
                    self._done_local(job.job_id)
                    return None
                scores = [Score.failed(
                    n, f"judge unavailable for this record for {waited:.0f}s "
                    f"(judge_max_wait_s): {later.reason}", metric=metric.name,
                    metric_version=metric.version) for n in metric.names()]
            return [self._clean(s) for s in scores]
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # ours, or the app's redact
            failed.append((job, exc))
            return None

    def _refill(self, store: StoreAPI) -> None:
        """Lease local jobs into the free slots and start their batch (loop thread; what the
        loop does at its next turn, done now). A failure leaves it to the loop."""
        state = self._loop_state
        if state is None or self._stopping:
            return
        (names, limit, tasks, _), inflight, inflight_jobs = state
        free = limit * self.local_window - len(self._local_open)
        if free <= 0 or not names:
            return
        try:
            got = store.lease_jobs(self.owner, free, self.lease_seconds, names)
            self.db_ok_at = time.time()
            batch = [j for j in got if j.job_id not in inflight_jobs
                     or j.job_id in self._given_back]
            if not batch:
                return
            records = store.load_records(j.record_id for j in batch)
        except Exception as exc:
            if not self._db_fault(store, exc):
                record_internal_error("worker.lease", exc)
            self._lease_hint = True
            return
        self._idle.clear()
        plain = [j for j in batch if self._in_batch(j.metric)]
        for job in batch:
            self._given_back.discard(job.job_id)
            self._held.add(job.job_id)
            if job not in plain:
                self._spawn(self._job(store, job, records.get(job.record_id)), [job], tasks,
                            inflight, inflight_jobs)
        if plain:
            ids = [j.job_id for j in plain]
            self._local_open.update(ids)
            self._spawn(self._batch(store, plain, records, len(got) >= free), plain, tasks,
                        inflight, inflight_jobs).add_done_callback(
                partial(_free_slots, self._local_open, ids))
        if len(got) >= free:
            self._lease_hint = True  # (more may wait: the loop looks at its next turn)

    def _early_scores(self, job: Job, metric: Metric,
                      record: RagRecord | None) -> list[Score] | None:
        """The scores of a job that needs no metric run (:meth:`_job_body`, :meth:`score`),
        or None."""
        if record is None:
            return [Score.failed(n, "record not found in the database", metric=job.metric)
                    for n in metric.names()]
        if job.attempts > self.max_attempts:
            return [Score.failed(
                n, f"gave up after {job.attempts - 1} attempts: the process died or the "
                "lease expired while scoring", metric=metric.name,
                metric_version=metric.version) for n in metric.names()]
        if record.compact and metric.requires:
            return [Score.skipped(n, skip_reason(), metric=metric.name,
                                  metric_version=metric.version) for n in metric.names()]
        missing = record.missing(metric.requires)
        if missing:
            return [Score.skipped(n, f"record has no {', '.join(missing)}", metric=metric.name,
                                  metric_version=metric.version) for n in metric.names()]
        return None

    async def _run_local(self, items: list[tuple[Metric, RagRecord]]
                         ) -> AsyncIterator[list[tuple[int, tuple[bool, Any, float]]]]:
        """Run ``items`` one after the other on a pool thread; yields ``(index, (ok, output
        or exception, ms))`` lists: all at once when they finish within ``straggle_s`` (the
        usual case), else what is ready every ``straggle_s``. While every thread of the batch
        has been on its metric for ``straggle_s``, another takes the next items (up to
        ``concurrency``). A metric still running ``metric_timeout_s`` after it started gets
        a timeout result and its thread is left behind, as a timed-out metric's is in
        :meth:`score`."""
        loop = self._loop
        assert loop is not None
        run = _LocalRun(items, contextvars.copy_context(), self._warm)
        timeout, straggle = self.metric_timeout_s, self.straggle_s
        futs: set[asyncio.Future[None]] = set()

        def add_runner() -> None:
            runner = _Runner()
            run.runners.append(runner)
            futs.add(loop.run_in_executor(self._executor, _score_local, run, runner))

        add_runner()
        given = 0
        began = time.monotonic()
        try:
            while given < len(items):
                wait = straggle
                with run.lock:
                    now = time.monotonic()
                    for r in run.runners:
                        if r.index is not None and not r.abandoned:
                            wait = min(wait, r.started + timeout - now)
                if futs:
                    finished, _ = await asyncio.wait(futs, timeout=max(0.001, wait))
                    futs -= finished
                else:
                    await asyncio.sleep(max(0.001, wait))
                need = False
                with run.lock:
                    now = time.monotonic()
                    live = 0
                    fresh = False
                    for r in run.runners:
                        if r.abandoned or r.index is None:
                            continue
                        if now - r.started >= timeout:
                            r.abandoned = True
                            run.results[r.index] = (False, _TIMED_OUT,
                                                    (now - r.started) * 1000)
                            run.ready.append(r.index)
                        else:
                            live += 1
                            fresh = fresh or now - r.started < (
                                straggle if run.items[r.index][0].name in run.warm
                                else self.first_call_straggle_s)
                    if run.next < len(items) and not fresh and live < self.concurrency:
                        need = True
                    ready = run.ready[given:]
                if need:
                    add_runner()
                if ready and (given + len(ready) == len(items) or now - began >= straggle):
                    given += len(ready)
                    yield [(i, run.results[i]) for i in ready]
        finally:
            with run.lock:  # done, or cancelled (stopping): threads stop after their metric
                for r in run.runners:
                    r.abandoned = True

    def _local_scores(self, metric: Metric, result: tuple[bool, Any, float]) -> list[Score]:
        """One metric's scores from its :meth:`_run_local` result, as :meth:`score` makes
        them (raises ``RetryLater`` as it does)."""
        ok, out, ms = result
        if ok:
            try:
                return _normalise(metric, out, ms)
            except Exception as exc:
                out = exc
        if isinstance(out, RetryLater):
            raise out
        if out is _TIMED_OUT:
            reason = f"timed out after {self.metric_timeout_s:g}s"
        elif isinstance(out, MetricAborted):
            reason = str(out)
        else:
            reason = f"{type(out).__name__}: {out}"[:2000]
        return [Score.failed(n, reason, metric=metric.name, metric_version=metric.version,
                             duration_ms=ms) for n in metric.names()]

    async def _store_batch(self, store: StoreAPI, done: list[tuple[Job, list[Score]]]
                           ) -> list[tuple[Job, BaseException]]:
        """Store the jobs' scores in one transaction (retried while the database refuses
        the write, as :meth:`_store_scores`; one job at a time if the batch fails otherwise),
        then tell the exporter and the attacher; returns the jobs that failed."""
        delivery = None if self.attacher is not None else "none"
        models = {j.job_id: self.model_of(j, s) for j, s in done}
        pause = 0.1
        results: list[Any]
        while True:
            try:
                results = list(store.complete_jobs(self.owner, done, delivery,
                                                   judge_models=models))
            except Exception as exc:
                if self._stopping and _refused(store, exc):
                    raise
                if not self._stopping and self._db_fault(store, exc):
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 2.0)
                    continue
                results = []
                for j, s in done:  # one bad job must not fail the others
                    try:
                        results.append(store.complete_job(j, self.owner, s, delivery,
                                                          judge_model=models[j.job_id]))
                    except Exception as one_exc:
                        results.append(one_exc)
            else:
                self._db_ok()
            break
        failed: list[tuple[Job, BaseException]] = []
        for (job, scores), refs in zip(done, results):
            if isinstance(refs, Exception):
                failed.append((job, refs))
                continue
            self._done_local(job.job_id)
            if refs is None:
                continue  # the lease went to another process, which stores the scores
            self.scored += 1
            self.errors += sum(1 for s in scores if s.status == "error")
            self._stored(job.record_id, refs)
            if self.attacher is not None:
                try:
                    self.attacher.job_done(job.record_id, refs)
                except Exception as exc:  # stored: never given back for this
                    record_internal_error("worker.job_done", exc)
        return failed

    async def _store_scores(self, store: StoreAPI, job: Job,
                            scores: list[Score]) -> list[ScoreRef] | None:
        """:meth:`_complete`, retried with a backoff while the database refuses the write for
        a reason that passes (a full disk, an I/O error, a lock): the scores wait here (bounded
        by the jobs in flight), the job stays leased (renewed by the loop) and its attempt is
        not spent, the metric does not run again. Raises when stopping."""
        pause = 0.1
        while True:
            try:
                refs = await self._complete(store, job, scores)
            except Exception as exc:
                if self._stopping or not self._db_fault(store, exc):
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            self._db_ok()
            return refs

    def _db_fault(self, store: StoreAPI, exc: BaseException) -> bool:
        """Whether ``exc`` is a refusal that passes; if so it is noted (``stats()``, the one
        warning of :data:`NOTICE`) and, after a full disk or an I/O error, the connection is
        opened again (at most once a second) so the next try does not inherit a broken one."""
        if not _refused(store, exc):
            return False
        kind = storage_fault(exc) or "db_unavailable"
        self._write_fault = self.db_unavailable = f"{type(exc).__name__}: {exc}"
        NOTICE.fault(self.db_path, "scorer", kind, str(exc))
        recover = getattr(store, "recover", None)
        if kind in (DISK_FULL, IO_ERROR) and recover is not None \
                and time.monotonic() - self._recovered_at >= 1.0:
            self._recovered_at = time.monotonic()
            try:
                recover()
            except Exception as reopen_exc:  # still full: the next try opens it again
                if storage_fault(reopen_exc) is None:
                    record_internal_error("worker.recover", reopen_exc)
        return True

    def _db_ok(self) -> None:
        """A write passed: a fault, if one was open, is over for the scorer."""
        if self._write_fault is not None:
            self._write_fault = self.db_unavailable = None
            NOTICE.resumed(self.db_path, "scorer")

    def _clean(self, s: Score) -> Score:
        """Keys out of error texts; the app's ``redact`` over explanations and errors (a
        judge's reason may quote the answer) before a score is stored or exported."""
        error = scrub(s.error) if s.error else s.error
        explanation = s.explanation
        if self.redact is not None:
            error = self.redact(error) if error else error
            explanation = self.redact(explanation) if explanation else explanation
        if error is s.error and explanation is s.explanation:
            return s
        return _with(s, error=error, explanation=explanation)

    async def _complete(self, store: StoreAPI, job: Job,
                        scores: list[Score]) -> list[ScoreRef] | None:
        """Store a job's scores: the jobs that finish in the same loop tick share one
        transaction (one commit instead of one per job); each keeps its own lease check. A job
        with no other job in flight commits at once (waiting a tick would only add latency)."""
        assert self._loop is not None
        if self._running_jobs <= 1 and not self._completions:
            return store.complete_job(job, self.owner, scores,
                                      None if self.attacher is not None else "none",
                                      judge_model=self.model_of(job, scores))
        fut: asyncio.Future[list[ScoreRef] | None] = self._loop.create_future()
        self._completions.append((job, scores, fut))
        if len(self._completions) == 1:
            self._loop.call_soon(self._commit_completions, store)
        return await fut

    def _commit_completions(self, store: StoreAPI) -> None:
        batch, self._completions = self._completions, []
        delivery = None if self.attacher is not None else "none"
        results: list[Any]
        models = {j.job_id: self.model_of(j, s) for j, s, _ in batch}
        try:
            results = list(store.complete_jobs(self.owner, [(j, s) for j, s, _ in batch],
                                               delivery, judge_models=models))
        except Exception:  # one bad job must not fail the others: store them one by one
            results = []
            for j, s, _ in batch:
                try:
                    results.append(store.complete_job(j, self.owner, s, delivery,
                                                      judge_model=models[j.job_id]))
                except Exception as exc:
                    results.append(exc)
        for (_, _, fut), r in zip(batch, results):
            if fut.done():  # its task was cancelled (stopping)
                continue
            if isinstance(r, Exception):
                fut.set_exception(r)
            else:
                fut.set_result(r)

    def model_of(self, job: Job, scores: Sequence[Score]) -> str:
        """The judge model of one job's scores: the model its judge reported for them (the
        details' ``judge``), so two jobs of one metric in one transaction, scored before and
        after a provider changed the model behind its name, each carry their own; else the
        metric's (:meth:`judge_model`)."""
        for s in scores:
            judge = s.details.get("judge") if isinstance(s.details, dict) else None
            if isinstance(judge, dict) and (judge.get("reported") or judge.get("configured")):
                return str(judge.get("reported") or judge.get("configured"))
        return self.judge_model(job.metric)

    def judge_model(self, metric: str) -> str:
        """The judge model that scores ``metric`` (its scores' ``judge_model`` segment), or
        ``""`` for a local metric."""
        m = self.metrics.get(metric)
        session = self.judge_session
        if m is None or m.kind != "judge" or session is None:
            return ""
        try:
            # (H7, judge identity) the model the judge server reported behind this metric's
            # last score when known, else the configured one (JudgeSession.model_of)
            return str(session.model_of(metric) or "")
        except Exception:  # a judge without a model name: still a judge metric's score
            return ""

    def _stored(self, record_id: str, refs: Sequence[ScoreRef]) -> None:
        """Tell the exporter about stored scores: exactly once per job, since only the lease
        owner gets here. Isolated: the job is already done, so a failure must not give it back."""
        if self.on_scores is None or not refs:
            return
        try:
            self.on_scores(record_id, refs)
        except Exception as exc:
            record_internal_error("worker.on_scores", exc)

    async def score(self, metric: Metric, record: RagRecord) -> list[Score]:
        """Run one metric on one record; never raises: failures become error scores."""
        t0 = time.perf_counter()
        # Judge metrics bound their own calls (per-call timeout, bounded retries); the overall
        # cap only stops a runaway.
        timeout = self.metric_timeout_s if metric.kind != "judge" else self.judge_timeout_s
        if record.compact and metric.requires:
            return [Score.skipped(n, skip_reason(), metric=metric.name,
                                  metric_version=metric.version) for n in metric.names()]
        missing = record.missing(metric.requires)
        if missing:
            return [Score.skipped(n, f"record has no {', '.join(missing)}", metric=metric.name,
                                  metric_version=metric.version) for n in metric.names()]
        try:
            if inspect.iscoroutinefunction(metric.__call__) or metric.kind == "judge":
                out: Any = metric(record)
            else:
                ctx = contextvars.copy_context()
                assert self._loop is not None
                out = self._loop.run_in_executor(self._executor, ctx.run, _guarded, metric,
                                                 record)
            if inspect.isawaitable(out):
                out = await asyncio.wait_for(_awaited_guarded(out), timeout)
            scores = _normalise(metric, out)
        except RetryLater:
            raise  # the judge is unavailable or over budget: the job waits, it does not fail
        except asyncio.TimeoutError:
            scores = [Score.failed(n, f"timed out after {timeout:g}s",
                                   metric=metric.name, metric_version=metric.version)
                      for n in metric.names()]
        except (SystemExit, KeyboardInterrupt) as exc:  # raised by the sync part of a judge
            scores = [Score.failed(n, _aborted(exc), metric=metric.name,
                                   metric_version=metric.version) for n in metric.names()]
        except MetricAborted as exc:
            scores = [Score.failed(n, str(exc), metric=metric.name,
                                   metric_version=metric.version) for n in metric.names()]
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"[:2000]
            scores = [Score.failed(n, reason, metric=metric.name, metric_version=metric.version)
                      for n in metric.names()]
        ms = (time.perf_counter() - t0) * 1000
        return [_with(s, duration_ms=ms) for s in scores]


def _refused(store: StoreAPI, exc: BaseException) -> bool:
    """The store says ``exc`` is a fault that passes (never raises)."""
    try:
        return bool(store.unavailable(exc))
    except Exception:
        return False


class MetricAborted(Exception):
    """A metric raised a ``BaseException`` that is not an ``Exception`` (``SystemExit`` from
    a ``sys.exit()`` in its code or a library's, ``KeyboardInterrupt``): carried back to the
    loop as an ordinary exception, so it ends in an error score and never in the loop."""


def _aborted(exc: BaseException) -> str:
    return f"metric raised {exc!r}"[:2000]


def _guarded(metric: Metric, record: RagRecord) -> Any:
    """Run a sync metric (pool thread). A ``BaseException`` would otherwise cross to the
    loop through the future and end it (asyncio re-raises ``SystemExit`` out of the loop)."""
    try:
        return metric(record)
    except Exception:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit and co. from the metric's code
        raise MetricAborted(_aborted(exc)) from None


async def _awaited_guarded(aw: Any) -> Any:
    """Await a metric's coroutine; its ``SystemExit``/``KeyboardInterrupt`` becomes
    :class:`MetricAborted`. Cancellation (timeout, stop) passes through."""
    try:
        return await aw
    except (SystemExit, KeyboardInterrupt) as exc:
        raise MetricAborted(_aborted(exc)) from None


def _free_slots(open_jobs: set[int], job_ids: list[int], task: Any) -> None:
    """A batch's task ended (done, failed or cancelled): its local slots are free."""
    open_jobs.difference_update(job_ids)


def _forget(jobs: dict[int, Any], given_back: set[int], job_ids: list[int], task: Any) -> None:
    """A task's jobs ended: forget each, unless a newer task of the same job (leased again
    after this one gave it back) has taken its place."""
    for job_id in job_ids:
        if jobs.get(job_id) is task:
            del jobs[job_id]
            given_back.discard(job_id)


def _with(s: Score, **kw: Any) -> Score:
    from dataclasses import replace

    return replace(s, **kw)


class _LocalRun:
    """The shared state of :meth:`ScoringWorker._run_local`: the items, the next one to
    take, the results and the order they became ready in, and the threads on it."""

    __slots__ = ("items", "context", "warm", "lock", "next", "results", "ready", "runners")

    def __init__(self, items: list[tuple[Metric, RagRecord]],
                 context: contextvars.Context, warm: set[str]) -> None:
        self.items = items
        self.context = context
        self.warm = warm
        self.lock = threading.Lock()
        self.next = 0
        self.results: list[Any] = [None] * len(items)
        self.ready: list[int] = []
        self.runners: list[_Runner] = []


class _Runner:
    """One pool thread on a :class:`_LocalRun`: the item it runs now and since when; once
    ``abandoned`` (timed out, or the batch is over) it stores nothing more and stops."""

    __slots__ = ("index", "started", "abandoned")

    def __init__(self) -> None:
        self.index: int | None = None
        self.started = 0.0
        self.abandoned = False


#: the result of a metric still running after ``metric_timeout_s``
_TIMED_OUT = object()


def _score_local(run: _LocalRun, runner: _Runner) -> None:
    """Pool thread: take ``run``'s next item and run its metric, each in its own copy of the
    loop's context (instrumentation suppressed), as :func:`_guarded` runs one; until none is
    left or the loop gives up on this thread."""
    perf = time.perf_counter
    items, results, lock = run.items, run.results, run.lock
    while True:
        with lock:
            i = run.next
            if runner.abandoned or i >= len(items):
                runner.index = None
                return
            run.next = i + 1
            runner.index = i
            runner.started = time.monotonic()
        metric, record = items[i]
        t0 = perf()
        try:
            out: tuple[bool, Any] = (True, run.context.copy().run(metric, record))
        except Exception as exc:
            out = (False, exc)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and co. from the metric's code
            out = (False, MetricAborted(_aborted(exc)))
        ms = (perf() - t0) * 1000
        run.warm.add(metric.name)
        with lock:
            if runner.abandoned:
                return  # timed out meanwhile: the loop has its result
            results[i] = (*out, ms)
            run.ready.append(i)


def _normalise(metric: Metric, out: Any, duration_ms: float | None = None) -> list[Score]:
    """A metric's output as its scores: a Score or a list of Scores named as the metric
    declares (:func:`~.metrics.base.check_output` turns anything else — a bare number, a score
    named for another metric — into one error score per name, with the reason); values
    validated."""
    out = check_output(metric, out)
    items: list[Any] = [out] if isinstance(out, Score) else list(out)
    scores: list[Score] = []
    for s in items:
        if not isinstance(s, Score):
            raise TypeError(f"metric {metric.name!r} returned {type(s).__name__} in its list")
        if s.status == "ok" and (s.value is None or not math.isfinite(s.value)):
            s = Score.failed(s.name, f"metric returned a non-finite value {s.value!r}")
        if duration_ms is None:
            scores.append(_with(s, metric=s.metric or metric.name,
                                metric_version=metric.version))
        else:
            scores.append(_with(s, metric=s.metric or metric.name,
                                metric_version=metric.version, duration_ms=duration_ms))
    if not scores:
        raise ValueError(f"metric {metric.name!r} returned no score")
    if len({s.name for s in scores}) != len(scores):
        raise ValueError(f"metric {metric.name!r} returned two scores with the same name")
    return scores


def _row_score(row: Mapping[str, Any]) -> Score:
    return Score(
        name=row["name"], value=row["value"], label=row["label"],
        explanation=row["explanation"], status=row["status"], error=row["error"],
        metric=row["metric"], metric_version=row["metric_version"],
        duration_ms=row["duration_ms"],
    )
