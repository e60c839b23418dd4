"""Stored rows back into spans the convention readers can read (plain Python values)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from .._internal.otlp_receiver import attributes


@dataclass(slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attrs: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    error: str | None
    resource: dict[str, Any]
    scope: str
    children: list[Span] = field(default_factory=list)


class Resources:
    """resource id → (resource attributes, scope name), decoded once (a bounded cache)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._cache: dict[str, tuple[dict[str, Any], str]] = {}
        self.limit = limit

    def get(self, rid: str, body: bytes | None) -> tuple[dict[str, Any], str] | None:
        got = self._cache.get(rid)
        if got is None and body is not None:
            rs = trace_pb2.ResourceSpans()
            rs.ParseFromString(bytes(body))
            scope = rs.scope_spans[0].scope.name if rs.scope_spans else ""
            got = (attributes(rs.resource.attributes), scope)
            if len(self._cache) >= self.limit:
                self._cache.clear()
            self._cache[rid] = got
        return got

    def known(self, rid: str) -> bool:
        return rid in self._cache


def decode(trace_id: str, span_id: str, parent_id: str | None, body: bytes,
           resource: tuple[dict[str, Any], str]) -> Span:
    s = trace_pb2.Span()
    s.ParseFromString(bytes(body))
    error = None
    if s.status.code == trace_pb2.Status.STATUS_CODE_ERROR:
        error = s.status.message or "error"
    return Span(trace_id, span_id, parent_id or "", s.name, int(s.start_time_unix_nano),
                int(s.end_time_unix_nano), attributes(s.attributes),
                [(e.name, attributes(e.attributes)) for e in s.events], error, resource[0],
                resource[1])


def link(spans: list[Span]) -> list[Span]:
    """Fill each span's ``children`` (in start order); return the roots: spans whose parent
    is not in the trace (the trace's root, or spans whose parent never came)."""
    by_id = {s.span_id: s for s in spans}
    roots = []
    for s in sorted(spans, key=lambda x: (x.start_ns, x.end_ns)):
        parent = by_id.get(s.parent_id) if s.parent_id else None
        if parent is None or parent is s:
            roots.append(s)
        else:
            parent.children.append(s)
    return roots


def json_value(value: Any) -> Any:
    """An attribute that holds JSON text (a list or object) parsed; anything else as it is."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
