"""Scores on write (issue 19): the writer scores cheap local metrics as it stores a sampled
record, in the same transaction; everything else still goes to the worker. Real pipelines on
real SQLite files (and PostgreSQL), the real OTel SDK with an in-memory exporter."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from helpers import rows, wait_for

import tracescore
from tracescore.metrics.base import Metric
from tracescore.metrics.rgb import RgbRejection
from tracescore.record import ANSWER
from tracescore.score import Score

LOCAL = ["rgb_rejection", "token_f1", "exact_match", "rouge", "bleu", "rgb_accuracy"]
ANSWERS = ["Paris is the capital of France.", "I don't know: not enough information.",
           "The Eiffel Tower is in Paris, France.", "Insufficient information to answer."]


def _log(ts: Any, n: int, start: int = 0, **kw: Any) -> list[str]:
    ids = []
    for i in range(start, start + n):
        rec = ts.log_record(query=f"question {i}?", answer=ANSWERS[i % len(ANSWERS)],
                            contexts=[f"context {i} about Paris"],
                            ground_truths=[ANSWERS[(i + 1) % len(ANSWERS)]], **kw)
        ids.append(rec.record_id)
    return ids


def _warm(ts: Any, metrics: list[str]) -> None:
    """One record through the worker, so every metric has run once here (a metric's first
    call, which imports its libraries, is never on the writer)."""
    _log(ts, 1, start=10_000)
    assert ts.flush(60)
    wait_for(lambda: set(metrics) <= ts.worker._warm, what="metrics warm")


def _scores(db: Any) -> dict[tuple[str, str], tuple[Any, ...]]:
    """(trace id, score name) -> what the score says."""
    return {(r["trace_id"], r["name"]): (r["value"], r["label"], r["status"], r["explanation"])
            for r in rows(db, "SELECT trace_id, name, value, label, status, explanation "
                              "FROM scores")}


def test_local_metrics_are_scored_on_write_as_the_worker_scores_them(tmp_path: Path,
                                                                      make_ts: Any) -> None:
    a_db, b_db = tmp_path / "a.db", tmp_path / "b.db"
    on, _ = make_ts(db=a_db, metrics=LOCAL, sample_rate=1.0)
    off, _ = make_ts(db=b_db, metrics=LOCAL, sample_rate=1.0)
    # (a loaded machine must not move any to the worker: neither the batch's budget nor one
    # slow call, which takes its metric off the writer for good)
    on.worker.on_write_budget_s = on.worker.on_write_slow_s = 60.0
    off.worker.score_on_write = False
    for ts in (on, off):
        _warm(ts, LOCAL)
    loop_before = on.worker._scored
    ids = [f"{i:032x}" for i in range(1, 41)]
    for ts in (on, off):
        for i, t in enumerate(ids):
            ts.log_record(query=f"question {i}?", answer=ANSWERS[i % 4],
                          contexts=[f"context {i}"], ground_truths=[ANSWERS[(i + 1) % 4]],
                          trace_id=t)
        assert ts.flush(60)
    # every job of the 40 records was scored on write, none by the worker's loop
    assert on.worker.scored_on_write == 40 * len(LOCAL)
    assert on.worker._scored == loop_before
    assert off.worker.scored_on_write == 0
    # the same scores, values, labels and explanations as the worker's
    a = {k: v for k, v in _scores(a_db).items() if k[0] in ids}
    b = {k: v for k, v in _scores(b_db).items() if k[0] in ids}
    assert len(a) == len(b) > 40 * len(LOCAL) and a == b  # (rouge emits four scores)
    # jobs done after one run, scores delivered once (the root spans carried them)
    jobs = rows(a_db, "SELECT status, attempts, lease_owner FROM jobs")
    assert {(j["status"], j["attempts"], j["lease_owner"]) for j in jobs} == {("done", 1, None)}
    assert on.stats()["scored_jobs"] == 41 * len(LOCAL)


def test_scores_on_write_reach_the_root_span_exactly_once(make_ts: Any) -> None:
    ts, exporter = make_ts(metrics=["rgb_rejection", "token_f1"], sample_rate=1.0)
    _warm(ts, ["rgb_rejection", "token_f1"])
    exporter.clear()
    tracer = ts.tracer
    for i in range(20):
        with tracer.start_as_current_span("rag") as span:
            ctx = span.get_span_context()
            ts.log_record(query=f"q{i}", answer=ANSWERS[i % 4], contexts=["c"],
                          ground_truths=[ANSWERS[i % 4]],
                          trace_id=format(ctx.trace_id, "032x"),
                          span_id=format(ctx.span_id, "016x"))
    assert ts.flush(60)
    assert ts.worker.scored_on_write >= 40
    spans = exporter.get_finished_spans()
    scored = [s for s in spans if "tracescore.score.token_f1" in (s.attributes or {})]
    carriers = [s for s in spans if s.name == "tracescore.evaluation"]
    assert len(scored) + len(carriers) >= 20
    seen: dict[tuple[int, str], int] = {}
    for s in scored + carriers:
        attrs = s.attributes or {}
        key = s.context.span_id if s in scored else int(attrs["tracescore.scored_span_id"], 16)
        for name in ("token_f1", "rgb_rejection"):
            if f"tracescore.score.{name}" in attrs:
                seen[(key, name)] = seen.get((key, name), 0) + 1
    assert len(seen) == 40 and set(seen.values()) == {1}  # every score once, none twice
    assert rows(ts.db_path, "SELECT count(*) AS n FROM scores WHERE delivery IS NULL")[0]["n"] == 0


def test_long_texts_and_unknown_metrics_go_to_the_worker(make_ts: Any) -> None:
    class Tail(RgbRejection):  # a subclass elsewhere does not inherit the opt-in
        name = "tail_rejection"

        def __call__(self, record: Any) -> Score:
            return self.result(0.0, "tail")

    ts, _ = make_ts(metrics=["rgb_rejection", "rouge", Tail()], sample_rate=1.0)
    _warm(ts, ["rgb_rejection", "rouge", "tail_rejection"])
    before_write, before_loop = ts.worker.scored_on_write, ts.worker._scored
    ts.log_record(query="q", answer="word " * 200, ground_truths=["word " * 200])
    assert ts.flush(60)
    # rgb_rejection (4,000 chars) on write; rouge (600) and the subclass by the worker
    assert ts.worker.scored_on_write - before_write == 1
    assert ts.worker._scored - before_loop == 2
    got = rows(ts.db_path, "SELECT metric, status FROM scores")
    assert {("rouge", "ok"), ("tail_rejection", "ok"), ("rgb_rejection", "ok")} == {
        (r["metric"], r["status"]) for r in got}


def test_a_batch_spends_at_most_its_budget_on_metrics(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=LOCAL, sample_rate=1.0)
    _warm(ts, LOCAL)
    ts.worker.on_write_budget_s = 0.0  # each batch: one job on write, then the budget is gone
    loop = ts.worker._scored
    _log(ts, 40)
    assert ts.flush(60)
    on_write = ts.worker.scored_on_write
    assert 1 <= on_write <= 40  # at most one per batch, at most 40 batches
    assert on_write + ts.worker._scored - loop == 40 * len(LOCAL)


class OptIn(Metric):
    """A metric of this module that opts in (declared beside its own ``__call__``)."""

    name = "opt_in"
    requires = frozenset({ANSWER})
    on_write_chars = 1_000
    delay_s = 0.0
    fail = False

    def __call__(self, record: Any) -> Score:
        if self.fail:
            raise RuntimeError("boom in opt_in")
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.result(float(len(record.answer or "") % 2), "parity")


def test_a_metric_that_raises_on_write_gets_an_error_score_with_the_reason(
        make_ts: Any) -> None:
    m = OptIn()
    ts, _ = make_ts(metrics=[m], sample_rate=1.0)
    _warm(ts, ["opt_in"])
    m.fail = True
    ids = _log(ts, 3)
    assert ts.flush(60)
    assert ts.worker.scored_on_write == 3 and ts.worker.errors_on_write == 3
    got = rows(ts.db_path, "SELECT record_id, status, error FROM scores WHERE record_id IN "
                           f"({','.join('?' * len(ids))})", *ids)
    assert len(got) == 3
    assert {(r["status"], r["error"]) for r in got} == {("error", "RuntimeError: boom in opt_in")}
    assert {r["status"] for r in rows(ts.db_path, "SELECT status FROM jobs")} == {"done"}


def test_a_slow_metric_leaves_the_writer_for_good(make_ts: Any) -> None:
    m = OptIn()
    ts, _ = make_ts(metrics=[m], sample_rate=1.0)
    _warm(ts, ["opt_in"])
    m.delay_s = ts.worker.on_write_slow_s * 2
    _log(ts, 1)
    assert ts.flush(60)
    assert ts.worker.scored_on_write == 1  # that call was on the writer, and slow
    m.delay_s = 0.0
    loop = ts.worker._scored
    _log(ts, 3, start=1)
    assert ts.flush(60)
    assert ts.worker.scored_on_write == 1 and ts.worker._scored == loop + 3


def test_nothing_is_scored_on_write_without_a_live_worker(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=["rgb_rejection"], sample_rate=1.0)
    _warm(ts, ["rgb_rejection"])
    ts.worker.stop()
    ids = _log(ts, 3)
    assert ts.queue.flush(60)
    assert ts.worker.scored_on_write == 0
    st = rows(ts.db_path, "SELECT status FROM jobs WHERE record_id IN (?,?,?)", *ids)
    assert [r["status"] for r in st] == ["pending"] * 3  # they wait for a worker
    ts.worker.start()
    assert ts.flush(60)
    assert len(rows(ts.db_path, "SELECT 1 FROM scores WHERE record_id IN (?,?,?)", *ids)) == 3


def test_a_replayed_batch_stores_nothing_twice(db_path: Path) -> None:
    """The store's side: a batch written twice (the writer's retry after a refusal whose
    commit went through) keeps one job and one score per (record, metric)."""
    from tracescore.sampling import Decision
    from tracescore.store import NewJob, open_store
    from tracescore.store.batch import Pairs as _Pairs

    store = open_store(str(db_path))
    try:
        rec = tracescore.RagRecord(trace_id="a" * 32, span_id="b" * 16, query="q",
                                   answer="a", ground_truths=("a",))
        job = NewJob(rec.record_id, "exact_match", "1")
        score = Score(name="exact_match", value=1.0, label="pass", metric="exact_match",
                      metric_version="1")
        batch = _Pairs([(rec, Decision(0.0, ("exact_match",)))])
        first = store.write_batch(batch, [], scored=[(job, [score])], delivery="none")
        again = store.write_batch(batch, [], scored=[(job, [score])], delivery="none")
        assert first[0] is not None and [s for _, s in first[0]] == [score]
        assert again == [None]
        assert len(rows(db_path, "SELECT 1 FROM jobs")) == 1
        assert len(rows(db_path, "SELECT 1 FROM scores")) == 1
    finally:
        store.close()


def test_a_new_version_scored_on_write_replaces_the_old_score(db_path: Path) -> None:
    """A record that has a metric's score already (an older version of it) gets the new
    version's score in place of the old one, and the rollups count it once."""
    from tracescore.sampling import Decision
    from tracescore.store import NewJob, open_store
    from tracescore.store.batch import Pairs as _Pairs

    store = open_store(str(db_path))
    try:
        rec = tracescore.RagRecord(trace_id="c" * 32, span_id="d" * 16, query="q",
                                   answer="a", ground_truths=("a",))
        batch = _Pairs([(rec, Decision(0.0, ("exact_match",)))])
        for version, value in (("1", 0.0), ("2", 1.0)):
            score = Score(name="exact_match", value=value, label="pass" if value else "fail",
                          metric="exact_match", metric_version=version)
            refs = store.write_batch(batch, [], scored=[
                (NewJob(rec.record_id, "exact_match", version), [score])], delivery="none")
            assert refs[0] is not None and refs[0][0][1] == score
        got = rows(db_path, "SELECT metric_version, value FROM scores")
        assert got == [{"metric_version": "2", "value": 1.0}]
        n = rows(db_path, "SELECT sum(n_ok) AS n, sum(value_sum) AS s FROM hourly_scores "
                          "WHERE name = 'exact_match'")
        assert (n[0]["n"], n[0]["s"]) == (1, 1.0)
    finally:
        store.close()


def test_scores_on_write_on_postgres(pg_url: str, make_ts: Any) -> None:
    ts, _ = make_ts(db=pg_url, metrics=["rgb_rejection", "exact_match"], sample_rate=1.0)
    _warm(ts, ["rgb_rejection", "exact_match"])
    ids = _log(ts, 5)
    assert ts.flush(60)
    assert ts.worker.scored_on_write == 10
    got = rows(pg_url, "SELECT s.name, j.status, j.attempts FROM scores s JOIN jobs j "
                       "ON j.job_id = s.job_id WHERE s.record_id IN ("
                       + ",".join("?" * len(ids)) + ")", *ids)
    assert sorted((r["name"], r["status"], r["attempts"]) for r in got) == sorted(
        [("rgb_rejection", "done", 1)] * 5 + [("exact_match", "done", 1)] * 5)
    # the rollups saw them (the warm-up record's and the 5 scored on write)
    n = rows(pg_url, "SELECT sum(n_ok) AS n FROM hourly_scores WHERE name = 'exact_match'")
    assert int(n[0]["n"] or 0) == 6

