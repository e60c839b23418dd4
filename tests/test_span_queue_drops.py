"""Spans the OpenTelemetry batch processor drops at its full queue are counted (issue 33's
"slow receivers"; DESIGN: every loss is counted).

The SDK's ``BatchSpanProcessor`` keeps at most ``max_queue_size`` spans; behind a slow backend a
burst beyond that is dropped with one log line. tracescore's attacher sees every span on its
way to that queue and counts the ones handed to a full queue in ``stats()["export_lost"]``.
The backend here is a real OTLP/HTTP receiver on 127.0.0.1 that stalls its first request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import wait_for
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import tracescore
from tracescore.processor import batch_queues
from tracescore.testing import OtlpReceiver

pytestmark = pytest.mark.integration

QUEUE, BATCH, BURST = 8, 4, 20


def _processor(rx: OtlpReceiver) -> BatchSpanProcessor:
    return BatchSpanProcessor(OTLPSpanExporter(endpoint=rx.endpoint + "/v1/traces", timeout=60),
                              max_queue_size=QUEUE, max_export_batch_size=BATCH,
                              schedule_delay_millis=60_000)


def _burst(tracer: object, rx: OtlpReceiver) -> None:
    """BATCH spans wake the processor's thread, whose export then hangs on the stalled
    receiver; BURST more fill the queue (QUEUE) and the rest are dropped."""
    for i in range(BATCH):
        tracer.start_span(f"first-{i}").end()  # type: ignore[attr-defined]
    wait_for(lambda: rx.stalled == 1, what="the first export waiting on the receiver")
    for i in range(BURST):
        tracer.start_span(f"burst-{i}").end()  # type: ignore[attr-defined]


def _received_spans(rx: OtlpReceiver) -> int:
    return len(rx.spans())


@pytest.mark.parametrize("adopt", [False, True], ids=["span_processor", "exporter_app"])
def test_spans_dropped_at_a_full_batch_queue_are_counted(db_path: Path, adopt: bool) -> None:
    with OtlpReceiver() as rx:
        rx.stall()
        if adopt:  # the app's own provider and batch processor, adopted by tracescore
            app = TracerProvider()
            app.add_span_processor(_processor(rx))
            ts = tracescore.init(db=db_path, exporter="app", tracer_provider=app,
                                 metrics=["token_f1"])
            tracer = app.get_tracer("the-app")
        else:
            ts = tracescore.init(db=db_path, span_processor=_processor(rx), metrics=["token_f1"])
            tracer = ts.tracer_provider.get_tracer("the-app")
        try:
            assert len(batch_queues(ts.attacher.inner)) == 1
            _burst(tracer, rx)
            lost = ts.stats()["export_lost"]["traces"]
            rx.resume()
            ts.flush(30)
            wait_for(lambda: _received_spans(rx) >= BATCH + QUEUE, what="the queue exported")
            got = _received_spans(rx)
            # every span either reached the receiver or was counted lost, exactly
            assert lost == BATCH + BURST - got, (lost, got)
            assert lost == BURST - QUEUE
            assert ts.stats()["export_failures"] == 0  # no export call failed: a drop, not a failure
        finally:
            ts.shutdown()


def test_no_drop_counted_while_the_queue_has_room(db_path: Path) -> None:
    with OtlpReceiver() as rx:
        ts = tracescore.init(db=db_path, span_processor=_processor(rx), metrics=["token_f1"])
        try:
            tracer = ts.tracer_provider.get_tracer("the-app")
            for i in range(QUEUE - 1):
                tracer.start_span(f"s-{i}").end()
            ts.flush(30)
            wait_for(lambda: _received_spans(rx) == QUEUE - 1, what="every span exported")
            assert ts.stats()["export_lost"]["traces"] == 0
        finally:
            ts.shutdown()
