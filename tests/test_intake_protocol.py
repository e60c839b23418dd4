"""``serve``'s OTLP answers, as the OTLP specification says: stored → 200 / OK, partial
success, malformed → 400 / INVALID_ARGUMENT, too large → 413, overload → 429 / 503 with
Retry-After or RESOURCE_EXHAUSTED / UNAVAILABLE with RetryInfo; a retried batch stores
nothing twice; late spans are counted. Real servers on 127.0.0.1, a real SQLite file held
locked by a second connection to play a busy database."""

from __future__ import annotations

import gzip
import json
import sqlite3
import threading
import urllib.error
import urllib.request
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from helpers import rows, wait_for
from intake_support import intake_records, serving
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tracescore.intake import ServeConfig

TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
ROOT = bytes.fromhex("eee19b7ec3c1b174")
CHILD = bytes.fromhex("eee19b7ec3c1b175")


def span_ids(trace: bytes) -> tuple[bytes, bytes, bytes]:
    """The request's root, retrieval and chat span ids: fixed for :data:`TRACE`, else derived
    from the trace id (span ids are unique across traces, as an SDK makes them)."""
    if trace == TRACE:
        return ROOT, CHILD, bytes.fromhex("eee19b7ec3c1b176")
    return tuple(trace[:7] + bytes([k]) for k in (1, 2, 3))  # type: ignore[return-value]


def _kv(**attrs: Any) -> list[KeyValue]:
    out = []
    for k, v in attrs.items():
        k = k.replace("__", ".")
        av = AnyValue(int_value=v) if isinstance(v, int) else AnyValue(string_value=str(v))
        out.append(KeyValue(key=k, value=av))
    return out


def genai_request(trace: bytes = TRACE, *, spans: str = "root,retrieval,chat",
                  bad_ids: int = 0) -> trace_service_pb2.ExportTraceServiceRequest:
    """A RAG request in the GenAI conventions, as a non-Python app would send it."""
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(_kv(service__name="ts-app", service__version="7.0",
                                      deployment__environment__name="prod"))
    ss = rs.scope_spans.add()
    ss.scope.name = "app"
    docs = json.dumps([{"id": "d1", "score": 0.9, "content": "The Cargo has 750 Wh."},
                       {"id": "d2", "score": 0.2, "content": "Unrelated text."}])
    prompt = json.dumps([{"role": "user", "parts": [
        {"type": "text", "content": "Context: The Cargo has 750 Wh.\nQuestion: Cargo battery?"}]}])
    out = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "750 Wh."}]}])
    root, child, chat = span_ids(trace)
    made = {
        "root": (root, b"", "rag", 1000, 9000, _kv(
            gen_ai__operation__name="invoke_agent", gen_ai__conversation__id="conv-1",
            gen_ai__input__messages=json.dumps([{"role": "user", "parts": [
                {"type": "text", "content": "Cargo battery?"}]}]),
            gen_ai__output__messages=out)),
        "retrieval": (child, root, "retrieval", 2000, 3000, _kv(
            gen_ai__operation__name="retrieval", gen_ai__retrieval__query__text="Cargo battery?",
            gen_ai__retrieval__documents=docs)),
        "chat": (chat, root, "chat m", 4000, 8000, _kv(
            gen_ai__operation__name="chat", gen_ai__request__model="m-1",
            gen_ai__input__messages=prompt, gen_ai__output__messages=out,
            gen_ai__usage__input_tokens=30, gen_ai__usage__output_tokens=3)),
    }
    for name in spans.split(","):
        sid, parent, title, start, end, attrs = made[name]
        s = ss.spans.add(trace_id=trace, span_id=sid, parent_span_id=parent, name=title,
                         start_time_unix_nano=start, end_time_unix_nano=end)
        s.attributes.extend(attrs)
    for i in range(bad_ids):
        ss.spans.add(trace_id=b"\x01" * 8, span_id=bytes([i + 1]) * 8, name="bad")
    return req


def post(port: int, body: bytes, ctype: str = "application/x-protobuf",
         encoding: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": ctype}
    if encoding:
        headers["Content-Encoding"] = encoding
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                               headers=headers, method="POST")
    try:
        with urllib.request.urlopen(r, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def status_message(body: bytes) -> str:
    st = status_pb2.Status()
    st.ParseFromString(body)
    return st.message


def test_genai_request_as_protobuf_and_a_retry_makes_one_record(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db) as serve:
        body = genai_request().SerializeToString()
        code, headers, answer = post(serve.http_port, body)
        assert code == 200 and headers["Content-Type"] == "application/x-protobuf"
        resp = trace_service_pb2.ExportTraceServiceResponse()
        resp.ParseFromString(answer)
        assert not resp.HasField("partial_success")
        assert post(serve.http_port, body)[0] == 200  # the sender retries the same batch
        [rec] = intake_records(db, 1)
        assert rec["record_id"] == f"{TRACE.hex()}-{ROOT.hex()}"
        assert rec["query"] == "Cargo battery?" and rec["answer"] == "750 Wh."
        assert [c["id"] for c in rec["contexts"]] == ["d1"]  # d2 never reached the model
        assert rec["session_id"] == "conv-1" and rec["model"] == "m-1"
        assert (rec["release"], rec["environment"]) == ("7.0", "prod")
        assert rows(db, "SELECT count(*) AS n FROM intake_spans")[0]["n"] == 3
        assert serve.stats()["spans_duplicate"] == 3
        # a third copy after assembly: still one record, the spans not counted late
        assert post(serve.http_port, body)[0] == 200
        [tr] = rows(db, "SELECT spans, late_spans, records FROM intake_traces")
        assert (tr["spans"], tr["late_spans"], tr["records"]) == (3, 0, 1)
        assert len(intake_records(db, 1)) == 1


def test_json_with_hex_ids_and_gzip(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db) as serve:
        doc = json_format.MessageToDict(genai_request())
        for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # OTLP/JSON: hex ids
            for k in ("traceId", "spanId", "parentSpanId"):
                if k in s:
                    import base64

                    s[k] = base64.b64decode(s[k]).hex().upper()
        body = gzip.compress(json.dumps(doc).encode())
        code, headers, answer = post(serve.http_port, body, "application/json", "gzip")
        assert code == 200, answer
        assert headers["Content-Type"] == "application/json"
        assert json.loads(answer) == {}
        [rec] = intake_records(db, 1)
        assert rec["trace_id"] == TRACE.hex() and rec["answer"] == "750 Wh."


def test_bad_input_gets_clear_answers_and_stores_nothing(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db, config=ServeConfig(grace_s=0.2, max_body=64 * 1024)) as serve:
        port = serve.http_port
        code, _, body = post(port, b"\x0a\xff\xff\xff\xff\x0f garbage")
        assert code == 400 and "malformed protobuf" in status_message(body)
        code, _, body = post(port, b"{not json", "application/json")
        assert code == 400 and "malformed JSON" in json.loads(body)["message"]
        code, _, body = post(port, b"x", "text/plain")
        assert code == 415 and "Content-Type" in status_message(body)
        code, _, _ = post(port, b"\0" * (64 * 1024 + 1))
        assert code == 413
        bomb = gzip.compress(b"\0" * (10 * 1024 * 1024))  # 10 KB on the wire
        code, _, body = post(port, bomb, encoding="gzip")
        assert code == 413 and "over the limit" in status_message(body)
        # partial success: the valid spans stored, the invalid ones counted
        code, _, answer = post(port, genai_request(bad_ids=2).SerializeToString())
        resp = trace_service_pb2.ExportTraceServiceResponse()
        resp.ParseFromString(answer)
        assert code == 200 and resp.partial_success.rejected_spans == 2
        assert "trace_id must be 16 bytes" in resp.partial_success.error_message
        assert rows(db, "SELECT count(*) AS n FROM intake_spans")[0]["n"] == 3
        s = serve.stats()
        assert (s["bad_requests"], s["too_large"], s["spans_rejected"]) == (2, 2, 2)


def test_overload_answers_429_then_a_busy_database_503(tmp_path):
    db = str(tmp_path / "s.db")
    cfg = ServeConfig(grace_s=0.2, max_pending_spans=3, ack_timeout_s=1.0)
    with serving(db, config=cfg) as serve:
        port = serve.http_port
        lock = sqlite3.connect(db, timeout=30, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # the writer cannot commit: requests wait
        first: list[Any] = []
        t = threading.Thread(target=lambda: first.append(
            post(port, genai_request().SerializeToString())))
        t.start()
        wait_for(lambda: serve.spool.pending == 3, what="the first batch waiting")
        code, headers, body = post(port, genai_request(
            bytes.fromhex("6b8efff798038103d269b633813fc60c")).SerializeToString())
        assert code == 429 and int(headers["Retry-After"]) >= 1
        assert "waiting to be stored" in status_message(body)
        t.join(60)
        code, headers, body = first[0]  # not stored within the ack timeout: not acknowledged
        assert code == 503 and int(headers["Retry-After"]) >= 1
        lock.execute("ROLLBACK")
        lock.close()
        wait_for(lambda: serve.spool.pending == 0, what="the waiting batch written")
        # the sender's retry is acknowledged, and the record is built once
        assert post(port, genai_request().SerializeToString())[0] == 200
        assert len(intake_records(db, 1)) == 1


def test_grpc_answers_invalid_argument_and_resource_exhausted_with_retry_info(tmp_path):
    db = str(tmp_path / "s.db")
    cfg = ServeConfig(grace_s=0.2, max_pending_spans=3, ack_timeout_s=30.0)
    with serving(db, http=False, grpc=True, config=cfg) as serve:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as err:
            export(b"\x0a\xff\xff\xff\xff\x0f garbage", timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        ok = trace_service_pb2.ExportTraceServiceResponse()
        ok.ParseFromString(export(genai_request(bad_ids=1).SerializeToString(), timeout=30))
        assert ok.partial_success.rejected_spans == 1

        lock = sqlite3.connect(db, timeout=30, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        first = export.future(genai_request(
            bytes.fromhex("7b8efff798038103d269b633813fc60c")).SerializeToString(), timeout=60)
        wait_for(lambda: serve.spool.pending == 3, what="the first batch waiting")
        with pytest.raises(grpc.RpcError) as err:
            export(genai_request(bytes.fromhex("8b8efff798038103d269b633813fc60c"))
                   .SerializeToString(), timeout=30)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(err.value.trailing_metadata())
        info = error_details_pb2.RetryInfo()
        info.ParseFromString(trailers["google.rpc.retryinfo-bin"])
        assert info.retry_delay.seconds >= 1
        st = status_pb2.Status()
        st.ParseFromString(trailers["grpc-status-details-bin"])
        assert st.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
        lock.execute("ROLLBACK")
        lock.close()
        first.result(timeout=60)  # stored once the database is free: acknowledged
        channel.close()


def test_late_spans_are_stored_and_counted_not_lost(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db) as serve:
        assert post(serve.http_port, genai_request(spans="root,chat").SerializeToString())[0] \
            == 200
        [rec] = intake_records(db, 1)
        assert rec["contexts"] == []
        assert post(serve.http_port, genai_request(spans="retrieval").SerializeToString())[0] \
            == 200
        [tr] = rows(db, "SELECT spans, late_spans, state FROM intake_traces")
        assert (tr["spans"], tr["late_spans"], tr["state"]) == (3, 1, "done")
        assert rows(db, "SELECT count(*) AS n FROM intake_spans")[0]["n"] == 3
        assert len(intake_records(db, 1)) == 1


def test_trace_without_root_is_built_after_orphan_time(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db, config=ServeConfig(grace_s=0.2, orphan_s=0.5)) as serve:
        assert post(serve.http_port, genai_request(spans="retrieval,chat")
                    .SerializeToString())[0] == 200
        [rec] = intake_records(db, 1)
        # the request span never came: each top-level model call is a request of its own
        assert rec["answer"] == "750 Wh." and rec["query"] is not None


def test_spans_of_assembled_traces_are_pruned_late_spans_still_counted(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db, config=ServeConfig(grace_s=0.2, keep_spans_s=0.0)) as serve:
        serve.assembler.prune_every_s = 0.2
        assert post(serve.http_port, genai_request(spans="root,chat").SerializeToString())[0] \
            == 200
        intake_records(db, 1)
        wait_for(lambda: rows(db, "SELECT count(*) AS n FROM intake_spans")[0]["n"] == 0, 60,
                 "spans pruned")
        assert serve.stats()["spans_pruned"] == 2
        assert post(serve.http_port, genai_request(spans="retrieval").SerializeToString())[0] \
            == 200
        [tr] = rows(db, "SELECT late_spans, records FROM intake_traces")
        assert (tr["late_spans"], tr["records"]) == (1, 1)


def test_chunked_body_is_read_and_bounded(tmp_path):
    import http.client

    db = str(tmp_path / "s.db")
    with serving(db, config=ServeConfig(grace_s=0.2, max_body=64 * 1024)) as serve:
        def send(body: bytes) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", serve.http_port, timeout=60)
            conn.request("POST", "/v1/traces", body=iter([body[:10], body[10:]]),
                         headers={"Content-Type": "application/x-protobuf"},
                         encode_chunked=True)
            code = conn.getresponse().status
            conn.close()
            return code

        assert send(genai_request().SerializeToString()) == 200
        assert send(b"\0" * (64 * 1024 + 1)) == 413
        assert len(intake_records(db, 1)) == 1


def test_a_sender_still_writing_an_oversized_body_reads_its_413(tmp_path):
    """The server answers 413 before it has read the body; it then reads and drops what the
    sender is still writing before closing (a lingering close), so the sender gets the answer,
    not a broken pipe (which it would take for a network fault and retry)."""
    import http.client

    db = str(tmp_path / "s.db")
    body = b"\0" * (256 * 1024)
    with serving(db, config=ServeConfig(grace_s=0.2, max_body=64 * 1024)) as serve:
        for chunked in (True, False) * 20:
            conn = http.client.HTTPConnection("127.0.0.1", serve.http_port, timeout=60)
            if chunked:
                conn.request("POST", "/v1/traces", body=iter([body[:10], body[10:]]),
                             headers={"Content-Type": "application/x-protobuf"},
                             encode_chunked=True)
            else:
                conn.request("POST", "/v1/traces", body=body,
                             headers={"Content-Type": "application/x-protobuf"})
            assert conn.getresponse().status == 413
            conn.close()


def test_odd_attribute_values_lose_a_field_not_the_record(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db) as serve:
        req = genai_request()
        for span in req.resource_spans[0].scope_spans[0].spans:
            for kv in span.attributes:
                if kv.key == "gen_ai.retrieval.documents":
                    kv.value.CopyFrom(AnyValue(int_value=7))  # not a JSON list
                if kv.key == "gen_ai.usage.input_tokens":
                    kv.value.CopyFrom(AnyValue(string_value="many"))
                if kv.key == "gen_ai.input.messages" and span.name == "chat m":
                    kv.value.CopyFrom(AnyValue(string_value="[{not json"))
        assert post(serve.http_port, req.SerializeToString())[0] == 200
        [rec] = intake_records(db, 1)
        assert rec["query"] == "Cargo battery?" and rec["answer"] == "750 Wh."
        assert rec["contexts"] == [] and rec["input_tokens"] == 0


def test_a_trace_over_the_span_bound_is_read_in_part_and_said_so(tmp_path):
    db = str(tmp_path / "s.db")
    with serving(db, config=ServeConfig(grace_s=0.2, max_trace_spans=2)) as serve:
        assert post(serve.http_port, genai_request().SerializeToString())[0] == 200
        wait_for(lambda: rows(db, "SELECT state FROM intake_traces")[0]["state"] == "done",
                 what="the trace assembled")
        [tr] = rows(db, "SELECT spans, note FROM intake_traces")
        assert tr["spans"] == 3 and "over 2 spans" in tr["note"]
        assert serve.stats()["traces_cut"] == 1


def test_ground_truth_by_trace_id_through_the_api_scores_the_received_record(tmp_path):
    from helpers import ContextCount

    db = str(tmp_path / "s.db")
    with serving(db, metrics=[ContextCount(), "exact_match"]) as serve:
        assert post(serve.http_port, genai_request().SerializeToString())[0] == 200
        [rec] = intake_records(db, 1)
        [job] = rows(db, "SELECT status FROM jobs WHERE metric = 'exact_match'")
        assert job["status"] == "skipped"  # no reference yet
        serve.ts.add_ground_truth(TRACE.hex(), ["750 Wh."])
        got = wait_for(lambda: rows(db, "SELECT value FROM scores WHERE name = 'exact_match'"),
                       60, "exact_match scored once the reference came")
        assert got[0]["value"] == 1.0


def test_idle_connections_are_bounded(tmp_path):
    import socket

    db = str(tmp_path / "s.db")
    with serving(db, config=ServeConfig(grace_s=0.2, max_concurrent=1)) as serve:
        idle = [socket.create_connection(("127.0.0.1", serve.http_port)) for _ in range(4)]
        server = serve.intake._http
        wait_for(lambda: server._conns._value == 0, what="4 connections held")
        extra = socket.create_connection(("127.0.0.1", serve.http_port))
        extra.settimeout(30)
        assert extra.recv(1) == b""  # closed at once, not a thread more
        assert server.refused_connections == 1
        for s in (*idle, extra):
            s.close()
        wait_for(lambda: server._conns._value == 4, what="the idle connections gone")
        assert post(serve.http_port, genai_request().SerializeToString())[0] == 200
