"""Lost jobs (:class:`LostJobs`, a part the scoring worker holds): jobs whose lease ran out
(their holder died or hung) run one at a time, each with no other job held here.

Once one is seen (a read every ``poll_s``), the loop leases nothing more, finishes what it
holds, then takes them one by one — so a job that kills its process every time spends its own
``max_attempts`` and ends in a "gave up" error score, not the attempts of the jobs leased with
it (see :mod:`tracescore.worker`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._internal.errors import record_internal_error
from ..store import Job, StoreAPI


class LostJobs:
    """Whether the loop drains for lost jobs, and which one runs alone now.

    ``db_fault(store, exc)``: the worker's handling of a database error; ``leased_ok()``: a
    lease query passed (readiness); ``lease_again()``: the loop may lease at its next turn.
    """

    def __init__(self, *, db_fault: Callable[[StoreAPI, BaseException], bool],
                 leased_ok: Callable[[], None], lease_again: Callable[[], None]) -> None:
        self.db_fault = db_fault
        self.leased_ok = leased_ok
        self.lease_again = lease_again
        self.reset()

    def reset(self) -> None:
        """A new loop (a restart, a forked child): nothing drains, nothing runs alone."""
        #: ids of the lost job(s) running alone (nothing else is leased meanwhile)
        self.alone: set[int] = set()
        #: lost jobs wait: the worker finishes what it holds and leases no more
        self.draining = False
        self._checked = -1e9

    @property
    def waiting(self) -> bool:
        """Lost jobs wait or one runs: nothing else may be leased."""
        return self.draining or bool(self.alone)

    def turn(self, store: StoreAPI, names: list[str], *, busy: bool, owner: str,
             lease_s: float, poll_s: float) -> Job | bool:
        """One turn of the loop: True when this turn leases nothing else (the loop is
        draining, or a check failed: False); a :class:`Job` taken to run alone; False:
        nothing lost, lease as usual. ``busy``: the loop still holds jobs."""
        now = time.monotonic()
        if not self.draining and now - self._checked >= poll_s and names:
            self._checked = now
            try:
                self.draining = store.has_lost_jobs(names)
            except Exception as exc:
                if not self.db_fault(store, exc):
                    record_internal_error("worker.lease", exc)
                return False
        if not self.draining:
            return False
        if busy:
            return True
        try:
            job = store.lease_lost_job(owner, lease_s, names)
            self.leased_ok()
        except Exception as exc:
            if not self.db_fault(store, exc):
                record_internal_error("worker.lease", exc)
            return True
        if job is None:
            self.draining = False
            return False
        self.alone.add(job.job_id)
        return job

    def done(self, job_id: int, _task: Any) -> None:
        """A lost job's run ended: the next lease may come at once (the next lost job)."""
        self.alone.discard(job_id)
        self.lease_again()
