"""Monitors on a schedule: an evaluator thread and a notifier thread beside scoring.

Used by ``tracescore monitor``, ``tracescore worker --monitors FILE`` and
``tracescore.init(monitors=...)``. The evaluator thread runs :meth:`.Evaluator.run_once`
every ``interval_s`` (one evaluator per database at a time: the others wait for the lease);
the notifier thread (:class:`.notify.Notifier`) delivers what the evaluator queued, with
retries, so a slow or dead webhook never holds up evaluation or scoring. Both threads are
daemons with their own database connections; nothing here touches the app's request path.

Built in: after the declared monitors, the judge-drift monitor ``judge_drift``
(:mod:`.judge_drift`: the judge canary's agreement against its baseline, and changes of the
model the judge server reports) is evaluated on the same store, under the same lease, to every
channel of the set — whenever the database has a canary history; and so is
``judge_drift_labels`` (:mod:`.judge_drift_labels`: the judge's agreement with human labels
under a new judge identity against the earliest one) whenever judge scores have labels.

OTel: one log record per state change (:func:`.notify.emit_state_change`) and, with a meter,
an observable gauge ``tracescore.monitor.state`` per monitor (0 OK, 1 NO_DATA, 2 WARNING,
3 ALERT), read from memory at collection time, so a Prometheus/Grafana alerting setup can use
the states.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from .. import attributes as A
from .._internal.errors import record_internal_error
from .._internal.service import Service, deadline_left
from .config import MonitorSet
from .evaluate import RANK, Evaluation, Evaluator

log = logging.getLogger("tracescore")

__all__ = ["GAUGE", "MonitorRunner"]

GAUGE = A.MONITOR_STATE_GAUGE


class MonitorRunner:
    """Evaluate ``monitors`` on ``db`` every ``interval_s`` and deliver the notifications.

    ``start()`` returns at once; ``stop(timeout)`` ends both threads (the lease is given
    back, so another evaluator can take over). Thread-safe to start and stop from any thread.
    """

    def __init__(self, db: str, monitors: MonitorSet, *, interval_s: float = 60.0,
                 otel_logger: Any = None, meter: Any = None, notify: bool = True) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.db = str(db)
        self.monitors = monitors
        self.interval_s = float(interval_s)
        self.evaluator = Evaluator(self.db, monitors, otel_logger=otel_logger)
        self.notifier: Any = None
        if notify and monitors.channels:
            from .notify import Notifier

            self.notifier = Notifier(self.db, monitors.channels)
        self._service = Service("tracescore-monitors", self._evaluate,
                                interval_s=self.interval_s, on_error=self._failed,
                                on_exit=self._let_go)
        self._failures = 0  # in a row
        self.evaluations = 0
        #: monitors whose blindness this runner has logged (once each)
        self._said_blind: set[str] = set()
        self.last: list[Evaluation] = []
        self.last_error: str | None = None
        if meter is not None:
            self._gauge(meter)

    def _gauge(self, meter: Any) -> None:
        from opentelemetry.metrics import Observation

        def observe(_options: Any) -> list[Any]:
            return [Observation(RANK.get(e.state, 0), {A.MONITOR_NAME: e.monitor,
                                                       A.MONITOR_STATE: e.state})
                    for e in list(self.last)]

        meter.create_observable_gauge(
            GAUGE, callbacks=[observe], unit="1",
            description="Monitor state: 0 OK, 1 NO_DATA, 2 WARNING, 3 ALERT")

    def start(self) -> None:
        if self._service.started:
            return
        if self.notifier is not None:
            self.notifier.start()
        self._service.start()

    def wake(self) -> None:
        """Evaluate now rather than at the next interval."""
        self._service.wake()

    def _evaluate(self) -> None:
        self.last = self.evaluator.run_once() + self._builtin()
        say_blind(self.last, self._said_blind)
        self.evaluations += 1
        self.last_error = None
        self._failures = 0
        if self.notifier is not None and any(e.changed and e.saved for e in self.last):
            self.notifier.wake()

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        failures = self._failures
        self.last_error = str(exc)
        if failures in (1, 10) or failures % 100 == 0:
            log.warning("tracescore: evaluating monitors failed (%s); trying again "
                        "in %.0f s (app fine, monitoring degraded)", exc, self.interval_s)
        if not _passing(exc):
            record_internal_error("monitor.evaluate", exc)
        self.evaluator.close()  # a broken connection is reopened next time

    def _let_go(self) -> None:
        self.evaluator.release()
        self.evaluator.close()

    def _builtin(self) -> list[Evaluation]:
        """The built-in monitors' evaluations (judge drift on the canary and on human
        labels); a failure there is logged and never stops the declared monitors."""
        from . import judge_drift as drift
        from . import judge_drift_labels as drift_labels

        out: list[Evaluation] = []
        for mod in (drift, drift_labels):  # each on its own: one failing spares the other
            try:
                out += mod.evaluate_with(self.evaluator)
            except Exception as exc:
                if not _passing(exc):
                    record_internal_error(f"monitor.{mod.MONITOR}", exc)
                log.warning("tracescore: the built-in monitor %s could not be evaluated: %s",
                            mod.MONITOR, exc)
        return out

    def stop(self, timeout: float | None = 10.0) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._service.stop(timeout)
        if self.notifier is not None:
            self.notifier.stop(deadline_left(deadline))


def say_blind(evals: Sequence[Evaluation], said: set[str]) -> None:
    """Log once per process each monitor that cannot see the drop it is meant to catch (an
    app's monitors have no `check` to print it at load)."""
    for e in evals:
        sight = e.detail.get("sight") if isinstance(e.detail, dict) else None
        if isinstance(sight, dict) and sight.get("blind") and e.monitor not in said:
            said.add(e.monitor)
            log.warning("tracescore: monitor %s is blind: %s", e.monitor, e.summary)


def _passing(exc: BaseException) -> bool:
    """Faults that pass (a database locked, busy or away): logged, not internal errors."""
    import sqlite3

    if isinstance(exc, sqlite3.OperationalError):
        return True
    try:
        import psycopg

        return isinstance(exc, psycopg.OperationalError)
    except ImportError:
        return False
