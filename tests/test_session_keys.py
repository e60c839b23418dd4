"""Where a record's session key comes from (docs/sessions.md), each with real objects: a
LangChain chain's metadata and configurable keys, the run scope over both, log_record, and
the OTLP conventions (OpenInference ``session.id``, GenAI ``gen_ai.conversation.id``,
OpenLLMetry's association property) on span trees the intake assembles. (LangGraph's
``thread_id`` and LlamaIndex's memory and ``session()`` are covered in test_capture_agents,
test_capture_llama_agents and test_llama_index_capture.)"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import records
from tracescore.examples.langchain_rag import build_chain

from tracescore.intake import records as R
from tracescore.intake.spans import Span

Q = "What battery capacity does the Cargo have?"


@pytest.mark.parametrize("config, want", [
    ({"metadata": {"session_id": "s-1"}}, "s-1"),
    ({"metadata": {"thread_id": "t-1"}}, "t-1"),
    ({"metadata": {"conversation_id": "c-1"}}, "c-1"),
    ({"configurable": {"thread_id": "t-2"}}, "t-2"),
    ({"configurable": {"conversation_id": "c-2"}}, "c-2"),
    ({"metadata": {"tenant": "x"}}, None),
])
def test_langchain_config_keys(make_ts: Any, db_path: Any, config: dict[str, Any],
                               want: str | None) -> None:
    ts, _ = make_ts(metrics=[])
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()], **config})
    assert ts.flush(20)
    [rec] = records(db_path)
    assert rec["session_id"] == want


def test_run_scope_wins_and_reaches_log_record(make_ts: Any, db_path: Any) -> None:
    ts, _ = make_ts(metrics=[])
    with ts.run(session_id="scope", user_id="u-1"):
        build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()],
                                        "metadata": {"thread_id": "meta"}})
        ts.log_record(query="q", answer="a")
    ts.log_record(query="q2", answer="a2", session_id="given", user_id="u-2")
    ts.log_record(query="q3", answer="a3")
    assert ts.flush(20)
    got = [(r["session_id"], r["user_id"]) for r in records(db_path)]
    assert got == [("scope", "u-1"), ("scope", "u-1"), ("given", "u-2"), (None, None)]
    with pytest.raises(TypeError, match="session_id"):
        ts.log_record(query="q", answer="a", session_id=7)  # type: ignore[arg-type]


T = "cd" * 16


def root(key: str, value: str) -> Span:
    attrs = {"openinference.span.kind": "CHAIN", "input.value": "q?", "output.value": "a",
             key: value}
    return Span(T, "1" * 16, "", "chain", 0, 10, attrs, [], None, {}, "test")


@pytest.mark.parametrize("key", ["session.id", "gen_ai.conversation.id",
                                 "traceloop.association.properties.session_id"])
def test_otlp_session_conventions(key: str) -> None:
    llm = Span(T, "2" * 16, "1" * 16, "llm", 1, 9, {"openinference.span.kind": "LLM"}, [],
               None, {}, "test")
    [b] = R.build([root(key, "conv-7"), llm])
    assert b.record.session_id == "conv-7"
