"""What ``ts.log_record(contexts=[100,000 strings])`` costs the calling thread (issue 18).

The target: under 50 ms (median of several calls, wall and the thread's own CPU time), because
``log_record`` keeps at most ``MAX_LOG_CONTEXTS`` contexts on the request path. The rest is
dropped and counted (``stats()["contexts_dropped"]``); the test suite checks the bound itself.

Run:  python bench/log_record_bound.py [--calls 9] [--contexts 100000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracescore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--contexts", type=int, default=100_000)
    args = ap.parse_args()
    contexts = [f"retrieved passage number {i} about something" for i in range(args.contexts)]
    with tempfile.TemporaryDirectory() as d:
        ts = tracescore.init(db=str(Path(d) / "bench.db"), metrics=["token_f1"])
        wall, cpu = [], []
        for _ in range(args.calls):
            t0, c0 = time.perf_counter(), time.thread_time()
            ts.log_record(query="q", answer="a", contexts=contexts)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
            ts.flush(120)  # outside the timed window: the writer's and scorer's work
        dropped = ts.stats()["contexts_dropped"]
        ts.shutdown()
    w, c = statistics.median(wall), statistics.median(cpu)
    print(f"log_record with {args.contexts:,} contexts, {args.calls} calls: median wall "
          f"{w:.1f} ms, thread CPU {c:.1f} ms (target < 50 ms: {'met' if w < 50 else 'MISSED'});"
          f" contexts dropped in all: {dropped:,}")


if __name__ == "__main__":
    main()
