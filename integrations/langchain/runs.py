"""The handler's light run map entries, and what a root run gathers for its record.

A :class:`_Run` per open LangChain run (span, kind, its parent and the enclosing retriever,
graph node and tool call); a :class:`_Root` per root run: what its record will hold. Document
steps are noted as :class:`~.._record.Retrieval` entries (a list append on the request path)
and assembled once, when the root ends (:mod:`.._record`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracescore._internal import capture_degraded as _degraded
from tracescore._internal.tool_calls import AgentTrace
from tracescore.record import Context, TokenUsage
from tracescore.runs import RunScope

from .._owner import Owner
from .._record import Retrieval
from .._spans import SharedAttrs, StepRows, _PendingSpan
from .messages import document_context, ends_with_answer, extract_query, is_map

#: Sequence numbers: start order of runs, and the order of document steps.
_seq = itertools.count()
#: Streamed tokens kept per LLM run (for the text a cut-off stream's client received).
MAX_STREAM_TOKENS = 100_000
#: :attr:`_Run.node_update` of a run whose graph node has not ended.
NO_UPDATE: Any = object()


@dataclass(slots=True)
class _Root:
    query: str | None = None
    retrievals: list[Retrieval] = field(default_factory=list)
    usage: TokenUsage | None = None
    model: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    start_ns: int = 0
    pending: list[_PendingSpan] = field(default_factory=list)  # (its _Step runs)
    inputs: Any = None
    prompt: Any = None  # the answering model's raw prompt (formatted when the record is built)
    done: bool = False  # the root ended: late child steps materialise at once
    #: (a tuple: of strings, the collector stops tracking it; a list it tracks)
    retrieval_queries: tuple[str, ...] = ()
    scope: RunScope | None = None
    #: A session id only the run's config holds (``RunnableWithMessageHistory``'s
    #: ``configurable.session_id``), read once, when the root's first child starts.
    config_session: str | None = None
    config_read: bool = False
    #: The session and user ids of the run's metadata (or its ``ts.run`` scope), at its start.
    session: str | None = None
    user: str | None = None
    #: Child runs started and not ended yet: a streamed root that ends with some open was
    #: cut off by its client (langchain-core then reports a normal end).
    open: int = 0
    #: The last LLM run outside retrievers (the answering model), for its streamed tokens.
    last_llm: _Run | None = None
    #: Ownership of the request's record (cross-framework): our owner, made when another
    #: framework first asks (``_owner`` resolver), or the other framework's owner we report to.
    owner: Owner | None = None
    guest_of: Owner | None = None
    #: The root run's span, for the owner (another framework's spans nest under it).
    span: Any = None
    #: An answer another framework's run inside this one offered (used if ours has none).
    offered_answer: str | None = None
    #: The root span's trace id (32 hex), and its sampling fraction (``sampling.trace_fraction``,
    #: computed once, at the root's start).
    trace_hex: str = ""
    fraction: float = 0.0
    #: False: spans go nowhere (no exporter): child steps get no span (``_spans.NO_SPAN``).
    spans: bool = True
    #: LangGraph's stream queue (``stream_mode="messages"``), found at the answering model's
    #: first token: at a cut, the chunks still in it never reached the client.
    stream_queue: Any = None
    #: Tool or graph node run → its last model call outside retrievers (a sub-agent's reply,
    #: a branch's summary: text derived from the documents reached the answering model).
    step_models: dict[int, int] = field(default_factory=dict)
    #: Model calls of the request, and the agent's steps (model calls outside tools and
    #: retrievers); the tool calls, once the run shows it is an agent (:mod:`.agent`).
    model_calls: int = 0
    steps: int = 0
    agent: AgentTrace | None = None
    #: The root's inputs its query is still to be found in (:func:`settle_query`): a request
    #: its trace fraction leaves unsampled finds it when its record is built (the writer).
    query_of: Any = None
    #: Agent events not applied yet (:func:`.agent.note`): a request its trace fraction
    #: leaves unsampled keeps them for a full build; None: applied as they come.
    agent_log: list[tuple[Any, tuple[Any, ...]]] | None = None


class _Run(_PendingSpan):
    """One live LangChain run. The fields every run sets are slots; the ones only some kinds
    of run set (a model's streamed tokens, a tool's input, a graph node's step) are class
    defaults, overridden in the instance's dict when set (a run per callback: a 17-field
    dataclass cost the request ~0.5 µs more per run).

    A root run (and a step whose spans go nowhere) is a plain ``_Run``: its span is another
    object (``span``; also its ``real``: what its children's spans are parented on). A child
    step whose span is pending is a :class:`_Step`: the run *is* its pending span (one object
    per step on the request path, not a run and a ``_PendingSpan``)."""

    __slots__ = ("span", "root", "is_root", "seq", "tool_call", "retriever", "node_run",
                 "node", "__dict__")

    span: Any  # the root's real Span (or _PendingRoot); the step itself for a _Step
    root: _Root
    is_root: bool
    name: str
    seq: int
    parent: _Run | None  # (the parent run; for a _Step, also the parent of its span)
    tool_call: str | None  # the nearest enclosing tool run's tool-call id
    retriever: _Run | None  # the nearest enclosing retriever run (itself if one)
    node_run: _Run | None  # the nearest enclosing LangGraph node run (itself if one)
    node: bool  # a LangGraph node: the documents it returns into the state count
    tool_input: Any = None
    tokens: list[str] | None = None  # an LLM run's streamed tokens
    #: An LLM run's streamed message id (LangGraph's "messages" stream queues chunks by it).
    msg_id: Any = None
    #: The state update an LLM run's LangGraph node ended with (:data:`NO_UPDATE`: its node
    #: has not ended): an update whose last message is not a final AI message (a rewriter's
    #: user message, a grader's structured output) means it is not the answering call —
    #: looked at only for a stream cut off (:func:`streamed_text`), not at every node's end.
    node_update: Any = NO_UPDATE
    #: A tool run (its ``tool_call`` is its own call's id).
    is_tool: bool = False
    #: A LangGraph node run: its superstep (``langgraph_step``) and, for a ``Send`` task, its
    #: index among the step's pushed tasks (parallel branches run in any order; the index is
    #: the order their results are reduced in).
    step: int | None = None
    task: int = -1
    #: A model run that is an agent step: its index (1-based); 0 for other runs.
    agent_step: int = 0

    def __init__(self, span: Any, root: _Root, is_root: bool, name: str, seq: int,
                 parent: _Run | None = None, tool_call: str | None = None,
                 retriever: _Run | None = None, node_run: _Run | None = None) -> None:
        self.span = span
        self.real = span  # (its children's spans are parented on it)
        self.root = root
        self.is_root = is_root
        self.name = name
        self.seq = seq
        self.parent = parent
        self.tool_call = tool_call
        self.retriever = retriever
        self.node_run = node_run
        self.node = False


class _Step(_Run):
    """A child step whose span is pending: the run and its :class:`_PendingSpan` in one
    object (materialised by the writer; ``parent.real`` is its parent span)."""

    __slots__ = ("idx",)  # (its row's index, set by steps_as_rows)

    def __init__(self, root: _Root, name: str, seq: int, parent: _Run, attrs: dict[str, Any],
                 start_ns: int) -> None:
        self.name = name
        self.parent = parent
        self.attrs = attrs
        self.start_ns = start_ns
        self.end_ns = None
        self.status = None
        self.real = None
        self.lazy = None
        self.root = root
        self.is_root = False
        self.seq = seq
        self.tool_call = parent.tool_call
        self.retriever = parent.retriever
        self.node_run = parent.node_run
        self.node = False

    @property  # type: ignore[override]
    def span(self) -> _Step:
        return self


class _Discard(list):  # type: ignore[type-arg]
    """A done root's ``pending``: a step that starts after its root ended materialises
    itself at its end; one shared list that keeps nothing, not an empty list per request."""

    __slots__ = ()

    def append(self, item: Any) -> None:
        pass


DONE_PENDING: list[Any] = _Discard()


def steps_as_rows(tracer: Any, root_run: _Run, head: Any, pending: list[Any]
                  ) -> StepRows | None:
    """A done root's ended steps (and ``head``, its pending root span or None) as the
    writer's :class:`.._spans.StepRows` (start order; a step's parent is the root run or an
    earlier step of the list), so the step objects die now, on the request's thread,
    instead of waiting for the writer as a dozen objects the garbage collector tracks; None
    when some step does not fit (not ended, already built, parented elsewhere): then the
    steps are materialised as they are."""
    rows = StepRows((tracer, head, root_run.real))
    for i, p in enumerate(pending):
        if type(p) is not _Step or p.end_ns is None or p.real is not None:
            return None
        parent = p.parent
        if parent is root_run:
            j = -1
        elif type(parent) is _Step and parent.root is p.root and parent.real is None:
            j = parent.idx
        else:
            return None
        p.idx = i
        attrs = p.attrs
        if type(attrs) is SharedAttrs:  # (a plain dict of plain values is not tracked by
            attrs = {k: v for k, v in attrs.items()}  # the collector; a copy of a tracked
        lazy = p.lazy  # one would be)
        if lazy is None:
            rows += (p.name, j, attrs, p.start_ns, p.end_ns, p.status, 0)
        else:
            rows += (p.name, j, attrs, p.start_ns, p.end_ns, p.status, len(lazy))
            rows += lazy
    return rows


class DocumentContexts(Sequence[Context]):
    """A document step's documents as the record's :class:`Context` objects, made on first
    use (:func:`.messages.document_context`; memoised): by the writer, which builds the
    record and the step's span, not by the request's thread. The documents are the
    framework's objects, read after the step (the list itself is copied at once)."""

    __slots__ = ("docs", "source", "_contexts")

    def __init__(self, docs: Sequence[Any], source: str) -> None:
        self.docs = tuple(docs)
        self.source = source
        self._contexts: list[Context] | None = None

    def _all(self) -> list[Context]:
        contexts = self._contexts
        if contexts is None:
            for attempt in range(3):
                try:
                    contexts = [document_context(d, self.source) for d in self.docs]
                    break
                except RuntimeError:  # (a document's metadata changed while copied:
                    if attempt == 2:  # the app's thread is still at work on it)
                        raise
            self._contexts = contexts
        return contexts  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self.docs)

    def __bool__(self) -> bool:
        return bool(self.docs)

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __iter__(self) -> Iterator[Context]:
        return iter(self._all())

    def __repr__(self) -> str:
        return f"DocumentContexts({self._all()!r})"


def settle_query(root: _Root) -> None:
    """The root's query from its inputs, if still to be found (``query_of``), as a string."""
    src = root.query_of
    if src is not None:
        root.query_of = None
        root.query = extract_query(src)
    if root.query is not None and type(root.query) is not str:
        root.query = str(root.query)


def new_retrieval(run: _Run, source: str, ctxs: Sequence[Context], kind: str, seq: int,
                  loop_key: str | None = None) -> Retrieval:
    """A document step of ``run``: inside a graph node, a later run of that node (a later
    superstep; not a parallel ``Send`` branch of the same step) or, for a state update, a
    later write of that key supersedes it. One walk up the run tree gathers the enclosing
    runs, tool calls (innermost first) and graph steps (outermost first)."""
    node = run.node_run
    if loop_key is None and node is not None:
        loop_key = f"node:{node.name}"
    ancestors = []
    calls = []
    order = []
    r: _Run | None = run
    while r is not None:
        if r.is_tool and r.tool_call is not None:
            calls.append((r.tool_call, r.name, r.seq))
        if r.step is not None:
            order.append((r.step, r.task))
        r = r.parent
        if r is not None:
            ancestors.append(r.seq)
    order.reverse()
    return Retrieval(seq=seq, source=source, contexts=ctxs, kind=kind,
                     ancestors=tuple(ancestors), run_seq=run.seq, loop_key=loop_key,
                     loop_round=tuple([s for s, _ in order]) if order else (run.seq,),
                     tool_call=run.tool_call, tool_calls=tuple(calls), order=tuple(order),
                     node=(node.seq, node.name) if node is not None else None)


def streamed_text(root: _Root) -> str | None:
    """The answer text a cut-off stream's client received, decided from the run tree.

    The answering call is the last model call outside retrievers, when no retrieval came
    after it and its LangGraph node (if it ended) returned a final AI message: a rewriter
    (its output goes back as a user message), a grader (structured output) or a call
    followed by a retrieval is not the answer (None). Chunks LangGraph's ``"messages"``
    stream still held at the cut were produced but never handed to the client.
    """
    llm = root.last_llm
    if llm is None or not llm.tokens:
        return None
    if llm.node_update is not NO_UPDATE and not ends_with_answer(llm.node_update):
        return None
    if any(r.seq > llm.seq for r in root.retrievals):
        return None
    tokens = llm.tokens
    queued = _queued_chunks(root.stream_queue, llm.msg_id)
    if queued:
        tokens = tokens[:max(0, len(tokens) - queued)]
    return "".join(tokens)


def _queued_chunks(stream: Any, msg_id: Any) -> int:
    """Chunks of message ``msg_id`` still in LangGraph's stream queue (never yielded)."""
    if stream is None or msg_id is None:
        return 0
    items = getattr(stream, "_queue", None)  # SyncQueue and asyncio.Queue: a deque
    if items is None:
        _degraded.note("stream_queue")  # a LangGraph release changed its queue
        return 0
    n = 0
    for item in [*items, *_scheduled_puts(stream)]:
        try:
            if item[1] == "messages" and getattr(item[2][0], "id", None) == msg_id:
                n += 1
        except (IndexError, KeyError, TypeError):
            _degraded.note("stream_item")
            continue
    return n


def _scheduled_puts(stream: Any) -> list[Any]:
    """Items on their way into an asyncio stream queue: LangGraph's async stream hands each
    chunk over with ``loop.call_soon_threadsafe(queue.put_nowait, item)``, so at a cut a chunk
    the model already produced may wait in the loop's ready callbacks, not yet in the queue —
    and never reach the client (the record then held one chunk more than the client saw, on a
    loaded machine). Read from the loop's ready handles; nothing when the loop keeps them
    elsewhere (uvloop) or the queue is a thread queue."""
    loop = getattr(stream, "_loop", None)  # (set once a reader waited on the queue)
    if loop is None and hasattr(stream, "put_nowait"):
        try:
            loop = asyncio.get_running_loop()  # the run's callbacks run on the graph's loop
        except RuntimeError:
            return []
    ready = getattr(loop, "_ready", None)
    if not ready:
        return []
    put = getattr(stream, "put_nowait", None)
    out = []
    try:
        for handle in list(ready):
            cb = getattr(handle, "_callback", None)
            args = getattr(handle, "_args", None)
            if args and cb == put and not getattr(handle, "_cancelled", False):
                out.append(args[0])
    except (RuntimeError, TypeError):  # (a deque changed while read from another thread)
        return []
    return out


def find_stream_queue(config: Any) -> Any:
    """LangGraph's stream queue from a run config's callbacks (its ``StreamMessagesHandler``
    puts chunks with the queue's ``put``, or ``call_soon_threadsafe(queue.put_nowait)``)."""
    callbacks = config.get("callbacks") if is_map(config) else None
    for h in getattr(callbacks, "handlers", ()) or ():
        if type(h).__name__.startswith("StreamMessagesHandler"):
            put = getattr(h, "stream", None)
            args = getattr(put, "args", None)  # functools.partial(call_soon_threadsafe, put)
            if args:
                put = args[0]
            owner = getattr(put, "__self__", None)
            if owner is not None and hasattr(owner, "_queue"):
                return owner
            _degraded.note("stream_queue")  # a LangGraph release changed its stream handler
    return None
