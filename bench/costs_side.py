"""Request-path cost of two trees side by side, in one run (issue 33, "the costs that came back").

The parent starts one long-lived child per tree (``--python`` of each tree's venv; each child
imports *its* tracescore) and alternates blocks between them: old, new, new, old, ... so drift on
a noisy machine hits both alike; ratios are taken per round (new block / old block), then the
median over rounds.

Per child and app (``chain``: the example LCEL chain; ``agent``: the create_agent graph of
``hot_path.py``), the variants are tracescore at sample_rate 1.0 and 0.0 (an in-memory span
exporter on both) and, for the end-to-end figure, no callbacks:

- **replay**: the callbacks of real invokes recorded once and replayed straight into the handler
  on one thread (no LangChain): this thread's CPU µs per request;
- **e2e**: ``app.invoke(q)`` with the handler, minus the same without callbacks in the same
  block: added wall µs per request (median of the block).

Each block is drained (``ts.flush()``) outside its timed window.

Run:  python bench/costs_side.py --old /work/venv-old/bin/python --new /work/venv-costs/bin/python
      [--app chain|agent] [--rounds 15] [--per-round 200]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


# -- child --------------------------------------------------------------------------------------
def child(app_name: str) -> None:
    # this child's tree first (its venv's editable install): hot_path puts its own checkout on
    # sys.path, which must not shadow the tree under test
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tracescore

    sys.path.insert(0, str(HERE))
    import hot_path as H  # the new tree's bench helpers; they only use LangChain

    app = H.build_agent_app() if app_name == "agent" else H.build_chain()
    questions = [q["question"] for q in H.load_questions()[:20]]
    recs = H.record_events(app, questions)
    ids = [H.run_ids(e) for e in recs]
    print(f"tree {Path(tracescore.__file__).parent.parent}", file=sys.stderr)
    tmp = tempfile.mkdtemp(prefix="costs-side-")
    variants: dict[str, Any] = {}
    for rate in ("1.0", "0.1", "0.0"):
        exp = InMemorySpanExporter()
        ts = tracescore.init(db=os.path.join(tmp, f"r{rate}.db"), sample_rate=float(rate),
                             span_exporter=exp,
                             metrics=["rouge", "bleu", "token_f1", "exact_match",
                                      "rgb_accuracy", "rgb_rejection"])
        if os.environ.get("COSTS_NO_BACKGROUND"):  # the hot path alone: nothing reaches the writer
            ts.queue.put = lambda *a, **k: True
        variants[rate] = (ts, ts.langchain_handler(), exp)
    # warm-up
    for ts, h, exp in variants.values():
        for i, m in enumerate(H.fresh_maps(recs, ids, 0, 20)):
            H.replay(h, recs[i % len(recs)], m)
            app.invoke(questions[i % len(questions)], config={"callbacks": [h]})
        ts.flush(60)
        exp.clear()
    print("ready", flush=True)
    start = 0
    for line in sys.stdin:
        kind, rate, n_s = line.split()
        n = int(n_s)
        ts, h, exp = variants[rate]
        gc.collect()
        if kind == "replay":
            maps = H.fresh_maps(recs, ids, start, n)
            c0 = time.thread_time_ns()
            for i in range(n):
                H.replay(h, recs[(start + i) % len(recs)], maps[i])
            out = (time.thread_time_ns() - c0) / 1000 / n
        else:  # e2e: paired with no callbacks in the same block, alternating per request
            perf = time.perf_counter_ns
            with_h, without = [], []
            for i in range(n):
                q = questions[(start + i) % len(questions)]
                t0 = perf()
                app.invoke(q, config={"callbacks": [h]})
                t1 = perf()
                app.invoke(q)
                t2 = perf()
                with_h.append((t1 - t0) / 1000)
                without.append((t2 - t1) / 1000)
            out = statistics.median(with_h) - statistics.median(without)
        start += n
        ts.flush(120)
        exp.clear()
        print(json.dumps(out), flush=True)
    for ts, _, _ in variants.values():
        ts.shutdown()


# -- parent -------------------------------------------------------------------------------------
class Child:
    def __init__(self, python: str, app: str) -> None:
        # "PYTHON" or "PYTHON:TREE" (TREE first on PYTHONPATH: a checkout whose tracescore/
        # holds links to its integrations/ and examples/, run with another tree's venv)
        python, _, tree = python.partition(":")
        env = dict(os.environ)
        if tree:
            env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
        self.p = subprocess.Popen([python, str(Path(__file__).resolve()), "--child", app],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd=str(Path(python).resolve().parent), env=env)
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"child {python} did not start: {line!r}")

    def block(self, kind: str, rate: str, n: int) -> float:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(f"{kind} {rate} {n}\n")
        self.p.stdin.flush()
        return float(json.loads(self.p.stdout.readline()))

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--old")
    ap.add_argument("--new")
    ap.add_argument("--app", default="chain", choices=("chain", "agent"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=200)
    ap.add_argument("--e2e-per-round", type=int, default=60)
    ap.add_argument("--no-e2e", action="store_true", help="handler-only replay blocks only")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.child:
        child(a.child)
        return 0
    old, new = Child(a.old, a.app), Child(a.new, a.app)
    res: dict[str, dict[str, list[float]]] = {}
    for r in range(a.rounds):
        pair = (old, new) if r % 2 == 0 else (new, old)
        kinds = [("replay", a.per_round)] + ([] if a.no_e2e else [("e2e", a.e2e_per_round)])
        for kind, n in kinds:
            for rate in ("1.0", "0.1", "0.0"):
                for c in pair:
                    who = "old" if c is old else "new"
                    res.setdefault(f"{kind} {rate} {who}", []).append(c.block(kind, rate, n))
    old.close()
    new.close()
    med = statistics.median
    print(f"app={a.app} rounds={a.rounds} replay/round={a.per_round} e2e/round={a.e2e_per_round}")
    print("| measure | rate | old µs | new µs | new/old (median of rounds) |")
    print("|---|---|---:|---:|---:|")
    for kind in ("replay", "e2e"):
        for rate in ("1.0", "0.1", "0.0"):
            if f"{kind} {rate} old" not in res:
                continue
            o, n = res[f"{kind} {rate} old"], res[f"{kind} {rate} new"]
            ratio = med([b / x for b, x in zip(n, o)])
            print(f"| {kind} | {rate} | {med(o):.1f} | {med(n):.1f} | {ratio:.2f} |")
    for who in ("old", "new"):
        s = med([u / s for u, s in zip(res[f"replay 0.0 {who}"], res[f"replay 1.0 {who}"])])
        print(f"{who}: replay CPU unsampled/sampled = {s:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
