"""LlamaIndex agents' tool calls and the agent checks: real ``FunctionAgent`` and
``ReActAgent`` (workflow agents) driven by LlamaIndex's ``MockFunctionCallingLLM``, real
``FunctionTool`` objects, the real pipeline and SQLite.

LlamaIndex's ``FunctionTool`` does not validate its arguments (``search(query=3)`` runs): the
invalid-argument check is the only place that mistake shows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import records, scores
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from tracescore.metrics.agent import AGENT_CHECKS

CHECKS = [m.name for m in AGENT_CHECKS]
ANSWER = "The battery lasts about 80 km."
#: per question, what the model asks for at each step (None: the answer)
SCRIPTS: dict[str, list[tuple[str, dict[str, Any]] | None]] = {
    "clean": [("search", {"query": "battery range"}), None],
    "bad": [("search", {"query": "battery range"}), ("search", {"query": "battery range"}),
            ("web_browse", {"url": "https://example.com"}), ("search", {"query": 42}), None],
}


def _question(messages: list[ChatMessage]) -> tuple[str, int]:
    users = [i for i, m in enumerate(messages) if m.role == MessageRole.USER]
    last = users[-1]
    text = messages[last].content or ""
    q = next(k for k in SCRIPTS if k in text.split()[-1:] or text.strip().endswith(k))
    return q, sum(1 for m in messages[last:] if m.role == MessageRole.ASSISTANT)


def function_calling() -> MockFunctionCallingLLM:
    def reply(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        q, step = _question(messages)
        planned = SCRIPTS[q][step]
        if planned is None:
            return ChatMessage(role="assistant", content=ANSWER)
        return ChatMessage(role="assistant", blocks=[ToolCallBlock(
            tool_call_id=f"call-{step}", tool_name=planned[0], tool_kwargs=planned[1])])

    return MockFunctionCallingLLM(response_generator=reply)


def react() -> MockFunctionCallingLLM:
    """The ReAct text protocol: the question's script as Action lines, one per turn."""

    def reply(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        # (messages[0] is the system prompt, whose format instructions mention Observation)
        q = next(k for k in SCRIPTS if any((m.content or "").strip() == k for m in messages
                                           if m.role == MessageRole.USER))
        step = sum((m.content or "").count("Observation:") for m in messages[1:])
        planned = SCRIPTS[q][step]
        if planned is None:
            return ChatMessage(role="assistant", content=f"Thought: done.\nAnswer: {ANSWER}")
        return ChatMessage(role="assistant", content=(
            f"Thought: I need a tool.\nAction: {planned[0]}\n"
            f"Action Input: {json.dumps(planned[1])}"))

    return MockFunctionCallingLLM(response_generator=reply)


def search(query: str) -> str:
    """Search the e-bike handbook."""
    return f"handbook hits for {query!r}"


@pytest.fixture
def capture(make_ts: Any) -> Iterator[Any]:
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    ts.instrument_llama_index()
    try:
        yield ts
    finally:
        ts.uninstrument_llama_index()


def ask(agent: Any, question: str) -> Any:
    async def go() -> Any:
        return await agent.run(question)

    return asyncio.run(go())


def test_function_agent_bad_run_is_flagged_and_clean_one_is_not(capture: Any,
                                                                 db_path: Any) -> None:
    tools = [FunctionTool.from_defaults(search)]
    for q in ("clean", "bad"):
        ask(FunctionAgent(tools=tools, llm=function_calling()), q)
    assert capture.flush(timeout=60)
    by_q = {r["query"]: r for r in records(db_path)}
    assert set(by_q) == {"clean", "bad"}
    bad = json.loads(by_q["bad"]["agent"])
    assert [t["name"] for t in bad["tools"]] == ["search"]
    assert bad["tools"][0]["schema"]["properties"]["query"]["type"] == "string"
    assert [(c["step"], c["name"], c["ok"]) for c in bad["calls"]] == [
        (1, "search", True), (2, "search", True), (3, "web_browse", False),
        (4, "search", True)]  # FunctionTool ran search(query=42): no validation
    assert "not found" in bad["calls"][2]["error"]
    b = {k: v["value"] for k, v in scores(db_path, by_q["bad"]["record_id"]).items()}
    c = {k: v["value"] for k, v in scores(db_path, by_q["clean"]["record_id"]).items()}
    assert b == {"tool_error_rate": 0.25, "unknown_tool_calls": 1.0,
                 "invalid_tool_arguments": 1.0, "repeated_tool_calls": 1.0,
                 "agent_no_answer": 0.0, "agent_steps": 5.0, "agent_model_calls": 5.0}
    assert c == {"tool_error_rate": 0.0, "unknown_tool_calls": 0.0,
                 "invalid_tool_arguments": 0.0, "repeated_tool_calls": 0.0,
                 "agent_no_answer": 0.0, "agent_steps": 2.0, "agent_model_calls": 2.0}


def test_react_agent_calls_come_from_its_call_tool_steps(capture: Any, db_path: Any) -> None:
    ask(ReActAgent(tools=[FunctionTool.from_defaults(search)], llm=react()), "bad")
    assert capture.flush(timeout=60)
    (rec,) = records(db_path)
    agent = json.loads(rec["agent"])
    # tools described in the prompt: the agent's own tool list is what was offered
    assert [t["name"] for t in agent["tools"]] == ["search"]
    assert [(c["name"], c["ok"]) for c in agent["calls"]] == [
        ("search", True), ("search", True), ("web_browse", False), ("search", True)]
    got = {k: v["value"] for k, v in scores(db_path, rec["record_id"]).items()}
    assert got["unknown_tool_calls"] == 1.0 and got["repeated_tool_calls"] == 1.0
    assert got["invalid_tool_arguments"] == 1.0


def test_agent_workflow_tool_calls(capture: Any, db_path: Any) -> None:
    from llama_index.core.agent.workflow import AgentWorkflow

    agent = FunctionAgent(name="handbook", description="Answers handbook questions.",
                          tools=[FunctionTool.from_defaults(search)], llm=function_calling())
    ask(AgentWorkflow(agents=[agent], root_agent="handbook"), "bad")
    assert capture.flush(timeout=60)
    (rec,) = records(db_path)
    agent_part = json.loads(rec["agent"])
    assert "search" in [t["name"] for t in agent_part["tools"]]
    assert [(c["name"], c["ok"]) for c in agent_part["calls"]] == [
        ("search", True), ("search", True), ("web_browse", False), ("search", True)]
    got = {k: v["value"] for k, v in scores(db_path, rec["record_id"]).items()}
    assert got["unknown_tool_calls"] == 1.0 and got["invalid_tool_arguments"] == 1.0
