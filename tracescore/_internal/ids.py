"""Trace/span ids for records captured without a span, and hex formatting helpers."""

from __future__ import annotations

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

_gen = RandomIdGenerator()


def new_trace_id() -> str:
    return format(_gen.generate_trace_id(), "032x")


def new_span_id() -> str:
    return format(_gen.generate_span_id(), "016x")
