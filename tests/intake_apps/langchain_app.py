"""An app instrumented by another vendor's instrumentor: the example chain (its fake chat
model) traced by OpenInference or OpenLLMetry, exported with the OTel SDK's OTLP exporter to
``--endpoint``. Its own process: the two instrumentors wrap the same LangChain hooks, so one
test process could not switch between them. Prints {"answer": ..., "docs": [...]} as JSON."""

from __future__ import annotations

import argparse
import json
import os

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from tracescore.examples.langchain_rag import build_chain


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--instrumentation", choices=["openinference", "openllmetry"])
    p.add_argument("--protocol", choices=["http", "grpc"], default="http")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--hide-content", action="store_true")
    p.add_argument("--questions", default="What battery capacity does the Cargo have?")
    p.add_argument("--ground-truth", default=None)
    p.add_argument("--ground-truth-as", choices=["attribute", "event"], default="attribute")
    p.add_argument("--tracescore-db", default=None,
                   help="also tracescore.init(capture='otel') on the app's provider")
    a = p.parse_args()
    if a.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=a.endpoint + "/v1/traces")
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )
        exporter = GrpcExporter(endpoint=a.endpoint, insecure=True)
    tp = TracerProvider(resource=Resource.create({
        "service.name": "rag-app", "service.version": "2.4.1",
        "deployment.environment.name": "staging"}))
    tp.add_span_processor(BatchSpanProcessor(exporter))
    if a.instrumentation == "openinference":
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.langchain import LangChainInstrumentor

        hide = a.hide_content
        LangChainInstrumentor().instrument(tracer_provider=tp, config=TraceConfig(
            hide_inputs=hide, hide_outputs=hide, hide_input_messages=hide,
            hide_output_messages=hide))
    else:
        if a.hide_content:
            os.environ["TRACELOOP_TRACE_CONTENT"] = "false"
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=tp)
    ts = None
    if a.tracescore_db:
        from helpers import AnswerLength, ContextCount  # (tests/ on PYTHONPATH)

        import tracescore

        ts = tracescore.init(db=a.tracescore_db, capture="otel", tracer_provider=tp,
                             metrics=[ContextCount(), AnswerLength()])
    chain = build_chain()
    out = []
    tracer = tp.get_tracer("app")
    for q in a.questions.split("|"):
        if a.ground_truth:  # the documented attribute, on an app span around the request
            with tracer.start_as_current_span("request") as span:
                if a.ground_truth_as == "event":  # the event form, values as an array
                    span.add_event("tracescore.ground_truth", {
                        "tracescore.ground_truth": a.ground_truth.split("|")})
                else:
                    span.set_attribute("tracescore.ground_truth", a.ground_truth)
                answer = chain.invoke(q)
        else:
            answer = chain.invoke(q)
        docs = chain.first.steps__["context"].first.invoke(q)
        out.append({"question": q, "answer": answer, "docs": [d.page_content for d in docs]})
    ok = tp.force_flush(30_000)
    if ts is not None:
        ok = ok and ts.flush(60)
        ts.shutdown(30)
    tp.shutdown()
    print(json.dumps({"flushed": ok, "runs": out}))


if __name__ == "__main__":
    main()
