"""``tracescore.init(capture="otel")``: an app instrumented with OpenInference or OpenLLMetry
(the real instrumentors, in an app process of its own) keeps its exporter, and tracescore
builds the same records from its spans, in process."""

from __future__ import annotations

import pytest
from helpers import records, rows
from intake_support import Q, run_app

from tracescore.testing import OtlpReceiver


@pytest.mark.parametrize("instrumentation", ["openinference", "openllmetry"])
def test_capture_otel_builds_the_records_and_the_app_keeps_its_exporter(
        tmp_path, instrumentation):
    db = str(tmp_path / "app.db")
    with OtlpReceiver() as backend:
        [run] = run_app(backend.endpoint, instrumentation, "http", "--tracescore-db", db)
        # the app's own exporter got its spans, untouched
        assert len({s.trace_id for s in backend.spans()}) == 2  # the chain, the retriever
    [rec] = records(db)
    assert rec["query"] == Q and rec["answer"] == run["answer"]
    assert [c["text"] for c in rec["contexts"]] == run["docs"]
    assert (rec["release"], rec["environment"]) == ("2.4.1", "staging")
    got = {r["name"]: r["value"] for r in rows(db, "SELECT name, value FROM scores")}
    assert got == {"context_count": 3.0, "answer_length": float(len(run["answer"]))}


def test_capture_must_be_otel_or_none(tmp_path):
    import tracescore

    with pytest.raises(ValueError, match="capture must be None or 'otel'"):
        tracescore.init(db=tmp_path / "x.db", capture="zipkin")


def test_capture_otel_bounds_and_builds_traces_whose_root_never_ends(tmp_path):
    from opentelemetry.sdk.trace import TracerProvider

    import tracescore

    tp = TracerProvider()
    ts = tracescore.init(db=tmp_path / "x.db", capture="otel", tracer_provider=tp,
                         metrics=["exact_match"])
    try:
        cap = ts.otel_capture
        cap.orphan_s = 0.2
        tracer = tp.get_tracer("app")
        root = tracer.start_span("request")  # never ends (a hung request)
        from opentelemetry import trace

        with trace.use_span(root, end_on_exit=False):
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.output.messages": '[{"role": "assistant", "parts": '
                                              '[{"type": "text", "content": "hi"}]}]'}):
                pass
        from helpers import records, wait_for

        wait_for(lambda: cap.records == 1, 30, "the orphan trace built")
        assert ts.flush(30)
        [rec] = records(tmp_path / "x.db")
        assert rec["answer"] == "hi"
        assert cap._held == 0 and not cap._traces
    finally:
        ts.shutdown(10)
