"""Capture, round 4 (LangChain / LangGraph): derived evidence (sub-agents as tools, a task
tool over a sub-graph, ``Send`` map-reduce), structured answers, the answering call's model,
``with_fallbacks`` as one request.

Real framework objects (``create_agent``, ``ToolStrategy``, LangGraph ``StateGraph`` and
``Send``, ``with_fallbacks``, ``InMemoryVectorStore``) with fake models; per-call handler and
process-wide instrumentation; sync and async. Expected values are worked out from the same
objects outside any captured run.
"""

from __future__ import annotations

import asyncio
import json
import operator
from typing import Annotated, Any, TypedDict

import pytest
import test_capture_round3_langchain as round3
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tools import create_retriever_tool, tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from pydantic import BaseModel
from test_capture_round3_langchain import ANSWER, PROMPT, STORE, Q, Scripted, ctx, one

#: the per-call handler and process-wide instrumentation, as round 3's tests use them
capture = round3.capture


class Named(Scripted):
    """A scripted chat model that reports a model name (``invocation_params``)."""

    model_name: str = "fake"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}


class RateLimitError(Exception):
    """What a provider's client raises when the primary model is rate-limited."""


def _limited(ms: list[BaseMessage]) -> Any:
    raise RateLimitError("429: rate limited")


def run(target: Any, inputs: Any, config: dict, how: str) -> Any:
    if how == "ainvoke":
        return asyncio.run(target.ainvoke(inputs, config=config))
    return target.invoke(inputs, config=config)


def texts(docs: list[Any]) -> list[str]:
    return [d.page_content for d in docs]


RETRIEVER = STORE.as_retriever(search_kwargs={"k": 3})
SUB_Q = "battery range of the Trail bike"
SUB_HITS = STORE.similarity_search(SUB_Q, k=3)
RESEARCH = "Research notes: the Trail bike battery lasts 80 km."


# -- 1. derived evidence: a sub-agent as a tool -----------------------------------------------
def _sub_rule(ms: list[BaseMessage]) -> Any:
    if ms[-1].type == "human":
        return AIMessage(content="", tool_calls=[
            {"name": "search_docs", "args": {"query": SUB_Q}, "id": "sub-1"}])
    return RESEARCH


def _supervisor_rule(tool_name: str, args: dict) -> Any:
    def rule(ms: list[BaseMessage]) -> Any:
        if ms[-1].type == "human":
            return AIMessage(content="", tool_calls=[
                {"name": tool_name, "args": args, "id": "sup-1"}])
        assert ms[-1].type == "tool" and ms[-1].tool_call_id == "sup-1"
        return ANSWER
    return rule


def sub_agent_supervisor() -> Any:
    search = create_retriever_tool(RETRIEVER, "search_docs", "Search the bike docs.")
    researcher = create_agent(Named(rule=_sub_rule, model_name="sub-model"), tools=[search],
                              name="researcher")

    @tool
    def research(question: str) -> str:
        """Ask the research sub-agent."""
        out = researcher.invoke({"messages": [("user", question)]})
        return out["messages"][-1].content

    @tool
    async def aresearch(question: str) -> str:
        """Ask the research sub-agent."""
        out = await researcher.ainvoke({"messages": [("user", question)]})
        return out["messages"][-1].content

    aresearch.name = "research"
    return research, aresearch


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_sub_agent_as_tool_keeps_the_documents_its_reply_came_from(
        capture: Any, db_path: Any, how: str) -> None:
    ts, _, config = capture
    sync_tool, async_tool = sub_agent_supervisor()
    supervisor = create_agent(
        Named(rule=_supervisor_rule("research", {"question": SUB_Q}), model_name="sup-model"),
        tools=[async_tool if how == "ainvoke" else sync_tool])
    out = run(supervisor, {"messages": [("user", Q)]}, config, how)
    assert out["messages"][-1].content == ANSWER
    rec = one(ts, db_path)
    assert rec["query"] == Q and rec["answer"] == ANSWER and rec["error"] is None
    # the supervisor saw the sub-agent's reply, written from these three documents
    assert ctx(rec) == [(d.page_content, d.id, "VectorStoreRetriever") for d in SUB_HITS]
    assert [(c["text"], c["kept"], c.get("via")) for c in rec["candidates"]] == [
        (d.page_content, True, "research (tool reply)") for d in SUB_HITS]
    assert rec["model"] == "sup-model"
    assert SUB_Q in json.loads(rec["retrieval_queries"])
    scores = {s["name"] for s in _scores(db_path)}
    assert {"answer_m", "ctx_m"} <= scores


def _scores(db_path: Any) -> list[dict[str, Any]]:
    from helpers import rows

    return rows(db_path, "SELECT name, value FROM scores")


# -- 1b. a task tool that dispatches to a sub-graph ---------------------------------------------
class Task(TypedDict, total=False):
    question: str
    context: list[Any]
    answer: str


def task_subgraph(llm: Any) -> Any:
    def retrieve(state: Task) -> dict:
        return {"context": STORE.similarity_search(state["question"], k=3)}

    def generate(state: Task) -> dict:
        notes = "\n".join(d.page_content for d in state["context"])
        return {"answer": llm.invoke(f"Write research notes from:\n{notes}").content}

    g = StateGraph(Task)
    g.add_node("retrieve", retrieve)
    g.add_node("generate", generate)
    g.add_edge(START, "retrieve")
    g.add_edge("retrieve", "generate")
    g.add_edge("generate", END)
    return g.compile()


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_task_tool_over_a_subgraph_keeps_the_subgraph_documents(
        capture: Any, db_path: Any, how: str) -> None:
    ts, _, config = capture
    sub = task_subgraph(Named(rule=lambda ms: RESEARCH, model_name="sub-model"))

    @tool
    def task(description: str) -> str:
        """Dispatch a research task to the research sub-graph."""
        return sub.invoke({"question": description})["answer"]

    @tool("task")
    async def atask(description: str) -> str:
        """Dispatch a research task to the research sub-graph."""
        return (await sub.ainvoke({"question": description}))["answer"]

    supervisor = create_agent(
        Named(rule=_supervisor_rule("task", {"description": SUB_Q}), model_name="sup-model"),
        tools=[atask if how == "ainvoke" else task])
    run(supervisor, {"messages": [("user", Q)]}, config, how)
    rec = one(ts, db_path)
    assert rec["query"] == Q and rec["answer"] == ANSWER
    assert ctx(rec) == [(d.page_content, d.id, "retrieve") for d in SUB_HITS]
    assert [(c["kept"], c.get("via")) for c in rec["candidates"]] == [(True, "task (tool reply)")] * 3
    assert rec["model"] == "sup-model"


# -- 1c. LangGraph Send map-reduce -------------------------------------------------------------
SUBS = ["weight", "battery"]
BRANCH_RETRIEVER = STORE.as_retriever(search_kwargs={"k": 2})
BRANCH_HITS = [STORE.similarity_search(s, k=2) for s in SUBS]


class MapReduce(TypedDict, total=False):
    question: str
    summaries: Annotated[list[str], operator.add]
    answer: str


def map_reduce(summariser: Any, answerer_llm: Any, is_async: bool) -> Any:
    def fan_out(state: MapReduce) -> list[Send]:
        return [Send("research", {"sub": s, "i": i}) for i, s in enumerate(SUBS)]

    def research(state: dict) -> dict:
        docs = BRANCH_RETRIEVER.invoke(state["sub"])
        text = summariser.invoke("Summarise:\n" + "\n".join(texts(docs))).content
        return {"summaries": [f"{state['i']}: {text}"]}

    async def aresearch(state: dict) -> dict:
        docs = await BRANCH_RETRIEVER.ainvoke(state["sub"])
        text = (await summariser.ainvoke("Summarise:\n" + "\n".join(texts(docs)))).content
        return {"summaries": [f"{state['i']}: {text}"]}

    def final(state: MapReduce) -> dict:
        notes = "\n".join(sorted(state["summaries"]))
        return {"answer": answerer_llm.invoke(f"Answer {state['question']} from:\n{notes}").content}

    g = StateGraph(MapReduce)
    g.add_node("research", aresearch if is_async else research)
    g.add_node("final", final)
    g.add_conditional_edges(START, fan_out, ["research"])
    g.add_edge("research", "final")
    g.add_edge("final", END)
    return g.compile()


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_send_map_reduce_keeps_every_branch(capture: Any, db_path: Any, how: str) -> None:
    ts, _, config = capture
    every = [d.page_content for hits in BRANCH_HITS for d in hits]
    assert len(set(every)) == 4  # four different documents, two per branch
    graph = map_reduce(Named(rule=lambda ms: "a summary", model_name="summary-model"),
                       Named(rule=lambda ms: ANSWER, model_name="answer-model"),
                       how == "ainvoke")
    out = run(graph, {"question": Q}, config, how)
    assert out["answer"] == ANSWER
    rec = one(ts, db_path)
    assert rec["query"] == Q and rec["answer"] == ANSWER
    # every branch's documents, branch by branch (the order of the Send calls)
    assert [c["text"] for c in rec["contexts"]] == every
    assert [(c["kept"], c.get("via")) for c in rec["candidates"]] == [
        (True, "research (model text)")] * 4
    assert rec["model"] == "answer-model"


# -- 2. structured answers ---------------------------------------------------------------------
class Cited(BaseModel):
    answer: str
    sources: list[str]


class Rating(BaseModel):
    stars: int
    verdict: str
    reason: str


def _structured_agent_rule(ms: list[BaseMessage]) -> Any:
    if ms[-1].type == "human":
        return AIMessage(content="", tool_calls=[
            {"name": "search_docs", "args": {"query": Q}, "id": "s-1"}])
    return AIMessage(content="", tool_calls=[
        {"name": "Cited", "args": {"answer": ANSWER, "sources": ["d0"]}, "id": "out-1"}])


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_tool_strategy_agent_answer_is_the_structured_response(
        capture: Any, db_path: Any, how: str) -> None:
    ts, _, config = capture
    search = create_retriever_tool(RETRIEVER, "search_docs", "Search the bike docs.")
    agent = create_agent(Named(rule=_structured_agent_rule, model_name="m"), tools=[search],
                         response_format=ToolStrategy(Cited))
    out = run(agent, {"messages": [("user", Q)]}, config, how)
    assert out["structured_response"] == Cited(answer=ANSWER, sources=["d0"])
    rec = one(ts, db_path)
    assert rec["answer"] == ANSWER  # the schema's text field
    assert rec["metadata"]["structured_answer"] == {
        "answer": ANSWER, "sources": ["d0"]}
    hits = STORE.similarity_search(Q, k=3)
    assert [c["text"] for c in rec["contexts"]] == texts(hits)
    assert {s["name"] for s in _scores(db_path)} == {"answer_m", "ctx_m"}


STRUCT_PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Rate the answer from the context:\n{context}"), ("human", "{question}")])


class JsonModel(Named):
    """``with_structured_output`` as providers do it: the model's JSON reply parsed."""


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize("schema", ["text_field", "no_text_field"])
def test_with_structured_output_chain_answer(capture: Any, db_path: Any, how: str,
                                             schema: str) -> None:
    ts, _, config = capture
    if schema == "text_field":
        value: BaseModel = Cited(answer=ANSWER, sources=["d0", "d1"])
    else:
        value = Rating(stars=4, verdict="good", reason="It cites the manual.")
    llm = Named(rule=lambda ms: value.model_dump_json(), model_name="json-model")
    join = RunnableLambda(lambda docs: "\n".join(texts(docs)))
    chain = ({"context": RETRIEVER | join, "question": RunnablePassthrough()}
             | STRUCT_PROMPT | llm.with_structured_output(type(value)))
    assert run(chain, Q, config, how) == value
    rec = one(ts, db_path)
    stored = rec["metadata"]["structured_answer"]
    assert stored == value.model_dump()
    if schema == "text_field":
        assert rec["answer"] == ANSWER
    else:  # no field a user would call the answer: the JSON is the answer
        assert json.loads(rec["answer"]) == value.model_dump()
    assert rec["model"] == "json-model"
    assert {s["name"] for s in _scores(db_path)} == {"answer_m", "ctx_m"}


# -- 3. the answering call's model --------------------------------------------------------------
def _rag(llm: Any) -> Any:
    join = RunnableLambda(lambda docs: "\n".join(texts(docs)))
    return ({"context": RETRIEVER | join, "question": RunnablePassthrough()}
            | PROMPT | llm | StrOutputParser())


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_model_fallback_records_the_backup_model(capture: Any, db_path: Any, how: str) -> None:
    ts, _, config = capture
    primary = Named(rule=_limited, model_name="primary-model")
    backup = Named(rule=lambda ms: ANSWER, model_name="backup-model")
    assert run(_rag(primary.with_fallbacks([backup])), Q, config, how) == ANSWER
    rec = one(ts, db_path)
    assert rec["model"] == "backup-model" and rec["error"] is None
    assert rec["answer"] == ANSWER
    assert [c["text"] for c in rec["contexts"]] == texts(STORE.similarity_search(Q, k=3))


REWRITE = ChatPromptTemplate.from_messages([("human", "Rewrite for search: {question}")])


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_query_rewriter_model_is_not_the_answering_model(
        capture: Any, db_path: Any, how: str) -> None:
    ts, _, config = capture
    rewriter = Named(rule=lambda ms: SUB_Q, model_name="rewriter-model")
    answerer_llm = Named(rule=lambda ms: ANSWER, model_name="answer-model")
    join = RunnableLambda(lambda docs: "\n".join(texts(docs)))
    rewrite = REWRITE | rewriter | StrOutputParser()
    chain = (RunnablePassthrough.assign(search=rewrite)
             | {"context": (lambda s: s["search"]) | RETRIEVER | join,
                "question": lambda s: s["question"]}
             | PROMPT | answerer_llm | StrOutputParser())
    assert run(chain, {"question": Q}, config, how) == ANSWER
    rec = one(ts, db_path)
    assert rec["model"] == "answer-model"
    assert [c["text"] for c in rec["contexts"]] == texts(SUB_HITS)


# -- 4. chain.with_fallbacks([backup_chain]): one request, one record ---------------------------
@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_chain_fallback_is_one_record(capture: Any, db_path: Any, how: str) -> None:
    ts, exporter, config = capture
    primary = _rag(Named(rule=_limited, model_name="primary-model"))
    backup = _rag(Named(rule=lambda ms: ANSWER, model_name="backup-model"))
    assert run(primary.with_fallbacks([backup]), Q, config, how) == ANSWER
    rec = one(ts, db_path)  # exactly one record
    assert rec["error"] is None and rec["answer"] == ANSWER and rec["query"] == Q
    assert rec["model"] == "backup-model"
    assert [c["text"] for c in rec["contexts"]] == texts(STORE.similarity_search(Q, k=3))
    # one trace: the failed primary chain's spans sit under the request's root span
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert [s.name for s in roots] == ["RunnableWithFallbacks"]
    assert ts.stats()["capture"].get("unknown_parent", 0) == 0
