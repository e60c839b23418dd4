"""LangChain capture: a callback handler that makes OTel spans and one `RagRecord` per root run.

Why not ``BaseTracer``: it builds a full ``Run`` object (serialised inputs and outputs, events)
for every step, which costs about twice what a plain ``BaseCallbackHandler`` costs on the
request path. This handler keeps its own light run map: run id → (span, kind, root state).

Spans are started with explicit parents (from the run map) and explicit timestamps taken when
the callback fires; ``context.attach`` is never called inside a callback, so async and threaded
runs (``batch``, ``ainvoke``, ``astream``) cannot corrupt the app's context. The root run's span
parent is the app's current span, if any, so the RAG run joins the app's trace.

Every callback is wrapped by the internal-error funnel: an exception inside tracescore is logged
and counted, never raised into the chain (under pytest it is re-raised so tests fail loudly).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry.trace import Status, StatusCode

from . import require

require("langchain_core", "langchain")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.runnables.config import var_child_runnable_config  # noqa: E402

from tracescore import attributes as A  # noqa: E402
from tracescore._internal.errors import handle_internal_errors, raise_internal_errors  # noqa: E402
from tracescore.record import Context, RagRecord, TokenUsage  # noqa: E402
from tracescore.runs import RunScope, current_scope, ground_truths_from  # noqa: E402

from ._spans import _materialize_all, _only, _PendingSpan, usage_attributes  # noqa: E402
from ._text import clip, format_prompt, json_attr, to_text  # noqa: E402

if TYPE_CHECKING:
    from tracescore.client import Tracescore

#: Input keys that hold the user's question, in order of preference.
QUERY_KEYS = ("question", "query", "input", "q", "user_input", "prompt", "text")
#: Output keys that hold the final answer, in order of preference.
ANSWER_KEYS = ("answer", "generation", "output", "result", "response", "final_answer", "text",
               "content", "output_text")
SESSION_KEYS = ("session_id", "thread_id", "conversation_id")
#: Metadata keys of ours: ground truth passed up front, not kept as record metadata.
GROUND_TRUTH_KEYS = ("ground_truth", "ground_truths")
MAX_OPEN_RUNS = 10_000
#: Bounds on what is inspected of a step's output on the request path: keys of a state
#: update, items of a list, messages scanned back for the answer or the user's message.
MAX_STATE_KEYS = 32
MAX_DOCUMENTS = 200
MAX_MESSAGES = 200

_seq = itertools.count()


@dataclass(slots=True)
class _Root:
    query: str | None = None
    retrievals: list[tuple[int, str, list[Context]]] = field(default_factory=list)
    usage: TokenUsage | None = None
    model: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    start_ns: int = 0
    pending: list[_PendingSpan] = field(default_factory=list)
    inputs: Any = None
    prompt: Any = None  # the last LLM call's raw prompt (formatted when the record is built)
    done: bool = False  # the root ended: late child steps materialise at once
    retrieval_queries: list[str] = field(default_factory=list)
    scope: RunScope | None = None
    #: A session id only the run's config holds (``RunnableWithMessageHistory``'s
    #: ``configurable.session_id``), read once, when the root's first child starts.
    config_session: str | None = None
    config_read: bool = False


def _dict_of(gen: Callable[[Any], Any], arg: Any) -> dict[str, Any]:
    return dict(gen(arg))


@dataclass(slots=True)
class _Run:
    span: Any  # the root's real Span, or a _PendingSpan for every other step
    root: _Root
    is_root: bool
    name: str
    seq: int
    node: bool = False  # a LangGraph node: the documents it returns into the state count
    tool_input: Any = None


def _suppressed() -> bool:
    return bool(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY))


class TracescoreCallbackHandler(BaseCallbackHandler):
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
        self._runs: dict[UUID, _Run] = {}
        self.evicted = 0

    @property
    def raise_error(self) -> bool:  # type: ignore[override]
        return raise_internal_errors()

    # -- run map ----------------------------------------------------------------------------
    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        kind: str,
        metadata: Mapping[str, Any] | None,
        tags: Sequence[str] | None,
        attrs: dict[str, Any],
    ) -> _Run:
        now = time.time_ns()
        parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
        attrs[A.SPAN_KIND] = kind
        if parent is None:
            scope = current_scope()
            root = _Root(metadata=dict(metadata or {}), tags=tuple(tags or ()), start_ns=now,
                         scope=scope)
            md = root.metadata
            session, user = _session_user(md, scope)
            if session is not None:
                attrs[A.SESSION_ID] = session
            if user is not None:
                attrs[A.USER_ID] = self.ts.redact_id(user)
            span: Any = self.tracer.start_span(name, attributes=attrs, start_time=now)
            trace_hex = format(span.get_span_context().trace_id, "032x")
            if scope is not None:
                scope.trace_ids.append(trace_hex)
            self.ts.run_ids.note(run_id, trace_hex)
        else:
            root = parent.root
            if not root.config_read:
                root.config_read = True
                root.config_session = _config_session()
            pending = _PendingSpan(name, parent.span, attrs, now)
            root.pending.append(pending)
            span = pending
        run = _Run(span, root, parent is None, name, next(_seq))
        runs = self._runs
        if len(runs) >= MAX_OPEN_RUNS:  # runs that never ended (abandoned streams): bound them
            oldest = next(iter(runs))
            stale = runs.pop(oldest, None)
            if stale is not None:
                self.evicted += 1
                stale.span.set_status(Status(StatusCode.ERROR, "abandoned: run never ended"))
                stale.span.end()
        runs[run_id] = run
        return run

    def _set_text(self, span: Any, key: str, value: Any) -> None:
        """Set a text attribute; on a pending span, build it later, off the request path."""
        if not self.ts.capture_content:
            return
        if isinstance(span, _PendingSpan):
            span.lazy.append(lambda: _only({key: self._text(value)}))
        else:
            text = self._text(value)
            if text is not None:
                span.set_attribute(key, text)

    def _text(self, value: Any) -> str | None:
        text = self.ts.redact_text(to_text(value))
        return None if text is None else clip(text, self.ts.max_attribute_chars)

    def _finish(self, run_id: UUID, outputs: Any, error: BaseException | None,
                inputs: Any = None) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        span = run.span
        end = time.time_ns()
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, self.ts.redact_error(error)[:1000]))
            span.set_attribute(A.ERROR_TYPE, type(error).__qualname__)
        if run.is_root:
            with handle_internal_errors("langchain.record"):
                self._emit_record(run, outputs, error, inputs, end)
            span.end(end_time=end)
            root = run.root
            root.done = True
            if root.pending:
                pending, root.pending = root.pending, []
                self.ts.defer(partial(_materialize_all, self.tracer, pending))
            return
        span.end(end_time=end)
        if run.root.done:  # a step that outlived its root (a detached thread): emit it now
            span.materialize(self.tracer)

    def _emit_record(self, run: _Run, outputs: Any, error: BaseException | None,
                     inputs: Any, end: int) -> None:
        root = run.root
        if inputs is not None:  # streamed runs only know their full input at the end
            q = extract_query(inputs)
            if q:
                root.query = q
        answer = extract_answer(outputs) if error is None else None
        span = run.span
        ctx = span.get_span_context()
        contexts = merge_retrievals(root.retrievals)
        md = root.metadata
        scope = root.scope
        session, user = _session_user(md, scope)
        if session is None and root.config_session is not None:
            session = root.config_session
            span.set_attribute(A.SESSION_ID, session)
        metadata = {k: v for k, v in md.items()
                    if not k.startswith(("ls_", "langgraph_")) and k not in GROUND_TRUTH_KEYS}
        ground_truths = ground_truths_from(md)
        if scope is not None:
            metadata.update(scope.metadata)
            ground_truths = scope.ground_truths + ground_truths
        record = RagRecord(
            trace_id=format(ctx.trace_id, "032x"), span_id=format(ctx.span_id, "016x"),
            query=root.query, contexts=contexts, answer=answer,
            ground_truths=ground_truths, metadata=metadata, tags=root.tags,
            session_id=session, user_id=user,
            start_time_ns=root.start_ns, end_time_ns=end, usage=root.usage, model=root.model,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
            source="langchain", prompt=format_prompt(root.prompt),
            retrieval_queries=tuple(dict.fromkeys(root.retrieval_queries)),
        )
        span.set_attribute(A.RAG_ROOT, True)
        span.set_attribute(A.RECORD_ID, record.record_id)
        if outputs is not None and error is None:
            text = self._text(answer if answer is not None else outputs)
            if text is not None:
                span.set_attribute(A.OUTPUT_VALUE, text)
        if inputs is not None and root.query is not None:  # streamed: the full input now
            self._set_text(span, A.INPUT_VALUE, root.query)
        elif root.inputs is not None:
            self._set_text(span, A.INPUT_VALUE, root.inputs)
        decision = self.ts.submit(self.ts.prepare(record))
        if decision is not None:
            span.set_attribute(A.SAMPLED, decision.sampled)

    # -- chains -----------------------------------------------------------------------------
    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if _suppressed():
            return
        with handle_internal_errors("langchain.on_chain_start"):
            name = kwargs.get("name") or _name(serialized) or "chain"
            run = self._start(run_id, parent_run_id, name, A.KIND_CHAIN, metadata, tags, {})
            if run.is_root:
                run.root.query = extract_query(inputs)
                run.root.inputs = inputs  # input.value is built when the root ends
            elif metadata and metadata.get("langgraph_node") == name:
                run.node = True

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_chain_end"):
            run = self._runs.get(run_id)
            if run is not None and run.node:
                docs = state_documents(outputs)
                if docs:
                    self._add_documents(run, docs)
            self._finish(run_id, outputs, None, kwargs.get("inputs"))

    def on_chain_error(self, error: BaseException, *, run_id: UUID,
                       parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_chain_error"):
            self._finish(run_id, None, error, kwargs.get("inputs"))

    # -- retrievers -------------------------------------------------------------------------
    def on_retriever_start(self, serialized: dict[str, Any] | None, query: str, *,
                           run_id: UUID, parent_run_id: UUID | None = None,
                           tags: list[str] | None = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if _suppressed():
            return
        with handle_internal_errors("langchain.on_retriever_start"):
            name = kwargs.get("name") or _name(serialized) or "retriever"
            attrs: dict[str, Any] = {A.RETRIEVER_NAME: name}
            run = self._start(run_id, parent_run_id, name, A.KIND_RETRIEVER, metadata, tags,
                              attrs)
            self._set_text(run.span, A.INPUT_VALUE, query)
            if run.is_root:
                run.root.query = query if isinstance(query, str) else None
            elif isinstance(query, str) and query:
                run.root.retrieval_queries.append(query)

    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID,
                         parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_retriever_end"):
            run = self._runs.get(run_id)
            if run is not None:
                self._add_documents(run, documents or (), run.seq)
            self._finish(run_id, documents, None)

    def _add_documents(self, run: _Run, documents: Sequence[Any], seq: int | None = None) -> None:
        """Documents ``run`` produced: into the root's contexts, and onto ``run``'s span.

        Retrievers count at their start (parallel retrievers keep their start order); tools
        and graph nodes at their end, after any retriever they ran, so the same documents
        seen twice keep the retriever as their source.
        """
        ctxs = [document_context(d, run.name) for d in documents]
        run.root.retrievals.append((next(_seq) if seq is None else seq, run.name, ctxs))
        if self.ts.capture_content:
            if isinstance(run.span, _PendingSpan):
                run.span.lazy.append(partial(_dict_of, self._document_attrs, ctxs))
            else:
                run.span.set_attributes(dict(self._document_attrs(ctxs)))

    def on_retriever_error(self, error: BaseException, *, run_id: UUID,
                           parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_retriever_error"):
            self._finish(run_id, None, error)

    def _document_attrs(self, ctxs: Sequence[Context]) -> Any:
        yield A.RETRIEVAL_DOCUMENT_COUNT, len(ctxs)  # the span keeps the first few only
        for i, c in enumerate(ctxs[:A.MAX_SPAN_DOCUMENTS]):
            # One bad document loses its own attributes, not the span.
            with handle_internal_errors("langchain.document_attrs", reraise=False):
                text = self._text(c.text)
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
        if _suppressed():
            return
        with handle_internal_errors("langchain.on_chat_model_start"):
            prompt = messages[-1] if messages else []
            self._llm_start(serialized, prompt, "chat", run_id, parent_run_id, tags,
                            metadata, kwargs)

    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: list[str], *,
                     run_id: UUID, parent_run_id: UUID | None = None,
                     tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                     **kwargs: Any) -> None:
        if _suppressed():
            return
        with handle_internal_errors("langchain.on_llm_start"):
            self._llm_start(serialized, prompts[-1] if prompts else "", "text_completion",
                            run_id, parent_run_id, tags, metadata, kwargs)

    def _llm_start(self, serialized: dict[str, Any] | None, prompt: Any, operation: str,
                   run_id: UUID, parent_run_id: UUID | None, tags: list[str] | None,
                   metadata: dict[str, Any] | None, kwargs: Mapping[str, Any]) -> None:
        name = kwargs.get("name") or _name(serialized) or "llm"
        params = kwargs.get("invocation_params") or {}
        model = (params.get("model") or params.get("model_name")
                 or (metadata or {}).get("ls_model_name"))
        attrs: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: operation}
        if isinstance(model, str):
            attrs[A.GEN_AI_REQUEST_MODEL] = model
            attrs[A.LLM_MODEL_NAME] = model
        run = self._start(run_id, parent_run_id, name, A.KIND_LLM, metadata, tags, attrs)
        self._set_text(run.span, A.INPUT_VALUE, prompt)
        run.root.prompt = prompt
        if isinstance(model, str) and run.root.model is None:
            run.root.model = model

    def on_llm_end(self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                   **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_llm_end"):
            run = self._runs.get(run_id)
            if run is not None:
                text, usage, model = llm_result_parts(response)
                span = run.span
                if text is not None:
                    self._set_text(span, A.OUTPUT_VALUE, text)
                if model:
                    span.set_attribute(A.GEN_AI_RESPONSE_MODEL, model)
                    if run.root.model is None:
                        run.root.model = model
                if usage is not None:
                    span.set_attributes(usage_attributes(usage))
                    root = run.root
                    root.usage = usage if root.usage is None else root.usage + usage
            self._finish(run_id, None, None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID,
                     parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_llm_error"):
            self._finish(run_id, None, error)

    # -- tools ------------------------------------------------------------------------------
    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *,
                      run_id: UUID, parent_run_id: UUID | None = None,
                      tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                      **kwargs: Any) -> None:
        if _suppressed():
            return
        with handle_internal_errors("langchain.on_tool_start"):
            name = kwargs.get("name") or _name(serialized) or "tool"
            run = self._start(run_id, parent_run_id, name, A.KIND_TOOL, metadata, tags, {})
            inputs = kwargs.get("inputs")
            run.tool_input = inputs if inputs is not None else input_str
            if run.is_root:
                run.root.query = tool_query(run.tool_input)
                run.root.inputs = run.tool_input

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                    **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_tool_end"):
            run = self._runs.get(run_id)
            if run is not None:
                docs = artifact_documents(output)
                if docs:
                    self._add_documents(run, docs)
                    q = tool_query(run.tool_input)
                    if q and not run.is_root:
                        run.root.retrieval_queries.append(q)
            self._finish(run_id, output, None)

    def on_tool_error(self, error: BaseException, *, run_id: UUID,
                      parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with handle_internal_errors("langchain.on_tool_error"):
            self._finish(run_id, None, error)


# -- extraction helpers (pure functions, tested directly) ---------------------------------------
def _name(serialized: Mapping[str, Any] | None) -> str | None:
    if not serialized:
        return None
    name = serialized.get("name")
    if isinstance(name, str):
        return name
    ids = serialized.get("id")
    if isinstance(ids, list) and ids:
        return str(ids[-1])
    return None


def _message_text(m: Any) -> str | None:
    content = m.get("content") if isinstance(m, Mapping) else getattr(m, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = [b.get("text", "") if isinstance(b, dict) else str(b) for b in content]
        return "".join(p for p in parts if isinstance(p, str))
    return None


_HUMAN_ROLES = ("human", "user")
_AI_ROLES = ("ai", "assistant")


def _role(m: Any) -> str | None:
    """A message's role: LangChain message objects, ``{"role": ...}`` dicts and
    ``(role, text)`` tuples, the three forms LangGraph and ``create_agent`` accept."""
    if isinstance(m, tuple) and len(m) == 2 and isinstance(m[0], str):
        return m[0]
    if isinstance(m, Mapping):
        role = m.get("role", m.get("type"))
        return role if isinstance(role, str) else None
    role = getattr(m, "type", None)
    return role if isinstance(role, str) else None


def _text_of(m: Any) -> str | None:
    if isinstance(m, tuple) and len(m) == 2:
        return m[1] if isinstance(m[1], str) else None
    if isinstance(m, str):
        return m
    return _message_text(m)


def last_human_message(messages: Any) -> str | None:
    """The text of the last user message in a ``messages`` value (bounded scan)."""
    if isinstance(messages, str):
        return messages or None
    if not isinstance(messages, (list, tuple)):
        return _text_of(messages) if _role(messages) in _HUMAN_ROLES else None
    for m in itertools.islice(reversed(messages), MAX_MESSAGES):
        if _role(m) in _HUMAN_ROLES:
            return _text_of(m) or None
    return None


def final_ai_message(messages: Any) -> str | None:
    """The text of this turn's final AI message: the last AI message without tool calls,
    scanning back no further than the user's last message (so a turn that ended without an
    answer does not borrow the previous turn's)."""
    if not isinstance(messages, (list, tuple)):
        return None
    for m in itertools.islice(reversed(messages), MAX_MESSAGES):
        role = _role(m)
        if role in _HUMAN_ROLES:
            return None
        if role in _AI_ROLES:
            calls = m.get("tool_calls") if isinstance(m, Mapping) else getattr(
                m, "tool_calls", None)
            if calls:
                return None  # the turn stopped at a tool call: no final answer
            return _text_of(m)
    return None


def extract_query(inputs: Any) -> str | None:
    """The user's question from a root run's inputs (str, dict, or messages)."""
    if isinstance(inputs, str):
        return inputs or None
    if isinstance(inputs, Mapping):
        for key in QUERY_KEYS:
            v = inputs.get(key)
            if isinstance(v, str) and v:
                return v
        if "messages" in inputs:
            return last_human_message(inputs["messages"])
        strings = [v for v in itertools.islice(inputs.values(), MAX_STATE_KEYS)
                   if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
        return None
    if isinstance(inputs, (list, tuple)) and inputs:
        if isinstance(inputs, tuple) and _role(inputs) is not None:
            return _text_of(inputs)
        if _role(inputs[-1]) is not None:  # a list of messages (chat model or agent input)
            return last_human_message(inputs)
        return extract_query(inputs[-1])
    text = _message_text(inputs)
    if text:
        return text
    return None


def extract_answer(outputs: Any) -> str | None:
    """The final answer from a root run's outputs (str, dict, message, chunk, graph state)."""
    if outputs is None:
        return None
    if isinstance(outputs, str):
        return outputs
    if isinstance(outputs, Mapping):
        for key in ANSWER_KEYS:
            if key in outputs:
                v = outputs[key]
                return v if isinstance(v, str) else extract_answer(v)
        if "messages" in outputs:  # a LangGraph / create_agent state
            return final_ai_message(outputs["messages"])
        if len(outputs) == 1:
            return extract_answer(next(iter(outputs.values())))
        return None
    if isinstance(outputs, list) and outputs and _role(outputs[-1]) is not None:
        return final_ai_message(outputs)
    return _message_text(outputs)


def tool_query(tool_input: Any) -> str | None:
    """What a tool was asked: its one string argument, or its input string."""
    if isinstance(tool_input, str):
        return tool_input or None
    if isinstance(tool_input, Mapping):
        for key in QUERY_KEYS:
            v = tool_input.get(key)
            if isinstance(v, str) and v:
                return v
        strings = [v for v in itertools.islice(tool_input.values(), MAX_STATE_KEYS)
                   if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
    return None


def _is_document(x: Any) -> bool:
    # LangChain Documents, and LlamaIndex nodes (NodeWithScore, TextNode) put into a state
    return isinstance(getattr(x, "page_content", None), str) or callable(
        getattr(x, "get_content", None))


def _documents(value: Any) -> list[Any] | None:
    """``value`` if it is a non-empty list/tuple of documents (bounded), else None."""
    if not isinstance(value, (list, tuple)) or not value or not _is_document(value[0]):
        return None
    docs = list(itertools.islice(value, MAX_DOCUMENTS))
    return docs if all(_is_document(d) for d in docs) else None


def artifact_documents(output: Any) -> list[Any] | None:
    """Documents in a tool's result: a ``content_and_artifact`` tool's ``ToolMessage``
    artifact (a list of documents, or a dict holding one)."""
    artifact = getattr(output, "artifact", None)
    if artifact is None:
        return None
    docs = _documents(artifact)
    if docs is None and isinstance(artifact, Mapping):
        for v in itertools.islice(artifact.values(), MAX_STATE_KEYS):
            docs = _documents(v)
            if docs:
                break
    return docs


def state_documents(outputs: Any) -> list[Any] | None:
    """Documents a LangGraph node returned into the state: top-level values of its update
    (a dict, a ``Command``'s update, or a list of those) that are lists of documents."""
    update = outputs
    if not isinstance(outputs, (Mapping, list, tuple)):
        update = getattr(outputs, "update", None)  # Command(update=...)
    if isinstance(update, list) and update and not _is_document(update[0]):
        found: list[Any] = []
        for u in itertools.islice(update, MAX_STATE_KEYS):
            found.extend(state_documents(u) or ())
        return found or None
    if not isinstance(update, Mapping):
        return _documents(update)
    found = []
    for key, value in itertools.islice(update.items(), MAX_STATE_KEYS):
        if key == "messages":
            continue
        docs = _documents(value)
        if docs:
            found.extend(docs)
    return found or None


def merge_retrievals(retrievals: Sequence[tuple[int, str, list[Context]]]) -> tuple[Context, ...]:
    """Every retrieved document in order, once: the same document seen again (a retriever
    inside a tool whose artifact holds its documents, a node returning its retriever's
    documents into the state) keeps its first source."""
    out: list[Context] = []
    seen: set[tuple[str | None, str]] = set()
    for _, _source, ctxs in sorted(retrievals, key=lambda r: r[0]):
        for c in ctxs:
            key = (c.id, c.text)
            if key not in seen:
                seen.add(key)
                out.append(c)
    return tuple(out)


def _config_session() -> str | None:
    """A session id from the configurable of the config LangChain set for the current run's
    children. Callbacks see config values only as metadata, and langchain-core 1.x passes
    ``configurable`` values on as metadata to LangSmith's tracer alone."""
    config = var_child_runnable_config.get()
    configurable = config.get("configurable") if config else None
    if not isinstance(configurable, Mapping):
        return None
    return next((configurable[k] for k in SESSION_KEYS
                 if isinstance(configurable.get(k), str)), None)


def _session_user(md: Mapping[str, Any], scope: RunScope | None) -> tuple[str | None, str | None]:
    session = next((md[k] for k in SESSION_KEYS if isinstance(md.get(k), str)), None)
    user = md.get("user_id") if isinstance(md.get("user_id"), str) else None
    if scope is not None:
        session = scope.session_id or session
        user = scope.user_id or user
    return session, user


def document_context(doc: Any, source: str | None) -> Context:
    """A `Context` from a LangChain ``Document`` (or anything with ``page_content``)."""
    text = getattr(doc, "page_content", None)
    score_of_node = None
    if not isinstance(text, str) and callable(getattr(doc, "get_content", None)):
        score_of_node = getattr(doc, "score", None)  # a LlamaIndex NodeWithScore / node
        doc = getattr(doc, "node", doc)
        text = doc.get_content()
    if not isinstance(text, str):
        text = doc if isinstance(doc, str) else to_text(doc)
    md = getattr(doc, "metadata", None)
    md = dict(md) if isinstance(md, Mapping) else {}
    doc_id = (getattr(doc, "id", None) or getattr(doc, "node_id", None) or md.get("id")
              or md.get("doc_id"))
    score = md.get("score", md.get("relevance_score", score_of_node))
    try:
        score = float(score) if score is not None else None
    except (TypeError, ValueError):
        score = None
    return Context(text=text, id=None if doc_id is None else str(doc_id), score=score,
                   metadata=md, source=source)


def llm_result_parts(response: Any) -> tuple[str | None, TokenUsage | None, str | None]:
    """(text, token usage, model) from an ``LLMResult``."""
    text = None
    usage = None
    model = None
    gens = getattr(response, "generations", None) or []
    first = gens[0][0] if gens and gens[0] else None
    if first is not None:
        text = getattr(first, "text", None)
        msg = getattr(first, "message", None)
        um = getattr(msg, "usage_metadata", None) if msg is not None else None
        if um:
            usage = TokenUsage(int(um.get("input_tokens", 0)), int(um.get("output_tokens", 0)))
        rm = getattr(msg, "response_metadata", None) if msg is not None else None
        if isinstance(rm, Mapping):
            model = rm.get("model_name") or rm.get("model")
    llm_output = getattr(response, "llm_output", None)
    if isinstance(llm_output, Mapping):
        tu = llm_output.get("token_usage") or llm_output.get("usage")
        if usage is None and isinstance(tu, Mapping):
            usage = TokenUsage(int(tu.get("prompt_tokens", tu.get("input_tokens", 0)) or 0),
                               int(tu.get("completion_tokens", tu.get("output_tokens", 0)) or 0))
        model = model or llm_output.get("model_name") or llm_output.get("model")
    return text, usage, model if isinstance(model, str) else None


# -- process-wide instrumentation ------------------------------------------------------------
class _HandlerSlot:
    """What langchain_core's configure hook reads: ``.get()`` → the handler or None.

    A ``ContextVar`` would not do: threads started by the app (and by ``batch``) begin with an
    empty context, so a value set in one thread would not reach them.
    """

    def __init__(self) -> None:
        self.handler: TracescoreCallbackHandler | None = None

    def get(self) -> TracescoreCallbackHandler | None:
        return self.handler


_slot = _HandlerSlot()
_registered = False


def instrument(handler: TracescoreCallbackHandler) -> None:
    """Add ``handler`` to every LangChain run in the process (idempotent)."""
    global _registered
    from langchain_core.tracers.context import register_configure_hook

    if not _registered:
        # The handler class makes LangChain skip the hook when the same kind of handler was
        # passed explicitly in ``callbacks``, so a run is never captured twice.
        register_configure_hook(_slot, True, TracescoreCallbackHandler)  # type: ignore[arg-type]
        _registered = True
    _slot.handler = handler


def uninstrument(handler: TracescoreCallbackHandler | None = None) -> None:
    if handler is None or _slot.handler is handler:
        _slot.handler = None
