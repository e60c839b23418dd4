"""What an unsampled request leaves to the writer (issue 33, session 14): the agent's tool-call
bookkeeping (only a record built in full keeps it) and the root span's input/output text
(built when the span is, by the writer for a root no step outlives).

The spans must be what they were: every span of a request built off the request path is
compared, attribute by attribute, with the same request's spans made through the SDK's own
``start_span`` (a span processor that acts at start turns the pending path off); the rows
with the ones built eagerly. Real LangChain objects (the example chain, a ``create_agent``
graph, LangGraph's two-step RAG graph), real SQLite, the real OTel SDK.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
import tracescore.integrations.langchain.agent as G
from helpers import records, wait_for
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_capture_agents import ANSWER, artifact_agent, two_step_graph
from test_request_path_deferred import _row
from tracescore.examples.langchain_rag import build_chain
from tracescore.integrations.langchain.runs import _Root

from tracescore import attributes as A
from tracescore.sampling import FORCE_SAMPLE_KEY
from tracescore.testing import rag_roots

Q = "How long does a test ride last?"
AGENT_Q = next(iter(ANSWER))
#: Values that differ between two runs of one request: ids the fake models and the
#: pipeline make (tool-call ids, LangChain run ids, trace and span ids in the record id).
_VOLATILE = re.compile(r"(call_|lc_run--|run-)[0-9a-zA-Z-]+|[0-9a-f]{32}-[0-9a-f]{16}")


class _ActsAtStart(SimpleSpanProcessor):
    """A processor with an ``on_start`` of its own: the adapters then make every span through
    the SDK (``start_span``), as before the pending paths existed."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        super().on_start(span, parent_context)


def _invoke(app: str, h: Any, metadata: dict[str, Any] | None = None) -> None:
    config = {"callbacks": [h], "metadata": {"session_id": "s-1", **(metadata or {})}}
    if app == "chain":
        build_chain().invoke(Q, config=config)
    elif app == "agent":
        artifact_agent().invoke({"messages": [("user", AGENT_Q)]}, config=config)
    else:
        two_step_graph().invoke({"question": AGENT_Q}, config=config)


def _clean(v: Any) -> Any:
    if isinstance(v, str):
        return _VOLATILE.sub("<id>", v)
    if isinstance(v, tuple):
        return tuple(_clean(x) for x in v)
    return v


def _spans(exporter: Any) -> list[tuple[Any, ...]]:
    """Each span as (name, parent's name, status, attributes) without scores and ids, in an
    order of their own (a chain's parallel branches start in either order)."""
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s.name for s in spans}
    return sorted(((s.name, by_id.get(s.parent.span_id) if s.parent else None,
                    s.status.status_code, s.status.description,
                    {k: _clean(v) for k, v in s.attributes.items()
                     if not k.startswith((A.SCORE_PREFIX, "gen_ai.evaluation"))
                     and k != A.SCORES_LATE})
                   for s in spans), key=repr)


@pytest.mark.parametrize("rate", [1.0, 0.0])
@pytest.mark.parametrize("app", ["chain", "agent", "graph"])
def test_spans_built_off_the_request_path_are_the_sdks(make_ts: Any, tmp_path: Any, app: str,
                                                        rate: float) -> None:
    """Sampled (root held for its scores) and unsampled: the same spans, attribute by
    attribute, whether built pending (the root and its steps by the writer) or by the SDK."""
    got = {}
    for path in ("pending", "sdk"):
        kw: dict[str, Any] = {"sample_rate": rate, "db": tmp_path / f"{path}.db"}
        if path == "sdk":
            exp = InMemorySpanExporter()
            ts, _ = make_ts(span_processor=_ActsAtStart(exp), **kw)
        else:
            ts, exp = make_ts(**kw)
        h = ts.langchain_handler()
        _invoke(app, h)
        assert ts.flush(60)
        wait_for(lambda e=exp: len(rag_roots(e)) == 1)
        got[path] = _spans(exp)
        (root,) = rag_roots(exp)
        assert root.attributes[A.SAMPLED] is (rate == 1.0)
    assert got["pending"] == got["sdk"]
    assert len(got["pending"]) >= 3
    root_attrs = next(s[4] for s in got["pending"] if s[4].get(A.RAG_ROOT))
    assert root_attrs[A.INPUT_VALUE] and root_attrs[A.OUTPUT_VALUE]
    assert root_attrs[A.SESSION_ID] == "s-1"


def test_an_unsampled_agent_leaves_its_tool_calls_to_a_full_build(make_ts: Any, tmp_path: Any,
                                                                  monkeypatch: Any) -> None:
    """Stored compact, the record keeps no agent part: the model calls' tool-call bookkeeping
    never runs (on any thread). A full record expected from the start (sampled; every text
    kept) has it done as the request runs, and the rows are the same."""
    calls: list[str] = []
    real = G.model_start

    def model_start(*a: Any) -> None:
        calls.append(threading.current_thread().name)
        real(*a)

    monkeypatch.setattr(G, "model_start", model_start)
    ts, _ = make_ts(sample_rate=0.0, db=tmp_path / "compact.db")
    _invoke("agent", ts.langchain_handler())
    assert ts.flush(60)
    (rec,) = records(ts.db_path)
    assert rec["agent"] is None and rec["text_kept"] == 0 and rec["answer"] is None
    assert calls == []
    me = threading.current_thread().name
    rows = {}
    for name, kw in {"sampled": {"sample_rate": 1.0},
                     "kept": {"sample_rate": 0.0, "keep_full_text": True}}.items():
        ts, _ = make_ts(db=tmp_path / f"{name}.db", **kw)
        _invoke("agent", ts.langchain_handler())
        assert ts.flush(60)
        rows[name] = _row(ts.db_path)
    assert calls == [me] * 4  # two model calls per request
    assert rows["sampled"] == rows["kept"]
    (call,) = rows["kept"]["agent"]["calls"]
    assert call["name"] == "retrieve" and call["ok"] and call["result"]


def test_a_forced_unsampled_agent_record_has_its_tool_calls(make_ts: Any, tmp_path: Any
                                                            ) -> None:
    """A request its trace fraction leaves unsampled but a rule forces (the metadata flag;
    decided on the request's thread) is built in full there: the logged agent events are
    applied first, and the row is the sampled one's."""
    rows = {}
    for rate in (1.0, 0.0):
        ts, _ = make_ts(sample_rate=rate, db=tmp_path / f"r{rate}.db")
        _invoke("agent", ts.langchain_handler(), {FORCE_SAMPLE_KEY: True})
        assert ts.flush(60)
        rows[rate] = _row(ts.db_path)
        (rec,) = records(ts.db_path)
        assert rec["text_kept"] == 1
    assert rows[0.0] == rows[1.0]
    assert rows[0.0]["agent"]["calls"][0]["name"] == "retrieve"


def test_the_agent_log_stays_bounded() -> None:
    """Past :data:`G.MAX_LOG` events the log is applied and later events apply at once, in
    the order they came."""
    root = _Root()
    root.agent_log = []
    seen: list[int] = []
    for i in range(G.MAX_LOG + 10):
        G.note(root, seen.append, i)
    assert root.agent_log is None and seen == list(range(G.MAX_LOG + 10))
    root.agent_log = []
    G.note(root, seen.append, -1)
    assert seen[-1] != -1
    G.settle(root)
    assert seen[-1] == -1 and root.agent_log is None


def test_the_pending_roots_text_is_built_when_the_span_is(make_ts: Any) -> None:
    """The root's input and output text (JSON of the graph's state for an agent) is made
    when the root span is built — by the writer when no step outlives the root — through
    the app's redaction: an unsampled request redacts nothing on its own thread."""
    seen: list[str] = []

    def redact(text: str) -> str:
        seen.append(threading.current_thread().name)
        return text.replace("Cargo", "[product]")

    ts, exp = make_ts(sample_rate=0.0, redact=redact)
    h = ts.langchain_handler()
    _invoke("agent", h)
    assert ts.flush(60)
    (root,) = rag_roots(exp)
    assert "[product]" in root.attributes[A.INPUT_VALUE]
    assert "Cargo" not in root.attributes[A.INPUT_VALUE]
    assert seen and threading.current_thread().name not in seen


def test_the_roots_text_is_the_requests_though_the_app_appends_to_its_messages(
        make_ts: Any) -> None:
    """A chat app appends its next turn to the list it passed in (or got back) as soon as the
    request returns; the root span, built by the writer afterwards, shows the request's
    messages. The writer is kept busy until the app has appended."""
    ts, exp = make_ts(sample_rate=0.0)
    gate = threading.Event()
    assert ts.defer(lambda: gate.wait(30))
    messages: list[Any] = [("user", AGENT_Q)]
    state = {"messages": messages}
    artifact_agent().invoke(state, config={"callbacks": [ts.langchain_handler()]})
    messages.append(("user", "And the Cruiser?"))
    gate.set()
    assert ts.flush(60)
    (root,) = rag_roots(exp)
    assert AGENT_Q in root.attributes[A.INPUT_VALUE]
    assert "Cruiser" not in root.attributes[A.INPUT_VALUE]
    # the query, found by the writer for the compact record (its length and hash)
    (rec,) = records(ts.db_path)
    assert rec["text_kept"] == 0 and rec["query_chars"] == len(AGENT_Q)


def test_a_sampled_roots_span_wakes_the_writer_it_missed(make_ts: Any, monkeypatch: Any
                                                         ) -> None:
    """Scores on the span: the writer, woken by a sampled record, may write it (and score it
    on write) before the request's thread has handed over the root span's build (a thread
    descheduled between the two, on a loaded machine). The span's build then wakes the writer
    itself instead of waiting for the next batch (here: never, the interval is 60 s)."""
    ts, exp = make_ts(sample_rate=1.0, metrics=["token_f1"], hold_seconds=3600)
    config: dict[str, Any] = {"metadata": {"ground_truth": "45 minutes"}}
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()], **config})  # warm
    assert ts.flush(60)
    exp.clear()
    ts.queue.interval_s = 60.0
    assert ts.flush(60)  # (the writer now waits up to 60 s unless woken)
    h = ts.langchain_handler()
    emit = type(h)._emit_record

    def descheduled(self: Any, *a: Any) -> bool:
        held = emit(self, *a)
        wait_for(lambda: ts.queue.depth == 0)  # the writer took the record first
        return held

    monkeypatch.setattr(type(h), "_emit_record", descheduled)
    build_chain().invoke(Q, config={"callbacks": [h], **config})
    wait_for(lambda: any(k.startswith(A.SCORE_PREFIX) for r in rag_roots(exp)
                         for k in r.attributes), timeout=20)
