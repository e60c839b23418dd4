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
while both hold. The health server listens on 127.0.0.1 unless ``--health-host`` says
otherwise; it spends no thread on a connection, gives each request ``conn_timeout_s`` in all
to arrive (a client that trickles its header is closed at that deadline), and answers a
complete request at once, so slow or open connections cannot starve the probes.
"""

from __future__ import annotations

import importlib
import io
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

#: where ``--health-port`` listens unless ``--health-host`` says otherwise: this host only. A
#: Kubernetes httpGet probe connects to the pod's address, not to localhost: there, give
#: ``--health-host 0.0.0.0`` (or the pod's IP).
DEFAULT_HEALTH_HOST = "127.0.0.1"



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
            timeout = health.conn_timeout_s  # the answer's write (the request is read)

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
                              max_waiting=self.max_waiting)
        threading.Thread(target=server.serve_forever, name="tracescore-health",
                         daemon=True).start()
        return server


class HealthServer(HTTPServer):
    """A small HTTP server for probes that slow or open connections cannot starve.

    One thread (:meth:`serve_forever`) accepts connections and reads every request's head
    with a selector, without a thread per connection: a request must arrive whole (up to
    :data:`MAX_HEAD` bytes, its blank line included) within ``conn_timeout_s`` of the
    connection opening — one deadline, however the bytes trickle in — or the connection is
    closed (counted in ``timed_out``). A complete request is answered at once on that thread
    (a probe's answer is a few bytes, computed from memory), so a probe never waits behind
    another client. At most ``max_waiting`` connections are kept; past that the oldest is
    closed. :meth:`shutdown` (any thread) stops the loop.
    """

    request_queue_size = 128  # the listen backlog: connections are accepted at once anyway

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 conn_timeout_s: float = 5.0, max_waiting: int = 256) -> None:
        super().__init__(address, handler)
        self.conn_timeout_s = conn_timeout_s
        self.max_waiting = max(1, max_waiting)
        self._halt = threading.Event()
        self._done = threading.Event()
        self.refused = 0  # requests too large or not HTTP
        self.timed_out = 0

    def serve_forever(self, poll_interval: float = 0.25) -> None:
        self.socket.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ, None)
        # in order of arrival: conn -> (when it opened, its address, the bytes so far)
        waiting: dict[socket.socket, tuple[float, Any, bytearray]] = {}

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
                    self._read(sel, conn, waiting, drop)
                expired = time.monotonic() - self.conn_timeout_s
                for conn, (since, _, _) in list(waiting.items()):
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
                waiting: dict[socket.socket, tuple[float, Any, bytearray]],
                drop: Any) -> None:
        for _ in range(self.request_queue_size):  # all that are queued, so none waits there
            try:
                conn, addr = self.socket.accept()
            except OSError:  # BlockingIOError: none left
                return
            if len(waiting) >= self.max_waiting:
                drop(next(iter(waiting)))
            conn.setblocking(False)
            waiting[conn] = (time.monotonic(), addr, bytearray())
            sel.register(conn, selectors.EVENT_READ, addr)

    def _read(self, sel: selectors.BaseSelector, conn: socket.socket,
              waiting: dict[socket.socket, tuple[float, Any, bytearray]], drop: Any) -> None:
        _, addr, head = waiting[conn]
        try:
            chunk = conn.recv(MAX_HEAD + 1 - len(head))
        except BlockingIOError:
            return
        except OSError:
            drop(conn)
            return
        if not chunk:  # the client went away
            drop(conn)
            return
        head += chunk
        if b"\r\n\r\n" not in head and b"\n\n" not in head:
            if len(head) > MAX_HEAD:
                self.refused += 1
                drop(conn)
            return
        sel.unregister(conn)
        waiting.pop(conn)
        self._answer(conn, addr, bytes(head))

    def _answer(self, conn: socket.socket, addr: Any, head: bytes) -> None:
        try:
            conn.setblocking(True)
            conn.settimeout(self.conn_timeout_s)  # (a few bytes: the send buffer takes them)
            self.finish_request(_Received(conn, head), addr)  # type: ignore[arg-type]
        except Exception:  # noqa: S110 - a probe that went away: nothing to say
            pass
        finally:
            self.shutdown_request(conn)

    def shutdown(self) -> None:
        self._halt.set()
        self._done.wait(5.0)


#: The largest request head the health server reads (a probe's is a few hundred bytes).
MAX_HEAD = 8192


class _Received:
    """A connection whose request was read already: the handler reads it from memory and
    writes its answer to the socket."""

    def __init__(self, conn: socket.socket, head: bytes) -> None:
        self._conn = conn
        self._head = head

    def makefile(self, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "r" in mode:
            return io.BytesIO(self._head)
        return self._conn.makefile(mode, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # settimeout, setsockopt, sendall, fileno
        return getattr(self._conn, name)


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
               stop: threading.Event | None = None,
               judge_budget: str | None = None, session_idle: str | None = None,
               session_metrics: Any = ()) -> int:
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
        monitors=monitors, judge_budget=judge_budget, session_idle=session_idle,
        session_metrics=session_metrics,
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
        ts.worker.deliveries.write_after_stop()  # the carriers just exported
    ts.shutdown(timeout=max(1.0, stop_timeout + 10.0 - (time.monotonic() - t0)))
