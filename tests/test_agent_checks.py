"""Deterministic agent checks end to end (issue 34, parts 3-5): real LangGraph / LangChain
agents with a scripted tool-calling fake chat model whose ``bind_tools`` binds the tools the
way provider models do (OpenAI format in ``invocation_params``), the real pipeline, SQLite,
the worker scoring the agent metrics, ``show`` and ``compare --by release``.

A bad agent loops (repeats a call), calls a tool that was not offered and passes an argument
of the wrong type: each check flags it; a clean agent is flagged by none.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import records, rows, scores
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import create_react_agent

from tracescore.cli import main
from tracescore.metrics.agent import AGENT_CHECKS
from tracescore.store.sqlite import Store

CHECKS = [m.name for m in AGENT_CHECKS]


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


#: What the model asks for at each step of a run, by the user's question; None: the answer.
SCRIPTS: dict[str, list[list[dict[str, Any]] | None]] = {
    "clean": [[call("search", query="battery range")], None],
    "bad": [
        [call("search", query="battery range")],
        [call("search", query="battery range")],          # the same call again: a repeat
        [call("web_browse", url="https://example.com")],  # a tool that was not offered
        [call("search", query=42)],                       # query must be a string
        None,
    ],
    "parallel": [[call("search", query="brakes"), call("warranty", years=2)], None],
}
# one step more, so each release's step counts have some spread (compare's Welch interval)
SCRIPTS["clean, then warranty"] = [*SCRIPTS["clean"][:-1], [call("warranty", years=2)], None]
SCRIPTS["bad, then warranty"] = [*SCRIPTS["bad"][:-1], [call("warranty", years=2)], None]
ANSWER = "The battery lasts about 80 km."


class ScriptedChatModel(GenericFakeChatModel):
    """Asks for the scripted calls of the turn's question, step by step (the step is the
    number of AI messages since the user's message), then answers."""

    messages: Any = iter(())
    loop_forever: bool = False

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        last_user = max(i for i, m in enumerate(messages) if m.type == "human")
        question = messages[last_user].text
        step = sum(1 for m in messages[last_user:] if m.type == "ai")
        if self.loop_forever:
            planned: list[dict[str, Any]] | None = [call("search", query="again")]
        else:
            planned = SCRIPTS[question][step]
        if planned is None:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=ANSWER))])
        calls = [{**c, "id": f"call-{step}-{i}"} for i, c in enumerate(planned)]
        return ChatResult(generations=[ChatGeneration(
            message=AIMessage(content="", tool_calls=calls))])


@tool
def search(query: str) -> str:
    """Search the e-bike handbook."""
    return f"handbook hits for {query!r}"


@tool
def warranty(years: int) -> str:
    """Warranty terms for a number of years."""
    return f"{years} years"


def react_agent(**kw: Any) -> Any:
    return create_react_agent(ScriptedChatModel(**kw), [search, warranty])


def langchain_agent(**kw: Any) -> Any:
    return create_agent(ScriptedChatModel(**kw), [search, warranty])


def run(ts: Any, app: Any, question: str, **config: Any) -> Any:
    return app.invoke({"messages": [("user", question)]},
                      config={"callbacks": [ts.langchain_handler()], **config})


def values(db: Any, record_id: str) -> dict[str, float | None]:
    return {name: s["value"] for name, s in scores(db, record_id).items()}


@pytest.mark.parametrize("make_app", [react_agent, langchain_agent],
                         ids=["langgraph-react", "langchain-create_agent"])
def test_bad_agent_is_flagged_on_each_count_and_clean_one_is_not(
        make_app: Any, make_ts: Any, db_path: Any) -> None:
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    app = make_app()
    run(ts, app, "clean")
    run(ts, app, "bad")
    assert ts.flush(timeout=60)
    clean, bad = records(db_path)
    assert clean["query"] == "clean" and bad["query"] == "bad"

    c = values(db_path, clean["record_id"])
    assert c == {"tool_error_rate": 0.0, "unknown_tool_calls": 0.0,
                 "invalid_tool_arguments": 0.0, "repeated_tool_calls": 0.0,
                 "agent_no_answer": 0.0, "agent_steps": 2.0, "agent_model_calls": 2.0}

    b = values(db_path, bad["record_id"])
    assert b["unknown_tool_calls"] == 1.0
    assert b["invalid_tool_arguments"] == 1.0
    assert b["repeated_tool_calls"] == 1.0
    # web_browse (no such tool) and search(query=42) (rejected by the tool's own validation)
    assert b["tool_error_rate"] == pytest.approx(2 / 4)
    assert b["agent_steps"] == 5.0 and b["agent_model_calls"] == 5.0
    assert b["agent_no_answer"] == 0.0
    bad_scores = scores(db_path, bad["record_id"])
    assert "web_browse" in bad_scores["unknown_tool_calls"]["explanation"]
    assert "$.query: expected string, got integer" in \
        bad_scores["invalid_tool_arguments"]["explanation"]
    assert bad_scores["unknown_tool_calls"]["label"] == "fail"
    assert scores(db_path, clean["record_id"])["unknown_tool_calls"]["label"] == "pass"


def test_the_record_holds_calls_results_and_offered_tools(make_ts: Any, db_path: Any) -> None:
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    run(ts, react_agent(), "bad")
    run(ts, react_agent(), "parallel")
    assert ts.flush(timeout=60)
    ids = [r["record_id"] for r in records(db_path)]
    store = Store(db_path)
    try:
        loaded = store.load_records(ids)
    finally:
        store.close()
    bad, par = (loaded[i] for i in ids)
    agent = bad.agent
    assert agent is not None
    assert [t.name for t in agent.tools] == ["search", "warranty"]
    assert agent.tools[0].schema["properties"]["query"] == {"type": "string"}
    assert agent.tools[0].description == "Search the e-bike handbook."
    got = [(c.step, c.name, c.arguments, c.ok) for c in agent.calls]
    assert got == [(1, "search", {"query": "battery range"}, True),
                   (2, "search", {"query": "battery range"}, True),
                   (3, "web_browse", {"url": "https://example.com"}, False),
                   (4, "search", {"query": 42}, False)]
    assert agent.calls[0].result == "handbook hits for 'battery range'"
    assert agent.calls[0].id == "call-0-0"
    assert "not a valid tool" in (agent.calls[2].error or "")
    # (langgraph 1.0.0 says "1 validation error for search", newer ones name the class)
    assert "validation error" in (agent.calls[3].error or "").lower()
    # two calls asked for in one step: one step, both kept, in order
    assert [(c.step, c.name, c.ok) for c in par.agent.calls] == [(1, "search", True),
                                                                 (1, "warranty", True)]
    assert par.agent.steps == 2


def test_a_loop_stopped_by_the_step_limit_ends_without_an_answer(make_ts: Any,
                                                                 db_path: Any) -> None:
    from langgraph.errors import GraphRecursionError

    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    # 9 graph steps: 5 model turns and 4 tool runs; the 5th turn's call never runs
    with pytest.raises(GraphRecursionError):
        run(ts, react_agent(loop_forever=True), "clean", recursion_limit=9)
    assert ts.flush(timeout=60)
    (rec,) = records(db_path)
    got = scores(db_path, rec["record_id"])
    assert got["agent_no_answer"]["value"] == 1.0
    assert "GraphRecursionError" in got["agent_no_answer"]["explanation"]
    assert got["repeated_tool_calls"]["value"] == 1.0
    assert "loop: search called in" in got["repeated_tool_calls"]["explanation"]
    # the tools answered every call but the last, which the step limit cut before it ran
    assert got["tool_error_rate"]["value"] == pytest.approx(1 / 5)
    assert "#5 search (step 5)" in got["tool_error_rate"]["explanation"]


def test_a_plain_chain_is_skipped_not_scored(make_ts: Any, db_path: Any) -> None:
    from langchain_core.prompts import ChatPromptTemplate

    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    model = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)]))
    chain = ChatPromptTemplate.from_messages([("user", "{q}")]) | model
    chain.invoke({"q": "clean"}, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(timeout=60)
    (rec,) = records(db_path)
    assert scores(db_path, rec["record_id"]) == {}
    jobs = rows(db_path, "SELECT metric, status, reason FROM jobs WHERE record_id = ?",
                rec["record_id"])
    assert sorted(j["metric"] for j in jobs) == sorted(CHECKS)
    assert {(j["status"], j["reason"]) for j in jobs} == {("skipped", "record has no agent")}


def test_show_marks_the_failed_checks_on_the_steps(make_ts: Any, db_path: Any,
                                                  tmp_path: Any) -> None:
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    run(ts, react_agent(), "bad")
    assert ts.flush(timeout=60)
    (rec,) = records(db_path)
    res = CliRunner().invoke(main, ["show", "--db", str(db_path), rec["trace_id"]])
    assert res.exit_code == 0, res.output
    out = res.output
    assert re.search(r"failed checks: .*unknown_tool_calls", out.replace("\n    ", " "))
    steps = out.split("  step ")
    # step 2 repeats step 1, step 3 calls an unknown tool, step 4 has a bad argument
    assert "REPEATS call #1" in steps[2]
    assert "UNKNOWN TOOL" in steps[3] and "web_browse" in steps[3]
    assert "INVALID ARGUMENTS: $.query: expected string" in steps[4]
    assert "<<" not in steps[1]  # the first, good call is not marked
    js = CliRunner().invoke(main, ["show", "--db", str(db_path), rec["trace_id"], "--json"])
    assert js.exit_code == 0, js.output
    (item,) = json.loads(js.output)["records"]  # the JSON view carries the agent part too
    assert [c["name"] for c in item["agent"]["calls"]] == ["search", "search", "web_browse",
                                                           "search"]
    assert item["agent"]["tools"][0]["schema"]["required"] == ["query"]
    # the HTML report's record card shows the same steps and marks
    out_html = tmp_path / "report.html"
    res = CliRunner().invoke(main, ["report", "--db", str(db_path), "--html", str(out_html)])
    assert res.exit_code == 0, res.output
    page = out_html.read_text()
    agent_block = page.split('<details class="agent" open>', 1)[1].split("</details>", 1)[0]
    assert "failed: " in agent_block and "unknown_tool_calls" in agent_block
    assert "UNKNOWN TOOL (not offered)" in agent_block and "web_browse" in agent_block
    assert "REPEATS call #1" in agent_block


def test_compare_by_release_on_agent_scores(make_ts: Any, db_path: Any) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    n = 12
    ts1, _ = make_ts(metrics=CHECKS, sample_rate=1.0, release="v1",
                     tracer_provider=TracerProvider())
    for i in range(n):
        run(ts1, react_agent(), "clean" if i % 2 else "clean, then warranty")
    assert ts1.flush(timeout=120)
    ts1.shutdown(timeout=30)
    ts2, _ = make_ts(metrics=CHECKS, sample_rate=1.0, release="v2",
                     tracer_provider=TracerProvider())
    for i in range(n):
        run(ts2, react_agent(), "bad" if i % 2 else "bad, then warranty")
    assert ts2.flush(timeout=120)
    res = CliRunner().invoke(main, ["compare", "--db", str(db_path), "--by", "release",
                                    "--current", "v2", "--baseline", "v1", "--min-n", "10",
                                    "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    got = data["scores"]
    assert data["current_records"] == n and data["baseline_records"] == n
    for name in ("unknown_tool_calls", "invalid_tool_arguments", "repeated_tool_calls",
                 "tool_error_rate", "agent_steps", "agent_model_calls"):
        assert got[name]["verdict"] == "regressed", (name, json.dumps(got[name]))
        assert name in data["regressed"]
    assert got["agent_no_answer"]["verdict"] != "regressed"
    text = CliRunner().invoke(main, ["compare", "--db", str(db_path), "--by", "release",
                                     "--min-n", "10"]).output
    assert "unknown_tool_calls" in text and "regressed" in text


def test_monitors_and_the_deploy_gate_work_on_agent_scores(make_ts: Any, db_path: Any,
                                                          tmp_path: Any) -> None:
    """A monitor on the share of runs that called an unknown tool stays OK on a clean
    release's agent and alerts when the next release's agent starts doing it; ``check
    --compare`` gates the deployment on it."""
    import time

    from opentelemetry.sdk.trace import TracerProvider

    from tracescore.monitor.config import monitors_from_objects
    from tracescore.monitor.evaluate import GRACE_S, Evaluator

    mons = monitors_from_objects({"monitor": [{
        "name": "unknown-tools", "score": "unknown_tool_calls", "statistic": "rate",
        "window": "1d", "threshold": 0.10, "min_n": 10}]})
    n = 20
    ts1, _ = make_ts(metrics=CHECKS, sample_rate=1.0, release="v1",
                     tracer_provider=TracerProvider())
    for _ in range(n):
        run(ts1, react_agent(), "clean")
    assert ts1.flush(timeout=120)
    ts1.shutdown(timeout=30)
    # checked once the scores are past the evaluator's grace period (late writes settle)
    ev = Evaluator(str(db_path), mons, clock=lambda: time.time() + GRACE_S + 1)
    try:
        (e,) = ev.run_once()
        assert e.state == "OK" and e.n == n, e.summary
        ts2, _ = make_ts(metrics=CHECKS, sample_rate=1.0, release="v2",
                         tracer_provider=TracerProvider())
        for _ in range(n):
            run(ts2, react_agent(), "bad")
        assert ts2.flush(timeout=120)
        (e,) = ev.run_once()
        assert e.state == "ALERT" and e.changed and e.previous == "OK", e.summary
    finally:
        ev.close()
    mon_file = tmp_path / "none.toml"
    mon_file.write_text("")
    gate = CliRunner().invoke(main, ["check", "--db", str(db_path), "--monitors",
                                     str(mon_file), "--compare", "release=v2:v1",
                                     "--min-n", "10"])
    assert gate.exit_code == 1 and "unknown_tool_calls" in gate.output, gate.output


class UnparsableArgumentsModel(ScriptedChatModel):
    """A model whose tool call's arguments are not JSON (LangChain's ``invalid_tool_calls``):
    the graph has no call to run and ends without an answer."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content="", invalid_tool_calls=[{"name": "search", "args": '{"query": "bat',
                                             "id": "call-x", "error": "bad JSON",
                                             "type": "invalid_tool_call"}]))])


def test_unparsable_arguments_are_a_failed_call_and_no_answer(make_ts: Any,
                                                              db_path: Any) -> None:
    ts, _ = make_ts(metrics=CHECKS, sample_rate=1.0)
    run(ts, create_react_agent(UnparsableArgumentsModel(), [search]), "clean")
    assert ts.flush(timeout=60)
    (rec,) = records(db_path)
    agent = json.loads(rows(db_path, "SELECT agent FROM records")[0]["agent"])
    (c,) = agent["calls"]
    assert (c["name"], c["ok"], c["error"], c["arguments"]) == (
        "search", False, "bad JSON", '{"query": "bat')
    got = {k: v["value"] for k, v in scores(db_path, rec["record_id"]).items()}
    assert got["tool_error_rate"] == 1.0 and got["agent_no_answer"] == 1.0
    # raw text, not an object: the schema check reports it
    assert got["invalid_tool_arguments"] == 1.0
