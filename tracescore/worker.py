"""The scoring worker: leases jobs from SQLite, runs metrics, stores and attaches scores.

One daemon thread runs an asyncio loop. Local metrics run in a small thread pool (they are CPU
work); judge metrics are coroutines and share the loop. At most ``concurrency`` jobs run at once.
Each job is leased (status, owner, lease expiry, attempts), so a process that dies mid-scoring
leaves jobs that the next process on the same database picks up when the lease expires; the
score insert and the job's ``done`` mark are one transaction guarded by the lease owner, so every
persisted job is scored exactly once. Attempts count runs, not leases: a lease is free, a run
that fails here counts when the job is given back, a run lost with its process counts when the
expired lease is taken again. Such a lost job runs alone (the worker finishes what it holds,
leases it by itself and nothing beside it), so a job that kills its process every time spends
its own ``max_attempts`` and ends in a "gave up" error score, not the attempts of the jobs
leased with it.

It holds its parts (:mod:`tracescore.scoring`): the batch runner of local jobs, the completion
writer, deliveries to the span attacher, and scores on write (the background writer scores
cheap built-in local metrics as it stores a sampled record; the worker everything else).

Everything here runs with OpenTelemetry instrumentation suppressed: the judge's own LLM calls are
never traced, captured and scored in a loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from opentelemetry import context as otel_context

from ._internal.errors import record_internal_error
from ._internal.service import Service
from .judge.base import RetryLater
from .metrics.base import Metric
from .processor import ScoreAttachingProcessor, ScoreRef
from .record import RagRecord
from .score import Score
from .scoring.batches import BatchRunner, _free_slots, early_scores, local_scores
from .scoring.calls import (
    _refused,
    canary_once,
    score_metric,
)
from .scoring.completions import CompletionWriter
from .scoring.deliveries import DeliveryLedger
from .scoring.failing import FailingMetrics
from .scoring.limits import Limits
from .scoring.lost import LostJobs
from .scoring.on_write import ScoresOnWrite
from .scoring.returns import JobReturns
from .scoring.supervisor import Supervisor
from .store import Job, StoreAPI, open_store

log = logging.getLogger("tracescore")


def _part(part: str, name: str) -> Any:
    """A worker attribute that is one of its parts' (read and set there)."""
    return property(lambda self: getattr(getattr(self, part), name),
                    lambda self, value: setattr(getattr(self, part), name, value))


def _parts(part: str, names: str) -> Any:
    """:func:`_part` for each of ``names`` (space-separated, the part's own names)."""
    return tuple(_part(part, name) for name in names.split())


class ScoringWorker:
    """The scoring loop (see the module doc). It holds its parts — the batch runner of local
    jobs, the completion writer, the delivery ledger, the job returns, the lost jobs, the
    on-write scorer and the supervisor — and the settings and figures they own are read and
    set on it as before (``worker.straggle_s``, ``worker.scored`` ...)."""

    _service: Service

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
        #: concurrency, max_attempts, metric_timeout_s, judge_max_wait_s (shared with the parts)
        self.limits = Limits(concurrency, max_attempts, metric_timeout_s)
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._stopping = False
        #: metrics that have failed on every record so far (said once, in stats())
        self.failing = FailingMetrics()
        #: stores scores, tells the exporter and the attacher (scoring/completions.py)
        self.writer = CompletionWriter(db_path, self.metrics, self.failing, attacher=attacher,
                                       owner=lambda: self.owner,
                                       stopping=lambda: self._stopping, on_scores=on_scores)
        #: judge budgets: which records of a budgeted judge metric go to the judge
        #: (:class:`tracescore.budget.selector.AdaptiveJudging`), or None
        self.judging: Any = None
        self.judge_canary = False
        #: set once the start-up canary has finished (or failed): for callers that want its
        #: verdict before reporting, such as the demo
        self.canary_done = threading.Event()
        self.judge_timeout_s = 600.0
        #: judge jobs leased per unit of concurrency (they wait far more than they compute)
        self.judge_window = 8
        self._loop_state: Any = None
        #: lost jobs (their lease ran out) run alone: scoring/lost.py
        self.lost = LostJobs(db_fault=self.writer.db_fault,
                             leased_ok=lambda: setattr(self, "db_ok_at", time.time()),
                             lease_again=partial(setattr, self, "_lease_hint", True))
        #: a wake that may mean new jobs (a write, a flush): the loop leases at its next turn;
        #: a wake for deliveries only does not (an empty lease is a write transaction)
        self._lease_hint = True
        #: metrics that have run once here (see ``first_call_straggle_s``)
        self._warm: set[str] = set()
        writer, limits = self.writer, self.limits
        #: the writer thread's scorer of cheap local jobs (the queue's port hands it over)
        self.on_write = ScoresOnWrite(
            self.metrics, warm=self._warm, live=self._open_on_write,
            convert=lambda m, result: [writer.clean(s) for s in
                                       local_scores(m, result, limits.metric_timeout_s)],
            done=writer.stored_on_write, attached=attacher is not None)
        #: delivery marks from the span attacher, and the redelivery sweep
        self.deliveries = DeliveryLedger(
            db_path, attacher, owner=lambda: self.owner, wake=partial(self.wake, False),
            running=lambda: self._service.alive,
            db_fault=writer.db_fault, db_ok=writer.db_ok)
        #: what stats() shows of the database, read by this thread (never the caller's)
        self.db_snapshot: dict[str, Any] = {}
        self.db_snapshot_every_s = 1.0
        #: how long one statement waits for another process's lock; then the worker moves on
        #: (a refused release is retried each loop, a refused lease at the next wake)
        self.busy_timeout_s = 5.0
        #: jobs held, given back, and give-backs the database refused (scoring/returns.py)
        self.returns = JobReturns(db_path, owner=lambda: self.owner, db_fault=writer.db_fault,
                                  refused=partial(setattr, writer, "db_unavailable"),
                                  busy_timeout_s=lambda: self.busy_timeout_s)
        #: local jobs leased together are scored together (scoring/batches.py)
        self.batches = BatchRunner(self.metrics, writer, self.returns, limits, warm=self._warm,
                                   stopping=lambda: self._stopping, refill=self._refill)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.stop_grace_s = 5.0
        self._idle = threading.Event()
        self._started = threading.Event()
        self._executor: ThreadPoolExecutor | None = None
        #: time.time() of the loop's last turn, and of its last successful lease query
        #: (liveness and readiness of a `tracescore worker`)
        self.heartbeat = 0.0
        self.db_ok_at = 0.0
        #: anything escaping a run of the loop ends it; the thread starts it again after a
        #: backoff, a bounded number of times in a row, then stays dead (scoring/supervisor.py)
        self.supervisor = Supervisor()
        self._loop_running = False
        #: the thread: start, stop with a deadline, after-fork (_internal/service.py); its
        #: step is one run of the loop under the supervisor, until the worker stops or it dies
        self._service = Service("tracescore-scorer", partial(
            self.supervisor.step, self._run, died=self._died, restarted=self._restarted,
            stopping=lambda: self._stopping, end=lambda: self._service.stop(0)),
            interval_s=3600.0, on_exit=self._thread_ended, restart_after_fork=True,
            on_fork=self._after_fork)

    def _after_fork(self) -> None:
        """``os.fork()`` after init (gunicorn ``--preload``): the child has no scoring thread;
        before the service starts one of its own there (if one ran in the parent), the loop
        gets its own lease owner, event loop and connections."""
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._loop = None
        self._wake = None
        self._executor = None
        self._idle = threading.Event()
        self._started = threading.Event()
        self.on_write.after_fork()
        self.deliveries.after_fork()
        self.writer.reset()
        self._loop_running = False
        self.returns.reset()
        self._lease_hint = True
        self.batches.open = set()
        self.lost.reset()
        self.supervisor.reset()
        if self.judge_session is not None:
            self.judge_session.after_fork()
        if self.supervisor.gave_up and not self._stopping:
            self._service.start()  # (a loop that gave up in the parent: the child tries again)

    @property
    def _thread(self) -> threading.Thread | None:
        return self._service.thread

    # -- control (any thread) ----------------------------------------------------------------
    def start(self) -> None:
        if self._service.alive:
            return
        self._stopping = False
        self.supervisor.gave_up = False
        self.supervisor.reset()
        self._started.clear()
        self._service.start()
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
        self.wake()
        self._service.stop(timeout)

    # -- scores on write (the part the writer thread calls; see scoring/on_write.py) ---------
    def _open_on_write(self) -> bool:
        return self.alive and not self._stopping

    @property
    def scored(self) -> int:
        """Jobs scored in this process (by the loop, and on write)."""
        return self.writer.scored + self.on_write.scored

    @property
    def errors(self) -> int:
        """Error scores among them."""
        return self.writer.errors + self.on_write.errors

    @property
    def idle(self) -> bool:
        return self._idle.is_set()

    @property
    def alive(self) -> bool:
        """The scoring loop is running (False before start, after stop, while it waits to be
        restarted, and once it gave up)."""
        return self._loop_running and self._service.alive

    def health(self) -> dict[str, Any]:
        """The scorer's health for ``stats()`` and ``/readyz`` (any thread; plain reads)."""
        sup = self.supervisor
        return {"alive": self.alive, "restarts": sup.restarts, "gave_up": sup.gave_up,
                "last_error": sup.last_error, "last_error_at": sup.last_error_at}

    # -- the parts' settings and figures, where callers have always read them ---------------
    #: the limits, shared with the parts (scoring/limits.py)
    concurrency, max_attempts, metric_timeout_s, judge_max_wait_s = _parts(
        "limits", "concurrency max_attempts metric_timeout_s judge_max_wait_s")
    #: the completion writer's: the app's ``redact``, the exporter's ``on_scores``, the judge
    #: session of judge metrics (its SQLite connection lives on this loop), the database
    #: error that stopped the last read/write here (or None), and its figures
    redact, on_scores, judge_session, db_unavailable = _parts(
        "writer", "redact on_scores judge_session db_unavailable")
    _scored, _errors, _running_jobs = _parts("writer", "scored errors running")
    #: the batch runner's (local jobs in flight, their window, the straggler settings)
    _local_open = _part("batches", "open")
    local_window, straggle_s, first_call_straggle_s = _parts(
        "batches", "local_window straggle_s first_call_straggle_s")
    #: the supervisor's (``gave_up``: the loop died ``max_restarts`` times in a row and is
    #: not restarted any more)
    restarts, last_error, last_error_at, max_restarts, restart_backoff_s, healthy_after_s, \
        gave_up = _parts("supervisor", "restarts last_error last_error_at max_restarts "
                         "restart_backoff_s healthy_after_s gave_up")
    #: the delivery ledger's, and the give-backs' (jobs deferred to wait for the judge)
    redeliver_after_s, redeliver_backoff_s, export_confirm_timeout_s, redelivered, bad_ids = \
        _parts("deliveries", "redeliver_after_s redeliver_backoff_s export_confirm_timeout_s "
               "redelivered bad_ids")
    deferred = _part("returns", "deferred")
    #: the on-write scorer's (``score_on_write`` False: the writer scores nothing)
    score_on_write = _part("on_write", "enabled")
    on_write_budget_s, on_write_slow_s = _parts("on_write", "budget_s slow_s")
    scored_on_write, errors_on_write = _part("on_write", "scored"), _part("on_write", "errors")

    # -- the loop ---------------------------------------------------------------------------
    def _run(self, restarted: bool) -> None:
        """One run of the loop (the supervisor's step calls it on the service's thread), with
        OpenTelemetry instrumentation suppressed."""
        token = otel_context.attach(
            otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            asyncio.run(self._main(restarted=restarted))
        finally:
            otel_context.detach(token)

    def _thread_ended(self) -> None:
        self._loop_running = False
        self._started.set()  # a start() waiting for a loop that died at once

    def _died(self) -> None:
        """A run of the loop died: what it held goes back now."""
        self._loop_running = False
        self.returns.release_held(self.last_error)

    def _restarted(self) -> None:
        """Before the next run: the dead run's state goes."""
        self.writer.reset()
        if self.judge_session is not None:
            try:  # its locks, slots and client belong to the dead loop
                self.judge_session.after_fork()
            except Exception as reset_exc:
                record_internal_error("worker.judge_reset", reset_exc)

    async def _main(self, *, restarted: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        batches = self.batches
        batches.open = set()  # (a restarted loop: the dead one's batches are gone)
        self.lost.alone = set()
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tracescore-m")
        self.writer.loop = batches.loop = self._loop
        batches.executor = self._executor
        store = open_store(self.db_path, timeout_s=self.busy_timeout_s)
        self._loop_running = True
        self._started.set()
        inflight: set[asyncio.Task[None]] = set()
        wake_task: asyncio.Task[Any] | None = None
        # Judge jobs mostly wait (on the judge, or on a step another job of the same record
        # already asked for), so they get a wider window than CPU-bound local jobs; the judge
        # session caps the calls in flight at `concurrency` (JudgeSession.max_concurrency).
        # Local jobs are leased ``local_batch`` at a time, each lease one task
        # (:meth:`BatchRunner.run`).
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
            ledger = self.deliveries
            ledger.redeliver(store, at_start=not restarted)
            if self.judge_session is not None and self.judge_canary \
                    and not self.canary_done.is_set():
                canary = asyncio.create_task(canary_once(self.judge_session, self.canary_done))
            last_redelivery = time.monotonic()
            last_snapshot = 0.0
            while True:
                self.heartbeat = time.time()
                ledger.flush(store)
                if self.returns.unreleased:
                    self.returns.retry(store)
                if time.monotonic() - last_snapshot >= self.db_snapshot_every_s:
                    last_snapshot = time.monotonic()
                    self._read_snapshot(store)
                if self._stopping:
                    break
                if time.monotonic() - last_redelivery > ledger.redeliver_after_s:
                    last_redelivery = time.monotonic()
                    ledger.redeliver(store)
                elif ledger.failed_export_due():
                    ledger.redeliver(store, older_than_s=1.0)
                leased: list[tuple[Job, set[asyncio.Task[None]], bool]] = []
                more = False  # a lease came back full: more may be waiting
                local_full = False
                lease_now = self._lease_hint or lease_more \
                    or time.monotonic() - last_lease >= self.poll_seconds
                if lease_now:
                    self._lease_hint = False
                    last_lease = time.monotonic()
                    if self.lost.alone or self._lost_turn(store, pools, inflight_jobs, leased):
                        lease_now = False  # nothing beside a lost job
                for names, limit, tasks, batched in pools:
                    free = batches.free() if batched else limit - len(tasks)
                    if free > 0 and names and lease_now:
                        want = free
                        try:
                            got = store.lease_jobs(self.owner, want, self.lease_seconds, names)
                            self.db_ok_at = time.time()
                        except Exception as exc:
                            if not self.writer.db_fault(store, exc):
                                record_internal_error("worker.lease", exc)
                            more = True  # (tried again at the loop's next turn)
                            continue
                        if got:
                            self.writer.db_ok()  # (an empty lease writes nothing: proves nothing)
                        more = more or len(got) >= want
                        if batched:
                            local_full = len(got) >= want
                        # a job of ours whose lease ran out while its scores waited for the
                        # database is still in flight here: not a second task for it
                        # (a job its task already gave back, leased again before that task
                        # ended, is new work: skipping it would leave it leased to nobody)
                        for j in got:
                            given_back = self.returns.given_back
                            if j.job_id in inflight_jobs and j.job_id not in given_back:
                                continue
                            given_back.discard(j.job_id)
                            leased.append((j, tasks, batched))
                if lease_now or self.lost.draining:
                    lease_more = more or self.lost.draining  # (drained: lease at next turn)
                now = time.monotonic()
                if inflight_jobs and now - last_renewal > self.lease_seconds / 3:
                    # Judge jobs can wait longer than a lease (slow judge, breaker open):
                    # renew what is in flight so no other worker takes it meanwhile.
                    last_renewal = now
                    try:
                        store.renew_leases(self.owner, list(inflight_jobs), self.lease_seconds)
                    except Exception as exc:
                        if not self.writer.db_fault(store, exc):
                            record_internal_error("worker.renew", exc)
                if leased:
                    self._idle.clear()
                    records = store.load_records(j.record_id for j, _, _ in leased)
                    batch: list[Job] = []
                    for job, tasks, batched in leased:
                        self.returns.held.add(job.job_id)
                        if batched and batches.in_batch(job.metric):
                            batch.append(job)
                            continue
                        self.returns.spawn(self._job(store, job, records.get(job.record_id)), [job],
                                    tasks, inflight, inflight_jobs)
                    if batch:
                        ids = [j.job_id for j in batch]
                        batches.open.update(ids)
                        self.returns.spawn(batches.run(store, batch, records, local_full), batch,
                                           pools[0][2], inflight, inflight_jobs
                                           ).add_done_callback(
                            partial(_free_slots, batches.open, ids))
                    for job, _, _ in leased:
                        if job.job_id in self.lost.alone:
                            inflight_jobs[job.job_id].add_done_callback(
                                partial(self.lost.done, job.job_id))
                    if more and any(names and (batches.free() > 0
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
            await self.returns.wind_down(store, inflight, inflight_jobs, canary,
                                         self.stop_grace_s)
            if wake_task is not None:
                wake_task.cancel()
            ledger.flush(store)
        finally:
            self._loop_state = None
            self._loop_running = False
            self._idle.set()
            self._executor.shutdown(wait=False, cancel_futures=True)
            if self.judge_session is not None:
                self.judge_session.close()
            store.close()

    def _lost_turn(self, store: StoreAPI,
                   pools: list[tuple[list[str], int, set[asyncio.Task[None]], bool]],
                   inflight_jobs: dict[int, asyncio.Task[None]],
                   leased: list[tuple[Job, set[asyncio.Task[None]], bool]]) -> bool:
        """Lost jobs run alone (scoring/lost.py). True: this turn leases nothing else (a lost
        job was taken into ``leased``, or the loop is draining)."""
        got = self.lost.turn(store, [n for pool in pools for n in pool[0]],
                             busy=bool(inflight_jobs or self.returns.held), owner=self.owner,
                             lease_s=self.lease_seconds, poll_s=self.poll_seconds)
        if not isinstance(got, Job):
            return got
        self._idle.clear()
        pool = pools[0] if got.metric in pools[0][0] else pools[1]
        leased.append((got, pool[2], pool[3]))
        return True

    def _refill(self, store: StoreAPI) -> None:
        """Lease local jobs into the batch runner's free slots and start their batch (loop
        thread; what the loop does at its next turn, done now: the runner calls it when a
        full batch's metrics are done). A failure leaves it to the loop."""
        state, batches = self._loop_state, self.batches
        if state is None or self._stopping or self.lost.waiting:
            return  # (lost jobs wait: they run alone, see scoring/lost.py)
        (names, _, tasks, _), inflight, inflight_jobs = state
        free = batches.free()
        if free <= 0 or not names:
            return
        try:
            got = store.lease_jobs(self.owner, free, self.lease_seconds, names)
            self.db_ok_at = time.time()
            batch = [j for j in got if j.job_id not in inflight_jobs
                     or j.job_id in self.returns.given_back]
            if not batch:
                return
            records = store.load_records(j.record_id for j in batch)
        except Exception as exc:
            if not self.writer.db_fault(store, exc):
                record_internal_error("worker.lease", exc)
            self._lease_hint = True
            return
        self._idle.clear()
        plain = [j for j in batch if batches.in_batch(j.metric)]
        for job in batch:
            self.returns.given_back.discard(job.job_id)
            self.returns.held.add(job.job_id)
            if job not in plain:
                self.returns.spawn(self._job(store, job, records.get(job.record_id)), [job],
                                   tasks, inflight, inflight_jobs)
        if plain:
            ids = [j.job_id for j in plain]
            batches.open.update(ids)
            self.returns.spawn(batches.run(store, plain, records, len(got) >= free), plain,
                               tasks, inflight, inflight_jobs).add_done_callback(
                partial(_free_slots, batches.open, ids))
        if len(got) >= free:
            self._lease_hint = True  # (more may wait: the loop looks at its next turn)

    def _read_snapshot(self, store: StoreAPI) -> None:
        try:
            self.db_snapshot = {"open_jobs": store.open_job_count(list(self.metrics)),
                                "counters": store.counters(), "checked_at": time.time()}
            self.db_unavailable = self.writer.write_fault  # (reads pass on a full disk)
        except Exception as exc:  # locked or broken: stats() shows the last good read
            self.db_unavailable = f"{type(exc).__name__}: {exc}"

    async def _job(self, store: StoreAPI, job: Job, record: RagRecord | None) -> None:
        self._running_jobs += 1
        try:
            await self._job_body(store, job, record)
            # stored, given back or taken over: not ours now
            self.returns.held.discard(job.job_id)
        finally:
            self._running_jobs -= 1

    async def _job_body(self, store: StoreAPI, job: Job, record: RagRecord | None) -> None:
        try:
            metric = self.metrics[job.metric]
            early = early_scores(job, metric, record, self.max_attempts)
            if early is None and self.judging is not None and job.metric in self.judging:
                assert record is not None
                decided = await self.judging.decide_async(store, metric, job.record_id, record)
                if not decided.selected:
                    early = self.judging.not_judged(metric, decided)
            if early is not None:
                scores = early
            else:
                assert record is not None
                try:
                    scores = await self.score(metric, record)
                except RetryLater as later:
                    waited = self.returns.wait_for_judge(store, job, metric, later,
                                                         self.judge_max_wait_s)
                    if waited is None:
                        return
                    scores = waited
            scores = [self.writer.clean(s) for s in scores]
            refs = await self.writer.store_scores(store, job, scores)
            if refs is None:
                return  # the lease went to another process, which stores the scores
            self.writer.scores_stored(job, scores, refs)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            if isinstance(exc, Exception) and _refused(store, exc):
                # stopping while the database refuses the write (full disk): the job waits
                # for the next process, and this attempt is not counted against it
                self.returns.release(store, job, 0.0, f"database unavailable: {exc}"[:500])
                return
            # Our own failure, not the metric's (or the app's ``redact``/``on_scores`` calling
            # sys.exit()): give the job back so it is tried again (this run counts as an
            # attempt, so a persistent fault ends in a "gave up" error score); the loop goes on.
            record_internal_error("worker.job", exc)
            if not self._stopping:  # a fault that persists must not spin: back off, holding
                # the job (its lease is renewed), 0.2 s doubling to 5 s by its failed runs
                await asyncio.sleep(min(0.1 * 2 ** min(job.attempts + 1, 6), 5.0))
            self.returns.release(store, job, None, f"{type(exc).__name__}: {exc}"[:500])

    async def score(self, metric: Metric, record: RagRecord) -> list[Score]:
        """Run one metric on one record; never raises: failures become error scores."""
        # Judge metrics bound their own calls (per-call timeout, bounded retries); the overall
        # cap only stops a runaway.
        timeout = self.metric_timeout_s if metric.kind != "judge" else self.judge_timeout_s
        assert self._loop is not None
        return await score_metric(metric, record, timeout_s=timeout, loop=self._loop,
                                  executor=self._executor)
