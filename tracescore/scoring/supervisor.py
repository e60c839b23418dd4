"""The scorer's supervisor (:class:`Supervisor`, a part the scoring worker holds): runs the
scoring loop on the worker's thread and starts it again when something escapes it.

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
import threading
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

    def run(self, main: Callable[[bool], None], *, died: Callable[[], None],
            restarted: Callable[[], None], stopping: Callable[[], bool],
            halt: threading.Event) -> None:
        """Run ``main(restarted)`` until it returns (stopped); when it raises: ``died()``
        (give back what the run held), then — unless ``stopping()``, ``halt`` is set during
        the backoff, or the restarts are spent — ``restarted()`` (reset the dead run's state)
        and ``main`` again."""
        backoff: float | None = None  # None: the first wait, restart_backoff_s[0]
        in_a_row = 0
        while True:
            began = time.monotonic()
            try:
                main(in_a_row > 0 or self.restarts > 0)
                return  # stopped
            except BaseException as exc:  # noqa: BLE001 - supervised: see the module doc
                self.last_error = scrub(f"{type(exc).__name__}: {exc}")[:500]
                self.last_error_at = time.time()
                lo, hi = self.restart_backoff_s
                if backoff is None or time.monotonic() - began >= self.healthy_after_s:
                    backoff, in_a_row = lo, 0
                died()
                if stopping():
                    return
                if in_a_row >= self.max_restarts:
                    self.gave_up = True
                    log.error("tracescore scorer died %d times in a row and is not restarted"
                              " again; scoring has stopped in this process (pid %d). Last "
                              "error: %s", in_a_row + 1, os.getpid(), self.last_error)
                    return
                log.error("tracescore scorer died (%s); restarting it in %.1fs (restart "
                          "%d)", self.last_error, backoff, self.restarts + 1, exc_info=exc)
                if halt.wait(backoff):
                    return  # stop() during the backoff
                self.restarts += 1
                in_a_row += 1
                backoff = min(backoff * 2, hi)
                restarted()
