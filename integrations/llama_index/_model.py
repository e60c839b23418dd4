"""The capture's state: runs, traced nodes, the steps that produced documents, and the names
and small helpers every module of the package shares.

A *run* is one root LlamaIndex call (query/chat engine, retriever alone, workflow) and
everything under it; a *node* is one LlamaIndex span inside a run, either traced (it has a
span) or passed through to its nearest traced ancestor; a *step* is one document-producing or
document-consuming call (retriever, vector-store search, postprocessor, synthesizer, or
documents handed over by another framework), from which the record's contexts and candidates
are assembled when the run ends (see ``assembly.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, Status, StatusCode

from tracescore import attributes as A
from tracescore._internal.errors import handle_internal_errors
from tracescore._internal.tool_calls import AgentTrace
from tracescore.record import TokenUsage
from tracescore.runs import RunScope

from .._owner import Owner, OwnerToken
from .._spans import _NoSpan, _PendingSpan

#: Open LlamaIndex spans kept at most (runs that never end, e.g. streams that are never
#: consumed, are abandoned oldest first beyond this). Read at run start from the package
#: (``tracescore.integrations.llama_index.MAX_OPEN_SPANS``), where apps and tests set it.
MAX_OPEN_SPANS = 10_000
SESSION_KEYS = ("session_id", "thread_id", "conversation_id")
#: Record metadata key for the query the retriever got when it differs from the user's
#: (a chat engine's condensed question).
RETRIEVAL_QUERY_KEY = "llama_index.retrieval_query"
#: Record metadata key set on a record whose answer stream the client cut off (beside
#: ``RagRecord.complete = False``, kept for readers of the metadata).
STREAM_INCOMPLETE_KEY = "llama_index.stream_incomplete"
FRAMEWORK = "llama_index"

# What a LlamaIndex span is, from its instance's class and its method name.
QUERY, CHAT, RETRIEVE, SYNTHESIZE, POSTPROCESS, LLM, WORKFLOW, TOOL = (
    "query", "chat", "retrieve", "synthesize", "postprocess", "llm", "workflow", "tool")
ROOT_KINDS = frozenset({QUERY, CHAT, RETRIEVE, WORKFLOW})
OTEL_KIND = {QUERY: A.KIND_CHAIN, CHAT: A.KIND_CHAIN, RETRIEVE: A.KIND_RETRIEVER,
             SYNTHESIZE: A.KIND_CHAIN, POSTPROCESS: A.KIND_CHAIN, LLM: A.KIND_LLM,
             WORKFLOW: A.KIND_CHAIN, TOOL: A.KIND_TOOL}
#: The instrument tag LlamaIndex workflows add to a run span (a summary of the start event):
#: not the app's metadata.
START_EVENT_TAG = "llamaindex.start_event"
HISTORY_WRITERS = frozenset({"write_response_to_history", "awrite_response_to_history"})

# Step kinds (see assembly.py).
STEP_RETRIEVE, STEP_POSTPROCESS, STEP_SYNTHESIZE, STEP_EXTERNAL = (
    "retrieve", "postprocess", "synthesize", "external")

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
    token = session_var.set((session_id, user_id))
    try:
        yield
    finally:
        session_var.reset(token)


@dataclass(slots=True, eq=False)
class Step:
    """One call that produced or consumed documents: plain references, converted at the end.

    ``nodes`` is the output of a retriever, search or postprocessor, or the input of a
    synthesizer; ``inputs`` a postprocessor's input. ``within`` names the retriever that
    wraps this one (its hits are candidates the wrapper may drop: fusion, recursive retrieval).
    """

    seq: int
    kind: str
    name: str
    nodes: list[Any]
    inputs: list[Any] | None = None
    within: str | None = None
    final: bool = True  # an external step: the other framework's final documents
    #: A search whose store returned ids only (no text, e.g. ``SimpleVectorStore``): (id,
    #: score) pairs, matched by id to the nodes later steps got from the docstore.
    ids: list[tuple[str, float | None]] | None = None


@dataclass(slots=True, eq=False)
class Run:
    """One run: a root LlamaIndex call and everything under it."""

    id_: str  # LlamaIndex id of the root span
    kind: str
    start_ns: int
    session_id: str | None
    user_id: str | None
    metadata: dict[str, Any]
    root: Node | None = None
    query: str | None = None
    retrieval_query: str | None = None
    retrieval_queries: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    result: Any = None  # the root call's return value
    result_nodes: list[Any] | None = None
    query_answer: str | None = None  # the last QueryEndEvent's answer text
    answer: str | None = None
    answer_known: bool = False  # set by the stream wrapper
    incomplete: bool = False  # the client stopped reading the answer stream
    usage: TokenUsage | None = None
    model: str | None = None
    error: BaseException | None = None
    live: set[str] = field(default_factory=set)  # open non-root nodes
    waits: int = 0  # streams / history writers the root's result still depends on
    await_owner: int = 0  # id() of a StreamingAgentChatResponse whose writer we wait for
    streaming_llm: Node | None = None  # an LLM span whose stream is being consumed
    exited: bool = False
    done: bool = False
    prompt: Any = None  # the last LLM call's raw prompt (messages or text)
    scope: RunScope | None = None  # the app's ``ts.run()`` scope, if any
    #: Child spans as plain data, in start order: materialised by the writer once the run ends.
    pending: list[_PendingSpan] = field(default_factory=list)
    #: Another framework's run that owns the request (this run makes no record, see _owner).
    outer: Owner | None = None
    claim: OwnerToken | None = None  # our own ownership, released when the root exits
    external_answer: str | None = None  # offered by another framework's run inside this one
    seq: int = 0
    #: False: spans go nowhere (no exporter): child steps get no span (``_spans.NO_SPAN``).
    spans: bool = True
    #: Chat calls of the run, the agent's steps (chat calls outside tools), and its tool
    #: calls once it shows it is an agent (:mod:`.agent`).
    model_calls: int = 0
    agent_steps: int = 0
    agent: AgentTrace | None = None
    workflow: Any = None  # the workflow (agent) the run is, for its tool list

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


@dataclass(slots=True, eq=False)
class Node:
    """A LlamaIndex span inside a run: traced (``span`` set) or passed through to ``target``."""

    id_: str  # LlamaIndex span id
    run: Run
    #: the root's real Span; a _PendingSpan for the others (NO_SPAN when spans go nowhere)
    span: Span | _PendingSpan | _NoSpan | None
    kind: str | None
    owner: int  # id() of the instance whose method opened the span
    name: str
    #: the traced node this one reports to; None when traced (it reports to itself: no
    #: reference to itself, so a finished node is freed without the garbage collector)
    target: Node | None = None
    parent: Node | None = None  # a traced node's traced parent (None for the root)
    usage: TokenUsage | None = None
    op: str | None = None  # gen_ai operation, set by the first LLM start event
    input_set: bool = False
    held: list[str] | None = None  # pass-through ids kept open for this streaming LLM span
    streaming: bool = False  # an LLM span whose stream is still being consumed
    ended: bool = False
    inputs: list[Any] | None = None  # a postprocessor's / synthesizer's input nodes
    agent_step: int = 0  # an LLM node that is an agent step: its index (1-based)

    def within_retriever(self) -> str | None:
        """The name of the nearest enclosing traced retriever (this node excluded), if any."""
        p = self.parent
        while p is not None:
            if p.kind == RETRIEVE:
                return p.name.rpartition(".")[0] or p.name
            p = p.parent
        return None


#: The run whose stream is being consumed: spans LlamaIndex starts while our stream wrapper
#: pulls the next chunk (the LLM call of a lazy streaming synthesizer) have no LlamaIndex
#: parent, because the app consumes the stream outside the query's span.
stream_parent: ContextVar[Node | None] = ContextVar("tracescore_llama_stream", default=None)
session_var: ContextVar[tuple[str, str | None] | None] = ContextVar("tracescore_llama_session",
                                                                    default=None)




_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY
_get_current = otel_context.get_current


def suppressed() -> bool:
    """OTel instrumentation is suppressed in the calling context (tracescore's own scoring
    thread): checked where a run would start, not per step of a live run."""
    return bool(_get_current().get(_SUPPRESS_KEY))


def span_name(id_: str) -> str:
    # dispatcher.span ids are "<Class>.<method>-<uuid4>"; a uuid4 string is 36 characters.
    return id_[:-37] if len(id_) > 37 and id_[-37] == "-" else id_


def live_stream(value: Any) -> bool:
    """A generator that has not finished (the result of a call that streams)."""
    if inspect.isgenerator(value):
        return value.gi_frame is not None
    if inspect.isasyncgen(value):
        return value.ag_frame is not None
    return False


def unread(stream: Any, is_async: bool) -> bool:
    """A response stream the app has not read to its end yet."""
    if inspect.isgenerator(stream) or inspect.isasyncgen(stream):
        return live_stream(stream)
    return isinstance(stream, AsyncIterator if is_async else Iterator)


def funnel(where: str, exc: Exception, reraise: bool | None = None) -> None:
    """Send an exception caught in a handler through the internal-error funnel (logged and
    counted; re-raised under pytest). The handlers catch with ``try``/``except``, which costs
    nothing until something raises, and enter the funnel only then: entering a context
    manager on each of the ~40 handler calls of a query was a quarter of their cost."""
    with handle_internal_errors(where, reraise=reraise):
        raise exc


def set_error(span: Span | _PendingSpan | _NoSpan, err: BaseException, text: str) -> None:
    span.set_status(Status(StatusCode.ERROR, text[:1000]))
    span.set_attribute(A.ERROR_TYPE, type(err).__qualname__)


def dict_of(gen: Callable[[Any], Any], arg: Any) -> dict[str, Any]:
    return dict(gen(arg))
