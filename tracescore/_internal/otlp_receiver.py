"""A real OTLP receiver for tests: HTTP/protobuf or gRPC on 127.0.0.1, decoded with
``opentelemetry-proto``. Public as :class:`tracescore.testing.OtlpReceiver`.

It stands in for a collector or backend: it accepts ``Export{Trace,Logs,Metrics}ServiceRequest``
on ``/v1/traces``, ``/v1/logs``, ``/v1/metrics`` (gzip/deflate aware) or on the three gRPC
collector services, keeps every request, and can refuse requests (HTTP 503 / gRPC UNAVAILABLE)
to play a backend that is down. Helpers flatten what arrived into plain dataclasses.

Threading: the server runs on its own threads; every accessor takes a lock and returns copies.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

HTTP_PROTOBUF, GRPC = "http/protobuf", "grpc"
_REQUESTS: dict[str, tuple[str, type[Message], type[Message]]] = {
    "/v1/traces": ("traces", trace_service_pb2.ExportTraceServiceRequest,
                   trace_service_pb2.ExportTraceServiceResponse),
    "/v1/logs": ("logs", logs_service_pb2.ExportLogsServiceRequest,
                 logs_service_pb2.ExportLogsServiceResponse),
    "/v1/metrics": ("metrics", metrics_service_pb2.ExportMetricsServiceRequest,
                    metrics_service_pb2.ExportMetricsServiceResponse),
}
T = TypeVar("T")


# -- flattened views ----------------------------------------------------------------------------
def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    return getattr(v, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = any_value(kv.value)
    return out


@dataclass(frozen=True)
class WireSpan:
    trace_id: str  # 32 hex
    span_id: str  # 16 hex
    parent_span_id: str  # "" for a root
    name: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace_id, span_id)
    resource: dict[str, Any]
    scope: str


@dataclass(frozen=True)
class WireLogRecord:
    event_name: str
    trace_id: str
    span_id: str
    severity_text: str
    attributes: dict[str, Any]
    body: Any
    resource: dict[str, Any]
    scope: str


@dataclass(frozen=True)
class WireExemplar:
    trace_id: str
    span_id: str
    value: float
    filtered_attributes: dict[str, Any]


@dataclass(frozen=True)
class WirePoint:
    metric: str
    kind: str  # "sum" | "gauge" | "histogram" | ...
    attributes: dict[str, Any]
    value: float | None  # sum/gauge points
    count: int | None  # histogram points
    sum: float | None
    bucket_counts: list[int]
    explicit_bounds: list[float]
    exemplars: list[WireExemplar]
    time_unix_nano: int
    unit: str


@dataclass
class Received:
    signal: str  # "traces" | "logs" | "metrics"
    request: Any  # the decoded Export*ServiceRequest
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names
    content_encoding: str = ""
    at: float = 0.0


class OtlpReceiver:
    """A real OTLP endpoint on 127.0.0.1 (``protocol`` ``"http/protobuf"`` or ``"grpc"``).

    ``refuse_first`` requests are refused (HTTP ``refuse_status``, default 503, with an optional
    ``Retry-After``; gRPC UNAVAILABLE); set :attr:`down` to refuse everything until cleared.
    Use as a context manager, or :meth:`start`/:meth:`stop`. :meth:`env` gives the
    ``OTEL_EXPORTER_OTLP_*`` variables that point an SDK exporter here. :meth:`stall` makes it
    a slow receiver: requests wait (their senders blocked) until :meth:`resume`.
    """

    def __init__(self, protocol: str = HTTP_PROTOBUF, *, refuse_first: int = 0,
                 refuse_status: int = 503, retry_after: float | None = None) -> None:
        if protocol not in (HTTP_PROTOBUF, GRPC):
            raise ValueError(f"protocol must be {HTTP_PROTOBUF!r} or {GRPC!r}, got {protocol!r}")
        self.protocol = protocol
        self.refuse_status = refuse_status
        self.retry_after = retry_after
        self.down = False
        self.port = 0
        self._lock = threading.Lock()
        self._refuse_left = refuse_first
        self._received: list[Received] = []
        self._refused: list[tuple[str, float]] = []
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._grpc: Any = None
        self._open = threading.Event()
        self._open.set()
        #: requests that arrived while stalled and are waiting
        self.stalled = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> OtlpReceiver:
        if self.protocol == HTTP_PROTOBUF:
            self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            self._http.daemon_threads = True
            self.port = self._http.server_address[1]
            self._thread = threading.Thread(target=self._http.serve_forever,
                                            name="otlp-receiver", daemon=True)
            self._thread.start()
        else:
            self._start_grpc()
        return self

    def stop(self) -> None:
        self._open.set()  # held requests are answered, so the server can stop
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=None)
            self._grpc = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment variables that send every signal of an OTel SDK here."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": self.protocol}

    def stall(self) -> None:
        """Hold every request from now on (the sender waits for its answer) until
        :meth:`resume`; a held request gives up after 60 s, then is answered as usual."""
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def _gate(self) -> None:
        if not self._open.is_set():
            with self._lock:
                self.stalled += 1
            self._open.wait(60)
            with self._lock:
                self.stalled -= 1

    def refuse_next(self, n: int) -> None:
        """Refuse the next ``n`` requests (whatever their signal), then accept again."""
        with self._lock:
            self._refuse_left = n

    # -- what arrived ---------------------------------------------------------------------------
    def requests(self, signal: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self._received if signal is None or r.signal == signal]

    @property
    def refused(self) -> int:
        with self._lock:
            return len(self._refused)

    def refused_by_signal(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._lock:
            for signal, _ in self._refused:
                out[signal] = out.get(signal, 0) + 1
        return out

    def spans(self) -> list[WireSpan]:
        out: list[WireSpan] = []
        for r in self.requests("traces"):
            for rs in r.request.resource_spans:
                res = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append(WireSpan(
                            trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(), name=s.name,
                            attributes=attributes(s.attributes),
                            links=[(ln.trace_id.hex(), ln.span_id.hex()) for ln in s.links],
                            resource=res, scope=ss.scope.name,
                        ))
        return out

    def log_records(self) -> list[WireLogRecord]:
        out: list[WireLogRecord] = []
        for r in self.requests("logs"):
            for rl in r.request.resource_logs:
                res = attributes(rl.resource.attributes)
                for sl in rl.scope_logs:
                    for lr in sl.log_records:
                        out.append(WireLogRecord(
                            event_name=lr.event_name, trace_id=lr.trace_id.hex(),
                            span_id=lr.span_id.hex(), severity_text=lr.severity_text,
                            attributes=attributes(lr.attributes),
                            body=any_value(lr.body) if lr.HasField("body") else None,
                            resource=res, scope=sl.scope.name,
                        ))
        return out

    def metric_points(self, name: str | None = None) -> list[WirePoint]:
        """Every data point received, oldest first (cumulative metrics repeat per export)."""
        out: list[WirePoint] = []
        for r in self.requests("metrics"):
            for rm in r.request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if name is not None and m.name != name:
                            continue
                        out.extend(_points(m))
        return out

    def latest_points(self, name: str) -> list[WirePoint]:
        """The points of ``name`` from the most recent export that carried it."""
        points = self.metric_points(name)
        if not points:
            return []
        last = max(p.time_unix_nano for p in points)
        return [p for p in points if p.time_unix_nano == last]

    def wait_for(self, check: Callable[[], T], timeout: float = 10.0,
                 interval: float = 0.02) -> T:
        """Poll ``check`` until it returns something truthy; return it (or the last falsy)."""
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got or time.monotonic() > deadline:
                return got
            time.sleep(interval)

    # -- serving --------------------------------------------------------------------------------
    def _should_refuse(self, signal: str) -> bool:
        with self._lock:
            refuse = self.down or self._refuse_left > 0
            if self._refuse_left > 0:
                self._refuse_left -= 1
            if refuse:
                self._refused.append((signal, time.time()))
            return refuse

    def _keep(self, r: Received) -> None:
        with self._lock:
            self._received.append(r)

    def _start_grpc(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        def export(signal: str, response: type[Message]) -> Callable[[Any, Any], Any]:
            def handler(request: Any, context: Any) -> Any:
                receiver._gate()
                if receiver._should_refuse(signal):
                    context.abort(grpc.StatusCode.UNAVAILABLE, "receiver is down")
                headers = {k.lower(): v for k, v in context.invocation_metadata()}
                # gRPC decompresses before the handler; the encoding is not visible here.
                receiver._keep(Received(signal, request, headers, "", time.time()))
                return response()
            return handler

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            Export = staticmethod(export("traces", trace_service_pb2.ExportTraceServiceResponse))

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            Export = staticmethod(export("logs", logs_service_pb2.ExportLogsServiceResponse))

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            Export = staticmethod(
                export("metrics", metrics_service_pb2.ExportMetricsServiceResponse))

        server = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc"))
        # The generated *_pb2_grpc modules are untyped.
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            Traces(), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            Logs(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            Metrics(), server)
        self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._grpc = server


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            known = _REQUESTS.get(path)
            if known is None:
                self._reply(404, b"unknown OTLP path", "text/plain")
                return
            signal, request_type, response_type = known
            receiver._gate()
            if receiver._should_refuse(signal):
                extra = ({"Retry-After": f"{receiver.retry_after:g}"}
                         if receiver.retry_after is not None else {})
                self._reply(receiver.refuse_status, b"receiver is down", "text/plain", extra)
                return
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            try:
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = request_type()
                request.ParseFromString(body)
            except Exception as exc:
                self._reply(400, f"cannot decode: {exc}".encode(), "text/plain")
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            receiver._keep(Received(signal, request, headers, encoding, time.time()))
            self._reply(200, response_type().SerializeToString(), "application/x-protobuf")

        def _reply(self, status: int, body: bytes, ctype: str,
                   extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


def _points(m: Any) -> Iterator[WirePoint]:
    kind = m.WhichOneof("data")
    if kind is None:
        return
    data = getattr(m, kind)
    for p in data.data_points:
        exemplars = [
            WireExemplar(e.trace_id.hex(), e.span_id.hex(),
                         e.as_double if e.WhichOneof("value") == "as_double" else float(e.as_int),
                         attributes(e.filtered_attributes))
            for e in getattr(p, "exemplars", ())
        ]
        if kind in ("sum", "gauge"):
            value: float | None = (p.as_double if p.WhichOneof("value") == "as_double"
                                   else float(p.as_int))
            count = None
            total = None
            buckets: list[int] = []
            bounds: list[float] = []
        else:
            value = None
            count = int(p.count)
            total = float(p.sum) if p.HasField("sum") else None
            buckets = list(getattr(p, "bucket_counts", ()))
            bounds = list(getattr(p, "explicit_bounds", ()))
        yield WirePoint(m.name, kind, attributes(p.attributes), value, count, total, buckets,
                        bounds, exemplars, int(p.time_unix_nano), m.unit)
