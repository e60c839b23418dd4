"""LangGraph graphs and LangChain 1.x agents: one correct record per user request.

Real ``create_agent`` / ``create_react_agent`` / ``StateGraph`` objects with a scripted
tool-calling fake chat model, the example app's BM25 retriever and a real in-memory vector
store; real pipeline, SQLite and in-memory span export. Each app shape is checked for the exact
query, contexts (text, id, source, order), answer, one record per request, and the score on the
root span; the agent shape through every way of calling it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

import pytest
from helpers import AGENT_ANSWER as ANSWER
from helpers import AGENT_Q1 as Q1
from helpers import AGENT_Q2 as Q2
from helpers import FULL, TOOL_QUERY, records
from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, dynamic_prompt
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import create_retriever_tool, tool
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import create_react_agent
from tracescore.examples.langchain_rag import KeywordRetriever, load_corpus

from tracescore import attributes as A
from tracescore.testing import rag_roots


class ToolCallingModel(GenericFakeChatModel):
    """A fake chat model that calls ``tool`` on the user's turn and answers after the result.

    What it asks and answers depends on the turn's user message, so concurrent runs and two
    turns of one thread are told apart. ``bind_tools`` returns itself (the agent binds tools).
    """

    messages: Iterator[Any] = iter(())
    tool: str = "retrieve"
    disable_streaming: bool = True  # the scripted reply is one message on every path

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        question = next(m.text for m in reversed(messages) if m.type == "human")
        question = next((q for q in ANSWER if q in question), question)
        if messages[-1].type == "tool" or not self.tool:
            reply = AIMessage(content=ANSWER[question])
        else:
            reply = AIMessage(content="", tool_calls=[{
                "name": self.tool, "args": {"query": TOOL_QUERY[question]},
                "id": f"call-{uuid.uuid4().hex[:8]}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def vector_store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=64))
    store.add_documents(load_corpus())
    return store


STORE = vector_store()
BM25 = KeywordRetriever()
#: the retriever's results, worked out before any test instruments LangChain (a retriever
#: called inside a test with instrumentation on would be a run of its own)
_BM25 = {q: BM25.invoke(q) for q in (*ANSWER, *TOOL_QUERY.values())}


def expect(docs: Sequence[Document], source: str) -> list[tuple[str, str | None, str]]:
    return [(d.page_content, d.id, source) for d in docs]


def got(rec: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    return [(c["text"], c["id"], c["source"]) for c in rec["contexts"]]


# -- the app shapes ---------------------------------------------------------------------------
def artifact_agent() -> Any:
    """LangChain's RAG-agent tutorial: a content_and_artifact tool over a vector store."""

    @tool(response_format="content_and_artifact")
    def retrieve(query: str) -> tuple[str, list[Document]]:
        """Retrieve information related to a query."""
        docs = STORE.similarity_search(query, k=2)
        return "\n\n".join(d.page_content for d in docs), docs

    return create_agent(ToolCallingModel(), tools=[retrieve])


def react_retriever_tool_agent() -> Any:
    """langgraph.prebuilt's ReAct agent with a retriever tool whose artifact holds the same
    documents the retriever callback reported (seen twice, recorded once)."""
    t = create_retriever_tool(BM25, "retrieve", "Search the handbook.",
                              response_format="content_and_artifact")
    return create_react_agent(ToolCallingModel(), [t])


class RagState(TypedDict, total=False):
    question: str
    context: list[Document]
    answer: str


def two_step_graph() -> Any:
    """LangGraph's two-step RAG tutorial: a retrieve node puts vector-store documents into
    the state (no retriever callback), a generate node answers."""
    llm = ToolCallingModel(tool="")

    def retrieve(state: RagState) -> RagState:
        return {"context": STORE.similarity_search(state["question"], k=3)}

    def generate(state: RagState) -> RagState:
        text = "\n\n".join(d.page_content for d in state["context"])
        reply = llm.invoke([("system", text), ("human", state["question"])])
        return {"answer": str(reply.content)}

    g = StateGraph(RagState).add_sequence([retrieve, generate])
    g.add_edge(START, "retrieve")
    return g.compile()


def nested_graph() -> Any:
    """The two-step graph as a subgraph node of an outer graph: still one record."""
    outer = StateGraph(RagState)
    outer.add_node("rag", two_step_graph())
    outer.add_edge(START, "rag")
    return outer.compile()


def prompt_middleware_agent() -> Any:
    """create_agent with the tutorial's @dynamic_prompt middleware, retrieving through a
    retriever (whose callbacks run inside the model node)."""

    @dynamic_prompt
    def prompt_with_context(request: ModelRequest) -> str:
        docs = BM25.invoke(request.state["messages"][-1].text)
        return "Use this context:\n\n" + "\n\n".join(d.page_content for d in docs)

    return create_agent(ToolCallingModel(tool=""), tools=[], middleware=[prompt_with_context])


class ContextState(AgentState):
    context: list[Document]


class RetrieveDocumentsMiddleware(AgentMiddleware[ContextState]):
    """The tutorial's before_model middleware: vector-store documents into the state, and the
    user's message rewritten with them (the record keeps the user's own wording)."""

    state_schema = ContextState

    def before_model(self, state: Any, runtime: Any = None) -> dict[str, Any] | None:
        last = state["messages"][-1]
        docs = STORE.similarity_search(last.text, k=2)
        joined = "\n\n".join(d.page_content for d in docs)
        return {"messages": [last.model_copy(update={"content": f"{joined}\n\n{last.text}"})],
                "context": docs}


def state_middleware_agent() -> Any:
    return create_agent(ToolCallingModel(tool=""), tools=[],
                        middleware=[RetrieveDocumentsMiddleware()])


def expected_contexts(shape: str, question: str) -> list[tuple[str, str | None, str]]:
    if shape == "artifact_agent":
        return expect(STORE.similarity_search(TOOL_QUERY[question], k=2), "retrieve")
    if shape == "react_retriever_tool":
        return expect(_BM25[TOOL_QUERY[question]], "KeywordRetriever")
    if shape in ("two_step_graph", "nested_graph"):
        return expect(STORE.similarity_search(question, k=3), "retrieve")
    if shape == "prompt_middleware":
        return expect(_BM25[question], "KeywordRetriever")
    if shape == "state_middleware":
        return expect(STORE.similarity_search(question, k=2),
                      "RetrieveDocumentsMiddleware.before_model")
    raise AssertionError(shape)


SHAPES = {
    "artifact_agent": artifact_agent,
    "react_retriever_tool": react_retriever_tool_agent,
    "two_step_graph": two_step_graph,
    "nested_graph": nested_graph,
    "prompt_middleware": prompt_middleware_agent,
    "state_middleware": state_middleware_agent,
}


def user_input(shape: str, question: str, form: str = "tuple") -> dict[str, Any]:
    if shape in ("two_step_graph", "nested_graph"):
        return {"question": question}
    message: Any = {"tuple": ("user", question), "dict": {"role": "user", "content": question},
                    "message": HumanMessage(question), "str": question}[form]
    return {"messages": message if form == "str" else [message]}


@pytest.fixture(params=["handler", "instrument"])
def capture(request: pytest.FixtureRequest, make_ts: Any) -> Iterator[tuple[Any, Any, dict]]:
    """(ts, exporter, config): per-call handler or process-wide instrumentation."""
    ts, exporter = make_ts(metrics=[FULL], hold_seconds=30)
    if request.param == "handler":
        yield ts, exporter, {"callbacks": [ts.langchain_handler()]}
        return
    ts.instrument_langchain()
    try:
        yield ts, exporter, {}
    finally:
        ts.uninstrument_langchain()


def run_app(app: Any, inputs: Any, config: dict[str, Any], how: str) -> None:
    """Call a compiled graph the way ``how`` says, consuming every stream to its end."""
    if how == "invoke":
        app.invoke(inputs, config=config)
    elif how == "ainvoke":
        asyncio.run(app.ainvoke(inputs, config=config))
    elif how.startswith("stream:"):
        modes = how.split(":", 1)[1].split("+")
        for _ in app.stream(inputs, config=config,
                            stream_mode=modes if len(modes) > 1 else modes[0]):
            pass
    elif how.startswith("astream:"):
        async def consume() -> None:
            async for _ in app.astream(inputs, config=config, stream_mode=how.split(":")[1]):
                pass
        asyncio.run(consume())
    else:
        raise AssertionError(how)


def check(ts: Any, exporter: Any, db: Any, shape: str, questions: Sequence[str],
          session: str | None = None) -> list[dict[str, Any]]:
    """One record per question, each exactly right, each scored on its own root span."""
    assert ts.flush(20)
    recs = records(db)
    assert sorted(r["query"] for r in recs) == sorted(questions)
    for rec in recs:
        q = rec["query"]
        assert rec["answer"] == ANSWER[q]
        assert got(rec) == expected_contexts(shape, q)
        assert rec["session_id"] == session
        assert rec["error"] is None
    roots = rag_roots(exporter)
    assert len(roots) == len(questions)
    assert {f"{s.context.trace_id:032x}" for s in roots} == {r["trace_id"] for r in recs}
    for root in roots:
        assert root.attributes[A.score_attribute("full")] == 1.0
        assert root.parent is None
    return recs


# -- every shape, both ways of attaching ---------------------------------------------------------
@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_shape_gives_one_exact_record(shape: str, capture: Any, db_path: Any) -> None:
    ts, exporter, config = capture
    run_app(SHAPES[shape](), user_input(shape, Q1), config, "invoke")
    [rec] = check(ts, exporter, db_path, shape, [Q1])
    if shape in ("artifact_agent", "react_retriever_tool"):
        # the agent's own wording of the search, kept apart from the user's question
        assert rec["retrieval_queries"] == f'["{TOOL_QUERY[Q1]}"]'


# -- the agent shape through every way of calling it --------------------------------------------
CALLS = ["invoke", "ainvoke", "stream:values", "stream:updates", "stream:messages",
         "stream:updates+messages+custom", "stream:debug", "stream:tasks+checkpoints",
         "astream:values", "astream:messages"]


@pytest.mark.parametrize("how", CALLS)
def test_agent_every_call_and_stream_mode(how: str, capture: Any, db_path: Any) -> None:
    ts, exporter, config = capture
    run_app(artifact_agent(), user_input("artifact_agent", Q1), config, how)
    check(ts, exporter, db_path, "artifact_agent", [Q1])


@pytest.mark.parametrize("form", ["dict", "message", "str"])
def test_user_message_forms(form: str, make_ts: Any, db_path: Any) -> None:
    ts, exporter = make_ts(metrics=[FULL], hold_seconds=30)
    config = {"callbacks": [ts.langchain_handler()]}
    run_app(artifact_agent(), user_input("artifact_agent", Q1, form), config, "invoke")
    check(ts, exporter, db_path, "artifact_agent", [Q1])


@pytest.mark.parametrize("how", ["invoke", "astream:updates"])
def test_two_turns_on_one_thread(how: str, capture: Any, db_path: Any) -> None:
    """Turn two's record has turn two's message and answer, not the history's."""
    ts, exporter, config = capture
    agent = create_agent(ToolCallingModel(), tools=[artifact_agent_tool()],
                         checkpointer=InMemorySaver())
    cfg = {**config, "configurable": {"thread_id": "thread-7"}}
    run_app(agent, user_input("artifact_agent", Q1), cfg, how)
    run_app(agent, user_input("artifact_agent", Q2), cfg, how)
    check(ts, exporter, db_path, "artifact_agent", [Q1, Q2], session="thread-7")
    assert len(agent.get_state(cfg).values["messages"]) == 8  # the history was there


def artifact_agent_tool() -> Any:
    @tool(response_format="content_and_artifact")
    def retrieve(query: str) -> tuple[str, list[Document]]:
        """Retrieve information related to a query."""
        docs = STORE.similarity_search(query, k=2)
        return "\n\n".join(d.page_content for d in docs), docs

    return retrieve


def test_concurrent_runs_do_not_mix(capture: Any, db_path: Any) -> None:
    ts, exporter, config = capture
    agent = artifact_agent()
    barrier = threading.Barrier(2)

    def ask(q: str) -> None:
        barrier.wait(5)
        agent.invoke(user_input("artifact_agent", q), config=config)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(ask, [Q1, Q2]))

    async def both() -> None:
        await asyncio.gather(*(agent.ainvoke(user_input("artifact_agent", q), config=config)
                               for q in (Q1, Q2)))

    asyncio.run(both())
    check(ts, exporter, db_path, "artifact_agent", [Q1, Q2, Q1, Q2])


def test_message_history_session_id(make_ts: Any, db_path: Any) -> None:
    """RunnableWithMessageHistory's configurable session_id is the record's session."""
    ts, exporter = make_ts(metrics=[FULL], hold_seconds=30)
    histories: dict[str, InMemoryChatMessageHistory] = {}
    prompt = ChatPromptTemplate.from_messages([
        ("system", "{context}"), MessagesPlaceholder("history"), ("human", "{question}")])

    def add_context(inputs: dict[str, Any]) -> dict[str, Any]:
        docs = BM25.invoke(inputs["question"])
        return {**inputs, "context": "\n\n".join(d.page_content for d in docs)}

    from langchain_core.runnables import RunnableLambda

    chain = RunnableLambda(add_context) | prompt | ToolCallingModel(tool="")
    app = RunnableWithMessageHistory(
        chain, lambda sid: histories.setdefault(sid, InMemoryChatMessageHistory()),
        input_messages_key="question", history_messages_key="history")
    config = {"callbacks": [ts.langchain_handler()], "configurable": {"session_id": "s-42"}}
    app.invoke({"question": Q1}, config=config)
    app.invoke({"question": Q2}, config=config)
    assert ts.flush(20)
    recs = records(db_path)
    assert [(r["query"], r["answer"], r["session_id"]) for r in recs] == [
        (Q1, ANSWER[Q1], "s-42"), (Q2, ANSWER[Q2], "s-42")]
    assert [got(r) for r in recs] == [expect(_BM25[q], "KeywordRetriever")
                                      for q in (Q1, Q2)]


def test_classic_retrieval_chain(make_ts: Any, db_path: Any) -> None:
    """langchain-classic's create_retrieval_chain: query from ``input``, answer from
    ``answer``, contexts from the retriever."""
    from langchain_classic.chains import create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain

    ts, exporter = make_ts(metrics=[FULL], hold_seconds=30)
    prompt = ChatPromptTemplate.from_messages([("system", "{context}"), ("human", "{input}")])
    chain = create_retrieval_chain(BM25, create_stuff_documents_chain(
        ToolCallingModel(tool=""), prompt))
    chain.invoke({"input": Q1}, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(20)
    [rec] = records(db_path)
    assert (rec["query"], rec["answer"]) == (Q1, ANSWER[Q1])
    assert got(rec) == expect(_BM25[Q1], "KeywordRetriever")
    [root] = rag_roots(exporter)
    assert root.attributes[A.score_attribute("full")] == 1.0
