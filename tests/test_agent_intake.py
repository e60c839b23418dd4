"""Agent runs from received spans (``capture="otel"``, the same readers as ``serve``): GenAI
``invoke_agent`` / ``chat`` / ``execute_tool`` spans with ``gen_ai.tool.definitions`` and
``tool_call`` output parts, and OpenInference LLM / TOOL spans with ``llm.tools`` and
``llm.output_messages.*.message.tool_calls``: the same agent part and checks as in-process
capture."""

from __future__ import annotations

import json
from typing import Any

from helpers import records, scores, wait_for

from tracescore.metrics.agent import AGENT_CHECKS

CHECKS = [m.name for m in AGENT_CHECKS]
SEARCH = {"type": "function", "name": "search", "description": "Search the handbook.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                         "required": ["query"]}}


def genai_chat(tracer: Any, calls: list[dict[str, Any]] | None, text: str = "") -> None:
    parts = ([{"type": "tool_call", "id": c["id"], "name": c["name"],
               "arguments": c["arguments"]} for c in calls] if calls
             else [{"type": "text", "content": text}])
    with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.tool.definitions": json.dumps([SEARCH]),
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                {"type": "text", "content": "how far?"}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])}):
        pass


def genai_tool(tracer: Any, call_id: str, name: str, args: dict[str, Any],
               result: str | None, error: str | None = None) -> None:
    from opentelemetry.trace import Status, StatusCode

    with tracer.start_as_current_span(f"execute_tool {name}", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps(args),
            **({"gen_ai.tool.call.result": result} if result is not None else {})}) as span:
        if error:
            span.set_status(Status(StatusCode.ERROR, error))


def test_genai_agent_spans_make_the_agent_part_and_its_checks(tmp_path: Any) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    import tracescore

    tp = TracerProvider()
    db = tmp_path / "x.db"
    ts = tracescore.init(db=db, capture="otel", tracer_provider=tp, metrics=CHECKS)
    try:
        tracer = tp.get_tracer("app")
        with tracer.start_as_current_span("invoke_agent bikes", attributes={
                "gen_ai.operation.name": "invoke_agent"}):
            genai_chat(tracer, [{"id": "c1", "name": "search",
                                 "arguments": {"query": "range"}}])
            genai_tool(tracer, "c1", "search", {"query": "range"}, "80 km")
            genai_chat(tracer, [{"id": "c2", "name": "search",
                                 "arguments": {"query": "range"}}])
            genai_tool(tracer, "c2", "search", {"query": "range"}, "80 km")
            genai_chat(tracer, [{"id": "c3", "name": "browse", "arguments": {"url": "x"}}])
            genai_chat(tracer, [{"id": "c4", "name": "search", "arguments": {"query": 7}}])
            genai_tool(tracer, "c4", "search", {"query": 7}, None, "ValueError: not a str")
            genai_chat(tracer, None, "About 80 km.")
        wait_for(lambda: ts.otel_capture.records == 1, 30, "the trace built")
        assert ts.flush(30)
    finally:
        ts.shutdown(10)
    (rec,) = records(db)
    agent = json.loads(rec["agent"])
    assert agent["steps"] == 5 and agent["model_calls"] == 5
    assert [t["name"] for t in agent["tools"]] == ["search"]
    assert [(c["step"], c["name"], c["ok"]) for c in agent["calls"]] == [
        (1, "search", True), (2, "search", True), (3, "browse", False), (4, "search", False)]
    assert agent["calls"][0]["result"] == "80 km"
    assert agent["calls"][2]["error"] == "no result seen"  # no tool span: never ran
    assert agent["calls"][3]["error"] == "ValueError: not a str"
    got = {k: v["value"] for k, v in scores(db, rec["record_id"]).items()}
    assert got == {"tool_error_rate": 0.5, "unknown_tool_calls": 1.0,
                   "invalid_tool_arguments": 1.0, "repeated_tool_calls": 1.0,
                   "agent_no_answer": 0.0, "agent_steps": 5.0, "agent_model_calls": 5.0}


def test_openinference_langgraph_agent_spans_give_the_same_checks(tmp_path: Any) -> None:
    """The real OpenInference LangChain instrumentor on the real LangGraph agent of
    tests/test_agent_checks.py: its LLM spans (``llm.tools``, output tool calls) and TOOL
    spans make the same agent part the in-process capture makes."""
    from langgraph.prebuilt import create_react_agent
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from test_agent_checks import ScriptedChatModel, search, warranty

    import tracescore

    tp = TracerProvider()
    db = tmp_path / "oi.db"
    ts = tracescore.init(db=db, capture="otel", tracer_provider=tp, metrics=CHECKS)
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tp)
    try:
        app = create_react_agent(ScriptedChatModel(), [search, warranty])
        for q in ("clean", "bad"):
            app.invoke({"messages": [("user", q)]})
        wait_for(lambda: ts.otel_capture.records == 2, 30, "both traces built")
        assert ts.flush(30)
    finally:
        inst.uninstrument()
        ts.shutdown(10)
    by_q = {r["query"]: r for r in records(db)}
    assert set(by_q) == {"clean", "bad"}  # one record per request
    agent = json.loads(by_q["bad"]["agent"])
    assert [t["name"] for t in agent["tools"]] == ["search", "warranty"]
    assert [(c["step"], c["name"], c["ok"]) for c in agent["calls"]] == [
        (1, "search", True), (2, "search", True), (3, "web_browse", False),
        (4, "search", False)]
    assert "not a valid tool" in agent["calls"][2]["error"]
    bad_scores = {k: v["value"] for k, v in scores(db, by_q["bad"]["record_id"]).items()}
    clean_scores = {k: v["value"] for k, v in scores(db, by_q["clean"]["record_id"]).items()}
    for check in ("unknown_tool_calls", "invalid_tool_arguments", "repeated_tool_calls"):
        assert bad_scores[check] == 1.0 and clean_scores[check] == 0.0, check
    assert bad_scores["tool_error_rate"] == 0.5 and clean_scores["tool_error_rate"] == 0.0
    assert bad_scores["agent_steps"] == 5.0 and clean_scores["agent_steps"] == 2.0
