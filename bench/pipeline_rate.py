"""The pipeline behind the request path, this tree against an older one, side by side (issue 19).

Four measures, each in a fresh child process per tree, the trees interleaved round by round
(the machine's other load hits both alike), reported as min / median / max with the load
average:

- ``latency``: run end → scores on the exported root span. A root span is started, its record
  submitted, the span ended; a ``SimpleSpanProcessor``'s exporter notes when the span arrives
  with its ``tracescore.score.*`` attributes (the default local metrics). Requests arrive one at
  a time with 20–60 ms between them (a steady app, not one burst). p50 / p90 per child.
- ``sustained``: ``log_record`` at full speed for a few seconds through the whole pipeline in one
  process (writer, scorer at sample rate 0.01, default ``max_queue``): records written per
  second, records dropped, CPU µs per record over all threads, and the share of the time
  spent in the garbage collector (``gc_percent``; every thread waits for it).
- ``writer1``: the writer at sample rate 1, as ``bench/throughput.py`` measures it (records
  through ``RecordQueue`` directly, 6 jobs each; no scorer): records/s and writer CPU µs/record.
- ``submit1``: ``ts.submit`` at sample rate 1 with the scorer running (throughput.py's second
  writer row): records/s.

Run:  python bench/pipeline_rate.py --base ../base-tree [--rounds 5] [--what latency,sustained]
      (``--base``: a checkout of the older commit, e.g. ``git worktree add ../base 5585dcd``)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WHAT = ("latency", "sustained", "writer1", "submit1")


# -- child side: runs with the tree under test first on sys.path ----------------------------------
def _records(n: int) -> list[Any]:
    sys.path.insert(1, str(HERE))
    from throughput import make_records  # (imports tracescore already loaded from the tree)

    return make_records(n)


def child_latency(n: int) -> dict[str, Any]:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    import tracescore

    arrived: dict[int, float] = {}
    cond = threading.Condition()

    class Clock(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            now = time.perf_counter()
            for s in spans:
                if isinstance(s, ReadableSpan) and any(
                        k.startswith("tracescore.score.") for k in (s.attributes or {})):
                    with cond:
                        arrived[s.context.span_id] = now
                        cond.notify_all()
            return SpanExportResult.SUCCESS

    recs = _records(n)
    with tempfile.TemporaryDirectory() as d:
        ts = tracescore.init(db=os.path.join(d, "l.db"), span_processor=SimpleSpanProcessor(
            Clock()), sample_rate=1.0, retention=None)
        rng = random.Random(3)
        lat: list[float] = []
        missing = 0
        for i, r in enumerate(recs):
            span = ts.tracer.start_span("rag")
            ctx = span.get_span_context()
            rec = r.replace(trace_id=f"{ctx.trace_id:032x}", span_id=f"{ctx.span_id:016x}")
            ts.submit(rec)
            t_end = time.perf_counter()
            span.end()
            sid = ctx.span_id
            with cond:
                ok = cond.wait_for(lambda sid=sid: sid in arrived, timeout=5.0)
            if ok and i >= 3:  # (the first few warm the caches and the connections)
                lat.append((arrived[ctx.span_id] - t_end) * 1000)
            elif not ok:
                missing += 1
            time.sleep(rng.uniform(0.02, 0.06))
        ts.shutdown(10)
    lat.sort()
    return {"p50_ms": lat[len(lat) // 2], "p90_ms": lat[int(len(lat) * 0.9)],
            "max_ms": lat[-1], "n": len(lat), "missing": missing}


def _all_cpu() -> float:
    return time.process_time()


def child_sustained(seconds: float, rate: float) -> dict[str, Any]:
    import gc

    import tracescore

    recs = _records(2000)
    # time in the garbage collector during the run (every thread waits for it: the GIL)
    in_gc = {"on": False, "t0": 0.0, "s": 0.0, "full": 0}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            in_gc["t0"] = time.perf_counter()
        elif in_gc["on"]:
            in_gc["s"] += time.perf_counter() - in_gc["t0"]
            in_gc["full"] += info["generation"] == 2

    gc.callbacks.append(on_gc)
    items = [(r.query, r.answer, [c.text for c in r.contexts], list(r.ground_truths))
             for r in recs]
    with tempfile.TemporaryDirectory() as d:
        ts = tracescore.init(db=os.path.join(d, "s.db"), sample_rate=rate, retention=None)
        for q, a, c, g in items[:50]:  # warm up: schema, connections, threads
            ts.log_record(query=q, answer=a, contexts=c, ground_truths=g)
        ts.flush(60)
        in_gc["on"] = True
        w0, d0, c0, t0 = ts.queue.written, ts.queue.dropped, _all_cpu(), time.perf_counter()
        end = t0 + seconds
        i = 0
        while time.perf_counter() < end:
            q, a, c, g = items[i % len(items)]
            ts.log_record(query=q, answer=a, contexts=c, ground_truths=g)
            i += 1
        dt = time.perf_counter() - t0
        written, dropped = ts.queue.written - w0, ts.queue.dropped - d0
        cpu = _all_cpu() - c0
        in_gc["on"] = False
        ts.flush(120)
        ts.shutdown(10)
    gc.callbacks.remove(on_gc)
    return {"records_per_s": written / dt, "offered_per_s": i / dt, "dropped": dropped,
            "cpu_us_per_record": cpu / max(1, written) * 1e6,
            "gc_percent": in_gc["s"] / dt * 100, "full_gcs": in_gc["full"]}


def child_writer1(n: int) -> dict[str, Any]:
    recs = _records(n)
    from throughput import SCORED_METRICS, bench_queue_direct

    with tempfile.TemporaryDirectory() as d:
        r = bench_queue_direct(d, recs, (*SCORED_METRICS, "rgb_rejection"), 512)
    return {"records_per_s": r["records_per_s"], "cpu_us_per_record": r[
        "writer_cpu_us_per_record"]}


def child_submit1(n: int) -> dict[str, Any]:
    recs = _records(n)
    from throughput import SCORED_METRICS, bench_submit

    with tempfile.TemporaryDirectory() as d:
        r = bench_submit(d, "s1", recs, SCORED_METRICS, 1.0, 1.0)
    return {"records_per_s": r["records_per_s"], "cpu_us_per_record": r[
        "writer_cpu_us_per_record"]}


def child(what: str, args: argparse.Namespace) -> None:
    sys.path.insert(0, args.tree)
    import tracescore  # noqa: F401 - from the tree under test, before throughput.py's own

    if what == "latency":
        out = child_latency(args.latency_n)
    elif what == "sustained":
        out = child_sustained(args.seconds, args.rate)
    elif what == "writer1":
        out = child_writer1(args.n)
    else:
        out = child_submit1(args.n)
    print(json.dumps(out))


# -- parent side ---------------------------------------------------------------------------------
def run_child(tree: str, what: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", what, "--tree", tree,
           "--n", str(args.n), "--seconds", str(args.seconds), "--rate", str(args.rate),
           "--latency-n", str(args.latency_n)]
    env = {**os.environ, "PYTHONPATH": tree}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{what} on {tree} failed:\n{p.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    res["load1"] = round(os.getloadavg()[0], 2)
    return res


def summary(values: list[float]) -> str:
    return (f"{min(values):,.1f} / {statistics.median(values):,.1f} / {max(values):,.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="a checkout of the older tree to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--what", default=",".join(WHAT))
    ap.add_argument("--n", type=int, default=20_000, help="records for writer1/submit1")
    ap.add_argument("--seconds", type=float, default=4.0, help="sustained: seconds of load")
    ap.add_argument("--rate", type=float, default=0.01, help="sustained: sample rate")
    ap.add_argument("--latency-n", type=int, default=60, help="latency: requests per child")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", choices=WHAT, help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args)
        return 0
    trees = {"this": str(HERE.parent)}
    if args.base:
        trees = {"base": str(Path(args.base).resolve()), **trees}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    load = [os.getloadavg()]
    for rnd in range(args.rounds):
        for what in args.what.split(","):
            order = list(trees.items())
            if rnd % 2:
                order.reverse()  # alternate who goes first
            for name, tree in order:
                r = run_child(tree, what, args)
                results.setdefault(what, {}).setdefault(name, []).append(r)
                print(f"round {rnd + 1} {what:9s} {name:4s} {r}", flush=True)
        load.append(os.getloadavg())
    print(f"\nload average (1/5/15 min) at start {load[0]}, at the end {load[-1]}")
    keys = {"latency": ("p50_ms", "p90_ms"), "sustained": ("records_per_s", "cpu_us_per_record",
                                                           "dropped", "gc_percent"),
            "writer1": ("records_per_s", "cpu_us_per_record"),
            "submit1": ("records_per_s", "cpu_us_per_record")}
    print("\n| measure | " + " | ".join(f"{n} (min / median / max)" for n in trees)
          + (" | this ÷ base (medians) |" if "base" in trees else " |"))
    print("|---|" + "---|" * len(trees) + ("---|" if "base" in trees else ""))
    for what, by_tree in results.items():
        for key in keys[what]:
            vals = {n: [float(r[key]) for r in rs] for n, rs in by_tree.items()}
            row = f"| {what} {key} | " + " | ".join(summary(v) for v in vals.values())
            if "base" in vals and statistics.median(vals["base"]):
                row += (f" | {statistics.median(vals['this']) / statistics.median(vals['base']):.2f}"
                        "×")
            print(row + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"trees": trees, "load": load,
                                               "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
