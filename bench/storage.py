"""Disk cost per record and the writer's rate with compact rows (issue 13).

1. **Bytes per record**: N records of a RAG app with four 2 KB contexts (query ~70 chars, answer
   ~400 chars, token usage, a model name, small metadata) go through ``ts.submit`` at a sample
   rate; after ``flush`` the WAL is checkpointed and the database file size is divided by N.
   Rates 0, 0.01, 0.1 and 1.0 (with the local default metrics scoring the sampled records, so
   jobs and scores count too), and ``keep_full_text=True`` at rate 0 (the old behaviour).
2. **Writer records/s at sample rate 0**: time from the first ``submit`` to ``queue.flush()``,
   repeated ``--rounds`` times, variants interleaved (compact vs ``keep_full_text=True``).

Runs on trees without the ``keep_full_text`` argument too (they store full text), so the same
script measures the tree before the change: ``PYTHONPATH=/tmp/base python bench/storage.py``.

Run:  python bench/storage.py [--quick] [--n 5000] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import load_average, machine_info, md_table, median, print_machine  # noqa: E402

import tracescore  # noqa: E402
from tracescore.record import Context, RagRecord, TokenUsage  # noqa: E402

WORDS = ("battery range frame warranty brake cargo motor charge wheel service store rider "
         "kilometre price model handbook return policy spare tube chain gear").split()


def make_records(n: int, seed: int = 11) -> list[RagRecord]:
    rng = random.Random(seed)

    def text(chars: int) -> str:
        out: list[str] = []
        size = 0
        while size < chars:
            w = rng.choice(WORDS)
            out.append(w)
            size += len(w) + 1
        return " ".join(out)[:chars]

    recs = []
    base = int(time.time() * 1e9) - n * 1_000_000
    for i in range(n):
        ctxs = tuple(Context(text=text(2048), id=f"doc-{rng.randrange(5000)}",
                             score=round(rng.random(), 3), source="retriever",
                             metadata={"source": f"handbook/{rng.randrange(500)}.md"})
                     for _ in range(4))
        start = base + i * 1_000_000
        recs.append(RagRecord(
            trace_id=format(rng.getrandbits(128) | 1, "032x"),
            span_id=format(rng.getrandbits(64) | 1, "016x"),
            query=text(70), answer=text(400), contexts=ctxs, ground_truths=(text(120),),
            metadata={"tenant": "acme"}, usage=TokenUsage(2300, 120), model="gpt-4o-mini",
            start_time_ns=start, end_time_ns=start + 850_000_000, source="langchain",
        ))
    return recs


def has_compact() -> bool:
    return "keep_full_text" in inspect.signature(tracescore.Tracescore.__init__).parameters


def run(tmp: str, name: str, records: Sequence[RagRecord], rate: float, *,
        keep_full_text: bool | None, metrics: Sequence[str] = ()) -> dict[str, Any]:
    path = os.path.join(tmp, f"{name}-{time.time_ns()}.db")
    kw: dict[str, Any] = {"db": path, "metrics": list(metrics), "sample_rate": rate,
                          "max_queue": len(records) + 10}
    if keep_full_text is not None:
        kw["keep_full_text"] = keep_full_text
    ts = tracescore.init(**kw)
    gc.collect()
    t0 = time.perf_counter()
    for r in records:
        ts.submit(r, hold_span=False)
    ok = ts.queue.flush(600)
    dt = time.perf_counter() - t0
    if metrics:
        ts.flush(600)
    ts.shutdown(60)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    n_db = conn.execute("SELECT count(*) FROM records").fetchone()[0]
    n_scores = conn.execute("SELECT count(*) FROM scores").fetchone()[0]
    conn.close()
    size = os.path.getsize(path)
    for suffix in ("", "-wal", "-shm"):
        Path(path + suffix).unlink(missing_ok=True)
    return {"name": name, "rate": rate, "records": len(records), "db_records": n_db,
            "scores": n_scores, "bytes": size, "bytes_per_record": size / len(records),
            "seconds": dt, "records_per_s": len(records) / dt, "flushed": ok}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=None, help="records per run (default 5000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    n = args.n or (500 if args.quick else 5000)
    rounds = 1 if args.quick else args.rounds
    info = machine_info()
    print_machine(info)
    print(f"tracescore imported from {Path(tracescore.__file__).parent}")
    compact = has_compact()
    print(f"tree stores compact rows: {compact}; {n:,} records per run, 4 x 2 KB contexts")
    records = make_records(n)
    results: dict[str, Any] = {"machine": info, "n": n, "compact_supported": compact}
    with tempfile.TemporaryDirectory() as tmp:
        # 1. writer rate at 0, variants interleaved
        variants = [("default", None)]
        if compact:
            variants = [("compact (default)", False), ("keep_full_text=True", True)]
        rates: dict[str, list[dict[str, Any]]] = {v: [] for v, _ in variants}
        for _ in range(rounds):
            for label, keep in variants:
                rates[label].append(run(tmp, "rate0", records, 0.0, keep_full_text=keep))
        results["writer"] = rates
        print("\n## Writer at sample_rate 0 (ts.submit → queue.flush)\n")
        print(md_table(
            ["variant", "runs", "records/s (median)", "records/s (each run)",
             "bytes/record (median)"],
            [[label, len(rs), median([r["records_per_s"] for r in rs]),
              ", ".join(f"{r['records_per_s']:,.0f}" for r in rs),
              median([r["bytes_per_record"] for r in rs])] for label, rs in rates.items()]))
        # 2. bytes per record at several rates, with the local metrics scoring
        metrics = ("token_f1", "exact_match", "rouge")
        sized = []
        for rate in (0.01, 0.1, 1.0):
            sized.append(run(tmp, f"rate{rate}", records, rate, keep_full_text=None,
                             metrics=metrics))
        results["by_rate"] = sized
        print(f"\n## Database bytes per record by sample rate (metrics {', '.join(metrics)})\n")
        base0 = median([r["bytes_per_record"] for r in rates[variants[0][0]]])
        rows = [[f"0 ({variants[0][0]})", base0, 0, base0 * 1e6 / 2**30]]
        rows += [[f"{r['rate']:g}", r["bytes_per_record"], r["scores"],
                  r["bytes_per_record"] * 1e6 / 2**30] for r in sized]
        print(md_table(["sample rate", "bytes/record", "scores", "GiB per million records"],
                       rows))
    results["loadavg_at_end"] = load_average()
    print(f"\nload average at end (1/5/15 min): {results['loadavg_at_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
