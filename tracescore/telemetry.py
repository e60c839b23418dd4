"""tracescore's own telemetry: score events (logs) and pipeline metrics, and the export plan.

- **logs** — one ``gen_ai.evaluation.result`` log record per stored score, parented to the scored
  span (:meth:`Telemetry.scores_stored`), through tracescore's own ``LoggerProvider``.
- **metrics** — the ``tracescore.evaluation.score`` histogram (exemplars point at the scored span)
  and counters/gauges of the pipeline (:class:`ExportMetrics`), through tracescore's own
  ``MeterProvider``.

The OTLP exporters, the span cleaning and the loss counting they use are :mod:`.export`'s.
tracescore never sets the global logger or meter provider: its providers are private and are
flushed by :meth:`Tracescore.flush` and shut down by :meth:`Tracescore.shutdown`.

Threading: :meth:`Telemetry.scores_stored` runs on the scoring worker; it only appends to the
log batch queue and updates in-memory aggregations. Observable-instrument callbacks run on the
metric reader's thread (or on the thread calling ``flush``), never on the app's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as trace_api
from opentelemetry._logs import SeverityNumber
from opentelemetry.context import Context as OtelContext
from opentelemetry.metrics import CallbackOptions, Meter, NoOpMeterProvider, Observation
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from . import __version__ as _version
from . import attributes as A
from ._internal.errors import handle_internal_errors
from ._internal.text import clip
from .export import (
    LOGS,
    METRICS,
    SIGNALS,
    TRACES,
    CountingLogExporter,
    CountingMetricExporter,
    CountingSpanExporter,
    ExportLoss,
    clean_attributes,
    otlp_log_exporter,
    otlp_metric_exporter,
    otlp_protocol,
    otlp_span_exporter,
    signal_disabled,
)

if TYPE_CHECKING:
    from .score import Score

log = logging.getLogger("tracescore")

#: Bucket boundaries of the score histogram: most metrics score in [0, 1].
SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
RELEASE_ATTRIBUTE = A.RELEASE
ENVIRONMENT_ATTRIBUTE = A.ENVIRONMENT
#: The circuit-breaker gauge's values.
BREAKER_CLOSED, BREAKER_HALF_OPEN, BREAKER_OPEN = 0, 1, 2

ScoreRef = tuple[int, "Score"]


# -- pipeline metrics ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PipelineSnapshot:
    """What the observable instruments report, read in one go (cached briefly)."""

    records_seen: int = 0
    records_sampled: int = 0
    records_dropped: int = 0
    queue_depth: int = 0
    open_jobs: int = 0
    scoring_lag_s: float = 0.0


def open_jobs(db_path: str, metrics: Sequence[str]) -> tuple[int, float]:
    """(open jobs, seconds since the oldest open job was created, re-opened or leased).

    A short-lived read-only connection: this runs on the metric reader's thread, never the app's.
    """
    if not metrics:
        return 0, 0.0
    if db_path.startswith(("postgresql://", "postgres://")):
        from .store.postgres import open_jobs as pg_open_jobs

        return pg_open_jobs(db_path, metrics)
    from .store.sqlite import open_jobs as sqlite_open_jobs

    return sqlite_open_jobs(db_path, metrics)


class ExportMetrics:
    """tracescore's metric instruments, on one ``Meter``.

    Synchronous instruments: the score histogram (:meth:`score`), score errors, and the judge's
    calls/tokens/errors (:meth:`judge_call`, called by the judge after each call). Observable
    ones read a :class:`PipelineSnapshot` (records seen/sampled/dropped, queue depth, open jobs,
    scoring lag), the :class:`ExportLoss`, and the judge's circuit breaker
    (:meth:`observe_breaker`). With no metric reader configured the meter is a no-op, so the
    judge can call :meth:`judge_call` unconditionally. All methods are thread-safe and
    non-blocking.
    """

    def __init__(self, meter: Meter, *, loss: ExportLoss | None = None) -> None:
        self.meter = meter
        self.loss = loss or ExportLoss()
        self._snapshot_fn: Callable[[], PipelineSnapshot] | None = None
        self._snapshot: tuple[float, PipelineSnapshot] | None = None
        self._snapshot_lock = threading.Lock()
        self._breaker: Callable[[], int] | None = None
        #: release and environment on every score point (set by :class:`Telemetry`)
        self.base_attributes: dict[str, str] = {}
        self.scores = meter.create_histogram(
            A.METRIC_EVALUATION_SCORE, unit="1",
            description="Scores stored by tracescore, by metric name and label, release "
                        "(service.version) and environment (deployment.environment.name); "
                        "exemplars point at the scored span",
            explicit_bucket_boundaries_advisory=SCORE_BUCKETS,
        )
        self.score_errors = meter.create_counter(
            A.METRIC_EVALUATION_ERRORS, unit="{score}",
            description="Scores stored with status error (the reason is in the database and "
                        "the gen_ai.evaluation.result log record)",
        )
        self.judge_calls = meter.create_counter(
            A.METRIC_JUDGE_CALLS, unit="{call}", description="LLM-as-judge calls")
        self.judge_tokens = meter.create_counter(
            A.METRIC_JUDGE_TOKENS, unit="{token}",
            description="Tokens used by judge calls, by gen_ai.token.type (input/output)")
        self.judge_errors = meter.create_counter(
            A.METRIC_JUDGE_ERRORS, unit="{call}", description="Judge calls that failed")
        counters = (
            (A.METRIC_RECORDS_SEEN, "{record}", "Records captured", "records_seen"),
            (A.METRIC_RECORDS_SAMPLED, "{record}", "Records sampled for scoring",
             "records_sampled"),
            (A.METRIC_RECORDS_DROPPED, "{record}", "Records dropped because the in-memory "
             "queue was full", "records_dropped"),
        )
        # The SDK runs observable callbacks in registration order on each collection: the first
        # one (records seen) reads the pipeline and SQLite, the others reuse that snapshot.
        for n, (name, unit, desc, field_) in enumerate(counters):
            meter.create_observable_counter(name, [self._observe(field_, refresh=n == 0)],
                                            unit=unit, description=desc)
        gauges = (
            (A.METRIC_QUEUE_DEPTH, "{record}", "Records waiting in memory for the writer",
             "queue_depth"),
            (A.METRIC_JOBS_OPEN, "{job}", "Scoring jobs pending or running (SQLite)",
             "open_jobs"),
            (A.METRIC_SCORING_LAG, "s", "Age of the oldest open scoring job", "scoring_lag_s"),
        )
        for name, unit, desc, field_ in gauges:
            meter.create_observable_gauge(name, [self._observe(field_)], unit=unit,
                                          description=desc)
        meter.create_observable_counter(
            A.METRIC_EXPORT_FAILURES, [self._observe_loss("failures")], unit="{export}",
            description="Export calls that failed after the exporter's retries, by signal")
        meter.create_observable_counter(
            A.METRIC_EXPORT_LOST, [self._observe_loss("lost")], unit="{item}",
            description="Spans, log records and metric points lost by failed exports, by signal")
        meter.create_observable_gauge(
            A.METRIC_JUDGE_BREAKER_STATE, [self._observe_breaker], unit="1",
            description="Judge circuit breaker: 0 closed, 1 half-open, 2 open")

    # -- hooks for the pipeline and the judge --------------------------------------------------
    def bind(self, snapshot: Callable[[], PipelineSnapshot]) -> None:
        """The callable the observable instruments read (called on the reader's thread)."""
        self._snapshot_fn = snapshot

    def observe_breaker(self, state: Callable[[], int] | None) -> None:
        """Feed the breaker gauge: ``state()`` returns BREAKER_CLOSED/HALF_OPEN/OPEN."""
        self._breaker = state

    def judge_call(self, tokens_in: int, tokens_out: int, error: bool = False, *,
                   model: str | None = None) -> None:
        """Count one judge call and its tokens. Cheap and thread-safe; never raises."""
        with handle_internal_errors("export.judge_call", reraise=False):
            attrs = {A.GEN_AI_REQUEST_MODEL: model} if model else {}
            self.judge_calls.add(1, {**attrs, A.ERROR_TYPE: "_OTHER"} if error else attrs)
            if error:
                self.judge_errors.add(1, attrs)
            if tokens_in:
                self.judge_tokens.add(int(tokens_in), {**attrs, A.GEN_AI_TOKEN_TYPE: "input"})
            if tokens_out:
                self.judge_tokens.add(int(tokens_out), {**attrs, A.GEN_AI_TOKEN_TYPE: "output"})

    def score(self, s: Score, context: OtelContext) -> None:
        """One stored score: a histogram point (exemplar from ``context``) or an error count,
        with the process's release and environment (so a Prometheus/Grafana user can slice)."""
        attrs = {**self.base_attributes, A.GEN_AI_EVALUATION_NAME: s.name}
        if s.status == "ok" and s.value is not None:
            if s.label:
                attrs[A.GEN_AI_EVALUATION_SCORE_LABEL] = s.label
            self.scores.record(float(s.value), attrs, context=context)
        elif s.status == "error":
            self.score_errors.add(1, attrs, context=context)

    # -- observable callbacks (reader thread) ---------------------------------------------------
    def _current(self, refresh: bool) -> PipelineSnapshot | None:
        fn = self._snapshot_fn
        if fn is None:
            return None
        now = time.monotonic()
        with self._snapshot_lock:
            if refresh or self._snapshot is None or now - self._snapshot[0] > 1.0:
                self._snapshot = (now, fn())
            return self._snapshot[1]

    def _observe(self, field_: str, refresh: bool = False
                 ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            with handle_internal_errors("export.observe", reraise=False):
                snap = self._current(refresh)
                if snap is not None:
                    return [Observation(getattr(snap, field_))]
            return []

        return callback

    def _observe_loss(self, which: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            values: dict[str, int] = getattr(self.loss, which)
            return [Observation(v, {A.EXPORT_SIGNAL: k}) for k, v in values.items()]

        return callback

    def _observe_breaker(self, options: CallbackOptions) -> Iterable[Observation]:
        state = self._breaker
        if state is None:
            return []
        with handle_internal_errors("export.breaker", reraise=False):
            return [Observation(int(state()))]
        return []


# -- the logs + metrics side ----------------------------------------------------------------
def scored_span_context(record_id: str) -> OtelContext:
    """A context whose current span is the scored span ``"{trace_hex}-{span_hex}"``.

    Sampled, so the SDK's default ``trace_based`` exemplar filter keeps the exemplar.
    """
    trace_hex, _, span_hex = record_id.partition("-")
    sc = SpanContext(int(trace_hex, 16), int(span_hex, 16), is_remote=False,
                     trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace_api.set_span_in_context(NonRecordingSpan(sc))


class Telemetry:
    """tracescore's own ``LoggerProvider`` and ``MeterProvider`` (never the global ones).

    ``log_exporter`` None: no score log records. ``metric_reader`` None: a no-op meter.
    """

    def __init__(
        self,
        *,
        resource: Resource,
        log_exporter: LogRecordExporter | None = None,
        metric_reader: MetricReader | None = None,
        loss: ExportLoss | None = None,
        max_attribute_chars: int = 4000,
        release: str | None = None,
        environment: str | None = None,
    ) -> None:
        self.loss = loss or ExportLoss()
        self.max_attribute_chars = max_attribute_chars
        self.logger_provider: LoggerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        self._logger: Any = None
        if log_exporter is not None:
            self.logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
            self.logger_provider.add_log_record_processor(
                BatchLogRecordProcessor(log_exporter))
            self._logger = self.logger_provider.get_logger("tracescore", _version)
        if metric_reader is not None:
            self.meter_provider = MeterProvider(metric_readers=[metric_reader],
                                                resource=resource, shutdown_on_exit=False)
            meter = self.meter_provider.get_meter("tracescore", _version)
        else:
            meter = NoOpMeterProvider().get_meter("tracescore", _version)
        #: tracescore's own meter (a no-op without a metric reader), for more instruments
        self.meter = meter
        self.metrics = ExportMetrics(meter, loss=self.loss)
        if release is not None:
            self.metrics.base_attributes[RELEASE_ATTRIBUTE] = release
        if environment is not None:
            self.metrics.base_attributes[ENVIRONMENT_ATTRIBUTE] = environment
        self._closed = False
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.logger_provider is not None or self.meter_provider is not None

    def scores_stored(self, record_id: str, scores: Sequence[ScoreRef]) -> None:
        """The worker stored these scores of ``record_id`` (once per job). Worker thread.

        One ``gen_ai.evaluation.result`` log record and one histogram point per score, both in
        the scored span's context. Non-blocking: both only enqueue/aggregate in memory.
        """
        if not scores or not self.enabled or self._closed:
            return
        ctx = scored_span_context(record_id)
        now = time.time_ns()
        for _, s in scores:
            if self._logger is not None:
                self._logger.emit(
                    timestamp=now, observed_timestamp=now, context=ctx,
                    severity_number=SeverityNumber.INFO, severity_text="INFO",
                    event_name=A.GEN_AI_EVALUATION_RESULT,
                    attributes=self._event_attributes(record_id, s),
                )
            if self.meter_provider is not None:
                self.metrics.score(s, ctx)

    def _event_attributes(self, record_id: str, s: Score) -> dict[str, Any]:
        attrs: dict[str, Any] = {A.GEN_AI_EVALUATION_NAME: s.name, A.RECORD_ID: record_id}
        if s.status == "ok" and s.value is not None:
            attrs[A.GEN_AI_EVALUATION_SCORE_VALUE] = float(s.value)
            if s.label:
                attrs[A.GEN_AI_EVALUATION_SCORE_LABEL] = s.label
            if s.explanation:
                attrs[A.GEN_AI_EVALUATION_EXPLANATION] = clip(s.explanation,
                                                              self.max_attribute_chars)
        else:  # the same convention as the span attributes: label = status, reason = explanation
            attrs[A.GEN_AI_EVALUATION_SCORE_LABEL] = s.status
            attrs[A.GEN_AI_EVALUATION_EXPLANATION] = clip(s.error or s.status,
                                                          self.max_attribute_chars)
            if s.status == "error":
                attrs[A.ERROR_TYPE] = "_OTHER"
        return clean_attributes(attrs) or attrs

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what is buffered. Blocks (not for the request path); never raises."""
        deadline = time.monotonic() + timeout_millis / 1000
        ok = True
        with handle_internal_errors("export.flush", reraise=False):
            if self.logger_provider is not None:
                ok = self.logger_provider.force_flush(timeout_millis) and ok
            if self.meter_provider is not None:
                left = max(0, int((deadline - time.monotonic()) * 1000))
                # Raises when a reader's collect failed: that is export trouble, not ours.
                try:
                    ok = self.meter_provider.force_flush(left) and ok
                except Exception as exc:
                    log.warning("tracescore metrics flush failed: %r", exc)
                    ok = False
        return ok

    @property
    def logger(self) -> Any:
        """tracescore's own OTel logger (None without a log exporter)."""
        return self._logger

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with handle_internal_errors("export.shutdown", reraise=False):
            if self.logger_provider is not None:
                self.logger_provider.shutdown()
            if self.meter_provider is not None:
                try:
                    self.meter_provider.shutdown(timeout_millis)
                except Exception as exc:
                    log.warning("tracescore metrics shutdown failed: %r", exc)


def flush_within(flush: Callable[[int], bool], timeout_s: float, name: str) -> bool:
    """``flush(timeout_millis)`` on a helper thread, waiting at most ``timeout_s``.

    The SDK's batch processors ignore ``force_flush``'s timeout: they export on the calling
    thread, and an OTLP exporter facing a dead backend retries for up to its own timeout per
    batch (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default). Measured: ``flush(10)`` took 15 s
    with every signal answered 503. Returns False when the time is up (the export carries on in
    the background and its loss, if any, is counted).
    """
    done: list[bool] = []
    millis = max(0, int(timeout_s * 1000))

    def run() -> None:
        with handle_internal_errors(f"export.{name}", reraise=False):
            done.append(bool(flush(millis)))

    t = threading.Thread(target=run, name=f"tracescore-flush-{name}", daemon=True)
    t.start()
    t.join(max(0.0, timeout_s))
    return bool(done and done[0])


# -- assembly (used by Tracescore.__init__) --------------------------------------------------
@dataclass(frozen=True, slots=True)
class ExportPlan:
    """The exporters ``init`` resolved: each None means "that signal is not exported"."""

    span_exporter: SpanExporter | None
    log_exporter: LogRecordExporter | None
    metric_reader: MetricReader | None


def plan_export(
    exporter: str | None,
    *,
    span_exporter: SpanExporter | None,
    span_processor: object | None,
    log_exporter: LogRecordExporter | None,
    metric_reader: MetricReader | None,
    loss: ExportLoss,
) -> ExportPlan:
    """Validate ``init``'s export arguments and build the exporters.

    ``exporter="otlp"`` fills in every signal not given explicitly (``span_exporter`` or
    ``span_processor`` for traces, ``log_exporter``, ``metric_reader``) with OTLP exporters
    configured from the ``OTEL_EXPORTER_OTLP_*`` environment, except signals switched off with
    ``OTEL_{TRACES,LOGS,METRICS}_EXPORTER=none``. Span and log exporters are wrapped
    to count export loss; so is the OTLP metric exporter (a user's ``metric_reader`` is used as
    given).
    """
    if exporter is not None and exporter not in ("otlp", "app", "none"):
        raise ValueError(f"exporter must be 'otlp', 'app' or None, got {exporter!r}")
    if exporter == "app" and (span_exporter is not None or span_processor is not None):
        raise ValueError("exporter='app' sends spans through the app's own span processors: "
                         "do not pass span_exporter or span_processor with it")
    if span_exporter is not None and span_processor is not None:
        raise ValueError("pass span_exporter or span_processor, not both")
    if span_exporter is not None and not isinstance(span_exporter, SpanExporter):
        raise TypeError("span_exporter must be an opentelemetry SpanExporter")
    if log_exporter is not None and not isinstance(log_exporter, LogRecordExporter):
        raise TypeError("log_exporter must be an opentelemetry LogRecordExporter")
    if metric_reader is not None and not isinstance(metric_reader, MetricReader):
        raise TypeError("metric_reader must be an opentelemetry MetricReader")
    otlp = exporter == "otlp"
    if otlp:
        wanted = [s for s in SIGNALS if not signal_disabled(s)]
        for signal in wanted:  # fail on a bad protocol before building anything
            otlp_protocol(signal)
        if span_exporter is None and span_processor is None and TRACES in wanted:
            span_exporter = otlp_span_exporter()
        if log_exporter is None and LOGS in wanted:
            log_exporter = otlp_log_exporter()
        if metric_reader is None and METRICS in wanted:
            metric_reader = PeriodicExportingMetricReader(
                CountingMetricExporter(otlp_metric_exporter(), loss))
    return ExportPlan(
        span_exporter=(CountingSpanExporter(span_exporter, loss)
                       if span_exporter is not None else None),
        log_exporter=(CountingLogExporter(log_exporter, loss)
                      if log_exporter is not None else None),
        metric_reader=metric_reader,
    )
