"""LangChain capture: a callback handler that makes OTel spans and one `RagRecord` per root run.

Why not ``BaseTracer``: it builds a full ``Run`` object (serialised inputs and outputs, events)
for every step, which costs about twice what a plain ``BaseCallbackHandler`` costs on the
request path. This handler keeps its own light run map: run id → (span, kind, root state).

Spans are started with explicit parents (from the run map) and explicit timestamps taken when
the callback fires; ``context.attach`` is never called inside a callback, so async and threaded
runs (``batch``, ``ainvoke``, ``astream``) cannot corrupt the app's context. The root run's span
parent is the app's current span, if any, so the RAG run joins the app's trace — or, inside
another framework's run (a LlamaIndex workflow awaiting a chain), that run's span: the record
is then the other framework's (:mod:`.._owner`).

Every callback is wrapped by the internal-error funnel: an exception inside tracescore is logged
and counted, never raised into the chain (under pytest it is re-raised so tests fail loudly).

Cost per callback is what the request pays (bench/hot_path.py): the funnel is a plain
``try``/``except`` (free when nothing raises), the run map is keyed by the run id's integer
(``UUID.__hash__`` is Python code), and the OTel suppression flag is read only for a run with
no live parent (a child of a live run cannot start in a suppressed context that its root did
not — tracescore's own scoring thread suppresses whole threads).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Status, StatusCode

from tracescore import attributes as A
from tracescore._internal import capture_degraded as _degraded
from tracescore._internal.errors import (
    handle_internal_errors,
    raise_internal_errors,
    record_internal_error,
)
from tracescore._internal.text import clip, json_attr
from tracescore.record import Context
from tracescore.runs import current_scope
from tracescore.sampling import trace_fraction

from .._owner import current_owner
from .._record import NODE, RETRIEVER, TOOL, enclose
from .._spans import (
    NO_SPAN,
    SharedAttrs,
    _PendingRoot,
    start_root,
    usage_attributes,
)
from . import agent as G
from . import messages as M
from .emit import defer_steps, emit_record
from .live import LiveRuns, active_retriever
from .runs import (
    MAX_STREAM_TOKENS,
    DocumentContexts,
    _Root,
    _Run,
    _seq,
    _Step,
    find_stream_queue,
    new_retrieval,
)
from .span_text import set_text, text_of
from .vectorstores import patch_vector_stores

if TYPE_CHECKING:
    from tracescore.client import Tracescore

MAX_OPEN_RUNS = 10_000
#: Errors that mean the client stopped reading a stream, not that the app failed.
CUT_OFF = (GeneratorExit, asyncio.CancelledError)


def _document_attrs(handler: TracescoreCallbackHandler, ctxs: Any, _: Any) -> dict[str, Any]:
    return dict(handler.document_attrs(ctxs))


def _usage_attrs(usage: Any, _b: Any, _c: Any) -> dict[str, Any]:
    return usage_attributes(usage)


_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY
_get_current = otel_context.get_current


def _suppressed() -> bool:
    return bool(_get_current().get(_SUPPRESS_KEY))


def _fault(where: str, exc: Exception) -> None:
    """The internal-error funnel of a callback (``except Exception as exc: _fault(...)``):
    counted and logged; re-raised under pytest. A ``try`` costs nothing until it raises,
    a context manager per callback did (three calls)."""
    record_internal_error(where, exc)
    if raise_internal_errors():
        raise exc


#: A child step's attributes when it has only its span kind (copied when it sets more).
_KIND_ATTRS = {k: SharedAttrs({A.SPAN_KIND: k}) for k in (A.KIND_CHAIN, A.KIND_TOOL)}

#: :meth:`TracescoreCallbackHandler._parent` of a suppressed root.
_SKIP: Any = object()


def _late_tool_call(run: _Run, call: str) -> None:
    """A tool run's call id learnt at its end (langchain-core before 1.2 passes no
    ``tool_call_id`` to ``on_tool_start``; its ``ToolMessage`` has it): the retrievals made
    inside the tool get it as their outermost enclosing call so far."""
    run.tool_call = call
    entry = (call, run.name, run.seq)
    for r in run.root.retrievals:
        if run.seq in r.ancestors:
            r.tool_calls = (*r.tool_calls, entry)
            if r.tool_call is None:
                r.tool_call = call


class TracescoreCallbackHandler(LiveRuns):
    """Captures LangChain runs for a :class:`~tracescore.client.Tracescore` pipeline.

    Attach it per call (``config={"callbacks": [ts.langchain_handler()]}``) or process-wide with
    ``ts.instrument_langchain()``. Runs inline on LangChain's callback path: every method only
    touches the run map and OTel spans, never blocks, never does I/O.
    """

    run_inline = True  # keep callbacks ordered and in the caller's context for async runs

    def __init__(self, ts: Tracescore) -> None:
        super().__init__()
        self.ts = ts
        self.tracer = ts.tracer
        self.evicted = 0
        patch_vector_stores()  # once per process: searches outside retrievers become steps

    @property
    def raise_error(self) -> bool:  # type: ignore[override]
        return raise_internal_errors()

    def _parent(self, parent_run_id: UUID | None) -> Any:
        """The live parent run; None for a root; :data:`_SKIP` for a root that starts with
        instrumentation suppressed (tracescore's own judge calls): not captured.

        A run that reports no parent (or a parent never seen) may still run inside a live
        run: langchain-core 1.8's ``with_fallbacks`` hands its children the caller's config
        (no parent), but sets the child config (its own run as parent) as the running
        config. That run is the parent: one request, one record (counted, see
        :mod:`tracescore._internal.capture_degraded`)."""
        if parent_run_id is not None:
            parent = self._runs.get(getattr(parent_run_id, "int", parent_run_id))
            if parent is not None:
                return parent
        parent = self._running_parent()
        if parent is not None:
            _degraded.note("root_in_run" if parent_run_id is None else "unknown_parent")
            return parent
        if _suppressed():  # tracescore's own judge calls (and their children)
            return _SKIP
        if parent_run_id is not None:
            _degraded.note("unknown_parent")  # the fallback: a request of its own
        return None

    def _running_parent(self) -> _Run | None:
        """The live run of ours whose children are running now (LangChain's running config:
        its callback manager's parent run), if any."""
        config = var_child_runnable_config.get()
        if not config:
            return None
        parent_id = getattr(config.get("callbacks"), "parent_run_id", None)
        if parent_id is None:
            return None
        run = self._runs.get(getattr(parent_id, "int", parent_id))
        if run is None or run.root.guest_of is not None or run.root.done:
            return None
        return run

    # -- run map ----------------------------------------------------------------------------
    def _start(self, run_id: UUID, parent: _Run | None, name: str, kind: str,
               metadata: Mapping[str, Any] | None, tags: Sequence[str] | None,
               attrs: dict[str, Any] | None) -> _Run:
        """``attrs`` None: the span kind alone (a child step's spans share that dict)."""
        now = time.time_ns()
        if attrs is None:
            attrs = _KIND_ATTRS[kind] if parent is not None else {A.SPAN_KIND: kind}
        else:
            attrs[A.SPAN_KIND] = kind
        if parent is None:
            scope = current_scope()
            root = _Root(metadata=dict(metadata or {}), tags=tuple(tags or ()), start_ns=now,
                         scope=scope, spans=self.ts.spans_wanted)
            root.session, root.user = session, user = M._session_user(root.metadata, scope)
            if session is not None:
                attrs[A.SESSION_ID] = session
            if user is not None:
                attrs[A.USER_ID] = self.ts.redact_id(user)
            owner = current_owner("langchain")
            if owner is not None and owner.framework != "langchain":
                root.guest_of = owner  # inside another framework's run: its record
                span: Any = self.tracer.start_span(
                    name, context=trace_api.set_span_in_context(owner.span),
                    attributes=attrs, start_time=now)
            elif root.spans:
                span = start_root(self.tracer, name, attrs, now)
            else:
                span = self.tracer.start_span(name, attributes=attrs, start_time=now)
            root.span = span
            root.trace_hex = trace_hex = format(span.get_span_context().trace_id, "032x")
            root.fraction = u = trace_fraction(trace_hex)
            if root.guest_of is not None or not self.ts.text_needed(u):
                root.agent_log = []  # no full record expected: agent events kept for later
            if scope is not None and root.guest_of is None:
                scope.trace_ids.append(trace_hex)
            self.ts.run_ids.note(run_id, trace_hex)
            run = _Run(span, root, True, name, next(_seq))
        else:
            root = parent.root
            if not root.config_read:
                root.config_read = True
                root.config_session = M._config_session()
            if root.spans:  # (the run is its pending span: one object per step)
                run = _Step(root, name, next(_seq), parent, attrs, now)
                root.pending.append(run)
            else:  # spans go nowhere: a child step keeps none
                run = _Run(NO_SPAN, root, False, name, next(_seq), parent, parent.tool_call,
                           parent.retriever, parent.node_run)
            root.open += 1
        runs = self._runs
        if len(runs) >= MAX_OPEN_RUNS:  # runs that never ended (abandoned streams): bound them
            oldest = next(iter(runs))
            stale = runs.pop(oldest, None)
            if stale is not None:
                self.evicted += 1
                stale.span.set_status(Status(StatusCode.ERROR, "abandoned: run never ended"))
                stale.span.end()
                if type(stale.span) is _PendingRoot:
                    stale.span.materialize(self.tracer)
        runs[getattr(run_id, "int", run_id)] = run
        return run

    def _finish(self, run_id: UUID, outputs: Any, error: BaseException | None,
                inputs: Any = None, streamed: bool = False) -> None:
        run = self._runs.pop(getattr(run_id, "int", run_id), None)
        if run is None:
            return
        span = run if type(run) is _Step else run.span  # (a step is its span: no property call)
        end = time.time_ns()
        root = run.root
        cut = run.is_root and ((error is not None and isinstance(error, CUT_OFF))
                               or (error is None and streamed and root.open > 0))
        if error is not None and not cut:
            span.set_status(Status(StatusCode.ERROR, self.ts.redact_error(error)[:1000]))
            span.set_attribute(A.ERROR_TYPE, type(error).__qualname__)
        # No reference cycles outlive the request (a run that is its own retriever or graph
        # node; the root's answering model run, which points back at the root): freed by
        # reference counting as soon as the request is over, they never make the garbage
        # collector run (an empty BaseTracer's request leaves no cyclic garbage either; ours
        # left ~80 objects, and full collections of the app's heap cost ~15 % of the CPU).
        if run.retriever is run:
            run.retriever = None
        if run.node_run is run:
            run.node_run = None
        if run.is_root:
            held = False
            with handle_internal_errors("langchain.record"):
                held = self._emit_record(run, outputs, None if cut else error, inputs, end, cut)
            root.last_llm = None
            span.end(end_time=end)
            root.done = True
            defer_steps(self.ts, self.tracer, run, span, held)
            return
        root.open -= 1
        span.end(end_time=end)
        if root.done:  # a step that outlived its root (a detached thread): emit it now
            span.materialize(self.tracer)

    def _emit_record(self, run: _Run, outputs: Any, error: BaseException | None, inputs: Any,
                     end: int, cut: bool = False) -> bool:
        """The root's record (:func:`.emit.emit_record`); one method, so a fault injected
        here is the "record" stage's. True: sampled (its root span waits for scores)."""
        return emit_record(self.ts, run, outputs, error, inputs, end, cut)

    # -- chains -----------------------------------------------------------------------------
    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            parent = self._parent(parent_run_id)
            if parent is _SKIP:
                return
            name = kwargs.get("name") or M._name(serialized) or "chain"
            run = self._start(run_id, parent, name, A.KIND_CHAIN, metadata, tags, None)
            if parent is None:
                root = run.root
                if root.agent_log is None:
                    root.query = M.extract_query(inputs)
                else:  # (stored compact, unless forced: found when the record is built)
                    root.query_of = inputs
                root.inputs = inputs  # input.value is built when the root ends
            elif metadata and metadata.get("langgraph_node") == name:
                run.node = True
                run.node_run = run
                step = metadata.get("langgraph_step")
                if type(step) is int:
                    run.step = step
                    path = metadata.get("langgraph_path")
                    if (type(path) is tuple and len(path) > 1 and type(path[1]) is int
                            and path[0] == "__pregel_push"):
                        run.task = path[1]  # a Send: its index among the step's tasks
        except Exception as exc:
            _fault("langchain.on_chain_start", exc)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        try:
            if kwargs:  # a streamed run reports its full input at its end (``inputs``)
                streamed = "inputs" in kwargs
                inputs = kwargs.get("inputs")
            else:
                streamed, inputs = False, None
            run = self._runs.get(getattr(run_id, "int", run_id))
            if run is not None and run.node:
                for key, docs in M.state_updates(outputs):
                    self._add_documents(run, docs, NODE, loop_key=f"state:{key or run.name}")
                llm = run.root.last_llm
                if llm is not None and llm.node_run is run:
                    llm.node_update = outputs  # (a rewriter's question, a grader's verdict:
                    # not the answer; read only if the stream is cut, see runs.streamed_text)
            self._finish(run_id, outputs, None, inputs, streamed)
        except Exception as exc:
            _fault("langchain.on_chain_end", exc)

    def on_chain_error(self, error: BaseException, *, run_id: UUID,
                       parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        try:
            self._finish(run_id, None, error, kwargs.get("inputs"))
        except Exception as exc:
            _fault("langchain.on_chain_error", exc)

    # -- retrievers -------------------------------------------------------------------------
    def on_retriever_start(self, serialized: dict[str, Any] | None, query: str, *,
                           run_id: UUID, parent_run_id: UUID | None = None,
                           tags: list[str] | None = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            parent = self._parent(parent_run_id)
            if parent is _SKIP:
                return
            name = kwargs.get("name") or M._name(serialized) or "retriever"
            attrs: dict[str, Any] = {A.RETRIEVER_NAME: name}
            run = self._start(run_id, parent, name, A.KIND_RETRIEVER, metadata, tags, attrs)
            run.retriever = run
            if not kwargs.get("tracescore_search"):
                active_retriever.set(run_id)
            set_text(self.ts, run.span, A.INPUT_VALUE, query)
            if parent is None:
                run.root.query = query if isinstance(query, str) else None
            elif isinstance(query, str) and query:
                run.root.retrieval_queries += (query,)
        except Exception as exc:
            _fault("langchain.on_retriever_start", exc)

    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID,
                         parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        try:
            run = self._runs.get(getattr(run_id, "int", run_id))
            if run is not None:
                kind = kwargs.get("tracescore_search") or RETRIEVER
                self._add_documents(run, documents or (), kind, run.seq)
            self._finish(run_id, documents, None)
        except Exception as exc:
            _fault("langchain.on_retriever_end", exc)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID,
                           parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        try:
            self._finish(run_id, None, error)
        except Exception as exc:
            _fault("langchain.on_retriever_error", exc)

    def _add_documents(self, run: _Run, documents: Sequence[Any], kind: str,
                       seq: int | None = None, loop_key: str | None = None) -> None:
        """Documents ``run`` produced: a document step of the root, and onto ``run``'s span.

        Retrievers count at their start (parallel retrievers keep their start order); tools
        and graph nodes at their end, after any retriever they ran. The steps ``run``
        enclosed become its inner candidates (see :mod:`.._record`).
        """
        name = run.name
        ctxs = DocumentContexts(documents, name)  # (made by the writer, see DocumentContexts)
        root = run.root
        if root.retrievals:
            enclose(root.retrievals, run.seq, name)
        root.retrievals.append(new_retrieval(run, name, ctxs, kind,
                                             next(_seq) if seq is None else seq, loop_key))
        span = run.span
        if ctxs and span is not NO_SPAN and self.ts.capture_content:
            if type(span) is _Step:
                span.later3(_document_attrs, self, ctxs, None)
            else:
                span.set_attributes(dict(self.document_attrs(ctxs)))

    def document_attrs(self, ctxs: Sequence[Context]) -> Any:
        """OpenInference ``retrieval.documents.*`` of ``ctxs`` (the span keeps the first few)."""
        yield A.RETRIEVAL_DOCUMENT_COUNT, len(ctxs)
        for i, c in enumerate(ctxs[:A.MAX_SPAN_DOCUMENTS]):
            # One bad document loses its own attributes, not the span.
            with handle_internal_errors("langchain.document_attrs", reraise=False):
                text = text_of(self.ts, c.text)
                if text is not None:
                    yield A.retrieval_document(i, A.DOCUMENT_CONTENT), text
                if c.id is not None:
                    yield A.retrieval_document(i, A.DOCUMENT_ID), str(c.id)
                if c.score is not None:
                    yield A.retrieval_document(i, A.DOCUMENT_SCORE), float(c.score)
                if c.metadata:
                    yield (A.retrieval_document(i, A.DOCUMENT_METADATA),
                           clip(json_attr(self.ts.redact_value(c.metadata))))

    # -- LLMs -------------------------------------------------------------------------------
    def on_chat_model_start(self, serialized: dict[str, Any] | None,
                            messages: list[list[Any]], *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            parent = self._parent(parent_run_id)
            if parent is _SKIP:
                return
            prompt = messages[-1] if messages else []
            self._llm_start(serialized, prompt, "chat", run_id, parent, tags, metadata, kwargs)
        except Exception as exc:
            _fault("langchain.on_chat_model_start", exc)

    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: list[str], *,
                     run_id: UUID, parent_run_id: UUID | None = None,
                     tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                     **kwargs: Any) -> None:
        try:
            parent = self._parent(parent_run_id)
            if parent is _SKIP:
                return
            self._llm_start(serialized, prompts[-1] if prompts else "", "text_completion",
                            run_id, parent, tags, metadata, kwargs)
        except Exception as exc:
            _fault("langchain.on_llm_start", exc)

    def _llm_start(self, serialized: dict[str, Any] | None, prompt: Any, operation: str,
                   run_id: UUID, parent: _Run | None, tags: list[str] | None,
                   metadata: dict[str, Any] | None, kwargs: Mapping[str, Any]) -> None:
        name = kwargs.get("name") or M._name(serialized) or "llm"
        params = kwargs.get("invocation_params") or {}
        model = (params.get("model") or params.get("model_name")
                 or (metadata or {}).get("ls_model_name"))
        attrs: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: operation}
        if isinstance(model, str):
            attrs[A.GEN_AI_REQUEST_MODEL] = model
            attrs[A.LLM_MODEL_NAME] = model
        run = self._start(run_id, parent, name, A.KIND_LLM, metadata, tags, attrs)
        set_text(self.ts, run.span, A.INPUT_VALUE, prompt)
        root = run.root
        G.note(root, G.model_start, root, run, params, prompt)
        if run.retriever is None:  # a compressor's or filter's model is not the answering one
            # the answering call is the last one: its prompt and model are the record's (a
            # failed primary before a fallback, a query rewriter before the answer are not)
            root.prompt = prompt
            root.last_llm = run
            root.model = model if isinstance(model, str) else None
            # the tools and nodes whose text this model call writes (only a call made after a
            # retrieval can write from its documents)
            step = run.parent if root.retrievals else None
            while step is not None:
                if step.is_tool or step.node:
                    root.step_models[step.seq] = run.seq
                step = step.parent

    def on_llm_new_token(self, token: str | list[str | dict[str, Any]], *, chunk: Any = None,
                         run_id: UUID, parent_run_id: UUID | None = None,
                         tags: list[str] | None = None, **kwargs: Any) -> None:
        """A streamed token of the answering model: kept for a stream the client cuts off."""
        try:
            run = self._runs.get(getattr(run_id, "int", run_id))
            if run is None or run.root.last_llm is not run:
                return
            tokens = run.tokens
            if tokens is None:  # the first token: the message id and LangGraph's stream
                tokens = run.tokens = []
                run.msg_id = getattr(getattr(chunk, "message", None), "id", None)
                if run.msg_id is not None and run.root.stream_queue is None:
                    run.root.stream_queue = find_stream_queue(var_child_runnable_config.get())
            if len(tokens) < MAX_STREAM_TOKENS:
                tokens.append(M.token_text(token, chunk))
        except Exception as exc:
            _fault("langchain.on_llm_new_token", exc)

    def on_llm_end(self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                   **kwargs: Any) -> None:
        try:
            run = self._runs.get(getattr(run_id, "int", run_id))
            if run is not None:
                G.note(run.root, G.model_end, run, response)
                text, usage, model = M.llm_result_parts(response)
                span = run.span
                if text is not None:
                    set_text(self.ts, span, A.OUTPUT_VALUE, text)
                if model:
                    span.set_attribute(A.GEN_AI_RESPONSE_MODEL, model)
                    if run.root.last_llm is run:
                        run.root.model = model
                if usage is not None:
                    if type(span) is _Step:  # (built with the span, by the writer)
                        span.later3(_usage_attrs, usage, None, None)
                    elif span is not NO_SPAN:
                        span.set_attributes(usage_attributes(usage))
                    root = run.root
                    root.usage = usage if root.usage is None else root.usage + usage
            self._finish(run_id, None, None)
        except Exception as exc:
            _fault("langchain.on_llm_end", exc)

    def on_llm_error(self, error: BaseException, *, run_id: UUID,
                     parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        try:
            self._finish(run_id, None, error)
        except Exception as exc:
            _fault("langchain.on_llm_error", exc)

    # -- tools ------------------------------------------------------------------------------
    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *,
                      run_id: UUID, parent_run_id: UUID | None = None,
                      tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                      **kwargs: Any) -> None:
        try:
            parent = self._parent(parent_run_id)
            if parent is _SKIP:
                return
            name = kwargs.get("name") or M._name(serialized) or "tool"
            run = self._start(run_id, parent, name, A.KIND_TOOL, metadata, tags, None)
            run.is_tool = True
            call = kwargs.get("tool_call_id")
            if isinstance(call, str):
                run.tool_call = call
            inputs = kwargs.get("inputs")
            run.tool_input = inputs if inputs is not None else input_str
            if parent is None:
                run.root.query = M.tool_query(run.tool_input)
                run.root.inputs = run.tool_input
        except Exception as exc:
            _fault("langchain.on_tool_start", exc)

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                    **kwargs: Any) -> None:
        try:
            run = self._runs.get(getattr(run_id, "int", run_id))
            if run is not None and run.tool_call is None:
                call = getattr(output, "tool_call_id", None)
                if isinstance(call, str):  # langchain-core < 1.2: known from the ToolMessage
                    _late_tool_call(run, call)
            if run is not None:
                G.note(run.root, G.tool_end, run, output)
                docs = M.artifact_documents(output)
                if docs:
                    self._add_documents(run, docs, TOOL)
                    q = M.tool_query(run.tool_input)
                    if q and not run.is_root:
                        run.root.retrieval_queries += (q,)
            self._finish(run_id, output, None)
        except Exception as exc:
            _fault("langchain.on_tool_end", exc)

    def on_tool_error(self, error: BaseException, *, run_id: UUID,
                      parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        try:
            run = self._runs.get(getattr(run_id, "int", run_id))
            if run is not None:
                G.note(run.root, G.tool_error, run, error)
            self._finish(run_id, None, error)
        except Exception as exc:
            _fault("langchain.on_tool_error", exc)
