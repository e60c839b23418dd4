"""Capture round 3 (issue 20), LlamaIndex side, on real llama-index-core objects (the example
handbook index with its hashing embedding and extractive LLM, scripted where LlamaIndex parses
the model's text; no network): contexts are what reached the answering model (postprocessors,
fusion, sub-questions, routers), candidates keep the rest; streams the client cut off or
dropped are recorded as incomplete; vector-store searches inside a run are retriever steps;
one record per request across frameworks; documents on the spans that produced them."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

import tracescore.integrations.llama_index as li
from helpers import records
from llama_index.core.base.base_selector import BaseSelector, SelectorResult, SingleSelection
from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.postprocessor import LLMRerank, SimilarityPostprocessor
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import (
    RetrieverQueryEngine,
    RouterQueryEngine,
    SubQuestionQueryEngine,
)
from llama_index.core.question_gen.types import BaseQuestionGenerator, SubQuestion
from llama_index.core.response_synthesizers import get_response_synthesizer
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools import QueryEngineTool, ToolMetadata
from llama_index.core.vector_stores.types import VectorStoreQuery
from llama_index.core.workflow import Context, StartEvent, StopEvent, Workflow, step
from tracescore.examples.llama_index_rag import (
    ExtractiveLLM,
    HashingEmbedding,
    build_chat_engine,
    build_index,
    build_query_engine,
)

from tracescore import attributes as A

Q = "What battery capacity does the Cargo have?"
FUSION_QUERIES = ["cargo battery size", "how long does charging take", "battery warranty"]


class ScriptedLLM(ExtractiveLLM):
    """The example's extractive LLM, with the two answers LlamaIndex parses scripted: the
    fusion retriever's generated queries and LLMRerank's choices."""

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if "generates multiple search queries" in prompt:
            return CompletionResponse(text="\n".join(FUSION_QUERIES))
        if "Relevance score" in prompt or "relevance score" in prompt:
            return CompletionResponse(text="Doc: 3, Relevance: 9\nDoc: 1, Relevance: 4")
        return super().complete(prompt, formatted=formatted, **kwargs)


class CopyingReranker(BaseNodePostprocessor):
    """A Cohere-style reranker: new ``NodeWithScore`` copies, reversed, the top two kept."""

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        return [NodeWithScore(node=n.node, score=0.5 + i / 10)
                for i, n in enumerate(reversed(nodes))][:2]


class FixedQuestions(BaseQuestionGenerator):
    """Two sub-questions, one per tool (what an LLM question generator would return)."""

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: Any) -> None:
        pass

    def generate(self, tools: Sequence[ToolMetadata], query: QueryBundle) -> list[SubQuestion]:
        return [SubQuestion(sub_question="How big is the Cargo battery?", tool_name="battery"),
                SubQuestion(sub_question="How long is the warranty?", tool_name="warranty")]

    async def agenerate(self, tools: Sequence[ToolMetadata],
                        query: QueryBundle) -> list[SubQuestion]:
        return self.generate(tools, query)


class SecondChoice(BaseSelector):
    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: Any) -> None:
        pass

    def _select(self, choices: Sequence[Any], query: QueryBundle) -> SelectorResult:
        return SelectorResult(selections=[SingleSelection(index=1, reason="scripted")])

    async def _aselect(self, choices: Sequence[Any], query: QueryBundle) -> SelectorResult:
        return self._select(choices, query)


@pytest.fixture(scope="module")
def index() -> Any:
    return build_index()


@pytest.fixture(autouse=True)
def clean_dispatcher() -> Iterator[None]:
    yield
    li.uninstrument()
    root = get_dispatcher()
    assert not [h for h in [*root.span_handlers, *root.event_handlers]
                if isinstance(h, (li.TracescoreSpanHandler, li.TracescoreEventHandler))]


@pytest.fixture
def make_li(make_ts: Any) -> Any:
    def make(**kwargs: Any) -> tuple[Any, Any, Any]:
        ts, exporter = make_ts(**kwargs)
        return ts, exporter, li.instrument(ts).capture

    return make


def texts(nodes: Sequence[Any]) -> list[str]:
    return [n.node.get_content() for n in nodes]


def one_record(ts: Any, db_path: Any) -> dict[str, Any]:
    assert ts.flush(10)
    [rec] = records(db_path)
    rec["candidates"] = __import__("json").loads(rec["candidates"] or "[]")
    return rec


def spans_named(exporter: Any, trace_id: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in exporter.get_finished_spans():
        if f"{s.context.trace_id:032x}" == trace_id:
            out.setdefault(s.name, []).append(s)
    return out


def documents(span: Any) -> list[str]:
    n = span.attributes.get(A.RETRIEVAL_DOCUMENT_COUNT, 0)
    return [span.attributes[A.retrieval_document(i, A.DOCUMENT_CONTENT)]
            for i in range(min(n, A.MAX_SPAN_DOCUMENTS))]


# -- 1. contexts are what reached the model ----------------------------------------------------
def fusion(index: Any) -> QueryFusionRetriever:
    return QueryFusionRetriever([index.as_retriever(similarity_top_k=3)], llm=ScriptedLLM(),
                                similarity_top_k=3, num_queries=4, use_async=False)


def test_fusion_retriever_alone_records_its_output_not_every_inner_hit(make_li, db_path, index):
    want = texts(fusion(index).retrieve(Q))  # uninstrumented
    inner = [t for q in [Q, *FUSION_QUERIES]
             for t in texts(index.as_retriever(similarity_top_k=3).retrieve(q))]
    assert len(want) == 3 and len(inner) == 12
    ts, exporter, _ = make_li()
    got = fusion(index).retrieve(Q)
    assert texts(got) == want
    rec = one_record(ts, db_path)
    assert [c["text"] for c in rec["contexts"]] == want
    assert {c["source"] for c in rec["contexts"]} == {"VectorIndexRetriever"}
    cands = rec["candidates"]
    assert [c["text"] for c in cands] == inner + want  # each step's hit, in step order
    assert {c["source"] for c in cands[:12]} == {"VectorIndexRetriever"}
    assert {c["source"] for c in cands[12:]} == {"QueryFusionRetriever"}
    for c in cands:
        assert c["kept"] is (c["text"] in want)
        assert c["dropped_by"] == (None if c["kept"] else "QueryFusionRetriever")
    # the documents are on the fusion retriever's span: the output, not the inner hits
    [root] = spans_named(exporter, rec["trace_id"])["QueryFusionRetriever.retrieve"]
    assert documents(root) == want


def test_postprocessors_similarity_cutoff_and_copying_reranker(make_li, db_path, index):
    retriever = index.as_retriever(similarity_top_k=4)
    hits = retriever.retrieve(Q)
    cutoff = sorted(n.score for n in hits)[1]  # drops the weakest hit
    kept = [n for n in hits if n.score >= cutoff]
    want = texts(CopyingReranker().postprocess_nodes(kept))
    assert len(hits) == 4 and len(want) == 2

    def engine() -> RetrieverQueryEngine:
        return RetrieverQueryEngine.from_args(
            retriever, llm=ExtractiveLLM(),
            node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=cutoff),
                                 CopyingReranker()])

    ts, exporter, _ = make_li()
    response = engine().query(Q)
    rec = one_record(ts, db_path)
    assert [c["text"] for c in rec["contexts"]] == want == texts(response.source_nodes)
    assert [c["score"] for c in rec["contexts"]] == [0.5, 0.6]  # the reranker's scores
    assert {c["source"] for c in rec["contexts"]} == {"VectorIndexRetriever"}
    assert rec["answer"] == str(response)
    by_text = {c["text"]: c for c in rec["candidates"]}
    assert [c["text"] for c in rec["candidates"]] == texts(hits)
    weakest = min(hits, key=lambda n: n.score).node.get_content()
    assert by_text[weakest]["dropped_by"] == "SimilarityPostprocessor"
    for t in texts(kept):
        assert by_text[t]["dropped_by"] == (None if t in want else "CopyingReranker")
    # each postprocessor's span carries its output
    named = spans_named(exporter, rec["trace_id"])
    [rerank] = [s for n, ss in named.items() if n.startswith("CopyingReranker.") for s in ss]
    assert documents(rerank) == want


def test_llm_rerank_with_a_scripted_model(make_li, db_path, index):
    retriever = index.as_retriever(similarity_top_k=3)
    hits = retriever.retrieve(Q)
    want = [texts(hits)[2], texts(hits)[0]]  # "Doc: 3" then "Doc: 1"
    engine = RetrieverQueryEngine.from_args(
        retriever, llm=ExtractiveLLM(), node_postprocessors=[LLMRerank(llm=ScriptedLLM(),
                                                                       top_n=2)])
    ts, _, _ = make_li()
    # sync: LLMRerank's async path (its own _apostprocess_nodes) opens no LlamaIndex span
    response = engine.query(Q)
    rec = one_record(ts, db_path)
    assert [c["text"] for c in rec["contexts"]] == want == texts(response.source_nodes)
    assert [c["score"] for c in rec["contexts"]] == [9.0, 4.0]
    [dropped] = [c for c in rec["candidates"] if not c["kept"]]
    assert dropped["text"] == texts(hits)[1] and dropped["dropped_by"] == "LLMRerank"


def sub_engines(index: Any) -> list[QueryEngineTool]:
    return [QueryEngineTool.from_defaults(build_query_engine(index, similarity_top_k=2),
                                          name=name, description=f"{name} facts")
            for name in ("battery", "warranty")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sub_question_engine_contexts_are_the_sub_engines_nodes(make_li, db_path, index, mode):
    subs = [build_query_engine(index, similarity_top_k=2).query(q).source_nodes
            for q in ("How big is the Cargo battery?", "How long is the warranty?")]
    want = list(dict.fromkeys(t for nodes in subs for t in texts(nodes)))
    engine = SubQuestionQueryEngine.from_defaults(
        query_engine_tools=sub_engines(index), question_gen=FixedQuestions(),
        llm=ExtractiveLLM(), use_async=False)
    ts, _, _ = make_li()
    response = engine.query(Q) if mode == "sync" else asyncio.run(engine.aquery(Q))
    rec = one_record(ts, db_path)  # one record: the sub-engines are part of the request
    assert rec["query"] == Q and rec["answer"] == str(response)
    got = [c["text"] for c in rec["contexts"]]
    assert got == want
    assert not any(t.startswith("Sub question:") for t in got)
    assert not any(c["text"].startswith("Sub question:") for c in rec["candidates"])


def test_router_query_engine_contexts_are_the_selected_engines(make_li, db_path, index):
    want = texts(build_query_engine(index, similarity_top_k=2).query(Q).source_nodes)
    engine = RouterQueryEngine(selector=SecondChoice(), query_engine_tools=[
        QueryEngineTool.from_defaults(build_query_engine(index, similarity_top_k=1),
                                      name="narrow", description="one page"),
        QueryEngineTool.from_defaults(build_query_engine(index, similarity_top_k=2),
                                      name="wide", description="two pages")],
        llm=ExtractiveLLM())
    ts, _, _ = make_li()
    response = engine.query(Q)
    rec = one_record(ts, db_path)
    assert [c["text"] for c in rec["contexts"]] == want == texts(response.source_nodes)
    assert rec["answer"] == str(response)


# -- 2. cut-off streams -------------------------------------------------------------------------
def full_answer(index: Any) -> str:
    return str(build_query_engine(index).query(Q))


def assert_cut(rec: dict[str, Any], exporter: Any, received: str) -> None:
    assert rec["answer"] == received and rec["complete"] == 0
    assert rec["contexts"]  # the retrieval happened: its documents are kept
    [root] = [s for s in exporter.get_finished_spans()
              if f"{s.context.trace_id:032x}" == rec["trace_id"] and s.parent is None]
    assert root.attributes[A.ANSWER_COMPLETE] is False
    assert root.status.status_code.name == "ERROR"
    assert f"after {len(received)} characters" in root.status.description


@pytest.mark.parametrize("read", [0, 2])
def test_dropped_query_stream_is_recorded_incomplete(make_li, db_path, index, read):
    assert len(full_answer(index).split()) > read
    ts, exporter, capture = make_li()
    response = build_query_engine(index, streaming=True).query(Q)
    gen = response.response_gen
    received = "".join(next(gen) for _ in range(read))
    del response, gen  # dropped: neither read to the end nor closed
    gc.collect()
    assert capture.open_runs == 0 and capture.open_spans == 0
    assert_cut(one_record(ts, db_path), exporter, received)


def test_dropped_async_query_stream_is_recorded_incomplete(make_li, db_path, index):
    ts, exporter, capture = make_li()

    async def main() -> str:
        response = await build_query_engine(index, streaming=True).aquery(Q)
        agen = response.async_response_gen()
        first = await agen.__anext__()
        await agen.aclose()
        return first

    received = asyncio.run(main())
    gc.collect()
    assert_cut(one_record(ts, db_path), exporter, received)


def test_async_stream_cancelled_by_the_client(make_li, db_path, index):
    ts, exporter, _ = make_li()

    async def main() -> str:
        response = await build_query_engine(index, streaming=True).aquery(Q)
        got: list[str] = []

        async def read() -> None:
            async for t in response.async_response_gen():
                got.append(t)
                if len(got) == 2:
                    await asyncio.Event().wait()  # the client stalls; its task is cancelled

        task = asyncio.ensure_future(read())
        while len(got) < 2:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return "".join(got)

    received = asyncio.run(main())
    rec = one_record(ts, db_path)
    assert rec["error"] is None
    assert_cut(rec, exporter, received)


def test_stream_read_to_the_end_is_complete(make_li, db_path, index):
    ts, exporter, _ = make_li()
    response = build_query_engine(index, streaming=True).query(Q)
    text = "".join(response.response_gen)
    rec = one_record(ts, db_path)
    assert rec["answer"] == text == full_answer(index) and rec["complete"] == 1


@pytest.mark.parametrize("read", [0, 1])
def test_dropped_stream_chat_is_recorded_with_what_the_client_read(make_li, db_path, index,
                                                                     read):
    ts, exporter, capture = make_li()
    streamed = build_chat_engine(index).stream_chat(Q)
    gen = streamed.response_gen
    received = "".join(next(gen) for _ in range(read))
    thread = streamed.write_response_to_history_thread
    del streamed, gen
    thread.join()
    gc.collect()
    assert capture.open_runs == 0
    rec = one_record(ts, db_path)
    assert rec["answer"] == received.strip() and rec["complete"] == 0
    assert rec["contexts"]


def test_astream_chat_read_to_the_end_and_dropped(make_li, db_path, index):
    ts, exporter, _ = make_li()
    engine = build_chat_engine(index)

    async def main() -> tuple[str, str]:
        r = await engine.astream_chat(Q)
        text = "".join([t async for t in r.async_response_gen()])
        r2 = await engine.astream_chat(Q)
        agen = r2.async_response_gen()
        first = await agen.__anext__()
        await agen.aclose()
        return text, first

    text, first = asyncio.run(main())
    assert ts.flush(10)
    full, cut = records(db_path)
    assert full["answer"] == text.strip() and full["complete"] == 1
    assert cut["answer"] == first.strip() and cut["complete"] == 0


# -- 3. vector-store searches --------------------------------------------------------------------
class SearchWorkflow(Workflow):
    """A workflow step that searches the vector store itself, then answers from the hits."""

    def __init__(self, index: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index = index

    @step
    async def answer(self, ctx: Context, ev: StartEvent) -> StopEvent:
        store = self.index.vector_store
        embedding = await HashingEmbedding().aget_query_embedding(ev.query)
        result = store.query(VectorStoreQuery(query_embedding=embedding, similarity_top_k=2,
                                              query_str=ev.query))
        docstore = self.index.docstore
        nodes = [NodeWithScore(node=docstore.get_node(i), score=s)
                 for i, s in zip(result.ids, result.similarities)]
        response = await get_response_synthesizer(llm=ExtractiveLLM()).asynthesize(
            ev.query, nodes=nodes)
        return StopEvent(result=str(response))


def test_direct_vector_store_search_in_a_workflow_is_a_retriever_step(make_li, db_path, index):
    hits = index.as_retriever(similarity_top_k=2).retrieve(Q)
    want = texts(hits)
    ts, exporter, _ = make_li()
    async def main() -> str:
        return str(await SearchWorkflow(index, timeout=30).run(query=Q))

    answer = asyncio.run(main())
    rec = one_record(ts, db_path)
    assert rec["answer"] == answer
    assert [c["text"] for c in rec["contexts"]] == want
    assert {c["source"] for c in rec["contexts"]} == {"SimpleVectorStore"}
    assert [c["text"] for c in rec["candidates"]] == want
    [search] = spans_named(exporter, rec["trace_id"])["SimpleVectorStore.query"]
    assert search.attributes[A.SPAN_KIND] == A.KIND_RETRIEVER
    assert search.attributes[A.INPUT_VALUE] == Q
    # SimpleVectorStore keeps no text (the docstore does): its span has the hits' ids
    assert [search.attributes[A.retrieval_document(i, A.DOCUMENT_ID)] for i in range(2)] == \
        [n.node.node_id for n in hits]


def test_store_searched_by_a_retriever_is_not_counted_twice(make_li, db_path, index):
    ts, exporter, _ = make_li()
    response = build_query_engine(index).query(Q)
    rec = one_record(ts, db_path)
    assert [c["text"] for c in rec["contexts"]] == texts(response.source_nodes)
    assert len(rec["candidates"]) == len(response.source_nodes)
    named = spans_named(exporter, rec["trace_id"])
    assert "SimpleVectorStore.query" not in named
    assert [s.attributes[A.SPAN_KIND] for ss in named.values() for s in ss].count(
        A.KIND_RETRIEVER) == 1


# -- 4. one record across frameworks -------------------------------------------------------------
def test_llama_workflow_awaiting_a_langchain_chain_is_one_record(make_li, make_ts, db_path,
                                                                  index):
    lc = pytest.importorskip("langchain_core")
    del lc
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    pages = [Document(page_content=t, id=f"lc-{i}")
             for i, t in enumerate(texts(index.as_retriever(similarity_top_k=2).retrieve(Q)))]

    class Pages(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any = None
                                    ) -> list[Document]:
            return pages

    chain = Pages() | RunnableLambda(lambda docs: docs[0].page_content.split(".")[0] + ".")

    class Mixed(Workflow):
        @step
        async def answer(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result=await chain.ainvoke(ev.query))

    ts, exporter, _ = make_li()
    ts.instrument_langchain()
    try:
        async def main() -> str:
            return str(await Mixed(timeout=30).run(query=Q))

        answer = asyncio.run(main())
    finally:
        ts.uninstrument_langchain()
    rec = one_record(ts, db_path)  # one record, not one per framework
    assert rec["source"] == "llama_index" and rec["query"] == Q and rec["answer"] == answer
    assert [c["text"] for c in rec["contexts"]] == [d.page_content for d in pages]
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 1  # the LangChain spans nest under the workflow's run


class FailingPostprocessor(BaseNodePostprocessor):
    """A node postprocessor that raises (a reranker service down)."""

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        raise RuntimeError("reranker down")


def test_postprocessor_that_raises_leaves_no_contexts(make_li, db_path, index):
    """No model saw the retriever's nodes when the postprocessor raised: the error record has
    no contexts; the nodes stay as candidates, dropped by the postprocessor that raised."""
    retriever = index.as_retriever(similarity_top_k=2)
    hits = texts(retriever.retrieve(Q))  # uninstrumented
    assert len(hits) == 2
    ts, _, _ = make_li()
    engine = RetrieverQueryEngine.from_args(retriever, llm=ExtractiveLLM(),
                                            node_postprocessors=[FailingPostprocessor()])
    with pytest.raises(RuntimeError, match="reranker down"):
        engine.query(Q)
    rec = one_record(ts, db_path)
    assert rec["error"] == "RuntimeError: reranker down"
    assert rec["contexts"] == []
    assert [(c["text"], c["kept"], c["dropped_by"]) for c in rec["candidates"]] == [
        (t, False, "FailingPostprocessor (raised)") for t in hits]
