"""Deliveries (:class:`Deliveries`, mixed into the scoring worker): scores stored by the worker
are handed to the span attacher; the attacher notes which reached the backend and how, and the
worker writes those marks down in batches. Scores whose delivery failed or never happened (a
process that died) are handed over again. Marks are noted from any thread; written on the
worker's loop thread."""

from __future__ import annotations

import logging
import time

from .._internal.errors import record_internal_error
from .._internal.validate import valid_ids
from ..store import StoreAPI, open_store
from .calls import _row_score

log = logging.getLogger("tracescore")


class Deliveries:
    """The worker's delivery methods (state lives on the worker)."""

    def write_delivered(self) -> None:
        """After :meth:`stop`: write the deliveries noted since (spans flushed at the end)."""
        if self._thread is not None and self._thread.is_alive():
            return  # the loop writes them itself
        store = open_store(self.db_path)
        try:
            self._flush_delivered(store)
        finally:
            store.close()

    def note_delivered(self, score_ids: list[int], how: str) -> None:
        """Called by the attacher (any thread); written to the db by the worker thread."""
        with self._delivered_lock:
            self._delivered.append((score_ids, how))
            self._delivered_noted += 1
        self.wake(jobs=False)

    def sync_delivered(self, timeout: float) -> bool:
        """Wait until every delivery noted so far is written to the database."""
        with self._delivered_lock:
            target = self._delivered_noted
        deadline = time.monotonic() + max(0.0, timeout)
        pause = 0.002
        while self._delivered_written < target:
            if time.monotonic() > deadline or self._thread is None \
                    or not self._thread.is_alive():
                return self._delivered_written >= target
            self.wake(jobs=False)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return True

    def _flush_delivered(self, store: StoreAPI) -> None:
        with self._delivered_lock:
            pending, self._delivered = self._delivered, []
            noted = self._delivered_noted
        if pending:
            try:
                store.mark_delivered_many(pending)  # one commit for all of them
            except Exception as exc:
                if self._db_fault(store, exc):
                    # kept for the next loop (else the sweep would export them a second time)
                    with self._delivered_lock:
                        self._delivered[:0] = pending
                    return
                record_internal_error("worker.mark_delivered", exc)
            else:
                self._db_ok()
        self._delivered_written = noted

    def _failed_export_due(self) -> bool:
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

    def _redeliver(self, store: StoreAPI, *, at_start: bool = False,
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
                self._flush_delivered(store)  # deliveries confirmed until now are in the db
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
                record_id, self.owner, older_than or time.time())
        else:
            rows = store.scores_for(record_id, undelivered_only=True)
        refs = [(r["score_id"], _row_score(r)) for r in rows]
        if refs:
            self.redelivered += len(refs)
            self.attacher.emit_carrier(int(trace_hex, 16), int(span_hex, 16), refs)
