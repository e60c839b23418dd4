"""Capture round 4, LlamaIndex side: ``CitationQueryEngine`` records what its model saw (the
"Source N:" chunks it builds from the retrieved nodes), not those chunks plus the nodes; the
retrieved nodes are candidates that say how they reached the model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

import test_capture_round3_llama as round3
from llama_index.core.query_engine import CitationQueryEngine
from llama_index.core.schema import QueryBundle
from test_capture_round3_llama import Q, one_record, texts
from tracescore.examples.llama_index_rag import ExtractiveLLM

#: round 3's fixtures: the example index, the instrumented pipeline, the clean dispatcher
index = round3.index
make_li = round3.make_li
clean_dispatcher = round3.clean_dispatcher


def citation_engine(idx: Any) -> CitationQueryEngine:
    return CitationQueryEngine.from_args(idx, llm=ExtractiveLLM(), similarity_top_k=3,
                                         citation_chunk_size=512)


@pytest.mark.parametrize("how", ["query", "aquery"])
def test_citation_engine_contexts_are_the_source_chunks(make_li: Any, db_path: Any,
                                                        index: Any, how: str) -> None:
    engine = citation_engine(index)
    hits = engine.retrieve(QueryBundle(Q))  # uninstrumented
    chunks = texts(engine._create_citation_nodes(hits))
    assert len(hits) == 3 and len(chunks) == 3
    assert all(c.startswith(f"Source {i + 1}:") for i, c in enumerate(chunks))
    ts, _, _ = make_li(sample_rate=1.0)
    if how == "aquery":
        response = asyncio.run(citation_engine(index).aquery(Q))
    else:
        response = citation_engine(index).query(Q)
    assert texts(response.source_nodes) == chunks
    rec = one_record(ts, db_path)
    assert rec["answer"] == str(response)
    # exactly what the model saw, once each, with the retriever that found their node
    assert [c["text"] for c in rec["contexts"]] == chunks
    assert {c["source"] for c in rec["contexts"]} == {"VectorIndexRetriever"}
    # the retrieved nodes: candidates that reached the model as those chunks
    assert [(c["text"], c["kept"], c["dropped_by"], c.get("via"))
            for c in rec["candidates"]] == [
        (t, False, None, "split into the chunks the model saw") for t in texts(hits)]
