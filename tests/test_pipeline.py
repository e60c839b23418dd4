"""Queue → store → score → attach, on a real TracerProvider and a real database: every test
that takes ``db_path`` runs on SQLite and on PostgreSQL (the ``db`` fixture)."""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import is_pg, jobs, records, rows, scores

import tracescore
from tracescore import attributes as A
from tracescore.cli import main
from tracescore.record import Context
from tracescore.score import Score
from tracescore.testing import ScriptedMetric, carriers, rag_roots

Q = "What battery capacity does the Cargo have?"


@pytest.fixture
def db_path(db: str) -> str:
    """This module's database: a SQLite path, then a PostgreSQL URL (conftest ``db``)."""
    return db


def score_names_on_spans(exporter: Any) -> Counter[str]:
    c: Counter[str] = Counter()
    for s in exporter.get_finished_spans():
        for k in s.attributes:
            if k.startswith(A.SCORE_PREFIX):
                c[k[len(A.SCORE_PREFIX):]] += 1
            elif k.endswith(".evaluation.name") and s.attributes[k] and not \
                    s.attributes.get(A.score_attribute(s.attributes[k])):
                c["error:" + s.attributes[k]] += 1
    return c


def test_root_span_held_until_scores_arrive(make_ts):
    gate = threading.Event()
    m = ScriptedMetric(lambda r: 0.25, name="slow", gate=gate)
    ts, exporter = make_ts(metrics=[m], hold_seconds=30)
    from tracescore.examples.langchain_rag import build_chain

    try:
        build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
        time.sleep(0.3)
        assert rag_roots(exporter) == []  # the root is held
        assert len(exporter.get_finished_spans()) >= 5  # children went out at once
    finally:
        gate.set()
    assert ts.flush(10)
    [root] = rag_roots(exporter)
    assert root.attributes[A.score_attribute("slow")] == 0.25
    assert root.attributes[A.evaluation(0, "name")] == "slow"
    assert root.attributes[A.evaluation(0, "label")] == "fail"
    assert carriers(exporter) == []


def test_late_scores_go_on_a_linked_carrier_exactly_once(make_ts, db_path):
    gate = threading.Event()
    fast = ScriptedMetric(lambda r: 0.9, name="fast")
    slow = ScriptedMetric(lambda r: 0.1, name="slow", gate=gate)
    # hold long enough for "fast" to be scored on a loaded machine
    ts, exporter = make_ts(metrics=[fast, slow], hold_seconds=2.0, concurrency=2)
    from tracescore.examples.langchain_rag import build_chain

    try:
        build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
        deadline = time.time() + 15
        while not rag_roots(exporter) and time.time() < deadline:
            time.sleep(0.02)
        [root] = rag_roots(exporter)  # released at the deadline with what it had
        assert root.attributes[A.score_attribute("fast")] == 0.9
        assert A.score_attribute("slow") not in root.attributes
        assert root.attributes[A.SCORES_LATE] == 1
    finally:
        gate.set()
    assert ts.flush(10)
    [carrier] = carriers(exporter)
    assert carrier.attributes[A.score_attribute("slow")] == 0.1
    assert carrier.context.trace_id == root.context.trace_id
    assert carrier.parent.span_id == root.context.span_id
    assert [link.context.span_id for link in carrier.links] == [root.context.span_id]
    assert score_names_on_spans(exporter) == Counter({"fast": 1, "slow": 1})
    [rec] = records(db_path)
    s = scores(db_path, rec["record_id"])
    assert s["fast"]["delivery"] == "span" and s["slow"]["delivery"] == "carrier"


def test_every_score_exported_once_under_load(make_ts):
    ts, exporter = make_ts(metrics=[ScriptedMetric(lambda r: len(r.answer) / 100, name="a"),
                                    ScriptedMetric(lambda r: 0.5, name="b")], hold_seconds=5)
    from tracescore.examples.langchain_rag import build_chain, load_questions

    qs = [q["question"] for q in load_questions()]
    build_chain().batch(qs, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(20)
    assert score_names_on_spans(exporter) == Counter({"a": len(qs), "b": len(qs)})
    assert len(rag_roots(exporter)) == len(qs)


def test_error_scores_carry_the_reason_not_zero(make_ts, db_path):
    def boom(r: Any) -> float:
        raise ValueError("judge said no")

    ts, exporter = make_ts(metrics=[
        ScriptedMetric(boom, name="raises"),
        ScriptedMetric(lambda r: math.nan, name="nan"),
        ScriptedMetric(lambda r: "not a score", name="wrongtype"),
    ])
    rec = ts.log_record(query="q", answer="a")
    assert ts.flush(10)
    s = scores(db_path, rec.record_id)
    assert s["raises"]["status"] == "error" and s["raises"]["value"] is None
    assert s["raises"]["error"] == "ValueError: judge said no"
    assert s["nan"]["status"] == "error" and "non-finite" in s["nan"]["error"]
    assert s["wrongtype"]["status"] == "error" and "expected a Score" in s["wrongtype"]["error"]
    assert all(r["status"] == "done" for r in jobs(db_path, rec.record_id).values())


def test_ground_truth_arriving_later_triggers_reference_metrics(make_ts, db_path):
    ref_metric = ScriptedMetric(
        lambda r: float(r.ground_truths[0] in r.answer), name="contains_ref",
        requires=frozenset({"answer", "ground_truths"}))
    ts, _ = make_ts(metrics=[ref_metric, ScriptedMetric(lambda r: 1.0, name="plain")])
    rec = ts.log_record(query="q", answer="the answer is 750 Wh")
    assert ts.flush(10)
    j = jobs(db_path, rec.record_id)
    assert j["contains_ref"]["status"] == "skipped"
    assert j["contains_ref"]["reason"] == "record has no ground_truths"
    assert "contains_ref" not in scores(db_path, rec.record_id)
    ts.add_ground_truth(rec.trace_id, ["750 Wh"])
    assert ts.flush(10)
    s = scores(db_path, rec.record_id)
    assert s["contains_ref"]["value"] == 1.0
    assert s["plain"]["value"] == 1.0
    assert ref_metric.calls == 1
    [row] = records(db_path)
    assert row["ground_truths"] == ["750 Wh"]


def test_sampling_decision_is_stored(make_ts, db_path):
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")], sample_rate=0.5)
    recs = [ts.log_record(query=f"q{i}", answer="a") for i in range(200)]
    assert ts.flush(10)
    stored = {r["record_id"]: r for r in records(db_path)}
    from tracescore.sampling import trace_fraction

    for rec in recs:
        row = stored[rec.record_id]
        assert row["sample_u"] == pytest.approx(trace_fraction(rec.trace_id))
        assert row["sampled"] == int(row["sample_u"] < 0.5)
    n_scored = rows(db_path, "SELECT count(*) AS n FROM scores")[0]["n"]
    assert n_scored == sum(r["sampled"] for r in stored.values())
    assert 60 < n_scored < 140


def test_queue_overflow_drops_and_counts_never_blocks(make_ts, db_path):
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")], max_queue=20)
    if is_pg(db_path):
        import psycopg

        blocker: Any = psycopg.connect(db_path)
        blocker.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")  # the writer waits
    else:
        blocker = sqlite3.connect(db_path, timeout=30)
        blocker.execute("BEGIN IMMEDIATE")  # the writer now waits on the db lock
    try:
        worst = 0.0
        for i in range(500):
            t0 = time.perf_counter()
            ts.log_record(query=f"q{i}", answer="a")
            worst = max(worst, time.perf_counter() - t0)
        assert ts.queue.dropped >= 500 - 20 - 512  # at most one batch was taken by the writer
        assert ts.queue.dropped > 0
        assert worst < 0.5  # never waited on the locked database
    finally:
        blocker.rollback()
        blocker.close()
    assert ts.flush(20)
    stored = len(records(db_path))
    assert stored + ts.queue.dropped == 500
    counters = dict((r["name"], r["value"]) for r in rows(db_path, "SELECT * FROM counters"))
    assert counters["records_dropped"] == ts.queue.dropped
    assert counters["records_seen"] == 500


def test_bad_inputs_clear_errors_at_the_api(make_ts):
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")])
    with pytest.raises(TypeError, match="query must be a str"):
        ts.log_record(query=123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"contexts\[1\] must be a str or Context"):
        ts.log_record(query="q", contexts=["ok", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not a single str"):
        ts.log_record(query="q", contexts="one string")
    with pytest.raises(ValueError, match="32 hex"):
        ts.add_ground_truth("abc", ["x"])


def test_bad_content_is_stored_never_crashes_a_worker(make_ts, db_path):
    seen: list[int] = []
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: seen.append(len(r.contexts[0].text)) or 1.0,
                                            name="m", requires=frozenset({"contexts"}))])
    big = "x" * 1_000_000
    surrogate = "bad \ud800 text"
    huge_md = {f"k{i}": "v" * 100 for i in range(5000)}
    r1 = ts.log_record(query="q", answer="a", contexts=[big])
    r2 = ts.log_record(query=surrogate, answer=surrogate, contexts=[surrogate],
                       metadata=huge_md)
    r3 = ts.log_record(query="q", answer=None, contexts=[Context(text="t", metadata={
        "obj": object(), "nan": float("nan"), "nested": {"set": {1, 2}}})])
    assert ts.flush(20)
    stored = {r["record_id"]: r for r in records(db_path)}
    assert len(stored[r1.record_id]["contexts"][0]["text"]) == 1_000_000
    assert stored[r2.record_id]["query"] == "bad \\ud800 text"
    assert stored[r2.record_id]["metadata"]["tracescore.truncated"] is True
    assert stored[r3.record_id]["contexts"][0]["metadata"]["nan"] == "nan"
    assert sorted(seen) == [1, len("bad \\ud800 text"), 1_000_000]
    for rid in (r1.record_id, r2.record_id, r3.record_id):
        assert scores(db_path, rid)["m"]["status"] == "ok"


def test_init_validates_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        tracescore.init(db=tmp_path / "a.db", metrics=["nope"])
    with pytest.raises(ValueError, match="sample rate"):
        tracescore.init(db=tmp_path / "a.db", metrics=[], sample_rate=2)
    with pytest.raises(ValueError, match="does not exist"):
        tracescore.init(db=tmp_path / "missing" / "a.db", metrics=[])
    with pytest.raises(ValueError, match="not configured"):
        tracescore.init(db=tmp_path / "a.db", metrics=[], sample_rates={"x": 0.1})
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        import os

        if os.geteuid() != 0:  # root can write anywhere
            with pytest.raises(ValueError, match="permission denied"):
                tracescore.init(db=ro / "a.db", metrics=[])
    finally:
        ro.chmod(0o700)
    (tmp_path / "notadb").write_text("this is not sqlite" * 100)
    with pytest.raises(ValueError, match="cannot open"):
        tracescore.init(db=tmp_path / "notadb", metrics=[])


def test_metric_returning_several_scores(make_ts, db_path):
    class Multi(tracescore.Metric):
        name = "multi"
        score_names = ("multi_a", "multi_b")
        requires = frozenset({"answer"})

        def __call__(self, r: Any) -> list[Score]:
            return [self.result(0.2, name="multi_a"), self.result(0.8, name="multi_b")]

    ts, exporter = make_ts(metrics=[Multi()])
    from tracescore.examples.langchain_rag import build_chain

    build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(10)
    [root] = rag_roots(exporter)
    assert root.attributes[A.score_attribute("multi_a")] == 0.2
    assert root.attributes[A.score_attribute("multi_b")] == 0.8


def test_feedback_is_stored_and_negative_feedback_forces_scoring(make_ts, db_path):
    m = ScriptedMetric(lambda r: 0.5, name="m")
    # unsampled records keep their text for a while, so negative feedback can still score
    # them (by default they are stored compact: tests/test_retention.py)
    ts, _ = make_ts(metrics=[m], sample_rate=0.0, keep_full_text="1h")
    up = ts.log_record(query="q1", answer="a")
    down = ts.log_record(query="q2", answer="a")
    assert ts.flush(10)
    assert rows(db_path, "SELECT count(*) AS n FROM scores")[0]["n"] == 0  # nothing sampled
    ts.add_feedback(up.trace_id, "up", comment="great")
    ts.add_feedback(down.trace_id, False, label="wrong answer")
    assert ts.flush(10)
    fb = {r["trace_id"]: r for r in rows(db_path, "SELECT * FROM feedback")}
    assert fb[up.trace_id]["value"] == 1.0 and fb[up.trace_id]["comment"] == "great"
    assert fb[down.trace_id]["value"] == 0.0 and fb[down.trace_id]["label"] == "wrong answer"
    assert list(scores(db_path, down.record_id)) == ["m"]  # forced by the negative feedback
    assert scores(db_path, up.record_id) == {}
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        ts.add_feedback(up.trace_id, 3)
    with pytest.raises(ValueError, match="use a number"):
        ts.add_feedback(up.trace_id, "meh")


def test_scores_whose_export_failed_go_out_at_the_next_start(db_path):
    """The score is dated back past ``redeliver_after_s``: on PostgreSQL a starting process
    redelivers only scores that old (other workers of the fleet may still be exporting theirs).
tracescore's own exporter fails every batch: the score is stored but not delivered (the
    exporter's result, not the hand-off, decides). The next process on the same database
    sends it on a carrier span linked to the scored span, and marks it delivered."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class Refusing(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.FAILURE

    ts = tracescore.init(db=db_path, metrics=[ScriptedMetric(lambda r: 0.25, name="m")],
                         span_exporter=Refusing())
    rec = ts.log_record(query="q", answer="a")
    ts.flush(10)
    assert ts.stats()["scores_export_failed"] == 1
    ts.shutdown(timeout=10)
    assert scores(db_path, rec.record_id)["m"]["delivery"] is None
    assert report_json(db_path)["undelivered_scores"] == 1
    text = CliRunner().invoke(main, ["report", "--db", str(db_path)]).output
    assert "1 score not yet exported" in " ".join(text.split())  # (the summary is wrapped)

    rows(db_path, "UPDATE scores SET created_at = created_at - 1000 RETURNING score_id")
    exporter = InMemorySpanExporter()
    ts2 = tracescore.init(db=db_path, metrics=[ScriptedMetric(lambda r: 0.25, name="m")],
                          span_exporter=exporter)
    try:
        assert ts2.flush(10)
        [carrier] = carriers(exporter)
        assert carrier.attributes[A.score_attribute("m")] == 0.25
        assert carrier.attributes[A.SCORED_SPAN_ID] == rec.span_id
        assert scores(db_path, rec.record_id)["m"]["delivery"] == "carrier"
        assert ts2.stats()["scores_redelivered"] == 1
        assert report_json(db_path)["undelivered_scores"] == 0
    finally:
        ts2.shutdown(timeout=10)


def report_json(db: Any) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["report", "--json", "--db", str(db)])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_flush_sends_the_scores_of_a_record_whose_span_never_ends(make_ts):
    """A record logged with a span id of the caller's is held for that span; if the span never
    ends, ``flush`` (not the 60 s hold deadline) sends its scores, once, on a carrier. A record
    logged without a span id is not held at all."""
    ts, exporter = make_ts(metrics=[ScriptedMetric(lambda r: 0.5, name="m")], hold_seconds=60)
    own = ts.log_record(query="q", answer="a", span_id="00000000000000ab")
    plain = ts.log_record(query="q", answer="a")
    assert ts.flush(10)
    by_span = {c.attributes[A.SCORED_SPAN_ID]: c for c in carriers(exporter)}
    assert sorted(by_span) == sorted([own.span_id, plain.span_id])
    assert all(c.attributes[A.score_attribute("m")] == 0.5 for c in by_span.values())
    assert ts.flush(10)
    assert len(carriers(exporter)) == 2  # once each


# -- issue 19: scores on the span at once, a writer that keeps up, a record's jobs together ---
def test_scores_of_a_sampled_record_arrive_without_waiting_for_a_timer(make_ts):
    """The writer and the scorer are woken by work: with both timers an hour long, a sampled
    record is written, scored and its held root span exported (the old writer waited for a
    full batch or its interval)."""
    ts, exporter = make_ts(metrics=["token_f1"], hold_seconds=3600)
    ts.queue.interval_s = 3600.0
    ts.worker.poll_seconds = 3600.0
    with ts.tracer.start_as_current_span("rag") as span:
        ctx = span.get_span_context()
        ts.log_record(query=Q, answer="60 Ah", contexts=["The Cargo has a 60 Ah battery."],
                      ground_truths=["60 Ah"], trace_id=f"{ctx.trace_id:032x}",
                      span_id=f"{ctx.span_id:016x}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not rag_roots(exporter) and not [
            s for s in exporter.get_finished_spans()
            if A.score_attribute("token_f1") in (s.attributes or {})]:
        time.sleep(0.02)
    [root] = [s for s in exporter.get_finished_spans() if s.context.span_id == ctx.span_id]
    assert root.attributes[A.score_attribute("token_f1")] == 1.0
    assert carriers(exporter) == []


def test_a_records_jobs_are_leased_together(db_path):
    """A lease never splits a record's jobs (its judge jobs then share calls): the limit is
    rounded up to the end of the last record, on both backends."""
    from tracescore.record import RagRecord
    from tracescore.sampling import Decision
    from tracescore.store import NewJob, open_store

    metrics = ("a", "b", "c")
    store = open_store(str(db_path))
    try:
        recs = [RagRecord(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", query="q")
                for i in range(3)]
        store.write_batch([(r, Decision(0.0, metrics)) for r in recs],
                          [NewJob(r.record_id, m, "1") for r in recs for m in metrics])
        first = store.lease_jobs("w", 1, 60.0, list(metrics))
        assert [(j.record_id, j.metric) for j in first] == [
            (recs[0].record_id, m) for m in metrics]
        rest = store.lease_jobs("w", 4, 60.0, list(metrics))
        assert sorted((j.record_id, j.metric) for j in rest) == sorted(
            (r.record_id, m) for r in recs[1:] for m in metrics)
        assert store.lease_jobs("w", 4, 60.0, list(metrics)) == []
        # only the metrics asked for: a pool of one kind never takes the other kind's jobs
        store.write_batch([(RagRecord(trace_id=f"{9:032x}", span_id=f"{9:016x}", query="q"),
                            Decision(0.0, metrics))],
                          [NewJob(f"{9:032x}-{9:016x}", m, "1") for m in metrics])
        assert [j.metric for j in store.lease_jobs("w", 1, 60.0, ["a", "b"])] == ["a", "b"]
    finally:
        store.close()


def test_the_writers_fast_path_stores_what_sanitizing_would():
    """Records the writer stores as they are (already clean) are exactly what
    ``sanitize_record`` would have made of them; anything else takes the full path."""
    from tracescore._internal.validate import is_sanitized as _clean
    from tracescore._internal.validate import sanitize_record
    from tracescore.record import RagRecord

    base = RagRecord(trace_id="ab" * 16, span_id="cd" * 8, query="q", answer="a",
                     contexts=(Context("t", "id", 0.5, {"page": 3}, "retriever"),),
                     ground_truths=("g",), metadata={"k": 1, "s": "x", "f": 1.5, "n": None},
                     tags=("t",))
    variants = [
        base, base.replace(trace_id="AB" * 16), base.replace(span_id="0" * 16),
        base.replace(metadata={"k": {"nested": 1}}), base.replace(metadata={"f": math.nan}),
        base.replace(metadata={"s": "x" * 9000}), base.replace(metadata={1: "int key"}),
        base.replace(contexts=(Context("t", metadata={"a": [1]}),)),
        base.replace(tags=["list"]), base.replace(query=b"bytes"),  # type: ignore[arg-type]
        base.replace(metadata={str(i): i for i in range(2500)}),
    ]
    clean = [r for r in variants if _clean(r)]
    assert clean == [base]
    for r in clean:
        assert sanitize_record(r) == r


def test_compact_contexts_are_formatted_as_the_json_encoder_writes_them():
    """The writer formats a compact row's contexts itself for plain contexts (no id, score or
    source); the text is exactly what the JSON encoder makes of ``compact_contexts``."""
    from tracescore.record import RagRecord
    from tracescore.store.compact import compact_contexts, compact_contexts_json
    from tracescore.store.sqlite import dumps

    contexts = (Context("plain"), Context(""), Context("é \ud800 \U0001f600", id="d\"é\n"),
                Context("x", score=1), Context("y", score=0.25, source="r\ud800"),
                Context("z" * 5000), Context("s", source="retriever"))
    for cut in range(len(contexts) + 1):
        rec = RagRecord(trace_id="ab" * 16, span_id="cd" * 8, contexts=contexts[:cut])
        assert compact_contexts_json(rec, dumps) == dumps(compact_contexts(rec))


def test_bulk_insert_stores_what_executemany_stores(tmp_path):
    """The writer's few-statement insert keeps every value as a row-by-row insert would
    (text with NUL and astral characters, big integers, floats, NULL), and counts only new
    rows (INSERT OR IGNORE)."""
    from tracescore.store.sqlite import _insert_rows

    conn = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    # (no fsync per row: executemany in autocommit is a transaction per row, 32 s on a busy disk)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA journal_mode=MEMORY")
    vals: list[tuple[Any, ...]] = [
        (f"k{i}", i * 2**40, i / 7, None if i % 3 else f"t{i}\u00e9\U0001F600")
        for i in range(300)]
    vals[5] = ("k5", 1, math.pi, "nul\x00inside")
    for t in ("a", "b"):
        conn.execute(f"CREATE TABLE {t}(k TEXT PRIMARY KEY, i, f, s, z)")
    sql = "INSERT OR IGNORE INTO {}(k, i, f, s, z) VALUES (?,?,?,?,0)"
    conn.executemany(sql.format("a"), vals)
    assert _insert_rows(conn, sql.format("b"), vals) == 300
    assert _insert_rows(conn, sql.format("b"), vals[:10] + [("new", 1, 1.0, "x")]) == 1
    conn.execute("DELETE FROM b WHERE k = 'new'")
    dump = "SELECT k, i, typeof(i), f, typeof(f), s, typeof(s), length(s), z FROM {} ORDER BY k"
    assert conn.execute(dump.format("a")).fetchall() == conn.execute(dump.format("b")).fetchall()
    # the rows left after the full statements go in one statement padded with copies of its
    # last row: the same rows, in the same order (rowids), the same count, whatever the size
    wide = "INSERT OR IGNORE INTO {}(" + ",".join(f"c{j}" for j in range(36)) + ") VALUES (" \
        + ",".join("?" * 36) + ")"
    for n in (1, 2, 3, 5, 455, 456, 910, 911, 2500):
        for t in ("c", "d"):
            conn.execute(f"DROP TABLE IF EXISTS {t}")
            conn.execute(f"CREATE TABLE {t}(" + ",".join(f"c{j}" for j in range(36))
                         + ", UNIQUE(c0))")
        some = [(f"k{i % (n - n // 9)}", *range(35)) for i in range(n)]  # (with repeats)
        assert _insert_rows(conn, wide.format("d"), some) == \
            conn.executemany(wide.format("c"), some).rowcount
        every = "SELECT rowid, * FROM {} ORDER BY rowid"
        assert conn.execute(every.format("c")).fetchall() == \
            conn.execute(every.format("d")).fetchall()


def test_a_cut_off_answer_holds_its_span_for_the_jobs_that_run(make_ts: Any) -> None:
    """The span hold counts the jobs a record will run; a cut-off answer runs fewer than a
    complete one with the same inputs (metrics over the answer are skipped), so the count
    must not be the complete record's (the span would wait for jobs that never come)."""
    from tracescore.record import RagRecord

    ts, _ = make_ts(metrics=["rgb_rejection", "token_f1"], sample_rate=1.0)
    whole = RagRecord(trace_id="e" * 32, span_id="f" * 16, query="q", answer="a",
                      ground_truths=("a",))
    assert ts._jobs_to_run(whole, ("rgb_rejection", "token_f1")) == 2
    cut = whole.replace(complete=False)
    assert ts._jobs_to_run(cut, ("rgb_rejection", "token_f1")) == 0
    plan = ts._plan_jobs(cut, tracescore.sampling.Decision(0.0, ("rgb_rejection",)))
    assert [(j.record_id, j.status) for j in plan] == [(cut.record_id, "skipped")]


def test_flush_keeps_one_connection_per_thread_and_reopens_a_broken_one(
        make_ts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """flush() asks the database whether jobs are open through a connection kept per flushing
    thread (opening one per flush cost ~2 ms of CPU); a connection that fails is replaced."""
    import tracescore._client.lifecycle as lifecycle

    opened: list[Any] = []
    real = lifecycle.open_store

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(lifecycle, "open_store", counting)
    ts, _ = make_ts(metrics=["rgb_rejection"], sample_rate=1.0)
    for i in range(3):
        ts.log_record(query=f"q{i}", answer="I don't know.")
        assert ts.flush(30)
    assert len(opened) == 1
    opened[0].conn.close()  # broken under it
    ts.log_record(query="q3", answer="Paris.")
    assert ts.flush(30)
    # (a PostgreSQL store opens its connection again by itself)
    n = len(opened)
    assert n == (1 if is_pg(ts.db_path) else 2)
    assert len(scores(ts.db_path)) == 4
    other: list[bool] = []
    t = threading.Thread(target=lambda: other.append(ts.flush(30)))
    t.start()
    t.join(60)
    assert other == [True] and len(opened) == n + 1  # another thread: its own connection
    ts.shutdown()
    mine = opened[n - 1]  # the shutting-down thread's one is closed
    if is_pg(ts.db_path):
        assert mine._conn is None
    else:
        with pytest.raises(sqlite3.ProgrammingError):
            mine.conn.execute("SELECT 1")


def test_json_safe_keeps_flat_dicts_and_mends_the_rest() -> None:
    from tracescore.store.rows import _json_safe, dumps

    flat = {"source": "a.md", "score": 13.25, "n": 3, "ok": True, "none": None}
    assert _json_safe(flat) is flat  # JSON as it is: not walked, not copied
    assert _json_safe({"x": float("inf")}) == {"x": "inf"}
    assert _json_safe({1: "a", "t": (1, float("nan"))}) == {"1": "a", "t": [1, "nan"]}
    nested = {"outer": {"inner": float("-inf")}}
    assert _json_safe(nested) == {"outer": {"inner": "-inf"}}
    assert dumps(_json_safe({"s": {1, 2}})) == '{"s": [1, 2]}'  # (the encoder's fallback)
