"""``tracescore worker``: a long-running scoring process for a fleet (docs/fleet.md).

It opens the shared database, leases scoring jobs that capture-only app replicas
(``init(score=False)``) wrote, scores them with the configured metrics, judge and embedder,
and exports the scores on carrier spans and ``gen_ai.evaluation.result`` log records (the
app's root span left long ago), plus its own pipeline metrics (queue depth, scoring lag, judge
calls), over OTLP with the standard ``OTEL_*`` variables. Scale it by running more copies.

Stopping: SIGTERM or SIGINT stops leasing; jobs in flight get ``--stop-timeout`` seconds to
finish, the rest are given back at once (another worker takes them); spans and logs are
flushed; exit code 0 (also for a signal during start-up: ``tracescore worker`` installs the
handlers before it imports anything heavy). A start line and a stop line go to stderr.
Health: ``--health-port`` serves ``GET /livez`` (the scoring loop turned in the last 30 s) and
``GET /readyz`` (the scorer is alive, and the database answered a lease query in the last
60 s or jobs are running) on ``--health-host``; ``--health-file`` is touched every few seconds
while both hold. The health server spends no thread on an idle connection, closes one idle
for ``conn_timeout_s``, and handles at most ``max_handlers`` requests at once (further ones
are closed at once), so open connections cannot exhaust the process.
"""

from __future__ import annotations

import importlib
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger("tracescore")

__all__ = ["HealthServer", "WorkerHealth", "install_early_stop_handlers", "install_stop_handlers",
           "load_metrics", "run_worker"]

#: where ``--health-port`` listens unless ``--health-host`` says otherwise: all interfaces,
#: as before (a Kubernetes httpGet probe connects to the pod's address, not to localhost)
DEFAULT_HEALTH_HOST = "0.0.0.0"



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
        #: the health server's bounds (see :class:`HealthServer`)
        self.conn_timeout_s = 5.0
        self.max_handlers = 32
        self.max_waiting = 256

    def live(self) -> bool:
        # (a scorer that died for good is not live: the orchestrator restarts the process)
        return not self.stopping and not self.worker.gave_up \
            and time.time() - self.worker.heartbeat < self.live_s

    def ready(self) -> bool:
        # not ready while the scoring loop is dead (between its restarts, or for good)
        return self.live() and self.worker.alive \
            and (time.time() - self.worker.db_ok_at < self.ready_s
                 or self.worker._running_jobs > 0)

    def serve(self, port: int, host: str = DEFAULT_HEALTH_HOST) -> HealthServer:
        health = self

        class Handler(BaseHTTPRequestHandler):
            timeout = health.conn_timeout_s  # each read and write on the connection

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

        server = HealthServer((host, port), Handler, conn_timeout_s=self.conn_timeout_s,
                              max_handlers=self.max_handlers, max_waiting=self.max_waiting)
        threading.Thread(target=server.serve_forever, name="tracescore-health",
                         daemon=True).start()
        return server


class HealthServer(HTTPServer):
    """A small HTTP server for probes that open connections cannot exhaust.

    One thread (:meth:`serve_forever`) accepts connections and waits on all of them with a
    selector: a connection costs a thread only once its request has started to arrive, and
    then one of at most ``max_handlers`` (a request beyond that is closed at once, counted in
    ``refused``). A connection that sends nothing for ``conn_timeout_s`` is closed, as is the
    oldest waiting one when ``max_waiting`` are open; a handler's reads and writes time out
    after ``conn_timeout_s`` too. :meth:`shutdown` (any thread) stops the loop.
    """

    request_queue_size = 128  # the listen backlog: connections are accepted at once anyway

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 conn_timeout_s: float = 5.0, max_handlers: int = 32,
                 max_waiting: int = 256) -> None:
        super().__init__(address, handler)
        self.conn_timeout_s = conn_timeout_s
        self.max_waiting = max(1, max_waiting)
        self._slots = threading.BoundedSemaphore(max(1, max_handlers))
        self._halt = threading.Event()
        self._done = threading.Event()
        self.refused = 0
        self.timed_out = 0

    def serve_forever(self, poll_interval: float = 0.25) -> None:
        self.socket.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ, None)
        waiting: dict[socket.socket, tuple[float, Any]] = {}  # in order of arrival

        def drop(conn: socket.socket) -> None:
            sel.unregister(conn)
            waiting.pop(conn, None)
            self.shutdown_request(conn)

        try:
            while not self._halt.is_set():
                for key, _ in sel.select(min(poll_interval, self.conn_timeout_s)):
                    if key.data is None:
                        self._accept(sel, waiting, drop)
                        continue
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    sel.unregister(conn)
                    _, addr = waiting.pop(conn)
                    if not self._slots.acquire(blocking=False):
                        self.refused += 1
                        self.shutdown_request(conn)
                        continue
                    threading.Thread(target=self._handle, args=(conn, addr),
                                     name="tracescore-health-req", daemon=True).start()
                expired = time.monotonic() - self.conn_timeout_s
                for conn, (since, _) in list(waiting.items()):
                    if since > expired:
                        break  # in order of arrival: the rest are younger
                    self.timed_out += 1
                    drop(conn)
        finally:
            for conn in list(waiting):
                drop(conn)
            sel.close()
            self._done.set()

    def _accept(self, sel: selectors.BaseSelector,
                waiting: dict[socket.socket, tuple[float, Any]],
                drop: Any) -> None:
        for _ in range(self.request_queue_size):  # all that are queued, so none waits there
            try:
                conn, addr = self.socket.accept()
            except OSError:  # BlockingIOError: none left
                return
            if len(waiting) >= self.max_waiting:
                drop(next(iter(waiting)))
            conn.setblocking(False)
            waiting[conn] = (time.monotonic(), addr)
            sel.register(conn, selectors.EVENT_READ, addr)

    def _handle(self, conn: socket.socket, addr: Any) -> None:
        try:
            conn.settimeout(self.conn_timeout_s)
            self.finish_request(conn, addr)
        except Exception:  # noqa: S110 - a probe that went away, or timed out: nothing to say
            pass
        finally:
            self.shutdown_request(conn)
            self._slots.release()

    def shutdown(self) -> None:
        self._halt.set()
        self._done.wait(5.0)


#: the event of :func:`install_early_stop_handlers`, until :func:`install_stop_handlers` takes it
_early_stop: threading.Event | None = None


def install_early_stop_handlers() -> None:
    """Install the stop handlers at once, for :func:`install_stop_handlers` to take over.

    Called by :mod:`tracescore.cli` on ``tracescore worker`` before it imports the commands
    (the store, sqlite-utils, pandas: a few hundred ms, more on a busy host), so that a
    SIGTERM in that time is a clean stop too. This module imports only the standard library.
    """
    global _early_stop
    if _early_stop is None:
        _early_stop = _install()


def install_stop_handlers() -> threading.Event:
    """SIGTERM and SIGINT set the returned event (main thread only). Called before anything
    slow of the start-up (importing the metrics module, opening the database, loading models,
    the judge canary), so that a stop request then ends the worker cleanly with exit code 0
    instead of the signal's default action (exit code 143). Returns the event of
    :func:`install_early_stop_handlers` when that ran (once: a signal it saw is kept)."""
    global _early_stop
    stop, _early_stop = _early_stop, None
    return stop if stop is not None else _install()


def _install() -> threading.Event:
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("tracescore worker: signal %d, stopping", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():  # signal.signal's rule
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    return stop


def run_worker(*, db: str, metrics: list[Any], judge: str | None, embedder: str | None,
               concurrency: int, lease_seconds: float, exporter: str | None,
               stop_timeout: float, health_port: int | None, health_file: Path | None,
               judge_calls_per_minute: float | None, judge_price: tuple[float, float] | None,
               judge_daily_budget_usd: float | None, judge_canary: bool,
               on_ready: Any = None, monitors: Any = None,
               health_host: str = DEFAULT_HEALTH_HOST,
               stop: threading.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code (0 for a stop by signal, also one
    that arrives during start-up). Prints one start line to stderr once scoring runs.
    ``stop``: the event of :func:`install_stop_handlers` when the caller installed them
    earlier (before importing the metrics module); else they are installed here, first."""
    if stop is None:
        stop = install_stop_handlers()
    import tracescore

    from ..store import redact_url

    ts = tracescore.init(
        db=db, metrics=metrics, judge=judge, embedder=embedder, concurrency=concurrency,
        lease_seconds=lease_seconds, exporter=exporter, hold_seconds=0.0,
        judge_calls_per_minute=judge_calls_per_minute, judge_price=judge_price,
        judge_daily_budget_usd=judge_daily_budget_usd, judge_canary=judge_canary,
        monitors=monitors,
    )
    ts.worker.stop_grace_s = stop_timeout
    n = len(ts.worker.metrics)
    print(f"tracescore worker: scoring {n} metric{'' if n == 1 else 's'} from "
          f"{redact_url(str(db))} (pid {os.getpid()})", file=sys.stderr, flush=True)
    if stop.is_set():  # a signal during the start-up: stop as for one arriving later
        _stop(ts, stop_timeout)
        _stopped_line()
        return 0
    health = WorkerHealth(ts.worker)
    server = health.serve(health_port, health_host) if health_port is not None else None
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
    _stopped_line()
    return 0


def _stopped_line() -> None:
    print(f"tracescore worker: stopped (pid {os.getpid()})", file=sys.stderr, flush=True)


def _stop(ts: Any, stop_timeout: float) -> None:
    """Finish or give back the leased jobs, then send what was scored, then close."""
    t0 = time.monotonic()
    ts.worker.stop(stop_timeout + 10.0)
    ts.scoring = False  # the shutdown's flush must not wait for the fleet's queue
    if ts.attacher is not None:
        ts.attacher.force_flush(max(1, int((stop_timeout + 10) * 1000)))
        ts.worker.write_delivered()  # the carriers just exported
    ts.shutdown(timeout=max(1.0, stop_timeout + 10.0 - (time.monotonic() - t0)))
