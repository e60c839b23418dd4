"""`Tracescore`: the object :func:`tracescore.init` returns; it wires the pipeline together.

Its arguments are validated once, in :class:`~tracescore.settings.Settings`; ``__init__``
then only builds the stages and connects them. Data flows:

capture (integrations) → :meth:`Tracescore.submit` (sample, hold, enqueue; hot path) →
:class:`~tracescore.queue.RecordQueue` (writer thread → SQLite) →
:class:`~tracescore.worker.ScoringWorker` (scores) →
:class:`~tracescore.processor.ScoreAttachingProcessor` (scores onto spans) → exporter.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, TypeVar
from uuid import UUID

from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from . import __version__ as _version
from ._client import frameworks
from ._client.feedback import Feedback
from ._client.lifecycle import Lifecycle
from ._client.manual import (  # (the bounds: documented here, as tracescore.client's)
    MAX_LOG_CONTEXT_CHARS,  # noqa: F401
    MAX_LOG_CONTEXTS,  # noqa: F401
    Drops,
    _manual_record,
)
from ._client.planner import JobPlanner
from ._client.privacy import Privacy
from ._client.setup import (
    OwnProvider,
    check_database,
    equip_worker,
    setup_tracing,
    start_services,
)
from ._internal.errors import handle_internal_errors
from ._internal.losses import Losses
from ._internal.validate import (
    hot_reason,
)
from .export import CountingSpanExporter, ExportLoss
from .lazy_record import LazyRecord
from .metrics.base import Metric
from .queue import RecordQueue
from .record import Context, RagRecord
from .runs import RunIds, RunScope, current_scope, run_scope
from .sampling import DEFAULT_RULES, Decision, Rule, Sampler
from .settings import Settings
from .store.retention import Retention, RetentionThread
from .store.segments import SegmentSpec, release_environment
from .telemetry import Telemetry, plan_export
from .worker import ScoringWorker
from .write_port import PortFunctions

log = logging.getLogger("tracescore")

DEFAULT_METRICS = ("rouge", "bleu", "token_f1", "exact_match", "rgb_accuracy", "rgb_rejection")
#: Span attribute values (contexts, answers) longer than this are cut, with a content hash.
DEFAULT_MAX_ATTRIBUTE_CHARS = 4000

_F = TypeVar("_F", bound=Callable[..., Any])
_Self = TypeVar("_Self", bound="Tracescore")


def _doc(documented: Callable[..., Any]) -> Callable[[_F], _F]:
    """A documented method of the client that delegates to a part: its text is the part's."""
    def copy(method: _F) -> _F:
        method.__doc__ = documented.__doc__
        return method
    return copy


class Tracescore:
    """A running tracescore pipeline. Create it with :func:`tracescore.init`.

    Thread-safe. Methods that the app's request path calls (the framework handlers, and
    :meth:`submit`) never block and never raise; :meth:`flush` and :meth:`shutdown` block, by
    design, up to their timeout.

    Export (see docs/backends.md): ``exporter="otlp"`` sends traces, score log records and
    metrics over OTLP, configured by the standard ``OTEL_EXPORTER_OTLP_*`` environment variables
    (protocol ``http/protobuf`` by default, or ``grpc``). ``span_exporter``/``span_processor``,
    ``log_exporter`` and ``metric_reader`` set one signal explicitly (and win over
    ``exporter``). With an SDK ``TracerProvider`` already installed globally, tracescore adds
    its span processor to it rather than replacing it; ``exporter="app"`` instead wraps that
    provider's own processors, so the app's exporters send every span once, RAG roots with
    their scores. Its logger and meter providers are its own and never set as globals.
    ``max_attribute_chars`` bounds long span attribute values
    (the database keeps the full text).

    ``db``: a SQLite file (default ``$TRACESCORE_DB``, else ``tracescore.db``) or a
    ``postgresql://`` URL shared by a fleet (docs/fleet.md). ``score=False``: capture only —
    records and their scoring jobs are written, no scoring thread or judge client runs here;
    ``tracescore worker`` processes score them.

    Segments (what monitors and comparisons split by): ``release`` / ``environment`` — else the
    tracer provider's resource (``service.version``, ``deployment.environment.name``, e.g. from
    ``OTEL_RESOURCE_ATTRIBUTES``), else ``$TRACESCORE_RELEASE`` / ``$TRACESCORE_ENVIRONMENT``;
    the record's model; and ``segments=["prompt_version", ...]``, metadata keys (``ts.run(
    metadata=...)``, LangChain ``config={"metadata": ...}``, LlamaIndex ``instrument_tags``)
    that become dimensions ``metadata.<key>``. Past ``segment_limit`` distinct values of a
    dimension, new ones count as ``"other"`` (counter ``segments.overflow.<dim>``); past
    ``max_segments`` combinations in all, a record of a new combination keeps its release and
    environment and counts as ``"other"`` in every other dimension (counter
    ``segments.overflow.segments``).

    ``capture="otel"``: an app already instrumented with OpenInference, OpenLLMetry or the
    GenAI conventions gets a span processor on its SDK tracer provider (``tracer_provider``,
    else the global one) that builds the same records from those spans as ``tracescore
    serve`` does (docs/otlp.md); the app keeps its own exporter.

    ``monitors``: a monitors file (TOML) or a list of dicts / ``Monitor`` objects, validated at
    ``init``; evaluated every minute in a background thread (where scoring runs; on PostgreSQL
    one evaluator per database at a time), with notifications sent from another
    (docs/monitoring.md).

    ``session_idle``: records that carry a session key (``ts.run(session_id=...)``, LangChain
    metadata ``session_id``/``thread_id``/``conversation_id``, LangGraph's ``thread_id``,
    LlamaIndex chat memory, OTLP ``session.id``/``gen_ai.conversation.id``) are turns of a
    conversation; after this long without a turn ("5m", or seconds) the session is scored as
    a unit (turns, repeats, abandonment, turn-level aggregates), in the background where
    scoring runs; a later turn re-opens it and its scores are replaced (docs/sessions.md).
    ``session_metrics``: LLM-judge session metrics (``"conversation_relevancy"``,
    ``"knowledge_retention"``, as DeepEval defines them), scored as judge jobs on each closed
    session (they need ``judge``).
    """

    def __init__(
        self,
        *,
        db: str | os.PathLike[str] | None = None,
        score: bool = True,
        metrics: Iterable[str | Metric] = DEFAULT_METRICS,
        sample_rate: float = 1.0,
        sample_rates: Mapping[str, float] | None = None,
        force_rules: Sequence[Rule] = DEFAULT_RULES,
        exporter: str | None = None,
        span_exporter: SpanExporter | None = None,
        span_processor: SpanProcessor | None = None,
        log_exporter: LogRecordExporter | None = None,
        metric_reader: MetricReader | None = None,
        tracer_provider: TracerProvider | None = None,
        max_attribute_chars: int = DEFAULT_MAX_ATTRIBUTE_CHARS,
        hold_seconds: float = 10.0,
        capture_content: bool = True,
        redact: Callable[[str], str] | None = None,
        max_queue: int = 10_000,
        concurrency: int = 4,
        lease_seconds: float = 120.0,
        metric_timeout_s: float = 60.0,
        judge: Any = None,
        judge_timeout_s: float = 60.0,
        judge_max_retries: int = 4,
        judge_backoff_s: tuple[float, float] = (0.5, 30.0),
        judge_breaker: tuple[int, float] = (5, 30.0),
        judge_calls_per_minute: float | None = None,
        judge_price: tuple[float, float] | None = None,
        judge_daily_budget_usd: float | None = None,
        judge_canary: bool | str | float = True,
        judge_max_wait_s: float = 6 * 3600.0,
        judge_budget: str | float | None = None,
        judge_budgets: Mapping[str, str | float] | None = None,
        embedder: Any = None,
        retention: Retention | str | None = "30d",
        keep_full_text: bool | str | float = False,
        release: str | None = None,
        environment: str | None = None,
        segments: Sequence[str] = (),
        segment_limit: int = 100,
        max_segments: int = 1000,
        monitors: Any = None,
        capture: str | None = None,
        session_idle: str | float | None = None,
        session_metrics: Iterable[str | Metric] = (),
    ) -> None:
        args = dict(locals())
        del args["self"]
        if args["db"] is None:
            args["db"] = os.environ.get("TRACESCORE_DB") or "tracescore.db"
        #: The validated arguments (frozen); everything below only wires stages together.
        self.settings = s = Settings(**args)
        # (session judge metrics: scored by this process's worker on the sessions' records,
        # never sampled for a request: the sampler knows s.metrics only)
        self.metrics = list(s.metrics) + list(s.session_metrics)
        self.db_path = s.db
        self.max_attribute_chars = s.max_attribute_chars
        self.capture_content = s.capture_content
        self.redact = s.redact
        #: content capture and redaction (the request path calls its bound methods directly)
        self.privacy = Privacy(s.capture_content, s.redact)
        self.prepare = self.privacy.prepare  # type: ignore[method-assign]
        self.redact_text = self.privacy.redact_text  # type: ignore[method-assign]
        self.redact_value = self.privacy.redact_value  # type: ignore[method-assign]
        self.redact_id = self.privacy.redact_id  # type: ignore[method-assign]
        self.redact_error = self.privacy.redact_error  # type: ignore[method-assign]
        self._metric_by_name = {m.name: m for m in self.metrics}
        self._metric_names = s.metric_names

        # record → sample
        self.sampler = Sampler(s.sample_rate, s.sample_rates, s.force_rules)
        #: a trace whose fraction is at or above it is sampled only when a rule forces it
        self._top_rate = self.sampler.top_rate(self._metric_names)
        # store: create the schema now, so a bad file fails at init
        self.scoring = s.score
        check_database(self.db_path, self.metrics)

        #: accepted and then lost, by reason (stats()["lost"])
        self.losses = Losses()

        # attach → export
        self.export_loss = ExportLoss()
        plan = plan_export(
            s.exporter, span_exporter=s.span_exporter, span_processor=s.span_processor,
            log_exporter=s.log_exporter, metric_reader=s.metric_reader, loss=self.export_loss,
        )
        self._adopted = s.exporter == "app"
        self.tracer_provider, self.attacher = setup_tracing(
            s.tracer_provider, plan.span_exporter, s.span_processor, s.hold_seconds,
            adopt=self._adopted, loss=self.export_loss,
        )
        self.tracer = self.tracer_provider.get_tracer("tracescore", _version)
        # segments: release/environment from init, else the provider's resource, else the env
        release, environment = release_environment(
            s.release, s.environment, getattr(self.tracer_provider, "resource", None))
        #: what records are segmented by (travels to the writer thread)
        self.segment_spec = SegmentSpec(release, environment, s.segments, s.segment_limit,
                                        s.max_segments)
        self.telemetry = Telemetry(
            resource=self.tracer_provider.resource, log_exporter=plan.log_exporter,
            metric_reader=plan.metric_reader, loss=self.export_loss,
            max_attribute_chars=s.max_attribute_chars, release=release,
            environment=environment,
        )
        #: The metric instruments; the judge reports its calls with ``export_metrics.judge_call``.
        self.export_metrics = self.telemetry.metrics
        self.records_seen = 0
        self.records_sampled = 0
        #: contexts and ground truths log_record dropped beyond its bounds
        self.drops = Drops()

        # score: the worker, with the models its metrics need
        self.worker = ScoringWorker(
            self.db_path, self.metrics, attacher=self.attacher, concurrency=s.concurrency,
            lease_seconds=s.lease_seconds, metric_timeout_s=s.metric_timeout_s,
            on_scores=self.telemetry.scores_stored if self.telemetry.enabled else None,
        )
        # (its embedder and judge: only where this process scores)
        self.embedder, self.judge_session = equip_worker(
            s, self.worker, self.db_path, self.metrics, self.export_metrics)
        if self.attacher is not None:
            self.attacher.bind_tracer(self.tracer)
            self.attacher.on_delivered = self.worker.deliveries.note
            if isinstance(plan.span_exporter, CountingSpanExporter):
                # tracescore's own exporter: a score is delivered once its span was exported
                plan.span_exporter.on_result = self.attacher.exported
                self.attacher.confirm_exports = True

        #: which jobs a record gets, and the span holds that wait for them
        self.planner = JobPlanner(self._metric_by_name, self._metric_names, self.sampler,
                                  self.attacher, scoring=s.score, sample_rate=s.sample_rate,
                                  compact_after_s=s.compact_after_s)
        self._plan_jobs = self.planner.plan_jobs
        self._jobs_to_run = self.planner.jobs_to_run
        self.recount_hold = self.planner.recount_hold  # type: ignore[method-assign]
        # queue: the hot path's bounded buffer and the writer behind it
        # (the writer's one port: jobs, updates, the scorer's wake, and — when this process
        # scores — cheap local metrics scored by the writer as it stores a record)
        port = PortFunctions(self._plan_jobs, self.planner.apply_ground_truth, self.worker.wake,
                             self.worker.on_write if s.score else None)
        self.queue = RecordQueue(
            self.db_path, port, max_size=s.max_queue, losses=self.losses,
            keep_full_text=s.keep_full_text is not False, segments=self.segment_spec,
        )
        # background services: retention, monitors, the session closer (where scoring runs)
        self.retention: RetentionThread | None
        self.retention, self.monitors, self.sessions = start_services(
            s, self.db_path, telemetry=self.telemetry, embedder=self.embedder,
            wake=self.worker.wake if s.score else None)
        self._closed = False
        #: flush, shutdown, stats (the client's documented methods delegate to it)
        self.lifecycle = Lifecycle(
            self.db_path, self._metric_names, queue=self.queue, worker=self.worker,
            attacher=self.attacher, telemetry=self.telemetry, losses=self.losses,
            export_loss=self.export_loss, judge_session=self.judge_session,
            services=(self.retention, self.monitors, self.sessions), embedder=self.embedder,
            adopted=self._adopted, scoring=lambda: self.scoring,
            counts=lambda: (self.records_seen, self.records_sampled, self.drops.count),
            closing=partial(setattr, self, "_closed", True), uninstrument=self._uninstrument)
        self.export_metrics.bind(self.lifecycle.snapshot)
        if s.score:
            self.worker.start()
        self._langchain_handler: Any = None
        self._llama_index: Any = None
        #: capture="otel": the span processor on the app's tracer provider
        self.otel_capture: Any = None
        if s.capture == "otel":
            from .intake.otel import attach

            self.otel_capture = self.lifecycle.otel_capture = attach(self, s.tracer_provider)
        #: app run id (``config={"run_id": ...}``) → trace id, for feedback by run id
        self.run_ids = RunIds()
        #: ground truths, feedback, labels (the client's documented methods delegate to it)
        self.feedback = Feedback(self.run_ids, self.queue, self.metrics,
                                 capture_content=s.capture_content, redact=s.redact)

    @property
    def contexts_dropped(self) -> int:
        """Contexts and ground truths :meth:`log_record` dropped beyond its bounds."""
        return self.drops.count

    @property
    def spans_wanted(self) -> bool:
        """False while spans go nowhere: tracescore's own tracer provider (no ``exporter``,
        ``span_exporter`` or ``span_processor``, no provider of the app's) with no span
        processor added. The adapters then make only the root span (its ids are the record's)
        and skip their child spans, which no one would receive (hot path: an attribute read)."""
        p = self.tracer_provider
        return type(p) is not OwnProvider or p.processors > 0

    # -- framework entry points (tracescore/_client/frameworks.py) ----------------------------
    @_doc(frameworks.langchain_handler)
    def langchain_handler(self) -> Any:
        return frameworks.langchain_handler(self)

    @_doc(frameworks.instrument_langchain)
    def instrument_langchain(self) -> None:
        frameworks.instrument_langchain(self)

    def uninstrument_langchain(self) -> None:
        frameworks.uninstrument_langchain(self)

    @_doc(frameworks.instrument_llama_index)
    def instrument_llama_index(self) -> None:
        frameworks.instrument_llama_index(self)

    def uninstrument_llama_index(self) -> None:
        frameworks.uninstrument_llama_index(self)

    @_doc(frameworks.instrument)
    def instrument(self) -> list[str]:
        return frameworks.instrument(self)

    def _uninstrument(self) -> None:
        """At shutdown: the frameworks this client instrumented are left alone again."""
        if self._langchain_handler is not None:
            self.uninstrument_langchain()
        self.uninstrument_llama_index()

    # -- what arrives after a run (tracescore/_client/feedback.py) -------------------------
    @_doc(Feedback.trace_id_of)
    def trace_id_of(self, run_id: str | UUID) -> str | None:
        return self.feedback.trace_id_of(run_id)

    @_doc(Feedback.add_ground_truth)
    def add_ground_truth(self, trace_id: str | UUID, ground_truths: Sequence[str]) -> None:
        self.feedback.add_ground_truth(trace_id, ground_truths)

    @_doc(Feedback.add_feedback)
    def add_feedback(self, trace_id: str | UUID, value: float | bool | str | None = None, *,
                     label: str | None = None, name: str = "user",
                     comment: str | None = None) -> None:
        self.feedback.add_feedback(trace_id, value, label=label, name=name, comment=comment)

    @_doc(Feedback.add_label)
    def add_label(self, trace_id: str | UUID, score_name: str, value: Any,
                  annotator: str | None = None, comment: str | None = None) -> None:
        self.feedback.add_label(trace_id, score_name, value, annotator, comment)

    # -- life cycle (tracescore/_client/lifecycle.py) --------------------------------------
    @_doc(Lifecycle.flush)
    def flush(self, timeout: float = 30.0) -> bool:
        return self.lifecycle.flush(timeout)

    @_doc(Lifecycle.close_sessions)
    def close_sessions(self, now: float | None = None) -> Any:
        return self.lifecycle.close_sessions(now)

    @_doc(Lifecycle.shutdown)
    def shutdown(self, timeout: float = 30.0) -> bool:
        return self.lifecycle.shutdown(timeout)

    @_doc(Lifecycle.stats)
    def stats(self) -> dict[str, Any]:
        return self.lifecycle.stats()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # -- the hot path -------------------------------------------------------------------------
    def submit(self, record: RagRecord, *, hold_span: bool = True,
               decision: Decision | None = None,
               finish: Callable[[bool], RagRecord] | None = None) -> Decision | None:
        """Sample, register the span hold, enqueue. Never blocks or raises (app thread).

        Call it *before* the record's root span ends, so the span can be held for its scores.
        ``hold_span=False``: no span with the record's span id will end (its scores go out on
        a carrier span as soon as they are in). ``decision``: :meth:`decide`'s for this very
        record, when the caller made it already (an adapter that builds a lighter record for
        an unsampled request). ``finish``: with ``decision``, ``record`` holds only what the
        decision and the span's hold need (its inputs, answer, ids; never stored):
        ``finish(True)`` builds the record on the writer thread (what is prepared and stored;
        the hold is recounted if its inputs differ, cancelled if it cannot be built: counted
        lost).
        """
        with handle_internal_errors("submit"):
            if self._closed:
                return None
            bad = hot_reason(record)
            if bad is not None:
                # (log_record checks its input; a record built elsewhere must not vanish
                # silently: it is counted by reason and logged once)
                self.losses.add(bad, 1, f"{record!r:.200}")
                return None
            item: Any
            if decision is None:
                decision = self.sampler.decide(record, self._metric_names)
                # unsampled, not forced: the decision is a function of the trace id, and the
                # record waits alone (one object fewer per record for the garbage collector;
                # the writer makes the decision again: queue._Pairs)
                item = record if not decision.metrics and decision.forced is None and type(
                    record) is RagRecord and type(self.sampler) is Sampler else (record, decision)
            elif finish is not None:
                item = LazyRecord(self, finish, True, decision, record)
            else:
                item = (record, decision)
            # Plain int counters (read by the metric callbacks): no lock, no SDK call here.
            self.records_seen += 1
            if decision.metrics:
                self.records_sampled += 1
            held = 0
            # capture only: the scores come from remote workers, on carrier spans
            if self.attacher is not None and decision.metrics and hold_span and self.scoring:
                n = self._jobs_to_run(record, decision.metrics)
                if n:
                    held = int(record.span_id, 16)
                    self.attacher.expect(int(record.trace_id, 16), held, n)
            if not self.queue.put(item) and held and self.attacher is not None:
                self.attacher.cancel(held)  # dropped: no scores will come, do not hold the span
            return decision
        return None

    def offer_unbuilt(self, u: float, failed: bool, flagged: bool,
                      build: Callable[[bool], RagRecord]) -> Decision | None:
        """Enqueue a request no metric samples and no rule forces *without building its
        record*: ``build(full)`` makes it on the writer thread (``full``: keep the parts only
        text rows keep, see :meth:`text_needed`), where it is prepared (redaction), checked and
        stored like a record :meth:`submit` took. Hot path: a few compares and one append.

        Decidable before the record exists only with the built-in :class:`Sampler` and its
        default rules (an error, the ``tracescore.force_sample`` metadata flag: ``failed``
        and ``flagged``): the unsampled decision is then a function of the trace fraction
        ``u``. Returns None — the caller builds the record now and calls :meth:`submit` — when
        it is not (a custom sampler or rule, a sampled or forced request, a closed client).
        ``build`` must read only what the request no longer changes (see the LangChain
        adapter: the root's lists are detached at its end)."""
        sampler = self.sampler
        if (failed or flagged or u < self._top_rate or self._closed
                or type(sampler) is not Sampler or (sampler.rules is not DEFAULT_RULES
                                                    and sampler.rules != DEFAULT_RULES)):
            return None
        self.records_seen += 1
        self.queue.put(LazyRecord(self, build, self.queue.keep_full_text))
        return Decision(u, ())

    def sampled_by_rate(self, u: float) -> bool:
        """Whether a request of trace fraction ``u`` is sampled whatever its record holds: some
        metric's rate takes it, and the sampler is the built-in one with its default rules
        (which force records, never leave them out). Then :meth:`submit` may take a record
        made for the decision and the job plan only, with ``finish`` (hot path)."""
        sampler = self.sampler
        return (u < self._top_rate and type(sampler) is Sampler
                and (sampler.rules is DEFAULT_RULES or sampler.rules == DEFAULT_RULES))

    def decide(self, record: RagRecord, u: float | None = None) -> Decision:
        """The sampling decision :meth:`submit` would make for ``record`` (hot path; ``u``:
        its trace's ``sampling.trace_fraction`` if known)."""
        return self.sampler.decide(record, self._metric_names, u)

    def text_needed(self, u: float) -> bool:
        """Whether a record whose trace has fraction ``u`` is stored with its text whatever
        the force rules say: some metric samples it, or ``keep_full_text`` keeps every
        record's text. False: it is stored compact (lengths and hashes, on the writer thread)
        unless a rule forces it, so an adapter may leave out what only text rows keep — the
        prompt, the retrieval candidates, the retrieval queries — and add them when
        :meth:`decide` says a rule forced it (hot path: a float compare)."""
        return u < self._top_rate or self.queue.keep_full_text

    def recount_hold(self, partial: RagRecord, record: RagRecord | None,
                     decision: Decision) -> None:
        """Writer thread: ``record``, built from a request whose span hold was counted from
        ``partial`` (:meth:`submit` with ``finish``), may have another number of jobs to run
        (no document step kept any document; a fault left it unbuilt: None): the hold waits
        for that many."""
        self.planner.recount_hold(partial, record, decision)

    def defer(self, task: Callable[[], None], wake: bool = False) -> bool:
        """Run ``task`` on the background writer thread (hot path: never blocks; a full queue
        drops it and counts). ``wake``: at once (a held span's, whose scores wait for it);
        else with the next batch."""
        if self._closed:
            return False
        return self.queue.put(task, record=False, wake=wake)

    def log_record(
        self,
        *,
        query: str | None,
        answer: str | None = None,
        contexts: Sequence[str | Context] = (),
        ground_truths: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        trace_id: str | None = None,
        span_id: str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
    ) -> RagRecord:
        """Record an interaction captured without a framework (validates its arguments).

        ``session_id``/``user_id``: the conversation and user it belongs to (default: those of
        the enclosing ``ts.run(...)`` scope, if any); a record with a session is a turn of it,
        dated at this call (so turns logged back to back keep their order).

        Raises ``TypeError``/``ValueError`` naming the bad argument: ``trace_id``/``span_id``
        must be 32/16 hex characters (normalised to lower case), ``contexts`` a sequence of
        str or :class:`Context` (with a str ``text``), ``metadata`` a mapping (deeper than 16
        levels or bigger than 2,000 values it is cut, and marked ``"tracescore.truncated"``).
        Bounded work on the caller's thread whatever the input: the first 1,000 contexts
        (:data:`MAX_LOG_CONTEXTS`, and :data:`MAX_LOG_CONTEXT_CHARS` characters in all) and
        ground truths are kept; the rest are dropped, counted in ``stats()["contexts_dropped"]``,
        logged, and noted in the record's metadata (``"tracescore.contexts_dropped"``).
        """
        record, dropped = _manual_record(query, answer, contexts, ground_truths, metadata,
                                         trace_id, span_id, session_id, user_id,
                                         current_scope())
        if dropped:
            self.drops.note(dropped, record.record_id)
        # a span id of the caller's may belong to a span that is still to end: hold it
        self.submit(self.prepare(record), hold_span=span_id is not None)
        return record

    # (the request path calls the bound methods of the privacy part, set on the instance)
    @_doc(Privacy.prepare)
    def prepare(self, record: RagRecord) -> RagRecord:
        return self.privacy.prepare(record)

    @_doc(Privacy.redact_text)
    def redact_text(self, text: str) -> str | None:
        return self.privacy.redact_text(text)

    @_doc(Privacy.redact_value)
    def redact_value(self, value: Any) -> Any:
        return self.privacy.redact_value(value)

    @_doc(Privacy.redact_id)
    def redact_id(self, user_id: str | None) -> str | None:
        return self.privacy.redact_id(user_id)

    @_doc(Privacy.redact_error)
    def redact_error(self, error: BaseException) -> str:
        return self.privacy.redact_error(error)

    @_doc(run_scope)
    def run(self, *, ground_truths: Sequence[str] = (), metadata: Mapping[str, Any] | None = None,
            session_id: str | None = None, user_id: str | None = None
            ) -> AbstractContextManager[RunScope]:
        return run_scope(ground_truths=ground_truths, metadata=metadata,
                         session_id=session_id, user_id=user_id)

