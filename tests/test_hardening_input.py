"""Issue 11 §1: what the public API accepts is validated; what fails later is counted."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import records, rows

from tracescore import Context, RagRecord
from tracescore._internal.validate import CUT_MARK, MAX_METADATA_DEPTH, TRUNCATED_KEY
from tracescore.testing import ScriptedMetric

TRACE = "0123456789abcdef0123456789ABCDEF"
SPAN = "89ABCDEF01234567"


def deep(n: int) -> dict[str, Any]:
    d: dict[str, Any] = {"leaf": 1}
    for _ in range(n):
        d = {"k": d}
    return d


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"contexts": [Context(text=None)]}, TypeError, r"contexts\[0\]\.text must be a str"),  # type: ignore[arg-type]
    ({"contexts": [Context(text=123)]}, TypeError, r"contexts\[0\]\.text must be a str"),  # type: ignore[arg-type]
    ({"contexts": None}, TypeError, "contexts must be a sequence"),
    ({"trace_id": 12345}, TypeError, "trace_id must be a str of 32 hex"),
    ({"trace_id": "xyz"}, ValueError, "trace_id must be 32 hex characters"),
    ({"span_id": "zz"}, ValueError, "span_id must be 16 hex characters"),
    ({"metadata": [1, 2]}, TypeError, "metadata must be a mapping"),
    ({"metadata": "abc"}, TypeError, "metadata must be a mapping"),
])
def test_log_record_rejects_bad_input_clearly(make_ts: Any, kwargs: dict[str, Any],
                                              error: type[Exception], match: str) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")])
    with pytest.raises(error, match=match):
        ts.log_record(query="q", answer="a", **kwargs)
    assert ts.flush(10)
    assert records(ts.db_path) == []  # rejected, so nothing half-accepted either


def test_deep_and_big_metadata_is_cut_and_marked_never_lost(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")])
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    recs = [
        ts.log_record(query="q1", answer="a", metadata=deep(10_000)),
        ts.log_record(query="q2", answer="a", metadata={"big": list(range(50_000))}),
        ts.log_record(query="q3", answer="a", metadata=cyclic),
        ts.log_record(query="q4", answer="a",
                      contexts=[Context("doc", metadata=deep(5_000))]),
    ]
    assert ts.flush(20)
    stored = {r["record_id"]: r for r in records(ts.db_path)}
    assert set(stored) == {r.record_id for r in recs}
    md1 = stored[recs[0].record_id]["metadata"]
    assert md1[TRUNCATED_KEY] == ["depth"]
    depth, node = 0, md1
    while isinstance(node, dict) and "k" in node:
        node, depth = node["k"], depth + 1
    assert node == CUT_MARK and depth == MAX_METADATA_DEPTH
    md2 = stored[recs[1].record_id]["metadata"]
    assert md2[TRUNCATED_KEY] == ["items"] and md2["big"][-1] == CUT_MARK
    assert "self" in stored[recs[2].record_id]["metadata"]
    ctx = stored[recs[3].record_id]["contexts"][0]
    assert ctx["metadata"][TRUNCATED_KEY] == ["depth"]
    s = ts.stats()
    assert s["lost"] == {} and s["dropped"] == 0
    assert len(rows(ts.db_path, "SELECT * FROM scores WHERE status='ok'")) == 4


def test_ids_are_normalised_and_upper_case_ids_match_feedback(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")])
    rec = ts.log_record(query="q", answer="a", trace_id=TRACE, span_id=SPAN)
    assert rec.trace_id == TRACE.lower() and rec.span_id == SPAN.lower()
    ts.add_ground_truth(TRACE, ["gt"])
    ts.add_feedback(TRACE, "down", comment="meh")
    assert ts.flush(10)
    [row] = records(ts.db_path)
    assert row["trace_id"] == TRACE.lower() and row["ground_truths"] == ["gt"]
    [fb] = rows(ts.db_path, "SELECT * FROM feedback")
    assert fb["trace_id"] == TRACE.lower() and fb["value"] == 0.0


def test_records_built_elsewhere_are_counted_by_reason_not_lost_silently(make_ts: Any) -> None:
    """Records that bypass log_record (framework adapters, direct submit) and cannot be
    stored are counted per reason in stats() and in the database's counters."""
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")])
    good = RagRecord(trace_id=TRACE, span_id=SPAN, query="q", answer="a",
                     metadata=deep(10_000))
    bad = [
        RagRecord(trace_id="xyz", span_id=SPAN, query="q"),
        RagRecord(trace_id=12345, span_id=SPAN, query="q"),  # type: ignore[arg-type]
        RagRecord(trace_id="1" * 32, span_id="2" * 16, query="q",
                  contexts=(Context(text=None),)),  # type: ignore[arg-type]
        RagRecord(trace_id="3" * 32, span_id="4" * 16, query="q", metadata=[1, 2]),  # type: ignore[arg-type]
    ]
    for r in [good, *bad]:
        ts.submit(r, hold_span=False)
    assert ts.flush(10)
    assert [r["record_id"] for r in records(ts.db_path)] == [f"{TRACE.lower()}-{SPAN.lower()}"]
    lost = ts.stats()["lost"]
    assert lost == {"invalid_id": 2, "invalid_context": 1, "invalid_metadata": 1}
    # persisted, so the report (another process) sees them too
    for _ in range(100):
        counters = dict(sqlite3.connect(ts.db_path).execute(
            "SELECT name, value FROM counters WHERE name LIKE 'lost.%'").fetchall())
        if counters.get("lost.invalid_id"):
            break
        ts.log_record(query="nudge", answer="a")  # counters ride on the next batch
        assert ts.flush(10)
    assert counters == {"lost.invalid_id": 2, "lost.invalid_context": 1,
                        "lost.invalid_metadata": 1}
    import json

    from helpers import run_cli

    out = run_cli("report", "--db", ts.db_path, "--json")
    assert json.loads(out.output)["lost"] == {"invalid_id": 2, "invalid_context": 1,
                                              "invalid_metadata": 1}
    assert "lost (all time): 1 invalid_context, 2 invalid_id" in " ".join(
        run_cli("report", "--db", ts.db_path).output.split())


def test_langchain_deeply_nested_metadata_is_kept_cut(make_ts: Any) -> None:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    class Deep(BaseRetriever):
        def _get_relevant_documents(self, query: str, *,
                                    run_manager: CallbackManagerForRetrieverRun
                                    ) -> list[Document]:
            return [Document(page_content="doc", metadata=deep(5_000))]

    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")])
    chain = Deep() | RunnableLambda(lambda docs: "answer")
    chain.invoke("q", config={"callbacks": [ts.langchain_handler()],
                              "metadata": {"chain": deep(5_000)}})
    assert ts.flush(10)
    [row] = records(ts.db_path)
    assert row["metadata"][TRUNCATED_KEY] == ["depth"]
    assert row["contexts"][0]["metadata"][TRUNCATED_KEY] == ["depth"]
    assert ts.stats()["lost"] == {}


def test_a_malformed_stored_id_does_not_block_redelivery(make_ts: Any, db_path: Path) -> None:
    """Scores of a record whose stored id is not hex must not stop the sweep for others."""
    from tracescore.testing import carriers

    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")])
    ts.log_record(query="q", answer="a")
    assert ts.flush(10)
    ts.shutdown(10)
    con = sqlite3.connect(db_path)
    # a record left by an older version with a malformed id, and an ordinary undelivered one
    con.execute("UPDATE scores SET delivery=NULL")
    con.execute("INSERT INTO scores(record_id, trace_id, name, metric, metric_version, value,"
                " status, created_at) VALUES ('zz-yy', 'zz', 'm', 'm', '1', 1.0, 'ok', 0)")
    con.commit()
    con.close()
    ts2, exporter = make_ts(metrics=[ScriptedMetric(name="m")])
    assert ts2.flush(10)
    assert len(carriers(exporter)) == 1  # the good record's score went out
    assert ts2.worker.bad_ids == 1
    [bad] = rows(db_path, "SELECT delivery FROM scores WHERE record_id='zz-yy'")
    assert bad["delivery"] == "invalid_id"
