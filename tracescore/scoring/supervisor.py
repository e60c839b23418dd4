"""The scorer's supervisor (:class:`Supervisor`, a part the scoring worker holds): the restart
policy of the scoring loop, which runs as the step of the worker's background service
(tracescore/_internal/service.py) and is started again when something escapes it.

Metrics are isolated where they run; this catches what still escapes (a ``SystemExit`` from a
``redact`` function or an ``on_scores`` callback, a bug of ours), so one fault cannot end
scoring for the life of the process. A run that died is started again after a backoff
(``restart_backoff_s``: first and longest wait, doubling), at most ``max_restarts`` times in a
row (a run that lasted ``healthy_after_s`` resets the count); then the loop stays dead and
``gave_up`` says so. Signals never arrive on this thread (Python delivers them to the main
thread), so catching ``BaseException`` does not swallow the process's shutdown.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from .._internal.secrets import scrub

log = logging.getLogger("tracescore")


class Supervisor:
    """Restart policy and its record (``restarts``, ``last_error``, ``gave_up``)."""

    def __init__(self) -> None:
        self.restarts = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.max_restarts = 10
        self.restart_backoff_s = (0.5, 30.0)
        self.healthy_after_s = 60.0
        self.gave_up = False
        self.reset()

    def reset(self) -> None:
        """A new thread: the next failure is the first in a row (its wait the shortest)."""
        self._backoff: float | None = None  # None: the first wait, restart_backoff_s[0]
        self._in_a_row = 0
        self._died_last = False

    def step(self, run: Callable[[bool], None], *, died: Callable[[], None],
             restarted: Callable[[], None], stopping: Callable[[], bool],
             end: Callable[[], object]) -> float | None:
        """The step of the scorer's service: ``run(restarted)`` until it returns (stopped) or
        raises. When it raises: ``died()`` (give back what the run held) and the backoff is
        returned (the service waits it; a stop cuts it short), unless ``stopping()`` or the
        restarts are spent; then, and after a run that returned, ``end()`` (the service
        ends). The next step after a backoff first calls ``restarted()`` (reset the dead
        run's state)."""
        if self._died_last:  # (the backoff passed without a stop)
            self._died_last = False
            self.restarting()
            restarted()
        began = time.monotonic()
        try:
            run(self.restarted)
        except BaseException as exc:  # noqa: BLE001 - supervised: see the module doc
            wait = self.failed(exc, time.monotonic() - began, stopping=stopping())
            died()
            if wait is not None:
                self._died_last = True
                return wait
        end()
        return None

    @property
    def restarted(self) -> bool:
        """The run about to start is a restart (of this thread's, or an earlier thread's)."""
        return self._in_a_row > 0 or self.restarts > 0

    def failed(self, exc: BaseException, ran_s: float, *, stopping: bool) -> float | None:
        """A run that lasted ``ran_s`` raised ``exc``: recorded; returns the backoff before
        the next run, or None when there is none (``stopping``, or the restarts in a row are
        spent: ``gave_up``)."""
        self.last_error = scrub(f"{type(exc).__name__}: {exc}")[:500]
        self.last_error_at = time.time()
        lo, _ = self.restart_backoff_s
        if self._backoff is None or ran_s >= self.healthy_after_s:
            self._backoff, self._in_a_row = lo, 0
        if stopping:
            return None
        if self._in_a_row >= self.max_restarts:
            self.gave_up = True
            log.error("tracescore scorer died %d times in a row and is not restarted"
                      " again; scoring has stopped in this process (pid %d). Last "
                      "error: %s", self._in_a_row + 1, os.getpid(), self.last_error)
            return None
        log.error("tracescore scorer died (%s); restarting it in %.1fs (restart "
                  "%d)", self.last_error, self._backoff, self.restarts + 1, exc_info=exc)
        return self._backoff

    def restarting(self) -> None:
        """The backoff passed without a stop: the run starts again."""
        self.restarts += 1
        self._in_a_row += 1
        self._backoff = min((self._backoff or self.restart_backoff_s[0]) * 2,
                            self.restart_backoff_s[1])
