"""Deferred child spans, shared by the framework adapters.

Creating an OTel span costs 20-25 µs; a RAG run has about ten. The adapters create only the
root span on the app's thread (its ids are the record's ids, and it may be held for scores);
every child step is recorded as a :class:`_PendingSpan` (plain data, with the timestamps taken
when its callback fired) and turned into a real span by the background writer once the root
ends (:func:`_materialize_all`, run through ``Tracescore.defer``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import NoneType
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tracescore import attributes as A
from tracescore._internal.errors import handle_internal_errors
from tracescore.export import clean_text
from tracescore.processor import ScoreAttachingProcessor, end_clean, on_end_clean
from tracescore.record import TokenUsage

try:  # (SDK internals the direct path relies on; without them every span takes start_span)
    from opentelemetry.attributes import BoundedAttributes, _clean_attribute_value
    from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics

    _probe = BoundedAttributes(None, None, immutable=False)
    _DIRECT_POSSIBLE = type(getattr(_probe, "_dict", None)) is dict \
        and getattr(_probe, "_immutable", None) is False
except ImportError:  # pragma: no cover - an older or newer SDK
    _DIRECT_POSSIBLE = False

__all__ = ["NO_SPAN", "SharedAttrs", "_NoSpan", "_PendingRoot", "_PendingSpan", "_materialize_all",
           "_materialize_rows", "StepRows", "_only",
           "start_root", "usage_attributes"]


def usage_attributes(usage: TokenUsage) -> dict[str, Any]:
    """An LLM step's token counts, under both the GenAI and the OpenInference names."""
    return {
        A.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
        A.LLM_TOKEN_COUNT_PROMPT: usage.input_tokens,
        A.LLM_TOKEN_COUNT_COMPLETION: usage.output_tokens,
        A.LLM_TOKEN_COUNT_TOTAL: usage.total_tokens,
    }



def _clean_attrs(attrs: dict[str, Any]) -> None:
    """Make the attributes' strings valid UTF-8 in place (lone surrogates escaped, as the
    processor would), so the processor need not scan the span again when it ends."""
    for k, v in attrs.items():
        if type(v) is str:
            if not v.isascii():
                attrs[k] = clean_text(v)
        elif isinstance(v, (list, tuple)):
            attrs[k] = type(v)(clean_text(x) if isinstance(x, str) else x for x in v)

#: A pending span's lazy attributes: flat, four entries per builder — ``fn, a, b, c``, built
#: as ``fn(a, b, c)`` — so that deferring one costs the request no object of its own (a
#: ``partial`` and its argument tuple were two more objects per attribute for the collector).
Lazy = list[Any]


def _call0(build: Callable[[], Mapping[str, Any]], _b: Any, _c: Any) -> Mapping[str, Any]:
    return build()


def _apply_lazy(attrs: dict[str, Any], lazy: Lazy) -> None:
    """Build a pending span's lazy attributes into ``attrs``, in the order they were set (a
    failing one loses its own attributes, not the span)."""
    for i in range(0, len(lazy), 4):
        with handle_internal_errors("spans.lazy_attributes", reraise=False):
            attrs.update(lazy[i](lazy[i + 1], lazy[i + 2], lazy[i + 3]))


def _later(self: Any, build: Callable[[], Mapping[str, Any]]) -> None:
    """Add the attributes ``build()`` returns when the span is materialised (a pending
    span's and a pending root's ``later``)."""
    self.later3(_call0, build, None, None)


def _later3(self: Any, fn: Callable[[Any, Any, Any], Mapping[str, Any]], a: Any, b: Any,
            c: Any) -> None:
    """Add the attributes ``fn(a, b, c)`` returns when the span is materialised: four flat
    entries of ``self.lazy`` (no closure or tuple per deferred attribute)."""
    lazy = self.lazy
    if lazy is None:
        self.lazy = [fn, a, b, c]
    else:
        lazy += (fn, a, b, c)


class SharedAttrs(dict):  # type: ignore[type-arg]
    """Attributes many pending spans start with (a chain step's span kind alone): one dict
    for all of them, copied by a span when it sets one of its own or is materialised — a
    dict per step was one more object per callback for the collector."""

    __slots__ = ()


class _PendingSpan:
    """A child step's span as plain data, materialised off the request path."""

    __slots__ = ("name", "parent", "attrs", "start_ns", "end_ns", "status", "real", "lazy")

    def __init__(self, name: str, parent: Any, attrs: dict[str, Any], start_ns: int) -> None:
        self.name = name
        self.parent = parent  # a real Span (the root), or a _PendingSpan (its .real)
        self.attrs = attrs
        self.start_ns = start_ns
        self.end_ns: int | None = None
        self.status: Status | None = None
        self.real: Span | ReadableSpan | None = None
        #: Attributes whose values cost something to build (JSON of inputs, documents): built
        #: at materialisation, off the request path (:meth:`later`; None: none yet — most
        #: steps have none, and a list per step is one more object for the collector).
        self.lazy: Lazy | None = None

    later = _later
    later3 = _later3

    def set_attribute(self, key: str, value: Any) -> None:
        attrs = self.attrs
        if type(attrs) is SharedAttrs:
            attrs = self.attrs = dict(attrs)
        attrs[key] = value

    def set_attributes(self, attrs: Mapping[str, Any]) -> None:
        own = self.attrs
        if type(own) is SharedAttrs:
            own = self.attrs = dict(own)
        own.update(attrs)

    def set_status(self, status: Status) -> None:
        self.status = status

    def end(self, end_time: int | None = None) -> None:
        self.end_ns = end_time if end_time is not None else time.time_ns()

    def materialize(self, tracer: trace_api.Tracer, direct: bool = False) -> None:
        """Make the real span (writer thread). ``direct``: :func:`_direct_ok` said this
        tracer's child spans may be built finished (:func:`_finish_direct`)."""
        # (a pending root's ids are known from its start: its children need not wait for it)
        parent = self.parent if not isinstance(self.parent, _PendingSpan) else self.parent.real
        if parent is None:
            return  # the parent was never materialised (abandoned run)
        attrs = self.attrs
        if type(attrs) is SharedAttrs:
            attrs = self.attrs = dict(attrs)
        self.real = _child_span(tracer, direct, parent, self.name, attrs, self.lazy,
                                self.status, self.start_ns, self.end_ns)


def _child_span(tracer: Any, direct: bool, parent: Any, name: str, attrs: dict[str, Any],
                lazy: Lazy | None, status: Status | None, start_ns: int, end_ns: int | None
                ) -> Span | ReadableSpan:
    """A pending child span's real span, ended (``attrs``: its own dict, completed here)."""
    if lazy is not None:
        _apply_lazy(attrs, lazy)
    # Strings valid as UTF-8 here (lone surrogates escaped, as the processor would), so
    # the processor need not scan the span again when it ends (processor.end_clean).
    _clean_attrs(attrs)
    if status is not None and status.description is not None:
        status = Status(status.status_code, clean_text(status.description))
    name = clean_text(name)
    if direct:
        done = _finish_direct(tracer, parent, name, attrs, status, start_ns, end_ns or start_ns)
        if done is not None:
            return done
    # (a parent built finished is a ReadableSpan: only its span context is read here)
    span = tracer.start_span(name, context=trace_api.set_span_in_context(parent),
                             attributes=attrs, start_time=start_ns)
    if status is not None:
        span.set_status(status)
    end_clean(span, end_ns or start_ns)
    return span


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
    direct = _direct_ok(tracer)
    for p in pending:  # in start order, so every parent exists before its children
        if p.end_ns is not None and p.real is None:
            p.materialize(tracer, direct)


class StepRows(list):  # type: ignore[type-arg]
    """A root's pending child steps as plain data, for the writer to materialise (calling
    it: :meth:`~tracescore.client.Tracescore.defer`'s task). One flat list: the tracer, the
    pending root built with them (or None) and the span the top steps are parented on, then
    seven entries per step, ``name, parent, attrs, start_ns, end_ns, status, n``, followed
    by its ``n`` lazy entries (``parent``: the index of its parent's step, -1 for the root's
    span). The list, its strings and ints and a plain dict of plain values per step are one
    object the garbage collector tracks while the request waits for the writer, not a dozen
    (a step object, its lazy list, a partial and its arguments): a dozen per request
    promoted to the old generation brought a full collection of the app's whole heap, on
    the app's thread, every few thousand requests of sustained traffic
    (``bench/costs_side.py --sustained``)."""

    __slots__ = ()

    def __call__(self) -> None:
        _materialize_rows(self)


def _materialize_rows(rows: StepRows) -> None:
    """:func:`_materialize_all` of a root's steps stored as :class:`StepRows` (in start
    order): the pending root first, if any."""
    tracer, head, root_span = rows[0], rows[1], rows[2]
    direct = _direct_ok(tracer)
    if head is not None and head.end_ns is not None and head.real is None:
        head.materialize(tracer, direct)
    reals: list[Any] = []
    i, n = 3, len(rows)
    while i < n:
        name, parent, attrs, start_ns, end_ns, status, k = rows[i:i + 7]
        i += 7
        lazy = rows[i:i + k] if k else None
        i += k
        par = root_span if parent < 0 else reals[parent]
        reals.append(None if par is None else  # (its parent was never materialised)
                     _child_span(tracer, direct, par, name, attrs, lazy, status, start_ns,
                                 end_ns))


# -- the direct path ----------------------------------------------------------------------------
# ``start_span`` + ``end`` of the SDK cost the writer ~25 µs per child span (sampler, context,
# a mutable Span with its lock, attributes cleaned one by one, on_start/_on_ending calls), two
# thirds of its work per request. For a child span all of it is known in advance: the parent is
# a local sampled span, the default sampler samples it, and the processors do nothing at start.
# Then the finished ``ReadableSpan`` the SDK would pass to ``on_end`` — same ids, name,
# timestamps, parent, attributes (a ``BoundedAttributes`` under the provider's limits), status,
# events, links, resource and scope — is built at once and handed to the provider's processors.

#: tracer -> (its processors tuple, its sampler, whether the direct path holds)
_DIRECT_PLANS: weakref.WeakKeyDictionary[Any, tuple[Any, Any, bool]] = \
    weakref.WeakKeyDictionary()
_QUIET_START = {SpanProcessor.on_start, BatchSpanProcessor.on_start,
                SimpleSpanProcessor.on_start}
_QUIET_ENDING = {SpanProcessor._on_ending, BatchSpanProcessor._on_ending,
                 SimpleSpanProcessor._on_ending}
_PLAIN = frozenset({str, bool, int, float, NoneType, bytes})
#: A child span's events and links: none, and never added to once it has ended. One empty
#: ``BoundedList`` for all of them (as the SDK's own: ``dropped_events`` 0, ``events`` ()),
#: instead of two lists, two deques and two locks per span that the garbage collector tracks
#: while the span waits in the batch processor's queue.
_NONE = BoundedList(0)
_UNSET = StatusCode.UNSET
#: A child span's trace flags (sampled, and the parent's random-trace-id bit): one shared
#: ``TraceFlags`` per value — an int subclass the garbage collector tracks, one per span
#: while it waits in the batch processor's queue otherwise.
_FLAGS: dict[int, TraceFlags] = {}
#: The lock of a finished child span's attributes: they are immutable (every method that
#: takes the lock raises on them first, or reads without it), so one lock serves them all
#: instead of one per span for the collector to track.
_SHARED_LOCK = threading.Lock()


def _quiet(p: Any) -> bool:
    """``p``'s ``on_start`` and ``_on_ending`` do nothing (so skipping them changes nothing)."""
    t = type(p)
    if t is ScoreAttachingProcessor:  # forwards both to its inner processor
        return _quiet(p.inner)
    if t is SynchronousMultiSpanProcessor:
        return all(_quiet(q) for q in p._span_processors)
    return t.on_start in _QUIET_START and getattr(t, "_on_ending", None) in _QUIET_ENDING


def _direct_ok(tracer: Any) -> bool:
    """Whether ``tracer``'s child spans may take :func:`_finish_direct`: the SDK's own tracer,
    enabled, without its internal span metrics, with a ``ParentBased`` sampler that samples
    every child of a local sampled parent (the default), and span processors whose
    ``on_start``/``_on_ending`` do nothing. Else ``start_span``/``end`` as before."""
    if not _DIRECT_POSSIBLE or type(tracer) is not SdkTracer:
        return False
    try:
        active = tracer.span_processor
        procs = getattr(active, "_span_processors", None)
        sampler = tracer.sampler
        plan = _DIRECT_PLANS.get(tracer)
        if plan is None or plan[0] is not procs or plan[1] is not sampler:
            ok = (type(active) is SynchronousMultiSpanProcessor and isinstance(procs, tuple)
                  and isinstance(tracer._tracer_metrics, NoOpTracerMetrics)
                  and type(sampler) is ParentBased
                  and getattr(sampler, "_local_parent_sampled", None) is ALWAYS_ON
                  and all(_quiet(p) for p in procs))
            plan = (procs, sampler, ok)
            _DIRECT_PLANS[tracer] = plan
        return plan[2] and tracer._is_enabled()
    except Exception:  # an SDK that changed shape: the ordinary path
        return False


def _finish_direct(tracer: Any, parent: Any, name: str, attrs: Mapping[str, Any],
                   status: Status | None, start_ns: int, end_ns: int) -> ReadableSpan | None:
    """The ended child span of ``parent``, as ``start_span`` + ``set_status`` + ``end`` would
    make it, handed to ``tracer``'s processors; None (nothing done) when the parent is not a
    local sampled span or the status is not a plain ``Status``: then the caller takes the
    ordinary path."""
    ctx = parent.get_span_context()
    if ctx is None or not ctx.is_valid or ctx.is_remote or not ctx.trace_flags.sampled \
            or (status is not None and type(status) is not Status):
        return None
    limits = tracer._span_limits
    bits = TraceFlags.SAMPLED | (ctx.trace_flags & TraceFlags.RANDOM_TRACE_ID)
    flags = _FLAGS.get(bits)
    if flags is None:
        flags = _FLAGS[bits] = TraceFlags(bits)
    context = SpanContext(ctx.trace_id, tracer.id_generator.generate_span_id(),
                          is_remote=False, trace_flags=flags, trace_state=ctx.trace_state)
    kw: dict[str, Any] = {}
    if status is not None and status.status_code is not _UNSET:
        kw["status"] = status  # (the SDK ignores an UNSET status: the default stays)
    span = ReadableSpan(
        name=name, context=context, parent=ctx, resource=tracer.resource,
        attributes=_bounded(attrs, limits.max_span_attributes,
                            limits.max_span_attribute_length),
        events=_NONE, links=_NONE,
        kind=SpanKind.INTERNAL, instrumentation_info=tracer.instrumentation_info,
        start_time=start_ns, end_time=end_ns,
        instrumentation_scope=tracer._instrumentation_scope, **kw)
    on_end_clean(tracer.span_processor, span)
    return span


def _bounded(attrs: Mapping[str, Any], maxlen: int | None,
             max_value_len: int | None) -> BoundedAttributes:
    """The ended span's ``BoundedAttributes``, as the SDK builds it from ``attrs`` (each
    value cleaned by the SDK's own function, except the plain ones it keeps as they are)."""
    if (maxlen is not None and len(attrs) > maxlen) \
            or not all(type(k) is str and k for k in attrs):
        return BoundedAttributes(maxlen, attrs, immutable=True, max_value_len=max_value_len)
    out = BoundedAttributes(maxlen, None, immutable=False, max_value_len=max_value_len)
    d = out._dict
    for k, v in attrs.items():
        if type(v) in _PLAIN and (max_value_len is None or type(v) is not str):
            d[k] = v
        else:
            d[k] = _clean_attribute_value(v, max_value_len)
    out._immutable = True
    out._lock = _SHARED_LOCK
    return out


# -- the root span, pending ------------------------------------------------------------------
# ``start_span`` and ``end`` of the root span cost the request ~20 µs (sampler, ids, a mutable
# Span with two locks, attributes cleaned one by one, the processor's UTF-8 scan at its end).
# With the default sampler and quiet processors (:func:`_direct_ok`) and no span of the app's
# around it, everything the SDK would do is known: the root gets its ids at its start, as the
# SDK makes them, and is built finished when its run ends (:meth:`_PendingRoot.materialize`):
# on the app's thread when the span may be held for its scores, else by the writer with the
# run's child steps (an unsampled request: nothing waits for it).


class _PendingRoot(trace_api.Span):
    """A root step's span as plain data with real ids (:func:`start_root`)."""

    def __init__(self, tracer: Any, name: str, attrs: dict[str, Any], start_ns: int) -> None:
        gen = tracer.id_generator
        trace_id = gen.generate_trace_id()
        flags = TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID if gen.is_trace_id_random() \
            else TraceFlags.SAMPLED
        f = _FLAGS.get(flags)
        if f is None:
            f = _FLAGS[flags] = TraceFlags(flags)
        self.context = SpanContext(trace_id, gen.generate_span_id(), is_remote=False,
                                   trace_flags=f)
        self.name = name
        self.attrs = attrs
        self.start_ns = start_ns
        self.end_ns: int | None = None
        self.status: Status | None = None
        self.real: ReadableSpan | None = None
        #: Text attributes built when the span is (by the writer, for a root no step
        #: outlives: the root's input and output JSON off the request path).
        self.lazy: Lazy | None = None

    later = _later
    later3 = _later3

    # (the Span interface: other frameworks' spans may nest under it, see .._owner)
    def get_span_context(self) -> SpanContext:
        return self.context

    def set_attribute(self, key: str, value: Any) -> None:
        self.attrs[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.attrs.update(attributes)

    def set_status(self, status: Any, description: str | None = None) -> None:
        if not isinstance(status, Status):
            status = Status(status, description)
        if self.status is None or self.status.status_code is not StatusCode.OK:
            self.status = status

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None
                  ) -> None:
        pass  # (nothing of ours adds events to a root span)

    def update_name(self, name: str) -> None:
        self.name = name

    def is_recording(self) -> bool:
        return self.real is None

    def record_exception(self, exception: BaseException, attributes: Any = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        pass

    def end(self, end_time: int | None = None) -> None:
        if self.end_ns is None:
            self.end_ns = end_time if end_time is not None else time.time_ns()

    def materialize(self, tracer: Any, direct: bool = True) -> None:
        """Build the ended span and hand it to ``tracer``'s processors (once)."""
        if self.real is not None:
            return
        attrs = self.attrs
        if self.lazy is not None:
            _apply_lazy(attrs, self.lazy)
            self.lazy = None
        if None in attrs.values():  # (the SDK keeps no attribute set to None)
            attrs = {k: v for k, v in attrs.items() if v is not None}
        _clean_attrs(attrs)  # (valid UTF-8, so the processor need not scan it again)
        status = self.status
        kw: dict[str, Any] = {}
        if status is not None and status.status_code is not _UNSET:
            if status.description is not None:
                status = Status(status.status_code, clean_text(status.description))
            kw["status"] = status
        limits = tracer._span_limits
        end = self.end_ns if self.end_ns is not None else time.time_ns()
        span = ReadableSpan(
            name=clean_text(self.name), context=self.context, parent=None,
            resource=tracer.resource,
            attributes=_bounded(attrs, limits.max_span_attributes,
                                limits.max_span_attribute_length),
            events=_NONE, links=_NONE, kind=SpanKind.INTERNAL,
            instrumentation_info=tracer.instrumentation_info,
            start_time=self.start_ns, end_time=end,
            instrumentation_scope=tracer._instrumentation_scope, **kw)
        self.real = span
        on_end_clean(tracer.span_processor, span)


def start_root(tracer: Any, name: str, attrs: dict[str, Any], start_ns: int) -> Any:
    """A root step's span: a :class:`_PendingRoot` when the direct path holds for ``tracer``
    (:func:`_direct_ok`), its root sampler is the default (``ALWAYS_ON``) and no span of the
    app's is current (the span would be its child: the SDK's path then); else the SDK's."""
    if _direct_ok(tracer) and getattr(tracer.sampler, "_root", None) is ALWAYS_ON \
            and not trace_api.get_current_span().get_span_context().is_valid:
        return _PendingRoot(tracer, name, attrs, start_ns)
    return tracer.start_span(name, attributes=attrs, start_time=start_ns)
