"""A captured request leaves no reference cycles behind (issue 19, total CPU per request).

The apps below make no cyclic garbage on their own: every object of a request is freed by
reference counting. Ours must not add any either — ~80-100 objects per request were left to
the garbage collector, whose full collections over the app's heap then cost a sizeable share
of the process's CPU. Real LangChain, LangGraph and LlamaIndex apps, real pipelines (spans
exported, records stored and scored)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import AGENT_Q1
from test_capture_agents import artifact_agent, user_input


@pytest.fixture
def garbage() -> Iterator[Callable[[Callable[[], None], int], list[Any]]]:
    """``run(request, n)``: the cyclic garbage ``n`` requests left (the collector off
    meanwhile, everything flushed), as the list of unreachable objects."""
    was = gc.isenabled()

    def run(request: Callable[[], None], n: int) -> list[Any]:
        gc.collect()
        gc.disable()
        try:
            for _ in range(n):
                request()
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            found = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            if was:
                gc.enable()
        return found

    yield run
    gc.set_debug(0)
    if was:
        gc.enable()


def _ours(objs: list[Any]) -> list[str]:
    return sorted({type(o).__module__ + "." + type(o).__qualname__ for o in objs
                   if type(o).__module__.startswith("tracescore")})


def _check(ts: Any, request: Callable[[], None], garbage: Any) -> None:
    for _ in range(3):  # warm: imports, caches, the scorer's first calls
        request()
    assert ts.flush(60)
    baseline = garbage(request, 1)  # (what the app's first requests may still set up)
    left = garbage(request, 10)
    assert ts.flush(60)
    assert _ours(left) == [], f"cyclic garbage of tracescore: {_ours(left)}"
    assert len(left) <= len(baseline) + 5, (len(left), len(baseline))


@pytest.mark.parametrize("rate", [1.0, 0.0])
def test_langchain_chain(rate: float, make_ts: Any, garbage: Any) -> None:
    from tracescore.examples.langchain_rag import build_chain

    ts, _ = make_ts(metrics=["rgb_rejection", "token_f1"], sample_rate=rate)
    chain, handler = build_chain(), ts.langchain_handler()
    _check(ts, lambda: chain.invoke("What is tracescore?", config={"callbacks": [handler]}),
           garbage)


def test_langgraph_agent(make_ts: Any, garbage: Any) -> None:
    ts, _ = make_ts(metrics=["rgb_rejection"], sample_rate=1.0)
    app, handler = artifact_agent(), ts.langchain_handler()
    inputs = user_input("artifact_agent", AGENT_Q1)
    _check(ts, lambda: app.invoke(inputs, config={"callbacks": [handler]}), garbage)


def test_llama_index_query_engine(make_ts: Any, garbage: Any) -> None:
    from tracescore.examples.llama_index_rag import build_index, build_query_engine

    ts, _ = make_ts(metrics=["rgb_rejection", "token_f1"], sample_rate=1.0)
    engine = build_query_engine(build_index())
    ts.instrument_llama_index()
    try:
        _check(ts, lambda: engine.query("What is tracescore?"), garbage)
    finally:
        ts.uninstrument_llama_index()
