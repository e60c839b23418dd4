"""Issue 11 §4: a retrieval of thousands of documents puts a bounded number of attributes on
its span (the count is kept; the database keeps every document)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from helpers import records
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from tracescore import attributes as A
from tracescore.testing import ScriptedMetric

N = 5_000


class Many(BaseRetriever):
    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [Document(page_content=f"doc {i}", id=f"d{i}", metadata={"i": i})
                for i in range(N)]


def test_many_documents_do_not_overflow_the_span(make_ts: Any, db_path: Path,
                                                 caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    ts, exporter = make_ts(metrics=[ScriptedMetric(lambda r: 1.0, name="m")])
    chain = Many() | RunnableLambda(lambda docs: f"{len(docs)} documents")
    chain.invoke("q", config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(30)
    [retr] = [s for s in exporter.get_finished_spans()
              if s.attributes.get(A.SPAN_KIND) == A.KIND_RETRIEVER]
    assert retr.attributes[A.RETRIEVAL_DOCUMENT_COUNT] == N
    docs = {k for k in retr.attributes if k.startswith(A.RETRIEVAL_DOCUMENTS + ".")}
    assert len(docs) <= 4 * A.MAX_SPAN_DOCUMENTS
    assert retr.attributes[A.retrieval_document(0, A.DOCUMENT_ID)] == "d0"
    assert "Attributes dict is full" not in caplog.text
    assert retr.dropped_attributes == 0
    [rec] = records(db_path)
    assert len(rec["contexts"]) == N  # SQLite keeps everything
