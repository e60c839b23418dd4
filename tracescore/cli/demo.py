"""The demo runner: the bundled offline RAG app, traced and scored by tracescore.

Runs :mod:`tracescore.examples.langchain_rag` (BM25 retriever + extractive "LLM", real
LangChain objects, no network) on its bundled questions, attaches each question's reference
answer as ground truth, and waits until every run is scored. ``tracescore demo`` prints the
report afterwards. Blocks the calling thread for the whole run (a second or two).

With a judge behind a URL (``openai:MODEL``), the demo first checks that the server answers at
all (:func:`tracescore.judge.outage.check_reachable`, seconds): an unreachable judge is one
line and exit code 3 (:class:`JudgeUnreachable`) before anything runs, never a wait; a judge
that stops answering mid-run ends the wait for scores as soon as its circuit breaker opens.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DB", "JUDGE_QUESTIONS", "LOCAL_JUDGE_QUESTIONS", "DemoResult",
           "DemoSetupError", "JudgeUnreachable", "expected_judge_calls", "judge_intro", "judge_pairs",
           "judge_plan", "run_demo"]

DEFAULT_DB = "tracescore-demo.db"
FRAMEWORKS = ("langchain", "llama-index")
#: Questions a judge demo asks unless told otherwise (all 34 with the bundled local model
#: took a quarter of an hour on 2 cores).
JUDGE_QUESTIONS = 3
#: With ``judge="local"``: the 135M model often rambles to its token limit (5-45 s a call on
#: 2 cores), so one question, and no start-up canary (6 more calls; ``tracescore judge-check
#: --judge local`` runs it, and the model fails it).
LOCAL_JUDGE_QUESTIONS = 1

Question = dict[str, Any]
#: Wraps the questions about to be asked (and their count), e.g. in a progress bar.
Progress = Callable[[Iterator[Question], int], AbstractContextManager[Iterator[Question]]]
#: Told (judge calls made so far, judge calls expected) while the demo waits for scoring.
JudgeProgress = Callable[[int, int], None]


def judge_plan(judge: Any, n: int | None) -> tuple[int | None, bool]:
    """(questions, canary) of a demo with ``judge``: ``n`` or the judge demo's default, and
    whether the start-up judge canary runs (not for the slow bundled ``local`` model)."""
    if judge is None:
        return n, False
    local = judge == "local"
    if n is None:
        n = LOCAL_JUDGE_QUESTIONS if local else JUDGE_QUESTIONS
    return n, not local


def judge_pairs(judge: Any) -> bool:
    """Whether ``judge`` gets ``extract`` and ``contexts`` in one call: not an in-process
    model (``local``, ``llama-cpp:``), which is asked one step at a time (judge/pairing.py)."""
    return not (judge == "local" or (isinstance(judge, str) and judge.startswith("llama-cpp:")))


def expected_judge_calls(records: int, canary: bool = True, *, paired: bool = True) -> int:
    """Judge calls (steps) a judge demo of ``records`` records makes on a fresh database: the
    RAG set's shared calls per record (extract+contexts and statements; 3 when not
    ``paired``), plus the canary's two steps per case (cached steps cost none, so a rerun on
    the same database makes fewer)."""
    from tracescore.judge.canary import CASES

    return (2 if paired else 3) * records + (2 * len(CASES) if canary else 0)


class DemoSetupError(Exception):
    """tracescore could not start on the given database (bad path, not a tracescore db...)."""


class JudgeUnreachable(DemoSetupError):
    """The demo's judge does not answer: said before anything runs (exit code 3)."""

    exit_code = 3


#: How long the up-front check waits for the judge's server to answer.
REACH_TIMEOUT_S = 10.0


def _backend(judge: Any) -> Any:
    """``judge`` as a backend when it is one behind a URL (an ``openai:`` spec or an object),
    None for an in-process model or a spec ``init`` will refuse with its own message."""
    if not isinstance(judge, str):
        return judge
    if not judge.startswith("openai:"):
        return None  # 'local' / 'llama-cpp:': in-process, nothing to reach
    from tracescore.judge import resolve_judge

    try:
        return resolve_judge(judge)
    except (ValueError, ImportError, TypeError):
        return None


def check_judge(judge: Any, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise :class:`JudgeUnreachable` (one line: URL and cause) when ``judge``'s server
    does not answer within ``timeout_s``; nothing for an in-process model."""
    from tracescore.judge.outage import check_reachable

    backend = None if judge is None else _backend(judge)
    problem = None if backend is None else check_reachable(backend, timeout_s)
    if problem is not None:
        raise JudgeUnreachable(
            f"{problem}. Start the judge's server, or point OPENAI_BASE_URL at one "
            "(`tracescore judge-check --judge SPEC` checks it); the demo did not run.")


def judge_intro(judge: Any, count: int, canary: bool) -> list[str]:
    """What a judge demo says before it asks: how many judge calls, to what judge (the
    bundled local model is slow; a server is as fast as it is), and whether the canary
    runs."""
    calls = expected_judge_calls(count, canary, paired=judge_pairs(judge))
    if judge == "local":
        what = "each taking seconds with a small local model"
    elif isinstance(judge, str) and judge.startswith("llama-cpp:"):
        what = f"each taking seconds with the local model {judge.partition(':')[2]}"
    else:
        from tracescore.judge.outage import judge_url

        url = judge_url(_backend(judge))
        what = f"to the judge at {url}" if url else "to the judge"
    q = f"{count} question{'s' if count != 1 else ''}"
    lines = [f"A judge demo asks {q} (about {calls} judge calls, {what}); --n N asks more."]
    if not canary:
        lines.append(
            "The judge canary is skipped to keep this short: `tracescore judge-check --judge "
            f"{judge}` runs it"
            + (" (the bundled model fails it: its scores prove the offline path, not the "
               "answers' quality)." if judge == "local" else "."))
    return lines


@dataclass(frozen=True, slots=True)
class DemoResult:
    db: str
    questions: int
    trace_ids: tuple[str, ...]
    run_seconds: float  # invoking the chain (the app's own time, tracing included)
    score_seconds: float  # flush + shutdown: waiting for the background scoring
    complete: bool  # False if flush timed out with work left


def run_demo(
    db: str | Path = DEFAULT_DB,
    n: int | None = None,
    sample_rate: float = 1.0,
    *,
    progress: Progress | None = None,
    timeout: float = 60.0,
    judge: Any = None,
    framework: str = "langchain",
    judge_progress: JudgeProgress | None = None,
) -> DemoResult:
    """Ask ``n`` bundled questions (all by default, cycling when ``n`` is larger; with a
    ``judge``, :data:`JUDGE_QUESTIONS` by default).

    Appends to ``db`` if it exists. ``progress`` wraps the question iterator once tracescore
    has started (so a progress bar never shows for a run that cannot start);
    ``judge_progress`` is told the judge calls made while the demo waits for the scores.
    """
    import tracescore
    from tracescore.client import DEFAULT_METRICS

    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    if framework == "langchain":
        from tracescore.examples.langchain_rag import load_questions
    else:
        from tracescore.examples.llama_index_rag import load_questions
    questions = load_questions()
    n, canary = judge_plan(judge, n)
    count = len(questions) if n is None else n
    if count < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    check_judge(judge)  # seconds, before anything runs: never a silent wait on a dead judge
    metrics: list[Any] = list(DEFAULT_METRICS)
    if judge is not None:
        from tracescore.metrics.judged import RAG_SET

        metrics += list(RAG_SET)
        # the bundled local model takes ~5-10 s per call on 2 cores, 3 calls a record
        timeout = max(timeout, 120.0 + 40.0 * count)
    started = time.time()  # judge calls from here on are this run's (the canary's too)
    init_kw: dict[str, Any] = {}
    if isinstance(judge, str) and (judge == "local" or judge.startswith("llama-cpp:")):
        # An in-process model runs one call at a time anyway; calls queued behind it would
        # spend their timeout waiting, time out, and be asked again (minutes lost on 2 cores).
        init_kw["concurrency"] = 1
    if judge is not None and not canary:
        init_kw["judge_canary"] = False
    try:
        ts = tracescore.init(db=db, metrics=metrics, sample_rate=sample_rate, judge=judge,
                             **init_kw)
    except (ValueError, TypeError, RuntimeError, ImportError, sqlite3.Error) as exc:
        raise DemoSetupError(str(exc)) from exc
    trace_ids: list[str] = []
    t0 = time.perf_counter()
    try:
        ask = _langchain_asker(ts) if framework == "langchain" else _llama_index_asker(ts)
        todo = itertools.islice(itertools.cycle(questions), count)
        wrapped = progress(todo, count) if progress else contextlib.nullcontext(todo)
        with wrapped as items:
            for q in items:
                # The reference answer is known up front here, so it goes in with the run
                # (ts.run): the record is scored once, with it. An app whose reference
                # arrives later passes run.trace_id to ts.add_ground_truth instead.
                with ts.run(ground_truths=[q["reference"]]) as run:
                    ask(q)
                if run.trace_id is not None:
                    trace_ids.append(run.trace_id)
        t1 = time.perf_counter()
        if judge is not None and judge_progress is not None:
            complete = _flush_showing_judge_calls(ts, timeout, judge_progress,
                                                  expected_judge_calls(
                                                      count, canary,
                                                      paired=judge_pairs(judge)), started)
        else:
            complete = ts.flush(timeout=timeout)
    finally:
        ts.shutdown(timeout=timeout)
    t2 = time.perf_counter()
    return DemoResult(
        db=ts.db_path, questions=count, trace_ids=tuple(trace_ids), run_seconds=t1 - t0,
        score_seconds=t2 - t1, complete=complete,
    )


def _flush_showing_judge_calls(ts: Any, timeout: float, judge_progress: JudgeProgress,
                               expected: int, started: float) -> bool:
    """``ts.flush(timeout)`` in short slices, telling ``judge_progress`` the judge calls
    logged so far (the ``judge_calls`` table, read on a second connection)."""
    deadline = time.monotonic() + timeout
    from ..read.pipeline import judge_calls_since

    conn = sqlite3.connect(f"file:{Path(ts.db_path).resolve()}?mode=ro", uri=True)
    try:
        while True:
            left = deadline - time.monotonic()
            done = ts.flush(timeout=min(1.0, max(left, 0.0)))
            # and the canary's verdict, so the report can say whether to trust this judge
            done = done and (not ts.worker.judge_canary or ts.worker.canary_done.is_set())
            if not done and _judge_down(ts):
                return False  # its jobs wait in the database; the report says for what
            calls = judge_calls_since(conn, started)
            judge_progress(calls, max(expected, calls))
            if done or left <= 0:
                return done
    finally:
        conn.close()


def _judge_down(ts: Any) -> bool:
    """The judge stopped answering mid-run (its breaker opened): waiting is pointless."""
    judge = getattr(getattr(ts, "judge_session", None), "judge", None)
    if judge is None or getattr(judge, "outage", None) is None:
        return False
    return judge.outage.current is not None and judge.breaker.state != 0


def _langchain_asker(ts: Any) -> Callable[[Question], None]:
    from tracescore.examples.langchain_rag import build_chain

    chain = build_chain()
    handler = ts.langchain_handler()

    def ask(q: Question) -> None:
        chain.invoke(q["question"], config={
            "callbacks": [handler], "metadata": {"demo.question_id": q["id"]},
        })

    return ask


def _llama_index_asker(ts: Any) -> Callable[[Question], None]:
    from llama_index.core.instrumentation.dispatcher import (  # type: ignore[attr-defined]
        instrument_tags,
    )

    from tracescore.examples.llama_index_rag import build_query_engine

    ts.instrument_llama_index()  # undone by ts.shutdown()
    engine = build_query_engine()

    def ask(q: Question) -> None:
        with instrument_tags({"demo.question_id": q["id"]}):
            str(engine.query(q["question"]))

    return ask
