"""Which scoring jobs a record gets (:class:`JobPlanner`, a part the client holds): the plan of
a sampled record, the jobs a late ground truth or negative feedback opens, and the span hold
that waits for the jobs that will run. The writer thread calls it through the port; the
request path asks it how many jobs will run (a cached plan)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..queue import FeedbackUpdate, GroundTruthUpdate
from ..record import AGENT, ANSWER, CONTEXTS, GROUND_TRUTHS, QUERY, RagRecord
from ..sampling import Decision
from ..store import PENDING, SKIPPED, NewJob, StoreAPI
from ..store import judge_budget as JB
from ..store.compact import skip_reason

TEXT_INPUTS = frozenset({QUERY, CONTEXTS, ANSWER, GROUND_TRUTHS})

#: ``(metric, version, status, reason)``: one metric's plan for a record
Plan = tuple[tuple[str, str, str, str | None], ...]


class JobPlanner:
    """Job plans of records, by the metrics (``metric_by_name``) and which inputs a record
    has. ``attacher``: the score attacher whose span holds wait for the jobs (None: no
    spans held; nor are they without ``scoring``: capture only); ``sample_rate``/``compact_after_s``: named in a compact record's skip
    reason."""

    def __init__(self, metric_by_name: Mapping[str, Any], metric_names: tuple[str, ...],
                 sampler: Any, attacher: Any, *, scoring: bool, sample_rate: float,
                 compact_after_s: float | None) -> None:
        self.metric_by_name = metric_by_name
        self.metric_names = metric_names
        self.sampler = sampler
        self.attacher = attacher
        self.scoring = scoring
        self.sample_rate = sample_rate
        self.compact_after_s = compact_after_s
        #: job plans by metrics and which inputs a record has (see plan)
        self.plans: dict[tuple[Any, ...], Plan] = {}

    def plan_jobs(self, record: RagRecord, decision: Decision) -> list[NewJob]:
        rid = record.record_id
        return [NewJob(rid, *p) for p in self.plan(record, decision.metrics)]

    def plan(self, record: RagRecord, metrics: tuple[str, ...]) -> Plan:
        """``(metric, version, status, reason)`` of each of ``metrics`` for ``record``: a
        function of which inputs the record has (and whether it is compact, captured, cut
        off), so cached by that (any thread; the app's for the hold count, the writer's)."""
        key = (metrics, record.compact, record.content_captured, record.complete,
               bool(record.query), len(record.contexts) > 0,
               record.answer is not None and record.answer != "",
               len(record.ground_truths) > 0, record.agent is not None and record.has(AGENT))
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        out = []
        for name in metrics:
            metric = self.metric_by_name[name]
            if record.compact and metric.requires & TEXT_INPUTS:
                # forced later (negative feedback, a late reference) but stored text-less
                out.append((name, metric.version, SKIPPED,
                            skip_reason(self.sample_rate, self.compact_after_s)))
                continue
            if not record.content_captured and metric.requires & TEXT_INPUTS:
                out.append((name, metric.version, SKIPPED, "content capture is off"))
                continue
            missing = record.missing(metric.requires)
            if missing:
                out.append((name, metric.version, SKIPPED,
                            f"record has no {', '.join(missing)}"))
            else:
                out.append((name, metric.version, PENDING, None))
        plan = tuple(out)
        if len(self.plans) < 4096:
            self.plans[key] = plan
        return plan

    def jobs_to_run(self, record: RagRecord, metrics: tuple[str, ...]) -> int:
        """How many of ``metrics`` will score ``record`` (hot path: a cached plan)."""
        return sum(1 for p in self.plan(record, metrics) if p[2] == PENDING)

    def recount_hold(self, partial: RagRecord, record: RagRecord | None,
                     decision: Decision) -> None:
        """See :meth:`tracescore.client.Tracescore.recount_hold` (writer thread)."""
        if self.attacher is None or not self.scoring or not decision.metrics:
            return
        span_id = int(partial.span_id, 16)
        if record is None:
            self.attacher.cancel(span_id)
            return
        diff = (self.jobs_to_run(record, decision.metrics)
                - self.jobs_to_run(partial, decision.metrics))
        if diff:
            self.attacher.expect_more(span_id, diff)

    def apply_ground_truth(self, store: StoreAPI,
                           upd: GroundTruthUpdate | FeedbackUpdate) -> None:
        """Writer thread: store a late ground truth, feedback or label, and open the jobs it
        makes possible (a reference metric; every metric on negative feedback)."""
        from ..labels import LabelUpdate

        if isinstance(upd, LabelUpdate):  # a human label (add_label)
            upd.apply(store)
            return
        if isinstance(upd, FeedbackUpdate):
            store.add_feedback(upd.trace_id, upd.name, upd.value, upd.label, upd.comment,
                               upd.created_at)
            if upd.value is not None and upd.value < 0.5:
                # Negative feedback forces sampling: score every metric for that trace.
                forced = Decision(0.0, self.metric_names, "negative feedback")
                for rec in store.records_for_trace(upd.trace_id):
                    plan = self.plan_jobs(rec, forced)
                    self.add_jobs(rec, plan, store.insert_jobs_if_missing)
                    # a judge budget's "not judged" is undone: the job opens again and the
                    # worker judges it with pi = 1 (store/judge_budget.py, decide)
                    again = JB.not_judged_metrics(store, rec.record_id)
                    if again:
                        self.add_jobs(rec, [j for j in plan if j.metric in again],
                                      store.upsert_jobs)
            return
        by_name = self.metric_by_name
        for rec in store.set_ground_truths(upd.trace_id, upd.ground_truths):
            decision = self.sampler.decide(rec, self.metric_names)
            self.add_jobs(rec, [
                j for j in self.plan_jobs(rec, decision)
                if GROUND_TRUTHS in (by_name[j.metric].requires | by_name[j.metric].uses)
            ], store.upsert_jobs)

    def add_jobs(self, rec: RagRecord, jobs: list[NewJob],
                 write: Callable[[Sequence[NewJob]], int]) -> None:
        """Store ``jobs`` of one record; a held root span waits for the ones that will run.

        The hold grows *before* the jobs are stored (a worker may finish one at once) and
        shrinks by the jobs the store did not open (already pending or done).
        """
        if not jobs:
            return
        runs = [j for j in jobs if j.status == PENDING]
        if self.attacher is None or not runs:
            write(jobs)
            return
        span_id = int(rec.span_id, 16)
        self.attacher.expect_more(span_id, len(runs))
        opened = 0
        try:
            write([j for j in jobs if j.status != PENDING])
            opened = write(runs)
        finally:
            self.attacher.expect_more(span_id, opened - len(runs))
