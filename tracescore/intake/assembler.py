"""Traces → records: claim the traces whose root span ended a grace period ago, build their
records (:mod:`.records`), store them with their scoring jobs, mark the traces done.

One background thread per ``serve`` process. Claiming is a lease (``state='claimed'``,
``owner``, ``lease_until``), taken with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so several
processes on one database never wait for each other and a dead one's traces come back when
its lease ends. The records, their jobs and the ``done`` mark are one transaction; records
and jobs are keyed (record id = trace id + span id; one job per record and metric), so a
trace assembled twice — a lease that ran out under a slow process, a crash between commit
and anything after it — stores and scores nothing twice.

A trace whose root span never came is assembled from what it has after ``orphan_s`` without
a new span. Spans of a trace that come after it was assembled are stored (and forwarded) and
counted in ``intake_traces.late_spans``; they do not change its record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..record import CONTEXTS
from ..store import SKIPPED, NewJob, intake_spool
from ..store import intake_sql as Q
from . import records as R
from .spans import Resources, decode

log = logging.getLogger("tracescore")


class Assembler:
    """The assembling thread of one ``serve`` process (or a test's direct :meth:`run_once`).

    ``ts``: the :class:`~tracescore.client.Tracescore` whose sampler, metrics plan, content
    settings and scoring worker the records go to. ``on_records``: called after each commit
    with the stored records (the forwarder holds their root spans for the scores)."""

    def __init__(self, ts: Any, *, grace_s: float = 5.0, orphan_s: float = 600.0,
                 lease_s: float = 60.0, batch: int = 200, max_trace_spans: int = 10_000,
                 poll_s: float = 0.2,
                 on_records: Callable[[list[R.Built]], None] | None = None,
                 forwarding: bool = False, keep_spans_s: float = 60.0,
                 keep_traces_s: float = 86_400.0,
                 background: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
                 checkpoint_every_s: float = 1.0, tx_traces: int = 25,
                 pause: Callable[[], None] | None = None) -> None:
        self.ts = ts
        self.db = str(ts.db_path)
        self.grace_s = grace_s
        self.orphan_s = orphan_s
        self.lease_s = lease_s
        self.batch = batch
        self.max_trace_spans = max_trace_spans
        self.poll_s = poll_s
        self.on_records = on_records
        self.forwarding = forwarding
        self.keep_spans_s = keep_spans_s
        self.keep_traces_s = keep_traces_s
        self._pruned_at = 0.0
        #: around each write transaction: the spool's :meth:`~.spool.Spool.background`
        #: (acknowledgements first)
        self.background = background or contextlib.nullcontext
        self._gated = background is not None
        #: between two traces built: the spool's :meth:`~.spool.Spool.pause`
        self.pause: Callable[[], None] = pause or (lambda: None)
        #: seconds of work between two pauses (the interpreter's switch interval, 5 ms: a
        #: thread that wants the GIL waits that long for it anyway)
        self.pause_every_s = sys.getswitchinterval()
        self._paused_at = 0.0
        #: SQLite: seconds between the idle thread's passive WAL checkpoints (the spool's
        #: connection leaves checkpoints to the background); 0: none
        self.checkpoint_every_s = checkpoint_every_s
        #: traces stored per write transaction
        self.tx_traces = tx_traces
        self._checkpointed_at = 0.0
        self._no_checkpoint: Any = None
        #: seconds between pruning rounds
        self.prune_every_s = 10.0
        self.spans_pruned = 0
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._resources = Resources()
        self._halt = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._store: Any = None
        #: counters
        self.traces_done = 0
        self.records_stored = 0
        self.traces_without_record = 0
        self.traces_cut = 0
        self.errors = 0

    # -- thread ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tracescore-intake-assembler",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._halt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                n = self.run_once()
            except Exception as exc:  # never dies: the traces stay claimed until their lease
                self.errors += 1
                log.warning("tracescore serve: assembling traces failed (%s); retrying", exc)
                self._drop_store()
                n = 0
            if self.checkpoint_every_s and \
                    time.monotonic() - self._checkpointed_at > self.checkpoint_every_s:
                self._checkpointed_at = time.monotonic()
                self.checkpoint()
            if n < self.batch:
                if time.monotonic() - self._pruned_at > self.prune_every_s:
                    self._pruned_at = time.monotonic()
                    try:
                        self.prune()
                    except Exception as exc:  # pruning waits for the next round
                        log.warning("tracescore serve: pruning received spans failed (%s)",
                                    exc)
                        self._drop_store()
                self._wake.wait(self.poll_s)
                self._wake.clear()
        self._drop_store()  # (a SQLite connection is closed on the thread that opened it)

    def _drop_store(self) -> None:
        if self._store is not None:
            try:
                self._store.close()
            except Exception:  # noqa: S110 - a broken connection: opened again next time
                pass
            self._store = None

    def _open(self) -> Any:
        from ..store import open_store

        if self._store is None:
            self._store = open_store(self.db)
        store = self._store
        if self._gated and store.dialect == "sqlite" and self._no_checkpoint is not store.conn:
            # its commits do not checkpoint either (they are inside Spool.background, which
            # the acknowledging commit waits for): :meth:`checkpoint` does, outside
            intake_spool.autocheckpoint_off(store.conn)
            self._no_checkpoint = store.conn
        return store

    def checkpoint(self) -> None:
        """SQLite: a passive WAL checkpoint that never waits, outside any transaction (it
        copies what no reader needs; writers go on appending to the WAL meanwhile)."""
        store = self._store
        if store is None or store.dialect != "sqlite":
            return
        try:
            store.checkpoint("PASSIVE", wait_s=0)
        except Exception as exc:  # the next round tries again
            log.debug("tracescore serve: WAL checkpoint failed (%s)", exc)

    # -- one round ------------------------------------------------------------------------------
    def run_once(self, now: float | None = None) -> int:
        """Claim, build and store one batch of complete traces; how many were claimed."""
        store = self._open()
        now = time.time() if now is None else now
        with self.background(), store.transaction():
            got = Q.claim(store, self.owner, now + self.lease_s, now, now - self.orphan_s, now,
                          self.batch)
        if not got:
            return 0
        claimed = [r[0] for r in got]
        # the spans of the traces that are not too big in a few queries, not one per trace
        # (on PostgreSQL each is a round trip)
        small = {r[0] for r in got if (r[1] or 0) <= self.max_trace_spans}
        loaded = self._fetch(store, sorted(small))
        built: list[R.Built] = []
        by_trace: dict[str, list[R.Built]] = {}
        per_trace: dict[str, tuple[int, str | None]] = {}
        for tid in claimed:
            if time.monotonic() - self._paused_at >= self.pause_every_s:
                # (requests under way first: the GIL and the CPU; at most once per switch
                # interval of work, so a sender that never stops does not stall assembly)
                self.pause()
                self._paused_at = time.monotonic()
            spans, cut = self._load(store, tid, loaded.get(tid, []) if tid in small
                                    else None)
            try:
                got = R.build(spans)
            except Exception as exc:  # a reader bug loses this trace's record, not the batch
                self.errors += 1
                log.warning("tracescore serve: cannot read trace %s (%s)", tid, exc)
                got = []
                per_trace[tid] = (0, f"not read: {type(exc).__name__}")
            else:
                note = None if got else "no model call in the trace: not a RAG request"
                if cut:
                    note = f"over {self.max_trace_spans} spans: read the first ones only"
                per_trace[tid] = (len(got), note)
            built.extend(got)
            by_trace[tid] = got
        # a few traces per transaction: the write lock is never held long (the spool's
        # acknowledging commits wait for a background transaction in progress)
        for i in range(0, len(claimed), self.tx_traces):
            part = claimed[i:i + self.tx_traces]
            part_built = [b for tid in part for b in by_trace[tid]]
            if part_built and self.on_records is not None:
                # before the commit: a worker may score a job the moment it is stored, and
                # its scores must find the hold (else they would leave at once on a carrier)
                self.on_records(part_built)
            self._store_records(store, part_built, {t: per_trace[t] for t in part},
                                time.time())
        self.traces_done += len(claimed)
        self.records_stored += len(built)
        self.traces_without_record += sum(1 for n, _ in per_trace.values() if n == 0)
        if built:
            self.ts.worker.wake()
        return len(claimed)

    def prune(self, now: float | None = None, limit: int = 5000, chunk: int = 200) -> int:
        """Delete the received spans of traces assembled more than ``keep_spans_s`` ago (and
        forwarded, with ``--forward``), and trace rows older than ``keep_traces_s`` whose
        spans are gone; at most ``limit`` traces each, ``chunk`` per transaction. The traces
        are chosen by a read outside any transaction (it may scan many trace rows: the write
        lock is held only to delete), and only among those that still have such spans: the
        trace rows stay a day after their spans are gone, and choosing the oldest assembled
        traces alone chose the same spanless ones for ever once ``limit`` of them were pruned
        (nothing more was deleted until they aged out). The spans deleted."""
        store = self._open()
        now = time.time() if now is None else now
        tids = Q.prunable_traces(store, now - self.keep_spans_s, self.forwarding, limit)
        n = 0
        for i in range(0, len(tids), chunk):
            part = tids[i:i + chunk]
            with self.background(), store.transaction():
                n += Q.delete_spans(store, part, self.forwarding)
        old = Q.spanless_traces(store, now - self.keep_traces_s, limit)
        for i in range(0, len(old), chunk):
            part = old[i:i + chunk]
            with self.background(), store.transaction():
                # (a span that came meanwhile keeps its trace row)
                Q.delete_spanless_traces(store, part)
        self.spans_pruned += n
        return n

    def _fetch(self, store: Any, tids: list[str],
               chunk: int = 100) -> dict[str, list[Any]]:
        """trace id → its spans' (span id, parent id, resource id, body), in arrival order."""
        out: dict[str, list[Any]] = {}
        for i in range(0, len(tids), chunk):
            part = tids[i:i + chunk]
            for tid, *rest in Q.traces_spans(store, part):
                out.setdefault(tid, []).append(rest)
        return out

    def _load(self, store: Any, tid: str,
              rows: list[Any] | None = None) -> tuple[list[Any], bool]:
        if rows is None:
            rows = Q.trace_spans(store, tid, self.max_trace_spans + 1)
        cut = len(rows) > self.max_trace_spans
        if cut:
            self.traces_cut += 1
            rows = rows[:self.max_trace_spans]
        missing = sorted({r[2] for r in rows if not self._resources.known(r[2])})
        bodies = {}
        if missing:
            bodies = dict(Q.resource_bodies(store, missing))
        spans = []
        for sid, pid, rid, body in rows:
            res = self._resources.get(rid, bodies.get(rid))
            if res is None:
                res = ({}, "")
            try:
                spans.append(decode(tid, sid, pid, body, res))
            except Exception:  # a body that no longer parses: skip the span, keep the trace
                self.errors += 1
        return spans, cut

    def _store_records(self, store: Any, built: list[R.Built],
                       per_trace: dict[str, tuple[int, str | None]], now: float) -> None:
        ts = self.ts
        groups: dict[tuple[str | None, str | None], tuple[list[Any], list[NewJob]]] = {}
        for b in built:
            record = ts.prepare(b.record)
            decision = ts.sampler.decide(record, ts._metric_names)
            ts.records_seen += 1
            if decision.metrics:
                ts.records_sampled += 1
            jobs = ts._plan_jobs(record, decision)
            if b.stripped or b.contexts_stripped:
                jobs = [_stripped_reason(ts, j, b) for j in jobs]
            recs, js = groups.setdefault((b.release, b.environment), ([], []))
            recs.append((record, decision))
            js.extend(jobs)
        base = ts.segment_spec
        with self.background(), store.transaction():
            for (release, env), (recs, js) in groups.items():
                spec = dataclasses.replace(base, release=release or base.release,
                                           environment=env or base.environment)
                store.write_batch(recs, js, keep_full_text=ts.queue.keep_full_text,
                                  segments=spec)
            Q.mark_done(store, self.owner, now,
                        [(tid, n, note) for tid, (n, note) in per_trace.items()])


def _stripped_reason(ts: Any, job: NewJob, b: R.Built) -> NewJob:
    """A skipped job of a record whose text was stripped upstream says so (not the generic
    "content capture is off" / "record has no contexts")."""
    if job.status != SKIPPED:
        return job
    if b.stripped:
        return dataclasses.replace(job, reason=b.stripped)
    metric = ts._metric_by_name.get(job.metric)
    if b.contexts_stripped and metric is not None and CONTEXTS in metric.requires:
        return dataclasses.replace(job, reason=b.contexts_stripped)
    return job
