"""``--forward URL``: every received span goes on to the next OTLP hop, the scores ready in
time on the scored span.

Spans wait in the database, not in memory: a span is sent once its trace was assembled
(the record span must be known before it leaves) and marked ``forwarded`` when the next hop
acknowledged it (2xx). A hop that is down or refuses with a retryable status (429, 502, 503,
504: its ``Retry-After`` is honoured) keeps the spans in the database and the forwarder backs
off; one that rejects a batch for good (400, 413, ...) has it counted and marked
``forwarded = -1`` (never retried). A record's span is held until its scoring jobs are done
or ``hold_s`` passed since its trace was assembled, then sent with the scores as attributes
(``evaluations.*`` and ``tracescore.score.<metric>``, :func:`~tracescore.processor.
score_attributes`); scores that finish later go out on a carrier span linked to it and as
``gen_ai.evaluation.result`` log records, by the in-process code (the pipeline's attacher,
whose hold the forwarder takes over). A crash between the hop's acknowledgement and the mark
sends that batch again (at least once; the next hop dedups nothing, so docs/otlp.md says so).

Each process forwards the traces it assembled (traces assembled by a process that died are
taken over ``orphan_s`` after they were assembled).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

from ..processor import score_attributes
from ..scoring.calls import _row_score
from ..store import intake_sql as Q

log = logging.getLogger("tracescore")

_RETRYABLE = frozenset({429, 502, 503, 504})
#: the gRPC codes the OTLP specification calls retryable (RESOURCE_EXHAUSTED: the receiver asks
#: to slow down); every other failure is final for the batch
_GRPC_RETRYABLE = frozenset({"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE",
                             "UNAVAILABLE", "DATA_LOSS", "RESOURCE_EXHAUSTED"})


def grpc_target(url: str) -> tuple[str | None, bool]:
    """``grpc://host:port`` → (``host:port``, plain), ``grpcs://host:port`` → (…, TLS); any
    other URL → (None, False): OTLP/HTTP. A gRPC URL without a port, or with a path, is
    refused (ValueError) before anything starts."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("grpc", "grpcs"):
        return None, False
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon or not host or not port.isdigit() or "/" in rest.rstrip("/"):
        raise ValueError(f"--forward {url!r}: a gRPC next hop is grpc://HOST:PORT (plain) or "
                         "grpcs://HOST:PORT (TLS), e.g. grpc://collector:4317")
    return f"{host}:{port}", scheme.lower() == "grpcs"


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


class Forwarder:
    """The forwarding thread of one ``serve`` process."""

    def __init__(self, ts: Any, url: str, *, owner: str, hold_s: float = 10.0,
                 batch: int = 2000, timeout_s: float = 10.0, orphan_s: float = 600.0,
                 poll_s: float = 0.2, background: Any = None) -> None:
        self.ts = ts
        #: around each write transaction (the spool's: acknowledgements first)
        self.background = background or contextlib.nullcontext
        self.db = str(ts.db_path)
        #: ``grpc://host:port`` (plain) or ``grpcs://host:port`` (TLS): the OTLP/gRPC
        #: TraceService; anything else is an OTLP/HTTP base URL or ``.../v1/traces``
        self.grpc_target, self.grpc_tls = grpc_target(url)
        self.url = url if self.grpc_target else (
            url.rstrip("/") if url.rstrip("/").endswith("/v1/traces")
            else url.rstrip("/") + "/v1/traces")
        self._stub: Any = None
        self._channel: Any = None
        self.owner = owner
        self.hold_s = hold_s
        self.batch = batch
        self.timeout_s = timeout_s
        self.orphan_s = orphan_s
        self.poll_s = poll_s
        self._halt = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = 0.0
        #: counters
        self.spans_forwarded = 0
        self.spans_rejected = 0
        self.spans_held = 0
        self.scores_on_spans = 0
        self.failures = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tracescore-intake-forward",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._halt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        from ..store import open_store

        store: Any = None
        while not self._halt.is_set():
            sent = 0
            try:
                if store is None:
                    store = open_store(self.db)
                sent = self.run_once(store)
            except Exception as exc:  # never dies: the spans wait in the database
                self.failures += 1
                log.warning("tracescore serve: forwarding failed (%s); retrying", exc)
                if store is not None:
                    try:
                        store.close()
                    except Exception:  # noqa: S110 - broken: opened again next time
                        pass
                    store = None
                self._backoff = min(30.0, max(0.5, self._backoff * 2))
            if self._backoff:
                self._halt.wait(self._backoff)
            elif sent < self.batch:
                self._wake.wait(self.poll_s)
                self._wake.clear()
        if store is not None:
            store.close()
        if self._channel is not None:
            self._channel.close()

    def run_once(self, store: Any, now: float | None = None) -> int:
        """Send one batch; how many spans were sent."""
        now = time.time() if now is None else now
        rows = Q.unforwarded(store, self.owner, now - self.orphan_s, self.batch)
        if not rows:
            self._backoff = 0.0
            return 0
        ids = [f"{t}-{s}" for t, s, _, _, _ in rows]
        recorded = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            recorded.update(Q.recorded(store, chunk))
        send: list[tuple[str, str, str, bytes, dict[str, Any]]] = []
        delivered: list[int] = []
        carriers: list[tuple[int, int, list[Any]]] = []
        held = 0
        for (tid, sid, rid, body, done_at), record_id in zip(rows, ids):
            extra: dict[str, Any] = {}
            if record_id in recorded:
                if store.open_jobs_for(record_id) and now - (done_at or 0) < self.hold_s:
                    held += 1
                    continue
                refs = [(r["score_id"], _row_score(r))
                        for r in store.scores_for(record_id, undelivered_only=True)]
                extra = score_attributes([s for _, s in refs]) if refs else {}
                delivered.extend(i for i, _ in refs)
                attacher = self.ts.attacher
                if attacher is not None:  # later scores: carriers, from now on
                    mine = frozenset(i for i, _ in refs)
                    got = attacher.take(int(sid, 16), mine) or []
                    late = [r for r in got if r[0] not in mine]
                    if late:
                        carriers.append((int(tid, 16), int(sid, 16), late))
            send.append((tid, sid, rid, bytes(body), extra))
        self.spans_held = held
        if not send:
            return 0
        status = self._post(store, send)
        if status is None:
            return 0  # retryable: the spans stay, backed off
        mark = 1 if 200 <= status < 300 else -1
        with self.background(), store.transaction():
            Q.mark_forwarded(store, mark, [(t, s) for t, s, _, _, _ in send])
        if mark == 1:
            self.spans_forwarded += len(send)
            self.scores_on_spans += len(delivered)
            if delivered:
                store.mark_delivered(delivered, "span")
        else:
            self.spans_rejected += len(send)
            log.warning("tracescore serve: %s rejected %d forwarded spans for good (HTTP %d); "
                        "they are counted, not retried", self.url, len(send), status)
        attacher = self.ts.attacher
        for trace_id, span_id, late in carriers:
            if attacher is not None:
                attacher.emit_carrier(trace_id, span_id, late)
        return len(send)

    def _post(self, store: Any, send: list[tuple[str, str, str, bytes, dict[str, Any]]]
              ) -> int | None:
        """POST the spans; the HTTP status, or None for a retryable failure (backed off)."""
        heads: dict[str, bytes] = {}
        need = sorted({rid for _, _, rid, _, _ in send})
        for i in range(0, len(need), 500):
            chunk = need[i:i + 500]
            heads.update((r, bytes(b)) for r, b in Q.resource_bodies(store, chunk))
        req = trace_service_pb2.ExportTraceServiceRequest()
        groups: dict[str, Any] = {}
        for _, _, rid, body, extra in send:
            ss = groups.get(rid)
            if ss is None:
                rs = trace_pb2.ResourceSpans()
                if rid in heads:
                    rs.ParseFromString(heads[rid])
                if not rs.scope_spans:
                    rs.scope_spans.add()
                req.resource_spans.append(rs)
                ss = groups[rid] = req.resource_spans[-1].scope_spans[0]
            span = ss.spans.add()
            span.ParseFromString(body)
            if extra:
                span.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in extra.items())
        if self.grpc_target:
            return self._export_grpc(req)
        data = req.SerializeToString()
        r = urllib.request.Request(self.url, data=data, method="POST",
                                   headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(r, timeout=self.timeout_s) as resp:
                resp.read()
                self._backoff = 0.0
                return int(resp.status)
        except urllib.error.HTTPError as e:
            if e.code in _RETRYABLE:
                self.failures += 1
                after = e.headers.get("Retry-After") if e.headers else None
                self._backoff = min(60.0, float(after)) if after and after.isdigit() \
                    else min(30.0, max(0.5, self._backoff * 2))
                return None
            return int(e.code)
        except (OSError, ValueError):  # down, refused, timed out
            self.failures += 1
            self._backoff = min(30.0, max(0.5, self._backoff * 2))
            return None

    def _export_grpc(self, req: Any) -> int | None:
        """``TraceService/Export`` on the gRPC next hop: 200 when it took the batch, None for a
        retryable failure (backed off, as for HTTP; a ``RetryInfo`` delay is honoured), else
        400 (rejected for good: counted, not retried). Spans the hop reports as rejected in a
        partial success are counted as rejected; the rest were taken."""
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        if self._stub is None:
            self._channel = (grpc.secure_channel(self.grpc_target, grpc.ssl_channel_credentials())
                             if self.grpc_tls else grpc.insecure_channel(self.grpc_target))
            self._stub = trace_service_pb2_grpc.TraceServiceStub(  # type: ignore[no-untyped-call]
                self._channel)
        try:
            resp = self._stub.Export(req, timeout=self.timeout_s)
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") and e.code() is not None else "UNKNOWN"
            if code in _GRPC_RETRYABLE:
                self.failures += 1
                delay = _retry_delay(e)
                self._backoff = min(60.0, delay) if delay is not None \
                    else min(30.0, max(0.5, self._backoff * 2))
                return None
            log.warning("tracescore serve: %s refused a batch (gRPC %s: %s)", self.grpc_target,
                        code, e.details() if hasattr(e, "details") else "")
            return 400
        self._backoff = 0.0
        rejected = int(resp.partial_success.rejected_spans) if resp.HasField(
            "partial_success") else 0
        if rejected:
            self.spans_rejected += rejected
            log.warning("tracescore serve: %s took the batch but rejected %d spans (%s)",
                        self.grpc_target, rejected, resp.partial_success.error_message)
        return 200


def _retry_delay(err: Any) -> float | None:
    """The ``google.rpc.RetryInfo`` delay of a gRPC error's trailing status, if it has one."""
    try:
        from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        for key, value in err.trailing_metadata() or ():
            if key == "grpc-status-details-bin":
                status = status_pb2.Status.FromString(value)
                for detail in status.details:
                    if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                        info = error_details_pb2.RetryInfo()
                        detail.Unpack(info)
                        return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    except Exception:  # noqa: BLE001 - a malformed trailer: back off as usual
        return None
    return None
