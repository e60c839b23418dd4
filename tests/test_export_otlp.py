"""OTLP export against real receivers on 127.0.0.1 (HTTP/protobuf and gRPC).

The receiver (:class:`tracescore.testing.OtlpReceiver`) decodes ``Export*ServiceRequest``
messages with opentelemetry-proto; the pipeline is configured only through the standard
``OTEL_EXPORTER_OTLP_*`` environment variables, as a user would.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import records, rows, scores

import tracescore
from tracescore import attributes as A
from tracescore.testing import OtlpReceiver, ScriptedMetric, WireSpan, in_memory

pytestmark = pytest.mark.integration

Q = "What battery capacity does the Cargo have?"
PROTOCOLS = ["http/protobuf", "grpc"]


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[OtlpReceiver]:
    protocol = getattr(request, "param", "http/protobuf")
    with OtlpReceiver(protocol) as rx:
        yield rx


@pytest.fixture
def otlp(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, db_path: Path) -> Iterator[Any]:
    """``make(**init_kwargs)`` → a pipeline exporting over OTLP to ``receiver`` (env only)."""
    for k, v in receiver.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "rag-app")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")  # only flush() exports metrics
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("db", db_path)
        kwargs.setdefault("exporter", "otlp")
        ts = tracescore.init(**kwargs)
        made.append(ts)
        return ts

    yield make
    for ts in made:
        ts.shutdown(timeout=10)


def run_chain(ts: Any, question: str = Q) -> str:
    from tracescore.examples.langchain_rag import build_chain

    return str(build_chain().invoke(question, config={"callbacks": [ts.langchain_handler()]}))


def roots(spans: list[WireSpan]) -> list[WireSpan]:
    return [s for s in spans if s.attributes.get(A.RAG_ROOT)]


def wait_until_released(ts: Any, timeout: float = 10.0) -> None:
    """Until the hold deadline released every held root span (no fixed sleep: a loaded
    machine may run the hold reaper late)."""
    deadline = time.monotonic() + timeout
    while ts.stats()["spans_held"]:
        assert time.monotonic() < deadline, "the held root span was never released"
        time.sleep(0.02)


def value(rx: OtlpReceiver, name: str, **attrs: Any) -> float | None:
    for p in rx.latest_points(name):
        if all(p.attributes.get(k) == v for k, v in attrs.items()):
            return p.value
    return None


@pytest.mark.parametrize("receiver", PROTOCOLS, indirect=True)
def test_scores_events_and_histogram_arrive_on_the_wire(otlp, receiver, monkeypatch, db_path):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")

    def boom(r: Any) -> float:
        raise ValueError("judge said no")

    ts = otlp(metrics=[ScriptedMetric(lambda r: 0.25, name="relevance"),
                       ScriptedMetric(boom, name="broken")])
    run_chain(ts)
    assert ts.flush(10)

    [rec] = records(db_path)
    trace_hex, span_hex = rec["trace_id"], rec["span_id"]
    spans = receiver.spans()
    assert len(spans) >= 5 and {s.trace_id for s in spans} == {trace_hex}
    [root] = roots(spans)
    assert root.span_id == span_hex and root.parent_span_id == ""
    assert root.resource["service.name"] == "rag-app"
    assert root.attributes[A.score_attribute("relevance")] == 0.25
    assert A.score_attribute("broken") not in root.attributes
    evals = {root.attributes[A.evaluation(i, "name")]: i for i in range(2)}
    i, j = evals["relevance"], evals["broken"]
    assert root.attributes[A.evaluation(i, "score")] == 0.25
    assert root.attributes[A.evaluation(i, "label")] == "fail"
    assert root.attributes[A.evaluation(j, "label")] == "error"
    assert root.attributes[A.evaluation(j, "explanation")] == "ValueError: judge said no"

    # one gen_ai.evaluation.result log record per score, parented to the scored span
    logs = receiver.log_records()
    assert sorted(lr.attributes[A.GEN_AI_EVALUATION_NAME] for lr in logs) == ["broken",
                                                                               "relevance"]
    for lr in logs:
        assert lr.event_name == A.GEN_AI_EVALUATION_RESULT
        assert (lr.trace_id, lr.span_id) == (trace_hex, span_hex)
        assert lr.resource["service.name"] == "rag-app" and lr.scope == "tracescore"
    by_name = {lr.attributes[A.GEN_AI_EVALUATION_NAME]: lr.attributes for lr in logs}
    assert by_name["relevance"][A.GEN_AI_EVALUATION_SCORE_VALUE] == 0.25
    assert by_name["relevance"][A.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
    assert A.GEN_AI_EVALUATION_SCORE_VALUE not in by_name["broken"]
    assert by_name["broken"][A.GEN_AI_EVALUATION_SCORE_LABEL] == "error"
    assert by_name["broken"][A.GEN_AI_EVALUATION_EXPLANATION] == "ValueError: judge said no"

    # the score histogram, its exemplar pointing at the scored span
    [point] = receiver.latest_points(A.METRIC_EVALUATION_SCORE)
    assert point.kind == "histogram"
    assert point.attributes == {A.GEN_AI_EVALUATION_NAME: "relevance",
                                A.GEN_AI_EVALUATION_SCORE_LABEL: "fail"}
    assert (point.count, point.sum) == (1, 0.25)
    assert point.explicit_bounds[:3] == [0.0, 0.1, 0.2]
    [ex] = point.exemplars
    assert (ex.trace_id, ex.span_id, ex.value) == (trace_hex, span_hex, 0.25)
    assert value(receiver, A.METRIC_EVALUATION_ERRORS, **{A.GEN_AI_EVALUATION_NAME: "broken"}) == 1

    # pipeline counters and gauges
    assert value(receiver, A.METRIC_RECORDS_SEEN) == 1
    assert value(receiver, A.METRIC_RECORDS_SAMPLED) == 1
    assert value(receiver, A.METRIC_RECORDS_DROPPED) == 0
    assert value(receiver, A.METRIC_QUEUE_DEPTH) == 0
    assert value(receiver, A.METRIC_JOBS_OPEN) == 0
    assert value(receiver, A.METRIC_SCORING_LAG) == 0
    for signal in ("traces", "logs", "metrics"):
        assert value(receiver, A.METRIC_EXPORT_LOST, **{A.EXPORT_SIGNAL: signal}) == 0

    # the standard env vars were honoured: headers on every request, gzip over HTTP
    reqs = receiver.requests()
    assert {r.signal for r in reqs} == {"traces", "logs", "metrics"}
    assert all(r.headers.get("x-tenant") == "acme" for r in reqs)
    if receiver.protocol == "http/protobuf":
        assert {r.content_encoding for r in reqs} == {"gzip"}
    assert ts.stats()["export_failures"] == 0


def test_late_score_arrives_on_a_linked_carrier_and_a_log_record(otlp, receiver, db_path):
    gate = threading.Event()
    ts = otlp(metrics=[ScriptedMetric(lambda r: 0.9, name="fast"),
                       ScriptedMetric(lambda r: 0.1, name="slow", gate=gate)],
              hold_seconds=2.0, concurrency=2)  # long enough for "fast" on a loaded machine
    try:
        run_chain(ts)
        wait_until_released(ts)  # past the hold deadline: the root goes out with "fast" only
    finally:
        gate.set()
    assert ts.flush(10)
    [rec] = records(db_path)
    [root] = roots(receiver.spans())
    assert root.attributes[A.score_attribute("fast")] == 0.9
    assert A.score_attribute("slow") not in root.attributes
    assert root.attributes[A.SCORES_LATE] == 1
    [carrier] = [s for s in receiver.spans() if s.attributes.get(A.SPAN_KIND) == A.KIND_EVALUATOR]
    assert carrier.trace_id == root.trace_id == rec["trace_id"]
    assert carrier.parent_span_id == root.span_id
    assert carrier.links == [(root.trace_id, root.span_id)]
    assert carrier.attributes[A.score_attribute("slow")] == 0.1
    assert carrier.attributes[A.SCORED_SPAN_ID] == root.span_id
    logs = {lr.attributes[A.GEN_AI_EVALUATION_NAME]: lr for lr in receiver.log_records()}
    assert sorted(logs) == ["fast", "slow"]  # exactly one each
    assert {(lr.trace_id, lr.span_id) for lr in logs.values()} == {(root.trace_id, root.span_id)}
    s = scores(db_path, rec["record_id"])
    assert s["fast"]["delivery"] == "span" and s["slow"]["delivery"] == "carrier"


def test_every_stored_score_is_one_log_record_and_one_histogram_point(otlp, receiver, db_path):
    from tracescore.examples.langchain_rag import build_chain, load_questions

    ts = otlp(metrics=[ScriptedMetric(lambda r: len(r.answer) % 10 / 10, name="a"),
                       ScriptedMetric(lambda r: 0.5, name="b")], concurrency=4)
    qs = [q["question"] for q in load_questions()]
    build_chain().batch(qs, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(20)
    stored = rows(db_path, "SELECT record_id, name FROM scores")
    assert len(stored) == 2 * len(qs)
    wire = sorted((f"{lr.trace_id}-{lr.span_id}", lr.attributes[A.GEN_AI_EVALUATION_NAME])
                  for lr in receiver.log_records())
    assert wire == sorted((r["record_id"], r["name"]) for r in stored)
    points = receiver.latest_points(A.METRIC_EVALUATION_SCORE)
    assert sum(p.count or 0 for p in points) == 2 * len(qs)
    record_ids = {r["record_id"] for r in stored}
    assert all(f"{e.trace_id}-{e.span_id}" in record_ids for p in points for e in p.exemplars)
    assert len(roots(receiver.spans())) == len(qs)


def test_long_values_are_cut_on_spans_with_a_hash_and_kept_whole_in_sqlite(otlp, receiver,
                                                                           db_path):
    ts = otlp(metrics=[ScriptedMetric(name="m")], max_attribute_chars=100)
    run_chain(ts)
    assert ts.flush(10)
    [rec] = records(db_path)
    full = {c["text"] for c in rec["contexts"]}
    assert full and all(len(t) > 100 for t in full)
    [retriever] = [s for s in receiver.spans() if s.attributes.get(A.SPAN_KIND) == A.KIND_RETRIEVER]
    cut = [v for k, v in retriever.attributes.items() if k.endswith(A.DOCUMENT_CONTENT)]
    assert len(cut) == len(full)
    for v in cut:
        head, _, marker = v.partition("… [truncated ")
        assert len(head) == 100
        [original] = [t for t in full if t.startswith(head)]
        digest = hashlib.sha256(original.encode()).hexdigest()[:16]
        assert marker == f"{len(original)} chars, sha256:{digest}]"


def test_init_validates_export_arguments(tmp_path, monkeypatch):
    db = tmp_path / "a.db"
    with pytest.raises(ValueError, match="exporter must be 'otlp'"):
        tracescore.init(db=db, metrics=[], exporter="zipkin")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="'http/json' for traces is not supported"):
        tracescore.init(db=db, metrics=[], exporter="otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "thrift")
    with pytest.raises(ValueError, match="'thrift' for logs"):
        tracescore.init(db=db, metrics=[], exporter="otlp")
    for bad in (0, -5, 1.5, True, "4000"):
        with pytest.raises(ValueError, match="max_attribute_chars must be an int >= 1"):
            tracescore.init(db=db, metrics=[], max_attribute_chars=bad)
    with pytest.raises(TypeError, match="log_exporter must be"):
        tracescore.init(db=db, metrics=[], log_exporter=object())
    with pytest.raises(TypeError, match="metric_reader must be"):
        tracescore.init(db=db, metrics=[], metric_reader=object())


def test_standard_switch_turns_a_signal_off(otlp, receiver, monkeypatch):
    # A traces-only backend (Phoenix): OTEL_LOGS_EXPORTER / OTEL_METRICS_EXPORTER = none.
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    ts = otlp(metrics=[ScriptedMetric(lambda r: 0.4, name="m")])
    assert ts.telemetry.logger_provider is None and ts.telemetry.meter_provider is None
    run_chain(ts)
    assert ts.flush(10)
    assert {r.signal for r in receiver.requests()} == {"traces"}
    assert roots(receiver.spans())[0].attributes[A.score_attribute("m")] == 0.4
    ts.export_metrics.judge_call(1, 1)  # a no-op meter: the judge can always call it


def test_a_brief_outage_is_retried_by_the_exporter_and_nothing_is_lost(otlp, receiver,
                                                                       monkeypatch, db_path):
    # 503 + Retry-After: the OTLP exporter waits as told and retries (at most 6 attempts per
    # batch, within its timeout), so a short outage costs nothing.
    receiver.retry_after = 0.05
    ts = otlp(metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    for i in range(3):
        run_chain(ts, f"{Q} {i}")
    receiver.refuse_next(4)
    t0 = time.perf_counter()
    assert ts.flush(10)
    assert time.perf_counter() - t0 < 5
    assert receiver.refused == 4
    assert len(roots(receiver.spans())) == 3
    assert len(receiver.log_records()) == 3
    assert ts.stats()["export_failures"] == 0
    assert ts.stats()["export_lost"] == {"traces": 0, "logs": 0, "metrics": 0}


@pytest.mark.parametrize("receiver", PROTOCOLS, indirect=True)
def test_backend_down_app_unaffected_sqlite_complete_loss_counted(otlp, receiver, monkeypatch,
                                                                   db_path):
    # Longer down than the exporter's timeout (seconds in the Python SDK; its first backoff is
    # ~1 s, so with 0.5 s it gives up after one attempt): the batch is dropped and counted.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")
    ts = otlp(metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    run_chain(ts, "warm up")
    assert ts.flush(10)
    per_run = len(receiver.spans())
    assert per_run >= 5

    receiver.down = True
    n_down = 6
    latencies = []
    for i in range(n_down):
        t0 = time.perf_counter()
        answer = run_chain(ts, f"{Q} {i}")
        latencies.append(time.perf_counter() - t0)
        assert answer
    t0 = time.perf_counter()
    ts.flush(10)
    flush_s = time.perf_counter() - t0
    assert max(latencies) < 0.5  # the app never waits on the backend
    assert flush_s < 5
    refused = receiver.refused_by_signal()
    assert refused.get("traces", 0) >= 1 and refused.get("logs", 0) >= 1

    # SQLite has every record and every score
    stored = records(db_path)
    assert len(stored) == 1 + n_down
    assert rows(db_path, "SELECT count(*) AS n FROM scores WHERE status='ok'")[0]["n"] == 1 + n_down
    # ... the backend has none of the down-time traces, and the loss is counted exactly
    down_traces = {r["trace_id"] for r in stored[1:]}
    assert not down_traces & {s.trace_id for s in receiver.spans()}
    stats = ts.stats()
    assert stats["export_lost"]["traces"] == n_down * per_run
    assert stats["export_lost"]["logs"] == n_down
    assert stats["export_failures"] >= 2

    # recovered: new runs arrive, cumulative counters catch up, and the loss is reported
    receiver.down = False
    for i in range(2):
        run_chain(ts, f"after {i}")
    assert ts.flush(10)
    assert len(roots(receiver.spans())) == 1 + 2
    assert len(receiver.log_records()) == 1 + 2
    assert value(receiver, A.METRIC_RECORDS_SEEN) == 1 + n_down + 2
    assert value(receiver, A.METRIC_EXPORT_LOST, **{A.EXPORT_SIGNAL: "traces"}) == \
        n_down * per_run
    [point] = receiver.latest_points(A.METRIC_EVALUATION_SCORE)
    assert point.count == 1 + n_down + 2  # cumulative: the histogram loses nothing


def test_flush_keeps_its_timeout_while_the_exporter_retries(otlp, receiver, monkeypatch):
    # The SDK's batch processors ignore force_flush's timeout; tracescore's flush does not.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "10")
    ts = otlp(metrics=[ScriptedMetric(name="m")])
    run_chain(ts)
    receiver.down = True
    t0 = time.perf_counter()
    assert ts.flush(1.0) is False
    assert time.perf_counter() - t0 < 2.5
    receiver.down = False


def test_a_score_whose_span_failed_to_export_goes_out_again(otlp, receiver, monkeypatch,
                                                             db_path):
    """With tracescore's own exporter, a score counts as delivered only once the span that
    carries it was exported. The backend is down when the root goes out: its score stays
    undelivered (and counted); once the backend is back, the redelivery sweep sends it on one
    carrier span, and only then is it marked delivered."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    ts = otlp(metrics=[ScriptedMetric(lambda r: 0.7, name="m")])
    ts.worker.redeliver_after_s = 3600.0
    receiver.down = True
    run_chain(ts)
    ts.flush(10)
    [rec] = records(db_path)
    assert scores(db_path, rec["record_id"])["m"]["delivery"] is None
    assert ts.stats()["scores_export_failed"] == 1
    assert roots(receiver.spans()) == []
    receiver.down = False
    ts.worker.redeliver_after_s = 0.0
    deadline = time.monotonic() + 15
    while scores(db_path, rec["record_id"])["m"]["delivery"] is None:
        assert time.monotonic() < deadline, "the score was never sent again"
        ts.worker.wake()
        time.sleep(0.05)
        ts.flush(5)
    ts.worker.redeliver_after_s = 3600.0
    time.sleep(0.3)  # a second sweep would have sent it twice by now
    assert ts.flush(10)
    carriers = [s for s in receiver.spans() if s.attributes.get(A.SPAN_KIND) == A.KIND_EVALUATOR]
    assert len(carriers) == 1
    assert carriers[0].attributes[A.score_attribute("m")] == 0.7
    assert carriers[0].attributes[A.SCORED_SPAN_ID] == rec["span_id"]
    assert scores(db_path, rec["record_id"])["m"]["delivery"] == "carrier"
    assert ts.stats()["scores_redelivered"] == 1


def test_the_apps_tracer_provider_is_reused_not_replaced(otlp, receiver, monkeypatch):
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    app_provider = TracerProvider()
    app_spans = InMemorySpanExporter()
    app_provider.add_span_processor(SimpleSpanProcessor(app_spans))
    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: app_provider)
    ts = otlp(metrics=[ScriptedMetric(lambda r: 0.7, name="m")])
    assert ts.tracer_provider is app_provider
    run_chain(ts)
    assert ts.flush(10)
    [root] = roots(receiver.spans())
    assert root.attributes[A.score_attribute("m")] == 0.7
    # The app's own processor saw the same spans, without the scores (OTel spans are immutable
    # once ended; only tracescore's exporter gets the enriched copy).
    [app_root] = [s for s in app_spans.get_finished_spans() if s.attributes.get(A.RAG_ROOT)]
    assert format(app_root.context.span_id, "016x") == root.span_id
    assert A.score_attribute("m") not in app_root.attributes


def test_exporter_app_sends_through_the_apps_pipeline_once(receiver, monkeypatch, db_path):
    """``exporter="app"``: the app's provider already exports over OTLP (its own
    BatchSpanProcessor); tracescore wraps that pipeline instead of adding a second one, so
    every span arrives exactly once, the RAG root with its score, under the app's request
    span; a late score comes through the same pipeline on a carrier span. After
    ``ts.shutdown()`` the app's pipeline is the app's again and still exports."""
    from opentelemetry import trace as trace_api
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    app_provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    app_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")))
    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: app_provider)
    app_tracer = app_provider.get_tracer("app")
    slow = threading.Event()
    ts = tracescore.init(db=db_path, exporter="app", hold_seconds=2.0, metrics=[
        ScriptedMetric(lambda r: 0.7, name="m"),
        ScriptedMetric(lambda r: slow.wait(10) and 0.4, name="late")])
    try:
        assert ts.tracer_provider is app_provider
        with app_tracer.start_as_current_span("POST /ask") as request_span:
            run_chain(ts)
        wait_until_released(ts)  # past hold_seconds: "late" misses the root span
        slow.set()
        assert ts.flush(10)
    finally:
        ts.shutdown(timeout=10)
    with app_tracer.start_as_current_span("after tracescore"):
        pass
    app_provider.force_flush()
    spans = receiver.spans()
    ids = [s.span_id for s in spans]
    assert len(ids) == len(set(ids)), "a span arrived twice"
    [root] = roots(spans)
    [request] = [s for s in spans if s.name == "POST /ask"]
    assert root.parent_span_id == request.span_id
    assert request.span_id == format(request_span.get_span_context().span_id, "016x")
    assert root.attributes[A.score_attribute("m")] == 0.7
    assert A.score_attribute("late") not in root.attributes
    [carrier] = [s for s in spans if s.attributes.get(A.SPAN_KIND) == A.KIND_EVALUATOR]
    assert carrier.attributes[A.score_attribute("late")] == 0.4
    assert carrier.links == [(root.trace_id, root.span_id)]
    assert len([s for s in spans if s.name == "after tracescore"]) == 1
    # the pipeline is the app's again: nothing of tracescore's is left in it
    assert all(type(p).__name__ == "BatchSpanProcessor"
               for p in app_provider._active_span_processor._span_processors)
    app_provider.shutdown()


def test_exporter_app_needs_an_sdk_provider_with_a_processor(monkeypatch, db_path):
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: trace_api.NoOpTracerProvider())
    with pytest.raises(ValueError, match="needs the app's opentelemetry-sdk TracerProvider"):
        tracescore.init(db=db_path, exporter="app")
    with pytest.raises(ValueError, match="has no span processor yet"):
        tracescore.init(db=db_path, exporter="app", tracer_provider=TracerProvider())
    with pytest.raises(ValueError, match="do not pass span_exporter or span_processor"):
        tracescore.init(db=db_path, exporter="app", span_exporter=InMemorySpanExporter())


def test_judge_metrics_api_and_breaker_gauge(otlp, receiver):
    ts = otlp(metrics=[ScriptedMetric(name="m")])
    m = ts.export_metrics
    m.judge_call(120, 30, model="judge-1")
    m.judge_call(10, 0, error=True, model="judge-1")
    state = [0]
    m.observe_breaker(lambda: state[0])
    state[0] = 2
    assert ts.flush(10)
    model = {A.GEN_AI_REQUEST_MODEL: "judge-1"}
    calls = receiver.latest_points(A.METRIC_JUDGE_CALLS)
    assert sum(p.value or 0 for p in calls) == 2
    assert value(receiver, A.METRIC_JUDGE_ERRORS, **model) == 1
    assert value(receiver, A.METRIC_JUDGE_TOKENS, **model, **{A.GEN_AI_TOKEN_TYPE: "input"}) == 130
    assert value(receiver, A.METRIC_JUDGE_TOKENS, **model, **{A.GEN_AI_TOKEN_TYPE: "output"}) == 30
    assert value(receiver, A.METRIC_JUDGE_BREAKER_STATE) == 2


def test_escape_hatch_exporters_and_the_scoring_lag_gauge(tmp_path):
    """``log_exporter=`` / ``metric_reader=`` without OTLP; queue gauges while a job waits."""
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    logs = InMemoryLogRecordExporter()
    reader = InMemoryMetricReader()
    gate = threading.Event()
    ts, _ = in_memory(
        tmp_path / "t.db", metrics=[ScriptedMetric(lambda r: 0.3, name="m", gate=gate)],
        log_exporter=logs, metric_reader=reader)
    try:
        rec = ts.log_record(query="q", answer="a")
        deadline = time.monotonic() + 5
        while not ts.stats()["open_jobs"] and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        got = _gauges(reader)
        assert got[A.METRIC_JOBS_OPEN] == 1
        assert got[A.METRIC_SCORING_LAG] >= 0.25
    finally:
        gate.set()
    assert ts.flush(10)
    [lr] = logs.get_finished_logs()
    assert lr.log_record.event_name == A.GEN_AI_EVALUATION_RESULT
    assert format(lr.log_record.trace_id, "032x") == rec.trace_id
    assert format(lr.log_record.span_id, "016x") == rec.span_id
    assert _gauges(reader)[A.METRIC_JOBS_OPEN] == 0
    ts.shutdown()


def _gauges(reader: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    if hasattr(p, "value"):
                        out[m.name] = p.value
    return out
