"""Tests for the offline example RAG app (examples/langchain_rag.py)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AIMessageChunk
from tracescore.examples.langchain_rag import (
    MODEL_NAME,
    PROMPT,
    REFUSAL,
    ExtractiveChatModel,
    KeywordRetriever,
    build_chain,
    build_retrieval_chain,
    build_two_retriever_chain,
    content_terms,
    format_docs,
    load_corpus,
    load_questions,
)

QUESTIONS = load_questions()
ANSWERABLE = [q for q in QUESTIONS if q["doc_id"] is not None]
UNANSWERABLE = [q for q in QUESTIONS if q["doc_id"] is None]


def _answer_correct(answer: str, reference: str) -> bool:
    """The answer contains at least 60% of the reference's content words."""
    ref = content_terms(reference)
    return len(ref & content_terms(answer)) / len(ref) >= 0.6


@pytest.fixture(scope="module")
def retriever() -> KeywordRetriever:
    return KeywordRetriever()


@pytest.fixture(scope="module")
def chain(retriever):
    return build_chain(retriever=retriever)


# -- data ---------------------------------------------------------------------


def test_corpus_shape():
    docs = load_corpus()
    assert 25 <= len(docs) <= 35
    ids = [d.id for d in docs]
    assert len(set(ids)) == len(ids) and all(ids)
    for d in docs:
        assert isinstance(d, Document)
        assert {"source", "title"} <= set(d.metadata)
        assert 2 <= d.page_content.count(". ") + 1 <= 5
    # fresh objects each call
    assert load_corpus()[0] is not docs[0]


def test_questions_shape():
    ids = {d.id for d in load_corpus()}
    assert 28 <= len(QUESTIONS) <= 36
    assert len(UNANSWERABLE) >= 4
    for q in QUESTIONS:
        assert q["question"] and q["reference"]
        if q["doc_id"] is None:
            assert q["reference"] == REFUSAL  # the right answer is to refuse
        else:
            assert q["doc_id"] in ids


# -- retriever ----------------------------------------------------------------


def test_retriever_ranks_reference_doc_first(retriever):
    hits = 0
    for q in ANSWERABLE:
        docs = retriever.invoke(q["question"])
        hits += bool(docs) and docs[0].id == q["doc_id"]
    rate = hits / len(ANSWERABLE)
    print(f"\nretrieval hit@1: {hits}/{len(ANSWERABLE)} = {rate:.0%}")
    assert rate >= 0.7


def test_retriever_scores_rank_order_and_ids(retriever):
    docs = retriever.invoke("How long does a full charge take with the charger?")
    assert 1 <= len(docs) <= retriever.k == 3
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert docs[0].id == "charging"
    assert {"source", "title"} <= set(docs[0].metadata)
    # the corpus documents themselves are not mutated
    assert all("score" not in d.metadata for d in retriever.documents)


def test_retriever_k_and_no_match():
    r = KeywordRetriever(k=5)
    assert len(r.invoke("battery")) == 5
    assert r.invoke("zzzz qqqq") == []


def test_retriever_async_matches_sync(retriever):
    q = ANSWERABLE[0]["question"]
    assert asyncio.run(retriever.ainvoke(q)) == retriever.invoke(q)


# -- model --------------------------------------------------------------------


def _prompt(context: str, question: str):
    return PROMPT.invoke({"context": context, "question": question})


def test_model_extracts_best_sentence_and_reports_usage():
    llm = ExtractiveChatModel()
    context = format_docs(load_corpus()[:5])
    msg = llm.invoke(_prompt(context, "How much torque does the Trail motor have?"))
    assert isinstance(msg, AIMessage)
    assert msg.content == "The Trail uses a 250 W mid-drive motor with 85 Nm of torque."
    usage = msg.usage_metadata
    assert usage is not None
    assert usage["output_tokens"] == len(msg.content.split())
    assert usage["input_tokens"] > usage["output_tokens"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert msg.response_metadata["model_name"] == MODEL_NAME


def test_model_refuses_without_context_or_overlap():
    llm = ExtractiveChatModel()
    assert llm.invoke(_prompt("", "What is the range?")).content == REFUSAL
    assert llm.invoke("hello there").content == REFUSAL
    context = format_docs(load_corpus()[:5])
    assert llm.invoke(_prompt(context, "Who founded the company?")).content == REFUSAL


def test_model_stream_assembles_invoke():
    llm = ExtractiveChatModel()
    prompt = _prompt(
        format_docs(load_corpus()[:3]), "How long does a full charge take?"
    )
    chunks = list(llm.stream(prompt))
    assert len(chunks) > 3 and all(isinstance(c, AIMessageChunk) for c in chunks)
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    msg = llm.invoke(prompt)
    assert full.content == msg.content
    assert full.usage_metadata == msg.usage_metadata
    assert full.response_metadata["model_name"] == MODEL_NAME


def test_model_identity():
    llm = ExtractiveChatModel()
    assert llm._llm_type == "extractive-demo"
    assert llm._identifying_params["model_name"] == MODEL_NAME


# -- chains -------------------------------------------------------------------


def test_unanswerable_questions_are_refused(chain):
    for q in UNANSWERABLE:
        assert chain.invoke(q["question"]) == REFUSAL, q["question"]


def test_answer_quality_varies_realistically(chain):
    answers = chain.batch([q["question"] for q in ANSWERABLE])
    correct = sum(
        _answer_correct(a, q["reference"]) for a, q in zip(answers, ANSWERABLE)
    )
    print(f"\nanswer contains reference key words: {correct}/{len(ANSWERABLE)}")
    assert 0.6 * len(ANSWERABLE) <= correct < len(ANSWERABLE)
    assert REFUSAL not in answers[:5]


def test_invoke_batch_stream_ainvoke_agree(chain):
    questions = [q["question"] for q in QUESTIONS[:4]] + [UNANSWERABLE[0]["question"]]
    invoked = [chain.invoke(q) for q in questions]
    assert chain.batch(questions) == invoked
    assert ["".join(chain.stream(q)) for q in questions] == invoked
    assert len(list(chain.stream(questions[0]))) > 3  # really streams word by word

    async def run_async():
        one = [await chain.ainvoke(q) for q in questions]
        many = await chain.abatch(questions)
        streamed = []
        for q in questions:
            streamed.append("".join([c async for c in chain.astream(q)]))
        return one, many, streamed

    one, many, streamed = asyncio.run(run_async())
    assert one == many == streamed == invoked


def test_retrieval_chain_shape():
    rc = build_retrieval_chain()
    q = ANSWERABLE[0]
    out = rc.invoke({"input": q["question"]})
    assert set(out) == {"input", "context", "answer"}
    assert out["input"] == q["question"]
    assert out["context"] and all(isinstance(d, Document) for d in out["context"])
    assert out["context"][0].id == q["doc_id"]
    assert out["answer"] == build_chain().invoke(q["question"])
    assert asyncio.run(rc.ainvoke({"input": q["question"]})) == out


def test_two_retriever_chain():
    chain = build_two_retriever_chain()
    product_q = "How much torque does the motor of the Trail have?"
    policy_q = "How many monthly installments can I pay in?"
    assert "85 Nm" in chain.invoke(product_q)
    assert "installments" in chain.invoke(policy_q)
    assert "".join(chain.stream(policy_q)) == chain.invoke(policy_q)


def test_deterministic(chain):
    questions = [q["question"] for q in QUESTIONS]
    first = chain.batch(questions)
    second = build_chain().batch(questions)
    assert first == second
    r1, r2 = KeywordRetriever(), KeywordRetriever()
    assert [r1.invoke(q) for q in questions] == [r2.invoke(q) for q in questions]


def test_latency_is_simulated():
    import time

    llm = ExtractiveChatModel(latency_s=0.05)
    t0 = time.perf_counter()
    llm.invoke(_prompt("Alpha beta gamma.", "alpha beta?"))
    assert time.perf_counter() - t0 >= 0.05
