"""Local jobs scored together (:class:`BatchRunner`, a part the scoring worker holds).

The jobs of plain (not coroutine) local metrics leased in one go run one after the other in one
executor call and their scores are stored in one transaction: one asyncio task and one executor
hop per job cost the scorer more than most local metrics themselves. The per-metric timeout
holds; a metric still running after ``straggle_s`` has the scores ready so far stored and
another pool thread take the batch's next metrics. Runs on the worker's loop thread (the
metrics on its pool threads).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Executor
from typing import Any

from .._internal.errors import record_internal_error
from ..judge.base import RetryLater
from ..metrics.base import Metric
from ..metrics.ready import call_ready
from ..record import RagRecord
from ..score import Score
from ..store import Job, StoreAPI
from .calls import MetricAborted, _aborted, _normalise, _refused, skipped_scores
from .completions import CompletionWriter
from .limits import Limits
from .returns import JobReturns


class BatchRunner:
    """Scores batches of local jobs on the worker's loop (see the module doc).

    Explicit inputs: ``metrics`` (by name); ``writer``, the worker's
    :class:`~.completions.CompletionWriter` (stores the scores); ``returns``, its
    :class:`~.returns.JobReturns` (jobs held and given back); ``limits``, its
    :class:`~.limits.Limits`; ``warm``, the names of the metrics that have run once in this
    process (shared with the on-write scorer); ``stopping()``; ``refill(store)``, the worker's
    lease of the next local jobs, called when a full batch's metrics are done. Set by the loop
    at each run: ``loop`` and ``executor``. Its own state: the local jobs in flight (``open``,
    at most ``concurrency * local_window``) and its settings (``local_window``,
    ``straggle_s``, ``first_call_straggle_s``)."""

    def __init__(self, metrics: Mapping[str, Metric], writer: CompletionWriter,
                 returns: JobReturns, limits: Limits, *, warm: set[str],
                 stopping: Callable[[], bool], refill: Callable[[StoreAPI], None]) -> None:
        self.metrics = metrics
        self.writer = writer
        self.returns = returns
        self.limits = limits
        self.warm = warm
        self.stopping = stopping
        self.refill = refill
        self.loop: asyncio.AbstractEventLoop | None = None
        self.executor: Executor | None = None
        #: the local jobs leased and not finished (their slots)
        self.open: set[int] = set()
        self._batchable: dict[str, bool] = {}
        #: local jobs leased per unit of ``concurrency`` (at most ``concurrency`` run at
        #: once whatever it is). Larger windows make fewer, larger batches: the scorer loop's
        #: CPU per record −40 % at 16, and, since a lease costs no attempt and a job whose
        #: lease ran out runs alone (see the worker's module docstring), a worker killed while
        #: holding the window spends at most one attempt of each job it held and not run,
        #: once. Kept at 1: at 16 the scorer's larger batches starved the writer thread of the
        #: GIL under a sustained ``log_record`` load (issue 19, bench/pipeline_rate.py: 3 of 5
        #: rounds stored 4,800–7,500 records/s instead of ~13,300, more dropped).
        self.local_window = 1
        #: a batch's metric running this long: the scores ready so far are stored, and
        #: another pool thread takes the batch's next metrics (``first_call_straggle_s`` for
        #: a metric's first call here: it imports its libraries, and two threads importing
        #: one library at once can see it half-initialised)
        self.straggle_s = 0.05
        self.first_call_straggle_s = 5.0

    def free(self) -> int:
        """Local jobs that may be leased now."""
        return self.limits.concurrency * self.local_window - len(self.open)

    def done_local(self, job_id: int) -> None:
        """A batched job is finished (stored, given back or taken over): its slot is free."""
        self.returns.held.discard(job_id)
        self.open.discard(job_id)

    def in_batch(self, metric: str) -> bool:
        """A plain (not coroutine) local metric: scored in :meth:`run`."""
        ok = self._batchable.get(metric)
        if ok is None:
            m = self.metrics.get(metric)
            ok = m is not None and m.kind != "judge" \
                and not inspect.iscoroutinefunction(m.__call__)
            self._batchable[metric] = ok
        return ok

    async def run(self, store: StoreAPI, jobs: list[Job],
                  records: Mapping[str, RagRecord], refill: bool = False) -> None:
        """What the worker's ``_job`` does, for several jobs of plain local metrics at once: their
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
                    early = early_scores(job, metric, record, self.limits.max_attempts)
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
                        self.open.difference_update(j.job_id for j, _ in more)
                        self.refill(store)
                    failed.extend(await self._store_batch(store, more))
            elif done:
                done, more = [], done
                failed.extend(await self._store_batch(store, more))
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            if isinstance(exc, Exception) and _refused(store, exc):
                for job in jobs:  # stopping while the database refuses: as in _job_body
                    if job.job_id in self.returns.held:
                        self.returns.release(store, job, 0.0, f"database unavailable: {exc}"[:500])
                        self.done_local(job.job_id)
                return
            failed.extend((job, exc) for job in jobs if job.job_id in self.returns.held
                          and all(job is not j for j, _ in failed))
        if failed:
            # Our own failure (as in _job_body): back off once, holding the jobs, then give
            # them back (this run counts as an attempt, so a persistent fault ends in a "gave
            # up" score).
            for _, err in failed:
                record_internal_error("worker.job", err)
            if not self.stopping():
                worst = max(job.attempts for job, _ in failed)
                await asyncio.sleep(min(0.1 * 2 ** min(worst + 1, 6), 5.0))
            for job, err in failed:
                self.returns.release(store, job, None, f"{type(err).__name__}: {err}"[:500])
                self.done_local(job.job_id)

    def _local_result(self, store: StoreAPI, job: Job, metric: Metric,
                      res: tuple[bool, Any, float],
                      failed: list[tuple[Job, BaseException]]) -> list[Score] | None:
        """A batched job's cleaned scores, or None: deferred (``RetryLater``, as
        the worker's ``_job_body`` does) or failed (added to ``failed``)."""
        try:
            try:
                scores = local_scores(metric, res, self.limits.metric_timeout_s)
            except RetryLater as later:
                waited = self.returns.wait_for_judge(store, job, metric, later,
                                                     self.limits.judge_max_wait_s)
                if waited is None:
                    self.done_local(job.job_id)
                    return None
                scores = waited
            return [self.writer.clean(s) for s in scores]
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # ours, or the app's redact
            failed.append((job, exc))
            return None

    async def _run_local(self, items: list[tuple[Metric, RagRecord]]
                         ) -> AsyncIterator[list[tuple[int, tuple[bool, Any, float]]]]:
        """Run ``items`` one after the other on a pool thread; yields ``(index, (ok, output
        or exception, ms))`` lists: all at once when they finish within ``straggle_s`` (the
        usual case), else what is ready every ``straggle_s``. While every thread of the batch
        has been on its metric for ``straggle_s``, another takes the next items (up to
        ``concurrency``). A metric still running ``metric_timeout_s`` after it started gets
        a timeout result and its thread is left behind, as a timed-out metric's is in
        :meth:`ScoringWorker.score`."""
        loop = self.loop
        assert loop is not None
        run = _LocalRun(items, contextvars.copy_context(), self.warm)
        timeout, straggle = self.limits.metric_timeout_s, self.straggle_s
        futs: set[asyncio.Future[None]] = set()

        def add_runner() -> None:
            runner = _Runner()
            run.runners.append(runner)
            futs.add(loop.run_in_executor(self.executor, _score_local, run, runner))

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
                    if run.next < len(items) and not fresh and live < self.limits.concurrency:
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

    async def _store_batch(self, store: StoreAPI, done: list[tuple[Job, list[Score]]]
                           ) -> list[tuple[Job, BaseException]]:
        """Store the jobs' scores in one transaction (retried while the database refuses
        the write, as :meth:`CompletionWriter.store_scores`; one job at a time if the batch fails otherwise),
        then tell the exporter and the attacher; returns the jobs that failed."""
        w = self.writer
        delivery = None if w.attacher is not None else "none"
        models = {j.job_id: w.model_of(j, s) for j, s in done}
        pause = 0.1
        results: list[Any]
        while True:
            try:
                results = list(store.complete_jobs(w.owner(), done, delivery,
                                                   judge_models=models))
            except Exception as exc:
                if self.stopping() and _refused(store, exc):
                    raise
                if not self.stopping() and w.db_fault(store, exc):
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 2.0)
                    continue
                results = []
                for j, s in done:  # one bad job must not fail the others
                    try:
                        results.append(store.complete_job(j, w.owner(), s, delivery,
                                                          judge_model=models[j.job_id]))
                    except Exception as one_exc:
                        results.append(one_exc)
            else:
                w.db_ok()
            break
        failed: list[tuple[Job, BaseException]] = []
        for (job, scores), refs in zip(done, results):
            if isinstance(refs, Exception):
                failed.append((job, refs))
                continue
            self.done_local(job.job_id)
            if refs is None:
                continue  # the lease went to another process, which stores the scores
            w.scores_stored(job, scores, refs)
        return failed


def early_scores(job: Job, metric: Metric, record: RagRecord | None,
                 max_attempts: int) -> list[Score] | None:
    """The scores of a job that needs no metric run (its record is gone, its attempts are
    spent, or the record lacks the metric's inputs), or None (the worker's ``_job_body`` too).
    ``job.attempts`` counts its runs that ended without scores: lost with their process
    (or their lease), or failed in the worker; ``max_attempts`` of them and it gives up."""
    if record is None:
        return [Score.failed(n, "record not found in the database", metric=job.metric)
                for n in metric.names()]
    if job.attempts >= max_attempts:
        return [Score.failed(
            n, f"gave up after {job.attempts} attempts: the process died or the "
            "lease expired while scoring", metric=metric.name,
            metric_version=metric.version) for n in metric.names()]
    return skipped_scores(metric, record)


def local_scores(metric: Metric, result: tuple[bool, Any, float],
                 timeout_s: float) -> list[Score]:
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
        reason = f"timed out after {timeout_s:g}s"
    elif isinstance(out, MetricAborted):
        reason = str(out)
    else:
        reason = f"{type(out).__name__}: {out}"[:2000]
    return [Score.failed(n, reason, metric=metric.name, metric_version=metric.version,
                         duration_ms=ms) for n in metric.names()]


def _free_slots(open_jobs: set[int], job_ids: list[int], task: Any) -> None:
    """A batch's task ended (done, failed or cancelled): its local slots are free."""
    open_jobs.difference_update(job_ids)


class _LocalRun:
    """The shared state of :meth:`BatchRunner._run_local`: the items, the next one to
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
            out: tuple[bool, Any] = (True, run.context.copy().run(call_ready, metric, record))
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
