"""The OTLP front ends of ``tracescore serve``: HTTP ``/v1/traces`` and the gRPC
``TraceService``, both answering only once the spans are stored (:class:`~.spool.Spool`).

Answers, as the OTLP specification says:

========================  ==============================  ====================================
case                      OTLP/HTTP                       OTLP/gRPC
========================  ==============================  ====================================
stored                    200 ``ExportTraceServiceResponse``  OK
some spans invalid        200 with ``partial_success``    OK with ``partial_success``
malformed body            400 (``google.rpc.Status``)     INVALID_ARGUMENT
body over the limit       413                             RESOURCE_EXHAUSTED (gRPC's own limit)
wrong content type        415                             —
too many spans waiting    429 + ``Retry-After``           RESOURCE_EXHAUSTED + ``RetryInfo``
database down / slow      503 + ``Retry-After``           UNAVAILABLE + ``RetryInfo``
========================  ==============================  ====================================

Bounded: the HTTP server handles at most ``max_concurrent`` requests at once (more get 503
at once, before their body is read), the gRPC server as many (``maximum_concurrent_rpcs``:
RESOURCE_EXHAUSTED), and the spool bounds the spans waiting to be stored.
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from . import otlp
from .spool import Overloaded, Spool, Unavailable

log = logging.getLogger("tracescore")

GRPC_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class Intake:
    """What both front ends share: decode, split, store, answer. Thread-safe."""

    def __init__(self, spool: Spool, *, max_body: int = otlp.DEFAULT_MAX_BODY,
                 ack_timeout_s: float = 30.0, max_concurrent: int = 64,
                 on_stored: Any = None) -> None:
        self.spool = spool
        self.max_body = max_body
        self.ack_timeout_s = ack_timeout_s
        self.max_concurrent = max_concurrent
        self.on_stored = on_stored
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._http: ThreadingHTTPServer | None = None
        self._grpc: Any = None
        #: counters
        self.requests = 0
        self.rejected_spans = 0
        self.bad_requests = 0
        self.too_large = 0
        self.refused = 0

    def store(self, request: Any) -> tuple[int, str | None]:
        """Store a decoded request's valid spans; (rejected spans, why). Raises
        :class:`Overloaded` / :class:`Unavailable` (nothing acknowledged)."""
        self.spool.request_started()  # (the background threads pause meanwhile)
        try:
            split = otlp.split(request)
            self.requests += 1
            if split.rows:
                ticket = self.spool.submit(split.rows, split.resources)
                if not ticket.wait(self.ack_timeout_s):
                    raise Unavailable(f"the spans were not stored within "
                                      f"{self.ack_timeout_s:g} s")
                if self.on_stored is not None:
                    self.on_stored()
            self.rejected_spans += split.rejected
            return split.rejected, split.reason
        finally:
            self.spool.request_ended()

    # -- HTTP -------------------------------------------------------------------------------------
    def start_http(self, host: str = "127.0.0.1", port: int = 4318) -> int:
        self._http = _BoundedHTTPServer((host, port), _http_handler(self),
                                        max_connections=4 * self.max_concurrent)
        threading.Thread(target=self._http.serve_forever, name="tracescore-otlp-http",
                         daemon=True).start()
        return int(self._http.server_address[1])

    # -- gRPC -------------------------------------------------------------------------------------
    def start_grpc(self, host: str = "127.0.0.1", port: int = 4317) -> int:
        from concurrent.futures import ThreadPoolExecutor

        import grpc

        intake = self

        def export(body: bytes, context: Any) -> bytes:
            try:
                request = otlp.parse(body, otlp.PROTOBUF)
                rejected, reason = intake.store(request)
            except otlp.BadRequest as exc:
                intake.bad_requests += 1
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except Overloaded as exc:
                intake.refused += 1
                _abort_retry(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                             code_pb2.RESOURCE_EXHAUSTED, str(exc), exc.retry_after_s)
            except Unavailable as exc:
                intake.refused += 1
                _abort_retry(context, grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE,
                             str(exc), exc.retry_after_s)
            return otlp.response(otlp.PROTOBUF, rejected, reason)

        handler = grpc.method_handlers_generic_handler(GRPC_SERVICE, {
            "Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=None, response_serializer=None)})
        workers = max(4, min(32, self.max_concurrent))
        server = grpc.server(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tracescore-otlp-grpc"),
            handlers=(handler,), maximum_concurrent_rpcs=self.max_concurrent,
            options=[("grpc.max_receive_message_length", self.max_body)])
        bound = server.add_insecure_port(f"{host}:{port}")
        if not bound:
            raise OSError(f"cannot listen on {host}:{port} for OTLP/gRPC")
        server.start()
        self._grpc = server
        return int(bound)

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=5.0).wait(6.0)
            self._grpc = None


class _BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection (keep-alive senders), at most ``max_connections`` of them: a
    connection beyond is closed at once (the sender reconnects and retries), so idle
    connections cannot exhaust the process. Each connection's reads time out after 60 s."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, *,
                 max_connections: int) -> None:
        super().__init__(address, handler)
        self._conns = threading.BoundedSemaphore(max(1, max_connections))
        self.refused_connections = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._conns.acquire(blocking=False):
            self.refused_connections += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._conns.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._conns.release()


def _abort_retry(context: Any, grpc_code: Any, code: int, message: str, delay_s: float) -> None:
    """Abort with ``RetryInfo``: as the ``grpc-status-details-bin`` status details (the
    standard place) and as ``google.rpc.retryinfo-bin`` (where the Python exporter reads it)."""
    secs = max(1, int(round(delay_s)))
    info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=secs))
    st = status_pb2.Status(code=code, message=message)
    st.details.add().Pack(info)
    context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),
                                   ("google.rpc.retryinfo-bin", info.SerializeToString())))
    context.abort(grpc_code, message)


def _http_handler(intake: Intake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60.0  # a sender that stops sending mid-body

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            media = otlp.PROTOBUF
            if self.path.split("?", 1)[0] != "/v1/traces":
                self._fail(404, media, "not found: this server takes OTLP traces on /v1/traces",
                           close=True)
                return
            if not intake._slots.acquire(blocking=False):
                intake.refused += 1
                self._fail(503, media, "too many requests at once", retry_after=1, close=True)
                return
            try:
                self._post()
            finally:
                intake._slots.release()

        def _post(self) -> None:
            media = otlp.PROTOBUF
            try:
                media = otlp.media_type(self.headers.get("Content-Type"))
            except otlp.WrongMediaType as exc:
                self._fail(415, media, str(exc), close=True)
                return
            length = self.headers.get("Content-Length")
            chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
            if not chunked and (length is None or not length.isdigit()):
                self._fail(411, media, "Content-Length or chunked Transfer-Encoding required",
                           close=True)
                return
            if not chunked and int(length or 0) > intake.max_body:
                intake.too_large += 1
                self._fail(413, media, f"body of {length} bytes is over the limit of "
                           f"{intake.max_body}", close=True)
                return
            if chunked:  # (the OTel JS exporter sends its body so)
                try:
                    body = self._read_chunked(intake.max_body)
                except otlp.TooLarge as exc:
                    intake.too_large += 1
                    self._fail(413, media, str(exc), close=True)
                    return
                except (ValueError, OSError) as exc:
                    intake.bad_requests += 1
                    self._fail(400, media, f"malformed chunked body: {exc}", close=True)
                    return
            else:
                body = self.rfile.read(int(length or 0))
            try:
                raw = otlp.decompress(body, self.headers.get("Content-Encoding"),
                                      intake.max_body)
                request = otlp.parse(raw, media)
                rejected, reason = intake.store(request)
            except otlp.TooLarge as exc:
                intake.too_large += 1
                self._fail(413, media, str(exc))
                return
            except otlp.BadRequest as exc:
                intake.bad_requests += 1
                self._fail(400, media, str(exc))
                return
            except Overloaded as exc:
                intake.refused += 1
                self._fail(429, media, str(exc), retry_after=exc.retry_after_s)
                return
            except Unavailable as exc:
                intake.refused += 1
                self._fail(503, media, str(exc), retry_after=exc.retry_after_s)
                return
            self._send(200, media, otlp.response(media, rejected, reason))

        def _read_chunked(self, limit: int) -> bytes:
            parts: list[bytes] = []
            total = 0
            while True:
                line = self.rfile.readline(1024)
                if not line.endswith(b"\n"):
                    raise ValueError("truncated chunk size line")
                size = int(line.split(b";", 1)[0].strip() or b"x", 16)
                if size == 0:
                    while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                total += size
                if total > limit:
                    raise otlp.TooLarge(f"chunked body over the limit of {limit} bytes")
                chunk = self.rfile.read(size)
                if len(chunk) != size:
                    raise ValueError("truncated chunk")
                parts.append(chunk)
                self.rfile.readline(8)  # the CRLF after the chunk

        def _fail(self, status: int, media: str, message: str, *,
                  retry_after: float | None = None, close: bool = False) -> None:
            extra = {}
            if retry_after is not None:
                extra["Retry-After"] = str(max(1, int(round(retry_after))))
            if close:  # the body was not read: the connection cannot carry another request
                extra["Connection"] = "close"
                self.close_connection = True
            self._send(status, media, otlp.status(media, message), extra)
            if close:
                self._linger()

        def _linger(self, limit: int = 1 << 20, wait_s: float = 1.0) -> None:
            """After an answer sent before the body was read: read and drop what the client
            is still sending (up to ``limit`` bytes or ``wait_s``) before the connection
            closes. Closing a socket with unread data resets it, and a client still writing
            its body then fails with a broken pipe before it reads the 413 (a lingering
            close, as web servers do)."""
            try:
                self.wfile.flush()
                self.connection.settimeout(wait_s)
                deadline = time.monotonic() + wait_s
                got = 0
                while got < limit and time.monotonic() < deadline:
                    data = self.rfile.read1(65536)
                    if not data:
                        break
                    got += len(data)
            except (OSError, ValueError):
                pass  # timed out, reset or closed: nothing more to do

        def _send(self, status: int, media: str, body: bytes,
                  extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

    return Handler
