"""OTLP/HTTP and OTLP/gRPC trace requests: decoding, splitting into rows, answering.

Decoding uses the official ``opentelemetry-proto`` messages. OTLP/JSON follows the spec's
deviations from the standard protobuf JSON mapping: lowerCamelCase keys, trace and span ids
as hex strings (not base64), enums as integers, unknown fields ignored.

Every function here is pure (no I/O, no shared state): the HTTP and gRPC front ends call them
on their request threads.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

#: The OTLP spec's recommended limit on a request body, before and after decompression.
DEFAULT_MAX_BODY = 20 * 1024 * 1024
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id",
                      "parent_span_id"})


class BadRequest(ValueError):
    """Input that cannot be decoded (HTTP 400, gRPC INVALID_ARGUMENT; not retried)."""


class TooLarge(ValueError):
    """A body over the limit, before or after decompression (HTTP 413; not retried)."""


class WrongMediaType(ValueError):
    """A content type that is neither OTLP protobuf nor OTLP JSON (HTTP 415)."""


def media_type(content_type: str | None) -> str:
    """``application/x-protobuf`` or ``application/json`` for a Content-Type header."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    if base in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if base == JSON:
        return JSON
    raise WrongMediaType(f"unsupported Content-Type {content_type!r}: OTLP/HTTP takes "
                         f"{PROTOBUF} or {JSON}")


def decompress(body: bytes, encoding: str | None, limit: int = DEFAULT_MAX_BODY) -> bytes:
    """The body without its Content-Encoding (gzip, deflate or none), at most ``limit``
    bytes: a bigger result raises :class:`TooLarge` without inflating the rest."""
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        if len(body) > limit:
            raise TooLarge(f"body of {len(body)} bytes is over the limit of {limit}")
        return body
    if enc not in ("gzip", "deflate"):
        raise BadRequest(f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)")
    d = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, detected
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"cannot decompress the {enc} body: {exc}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise TooLarge(f"decompressed body is over the limit of {limit} bytes")
    return out


def parse(body: bytes, media: str) -> trace_service_pb2.ExportTraceServiceRequest:
    """An ``ExportTraceServiceRequest`` from a decompressed body (``media`` from
    :func:`media_type`); :class:`BadRequest` for anything that does not decode."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    if media == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise BadRequest(f"malformed protobuf ExportTraceServiceRequest: {exc}") from None
        return request
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("OTLP/JSON: the body must be a JSON object")
    try:
        json_format.ParseDict(_ids_to_base64(data), request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise BadRequest(f"malformed OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    return request


def _ids_to_base64(value: Any, depth: int = 0) -> Any:
    """OTLP/JSON's hex ids as the base64 that the protobuf JSON mapping expects."""
    if depth > 64:
        raise BadRequest("OTLP/JSON nested deeper than 64 levels")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in _ID_KEYS and isinstance(v, str):
                try:
                    v = base64.b64encode(bytes.fromhex(v)).decode("ascii")
                except ValueError:
                    raise BadRequest(f"OTLP/JSON {k} {v[:40]!r} is not hex") from None
            else:
                v = _ids_to_base64(v, depth + 1)
            out[k] = v
        return out
    if isinstance(value, list):
        return [_ids_to_base64(v, depth + 1) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class SpanRow:
    """One received span as stored: ids in lower-case hex, the serialized ``Span``."""

    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    resource_id: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Split:
    rows: list[SpanRow]
    #: resource id -> a serialized ResourceSpans holding the resource and one scope, no spans
    resources: dict[str, bytes]
    rejected: int
    reason: str | None


def split(request: trace_service_pb2.ExportTraceServiceRequest) -> Split:
    """The request's spans as rows. A span without a valid trace id (16 bytes, not all zero)
    or span id (8 bytes, not all zero) is rejected — counted for the partial-success answer
    — and the rest are kept."""
    rows: list[SpanRow] = []
    resources: dict[str, bytes] = {}
    rejected = 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            head = trace_pb2.ResourceSpans(resource=rs.resource, schema_url=rs.schema_url)
            head.scope_spans.add(scope=ss.scope, schema_url=ss.schema_url)
            blob = head.SerializeToString(deterministic=True)
            rid = hashlib.blake2b(blob, digest_size=16).hexdigest()
            resources.setdefault(rid, blob)
            for span in ss.spans:
                tid, sid, pid = span.trace_id, span.span_id, span.parent_span_id
                if len(tid) != 16 or len(sid) != 8 or not any(tid) or not any(sid) \
                        or (pid and len(pid) != 8):
                    rejected += 1
                    continue
                rows.append(SpanRow(tid.hex(), sid.hex(), pid.hex() if any(pid) else "", rid,
                                    span.SerializeToString()))
    reason = (f"{rejected} span(s) rejected: trace_id must be 16 bytes and span_id 8 bytes, "
              "not all zero" if rejected else None)
    return Split(rows, resources, rejected, reason)


def response(media: str, rejected: int = 0, message: str | None = None) -> bytes:
    """An ``ExportTraceServiceResponse`` (partial success set only when something was
    rejected or there is a warning), encoded as the request was."""
    resp = trace_service_pb2.ExportTraceServiceResponse()
    if rejected or message:
        resp.partial_success.rejected_spans = rejected
        resp.partial_success.error_message = message or ""
    if media == JSON:
        return json_format.MessageToJson(resp, indent=None).encode()
    return resp.SerializeToString()


def status(media: str, message: str, code: int = 0, details: list[Any] | None = None) -> bytes:
    """A ``google.rpc.Status`` body for a 4xx/5xx answer, encoded as the request was."""
    st = status_pb2.Status(code=code, message=message)
    for d in details or ():
        st.details.add().Pack(d)
    if media == JSON:
        return json_format.MessageToJson(st, indent=None).encode()
    return st.SerializeToString()


def hex_id(raw: bytes) -> str:
    return binascii.hexlify(raw).decode("ascii")
