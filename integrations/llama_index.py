"""LlamaIndex capture: instrumentation span/event handlers that make OTel spans and one
`RagRecord` per root run.

Uses LlamaIndex's instrumentation API (``llama_index.core.instrumentation``), not the legacy
callback manager: a :class:`TracescoreSpanHandler` and a :class:`TracescoreEventHandler` are
added to the root dispatcher, and both feed one :class:`LlamaIndexCapture`, which keeps a light
map: LlamaIndex span id → node (OTel span or pass-through, and its run).

What is traced. A *run* starts at the outermost call of a query engine (``query``/``aquery``),
a chat engine (``chat``/``achat``/``stream_chat``/``astream_chat``) or a retriever used on its
own (``retrieve``/``aretrieve``); the run's span joins the app's current OTel span, if any. Inside
a run, OTel spans are made for query engines and chat engines (CHAIN), retrievers (RETRIEVER),
synthesizers and node postprocessors (CHAIN) and LLMs (LLM; nested LLM calls of one LLM call,
e.g. ``predict`` → ``complete`` or ``chat`` → ``complete``, are one span). LlamaIndex's other
spans (embeddings, splitters, private helpers) are passed through: their children and events
go to the nearest traced ancestor. LlamaIndex calls outside any run (index building, a bare
``llm.complete``) are not traced.

The record is built when the run ends: the root span has exited and nothing it depends on is
still open. A streaming query engine returns before its answer exists: its
``StreamingResponse`` generator is wrapped, the LLM spans made while it is consumed are parented
to the run's root, and the record (with the streamed answer) is built once the stream is
exhausted; a stream that is dropped unconsumed ends its spans as abandoned, with no record. A
``stream_chat`` run ends when LlamaIndex's history writer has finished. Open runs are bounded
(:data:`MAX_OPEN_SPANS`): the oldest is abandoned first.

Sessions: a chat engine's turns share one session id — its memory's ``session_id`` (LlamaIndex's
``Memory``, the default), else an id kept per engine object. :func:`session` or LlamaIndex's
``instrument_tags({"session_id": ..., "user_id": ...})`` set them explicitly; other
``instrument_tags`` become the record's metadata.

Spans are started with explicit parents and timestamps; ``context.attach`` is never called.
State is keyed by LlamaIndex span id, so concurrent queries (threads, ``aquery``) do not mix.
Every handler method goes through the internal-error funnel: LlamaIndex's dispatcher silently
swallows handler exceptions, so the funnel is what logs them (and re-raises under pytest, when
tests call the handlers directly).
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
import uuid
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, Status, StatusCode

from . import require

require("llama_index.core", "llama-index")

from llama_index.core.base.base_query_engine import BaseQueryEngine  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.base.llms.base import BaseLLM  # noqa: E402
from llama_index.core.base.response.schema import (  # noqa: E402
    AsyncStreamingResponse,
    PydanticResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.chat_engine.types import (  # noqa: E402
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)

# Re-exported by llama_index.core.instrumentation without __all__, hence the ignore.
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined] # noqa: E402,I001
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.instrumentation.events.exception import ExceptionEvent  # noqa: E402
from llama_index.core.instrumentation.events.llm import (  # noqa: E402
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent  # noqa: E402
from llama_index.core.instrumentation.events.retrieval import (  # noqa: E402
    RetrievalEndEvent,
    RetrievalStartEvent,
)
from llama_index.core.instrumentation.events.synthesis import (  # noqa: E402
    SynthesizeEndEvent,
    SynthesizeStartEvent,
)
from llama_index.core.instrumentation.span import BaseSpan  # noqa: E402
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler  # noqa: E402
from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.response_synthesizers.base import BaseSynthesizer  # noqa: E402
from llama_index.core.schema import NodeWithScore  # noqa: E402
from llama_index.core.tools.types import BaseTool  # noqa: E402
from llama_index.core.workflow import StopEvent, Workflow  # noqa: E402

from tracescore import attributes as A  # noqa: E402
from tracescore._internal.errors import handle_internal_errors  # noqa: E402
from tracescore.record import Context, RagRecord, TokenUsage  # noqa: E402
from tracescore.runs import RunScope, current_scope  # noqa: E402

from ._spans import _materialize_all, _only, _PendingSpan, usage_attributes  # noqa: E402
from ._text import clip, format_prompt, json_attr, to_text  # noqa: E402

if TYPE_CHECKING:
    from tracescore.client import Tracescore

__all__ = [
    "MAX_OPEN_SPANS",
    "Instrumentation",
    "LlamaIndexCapture",
    "TracescoreEventHandler",
    "TracescoreSpanHandler",
    "instrument",
    "node_context",
    "query_text",
    "response_text",
    "session",
    "token_usage",
    "uninstrument",
]

#: Open LlamaIndex spans kept at most (runs that never end, e.g. streams that are never
#: consumed, are abandoned oldest first beyond this).
MAX_OPEN_SPANS = 10_000
SESSION_KEYS = ("session_id", "thread_id", "conversation_id")
#: Record metadata key for the query the retriever got when it differs from the user's
#: (a chat engine's condensed question).
RETRIEVAL_QUERY_KEY = "llama_index.retrieval_query"
STREAM_INCOMPLETE_KEY = "llama_index.stream_incomplete"

# What a LlamaIndex span is, from its instance's class and its method name.
QUERY, CHAT, RETRIEVE, SYNTHESIZE, POSTPROCESS, LLM, WORKFLOW, TOOL = (
    "query", "chat", "retrieve", "synthesize", "postprocess", "llm", "workflow", "tool")
ROOT_KINDS = frozenset({QUERY, CHAT, RETRIEVE, WORKFLOW})
_OTEL_KIND = {QUERY: A.KIND_CHAIN, CHAT: A.KIND_CHAIN, RETRIEVE: A.KIND_RETRIEVER,
              SYNTHESIZE: A.KIND_CHAIN, POSTPROCESS: A.KIND_CHAIN, LLM: A.KIND_LLM,
              WORKFLOW: A.KIND_CHAIN, TOOL: A.KIND_TOOL}
#: Start-event fields that hold the user's message, in order of preference (agents take
#: ``user_msg``; custom workflows are started with keyword arguments of their own).
START_EVENT_KEYS = ("user_msg", "query", "question", "input", "query_str", "msg", "message")
#: The instrument tag LlamaIndex workflows add to a run span (a summary of the start event):
#: not the app's metadata.
_START_EVENT_TAG = "llamaindex.start_event"
MAX_START_FIELDS = 32
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
_HISTORY_WRITERS = frozenset({"write_response_to_history", "awrite_response_to_history"})

#: The run whose stream is being consumed: spans LlamaIndex starts while our stream wrapper
#: pulls the next chunk (the LLM call of a lazy streaming synthesizer) have no LlamaIndex
#: parent, because the app consumes the stream outside the query's span.
_stream_parent: ContextVar[_Node | None] = ContextVar("tracescore_llama_stream", default=None)
_session: ContextVar[tuple[str, str | None] | None] = ContextVar("tracescore_llama_session",
                                                                 default=None)


@contextmanager
def session(session_id: str, user_id: str | None = None) -> Iterator[None]:
    """Give every LlamaIndex run started inside the block ``session_id`` (and ``user_id``).

    Overrides a chat engine's own session id. Context-local: threads and tasks started inside
    the block inherit it only if they copy the context (asyncio tasks do).
    """
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
    if user_id is not None and not isinstance(user_id, str):
        raise TypeError(f"user_id must be a str or None, got {type(user_id).__name__}")
    token = _session.set((session_id, user_id))
    try:
        yield
    finally:
        _session.reset(token)


@dataclass(slots=True, eq=False)
class _Run:
    """One run: a root LlamaIndex call and everything under it."""

    id_: str  # LlamaIndex id of the root span
    kind: str
    start_ns: int
    session_id: str | None
    user_id: str | None
    metadata: dict[str, Any]
    root: _Node | None = None
    query: str | None = None
    retrieval_query: str | None = None
    retrieval_queries: list[str] = field(default_factory=list)
    retrievals: list[tuple[str, list[Any]]] = field(default_factory=list)
    synthesized: list[Any] | None = None  # the nodes the (last) synthesizer saw
    result: Any = None  # the root call's return value
    result_nodes: list[Any] | None = None
    query_answer: str | None = None  # the last QueryEndEvent's answer text
    answer: str | None = None
    answer_known: bool = False  # set by the stream wrapper
    incomplete: bool = False  # the stream was closed before its end
    usage: TokenUsage | None = None
    model: str | None = None
    error: BaseException | None = None
    live: set[str] = field(default_factory=set)  # open non-root nodes
    waits: int = 0  # streams / history writers the root's result still depends on
    await_owner: int = 0  # id() of a StreamingAgentChatResponse whose writer we wait for
    streaming_llm: _Node | None = None  # an LLM span whose stream is being consumed
    exited: bool = False
    done: bool = False
    prompt: Any = None  # the last LLM call's raw prompt (messages or text)
    scope: RunScope | None = None  # the app's ``ts.run()`` scope, if any
    #: Child spans as plain data, in start order: materialised by the writer once the run ends.
    pending: list[_PendingSpan] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _Node:
    """A LlamaIndex span inside a run: traced (``span`` set) or passed through to ``target``."""

    id_: str  # LlamaIndex span id
    run: _Run
    span: Span | _PendingSpan | None  # the root's real Span; a _PendingSpan for the others
    kind: str | None
    owner: int  # id() of the instance whose method opened the span
    name: str
    target: _Node | None = None  # the traced node this one reports to (itself when traced)
    usage: TokenUsage | None = None
    op: str | None = None  # gen_ai operation, set by the first LLM start event
    input_set: bool = False
    held: list[str] | None = None  # pass-through ids kept open for this streaming LLM span
    streaming: bool = False  # an LLM span whose stream is still being consumed
    ended: bool = False


def _suppressed() -> bool:
    return bool(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY))


def _span_name(id_: str) -> str:
    # dispatcher.span ids are "<Class>.<method>-<uuid4>"; a uuid4 string is 36 characters.
    return id_[:-37] if len(id_) > 37 and id_[-37] == "-" else id_


def _live_stream(value: Any) -> bool:
    """A generator that has not finished (the result of a call that streams)."""
    if inspect.isgenerator(value):
        return value.gi_frame is not None
    if inspect.isasyncgen(value):
        return value.ag_frame is not None
    return False


def _unread(stream: Any, is_async: bool) -> bool:
    """A response stream the app has not read to its end yet."""
    if inspect.isgenerator(stream) or inspect.isasyncgen(stream):
        return _live_stream(stream)
    return isinstance(stream, AsyncIterator if is_async else Iterator)


class LlamaIndexCapture:
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
        self._nodes: dict[str, _Node] = {}
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._kinds: dict[tuple[type, str], str | None] = {}
        self._engine_sessions: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self.evicted = 0
        # Span ids of abandoned runs (bounded), so that a run evicted while still running does
        # not turn its later children (a retriever call) into runs of their own.
        self._gone: dict[str, None] = {}
        self._on_event: dict[type, Callable[[_Node, _Run, Any], None]] = {
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
        if _suppressed():
            return
        try:
            self._enter(id_, bound_args, instance, parent_id, tags)
        except Exception as exc:
            _funnel("llama_index.span_enter", exc)

    def span_exit(self, id_: str, result: Any = None) -> None:
        try:
            self._exit(id_, result, None)
        except Exception as exc:
            _funnel("llama_index.span_exit", exc)

    def span_drop(self, id_: str, err: BaseException | None = None) -> None:
        try:
            self._exit(id_, None, err if err is not None else RuntimeError("span dropped"))
        except Exception as exc:
            _funnel("llama_index.span_drop", exc)

    def handle_event(self, event: BaseEvent) -> None:
        # Most events belong to spans we pass through or never saw: the cheap checks come first.
        span_id = event.span_id
        node = self._nodes.get(span_id) if span_id is not None else None
        if node is None:
            return
        fn = self._on_event.get(type(event))
        if fn is None or _suppressed():
            return
        try:
            fn(node.target if node.target is not None else node, node.run, event)
        except Exception as exc:
            _funnel("llama_index.event", exc)

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
            parent = _stream_parent.get()
        name = _span_name(id_)
        kind = self._kind(instance, name)
        if parent is None or parent.run.done:
            if kind in ROOT_KINDS:
                self._start_run(id_, name, kind, instance, bound_args, tags, time.time_ns())
            return
        run = parent.run
        target = parent.target if parent.target is not None else parent
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
            node = _Node(id_, run, None, None, owner, name, target)
        else:
            now = time.time_ns()
            attrs: dict[str, Any] = {A.SPAN_KIND: _OTEL_KIND[kind]}
            if kind == RETRIEVE:
                attrs[A.RETRIEVER_NAME] = type(instance).__name__
            # Plain data: the real span is made by the writer once the run ends.
            pending = _PendingSpan(name, target.span, attrs, now)
            node = _Node(id_, run, pending, kind, owner, name)
            node.target = node
        with self._lock:
            if not run.done:
                self._nodes[id_] = node
                run.live.add(id_)
                if isinstance(node.span, _PendingSpan):
                    run.pending.append(node.span)
                return
        if isinstance(node.span, _PendingSpan):  # the run finished meanwhile (a late child)
            node.span.end(end_time=now)
            self.ts.defer(partial(_materialize_all, self.tracer, [node.span]))

    def _start_run(self, id_: str, name: str, kind: str, instance: Any,
                   bound_args: inspect.BoundArguments | None,
                   tags: Mapping[str, Any] | None, now: int) -> None:
        while len(self._nodes) >= MAX_OPEN_SPANS and self._runs:
            self._evict()
        metadata = dict(tags) if tags else {}
        metadata.pop(_START_EVENT_TAG, None)
        scope = current_scope()
        args = bound_args.arguments if bound_args is not None else {}
        start_event = None
        if kind == WORKFLOW:
            start_event = args.get("start_event")
            query = start_event_query(start_event)
        else:
            first = next(iter(args.values()), None) if args else None
            query = query_text(first)
        session_id, user_id = self._session_ids(kind, instance, metadata, scope, start_event)
        attrs: dict[str, Any] = {A.SPAN_KIND: _OTEL_KIND[kind]}
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
        # No explicit context: the root joins the app's current span, if any.
        span = self.tracer.start_span(name, attributes=attrs, start_time=now)
        run = _Run(id_, kind, now, session_id, user_id, metadata, query=query, scope=scope)
        if scope is not None:
            scope.trace_ids.append(format(span.get_span_context().trace_id, "032x"))
        node = _Node(id_, run, span, kind, id(instance), name)
        node.target = node
        node.input_set = query is not None
        run.root = node
        with self._lock:
            self._nodes[id_] = node
            self._runs[id_] = run

    def _session_ids(self, kind: str, instance: Any, metadata: Mapping[str, Any],
                     scope: RunScope | None = None,
                     start_event: Any = None) -> tuple[str | None, str | None]:
        explicit = _session.get()
        session_id, user_id = explicit if explicit is not None else (None, None)
        if scope is not None:
            session_id = session_id or scope.session_id
            user_id = user_id or scope.user_id
        if session_id is None:
            session_id = next((metadata[k] for k in SESSION_KEYS
                               if isinstance(metadata.get(k), str)), None)
        if user_id is None and isinstance(metadata.get("user_id"), str):
            user_id = metadata["user_id"]
        if session_id is None and kind == CHAT:
            session_id = self._engine_session(instance)
        if session_id is None and start_event is not None:
            # An agent run given a memory (``agent.run(q, memory=Memory.from_defaults(
            # session_id=...))``): the memory's session is the conversation.
            sid = getattr(_event_field(start_event, "memory"), "session_id", None)
            if isinstance(sid, str) and sid:
                session_id = sid
        return session_id, user_id

    def _engine_session(self, engine: Any) -> str | None:
        # LlamaIndex's Memory has a session_id (random per memory unless the app sets it): the
        # natural conversation id. Older memories (ChatMemoryBuffer) have none: one id per engine.
        memory = getattr(engine, "_memory", None) or getattr(engine, "memory", None)
        sid = getattr(memory, "session_id", None)
        if isinstance(sid, str) and sid:
            return sid
        try:
            with self._lock:
                got = self._engine_sessions.get(engine)
                if got is None:
                    got = self._engine_sessions[engine] = uuid.uuid4().hex
                return got
        except TypeError:  # not weak-referenceable
            return None

    def _exit(self, id_: str, result: Any, err: BaseException | None) -> None:
        node = self._nodes.get(id_)
        if node is None:
            return
        run = node.run
        target = node.target if node.target is not None else node
        if err is None and target.kind == LLM and target is not run.root and _live_stream(result):
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
        if node.span is not None:
            self._end_span(node, result, err, time.time_ns())
        self._release(node)

    def _release(self, node: _Node) -> None:
        run = node.run
        finish = False
        with self._lock:
            self._nodes.pop(node.id_, None)
            run.live.discard(node.id_)
            for held in node.held or ():
                self._nodes.pop(held, None)
                run.live.discard(held)
            if run.await_owner and node.owner == run.await_owner \
                    and node.name.rpartition(".")[2] in _HISTORY_WRITERS:
                run.await_owner = 0
                run.waits -= 1
            if run.exited and not run.live and run.waits <= 0 and not run.done:
                run.done = finish = True
        if finish:
            self._finish(run)

    def _end_span(self, node: _Node, result: Any, err: BaseException | None, now: int) -> None:
        if node.ended or node.span is None:
            return
        node.ended = True
        span = node.span
        run = node.run
        if err is not None and not isinstance(err, GeneratorExit):
            _set_error(span, err, self.ts.redact_error(err))
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

    def _root_exit(self, run: _Run, result: Any, err: BaseException | None, now: int) -> None:
        root = run.root
        assert root is not None
        wrapped: Any = None
        if isinstance(result, StopEvent) and isinstance(
                result.result, (StreamingResponse, AsyncStreamingResponse)):
            # A workflow whose last step returns a streaming synthesizer's response (the
            # docs' RAG workflow): its answer exists once the app consumes that stream.
            result = result.result
        if err is not None:
            run.error = err
        elif isinstance(result, StreamingResponse) and result.response_txt is None \
                and _unread(result.response_gen, False):
            # The answer exists only once the app has consumed the stream. Keep no reference to
            # the response itself, so dropping it unconsumed lets the wrapper be collected.
            run.result_nodes = list(result.source_nodes or ())
            wrapped = result.response_gen = self._wrap_stream(run, result.response_gen)
        elif isinstance(result, AsyncStreamingResponse) and result.response_txt is None \
                and _unread(result.response_gen, True):
            run.result_nodes = list(result.source_nodes or ())
            wrapped = result.response_gen = self._wrap_astream(run, result.response_gen)
        else:
            run.result = result
        finish = False
        with self._lock:
            run.exited = True
            if wrapped is not None:
                run.waits += 1
            elif isinstance(result, StreamingAgentChatResponse) and not result.is_done:
                # stream_chat returns while LlamaIndex's history writer (a thread or task, a
                # child span of this run) is still streaming the answer into the response.
                run.await_owner = id(result)
                run.waits += 1
            if not run.live and run.waits <= 0 and not run.done:
                run.done = finish = True
        if wrapped is not None:
            fin = weakref.finalize(wrapped, self._stream_dropped, run)
            fin.atexit = False
        if finish:
            self._finish(run)

    # -- streams ----------------------------------------------------------------------------
    def _wrap_stream(self, run: _Run, gen: Iterator[str]) -> Generator[str, None, None]:
        parts: list[str] = []
        try:
            while True:
                token = _stream_parent.set(run.root)
                try:
                    item = next(gen)
                except StopIteration:
                    break
                finally:
                    _stream_parent.reset(token)
                if isinstance(item, str):
                    parts.append(item)
                yield item
        except GeneratorExit:
            # Closed early: close the inner stream too (as ``yield from`` would), so the LLM
            # call reports its end before the run is recorded.
            close = getattr(gen, "close", None)
            if close is not None:
                close()
            self._stream_ended(run, "".join(parts), None, closed=True)
            raise
        except BaseException as exc:
            self._stream_ended(run, "".join(parts), exc)
            raise
        self._stream_ended(run, "".join(parts), None)

    async def _wrap_astream(self, run: _Run,
                            agen: AsyncIterator[str]) -> AsyncGenerator[str, None]:
        parts: list[str] = []
        try:
            while True:
                token = _stream_parent.set(run.root)
                try:
                    item = await agen.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    _stream_parent.reset(token)
                if isinstance(item, str):
                    parts.append(item)
                yield item
        except GeneratorExit:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                await aclose()
            self._stream_ended(run, "".join(parts), None, closed=True)
            raise
        except BaseException as exc:
            self._stream_ended(run, "".join(parts), exc)
            raise
        self._stream_ended(run, "".join(parts), None)

    def _stream_ended(self, run: _Run, text: str, err: BaseException | None,
                      closed: bool = False) -> None:
        with handle_internal_errors("llama_index.stream_end"):
            run.answer, run.answer_known = text, True
            run.incomplete = closed
            if err is not None:
                run.error = err
            with self._lock:
                run.waits -= 1
                if run.done:
                    return
                run.done = True
            # The stream is the last thing a streaming run does: spans still open now (an LLM
            # stream closed early never reports its end) are ended with it.
            self._finish(run)

    def _stream_dropped(self, run: _Run) -> None:
        # weakref.finalize callback: the stream wrapper was collected; a no-op unless the
        # stream was never consumed to its end (then the run has not finished).
        with handle_internal_errors("llama_index.stream_dropped", reraise=False):
            if not run.done:
                self._finish(run, abandoned="abandoned: the stream was never consumed")

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

    def _finish(self, run: _Run, abandoned: str | None = None) -> None:
        end = time.time_ns()
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
                while len(gone) > MAX_OPEN_SPANS:
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
            return
        root.ended = True
        span = root.span
        assert not isinstance(span, _PendingSpan)
        if abandoned is not None:
            span.set_status(Status(StatusCode.ERROR, abandoned))
        else:
            if run.error is not None:
                _set_error(span, run.error, self.ts.redact_error(run.error))
            with handle_internal_errors("llama_index.record"):
                self._emit_record(run, span, end)
        span.end(end_time=end)
        # A StreamingResponse the app keeps holds this run (through its stream wrapper): let
        # go of the run's nodes and results now that the record is built.
        run.retrievals, run.synthesized, run.result, run.result_nodes = [], None, None, None
        run.streaming_llm = None

    def _emit_record(self, run: _Run, span: Span, end: int) -> None:
        answer: str | None = None
        if run.error is None:
            if run.answer_known:
                answer = run.answer
            elif run.kind == WORKFLOW:
                # the workflow's result, never a tool's (a query engine's) answer
                answer = workflow_answer(run.result)
            else:
                answer = response_text(run.result)
                if answer is None and not isinstance(run.result, list):
                    answer = run.query_answer
        md = dict(run.metadata)
        ground_truths: tuple[str, ...] = ()
        scope = run.scope
        if scope is not None:
            md.update(scope.metadata)
            ground_truths = scope.ground_truths
        if run.retrieval_query is not None:
            md[RETRIEVAL_QUERY_KEY] = run.retrieval_query
        if run.incomplete:
            md[STREAM_INCOMPLETE_KEY] = True
        ctx = span.get_span_context()
        record = RagRecord(
            trace_id=format(ctx.trace_id, "032x"), span_id=format(ctx.span_id, "016x"),
            query=run.query, contexts=tuple(self._contexts(run)), answer=answer,
            ground_truths=ground_truths,
            metadata=md, session_id=run.session_id, user_id=run.user_id,
            start_time_ns=run.start_ns, end_time_ns=end, usage=run.usage, model=run.model,
            error=(f"{type(run.error).__name__}: {run.error}" if run.error is not None
                   else None),
            source="llama_index", prompt=format_prompt(run.prompt),
            retrieval_queries=tuple(dict.fromkeys(run.retrieval_queries)),
        )
        attrs: dict[str, Any] = {A.RAG_ROOT: True, A.RECORD_ID: record.record_id}
        if answer is not None:
            text = self._text(answer)
            if text is not None:
                attrs[A.OUTPUT_VALUE] = text
        if run.query is not None:
            text = self._text(run.query)
            if text is not None:
                attrs[A.INPUT_VALUE] = text
        decision = self.ts.submit(self.ts.prepare(record))
        if decision is not None:
            attrs[A.SAMPLED] = decision.sampled
        span.set_attributes(attrs)

    def _contexts(self, run: _Run) -> list[Context]:
        """What the synthesizer saw (after postprocessors), else what the root returned as its
        sources, else everything retrieved, in order."""
        if run.kind == WORKFLOW:
            # An agent or workflow: every document its steps and tools retrieved, in order,
            # once each (several tool calls; a step may run its own retriever).
            out: list[Context] = []
            seen: set[Any] = set()
            for source, nodes in run.retrievals:
                for n in nodes:
                    c = node_context(n, source)
                    key = (c.id, c.text)
                    if key not in seen:
                        seen.add(key)
                        out.append(c)
            return out
        sources: dict[str, str] = {}
        for source, nodes in run.retrievals:
            for n in nodes:
                nid = _node_id(n)
                if nid is not None:
                    sources.setdefault(nid, source)
        chosen = run.synthesized
        if chosen is None:
            chosen = run.result_nodes
        if chosen is None and run.result is not None and not isinstance(run.result, list):
            got = getattr(run.result, "source_nodes", None)
            chosen = list(got) if got else None
        if chosen is None:
            return [node_context(n, source) for source, nodes in run.retrievals for n in nodes]
        picked = []
        for n in chosen:
            nid = _node_id(n)
            picked.append(node_context(n, sources.get(nid) if nid is not None else None))
        return picked

    # -- events -----------------------------------------------------------------------------
    def _set_text(self, span: Span | _PendingSpan, key: str, value: Any) -> None:
        """Set a text attribute; on a pending span, build it later, off the request path."""
        if isinstance(span, _PendingSpan):
            span.lazy.append(partial(self._text_attr, key, value))
        else:
            text = self._text(value)
            if text is not None:
                span.set_attribute(key, text)

    def _text_attr(self, key: str, value: Any) -> dict[str, Any]:
        return _only({key: self._text(value)})

    def _set_input(self, node: _Node, value: Any) -> None:
        if node.input_set or node.span is None:
            return
        node.input_set = True
        self._set_text(node.span, A.INPUT_VALUE, value)

    def _query_start(self, node: _Node, run: _Run, event: QueryStartEvent) -> None:
        q = query_text(event.query)
        if run.kind == WORKFLOW:  # a tool's or step's query engine: not the user's message
            if q is not None:
                run.retrieval_queries.append(q)
        elif q is not None and (node is run.root or run.query is None):
            run.query = q
        if q is not None and node is not run.root:
            self._set_input(node, q)

    def _query_end(self, node: _Node, run: _Run, event: QueryEndEvent) -> None:
        # The text, not the response: an unconsumed StreamingResponse must stay collectable.
        text = run.query_answer = response_text(event.response)
        if node is not run.root and node.span is not None and text is not None:
            self._set_text(node.span, A.OUTPUT_VALUE, text)

    def _retrieval_start(self, node: _Node, run: _Run, event: RetrievalStartEvent) -> None:
        q = query_text(event.str_or_query_bundle)
        if q is None:
            return
        run.retrieval_queries.append(q)
        if run.kind == WORKFLOW:
            pass
        elif run.query is None:
            run.query = q
        elif q != run.query and run.retrieval_query is None:
            run.retrieval_query = q
        self._set_input(node, q)

    def _retrieval_end(self, node: _Node, run: _Run, event: RetrievalEndEvent) -> None:
        nodes = list(event.nodes or ())
        with self._lock:
            run.retrievals.append((node.name.rpartition(".")[0] or node.name, nodes))
        span = node.span
        if self.ts.capture_content and span is not None:
            if isinstance(span, _PendingSpan):
                span.lazy.append(partial(_dict_of, self._document_attrs, nodes))
            else:
                span.set_attributes(dict(self._document_attrs(nodes)))

    def _synthesize_start(self, node: _Node, run: _Run, event: SynthesizeStartEvent) -> None:
        q = query_text(event.query)
        if q is not None:
            self._set_input(node, q)

    def _synthesize_end(self, node: _Node, run: _Run, event: SynthesizeEndEvent) -> None:
        got = getattr(event.response, "source_nodes", None)
        if got is not None:
            run.synthesized = list(got)

    def _llm_start(self, node: _Node, run: _Run,
                   event: LLMChatStartEvent | LLMCompletionStartEvent) -> None:
        if node.op is not None or node.span is None:
            return  # a nested call of the same LLM span (chat → complete): the outer one wins
        is_chat = isinstance(event, LLMChatStartEvent)
        node.op = "chat" if is_chat else "text_completion"
        attrs: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: node.op}
        model = _model_name(event.model_dict)
        if model is not None:
            attrs[A.GEN_AI_REQUEST_MODEL] = attrs[A.LLM_MODEL_NAME] = model
            if run.model is None:
                run.model = model
        if isinstance(event, LLMChatStartEvent):
            prompt: Any = _message_text(event.messages[-1]) if event.messages else ""
            run.prompt = list(event.messages)
        else:
            prompt = event.prompt
            run.prompt = event.prompt
        node.span.set_attributes(attrs)
        if not node.input_set:
            node.input_set = True
            self._set_text(node.span, A.INPUT_VALUE, prompt)

    def _llm_end(self, node: _Node, run: _Run,
                 event: LLMChatEndEvent | LLMCompletionEndEvent) -> None:
        response = event.response
        if node.span is not None and response is not None:
            text = response_text(response)
            if text is not None:
                self._set_text(node.span, A.OUTPUT_VALUE, text)
            usage, model = token_usage(response)
            if usage is not None:
                node.usage = usage  # overwrite: nested calls of one LLM span report one call
            if model is not None:
                node.span.set_attribute(A.GEN_AI_RESPONSE_MODEL, model)
                if run.model is None:
                    run.model = model
        if node.streaming:
            self._end_streaming_llm(node, None)

    def _exception(self, node: _Node, run: _Run, event: ExceptionEvent) -> None:
        if node.streaming:
            self._end_streaming_llm(node, event.exception)

    def _end_streaming_llm(self, node: _Node, err: BaseException | None) -> None:
        node.streaming = False
        if node.run.streaming_llm is node:
            node.run.streaming_llm = None
        self._end_span(node, None, err, time.time_ns())
        self._release(node)

    # -- attributes -------------------------------------------------------------------------
    def _text(self, value: Any) -> str | None:
        text = self.ts.redact_text(value if isinstance(value, str) else to_text(value))
        return None if text is None else clip(text, self._max_chars)

    def _document_attrs(self, nodes: Sequence[Any]) -> Iterator[tuple[str, Any]]:
        yield A.RETRIEVAL_DOCUMENT_COUNT, len(nodes)  # the span keeps the first few only
        for i, n in enumerate(nodes[:A.MAX_SPAN_DOCUMENTS]):
            # One bad node loses its own attributes, not the span.
            try:
                c = node_context(n, None)
                text = self._text(c.text)
                pairs: list[tuple[str, Any]] = \
                    [(A.retrieval_document(i, A.DOCUMENT_CONTENT), text)] if text is not None else []
                if c.id is not None:
                    pairs.append((A.retrieval_document(i, A.DOCUMENT_ID), c.id))
                if c.score is not None:
                    pairs.append((A.retrieval_document(i, A.DOCUMENT_SCORE), float(c.score)))
                if c.metadata:
                    pairs.append((A.retrieval_document(i, A.DOCUMENT_METADATA),
                                  clip(json_attr(self.ts.redact_value(c.metadata)),
                                       self._max_chars)))
            except Exception as exc:
                _funnel("llama_index.document_attrs", exc, reraise=False)
                continue
            yield from pairs


def _funnel(where: str, exc: Exception, reraise: bool | None = None) -> None:
    """Send an exception caught in a handler through the internal-error funnel (logged and
    counted; re-raised under pytest). The handlers catch with ``try``/``except``, which costs
    nothing until something raises, and enter the funnel only then: entering a context
    manager on each of the ~40 handler calls of a query was a quarter of their cost."""
    with handle_internal_errors(where, reraise=reraise):
        raise exc


def _set_error(span: Span | _PendingSpan, err: BaseException, text: str) -> None:
    span.set_status(Status(StatusCode.ERROR, text[:1000]))
    span.set_attribute(A.ERROR_TYPE, type(err).__qualname__)


def _dict_of(gen: Callable[[Any], Any], arg: Any) -> dict[str, Any]:
    return dict(gen(arg))


# -- extraction helpers (pure functions, tested directly) ---------------------------------------
def query_text(query: Any) -> str | None:
    """The question from a query argument: a str, or a ``QueryBundle``'s ``query_str``."""
    if isinstance(query, str):
        return query or None
    q = getattr(query, "query_str", None)
    if isinstance(q, str) and q:
        return q
    return None


def _message_text(message: Any) -> str | None:
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def _event_field(event: Any, key: str) -> Any:
    """A workflow event's field: declared fields are attributes, the rest live in the
    event's own dict (``Event.get``)."""
    get = getattr(event, "get", None)
    if callable(get):
        try:
            return get(key)
        except Exception:
            return None
    return getattr(event, key, None)


def start_event_query(start_event: Any) -> str | None:
    """The user's message from a workflow's start event: ``user_msg`` (a str or a
    ``ChatMessage``) for agents, else the first known key, else its only string field."""
    if start_event is None:
        return None
    for key in START_EVENT_KEYS:
        v = _event_field(start_event, key)
        if isinstance(v, str) and v:
            return v
        text = _message_text(v) if v is not None else None
        if text:
            return text
    data = getattr(start_event, "_data", None)
    if isinstance(data, Mapping):
        strings = [v for k, v in itertools.islice(data.items(), MAX_START_FIELDS)
                   if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
    return None


def workflow_answer(result: Any) -> str | None:
    """The final answer of a workflow run: its ``StopEvent``'s result — an agent's
    ``AgentOutput`` (its response message), a ``Response``, a str, or a dict with a
    ``response``/``answer`` entry."""
    if isinstance(result, StopEvent):
        result = result.result
    if result is None:
        return None
    if isinstance(result, str):
        return result
    text = response_text(result)
    if text is not None:
        return text
    response = getattr(result, "response", None)  # AgentOutput(response=ChatMessage)
    if response is not None:
        return _message_text(response) if not isinstance(response, str) else response
    if isinstance(result, Mapping):
        for key in ("response", "answer", "result", "output"):
            v = result.get(key)
            if isinstance(v, str):
                return v
            if isinstance(v, Mapping) and isinstance(v.get("content"), str):
                return str(v["content"])
    return None


def response_text(response: Any) -> str | None:
    """The answer text of a LlamaIndex result: ``Response``, ``PydanticResponse``, a consumed
    ``StreamingResponse``, ``AgentChatResponse``, a finished ``StreamingAgentChatResponse``,
    ``ChatResponse``/``CompletionResponse``, or a str. None when there is none (yet)."""
    if response is None:
        return None
    if isinstance(response, str):
        return response
    if isinstance(response, Response):
        return response.response
    if isinstance(response, PydanticResponse):
        return response.response.model_dump_json() if response.response is not None else None
    if isinstance(response, (StreamingResponse, AsyncStreamingResponse)):
        return response.response_txt
    if isinstance(response, StreamingAgentChatResponse):
        return response.response if response.is_done else None
    if isinstance(response, AgentChatResponse):
        return response.response
    message = getattr(response, "message", None)
    if message is not None:  # ChatResponse
        return _message_text(message)
    text = getattr(response, "text", None)  # CompletionResponse
    return text if isinstance(text, str) else None


def _node_id(n: Any) -> str | None:
    if type(n) is NodeWithScore:
        return n.node.node_id
    node = getattr(n, "node", n)
    nid = getattr(node, "node_id", None) or getattr(node, "id_", None)
    return None if nid is None else str(nid)


def node_context(n: Any, source: str | None) -> Context:
    """A `Context` from a ``NodeWithScore`` (or a bare node): id, text, score, metadata."""
    if type(n) is NodeWithScore:  # the usual case, without the getattr probing below
        node, score = n.node, n.score
        return Context(text=node.get_content(), id=node.node_id,
                       score=None if score is None else float(score),
                       metadata=dict(node.metadata), source=source)
    node = getattr(n, "node", n)
    text: Any = None
    get_content = getattr(node, "get_content", None)
    if callable(get_content):
        text = get_content()
    if not isinstance(text, str):
        text = getattr(node, "text", None)
    if not isinstance(text, str):
        text = to_text(node)
    score = getattr(n, "score", None)
    try:
        score = float(score) if score is not None else None
    except (TypeError, ValueError):
        score = None
    md = getattr(node, "metadata", None)
    return Context(text=text, id=_node_id(n), score=score,
                   metadata=dict(md) if isinstance(md, Mapping) else {}, source=source)


def _model_name(model_dict: Any) -> str | None:
    if not isinstance(model_dict, Mapping):
        return None
    for key in ("model", "model_name", "deployment_name"):
        v = model_dict.get(key)
        if isinstance(v, str) and v and v != "unknown":
            return v
    return None


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _usage_from(obj: Any) -> TokenUsage | None:
    if obj is None:
        return None
    n_in = _get(obj, "prompt_tokens")
    if n_in is None:
        n_in = _get(obj, "input_tokens")
    n_out = _get(obj, "completion_tokens")
    if n_out is None:
        n_out = _get(obj, "output_tokens")
    if isinstance(n_in, int) or isinstance(n_out, int):
        return TokenUsage(int(n_in or 0), int(n_out or 0))
    return None


def token_usage(response: Any) -> tuple[TokenUsage | None, str | None]:
    """(token usage, model) from a ``ChatResponse``/``CompletionResponse``: the provider's raw
    ``usage`` (OpenAI's prompt/completion tokens or Anthropic's input/output tokens, dict or
    object), else token counts in ``additional_kwargs``; the model from ``raw``."""
    raw = getattr(response, "raw", None)
    usage = _usage_from(_get(raw, "usage")) if raw is not None else None
    if usage is None:
        usage = _usage_from(getattr(response, "additional_kwargs", None))
    model = _get(raw, "model") if raw is not None else None
    return usage, model if isinstance(model, str) and model else None


# -- the LlamaIndex handlers -----------------------------------------------------------------
class TracescoreSpanHandler(BaseSpanHandler[BaseSpan]):
    """LlamaIndex span handler feeding a :class:`LlamaIndexCapture`.

    Overrides ``span_enter``/``span_exit``/``span_drop`` themselves: the capture keeps its own
    light map, so no per-span pydantic object is built and ``open_spans`` stays empty.
    """

    capture: Any = None

    def __init__(self, capture: LlamaIndexCapture) -> None:
        super().__init__()
        self.capture = capture

    @classmethod
    def class_name(cls) -> str:
        return "TracescoreSpanHandler"

    def span_enter(self, id_: str, bound_args: inspect.BoundArguments,
                   instance: Any | None = None, parent_id: str | None = None,
                   tags: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.capture.span_enter(id_, bound_args, instance, parent_id, tags)

    def span_exit(self, id_: str, bound_args: inspect.BoundArguments,
                  instance: Any | None = None, result: Any | None = None,
                  **kwargs: Any) -> None:
        self.capture.span_exit(id_, result)

    def span_drop(self, id_: str, bound_args: inspect.BoundArguments,
                  instance: Any | None = None, err: BaseException | None = None,
                  **kwargs: Any) -> None:
        self.capture.span_drop(id_, err)

    def close(self) -> None:
        self.capture.close()

    # Unused (span_enter/exit/drop are overridden) but abstract in BaseSpanHandler.
    def new_span(self, id_: str, bound_args: inspect.BoundArguments,
                 instance: Any | None = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> BaseSpan | None:
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, result: Any | None = None,
                             **kwargs: Any) -> BaseSpan | None:
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, err: BaseException | None = None,
                             **kwargs: Any) -> BaseSpan | None:
        return None


class TracescoreEventHandler(BaseEventHandler):
    """LlamaIndex event handler feeding a :class:`LlamaIndexCapture`."""

    capture: Any = None

    def __init__(self, capture: LlamaIndexCapture) -> None:
        super().__init__()
        self.capture = capture

    @classmethod
    def class_name(cls) -> str:
        return "TracescoreEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.capture.handle_event(event)


# -- process-wide instrumentation ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Instrumentation:
    """What :func:`instrument` installed (pass it to :func:`uninstrument`)."""

    capture: LlamaIndexCapture
    span_handler: TracescoreSpanHandler
    event_handler: TracescoreEventHandler


_active: Instrumentation | None = None
_install_lock = threading.Lock()


def instrument(ts: Tracescore) -> Instrumentation:
    """Capture every LlamaIndex run in the process for ``ts`` (idempotent).

    One pipeline at a time, as for LangChain: instrumenting another ``Tracescore`` replaces
    the previous one's handlers.
    """
    global _active
    with _install_lock:
        if _active is not None and _active.capture.ts is ts:
            return _active
        if _active is not None:
            _remove(_active)
        capture = LlamaIndexCapture(ts)
        handle = Instrumentation(capture, TracescoreSpanHandler(capture),
                                 TracescoreEventHandler(capture))
        root = get_dispatcher()
        root.add_span_handler(handle.span_handler)
        root.add_event_handler(handle.event_handler)
        _active = handle
        return handle


def uninstrument(handle: Instrumentation | None = None) -> None:
    """Remove ``handle``'s handlers (the active ones if None); open runs end unrecorded."""
    global _active
    with _install_lock:
        if handle is None:
            handle = _active
        if handle is None:
            return
        _remove(handle)
        if _active is handle:
            _active = None


def _remove(handle: Instrumentation) -> None:
    root = get_dispatcher()
    # Rebind rather than mutate: a dispatch in another thread keeps iterating the old list.
    root.span_handlers = [h for h in root.span_handlers if h is not handle.span_handler]
    root.event_handlers = [h for h in root.event_handlers if h is not handle.event_handler]
    handle.capture.close()
