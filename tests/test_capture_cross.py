"""One record per user request across frameworks (integrations/_owner.py).

Both frameworks instrumented process-wide, real objects with fake models: the outermost run
owns the record; documents the other framework retrieved inside it are its contexts; the
inner framework's spans are in the owner's trace.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import records
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tools import tool
from llama_index.core.workflow import StartEvent, StopEvent, Workflow, step
from tracescore.examples.llama_index_rag import build_index, build_query_engine

from tracescore.testing import rag_roots

Q = "What battery capacity does the Cargo have?"
TOOL_Q = "cargo battery capacity"
ANSWER = "The Cargo has a 750 Wh battery."
INDEX = build_index()
#: worked out before anything is instrumented: what the engine's synthesizer sees
EXPECTED = [n.node.get_content() for n in build_query_engine(INDEX).query(TOOL_Q).source_nodes]
RETRIEVED = [n.node.get_content() for n in INDEX.as_retriever(similarity_top_k=2).retrieve(Q)]


class Agentish(GenericFakeChatModel):
    """Calls ``handbook`` on the user's turn, answers after the tool result."""

    messages: Iterator[Any] = iter(())

    def bind_tools(self, tools: Any, **kwargs: Any) -> Agentish:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if messages[-1].type == "tool" or messages[-1].type == "system":
            reply = AIMessage(content=ANSWER)
        elif messages[-1].type == "human" and "Context:" in messages[-1].text:
            reply = AIMessage(content=ANSWER)
        else:
            reply = AIMessage(content="", tool_calls=[{
                "name": "handbook", "args": {"query": TOOL_Q},
                "id": f"call-{uuid.uuid4().hex[:8]}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


class LlamaRetriever(BaseRetriever):
    """A LlamaIndex retriever wrapped as a LangChain retriever (as ``LlamaIndexRetriever``)."""

    index: Any

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        nodes = self.index.as_retriever(similarity_top_k=2).retrieve(query)
        return [Document(page_content=n.node.get_content(), metadata={"score": n.score})
                for n in nodes]


@pytest.fixture
def both(make_ts: Any) -> Iterator[tuple[Any, Any]]:
    ts, exporter = make_ts(metrics=[], keep_full_text=True)
    ts.instrument_langchain()
    ts.instrument_llama_index()
    try:
        yield ts, exporter
    finally:
        ts.uninstrument_langchain()
        ts.uninstrument_llama_index()


def _one(ts: Any, exporter: Any, db: Any) -> dict[str, Any]:
    assert ts.flush(20)
    recs = records(db)
    assert len(recs) == 1, [(r["source"], r["query"]) for r in recs]
    [root] = rag_roots(exporter)
    rec = recs[0]
    assert f"{root.context.trace_id:032x}" == rec["trace_id"]
    # every span of the request is in the owner's trace
    assert {f"{s.context.trace_id:032x}" for s in exporter.get_finished_spans()} == {
        rec["trace_id"]}
    return rec


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_langchain_agent_whose_tool_queries_llama_index(both: Any, db_path: Any,
                                                        how: str) -> None:
    ts, exporter = both
    engine = build_query_engine(INDEX)

    @tool
    def handbook(query: str) -> str:
        """Search the bike handbook."""
        return str(engine.query(query))

    agent = create_agent(Agentish(), tools=[handbook])
    inputs = {"messages": [("user", Q)]}
    if how == "invoke":
        agent.invoke(inputs)
    else:
        asyncio.run(agent.ainvoke(inputs))
    rec = _one(ts, exporter, db_path)
    assert rec["source"] == "langchain" and rec["query"] == Q and rec["answer"] == ANSWER
    assert [c["text"] for c in rec["contexts"]] == EXPECTED


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
def test_lcel_chain_over_a_llama_index_retriever(both: Any, db_path: Any, how: str) -> None:
    ts, exporter = both
    prompt = ChatPromptTemplate.from_messages([("human", "Context: {context}\n\n{question}")])
    join = RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs))
    chain = ({"context": LlamaRetriever(index=INDEX) | join, "question": RunnablePassthrough()}
             | prompt | Agentish() | RunnableLambda(lambda m: m.content))
    if how == "invoke":
        chain.invoke(Q)
    elif how == "ainvoke":
        asyncio.run(chain.ainvoke(Q))
    else:
        list(chain.stream(Q))
    rec = _one(ts, exporter, db_path)
    assert rec["source"] == "langchain" and rec["answer"] == ANSWER
    assert [c["text"] for c in rec["contexts"]] == RETRIEVED  # once each, by content


def test_llama_index_workflow_awaiting_a_langchain_chain(both: Any, db_path: Any) -> None:
    ts, exporter = both
    prompt = ChatPromptTemplate.from_messages([("human", "Context: {context}\n\n{question}")])
    join = RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs))

    class Keyword(BaseRetriever):
        def _get_relevant_documents(self, query: str, *,
                                    run_manager: CallbackManagerForRetrieverRun
                                    ) -> list[Document]:
            return [Document(page_content=t) for t in RETRIEVED]

    chain = ({"context": Keyword() | join, "question": RunnablePassthrough()}
             | prompt | Agentish() | RunnableLambda(lambda m: m.content))

    class Flow(Workflow):
        @step
        async def answer(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result=await chain.ainvoke(ev.query))

    async def main() -> Any:
        return await Flow(timeout=30).run(query=Q)

    assert asyncio.run(main()) == ANSWER
    rec = _one(ts, exporter, db_path)
    assert rec["source"] == "llama_index" and rec["query"] == Q and rec["answer"] == ANSWER
    assert [c["text"] for c in rec["contexts"]] == RETRIEVED
