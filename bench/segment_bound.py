"""Segment combinations (issue 31): a database whose three declared metadata keys make up to
216,000 combinations, built by a tree's own write path, then ``report --where release=v1``
timed as a whole process with its peak RSS.

What it builds (SQLite): N records (default 240,000) over 30 days through ``Store.write_batch``
with a ``SegmentSpec`` of three keys (``tenant``, ``region``, ``plan``, 60 values each, drawn
uniformly), release v1 for the first 2/3 of the span and v2 after, two environments, two
models. No scores (the rollups per segment are ``hourly_records``; scores would add
``hourly_scores`` rows per segment too, so the unbounded case is worse than shown here).

Run it once per tree, the tree's code on ``PYTHONPATH``:

    PYTHONPATH=/work/main python bench/segment_bound.py --db /tmp/before.db   # the base tree
    python bench/segment_bound.py --db /tmp/after.db                          # this tree
    python bench/segment_bound.py --read-only --db /tmp/before.db             # this tree's read
                                                                              # of the base's db

It prints the build time, the number of segments and of ``hourly_records`` rows, the overflow
counters, and for ``--reps`` runs of ``tracescore report --where release=v1`` (a new process
each, with the same ``PYTHONPATH``): wall seconds and peak RSS, min/median/max.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

DAY = 86400.0
KEYS = ("tenant", "region", "plan")


def build(db: str, n: int, values: int, seed: int) -> dict[str, float]:
    from tracescore.record import RagRecord
    from tracescore.sampling import Decision
    from tracescore.store import SegmentSpec, open_store

    rng = random.Random(seed)
    now = time.time()
    start = now - 30 * DAY
    switch = start + 20 * DAY
    store = open_store(db)
    t0 = time.perf_counter()
    try:
        batch: dict[tuple[str, str], list[tuple[RagRecord, Decision]]] = {}
        for i in range(n):
            t = start + 30 * DAY * (i + rng.random()) / n
            rel = "v1" if t < switch else "v2"
            env = "production" if rng.random() < 0.9 else "staging"
            md = {k: f"{k}-{rng.randrange(values)}" for k in KEYS}
            rec = RagRecord(trace_id=f"{rng.getrandbits(128):032x}",
                            span_id=f"{rng.getrandbits(64):016x}", query="q", answer="a",
                            metadata=md, model="gpt-4o" if rng.random() < 0.7 else "gpt-4o-mini",
                            start_time_ns=int(t * 1e9), end_time_ns=int(t * 1e9) + 10**9)
            batch.setdefault((rel, env), []).append((rec, Decision(0.5, ())))
            if i % 2000 == 1999 or i == n - 1:
                for (r, e), recs in batch.items():
                    spec = SegmentSpec(release=r, environment=e, keys=KEYS, limit=100)
                    store.write_batch(recs, [], segments=spec)
                batch = {}
    finally:
        store.close()
    return {"build_s": time.perf_counter() - t0}


def describe(db: str) -> dict[str, object]:
    conn = sqlite3.connect(db)
    try:
        segs = conn.execute("SELECT count(*) FROM segments").fetchone()[0]
        hourly = conn.execute("SELECT count(*) FROM hourly_records").fetchone()[0]
        overflow = dict(conn.execute(
            "SELECT name, value FROM counters WHERE name LIKE 'segments.overflow.%'").fetchall())
    finally:
        conn.close()
    return {"segments": segs, "hourly_records": hourly, "overflow": overflow,
            "mb": round(os.path.getsize(db) / 1e6, 1)}


def time_report(db: str, reps: int) -> dict[str, list[float]]:
    code = ("import resource, sys\n"
            "from tracescore.cli import main\n"
            "try:\n"
            "    main(['report', '--db', sys.argv[1], '--where', 'release=v1'],"
            " standalone_mode=False)\n"
            "finally:\n"
            "    print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
            " file=sys.stderr)\n")
    wall, rss = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", code, db], capture_output=True, text=True,
                           env=os.environ.copy(), check=False)
        wall.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(p.stderr[-2000:])
        line = [ln for ln in p.stderr.splitlines() if ln.startswith("RSS ")][-1]
        rss.append(int(line.split()[1]) / 1024)
    return {"wall_s": wall, "rss_mb": rss}


def mmm(xs: list[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--n", type=int, default=240_000)
    ap.add_argument("--values", type=int, default=60, help="values per key")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--read-only", action="store_true", help="time the reads of an existing db")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out: dict[str, object] = {"n": a.n, "values": a.values,
                              "tree": os.environ.get("PYTHONPATH") or "this tree",
                              "load": os.getloadavg()[0]}
    if not a.read_only:
        if os.path.exists(a.db):
            os.remove(a.db)
        out.update(build(a.db, a.n, a.values, a.seed))
    out.update(describe(a.db))
    t = time_report(a.db, a.reps)
    out.update(t)
    out["load_end"] = os.getloadavg()[0]
    print(json.dumps({k: v for k, v in out.items() if k not in ("wall_s", "rss_mb")}))
    print(f"report --where release=v1: wall s (min / median / max) {mmm(t['wall_s'])}; "
          f"peak RSS MB {mmm(t['rss_mb'])}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
