"""Attach scores to spans: a wrapping ``SpanProcessor`` that holds sampled RAG root spans.

OTel spans are immutable once ended. :class:`ScoreAttachingProcessor` wraps the processor that
exports (usually a ``BatchSpanProcessor``) and forwards every span at once, except RAG root spans
that the pipeline said it will score (:meth:`expect`). Those wait until their scores are in
(:meth:`job_done`) or ``hold_seconds`` pass, then a copy carrying the score attributes is
forwarded. Scores that arrive after that go on a carrier span (OpenInference kind ``EVALUATOR``,
same trace, child of and linked to the scored span). Each score is forwarded exactly once;
``force_flush`` and ``shutdown`` release every hold.

Threading: ``on_start``/``on_end`` run on the app's thread and only take a short lock and do
dictionary work; ``job_done`` runs on the scoring worker; a small daemon thread releases holds
whose deadline passed.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context as OtelContext
from opentelemetry.sdk.trace import (
    ConcurrentMultiSpanProcessor,
    ReadableSpan,
    SpanProcessor,
    SynchronousMultiSpanProcessor,
    TracerProvider,
)
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from . import attributes as A
from ._internal.errors import handle_internal_errors, record_internal_error
from ._internal.service import Service
from .export import TRACES, ExportLoss, clean_attributes, clean_span
from .score import Score

#: Set (on the ending thread) while a span whose strings are known valid UTF-8 ends — the
#: adapters' child spans, cleaned as they are built (``integrations/_spans.py``): the
#: processor then skips :func:`~.export.clean_span`'s scan, a quarter of the writer's work
#: per child span.
_clean_ending = threading.local()


def end_clean(span: Any, end_time: int | None) -> None:
    """End ``span``, whose name, attributes and status text the caller made valid UTF-8."""
    _clean_ending.on = True
    try:
        span.end(end_time=end_time)
    finally:
        _clean_ending.on = False


def on_end_clean(processor: Any, span: ReadableSpan) -> None:
    """``processor.on_end(span)`` for an ended span built with valid UTF-8 strings (the
    adapters' child spans built finished, ``integrations/_spans.py``)."""
    _clean_ending.on = True
    try:
        processor.on_end(span)
    finally:
        _clean_ending.on = False

ScoreRef = tuple[int, Score]  # (score_id in the database, score)
#: Bound on spans awaiting their export result (see ScoreAttachingProcessor.exported).
MAX_UNCONFIRMED = 100_000


def score_attributes(scores: Sequence[Score], start: int = 0) -> dict[str, Any]:
    """OpenInference ``evaluations.{i}.*`` plus one flat ``tracescore.score.<name>`` each."""
    attrs: dict[str, Any] = {}
    for i, s in enumerate(scores, start):
        attrs[A.evaluation(i, "name")] = s.name
        health = s.details.get("judge_health") if s.details else None
        if isinstance(health, dict) and health.get("degenerate"):
            # The judge failed its canary: say so on every score it produced.
            attrs[A.JUDGE_DEGENERATE] = True
        if s.status == "ok" and s.value is not None:
            attrs[A.evaluation(i, "score")] = float(s.value)
            attrs[A.score_attribute(s.name)] = float(s.value)
            if s.label:
                attrs[A.evaluation(i, "label")] = s.label
            if s.explanation:
                attrs[A.evaluation(i, "explanation")] = s.explanation
        else:
            attrs[A.evaluation(i, "label")] = s.status
            attrs[A.evaluation(i, "explanation")] = s.error or s.status
    return attrs


@dataclass
class _Hold:
    trace_id: int
    span_id: int
    expected: int
    deadline: float
    span: ReadableSpan | None = None
    done: int = 0
    scores: list[ScoreRef] = field(default_factory=list)


def batch_queues(processor: Any) -> tuple[tuple[Any, int], ...]:
    """The ``(queue, capacity)`` of each OpenTelemetry batch span processor ``processor`` is or
    holds (an SDK multi-processor's members). A span handed to a full one is dropped by the SDK,
    which only logs it ("Queue full", once): the attacher counts those drops. Reads the SDK's
    private ``_batch_processor._queue`` (opentelemetry-sdk >= 1.34); anything else: ()."""
    members = getattr(processor, "_span_processors", None)
    found: list[tuple[Any, int]] = []
    for p in members if isinstance(members, tuple) else (processor,):
        batch = getattr(p, "_batch_processor", None)
        queue, cap = getattr(batch, "_queue", None), getattr(batch, "_max_queue_size", None)
        if queue is not None and isinstance(cap, int) and hasattr(queue, "__len__"):
            found.append((queue, cap))
    return tuple(found)


class ScoreAttachingProcessor(SpanProcessor):
    def __init__(
        self,
        inner: SpanProcessor,
        *,
        hold_seconds: float = 10.0,
        on_delivered: Callable[[list[int], str], None] | None = None,
        loss: ExportLoss | None = None,
    ) -> None:
        self.inner = inner
        #: spans handed to a full batch queue are counted here (``stats()["export_lost"]``)
        self.loss = loss
        self._queues = batch_queues(inner) if loss is not None else ()
        self.hold_seconds = hold_seconds
        self.on_delivered = on_delivered
        self._holds: dict[int, _Hold] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        self._tracer: trace_api.Tracer | None = None
        self._closed = False
        #: ends the holds whose deadline passed (started at the first hold)
        self._reaper = Service("tracescore-holds", self._reap_due, interval_s=1.0,
                               on_error=_reap_failed)
        os.register_at_fork(after_in_child=self._after_fork)
        #: Set by :func:`adopt_processors`: the app's multi-processor this one sits in.
        self.adopted_from: Any = None
        #: True when tracescore owns the span exporter and reports each batch's result to
        #: :meth:`exported`: scores count as delivered only once their span was exported.
        #: False (a processor of the user's, exporter="app"): delivered = handed to it.
        self.confirm_exports = False
        # exported span id -> (score ids, how, when, the scored record's span id)
        self._unconfirmed: dict[int, tuple[list[int], str, float, int]] = {}
        #: Scores whose span's export failed: they stay undelivered and go out again on a
        #: carrier span (the worker's redelivery sweep, or the next start).
        self.export_failed_scores = 0
        #: False (``tracescore serve --forward`` on a shared database): a score of a span not
        #: held here leaves at once on a carrier only if this process sent that span (it went
        #: through :meth:`take`); others are left undelivered for the process that holds the
        #: span (it puts them on the span), and the redelivery sweep sends what nobody did.
        self.carry_unheld = True
        #: spans sent by :meth:`take`'s caller → the score ids it put on them
        self._taken: dict[int, frozenset[int]] = {}

    @property
    def held(self) -> int:
        """Spans (or span ids still to end) waiting for their scores now."""
        return len(self._holds)

    def bind_tracer(self, tracer: trace_api.Tracer) -> None:
        """The tracer used for carrier spans (from the provider this processor is on)."""
        self._tracer = tracer

    # -- SpanProcessor ---------------------------------------------------------------------
    def on_start(self, span: Any, parent_context: OtelContext | None = None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Any) -> None:
        on_ending = getattr(self.inner, "_on_ending", None)
        if on_ending is not None:
            on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        # Strings the OTLP encoder cannot take (lone surrogates) are escaped on every span,
        # else the exporter drops the attribute (e.g. a query's input.value) with a traceback.
        if not getattr(_clean_ending, "on", False):
            span = clean_span(span)
        # Membership first, without the lock: a hold is registered on this same thread before
        # its span ends, so a span that is not in the dict now is never held.
        if span.context is None or span.context.span_id not in self._holds:
            for queue, cap in self._queues:  # (inline: every span of every request)
                if len(queue) >= cap:
                    self._count_full()
                    break
            self.inner.on_end(span)
            return
        release: _Hold | None = None
        with self._lock:
            hold = self._holds.get(span.context.span_id)
            if hold is not None:
                hold.span = span
                if hold.done >= hold.expected:
                    release = self._holds.pop(span.context.span_id)
        if hold is None:
            self._forward(span)
        elif release is not None:
            self._release(release, late=0)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._release_all()
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.close(shutdown_inner=True)

    def close(self, *, shutdown_inner: bool) -> None:
        """Release every hold and stop. ``shutdown_inner=False`` (processors that belong to
        the app, see :func:`adopt_processors`): flush them instead of shutting them down."""
        self._release_all()
        with self._lock:
            self._closed = True
        self._reaper.stop(timeout=0)  # (it ends at its next turn; holds are released above)
        if shutdown_inner:
            self.inner.shutdown()
        else:
            self.inner.force_flush()

    # -- pipeline side ---------------------------------------------------------------------
    def expect(self, trace_id: int, span_id: int, n_jobs: int) -> None:
        """Hold the span ``span_id`` until ``n_jobs`` jobs report, or the deadline. Hot path."""
        deadline = time.monotonic() + self.hold_seconds
        with self._lock:
            if self._closed:
                return
            self._holds[span_id] = _Hold(trace_id, span_id, n_jobs, deadline)
            heapq.heappush(self._deadlines, (deadline, span_id))
            if not self._reaper.alive:
                self._reaper.start()
            elif len(self._deadlines) == 1 and self.hold_seconds < 1.0:
                # Only a deadline sooner than the reaper's idle wake-up (1 s) needs waking it:
                # deadlines come in order (now + hold_seconds), so with holds of a second or
                # more it never does — a wake per request (when scores come faster than
                # requests, the heap empties between them) cost a thread switch each.
                self._reaper.wake()

    def expect_more(self, span_id: int, n_jobs: int) -> None:
        """``n_jobs`` more jobs (or fewer, when negative) were planned for a held span.

        Ground truth or feedback that arrives while the span is held schedules more jobs for
        it: the span waits for them too, so its scores are not split between the span and
        carrier spans. A span no longer held is left alone (its late scores use carriers).
        Writer thread; never blocks beyond a short lock.
        """
        release = None
        with self._lock:
            hold = self._holds.get(span_id)
            if hold is None or n_jobs == 0:
                return
            hold.expected += n_jobs
            if hold.done >= hold.expected and hold.span is not None:
                release = self._holds.pop(span_id)
        if release is not None:
            self._release(release, late=0)

    def _after_fork(self) -> None:
        # The child has no reaper thread, and the lock may have been held by a parent thread
        # at fork time. The holds are the parent's spans: the parent exports them.
        # (the reaper's own service gets fresh events and no thread: it starts at a hold)
        self._lock = threading.Lock()
        self._holds = {}
        self._deadlines = []
        self._taken = {}

    def take(self, span_id: int, attached: frozenset[int] = frozenset()) -> list[ScoreRef] | None:
        """End the hold of ``span_id`` without a span (its span is sent by someone else: the
        OTLP intake's forwarder, with the scores ``attached`` — their ids — that it read from
        the database): the scores the hold collected, or None when it was not held. Later
        scores go on carrier spans; a job that reports one of ``attached`` after this (its
        commit came before its report) sends nothing again."""
        with self._lock:
            hold = self._holds.pop(span_id, None)
            if len(self._taken) >= MAX_UNCONFIRMED:
                self._taken.pop(next(iter(self._taken)))
            self._taken[span_id] = attached
        return None if hold is None else list(hold.scores)

    def cancel(self, span_id: int) -> None:
        """Forget a hold whose record was dropped (no scores will come). Hot path."""
        with self._lock:
            hold = self._holds.pop(span_id, None)
        if hold is not None and hold.span is not None:
            self._forward(hold.span)

    def job_done(self, record_id: str, scores: Sequence[ScoreRef]) -> None:
        """One scoring job of ``record_id`` finished (scores may be empty). Worker thread."""
        trace_hex, _, span_hex = record_id.partition("-")
        span_id = int(span_hex, 16)
        release = None
        with self._lock:
            hold = self._holds.get(span_id)
            if hold is not None:
                hold.scores.extend(scores)
                hold.done += 1
                if hold.done >= hold.expected and hold.span is not None:
                    release = self._holds.pop(span_id)
        if release is not None:
            self._release(release, late=0)
        elif hold is None and scores:
            taken = self._taken.get(span_id)
            if taken is not None:
                scores = [r for r in scores if r[0] not in taken]
            if scores and (self.carry_unheld or taken is not None):
                self.emit_carrier(int(trace_hex, 16), span_id, scores)

    def emit_carrier(self, trace_id: int, span_id: int, scores: Sequence[ScoreRef]) -> None:
        """Late scores: an EVALUATOR span in the scored span's trace, linked to it."""
        if self._tracer is None:
            return
        with handle_internal_errors("processor.carrier", reraise=False):
            scored = SpanContext(trace_id, span_id, is_remote=False,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED))
            parent = trace_api.set_span_in_context(NonRecordingSpan(scored))
            attrs = {
                A.SPAN_KIND: A.KIND_EVALUATOR,
                A.SCORED_SPAN_ID: format(span_id, "016x"),
                **score_attributes([s for _, s in scores]),
            }
            attrs = clean_attributes(attrs) or attrs
            span = self._tracer.start_span(
                "tracescore.evaluation", context=parent, links=[Link(scored)], attributes=attrs
            )
            # registered before end(): a synchronous processor exports inside end()
            self._delivered([i for i, _ in scores], "carrier", span.get_span_context().span_id,
                            span_id)
            span.end()

    # -- internals ---------------------------------------------------------------------------
    def _release(self, hold: _Hold, late: int) -> None:
        span = hold.span
        if span is None:
            return
        try:
            extra = score_attributes([s for _, s in hold.scores])
            if late:
                extra[A.SCORES_LATE] = late
            attrs = dict(span.attributes or {})
            attrs.update(clean_attributes(extra) or extra)
            copy = ReadableSpan(
                name=span.name, context=span.context, parent=span.parent,
                resource=span.resource, attributes=attrs, events=span.events,
                links=span.links, kind=span.kind, status=span.status,
                start_time=span.start_time, end_time=span.end_time,
                instrumentation_scope=span.instrumentation_scope,
            )
        except Exception as exc:  # never lose the span because of its scores
            record_internal_error("processor.release", exc)
            copy = span
        if hold.scores and copy is not span:
            self._delivered([i for i, _ in hold.scores], "span", hold.span_id, hold.span_id)
        self._forward(copy)

    def _forward(self, span: ReadableSpan) -> None:
        if self._queues:
            self._count_full()
        self.inner.on_end(span)

    def _count_full(self) -> None:
        """Count the span about to go to each batch queue that is full now: the SDK drops its
        oldest span to make room (a count at the hand-off, not a lock with the queue's thread:
        it can be off by the span its worker takes at that very moment)."""
        for queue, cap in self._queues:
            if len(queue) >= cap and self.loss is not None:
                self.loss.dropped(TRACES, 1, "the batch span processor's queue was full")

    def _delivered(self, score_ids: list[int], how: str, exported_span_id: int | None = None,
                   scored_span_id: int = 0) -> None:
        if not score_ids:
            return
        if self.confirm_exports and exported_span_id is not None:
            with self._lock:
                if len(self._unconfirmed) >= MAX_UNCONFIRMED:  # bounded: the oldest stay
                    self._unconfirmed.pop(next(iter(self._unconfirmed)))  # undelivered
                self._unconfirmed[exported_span_id] = (score_ids, how, time.monotonic(),
                                                       scored_span_id)
            return
        if self.on_delivered is not None:
            with handle_internal_errors("processor.delivered", reraise=False):
                self.on_delivered(score_ids, how)

    def exported(self, spans: Sequence[ReadableSpan], ok: bool) -> None:
        """The span exporter's result for a batch (its thread): scores carried by spans of a
        successful batch are delivered; those of a failed one stay undelivered."""
        if not self._unconfirmed:
            return
        with self._lock:
            done = [(s.context.span_id, self._unconfirmed[s.context.span_id]) for s in spans
                    if s.context is not None and s.context.span_id in self._unconfirmed]
        if not ok:
            self.export_failed_scores += sum(len(v[0]) for _, v in done)
        elif self.on_delivered is not None:
            for _, (ids, how, _, _) in done:  # noted before they stop being in flight, so
                with handle_internal_errors("processor.delivered", reraise=False):
                    self.on_delivered(ids, how)  # a redelivery sweep never sees a gap
        with self._lock:
            for k, v in done:
                if self._unconfirmed.get(k) is v:
                    del self._unconfirmed[k]

    def in_flight(self, older_than_s: float = 600.0) -> set[int]:
        """Span ids of records whose scores are on their way (held, or exported and not yet
        confirmed). Confirmations older than ``older_than_s`` are given up on first (the batch
        processor dropped the span, e.g. its queue was full): those scores are undelivered."""
        now = time.monotonic()
        with self._lock:
            for k in [k for k, v in self._unconfirmed.items() if now - v[2] > older_than_s]:
                del self._unconfirmed[k]
            return set(self._holds) | {v[3] for v in self._unconfirmed.values()}

    def _release_all(self) -> None:
        """Flush: release every ended span that is held, and send the scores of holds whose
        jobs are all done but whose span has not ended (none may ever end: a record logged
        with a span id of its own) on a carrier now; a span still running keeps its hold."""
        with self._lock:
            ready = [h for h in self._holds.values()
                     if h.span is not None or (h.done >= h.expected and h.scores)]
            for h in ready:
                del self._holds[h.span_id]
        for h in ready:
            if h.span is not None:
                self._release(h, late=h.expected - h.done)
            else:
                self.emit_carrier(h.trace_id, h.span_id, h.scores)

    def _reap_due(self) -> float | None:
        """One turn of the reaper: release the holds whose deadline passed; the wait until
        the next deadline (at most 1 s)."""
        due: list[_Hold] = []
        with self._lock:
            if self._closed:
                self._reaper.stopping.set()
                return None
            now = time.monotonic()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, span_id = heapq.heappop(self._deadlines)
                hold = self._holds.get(span_id)
                if hold is None:
                    continue
                # A hold whose span never ended (the span was lost) is dropped too: its
                # scores so far, and later ones, go out on carrier spans.
                due.append(self._holds.pop(span_id))
            # Deadlines of holds released already (their scores came: the usual case) are
            # dropped now, not woken for: the next wake is the first live hold's deadline,
            # not one per request.
            while self._deadlines and self._deadlines[0][1] not in self._holds:
                heapq.heappop(self._deadlines)
            wait = self._deadlines[0][0] - now if self._deadlines else 1.0
        for hold in due:
            with handle_internal_errors("processor.reap", reraise=False):
                if hold.span is not None:
                    self._release(hold, late=hold.expected - hold.done)
                elif hold.scores:
                    self.emit_carrier(hold.trace_id, hold.span_id, hold.scores)
        return max(0.005, min(wait, 1.0))


def _reap_failed(exc: Exception) -> float:
    record_internal_error("processor.reap", exc)
    return 0.05  # (soon: deadlines may be due)


# -- exporter="app": score the app's own span pipeline ---------------------------------------
_NOT_ADOPTABLE = ("exporter='app' needs the app's opentelemetry-sdk TracerProvider (set it with "
                  "trace.set_tracer_provider before tracescore.init, or pass tracer_provider=)")


def adopt_processors(provider: Any, *, hold_seconds: float,
                     loss: ExportLoss | None = None) -> ScoreAttachingProcessor:
    """Put a :class:`ScoreAttachingProcessor` in front of the span processors ``provider`` has
    now, so the app's own export pipeline sends tracescore's RAG root spans once, with their
    scores (adding a second exporting processor instead would send every span twice).

    Spans that are not held pass straight through, in the same order, to the same processors.
    Processors the app adds later see spans directly (root spans without scores). Undo with
    :func:`release_processors`. Uses the SDK's multi-processor (``_active_span_processor``,
    stable since opentelemetry-sdk 1.0); anything else fails here with a clear message.
    """
    if not isinstance(provider, TracerProvider):
        raise ValueError(_NOT_ADOPTABLE)
    active = getattr(provider, "_active_span_processor", None)
    lock = getattr(active, "_lock", None)
    if (not isinstance(active, (SynchronousMultiSpanProcessor, ConcurrentMultiSpanProcessor))
            or lock is None or not isinstance(getattr(active, "_span_processors", None), tuple)):
        raise ValueError(_NOT_ADOPTABLE + "; this provider's span processor pipeline is not "
                         "the SDK's, so it cannot be wrapped: use exporter='otlp' or "
                         "span_exporter=")
    with lock:
        current = active._span_processors
        if not current:
            raise ValueError("exporter='app': the app's TracerProvider has no span processor "
                             "yet, so there is nothing to send scores through; add the app's "
                             "exporting processor before tracescore.init, or use "
                             "exporter='otlp' or span_exporter=")
        inner = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
        inner._span_processors = current
        attacher = ScoreAttachingProcessor(inner, hold_seconds=hold_seconds, loss=loss)
        attacher.adopted_from = active
        active._span_processors = (attacher,)
    return attacher


def release_processors(attacher: ScoreAttachingProcessor) -> None:
    """Undo :func:`adopt_processors`: the app's processors take the attacher's place again
    (processors added since stay where they are). Holds are released by ``close`` after this."""
    active = getattr(attacher, "adopted_from", None)
    if active is None:
        return
    inner = attacher.inner
    assert isinstance(inner, SynchronousMultiSpanProcessor)
    with active._lock:
        procs = active._span_processors
        if attacher in procs:
            i = procs.index(attacher)
            active._span_processors = procs[:i] + inner._span_processors + procs[i + 1:]
