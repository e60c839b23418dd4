"""Tying ground truth and feedback to a captured run: ``ts.run()`` scopes, app run ids,
ground truth in the run's metadata, and held root spans that wait for the jobs they cause."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from helpers import jobs, records, rows
from tracescore.examples.langchain_rag import build_chain

from tracescore import attributes as A
from tracescore.testing import ScriptedMetric, carriers, rag_roots

Q = "What battery capacity does the Cargo have?"
REF = "The Cargo has a 750 Wh battery."


def wait_for(cond: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def ref_metric() -> ScriptedMetric:
    return ScriptedMetric(lambda r: 1.0 if r.ground_truths == (REF,) else 0.0, name="ref",
                          requires=frozenset({"answer", "ground_truths"}))


def test_ground_truth_while_held_waits_for_its_jobs(make_ts: Any, db_path: Any) -> None:
    """add_ground_truth right after invoke: the reference job it schedules is counted by the
    held root span, so the span goes out once, with every score, and no carrier span."""
    gate = threading.Event()
    slow = ScriptedMetric(lambda r: 0.5, name="slow", gate=gate)
    ts, exporter = make_ts(metrics=[slow, ref_metric()], hold_seconds=30, concurrency=2)
    run_id = uuid.uuid4()
    try:
        build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()],
                                        "run_id": run_id})
        ts.add_ground_truth(run_id, [REF])  # the app's own run id, before the span is released
        [rec] = wait_for_records(db_path)
        wait_for(lambda: jobs(db_path, rec["record_id"]).get("ref", {}).get("status") == "done")
        assert rag_roots(exporter) == []  # the finished reference job did not release it
        assert ts.stats()["spans_held"] == 1
    finally:
        gate.set()
    assert ts.flush(20)
    [root] = rag_roots(exporter)
    assert root.attributes[A.score_attribute("slow")] == 0.5
    assert root.attributes[A.score_attribute("ref")] == 1.0
    assert carriers(exporter) == []


def wait_for_records(db: Any) -> list[dict[str, Any]]:
    wait_for(lambda: db.exists() and bool(rows(db, "SELECT record_id FROM records")))
    return records(db)


def test_run_scope_carries_ground_truth_and_tells_the_trace_id(make_ts: Any,
                                                               db_path: Any) -> None:
    ts, exporter = make_ts(metrics=[ref_metric()], hold_seconds=30)
    with ts.run(ground_truths=[REF], metadata={"experiment": "b"}, session_id="s-1",
                user_id="u-1") as run:
        assert run.trace_id is None
        build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(20)
    [rec] = records(db_path)
    assert run.trace_id == rec["trace_id"] and len(run.trace_id) == 32
    assert rec["ground_truths"] == [REF]
    assert rec["metadata"] == {"experiment": "b"}
    assert (rec["session_id"], rec["user_id"]) == ("s-1", "u-1")
    [root] = rag_roots(exporter)
    assert root.attributes[A.score_attribute("ref")] == 1.0  # scored on the first pass
    assert root.attributes[A.SESSION_ID] == "s-1"
    ts.add_feedback(run.trace_id, "down", comment="wrong bike")
    assert ts.flush(20)
    [fb] = rows(db_path, "SELECT * FROM feedback")
    assert (fb["trace_id"], fb["value"], fb["comment"]) == (run.trace_id, 0.0, "wrong bike")


def test_scopes_of_concurrent_requests_do_not_mix(make_ts: Any, db_path: Any) -> None:
    ts, _ = make_ts(metrics=[ref_metric()], hold_seconds=30)
    chain = build_chain()
    barrier = threading.Barrier(2)
    seen: dict[str, str | None] = {}

    def request(name: str) -> None:
        with ts.run(ground_truths=[name]) as run:
            barrier.wait(5)
            chain.invoke(Q, config={"callbacks": [ts.langchain_handler()]})
        seen[name] = run.trace_id

    threads = [threading.Thread(target=request, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ts.flush(20)
    by_trace = {r["trace_id"]: r["ground_truths"] for r in records(db_path)}
    assert by_trace == {seen["a"]: ["a"], seen["b"]: ["b"]}


def test_ground_truth_in_run_metadata(make_ts: Any, db_path: Any) -> None:
    ts, exporter = make_ts(metrics=[ref_metric()], hold_seconds=30)
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()],
                                    "metadata": {"ground_truth": REF, "tenant": "t"}})
    assert ts.flush(20)
    [rec] = records(db_path)
    assert rec["ground_truths"] == [REF]
    assert rec["metadata"] == {"tenant": "t"}
    [root] = rag_roots(exporter)
    assert root.attributes[A.score_attribute("ref")] == 1.0


def test_run_id_forms_and_errors(make_ts: Any, db_path: Any) -> None:
    ts, _ = make_ts(metrics=[ref_metric()], hold_seconds=30)
    run_id = uuid.uuid4()
    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()], "run_id": run_id})
    [rec] = wait_for_records(db_path)
    for form in (run_id, str(run_id), run_id.hex):
        assert ts.trace_id_of(form) == rec["trace_id"]
    ts.add_feedback(str(run_id), True)
    with pytest.raises(ValueError, match="unknown run id"):
        ts.add_ground_truth(uuid.uuid4(), [REF])
    with pytest.raises(ValueError, match="32 hex"):
        ts.add_ground_truth("abc", [REF])
    with pytest.raises(TypeError):
        with ts.run(ground_truths="not a list"):
            pass
    assert ts.flush(20)
    assert [r["trace_id"] for r in rows(db_path, "SELECT * FROM feedback")] == [rec["trace_id"]]


def test_quick_start_with_a_sample_rate(make_ts: Any, db_path: Any) -> None:
    """The README's quick start at sample_rate=0.1: every request is stored with its ground
    truth; the reference metric scores the sampled ones; thumbs down forces the rest (their
    text is kept for the hour of ``keep_full_text``)."""
    ts, _ = make_ts(metrics=[ref_metric()], hold_seconds=30, sample_rate=0.1,
                    keep_full_text="1h")
    chain = build_chain()
    handler = ts.langchain_handler()
    trace_ids = []
    for _ in range(30):
        with ts.run() as run:
            chain.invoke(Q, config={"callbacks": [handler]})
        ts.add_ground_truth(run.trace_id, [REF])
        trace_ids.append(run.trace_id)
    assert ts.flush(20)
    recs = {r["trace_id"]: r for r in records(db_path)}
    assert set(recs) == set(trace_ids)
    assert all(r["ground_truths"] == [REF] for r in recs.values())
    scored = {r["trace_id"] for r in rows(db_path, "SELECT r.trace_id FROM scores s "
                                                   "JOIN records r USING (record_id)")}
    assert scored == {t for t, r in recs.items() if r["sample_u"] < 0.1}
    unsampled = next(t for t, r in recs.items() if r["sample_u"] >= 0.1)
    ts.add_feedback(unsampled, "down")
    assert ts.flush(20)
    [(value,)] = [(r["value"],) for r in rows(
        db_path, "SELECT s.value FROM scores s JOIN records r USING (record_id) "
                 "WHERE r.trace_id = ?", unsampled)]
    assert value == 1.0
