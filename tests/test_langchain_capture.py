"""LangChain capture on real LCEL chains (the example app's retriever and chat model)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from helpers import assert_no_content_kept, capture_metrics, jobs, records, scores
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda
from opentelemetry.sdk.trace import TracerProvider
from tracescore.examples.langchain_rag import (
    PROMPT,
    REFUSAL,
    ExtractiveChatModel,
    build_chain,
    build_retrieval_chain,
    build_two_retriever_chain,
    load_questions,
)

from tracescore import attributes as A
from tracescore.testing import rag_roots

Q = "What battery capacity does the Cargo have?"


METRICS = capture_metrics()


def spans_by_trace(exporter: Any) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.context.trace_id, []).append(s)
    return out


def test_lcel_invoke_builds_record_and_span_tree(make_ts, db_path):
    ts, exporter = make_ts(metrics=METRICS)
    chain = build_chain()
    answer = chain.invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)

    [rec] = records(db_path)
    assert rec["query"] == Q
    assert rec["answer"] == answer
    expected_docs = chain.first.steps__["context"].first.invoke(Q)  # the retriever itself
    assert [c["id"] for c in rec["contexts"]] == [d.id for d in expected_docs]
    assert [c["text"] for c in rec["contexts"]] == [d.page_content for d in expected_docs]
    assert [c["score"] for c in rec["contexts"]] == [d.metadata["score"] for d in expected_docs]
    assert rec["input_tokens"] > 0 and rec["output_tokens"] > 0
    assert rec["model"] == "extractive-demo"
    assert rec["error"] is None and rec["source"] == "langchain"
    assert rec["latency_ms"] > 0

    [trace_spans] = spans_by_trace(exporter).values()
    by_id = {s.context.span_id: s for s in trace_spans}
    [root] = [s for s in trace_spans if s.parent is None]
    assert root.attributes[A.RAG_ROOT] is True
    assert root.attributes[A.SPAN_KIND] == A.KIND_CHAIN
    assert root.attributes[A.INPUT_VALUE] == Q
    assert root.attributes[A.OUTPUT_VALUE] == answer
    assert f"{root.context.trace_id:032x}" == rec["trace_id"]
    # every other span descends from the root
    for s in trace_spans:
        if s is not root:
            p = s
            while p.parent is not None:
                p = by_id[p.parent.span_id]
            assert p is root
            assert s.start_time >= root.start_time and s.end_time <= root.end_time
    [retr] = [s for s in trace_spans if s.attributes.get(A.SPAN_KIND) == A.KIND_RETRIEVER]
    assert retr.attributes[A.INPUT_VALUE] == Q
    assert retr.attributes[A.retrieval_document(0, A.DOCUMENT_ID)] == expected_docs[0].id
    assert retr.attributes[A.retrieval_document(2, A.DOCUMENT_CONTENT)] == \
        expected_docs[2].page_content
    [llm] = [s for s in trace_spans if s.attributes.get(A.SPAN_KIND) == A.KIND_LLM]
    assert llm.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == rec["input_tokens"]
    assert llm.attributes[A.GEN_AI_OPERATION_NAME] == "chat"
    assert llm.attributes[A.OUTPUT_VALUE] == answer
    # scores came back onto the root span
    assert root.attributes[A.score_attribute("context_count")] == 3.0
    assert root.attributes[A.score_attribute("answer_length")] == float(len(answer))


def test_retrieval_chain_dict_output(make_ts, db_path):
    ts, _ = make_ts(metrics=METRICS)
    out = build_retrieval_chain().invoke({"input": Q}, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)
    [rec] = records(db_path)
    assert rec["query"] == Q
    assert rec["answer"] == out["answer"]
    assert [c["id"] for c in rec["contexts"]] == [d.id for d in out["context"]]


def test_invoke_ainvoke_batch_stream_astream_agree(make_ts, db_path):
    ts, _ = make_ts(metrics=METRICS)
    chain = build_chain()
    cfg = {"callbacks": [ts.langchain_handler()]}
    qs = [q["question"] for q in load_questions()[:3]]
    expected = [chain.invoke(q) for q in qs]  # no callbacks: not recorded

    got_invoke = chain.invoke(qs[0], config=cfg)
    got_ainvoke = asyncio.run(chain.ainvoke(qs[1], config=cfg))
    got_batch = chain.batch(qs, config=cfg)
    got_stream = "".join(chain.stream(qs[2], config=cfg))

    async def consume() -> str:
        return "".join([c async for c in chain.astream(qs[0], config=cfg)])

    got_astream = asyncio.run(consume())
    assert [got_invoke, got_ainvoke, got_stream, got_astream] == \
        [expected[0], expected[1], expected[2], expected[0]]
    assert got_batch == expected
    assert ts.flush(10)
    recs = records(db_path)
    assert len(recs) == 7
    assert len({r["trace_id"] for r in recs}) == 7
    answers = {(r["query"], r["answer"]) for r in recs}
    assert answers == {(q, a) for q, a in zip(qs, expected)}
    for r in recs:
        assert len(r["contexts"]) == 3


def test_two_retrievers_keep_order_and_source(make_ts, db_path):
    ts, _ = make_ts(metrics=METRICS)
    q = "How long is the warranty on the battery?"
    build_two_retriever_chain().invoke(q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)
    [rec] = records(db_path)
    sources = [c["source"] for c in rec["contexts"]]
    assert set(sources) == {"product_retriever", "policy_retriever"}
    # contexts are grouped per retriever in the order the retrievers started
    first = sources[0]
    n_first = sources.count(first)
    assert sources[:n_first] == [first] * n_first
    assert len(rec["contexts"]) == len(sources) >= 3


def test_chain_without_retriever_skips_context_metrics(make_ts, db_path):
    ts, exporter = make_ts(metrics=METRICS)
    chain = RunnableLambda(lambda q: {"context": "no docs", "question": q}) | PROMPT | \
        ExtractiveChatModel() | StrOutputParser()
    chain.invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)
    [rec] = records(db_path)
    assert rec["contexts"] == [] and rec["n_contexts"] == 0
    j = jobs(db_path, rec["record_id"])
    assert j["context_count"]["status"] == "skipped"
    assert "contexts" in j["context_count"]["reason"]
    s = scores(db_path, rec["record_id"])
    assert "context_count" not in s  # skipped, not scored 0
    assert s["answer_length"]["value"] == len(rec["answer"])
    [root] = rag_roots(exporter)
    assert A.score_attribute("context_count") not in root.attributes


class Boom(RuntimeError):
    pass


def test_run_that_raises_is_recorded_and_reraised(make_ts, db_path):
    ts, exporter = make_ts(metrics=METRICS)

    def explode(_: Any) -> str:
        raise Boom("model exploded")

    chain = build_chain(llm=RunnableLambda(explode))  # type: ignore[arg-type]
    err = Boom("x")
    with pytest.raises(Boom) as info:
        chain.invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert str(info.value) == "model exploded" and type(info.value) is type(err)
    assert ts.flush(10)
    [rec] = records(db_path)
    assert rec["error"] == "Boom: model exploded"
    assert rec["answer"] is None
    assert rec["forced"] == "error"  # errors are always sampled
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert root.status.status_code.name == "ERROR"
    assert root.attributes[A.ERROR_TYPE] == "Boom"


def test_capture_content_off_keeps_text_out_of_spans_and_db(make_ts, db_path):
    ts, exporter = make_ts(metrics=METRICS, capture_content=False)
    answer = build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)
    assert_no_content_kept(db_path, exporter, Q, answer)


def test_redaction_applies_before_store_and_spans(make_ts, db_path):
    ts, exporter = make_ts(metrics=METRICS, redact=lambda s: s.replace("Cargo", "[X]"))
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)
    [rec] = records(db_path)
    assert rec["query"] == Q.replace("Cargo", "[X]")
    assert all("Cargo" not in c["text"] for c in rec["contexts"])
    for span in exporter.get_finished_spans():
        for value in span.attributes.values():
            assert "Cargo" not in str(value)


def test_instrument_langchain_captures_every_chain_once(make_ts, db_path):
    ts, _ = make_ts(metrics=METRICS)
    chain = build_chain()
    ts.instrument_langchain()
    try:
        chain.invoke(Q)  # no callbacks passed
        chain.invoke(Q, config={"callbacks": [ts.langchain_handler()]})  # explicit too: once
        t = threading.Thread(target=lambda: chain.invoke(Q))  # a thread the app starts
        t.start()
        t.join()
    finally:
        ts.uninstrument_langchain()
    chain.invoke(Q)  # not captured any more
    assert ts.flush(10)
    assert len(records(db_path)) == 3


def test_root_joins_the_apps_current_trace(make_ts, db_path):
    ts, _ = make_ts(metrics=METRICS)
    app_tracer = TracerProvider().get_tracer("app")
    with app_tracer.start_as_current_span("http request") as app_span:
        build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)
    [rec] = records(db_path)
    assert rec["trace_id"] == f"{app_span.get_span_context().trace_id:032x}"


def test_refusal_is_an_answer(make_ts, db_path):
    ts, _ = make_ts(metrics=METRICS)
    out = build_chain().invoke("Who founded the company?",
                               config={"callbacks": [ts.langchain_handler()]})
    assert out == REFUSAL
    assert ts.flush(10)
    [rec] = records(db_path)
    assert rec["answer"] == REFUSAL
