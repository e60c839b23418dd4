"""What a finished request leaves waiting for the writer (issue 33, session 15: the request
path under sustained traffic). Everything a request keeps alive until the background writer
builds its record and spans is promoted to the collector's old generation under sustained
traffic, and every ~100k promoted objects CPython runs a full collection of the app's whole
heap on the app's thread. A root's ended steps therefore go to the writer as one flat list of
plain data (``_spans.StepRows``), not as a step object each.

What could go wrong: a step object kept alive after its root ended (by the deferred task, a
log, a parent link); a step's attributes dict kept tracked (a copy of the tracked shared
dict); spans built from the rows differing from the ones built from the step objects; a step
that outlives its root (a detached thread) losing its parent. Real LangChain runnables, the
real OTel SDK, real SQLite.
"""

from __future__ import annotations

import gc
import threading
from functools import partial
from typing import Any
from uuid import uuid4

import pytest
from helpers import wait_for
from test_request_path_unsampled import _invoke
from tracescore.integrations._spans import StepRows
from tracescore.integrations.langchain.runs import _Step

from tracescore import attributes as A
from tracescore.testing import rag_roots


def _steps_alive() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is _Step)


def _spy_defer(ts: Any) -> list[Any]:
    """The tasks the handler defers to the writer (the real defer still runs them)."""
    tasks: list[Any] = []
    real = ts.defer

    def defer(task: Any, wake: bool = False) -> bool:
        tasks.append(task)
        return real(task, wake=wake)

    ts.defer = defer
    return tasks


@pytest.mark.parametrize("rate", [1.0, 0.0])
@pytest.mark.parametrize("app", ["chain", "agent", "graph"])
def test_a_finished_root_keeps_no_step_object(make_ts: Any, app: str, rate: float) -> None:
    """Once the root ended, none of its step objects is alive (the writer has not taken its
    task yet: it waits in a task put before the request), its steps are one ``StepRows`` task, and the
    steps' attribute dicts are not tracked by the collector."""
    ts, exp = make_ts(sample_rate=rate)
    h = ts.langchain_handler()
    _invoke(app, h)  # (a first request: imports and caches of the frameworks settle)
    assert ts.flush(60)
    gate = threading.Event()
    ts.defer(partial(gate.wait, 60), wake=True)  # (the writer waits here: it takes nothing)
    tasks = _spy_defer(ts)
    gc.collect()
    before = _steps_alive()
    try:
        _invoke(app, h)
        alive = _steps_alive()
    finally:
        gate.set()
    rows = [t for t in tasks if type(t) is StepRows]
    assert alive <= before, "a step object outlived its root"
    assert len(rows) == 1
    r = rows[0]
    i, n, steps = 3, len(r), 0
    while i < n:
        name, parent, attrs, start_ns, end_ns, status, k = r[i:i + 7]
        assert type(name) is str and -1 <= parent < steps and end_ns >= start_ns
        assert type(attrs) is dict and A.SPAN_KIND in attrs
        if all(type(v) in (str, int, float, bool) for v in attrs.values()):
            assert not gc.is_tracked(attrs), name
        i += 7 + k
        steps += 1
    assert steps >= 2
    assert ts.flush(60)
    wait_for(lambda: len(rag_roots(exp)) == 2)
    assert len(exp.get_finished_spans()) == 2 * (steps + 1)


@pytest.mark.parametrize("rate", [1.0, 0.0])
def test_a_step_that_outlives_its_root_keeps_its_parent(make_ts: Any, rate: float) -> None:
    """A step still open when its root ends (a detached thread's): the rows are not used
    (the open step's own end builds its span, parented on its parent step); every span is
    made, each under its parent."""
    ts, exp = make_ts(sample_rate=rate)
    h = ts.langchain_handler()
    tasks = _spy_defer(ts)
    root, a, b, c = uuid4(), uuid4(), uuid4(), uuid4()
    h.on_chain_start({}, {"question": "q?"}, run_id=root, name="root")
    h.on_chain_start({}, "q?", run_id=a, parent_run_id=root, name="a")
    h.on_chain_end("x", run_id=a)
    h.on_chain_start({}, "q?", run_id=b, parent_run_id=root, name="b")
    h.on_chain_start({}, "q?", run_id=c, parent_run_id=b, name="c")
    h.on_chain_end("y", run_id=b)
    h.on_chain_end({"answer": "an answer"}, run_id=root)
    assert not any(type(t) is StepRows for t in tasks)
    h.on_chain_end("z", run_id=c)  # (after its root)
    assert ts.flush(60)
    wait_for(lambda: len(exp.get_finished_spans()) == 4)
    spans = exp.get_finished_spans()
    name = {s.context.span_id: s.name for s in spans}
    parents = {s.name: name.get(s.parent.span_id) if s.parent else None for s in spans}
    assert parents == {"root": None, "a": "root", "b": "root", "c": "b"}


def test_steps_that_end_with_their_root_go_as_rows(make_ts: Any) -> None:
    """The same shape with every step ended before the root: one ``StepRows`` task, and the
    same spans and parents."""
    ts, exp = make_ts(sample_rate=1.0)
    h = ts.langchain_handler()
    tasks = _spy_defer(ts)
    root, a, b, c = uuid4(), uuid4(), uuid4(), uuid4()
    h.on_chain_start({}, {"question": "q?"}, run_id=root, name="root")
    h.on_chain_start({}, "q?", run_id=a, parent_run_id=root, name="a")
    h.on_chain_end("x", run_id=a)
    h.on_chain_start({}, "q?", run_id=b, parent_run_id=root, name="b")
    h.on_chain_start({}, "q?", run_id=c, parent_run_id=b, name="c")
    h.on_chain_end("z", run_id=c)
    h.on_chain_end("y", run_id=b)
    h.on_chain_end({"answer": "an answer"}, run_id=root)
    assert [type(t) for t in tasks].count(StepRows) == 1
    assert ts.flush(60)
    wait_for(lambda: len(exp.get_finished_spans()) == 4)
    spans = exp.get_finished_spans()
    name = {s.context.span_id: s.name for s in spans}
    parents = {s.name: name.get(s.parent.span_id) if s.parent else None for s in spans}
    assert parents == {"root": None, "a": "root", "b": "root", "c": "b"}
    by = {s.name: s for s in spans}
    assert by["a"].attributes[A.SPAN_KIND] == A.KIND_CHAIN
    assert by["c"].start_time >= by["b"].start_time and by["c"].end_time <= by["b"].end_time
