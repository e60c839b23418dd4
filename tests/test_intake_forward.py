"""``--forward``: every received span reaches the next OTLP hop once, the record's span with
its scores on it; a score that comes after the hold goes on a linked evaluator span and a
``gen_ai.evaluation.result`` log record. The next hop is a real OTLP receiver on 127.0.0.1."""

from __future__ import annotations

import threading
from typing import Any

from helpers import ContextCount, wait_for
from intake_support import intake_records, serving
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from test_intake_protocol import ROOT, TRACE, genai_request, post

from tracescore import Metric
from tracescore import attributes as A
from tracescore.intake import ServeConfig
from tracescore.testing import OtlpReceiver


class Gated(Metric):
    """A metric whose score waits for the test (a slow judge)."""

    name = "gated"
    requires = frozenset({"answer"})
    threshold = None

    def __init__(self) -> None:
        self.go = threading.Event()

    def __call__(self, record: Any) -> Any:
        self.go.wait(60)
        return self.result(1.0)


def _next_hop_env(hop: OtlpReceiver) -> dict[str, Any]:
    return {"span_exporter": OTLPSpanExporter(endpoint=hop.endpoint + "/v1/traces"),
            "log_exporter": OTLPLogExporter(endpoint=hop.endpoint + "/v1/logs")}


def test_spans_go_on_once_with_scores_on_the_record_span(tmp_path):
    db = str(tmp_path / "s.db")
    with OtlpReceiver(refuse_first=2, retry_after=1) as hop, serving(
            db, forward=hop.endpoint, hold_seconds=600, metrics=[ContextCount()],
            config=ServeConfig(grace_s=0.2, hold_s=30), **_next_hop_env(hop)) as serve:
        body = genai_request().SerializeToString()
        assert post(serve.http_port, body)[0] == 200
        assert post(serve.http_port, body)[0] == 200  # a retried batch: nothing twice
        spans = hop.wait_for(lambda: (lambda s: s if len(s) >= 3 else None)(hop.spans()),
                             timeout=60)
        assert hop.refused == 2  # the hop was down twice: the spans waited, then went
        assert sorted(s.span_id for s in spans) == sorted(
            [ROOT.hex(), "eee19b7ec3c1b175", "eee19b7ec3c1b176"])
        [root] = [s for s in spans if s.span_id == ROOT.hex()]
        assert root.trace_id == TRACE.hex() and root.resource["service.version"] == "7.0"
        assert root.attributes[A.score_attribute("context_count")] == 1.0
        assert root.attributes[A.evaluation(0, "name")] == "context_count"
        assert root.attributes["gen_ai.operation.name"] == "invoke_agent"  # kept as sent
        [rec] = intake_records(db, 1)
        wait_for(lambda: serve.stats()["scores_on_spans"] == 1, what="score delivered")
        assert serve.stats()["spans_forwarded"] == 3
        assert len(hop.spans()) == 3


def test_a_score_after_the_hold_goes_on_a_linked_evaluator_span_and_a_log_record(tmp_path):
    db = str(tmp_path / "s.db")
    gated = Gated()
    with OtlpReceiver() as hop, serving(
            db, forward=hop.endpoint, hold_seconds=600, metrics=[ContextCount(), gated],
            config=ServeConfig(grace_s=0.2, hold_s=0.5), **_next_hop_env(hop)) as serve:
        assert post(serve.http_port, genai_request().SerializeToString())[0] == 200
        spans = hop.wait_for(lambda: (lambda s: s if len(s) >= 3 else None)(hop.spans()),
                             timeout=60)
        [root] = [s for s in spans if s.span_id == ROOT.hex()]
        assert A.score_attribute("gated") not in root.attributes  # not ready in time
        gated.go.set()
        carrier = hop.wait_for(lambda: [s for s in hop.spans()
                                        if s.attributes.get(A.SCORED_SPAN_ID) == ROOT.hex()],
                               timeout=60)
        [c] = carrier
        assert c.trace_id == TRACE.hex() and (TRACE.hex(), ROOT.hex()) in c.links
        assert c.attributes[A.score_attribute("gated")] == 1.0
        logs = hop.wait_for(lambda: [r for r in hop.log_records()
                                     if r.attributes.get(A.GEN_AI_EVALUATION_NAME) == "gated"],
                            timeout=60)
        assert logs[0].trace_id == TRACE.hex()
        intake_records(db, 1)
        assert serve.stats()["spans_forwarded"] == 3
