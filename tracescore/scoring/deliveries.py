"""The delivery ledger (:class:`DeliveryLedger`, a part the scoring worker holds): scores stored
by the worker are handed to the span attacher; the attacher notes which reached the backend and
how, and the ledger writes those marks down in batches on the worker's loop thread. Scores whose
delivery failed or never happened (a process that died) are handed over again (the redelivery
sweep). Marks are noted from any thread; written on the worker's loop thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .._internal.errors import record_internal_error
from .._internal.validate import valid_ids
from ..store import StoreAPI, open_store
from .calls import _row_score

log = logging.getLogger("tracescore")


class DeliveryLedger:
    """Delivery marks and the redelivery sweep, with explicit inputs.

    ``attacher``: the span attacher (None: nothing is delivered here, nothing swept);
    ``owner()``: the worker's lease owner now (it changes after a fork); ``wake()``: wakes the
    worker's loop to write marks down (not to lease); ``running()``: the loop's thread is
    alive; ``db_fault(store, exc)``: the worker's handling of a database error (True: one that
    passes); ``db_ok()``: a write passed.
    """

    def __init__(self, db_path: str, attacher: Any, *, owner: Callable[[], str],
                 wake: Callable[[], None], running: Callable[[], bool],
                 db_fault: Callable[[StoreAPI, BaseException], bool],
                 db_ok: Callable[[], None]) -> None:
        self.db_path = db_path
        self.attacher = attacher
        self.owner = owner
        self.wake = wake
        self.running = running
        self.db_fault = db_fault
        self.db_ok = db_ok
        #: scores still undelivered this long after they were stored go out again on a carrier
        self.redeliver_after_s = 120.0
        #: after a failed span export: first and longest wait before scores are sent again
        self.redeliver_backoff_s = (1.0, 60.0)
        #: an exported span with no result after this long was dropped by the batch processor
        self.export_confirm_timeout_s = 600.0
        self.redelivered = 0
        #: stored records whose id cannot be a span's (their scores are not exported)
        self.bad_ids = 0
        self._backoff = 1.0
        self._retry_at: float | None = None
        self._last_retry = -1e9
        self._failed_seen = 0
        self._noted_count = 0
        self._written_count = 0
        self.after_fork()

    def after_fork(self) -> None:
        """A fresh lock and no pending marks (a forked child: the parent writes its own)."""
        self._marks: list[tuple[list[int], str]] = []
        self._lock = threading.Lock()

    # -- any thread --------------------------------------------------------------------------
    def note(self, score_ids: list[int], how: str) -> None:
        """Called by the attacher (any thread); written to the db by the worker thread."""
        with self._lock:
            self._marks.append((score_ids, how))
            self._noted_count += 1
        self.wake()

    def sync(self, timeout: float) -> bool:
        """Wait until every delivery noted so far is written to the database."""
        with self._lock:
            target = self._noted_count
        deadline = time.monotonic() + max(0.0, timeout)
        pause = 0.002
        while self._written_count < target:
            if time.monotonic() > deadline or not self.running():
                return self._written_count >= target
            self.wake()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return True

    def write_after_stop(self) -> None:
        """After the worker stopped: write the deliveries noted since (spans flushed at the
        end)."""
        if self.running():
            return  # the loop writes them itself
        store = open_store(self.db_path)
        try:
            self.flush(store)
        finally:
            store.close()

    # -- the worker's loop thread ------------------------------------------------------------
    def flush(self, store: StoreAPI) -> None:
        with self._lock:
            pending, self._marks = self._marks, []
            noted = self._noted_count
        if pending:
            try:
                store.mark_delivered_many(pending)  # one commit for all of them
            except Exception as exc:
                if self.db_fault(store, exc):
                    # kept for the next loop (else the sweep would export them a second time)
                    with self._lock:
                        self._marks[:0] = pending
                    return
                record_internal_error("worker.mark_delivered", exc)
            else:
                self.db_ok()
        self._written_count = noted

    def failed_export_due(self) -> bool:
        """Spans failed to export (backend down): sweep again after a backoff in seconds
        (1, 2, 4 … up to ``redeliver_backoff_s[1]``) while exports keep failing, instead of
        waiting for the periodic ``redeliver_after_s`` sweep."""
        if self.attacher is None:
            return False
        now = time.monotonic()
        failed = self.attacher.export_failed_scores
        if failed > self._failed_seen:
            self._failed_seen = failed
            if self._retry_at is None:
                lo, hi = self.redeliver_backoff_s
                if now - self._last_retry > 2 * self._backoff + 5.0:
                    self._backoff = lo  # a new outage: start again from the shortest wait
                self._retry_at = now + self._backoff
                self._backoff = min(self._backoff * 2, hi)
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            self._last_retry = now
            return True
        return False

    def redeliver(self, store: StoreAPI, *, at_start: bool = False,
                  older_than_s: float | None = None) -> None:
        """Stored scores that never reached the backend go out on carrier spans: at start, all
        that a dead process left; later, those still undelivered ``redeliver_after_s`` after
        they were stored (their span's export failed, or the batch processor dropped it).
        Records whose scores are on their way (held, awaiting export) are left alone."""
        if self.attacher is None:
            return
        try:
            busy: set[int] = set()
            older_than = None
            if store.shared:
                # Other workers of the fleet may be exporting the scores they just stored:
                # only scores older than redeliver_after_s count as left behind.
                older_than = time.time() - self.redeliver_after_s
            if not at_start:
                busy = self.attacher.in_flight(older_than_s=self.export_confirm_timeout_s)
                self.flush(store)  # deliveries confirmed until now are in the db
                older_than = time.time() - (self.redeliver_after_s if older_than_s is None
                                            else older_than_s)
            for record_id in store.undelivered_record_ids(older_than=older_than):
                # One record at a time: a malformed stored id must not stop the others.
                try:
                    self._redeliver_one(store, record_id, busy, older_than)
                except Exception as exc:
                    record_internal_error("worker.redeliver_record", exc)
        except Exception as exc:
            record_internal_error("worker.redeliver", exc)

    def _redeliver_one(self, store: StoreAPI, record_id: str, busy: set[int],
                       older_than: float | None) -> None:
        assert self.attacher is not None
        trace_hex, _, span_hex = record_id.partition("-")
        if not valid_ids(trace_hex, span_hex):
            # No span can carry them: mark them so the sweep does not pick them again.
            self.bad_ids += 1
            log.warning("tracescore cannot export the scores of record %r: not a valid "
                        "trace/span id (marked delivery='invalid_id')", record_id[:80])
            rows = store.scores_for(record_id, undelivered_only=True)
            store.mark_delivered([r["score_id"] for r in rows], "invalid_id")
            return
        if int(span_hex, 16) in busy:
            return
        if store.shared:  # claimed atomically: one sweeping worker of the fleet sends them
            rows = store.claim_redelivery(  # type: ignore[attr-defined]
                record_id, self.owner(), older_than or time.time())
        else:
            rows = store.scores_for(record_id, undelivered_only=True)
        refs = [(r["score_id"], _row_score(r)) for r in rows]
        if refs:
            self.redelivered += len(refs)
            self.attacher.emit_carrier(int(trace_hex, 16), int(span_hex, 16), refs)
