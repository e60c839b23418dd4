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

from _common import (  # noqa: E402
    background_cpu,
    load_average,
    machine_info,
    md_table,
    median,
    pct,
    print_machine,
)

import tracescore  # noqa: E402
from tracescore.metrics import registry  # noqa: E402
from tracescore.queue import RecordQueue  # noqa: E402
from tracescore.record import Context, RagRecord  # noqa: E402
from tracescore.sampling import Decision, trace_fraction  # noqa: E402
from tracescore.store import NewJob, Store  # noqa: E402
from tracescore.write_port import PortFunctions  # noqa: E402

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
        for _ in range(3):
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

    q = RecordQueue(path, PortFunctions(plan, lambda store, upd: None),
                    max_size=len(records) + 10,
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
                 rate: float, watch_s: float) -> dict[str, Any]:
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
    pending = db_count(path, "SELECT count(*) FROM jobs WHERE status IN ('pending', 'leased')")
    scored_by_then = ts.worker.scored
    backlog_rate = None
    if pending:
        # Scoring with the whole backlog pending: count jobs done in a fixed window (sleeping,
        # so nothing but the worker touches the database).
        s0, w0 = ts.worker.scored, time.perf_counter()
        time.sleep(watch_s)
        backlog_rate = (ts.worker.scored - s0) / (time.perf_counter() - w0)
    n = len(records)
    res = {"how": f"ts.submit, sample_rate={rate:g}" + (", worker scoring concurrently"
                                                        if rate > 0 else ", records only"),
           "records": n, "written": ts.queue.written,
           "db_records": db_count(path, "SELECT count(*) FROM records"), "jobs": jobs,
           "open_jobs_at_flush": pending, "seconds": dt, "put_seconds": t_put,
           "flushed": ok, "records_per_s": n / dt, "jobs_per_s": jobs / dt,
           "writer_cpu_us_per_record": cpu.get("writer", 0) / n * 1e6,
           "jobs_scored_during_write": scored_by_then,
           "backlog_jobs_per_s": backlog_rate, "backlog_watch_s": watch_s,
           "dropped": ts.queue.dropped}
    ts.shutdown(5 if pending else 120)  # don't wait for a large backlog to be scored
    if pending:
        res["backlog_queries"] = backlog_queries(path, metrics)
    return res


def backlog_queries(path: str, metrics: Sequence[str], reps: int = 20) -> dict[str, Any]:
    """Cost of the worker's lease and of flush()'s open-job count on a database with a large
    backlog (on a copy: leasing changes the jobs)."""
    copy = path + ".copy.db"
    src, dst = sqlite3.connect(path), sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    store = Store(copy)
    try:
        pending = store.open_job_count(list(metrics))
        t0 = time.perf_counter()
        for _ in range(reps):
            store.lease_jobs("bench", 4, 600.0, list(metrics))
        lease_ms = (time.perf_counter() - t0) / reps * 1000
        t0 = time.perf_counter()
        for _ in range(reps):
            store.open_job_count(list(metrics))
        count_ms = (time.perf_counter() - t0) / reps * 1000
    finally:
        store.close()
    return {"open_jobs": pending, "lease_4_jobs_ms": lease_ms, "open_job_count_ms": count_ms}


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
    # Wait on the worker's in-memory counter (ts.flush() polls the database every 10 ms,
    # which would compete with the worker), then confirm with ts.flush().
    deadline = t0 + 1800
    while ts.worker.scored < n_jobs and time.perf_counter() < deadline:
        time.sleep(0.005)
    dt = time.perf_counter() - t0
    ok = ts.flush(600)
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
        locker = sqlite3.connect(path, timeout=10, isolation_level=None)
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
            "holds_right_after_burst": holds_after, "holds_after_flush": holds_final,
            "holds_for_dropped_records": max(0, holds_after - (n - dropped)) if exporter else 0}


def bench_call_floor(records: list[RagRecord]) -> dict[str, Any]:
    """The same timing loop around a call that does nothing: the scheduler's own noise."""
    def nothing(r: RagRecord) -> None:
        return None

    lat: list[float] = []
    perf = time.perf_counter_ns
    gc.collect()
    t0 = perf()
    for r in records:
        s = perf()
        nothing(r)
        lat.append((perf() - s) / 1000)
    n = len(records)
    return {"scenario": "floor: same loop, a call that does nothing", "max_queue": None,
            "db_locked_during_burst": False, "exporter": False, "submitted": n,
            "burst_s": (perf() - t0) / 1e9, "submit_p50_us": median(lat),
            "submit_p99_us": pct(lat, 99), "submit_p999_us": pct(lat, 99.9),
            "submit_max_us": max(lat), "dropped": None, "written": None,
            "counter_records_dropped": None, "accounted": None,
            "holds_for_dropped_records": None}


# -- what-if: a lease query that does not sort the whole backlog (bench-only prototype) -----------
def patch_fast_lease() -> Any:
    """Replace ``Store.lease_jobs`` with a prototype: pending jobs through an index on
    ``(status, job_id)`` (SQLite stops after LIMIT rows instead of sorting every pending job),
    expired leases in a second query only when the first comes up short. Returns the original,
    to restore. Same contract: atomic, oldest first, attempts + 1."""
    from tracescore.store import Job

    original = Store.lease_jobs

    def lease_jobs(self: Store, owner: str, limit: int, lease_s: float,
                   metrics: Sequence[str]) -> list[Job]:
        now = time.time()
        marks = ",".join("?" * len(metrics))
        self.conn.execute("CREATE INDEX IF NOT EXISTS bench_jobs_status_id ON jobs(status, job_id)")
        update = ("UPDATE jobs SET status='leased', lease_owner=?, lease_until=?, "
                  "attempts = attempts + 1, updated_at=? WHERE job_id IN (SELECT job_id FROM jobs "
                  "WHERE {cond} AND metric IN (" + marks + ") ORDER BY job_id LIMIT ?) "
                  "RETURNING job_id, record_id, metric, metric_version, attempts")
        with self.transaction():
            rows = self.conn.execute(update.format(cond="status='pending'"),
                                     (owner, now + lease_s, now, *metrics, limit)).fetchall()
            if len(rows) < limit:
                rows += self.conn.execute(
                    update.format(cond="status='leased' AND lease_until < ?"),
                    (owner, now + lease_s, now, now, *metrics, limit - len(rows))).fetchall()
        return sorted((Job(*r) for r in rows), key=lambda j: j.job_id)

    Store.lease_jobs = lease_jobs  # type: ignore[method-assign]
    return original


# -- main -------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    ap.add_argument("--n", type=int, help="records for the writer benchmark (default 20000)")
    ap.add_argument("--score-n", type=int, help="records per scoring run (default 2000)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--what-if-lease", action="store_true",
                    help="also rerun the backlog cases with a prototype lease query (bench only)")
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
    watch = 5.0 if args.quick else 20.0
    wr.append(bench_submit(tmp, "submit-0", records, SCORED_METRICS, 0.0, watch))
    wr.append(bench_submit(tmp, "submit-1", records, SCORED_METRICS, 1.0, watch))
    results["writer"] = wr
    print(md_table(
        ["path", "records", "jobs", "seconds", "records/s", "jobs/s", "enqueue only µs/rec",
         "writer CPU µs/rec", "all in db", "dropped"],
        [[w["how"], w["records"], w["jobs"], w["seconds"], w["records_per_s"], w["jobs_per_s"],
          w["put_seconds"] / w["records"] * 1e6, w["writer_cpu_us_per_record"],
          "yes" if w["db_records"] == w["records"] == w["written"] and w["flushed"] else "NO",
          w["dropped"]] for w in wr]))
    s1 = wr[-1]
    print(f"\nsample_rate=1.0: the worker had scored {s1['jobs_scored_during_write']:,} jobs when "
          f"the writer finished; then, with {s1['open_jobs_at_flush']:,} jobs pending, it scored "
          f"{s1['backlog_jobs_per_s'] or 0:,.0f} jobs/s (watched {s1['backlog_watch_s']:g} s; "
          "compare section 2, where at most 10,000 jobs are pending)")
    bq = s1.get("backlog_queries")
    if bq:
        print(f"with {bq['open_jobs']:,} open jobs: Store.lease_jobs(limit=4) takes "
              f"{bq['lease_4_jobs_ms']:.1f} ms and Store.open_job_count (polled by ts.flush every "
              f"10 ms) {bq['open_job_count_ms']:.1f} ms")

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
          bench_overflow(tmp, "overflow-locked-db", burst, 100, lock_db=True, exporter=True),
          bench_call_floor(burst)]
    results["overflow"] = ov
    print(md_table(
        ["scenario", "max_queue", "submitted", "burst s", "submit p50 µs", "p99 µs", "p99.9 µs",
         "max µs", "dropped", "written", "db counter dropped", "written+dropped = submitted",
         "span holds registered for dropped records"],
        [[o["scenario"] + (" (exporter on)" if o["exporter"] else ""), _na(o["max_queue"]),
          o["submitted"], o["burst_s"], o["submit_p50_us"], o["submit_p99_us"],
          o["submit_p999_us"], o["submit_max_us"], _na(o["dropped"]), _na(o["written"]),
          _na(o["counter_records_dropped"]),
          "" if o["accounted"] is None else ("yes" if o["accounted"] else "NO"),
          o["holds_for_dropped_records"] if o["exporter"] else ""]
         for o in ov]))

    if args.what_if_lease:
        print("\n## What-if: the lease query without the full sort (bench-only prototype of "
              "`Store.lease_jobs`)\n")
        rows = []
        wi: dict[str, Any] = {}
        for mode in ("current", "prototype", "current", "prototype"):
            original = patch_fast_lease() if mode == "prototype" else None
            try:
                sc_all = bench_scoring(tmp, f"all-{mode}-{time.time_ns()}", list(SCORED_METRICS),
                                       srecs, concurrency=4)
                if mode not in wi:
                    sub = bench_submit(tmp, f"submit-1-{mode}", records, SCORED_METRICS, 1.0,
                                       watch)
                    wi[mode] = sub
                    rows.append([f"{mode}: ts.submit at 1.0, {n:,} records", "writer records/s",
                                 sub["records_per_s"]])
                    rows.append([f"{mode}: then, backlog of {sub['open_jobs_at_flush']:,} jobs",
                                 "jobs/s", sub["backlog_jobs_per_s"] or 0.0])
                    bq = sub.get("backlog_queries") or {}
                    rows.append([f"{mode}: Store.lease_jobs(limit=4) with that backlog", "ms",
                                 bq.get("lease_4_jobs_ms", float("nan"))])
                rows.append([f"{mode}: scoring all 5 metrics, {len(srecs):,} records "
                             f"({sc_all['jobs']:,} jobs)", "jobs/s", sc_all["jobs_per_s"]])
                wi.setdefault(f"{mode}_scoring", []).append(sc_all)
            finally:
                if original is not None:
                    Store.lease_jobs = original  # type: ignore[method-assign]
        results["what_if_lease"] = wi
        print(md_table(["case", "unit", "value"], sorted(rows, key=lambda r: r[0])))

    results["loadavg_at_end"] = load_average()
    print(f"\nload average at end (1/5/15 min): {results['loadavg_at_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


def _na(x: Any) -> Any:
    return "" if x is None else x


if __name__ == "__main__":
    sys.exit(main())
