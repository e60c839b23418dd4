"""The LlamaIndex capture: LlamaIndex span id → traced node, runs, and one record per run.

See the package docstring for what is traced. Spans are started with explicit parents and
timestamps; ``context.attach`` is never called. State is keyed by LlamaIndex span id, so
concurrent queries (threads, ``aquery``) do not mix. Every handler method goes through the
internal-error funnel: LlamaIndex's dispatcher silently swallows handler exceptions, so the
funnel is what logs them (and re-raises under pytest, when tests call the handlers directly).
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from llama_index.core.agent.workflow.workflow_events import ToolCallResult
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.chat_engine.types import BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.exception import ExceptionEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent
from llama_index.core.instrumentation.events.retrieval import (
    RetrievalEndEvent,
    RetrievalStartEvent,
)
from llama_index.core.instrumentation.events.synthesis import (
    SynthesizeEndEvent,
    SynthesizeStartEvent,
)
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.response_synthesizers.base import BaseSynthesizer
from llama_index.core.tools.types import BaseTool
from llama_index.core.workflow import StopEvent, Workflow
from opentelemetry import trace as trace_api
from opentelemetry.trace import Span, Status, StatusCode

from tracescore import attributes as A
from tracescore._internal.errors import handle_internal_errors
from tracescore.record import Context
from tracescore.runs import current_scope

from .._owner import Owner, claim, current_owner, release
from .._spans import NO_SPAN, _materialize_all, _NoSpan, _PendingSpan, usage_attributes
from . import agent as G
from ._model import (
    CHAT,
    FRAMEWORK,
    HISTORY_WRITERS,
    LLM,
    OTEL_KIND,
    POSTPROCESS,
    QUERY,
    RETRIEVE,
    ROOT_KINDS,
    START_EVENT_TAG,
    STEP_EXTERNAL,
    STEP_POSTPROCESS,
    STEP_SYNTHESIZE,
    SYNTHESIZE,
    TOOL,
    WORKFLOW,
    Node,
    Run,
    Step,
    funnel,
    live_stream,
    set_error,
    span_name,
    stream_parent,
    suppressed,
    unread,
)
from .events import EventsMixin, step_name
from .extract import query_text, response_text
from .record import emit_record
from .sessions import EngineSessions, session_ids
from .stores import SearchMixin
from .streams import StreamsMixin, track_chat_stream
from .workflows import start_event_query

if TYPE_CHECKING:
    from tracescore.client import Tracescore

__all__ = ["LlamaIndexCapture"]

_METHODS: tuple[tuple[type, str, frozenset[str] | None], ...] = (
    # Agents (FunctionAgent, ReActAgent, AgentWorkflow) and custom workflows: the run span
    # that workflows open around a whole ``Workflow.run``.
    (Workflow, WORKFLOW, frozenset({"run"})),
    (BaseTool, TOOL, frozenset({"call", "acall", "__call__"})),
    (BaseQueryEngine, QUERY, frozenset({"query", "aquery"})),
    (BaseChatEngine, CHAT, frozenset({"chat", "achat", "stream_chat", "astream_chat"})),
    (BaseRetriever, RETRIEVE, frozenset({"retrieve", "aretrieve"})),
    (BaseSynthesizer, SYNTHESIZE, frozenset({"synthesize", "asynthesize"})),
    (BaseNodePostprocessor, POSTPROCESS, frozenset({
        "postprocess_nodes", "apostprocess_nodes", "_postprocess_nodes", "_apostprocess_nodes"})),
    (BaseLLM, LLM, None),  # every LLM method
)
#: The package, where ``MAX_OPEN_SPANS`` is set by apps and tests.
_package = sys.modules[__name__.rpartition(".")[0]]


class LlamaIndexCapture(EventsMixin, StreamsMixin, SearchMixin):
    """Captures LlamaIndex runs for a :class:`~tracescore.client.Tracescore` pipeline.

    Fed by :class:`TracescoreSpanHandler` and :class:`TracescoreEventHandler` (install both with
    ``ts.instrument_llama_index()``). Runs inline on LlamaIndex's instrumentation path, in the
    app's threads and tasks: every method only touches the span map and OTel spans under a
    short lock, never blocks, never does I/O, never raises into LlamaIndex.
    """

    def __init__(self, ts: Tracescore) -> None:
        self.ts = ts
        self.tracer = ts.tracer
        self._max_chars: int = ts.max_attribute_chars
        self._nodes: dict[str, Node] = {}
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        self._kinds: dict[tuple[type, str], str | None] = {}
        self._engine_sessions = EngineSessions()
        self.evicted = 0
        # Span ids of abandoned runs (bounded), so that a run evicted while still running does
        # not turn its later children (a retriever call) into runs of their own.
        self._gone: dict[str, None] = {}
        self._on_event: dict[type, Callable[[Node, Run, Any], None]] = {
            QueryStartEvent: self._query_start,
            QueryEndEvent: self._query_end,
            RetrievalStartEvent: self._retrieval_start,
            RetrievalEndEvent: self._retrieval_end,
            SynthesizeStartEvent: self._synthesize_start,
            SynthesizeEndEvent: self._synthesize_end,
            LLMChatStartEvent: self._llm_start,
            LLMCompletionStartEvent: self._llm_start,
            LLMChatEndEvent: self._llm_end,
            LLMCompletionEndEvent: self._llm_end,
            ExceptionEvent: self._exception,
        }

    @property
    def open_spans(self) -> int:
        """LlamaIndex spans currently tracked (for tests and the bound)."""
        return len(self._nodes)

    @property
    def open_runs(self) -> int:
        return len(self._runs)

    # -- span handler entry points ----------------------------------------------------------
    def span_enter(self, id_: str, bound_args: inspect.BoundArguments | None = None,
                   instance: Any = None, parent_id: str | None = None,
                   tags: Mapping[str, Any] | None = None) -> None:
        try:
            self._enter(id_, bound_args, instance, parent_id, tags)
        except Exception as exc:
            funnel("llama_index.span_enter", exc)

    def span_exit(self, id_: str, result: Any = None) -> None:
        try:
            self._exit(id_, result, None)
        except Exception as exc:
            funnel("llama_index.span_exit", exc)

    def span_drop(self, id_: str, err: BaseException | None = None) -> None:
        try:
            self._exit(id_, None, err if err is not None else RuntimeError("span dropped"))
        except Exception as exc:
            funnel("llama_index.span_drop", exc)

    def handle_event(self, event: BaseEvent) -> None:
        # Most events belong to spans we pass through or never saw: the cheap checks come first.
        span_id = event.span_id
        node = self._nodes.get(span_id) if span_id is not None else None
        if node is None:
            return
        fn = self._on_event.get(type(event))
        if fn is None:  # (a live run's step: its root was not started suppressed)
            return
        try:
            fn(node.target if node.target is not None else node, node.run, event)
        except Exception as exc:
            funnel("llama_index.event", exc)

    def close(self) -> None:
        """Abandon every open run (instrumentation removed): spans end, no records."""
        with handle_internal_errors("llama_index.close"):
            with self._lock:
                runs = list(self._runs.values())
            for run in runs:
                self._finish(run, abandoned="abandoned: LlamaIndex instrumentation removed")

    # -- spans ------------------------------------------------------------------------------
    def _kind(self, instance: Any, name: str) -> str | None:
        if instance is None:
            return None
        method = name.rpartition(".")[2]
        key = (type(instance), method)
        try:
            return self._kinds[key]
        except KeyError:
            pass
        kind = None
        for cls, k, methods in _METHODS:
            if isinstance(instance, cls):
                if methods is None or method in methods:
                    kind = k
                break
        self._kinds[key] = kind
        return kind

    def _enter(self, id_: str, bound_args: inspect.BoundArguments | None, instance: Any,
               parent_id: str | None, tags: Mapping[str, Any] | None) -> None:
        parent = self._nodes.get(parent_id) if parent_id is not None else None
        if parent is None:
            if parent_id is not None and parent_id in self._gone:
                self._gone[id_] = None  # a child of an abandoned run: not traced either
                return
            parent = stream_parent.get()
        name = span_name(id_)
        kind = self._kind(instance, name)
        if parent is None or parent.run.done:
            if kind in ROOT_KINDS and not suppressed():
                self._start_run(id_, name, kind, instance, bound_args, tags, time.time_ns())
            return
        run = parent.run
        target = parent.target if parent.target is not None else parent
        if kind is None and name.endswith(G.CALL_TOOL):  # a workflow agent's tool call
            G.call_tool_enter(run, instance, bound_args)
        streaming = run.streaming_llm
        if kind == LLM and target.kind != LLM and streaming is not None and not streaming.ended:
            # An LLM call started lazily while another LLM stream of the run is consumed (e.g.
            # CustomLLM.astream_complete runs stream_complete inside its generator, outside any
            # LlamaIndex span): it is that stream's delegate, one call, not a second one.
            target = streaming
        owner = id(instance)
        now = 0
        if kind is None or (kind == LLM and target.kind == LLM) \
                or (owner == target.owner and kind == target.kind):
            node = Node(id_, run, None, None, owner, name, target)
        else:
            now = time.time_ns()
            attrs: dict[str, Any] = {A.SPAN_KIND: OTEL_KIND[kind]}
            if kind == RETRIEVE:
                attrs[A.RETRIEVER_NAME] = type(instance).__name__
            # Plain data: the real span is made by the writer once the run ends (none at all
            # when spans go nowhere).
            pending: Any = _PendingSpan(name, target.span, attrs, now) if run.spans else NO_SPAN
            node = Node(id_, run, pending, kind, owner, name, parent=target)
            if kind in (POSTPROCESS, SYNTHESIZE) and bound_args is not None:
                got = bound_args.arguments.get("nodes")
                if isinstance(got, list):
                    node.inputs = list(got)
        with self._lock:
            if not run.done:
                self._nodes[id_] = node
                run.live.add(id_)
                if isinstance(node.span, _PendingSpan):
                    run.pending.append(node.span)
                    if kind == SYNTHESIZE and node.inputs is not None:
                        run.steps.append(Step(run.next_seq(), STEP_SYNTHESIZE, step_name(node),
                                              node.inputs))
                return
        if isinstance(node.span, _PendingSpan):  # the run finished meanwhile (a late child)
            node.span.end(end_time=now)
            self.ts.defer(partial(_materialize_all, self.tracer, [node.span]))

    def _start_run(self, id_: str, name: str, kind: str, instance: Any,
                   bound_args: inspect.BoundArguments | None,
                   tags: Mapping[str, Any] | None, now: int) -> None:
        while len(self._nodes) >= _package.MAX_OPEN_SPANS and self._runs:
            self._evict()
        metadata = dict(tags) if tags else {}
        metadata.pop(START_EVENT_TAG, None)
        scope = current_scope()
        args = bound_args.arguments if bound_args is not None else {}
        start_event = None
        if kind == WORKFLOW:
            start_event = args.get("start_event")
            query = start_event_query(start_event)
        else:
            first = next(iter(args.values()), None) if args else None
            query = query_text(first)
        session_id, user_id = session_ids(self._engine_sessions, kind, instance, metadata, scope,
                                          start_event)
        attrs: dict[str, Any] = {A.SPAN_KIND: OTEL_KIND[kind]}
        if kind == RETRIEVE:
            attrs[A.RETRIEVER_NAME] = type(instance).__name__
        if session_id is not None:
            attrs[A.SESSION_ID] = session_id
        if user_id is not None:
            attrs[A.USER_ID] = self.ts.redact_id(user_id)
        if query is not None:
            text = self._text(query)
            if text is not None:
                attrs[A.INPUT_VALUE] = text
        owner = current_owner()
        outer = owner if owner is not None and owner.framework != FRAMEWORK else None
        # Inside another framework's run (a LangChain tool calling this query engine): nest
        # under its root span, make no record (see _owner). Else no explicit context: the root
        # joins the app's current span, if any.
        span = self.tracer.start_span(
            name, attributes=attrs, start_time=now,
            context=trace_api.set_span_in_context(outer.span) if outer is not None else None)
        run = Run(id_, kind, now, session_id, user_id, metadata, query=query, scope=scope,
                  outer=outer, spans=self.ts.spans_wanted)
        if kind == WORKFLOW:
            run.workflow = instance
        trace_id = format(span.get_span_context().trace_id, "032x")
        if scope is not None and outer is None:
            scope.trace_ids.append(trace_id)
        node = Node(id_, run, span, kind, id(instance), name)
        node.input_set = query is not None
        run.root = node
        if outer is None:
            # Own the request: another framework's runs inside this one hand their documents
            # (and answer) over instead of making records of their own.
            run.claim = claim(Owner(FRAMEWORK, trace_id, span, partial(self._external, run),
                                    partial(self._external_answer, run)))
        with self._lock:
            self._nodes[id_] = node
            self._runs[id_] = run

    def _exit(self, id_: str, result: Any, err: BaseException | None) -> None:
        node = self._nodes.get(id_)
        if node is None:
            return
        run = node.run
        target = node.target if node.target is not None else node
        if type(result) is ToolCallResult:  # a workflow agent's call_tool step
            G.call_tool_result(run, result)
        if err is None and target.kind == LLM and target is not run.root and live_stream(result):
            # An LLM call that returned a stream: LlamaIndex reports its end with an event
            # once the stream is consumed, so the span stays open until then.
            if node is target:
                node.streaming = True
                run.streaming_llm = node
            else:
                with self._lock:
                    if target.held is None:
                        target.held = []
                    target.held.append(id_)
            return
        if node is run.root:
            self._root_exit(run, result, err, time.time_ns())
            return
        if node.kind == POSTPROCESS and err is None and isinstance(result, list):
            # A postprocessor's output goes on to the model instead of its input (assembly).
            nodes = list(result)
            self._note(run, STEP_POSTPROCESS, step_name(node), nodes, inputs=node.inputs)
            self._set_documents(node, nodes)
        elif node.kind == POSTPROCESS and err is not None and node.inputs:
            # It raised: its input went no further (no model saw it; the candidates keep it).
            self._note(run, STEP_POSTPROCESS, f"{step_name(node)} (raised)", [],
                       inputs=node.inputs)
        if node.span is not None:
            self._end_span(node, result, err, time.time_ns())
        self._release(node)

    def _release(self, node: Node) -> None:
        run = node.run
        finish = False
        with self._lock:
            self._nodes.pop(node.id_, None)
            run.live.discard(node.id_)
            for held in node.held or ():
                self._nodes.pop(held, None)
                run.live.discard(held)
            if run.await_owner and node.owner == run.await_owner \
                    and node.name.rpartition(".")[2] in HISTORY_WRITERS:
                run.await_owner = 0
                run.waits -= 1
            if run.exited and not run.live and run.waits <= 0 and not run.done:
                run.done = finish = True
        if finish:
            self._finish(run)

    def _end_span(self, node: Node, result: Any, err: BaseException | None, now: int) -> None:
        if node.ended or node.span is None:
            return
        node.ended = True
        span = node.span
        run = node.run
        if err is not None and not isinstance(err, GeneratorExit):
            set_error(span, err, self.ts.redact_error(err))
        elif node.kind == SYNTHESIZE:
            text = response_text(result)
            if text is not None:
                self._set_text(span, A.OUTPUT_VALUE, text)
        if node.kind == LLM and node.usage is not None:
            usage = node.usage
            span.set_attributes(usage_attributes(usage))
            with self._lock:
                run.usage = usage if run.usage is None else run.usage + usage
        span.end(end_time=now)

    def _root_exit(self, run: Run, result: Any, err: BaseException | None, now: int) -> None:
        root = run.root
        assert root is not None
        wrapped: Any = None
        received: list[str] = []  # what the client has read of a stream (streams.py)
        chat_stream = False
        if run.claim is not None:
            # The request's own work is over: later runs in this context are not inside it.
            release(run.claim)
            run.claim = None
        if isinstance(result, StopEvent) and isinstance(
                result.result, (StreamingResponse, AsyncStreamingResponse)):
            # A workflow whose last step returns a streaming synthesizer's response (the
            # docs' RAG workflow): its answer exists once the app consumes that stream.
            result = result.result
        if err is not None:
            run.error = err
        elif isinstance(result, StreamingResponse) and result.response_txt is None \
                and unread(result.response_gen, False):
            # The answer exists only once the app has consumed the stream. Keep no reference to
            # the response itself, so dropping it unconsumed lets the wrapper be collected.
            run.result_nodes = list(result.source_nodes or ())
            wrapped = result.response_gen = self._wrap_stream(run, result.response_gen, received)
        elif isinstance(result, AsyncStreamingResponse) and result.response_txt is None \
                and unread(result.response_gen, True):
            run.result_nodes = list(result.source_nodes or ())
            wrapped = result.response_gen = self._wrap_astream(run, result.response_gen,
                                                               received)
        elif isinstance(result, StreamingAgentChatResponse) \
                and track_chat_stream(self, run, result):
            # The record waits for the client to be done with the stream (streams.py); no
            # strong reference to the response, so that dropping it is seen.
            chat_stream = True
            run.result_nodes = list(result.source_nodes or ())
        else:
            run.result = result
        finish = False
        with self._lock:
            run.exited = True
            if wrapped is not None or chat_stream:
                run.waits += 1
            if isinstance(result, StreamingAgentChatResponse) and not result.is_done \
                    and result.is_writing_to_memory:
                # stream_chat returns while LlamaIndex's history writer (a thread or task, a
                # child span of this run) is still streaming the answer into the response.
                run.await_owner = id(result)
                run.waits += 1
            if not run.live and run.waits <= 0 and not run.done:
                run.done = finish = True
        if wrapped is not None:
            fin = weakref.finalize(wrapped, self._stream_dropped, run, received)
            fin.atexit = False
        if finish:
            self._finish(run)


    # -- finishing a run --------------------------------------------------------------------
    def _evict(self) -> None:
        with self._lock:
            oldest = next(iter(self._runs.values()), None)
            if oldest is None:
                return
            if oldest.done:  # being finished by another thread right now
                self._runs.pop(oldest.id_, None)
                return
        self.evicted += 1
        self._finish(oldest, abandoned="abandoned: run never finished (evicted)")

    def _finish(self, run: Run, abandoned: str | None = None) -> None:
        end = time.time_ns()
        if run.claim is not None:  # abandoned before its root exited
            release(run.claim)
            run.claim = None
        with self._lock:
            if abandoned is not None:
                if run.done:
                    return  # finished (or finishing) already
                run.done = True
            self._runs.pop(run.id_, None)
            self._nodes.pop(run.id_, None)
            leftovers = [self._nodes.pop(i) for i in run.live if i in self._nodes]
            for n in leftovers:
                for held in n.held or ():
                    self._nodes.pop(held, None)
            if abandoned is not None and not run.exited:
                gone = self._gone
                gone[run.id_] = None
                gone.update(dict.fromkeys(run.live))
                while len(gone) > _package.MAX_OPEN_SPANS:
                    del gone[next(iter(gone))]
            run.live.clear()
        for n in leftovers:
            if n.span is not None and not n.ended:
                n.ended = True
                if abandoned is None and n.streaming:
                    n.span.set_status(Status(StatusCode.UNSET))
                else:
                    n.span.set_status(Status(StatusCode.ERROR, abandoned or "unfinished run"))
                n.span.end(end_time=end)
        if run.pending:
            pending, run.pending = run.pending, []
            self.ts.defer(partial(_materialize_all, self.tracer, pending))
        root = run.root
        if root is None or root.span is None or root.ended:
            run.root = None  # (see below)
            return
        root.ended = True
        span = root.span
        assert not isinstance(span, (_PendingSpan, _NoSpan))  # the root's span is real
        if abandoned is not None:
            span.set_status(Status(StatusCode.ERROR, abandoned))
        else:
            if run.error is not None:
                set_error(span, run.error, self.ts.redact_error(run.error))
            with handle_internal_errors("llama_index.record"):
                self._emit_record(run, span, end)
        span.end(end_time=end)
        # A StreamingResponse the app keeps holds this run (through its stream wrapper): let
        # go of the run's nodes and results now that the record is built.
        run.steps, run.result, run.result_nodes = [], None, None
        run.streaming_llm = None
        # The root node points back at the run: no reference cycle outlives the request, so
        # its objects go with reference counting and never make the garbage collector run
        # (~100 objects per query were left to it; full collections of the app's heap cost
        # a sizeable share of the CPU).
        run.root = None

    def _emit_record(self, run: Run, span: Span, end: int) -> None:
        emit_record(self.ts, run, span, end)

    # -- other frameworks' runs inside this one (see _owner) ------------------------------------
    def _external(self, run: Run, contexts: Sequence[Context], step: str, final: bool) -> None:
        with self._lock:
            run.steps.append(Step(run.next_seq(), STEP_EXTERNAL, step, list(contexts),
                                  final=final))

    def _external_answer(self, run: Run, answer: str) -> None:
        run.external_answer = answer
