"""Segments (issue 16, part 1): release, environment, model and declared metadata keys on every
record, bounded cardinality, and hourly rollups per segment kept up to date as rows are written
— equal to a recomputation from the raw rows, before and after ``prune``. Both backends."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from helpers import is_pg, rows

import tracescore
from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.store import SegmentSpec, open_store
from tracescore.store.retention import Retention, prune
from tracescore.store.segments import OTHER, clean_value, release_environment
from tracescore.testing import ScriptedMetric

DAY = 86400.0


def segments_of(db: str) -> dict[int, dict[str, Any]]:
    out = {}
    for r in rows(db, "SELECT seg_id, release, environment, model, meta FROM segments"):
        out[r["seg_id"]] = {"release": r["release"], "environment": r["environment"],
                            "model": r["model"], **{f"metadata.{k}": v for k, v in
                                                    json.loads(r["meta"]).items()}}
    return out


def record_dims(db: str) -> list[dict[str, Any]]:
    """Each record's segment, with the record's own release/environment columns."""
    segs = segments_of(db)
    return [{**segs[r["seg_id"]], "_release": r["release"], "_environment": r["environment"]}
            for r in rows(db, "SELECT seg_id, release, environment FROM records"
                              " ORDER BY created_at")]


def counter(db: str, name: str) -> int:
    got = rows(db, "SELECT value FROM counters WHERE name = ?", name)
    return int(got[0]["value"]) if got else 0


# -- release and environment -------------------------------------------------------------------
def test_release_and_environment_from_init_and_metadata_keys_from_log_record(db, make_ts):
    ts, _ = make_ts(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")],
                    release="2024.06.1", environment="prod",
                    segments=["prompt_version", "route"])
    ts.log_record(query="q1", answer="a", metadata={"prompt_version": "p3", "route": "faq"})
    ts.log_record(query="q2", answer="a", metadata={"prompt_version": 4, "other": "x"})
    assert ts.flush(20)
    first, second = record_dims(db)
    assert first == {"release": "2024.06.1", "environment": "prod", "model": None,
                     "metadata.prompt_version": "p3", "metadata.route": "faq",
                     "_release": "2024.06.1", "_environment": "prod"}
    # a number is str()-ed; an undeclared key is no dimension; a missing one is None
    assert second["metadata.prompt_version"] == "4" and "metadata.route" not in second
    assert "metadata.other" not in second
    assert rows(db, "SELECT sum(records) AS n FROM hourly_records")[0]["n"] == 2


def test_release_and_environment_from_the_otel_resource(db, make_ts, monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.delenv("TRACESCORE_RELEASE", raising=False)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "shop-assistant")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES",
                       "service.version=1.2.3,deployment.environment.name=staging")
    provider = TracerProvider()  # Resource.create() reads the environment now
    ts, _ = make_ts(db=db, metrics=[], tracer_provider=provider)
    assert (ts.segment_spec.release, ts.segment_spec.environment) == ("1.2.3", "staging")
    ts.log_record(query="q", answer="a")
    assert ts.flush(20)
    [dims] = record_dims(db)
    assert (dims["release"], dims["environment"]) == ("1.2.3", "staging")
    # the older attribute name, and the init argument winning over the resource
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=canary")
    ts2, _ = make_ts(db=db, metrics=[], tracer_provider=TracerProvider(), release="2.0")
    assert (ts2.segment_spec.release, ts2.segment_spec.environment) == ("2.0", "canary")


def test_release_and_environment_from_tracescore_env_vars(monkeypatch):
    from opentelemetry.sdk.resources import Resource

    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.setenv("TRACESCORE_RELEASE", "r-from-env")
    monkeypatch.setenv("TRACESCORE_ENVIRONMENT", "dev")
    assert release_environment(None, None, Resource.create({})) == ("r-from-env", "dev")
    # the resource wins over the environment variable, the argument over both
    res = Resource.create({"service.version": "from-resource"})
    assert release_environment(None, None, res) == ("from-resource", "dev")
    assert release_environment("arg", "qa", res) == ("arg", "qa")
    monkeypatch.delenv("TRACESCORE_RELEASE")
    monkeypatch.delenv("TRACESCORE_ENVIRONMENT")
    assert release_environment(None, None, Resource.create({})) == (None, None)


def test_tracescore_release_reaches_the_records(db, make_ts, monkeypatch):
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.setenv("TRACESCORE_RELEASE", "git-abc123")
    from opentelemetry.sdk.trace import TracerProvider

    ts, _ = make_ts(db=db, metrics=[], tracer_provider=TracerProvider())
    ts.log_record(query="q", answer="a")
    assert ts.flush(20)
    [dims] = record_dims(db)
    assert dims["release"] == dims["_release"] == "git-abc123"


def test_values_are_cleaned_and_cut():
    assert clean_value(" v1\x00\n\t ") == "v1"
    assert clean_value("x" * 500) == "x" * 100
    assert clean_value("") is None and clean_value(None) is None
    assert clean_value(3.5) == "3.5"


@pytest.mark.parametrize("kwargs, message", [
    ({"segments": "tenant"}, "segments must be a list of metadata keys"),
    ({"segments": ["a", "a"]}, "given twice"),
    ({"segments": [""]}, "printable"),
    ({"segments": [1]}, "each key must be a str"),
    ({"segments": [f"k{i}" for i in range(21)]}, "at most 20"),
    ({"segment_limit": 0}, "segment_limit must be an int >= 1"),
    ({"segment_limit": 10**6}, "segment_limit must be <="),
    ({"release": 3}, "release must be a str"),
    ({"environment": "pro\x00d"}, "environment must be 1 to 100 printable"),
    ({"release": "x" * 101}, "release must be 1 to 100"),
])
def test_bad_segment_arguments_fail_at_init_naming_the_argument(tmp_path, kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        tracescore.init(db=tmp_path / "a.db", metrics=[], **kwargs)
    assert not (tmp_path / "a.db").exists()


# -- metadata from the frameworks --------------------------------------------------------------
def test_langchain_config_metadata_and_ts_run_metadata_become_dimensions(db, make_ts):
    from tracescore.examples.langchain_rag import build_chain

    ts, _ = make_ts(db=db, metrics=[], segments=["prompt_version", "route", "tenant"])
    chain = build_chain()
    cfg = {"callbacks": [ts.langchain_handler()], "metadata": {"tenant": "acme"}}
    with ts.run(metadata={"prompt_version": "p7", "route": "faq"}):
        chain.invoke("What battery does the Cargo have?", config=cfg)
    chain.invoke("What is the warranty?", config={**cfg, "metadata": {"route": "support"}})
    assert ts.flush(20)
    first, second = record_dims(db)
    assert {k: v for k, v in first.items() if k.startswith("metadata.")} == {
        "metadata.prompt_version": "p7", "metadata.route": "faq", "metadata.tenant": "acme"}
    assert first["model"] == "extractive-demo"
    assert {k: v for k, v in second.items() if k.startswith("metadata.")} == {
        "metadata.route": "support"}


def test_llama_index_tags_and_ts_run_metadata_become_dimensions(db, make_ts):
    pytest.importorskip("llama_index.core")
    import tracescore.integrations.llama_index as li
    from llama_index.core.instrumentation.dispatcher import instrument_tags
    from tracescore.examples.llama_index_rag import build_query_engine

    ts, _ = make_ts(db=db, metrics=[], segments=["prompt_version", "tenant"])
    ts.instrument_llama_index()
    try:
        engine = build_query_engine()
        with ts.run(metadata={"prompt_version": "p8"}), instrument_tags({"tenant": "globex"}):
            engine.query("What battery does the Cargo have?")
        assert ts.flush(20)
    finally:
        li.uninstrument()
    [dims] = record_dims(db)
    assert dims["metadata.prompt_version"] == "p8" and dims["metadata.tenant"] == "globex"


# -- bounded cardinality ------------------------------------------------------------------------
def test_past_the_limit_new_values_count_as_other(db, make_ts):
    ts, _ = make_ts(db=db, metrics=[ScriptedMetric(lambda r: 0.5, name="m")],
                    segments=["tenant"], segment_limit=5)
    for i in range(30):
        ts.log_record(query=f"q{i}", answer="a", metadata={"tenant": f"tenant-{i}"})
    assert ts.flush(30)
    tenants = [d["metadata.tenant"] for d in record_dims(db)]
    assert sorted(set(tenants)) == sorted({f"tenant-{i}" for i in range(5)} | {OTHER})
    assert tenants.count(OTHER) == 25
    assert counter(db, "segments.overflow.metadata.tenant") == 25
    assert rows(db, "SELECT count(*) AS n FROM segment_values WHERE dim = 'metadata.tenant'"
                ) == [{"n": 5}]
    # every record and score is still counted, under its (bounded) segment
    assert rows(db, "SELECT sum(records) AS n FROM hourly_records") == [{"n": 30}]
    assert rows(db, "SELECT sum(n_ok) AS n FROM hourly_scores") == [{"n": 30}]
    # a value admitted before stays itself in a new process; a new one is "other" there too
    ts2, _ = make_ts(db=db, metrics=[], segments=["tenant"], segment_limit=5)
    ts2.log_record(query="q", answer="a", metadata={"tenant": "tenant-3"})
    ts2.log_record(query="q", answer="a", metadata={"tenant": "brand-new"})
    assert ts2.flush(20)
    assert [d["metadata.tenant"] for d in record_dims(db)][-2:] in (
        ["tenant-3", OTHER], [OTHER, "tenant-3"])


def _recs(n: int, start: int, tenant: Any) -> list[tuple[RagRecord, Decision]]:
    now_ns = time.time_ns()
    return [(RagRecord(trace_id=format(0xC000_0000 + start + i, "032x"),
                       span_id=format(0xD000 + start + i, "016x"), query="q", answer="a",
                       metadata={"tenant": tenant(start + i)}, end_time_ns=now_ns),
             Decision(0.5, ())) for i in range(n)]


def test_a_huge_number_of_distinct_values_is_a_bounded_counted_degradation(db):
    """Tens of thousands of distinct tenants (a million behaves the same, only slower): at
    most ``limit`` values are stored and kept in memory, one segment per value plus one for
    "other", and every overflowing record is counted."""
    n, limit = 20_000 if not is_pg(db) else 8_000, 10
    spec = SegmentSpec(release="r", keys=("tenant",), limit=limit)
    store = open_store(db)
    try:
        t0 = time.perf_counter()
        for start in range(0, n, 1000):
            store.write_batch(_recs(1000, start, lambda i: f"tenant-{i}"), [], segments=spec)
        elapsed = time.perf_counter() - t0
        assert store.segmenter.known_values("metadata.tenant") == limit  # bounded memory
    finally:
        store.close()
    assert counter(db, "segments.overflow.metadata.tenant") == n - limit
    assert rows(db, "SELECT count(*) AS n FROM segment_values WHERE dim = 'metadata.tenant'"
                ) == [{"n": limit}]
    assert rows(db, "SELECT count(*) AS n FROM segments WHERE seg_id > 0") == [{"n": limit + 1}]
    assert rows(db, "SELECT sum(records) AS n FROM hourly_records") == [{"n": n}]
    assert elapsed < 60  # no query per overflowing record


def test_concurrent_writers_admit_at_most_limit_values(db):
    """Several processes (one store each) meet new values at once: the per-dimension limit
    holds across them (on PostgreSQL an advisory lock serialises the admission)."""
    limit, per_writer, writers = 20, 60, 4
    spec = SegmentSpec(keys=("tenant",), limit=limit)
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:  # (the open too: a failed open is an error here, not a thread lost silently)
            store = open_store(db)
            try:
                for b in range(0, per_writer, 10):
                    store.write_batch(_recs(10, w * 1000 + b, lambda i: f"t-{i}"), [],
                                      segments=spec)
            finally:
                store.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    assert rows(db, "SELECT count(*) AS n FROM segment_values") == [{"n": limit}]
    assert counter(db, "segments.overflow.metadata.tenant") == writers * per_writer - limit
    assert rows(db, "SELECT sum(records) AS n FROM hourly_records") == \
        [{"n": writers * per_writer}]


# -- rollups on write == recomputation from the raw rows ---------------------------------------
def _h(t: float) -> int:
    return int(math.floor(t / 3600)) * 3600


def recompute(db: str) -> dict[str, dict[tuple[Any, ...], list[Any]]]:
    """The hourly rollups, recomputed from the raw rows (independently of store/rollup.py)."""
    recs: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0] * 8 + [0.0])
    for r in rows(db, "SELECT created_at, seg_id, sampled, text_kept, error, input_tokens,"
                      " output_tokens, latency_ms FROM records"):
        a = recs[(_h(r["created_at"]), r["seg_id"])]
        a[0] += 1
        a[1] += bool(r["sampled"])
        a[2] += r["text_kept"] == 0
        a[3] += bool(r["error"])
        if r["input_tokens"] is not None or r["output_tokens"] is not None:
            a[4] += 1
            a[5] += r["input_tokens"] or 0
            a[6] += r["output_tokens"] or 0
        if r["latency_ms"] is not None:
            a[7] += 1
            a[8] += r["latency_ms"]
    scores: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0, 0, 0])
    bins: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0])
    for s in rows(db, "SELECT created_at, name, seg_id, metric_version, judge_model, value,"
                      " label, status FROM scores"):
        h = _h(s["created_at"])
        a = scores[(h, s["name"], s["seg_id"], s["metric_version"] or "", s["judge_model"])]
        if s["status"] == "ok" and s["value"] is not None:
            v = s["value"]
            a[0] += 1
            a[1] += v
            a[2] += v * v
            if s["label"] is not None:
                a[3] += 1
                a[4] += s["label"] == "fail"
            # 0 and 1 exactly in their own bins, else 1..100 for (0, 1) in 0.01 steps
            b = 0 if v <= 0 else 101 if v >= 1 else 1 + min(int(math.floor(v * 100)), 99)
            bins[(h, s["name"], s["seg_id"], b, s["label"] or "")][0] += 1
        elif s["status"] == "error":
            a[5] += 1
        elif s["status"] == "skipped":
            a[6] += 1
    skips: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0])
    for j in rows(db, "SELECT r.created_at, j.metric, r.seg_id, j.reason FROM jobs j JOIN"
                      " records r ON r.record_id = j.record_id WHERE j.status = 'skipped'"):
        skips[(_h(j["created_at"]), j["metric"], j["seg_id"], (j["reason"] or "")[:200])][0] += 1
    return {"records": dict(recs), "scores": dict(scores), "bins": dict(bins),
            "skips": dict(skips)}


def stored_rollups(db: str) -> dict[str, dict[tuple[Any, ...], list[Any]]]:
    """The hourly_* tables, all-zero rows left out."""
    def table(sql: str, nkey: int) -> dict[tuple[Any, ...], list[Any]]:
        out = {}
        for r in rows(db, sql):
            vals = list(r.values())
            if any(vals[nkey:]):
                out[tuple(vals[:nkey])] = vals[nkey:]
        return out
    return {
        "records": table("SELECT hour, seg_id, records, sampled, compact, errors, with_usage,"
                         " input_tokens, output_tokens, latency_n, latency_ms_sum"
                         " FROM hourly_records", 2),
        "scores": table("SELECT hour, name, seg_id, metric_version, judge_model, n_ok,"
                        " value_sum, value_sumsq, n_labelled, n_fail, n_error, n_skipped"
                        " FROM hourly_scores", 5),
        "bins": table("SELECT hour, name, seg_id, bin, label, n FROM hourly_bins", 5),
        "skips": table("SELECT hour, metric, seg_id, reason, n FROM hourly_skips", 4),
    }


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    for table in want:
        assert set(got[table]) == set(want[table]), table
        for key, vals in want[table].items():
            assert got[table][key] == pytest.approx(vals, abs=1e-9), (table, key)


class _UsesGroundTruth(ScriptedMetric):
    """Scores without a reference, better with one: re-opened when one arrives later."""

    uses = frozenset({"ground_truths"})


def test_rollups_equal_a_recomputation_from_raw_rows_before_and_after_prune(db, make_ts):
    now = time.time()

    def m_value(r: RagRecord) -> float:
        if "boom" in (r.query or ""):
            raise RuntimeError("metric failed")  # → an error score
        return (int(r.span_id, 16) % 10) / 10

    m = ScriptedMetric(m_value, name="m")
    g = _UsesGroundTruth(lambda r: 0.9 if r.ground_truths else 0.2, name="g")
    ref = ScriptedMetric(lambda r: 0.75, name="ref", requires=frozenset({"ground_truths"}))
    ts, _ = make_ts(db=db, metrics=[m, g, ref], sample_rate=0.6, keep_full_text="2h",
                    retention=None, release="r1", environment="prod", segments=["tenant"])
    recs: list[RagRecord] = []
    decisions: list[Decision] = []
    for i in range(60):
        # old (40..31 days), recent (hours ago) and current hour; models, errors, no answers
        created = now - 40 * DAY + i * 0.3 * DAY if i < 30 else now - (60 - i) * 1800
        t = int(created * 1e9)
        r = RagRecord(
            trace_id=format(0xE000_0000 + i, "032x"), span_id=format(0xF000 + i, "016x"),
            query=("boom " if i % 7 == 0 else "") + f"question {i}",
            answer=None if i % 11 == 0 else f"answer {i}",
            metadata={"tenant": f"t{i % 3}"}, model=("gpt-a", "gpt-b", None)[i % 3],
            error="ValueError: upstream" if i % 13 == 0 else None,
            start_time_ns=t - 200_000_000, end_time_ns=t)
        recs.append(r)
        d = ts.submit(r, hold_span=False)
        assert d is not None
        decisions.append(d)
    assert ts.flush(30)
    sampled = [r for r, d in zip(recs, decisions) if d.sampled]
    unsampled = [r for r, d in zip(recs, decisions) if not d.sampled]
    assert len(sampled) > 10 and len(unsampled) > 10
    # ground truth arrives later: ref's skipped jobs re-open, g's done jobs are re-scored
    for r in sampled[:6]:
        ts.add_ground_truth(r.trace_id, [f"reference {r.span_id}"])
    assert ts.flush(30)
    assert ref.calls >= 5 and g.calls > len(sampled)
    # negative feedback forces an unsampled record (full text within keep_full_text)
    ts.add_feedback(unsampled[0].trace_id, "down")
    assert ts.flush(30)

    # the pruner's deferred compaction makes old unsampled records text-less
    store = open_store(db)
    try:
        res = prune(store, None, compact_after_s=7200, now=now)
        assert res.compacted > 0
    finally:
        store.close()
    # feedback on a compacted record: its jobs are created skipped
    compacted = [r["trace_id"] for r in rows(db, "SELECT trace_id FROM records WHERE"
                                                 " text_kept = 0 ORDER BY created_at")]
    ts.add_feedback(compacted[0], "down")
    assert ts.flush(30)
    assert rows(db, "SELECT count(*) AS n FROM jobs WHERE status = 'skipped' AND reason"
                    " LIKE 'record stored compact%'") == [{"n": 3}]

    # replays: the same batch written again, the same jobs asked for again: no double count
    store = open_store(db)
    try:
        batch = list(zip(recs, decisions))
        jobs = [j for r, d in batch for j in ts._plan_jobs(r, d)]
        store.write_batch(batch, jobs, {"records_seen": 0}, keep_full_text=True,
                          segments=ts.segment_spec)
        assert store.insert_jobs_if_missing(jobs) == 0
    finally:
        store.close()

    want = recompute(db)
    assert sum(v[0] for v in want["records"].values()) == 60
    assert sum(v[5] for v in want["scores"].values()) > 0  # errors
    assert sum(v[0] for v in want["skips"].values()) > 0
    assert any(k[4] == "" for k in want["scores"])  # local metrics: judge_model ''
    got = stored_rollups(db)
    assert_same(got, want)
    assert {s["release"] for s in segments_of(db).values()} == {None, "r1"}

    # prune: raw rows go, rollups stay exactly as they were
    store = open_store(db)
    try:
        res = prune(store, Retention(max_age_s=30 * DAY, batch_size=7, pause_s=0), now=now)
    finally:
        store.close()
    assert res.records > 10 and res.scores > 0
    assert rows(db, "SELECT count(*) AS n FROM records")[0]["n"] == 60 - res.records
    assert stored_rollups(db) == got


def test_judge_model_is_a_score_dimension_and_release_is_on_the_histogram(db, make_ts):
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tracescore.judge.openai_judge import OpenAIJudge
    from tracescore.testing import ScriptedJudgeServer, lexical_responder

    reader = InMemoryMetricReader()
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts, _ = make_ts(db=db, metrics=["faithfulness", "token_f1"], judge_canary=False,
                        judge=OpenAIJudge("judge-9", base_url=srv.base_url),
                        metric_reader=reader, release="v9", environment="canary")
        ts.log_record(query="What battery?", answer="The Cargo has a 750 Wh battery.",
                      contexts=["The Cargo ships with a 750 Wh battery."],
                      ground_truths=["A 750 Wh battery."])
        assert ts.flush(30)
    got = {r["name"]: r["judge_model"] for r in rows(db, "SELECT name, judge_model FROM scores")}
    assert got == {"faithfulness": "judge-9", "token_f1": ""}
    assert {(r["name"], r["judge_model"]) for r in rows(
        db, "SELECT name, judge_model FROM hourly_scores")} == set(got.items())
    points = [p for rm in reader.get_metrics_data().resource_metrics
              for sm in rm.scope_metrics for mt in sm.metrics
              if mt.name == "tracescore.evaluation.score" for p in mt.data.data_points]
    assert points and all(p.attributes["service.version"] == "v9"
                          and p.attributes["deployment.environment.name"] == "canary"
                          for p in points)


def test_a_partly_replayed_batch_counts_each_new_row_once(db):
    """A batch written again with new records among the old ones, and a record twice: only
    the rows actually inserted count (records, their skipped jobs, overflow counters)."""
    from tracescore.store import SKIPPED, NewJob

    spec = SegmentSpec(keys=("tenant",), limit=2)
    old = _recs(5, 0, lambda i: f"t{i}")  # t0, t1 admitted; t2..t4 overflow
    new = _recs(3, 100, lambda i: "t0")

    def skipped(batch: list[tuple[RagRecord, Decision]]) -> list[NewJob]:
        return [NewJob(r.record_id, "m", "1", SKIPPED, "record has no contexts")
                for r, _ in batch]

    store = open_store(db)
    try:
        store.write_batch(old, skipped(old), segments=spec)
        batch = [*old[:3], *new, new[0]]
        store.write_batch(batch, skipped(batch), segments=spec)
        store.write_batch(batch, skipped(batch), segments=spec)
        assert store.insert_jobs_if_missing(skipped(batch)) == 0
    finally:
        store.close()
    assert rows(db, "SELECT sum(records) AS n FROM hourly_records") == [{"n": 8}]
    assert rows(db, "SELECT sum(n) AS n FROM hourly_skips") == [{"n": 8}]
    assert counter(db, "segments.overflow.metadata.tenant") == 3
    assert stored_rollups(db) == {k: {key: pytest.approx(v) for key, v in t.items()}
                                  for k, t in recompute(db).items()}
