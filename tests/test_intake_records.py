"""The convention readers on hand-built span trees (what the instrumentors' tests do not
reach): rerankers, documents that never reached the model, several requests under one span,
spans whose parent never came."""

from __future__ import annotations

import json
from typing import Any

from tracescore.intake import records as R
from tracescore.intake.spans import Span

T = "ab" * 16


def span(sid: str, parent: str, start: int, end: int, **attrs: Any) -> Span:
    return Span(T, sid * 16 if len(sid) == 1 else sid, (parent * 16) if parent else "", sid,
                start, end, {k.replace("__", "."): v for k, v in attrs.items()}, [], None,
                {"service.version": "3"}, "test")


def oi_docs(prefix: str, texts: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, t in enumerate(texts):
        out[f"{prefix}.{i}.document.content"] = t
        out[f"{prefix}.{i}.document.id"] = f"id-{t[:1]}"
    return out


def test_openinference_reranker_keeps_its_output_and_names_what_it_dropped():
    retr = span("2", "1", 10, 20, openinference__span__kind="RETRIEVER",
                input__value="q?", **oi_docs("retrieval.documents", ["A doc", "B doc", "C doc"]))
    rer = span("3", "1", 21, 30, openinference__span__kind="RERANKER",
               **oi_docs("reranker.input_documents", ["A doc", "B doc", "C doc"]),
               **oi_docs("reranker.output_documents", ["C doc", "A doc"]))
    llm = span("4", "1", 31, 40, openinference__span__kind="LLM", **{
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "C doc\nA doc\nq?",
        "llm.output_messages.0.message.content": "the answer"})
    root = span("1", "", 0, 50, openinference__span__kind="CHAIN", input__value="q?",
                output__value="the answer", metadata=json.dumps({"tenant": "x"}))
    [b] = R.build([llm, rer, retr, root])
    r = b.record
    assert sorted(c.text for c in r.contexts) == ["A doc", "C doc"]
    dropped = {c.text: c.dropped_by for c in r.candidates if not c.kept}
    assert dropped == {"B doc": "3"}  # the reranker step (its span name)
    assert r.metadata["tenant"] == "x" and b.release == "3"
    assert r.query == "q?" and r.answer == "the answer"


def test_documents_not_in_the_answering_prompt_are_candidates_only():
    retr = span("2", "1", 10, 20, gen_ai__operation__name="retrieval",
                gen_ai__retrieval__documents=json.dumps([{"id": "a", "content": "kept text"},
                                                         {"id": "b", "content": "lost text"}]))
    chat = span("3", "1", 30, 40, gen_ai__operation__name="chat",
                gen_ai__input__messages=json.dumps([{"role": "user", "parts": [
                    {"type": "text", "content": "use: kept text. q?"}]}]),
                gen_ai__output__messages=json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "ok"}]}]))
    root = span("1", "", 0, 50, app="rag")  # the app's own span, no convention
    [b] = R.build([root, retr, chat])
    assert [c.id for c in b.record.contexts] == ["a"]
    assert [(c.id, c.kept, c.dropped_by) for c in b.record.candidates] == [
        ("a", True, None), ("b", False, "prompt")]
    assert b.record.answer == "ok" and b.record.span_id == "1" * 16


def test_several_requests_under_one_span_make_one_record_each_and_orphans_count():
    def request(sid: str, llm: str, start: int, q: str) -> list[Span]:
        return [span(sid, "1", start, start + 10, openinference__span__kind="CHAIN",
                     input__value=q, output__value=q.upper()),
                span(llm, sid, start + 1, start + 9, openinference__span__kind="LLM")]

    batch = span("1", "", 0, 100, http__route="/batch")  # an HTTP handler, two requests
    orphan = span("9", "8", 200, 210, openinference__span__kind="LLM",
                  **{"llm.output_messages.0.message.content": "alone"})  # parent never came
    got = R.build([batch, *request("2", "3", 10, "one"), *request("4", "5", 30, "two"), orphan])
    assert sorted((b.record.query or "", b.record.answer) for b in got) == [
        ("", "alone"), ("one", "ONE"), ("two", "TWO")]


def test_trace_without_a_model_call_has_no_record():
    assert R.build([span("1", "", 0, 1, openinference__span__kind="RETRIEVER")]) == []
