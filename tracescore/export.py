"""Export: OTLP wiring, strings OTLP can encode, and export-loss counting.

Three signals leave tracescore:

- **traces** — the app's spans, RAG roots enriched with their scores and carrier spans for late
  scores; they go through the ``BatchSpanProcessor`` that :mod:`tracescore.processor` wraps.
- **logs** and **metrics** — score events and pipeline metrics, through tracescore's own
  providers (:mod:`tracescore.telemetry`).

Export failures (backend down, 5xx, timeouts) never reach the app or the database: the OTLP
exporters retry with backoff inside their timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, seconds in the
Python SDK), the batch processors then drop the batch, and the :class:`Counting*Exporter`
wrappers count what was lost (:class:`ExportLoss`, shown by ``ts.stats()`` and exported as
``tracescore.export.*`` counters).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

from ._internal.errors import record_internal_error
from .store.rows import clean_text

log = logging.getLogger("tracescore")

TRACES, LOGS, METRICS = "traces", "logs", "metrics"
SIGNALS = (TRACES, LOGS, METRICS)
HTTP_PROTOBUF, GRPC = "http/protobuf", "grpc"


# -- strings that OTLP can encode --------------------------------------------------------------
# A Python str may hold lone surrogates (a "\\ud800" JSON escape, a mis-decoded file name):
# not UTF-8, so the OTLP encoder drops the attribute and logs a traceback per span. They are
# escaped as the store escapes them (``\\ud800`` as text: store.rows.clean_text, imported
# above), so nothing is lost.


def _dirty(v: Any) -> bool:
    if isinstance(v, str):
        return clean_text(v) is not v
    if isinstance(v, (tuple, list)):
        return any(isinstance(x, str) and clean_text(x) is not x for x in v)
    return False


def _clean_value(v: Any) -> Any:
    if isinstance(v, str):
        return clean_text(v)
    if isinstance(v, (tuple, list)):
        return type(v)(clean_text(x) if isinstance(x, str) else x for x in v)
    return v


def clean_attributes(attrs: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A copy of ``attrs`` whose keys and string values (also inside sequences) are valid
    UTF-8; None when there was nothing to clean (the common case: no copy)."""
    if not attrs or not any(_dirty(k) or _dirty(v) for k, v in attrs.items()):
        return None
    return {clean_text(k) if isinstance(k, str) else k: _clean_value(v)
            for k, v in attrs.items()}


def _ascii_only(attrs: Mapping[str, Any] | None) -> bool:
    """Whether every key and string value of ``attrs`` (also inside sequences) is ASCII."""
    if not attrs:
        return True
    for k, v in attrs.items():
        t = type(v)
        if t is str:
            if not v.isascii():
                return False
        elif (t is tuple or t is list) and not all(
                type(x) is not str or x.isascii() for x in v):
            return False
        if type(k) is not str or not k.isascii():
            return False
    return True


def clean_span(span: ReadableSpan) -> ReadableSpan:
    """``span``, or a copy of it whose name, attributes, event attributes and status text are
    valid UTF-8. Cheap when clean (a scan of its strings, no copy); never raises."""
    try:
        # (every sampled and unsampled request's root span comes here on the app's thread:
        # ASCII strings cannot hold a lone surrogate, so the common span costs one loop)
        desc = span.status.description
        name = span.name
        if not span.events and type(name) is str and name.isascii() \
                and (desc is None or (type(desc) is str and desc.isascii())) \
                and _ascii_only(span.attributes):
            return span
        attrs = clean_attributes(span.attributes)
        events = [clean_attributes(e.attributes) for e in span.events]
        name = clean_text(span.name)
        status = span.status
        desc = status.description
        if attrs is None and name is span.name and not any(e is not None for e in events) \
                and (desc is None or clean_text(desc) is desc):
            return span
        if desc is not None:
            status = Status(status.status_code, clean_text(desc))
        return ReadableSpan(
            name=name, context=span.context, parent=span.parent, resource=span.resource,
            attributes=attrs if attrs is not None else span.attributes,
            events=[e if c is None else Event(e.name, c, e.timestamp)
                    for e, c in zip(span.events, events)],
            links=span.links, kind=span.kind, status=status, start_time=span.start_time,
            end_time=span.end_time, instrumentation_scope=span.instrumentation_scope,
        )
    except Exception as exc:  # the span as it is rather than no span
        record_internal_error("export.clean_span", exc)
        return span


# -- OTLP exporters from the standard environment ---------------------------------------------
def otlp_protocol(signal: str) -> str:
    """``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
    ``http/protobuf`` (the OTel default). Raises ValueError for a protocol we cannot send."""
    raw = (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
           or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or HTTP_PROTOBUF)
    value = raw.strip().lower()
    if value not in (HTTP_PROTOBUF, GRPC):
        raise ValueError(
            f"OTLP protocol {raw!r} for {signal} is not supported: use 'http/protobuf' or 'grpc' "
            "(the Python OTLP exporters have no http/json)"
        )
    return value


def signal_disabled(signal: str) -> bool:
    """``OTEL_<SIGNAL>_EXPORTER=none`` (the standard switch) turns a signal off under
    ``exporter="otlp"`` — e.g. for a traces-only backend such as Phoenix."""
    return os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower() == "none"


def otlp_span_exporter() -> SpanExporter:
    """An OTLP span exporter configured from ``OTEL_EXPORTER_OTLP_*`` (endpoint, headers,
    compression, timeout, certificates are read by the exporter itself)."""
    if otlp_protocol(TRACES) == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def otlp_log_exporter() -> LogRecordExporter:
    if otlp_protocol(LOGS) == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
            OTLPLogExporter as GrpcLogExporter,
        )

        return GrpcLogExporter()
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    return OTLPLogExporter()


def otlp_metric_exporter() -> MetricExporter:
    if otlp_protocol(METRICS) == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


# -- loss counting ------------------------------------------------------------------------------
class ExportLoss:
    """Failed exports and the items they carried, per signal. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures = dict.fromkeys(SIGNALS, 0)
        self._lost = dict.fromkeys(SIGNALS, 0)
        self._last_warn = 0.0

    def failed(self, signal: str, items: int, why: object) -> None:
        """An export call failed: one failure, ``items`` lost."""
        self._add(signal, items, why, failures=1)

    def dropped(self, signal: str, items: int, why: object) -> None:
        """Items lost before any export call (a batch processor's full queue)."""
        self._add(signal, items, why, failures=0)

    def _add(self, signal: str, items: int, why: object, *, failures: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._failures[signal] += failures
            self._lost[signal] += items
            warn = now - self._last_warn >= 10.0
            if warn:
                self._last_warn = now
            total = self._lost[signal]
        if warn:
            log.warning("tracescore could not export %d %s (%s); %d lost so far "
                        "(app fine, database fine, backend missing data)",
                        items, signal, why, total)

    @property
    def failures(self) -> dict[str, int]:
        with self._lock:
            return dict(self._failures)

    @property
    def lost(self) -> dict[str, int]:
        with self._lock:
            return dict(self._lost)


class CountingSpanExporter(SpanExporter):
    """Delegates to ``inner``; a batch that fails (result or exception) is counted as lost.

    Runs on the batch processor's thread. Never raises: an exception from ``inner`` becomes
    ``FAILURE`` (the batch processor would only log it).
    """

    def __init__(self, inner: SpanExporter, loss: ExportLoss) -> None:
        self.inner = inner
        self.loss = loss
        #: Told each batch's outcome (the score attacher confirms delivery with it).
        self.on_result: Callable[[Sequence[ReadableSpan], bool], None] | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:
            self.loss.failed(TRACES, len(spans), repr(exc))
            result = SpanExportResult.FAILURE
        else:
            if result is not SpanExportResult.SUCCESS:
                self.loss.failed(TRACES, len(spans), result.name)
        if self.on_result is not None:
            try:
                self.on_result(spans, result is SpanExportResult.SUCCESS)
            except Exception as exc:  # never fail the export over our bookkeeping
                record_internal_error("export.on_result", exc)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingLogExporter(LogRecordExporter):
    """Delegates to ``inner``; counts failed log batches. Never raises."""

    def __init__(self, inner: LogRecordExporter, loss: ExportLoss) -> None:
        self.inner = inner
        self.loss = loss

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        try:
            result = self.inner.export(batch)
        except Exception as exc:
            self.loss.failed(LOGS, len(batch), repr(exc))
            return LogRecordExportResult.FAILURE
        # Some exporters still return the deprecated LogExportResult: compare by name.
        if getattr(result, "name", None) != "SUCCESS":
            self.loss.failed(LOGS, len(batch), getattr(result, "name", result))
            return LogRecordExportResult.FAILURE
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingMetricExporter(MetricExporter):
    """Delegates to ``inner`` (keeping its temporality/aggregation preferences); counts failed
    exports and their data points. Never raises."""

    def __init__(self, inner: MetricExporter, loss: ExportLoss) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality,
                         preferred_aggregation=inner._preferred_aggregation)
        self.inner = inner
        self.loss = loss

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:
            self.loss.failed(METRICS, _points(metrics_data), repr(exc))
            return MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            self.loss.failed(METRICS, _points(metrics_data), result.name)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


def _points(data: MetricsData) -> int:
    try:
        return sum(len(m.data.data_points) for rm in data.resource_metrics
                   for sm in rm.scope_metrics for m in sm.metrics)
    except Exception:
        return 0
