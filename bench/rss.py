"""App memory: what ``import tracescore`` + ``init()`` add to a LangChain process, and whether
RSS creeps over many requests.

Start-up (each step in a fresh child process, RSS from ``/proc/self/status``):

1. bare: ``langchain_core.runnables`` + ``langchain_core.callbacks`` imported (the app);
2. ``import tracescore``;
3. ``tracescore.init()`` on a new database, and again on an existing one (schema up to date);
4. after the first scored record (a record with a ground truth: the local metrics run, so the
   scorer imports what they need — rouge-score and nltk).

Where the MB go: the top-level packages step 3/4 loaded (``sys.modules`` before/after), each
imported alone after the bare app in its own child (RSS delta; shared dependencies count for
the first package that pulls them, in the order listed), plus ``tracemalloc``'s top
Python-level allocation sites of ``init()``. ``-X importtime`` gives the chain of who imported
what: ``python -X importtime bench/rss.py --child init`` (read stderr).

Creep: ``log_record`` in a loop at ``sample_rate=0.01`` (the default local metrics score 1 % of
the records), paced so that the writer stores every one (the loop waits while the buffer is
half full), RSS sampled every ``--every`` requests; the writer and scorer run as in an app.
Flat means the caches and buffers are bounded.

Run:  python bench/rss.py [--requests 1000000] [--every 100000] [--seconds 240]
      [--base PATH]   (also measure start-up with the tracescore tree at PATH, side by side)
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Packages whose import cost is reported alone (when the step loaded them).
SUSPECTS = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "sqlite_utils", "pandas", "numpy", "scipy.special", "scipy.stats", "nltk",
            "sklearn", "rouge_score.rouge_scorer", "openai", "grpc", "google.protobuf",
            "click")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _bare_app() -> None:
    import langchain_core.callbacks  # noqa: F401
    import langchain_core.runnables  # noqa: F401


# -- children ---------------------------------------------------------------------------------
#: Packages only tracescore's dev extra installs (ppi-python pulls them): a production install
#: has none of them. ``scored-prod`` blocks them (an import of them fails, as when not installed).
DEV_ONLY = ("sklearn", "pandas")


def child(step: str, db: str) -> dict[str, Any]:
    if step == "scored-prod":
        for name in DEV_ONLY:
            sys.modules[name] = None  # type: ignore[assignment]  # "not installed"
        step = "scored"
    _bare_app()
    out: dict[str, Any] = {"bare": rss_mb()}
    before = set(sys.modules)
    import tracescore

    out["import"] = rss_mb()
    if step in ("init", "scored", "trace"):
        tracing = step == "trace"
        if tracing:
            import tracemalloc

            tracemalloc.start(25)
        ts = tracescore.init(db=db)
        out["init"] = rss_mb()
        if tracing:
            snap = tracemalloc.take_snapshot()
            stats = snap.statistics("filename")
            out["tracemalloc_top"] = [
                (str(s.traceback[0].filename).split("site-packages/")[-1], s.size / 2**20)
                for s in stats[:15]]
            out["tracemalloc_total_mb"] = sum(s.size for s in stats) / 2**20
        if step == "scored":
            ts.log_record(query="How long does a test ride last?",
                          answer="A test ride lasts 30 minutes.",
                          contexts=["Test rides last 30 minutes."],
                          ground_truths=["30 minutes"])
            ts.flush(120)
            out["scored"] = rss_mb()
        ts.shutdown(30)
    loaded = set(sys.modules) - before
    out["packages"] = sorted({m.split(".")[0] for m in loaded})
    out["suspects"] = [s for s in SUSPECTS if s in loaded]
    return out


def child_alone(module: str) -> dict[str, Any]:
    _bare_app()
    a = rss_mb()
    __import__(module)
    return {"module": module, "mb": rss_mb() - a}


def run_child(args: list[str], pythonpath: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, __file__, "--child", *args], env=env,
                         capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- creep --------------------------------------------------------------------------------------
def creep(requests: int, every: int, seconds: float, db: str) -> list[dict[str, Any]]:
    _bare_app()
    import tracescore

    ts = tracescore.init(db=db, sample_rate=0.01)
    rows = []
    t0 = time.perf_counter()
    contexts = [f"Document {i}: test rides last 30 minutes at shop {i}." for i in range(4)]
    n = 0
    while n < requests:
        for _ in range(every):
            if ts.queue.depth > ts.queue.max_size // 2:
                time.sleep(0.002)  # paced to what the writer stores: every request written
            ts.log_record(query=f"How long does test ride {n} last?",
                          answer=f"Test ride {n} lasts 30 minutes.", contexts=contexts,
                          ground_truths=["30 minutes"], metadata={"i": n})
            n += 1
        ts.flush(600)
        elapsed = time.perf_counter() - t0
        st = ts.stats()
        rows.append({"requests": n, "rss_mb": rss_mb(), "seconds": elapsed,
                     "dropped": ts.queue.dropped, "written": ts.queue.written,
                     "scored_jobs": st.get("scored_jobs")})
        print(f"  {n:>9,} requests  RSS {rows[-1]['rss_mb']:7.1f} MB  {elapsed:6.0f} s  "
              f"written {ts.queue.written:,}  dropped {ts.queue.dropped:,}", flush=True)
        if elapsed > seconds:
            break
    ts.shutdown(60)
    return rows


# -- main ---------------------------------------------------------------------------------------
def startup(pythonpath: str | None, label: str) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="tracescore-rss-")
    db = os.path.join(tmp, "app.db")
    fresh = run_child(["init", db], pythonpath)
    existing = run_child(["init", db], pythonpath)
    run_child(["scored", os.path.join(tmp, "scored.db")], pythonpath)  # its first: new db
    scored2 = run_child(["scored", os.path.join(tmp, "scored.db")], pythonpath)
    prod = run_child(["scored-prod", os.path.join(tmp, "scored.db")], pythonpath)
    res = {"label": label, "bare": existing["bare"],
           "import": existing["import"] - existing["bare"],
           "init_new_db": fresh["init"] - fresh["bare"],
           "init_existing_db": existing["init"] - existing["bare"],
           "after_first_score": scored2["scored"] - scored2["bare"],
           "after_first_score_prod": prod["scored"] - prod["bare"],
           "suspects_init": existing["suspects"], "suspects_init_new_db": fresh["suspects"],
           "suspects_scored": scored2["suspects"], "packages_init": existing["packages"]}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--every", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=240.0,
                    help="stop the creep loop after the sample that passes this many seconds")
    ap.add_argument("--base", metavar="PATH", help="another tracescore tree, side by side")
    ap.add_argument("--no-creep", action="store_true")
    ap.add_argument("--no-startup", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "alone":
            print(json.dumps(child_alone(rest[0])))
        else:
            print(json.dumps(child(kind, rest[0] if rest else os.path.join(
                tempfile.mkdtemp(), "t.db"))))
        return 0

    results: dict[str, Any] = {}
    print("# tracescore app memory\n")
    if not args.no_startup:
        startup_section(args, results)
    if not args.no_creep:
        creep_section(args, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def startup_section(args: Any, results: dict[str, Any]) -> None:
    trees = [(None, "this tree")] + ([(args.base, "base")] if args.base else [])
    print("## Start-up: RSS added over a bare LangChain process (MB)\n")
    print("| tree | bare app | import | init, new db | init, existing db | after first score | "
          f"after first score, without {'/'.join(DEV_ONLY)} |")
    print("|---|---|---|---|---|---|---|")
    for path, label in trees:
        r = startup(path, label)
        results[label] = r
        print(f"| {label} | {r['bare']:.0f} | +{r['import']:.1f} | +{r['init_new_db']:.1f} | "
              f"+{r['init_existing_db']:.1f} | +{r['after_first_score']:.1f} | "
              f"+{r['after_first_score_prod']:.1f} |")
    for _path, label in trees:
        r = results[label]
        print(f"\n{label}: heavy packages loaded by init (existing db): "
              f"{', '.join(r['suspects_init']) or 'none'}; new db: "
              f"{', '.join(r['suspects_init_new_db']) or 'none'}; after the first score: "
              f"{', '.join(r['suspects_scored']) or 'none'}")
    mods = list(dict.fromkeys(m for r in results.values() for k in
                              ("suspects_init", "suspects_init_new_db", "suspects_scored")
                              for m in r[k]))
    if mods:
        print("\n## Where the MB go: each package imported alone after the bare app\n")
        print("| package | MB |")
        print("|---|---|")
        alone = [run_child(["alone", m]) for m in mods]
        results["alone"] = alone
        for a in alone:
            print(f"| {a['module']} | {a['mb']:.1f} |")
    tdb = os.path.join(tempfile.mkdtemp(), "t.db")
    run_child(["init", tdb])  # the schema exists: init as an app restarts it
    tr = run_child(["trace", tdb])
    results["tracemalloc"] = tr
    print(f"\ntracemalloc during init (this tree): {tr['tracemalloc_total_mb']:.1f} MB of Python "
          "objects; top files:")
    for f, mb in tr["tracemalloc_top"][:8]:
        print(f"  {mb:6.2f} MB  {f}")



def creep_section(args: Any, results: dict[str, Any]) -> None:
    print(f"\n## Creep: log_record at sample_rate 0.01, RSS every {args.every:,} requests "
          f"(up to {args.requests:,} or ~{args.seconds:.0f} s)\n")
    rows = creep(args.requests, args.every, args.seconds,
                 os.path.join(tempfile.mkdtemp(prefix="tracescore-rss-"), "creep.db"))
    results["creep"] = rows
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        per_100k = (last["rss_mb"] - first["rss_mb"]) / max(
            1, last["requests"] - first["requests"]) * 100_000
        print(f"\nRSS after {first['requests']:,}: {first['rss_mb']:.1f} MB; after "
              f"{last['requests']:,}: {last['rss_mb']:.1f} MB ({per_100k:+.2f} MB per 100k "
              "requests after the first sample)")


if __name__ == "__main__":
    sys.exit(main())
