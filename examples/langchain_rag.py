"""A small, fully offline RAG app built from real LangChain objects.

Used by ``tracescore demo``, the tests and the benchmarks. Nothing here needs
the network or model weights: retrieval is a tiny BM25 over a bundled corpus
(a fictional e-bike maker's handbook, ``data/corpus.json``) and the "LLM" is a
deterministic extractive chat model that answers with the context sentence that
best overlaps the question.

Run ``python -m examples.langchain_rag`` (or ``python -m
tracescore.examples.langchain_rag`` once installed) to print answers for the
bundled questions.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from operator import itemgetter
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
)
from pydantic import Field, PrivateAttr

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
    "PROMPT",
    "REFUSAL",
    "ExtractiveChatModel",
    "KeywordRetriever",
    "build_chain",
    "build_retrieval_chain",
    "build_two_retriever_chain",
    "content_terms",
    "format_docs",
    "load_corpus",
    "load_questions",
]



# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------




def load_corpus() -> list[Document]:
    """The bundled handbook of the fictional "Larkspur Bikes", one Document per
    topic, with ``id`` set and ``metadata`` = {"source", "title", "section"}
    (section is "product" or "policy"). Returns fresh objects on every call."""
    return [
        Document(
            id=row["id"],
            page_content=row["text"],
            metadata={
                "source": row["source"],
                "title": row["title"],
                "section": row["section"],
            },
        )
        for row in read_json("corpus.json")
    ]




# --------------------------------------------------------------------------
# Text helpers shared by the retriever and the model
# --------------------------------------------------------------------------



def format_docs(docs: Sequence[Document]) -> str:
    """Join the documents' page_content with blank lines."""
    return "\n\n".join(doc.page_content for doc in docs)


# --------------------------------------------------------------------------
# Retriever
# --------------------------------------------------------------------------


class KeywordRetriever(BaseRetriever):
    """Deterministic Okapi BM25 over an in-memory list of Documents.

    Returns at most ``k`` documents in rank order (ties keep corpus order);
    documents that share no term with the query are never returned, so a query
    about something absent from the corpus may get fewer than ``k`` documents.
    Each returned Document is a copy with ``metadata["score"]`` set to its BM25
    score (rounded to 4 decimals) and the original ``id`` kept.
    """

    documents: list[Document] = Field(default_factory=load_corpus)
    k: int = 3
    k1: float = 1.5
    b: float = 0.75

    _doc_tfs: list[Counter[str]] = PrivateAttr(default_factory=list)
    _doc_lens: list[int] = PrivateAttr(default_factory=list)
    _idf: dict[str, float] = PrivateAttr(default_factory=dict)
    _avgdl: float = PrivateAttr(default=0.0)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._doc_tfs = [Counter(tokenize(d.page_content)) for d in self.documents]
        self._doc_lens = [sum(tf.values()) for tf in self._doc_tfs]
        n_docs = len(self.documents)
        self._avgdl = (sum(self._doc_lens) / n_docs) if n_docs else 0.0
        df: Counter[str] = Counter()
        for tf in self._doc_tfs:
            df.update(tf.keys())
        self._idf = {
            term: math.log((n_docs - n + 0.5) / (n + 0.5) + 1.0)
            for term, n in df.items()
        }

    def score(self, query: str) -> list[float]:
        """BM25 score of every document (in corpus order) for ``query``."""
        terms = tokenize(query)
        scores = []
        for tf, dl in zip(self._doc_tfs, self._doc_lens):
            s = 0.0
            norm = self.k1 * (1.0 - self.b + self.b * dl / (self._avgdl or 1.0))
            for term in terms:
                f = tf.get(term, 0)
                if f:
                    s += self._idf[term] * f * (self.k1 + 1.0) / (f + norm)
            scores.append(s)
        return scores

    def _search(self, query: str) -> list[Document]:
        scores = self.score(query)
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        out = []
        for i in ranked[: self.k]:
            if scores[i] <= 0.0:
                break
            doc = self.documents[i]
            out.append(
                Document(
                    id=doc.id,
                    page_content=doc.page_content,
                    metadata={**doc.metadata, "score": round(scores[i], 4)},
                )
            )
        return out

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._search(query)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._search(query)


# --------------------------------------------------------------------------
# Chat model
# --------------------------------------------------------------------------


def _message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def _split_prompt(text: str) -> tuple[str, str]:
    """(context, question) from a "Context:\\n...\\n\\nQuestion: ..." message.
    Without the markers the whole message is the question and there is no
    context."""
    q_at = text.rfind("Question:")
    if q_at == -1:
        return "", text.strip()
    question = text[q_at + len("Question:") :].strip()
    context = text[:q_at]
    c_at = context.find("Context:")
    if c_at != -1:
        context = context[c_at + len("Context:") :]
    return context.strip(), question


def _word_count(text: str) -> int:
    return len(text.split())


class ExtractiveChatModel(BaseChatModel):
    """Deterministic offline chat model for demos and tests.

    Reads the last human message (expected to look like ``PROMPT``'s human
    message: a ``Context:`` block followed by ``Question: ...``) and answers with
    the context sentence sharing the most content words with the question
    (stopwords removed; ties go to the denser sentence, then to the earlier
    one). If that overlap is below ``min_overlap`` words (or below the number of
    content words in the question, if smaller) it answers exactly
    ``REFUSAL``.

    Token usage is reported as whitespace word counts: input = all input
    messages, output = the answer. ``latency_s`` sleeps before answering to
    simulate a slow model (``asyncio.sleep`` on the async paths).
    """

    model_name: str = MODEL_NAME
    min_overlap: int = 2
    latency_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "extractive-demo"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "min_overlap": self.min_overlap}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "tracescore"
        params["ls_model_name"] = self.model_name
        return params

    # -- the actual "model" -------------------------------------------------

    def answer(self, messages: Sequence[BaseMessage]) -> str:
        """The answer text for ``messages`` (no callbacks, no latency)."""
        human = next(
            (m for m in reversed(messages) if isinstance(m, HumanMessage)), None
        )
        if human is None:
            return REFUSAL
        context, question = _split_prompt(_message_text(human))
        return extractive_answer(context, question, self.min_overlap)

    def _respond(
        self, messages: list[BaseMessage], stop: list[str] | None
    ) -> tuple[str, UsageMetadata]:
        text = self.answer(messages)
        for s in stop or ():
            if s and s in text:
                text = text[: text.index(s)]
        n_in = sum(_word_count(_message_text(m)) for m in messages)
        n_out = _word_count(text)
        usage = UsageMetadata(
            input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out
        )
        return text, usage

    def _result(self, text: str, usage: UsageMetadata) -> ChatResult:
        message = AIMessage(
            content=text,
            usage_metadata=usage,
            response_metadata={"model_name": self.model_name},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _chunks(self, text: str, usage: UsageMetadata) -> Iterator[ChatGenerationChunk]:
        # Word by word, each piece keeping its trailing whitespace, so the
        # concatenation is exactly ``text``. Usage and model_name go on the
        # last chunk only: chunk addition sums usage and *concatenates* string
        # metadata values.
        pieces = re.findall(r"\S+\s*", text) or [""]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content=piece,
                    usage_metadata=usage if last else None,
                    response_metadata={"model_name": self.model_name} if last else {},
                    chunk_position="last" if last else None,
                )
            )

    # -- BaseChatModel hooks ------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        return self._result(*self._respond(messages, stop))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        return self._result(*self._respond(messages, stop))

    # Note: BaseChatModel.stream()/astream() call on_llm_new_token themselves
    # and do not pass run_manager to _stream/_astream, so we don't either.
    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        yield from self._chunks(*self._respond(messages, stop))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        for chunk in self._chunks(*self._respond(messages, stop)):
            yield chunk


# --------------------------------------------------------------------------
# Prompt and chains
# --------------------------------------------------------------------------

PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            (
                "You are the support assistant of Larkspur Bikes. Answer the "
                "question using only the context. If the context does not contain "
                "the answer, say that you don't have sufficient information."
            ),
        ),
        ("human", "Context:\n{context}\n\nQuestion: {question}"),
    ]
)


def build_chain(
    retriever: BaseRetriever | None = None, llm: BaseChatModel | None = None
) -> Runnable[str, str]:
    """question (str) -> answer (str):
    ``{"context": retriever | format_docs, "question": RunnablePassthrough()}
    | PROMPT | llm | StrOutputParser()``."""
    retriever = retriever if retriever is not None else KeywordRetriever()
    llm = llm if llm is not None else ExtractiveChatModel()
    return (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | PROMPT
        | llm
        | StrOutputParser()
    )


def build_retrieval_chain(
    retriever: BaseRetriever | None = None, llm: BaseChatModel | None = None
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """Shaped like langchain's ``create_retrieval_chain(retriever,
    create_stuff_documents_chain(llm, prompt))``: invoke with ``{"input": q}``,
    get ``{"input": q, "context": [Document, ...], "answer": str}``."""
    retriever = retriever if retriever is not None else KeywordRetriever()
    llm = llm if llm is not None else ExtractiveChatModel()
    retrieve_docs = (itemgetter("input") | retriever).with_config(
        run_name="retrieve_documents"
    )
    stuff_documents = (
        {
            "context": itemgetter("context") | RunnableLambda(format_docs),
            "question": itemgetter("input"),
        }
        | PROMPT
        | llm
        | StrOutputParser()
    ).with_config(run_name="stuff_documents_chain")
    return (
        RunnablePassthrough.assign(context=retrieve_docs)
        .assign(answer=stuff_documents)
        .with_config(run_name="retrieval_chain")
    )


def _merge_ranked(results: dict[str, list[Document]]) -> list[Document]:
    """Merge the lists of several retrievers: by score, highest first (ties keep
    retriever order), dropping duplicate ids."""
    merged: list[Document] = []
    seen: set[Any] = set()
    flat = [doc for docs in results.values() for doc in docs]
    order = sorted(
        range(len(flat)), key=lambda i: (-flat[i].metadata.get("score", 0.0), i)
    )
    for i in order:
        key = flat[i].id if flat[i].id is not None else flat[i].page_content
        if key not in seen:
            seen.add(key)
            merged.append(flat[i])
    return merged


def build_two_retriever_chain(
    product_retriever: BaseRetriever | None = None,
    policy_retriever: BaseRetriever | None = None,
    llm: BaseChatModel | None = None,
) -> Runnable[str, str]:
    """question (str) -> answer (str), retrieving from two retrievers in one run.

    Defaults: a KeywordRetriever over the "product" handbook pages (name
    "product_retriever", tag "product-docs") and one over the "policy" pages
    (name "policy_retriever", tag "policy-docs"), k=2 each, run in parallel;
    their results are merged by BM25 score before the prompt."""
    corpus = load_corpus()
    if product_retriever is None:
        product_retriever = KeywordRetriever(
            documents=[d for d in corpus if d.metadata["section"] == "product"],
            k=2,
            name="product_retriever",
            tags=["product-docs"],
        )
    if policy_retriever is None:
        policy_retriever = KeywordRetriever(
            documents=[d for d in corpus if d.metadata["section"] == "policy"],
            k=2,
            name="policy_retriever",
            tags=["policy-docs"],
        )
    llm = llm if llm is not None else ExtractiveChatModel()
    retrieve = (
        RunnableParallel(product=product_retriever, policy=policy_retriever)
        | RunnableLambda(_merge_ranked)
    ).with_config(run_name="retrieve_both")
    return (
        {"context": retrieve | format_docs, "question": RunnablePassthrough()}
        | PROMPT
        | llm
        | StrOutputParser()
    )


def main() -> None:
    chain = build_chain()
    for row in load_questions():
        answer = chain.invoke(row["question"])
        print(f"Q: {row['question']}\nA: {answer}\n")


if __name__ == "__main__":
    main()
