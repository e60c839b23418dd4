"""The worker's health server against clients that trickle their request: probes keep being
answered, a trickling client is closed at its deadline, and the server listens on 127.0.0.1
unless told otherwise."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from typing import Any

from click.testing import CliRunner

from tracescore.cli import main


class _Beat:
    """What WorkerHealth reads of a worker: a loop that turns and a database that answers."""

    def __init__(self) -> None:
        self.heartbeat = self.db_ok_at = time.time()
        self._running_jobs = 0
        self.alive = True
        self.gave_up = False


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def test_probes_are_answered_while_40_clients_drip_their_headers() -> None:
    """The issue's shape: 40 clients sending one header byte every 0.3 s (each byte well
    within a per-read timeout). Before: they held the 32 handler threads and 0 of the probes
    was answered; now every probe is, and each dripping client is closed at its deadline
    (``conn_timeout_s`` after it connected, not after its last byte)."""
    from tracescore.cli.worker import WorkerHealth

    health = WorkerHealth(_Beat())
    health.conn_timeout_s = 2.0
    server = health.serve(0, "127.0.0.1")
    port = server.server_address[1]
    request = b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
    closed: list[tuple[float, int]] = []  # (seconds it was open, bytes it sent)
    lock = threading.Lock()
    go = threading.Event()

    def drip() -> None:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        t0, sent = time.monotonic(), 0
        go.wait(30)
        try:
            for b in request:
                s.sendall(bytes([b]))
                sent += 1
                time.sleep(0.3)
        except OSError:
            pass  # closed by the server: what should happen
        finally:
            with lock:
                closed.append((time.monotonic() - t0, sent))
            s.close()

    drippers = [threading.Thread(target=drip, daemon=True) for _ in range(40)]
    try:
        for t in drippers:
            t.start()
        go.set()
        answered = 0
        for _ in range(45):
            answered += _get(port, "/livez") == 200
        assert answered == 45
        for t in drippers:
            t.join(60)
        assert len(closed) == 40
        # every dripping client was cut off long before its 200-odd bytes were through
        assert all(sent < len(request) for _, sent in closed), closed
        assert server.timed_out >= 40
    finally:
        server.shutdown()
        server.server_close()


def test_a_complete_request_sent_slowly_within_the_deadline_is_answered() -> None:
    from tracescore.cli.worker import WorkerHealth

    health = WorkerHealth(_Beat())
    health.conn_timeout_s = 30.0
    server = health.serve(0, "127.0.0.1")
    port = server.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            for part in (b"GET /rea", b"dyz HTTP/1.1\r\nHo", b"st: x\r\n", b"\r\n"):
                s.sendall(part)
                time.sleep(0.05)
            answer = s.recv(1024)
        assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"), answer
        # an oversized head is refused, not buffered without end
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            try:
                s.sendall(b"GET /livez HTTP/1.1\r\nX: " + b"a" * 20_000)
            except OSError:
                pass
            assert s.recv(1024) == b""
        assert server.refused == 1
        assert _get(port, "/nope") == 404
    finally:
        server.shutdown()
        server.server_close()


def test_the_health_server_listens_on_this_host_only_by_default() -> None:
    from tracescore.cli.worker import WorkerHealth

    server = WorkerHealth(_Beat()).serve(0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()
    worker: Any = main.commands["worker"]  # type: ignore[attr-defined]
    (opt,) = [p for p in worker.params if p.name == "health_host"]
    assert opt.default == "127.0.0.1"
    out = CliRunner().invoke(main, ["worker", "--help"]).output
    assert "0.0.0.0" in out  # how to bind wider is said where the option is
