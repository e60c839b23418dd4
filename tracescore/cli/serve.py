"""``tracescore serve``: the OTLP intake (docs/otlp.md).

Receives OTLP traces from apps instrumented with OpenInference, OpenLLMetry or the OTel
GenAI conventions (any language), acknowledges them once stored, builds one RAG record per
request from each complete trace, and scores the records like ``tracescore worker`` does.
Stopping: SIGTERM or SIGINT stops accepting, stores what was accepted, gives back the jobs in
flight, exit code 0. Health: ``--health-port`` as for ``tracescore worker``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ._messages import cli_message
from ._options import DEFAULT_DB, _config_option, _db_option
from .commands import main


def _address(ctx: click.Context, param: click.Parameter,
             value: str | None) -> tuple[str, int] | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r}: use HOST:PORT (e.g. 127.0.0.1:4318) or PORT",
                                 ctx=ctx, param=param)
    return (host.strip("[]") or "127.0.0.1", int(port))


@main.command(short_help="Receive OTLP traces from any instrumented app and score them.")
@_config_option("serve")
@_db_option(DEFAULT_DB, "Database the records, jobs and received spans go to: a SQLite file, "
            "or a postgresql:// URL shared by several serve processes.")
@click.option("--otlp-http", metavar="HOST:PORT", callback=_address, default=None,
              help="OTLP/HTTP listener (/v1/traces; protobuf or JSON). Default: "
                   "127.0.0.1:4318 when neither --otlp-http nor --otlp-grpc is given.")
@click.option("--otlp-grpc", metavar="HOST:PORT", callback=_address, default=None,
              help="OTLP/gRPC listener (TraceService). Default: 127.0.0.1:4317 when neither "
                   "listener is given.")
@click.option("--forward", metavar="URL", default=None,
              help="Send every received span on to this OTLP endpoint: OTLP/HTTP (e.g. "
                   "http://collector:4318) or OTLP/gRPC (grpc://collector:4317, grpcs:// for "
                   "TLS); the record's span with its scores, later scores on evaluator spans "
                   "and gen_ai.evaluation.result log records.")
@click.option("--hold-seconds", type=click.FloatRange(min=0.0), default=10.0,
              show_default=True,
              help="With --forward: how long a record's span waits for its scores.")
@click.option("--metric", "metrics", metavar="NAME", multiple=True,
              help="A metric to score (repeatable); default: the --metrics-module's METRICS, "
                   "else the default metrics.")
@click.option("--metrics-module", metavar="MODULE",
              help="Dotted path of a module to import first (it registers custom metrics or "
                   "lists them in METRICS).")
@click.option("--judge", metavar="SPEC", default=None,
              help="LLM judge for judge metrics: 'openai:MODEL', 'llama-cpp:/path.gguf', "
                   "'local'.")
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=1.0,
              show_default=True, help="Fraction of records scored.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Jobs scored at once by this process.")
@click.option("--grace-seconds", type=click.FloatRange(min=0.0), default=5.0,
              show_default=True,
              help="A trace is complete this long after its root span arrived (late child "
                   "spans still count).")
@click.option("--max-body-mb", type=click.FloatRange(min=0.001), default=20.0,
              show_default=True, help="Largest request body, before and after "
                                      "decompression (413 beyond).")
@click.option("--max-pending-spans", type=click.IntRange(min=1), default=200_000,
              show_default=True,
              help="Spans waiting to be stored before senders are told to retry (429).")
@click.option("--lease-seconds", type=click.FloatRange(min=1.0), default=60.0,
              show_default=True,
              help="Lease of a trace being assembled and of a scoring job: a dead process's "
                   "work returns to the others after this long.")
@click.option("--no-score", is_flag=True,
              help="Only receive and build records; `tracescore worker` processes score them.")
@click.option("--monitors", "monitors", metavar="FILE", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also evaluate these monitors every minute and send their notifications "
                   "(one evaluator per database at a time).")
@click.option("--health-port", type=click.IntRange(0, 65535), default=None,
              help="Serve GET /livez and /readyz on this port (on --health-host).")
@click.option("--health-host", metavar="ADDRESS", default="127.0.0.1", show_default=True,
              help="Address the --health-port server listens on.")
def serve(db: Path | str, otlp_http: tuple[str, int] | None,
          otlp_grpc: tuple[str, int] | None, forward: str | None, hold_seconds: float,
          metrics: tuple[str, ...],
          metrics_module: str | None, judge: str | None, sample_rate: float, concurrency: int,
          grace_seconds: float, max_body_mb: float, max_pending_spans: int,
          lease_seconds: float, no_score: bool, monitors: Path | None,
          health_port: int | None, health_host: str) -> None:
    """Receive OTLP traces (HTTP /v1/traces and gRPC), acknowledge them once stored, build
    one RAG record per request from OpenInference, OpenLLMetry or GenAI-convention spans,
    and score it. Several serve processes may share one PostgreSQL database behind a
    Collector's load-balancing exporter (docs/otlp.md)."""
    from .worker import install_stop_handlers, load_metrics

    stop = install_stop_handlers()
    if otlp_http is None and otlp_grpc is None:
        otlp_http, otlp_grpc = ("127.0.0.1", 4318), ("127.0.0.1", 4317)
    try:
        chosen = load_metrics(metrics, metrics_module)
    except ImportError as exc:
        raise click.UsageError(f"--metrics-module: {exc}") from None
    try:
        code = run_serve(db=str(db), metrics=chosen, judge=judge, sample_rate=sample_rate,
                         concurrency=concurrency, score=not no_score, otlp_http=otlp_http,
                         otlp_grpc=otlp_grpc, grace_s=grace_seconds,
                         max_body=int(max_body_mb * 1024 * 1024),
                         max_pending_spans=max_pending_spans, health_port=health_port,
                         health_host=health_host, stop=stop, forward=forward,
                         hold_s=hold_seconds, lease_s=lease_seconds,
                         monitors=None if monitors is None else str(monitors))
    except (ValueError, TypeError, ImportError) as exc:
        raise click.UsageError(cli_message(exc)) from None
    except OSError as exc:  # a port in use
        raise click.ClickException(f"cannot listen: {exc}") from None
    raise SystemExit(code)


def run_serve(*, db: str, metrics: list[Any], judge: str | None, sample_rate: float,
              concurrency: int, score: bool, otlp_http: tuple[str, int] | None,
              otlp_grpc: tuple[str, int] | None, grace_s: float, max_body: int,
              max_pending_spans: int, health_port: int | None, health_host: str,
              stop: Any, forward: str | None = None, hold_s: float = 10.0,
              lease_s: float = 60.0, monitors: str | None = None) -> int:
    """Run until ``stop`` is set; the exit code. Prints a start line (with the bound ports)
    and a stop line to stderr."""
    import tracescore
    from tracescore.intake import Serve, ServeConfig

    from ..store import redact_url
    from .worker import WorkerHealth, _stop

    exporter = "otlp" if (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                          or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) else None
    export: dict[str, Any] = {"exporter": exporter, "hold_seconds": 0.0}
    if forward:  # scores that miss the forwarded span: carriers and log records, to it too
        export = {**forward_exporters(forward),
                  # the forwarder decides when a span goes; the attacher only waits for it
                  "hold_seconds": hold_s + 300.0}
    ts = tracescore.init(db=db, metrics=metrics, judge=judge, sample_rate=sample_rate,
                         concurrency=concurrency, score=score, lease_seconds=lease_s,
                         monitors=monitors, **export)
    srv = Serve(ts, otlp_http=otlp_http, otlp_grpc=otlp_grpc, forward=forward,
                config=ServeConfig(grace_s=grace_s, max_body=max_body,
                                   max_pending_spans=max_pending_spans, hold_s=hold_s,
                                   lease_s=lease_s))
    try:
        srv.start()
    except BaseException:
        srv.stop()
        ts.shutdown(timeout=5)
        raise
    where = ", ".join(f"{name} {host}:{port}" for name, host, port in (
        ("http", otlp_http[0] if otlp_http else "", srv.http_port),
        ("grpc", otlp_grpc[0] if otlp_grpc else "", srv.grpc_port)) if port is not None)
    print(f"tracescore serve: OTLP on {where}, records to {redact_url(db)} "
          f"(pid {os.getpid()})", file=sys.stderr, flush=True)
    health = WorkerHealth(ts.worker)
    server = health.serve(health_port, health_host) if health_port is not None else None
    try:
        while not stop.wait(1.0):
            pass
    finally:
        health.stopping = True
        srv.stop()
        _stop(ts, 10.0)
        if server is not None:
            server.shutdown()
    print(f"tracescore serve: stopped (pid {os.getpid()})", file=sys.stderr, flush=True)
    return 0


def forward_exporters(forward: str) -> dict[str, Any]:
    """The span and log exporters to the ``--forward`` hop, over its protocol (``grpc://`` or
    ``grpcs://``: OTLP/gRPC; else OTLP/HTTP)."""
    from tracescore.intake.forwarder import grpc_target

    target, tls = grpc_target(forward)
    if target is not None:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
            OTLPLogExporter as GrpcLogExporter,
        )
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return {"span_exporter": GrpcSpanExporter(endpoint=target, insecure=not tls),
                "log_exporter": GrpcLogExporter(endpoint=target, insecure=not tls)}
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    base = forward.rstrip("/").removesuffix("/v1/traces")
    return {"span_exporter": OTLPSpanExporter(endpoint=base + "/v1/traces"),
            "log_exporter": OTLPLogExporter(endpoint=base + "/v1/logs")}
