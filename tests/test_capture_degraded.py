"""A capture that meets a shape it does not understand degrades to the documented fallback
and counts it: ``stats()["capture"]`` per cause, one log line per cause, the
``capture_degraded`` database counter and the pipeline figure a monitor watches."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from helpers import records, rows
from langchain_core.runnables import RunnableConfig, RunnableLambda
from tracescore.integrations.langchain import runs as lc_runs

from tracescore._internal import capture_degraded
from tracescore.monitor.config import monitors_from_objects
from tracescore.monitor.evaluate import Evaluator


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Process-wide counters from zero (so the first note of a cause logs)."""
    monkeypatch.setattr(capture_degraded, "_counts", {})
    monkeypatch.setattr(capture_degraded, "_degraded", 0)
    monkeypatch.setattr(capture_degraded, "_written", 0)


def attach_mid_run(handler: Any, inner: Any) -> Any:
    def step(q: str, config: RunnableConfig) -> Any:
        config["callbacks"].add_handler(handler, inherit=True)
        return inner.invoke(q, config)
    return step


def test_handler_attached_mid_run_is_a_request_of_its_own_and_counted(
        make_ts: Any, db_path: Any, fresh: None, caplog: pytest.LogCaptureFixture) -> None:
    """The handler is added to the callback manager mid-run (by a step of an outer run it
    never saw): the inner chain's runs name a parent the handler never saw. Fallback: the
    inner chain is the request."""
    ts, _ = make_ts(sample_rate=1.0)
    handler = ts.langchain_handler()
    inner = RunnableLambda(lambda q: f"answer to {q}")
    outer = RunnableLambda(attach_mid_run(handler, inner))
    caplog.set_level(logging.WARNING, logger="tracescore.capture")
    for q in ("one", "two"):
        assert outer.invoke(q) == f"answer to {q}"
    assert ts.flush(20)
    assert [(r["query"], r["answer"]) for r in records(db_path)] == [
        ("one", "answer to one"), ("two", "answer to two")]
    assert ts.stats()["capture"] == {"unknown_parent": 2}
    logged = [r for r in caplog.records if r.name == "tracescore.capture"]
    assert len(logged) == 1 and "never saw" in logged[0].getMessage()  # once per cause
    [counter] = rows(db_path, "SELECT value FROM counters WHERE name = 'capture_degraded'")
    assert counter["value"] == 2


def test_capture_degraded_monitor_figure(make_ts: Any, db_path: Any, fresh: None) -> None:
    ts, _ = make_ts(sample_rate=1.0)
    handler = ts.langchain_handler()
    inner = RunnableLambda(lambda q: q.upper())
    outer = RunnableLambda(attach_mid_run(handler, inner))
    chain = RunnableLambda(lambda q: q.lower())
    chain.invoke("fine", config={"callbacks": [handler]})  # a run the capture understands
    assert ts.flush(20)
    mons = monitors_from_objects({"monitor": [
        {"name": "capture", "score": "capture_degraded", "window": "1h", "threshold": 0,
         "rule": "fixed"}]})
    ev = Evaluator(str(db_path), mons)
    try:
        [state] = ev.run_once()
        assert state.state == "OK" and state.value == 0
        outer.invoke("odd")
        assert ts.flush(20)
        [state] = ev.run_once()
        assert state.state == "ALERT" and state.value == 1, state.summary
        assert "capture fallbacks" in state.summary
    finally:
        ev.close()


def test_fallbacks_adoption_is_counted_but_not_degraded(make_ts: Any, db_path: Any,
                                                         fresh: None) -> None:
    """with_fallbacks children report no parent (langchain-core 1.8): attached to the run
    they run in — a full recovery, counted in stats() but not in the degraded figure."""
    ts, _ = make_ts(sample_rate=1.0)

    def fail(q: str) -> str:
        raise RuntimeError("primary down")

    chain = RunnableLambda(fail).with_fallbacks([RunnableLambda(lambda q: "backup")])
    assert chain.invoke("q", config={"callbacks": [ts.langchain_handler()]}) == "backup"
    assert ts.flush(20)
    [rec] = records(db_path)
    assert rec["answer"] == "backup" and rec["error"] is None
    assert ts.stats()["capture"].get("root_in_run", 0) >= 1
    assert not rows(db_path, "SELECT value FROM counters WHERE name = 'capture_degraded'")


class _RenamedQueue:
    """LangGraph's stream queue after a release that renamed its private ``_queue``."""

    def __init__(self) -> None:
        self._items = [("", "messages", ("chunk", {}))]


def test_langgraph_stream_queue_without_its_private_field_is_counted(fresh: None) -> None:
    # the fallback: nothing subtracted from the cut-off answer, and the cause counted
    assert lc_runs._queued_chunks(_RenamedQueue(), "m1") == 0
    assert capture_degraded.counts() == {"stream_queue": 1}
    assert capture_degraded.take_unwritten() == 1


def test_langgraph_stream_queue_item_of_unknown_shape_is_counted(fresh: None) -> None:
    class Queue:
        _queue = [("ns", "messages")]  # an item of another shape

    assert lc_runs._queued_chunks(Queue(), "m1") == 0
    assert capture_degraded.counts() == {"stream_item": 1}
