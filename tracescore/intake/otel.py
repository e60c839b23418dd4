"""``tracescore.init(capture="otel")``: records from an already-instrumented app's own spans.

A span processor on the app's SDK tracer provider (OpenInference, OpenLLMetry or GenAI
instrumentation; the app keeps its exporter). ``on_end`` only appends the span to its
trace's list (hot path: a lock and an append; bounded — past ``max_spans`` held, spans are
dropped and counted); a daemon thread builds the trace's records with the same readers as
``tracescore serve`` (:mod:`.records`) ``grace_s`` after its root span ended, and submits them
to the pipeline (sampled, stored, scored; their scores go out on carrier spans if tracescore
exports, the app's spans having left already).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode

from . import records as R
from .spans import Span

log = logging.getLogger("tracescore")


def attach(ts: Any, provider: Any = None, *, grace_s: float = 0.5) -> OtelCapture:
    """Add an :class:`OtelCapture` for ``ts`` to ``provider`` (else the global provider)."""
    target = provider if provider is not None else trace_api.get_tracer_provider()
    if not isinstance(target, TracerProvider):
        raise ValueError("capture='otel' needs the app's opentelemetry-sdk TracerProvider (set "
                         "it with trace.set_tracer_provider before tracescore.init, or pass "
                         "tracer_provider=)")
    cap = OtelCapture(ts, grace_s=grace_s)
    target.add_span_processor(cap)
    return cap


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def to_span(s: ReadableSpan) -> Span:
    ctx = s.context
    assert ctx is not None
    parent = s.parent.span_id if s.parent is not None and not s.parent.is_remote else 0
    err = s.status.description or "error" if s.status.status_code == StatusCode.ERROR else None
    return Span(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"),
                format(parent, "016x") if parent else "", s.name, s.start_time or 0,
                s.end_time or 0, {k: _plain(v) for k, v in (s.attributes or {}).items()},
                [(e.name, {k: _plain(v) for k, v in (e.attributes or {}).items()})
                 for e in s.events], err,
                dict(s.resource.attributes) if s.resource is not None else {},
                s.instrumentation_scope.name if s.instrumentation_scope else "")


class OtelCapture(SpanProcessor):
    def __init__(self, ts: Any, *, grace_s: float = 0.5, max_spans: int = 100_000,
                 orphan_s: float = 600.0) -> None:
        self.ts = ts
        self.grace_s = grace_s
        #: a trace whose root span never ends here is built from what it has after this long
        #: (its spans would otherwise be held for good)
        self.orphan_s = orphan_s
        self.max_spans = max_spans
        self._traces: dict[int, list[ReadableSpan]] = {}
        self._due: list[tuple[float, int]] = []
        self._roots_ended: set[int] = set()
        self._held = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        #: counters
        self.spans_dropped = 0
        self.records = 0
        self._thread = threading.Thread(target=self._run, name="tracescore-otel-capture",
                                        daemon=True)
        self._thread.start()

    # -- SpanProcessor (app threads) ------------------------------------------------------------
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None or self._closed:
            return
        root = span.parent is None or span.parent.is_remote
        with self._lock:
            if self._held >= self.max_spans:
                self.spans_dropped += 1
                return
            spans = self._traces.get(ctx.trace_id)
            if spans is None:
                spans = self._traces[ctx.trace_id] = []
                heapq.heappush(self._due, (time.monotonic() + self.orphan_s, ctx.trace_id))
            spans.append(span)
            self._held += 1
            if root:
                self._roots_ended.add(ctx.trace_id)
                heapq.heappush(self._due, (time.monotonic() + self.grace_s, ctx.trace_id))
                self._wake.notify()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.assemble_all()
        return True

    def shutdown(self) -> None:
        self.assemble_all()
        with self._lock:
            self._closed = True
            self._wake.notify()

    # -- background -----------------------------------------------------------------------------
    def assemble_all(self) -> None:
        """Build the records of every trace whose root span ended (flush, shutdown)."""
        with self._lock:
            due = [t for when, t in self._due if t in self._roots_ended]
            self._due = [(w, t) for w, t in self._due if t not in self._roots_ended]
            heapq.heapify(self._due)
        self._assemble(due)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                ready = []
                while self._due and self._due[0][0] <= now:
                    ready.append(heapq.heappop(self._due)[1])
                wait = self._due[0][0] - now if self._due else 1.0
                if not ready:
                    self._wake.wait(max(0.01, min(wait, 1.0)))
                    continue
            self._assemble(ready)

    def _assemble(self, trace_ids: list[int]) -> None:
        for tid in dict.fromkeys(trace_ids):
            with self._lock:
                spans = self._traces.pop(tid, [])
                self._held -= len(spans)
                self._roots_ended.discard(tid)
            if not spans:
                continue
            try:
                built = R.build([to_span(s) for s in spans])
            except Exception as exc:  # one trace's record lost, counted; never the app's
                log.warning("tracescore capture='otel': cannot read trace %032x (%s)", tid, exc)
                continue
            for b in built:
                self.ts.submit(self.ts.prepare(b.record), hold_span=False)
                self.records += 1  # after the submit: a reader that sees it can flush it
