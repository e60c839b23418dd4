"""Trace/span ids for records captured without a span, and hex formatting helpers."""

from __future__ import annotations

import random

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

_gen = RandomIdGenerator()
_getrandbits = random.getrandbits
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


def new_trace_id() -> str:
    return format(_gen.generate_trace_id(), "032x")


def new_span_id() -> str:
    return format(_gen.generate_span_id(), "016x")


def new_ids() -> tuple[str, str]:
    """A new trace id and span id, as :func:`new_trace_id` and :func:`new_span_id` make them
    (random bits from the ``random`` module, as the SDK's ``RandomIdGenerator``; neither all
    zeros), in one draw: ``log_record``'s request path makes both per call."""
    while True:
        h = f"{_getrandbits(192):048x}"
        tid, sid = h[:32], h[32:]
        if tid != _ZERO_TRACE and sid != _ZERO_SPAN:
            return tid, sid
