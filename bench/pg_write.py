"""The PostgreSQL write path, several trees side by side (issue 33, session 15): what the
record sequence's per-row triggers (``scores.rec`` / ``jobs.rec``, schema 12) and the adaptive
judge's hourly sums (schema 13, kept in the scoring worker's transaction) cost the writer and
the worker.

One throwaway cluster (tests/pg.py: ``initdb`` + ``pg_ctl``, trust auth, a temp folder; the
tests' settings, ``fsync=off``, ``synchronous_commit=off``), a fresh database per child
process; each tree runs in its own child (its interpreter, the tree first on ``PYTHONPATH``),
the trees alternated round by round (the first one rotates). In each child, through the
tree's own store (``open_store(url)``: its schema):

1. ``records``: ``--n`` records (query, answer, three contexts) written by ``write_batch`` in
   batches of ``--batch``, six jobs each (a sampled record's local metrics): records stored/s.
2. ``jobs``: ``--jobs`` of those jobs leased (``lease_jobs``, 60 at a time: 10 records) and
   completed with one ok score each (``complete_jobs``, the worker's batch): jobs completed/s.
3. ``judged``: ``--judged`` records get a decision of a budgeted judge metric
   (``judge_budget.decide``, half of them selected, π 0.5, where the tree has it) and a
   ``faithfulness`` job; the jobs are leased and completed 10 at a time with the judge's score
   (the judged batches whose sums the worker keeps): batches completed/s.

Each phase reports its wall time, the client's CPU and the server backend's CPU (from
``/proc/<backend pid>/stat``: the triggers and the upserts run there). Each child's tables are
young: autovacuum has not analyzed them yet (its first look comes a minute after the start), so
PostgreSQL plans with default selectivities; ``--analyze`` runs ANALYZE before the jobs and the
judged phases (untimed) to measure the plans of a database whose statistics are current. A tree given as
``NAME=PYTHON:PATH:nosums`` runs with the judge sums' reads and upserts stubbed out
(the judged snapshot → nothing) — the same tree without them.

Run:  python bench/pg_write.py --tree base=/work/venv/bin/python:/work/main \\
          --tree this=$PWD/../venv/bin/python:. [--rounds 3] [--n 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import trees_row

HERE = Path(__file__).resolve().parent
METRICS = ("m1", "m2", "m3", "m4", "m5", "m6")
TICK = os.sysconf("SC_CLK_TCK")


def _backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


class Clock:
    def __init__(self, store: Any) -> None:
        self.pid = store.conn.info.backend_pid
        self.w, self.c, self.s = time.perf_counter(), time.process_time(), _backend_cpu(self.pid)

    def done(self, count: int) -> dict[str, float]:
        w = time.perf_counter() - self.w
        c = time.process_time() - self.c
        s = _backend_cpu(self.pid) - self.s
        n = max(1, count)
        return {"per_s": count / w, "client_us": c / n * 1e6, "server_us": s / n * 1e6}


def child(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from tracescore.record import Context, RagRecord
    from tracescore.sampling import Decision
    from tracescore.score import Score
    from tracescore.store import NewJob, open_store

    if os.environ.get("PGW_NO_SUMS"):
        from tracescore.store import postgres_jobs as pj
        if hasattr(pj, "judged_decisions"):  # (this tree: the snapshot's first read)
            pj.judged_decisions = lambda *a, **k: []  # type: ignore[attr-defined]
        else:
            pj.judged_snapshot = lambda *a, **k: {}  # type: ignore[attr-defined]
    store = open_store(url)
    out: dict[str, Any] = {}

    def analyze() -> None:  # (--analyze: the statistics autovacuum would have by now)
        if args.analyze:
            with store.transaction():
                store._x("ANALYZE")
    ctx = "passage " * 60

    def recs(prefix: int, n: int) -> list[Any]:
        return [RagRecord(trace_id=f"{prefix:08x}{i + 1:024x}", span_id=f"{i + 1:016x}",
                          query=f"question {i} about things", answer="an answer " * 40,
                          contexts=[Context(text=f"{ctx}{i}-{k}") for k in range(3)])
                for i in range(n)]

    # 1. records written with their jobs
    batch = recs(1, args.n)
    clock = Clock(store)
    for i in range(0, len(batch), args.batch):
        part = batch[i:i + args.batch]
        store.write_batch([(r, Decision(1.0, METRICS)) for r in part],
                          [NewJob(r.record_id, m, "1") for r in part for m in METRICS])
    out["records"] = clock.done(len(batch))

    # 2. jobs leased and completed, one ok score each
    analyze()
    clock = Clock(store)
    done = 0
    while done < args.jobs:
        jobs = store.lease_jobs("w", 60, 300.0, list(METRICS))
        if not jobs:
            break
        store.complete_jobs("w", [(j, [Score(j.metric, 0.5 + (j.job_id % 7) / 20)])
                                  for j in jobs])
        done += len(jobs)
    out["jobs"] = clock.done(done)

    # 3. judged batches: a decision per record, the judge metric's jobs completed 10 at a time
    judged = recs(2, args.judged)
    store.write_batch([(r, Decision(1.0, ("faithfulness",))) for r in judged],
                      [NewJob(r.record_id, "faithfulness", "1") for r in judged])
    decided = 0
    try:
        from tracescore.store import judge_budget as JB
    except ImportError:
        JB = None
    if JB is not None and hasattr(JB, "decide"):
        for i, r in enumerate(judged):
            JB.decide(store, "faithfulness", r.record_id, (i % 10) / 10, i % 10, time.time(),
                      1e9, lambda spent, seen, first, i=i: (0.5, i % 2 == 0))
            decided += 1
    analyze()
    clock = Clock(store)
    batches = 0
    while True:
        jobs = store.lease_jobs("w", 10, 300.0, ["faithfulness"])
        if not jobs:
            break
        store.complete_jobs("w", [(j, [Score("faithfulness", (j.job_id % 10) / 10)])
                                  for j in jobs])
        batches += 1
    out["judged"] = clock.done(batches)
    sums = 0
    try:
        sums = int(store._row("SELECT count(*) FROM hourly_judge_scores")[0])
    except Exception:  # noqa: BLE001 - a tree without the sums
        pass
    out["facts"] = {"decided": decided, "batches": batches, "judged_sum_rows": sums,
                    "jobs_done": done}
    store.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[],
                    help="NAME=PYTHON:PATH[:nosums] (repeat)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=5000, help="records written")
    ap.add_argument("--batch", type=int, default=500, help="records per write_batch")
    ap.add_argument("--jobs", type=int, default=6000, help="jobs completed")
    ap.add_argument("--judged", type=int, default=1000, help="judged records")
    ap.add_argument("--analyze", action="store_true",
                    help="ANALYZE before the jobs and the judged phase (untimed): the plans of "
                         "tables whose statistics are up to date, not of young tables")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0
    sys.path.insert(0, str(HERE.parent / "tests"))
    from pg import create_database, start_cluster

    trees: dict[str, tuple[str, str, bool]] = {}
    for spec in args.tree or [f"this={sys.executable}:{HERE.parent}"]:
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        trees[name] = (parts[0], str(Path(parts[1]).resolve()), "nosums" in parts[2:])
    admin, stop = start_cluster()
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in trees}
    load = [os.getloadavg()]
    names = list(trees)
    try:
        for rnd in range(args.rounds):
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                py, path, nosums = trees[name]
                url, drop = create_database(admin)
                env = {**os.environ, "PYTHONPATH": path}
                if nosums:
                    env["PGW_NO_SUMS"] = "1"
                cmd = [py, str(Path(__file__).resolve()), "--child", url, "--n", str(args.n),
                       "--batch", str(args.batch), "--jobs", str(args.jobs),
                       "--judged", str(args.judged)] + (["--analyze"] if args.analyze else [])
                p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900,
                                   cwd=tempfile.gettempdir())
                drop()
                if p.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{p.stderr[-3000:]}")
                r = json.loads(p.stdout.strip().splitlines()[-1])
                r["load1"] = round(os.getloadavg()[0], 2)
                results[name].append(r)
                print(f"round {rnd + 1} {name:7s} {r}", flush=True)
            load.append(os.getloadavg())
    finally:
        stop()
    print(f"\nload average 1-min during: {min(x[0] for x in load):.2f}–"
          f"{max(x[0] for x in load):.2f}")
    first = names[0]
    print("\n| measure | " + " | ".join(f"{n} (median; min–max)" for n in names)
          + "".join(f" | {n} ÷ {first}" for n in names[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(names) - 1))
    for phase, unit in (("records", "records/s"), ("jobs", "jobs/s"),
                        ("judged", "judged batches/s")):
        for field, label in (("per_s", unit), ("client_us", "client CPU µs each"),
                             ("server_us", "server CPU µs each")):
            vals = {n: [float(r[phase][field]) for r in results[n]] for n in names}
            print(trees_row(f"{phase}: {label}", vals, first))
    if args.json:
        Path(args.json).write_text(json.dumps({"trees": trees, "load": load,
                                               "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
