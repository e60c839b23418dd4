"""`Tracescore`: the object :func:`tracescore.init` returns; it wires the pipeline together.

capture (integrations) → :meth:`Tracescore.submit` (sample, hold, enqueue; hot path) →
:class:`~tracescore.queue.RecordQueue` (writer thread → SQLite) →
:class:`~tracescore.worker.ScoringWorker` (scores) →
:class:`~tracescore.processor.ScoreAttachingProcessor` (scores onto spans) → exporter.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from . import __version__ as _version
from ._internal.errors import handle_internal_errors
from .export import (
    CountingSpanExporter,
    ExportLoss,
    PipelineSnapshot,
    Telemetry,
    flush_within,
    open_jobs,
    plan_export,
)
from .metrics.base import Metric
from .processor import ScoreAttachingProcessor, adopt_processors, release_processors
from .queue import FeedbackUpdate, GroundTruthUpdate, RecordQueue
from .record import ANSWER, CONTEXTS, GROUND_TRUTHS, QUERY, Context, RagRecord
from .sampling import DEFAULT_RULES, Decision, Rule, Sampler
from .settings import Settings
from .store import PENDING, SKIPPED, NewJob, StoreAPI, is_postgres, open_store, redact_url
from .worker import ScoringWorker

log = logging.getLogger("tracescore")

DEFAULT_METRICS = ("rouge", "bleu", "token_f1", "exact_match", "rgb_accuracy", "rgb_rejection")
#: Span attribute values (contexts, answers) longer than this are cut, with a content hash.
DEFAULT_MAX_ATTRIBUTE_CHARS = 4000
TEXT_INPUTS = frozenset({QUERY, CONTEXTS, ANSWER, GROUND_TRUTHS})


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
        judge_canary: bool = True,
        judge_max_wait_s: float = 6 * 3600.0,
        embedder: Any = None,
    ) -> None:
        args = dict(locals())
        del args["self"]
        if args["db"] is None:
            args["db"] = os.environ.get("TRACESCORE_DB") or "tracescore.db"
        #: The validated arguments (frozen); everything below only wires stages together.
        self.settings = s = Settings(**args)
        self.metrics = list(s.metrics)
        self.db_path = s.db
        self.max_attribute_chars = s.max_attribute_chars
        self.capture_content = s.capture_content
        self.redact = s.redact
        self._metric_by_name = {m.name: m for m in self.metrics}
        self._metric_names = s.metric_names
        self._job_counts: dict[tuple[Any, ...], int] = {}

        # record → sample
        self.sampler = Sampler(s.sample_rate, s.sample_rates, s.force_rules)
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
        self.telemetry = Telemetry(
            resource=self.tracer_provider.resource, log_exporter=plan.log_exporter,
            metric_reader=plan.metric_reader, loss=self.export_loss,
            max_attribute_chars=s.max_attribute_chars,
        )
        #: The metric instruments; the judge reports its calls with ``export_metrics.judge_call``.
        self.export_metrics = self.telemetry.metrics
        self.records_seen = 0
        self.records_sampled = 0

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
            self.worker.judge_canary = s.judge_canary
            self.worker.judge_max_wait_s = s.judge_max_wait_s
        if self.attacher is not None:
            self.attacher.bind_tracer(self.tracer)
            self.attacher.on_delivered = self.worker.note_delivered
            if isinstance(plan.span_exporter, CountingSpanExporter):
                # tracescore's own exporter: a score is delivered once its span was exported
                plan.span_exporter.on_result = self.attacher.exported
                self.attacher.confirm_exports = True

        # queue: the hot path's bounded buffer and the writer behind it
        self.queue = RecordQueue(
            self.db_path, self._plan_jobs, self._apply_ground_truth,
            max_size=s.max_queue, on_written=self.worker.wake,
        )
        self.export_metrics.bind(self._snapshot)
        if s.score:
            self.worker.start()
        self._langchain_handler: Any = None
        self._llama_index: Any = None
        self._closed = False
        self._lock = threading.Lock()

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
                provider = TracerProvider(resource=Resource.create({}))
        if exporter is not None:
            processor = BatchSpanProcessor(exporter)
        if processor is None:
            return provider, None
        attacher = ScoreAttachingProcessor(processor, hold_seconds=hold_seconds)
        provider.add_span_processor(attacher)
        return provider, attacher

    # -- framework entry points ----------------------------------------------------------------
    def langchain_handler(self) -> Any:
        """A LangChain callback handler bound to this pipeline (one per Tracescore)."""
        if self._langchain_handler is None:
            from .integrations.langchain import TracescoreCallbackHandler

            self._langchain_handler = TracescoreCallbackHandler(self)
        return self._langchain_handler

    def instrument_langchain(self) -> None:
        """Trace every LangChain run in the process (through langchain_core's configure hook)."""
        from .integrations.langchain import instrument

        instrument(self.langchain_handler())

    def uninstrument_langchain(self) -> None:
        from .integrations.langchain import uninstrument

        uninstrument(self._langchain_handler)

    def instrument_llama_index(self) -> None:
        """Trace every LlamaIndex query, retrieval and LLM call (root instrumentation dispatcher)."""
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
    def submit(self, record: RagRecord, *, hold_span: bool = True) -> Decision | None:
        """Sample, register the span hold, enqueue. Never blocks or raises (app thread).

        Call it *before* the record's root span ends, so the span can be held for its scores.
        ``hold_span=False``: no span with the record's span id will end (its scores go out on
        a carrier span as soon as they are in).
        """
        with handle_internal_errors("submit"):
            if self._closed:
                return None
            decision = self.sampler.decide(record, self._metric_names)
            # Plain int counters (read by the metric callbacks): no lock, no SDK call here.
            self.records_seen += 1
            if decision.sampled:
                self.records_sampled += 1
            held = 0
            # capture only: the scores come from remote workers, on carrier spans
            if self.attacher is not None and decision.sampled and hold_span and self.scoring:
                n = self._jobs_to_run(record, decision.metrics)
                if n:
                    held = int(record.span_id, 16)
                    self.attacher.expect(int(record.trace_id, 16), held, n)
            if not self.queue.put((record, decision)) and held and self.attacher is not None:
                self.attacher.cancel(held)  # dropped: no scores will come, do not hold the span
            return decision
        return None

    def _jobs_to_run(self, record: RagRecord, metrics: tuple[str, ...]) -> int:
        """How many of ``metrics`` will score ``record`` (cached by which inputs it has)."""
        key = (metrics, record.content_captured, bool(record.query), bool(record.contexts),
               bool(record.answer), bool(record.ground_truths))
        n = self._job_counts.get(key)
        if n is None:
            n = sum(1 for j in self._plan_jobs(record, Decision(0.0, metrics)) if
                    j.status == PENDING)
            if len(self._job_counts) < 4096:
                self._job_counts[key] = n
        return n

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
    ) -> RagRecord:
        """Record an interaction captured without a framework (validates its arguments)."""
        for name, value in (("query", query), ("answer", answer)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
        if isinstance(contexts, str) or isinstance(ground_truths, str):
            raise TypeError("contexts and ground_truths must be sequences, not a single str")
        ctxs = []
        for i, c in enumerate(contexts):
            if isinstance(c, str):
                ctxs.append(Context(text=c))
            elif isinstance(c, Context):
                ctxs.append(c)
            else:
                raise TypeError(f"contexts[{i}] must be a str or Context, got {type(c).__name__}")
        for i, g in enumerate(ground_truths):
            if not isinstance(g, str):
                raise TypeError(f"ground_truths[{i}] must be a str, got {type(g).__name__}")
        from .integrations._ids import new_span_id, new_trace_id

        record = RagRecord(
            trace_id=trace_id or new_trace_id(), span_id=span_id or new_span_id(),
            query=query, answer=answer, contexts=tuple(ctxs), ground_truths=tuple(ground_truths),
            metadata=dict(metadata or {}), source="manual",
        )
        # a span id of the caller's may belong to a span that is still to end: hold it
        self.submit(self.prepare(record), hold_span=span_id is not None)
        return record

    def prepare(self, record: RagRecord) -> RagRecord:
        """Apply content capture/redaction to a record before anything stores or exports it."""
        if not self.capture_content:
            return record.replace(query=None, answer=None, contexts=(), ground_truths=(),
                                  prompt=None, content_captured=False)
        if self.redact is None:
            return record
        r = self.redact
        return record.replace(
            query=r(record.query) if record.query else record.query,
            answer=r(record.answer) if record.answer else record.answer,
            contexts=tuple(c.__class__(r(c.text), c.id, c.score, c.metadata, c.source)
                           for c in record.contexts),
            ground_truths=tuple(r(g) for g in record.ground_truths),
            prompt=r(record.prompt) if record.prompt else record.prompt,
        )

    def redact_text(self, text: str) -> str | None:
        """What may go on a span for ``text`` (None when content capture is off)."""
        if not self.capture_content:
            return None
        return self.redact(text) if self.redact is not None else text

    # -- feedback ------------------------------------------------------------------------------
    def add_ground_truth(self, trace_id: str, ground_truths: Sequence[str]) -> None:
        """Attach reference answers to a trace's records; schedules the reference metrics.

        Non-blocking: the update is applied by the writer, after records already queued.
        """
        if not isinstance(trace_id, str) or len(trace_id) != 32:
            raise ValueError(f"trace_id must be 32 hex characters, got {trace_id!r}")
        int(trace_id, 16)
        if isinstance(ground_truths, str) or not all(isinstance(g, str) for g in ground_truths):
            raise TypeError("ground_truths must be a sequence of str")
        if not self.capture_content:
            return
        gts = tuple(self.redact(g) if self.redact else g for g in ground_truths)
        self.queue.put(GroundTruthUpdate(trace_id.lower(), gts), record=False)

    def add_feedback(
        self,
        trace_id: str,
        value: float | bool | str | None = None,
        *,
        label: str | None = None,
        name: str = "user",
        comment: str | None = None,
    ) -> None:
        """Record a user's verdict on a trace (thumbs up/down, a score in [0, 1], a label).

        ``value``: ``True``/``"up"``/``"good"`` → 1.0, ``False``/``"down"``/``"bad"`` → 0.0, or
        a number in [0, 1]. Negative feedback (value < 0.5) forces sampling: every configured
        metric scores that trace's records even if the sampler skipped them. Stored in the
        ``feedback`` table; ``tracescore calibrate`` compares judge metrics with it.
        Non-blocking (applied by the writer).
        """
        import time

        if not isinstance(trace_id, str) or len(trace_id) != 32:
            raise ValueError(f"trace_id must be 32 hex characters, got {trace_id!r}")
        int(trace_id, 16)
        v: float | None
        if value is None:
            v = None
        elif isinstance(value, bool):
            v = 1.0 if value else 0.0
        elif isinstance(value, str):
            words = {"up": 1.0, "good": 1.0, "yes": 1.0, "thumbs_up": 1.0, "positive": 1.0,
                     "down": 0.0, "bad": 0.0, "no": 0.0, "thumbs_down": 0.0, "negative": 0.0}
            if value.lower() not in words:
                raise ValueError(f"feedback value {value!r}: use a number in [0, 1], a bool, "
                                 f"or one of {sorted(words)}")
            v = words[value.lower()]
        elif isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0:
            v = float(value)
        else:
            raise ValueError(f"feedback value must be in [0, 1], got {value!r}")
        if v is None and label is None:
            raise ValueError("feedback needs a value or a label")
        if not isinstance(name, str) or not name:
            raise ValueError("feedback name must be a non-empty str")
        self.queue.put(FeedbackUpdate(trace_id.lower(), name, v, label, comment, time.time()),
                       record=False)

    # -- pipeline callbacks (writer thread) ---------------------------------------------------
    def _plan_jobs(self, record: RagRecord, decision: Decision) -> list[NewJob]:
        jobs = []
        for name in decision.metrics:
            metric = self._metric_by_name[name]
            if not record.content_captured and metric.requires & TEXT_INPUTS:
                jobs.append(NewJob(record.record_id, name, metric.version, SKIPPED,
                                   "content capture is off"))
                continue
            missing = record.missing(metric.requires)
            if missing:
                jobs.append(NewJob(record.record_id, name, metric.version, SKIPPED,
                                   f"record has no {', '.join(missing)}"))
            else:
                jobs.append(NewJob(record.record_id, name, metric.version))
        return jobs

    def _apply_ground_truth(self, store: StoreAPI, upd: GroundTruthUpdate | FeedbackUpdate) -> None:
        if isinstance(upd, FeedbackUpdate):
            store.add_feedback(upd.trace_id, upd.name, upd.value, upd.label, upd.comment,
                               upd.created_at)
            if upd.value is not None and upd.value < 0.5:
                # Negative feedback forces sampling: score every metric for that trace.
                forced = Decision(0.0, self._metric_names, "negative feedback")
                new = [j for rec in store.records_for_trace(upd.trace_id)
                       for j in self._plan_jobs(rec, forced)]
                if new:
                    store.insert_jobs_if_missing(new)
            return
        records = store.set_ground_truths(upd.trace_id, upd.ground_truths)
        jobs: list[NewJob] = []
        for rec in records:
            decision = self.sampler.decide(rec, self._metric_names)
            jobs.extend(
                j for j in self._plan_jobs(rec, decision)
                if GROUND_TRUTHS in (self._metric_by_name[j.metric].requires
                                     | self._metric_by_name[j.metric].uses)
            )
        if jobs:
            store.upsert_jobs(jobs)

    # -- lifecycle ------------------------------------------------------------------------------
    def flush(self, timeout: float = 30.0) -> bool:
        """Block until everything submitted so far is stored, scored and exported.

        Returns False if ``timeout`` passed first. Not for the request path.
        """
        import time

        deadline = time.monotonic() + timeout
        if not self.queue.flush(timeout):
            return False
        # Capture only (score=False): stored is this process's part; workers elsewhere score.
        while self.scoring:
            self.worker.wake()
            store = open_store(self.db_path)
            try:
                pause = 0.005
                while (self._metric_names and store.has_open_jobs(self._metric_names)) \
                        or not self.worker.idle:
                    if time.monotonic() > deadline:
                        return False
                    self.worker.wake()
                    time.sleep(pause)
                    pause = min(pause * 2, 0.1)  # do not keep a core busy polling a backlog
            finally:
                store.close()
            break
        ok = True
        # On helper threads: the SDK's batch processors ignore the flush timeout, and with the
        # backend down the exporters retry for their own timeout per batch.
        if self.attacher is not None:
            ok = flush_within(self.attacher.force_flush, deadline - time.monotonic(), "spans")
            # exported spans confirmed their scores' delivery: have the worker write that down
            ok = self.worker.sync_delivered(deadline - time.monotonic()) and ok
        if self.telemetry.enabled:
            ok = flush_within(self.telemetry.force_flush, deadline - time.monotonic(),
                              "logs-metrics") and ok
        return ok

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Flush, stop the background threads, and shut down the span pipeline."""
        with self._lock:
            if self._closed:
                return True
            ok = self.flush(timeout)
            self._closed = True
        if self._langchain_handler is not None:
            self.uninstrument_langchain()
        self.uninstrument_llama_index()
        self.queue.shutdown(timeout)
        self.worker.stop(timeout)
        if self.attacher is not None:
            if self._adopted:  # the app's processors: give them back, never shut them down
                release_processors(self.attacher)
                self.attacher.close(shutdown_inner=False)
            else:
                self.attacher.shutdown()
        self.telemetry.shutdown(int(timeout * 1000))
        close = getattr(self.embedder, "close", None)
        if close is not None:
            close()
        return ok

    def stats(self) -> dict[str, Any]:
        """Counters of this process (queue depth, drops, scores) plus the database's."""
        store = open_store(self.db_path)
        try:
            return {
                "queue_depth": self.queue.depth,
                "dropped": self.queue.dropped,
                "dropped_other": self.queue.dropped_other,
                "written": self.queue.written,
                "scored_jobs": self.worker.scored,
                "error_scores": self.worker.errors,
                "open_jobs": store.open_job_count(self._metric_names),
                "records_seen": self.records_seen,
                "records_sampled": self.records_sampled,
                "export_failures": sum(self.export_loss.failures.values()),
                "export_lost": self.export_loss.lost,
                # scores whose span failed to export (they stay undelivered), and scores sent
                # again on a carrier span by the redelivery sweep
                "scores_export_failed": (self.attacher.export_failed_scores
                                         if self.attacher is not None else 0),
                "scores_redelivered": self.worker.redelivered,
                "spans_held": self.attacher.held if self.attacher is not None else 0,
                "deferred_jobs": self.worker.deferred,
                "judge": None if self.judge_session is None else {
                    "model": self.judge_session.model,
                    "calls": self.judge_session.judge.calls,
                    "failures": self.judge_session.judge.failures,
                    "breaker_state": self.judge_session.judge.breaker.state,
                    "breaker_opened": self.judge_session.judge.breaker.opened,
                    "health": dict(self.judge_session.health),
                },
                "db_counters": store.counters(),
            }
        finally:
            store.close()

    def _snapshot(self) -> PipelineSnapshot:
        """For the observable metrics (metric reader thread): counters plus one SQL query."""
        n_open, lag = open_jobs(self.db_path, self._metric_names)
        return PipelineSnapshot(
            records_seen=self.records_seen, records_sampled=self.records_sampled,
            records_dropped=self.queue.dropped, queue_depth=self.queue.depth,
            open_jobs=n_open, scoring_lag_s=lag,
        )

    def __enter__(self) -> Tracescore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


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
