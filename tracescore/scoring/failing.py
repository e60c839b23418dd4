"""A metric that errors on every record says so once, loudly (issue 31).

An error score per record is quiet by design (one bad record must not flood the log), so a
metric broken for the whole process — a library that cannot be imported, a misconfigured
option — used to show only as a growing ``error_scores`` count, and as an error rate that a
deploy gate would read as the app's. :class:`FailingMetrics` watches each metric's stored scores:
once ``after`` records in a row have failed and none has ever scored, it logs one ERROR line
with the reason and keeps the metric in ``stats()["failing_metrics"]`` (with its error count)
until a record scores. Any thread (the scoring loop and the writer's scores on write).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from ..score import Score

log = logging.getLogger("tracescore")


class FailingMetrics:
    """Counts, per metric, records whose scores all failed before any record scored."""

    def __init__(self, after: int = 5) -> None:
        #: records failed in a row (with no success ever) before the metric is called failing
        self.after = after
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}
        self._reason: dict[str, str] = {}
        self._scored: set[str] = set()
        self._said: set[str] = set()
        #: times a metric was declared failing (a counter for stats and tests)
        self.declared = 0

    def note(self, scores: Iterable[Score]) -> None:
        """One job's stored scores (a job is one metric on one record)."""
        by_metric: dict[str, list[Score]] = {}
        for s in scores:
            by_metric.setdefault(s.metric or s.name, []).append(s)
        for name, items in by_metric.items():
            if any(s.status == "ok" for s in items):
                with self._lock:
                    self._scored.add(name)
                    if name in self._said:
                        self._said.discard(name)
                        log.warning("tracescore: metric %r scores again after %d failed "
                                    "records", name, self._errors.get(name, 0))
                    self._errors.pop(name, None)
                continue
            failed = [s for s in items if s.status == "error"]
            if not failed or len(failed) != len(items):
                continue
            with self._lock:
                if name in self._scored and name not in self._said:
                    continue  # it has scored before: a bad record, not a broken metric
                n = self._errors[name] = self._errors.get(name, 0) + 1
                if name not in self._reason:
                    self._reason[name] = str(failed[0].error or failed[0].explanation or "")
                say = n >= self.after and name not in self._said
                if say:
                    self._said.add(name)
                    self.declared += 1
            if say:
                log.error("tracescore: metric %r failed on every record so far (%d of %d); "
                          "its scores are error scores until this is fixed: %s",
                          name, n, n, self._reason[name][:500])

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The metrics failing now: ``{name: {"errors": n, "reason": first error}}``."""
        with self._lock:
            return {name: {"errors": self._errors.get(name, 0),
                           "reason": self._reason.get(name, "")[:500]}
                    for name in sorted(self._said)}
