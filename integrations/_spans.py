"""Deferred child spans, shared by the framework adapters.

Creating an OTel span costs 20-25 µs; a RAG run has about ten. The adapters create only the
root span on the app's thread (its ids are the record's ids, and it may be held for scores);
every child step is recorded as a :class:`_PendingSpan` (plain data, with the timestamps taken
when its callback fired) and turned into a real span by the background writer once the root
ends (:func:`_materialize_all`, run through ``Tracescore.defer``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.trace import Span, Status

from tracescore import attributes as A
from tracescore._internal.errors import handle_internal_errors
from tracescore.export import clean_text
from tracescore.processor import end_clean
from tracescore.record import TokenUsage

__all__ = ["NO_SPAN", "_NoSpan", "_PendingSpan", "_materialize_all", "_only",
           "usage_attributes"]


def usage_attributes(usage: TokenUsage) -> dict[str, Any]:
    """An LLM step's token counts, under both the GenAI and the OpenInference names."""
    return {
        A.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
        A.LLM_TOKEN_COUNT_PROMPT: usage.input_tokens,
        A.LLM_TOKEN_COUNT_COMPLETION: usage.output_tokens,
        A.LLM_TOKEN_COUNT_TOTAL: usage.total_tokens,
    }


class _PendingSpan:
    """A child step's span as plain data, materialised off the request path."""

    __slots__ = ("name", "parent", "attrs", "start_ns", "end_ns", "status", "real", "lazy")

    def __init__(self, name: str, parent: Any, attrs: dict[str, Any], start_ns: int) -> None:
        self.name = name
        self.parent = parent  # a real Span (the root) or another _PendingSpan
        self.attrs = attrs
        self.start_ns = start_ns
        self.end_ns: int | None = None
        self.status: Status | None = None
        self.real: Span | None = None
        #: Attributes whose values cost something to build (JSON of inputs, documents): built
        #: at materialisation, off the request path.
        self.lazy: list[Callable[[], Mapping[str, Any]]] = []

    def set_attribute(self, key: str, value: Any) -> None:
        self.attrs[key] = value

    def set_attributes(self, attrs: Mapping[str, Any]) -> None:
        self.attrs.update(attrs)

    def set_status(self, status: Status) -> None:
        self.status = status

    def end(self, end_time: int | None = None) -> None:
        self.end_ns = end_time if end_time is not None else time.time_ns()

    def materialize(self, tracer: trace_api.Tracer) -> None:
        parent = self.parent if not isinstance(self.parent, _PendingSpan) else self.parent.real
        if parent is None:
            return  # the parent was never materialised (abandoned run)
        attrs = self.attrs
        for build in self.lazy:
            with handle_internal_errors("spans.lazy_attributes", reraise=False):
                attrs.update(build())
        # Strings valid as UTF-8 here (lone surrogates escaped, as the processor would), so
        # the processor need not scan the span again when it ends (processor.end_clean).
        for k, v in attrs.items():
            if type(v) is str:
                if not v.isascii():
                    attrs[k] = clean_text(v)
            elif isinstance(v, (list, tuple)):
                attrs[k] = type(v)(clean_text(x) if isinstance(x, str) else x for x in v)
        span = tracer.start_span(clean_text(self.name),
                                 context=trace_api.set_span_in_context(parent),
                                 attributes=attrs, start_time=self.start_ns)
        status = self.status
        if status is not None:
            if status.description is not None:
                status = Status(status.status_code, clean_text(status.description))
            span.set_status(status)
        self.real = span
        end_clean(span, self.end_ns or self.start_ns)


class _NoSpan:
    """A child step's span when spans go nowhere (tracescore's own provider with no exporter
    or processor): nothing is kept, built or materialised. One shared instance,
    :data:`NO_SPAN`."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attrs: Mapping[str, Any]) -> None:
        pass

    def set_status(self, status: Status) -> None:
        pass

    def end(self, end_time: int | None = None) -> None:
        pass

    def materialize(self, tracer: trace_api.Tracer) -> None:
        pass


NO_SPAN = _NoSpan()


def _only(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


def _materialize_all(tracer: trace_api.Tracer, pending: list[_PendingSpan]) -> None:
    for p in pending:  # in start order, so every parent exists before its children
        if p.end_ns is not None and p.real is None:
            p.materialize(tracer)
