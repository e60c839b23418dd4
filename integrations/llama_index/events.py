"""LlamaIndex instrumentation events → span attributes and the run's steps (a mixin of
:class:`~.capture.LlamaIndexCapture`: the event handlers and the attribute builders)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

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
from opentelemetry.trace import Span

from tracescore import attributes as A
from tracescore._internal.text import clip, json_attr

from .._spans import NO_SPAN, _NoSpan, _only, _PendingSpan
from . import agent as G
from ._model import (
    STEP_RETRIEVE,
    STEP_SYNTHESIZE,
    WORKFLOW,
    Node,
    Run,
    Step,
    dict_of,
    funnel,
)
from .extract import message_text, model_name, node_context, query_text, response_text, token_usage
from .span_text import text_of

if TYPE_CHECKING:
    from tracescore.client import Tracescore

__all__ = ["EventsMixin", "step_name"]


def step_name(node: Node) -> str:
    """A step's name in sources and candidates: the class of the instance (``<Class>.<method>``
    span names without the method)."""
    return node.name.rpartition(".")[0] or node.name


class EventsMixin:
    """Event handlers: each takes the traced node the event belongs to and its run. They run
    inline on LlamaIndex's dispatch path and only set attributes and append to the run."""

    ts: Tracescore
    _lock: threading.Lock
    _max_chars: int

    def _end_span(self, node: Node, result: Any, err: BaseException | None, now: int) -> None:
        raise NotImplementedError

    def _release(self, node: Node) -> None:
        raise NotImplementedError

    def _set_text(self, span: Span | _PendingSpan | _NoSpan, key: str, value: Any) -> None:
        """Set a text attribute; on a pending span, build it later, off the request path."""
        if span is NO_SPAN:
            return
        if isinstance(span, _PendingSpan):
            span.later(partial(type(self)._text_attr, self, key, value))
        else:
            text = self._text(value)
            if text is not None:
                span.set_attribute(key, text)

    def _text_attr(self, key: str, value: Any) -> dict[str, Any]:
        return _only({key: self._text(value)})

    def _set_input(self, node: Node, value: Any) -> None:
        if node.input_set or node.span is None:
            return
        node.input_set = True
        self._set_text(node.span, A.INPUT_VALUE, value)

    def _query_start(self, node: Node, run: Run, event: QueryStartEvent) -> None:
        q = query_text(event.query)
        if run.kind == WORKFLOW:  # a tool's or step's query engine: not the user's message
            if q is not None:
                run.retrieval_queries.append(q)
        elif q is not None and (node is run.root or run.query is None):
            run.query = q
        if q is not None and node is not run.root:
            self._set_input(node, q)

    def _query_end(self, node: Node, run: Run, event: QueryEndEvent) -> None:
        # The text, not the response: an unconsumed StreamingResponse must stay collectable.
        text = run.query_answer = response_text(event.response)
        if node is not run.root and node.span is not None and text is not None:
            self._set_text(node.span, A.OUTPUT_VALUE, text)

    def _retrieval_start(self, node: Node, run: Run, event: RetrievalStartEvent) -> None:
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

    def _retrieval_end(self, node: Node, run: Run, event: RetrievalEndEvent) -> None:
        nodes = list(event.nodes or ())
        self._note(run, STEP_RETRIEVE, step_name(node), nodes, within=node.within_retriever())
        self._set_documents(node, nodes)

    def _note(self, run: Run, kind: str, name: str, nodes: list[Any],
              inputs: list[Any] | None = None, within: str | None = None) -> None:
        """Note a step that produced or consumed documents (a list append under the lock)."""
        with self._lock:
            run.steps.append(Step(run.next_seq(), kind, name, nodes, inputs, within))

    def _set_documents(self, node: Node, nodes: Sequence[Any]) -> None:
        """OpenInference ``retrieval.documents.*`` on the span of the step that produced them
        (built off the request path for a pending span)."""
        span = node.span
        if self.ts.capture_content and span is not None and span is not NO_SPAN:
            if isinstance(span, _PendingSpan):
                span.later(partial(dict_of, self._document_attrs, nodes))
            else:
                span.set_attributes(dict(self._document_attrs(nodes)))

    def _synthesize_start(self, node: Node, run: Run, event: SynthesizeStartEvent) -> None:
        q = query_text(event.query)
        if q is not None:
            self._set_input(node, q)

    def _synthesize_end(self, node: Node, run: Run, event: SynthesizeEndEvent) -> None:
        if node.inputs is None:  # a synthesizer whose input nodes were not an argument
            got = getattr(event.response, "source_nodes", None)
            if got is not None:
                node.inputs = list(got)
                self._note(run, STEP_SYNTHESIZE, step_name(node), node.inputs)

    def _llm_start(self, node: Node, run: Run,
                   event: LLMChatStartEvent | LLMCompletionStartEvent) -> None:
        if node.op is not None or node.span is None:
            return  # a nested call of the same LLM span (chat → complete): the outer one wins
        is_chat = isinstance(event, LLMChatStartEvent)
        node.op = "chat" if is_chat else "text_completion"
        G.chat_start(node, run, event)
        attrs: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: node.op}
        model = model_name(event.model_dict)
        if model is not None:
            attrs[A.GEN_AI_REQUEST_MODEL] = attrs[A.LLM_MODEL_NAME] = model
            if run.model is None:
                run.model = model
        if isinstance(event, LLMChatStartEvent):
            prompt: Any = message_text(event.messages[-1]) if event.messages else ""
            run.prompt = list(event.messages)
        else:
            prompt = event.prompt
            run.prompt = event.prompt
        node.span.set_attributes(attrs)
        if not node.input_set:
            node.input_set = True
            self._set_text(node.span, A.INPUT_VALUE, prompt)

    def _llm_end(self, node: Node, run: Run,
                 event: LLMChatEndEvent | LLMCompletionEndEvent) -> None:
        response = event.response
        if isinstance(event, LLMChatEndEvent):
            G.chat_end(node, run, event)
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

    def _exception(self, node: Node, run: Run, event: ExceptionEvent) -> None:
        if node.streaming:
            self._end_streaming_llm(node, event.exception)

    def _end_streaming_llm(self, node: Node, err: BaseException | None) -> None:
        node.streaming = False
        if node.run.streaming_llm is node:
            node.run.streaming_llm = None
        self._end_span(node, None, err, time.time_ns())
        self._release(node)

    # -- attributes -------------------------------------------------------------------------
    def _text(self, value: Any) -> str | None:
        return text_of(self.ts, value)

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
                funnel("llama_index.document_attrs", exc, reraise=False)
                continue
            yield from pairs

