"""Building a finished run's `RagRecord` — or, inside another framework's run, handing the
run's contexts and answer to that run's record instead (``integrations/_owner.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span, Status, StatusCode

from tracescore import attributes as A
from tracescore._internal.text import format_prompt
from tracescore.record import Candidate, Context, RagRecord
from tracescore.sampling import trace_fraction

from ._model import RETRIEVAL_QUERY_KEY, STREAM_INCOMPLETE_KEY, WORKFLOW, Run
from .assembly import assemble
from .extract import node_context, response_text
from .span_text import text_of
from .workflows import workflow_answer

if TYPE_CHECKING:
    from tracescore.client import Tracescore

__all__ = ["emit_record", "run_answer", "run_contexts"]


def run_answer(run: Run) -> str | None:
    """The run's answer: what the client received of a stream, a workflow's result (never a
    tool's answer), the engine's response, else an answer another framework offered."""
    answer: str | None = None
    if run.error is None:
        if run.answer_known:
            answer = run.answer
        elif run.kind == WORKFLOW:
            answer = workflow_answer(run.result)
        else:
            answer = response_text(run.result)
            if answer is None and not isinstance(run.result, list):
                answer = run.query_answer
    if answer is None and run.error is None and run.external_answer is not None:
        answer = run.external_answer
    return answer


def run_contexts(run: Run, candidates: bool = True) -> tuple[list[Context], list[Candidate]]:
    """(contexts, candidates) from the run's steps (assembly.py); a run with no step at all
    (an engine that reports no retrieval) falls back on the sources its result names.
    ``candidates=False``: none (a record stored compact keeps none)."""
    if run.steps:
        return assemble(run.steps, candidates)
    chosen: Any = run.result_nodes
    if chosen is None and run.result is not None and not isinstance(run.result, list):
        chosen = getattr(run.result, "source_nodes", None)
    return [node_context(n, None) for n in chosen or ()], []


def emit_record(ts: Tracescore, run: Run, span: Span, end: int) -> None:
    """Build the finished run's record and submit it (or hand it to the outer run's owner)."""
    answer = run_answer(run)
    outer = run.outer
    if outer is not None:
        contexts, _ = run_contexts(run, candidates=False)
        # Part of another framework's request: its record gets our documents and answer.
        outer.add_contexts(contexts, step=(run.root.name if run.root else run.kind), final=True)
        outer.offer_answer(answer)
        return
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
    trace_id = format(ctx.trace_id, "032x")
    u = trace_fraction(trace_id)
    # An unsampled record is stored compact (lengths and hashes): the prompt, the candidates
    # and the retrieval queries are built only for a record that keeps its text.
    full = ts.text_needed(u)

    agent = run.agent.build(run.model_calls) if run.agent is not None else None

    def build(full: bool) -> RagRecord:
        contexts, candidates = run_contexts(run, candidates=full)
        return RagRecord(
            trace_id=trace_id, span_id=format(ctx.span_id, "016x"),
            query=run.query, contexts=tuple(contexts), answer=answer,
            ground_truths=ground_truths,
            metadata=md, session_id=run.session_id, user_id=run.user_id,
            start_time_ns=run.start_ns, end_time_ns=end, usage=run.usage, model=run.model,
            error=(f"{type(run.error).__name__}: {run.error}" if run.error is not None
                   else None),
            source="llama_index", prompt=format_prompt(run.prompt) if full else None,
            retrieval_queries=tuple(dict.fromkeys(run.retrieval_queries)) if full else (),
            candidates=tuple(candidates), complete=not run.incomplete,
            agent=agent,
        )

    record = ts.prepare(build(full))
    decision = ts.decide(record, u)
    if decision.sampled and not full:  # forced by a rule (an error, a flag): the full record
        record = ts.prepare(build(True))
    attrs: dict[str, Any] = {A.RAG_ROOT: True, A.RECORD_ID: record.record_id}
    if run.incomplete:
        attrs[A.ANSWER_COMPLETE] = False
        span.set_status(Status(StatusCode.ERROR, "incomplete: the client stopped reading the "
                               f"stream after {len(answer or '')} characters"))
    if answer is not None:
        text = text_of(ts, answer)
        if text is not None:
            attrs[A.OUTPUT_VALUE] = text
    if run.query is not None:
        text = text_of(ts, run.query)
        if text is not None:
            attrs[A.INPUT_VALUE] = text
    if ts.submit(record, decision=decision) is not None:
        attrs[A.SAMPLED] = decision.sampled
    span.set_attributes(attrs)
