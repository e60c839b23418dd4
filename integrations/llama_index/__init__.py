"""LlamaIndex capture: instrumentation span/event handlers that make OTel spans and one
`RagRecord` per root run.

Uses LlamaIndex's instrumentation API (``llama_index.core.instrumentation``), not the legacy
callback manager: a :class:`TracescoreSpanHandler` and a :class:`TracescoreEventHandler` are
added to the root dispatcher, and both feed one :class:`LlamaIndexCapture`, which keeps a light
map: LlamaIndex span id → node (OTel span or pass-through, and its run).

What is traced. A *run* starts at the outermost call of a query engine (``query``/``aquery``),
a chat engine (``chat``/``achat``/``stream_chat``/``astream_chat``), a retriever used on its
own (``retrieve``/``aretrieve``) or a workflow/agent (``Workflow.run``); the run's span joins
the app's current OTel span, if any — or, inside another framework's run (a LangChain tool
calling a query engine), nests under that run, which keeps the one record of the request
(``integrations/_owner.py``). Inside a run, OTel spans are made for query and chat engines
(CHAIN), retrievers and vector-store searches (RETRIEVER), synthesizers and node
postprocessors (CHAIN), tools (TOOL) and LLMs (LLM; nested LLM calls of one LLM call, e.g.
``predict`` → ``complete``, are one span). LlamaIndex's other spans (embeddings, splitters,
private helpers) are passed through: their children and events go to the nearest traced
ancestor. LlamaIndex calls outside any run (index building, a bare ``llm.complete``) are not
traced.

The record is built when the run ends: the root span has exited and nothing it depends on is
still open (a stream the client reads, a chat engine's history writer; see streams.py). Its
contexts are the documents that reached the answering model (assembly.py). Open runs are
bounded (:data:`MAX_OPEN_SPANS`): the oldest is abandoned first.

Modules: capture (span map, runs), events (event handlers, span attributes), assembly
(contexts and candidates), record (the record, or the hand-over to an outer run), streams,
stores (vector-store searches), workflows, sessions, extract (pure helpers), span_text
(a value as span text), handlers
(LlamaIndex handler classes and process-wide :func:`instrument`).
"""

from __future__ import annotations

from .. import require

require("llama_index.core", "llama-index")

from ._model import (  # noqa: E402
    MAX_OPEN_SPANS,
    RETRIEVAL_QUERY_KEY,
    SESSION_KEYS,
    STREAM_INCOMPLETE_KEY,
    session,
)
from .capture import LlamaIndexCapture  # noqa: E402
from .extract import node_context, query_text, response_text, token_usage  # noqa: E402
from .handlers import (  # noqa: E402
    Instrumentation,
    TracescoreEventHandler,
    TracescoreSpanHandler,
    instrument,
    uninstrument,
)
from .workflows import start_event_query, workflow_answer  # noqa: E402

__all__ = [
    "MAX_OPEN_SPANS",
    "RETRIEVAL_QUERY_KEY",
    "SESSION_KEYS",
    "STREAM_INCOMPLETE_KEY",
    "Instrumentation",
    "LlamaIndexCapture",
    "TracescoreEventHandler",
    "TracescoreSpanHandler",
    "instrument",
    "node_context",
    "query_text",
    "response_text",
    "session",
    "start_event_query",
    "token_usage",
    "uninstrument",
    "workflow_answer",
]
