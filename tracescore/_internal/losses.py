"""Counts of what tracescore accepted and then could not keep, by reason.

Every loss after the public API accepted something (a record that cannot be stored, a write the
database refused, a queue that was full) is counted here under a short reason key and logged
once per reason (then every ``log_every_s``), so nothing is lost silently. Thread-safe and
cheap: a lock and a dict.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("tracescore")


class Losses:
    def __init__(self, log_every_s: float = 300.0) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._unsaved: dict[str, int] = {}
        self._last_log: dict[str, float] = {}
        self.log_every_s = log_every_s

    def add(self, reason: str, n: int = 1, detail: str | None = None) -> None:
        if n <= 0:
            return
        now = time.monotonic()
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + n
            self._unsaved[reason] = self._unsaved.get(reason, 0) + n
            total = self._counts[reason]
            due = now - self._last_log.get(reason, -1e18) >= self.log_every_s
            if due:
                self._last_log[reason] = now
        if due:
            log.warning("tracescore lost %d item(s): %s (%d so far for this reason)%s; "
                        "app fine, telemetry degraded", n, reason, total,
                        f": {detail[:300]}" if detail else "")

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def take_unsaved(self) -> dict[str, int]:
        """Counts not yet written to the database's counters (as ``lost.<reason>``)."""
        with self._lock:
            out, self._unsaved = self._unsaved, {}
        return out

    def give_back(self, counts: dict[str, int]) -> None:
        """A write of :meth:`take_unsaved`'s counts failed: keep them for the next one."""
        with self._lock:
            for k, v in counts.items():
                self._unsaved[k] = self._unsaved.get(k, 0) + v
