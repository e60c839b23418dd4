"""How :class:`tracescore.client.Tracescore` builds its stages (plain functions, explicit inputs):
the database check at ``init``, the tracer provider and the score attacher, the judge session,
and the background services (retention, monitors, session closer)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from ..export import ExportLoss
from ..processor import ScoreAttachingProcessor, adopt_processors
from ..store import is_postgres, open_store, redact_url
from ..store.retention import PG_NO_MAX_BYTES, RetentionThread

log = logging.getLogger("tracescore")


class OwnProvider(TracerProvider):
    """The tracer provider tracescore makes when the app gives it none to export to: it
    counts the span processors added to it (:attr:`Tracescore.spans_wanted`)."""

    processors = 0

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        super().add_span_processor(span_processor)
        self.processors += 1


def check_database(db: str, metrics: Sequence[Any]) -> None:
    """Create the schema now, so a bad file fails at ``init``; a fleet's PostgreSQL that is
    down only logs (records wait in the bounded buffer; the writer creates the schema later)."""
    try:
        store = open_store(db)
        try:
            store.register_metrics(metrics)
        finally:
            store.close()
    except Exception as exc:
        if is_postgres(db) and unreachable(exc):
            # A fleet's database may be down while a replica starts: the app starts anyway.
            log.warning("tracescore cannot reach %s (%s); capturing anyway, records wait "
                        "in the buffer (app fine, telemetry degraded)", redact_url(db), exc)
        elif isinstance(exc, (ImportError, RuntimeError)):
            raise
        else:
            raise ValueError(f"cannot open the tracescore database "
                             f"{redact_url(db)!r}: {exc}") from exc


def unreachable(exc: BaseException) -> bool:
    """A connection failure (server down, network), as opposed to a bad URL or permissions."""
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, psycopg.OperationalError) and "password" not in str(exc) \
        and "does not exist" not in str(exc)


def setup_tracing(
    provider: TracerProvider | None,
    exporter: SpanExporter | None,
    processor: SpanProcessor | None,
    hold_seconds: float,
    *,
    adopt: bool = False,
    loss: ExportLoss | None = None,
) -> tuple[TracerProvider, ScoreAttachingProcessor | None]:
    """The tracer provider the adapters use and the score attacher on it (None: no spans are
    exported, nothing to attach scores to). ``adopt`` (``exporter="app"``): wrap the app's
    provider's own processors."""
    if exporter is not None and processor is not None:
        raise ValueError("pass span_exporter or span_processor, not both")
    if adopt:
        app = provider if provider is not None else trace_api.get_tracer_provider()
        return app, adopt_processors(app, hold_seconds=hold_seconds,  # type: ignore[return-value]
                                     loss=loss)
    if provider is None:
        current = trace_api.get_tracer_provider()
        if isinstance(current, TracerProvider) and (exporter or processor):
            provider = current  # the app's own provider: add to it, never replace it
        else:
            provider = OwnProvider(resource=Resource.create({}))
    if exporter is not None:
        processor = BatchSpanProcessor(exporter)
    if processor is None:
        return provider, None
    # ``loss``: spans the batch processor drops at its full queue are counted
    attacher = ScoreAttachingProcessor(processor, hold_seconds=hold_seconds, loss=loss)
    provider.add_span_processor(attacher)
    return provider, attacher


def setup_judge(s: Any, db: str, metrics: Sequence[Any], export_metrics: Any,
                concurrency: int) -> Any:
    """The judge session of settings ``s`` (retries, breaker, price, rate and budget), bound
    to every judge metric of ``metrics``; its calls are counted in ``export_metrics``."""
    from ..judge import ResilientJudge, resolve_judge
    from ..judge.resilience import CircuitBreaker, RetryPolicy
    from ..judge.session import JudgeSession, Price
    from ..metrics.judged import JudgeMetric

    backend = resolve_judge(s.judge)

    def on_call(reply: Any, exc: BaseException | None) -> None:
        export_metrics.judge_call(reply.input_tokens if reply else 0,
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
    export_metrics.observe_breaker(lambda: resilient.breaker.state)
    session = JudgeSession(
        resilient, db, price=Price(*s.judge_price) if s.judge_price else None,
        calls_per_minute=s.judge_calls_per_minute, daily_budget_usd=s.judge_daily_budget_usd,
        max_concurrency=concurrency,
    )
    for m in metrics:
        if isinstance(m, JudgeMetric):
            m.bind(session)
    return session


def start_services(s: Any, db: str, *, telemetry: Any, embedder: Any,
                   wake: Callable[[], None] | None) -> tuple[Any, Any, Any]:
    """The background services of settings ``s``, started: ``(retention, monitors,
    sessions)``, each None where it does not run here. On PostgreSQL (a fleet) they run only
    where scoring runs — the ``tracescore worker`` processes, or a scoring app; capture-only
    replicas (``score=False``) leave them to those. Several at once take disjoint work (row
    locks, leases, claims). ``wake``: the scorer's, when this process scores."""
    pg = is_postgres(db)
    here = s.score or not pg
    # retention: prune old records in small background batches (own thread, own store)
    retention = None
    if (s.retention is not None or s.compact_after_s is not None) and here:
        if pg and s.retention is not None and s.retention.max_bytes is not None:
            log.warning("tracescore: %s", PG_NO_MAX_BYTES)
        retention = RetentionThread(db, s.retention, s.compact_after_s)
        retention.start()
    # monitors: evaluated every minute; one evaluator per database (a lease)
    monitors = None
    if s.monitors is not None and here:
        from ..monitor.runner import MonitorRunner

        monitors = MonitorRunner(db, s.monitors, otel_logger=telemetry.logger,
                                 meter=telemetry.meter)
        monitors.start()
    # sessions: closed after `session_idle` without a turn
    sessions = None
    if s.session_idle is not None and here:
        from ..sessions.closer import SessionCloser

        sessions = SessionCloser(
            db, float(s.session_idle), embedder=embedder,
            judge_metrics=[(m.name, m.version) for m in s.session_metrics] if s.score else (),
            on_closed=wake)
        sessions.start()
    return retention, monitors, sessions


def equip_worker(s: Any, worker: Any, db: str, metrics: Sequence[Any],
                 export_metrics: Any) -> tuple[Any, Any]:
    """Give the scorer ``worker`` what settings ``s`` ask of it when this process scores: the
    embedder (bound to the metrics that use one), the judge session, the judge budgets, the
    redaction of its error texts. Returns ``(embedder, judge_session)``, None where unused."""
    embedder = None
    if s.embedder is not None and s.score:
        from ..embeddings import resolve_embedder

        embedder = resolve_embedder(s.embedder, db_path=db)
        for m in metrics:
            bind = getattr(m, "bind_embedder", None)
            if bind is not None:
                bind(embedder)
    judge_session = None
    if s.judge is not None and s.score:
        judge_session = setup_judge(s, db, metrics, export_metrics, worker.concurrency)
        worker.judge_session = judge_session
        worker.judge_canary = bool(s.judge_canary)
        if s.judge_canary_every_s is not None:
            judge_session.canary_every_s = s.judge_canary_every_s
        worker.judge_max_wait_s = s.judge_max_wait_s
    if s.judge_budgets and s.score:
        from ..budget.selector import AdaptiveJudging

        worker.judging = AdaptiveJudging(s.judge_budgets, embedder=embedder)
        if s.monitors is not None:
            _warn_budgeted_monitors(s, metrics)
    worker.redact = s.redact
    return embedder, judge_session


def _warn_budgeted_monitors(s: Any, metrics: Sequence[Any]) -> None:
    budgeted = {n for m in metrics if m.name in s.judge_budgets for n in m.names()}
    for mon in s.monitors.monitors:
        if mon.score in budgeted and (mon.statistic not in ("mean", "rate") or any(
                d in mon.where for d in ("judge_model", "metric_version"))):
            log.warning(
                "tracescore monitor %r watches %s of %s, judged within a judge budget: only "
                "its mean (or rate) has an active estimate, so the monitor will say NO_DATA "
                "(docs/judge_budget.md)", mon.name, mon.statistic, mon.score)
