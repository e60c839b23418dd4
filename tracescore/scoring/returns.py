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

from collections.abc import Callable

from .._internal.errors import record_internal_error
from ..store import Job, StoreAPI, open_store


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
