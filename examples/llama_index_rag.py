"""A small, fully offline RAG app built from real LlamaIndex objects.

The LlamaIndex twin of :mod:`examples.langchain_rag`, over the same bundled corpus (a fictional
e-bike maker's handbook, ``data/corpus.json``) and questions (``data/questions.json``). Nothing
here needs the network or model weights:

- :class:`HashingEmbedding` is a hashing bag-of-words ``BaseEmbedding`` (stopwords removed,
  light stemming, sublinear term frequency, L2-normalised), so ``VectorStoreIndex`` retrieval is
  meaningful without downloading a model;
- :class:`ExtractiveLLM` is a deterministic ``CustomLLM`` that answers with the context sentence
  that best overlaps the question, or with :data:`REFUSAL` — so answers, and their scores, vary.

Nothing here sets LlamaIndex's global ``Settings``: the LLM and the embedding model are passed
explicitly to every index and engine.

Entry points:

- :func:`load_documents`, :func:`build_index`, :func:`build_query_engine`,
  :func:`build_chat_engine` — the app;
- :func:`run` — ``run(ts, questions) -> list[tuple[str, str]]``: what ``tracescore demo
  --framework llama-index`` calls. It instruments LlamaIndex for ``ts`` (idempotent;
  ``ts.shutdown()`` undoes it) and asks each question (a str, or a dict with ``"question"`` and
  optionally ``"id"``) of a fresh query engine, each inside a span of ``ts``'s tracer so the
  question's trace id is known up front (the LlamaIndex root span joins that trace, as it
  would join an app's request span). It returns ``(trace_id, answer)`` per question, in order,
  so the caller can send reference answers with ``ts.add_ground_truth(trace_id, [...])``.
  It blocks while it asks the questions; scoring happens in the background (``ts.flush()``).

Run ``python -m examples.llama_index_rag`` (or ``python -m tracescore.examples.llama_index_rag``
once installed) to answer the bundled questions, traced and scored, and print the scores.
"""

from __future__ import annotations

import math
import re
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import BaseQueryEngine

if TYPE_CHECKING:
    from tracescore.client import Tracescore

from ._common import (
    DATA_DIR,
    MODEL_NAME,
    REFUSAL,
    content_terms,
    extractive_answer,
    load_questions,
    read_json,
    tokenize,
)

__all__ = [
    "DATA_DIR",
    "MODEL_NAME",
    "REFUSAL",
    "ExtractiveLLM",
    "HashingEmbedding",
    "build_chat_engine",
    "build_index",
    "build_query_engine",
    "content_terms",
    "load_documents",
    "load_questions",
    "run",
]


METADATA_KEYS = ["source", "title", "section"]

# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------




def load_documents() -> list[Document]:
    """The bundled handbook, one ``Document`` per topic: ``id_`` is the corpus id and
    ``metadata`` is {"source", "title", "section"}, hidden from the LLM prompt and from the
    embedding (so they see the text only). Fresh objects on every call."""
    return [
        Document(
            id_=row["id"],
            text=row["text"],
            metadata={k: row[k] for k in METADATA_KEYS},
            excluded_llm_metadata_keys=list(METADATA_KEYS),
            excluded_embed_metadata_keys=list(METADATA_KEYS),
        )
        for row in read_json("corpus.json")
    ]




# --------------------------------------------------------------------------
# Text helpers (the same light normalisation as the LangChain example)
# --------------------------------------------------------------------------



# --------------------------------------------------------------------------
# Embedding
# --------------------------------------------------------------------------


class HashingEmbedding(BaseEmbedding):
    """Hashing bag-of-words embedding: each content word (see :func:`tokenize`) is hashed with
    CRC-32 into one of ``dim`` buckets, weighted ``1 + log(tf)``, and the vector is
    L2-normalised, so the index's cosine similarity is a TF-weighted word overlap.
    Deterministic across processes (no salted ``hash()``), no download."""

    model_name: str = "hashing-bow"
    dim: int = 1024

    def _vector(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        for term, tf in Counter(tokenize(text)).items():
            v[zlib.crc32(term.encode("utf-8")) % self.dim] += 1.0 + math.log(tf)
        norm = math.sqrt(sum(x * x for x in v))
        return [x / norm for x in v] if norm else v

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


# --------------------------------------------------------------------------
# LLM
# --------------------------------------------------------------------------

_QUESTION_RE = re.compile(r"(?:^|\n)\s*(?:Query|Question|user):\s*(.+?)\s*(?:\n|$)", re.I)
_DASHES = "---------------------"


def split_prompt(prompt: str) -> tuple[str, str]:
    """(context, question) from a prompt built by LlamaIndex's default templates: the text-QA
    prompt ("Context information is below. ----- <context> ----- ... Query: <q> Answer:"), the
    condense-plus-context chat prompt turned into text ("system: ... documents for the
    context: <context> Instruction: ... user: <q> assistant:"), or a plain
    "Context: ... Question: ..." prompt. Without recognisable markers the whole prompt is the
    question and there is no context."""
    found = _QUESTION_RE.findall(prompt)
    question = found[-1] if found else prompt.strip()
    context = ""
    if prompt.count(_DASHES) >= 2:
        context = prompt.split(_DASHES)[1]
    elif "documents for the context:" in prompt:
        context = prompt.split("documents for the context:", 1)[1]
        context = context.split("Instruction:", 1)[0]
    elif "Context:" in prompt:
        context = prompt.split("Context:", 1)[1]
        context = re.split(r"\n\s*(?:Question|Query):", context)[0]
    return context.strip(), question.strip()


class ExtractiveLLM(CustomLLM):
    """Deterministic offline LLM for demos and tests (the LlamaIndex twin of the LangChain
    example's ``ExtractiveChatModel``).

    Answers with the context sentence sharing the most content words with the question (ties
    go to the denser sentence, then the earlier one); below ``min_overlap`` shared words (or
    the number of the question's content words, if smaller) it answers exactly
    :data:`REFUSAL`. A condense prompt ("... Follow Up Input: <q> Standalone question:") is
    answered with the follow-up question itself.

    Token usage is reported as whitespace word counts in ``raw["usage"]`` (OpenAI's shape:
    prompt/completion/total tokens) with ``raw["model"]``; streaming goes word by word, the
    last chunk carrying the usage. ``latency_s`` sleeps before answering.
    """

    model_name: str = MODEL_NAME
    min_overlap: int = 2
    latency_s: float = 0.0

    @classmethod
    def class_name(cls) -> str:
        return "ExtractiveLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model_name, is_chat_model=False,
                           context_window=32_000, num_output=256)

    def answer(self, prompt: str) -> str:
        """The answer text for ``prompt`` (no callbacks, no latency)."""
        if "Follow Up Input:" in prompt and "Standalone question" in prompt:
            follow_up = prompt.rsplit("Follow Up Input:", 1)[1]
            return follow_up.split("Standalone question", 1)[0].strip()
        context, question = split_prompt(prompt)
        return extractive_answer(context, question, self.min_overlap)

    def _raw(self, prompt: str, text: str) -> dict[str, Any]:
        n_in, n_out = len(prompt.split()), len(text.split())
        return {"model": self.model_name, "usage": {
            "prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}}

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        text = self.answer(prompt)
        return CompletionResponse(text=text, raw=self._raw(prompt, text))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        text = self.answer(prompt)
        raw = self._raw(prompt, text)

        def gen() -> CompletionResponseGen:
            # Word by word, each piece keeping its trailing whitespace, so the concatenation
            # of the deltas is exactly ``text``.
            pieces = re.findall(r"\S+\s*", text) or [""]
            sofar = ""
            for i, piece in enumerate(pieces):
                sofar += piece
                last = i == len(pieces) - 1
                yield CompletionResponse(text=sofar, delta=piece, raw=raw if last else None)

        return gen()


# --------------------------------------------------------------------------
# Index and engines
# --------------------------------------------------------------------------


def _node_id(i: int, doc: Any) -> str:
    # One chunk per handbook page, so node ids are the corpus ids (stable across runs).
    return str(doc.doc_id) if i == 0 else f"{doc.doc_id}#{i}"


def build_index(documents: Sequence[Document] | None = None,
                embed_model: BaseEmbedding | None = None) -> VectorStoreIndex:
    """``VectorStoreIndex.from_documents`` over the handbook with :class:`HashingEmbedding`;
    node ids are the corpus ids."""
    docs = list(documents) if documents is not None else load_documents()
    return VectorStoreIndex.from_documents(
        docs, embed_model=embed_model or HashingEmbedding(),
        transformations=[SentenceSplitter(chunk_size=1024, chunk_overlap=0, id_func=_node_id)],
    )


@lru_cache(maxsize=1)
def _default_index() -> VectorStoreIndex:
    return build_index()


def build_query_engine(
    index: VectorStoreIndex | None = None,
    llm: CustomLLM | None = None,
    *,
    streaming: bool = False,
    similarity_top_k: int = 3,
    node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
) -> BaseQueryEngine:
    """``index.as_query_engine(...)`` with :class:`ExtractiveLLM` (the handbook index is built
    once per process when ``index`` is None; indexes are read-only here, so sharing is safe)."""
    index = index if index is not None else _default_index()
    return index.as_query_engine(
        llm=llm if llm is not None else ExtractiveLLM(), streaming=streaming,
        similarity_top_k=similarity_top_k, node_postprocessors=list(node_postprocessors or ()),
    )


def build_chat_engine(index: VectorStoreIndex | None = None,
                      llm: CustomLLM | None = None, **kwargs: Any) -> BaseChatEngine:
    """A condense-plus-context chat engine over the handbook (one conversation per engine)."""
    index = index if index is not None else _default_index()
    kwargs.setdefault("similarity_top_k", 3)
    return index.as_chat_engine(chat_mode="condense_plus_context",
                                llm=llm if llm is not None else ExtractiveLLM(), **kwargs)


# --------------------------------------------------------------------------
# Demo entry point
# --------------------------------------------------------------------------


def _question(q: str | dict[str, Any]) -> tuple[str, str | None]:
    if isinstance(q, str):
        return q, None
    return str(q["question"]), (str(q["id"]) if q.get("id") is not None else None)


def run(ts: Tracescore, questions: Iterable[str | dict[str, Any]]) -> list[tuple[str, str]]:
    """Ask ``questions`` of the offline query engine, traced by ``ts``; ``(trace_id, answer)``
    per question. See the module docstring."""
    from llama_index.core.instrumentation.dispatcher import instrument_tags

    ts.instrument_llama_index()
    engine = build_query_engine()
    out: list[tuple[str, str]] = []
    for q in questions:
        text, qid = _question(q)
        with ts.tracer.start_as_current_span("demo.question") as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
            with instrument_tags({"demo.question_id": qid} if qid else {}):
                answer = str(engine.query(text))
        out.append((trace_id, answer))
    return out


def main() -> None:  # pragma: no cover - exercised by hand / the CLI
    import sqlite3
    import tempfile

    import tracescore
    from tracescore.client import DEFAULT_METRICS

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "llama_index_demo.db")
        ts = tracescore.init(db=db, metrics=list(DEFAULT_METRICS))
        try:
            questions = load_questions()
            results = run(ts, questions)
            for (trace_id, _), q in zip(results, questions):
                ts.add_ground_truth(trace_id, [q["reference"]])
            ts.flush(60)
        finally:
            ts.shutdown()
        conn = sqlite3.connect(db)
        try:
            by_trace: dict[str, dict[str, float]] = {}
            for trace_id, name, value in conn.execute(
                "SELECT r.trace_id, s.name, s.value FROM scores s "
                "JOIN records r ON r.record_id = s.record_id"
            ):
                by_trace.setdefault(trace_id, {})[name] = value
        finally:
            conn.close()
        for (trace_id, answer), q in zip(results, questions):
            got = by_trace.get(trace_id, {})
            shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(got.items())
                              if isinstance(v, (int, float)))
            print(f"Q: {q['question']}\nA: {answer}\n   {shown}\n")


if __name__ == "__main__":  # pragma: no cover
    main()
