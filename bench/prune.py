"""Retention at scale (issue 19): ``prune``, ``prune --dry-run`` and ``flush()`` with a backlog,
this tree against an old tree, side by side.

What it builds: one SQLite database of ``--n`` records (default 100,000; the issue's figure is
1,000,000) over ``--days`` (default 77, so ~61 % are older than the 30-day retention), with
three scores and three finished jobs per record — the data of bench/read_scale.py, bulk loaded
the same way into a database created by the OLD tree's schema (the new tree migrates it when it
opens it, before anything is timed). ``--held`` of the old records (default 0.5 %) get an open
job, so they must stay.

What it times, each in a fresh process with the tree on PYTHONPATH, old and new alternately
(A B B A …), on a fresh copy of that database for every run:

1. ``prune`` — ``retention.prune`` with the default policy (30 days, batches of 500, pauses of
   at most 50 ms, space given back): wall and CPU of the call, and of the whole process
   (``wait4``). An old-tree run still going after ``--timeout`` seconds is stopped and reported
   as "> timeout", with how far it got (records left, free pages left).
2. ``prune --dry-run`` — ``retention.count_eligible``: wall, and the peak RSS of the process
   beside the peak RSS of a process that only opens the store (the difference is the count's).
3. ``flush()`` with a backlog — ``--backlog`` records (default 10,000) submitted with a local
   metric that costs ~0.2 ms, then ``flush()``: how many times flush asked the database whether
   jobs are open, the time spent in those queries, and the flushing thread's CPU.

Run from the repo root with the project's venv:

    git worktree add ../base 5585dcd
    python bench/prune.py --base ../base                       # 100k records, ~5 minutes
    python bench/prune.py --base ../base --n 1000000 --runs 1 --timeout 900

``--template PATH`` builds the database once and reuses it in later runs (the 1M build takes
about a minute plus the copies); the prune's JSON line also has its batches, its longest
write-lock hold and the seconds its index rebuild held the lock (bulk runs).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, load_average, machine_info, md_table, median, print_machine  # noqa: E402

DAY = 86400.0

#: The child programs (run with a tree on PYTHONPATH; print one JSON line).
PRUNE = r"""
import json, resource, sys, threading, time
from tracescore.store import open_store
from tracescore.store.retention import Retention, prune
from tracescore.store import retention as R
store = open_store(sys.argv[1])
app = {}
# The run's phases, time-stamped (the app writer's longest waits are placed in them): the rows'
# batches, giving space back, each checkpoint the run asks for; and the WAL's size per write.
phases, T0 = [], [time.perf_counter()]
def timed(name, fn):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            phases.append((name + (f" {a[0]}" if name == "checkpoint" and a else ""),
                           t - T0[0], time.perf_counter() - T0[0]))
    return wrapper
R._prune_rows = timed("rows", R._prune_rows)
_bulk = R._bulk_mode
import contextlib
@contextlib.contextmanager
def _bulk_timed(*a, **k):  # (its exit rebuilds the indexes the backlog was deleted without)
    cm = _bulk(*a, **k)
    cm.__enter__()
    try:
        yield
    except BaseException:
        if not cm.__exit__(*sys.exc_info()):
            raise
    else:
        t = time.perf_counter()
        cm.__exit__(None, None, None)
        phases.append(("index rebuild", t - T0[0], time.perf_counter() - T0[0]))
R._bulk_mode = _bulk_timed
holds = []  # every write transaction of the run that paused after it: (end, held s, paused s)
class _TimedPauses(R.Pauses):
    def __call__(self, busy_s):
        t = time.perf_counter()
        super().__call__(busy_s)
        holds.append((round(t - T0[0], 3), round(busy_s, 3), round(time.perf_counter() - t, 3)))
R.Pauses = _TimedPauses
from tracescore.store import vacuum as V
def _ckpt_timed(conn):  # (the give-back's end: vacuum.checkpoint_then_truncate, each step timed)
    for mode in ("PASSIVE", "drop cache", "TRUNCATE"):
        t = time.perf_counter()
        if mode != "drop cache":
            conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        elif hasattr(V, "drop_wal_cache"):
            V.drop_wal_cache(sys.argv[1])
        phases.append((f"give-back checkpoint {mode}", t - T0[0], time.perf_counter() - T0[0]))
V.checkpoint_then_truncate = _ckpt_timed
R.give_back_space = timed("give back", R.give_back_space)
if hasattr(store, "checkpoint"):
    store.checkpoint = timed("checkpoint", store.checkpoint)
if len(sys.argv) > 3:  # an app writer thread in this process (its own store), as in the app
    every, done, waits, ready = float(sys.argv[3]), threading.Event(), [], threading.Event()
    at, wal = [], sys.argv[1] + "-wal"
    def wal_mb():
        try:
            import os
            return os.stat(wal).st_size / 2**20
        except OSError:
            return 0.0
    def app_writes():
        mine, n = open_store(sys.argv[1]), 0
        while not done.is_set():
            if n == 1:
                ready.set()  # (its store is open and has written once: as in a running app)
            t = time.perf_counter()
            with mine.transaction() as conn:
                waits.append(time.perf_counter() - t)
                at.append((t - T0[0], waits[-1], wal_mb()))
                conn.execute("INSERT INTO counters(name, value) VALUES (?, ?)", (f"app-{n}", n))
            n += 1
            time.sleep(every)
        stored = mine.conn.execute("SELECT count(*) FROM counters WHERE name LIKE 'app-%'"
                                   ).fetchone()[0]
        waits.sort()
        q = lambda p: waits[min(len(waits) - 1, int(p * len(waits)))] if waits else None
        app.update(writes=n, stored=stored, wait_p50=q(0.5), wait_p99=q(0.99),
                   wait_max=q(1.0), over_300ms=sum(1 for w in waits if w > 0.3))
        def phase_of(t0, w):  # the phases the wait overlapped
            return [name for name, a, b in phases if a < t0 + w and b > t0] or ["between"]
        app["longest"] = [(round(t0, 3), round(w, 3), round(mb, 1), phase_of(t0, w))
                          for t0, w, mb in sorted(at, key=lambda x: -x[1])[:8]]
        def holds_in(t0, w):  # the run's transactions that ended inside the wait (and just after)
            return [h for h in holds if t0 - 0.05 < h[0] < t0 + w + 0.3]
        app["longest_holds"] = [holds_in(t0, w) for t0, w, _ in sorted(at, key=lambda x: -x[1])[:4]]
    writer = threading.Thread(target=app_writes)
    writer.start()
    ready.wait(120)
def io():  # bytes this process wrote (write(2) calls: WAL, database, temp files) and to storage
    d = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    return int(d["wchar"]), int(d["write_bytes"])
def hwm_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
w0, c0, t0 = io(), time.process_time(), time.perf_counter()
T0[0] = t0
res = prune(store, Retention(max_age_s=30 * 86400), now=float(sys.argv[2]))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
w1 = io()
if len(sys.argv) > 3:
    done.set()
    writer.join()
print(json.dumps({"wall": wall, "cpu": cpu, "records": res.records, "scores": res.scores,
                  "file_before": res.file_bytes_before, "file_after": res.file_bytes_after,
                  "pages_given_back": getattr(res, "pages_given_back", None),
                  "vacuum_steps": getattr(res, "vacuum_steps", None),
                  "free_pages_left": getattr(res, "free_pages_left", None),
                  "batches": res.batches, "longest_hold_s": getattr(res, "longest_hold_s", None),
                  "bulk_indexes": getattr(res, "bulk_indexes", None),
                  "rebuild_s": getattr(res, "rebuild_s", None),
                  "paused_s": getattr(res, "paused_s", None),
                  "pauses_skipped": getattr(res, "pauses_skipped", None), "app_probe": app,
                  "wrote_bytes": w1[0] - w0[0], "storage_write_bytes": w1[1] - w0[1],
                  "peak_rss_mb": hwm_mb(),
                  "phases": [(n, round(a, 3), round(b, 3)) for n, a, b in phases],
                  "holds": holds}))
"""

#: Before the timed runs: the tree opens its copy of the template (its migrations: the new
#: schema may drop an index) and gives the pages that freed back, so each tree's prune runs on
#: a database as that tree keeps it, not on the upgrade.
MIGRATE = r"""
import json, sqlite3, sys
from tracescore.store import open_store
open_store(sys.argv[1]).close()
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
conn.executescript("PRAGMA incremental_vacuum;")
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
indexes = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'"
                                            " AND name NOT LIKE 'sqlite_%'"))
print(json.dumps({"freed_pages": free, "indexes": indexes}))
"""

DRY = r"""
import json, sys, time
from tracescore.store import open_store
from tracescore.store.retention import count_eligible

def hwm_kb():  # this process's peak RSS (ru_maxrss would carry the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

store = open_store(sys.argv[1])
base = hwm_kb()
t0 = time.perf_counter()
eligible, older = (count_eligible(store, float(sys.argv[3]) - 30 * 86400)
                   if sys.argv[2] == "1" else (0, 0))
wall = time.perf_counter() - t0
print(json.dumps({"wall": wall, "eligible": eligible, "older": older, "rss_open_kb": base,
                  "rss_kb": hwm_kb()}))
"""

FLUSH = r"""
import json, sys, threading, time
import tracescore
from tracescore.record import Context, RagRecord
from tracescore.store.sqlite import Store
from tracescore.testing import ScriptedMetric

n = int(sys.argv[2])
asked = {"n": 0, "s": 0.0}
real = Store.has_open_jobs
flusher = []

def counting(self, metrics):
    t = time.perf_counter()
    try:
        return real(self, metrics)
    finally:
        if threading.get_ident() in flusher:
            asked["n"] += 1
            asked["s"] += time.perf_counter() - t

Store.has_open_jobs = counting

def busy(r):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.0002:
        pass
    return 0.5

ts = tracescore.init(db=sys.argv[1], metrics=[ScriptedMetric(busy, name="m")], sample_rate=1.0,
                     retention=None, max_queue=n + 1000)
now = time.time()
for i in range(n):
    t = int((now - 1) * 1e9)
    ts.submit(RagRecord(trace_id=format(0xA000_0000 + i, "032x"), span_id=format(0xB000 + i, "016x"),
                        query=f"q{i}", answer="a", contexts=(Context(text="c"),),
                        start_time_ns=t - 1000, end_time_ns=t), hold_span=False)
flusher.append(threading.get_ident())
c0, t0 = time.thread_time(), time.perf_counter()
ok = ts.flush(600)
wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
ts.shutdown(30)
print(json.dumps({"ok": ok, "wall": wall, "thread_cpu": cpu, "queries": asked["n"],
                  "query_s": asked["s"]}))
"""


#: ``--probe``: a writer beside the prune, as the app's would be (its own process and
#: connection, SQLite's default busy handler and autocheckpoint): every ``interval`` s one
#: write transaction of one row; it reports how long each waited for the lock (BEGIN) and how
#: long its COMMIT took (a commit checkpoints the WAL when it is over 1,000 pages — the
#: pruner's pages included), until the file STOP exists; then how many rows it wrote.
PROBE = r"""
import json, os, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
stop, interval, waits, commits, n = sys.argv[2], float(sys.argv[3]), [], [], 0
open(stop + ".ready", "w").close()
while not os.path.exists(stop):
    t = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    t1 = time.perf_counter()
    conn.execute("INSERT INTO counters(name, value) VALUES (?, ?)", (f"probe-{n}", n))
    conn.execute("COMMIT")
    t2 = time.perf_counter()
    n += 1
    waits.append(t1 - t)
    commits.append(t2 - t1)
    time.sleep(interval)
stored = conn.execute("SELECT count(*) FROM counters WHERE name LIKE 'probe-%'").fetchone()[0]
waits.sort(); commits.sort()
q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None
print(json.dumps({"writes": n, "stored": stored, "wait_max": q(waits, 1.0),
                  "wait_p99": q(waits, 0.99), "wait_p50": q(waits, 0.5),
                  "commit_max": q(commits, 1.0), "commit_p99": q(commits, 0.99),
                  "over_300ms": sum(1 for w in waits if w > 0.3)}))
"""


def with_probe(db: Path, tree: Path, interval: float, run: Any) -> tuple[Any, dict[str, Any]]:
    """``run()`` with a :data:`PROBE` writer on ``db`` beside it; (its result, the probe's)."""
    stop = Path(str(db) + ".probe-stop")
    for f in (stop, Path(str(stop) + ".ready")):
        f.unlink(missing_ok=True)
    p = subprocess.Popen([sys.executable, "-c", PROBE, str(db), str(stop), str(interval)],
                         env=env_for(tree), cwd=tree, stdout=subprocess.PIPE, text=True)
    while not Path(str(stop) + ".ready").exists():
        time.sleep(0.01)
    try:
        res = run()
    finally:
        stop.touch()
        out, _ = p.communicate(timeout=600)
    stop.unlink(missing_ok=True)
    Path(str(stop) + ".ready").unlink(missing_ok=True)
    return res, json.loads(out.strip().splitlines()[-1])


# -- building the database ---------------------------------------------------------------------
def build(path: Path, n: int, days: float, held: float, base: Path) -> dict[str, Any]:
    """The template database: the old tree's schema, ``n`` records of bench/read_scale.py's
    data, ``held`` of the old ones with an open job."""
    from read_scale import SqliteBackend, chunks, records

    be = SqliteBackend(path.parent)
    be.drop(str(path))
    subprocess.run([sys.executable, "-c", "import sys; from tracescore.store import open_store;"
                    " open_store(sys.argv[1]).close()", str(path)],
                   env=env_for(base), cwd=base, check=True)
    t0 = time.perf_counter()
    now = time.time()
    be.load(str(path), chunks(records(n, days, now), 50_000), True, {}, None)
    conn = sqlite3.connect(path, isolation_level=None)
    cutoff = now - 30 * DAY
    old = int(conn.execute("SELECT count(*) FROM records WHERE created_at < ?",
                           (cutoff,)).fetchone()[0])
    k = max(1, int(old * held))
    conn.execute("UPDATE jobs SET status = 'pending' WHERE job_id IN (SELECT j.job_id FROM jobs j"
                 " JOIN records r ON r.record_id = j.record_id WHERE r.created_at < ?"
                 " AND j.metric = 'faithfulness' ORDER BY r.created_at LIMIT ?)", (cutoff, k))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"records": n, "older": old, "held": k, "bytes": path.stat().st_size,
            "build_s": time.perf_counter() - t0, "now": now}


def env_for(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACESCORE_")}
    env["PYTHONPATH"] = str(tree)
    return env


def copy_db(src: Path, dst: Path) -> None:
    for s in ("", "-wal", "-shm"):
        Path(str(dst) + s).unlink(missing_ok=True)
    shutil.copyfile(src, dst)
    os.sync()  # (the copy's writeback would otherwise compete with the timed run's I/O)


# -- running -----------------------------------------------------------------------------------
def child(code: str, args: list[str], tree: Path, timeout: float | None) -> dict[str, Any]:
    """One process: its JSON line, plus wall and CPU (wait4) of the whole process;
    ``{"timeout": True, ...}`` if it was stopped after ``timeout`` seconds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", code, *args], env=env_for(tree),
                             cwd=tree, stdout=out, stderr=err, start_new_session=True)
        killer = threading.Timer(timeout, os.killpg, (p.pid, signal.SIGKILL)) \
            if timeout else None
        if killer is not None:
            killer.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if killer is not None:
            killer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = out.read().decode().strip().splitlines()
        if lines and lines[-1].startswith("{"):
            res: dict[str, Any] = json.loads(lines[-1])
        else:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-1500:]
            if wall < (timeout or 1e18):
                raise RuntimeError(f"child failed ({tree}): {tail}")
            res = {"timeout": True}
        res["process_wall"] = wall
        res["process_cpu"] = ru.ru_utime + ru.ru_stime
        return res


def progress(db: Path) -> dict[str, int]:
    """How far a stopped run got."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {"records_left": int(conn.execute("SELECT count(*) FROM records").fetchone()[0]),
                "free_pages_left": int(conn.execute("PRAGMA freelist_count").fetchone()[0])}
    finally:
        conn.close()


def mmm(xs: list[float], fmt: str = "{:.2f}") -> str:
    if not xs:
        return "—"
    return f"{fmt.format(median(xs))} ({fmt.format(min(xs))}…{fmt.format(max(xs))})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the old tree (a git worktree)")
    ap.add_argument("--n", type=int, default=100_000, help="records in the database")
    ap.add_argument("--days", type=float, default=77.0)
    ap.add_argument("--held", type=float, default=0.005,
                    help="share of the old records with an open job (kept)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each tree per measure")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="stop a prune run after this many seconds")
    ap.add_argument("--backlog", type=int, default=10_000, help="records flush() waits for")
    ap.add_argument("--skip", default="", help="comma list of prune,dry,flush to skip")
    ap.add_argument("--probe", type=float, default=0.0, metavar="S",
                    help="a writer process beside each prune, one write every S seconds: how "
                         "long it waited for the lock, whether all its rows are stored")
    ap.add_argument("--app-probe", type=float, default=None, metavar="S",
                    help="a writer thread in the pruning process (its own store, the app's "
                         "transaction path), one write every S seconds: its waits")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--template", type=Path, default=None,
                    help="build the database here once and reuse it in later runs (its facts "
                         "are kept beside it, in PATH.json); the 1M build takes minutes")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    info = machine_info()
    print_machine(info)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="prune-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    trees = {"old": a.base.resolve(), "new": REPO}
    template = a.template or work / "template.db"
    saved = Path(str(template) + ".json")
    if a.template is not None and template.exists() and saved.exists():
        facts = json.loads(saved.read_text())
        if (facts["records"], facts["days"], facts["held_share"]) != (a.n, a.days, a.held):
            raise SystemExit(f"{template} holds other data ({facts}); remove it")
        print(f"\nreusing {template}", flush=True)
    else:
        print(f"\nbuilding {a.n:,} records over {a.days:g} days …", flush=True)
        facts = build(template, a.n, a.days, a.held, trees["old"])
        facts.update(days=a.days, held_share=a.held)
        if a.template is not None:
            saved.write_text(json.dumps(facts))
    print(f"  {facts['older']:,} older than 30 days, {facts['held']:,} of them held; "
          f"{facts['bytes'] / 1e6:,.0f} MB; built in {facts['build_s']:.0f} s", flush=True)
    now = repr(facts["now"])  # one clock for every run: the same records are old in each
    results: dict[str, Any] = {"machine": info, "db": facts, "args": {
        k: str(v) for k, v in vars(a).items()}}
    order = [("old", "new") if i % 2 == 0 else ("new", "old") for i in range(a.runs)]
    run_db = work / "run.db"

    if "dry" not in skip:
        dry: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        copies = {w: work / f"dry-{w}.db" for w in trees}  # (the new tree migrates its copy)
        for w, path in copies.items():
            copy_db(template, path)
            child(DRY, [str(path), "0", now], trees[w], None)
        load0 = load_average()
        for pair in order:
            for which in pair:
                dry[which].append(child(DRY, [str(copies[which]), "1", now], trees[which],
                                        None))
        opened = child(DRY, [str(copies["new"]), "0", now], trees["new"], None)
        results["dry_run"] = {**dry, "open_only": opened, "load": [load0, load_average()]}
        print("dry run:", {k: [round(r["wall"], 3) for r in v] for k, v in dry.items()},
              flush=True)

    if "flush" not in skip:
        fl: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        load0 = load_average()
        for pair in order:
            for which in pair:
                copy_db(template, run_db)  # (an empty db would do; this one has its size)
                for s in ("", "-wal", "-shm"):
                    Path(str(run_db) + s).unlink(missing_ok=True)
                fl[which].append(child(FLUSH, [str(run_db), str(a.backlog)], trees[which],
                                       None))
        results["flush"] = {**fl, "load": [load0, load_average()]}
        print("flush:", {k: [(r["queries"], round(r["query_s"], 3)) for r in v]
                         for k, v in fl.items()}, flush=True)

    if "prune" not in skip:
        pr: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        own = {w: work / f"template-{w}.db" for w in trees}
        for w, path in own.items():
            copy_db(template, path)
            got = child(MIGRATE, [str(path)], trees[w], None)
            print(f"  {w} tree's copy: {got['freed_pages']:,} pages freed by its migrations"
                  f" (given back before timing); indexes: {', '.join(got['indexes'])}",
                  flush=True)
        results["migrated"] = {w: str(p) for w, p in own.items()}
        load0 = load_average()
        for pair in order:
            for which in pair:
                copy_db(own[which], run_db)
                args = [str(run_db), now] + ([str(a.app_probe)] if a.app_probe else [])
                run = functools.partial(child, PRUNE, args, trees[which], a.timeout)
                if a.probe:
                    r, probe = with_probe(run_db, trees[which], a.probe, run)
                    r["probe"] = probe
                else:
                    r = run()
                if r.get("timeout"):
                    r.update(progress(run_db))
                pr[which].append(r)
                print(f"  prune {which}: {json.dumps(r)}", flush=True)
        results["prune"] = {**pr, "load": [load0, load_average()]}

    report(results, a)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    if a.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


def report(res: dict[str, Any], a: argparse.Namespace) -> None:
    rows: list[list[Any]] = []

    def ratio(new: list[float], old: list[float]) -> str:
        """old ÷ new of the medians (> 1: the new tree is faster / smaller)."""
        if not new or not old or median(new) == 0:
            return "—"
        return f"{median(old) / median(new):.1f}"

    if "prune" in res:
        p = res["prune"]
        for key, label in (("wall", "prune: wall of the call, s"),
                           ("cpu", "prune: CPU of the call, s")):
            old = [r[key] for r in p["old"] if not r.get("timeout")]
            new = [r[key] for r in p["new"] if not r.get("timeout")]
            stopped = [r for r in p["old"] if r.get("timeout")]
            old_txt = mmm(old) if old else "stopped" if key == "cpu" else (
                f"> {a.timeout:g} (stopped; {stopped[0]['records_left']:,} records and "
                f"{stopped[0]['free_pages_left']:,} free pages left)")
            rows.append([label, old_txt, mmm(new),
                         ratio(new, old) if old else f"> {a.timeout / median(new):.0f}"
                         if new and key == "wall" else "—",
                         f"{p['load'][0][0]}→{p['load'][1][0]}"])
        nr = [r for r in p["new"] if not r.get("timeout")]
        if nr:
            r = nr[0]
            rows.append(["prune: records deleted / file MB before → after (new)",
                         "", f"{r['records']:,} / {r['file_before'] / 1e6:,.0f} → "
                         f"{r['file_after'] / 1e6:,.0f}",
                         f"{r['pages_given_back']:,} pages in {r['vacuum_steps']} steps", ""])
        def amp(r: dict[str, Any]) -> float:  # bytes written per byte the file shrank
            return r["wrote_bytes"] / max(1, r["file_before"] - r["file_after"])

        for fn, label, fmt in ((lambda r: r["wrote_bytes"] / 1e6, "prune: MB written (wchar)",
                                "{:.0f}"),
                               (amp, "prune: written ÷ freed (file bytes)", "{:.2f}"),
                               (lambda r: r["peak_rss_mb"], "prune: peak RSS, MB", "{:.0f}")):
            old = [fn(r) for r in p["old"] if r.get("wrote_bytes") is not None]
            new = [fn(r) for r in nr if r.get("wrote_bytes") is not None]
            rows.append([label, mmm(old, fmt), mmm(new, fmt), ratio(new, old) if old else "—",
                         ""])
        for key, label in (("batches", "prune: batches (write transactions of records)"),
                           ("longest_hold_s", "prune: longest write-lock hold, s"),
                           ("rebuild_s", "prune: index rebuild (one hold), s"),
                           ("paused_s", "prune: paused between write transactions, s"),
                           ("pauses_skipped", "prune: pauses skipped (nobody else wrote)")):
            old = [float(r[key]) for r in p["old"] if r.get(key) is not None]
            new = [float(r[key]) for r in nr if r.get(key) is not None]
            rows.append([label, mmm(old) if old else "—", mmm(new) if new else "—", "", ""])
        for probe, who in (("probe", "writer of another process"),
                           ("app_probe", "writer thread of the pruning process")):
            for key, label in (("wait_p50", "wait for the lock p50, ms"),
                               ("wait_p99", "wait p99, ms"), ("wait_max", "wait max, ms")):
                old = [1000 * r[probe][key] for r in p["old"] if r.get(probe)]
                new = [1000 * r[probe][key] for r in nr if r.get(probe)]
                if old or new:
                    rows.append([f"{who}: {label}", mmm(old) if old else "—",
                                 mmm(new) if new else "—", "", ""])
            lost = [r[probe]["writes"] - r[probe]["stored"] for r in p["old"] + nr
                    if r.get(probe)]
            if lost:
                rows.append([f"{who}: writes not stored (all runs)", "", str(sum(lost)), "",
                             ""])
    if "dry_run" in res:
        d = res["dry_run"]
        rows.append(["dry run: wall of count_eligible, s", mmm([r["wall"] for r in d["old"]],
                                                              "{:.3f}"),
                     mmm([r["wall"] for r in d["new"]], "{:.3f}"),
                     ratio([r["wall"] for r in d["new"]], [r["wall"] for r in d["old"]]),
                     f"{d['load'][0][0]}→{d['load'][1][0]}"])
        base_rss = d["open_only"]["rss_kb"] / 1024
        rows.append(["dry run: peak RSS of the process, MB (open only: "
                     f"{base_rss:.0f})", mmm([r["rss_kb"] / 1024 for r in d["old"]], "{:.0f}"),
                     mmm([r["rss_kb"] / 1024 for r in d["new"]], "{:.0f}"), "", ""])
        rows.append(["dry run: peak RSS above the open store, MB",
                     mmm([(r["rss_kb"] - r["rss_open_kb"]) / 1024 for r in d["old"]], "{:.1f}"),
                     mmm([(r["rss_kb"] - r["rss_open_kb"]) / 1024 for r in d["new"]], "{:.1f}"),
                     "", ""])
        same = {(r["eligible"], r["older"]) for r in d["old"] + d["new"]}
        pruned = {r["records"] for r in res.get("prune", {}).get("new", [])}
        rows.append(["dry run: (eligible, older); old = new = what prune deleted", "",
                     str(sorted(same)), "yes" if len(same) == 1 and (
                         not pruned or pruned == {next(iter(same))[0]}) else "NO", ""])
    if "flush" in res:
        f = res["flush"]
        for key, label, fmt in (("queries", "flush: open-jobs queries by flush", "{:.0f}"),
                                ("query_s", "flush: time in those queries, s", "{:.3f}"),
                                ("thread_cpu", "flush: CPU of the flushing thread, s", "{:.3f}"),
                                ("wall", "flush: wall, s", "{:.2f}")):
            old = [float(r[key]) for r in f["old"]]
            new = [float(r[key]) for r in f["new"]]
            rows.append([label, mmm(old, fmt), mmm(new, fmt),
                         ratio(new, old),
                         f"{f['load'][0][0]}→{f['load'][1][0]}"])
        rows.append(["flush: returned True", str({r["ok"] for r in f["old"]}),
                     str({r["ok"] for r in f["new"]}), "", ""])
    print()
    print(f"{a.n:,} records, {res['db']['older']:,} older than 30 days "
          f"({res['db']['held']:,} held by an open job); median (min…max) of {a.runs} runs "
          "per tree, alternated")
    print(md_table(["measure", "old", "new", "old ÷ new", "load 1-min"], rows))


if __name__ == "__main__":
    main()
