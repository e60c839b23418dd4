"""The HTTP plumbing the scripted test servers share: a threaded JSON-over-HTTP server on
127.0.0.1 with injectable faults. A subclass implements :meth:`ScriptedServer.respond`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Response = tuple[int, bytes, dict[str, str]]


@dataclass
class Fault:
    status: int = 500
    retry_after: float | None = None
    body: str | None = None  # a raw completion text (malformed JSON) with status 200
    delay_s: float = 0.0
    #: the raw HTTP response body (e.g. a cut-off JSON envelope), sent with ``status``
    raw: bytes | None = None


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of new connections from a
    # concurrent client would overflow it and wait out a SYN retransmit (1 s).
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client gave up (its timeout): expected in fault tests
        super().handle_error(request, client_address)


def error_response(fault: Fault) -> Response | None:
    """The HTTP answer a fault stands for, or None when it only delays or alters the body."""
    if fault.raw is not None:
        return fault.status, fault.raw, {}
    if fault.body is None and fault.status != 200:
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = f"{fault.retry_after:g}"
        err = {"error": {"message": f"injected {fault.status}", "type": "test"}}
        return fault.status, json.dumps(err).encode(), headers
    return None


class ScriptedServer:
    """Start with ``with``; every request body is kept in :attr:`requests`; faults queued
    with :meth:`inject` apply to the next requests, in order."""

    def __init__(self, *, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self.faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        # a short poll interval: shutdown() waits for the serving loop to notice (0.5 s default)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_fault(self) -> Fault | None:
        """Called under the lock for each request."""
        return self.faults.popleft() if self.faults else None

    def respond(self, path: str, req: dict[str, Any]) -> Response:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: with Nagle on, the body waits for the client's
            # delayed ACK (~40 ms per call on Linux), which real servers do not add.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n) or b"{}")
                status, body, headers = outer.respond(self.path, req)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        return Handler


def pause(server: ScriptedServer, fault: Fault | None) -> None:
    time.sleep(server.delay_s + (fault.delay_s if fault else 0.0))
