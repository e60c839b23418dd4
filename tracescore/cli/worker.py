"""``tracescore worker``: a long-running scoring process for a fleet (docs/fleet.md).

It opens the shared database, leases scoring jobs that capture-only app replicas
(``init(score=False)``) wrote, scores them with the configured metrics, judge and embedder,
and exports the scores on carrier spans and ``gen_ai.evaluation.result`` log records (the
app's root span left long ago), plus its own pipeline metrics (queue depth, scoring lag, judge
calls), over OTLP with the standard ``OTEL_*`` variables. Scale it by running more copies.

Stopping: SIGTERM or SIGINT stops leasing; jobs in flight get ``--stop-timeout`` seconds to
finish, the rest are given back at once (another worker takes them); spans and logs are
flushed; exit code 0. Health: ``--health-port`` serves ``GET /livez`` (the scoring loop turned
in the last 30 s) and ``GET /readyz`` (the database answered a lease query in the last 60 s,
or jobs are running); ``--health-file`` is touched every few seconds while both hold.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger("tracescore")

__all__ = ["WorkerHealth", "load_metrics", "run_worker"]


def load_metrics(names: tuple[str, ...], module: str | None) -> list[Any]:
    """Metric names and instances for the worker: ``module`` (a dotted path) is imported
    first — it may register metrics by name (``tracescore.metrics.registry.register``) or list
    them in ``METRICS``; with no ``names`` the module's ``METRICS`` (else the defaults) run."""
    from ..client import DEFAULT_METRICS

    listed: list[Any] = []
    if module:
        sys.path.insert(0, os.getcwd())  # a module of the operator's project, run from there
        mod = importlib.import_module(module)
        listed = list(getattr(mod, "METRICS", []))
    if names:
        return list(names)
    return listed or list(DEFAULT_METRICS)


class WorkerHealth:
    """Liveness and readiness of a running worker, from its scoring loop's timestamps."""

    def __init__(self, worker: Any, *, live_s: float = 30.0, ready_s: float = 60.0) -> None:
        self.worker = worker
        self.live_s = live_s
        self.ready_s = ready_s
        self.stopping = False

    def live(self) -> bool:
        return not self.stopping and time.time() - self.worker.heartbeat < self.live_s

    def ready(self) -> bool:
        return self.live() and (time.time() - self.worker.db_ok_at < self.ready_s
                                or self.worker._running_jobs > 0)

    def serve(self, port: int) -> ThreadingHTTPServer:
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                check = {"/livez": health.live, "/healthz": health.live,
                         "/readyz": health.ready}.get(self.path.split("?")[0])
                if check is None:
                    self.send_error(404)
                    return
                ok = check()
                body = b"ok\n" if ok else b"not ok\n"
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # probes every few seconds: quiet
                pass

        server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        threading.Thread(target=server.serve_forever, name="tracescore-health",
                         daemon=True).start()
        return server


def run_worker(*, db: str, metrics: list[Any], judge: str | None, embedder: str | None,
               concurrency: int, lease_seconds: float, exporter: str | None,
               stop_timeout: float, health_port: int | None, health_file: Path | None,
               judge_calls_per_minute: float | None, judge_price: tuple[float, float] | None,
               judge_daily_budget_usd: float | None, judge_canary: bool,
               on_ready: Any = None, monitors: Any = None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    import tracescore

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("tracescore worker: signal %d, stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ts = tracescore.init(
        db=db, metrics=metrics, judge=judge, embedder=embedder, concurrency=concurrency,
        lease_seconds=lease_seconds, exporter=exporter, hold_seconds=0.0,
        judge_calls_per_minute=judge_calls_per_minute, judge_price=judge_price,
        judge_daily_budget_usd=judge_daily_budget_usd, judge_canary=judge_canary,
        monitors=monitors,
    )
    ts.worker.stop_grace_s = stop_timeout
    health = WorkerHealth(ts.worker)
    server = health.serve(health_port) if health_port is not None else None
    if on_ready is not None:
        on_ready(ts, server)
    try:
        while not stop.wait(2.0):
            if health_file is not None and health.live() and health.ready():
                health_file.touch()
    finally:
        health.stopping = True
        if health_file is not None:
            health_file.unlink(missing_ok=True)
        _stop(ts, stop_timeout)
        if server is not None:
            server.shutdown()
    return 0


def _stop(ts: Any, stop_timeout: float) -> None:
    """Finish or give back the leased jobs, then send what was scored, then close."""
    t0 = time.monotonic()
    ts.worker.stop(stop_timeout + 10.0)
    ts.scoring = False  # the shutdown's flush must not wait for the fleet's queue
    if ts.attacher is not None:
        ts.attacher.force_flush(max(1, int((stop_timeout + 10) * 1000)))
        ts.worker.write_delivered()  # the carriers just exported
    ts.shutdown(timeout=max(1.0, stop_timeout + 10.0 - (time.monotonic() - t0)))
