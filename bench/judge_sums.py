"""The adaptive judge's estimates from hourly sums (issue 33, session 14): ``report`` with a
budgeted judge metric at 100k and 1M decisions, the row path (every decision row of the
window, the estimator on them: the code before session 14, kept as
``active_summary.summary_from_rows``) beside the sums path (``hourly_judge_*``).

What it builds (SQLite, this tree's schema): ``--n`` judge decisions of ``faithfulness`` over
``--days`` (default 30) up to now — proxy f uniform in [0, 1], π = 0.05 + 0.9·|f − 0.5|·2
clipped to [0.05, 1], 3 % with π = 0 (budget spent), selected when a hash < π — and for each
decided record its score row: the judge's ok score (y ≈ f + noise) when selected (2 % judge
errors), a skipped score when not; ``hourly_scores`` through the store's ``rollup.Delta``. The
judge sums are then filled by the migration's backfill (timed: what an existing database pays
once when it is upgraded).

What it times: whole ``tracescore report --db … --json --since S`` processes (interpreter
start and imports included; the reader's clock frozen at the build's "now", so both paths
read the same window) — the row path (``active_summaries`` patched back to the row
reader before the CLI runs) and the sums path, alternately A B B A …, wall and CPU (user +
sys of the child); and in process, the estimate read alone (``active_summaries``). Before
timing, the two paths' JSON estimates are checked equal (1e-9 relative).

    python bench/judge_sums.py --n 100000
    python bench/judge_sums.py --n 1000000 --runs 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, load_average, machine_info, print_machine  # noqa: E402

DAY = 86400.0
METRIC = "faithfulness"
CHUNK = 50_000

ROW_PATH = """
import sys
from tracescore.monitor import active_summary as AS
from tracescore.read import decisions as D
from tracescore.read.query import SegmentIndex

def rows_path(conn, window, names, *, where=None, seg=None):
    metrics = set(D.adaptive_metrics(conn, window))
    ids = (seg or SegmentIndex(conn)).matching(where)
    out = {}
    for name, metric in sorted(names.items()):
        if metric in metrics:
            s = AS.summary_from_rows(conn, metric, name, window, ids)
            if s is not None:
                out[name] = s
    return out

AS.active_summaries = rows_path
"""


def build(path: str, n: int, days: float, seed: int) -> dict[str, float]:
    from tracescore.store import judge_rollup as JR
    from tracescore.store import open_store
    from tracescore.store.rollup import Delta

    open_store(path).close()
    rng = random.Random(seed)
    now = time.time()
    t0 = now - days * DAY
    conn = sqlite3.connect(path)
    t_load = time.perf_counter()
    delta = Delta()
    for start in range(0, n, CHUNK):
        dec, sco = [], []
        for i in range(start, min(n, start + CHUNK)):
            t = t0 + (i + rng.random()) * (days * DAY / n)
            f = rng.random()
            pi = 0.0 if rng.random() < 0.03 else min(1.0, max(0.05, 0.05 + 1.8 * abs(f - 0.5)))
            sel = pi > 0 and rng.random() < pi
            rid = f"{i:032x}-{i:016x}"
            dec.append((rid, METRIC, t, f, 0, pi, 1 if sel else 0,
                        "budget spent" if pi == 0 else None))
            if sel and rng.random() < 0.98:
                y = min(1.0, max(0.0, f + rng.gauss(0, 0.2)))
                row = (rid, rid[:32], METRIC, METRIC, "1", y, "ok", t + 2.0, 0, "judge")
            elif sel:
                row = (rid, rid[:32], METRIC, METRIC, "1", None, "error", t + 2.0, 0, "judge")
            else:
                row = (rid, rid[:32], METRIC, METRIC, "1", None, "skipped", t + 1.0, 0, "")
            sco.append(row)
            delta.add_score(row[7], METRIC, 0, "1", row[9], METRIC, row[5], None, row[6])
        conn.executemany("INSERT INTO judge_decisions(record_id, metric, created_at, proxy,"
                         " bin, pi, selected, reason) VALUES (?,?,?,?,?,?,?,?)", dec)
        conn.executemany("INSERT INTO scores(record_id, trace_id, name, metric,"
                         " metric_version, value, status, created_at, seg_id, judge_model)"
                         " VALUES (?,?,?,?,?,?,?,?,?,?)", sco)
        conn.commit()
    delta.write(conn)
    conn.execute("DELETE FROM hourly_judge_decisions")
    conn.execute("DELETE FROM hourly_judge_scores")
    conn.commit()
    load_s = time.perf_counter() - t_load
    t_fill = time.perf_counter()
    JR.backfill(conn, "sqlite")
    conn.commit()
    fill_s = time.perf_counter() - t_fill
    hours = conn.execute("SELECT count(*) FROM hourly_judge_decisions").fetchone()[0]
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()
    return {"load_s": load_s, "backfill_s": fill_s, "rollup_rows": hours, "now": now}


FREEZE = """
import time as _t
import tracescore.read.db as _d
class _Clock:
    def time(self):
        return {now!r}
    def __getattr__(self, name):
        return getattr(_t, name)
_d.time = _Clock()
"""


def run_report(path: str, since: str, rows: bool, now: float
               ) -> tuple[float, float, dict[str, Any]]:
    code = FREEZE.format(now=now) + (ROW_PATH if rows else "") + (
        "\nfrom tracescore.cli import main\n"
        f"main(['report', '--db', {path!r}, '--since', {since!r}, '--json', '--worst', '0'])\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in (0, 1, 2):
        raise SystemExit(f"report failed ({res.returncode}): {res.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(res.stdout)


def in_process(path: str, since_s: float | None, rows: bool, now: float
               ) -> tuple[float, float]:
    from tracescore.monitor import active_summary as AS
    from tracescore.read.db import open_db
    from tracescore.read.query import SegmentIndex, Window

    conn = open_db(path)
    try:
        w = Window(None if since_s is None else now - since_s, None)
        t, c = time.perf_counter(), time.process_time()
        if rows:
            AS.summary_from_rows(conn, METRIC, METRIC, w, SegmentIndex(conn).matching(None))
        else:
            AS.active_summaries(conn, w, {METRIC: METRIC})
        return time.perf_counter() - t, time.process_time() - c
    finally:
        conn.close()


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    ea, eb = a["judge_budget"][METRIC], b["judge_budget"][METRIC]
    for k in ("decided", "judged", "not_represented_budget_spent", "judged_without_score"):
        assert ea[k] == eb[k], (k, ea[k], eb[k])
    for k in ("value", "lo", "hi", "se"):
        x, y = ea["estimate"][k], eb["estimate"][k]
        assert math.isclose(x, y, rel_tol=1e-9), (k, x, y)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--since", default="all,7d")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    print_machine(machine_info())
    with tempfile.TemporaryDirectory(dir=args.workdir) as d:
        path = os.path.join(d, "judge.db")
        built = build(path, args.n, args.days, seed=1)
        size = os.path.getsize(path) / 1e6
        print(f"n = {args.n:,} decisions over {args.days:g} days: load {built['load_s']:.1f} s,"
              f" backfill of the sums {built['backfill_s']:.2f} s ({built['rollup_rows']:,}"
              f" hour rows), file {size:.0f} MB")
        for since in args.since.split(","):
            _, _, a = run_report(path, since, True, built["now"])
            _, _, b = run_report(path, since, False, built["now"])
            _same(a, b)
            times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            load0 = load_average()
            for i in range(args.runs):
                for rows in ((True, False) if i % 2 == 0 else (False, True)):
                    w, c, _ = run_report(path, since, rows, built["now"])
                    times[rows].append((w, c))
            since_s = None if since == "all" else float(since.rstrip("d")) * DAY
            ip = {rows: [in_process(path, since_s, rows, built["now"]) for _ in range(args.runs)]
                  for rows in (True, False)}
            for rows in (True, False):
                w = statistics.median(x[0] for x in times[rows])
                c = statistics.median(x[1] for x in times[rows])
                iw = statistics.median(x[0] for x in ip[rows])
                ic = statistics.median(x[1] for x in ip[rows])
                print(f"since {since:>4} {'rows' if rows else 'sums'}: report process wall"
                      f" {w:.2f} s CPU {c:.2f} s | estimate read alone wall {iw * 1000:.1f} ms"
                      f" CPU {ic * 1000:.1f} ms  (runs {args.runs})")
            print(f"  load average {load0} -> {load_average()};"
                  f" decided {b['judge_budget'][METRIC]['decided']:,}")


if __name__ == "__main__":
    main()
