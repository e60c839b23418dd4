"""``tracescore serve`` as an object: the front ends, the spool, the assembler, scoring.

:class:`Serve` wires an :class:`~.server.Intake` (OTLP/HTTP and/or OTLP/gRPC) to a
:class:`~.spool.Spool` (acknowledged means stored) and an :class:`~.assembler.Assembler`
(complete traces → records + scoring jobs), on the database and pipeline of a
:class:`~tracescore.client.Tracescore` (its scoring worker scores the jobs). Tests and the
CLI use it the same way::

    ts = tracescore.init(db="serve.db", metrics=[...], judge=...)
    serve = Serve(ts, otlp_http=("127.0.0.1", 4318)).start()
    ...
    serve.stop()
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from .assembler import Assembler
from .forwarder import Forwarder
from .server import Intake
from .spool import Spool


@dataclass(frozen=True)
class ServeConfig:
    #: seconds after a trace's root span arrived before its record is built (late children)
    grace_s: float = 5.0
    #: seconds without a new span after which a trace whose root never came is built
    orphan_s: float = 600.0
    max_body: int = 20 * 1024 * 1024
    max_pending_spans: int = 200_000
    max_concurrent: int = 64
    ack_timeout_s: float = 30.0
    lease_s: float = 60.0
    max_trace_spans: int = 10_000
    #: with a forward URL: how long a record's span waits for its scores (after assembly)
    hold_s: float = 10.0
    #: received spans are deleted this long after their trace was assembled (and forwarded)
    keep_spans_s: float = 60.0
    #: the interpreter's GIL switch interval while serving (``sys.setswitchinterval``; None:
    #: leave it). A request thread that wants the GIL while the assembler builds records waits
    #: up to this long each time, several times per request: 1 ms instead of Python's 5 ms
    #: (issue 32: p99 acknowledgement with a backlog being assembled). Restored by stop().
    switch_interval_s: float | None = 0.001


class Serve:
    """A running intake. :meth:`start` binds the listeners (port 0: a free port, see
    :attr:`http_port` / :attr:`grpc_port`); :meth:`stop` stops accepting, stores what was
    accepted, stops assembling (the Tracescore is the caller's to shut down)."""

    def __init__(self, ts: Any, *, otlp_http: tuple[str, int] | None = None,
                 otlp_grpc: tuple[str, int] | None = None,
                 config: ServeConfig | None = None, forward: str | None = None) -> None:
        self.ts = ts
        self.config = c = config or ServeConfig()
        self.otlp_http = otlp_http
        self.otlp_grpc = otlp_grpc
        self.spool = Spool(str(ts.db_path), grace_s=c.grace_s,
                           max_pending_spans=c.max_pending_spans)
        self.assembler = Assembler(ts, grace_s=c.grace_s, orphan_s=c.orphan_s,
                                   lease_s=c.lease_s, max_trace_spans=c.max_trace_spans,
                                   on_records=self._hold if forward else None,
                                   forwarding=forward is not None,
                                   keep_spans_s=c.keep_spans_s,
                                   background=self.spool.background,
                                   pause=self.spool.pause)
        self.forwarder: Forwarder | None = None
        if forward is not None and ts.attacher is not None:
            # Scores a process of the fleet made for a record another one holds wait for
            # that one (it puts them on the span); what nobody sent goes on a carrier after
            # the hold, by the redelivery sweep.
            ts.attacher.carry_unheld = False
            ts.worker.redeliver_after_s = c.hold_s + 30.0
        if forward is not None:
            self.forwarder = Forwarder(ts, forward, owner=self.assembler.owner,
                                       hold_s=c.hold_s, orphan_s=c.orphan_s,
                                       background=self.spool.background)
        self.intake = Intake(self.spool, max_body=c.max_body, ack_timeout_s=c.ack_timeout_s,
                             max_concurrent=c.max_concurrent)
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._switch_interval: float | None = None

    def _hold(self, built: list[Any]) -> None:
        """Records just stored: their scores wait for the forwarder, not a carrier (the
        pipeline's attacher holds them; the forwarder takes the hold when it sends the span)."""
        attacher = self.ts.attacher
        if attacher is not None:
            for b in built:
                r = b.record
                attacher.expect(int(r.trace_id, 16), int(r.span_id, 16), 1 << 30)
        if self.forwarder is not None:
            self.forwarder.wake()

    def start(self) -> Serve:
        if self.config.switch_interval_s is not None and self._switch_interval is None:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(self.config.switch_interval_s)
        self.assembler.start()
        if self.forwarder is not None:
            self.forwarder.start()
        if self.otlp_http is not None:
            self.http_port = self.intake.start_http(*self.otlp_http)
        if self.otlp_grpc is not None:
            self.grpc_port = self.intake.start_grpc(*self.otlp_grpc)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.intake.stop()
        self.spool.close(timeout)
        self.assembler.stop(timeout)
        if self.forwarder is not None:
            self.forwarder.stop(timeout)
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None

    def stats(self) -> dict[str, int]:
        s, a, i = self.spool, self.assembler, self.intake
        return {"requests": i.requests, "spans_stored": s.spans_stored,
                "spans_duplicate": s.spans_duplicate, "spans_rejected": i.rejected_spans,
                "late_spans": s.late_spans, "bad_requests": i.bad_requests,
                "too_large": i.too_large, "refused": i.refused + s.overloaded,
                "pending_spans": s.pending, "traces_done": a.traces_done,
                "records": a.records_stored, "traces_without_record": a.traces_without_record,
                "traces_cut": a.traces_cut, "errors": a.errors,
                "spans_pruned": a.spans_pruned,
                **({"spans_forwarded": self.forwarder.spans_forwarded,
                    "forward_rejected": self.forwarder.spans_rejected,
                    "scores_on_spans": self.forwarder.scores_on_spans,
                    "forward_failures": self.forwarder.failures}
                   if self.forwarder is not None else {})}
