"""Jobs given back (:class:`JobReturns`, a part the scoring worker holds): which leased jobs the
worker holds, which it gave back, and the give-backs the database refused (retried each turn
of the loop, so a job does not wait out its lease).

A job is given back by a release (a failed run: it counts as an attempt) or a deferral (the
judge is unavailable, the database refused a write, the worker stops: it does not). When the
loop dies under its jobs, :meth:`JobReturns.release_held` gives back what it held at once,
each run counted as a failed attempt, so a job that kills the loop each time ends in a "gave
up" error score instead of killing it forever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .._internal.errors import record_internal_error
from ..judge.base import RetryLater
from ..metrics.base import Metric
from ..score import Score
from ..store import Job, StoreAPI, open_store
from .calls import _refused


class JobReturns:
    """Held, given-back and refused give-backs, with explicit inputs.

    ``owner()``: the worker's lease owner now (it changes after a fork); ``db_fault(store,
    exc)``: the worker's handling of a database error; ``refused(text)``: a give-back the
    database refused (the worker shows it as ``db_unavailable``); ``db_path`` and
    ``busy_timeout_s()``: the store opened for :meth:`release_held`.
    """

    def __init__(self, db_path: str, *, owner: Callable[[], str],
                 db_fault: Callable[[StoreAPI, BaseException], bool],
                 refused: Callable[[str], None], busy_timeout_s: Callable[[], float]) -> None:
        self.db_path = db_path
        self.owner = owner
        self.db_fault = db_fault
        self.refused = refused
        self.busy_timeout_s = busy_timeout_s
        #: jobs given back to wait for the judge (breaker open, budget)
        self.deferred = 0
        self.reset()

    def reset(self) -> None:
        """Nothing held, nothing owed (a new worker; a forked child)."""
        #: job releases/deferrals the database refused: retried until it takes them
        self.unreleased: list[tuple[Job, float | None, str]] = []
        #: jobs leased by the loop and not finished by it (given back if the loop dies)
        self.held: set[int] = set()
        #: jobs a task of ours gave back while the task is still finishing: leased again, they
        #: are new work, not the in-flight task's own job whose lease ran out
        self.given_back: set[int] = set()

    def release(self, store: StoreAPI, job: Job, delay_s: float | None, reason: str) -> None:
        """Give a job back (``delay_s`` None: release; else defer). A refusal (database
        locked) is kept and retried each loop, so the job does not wait out its lease."""
        try:
            if delay_s is None:
                store.release_job(job, self.owner(), reason)
            else:
                store.defer_job(job, self.owner(), delay_s, reason)
            self.given_back.add(job.job_id)
        except Exception as exc:
            self.db_fault(store, exc)
            self.refused(f"{type(exc).__name__}: {exc}")
            self.unreleased.append((job, delay_s, reason))

    def retry(self, store: StoreAPI) -> None:
        """The give-backs the database refused, once more."""
        pending, self.unreleased = self.unreleased, []
        for job, delay_s, reason in pending:
            self.release(store, job, delay_s, reason)

    def release_held(self, last_error: str | None) -> None:
        """The loop died under its jobs: give them back now, not at the end of their lease,
        each run counted as a failed attempt. Releasing a finished job is a no-op (the lease
        owner guards it)."""
        held, self.held = self.held, set()
        if not held:
            return
        try:
            store = open_store(self.db_path, timeout_s=self.busy_timeout_s())
        except Exception as exc:
            record_internal_error("worker.release", exc)
            return
        try:
            for job_id in sorted(held):
                try:
                    store.release_job(Job(job_id, "", "", "", 0), self.owner(),
                                      f"the scorer died: {last_error}"[:500])
                except Exception as exc:
                    record_internal_error("worker.release", exc)
        finally:
            store.close()

    def spawn(self, work: Any, jobs: list[Job], tasks: set[asyncio.Task[None]],
              inflight: set[asyncio.Task[None]],
              inflight_jobs: dict[int, asyncio.Task[None]]) -> asyncio.Task[None]:
        """One task of the loop for ``jobs``, in its pool's ``tasks`` and the loop's
        ``inflight``; each job maps to it in ``inflight_jobs`` until it ends."""
        task = asyncio.create_task(work)
        inflight.add(task)
        tasks.add(task)
        for job in jobs:
            inflight_jobs[job.job_id] = task
        task.add_done_callback(inflight.discard)
        task.add_done_callback(tasks.discard)
        task.add_done_callback(partial(_forget, inflight_jobs, self.given_back,
                                       [j.job_id for j in jobs]))
        return task

    async def wind_down(self, store: StoreAPI, inflight: set[asyncio.Task[None]],
                        inflight_jobs: dict[int, asyncio.Task[None]],
                        canary: asyncio.Task[Any] | None, grace_s: float) -> None:
        """Stopping: let in-flight jobs finish for ``grace_s``, then give the rest back (at
        once, so another worker of the fleet takes them without waiting for the lease). The
        start-up canary gets the same moment: a short-lived process (a batch job that stops
        right after its records) finishes it, or it is cancelled whole (judge/canary.py
        stores a run only once all its steps are in) and the next process's start-up run
        asks the judge again."""
        waiting = set(inflight)
        if canary is not None and not canary.done():
            waiting.add(canary)
        if waiting:
            await asyncio.wait(waiting, timeout=grace_s)
        for job_id, task in list(inflight_jobs.items()):
            task.cancel()
            try:  # a done job's lease owner is already cleared: this cannot reopen it
                # (given back at no attempt: stopping is not the job's failure)
                store.defer_job(Job(job_id, "", "", "", 0), self.owner(), 0.0,
                                "worker stopped")
            except Exception as exc:
                # (a full disk or a lock: its lease runs out, and the next process takes it
                # then; no record is lost)
                if not _refused(store, exc):
                    record_internal_error("worker.release", exc)
        self.held.clear()
        if canary is not None and not canary.done():
            canary.cancel()

    def wait_for_judge(self, store: StoreAPI, job: Job, metric: Metric, later: RetryLater,
                       max_wait_s: float) -> list[Score] | None:
        """The judge is unavailable or over budget: the job is given back to wait (None), up
        to ``max_wait_s`` since it was created; a record the judge always fails on (or an
        outage longer than that) then ends in an error score with the reason."""
        waited = time.time() - job.created_at if job.created_at else 0.0
        if waited <= max_wait_s:
            self.release(store, job, later.delay_s, later.reason)
            self.deferred += 1
            return None
        return [Score.failed(
            n, f"judge unavailable for this record for {waited:.0f}s "
            f"(judge_max_wait_s): {later.reason}", metric=metric.name,
            metric_version=metric.version) for n in metric.names()]


def _forget(jobs: dict[int, Any], given_back: set[int], job_ids: list[int], task: Any) -> None:
    """A task's jobs ended: forget each, unless a newer task of the same job (leased again
    after this one gave it back) has taken its place."""
    for job_id in job_ids:
        if jobs.get(job_id) is task:
            del jobs[job_id]
            given_back.discard(job_id)
