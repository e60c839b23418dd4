"""An agent run's tool calls in the store (``records.agent``) on both backends, bounded and
privacy-filtered like contexts: a real LangGraph agent (scripted fake model), the real
pipeline, SQLite and PostgreSQL (the ``db`` fixture)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import records, rows, scores
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from test_agent_checks import CHECKS, SCRIPTS, ScriptedChatModel, call, run, search, warranty

from tracescore._internal.tool_calls import MAX_ARGUMENT_CHARS, MAX_RESULT_CHARS, MAX_TOOL_CALLS
from tracescore.store import open_store

SECRET = "hunter2-secret"


@pytest.fixture
def db_path(db: str) -> str:
    """This module's database: a SQLite path, then a PostgreSQL URL (conftest ``db``)."""
    return db


def load(db: str, record_id: str) -> Any:
    store = open_store(db)
    try:
        return store.load_records([record_id])[record_id]
    finally:
        store.close()


def test_agent_run_round_trips_and_is_scored_on_both_backends(make_ts: Any,
                                                              db_path: str) -> None:
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    run(ts, create_react_agent(ScriptedChatModel(), [search, warranty]), "bad")
    assert ts.flush(timeout=60)
    (rec,) = records(db_path)
    agent = load(db_path, rec["record_id"]).agent
    assert agent is not None and agent.steps == 5 and agent.model_calls == 5
    assert [(c.name, c.ok) for c in agent.calls] == [
        ("search", True), ("search", True), ("web_browse", False), ("search", False)]
    assert agent.tools[0].schema["required"] == ["query"]
    got = scores(db_path, rec["record_id"])
    assert got["unknown_tool_calls"]["value"] == 1.0
    assert got["invalid_tool_arguments"]["value"] == 1.0


@tool
def echo(text: str) -> str:
    """Echo the text back, long."""
    return text[:50] * 100


def test_calls_are_bounded(make_ts: Any, db_path: str) -> None:
    n = MAX_TOOL_CALLS + 5  # asked for in one step, after a call with a huge argument
    SCRIPTS["many"] = [[call("echo", text="x" * (MAX_ARGUMENT_CHARS + 10))],
                       [call("echo", text=f"t{i}" * 30) for i in range(n)], None]
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    run(ts, create_react_agent(ScriptedChatModel(), [echo]), "many")
    assert ts.flush(timeout=60)
    (rec,) = records(db_path)
    agent = load(db_path, rec["record_id"]).agent
    assert len(agent.calls) == MAX_TOOL_CALLS and agent.calls_dropped == n + 1 - MAX_TOOL_CALLS
    first = agent.calls[0]
    assert first.arguments_cut and first.arguments == {
        "tracescore.truncated": len(json.dumps({"text": "x" * (MAX_ARGUMENT_CHARS + 10)}))}
    assert len(agent.calls[1].result) < MAX_RESULT_CHARS + 80  # clipped, with a hash
    assert "truncated" in agent.calls[1].result
    got = scores(db_path, rec["record_id"])
    # a cut argument is not checked; the others validate
    assert got["invalid_tool_arguments"]["value"] == 0.0


def test_capture_off_keeps_the_shape_not_the_text(make_ts: Any, db_path: str) -> None:
    SCRIPTS["private"] = [[call("search", query=SECRET)], [call("nope", q=SECRET)], None]
    ts, exporter = make_ts(metrics=CHECKS, sample_rate=1.0, capture_content=False)
    run(ts, create_react_agent(ScriptedChatModel(), [search]), "private")
    assert ts.flush(timeout=60)
    (rec,) = rows(db_path, "SELECT * FROM records")
    assert SECRET not in json.dumps(rec, default=str)
    agent = json.loads(rec["agent"])
    assert [c["name"] for c in agent["calls"]] == ["search", "nope"]
    assert agent["calls"][0]["arguments"] == {"query": f"<redacted: {len(SECRET)} chars>"}
    assert agent["calls"][0]["result"] is None
    assert agent["calls"][1]["error"] == "error" and agent["calls"][1]["ok"] is False
    assert agent["tools"][0]["schema"]["required"] == ["query"]  # the app's code: kept
    got = scores(db_path, rec["record_id"])
    assert got["unknown_tool_calls"]["value"] == 1.0
    assert got["invalid_tool_arguments"]["value"] == 0.0  # still a string: its shape checks
    assert got["tool_error_rate"]["value"] == 0.5
    # no_answer needs the answer text: skipped, not guessed
    assert got["agent_no_answer"]["status"] == "skipped"
    assert got["agent_no_answer"]["value"] is None


def test_redact_applies_to_arguments_results_and_errors(make_ts: Any, db_path: str) -> None:
    SCRIPTS["redacted"] = [[call("search", query=SECRET)], [call("nope", q=SECRET)], None]
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0,
                    redact=lambda t: t.replace(SECRET, "[S]"))
    run(ts, create_react_agent(ScriptedChatModel(), [search]), "redacted")
    assert ts.flush(timeout=60)
    (rec,) = rows(db_path, "SELECT * FROM records")
    assert SECRET not in (rec["agent"] or "")
    calls = json.loads(rec["agent"])["calls"]
    assert calls[0]["arguments"] == {"query": "[S]"}
    assert calls[0]["result"] == "handbook hits for '[S]'"
    assert calls[1]["arguments"] == {"q": "[S]"}
