"""One object per child step (issue 33, session 14, the structural step): a LangChain child
run is its own pending span (``runs._Step``), a chain or tool step starts with the shared
attributes dict of its kind (``_spans.SharedAttrs``, copied when the step sets one of its own),
and lazy attributes are kept flat in the span's list.

What could go wrong: one step's own attribute (an error type) leaking into every other step
through the shared dict; a step's error span differing from the SDK's; a reference cycle
between the root and its steps keeping a request's objects for the garbage collector. Real
LangChain runnables, the real OTel SDK, real SQLite.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from helpers import wait_for
from langchain_core.runnables import RunnableLambda
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_request_path_unsampled import _ActsAtStart, _invoke, _spans
from tracescore.integrations._spans import SharedAttrs
from tracescore.integrations.langchain import handler as H
from tracescore.integrations.langchain.runs import _Step

from tracescore import attributes as A
from tracescore.testing import rag_roots


def _boom(x: Any) -> Any:
    raise ValueError("step failed")


def _fallback_chain() -> Any:
    """A chain whose middle step fails and is replaced by its fallback (the request succeeds)."""
    first = RunnableLambda(lambda x: x, name="first")
    failing = RunnableLambda(_boom, name="failing").with_fallbacks(
        [RunnableLambda(lambda x: f"answer to {x}", name="rescue")])
    return first | failing


@pytest.mark.parametrize("rate", [1.0, 0.0])
def test_a_steps_own_attribute_stays_its_own(make_ts: Any, tmp_path: Any, rate: float) -> None:
    """The failing step's error attributes are on its span only, and equal the SDK's."""
    got = {}
    for path in ("pending", "sdk"):
        kw: dict[str, Any] = {"sample_rate": rate, "db": tmp_path / f"{path}.db"}
        if path == "sdk":
            exp = InMemorySpanExporter()
            ts, _ = make_ts(span_processor=_ActsAtStart(exp), **kw)
        else:
            ts, exp = make_ts(**kw)
        _fallback_chain().invoke("q?", config={"callbacks": [ts.langchain_handler()]})
        assert ts.flush(60)
        wait_for(lambda e=exp: len(rag_roots(e)) == 1)
        got[path] = _spans(exp)
    assert got["pending"] == got["sdk"]
    by_name = {s[0]: s[4] for s in got["pending"]}
    assert by_name["failing"][A.ERROR_TYPE] == "ValueError"
    assert by_name["first"] == {A.SPAN_KIND: A.KIND_CHAIN}
    assert by_name["rescue"] == {A.SPAN_KIND: A.KIND_CHAIN}
    # the shared dicts themselves never take a step's attribute
    for kind, attrs in H._KIND_ATTRS.items():
        assert type(attrs) is SharedAttrs and dict(attrs) == {A.SPAN_KIND: kind}


def test_a_live_step_is_its_span(make_ts: Any) -> None:
    """While a request runs, each child step in the run map is its own pending span."""
    ts, _ = make_ts(sample_rate=0.0)
    h = ts.langchain_handler()
    seen: list[Any] = []

    def look(x: Any) -> Any:
        seen.extend(r for r in h._runs.values() if not r.is_root)
        return x

    (RunnableLambda(lambda x: x, name="a") | RunnableLambda(look, name="b")).invoke(
        "q?", config={"callbacks": [h]})
    assert seen
    for step in seen:
        assert type(step) is _Step and step.span is step
        assert step.parent is not None and step.root is seen[0].root
    assert ts.flush(60)


@pytest.mark.parametrize("rate", [1.0, 0.0])
@pytest.mark.parametrize("app", ["chain", "agent", "graph"])
def test_a_requests_steps_die_by_reference_count(make_ts: Any, app: str, rate: float) -> None:
    """No step is left in a reference cycle once its request and its spans are done: the
    collector finds none of them in the garbage."""
    ts, exp = make_ts(sample_rate=rate)
    h = ts.langchain_handler()
    _invoke(app, h)  # (a first request: imports and caches of the frameworks settle)
    assert ts.flush(60)
    gc.collect()
    gc.disable()
    try:
        _invoke(app, h)
        assert ts.flush(60)
        wait_for(lambda: len(rag_roots(exp)) == 2)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [o for o in gc.garbage if type(o) is _Step]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []
