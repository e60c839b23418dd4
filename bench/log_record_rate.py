"""``log_record`` from one thread, several trees side by side (issue 33, "the costs that came
back": calls offered per second, records stored per second without drops).

Two measures, each in a fresh child process per tree (its own interpreter: a tree's venv), the
trees alternated round by round (the first one rotates), with the load average noted:

- ``offered``: ``log_record`` in a tight loop from one thread for ``--seconds`` at sample rate
  ``--rate`` (default 0.01, the rate of the earlier sessions' "sustained" rows), default
  ``max_queue`` (10,000): calls offered per second (drops allowed), records stored per second
  during the loop, records dropped, CPU µs per stored record (all threads).
- ``nodrop``: ``--n`` calls of ``log_record`` with ``max_queue`` above ``--n`` (nothing can
  drop; checked), then ``flush()``: records per second from the first call to ``flush()``
  returning (every record stored and, at rate 1.0, scored by the in-process worker), at sample
  rates ``--nodrop-rates`` (default 0.01 and 0.1).

The records: a 70-character query, a 400-character answer, three ~500-character contexts and a
ground truth, 2,000 distinct ones cycled (made here, so any tree can run them).

Run:  python bench/log_record_rate.py --tree old=/work/venv-old/bin/python:/work/wt-old \\
          --tree base=/work/venv/bin/python:/work/main --tree this=/work/venv-x/bin/python:. \\
          [--rounds 5] [--seconds 3] [--n 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import trees_row

WORDS = ("retrieval", "answer", "context", "model", "score", "vector", "index", "policy",
         "latency", "tracing", "budget", "document", "passage", "quality", "judge", "metric")


def _items(n: int = 2000) -> list[tuple[str, str, list[str], list[str]]]:
    rng = random.Random(7)

    def text(chars: int) -> str:
        out: list[str] = []
        size = 0
        while size < chars:
            w = rng.choice(WORDS)
            out.append(w)
            size += len(w) + 1
        return " ".join(out)

    return [(text(70), text(400), [text(500) for _ in range(3)], [text(60)]) for _ in range(n)]


def child_offered(seconds: float, rate: float) -> dict[str, Any]:
    import tracescore

    items = _items()
    with tempfile.TemporaryDirectory() as d:
        ts = tracescore.init(db=os.path.join(d, "o.db"), sample_rate=rate, retention=None)
        for q, a, c, g in items[:50]:  # warm up: schema, connections, threads
            ts.log_record(query=q, answer=a, contexts=c, ground_truths=g)
        ts.flush(60)
        q0 = ts.queue
        w0, d0, c0, t0 = q0.written, q0.dropped, time.process_time(), time.perf_counter()
        a0 = time.thread_time()
        end = t0 + seconds
        i = 0
        n_items = len(items)
        while time.perf_counter() < end:
            q, a, c, g = items[i % n_items]
            ts.log_record(query=q, answer=a, contexts=c, ground_truths=g)
            i += 1
        dt = time.perf_counter() - t0
        app_cpu = time.thread_time() - a0
        written, dropped = q0.written - w0, q0.dropped - d0
        cpu = time.process_time() - c0
        ts.flush(120)
        ts.shutdown(10)
    return {"offered_per_s": i / dt, "stored_per_s": written / dt, "dropped": dropped,
            "app_us_per_call": app_cpu / max(1, i) * 1e6,
            "cpu_us_per_stored": cpu / max(1, written) * 1e6}


def child_nodrop(n: int, rate: float) -> dict[str, Any]:
    import tracescore

    items = _items()
    with tempfile.TemporaryDirectory() as d:
        ts = tracescore.init(db=os.path.join(d, "n.db"), sample_rate=rate, retention=None,
                             max_queue=n + 10_000)
        for q, a, c, g in items[:50]:
            ts.log_record(query=q, answer=a, contexts=c, ground_truths=g)
        ts.flush(60)
        q0 = ts.queue
        w0, d0, c0, t0 = q0.written, q0.dropped, time.process_time(), time.perf_counter()
        n_items = len(items)
        for i in range(n):
            q, a, c, g = items[i % n_items]
            ts.log_record(query=q, answer=a, contexts=c, ground_truths=g)
        t_put = time.perf_counter() - t0
        ok = ts.flush(600)
        dt = time.perf_counter() - t0
        written, dropped = q0.written - w0, q0.dropped - d0
        cpu = time.process_time() - c0
        ts.shutdown(10)
    if dropped or written != n or ok is False:
        raise SystemExit(f"nodrop: written {written} of {n}, dropped {dropped}, flush {ok}")
    return {"records_per_s": n / dt, "calls_per_s": n / t_put,
            "cpu_us_per_record": cpu / n * 1e6}


def run_child(py: str, tree: str, what: str, rate: float, args: argparse.Namespace
              ) -> dict[str, Any]:
    cmd = [py, str(Path(__file__).resolve()), "--child", what, "--seconds", str(args.seconds),
           "--n", str(args.n), "--rate", str(rate)]
    env = {**os.environ, "PYTHONPATH": tree}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900,
                       cwd=tempfile.gettempdir())
    if p.returncode != 0:
        raise SystemExit(f"{what} on {tree} failed:\n{p.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    res["load1"] = round(os.getloadavg()[0], 2)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[],
                    help="NAME=PYTHON:PATH (repeat); default: this tree with this interpreter")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--what", default="offered,nodrop")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rate", type=float, default=0.01, help="offered: sample rate")
    ap.add_argument("--n", type=int, default=20_000, help="nodrop: calls")
    ap.add_argument("--nodrop-rates", default="0.01,0.1")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", choices=("offered", "nodrop"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        out = (child_offered(args.seconds, args.rate) if args.child == "offered"
               else child_nodrop(args.n, args.rate))
        print(json.dumps(out))
        return 0
    trees: dict[str, tuple[str, str]] = {}
    for spec in args.tree or [f"this={sys.executable}:{Path(__file__).resolve().parent.parent}"]:
        name, rest = spec.split("=", 1)
        py, path = rest.split(":", 1)
        trees[name] = (py, str(Path(path).resolve()))
    cases = []
    for what in args.what.split(","):
        rates = [args.rate] if what == "offered" else [float(r) for r in
                                                       args.nodrop_rates.split(",")]
        cases += [(what, r) for r in rates]
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    load = [os.getloadavg()]
    names = list(trees)
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]  # who goes first rotates
        for what, rate in cases:
            key = f"{what}@{rate:g}"
            for name in order:
                py, path = trees[name]
                r = run_child(py, path, what, rate, args)
                results.setdefault(key, {}).setdefault(name, []).append(r)
                print(f"round {rnd + 1} {key:12s} {name:5s} {r}", flush=True)
        load.append(os.getloadavg())
    print(f"\nload average (1/5/15 min) at start {load[0]}, at the end {load[-1]}; "
          f"1-min during: {min(x[0] for x in load):.2f}–{max(x[0] for x in load):.2f}")
    first = names[0]
    print("\n| measure | " + " | ".join(f"{n} (median; min–max)" for n in names)
          + "".join(f" | {n} ÷ {first}" for n in names[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(names) - 1))
    for key, by_tree in results.items():
        for field in by_tree[first][0]:
            if field == "load1":
                continue
            vals = {n: [float(r[field]) for r in by_tree[n]] for n in names}
            print(trees_row(f"{key} {field}", vals, first))
    if args.json:
        Path(args.json).write_text(json.dumps({"trees": trees, "load": load,
                                               "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
