"""What the request's thread leaves to the writer (issue 33, "the request path"): an unsampled
request's record, a sampled request's whole record (candidates, prompt, tool calls), and the
root span when no step outlives it. The result must be the same as when the app's thread did
it all: the same rows, the same spans, the same scores on the root span.

Real LangChain objects (the example chain, a create_agent graph), real SQLite, the real OTel
SDK with an in-memory exporter.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import tracescore.integrations.langchain.emit as E
from helpers import capture_metrics, records, wait_for
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_capture_agents import ANSWER, artifact_agent
from tracescore.examples.langchain_rag import KeywordRetriever, build_chain, format_docs

import tracescore
from tracescore import attributes as A
from tracescore.sampling import DEFAULT_RULES, force_on_error
from tracescore.testing import in_memory, rag_roots

Q = "How long does a test ride last?"
TEXT_COLUMNS = ("query", "answer", "contexts", "prompt", "candidates", "retrieval_queries",
                "agent", "session_id", "model", "input_tokens", "output_tokens", "error")


def _row(db: Any) -> dict[str, Any]:
    (rec,) = records(db)
    out = {k: rec.get(k) for k in TEXT_COLUMNS}
    if out["agent"] is not None:  # (the fake model's tool-call ids are random)
        out["agent"] = json.loads(out["agent"])
        for c in out["agent"]["calls"]:
            c["id"] = bool(c["id"])
    return out


def _agent_question() -> str:
    return next(iter(ANSWER))


@pytest.mark.parametrize("app", ["chain", "agent"])
def test_a_record_built_on_the_writer_is_the_one_the_request_thread_built(
        tmp_path: Any, app: str) -> None:
    """Rate 1.0 (sampled: finished on the writer), rate 0.0 with every text kept (built on the
    writer), and a custom rule (built in full on the request's thread): the same row."""
    got = {}
    variants = {"sampled": {"sample_rate": 1.0},
                "unsampled": {"sample_rate": 0.0, "keep_full_text": True},
                "eager": {"sample_rate": 0.0, "keep_full_text": True,
                          "force_rules": (force_on_error, lambda r: None)}}
    for name, kw in variants.items():
        ts, exporter = in_memory(db=tmp_path / f"{app}-{name}.db", **kw)
        try:
            h = ts.langchain_handler()
            if app == "chain":
                build_chain().invoke(Q, config={"callbacks": [h], "metadata": {
                    "session_id": "s-1"}})
            else:
                artifact_agent().invoke({"messages": [("user", _agent_question())]},
                                        config={"callbacks": [h], "metadata": {
                                            "session_id": "s-1"}})
            assert ts.flush(60)
            got[name] = _row(ts.db_path)
            assert len(rag_roots(exporter)) == 1
        finally:
            ts.shutdown(10)
    assert got["sampled"] == got["unsampled"] == got["eager"]
    row = got["sampled"]
    assert row["contexts"] and row["candidates"] and row["prompt"] and row["answer"]
    assert row["session_id"] == "s-1"
    if app == "agent":
        (call,) = row["agent"]["calls"]
        assert call["name"] == "retrieve" and call["ok"] and call["id"] and call["result"]


def test_a_custom_rule_still_decides_on_the_request_thread(make_ts: Any) -> None:
    """A rule of the app's own gets a record (query, contexts, answer) on the request's thread,
    as before, though no metric samples the request; the record it forces is built whole."""
    seen: list[Any] = []

    def rule(record: Any) -> str | None:
        seen.append(threading.current_thread().name)
        return "long answer" if record.contexts and len(record.answer or "") > 10 else None

    ts, _ = make_ts(sample_rate=0.0, force_rules=(*DEFAULT_RULES, rule))
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(60)
    assert seen == [threading.current_thread().name]
    (rec,) = records(ts.db_path)
    assert rec["forced"] == "long answer" and rec["text_kept"] == 1 and rec["candidates"]


def test_the_root_span_is_the_one_the_sdk_makes(make_ts: Any) -> None:
    """The root span built from its pending data: same trace as its steps, no parent, the
    provider's resource and scope, the documented attributes; an error keeps its status."""
    ts, exporter = make_ts(sample_rate=0.0)
    h = ts.langchain_handler()
    answer = build_chain().invoke(Q, config={"callbacks": [h]})
    assert ts.flush(60)
    spans = exporter.get_finished_spans()
    (root,) = rag_roots(exporter)
    assert root.parent is None and root.kind == trace_api.SpanKind.INTERNAL
    assert root.context.trace_flags.sampled and root.context.span_id != 0
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    assert all(s.parent is not None and s.parent.trace_id == root.context.trace_id
               for s in spans if s is not root)
    assert root.resource is ts.tracer_provider.resource
    assert root.instrumentation_scope.name == "tracescore"
    assert root.attributes[A.INPUT_VALUE] == Q and root.attributes[A.OUTPUT_VALUE] == answer
    assert root.attributes[A.SAMPLED] is False
    (rec,) = records(ts.db_path)
    assert root.attributes[A.RECORD_ID] == f"{rec['trace_id']}-{rec['span_id']}"
    assert root.start_time < root.end_time and root.status.status_code == StatusCode.UNSET


def test_inside_a_span_of_the_app_the_root_is_its_child(tmp_path: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ts = tracescore.init(db=tmp_path / "app.db", tracer_provider=provider, sample_rate=0.0)
    try:
        with provider.get_tracer("app").start_as_current_span("request") as outer:
            build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
        assert ts.flush(60)
        (root,) = rag_roots(exporter)
        assert root.parent is not None and root.parent.span_id == outer.get_span_context().span_id
        assert root.context.trace_id == outer.get_span_context().trace_id
    finally:
        ts.shutdown(10)


@pytest.mark.allow_internal_errors
def test_a_record_the_writer_cannot_build_is_counted_lost(make_ts: Any,
                                                          monkeypatch: Any) -> None:
    """Unsampled: nothing was built on the request's thread — the loss is counted, by reason;
    the request's spans still go out."""
    build = E._build

    def broken(*args: Any) -> Any:
        if threading.current_thread().name == "tracescore-writer":
            raise RuntimeError("cannot build")
        return build(*args)

    monkeypatch.setattr(E, "_build", broken)
    ts, exporter = make_ts(sample_rate=0.0)
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(60)
    assert records(ts.db_path) == []
    assert ts.stats()["lost"].get("record_build_failed") == 1
    assert len(rag_roots(exporter)) == 1


@pytest.mark.allow_internal_errors
def test_a_sampled_record_the_writer_cannot_build_is_counted_and_its_span_not_held(
        make_ts: Any, monkeypatch: Any) -> None:
    """Sampled: the loss is counted, by reason, and the root span (held for the scores that
    will not come) goes out at once, not at the hold's deadline."""
    build = E._build

    def broken(*args: Any) -> Any:
        if threading.current_thread().name == "tracescore-writer":
            raise RuntimeError("cannot build")
        return build(*args)

    monkeypatch.setattr(E, "_build", broken)
    ts, exporter = make_ts(sample_rate=1.0, metrics=["token_f1", "exact_match"],
                           hold_seconds=3600)
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()],
                                    "metadata": {"ground_truth": "45 minutes"}})
    assert ts.flush(60)
    assert records(ts.db_path) == []
    assert ts.stats()["lost"].get("record_build_failed") == 1
    wait_for(lambda: len(rag_roots(exporter)) == 1, 30, "the root span, not held")
    assert ts.attacher.held == 0


class _DropAll(BaseRetriever):
    """A retriever that runs another and passes none of its documents on (a filter that
    dropped them all)."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Any]:
        KeywordRetriever().invoke(query, config={"callbacks": run_manager.get_child()})
        return []


def test_a_sampled_request_whose_documents_were_all_dropped_is_not_held_for_them(
        make_ts: Any) -> None:
    """The hold is counted from "some step returned documents"; when the record keeps none
    (a filter dropped them all), the writer takes the context metric's job off the hold: the
    span goes out with the scores that do come, not at the hold's deadline."""
    chain = {"context": _DropAll() | RunnableLambda(format_docs),
             "question": RunnablePassthrough()} | RunnableLambda(
        lambda x: f"The answer to {x['question']}")
    ts, exporter = make_ts(sample_rate=1.0, metrics=capture_metrics(), hold_seconds=3600)
    chain.invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(60)
    (rec,) = records(ts.db_path)
    assert rec["contexts"] == [] and rec["candidates"]  # found, then dropped
    wait_for(lambda: len(rag_roots(exporter)) == 1, 30, "the root span with its scores")
    (root,) = rag_roots(exporter)
    assert f"{A.SCORE_PREFIX}answer_length" in root.attributes
    assert f"{A.SCORE_PREFIX}context_count" not in root.attributes
    assert ts.attacher.held == 0


def test_sampled_scores_go_on_the_root_span_built_by_the_writer(make_ts: Any) -> None:
    ts, exporter = make_ts(sample_rate=1.0, metrics=["token_f1", "exact_match"])
    for _ in range(3):
        build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()],
                                        "metadata": {"ground_truth": "45 minutes"}})
    assert ts.flush(60)
    roots = rag_roots(exporter)
    assert len(roots) == 3  # each exported once, with its scores on it
    for root in roots:
        assert f"{A.SCORE_PREFIX}token_f1" in root.attributes
        assert f"{A.SCORE_PREFIX}exact_match" in root.attributes
