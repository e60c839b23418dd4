"""What the intake tests share: a running ``serve`` on 127.0.0.1 and apps that export to it
with the real OTel SDK exporters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helpers import capture_metrics, rows, wait_for
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import tracescore
from tracescore.intake import Serve, ServeConfig

Q = "What battery capacity does the Cargo have?"
RESOURCE = {"service.name": "rag-app", "service.version": "2.4.1",
            "deployment.environment.name": "staging"}


@contextmanager
def serving(db: Any, *, http: bool = True, grpc: bool = False, metrics: Any = None,
            config: ServeConfig | None = None, forward: str | None = None,
            **init: Any) -> Iterator[Serve]:
    ts = tracescore.init(db=db, metrics=metrics or capture_metrics(), **init)
    serve = Serve(ts, otlp_http=("127.0.0.1", 0) if http else None,
                  otlp_grpc=("127.0.0.1", 0) if grpc else None,
                  config=config or ServeConfig(grace_s=0.2), forward=forward).start()
    try:
        yield serve
    finally:
        serve.stop()
        ts.shutdown(timeout=10)


def http_exporter(serve: Serve) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"http://127.0.0.1:{serve.http_port}/v1/traces")


def grpc_exporter(serve: Serve) -> Any:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"127.0.0.1:{serve.grpc_port}", insecure=True)


def provider(exporter: Any, resource: dict[str, Any] | None = None) -> TracerProvider:
    """The app's tracer provider: a synchronous export per span (each call returns once
    ``serve`` acknowledged it, so a test knows what was acknowledged)."""
    tp = TracerProvider(resource=Resource.create(resource or RESOURCE))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


APP = Path(__file__).parent / "intake_apps" / "langchain_app.py"


def run_app(serve: Any, instrumentation: str, protocol: str = "http",
            *args: str) -> list[dict[str, Any]]:
    """Run the instrumented example app in its own process, exporting to ``serve`` (a
    :class:`Serve`, or any OTLP endpoint URL); its runs (question, answer, the retriever's
    documents) once every span was acknowledged."""
    if isinstance(serve, str):
        endpoint = serve
    else:
        endpoint = (f"http://127.0.0.1:{serve.http_port}" if protocol == "http"
                    else f"127.0.0.1:{serve.grpc_port}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(APP), "--instrumentation", instrumentation, "--protocol",
         protocol, "--endpoint", endpoint, *args],
        capture_output=True, text=True, timeout=300, check=False, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["flushed"], out.stderr[-3000:]
    return list(got["runs"])


def intake_records(db: Any, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    from helpers import records

    return wait_for(lambda: (lambda r: r if len(r) >= n else None)(records(db)), timeout,
                    f"{n} record(s) assembled")


def scored(db: Any, record_id: str, names: set[str], timeout: float = 60.0) -> dict[str, Any]:
    def got() -> dict[str, Any] | None:
        s = {r["name"]: r for r in rows(db, "SELECT * FROM scores WHERE record_id = ?",
                                       record_id)}
        return s if names <= set(s) else None

    return wait_for(got, timeout, f"scores {sorted(names)} of {record_id}")
