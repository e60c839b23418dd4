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

Each block is drained (``ts.flush()``) outside its timed window. A **noop** block per round
replays the same callbacks into an empty ``BaseCallbackHandler`` subclass (the harness alone):
the table also prints **net** µs (gross minus the same round's noop block) and net
unsampled/sampled.

``--sustained``: the request path under sustained traffic. Long blocks (``--per-round``, e.g.
2,500 requests), no ``gc.collect()`` between blocks after the warm-up (the collector's
generations carry over, as in a long-running app), a span exporter that drops spans (an
in-memory one keeps every span alive and inflates the heap), the pipeline running (writer and
in-process scorer with 6 local metrics; run ids made per request inside the loop, so no batch
of them waits in the heap). Per block: the request thread's CPU µs per request, the garbage
collections that ran *on the request thread* (``gc.callbacks`` + ``threading.get_ident``: ms,
and full collections), and the process CPU per request (``time.process_time`` over the block
and the drain after it: includes writing and scoring).

``--base``: a third tree (e.g. main), alternated with the other two.

Run:  python bench/costs_side.py --old /work/venv-old/bin/python --new /work/venv-costs/bin/python
      [--base /work/venv/bin/python] [--app chain|agent] [--rounds 15] [--per-round 200]
      [--sustained --per-round 2500 --rounds 8]
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
class _GcClock:
    """The collections that run on the request thread (this one): CPU ms (the thread's clock)
    and count per generation (``gc.callbacks``; a collection runs on the thread that allocated
    past the threshold)."""

    def __init__(self) -> None:
        import threading

        self.me = threading.get_ident()
        self.ident = threading.get_ident
        self.t0 = 0
        self.ms = [0.0, 0.0, 0.0]
        self.n = [0, 0, 0]
        self.other = [0, 0, 0]
        gc.callbacks.append(self.cb)

    def cb(self, phase: str, info: dict[str, int]) -> None:
        if self.ident() != self.me:
            if phase == "start":
                self.other[info["generation"]] += 1
            return
        if phase == "start":
            self.t0 = time.thread_time_ns()
        else:
            g = info["generation"]
            self.ms[g] += (time.thread_time_ns() - self.t0) / 1e6
            self.n[g] += 1

    def snap(self) -> tuple[float, int, int, int]:
        return sum(self.ms), self.n[2], self.n[1], self.other[2]


def child(app_name: str, sustained: bool, only: str | None) -> None:
    # this child's tree first (its venv's editable install): hot_path puts its own checkout on
    # sys.path, which must not shadow the tree under test
    import uuid

    from langchain_core.callbacks import BaseCallbackHandler
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tracescore

    sys.path.insert(0, str(HERE))
    import hot_path as H  # the new tree's bench helpers; they only use LangChain

    class Noop(BaseCallbackHandler):
        pass

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

        def clear(self) -> None:
            pass

    app = H.build_agent_app() if app_name == "agent" else H.build_chain()
    questions = [q["question"] for q in H.load_questions()[:20]]
    recs = H.record_events(app, questions)
    ids = [H.run_ids(e) for e in recs]
    print(f"tree {Path(tracescore.__file__).parent.parent}", file=sys.stderr)
    tmp = tempfile.mkdtemp(prefix="costs-side-")
    variants: dict[str, Any] = {}
    for rate in (only,) if only else ("1.0", "0.1", "0.0"):
        exp = Drop() if sustained else InMemorySpanExporter()
        ts = tracescore.init(db=os.path.join(tmp, f"r{rate}.db"), sample_rate=float(rate),
                             span_exporter=exp,
                             metrics=["rouge", "bleu", "token_f1", "exact_match",
                                      "rgb_accuracy", "rgb_rejection"])
        if os.environ.get("COSTS_NO_BACKGROUND"):  # the hot path alone: nothing reaches the writer
            ts.queue.put = lambda *a, **k: True
        variants[rate] = (ts, ts.langchain_handler(), exp)
    # warm-up
    for ts, h, exp in variants.values():
        for i, m in enumerate(H.fresh_maps(recs, ids, 0, 500 if sustained else 20)):
            H.replay(h, recs[i % len(recs)], m)
            if not sustained or i < 20:
                app.invoke(questions[i % len(questions)], config={"callbacks": [h]})
        ts.flush(60)
        exp.clear()
    variants["noop"] = (None, Noop(), None)
    clock = _GcClock() if sustained else None
    gc.collect()
    print("ready", flush=True)
    start = 0
    for line in sys.stdin:
        kind, rate, n_s = line.split()
        n = int(n_s)
        ts, h, exp = variants[rate]
        if kind == "sustained":
            assert clock is not None
            uuid4 = uuid.uuid4
            replay = H.replay
            nrec = len(recs)
            g0 = clock.snap()
            p0 = time.process_time_ns()
            c0 = time.thread_time_ns()
            for i in range(start, start + n):
                j = i % nrec
                replay(h, recs[j], {old: uuid4() for old in ids[j]})
            c1 = time.thread_time_ns()
            g1 = clock.snap()
            if ts is not None:
                ts.flush(120)
            p1 = time.process_time_ns()
            out: Any = {"cpu": (c1 - c0) / 1000 / n, "gc_ms": g1[0] - g0[0],
                        "full": g1[1] - g0[1], "gen1": g1[2] - g0[2],
                        "full_other": g1[3] - g0[3], "proc": (p1 - p0) / 1000 / n}
            start += n
            print(json.dumps(out), flush=True)
            continue
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
        if ts is not None:
            ts.flush(120)
            exp.clear()
        print(json.dumps(out), flush=True)
    for ts, _, _ in variants.values():
        if ts is not None:
            ts.shutdown()


# -- parent -------------------------------------------------------------------------------------
class Child:
    def __init__(self, python: str, app: str, sustained: bool = False,
                 rate: str | None = None) -> None:
        # "PYTHON" or "PYTHON:TREE" (TREE first on PYTHONPATH: a checkout whose tracescore/
        # holds links to its integrations/ and examples/, run with another tree's venv)
        python, _, tree = python.partition(":")
        env = dict(os.environ)
        if tree:
            env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
        self.p = subprocess.Popen([python, str(Path(__file__).resolve()), "--child", app]
                                  + (["--sustained"] if sustained else [])
                                  + (["--rate", rate] if rate else []),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd=str(Path(python).resolve().parent), env=env)
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"child {python} did not start: {line!r}")

    def block(self, kind: str, rate: str, n: int) -> Any:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(f"{kind} {rate} {n}\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(60)


def _order(trees: list[tuple[str, Any]], r: int) -> list[tuple[str, Any]]:
    """Round ``r``'s order: rotated, and reversed every other round (old, new, new, old, ...)."""
    k = r // 2 % len(trees)
    rot = trees[k:] + trees[:k]
    return rot if r % 2 == 0 else rot[::-1]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def short_blocks(a: argparse.Namespace, trees: list[tuple[str, Child]]) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {}
    for r in range(a.rounds):
        order = _order(trees, r)
        kinds = [("replay", a.per_round)] + ([] if a.no_e2e else [("e2e", a.e2e_per_round)])
        for kind, n in kinds:
            for rate in ("1.0", "0.1", "0.0") + (("noop",) if kind == "replay" else ()):
                for who, c in order:
                    res.setdefault(f"{kind} {rate} {who}", []).append(
                        float(c.block(kind, rate, n)))
    med = statistics.median
    names = [w for w, _ in trees]
    print(f"app={a.app} rounds={a.rounds} replay/round={a.per_round} "
          f"e2e/round={a.e2e_per_round} load at end {_load()}")
    print("| measure | rate | " + " | ".join(f"{w} µs" for w in names) + " | "
          + " | ".join(f"{w}/old" for w in names[1:]) + " (median of rounds) |")
    print("|---|---|" + "---:|" * (2 * len(names) - 1))
    for kind in ("replay", "e2e"):
        for rate in ("1.0", "0.1", "0.0", "noop"):
            if f"{kind} {rate} old" not in res:
                continue
            cols = [res[f"{kind} {rate} {w}"] for w in names]
            ratios = [med([b / x for b, x in zip(c, cols[0])]) for c in cols[1:]]
            print(f"| {kind} | {rate} | " + " | ".join(f"{med(c):.1f}" for c in cols) + " | "
                  + " | ".join(f"{x:.2f}" for x in ratios) + " |")
    for rate in ("1.0", "0.1", "0.0"):  # net of the harness (the same round's noop block)
        nets = {w: [g - h for g, h in zip(res[f"replay {rate} {w}"], res[f"replay noop {w}"])]
                for w in names}
        print(f"| replay net | {rate} | " + " | ".join(f"{med(nets[w]):.1f}" for w in names)
              + " | " + " | ".join(f"{med([b / x for b, x in zip(nets[w], nets['old'])]):.2f}"
                                   for w in names[1:]) + " |")
    for who in names:
        s = med([u / s for u, s in zip(res[f"replay 0.0 {who}"], res[f"replay 1.0 {who}"])])
        net = med([(u - h) / (s - h) for u, s, h in zip(
            res[f"replay 0.0 {who}"], res[f"replay 1.0 {who}"], res[f"replay noop {who}"])])
        print(f"{who}: replay CPU unsampled/sampled = {s:.2f} gross, {net:.2f} net")
    return res


def sustained(a: argparse.Namespace, trees: list[tuple[str, str]]) -> dict[str, Any]:
    """One child per tree and rate (a full collection falls on whichever block crosses the
    threshold: one heap per rate, so the other rate's records do not trigger it); the harness
    blocks (noop) in the sampled child."""
    kids = {(who, rate): Child(py, a.app, True, rate) for who, py in trees
            for rate in ("1.0", "0.0")}
    res: dict[str, list[dict[str, float]]] = {}
    for r in range(a.rounds):
        for rate in ("1.0", "0.0", "noop"):
            for who, _ in _order(trees, r):  # type: ignore[arg-type]
                c = kids[(who, "1.0" if rate == "noop" else rate)]
                res.setdefault(f"{rate} {who}", []).append(c.block("sustained", rate, a.per_round))
    for c in kids.values():
        c.close()
    med = statistics.median
    names = [w for w, _ in trees]
    n = a.per_round * a.rounds
    print(f"sustained app={a.app} rounds={a.rounds} requests/block={a.per_round} "
          f"load at end {_load()}")
    print("| tree | rate | request-thread CPU µs (median block) | net of harness | "
          "GC CPU on request thread µs/request | full collections /1,000 requests | "
          "process CPU µs/request |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for who in names:
        harness = med([b["cpu"] for b in res[f"noop {who}"]])
        for rate in ("1.0", "0.0", "noop"):
            bl = res[f"{rate} {who}"]
            cpu = med([b["cpu"] for b in bl])
            gc_us = sum(b["gc_ms"] for b in bl) * 1000 / n
            full = sum(b["full"] for b in bl) * 1000 / n
            proc = med([b["proc"] for b in bl])
            print(f"| {who} | {rate} | {cpu:.1f} | {cpu - harness:.1f} | {gc_us:.1f} | "
                  f"{full:.2f} | {proc:.1f} |")
    for who in names:
        h = [b["cpu"] for b in res[f"noop {who}"]]
        s_ = [b["cpu"] for b in res[f"1.0 {who}"]]
        u_ = [b["cpu"] for b in res[f"0.0 {who}"]]
        print(f"{who}: sustained unsampled/sampled = {med(u_) / med(s_):.2f} gross, "
              f"{(med(u_) - med(h)) / (med(s_) - med(h)):.2f} net")
    for who in names[1:]:
        for rate in ("1.0", "0.0"):
            o = med([b["cpu"] for b in res[f"{rate} old"]])
            x = med([b["cpu"] for b in res[f"{rate} {who}"]])
            print(f"{who}/old sustained rate {rate}: {x / o:.2f}")
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--old")
    ap.add_argument("--base", help="a third tree (e.g. main), alternated with old and new")
    ap.add_argument("--new")
    ap.add_argument("--app", default="chain", choices=("chain", "agent"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=200)
    ap.add_argument("--e2e-per-round", type=int, default=60)
    ap.add_argument("--no-e2e", action="store_true", help="handler-only replay blocks only")
    ap.add_argument("--sustained", action="store_true",
                    help="long blocks, no gc.collect() between them, spans dropped")
    ap.add_argument("--rate", help="(child) only this sample rate's tracescore")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.sustained, a.rate)
        return 0
    pythons = [("old", a.old)] + ([("base", a.base)] if a.base else []) + [("new", a.new)]
    if a.sustained:
        res: Any = sustained(a, pythons)
    else:
        trees = [(who, Child(py, a.app)) for who, py in pythons]
        res = short_blocks(a, trees)
        for _, c in trees:
            c.close()
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
