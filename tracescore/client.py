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
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from . import __version__ as _version
from ._client.feedback import Feedback
from ._client.lifecycle import Lifecycle
from ._client.manual import (
    MAX_LOG_CONTEXT_CHARS,
    MAX_LOG_CONTEXTS,
    _error_type,
    _manual_record,
    _redact_tree,
)
from ._internal.errors import handle_internal_errors
from ._internal.losses import Losses
from ._internal.validate import (
    hot_reason,
)
from .export import CountingSpanExporter, ExportLoss
from .lazy_record import LazyRecord
from .metrics.base import Metric
from .processor import ScoreAttachingProcessor, adopt_processors
from .queue import FeedbackUpdate, GroundTruthUpdate, RecordQueue
from .record import AGENT, ANSWER, CONTEXTS, GROUND_TRUTHS, QUERY, Context, RagRecord
from .runs import RunIds, RunScope, current_scope, enter_scope, exit_scope
from .sampling import DEFAULT_RULES, Decision, Rule, Sampler
from .settings import Settings
from .store import PENDING, SKIPPED, NewJob, StoreAPI, is_postgres, open_store, redact_url
from .store import judge_budget as JB
from .store.compact import skip_reason
from .store.retention import PG_NO_MAX_BYTES, Retention, RetentionThread
from .store.segments import SegmentSpec, release_environment
from .telemetry import Telemetry, plan_export
from .worker import ScoringWorker
from .write_port import PortFunctions

log = logging.getLogger("tracescore")

DEFAULT_METRICS = ("rouge", "bleu", "token_f1", "exact_match", "rgb_accuracy", "rgb_rejection")
#: Span attribute values (contexts, answers) longer than this are cut, with a content hash.
DEFAULT_MAX_ATTRIBUTE_CHARS = 4000
TEXT_INPUTS = frozenset({QUERY, CONTEXTS, ANSWER, GROUND_TRUTHS})


class Tracescore(Feedback, Lifecycle):
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
        self._metric_by_name = {m.name: m for m in self.metrics}
        self._metric_names = s.metric_names
        #: job plans by metrics and which inputs a record has (see _plan)
        self._plans: dict[tuple[Any, ...], tuple[tuple[str, str, str, str | None], ...]] = {}

        # record → sample
        self.sampler = Sampler(s.sample_rate, s.sample_rates, s.force_rules)
        #: a trace whose fraction is at or above it is sampled only when a rule forces it
        self._top_rate = self.sampler.top_rate(self._metric_names)
        # store: create the schema now, so a bad file fails at init
        self.scoring = s.score
        try:
            store = open_store(self.db_path)
            try:
                store.register_metrics(self.metrics)
            finally:
                store.close()
        except Exception as exc:
            if is_postgres(self.db_path) and _unreachable(exc):
                # A fleet's database may be down while a replica starts: the app starts anyway
                # (records wait in the bounded buffer; the writer creates the schema later).
                log.warning("tracescore cannot reach %s (%s); capturing anyway, records wait "
                            "in the buffer (app fine, telemetry degraded)",
                            redact_url(self.db_path), exc)
            elif isinstance(exc, (ImportError, RuntimeError)):
                raise
            else:
                raise ValueError(f"cannot open the tracescore database "
                                 f"{redact_url(self.db_path)!r}: {exc}") from exc

        #: accepted and then lost, by reason (stats()["lost"])
        self.losses = Losses()

        # attach → export
        self.export_loss = ExportLoss()
        plan = plan_export(
            s.exporter, span_exporter=s.span_exporter, span_processor=s.span_processor,
            log_exporter=s.log_exporter, metric_reader=s.metric_reader, loss=self.export_loss,
        )
        self._adopted = s.exporter == "app"
        self.tracer_provider, self.attacher = self._setup_tracing(
            s.tracer_provider, plan.span_exporter, s.span_processor, s.hold_seconds,
            adopt=self._adopted,
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
        self.contexts_dropped = 0
        self._cut_lock = threading.Lock()
        self._cut_logged_at = -1e9

        # score: the worker, with the models its metrics need
        self.worker = ScoringWorker(
            self.db_path, self.metrics, attacher=self.attacher, concurrency=s.concurrency,
            lease_seconds=s.lease_seconds, metric_timeout_s=s.metric_timeout_s,
            on_scores=self.telemetry.scores_stored if self.telemetry.enabled else None,
        )
        self.embedder = None
        if s.embedder is not None and s.score:
            from .embeddings import resolve_embedder

            self.embedder = resolve_embedder(s.embedder, db_path=self.db_path)
            for m in self.metrics:
                bind = getattr(m, "bind_embedder", None)
                if bind is not None:
                    bind(self.embedder)
        self.judge_session = None
        if s.judge is not None and s.score:
            self.judge_session = self._setup_judge(s)
            self.worker.judge_session = self.judge_session
            self.worker.judge_canary = bool(s.judge_canary)
            if s.judge_canary_every_s is not None:
                self.judge_session.canary_every_s = s.judge_canary_every_s
            self.worker.judge_max_wait_s = s.judge_max_wait_s
        if s.judge_budgets and s.score:
            from .budget.selector import AdaptiveJudging

            self.worker.judging = AdaptiveJudging(s.judge_budgets)
            if s.monitors is not None:
                budgeted = {n for m in self.metrics if m.name in s.judge_budgets
                            for n in m.names()}
                for mon in s.monitors.monitors:
                    if mon.score in budgeted and (mon.statistic not in ("mean", "rate")
                                                  or any(d in mon.where for d in (
                                                      "judge_model", "metric_version"))):
                        log.warning(
                            "tracescore monitor %r watches %s of %s, judged within a judge "
                            "budget: only its mean (or rate) has an active estimate, so the "
                            "monitor will say NO_DATA (docs/judge_budget.md)", mon.name,
                            mon.statistic, mon.score)
        self.worker.redact = s.redact
        if self.attacher is not None:
            self.attacher.bind_tracer(self.tracer)
            self.attacher.on_delivered = self.worker.note_delivered
            if isinstance(plan.span_exporter, CountingSpanExporter):
                # tracescore's own exporter: a score is delivered once its span was exported
                plan.span_exporter.on_result = self.attacher.exported
                self.attacher.confirm_exports = True

        # queue: the hot path's bounded buffer and the writer behind it
        # (the writer's one port: jobs, updates, the scorer's wake, and — when this process
        # scores — cheap local metrics scored by the writer as it stores a record)
        port = PortFunctions(self._plan_jobs, self._apply_ground_truth, self.worker.wake,
                             self.worker.on_write if s.score else None)
        self.queue = RecordQueue(
            self.db_path, port, max_size=s.max_queue, losses=self.losses,
            keep_full_text=s.keep_full_text is not False, segments=self.segment_spec,
        )
        # retention: prune old records in small background batches (own thread, own store).
        # On PostgreSQL (a fleet) only where scoring runs — the `tracescore worker` processes
        # (or a scoring app); capture-only replicas (score=False) leave it to them. Several
        # pruners at once take disjoint batches (row locks, see store/retention.py).
        self.retention: RetentionThread | None = None
        pg = is_postgres(self.db_path)
        if (s.retention is not None or s.compact_after_s is not None) \
                and (self.scoring or not pg):
            if pg and s.retention is not None and s.retention.max_bytes is not None:
                log.warning("tracescore: %s", PG_NO_MAX_BYTES)
            self.retention = RetentionThread(self.db_path, s.retention, s.compact_after_s)
            self.retention.start()
        # monitors: evaluated in the background where scoring runs (on PostgreSQL, the
        # workers of a fleet; any process on SQLite); one evaluator per database (a lease).
        self.monitors: Any = None
        if s.monitors is not None and (self.scoring or not pg):
            from .monitor.runner import MonitorRunner

            self.monitors = MonitorRunner(
                self.db_path, s.monitors, otel_logger=self.telemetry.logger,
                meter=self.telemetry.meter)
            self.monitors.start()
        # sessions: closed after `session_idle` without a turn, where scoring runs (on
        # PostgreSQL the workers of a fleet; claims keep closers from taking the same session)
        self.sessions: Any = None
        if s.session_idle is not None and (self.scoring or not pg):
            from .sessions.closer import SessionCloser

            self.sessions = SessionCloser(
                self.db_path, float(s.session_idle), embedder=self.embedder,
                judge_metrics=[(m.name, m.version) for m in s.session_metrics]
                if s.score else (), on_closed=self.worker.wake if s.score else None)
            self.sessions.start()
        self.export_metrics.bind(self._snapshot)
        if s.score:
            self.worker.start()
        self._langchain_handler: Any = None
        self._llama_index: Any = None
        #: capture="otel": the span processor on the app's tracer provider
        self.otel_capture: Any = None
        if s.capture == "otel":
            from .intake.otel import attach

            self.otel_capture = attach(self, s.tracer_provider)
        #: app run id (``config={"run_id": ...}``) → trace id, for feedback by run id
        self.run_ids = RunIds()
        self._closed = False
        self._lock = threading.Lock()
        #: flush()'s connection per flushing thread (see Lifecycle._open_jobs)
        self._flush_readers = threading.local()

    def _setup_judge(self, s: Settings) -> Any:
        from .judge import ResilientJudge, resolve_judge
        from .judge.resilience import CircuitBreaker, RetryPolicy
        from .judge.session import JudgeSession, Price
        from .metrics.judged import JudgeMetric

        backend = resolve_judge(s.judge)
        metrics = self.export_metrics

        def on_call(reply: Any, exc: BaseException | None) -> None:
            metrics.judge_call(reply.input_tokens if reply else 0,
                               reply.output_tokens if reply else 0, error=exc is not None,
                               model=backend.model)

        (base_s, max_s), (threshold, cooldown_s) = s.judge_backoff_s, s.judge_breaker
        resilient = ResilientJudge(
            backend, on_call=on_call,
            policy=RetryPolicy(max_retries=s.judge_max_retries, base_delay_s=base_s,
                               max_delay_s=max_s, timeout_s=s.judge_timeout_s),
            breaker=CircuitBreaker(failure_threshold=threshold, cooldown_s=cooldown_s),
        )
        resilient.max_wait_s = s.judge_max_wait_s  # named in the outage WARNING
        metrics.observe_breaker(lambda: resilient.breaker.state)
        session = JudgeSession(
            resilient, self.db_path, price=Price(*s.judge_price) if s.judge_price else None,
            calls_per_minute=s.judge_calls_per_minute, daily_budget_usd=s.judge_daily_budget_usd,
            max_concurrency=self.worker.concurrency,
        )
        for m in self.metrics:
            if isinstance(m, JudgeMetric):
                m.bind(session)
        return session

    # -- tracing setup ------------------------------------------------------------------------
    def _setup_tracing(
        self,
        provider: TracerProvider | None,
        exporter: SpanExporter | None,
        processor: SpanProcessor | None,
        hold_seconds: float,
        *,
        adopt: bool = False,
    ) -> tuple[TracerProvider, ScoreAttachingProcessor | None]:
        if exporter is not None and processor is not None:
            raise ValueError("pass span_exporter or span_processor, not both")
        if adopt:  # exporter="app": wrap the app's provider's own processors
            app = provider if provider is not None else trace_api.get_tracer_provider()
            return app, adopt_processors(app, hold_seconds=hold_seconds)  # type: ignore[return-value]
        if provider is None:
            current = trace_api.get_tracer_provider()
            if isinstance(current, TracerProvider) and (exporter or processor):
                provider = current  # the app's own provider: add to it, never replace it
            else:
                provider = _OwnProvider(resource=Resource.create({}))
        if exporter is not None:
            processor = BatchSpanProcessor(exporter)
        if processor is None:
            return provider, None
        attacher = ScoreAttachingProcessor(processor, hold_seconds=hold_seconds)
        provider.add_span_processor(attacher)
        return provider, attacher

    @property
    def spans_wanted(self) -> bool:
        """False while spans go nowhere: tracescore's own tracer provider (no ``exporter``,
        ``span_exporter`` or ``span_processor``, no provider of the app's) with no span
        processor added. The adapters then make only the root span (its ids are the record's)
        and skip their child spans, which no one would receive (hot path: an attribute read)."""
        p = self.tracer_provider
        return type(p) is not _OwnProvider or p.processors > 0

    # -- framework entry points ----------------------------------------------------------------
    def langchain_handler(self) -> Any:
        """A LangChain callback handler bound to this pipeline (one per Tracescore)."""
        if self._langchain_handler is None:
            from .integrations.langchain import TracescoreCallbackHandler

            self._langchain_handler = TracescoreCallbackHandler(self)
        return self._langchain_handler

    def instrument_langchain(self) -> None:
        """Trace every LangChain run in the process (through langchain_core's configure hook).

        Without LangChain: an ImportError that says ``pip install 'tracescore[langchain]'``."""
        from .integrations.langchain import instrument

        instrument(self.langchain_handler())

    def uninstrument_langchain(self) -> None:
        from .integrations.langchain import uninstrument

        uninstrument(self._langchain_handler)

    def instrument_llama_index(self) -> None:
        """Trace every LlamaIndex query, retrieval and LLM call (root instrumentation dispatcher).

        Without LlamaIndex: an ImportError that says ``pip install 'tracescore[llama-index]'``."""
        from .integrations.llama_index import instrument

        self._llama_index = instrument(self)

    def uninstrument_llama_index(self) -> None:
        if self._llama_index is not None:
            from .integrations.llama_index import uninstrument

            uninstrument(self._llama_index)
            self._llama_index = None

    def instrument(self) -> list[str]:
        """Instrument every supported framework that is installed; returns their names."""
        done = []
        if _installed("langchain_core"):
            self.instrument_langchain()
            done.append("langchain")
        if _installed("llama_index.core"):
            self.instrument_llama_index()
            done.append("llama_index")
        return done

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
        if self.attacher is None or not self.scoring or not decision.metrics:
            return
        span_id = int(partial.span_id, 16)
        if record is None:
            self.attacher.cancel(span_id)
            return
        diff = (self._jobs_to_run(record, decision.metrics)
                - self._jobs_to_run(partial, decision.metrics))
        if diff:
            self.attacher.expect_more(span_id, diff)

    def _jobs_to_run(self, record: RagRecord, metrics: tuple[str, ...]) -> int:
        """How many of ``metrics`` will score ``record`` (hot path: a cached plan)."""
        return sum(1 for p in self._plan(record, metrics) if p[2] == PENDING)

    def defer(self, task: Callable[[], None]) -> bool:
        """Run ``task`` on the background writer thread (hot path: never blocks; a full queue
        drops it and counts)."""
        if self._closed:
            return False
        return self.queue.put(task, record=False)

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
                                         trace_id, span_id)
        for name, value in (("session_id", session_id), ("user_id", user_id)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
        scope = current_scope()
        if scope is not None:
            session_id = session_id or scope.session_id
            user_id = user_id or scope.user_id
        if session_id or user_id:
            import time
            from dataclasses import replace

            # a turn is dated when it was logged (not when the writer stored it): turns
            # logged back to back keep their order in the session
            record = replace(record, session_id=session_id or None, user_id=user_id or None,
                             end_time_ns=record.end_time_ns or (time.time_ns()
                                                                if session_id else None))
        if dropped:
            self._note_cut(dropped, record.record_id)
        # a span id of the caller's may belong to a span that is still to end: hold it
        self.submit(self.prepare(record), hold_span=span_id is not None)
        return record

    def _note_cut(self, dropped: int, record_id: str) -> None:
        import time

        with self._cut_lock:
            self.contexts_dropped += dropped
            total = self.contexts_dropped
            now = time.monotonic()
            due = now - self._cut_logged_at >= 60.0
            if due:
                self._cut_logged_at = now
        if due:  # rate-limited: a loop of huge records logs once a minute
            log.warning("tracescore log_record: %d contexts/ground truths beyond the bounds "
                        "(%d items, %d characters) were dropped from record %s (%d so far, "
                        "stats()['contexts_dropped'])", dropped, MAX_LOG_CONTEXTS,
                        MAX_LOG_CONTEXT_CHARS, record_id, total)

    def prepare(self, record: RagRecord) -> RagRecord:
        """Apply content capture/redaction to a record before anything stores or exports it.

        ``capture_content=False`` keeps no free text: query, answer, contexts, ground truths
        and prompt are dropped; the error keeps only the exception type; metadata keeps its
        keys, numbers and booleans, each string becomes ``"<redacted: N chars>"``; the user id
        becomes a hash (``sha256:`` + 16 hex). Kept as they are: trace/span ids, session id,
        tags, model, timings and token counts. With ``redact``, the function is applied to
        every one of those strings instead (metadata values, the error, the user id and each
        context's metadata included).
        """
        if not isinstance(record, RagRecord):
            return record  # submit counts it
        if not self.capture_content:
            return record.replace(query=None, answer=None, contexts=(), ground_truths=(),
                                  prompt=None, retrieval_queries=(), candidates=(),
                                  content_captured=False, agent=self._private_agent(record),
                                  error=_error_type(record.error),
                                  metadata=self.redact_value(record.metadata),
                                  user_id=self.redact_id(record.user_id))
        if self.redact is None:
            return record
        r = self.redact
        return record.replace(
            query=r(record.query) if record.query else record.query,
            answer=r(record.answer) if record.answer else record.answer,
            contexts=tuple(c.__class__(r(c.text) if isinstance(c.text, str) else c.text,
                                       c.id, c.score, self.redact_value(c.metadata), c.source)
                           for c in record.contexts),
            ground_truths=tuple(r(g) for g in record.ground_truths),
            prompt=r(record.prompt) if record.prompt else record.prompt,
            retrieval_queries=tuple(r(q) for q in record.retrieval_queries),
            candidates=tuple(c.__class__(r(c.text) if isinstance(c.text, str) else c.text,
                                         c.id, c.score, c.source, c.kept, c.dropped_by, c.via)
                             for c in record.candidates),
            error=r(record.error) if isinstance(record.error, str) else record.error,
            metadata=self.redact_value(record.metadata),
            user_id=self.redact_id(record.user_id),
            agent=self._private_agent(record),
        )

    def _private_agent(self, record: RagRecord) -> Any:
        """The record's tool calls as they may be stored (docs/agents.md, "Privacy"): tool
        names, steps, outcomes and the offered tools' declarations are the app's code, kept;
        arguments are treated like metadata (each string redacted, or with capture off
        replaced by its length, so their shape can still be checked); results and error
        texts are redacted (capture off: dropped; a failed call keeps ``ok=False``)."""
        agent = record.agent
        if agent is None:
            return None
        import dataclasses

        off = not self.capture_content
        r = self.redact

        def text(t: str | None) -> str | None:
            if t is None:
                return None
            if off:
                return None
            return r(t) if r is not None else t

        calls = tuple(dataclasses.replace(
            c, arguments=self.redact_value(c.arguments), result=text(c.result),
            error=("error" if off and not c.ok else text(c.error)))
            for c in agent.calls)
        return dataclasses.replace(agent, calls=calls)

    def redact_text(self, text: str) -> str | None:
        """What may go on a span for ``text`` (None when content capture is off)."""
        if not self.capture_content:
            return None
        return self.redact(text) if self.redact is not None else text

    def redact_value(self, value: Any) -> Any:
        """Metadata as it may be stored or exported: every string redacted (capture off: each
        string replaced by its length). Containers are walked to a bounded depth."""
        if self.capture_content and self.redact is None:
            return value
        return _redact_tree(value, self.redact if self.capture_content else None, 0)

    def redact_id(self, user_id: str | None) -> str | None:
        """A user id as it may be stored or exported (capture off: a hash of it)."""
        if not isinstance(user_id, str):
            return user_id
        if not self.capture_content:
            import hashlib

            return "sha256:" + hashlib.sha256(user_id.encode("utf-8", "replace")).hexdigest()[:16]
        return self.redact(user_id) if self.redact is not None else user_id

    def redact_error(self, error: BaseException) -> str:
        """An exception as it may go on a span status or in the database."""
        text = f"{type(error).__name__}: {error}"
        if not self.capture_content:
            return type(error).__name__
        from ._internal.secrets import scrub

        text = scrub(text)
        return self.redact(text) if self.redact is not None else text

    @contextmanager
    def run(
        self,
        *,
        ground_truths: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
    ) -> Iterator[RunScope]:
        """Scope for the app's next run(s): what they carry, and their trace ids.

        ``with ts.run(ground_truths=["ref"]) as run: chain.invoke(q)`` — the record of every
        run captured in the block (LangChain, LangGraph, LlamaIndex) gets these ground truths,
        metadata, session and user; ``run.trace_id`` is the trace id of the run (the latest
        one, if several) for a later :meth:`add_ground_truth` or :meth:`add_feedback`. A
        ``ContextVar``: concurrent requests each see their own scope. Never blocks.
        """
        if isinstance(ground_truths, str) or not all(isinstance(g, str) for g in ground_truths):
            raise TypeError("ground_truths must be a sequence of str")
        for name, value in (("session_id", session_id), ("user_id", user_id)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
        scope = RunScope(tuple(ground_truths), metadata or {}, session_id, user_id)
        token = enter_scope(scope)
        try:
            yield scope
        finally:
            exit_scope(token)

    # -- pipeline callbacks (writer thread) ---------------------------------------------------
    def _plan_jobs(self, record: RagRecord, decision: Decision) -> list[NewJob]:
        rid = record.record_id
        return [NewJob(rid, *p) for p in self._plan(record, decision.metrics)]

    def _plan(self, record: RagRecord, metrics: tuple[str, ...]
              ) -> tuple[tuple[str, str, str, str | None], ...]:
        """``(metric, version, status, reason)`` of each of ``metrics`` for ``record``: a
        function of which inputs the record has (and whether it is compact, captured, cut
        off), so cached by that (any thread; the app's for the hold count, the writer's)."""
        key = (metrics, record.compact, record.content_captured, record.complete,
               bool(record.query), len(record.contexts) > 0,
               record.answer is not None and record.answer != "",
               len(record.ground_truths) > 0, record.agent is not None and record.has(AGENT))
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        out = []
        for name in metrics:
            metric = self._metric_by_name[name]
            if record.compact and metric.requires & TEXT_INPUTS:
                # forced later (negative feedback, a late reference) but stored text-less
                out.append((name, metric.version, SKIPPED,
                            skip_reason(self.settings.sample_rate,
                                        self.settings.compact_after_s)))
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
        if len(self._plans) < 4096:
            self._plans[key] = plan
        return plan

    def _apply_ground_truth(self, store: StoreAPI, upd: GroundTruthUpdate | FeedbackUpdate) -> None:
        from .labels import LabelUpdate

        if isinstance(upd, LabelUpdate):  # a human label (add_label)
            upd.apply(store)
            return
        if isinstance(upd, FeedbackUpdate):
            store.add_feedback(upd.trace_id, upd.name, upd.value, upd.label, upd.comment,
                               upd.created_at)
            if upd.value is not None and upd.value < 0.5:
                # Negative feedback forces sampling: score every metric for that trace.
                forced = Decision(0.0, self._metric_names, "negative feedback")
                for rec in store.records_for_trace(upd.trace_id):
                    plan = self._plan_jobs(rec, forced)
                    self._add_jobs(rec, plan, store.insert_jobs_if_missing)
                    # a judge budget's "not judged" is undone: the job opens again and the
                    # worker judges it with pi = 1 (store/judge_budget.py, decide)
                    again = JB.not_judged_metrics(store, rec.record_id)
                    if again:
                        self._add_jobs(rec, [j for j in plan if j.metric in again],
                                       store.upsert_jobs)
            return
        for rec in store.set_ground_truths(upd.trace_id, upd.ground_truths):
            decision = self.sampler.decide(rec, self._metric_names)
            self._add_jobs(rec, [
                j for j in self._plan_jobs(rec, decision)
                if GROUND_TRUTHS in (self._metric_by_name[j.metric].requires
                                     | self._metric_by_name[j.metric].uses)
            ], store.upsert_jobs)

    def _add_jobs(self, rec: RagRecord, jobs: list[NewJob],
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

class _OwnProvider(TracerProvider):
    """The tracer provider tracescore makes when the app gives it none to export to: it
    counts the span processors added to it (:attr:`Tracescore.spans_wanted`)."""

    processors = 0

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        super().add_span_processor(span_processor)
        self.processors += 1


def _unreachable(exc: BaseException) -> bool:
    """A connection failure (server down, network), as opposed to a bad URL or permissions."""
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, psycopg.OperationalError) and "password" not in str(exc) \
        and "does not exist" not in str(exc)


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False

