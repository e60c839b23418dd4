"""The scoring worker's limits (:class:`Limits`): one object the worker and its parts share, so
that a setting changed on the worker (``worker.metric_timeout_s = 5``) is the one its parts
read, without the parts reading the worker."""

from __future__ import annotations


class Limits:
    """``concurrency``: local jobs (and judge calls) in flight at most; ``max_attempts``: runs of
    a job that end without scores before it gives up; ``metric_timeout_s``: a local metric's
    call at most; ``judge_max_wait_s``: how long a job may wait for the judge (breaker open,
    budget) before it fails."""

    __slots__ = ("concurrency", "max_attempts", "metric_timeout_s", "judge_max_wait_s")

    def __init__(self, concurrency: int, max_attempts: int, metric_timeout_s: float,
                 judge_max_wait_s: float = 6 * 3600.0) -> None:
        self.concurrency = max(1, concurrency)
        self.max_attempts = max_attempts
        self.metric_timeout_s = metric_timeout_s
        self.judge_max_wait_s = judge_max_wait_s
