"""Background throughput of tracescore: the SQLite writer, the scoring worker, and overflow.

1. **Writer**: N ``RagRecord`` s (query, answer, ground truth, 3 contexts of ~500 chars) are
   enqueued and persisted; time from the first put to ``queue.flush()`` returning. Measured
   straight through ``RecordQueue`` (no scoring worker, 6 jobs per record) and through
   ``ts.submit`` (sample_rate 1.0 with the local metrics, so the worker scores concurrently and
   competes for the GIL; and sample_rate 0.0, records only).
2. **Scoring**: N records with pending jobs are written to a database first; then
   ``tracescore.init`` on that database (the worker picks up pending jobs, as after a restart)
   and ``ts.flush()``: records in the DB → scores stored, per local metric and all together.
   The raw rate of calling the metric object directly in a loop is measured on the same
   records, so the pipeline's overhead shows as a ratio.
3. **Overflow**: a small ``max_queue`` and a burst of ``submit`` calls, once with a healthy
   database and once with the database write-locked by another connection: ``submit`` never
   blocks (per-call latency), drops are counted and persisted in the counters.

Run:  python bench/throughput.py [--quick] [--json out.json] [--n 20000] [--score-n 2000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import background_cpu, machine_info, md_table, median, pct, print_machine  # noqa: E402

import tracescore  # noqa: E402
from tracescore.metrics import registry  # noqa: E402
from tracescore.queue import RecordQueue  # noqa: E402
from tracescore.record import Context, RagRecord  # noqa: E402
from tracescore.sampling import Decision, trace_fraction  # noqa: E402
from tracescore.store import NewJob, Store  # noqa: E402

try:
    from tracescore.examples.langchain_rag import REFUSAL, load_corpus, load_questions
except ImportError:  # a checkout without the package installed
    from examples.langchain_rag import REFUSAL, load_corpus, load_questions  # type: ignore

SCORED_METRICS = ("rouge", "bleu", "token_f1", "exact_match", "rgb_accuracy")


# -- data ---------------------------------------------------------------------------------------
def make_records(n: int, seed: int = 7) -> list[RagRecord]:
    """Realistic records: a question of the example app, its reference as ground truth, an
    answer that is exact / partial / wrong / a refusal, and 3 contexts of ~500 characters."""
    rng = random.Random(seed)
    questions = load_questions()
    docs = [d.page_content for d in load_corpus()]
    sentences = [s.strip() + "." for d in docs for s in d.split(". ") if len(s) > 30]
    out = []
    for i in range(n):
        q = questions[i % len(questions)]
        ref = q["reference"]
        kind = i % 4
        if kind == 0:
            answer = ref
        elif kind == 1:
            words = ref.split()
            answer = " ".join(w for j, w in enumerate(words) if j % 4 != 2)
        elif kind == 2:
            answer = rng.choice(sentences)
        else:
            answer = REFUSAL
        ctxs = []
        for k in range(3):
            j = rng.randrange(len(docs))
            text = (docs[j] + " " + docs[(j + 1) % len(docs)] + " " + docs[(j + 2) % len(docs)])
            ctxs.append(Context(text=text[:500], id=f"doc-{j}", score=round(rng.random(), 3),
                                metadata={"source": f"handbook/{j}.md"}, source="retriever"))
        out.append(RagRecord(
            trace_id=format(rng.getrandbits(128) | 1, "032x"),
            span_id=format(rng.getrandbits(64) | 1, "016x"),
            query=q["question"], answer=answer, contexts=tuple(ctxs),
            ground_truths=(ref,) if q.get("reference") else (),
            metadata={"bench": True, "i": i}, source="manual",
            start_time_ns=1_700_000_000_000_000_000 + i, end_time_ns=1_700_000_000_500_000_000 + i,
        ))
    return out


def db_count(path: str, sql: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


# -- 1. writer ------------------------------------------------------------------------------------
def bench_queue_direct(tmp: str, records: list[RagRecord], metrics: Sequence[str],
                       batch_size: int) -> dict[str, Any]:
    path = os.path.join(tmp, f"queue-direct-{batch_size}.db")
    Store(path).close()
    versions = {m: registry.get(m).version for m in metrics}

    def plan(rec: RagRecord, d: Decision) -> list[NewJob]:
        return [NewJob(rec.record_id, m, versions[m]) for m in d.metrics]

    q = RecordQueue(path, plan, lambda store, upd: None, max_size=len(records) + 10,
                    batch_size=batch_size)
    items = [(r, Decision(trace_fraction(r.trace_id), tuple(metrics))) for r in records]
    gc.collect()
    t0 = time.perf_counter()
    for it in items:
        q.put(it)
    t_put = time.perf_counter() - t0
    ok = q.flush(600)
    dt = time.perf_counter() - t0
    cpu = q._thread and _thread_cpu(q._thread)
    q.shutdown(60)
    n = len(records)
    jobs = db_count(path, "SELECT count(*) FROM jobs")
    return {"how": f"RecordQueue direct, batch_size={batch_size}", "records": n,
            "written": q.written, "db_records": db_count(path, "SELECT count(*) FROM records"),
            "jobs": jobs, "seconds": dt, "put_seconds": t_put, "flushed": ok,
            "records_per_s": n / dt, "jobs_per_s": jobs / dt,
            "writer_cpu_us_per_record": (cpu or 0) / n * 1e6, "dropped": q.dropped}


def _thread_cpu(t: threading.Thread) -> float:
    from _common import thread_cpu_s

    return thread_cpu_s(t)


def bench_submit(tmp: str, name: str, records: list[RagRecord], metrics: Sequence[str],
                 rate: float) -> dict[str, Any]:
    path = os.path.join(tmp, f"{name}.db")
    ts = tracescore.init(db=path, metrics=list(metrics), sample_rate=rate,
                         max_queue=len(records) + 10)
    gc.collect()
    t0 = time.perf_counter()
    for r in records:
        ts.submit(r)
    t_put = time.perf_counter() - t0
    ok = ts.queue.flush(600)
    dt = time.perf_counter() - t0
    cpu = background_cpu(ts)
    jobs = db_count(path, "SELECT count(*) FROM jobs")
    pending = db_count(path, "SELECT count(*) FROM jobs WHERE status='pending'")
    scored_by_then = ts.worker.scored
    t1 = time.perf_counter()
    all_ok = ts.flush(1200)
    score_tail = time.perf_counter() - t1
    n = len(records)
    res = {"how": f"ts.submit, sample_rate={rate:g}" + (", worker scoring concurrently"
                                                        if rate > 0 else ", records only"),
           "records": n, "written": ts.queue.written,
           "db_records": db_count(path, "SELECT count(*) FROM records"), "jobs": jobs,
           "pending_jobs_at_flush": pending, "seconds": dt, "put_seconds": t_put,
           "flushed": ok and all_ok, "records_per_s": n / dt, "jobs_per_s": jobs / dt,
           "writer_cpu_us_per_record": cpu.get("writer", 0) / n * 1e6,
           "jobs_scored_during_write": scored_by_then, "scoring_tail_s": score_tail,
           "dropped": ts.queue.dropped}
    ts.shutdown(120)
    return res


# -- 2. scoring -------------------------------------------------------------------------------
def prefill(path: str, records: list[RagRecord], metrics: Sequence[str]) -> int:
    store = Store(path)
    versions = {m: registry.get(m).version for m in metrics}
    n_jobs = 0
    try:
        for i in range(0, len(records), 500):
            chunk = records[i:i + 500]
            items = [(r, Decision(trace_fraction(r.trace_id), tuple(metrics))) for r in chunk]
            jobs = [NewJob(r.record_id, m, versions[m]) for r in chunk for m in metrics]
            store.write_batch(items, jobs, {"records_seen": len(chunk)})
            n_jobs += len(jobs)
    finally:
        store.close()
    return n_jobs


def raw_rate(metric_names: Sequence[str], records: list[RagRecord], calls: int
             ) -> tuple[float, float]:
    """(calls/s of the metric objects called directly, µs per record for all of them)."""
    metrics = [registry.get(m) for m in metric_names]
    for m in metrics:  # warm-up (lazy imports, caches)
        for r in records[:20]:
            m(r)
    gc.collect()
    t0 = time.perf_counter()
    for i in range(calls):
        r = records[i % len(records)]
        for m in metrics:
            m(r)
    dt = time.perf_counter() - t0
    return calls * len(metrics) / dt, dt / calls * 1e6


def bench_scoring(tmp: str, label: str, metric_names: Sequence[str], records: list[RagRecord],
                  concurrency: int) -> dict[str, Any]:
    path = os.path.join(tmp, f"score-{label}-c{concurrency}.db")
    n_jobs = prefill(path, records, metric_names)
    gc.collect()
    t0 = time.perf_counter()
    ts = tracescore.init(db=path, metrics=list(metric_names), sample_rate=1.0,
                         concurrency=concurrency)
    ok = ts.flush(1800)
    dt = time.perf_counter() - t0
    cpu = background_cpu(ts)
    ts.shutdown(120)
    done = db_count(path, "SELECT count(*) FROM jobs WHERE status='done'")
    scores = db_count(path, "SELECT count(*) FROM scores")
    errors = db_count(path, "SELECT count(*) FROM scores WHERE status='error'")
    return {"metric": label, "concurrency": concurrency, "records": len(records),
            "jobs": n_jobs, "jobs_done": done, "score_rows": scores, "error_scores": errors,
            "seconds": dt, "flushed": ok, "jobs_per_s": done / dt, "scores_per_s": scores / dt,
            "records_per_s": len(records) / dt,
            "bg_cpu_s": {k: round(v, 3) for k, v in cpu.items()}}


# -- 3. overflow ----------------------------------------------------------------------------------
def bench_overflow(tmp: str, name: str, records: list[RagRecord], max_queue: int,
                   lock_db: bool, exporter: bool) -> dict[str, Any]:
    path = os.path.join(tmp, f"{name}.db")
    kwargs: dict[str, Any] = {"db": path, "metrics": list(SCORED_METRICS), "sample_rate": 1.0,
                              "max_queue": max_queue}
    exp = None
    if exporter:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exp = InMemorySpanExporter()
        kwargs["span_exporter"] = exp
    ts = tracescore.init(**kwargs)
    locker = None
    if lock_db:  # another process holds the write lock: the writer waits on busy_timeout
        locker = sqlite3.connect(path, timeout=0, isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")
    lat: list[float] = []
    perf = time.perf_counter_ns
    gc.collect()
    t0 = perf()
    for r in records:
        s = perf()
        ts.submit(r)
        lat.append((perf() - s) / 1000)
    burst_s = (perf() - t0) / 1e9
    dropped = ts.queue.dropped
    holds_after = len(getattr(ts.attacher, "_holds", {}) or {}) if ts.attacher else 0
    if locker is not None:
        time.sleep(0.5)  # the writer is now blocked on the lock; the app is not
        locker.execute("ROLLBACK")
        locker.close()
    ok = ts.flush(600)
    written = ts.queue.written
    counters = ts.stats().get("db_counters", {})
    holds_final = len(getattr(ts.attacher, "_holds", {}) or {}) if ts.attacher else 0
    ts.shutdown(120)
    n = len(records)
    return {"scenario": name, "max_queue": max_queue, "db_locked_during_burst": lock_db,
            "exporter": exporter, "submitted": n, "burst_s": burst_s,
            "submit_p50_us": median(lat), "submit_p99_us": pct(lat, 99),
            "submit_p999_us": pct(lat, 99.9), "submit_max_us": max(lat),
            "dropped": dropped, "written": written,
            "db_records": db_count(path, "SELECT count(*) FROM records"),
            "counter_records_dropped": counters.get("records_dropped", 0),
            "counter_records_seen": counters.get("records_seen", 0),
            "accounted": written + dropped == n, "flushed": ok,
            "holds_right_after_burst": holds_after, "holds_after_flush": holds_final}


# -- main -------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    ap.add_argument("--n", type=int, help="records for the writer benchmark (default 20000)")
    ap.add_argument("--score-n", type=int, help="records per scoring run (default 2000)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    n = args.n or (1000 if args.quick else 20_000)
    score_n = args.score_n or (150 if args.quick else 2000)
    info = machine_info()
    print("# tracescore throughput benchmark\n")
    print_machine(info)
    tmp = tempfile.mkdtemp(prefix="tracescore-tput-")
    records = make_records(n)
    avg_ctx = sum(len(c.text) for r in records[:100] for c in r.contexts) / 300
    print(f"records: {n:,} (3 contexts of ~{avg_ctx:.0f} chars, 1 ground truth); scoring runs: "
          f"{score_n:,} records each\n")
    results: dict[str, Any] = {"machine": info, "n": n, "score_n": score_n}

    # 1. writer
    print("## 1. Background writer: first put → queue.flush() returned\n")
    wr = [bench_queue_direct(tmp, records, SCORED_METRICS + ("rgb_rejection",), 512)]
    if not args.quick:
        wr.append(bench_queue_direct(tmp, records, SCORED_METRICS + ("rgb_rejection",), 128))
        wr.append(bench_queue_direct(tmp, records, SCORED_METRICS + ("rgb_rejection",), 2048))
    wr.append(bench_submit(tmp, "submit-0", records, SCORED_METRICS, 0.0))
    wr.append(bench_submit(tmp, "submit-1", records, SCORED_METRICS, 1.0))
    results["writer"] = wr
    print(md_table(
        ["path", "records", "jobs", "seconds", "records/s", "jobs/s", "enqueue only µs/rec",
         "writer CPU µs/rec", "all in db", "dropped"],
        [[w["how"], w["records"], w["jobs"], w["seconds"], w["records_per_s"], w["jobs_per_s"],
          w["put_seconds"] / w["records"] * 1e6, w["writer_cpu_us_per_record"],
          "yes" if w["db_records"] == w["records"] == w["written"] and w["flushed"] else "NO",
          w["dropped"]] for w in wr]))
    s1 = wr[-1]
    print(f"\n(sample_rate=1.0: the worker had scored {s1['jobs_scored_during_write']:,} jobs by the "
          f"time the writer finished; the remaining scoring took {s1['scoring_tail_s']:.1f} s)")

    # 2. scoring
    print("\n## 2. Scoring worker: records in the DB → scores stored (default concurrency 4)\n")
    srecs = records[:score_n]
    raw_calls = min(score_n, 300 if args.quick else 2000)
    sc = []
    for m in (*SCORED_METRICS, "all"):
        names = list(SCORED_METRICS) if m == "all" else [m]
        r = bench_scoring(tmp, m, names, srecs, concurrency=4)
        rate, us_per_rec = raw_rate(names, srecs, raw_calls)
        r["raw_calls_per_s"] = rate
        r["raw_us_per_record"] = us_per_rec
        r["pipeline_over_raw"] = r["jobs_per_s"] / rate
        sc.append(r)
    if not args.quick:  # the lease batch is the free concurrency: show its effect
        all_row = sc[-1]
        for conc in (1, 16):
            r = bench_scoring(tmp, "all", list(SCORED_METRICS), srecs, concurrency=conc)
            r["raw_calls_per_s"] = all_row["raw_calls_per_s"]
            r["raw_us_per_record"] = all_row["raw_us_per_record"]
            r["pipeline_over_raw"] = r["jobs_per_s"] / r["raw_calls_per_s"]
            sc.append(r)
    results["scoring"] = sc
    print(md_table(
        ["metric", "conc.", "jobs", "score rows", "errors", "seconds", "jobs/s", "score rows/s",
         "raw calls/s", "pipeline / raw", "per-job overhead µs"],
        [[s["metric"], s["concurrency"], s["jobs_done"], s["score_rows"], s["error_scores"],
          s["seconds"], s["jobs_per_s"], s["scores_per_s"], s["raw_calls_per_s"],
          s["pipeline_over_raw"],
          1e6 / s["jobs_per_s"] - 1e6 / s["raw_calls_per_s"]] for s in sc]))
    bad = [s["metric"] for s in sc if s["jobs_done"] != s["jobs"] or not s["flushed"]]
    print(f"\nall jobs done: {'yes' if not bad else 'NO: ' + ', '.join(bad)}")

    # 3. overflow
    print("\n## 3. Queue overflow: submit never blocks, drops are counted\n")
    burst = records[: (2000 if args.quick else 20_000)]
    ov = [bench_overflow(tmp, "overflow", burst, 100, lock_db=False, exporter=False),
          bench_overflow(tmp, "overflow-locked-db", burst, 100, lock_db=True, exporter=True)]
    results["overflow"] = ov
    print(md_table(
        ["scenario", "max_queue", "submitted", "burst s", "submit p50 µs", "p99 µs", "p99.9 µs",
         "max µs", "dropped", "written", "db counter dropped", "written+dropped = submitted",
         "span holds left after burst"],
        [[o["scenario"] + (" (exporter on)" if o["exporter"] else ""), o["max_queue"],
          o["submitted"], o["burst_s"], o["submit_p50_us"], o["submit_p99_us"],
          o["submit_p999_us"], o["submit_max_us"], o["dropped"], o["written"],
          o["counter_records_dropped"], "yes" if o["accounted"] else "NO",
          o["holds_right_after_burst"]] for o in ov]))

    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
