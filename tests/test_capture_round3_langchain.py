"""Capture, round 3 (LangChain / LangGraph): contexts are what reached the answering model,
every candidate kept beside them, cut-off streams, vector-store searches outside retrievers,
documents on the spans of the steps that produced them.

Real framework objects (langchain_classic compressors and EnsembleRetriever, LangGraph graphs,
``create_agent``, ``InMemoryVectorStore``) with fake models and embeddings; per-call handler and
process-wide instrumentation; sync, async and streaming. Expected values are worked out from
the same objects outside any captured run.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Literal

import pytest
from helpers import records, rows
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, dynamic_prompt
from langchain_classic.retrievers import ContextualCompressionRetriever, EnsembleRetriever
from langchain_classic.retrievers.document_compressors import (
    CrossEncoderReranker,
    LLMChainFilter,
    LLMListwiseRerank,
)
from langchain_classic.retrievers.document_compressors.cross_encoder import BaseCrossEncoder
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tools import create_retriever_tool
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel, Field

from tracescore import attributes as A
from tracescore.record import CUT_OFF_ANSWER
from tracescore.testing import ScriptedMetric, rag_roots

DOCS = [
    Document(id="d0", page_content="The Trail bike battery lasts 80 km.", metadata={"n": 0}),
    Document(id="d1", page_content="The Trail bike weighs 21 kg.", metadata={"n": 1}),
    Document(id="d2", page_content="Battery charging takes 4 hours.", metadata={"n": 2}),
    Document(id="d3", page_content="Returns are accepted within 30 days.", metadata={"n": 3}),
    Document(id="d4", page_content="The City bike has a 60 km battery range.", metadata={"n": 4}),
]
TEXT = {d.id: d.page_content for d in DOCS}
Q = "How long does the bike battery last?"
ANSWER = "About 80 km on one charge."


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3}


class Keyword(BaseRetriever):
    """A tiny BM25 stand-in: documents sharing a word with the query, in corpus order.
    ``copies``: return id-less copies (as BM25Retriever does for texts it was built from)."""

    copies: bool = False

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        q = _words(query)
        hits = [d for d in DOCS if q & _words(d.page_content)]
        if self.copies:
            return [Document(page_content=d.page_content, metadata=dict(d.metadata))
                    for d in hits]
        return hits


class Scripted(GenericFakeChatModel):
    """A fake chat model whose reply is a function of the prompt (so filters, graders and
    rerankers decide from what they are shown); streams word by word; structured output
    parses its JSON reply."""

    messages: Iterator[Any] = iter(())
    rule: Any = None

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
        return self

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self | RunnableLambda(lambda m: schema.model_validate_json(m.content))

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        reply = self.rule(messages)
        if isinstance(reply, str):
            reply = AIMessage(content=reply)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _stream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        """Word by word; a tool-calling reply (no text) as one tool-call chunk."""
        reply = self.rule(messages)
        if isinstance(reply, AIMessage) and reply.tool_calls:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[
                {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                for i, c in enumerate(reply.tool_calls)]))
            if run_manager:
                run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk
            return
        yield from super()._stream(messages, stop=stop, run_manager=run_manager, **kwargs)


def answerer(text: str = ANSWER) -> Scripted:
    return Scripted(rule=lambda ms: text)


PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Answer from the context:\n{context}"), ("human", "{question}")])


def rag_chain(retriever: Any, llm: Any = None) -> Any:
    join = RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs))
    return ({"context": retriever | join, "question": RunnablePassthrough()}
            | PROMPT | (llm or answerer()) | StrOutputParser())


class BikeStore(InMemoryVectorStore):
    """A vector store subclass (with relevance scores: cosine similarity as is)."""

    def _select_relevance_score_fn(self) -> Any:
        return lambda score: score


STORE = BikeStore(DeterministicFakeEmbedding(size=32))
STORE.add_documents(DOCS)
#: worked out before any run is captured (and re-checked to be a no-op outside runs)
VEC2 = STORE.similarity_search(Q, k=2)
FOUND = [d.id for d in Keyword().invoke(Q)]  # d0, d1, d2, d4
KEYWORD_Q = [TEXT[i] for i in FOUND]


def ensemble() -> EnsembleRetriever:
    vec = STORE.as_retriever(search_kwargs={"k": 2})
    return EnsembleRetriever(retrievers=[Keyword(copies=True), vec], weights=[0.5, 0.5])


ENSEMBLE_Q = [d.page_content for d in ensemble().invoke(Q)]


@pytest.fixture(params=["handler", "instrument"])
def capture(request: pytest.FixtureRequest, make_ts: Any) -> Iterator[tuple[Any, Any, dict]]:
    answer_m = ScriptedMetric(lambda r: 1.0, name="answer_m",
                              requires=frozenset({"query", "answer"}))
    ctx_m = ScriptedMetric(lambda r: float(len(r.contexts)), name="ctx_m",
                           requires=frozenset({"query", "contexts"}))
    ts, exporter = make_ts(metrics=[answer_m, ctx_m], sample_rate=1.0)
    if request.param == "handler":
        yield ts, exporter, {"callbacks": [ts.langchain_handler()]}
        return
    ts.instrument_langchain()
    try:
        yield ts, exporter, {}
    finally:
        ts.uninstrument_langchain()


def one(ts: Any, db: Any) -> dict[str, Any]:
    assert ts.flush(20)
    [rec] = records(db)
    rec["candidates"] = json.loads(rec["candidates"] or "[]")
    return rec


def ctx(rec: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    return [(c["text"], c["id"], c["source"]) for c in rec["contexts"]]


def cands(rec: dict[str, Any]) -> list[tuple[str, str, bool, str | None]]:
    return [(c["text"], c["source"], c["kept"], c["dropped_by"]) for c in rec["candidates"]]


def spans_named(exporter: Any, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def span_docs(span: Any) -> list[str]:
    attrs = span.attributes or {}
    n = attrs.get(A.RETRIEVAL_DOCUMENT_COUNT, 0)
    return [attrs[A.retrieval_document(i, A.DOCUMENT_CONTENT)] for i in range(n)]


def invoke(chain: Any, q: str, config: dict, how: str) -> Any:
    if how == "invoke":
        return chain.invoke(q, config=config)
    if how == "ainvoke":
        return asyncio.run(chain.ainvoke(q, config=config))
    return "".join(chain.stream(q, config=config))


# -- 1. wrapping retrievers ---------------------------------------------------------------------
def _filter_rule(ms: list[BaseMessage]) -> str:
    context = ms[-1].text.split("> Context:")[1]
    return "YES" if "battery" in context.lower() else "NO"


class CopyReranker(BaseDocumentCompressor):
    """A Cohere-style reranker: new Document objects (no id) with a relevance score."""

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Any = None) -> Sequence[Document]:
        ranked = list(reversed(documents))[:3]
        return [Document(page_content=d.page_content,
                         metadata={**d.metadata, "relevance_score": 1.0 - i / 10})
                for i, d in enumerate(ranked)]


class FakeCrossEncoder(BaseCrossEncoder):
    SCORES = {"d4": 0.9, "d0": 0.8, "d2": 0.5, "d1": 0.1}

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        by_text = {TEXT[k]: v for k, v in self.SCORES.items()}
        return [by_text.get(doc, 0.0) for _, doc in text_pairs]


def _rank_rule(ms: list[BaseMessage]) -> str:
    return json.dumps({"ranked_document_ids": [2, 0, 3, 1]})


#: compressor, the documents it passes on (ids), and each candidate's fate
COMPRESSORS = {
    "llm_filter": (lambda: LLMChainFilter.from_llm(Scripted(rule=_filter_rule)),
                   ["d0", "d2", "d4"]),
    "listwise": (lambda: LLMListwiseRerank.from_llm(Scripted(rule=_rank_rule), top_n=2),
                 ["d2", "d0"]),
    "cross_encoder": (lambda: CrossEncoderReranker(model=FakeCrossEncoder(), top_n=2),
                      ["d4", "d0"]),
    "copy_reranker": (lambda: CopyReranker(), ["d4", "d2", "d1"]),
}


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_compression_retriever_contexts_are_what_the_compressor_kept(
        capture: Any, db_path: Any, kind: str, how: str) -> None:
    ts, exporter, config = capture
    make, kept = COMPRESSORS[kind]
    found = FOUND
    retriever = ContextualCompressionRetriever(base_compressor=make(), base_retriever=Keyword())
    assert invoke(rag_chain(retriever), Q, config, how) == ANSWER
    rec = one(ts, db_path)
    assert rec["query"] == Q and rec["answer"] == ANSWER and rec["complete"] == 1
    # exactly the passed-on documents, in the compressor's order, ids kept (a copy's id is
    # its original's), the outermost retriever as source
    assert ctx(rec) == [(TEXT[i], i, "ContextualCompressionRetriever") for i in kept]
    if kind == "copy_reranker":
        assert [c["score"] for c in rec["contexts"]] == [1.0, 0.9, 0.8]
    # every candidate once, by step start: the outer retriever's (a base hit it handed on is
    # that one candidate), then the base hits it dropped, named with the dropping step
    assert cands(rec) == (
        [(TEXT[i], "ContextualCompressionRetriever", True, None) for i in kept]
        + [(TEXT[i], "Keyword", False, "ContextualCompressionRetriever")
           for i in found if i not in kept])
    # the retriever span shows what reached the model; the base retriever's its own hits
    [outer] = spans_named(exporter, "ContextualCompressionRetriever")
    assert span_docs(outer) == [TEXT[i] for i in kept]
    [inner] = spans_named(exporter, "Keyword")
    assert span_docs(inner) == [TEXT[i] for i in found]
    # the compressor's own model calls are not the answering model's prompt
    assert "Answer from the context" in (rec["prompt"] or "")


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
def test_ensemble_deduplicates_by_content(capture: Any, db_path: Any, how: str) -> None:
    ts, exporter, config = capture
    expected = ENSEMBLE_Q
    assert len(expected) == len(set(expected))
    invoke(rag_chain(ensemble()), Q, config, how)
    rec = one(ts, db_path)
    assert [c["text"] for c in rec["contexts"]] == expected
    # one context per text; its id the one the vector store's copy had (BM25's have none)
    ids = {d.page_content: d.id for d in VEC2}
    assert [c["id"] for c in rec["contexts"]] == [ids.get(t) for t in expected]
    assert set(ids) & set(KEYWORD_Q)  # found by both: once, with the id
    assert {c["source"] for c in rec["contexts"]} == {"EnsembleRetriever"}
    # one candidate per document: the ensemble's (the inner hits it handed on are those),
    # then the inner hits its top-k left out, named with the ensemble
    merged = set(expected)
    assert cands(rec) == (
        [(t, "EnsembleRetriever", True, None) for t in expected]
        + [(t, "Keyword", False, "EnsembleRetriever") for t in KEYWORD_Q if t not in merged]
        + [(d.page_content, "VectorStoreRetriever", False, "EnsembleRetriever")
           for d in VEC2 if d.page_content not in merged])
    # the vector store's own search inside VectorStoreRetriever is not a step of its own
    assert not [s for s in exporter.get_finished_spans() if "similarity_search" in s.name]


# -- 1b. the agentic-RAG tutorial: grade → rewrite → retrieve again ------------------------------
class GradeDocuments(BaseModel):
    binary_score: str = Field(description="'yes' or 'no'")


FIRST_Q = "Tell me about the bike"
REWRITTEN = "battery charging hours"
GRADE_PROMPT = ("You are a grader assessing relevance of a retrieved document to a user "
                "question.\nHere is the retrieved document:\n\n{context}\n\nHere is the user "
                "question: {question}\nGive a binary score 'yes' or 'no'.")
REWRITE_PROMPT = "Look at the input and reason about the question.\nQuestion:\n{question}\n"
GENERATE_PROMPT = "Answer the question from the context.\nQuestion: {question}\nContext: {context}"


FIRST_HITS = [d.page_content for d in Keyword().invoke(FIRST_Q)]
SECOND_HITS = [d.page_content for d in Keyword().invoke(REWRITTEN)]


def _agentic_rule(ms: list[BaseMessage]) -> Any:
    last = ms[-1]
    text = last.text
    if text.startswith("You are a grader"):
        ok = "charging" in text.split("Here is the retrieved document:")[1].lower()
        return json.dumps({"binary_score": "yes" if ok else "no"})
    if text.startswith("Look at the input"):
        return REWRITTEN
    if text.startswith("Answer the question"):
        return ANSWER
    return AIMessage(content="", tool_calls=[{"name": "retrieve_docs", "args": {"query": text},
                                              "id": f"call-{len(ms)}-{text[:4]}"}])


def agentic_rag_graph() -> Any:
    """LangGraph's agentic-RAG tutorial, as documented, with scripted models."""
    model = Scripted(rule=_agentic_rule)
    tool = create_retriever_tool(Keyword(), "retrieve_docs", "Search the bike handbook.")

    def generate_query_or_respond(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.bind_tools([tool]).invoke(state["messages"])]}

    def grade_documents(state: MessagesState) -> Literal["generate_answer", "rewrite_question"]:
        question = state["messages"][0].content
        context = state["messages"][-1].content
        prompt = GRADE_PROMPT.format(question=question, context=context)
        grade = model.with_structured_output(GradeDocuments).invoke(
            [{"role": "user", "content": prompt}])
        return "generate_answer" if grade.binary_score == "yes" else "rewrite_question"

    def rewrite_question(state: MessagesState) -> dict[str, Any]:
        prompt = REWRITE_PROMPT.format(question=state["messages"][0].content)
        response = model.invoke([{"role": "user", "content": prompt}])
        return {"messages": [{"role": "user", "content": response.content}]}

    def generate_answer(state: MessagesState) -> dict[str, Any]:
        prompt = GENERATE_PROMPT.format(question=state["messages"][0].content,
                                        context=state["messages"][-1].content)
        return {"messages": [model.invoke([{"role": "user", "content": prompt}])]}

    g = StateGraph(MessagesState)
    g.add_node(generate_query_or_respond)
    g.add_node("retrieve", ToolNode([tool]))
    g.add_node(rewrite_question)
    g.add_node(generate_answer)
    g.add_edge(START, "generate_query_or_respond")
    g.add_conditional_edges("generate_query_or_respond", tools_condition,
                            {"tools": "retrieve", END: END})
    g.add_conditional_edges("retrieve", grade_documents)
    g.add_edge("generate_answer", END)
    g.add_edge("rewrite_question", "generate_query_or_respond")
    return g.compile()


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
def test_agentic_rag_keeps_the_retrieval_the_answer_was_written_from(
        capture: Any, db_path: Any, how: str) -> None:
    ts, exporter, config = capture
    graph = agentic_rag_graph()
    inputs = {"messages": [{"role": "user", "content": FIRST_Q}]}
    if how == "invoke":
        graph.invoke(inputs, config=config)
    elif how == "ainvoke":
        asyncio.run(graph.ainvoke(inputs, config=config))
    else:
        for _ in graph.stream(inputs, config=config, stream_mode="updates"):
            pass
    rec = one(ts, db_path)
    first, second = FIRST_HITS, SECOND_HITS  # the first rejected by the grader
    assert set(first) != set(second)
    assert rec["query"] == FIRST_Q and rec["answer"] == ANSWER
    assert [c["text"] for c in rec["contexts"]] == second
    assert {c["source"] for c in rec["contexts"]} == {"Keyword"}
    assert set(first) & set(second)  # found again: its first copy is dropped all the same
    assert [(c["text"], c["kept"], c["dropped_by"]) for c in rec["candidates"]] == (
        [(t, False, "retrieved again (node:retrieve)") for t in first]
        + [(t, True, None) for t in second])
    assert json.loads(rec["retrieval_queries"]) == [FIRST_Q, REWRITTEN]


# -- 3. cut-off streams ---------------------------------------------------------------------
WORDS = "alpha beta gamma delta epsilon zeta"


class Stalling(Scripted):
    """Streams three tokens, then waits for ever (until the client cancels)."""

    async def _astream(self, messages: list[BaseMessage], stop: Any = None,
                       run_manager: Any = None, **kwargs: Any
                       ) -> AsyncIterator[ChatGenerationChunk]:
        for tok in ("alpha", " ", "beta"):
            yield ChatGenerationChunk(message=AIMessageChunk(content=tok))
        await asyncio.Event().wait()
        yield ChatGenerationChunk(message=AIMessageChunk(content="never"))


def _check_cut(ts: Any, exporter: Any, db: Any, received: str) -> None:
    rec = one(ts, db)
    assert rec["answer"] == received and rec["complete"] == 0 and rec["error"] is None
    assert [c["text"] for c in rec["contexts"]] == KEYWORD_Q
    [root] = rag_roots(exporter)
    assert root.attributes[A.ANSWER_COMPLETE] is False
    assert root.status.status_code.name == "ERROR"
    assert "incomplete" in (root.status.description or "")
    # the rule: answer-based metrics are skipped with the reason, context metrics score it
    job = {r["metric"]: r for r in rows(db, "SELECT * FROM jobs WHERE record_id=?",
                                        rec["record_id"])}
    assert job["answer_m"]["status"] == "skipped"
    assert CUT_OFF_ANSWER in job["answer_m"]["reason"]
    skipped = {r["name"]: r for r in rows(db, "SELECT * FROM scores WHERE record_id=?",
                                          rec["record_id"])}
    assert skipped["ctx_m"]["status"] == "ok" and skipped["ctx_m"]["value"] == 4.0


@pytest.mark.parametrize("how", ["close", "drop"])
def test_sync_stream_cut_off_after_three_chunks(capture: Any, db_path: Any, how: str) -> None:
    ts, exporter, config = capture
    chain = rag_chain(Keyword(), answerer(WORDS))
    stream = chain.stream(Q, config=config)
    received = "".join(next(stream) for _ in range(3))
    assert received == "alpha beta"
    if how == "close":
        stream.close()
    else:
        del stream
        gc.collect()
    _check_cut(ts, exporter, db_path, received)


def test_async_stream_closed_by_the_client(capture: Any, db_path: Any) -> None:
    ts, exporter, config = capture
    chain = rag_chain(Keyword(), answerer(WORDS))

    async def client() -> str:
        stream = chain.astream(Q, config=config)
        got = [await anext(stream) for _ in range(3)]
        await stream.aclose()
        return "".join(got)

    received = asyncio.run(client())
    assert received == "alpha beta"
    _check_cut(ts, exporter, db_path, received)


def test_async_stream_task_cancelled(capture: Any, db_path: Any) -> None:
    ts, exporter, config = capture
    chain = rag_chain(Keyword(), Stalling(rule=lambda ms: WORDS))
    got: list[str] = []

    async def main() -> None:
        three = asyncio.Event()

        async def consume() -> None:
            async for chunk in chain.astream(Q, config=config):
                got.append(chunk)
                if len(got) == 3:
                    three.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(three.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert "".join(got) == "alpha beta"
    _check_cut(ts, exporter, db_path, "alpha beta")


def test_stream_read_to_the_end_is_complete(capture: Any, db_path: Any) -> None:
    ts, exporter, config = capture
    assert "".join(rag_chain(Keyword(), answerer(WORDS)).stream(Q, config=config)) == WORDS
    rec = one(ts, db_path)
    assert rec["answer"] == WORDS and rec["complete"] == 1
    [root] = rag_roots(exporter)
    assert root.status.status_code.name == "UNSET" and A.ANSWER_COMPLETE not in root.attributes


# -- 4. vector-store searches outside retrievers ------------------------------------------------
SEARCHES = {
    "similarity_search": lambda q: STORE.similarity_search(q, k=2),
    "similarity_search_with_score": lambda q: STORE.similarity_search_with_score(q, k=2),
    "similarity_search_with_relevance_scores":
        lambda q: STORE.similarity_search_with_relevance_scores(q, k=2),
    "max_marginal_relevance_search":
        lambda q: STORE.max_marginal_relevance_search(q, k=2, fetch_k=4),
}
ASEARCHES = {
    "similarity_search": lambda q: STORE.asimilarity_search(q, k=2),
    "similarity_search_with_score": lambda q: STORE.asimilarity_search_with_score(q, k=2),
    "similarity_search_with_relevance_scores":
        lambda q: STORE.asimilarity_search_with_relevance_scores(q, k=2),
    "max_marginal_relevance_search":
        lambda q: STORE.amax_marginal_relevance_search(q, k=2, fetch_k=4),
}


def _pairs(result: Any) -> list[tuple[str, float | None]]:
    return [(r[0].page_content, r[1]) if isinstance(r, tuple) else (r.page_content, None)
            for r in result]


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("method", list(SEARCHES))
def test_vector_store_search_in_a_chain_is_a_retrieval(capture: Any, db_path: Any, method: str,
                                                       is_async: bool) -> None:
    ts, exporter, config = capture
    expected = _pairs(SEARCHES[method](Q))  # outside any run: no span, no record
    assert exporter.get_finished_spans() == ()

    def docs(result: Any) -> str:
        return "\n\n".join(t for t, _ in _pairs(result))

    async def asearch(q: str) -> str:
        return docs(await ASEARCHES[method](q))

    search = RunnableLambda(lambda q: docs(SEARCHES[method](q)), afunc=asearch)
    chain = ({"context": search, "question": RunnablePassthrough()} | PROMPT | answerer()
             | StrOutputParser())
    if is_async:
        asyncio.run(chain.ainvoke(Q, config=config))
    else:
        chain.invoke(Q, config=config)
    rec = one(ts, db_path)
    name = f"BikeStore.{'a' if is_async else ''}{method}"
    assert [(c["text"], c["source"]) for c in rec["contexts"]] == [(t, name) for t, _ in expected]
    if expected[0][1] is not None:
        assert [c["score"] for c in rec["contexts"]] == pytest.approx([s for _, s in expected])
    [span] = spans_named(exporter, name)  # once: the store's inner searches are its own
    assert span.attributes[A.SPAN_KIND] == A.KIND_RETRIEVER
    assert span_docs(span) == [t for t, _ in expected]
    assert span.attributes[A.INPUT_VALUE] == Q


def test_two_step_rag_agent_dynamic_prompt_search(capture: Any, db_path: Any) -> None:
    """The LangChain 1.x two-step RAG tutorial: ``similarity_search`` in ``@dynamic_prompt``."""
    ts, exporter, config = capture

    @dynamic_prompt
    def prompt_with_context(request: ModelRequest) -> str:
        docs = STORE.similarity_search(request.state["messages"][-1].text, k=2)
        return "Use this context:\n\n" + "\n\n".join(d.page_content for d in docs)

    agent = create_agent(answerer(), tools=[], middleware=[prompt_with_context])
    agent.invoke({"messages": [("user", Q)]}, config=config)
    rec = one(ts, db_path)
    assert rec["query"] == Q and rec["answer"] == ANSWER
    assert ctx(rec) == [(d.page_content, d.id, "BikeStore.similarity_search")
                        for d in VEC2]
    [span] = spans_named(exporter, "BikeStore.similarity_search")
    assert span_docs(span) == [d.page_content for d in VEC2]


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_vector_store_retriever_is_counted_once(capture: Any, db_path: Any, how: str) -> None:
    ts, exporter, config = capture
    invoke(rag_chain(STORE.as_retriever(search_kwargs={"k": 2})), Q, config, how)
    rec = one(ts, db_path)
    assert ctx(rec) == [(d.page_content, d.id, "VectorStoreRetriever") for d in VEC2]
    assert len(rec["candidates"]) == 2
    retrievers = [s for s in exporter.get_finished_spans()
                  if (s.attributes or {}).get(A.SPAN_KIND) == A.KIND_RETRIEVER]
    assert [s.name for s in retrievers] == ["VectorStoreRetriever"]


# -- 5. documents on the spans of tools and nodes ---------------------------------------------
def test_documents_on_node_and_tool_spans(capture: Any, db_path: Any) -> None:
    ts, exporter, config = capture

    def retrieve(state: dict[str, Any]) -> dict[str, Any]:
        return {"context": STORE.similarity_search(state["question"], k=2)}

    def generate(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": ANSWER}

    from typing import TypedDict

    class S(TypedDict, total=False):
        question: str
        context: list[Document]
        answer: str

    g = StateGraph(S).add_sequence([retrieve, generate])
    g.add_edge(START, "retrieve")
    g.compile().invoke({"question": Q}, config=config)
    rec = one(ts, db_path)
    assert ctx(rec) == [(d.page_content, d.id, "retrieve") for d in VEC2]
    [node] = [s for s in spans_named(exporter, "retrieve")
              if s.attributes[A.SPAN_KIND] == A.KIND_CHAIN]
    assert span_docs(node) == [d.page_content for d in VEC2]
    # the search inside the node, handed on unchanged: one candidate each (the node's)
    assert cands(rec) == [(d.page_content, "retrieve", True, None) for d in VEC2]


# -- the stored shape (schema v5) ---------------------------------------------------------------
def test_candidates_and_complete_round_trip(make_ts: Any, db_path: Any) -> None:
    from tracescore.record import Candidate, Context, RagRecord
    from tracescore.store import open_store

    ts, _ = make_ts(metrics=[], keep_full_text=True)
    rec = RagRecord(trace_id="a" * 32, span_id="b" * 16, query="q", answer="a",
                    contexts=(Context("t1", id="1"),), complete=False,
                    candidates=(Candidate("t1", id="1", score=0.5, source="r"),
                                Candidate("t2", source="r", kept=False, dropped_by="f")))
    ts.submit(ts.prepare(rec))
    assert ts.flush(20)
    store = open_store(str(db_path))
    try:
        back = store.load_records([rec.record_id])[rec.record_id]
    finally:
        store.close()
    row = rows(db_path, "SELECT candidates, complete FROM records")[0]
    assert row["complete"] == 0
    assert json.loads(row["candidates"]) == [
        {"text": "t1", "id": "1", "score": 0.5, "source": "r", "kept": True, "dropped_by": None},
        {"text": "t2", "id": None, "score": None, "source": "r", "kept": False,
         "dropped_by": "f"}]
    assert back.candidates == rec.candidates and back.complete is False




def test_a_vector_store_class_defined_after_instrumenting_is_wrapped(capture: Any,
                                                                     db_path: Any) -> None:
    ts, exporter, config = capture

    class LateStore(InMemoryVectorStore):
        def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
            return [DOCS[3]]

    late = LateStore(DeterministicFakeEmbedding(size=8))
    chain = RunnableLambda(lambda q: late.similarity_search(q)[0].page_content) | answerer()
    chain.invoke(Q, config=config)
    rec = one(ts, db_path)
    assert ctx(rec) == [(DOCS[3].page_content, "d3", "LateStore.similarity_search")]


def test_candidates_follow_content_capture_and_redaction(make_ts: Any, db_path: Any) -> None:
    ts, _ = make_ts(metrics=[], keep_full_text=True, capture_content=False)
    rag_chain(ContextualCompressionRetriever(base_compressor=CopyReranker(),
                                             base_retriever=Keyword())).invoke(
        Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(20)
    assert rows(db_path, "SELECT candidates FROM records") == [{"candidates": None}]


def test_a_version_4_database_upgrades_to_5(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema v5 on both backends: records.candidates and records.complete added, rows
    written before read back complete, with no candidates."""
    from tracescore.store import migrations, open_store

    name = "POSTGRES_MIGRATIONS" if db.startswith("postgresql://") else "SQLITE_MIGRATIONS"
    v4 = [m for m in getattr(migrations, name) if m.version <= 4]
    with monkeypatch.context() as m:
        m.setattr(migrations, name, tuple(v4))
        open_store(db).close()
    cols = [c for c in ("record_id", "trace_id", "span_id", "created_at", "source", "query",
                        "answer", "contexts", "n_contexts", "ground_truths", "metadata", "tags")]
    vals = ["a" * 32 + "-" + "b" * 16, "a" * 32, "b" * 16, 1.0, "manual", "q", "a",
            json.dumps([{"text": "t"}]), 1, "[]", "{}", "[]"]
    rows(db, f"INSERT INTO records({','.join(cols)}) VALUES ({','.join(['?'] * len(cols))})"
         + " RETURNING record_id", *vals)
    assert "candidates" not in rows(db, "SELECT * FROM records")[0]
    store = open_store(db)  # the upgrade
    try:
        row = rows(db, "SELECT * FROM records")[0]
        assert row["candidates"] is None and row["complete"] == 1
        rec = store.load_records([vals[0]])[vals[0]]
        assert rec.complete is True and rec.candidates == () and rec.answer == "a"
    finally:
        store.close()
    version = rows(db, "SELECT value FROM meta WHERE key='schema_version'")[0]["value"]
    assert int(version) == getattr(migrations, name)[-1].version >= 5


def test_show_tells_an_incomplete_answer_and_the_dropped_candidates(make_ts: Any,
                                                                    db_path: Any) -> None:
    from tracescore.read.records import find_records, record_details
    from tracescore.reports.show import format_records
    from tracescore.store.compat import connect_reader

    ts, _ = make_ts(metrics=[], keep_full_text=True)
    retriever = ContextualCompressionRetriever(
        base_compressor=LLMChainFilter.from_llm(Scripted(rule=_filter_rule)),
        base_retriever=Keyword())
    stream = rag_chain(retriever, answerer(WORDS)).stream(
        Q, config={"callbacks": [ts.langchain_handler()]})
    [next(stream) for _ in range(3)]
    stream.close()
    assert ts.flush(20)
    conn = connect_reader(str(db_path))
    try:
        recs, _ = find_records(conn, records(db_path)[0]["trace_id"])
        text = format_records([record_details(conn, r) for r in recs])
    finally:
        conn.close()
    assert "incomplete: the client stopped reading the stream" in text
    assert "candidates (4 retrieved, 1 did not reach the model)" in text
    assert (f"from Keyword, dropped by ContextualCompressionRetriever: {TEXT['d1']}"
            in " ".join(text.split()))


# -- round 3, second pass: what the client received from a LangGraph "messages" stream --------
def _messages_stream_cut(graph: Any, config: dict, node: str, after: int, how: str) -> str:
    """Stream the graph with ``stream_mode="messages"``; stop after ``after`` chunks of
    ``node``. Returns the text the client received from that node."""
    inputs = {"messages": [{"role": "user", "content": FIRST_Q}]}
    got: list[str] = []
    if how == "sync":
        stream = graph.stream(inputs, config=config, stream_mode="messages")
        for chunk, meta in stream:
            if meta["langgraph_node"] == node:
                got.append(chunk.content)
                if len(got) == after:
                    break
        stream.close()
        return "".join(got)

    async def client() -> None:
        stream = graph.astream(inputs, config=config, stream_mode="messages")
        async for chunk, meta in stream:
            if meta["langgraph_node"] == node:
                got.append(chunk.content)
                if len(got) == after:
                    break
        await stream.aclose()

    asyncio.run(client())
    return "".join(got)


@pytest.mark.parametrize("how", ["sync", "async"])
def test_graph_messages_stream_cut_records_what_the_client_received(
        capture: Any, db_path: Any, how: str) -> None:
    """LangGraph runs the answering node to its end and queues its chunks: the record holds
    the chunks the client took from the stream, not every chunk the model produced."""
    ts, exporter, config = capture
    received = _messages_stream_cut(agentic_rag_graph(), config, "generate_answer", 2, how)
    assert received and ANSWER.startswith(received) and received != ANSWER
    rec = one(ts, db_path)
    assert rec["complete"] == 0 and rec["answer"] == received
    [root] = rag_roots(exporter)
    assert root.attributes[A.ANSWER_COMPLETE] is False


def test_graph_stream_cut_in_the_rewriter_has_no_answer(capture: Any, db_path: Any) -> None:
    """Cut while the rewriter streams: its output goes back into the graph as a question, so
    the record has no answer (not the rewritten question)."""
    ts, _, config = capture
    received = _messages_stream_cut(agentic_rag_graph(), config, "rewrite_question", 2, "sync")
    assert received and REWRITTEN.startswith(received)
    rec = one(ts, db_path)
    assert rec["complete"] == 0 and rec["answer"] is None


def test_tool_artifact_hits_are_one_candidate_each(capture: Any, db_path: Any) -> None:
    """The LangChain 1.x RAG agent: a content_and_artifact tool handing on the store search's
    documents unchanged gives one candidate per document (under its context's source)."""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    ts, _, config = capture

    @tool(response_format="content_and_artifact")
    def retrieve_context(query: str) -> tuple[str, list[Document]]:
        """Retrieve information to help answer a query."""
        docs = STORE.similarity_search(query, k=2)
        return "\n\n".join(d.page_content for d in docs), docs

    def rule(ms: list[BaseMessage]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in ms):
            return AIMessage(content="", tool_calls=[
                {"name": "retrieve_context", "args": {"query": Q}, "id": "c1"}])
        return ANSWER

    agent = create_agent(Scripted(rule=rule), [retrieve_context])
    agent.invoke({"messages": [{"role": "user", "content": Q}]}, config=config)
    rec = one(ts, db_path)
    assert ctx(rec) == [(d.page_content, d.id, "retrieve_context") for d in VEC2]
    assert cands(rec) == [(d.page_content, "retrieve_context", True, None) for d in VEC2]
    assert [c["id"] for c in rec["candidates"]] == [d.id for d in VEC2]
