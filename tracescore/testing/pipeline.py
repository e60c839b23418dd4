"""A real pipeline for tests: an in-memory span exporter, span filters, a scripted metric.

Nothing here is a mock of tracescore: :func:`in_memory` builds a real pipeline (real
``TracerProvider``, real SQLite file, real worker) whose spans land in an
``InMemorySpanExporter``. :class:`OtlpReceiver` is a real OTLP endpoint (HTTP/protobuf or gRPC)
on 127.0.0.1 that decodes what an exporter sends, to test an ``exporter="otlp"`` setup end to
end (it can also play a backend that is down)::

    with OtlpReceiver() as receiver:
        os.environ.update(receiver.env())
        ts = tracescore.init(db=..., exporter="otlp")
        ...
        ts.flush()
        receiver.spans(), receiver.log_records(), receiver.metric_points("tracescore.evaluation.score")
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .. import attributes as A
from .._internal.errors import production_mode
from .._internal.otlp_receiver import (
    OtlpReceiver,
    Received,
    WireExemplar,
    WireLogRecord,
    WirePoint,
    WireSpan,
)
from ..client import Tracescore
from ..metrics.base import Metric
from ..record import RagRecord

__all__ = ["OtlpReceiver", "Received", "ScriptedMetric", "WireExemplar", "WireLogRecord",
           "WirePoint", "WireSpan", "carriers", "in_memory", "production_errors", "rag_roots"]


def in_memory(db: str | Path, **kwargs: Any) -> tuple[Tracescore, InMemorySpanExporter]:
    """A real pipeline exporting to memory (synchronously, so tests need no sleeps)."""
    exporter = InMemorySpanExporter()
    kwargs.setdefault("span_processor", SimpleSpanProcessor(exporter))
    ts = Tracescore(db=str(db), **kwargs)
    return ts, exporter


def rag_roots(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get(A.RAG_ROOT)]


def carriers(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans()
            if (s.attributes or {}).get(A.SPAN_KIND) == A.KIND_EVALUATOR]


@contextmanager
def production_errors() -> Iterator[None]:
    """Inside this block tracescore swallows its internal errors as in production."""
    with production_mode(True):
        yield


class ScriptedMetric(Metric):
    """A local metric whose value comes from a callable; counts calls; can block or raise."""

    name = "scripted"
    requires = frozenset({"answer"})

    def __init__(self, fn: Any = None, *, name: str | None = None,
                 requires: frozenset[str] | None = None, gate: threading.Event | None = None):
        if name:
            self.name = name  # type: ignore[misc]
        if requires is not None:
            self.requires = requires  # type: ignore[misc]
        self.fn = fn or (lambda r: 1.0)
        self.gate = gate
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, record: RagRecord) -> Any:
        with self._lock:
            self.calls += 1
        if self.gate is not None:
            self.gate.wait(30)
        out = self.fn(record)
        return out if not isinstance(out, (int, float)) else self.result(float(out))
