"""Child spans built finished (integrations/_spans.py ``_finish_direct``) are what the SDK's
``start_span`` + ``end`` would have exported — and share what never changes (trace flags,
the immutable attributes' lock) instead of one per span for the garbage collector."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from tracescore.integrations._spans import _direct_ok, _materialize_all, _PendingSpan


def _children(direct: bool, t: int = 1_700_000_000_000_000_000) -> list[Any]:
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    tracer = provider.get_tracer("t")
    assert _direct_ok(tracer)
    root = tracer.start_span("root")
    a = _PendingSpan("retrieve", root, {"k": "v", "n": 3, "seq": ["x", "y"], "f": 0.5}, t)
    a.end(t + 10)
    b = _PendingSpan("llm", a, {"model": "m"}, t + 11)
    b.set_status(Status(StatusCode.ERROR, "boom"))
    b.end(t + 20)
    if direct:
        _materialize_all(tracer, [a, b])
    else:
        for p in (a, b):
            p.materialize(tracer, direct=False)
    root.end()
    return [s for s in exp.get_finished_spans() if s.name != "root"]


def _view(s: Any) -> tuple[Any, ...]:
    return (s.name, s.kind, dict(s.attributes), s.status.status_code, s.status.description,
            s.start_time, s.end_time, tuple(s.events), tuple(s.links),
            {k: v for k, v in s.resource.attributes.items() if k != "service.instance.id"},
            s.instrumentation_scope, s.context.trace_flags,
            s.parent is not None, s._attributes.maxlen, s._attributes.dropped)


def test_built_finished_is_what_the_sdk_exports() -> None:
    direct, sdk = _children(True), _children(False)
    assert [_view(s) for s in direct] == [_view(s) for s in sdk]
    assert direct[1].parent.span_id == direct[0].context.span_id


def test_finished_children_share_flags_and_lock_and_stay_immutable() -> None:
    a, b = _children(True)
    assert a.context.trace_flags is b.context.trace_flags
    assert a._attributes._lock is b._attributes._lock
    with pytest.raises(TypeError):
        a._attributes["k"] = "changed"
    assert dict(copy.deepcopy(a._attributes)) == dict(a.attributes)  # (takes the lock)
    assert list(a.attributes) == ["k", "n", "seq", "f"]
