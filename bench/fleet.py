"""Fleet mode: scoring workers and capturing app processes on one database, PostgreSQL and
SQLite side by side.

1. Judge-bound scoring: N records with one judge call each (``context_relevance``) wait in
   the database; K = 1, 2, 4 ``tracescore worker`` processes (``--concurrency C``) score them
   against ``ScriptedJudgeServer(delay_s=0.2)`` (real HTTP, the real ``openai`` client).
   Throughput = jobs / (last score - first score), so worker start-up is not counted; the
   concurrency bound is K x C / 0.2 s jobs per second; the ratio shows how close to linear
   the fleet scales.
2. Capture: 4 app processes (``init(score=False)``) each log M records as fast as they can
   and flush; records/s = all records / (last flush - first submit).

PostgreSQL: a throwaway cluster started from the machine's binaries (tests/pg.py), or
``TRACESCORE_TEST_POSTGRES_URL``. SQLite: one file on this host (the embedded default; four
processes on one file is what one host can do).

Run:  python bench/fleet.py [--n 400] [--m 3000] [--concurrency 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine_info, md_table, print_machine  # noqa: E402

import tracescore  # noqa: E402
from tracescore.store.compat import connect_reader  # noqa: E402
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder  # noqa: E402

DELAY_S = 0.2
APP = """
import sys, time
import tracescore
db, m, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ts = tracescore.init(db=db, metrics=["token_f1"], score=False, max_queue=100_000)
t0 = time.time()
for i in range(m):
    ts.log_record(query=f"{tag} q{i}", answer="the answer", ground_truths=["the answer"])
assert ts.queue.flush(300)
print(t0, time.time(), ts.queue.dropped, flush=True)
ts.shutdown(timeout=60)
"""


def _one(db: str, sql: str) -> Any:
    conn = connect_reader(db)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


def _fresh(kind: str, admin: str | None, tmp: Path, name: str) -> str:
    if kind == "sqlite":
        return str(tmp / f"{name}.db")
    from pg import create_database

    assert admin is not None
    return create_database(admin)[0]


def scoring(db: str, n: int, workers: int, concurrency: int, tmp: Path) -> dict[str, Any]:
    ts = tracescore.init(db=db, metrics=["context_relevance"], score=False, max_queue=100_000)
    for i in range(n):
        ts.log_record(query=f"What battery does the Cargo {i} have?",
                      contexts=[f"The Cargo {i} ships with a 750 Wh battery."],
                      answer="750 Wh")
    assert ts.queue.flush(120)
    ts.shutdown()
    with ScriptedJudgeServer(lexical_responder, delay_s=DELAY_S) as srv:
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-bench"}
        procs = [subprocess.Popen(
            [sys.executable, "-m", "tracescore.cli", "worker", "--db", db, "--metric",
             "context_relevance", "--judge", "openai:bench", "--no-judge-canary",
             "--concurrency", str(concurrency), "--stop-timeout", "5"],
            env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(workers)]
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if _one(db, "SELECT count(*) FROM scores") >= n:
                    break
                time.sleep(0.25)
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)
    first = _one(db, "SELECT min(created_at) FROM scores")
    last = _one(db, "SELECT max(created_at) FROM scores")
    done = _one(db, "SELECT count(*) FROM scores WHERE status = 'ok'")
    jps = (done - 1) / (last - first) if last > first else float("nan")
    bound = workers * concurrency / DELAY_S
    return {"workers": workers, "concurrency": concurrency, "jobs": done,
            "jobs_per_s": round(jps, 1), "bound_jobs_per_s": bound,
            "ratio": round(jps / bound, 3)}


def capture(db: str, m: int, apps: int, tmp: Path) -> dict[str, Any]:
    script = tmp / "app.py"
    script.write_text(APP)
    tracescore.store.open_store(db).close()
    procs = [subprocess.Popen([sys.executable, str(script), db, str(m), f"app{i}"],
                              stdout=subprocess.PIPE, text=True) for i in range(apps)]
    spans = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        t0, t1, dropped = out.split()
        spans.append((float(t0), float(t1), int(dropped)))
    stored = _one(db, "SELECT count(*) FROM records")
    wall = max(s[1] for s in spans) - min(s[0] for s in spans)
    return {"apps": apps, "records": stored, "dropped": sum(s[2] for s in spans),
            "seconds": round(wall, 2), "records_per_s": round(stored / wall, 0)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400, help="records to score per run")
    ap.add_argument("--m", type=int, default=3000, help="records per app process")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    info = machine_info()
    print_machine(info)
    admin = os.environ.get("TRACESCORE_TEST_POSTGRES_URL")
    stop = None
    if admin is None:
        from pg import start_cluster

        admin, stop = start_cluster()
    results: dict[str, Any] = {"machine": info, "scoring": [], "capture": []}
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for k in (int(x) for x in args.workers.split(",")):
                for kind in ("postgres", "sqlite"):
                    db = _fresh(kind, admin, tmp, f"score{k}")
                    r = {"backend": kind, **scoring(db, args.n, k, args.concurrency, tmp)}
                    print(r, flush=True)
                    results["scoring"].append(r)
            for kind in ("postgres", "sqlite"):
                db = _fresh(kind, admin, tmp, "capture")
                r = {"backend": kind, **capture(db, args.m, 4, tmp)}
                print(r, flush=True)
                results["capture"].append(r)
    finally:
        if stop is not None:
            stop()
    print()
    print(md_table(["workers x concurrency", "backend", "jobs", "jobs/s", "bound jobs/s",
                    "ratio"],
                   [[f"{r['workers']} x {r['concurrency']}", r["backend"], r["jobs"],
                     r["jobs_per_s"], r["bound_jobs_per_s"], r["ratio"]]
                    for r in results["scoring"]]))
    print()
    print(md_table(["app processes", "backend", "records", "dropped", "s", "records/s"],
                   [[r["apps"], r["backend"], r["records"], r["dropped"], r["seconds"],
                     r["records_per_s"]] for r in results["capture"]]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
