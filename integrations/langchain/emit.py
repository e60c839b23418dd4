"""The record of a LangChain root run, built once when the root ends; and the root's side of
cross-framework ownership (:mod:`.._owner`).

A root run inside another framework's run (a LlamaIndex workflow awaiting a chain) makes no
record: it hands its contexts and answer to that run's owner. A root run asked for by another
framework's run inside it (a tool calling a LlamaIndex query engine) becomes an owner: the
documents the other framework hands over are document steps of this root.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry.trace import Status, StatusCode

from tracescore import attributes as A
from tracescore._internal.text import format_prompt
from tracescore.record import AgentRun, Candidate, Context, RagRecord, ToolCall
from tracescore.runs import ground_truths_from
from tracescore.sampling import FORCE_SAMPLE_KEY, trace_fraction

from .._owner import Owner, register_resolver
from .._record import EXTERNAL, Retrieval, assemble
from .._spans import _materialize_all, _PendingRoot
from . import agent as G
from . import messages as M
from .live import live_handlers
from .runs import DONE_PENDING, _Root, _Run, _seq, settle_query, steps_as_rows, streamed_text
from .span_text import set_text, snapshot

if TYPE_CHECKING:
    from tracescore.client import Tracescore


def emit_record(ts: Tracescore, run: _Run, outputs: Any,
                error: BaseException | None, inputs: Any, end: int, cut: bool) -> bool:
    """Build the root's record and submit it (or hand it to another framework's owner).

    ``cut``: the client stopped reading the stream; the answer is then the text the answering
    model streamed to it, the record and span are marked incomplete.

    The request's thread does only what the root span needs (its answer, ids, sampling
    decision); a request no metric samples and no rule forces has its record built on the
    writer thread (:meth:`~tracescore.client.Tracescore.offer_unbuilt`) when no step of it is
    still open (nothing can change the root any more). True: sampled (its root span is held
    for the scores).
    """
    root = run.root
    if root.owner is not None:
        root.owner.live = False
    if inputs is not None:  # streamed runs only know their full input at the end
        settle_query(root)
        q = M.extract_query(inputs)
        if q:
            root.query = q
    answer = M.extract_answer(outputs) if error is None else None
    structured = None
    if answer is None and error is None and not cut:
        answer, structured = M.structured_answer(outputs)
    if cut:
        answer = streamed_text(root) or answer
    elif answer is None and error is None:
        answer = root.offered_answer
    if answer is not None and type(answer) is not str:
        answer = str(answer)  # (langchain-core's TextAccessor: a plain str is what is stored)
    snap = None
    if root.query_of is not None:  # (found when the record is built: in the inputs as now)
        if root.query_of is root.inputs:
            snap = root.query_of = snapshot(root.inputs)
    elif root.query is not None and type(root.query) is not str:
        root.query = str(root.query)
    llm = root.last_llm
    answer_seq = None if llm is None else llm.seq
    span = run.span
    if root.guest_of is not None:
        contexts, candidates = _found(root, answer_seq, True)
        owner = root.guest_of
        owner.add_contexts(contexts, step=run.name, final=True)
        dropped = [Context(c.text, c.id, c.score, source=c.source)
                   for c in candidates if not c.kept]
        owner.add_contexts(dropped, step=run.name, final=False)
        owner.offer_answer(answer)
        root.agent_log = None  # (no record of ours: the log would only hold a cycle)
        return False
    ctx = span.get_span_context()
    trace_id = root.trace_hex or format(ctx.trace_id, "032x")
    span_hex = format(ctx.span_id, "016x")
    u = root.fraction if root.trace_hex else trace_fraction(trace_id)
    session, user = root.session, root.user
    if session is None and root.config_session is not None:
        session = root.config_session
        span.set_attribute(A.SESSION_ID, session)
    # A request stored compact (no metric samples it, no keep_full_text) never applies its
    # logged agent events: if it is offered unbuilt, its log is dropped, not extended (nor
    # its outputs snapshot); it holds step objects the collector would track meanwhile.
    compact = root.agent_log is not None and not ts.queue.keep_full_text
    if not compact:
        G.note(root, G.final_replies, root,  # (logged: of the app's final state as it is now)
               outputs if root.agent_log is None else snapshot(outputs))
    err = f"{type(error).__name__}: {error}" if error is not None else None
    scope = root.scope
    # (the writer's: the record's one build)
    args = build = _LastBuild((root, answer, structured, err, cut, end, trace_id, span_hex,
                               answer_seq, session, user))
    decision = None
    record = None
    finish = None
    # nothing can change the root any more (no step of it still open), and no flag forces it
    settled = root.open == 0 and (FORCE_SAMPLE_KEY not in root.metadata and (
        scope is None or FORCE_SAMPLE_KEY not in scope.metadata))
    if settled:
        decision = ts.offer_unbuilt(u, err is not None, False, build)
    if decision is not None and compact:  # (stored compact: the log is never applied)
        root.agent_log = None
    elif compact:  # (not offered: as above, before its record is built)
        G.note(root, G.final_replies, root, snapshot(outputs))
    if decision is not None:  # stored unsampled: the writer builds the record
        sampled: bool | None = False
    elif settled and err is None and ts.sampled_by_rate(u):
        # sampled: what its decision and span hold need now, the record on the writer
        G.settle(root)  # (a sample rate changed since the root started: its plan reads them)
        settle_query(root)
        record = ts.prepare(_plan_record(root, answer, cut, trace_id, span_hex))
        decision = ts.decide(record, u)
        finish = build
        sampled = None
    else:
        full = ts.text_needed(u)
        record = ts.prepare(_build(*args, full))
        decision = ts.decide(record, u)
        if decision.sampled and not full:  # forced by a rule (an error, a flag): the full one
            record = ts.prepare(_build(*args, True))
        root.agent_log = None  # (built: see _build_last)
        sampled = None
    span.set_attribute(A.RAG_ROOT, True)
    span.set_attribute(A.RECORD_ID, f"{trace_id}-{span_hex}")
    if cut:
        span.set_attribute(A.ANSWER_COMPLETE, False)
        span.set_status(Status(StatusCode.ERROR, "incomplete: the client stopped reading the "
                               f"stream after {len(answer or '')} characters"))
    # (the root's texts: built with its span, by the writer when no step outlives it — of the
    # app's values as they are now)
    if error is None and (outputs is not None or cut):
        set_text(ts, span, A.OUTPUT_VALUE, answer if answer is not None else snapshot(outputs))
    if inputs is not None and root.query is not None:  # streamed: the full input now
        set_text(ts, span, A.INPUT_VALUE, root.query)
    elif root.inputs is not None:
        set_text(ts, span, A.INPUT_VALUE, snap if snap is not None else snapshot(root.inputs))
    root.inputs = root.stream_queue = None  # (the app's objects the record does not need)
    if sampled is None and ts.submit(record, decision=decision, finish=finish) is not None:
        sampled = decision.sampled
    if sampled is not None:
        span.set_attribute(A.SAMPLED, sampled)
    return sampled is True


def defer_steps(ts: Tracescore, tracer: Any, run: _Run, span: Any, held: bool) -> None:
    """A root run that ended: its pending spans (its steps, and the root's own when it is
    pending and no step outlives it) to the writer. ``held``: its span waits for scores (a
    sampled root: the writer may have written its record already, and would otherwise take
    the steps with the next batch)."""
    root = run.root
    pending, root.pending = root.pending, DONE_PENDING
    head = span if type(span) is _PendingRoot else None
    if not pending and head is None:
        return  # (spans go nowhere, or the SDK's root with no step: nothing to build)
    rows = steps_as_rows(tracer, run, head, pending) if root.open == 0 else None
    if rows is not None:  # (plain data: the step objects die now, see steps_as_rows)
        ts.defer(rows, wake=held)
        return
    if head is not None:
        if root.open == 0:  # built by the writer, with its steps (held there if its
            pending.insert(0, span)  # scores are awaited: the hold came first)
        else:  # (steps that outlive it may end any time: they need it now)
            span.materialize(tracer)
    if pending:
        ts.defer(partial(_materialize_all, tracer, pending), wake=held)


def _found(root: _Root, answer_seq: int | None, candidates: bool
           ) -> tuple[tuple[Context, ...], tuple[Candidate, ...]]:
    """The record's contexts and candidates from the root's document steps."""
    # (only a retrieval made by a tool call is checked against the prompt's tool messages)
    calls = (M.prompt_tool_calls(root.prompt)
             if any(r.tool_call is not None for r in root.retrievals) else frozenset[str]())
    return assemble(root.retrievals, calls, candidates=candidates, answer_seq=answer_seq,
                    step_models=root.step_models)


#: Stand-ins in a record made for the decision and the job plan only (:func:`_plan_record`).
_AGENT_STANDIN = AgentRun(calls=(ToolCall("tracescore.plan"),))
_CONTEXTS_STANDIN = (Context("tracescore.plan"),)


def _plan_record(root: _Root, answer: str | None, cut: bool, trace_id: str, span_id: str
                 ) -> RagRecord:
    """What a sampled request's decision (the built-in sampler, no rule firing: a function
    of the trace id) and its span hold (the jobs its metrics will run: which inputs the record
    has) are made from, on the request's thread; never stored — the writer builds the record
    (:meth:`~tracescore.client.Tracescore.submit` with ``finish``) and recounts the hold if
    its inputs differ (contexts here are "some step returned documents": the writer's
    assembly may keep none)."""
    md = root.metadata
    ground_truths = ground_truths_from(md) if md else ()
    scope = root.scope
    if scope is not None:
        ground_truths = scope.ground_truths + ground_truths
    agent = root.agent
    return RagRecord(
        trace_id=trace_id, span_id=span_id, query=root.query, answer=answer,
        contexts=_CONTEXTS_STANDIN if any(r.contexts for r in root.retrievals) else (),
        ground_truths=ground_truths, complete=not cut, source="langchain",
        agent=_AGENT_STANDIN if agent is not None and (agent.calls or agent.tools) else None)


class _LastBuild(list):  # type: ignore[type-arg]
    """The record's one build on the writer: :func:`_build_last` of the arguments it holds
    (called with ``full``). One object the garbage collector tracks while the request
    waits for the writer, not a ``partial`` and its arguments' tuple."""

    __slots__ = ()

    def __call__(self, full: bool) -> RagRecord:
        return _build_last(*self, full)


def _build_last(*args: Any) -> RagRecord:
    """:func:`_build` for the record's last build (the writer's): then the agent events a
    request stored compact logged are dropped — they hold the root (a reference cycle: the
    request's objects would wait for the garbage collector instead of dying at once)."""
    try:
        return _build(*args)
    finally:
        args[0].agent_log = None


def _build(root: _Root, answer: str | None, structured: Any, error: str | None, cut: bool,
           end: int, trace_id: str, span_id: str, answer_seq: int | None,
           session: str | None, user: str | None, full: bool) -> RagRecord:
    """The root's record (on the request's thread, or on the writer's). ``full=False``:
    stored compact (lengths and hashes), so the parts only text rows keep — the prompt, the
    candidates, the retrieval queries, the tool calls — are left out."""
    contexts, candidates = _found(root, answer_seq, full)
    md = root.metadata
    metadata = {k: v for k, v in md.items()
                if not k.startswith(("ls_", "langgraph_")) and k not in M.GROUND_TRUTH_KEYS}
    ground_truths = ground_truths_from(md)
    if structured is not None:  # a structured answer's JSON (docs/capture.md)
        metadata["structured_answer"] = structured
    scope = root.scope
    if scope is not None:
        metadata.update(scope.metadata)
        ground_truths = scope.ground_truths + ground_truths
    settle_query(root)
    if full:
        G.settle(root)  # (the agent events a request expected to be stored compact logged)
    agent = root.agent.build(root.model_calls) if root.agent is not None and full else None
    return RagRecord(
        trace_id=trace_id, span_id=span_id,
        query=root.query, contexts=contexts, answer=answer,
        ground_truths=ground_truths, metadata=metadata, tags=root.tags,
        session_id=session, user_id=user,
        start_time_ns=root.start_ns, end_time_ns=end, usage=root.usage, model=root.model,
        error=error, source="langchain", prompt=format_prompt(root.prompt) if full else None,
        retrieval_queries=tuple(dict.fromkeys(root.retrieval_queries)) if full else (),
        candidates=candidates, complete=not cut, agent=agent,
    )


# -- ownership ---------------------------------------------------------------------------------
def _external(root: _Root, contexts: Sequence[Context], step: str, final: bool) -> None:
    """Documents another framework retrieved inside ``root`` (the owner's context sink)."""
    r = Retrieval(seq=next(_seq), source=step, contexts=list(contexts), kind=EXTERNAL,
                  within=None if final else step)
    root.retrievals.append(r)


def _offered(root: _Root, answer: str) -> None:
    if root.offered_answer is None:
        root.offered_answer = answer


def resolve_owner() -> Owner | None:
    """The LangChain root run the calling code runs inside, as an owner (made on first ask).

    Found from LangChain's own ``var_child_runnable_config`` (set for every step it runs):
    its callbacks' parent run → the handler's run map → the root.
    """
    config = var_child_runnable_config.get()
    callbacks = config.get("callbacks") if config else None
    parent = getattr(callbacks, "parent_run_id", None)
    if parent is None:
        return None
    for handler in live_handlers(callbacks):
        run = handler.live_run(parent)
        if run is not None:
            root = run.root
            if root.guest_of is not None:
                return root.guest_of  # the outermost run is another framework's
            if root.done or root.span is None:
                return None
            if root.owner is None:
                root.owner = Owner("langchain", format(root.span.get_span_context().trace_id,
                                                       "032x"), root.span,
                                   partial(_external, root), partial(_offered, root))
            return root.owner
    return None


register_resolver(resolve_owner, "langchain")
