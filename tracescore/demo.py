"""The demo runner: the bundled offline RAG app, traced and scored by tracescore.

Runs :mod:`tracescore.examples.langchain_rag` (BM25 retriever + extractive "LLM", real
LangChain objects, no network) on its bundled questions, attaches each question's reference
answer as ground truth, and waits until every run is scored. ``tracescore demo`` prints the
report afterwards. Blocks the calling thread for the whole run (a second or two).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_DB", "DemoResult", "question_count", "run_demo"]

DEFAULT_DB = "tracescore-demo.db"


@dataclass(frozen=True, slots=True)
class DemoResult:
    db: str
    questions: int
    trace_ids: tuple[str, ...]
    run_seconds: float  # invoking the chain (the app's own time, tracing included)
    score_seconds: float  # flush + shutdown: waiting for the background scoring
    complete: bool  # False if flush timed out with work left


def question_count() -> int:
    from .examples.langchain_rag import load_questions

    return len(load_questions())


def run_demo(
    db: str | Path = DEFAULT_DB,
    n: int | None = None,
    sample_rate: float = 1.0,
    *,
    on_progress: Callable[[int], None] | None = None,
    timeout: float = 60.0,
) -> DemoResult:
    """Ask ``n`` bundled questions (all by default, cycling when ``n`` is larger).

    Appends to ``db`` if it exists. ``on_progress(1)`` is called after each question.
    """
    import tracescore
    from tracescore.client import DEFAULT_METRICS
    from tracescore.examples.langchain_rag import build_chain, load_questions

    questions = load_questions()
    count = len(questions) if n is None else n
    if count < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    ts = tracescore.init(db=db, metrics=list(DEFAULT_METRICS), sample_rate=sample_rate)
    trace_ids: list[str] = []
    t0 = time.perf_counter()
    try:
        chain = build_chain()
        handler = ts.langchain_handler()
        for q in itertools.islice(itertools.cycle(questions), count):
            # The chain runs inside a span of ours, as an app's request span would be: the
            # LangChain root span joins its trace, so we know the record's trace id up front and
            # can send the reference answer as feedback for it, as a real app would later.
            with ts.tracer.start_as_current_span("demo.question") as span:
                trace_id = format(span.get_span_context().trace_id, "032x")
                chain.invoke(q["question"], config={
                    "callbacks": [handler], "metadata": {"demo.question_id": q["id"]},
                })
            ts.add_ground_truth(trace_id, [q["reference"]])
            trace_ids.append(trace_id)
            if on_progress is not None:
                on_progress(1)
        t1 = time.perf_counter()
        complete = ts.flush(timeout=timeout)
    finally:
        ts.shutdown(timeout=timeout)
    t2 = time.perf_counter()
    return DemoResult(
        db=ts.db_path, questions=count, trace_ids=tuple(trace_ids), run_seconds=t1 - t0,
        score_seconds=t2 - t1, complete=complete,
    )
