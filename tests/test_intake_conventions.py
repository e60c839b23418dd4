"""Records from other instrumentations: the real OpenInference and OpenLLMetry LangChain
instrumentors around the example app's chain (a fake chat model), in an app process that
exports with the real OTel SDK OTLP exporters over HTTP and gRPC to ``serve`` on 127.0.0.1,
on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from helpers import jobs, rows
from intake_support import Q, intake_records, run_app, scored, serving


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_openinference_chain_becomes_one_scored_record(db, transport):
    with serving(db, grpc=transport == "grpc") as serve:
        [run] = run_app(serve, "openinference", transport)
        [rec] = intake_records(db, 1)
        assert rec["query"] == Q and rec["answer"] == run["answer"]
        assert [c["text"] for c in rec["contexts"]] == run["docs"]
        assert rec["source"] == "otlp" and rec["model"] == "extractive-demo"
        assert (rec["release"], rec["environment"]) == ("2.4.1", "staging")
        assert rec["input_tokens"] == 152 and rec["output_tokens"] == 20
        assert rec["metadata"]["tracescore.intake.convention"] == "openinference"
        s = scored(db, rec["record_id"], {"context_count", "answer_length"})
        assert s["context_count"]["value"] == 3.0
        assert s["answer_length"]["value"] == float(len(run["answer"]))
        # the record is on the root span of the app's trace, built once from all its spans
        # (the app's direct retriever call is a trace of its own, with no model call)
        root, other = rows(db, "SELECT trace_id, root_span_id, spans, state, records, note "
                               "FROM intake_traces ORDER BY records DESC")
        assert rec["record_id"] == f"{root['trace_id']}-{root['root_span_id']}"
        assert (root["state"], root["spans"], root["records"]) == ("done", 9, 1)
        assert (other["state"], other["records"]) == ("done", 0)
        assert "no model call" in other["note"]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_openllmetry_chain_becomes_the_same_record(tmp_path, transport):
    db = str(tmp_path / "serve.db")
    with serving(db, grpc=transport == "grpc") as serve:
        [run] = run_app(serve, "openllmetry", transport)
        [rec] = intake_records(db, 1)
        assert rec["query"] == Q and rec["answer"] == run["answer"]
        assert [c["text"] for c in rec["contexts"]] == run["docs"]
        assert (rec["release"], rec["environment"]) == ("2.4.1", "staging")
        assert rec["metadata"]["tracescore.intake.convention"] == "openllmetry"
        assert scored(db, rec["record_id"], {"context_count"})["context_count"]["value"] == 3


@pytest.mark.parametrize("instrumentation", ["openinference", "openllmetry"])
def test_content_hidden_upstream_is_said_and_not_scored(tmp_path, instrumentation):
    db = str(tmp_path / "serve.db")
    with serving(db) as serve:
        run_app(serve, instrumentation, "http", "--hide-content")
        [rec] = intake_records(db, 1)
        assert rec["query"] is None and rec["answer"] is None and rec["contexts"] == []
        assert rec["content_captured"] == 0
        assert "content stripped upstream" in rec["metadata"]["tracescore.intake.content"]
        got = jobs(db, rec["record_id"])
        assert got and {j["status"] for j in got.values()} == {"skipped"}
        assert all("content stripped upstream" in j["reason"] for j in got.values())


def test_ground_truth_attribute_reaches_the_record(tmp_path):
    db = str(tmp_path / "serve.db")
    with serving(db) as serve:
        run_app(serve, "openinference", "http", "--ground-truth", "750 Wh")
        [rec] = intake_records(db, 1)
        assert rec["ground_truths"] == ["750 Wh"] and rec["query"] == Q


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_ground_truth_event_reaches_the_record_and_scores_against_it(tmp_path, transport):
    """The event form any language can set (docs/otlp.md "Ground truth from any language"):
    an event named ``tracescore.ground_truth`` on an app span, its attribute an array of two
    answers; a ground-truth metric scores against them."""
    db = str(tmp_path / "serve.db")
    with serving(db, grpc=transport == "grpc", metrics=["token_f1"]) as serve:
        run_app(serve, "openinference", transport, "--ground-truth", "750 Wh|0.75 kWh",
                "--ground-truth-as", "event")
        [rec] = intake_records(db, 1)
        assert rec["ground_truths"] == ["750 Wh", "0.75 kWh"] and rec["query"] == Q
        s = scored(db, rec["record_id"], {"token_f1"})
        assert s["token_f1"]["status"] == "ok" and s["token_f1"]["value"] is not None
