"""LlamaIndex agents and workflows: one record per user request, not one per tool call.

Real ``FunctionAgent`` / ``ReActAgent`` / ``AgentWorkflow`` objects driven by LlamaIndex's
``MockFunctionCallingLLM`` (a scripted response generator), real ``QueryEngineTool`` /
``RetrieverTool`` over the example handbook index, and the docs' custom RAG ``Workflow``
(retrieve step, synthesize step, ``StopEvent(result=...)``), streamed and not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import AGENT_ANSWER as ANSWER
from helpers import AGENT_Q1 as Q1
from helpers import AGENT_Q2 as Q2
from helpers import FULL, TOOL_QUERY, records
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import Memory
from llama_index.core.response_synthesizers import CompactAndRefine
from llama_index.core.schema import NodeWithScore
from llama_index.core.tools import QueryEngineTool, RetrieverTool
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step
from tracescore.examples.llama_index_rag import ExtractiveLLM, build_index, build_query_engine
from tracescore.integrations import llama_index as li

from tracescore import attributes as A
from tracescore.testing import rag_roots

RETRIEVER = "VectorIndexRetriever"

INDEX = build_index()
#: what the tools' retrievers return, worked out before LlamaIndex is instrumented
_RETRIEVED = {q: [n.node.node_id for n in INDEX.as_retriever(similarity_top_k=k).retrieve(q)]
              for q in (*ANSWER, *TOOL_QUERY.values()) for k in (3,)}


def _question(messages: list[ChatMessage]) -> str:
    users = [m.content or "" for m in messages if m.role == MessageRole.USER]
    return next((q for u in reversed(users) for q in ANSWER if q in u), users[-1])


def function_calling(tool: str) -> MockFunctionCallingLLM:
    """Calls ``tool`` on the user's turn, answers once the tool's result is in."""

    def reply(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        q = _question(messages)
        if messages[-1].role == MessageRole.TOOL:
            return ChatMessage(role="assistant", content=ANSWER[q])
        return ChatMessage(role="assistant", blocks=[ToolCallBlock(
            tool_call_id="call-1", tool_name=tool, tool_kwargs={"input": TOOL_QUERY[q]})])

    return MockFunctionCallingLLM(response_generator=reply)


def react(tool: str) -> MockFunctionCallingLLM:
    """The ReAct text protocol: an Action first, the Answer after the Observation."""

    def reply(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        q = _question(messages)
        if any("Observation:" in (m.content or "") for m in messages[1:]):
            return ChatMessage(role="assistant",
                               content=f"Thought: I can answer now.\nAnswer: {ANSWER[q]}")
        return ChatMessage(role="assistant", content=(
            f"Thought: I need to search.\nAction: {tool}\n"
            f'Action Input: {{"input": "{TOOL_QUERY[q]}"}}'))

    return MockFunctionCallingLLM(response_generator=reply)


def query_engine_tool() -> QueryEngineTool:
    return QueryEngineTool.from_defaults(build_query_engine(INDEX), name="handbook",
                                         description="Answers questions about the handbook.")


def retriever_tool() -> RetrieverTool:
    return RetrieverTool.from_defaults(INDEX.as_retriever(similarity_top_k=3), name="search",
                                       description="Finds handbook pages.")


class RetrieverEvent(Event):
    nodes: list[NodeWithScore]


class RAGWorkflow(Workflow):
    """The LlamaIndex docs' RAG workflow: retrieve, then synthesize (streamed or not)."""

    def __init__(self, streaming: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.streaming = streaming

    @step
    async def retrieve(self, ctx: Context, ev: StartEvent) -> RetrieverEvent | None:
        query = ev.get("query")
        index = ev.get("index")
        if not query:
            return None
        await ctx.store.set("query", query)
        nodes = await index.as_retriever(similarity_top_k=3).aretrieve(query)
        return RetrieverEvent(nodes=nodes)

    @step
    async def synthesize(self, ctx: Context, ev: RetrieverEvent) -> StopEvent:
        summarizer = CompactAndRefine(llm=ExtractiveLLM(), streaming=self.streaming)
        query = await ctx.store.get("query", default=None)
        response = await summarizer.asynthesize(query, nodes=ev.nodes)
        return StopEvent(result=response)


def agents() -> dict[str, Any]:
    return {
        "function_agent_query_engine_tool":
            lambda: FunctionAgent(tools=[query_engine_tool()], llm=function_calling("handbook")),
        "function_agent_retriever_tool":
            lambda: FunctionAgent(tools=[retriever_tool()], llm=function_calling("search")),
        "react_agent_retriever_tool":
            lambda: ReActAgent(tools=[retriever_tool()], llm=react("search")),
        "agent_workflow":
            lambda: AgentWorkflow(agents=[FunctionAgent(
                name="helper", description="Answers handbook questions.",
                tools=[query_engine_tool()], llm=function_calling("handbook"))]),
    }


AGENTS = agents()


def expected(shape: str, q: str) -> list[tuple[str, str]]:
    if "retriever_tool" in shape:
        # RetrieverTool hands its retriever the formatted tool input
        return [(i, RETRIEVER) for i in _RETRIEVED_TOOL[q]]
    return [(i, RETRIEVER) for i in _RETRIEVED[TOOL_QUERY[q]]]


#: RetrieverTool turns the tool kwargs into the query string "\ninput is <value>\n"
_RETRIEVED_TOOL = {q: [n.node.node_id for n in INDEX.as_retriever(similarity_top_k=3).retrieve(
    f"\ninput is {TOOL_QUERY[q]}\n")] for q in ANSWER}


@pytest.fixture
def ts_li(make_ts: Any) -> Iterator[tuple[Any, Any]]:
    ts, exporter = make_ts(metrics=[FULL], hold_seconds=30)
    ts.instrument_llama_index()
    try:
        yield ts, exporter
    finally:
        li.uninstrument()


async def call(agent: Any, how: str, q: str, **kwargs: Any) -> Any:
    handler = agent.run(q, **kwargs)
    if how == "stream_events":
        async for _ in handler.stream_events():
            pass
    return await handler


def check(ts: Any, exporter: Any, db: Any, shape: str, questions: list[str],
          session: str | None = None) -> list[dict[str, Any]]:
    assert ts.flush(20)
    recs = records(db)
    assert sorted(r["query"] for r in recs) == sorted(questions)
    for rec in recs:
        q = rec["query"]
        assert rec["answer"] == ANSWER[q]
        assert [(c["id"], c["source"]) for c in rec["contexts"]] == expected(shape, q)
        assert rec["session_id"] == session
        assert rec["source"] == "llama_index" and rec["error"] is None
    roots = rag_roots(exporter)
    assert len(roots) == len(questions)
    for root in roots:
        assert root.attributes[A.score_attribute("full")] == 1.0
        assert root.attributes[A.SPAN_KIND] == A.KIND_CHAIN
    return recs


@pytest.mark.parametrize("how", ["await", "stream_events"])
@pytest.mark.parametrize("shape", list(AGENTS))
def test_agent_is_one_record_per_request(shape: str, how: str, ts_li: Any,
                                         db_path: Any) -> None:
    ts, exporter = ts_li
    out = asyncio.run(call(AGENTS[shape](), how, Q1))
    assert str(out) == ANSWER[Q1]
    [rec] = check(ts, exporter, db_path, shape, [Q1])
    # the tool's input is evidence too, kept apart from the user's message
    assert TOOL_QUERY[Q1] in rec["retrieval_queries"]
    tools = [s for s in exporter.get_finished_spans()
             if s.attributes.get(A.SPAN_KIND) == A.KIND_TOOL]
    assert len(tools) == 1 and tools[0].context.trace_id == rag_roots(exporter)[0].context.trace_id


def test_memory_session_and_two_turns(ts_li: Any, db_path: Any) -> None:
    ts, exporter = ts_li
    agent = AGENTS["function_agent_query_engine_tool"]()
    memory = Memory.from_defaults(session_id="conv-9")

    async def two_turns() -> None:
        await call(agent, "await", Q1, memory=memory)
        await call(agent, "await", Q2, memory=memory)

    asyncio.run(two_turns())
    check(ts, exporter, db_path, "function_agent_query_engine_tool", [Q1, Q2],
          session="conv-9")
    assert len(memory.get_all()) >= 4  # both turns went through the memory


def test_concurrent_agent_runs_do_not_mix(ts_li: Any, db_path: Any) -> None:
    ts, exporter = ts_li
    agent = AGENTS["function_agent_query_engine_tool"]()

    async def both() -> None:
        await asyncio.gather(call(agent, "await", Q1), call(agent, "await", Q2))

    asyncio.run(both())
    check(ts, exporter, db_path, "function_agent_query_engine_tool", [Q1, Q2])


@pytest.mark.parametrize("streaming", [False, True])
def test_rag_workflow_records_its_stop_event_result(streaming: bool, ts_li: Any,
                                                    db_path: Any) -> None:
    ts, exporter = ts_li

    async def go() -> str:
        with ts.run(ground_truths=["750 Wh"]) as run:
            result = await RAGWorkflow(streaming=streaming).run(query=Q1, index=INDEX)
        if streaming:
            text = "".join([t async for t in result.async_response_gen()])
        else:
            text = str(result)
        assert run.trace_id is not None
        return text

    answer = asyncio.run(go())
    assert ts.flush(20)
    [rec] = records(db_path)
    assert (rec["query"], rec["answer"]) == (Q1, answer)
    assert answer.startswith("The Commuter and the Trail ship with a 500 Wh battery")
    assert [(c["id"], c["source"]) for c in rec["contexts"]] == \
        [(i, RETRIEVER) for i in _RETRIEVED[Q1]]
    assert rec["ground_truths"] == ["750 Wh"]
    assert rec["metadata"] == {}  # the start-event summary tag is not the app's metadata
    [root] = rag_roots(exporter)
    assert root.name == "RAGWorkflow.run"
    assert root.attributes[A.score_attribute("full")] == 1.0
