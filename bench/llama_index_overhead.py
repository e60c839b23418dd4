"""Per-query cost of tracescore on the LlamaIndex request path.

``query_engine.query(question)`` of the offline example app (``VectorStoreIndex`` over the
bundled handbook with a hashing bag-of-words embedding, ``ExtractiveLLM``; real llama-index-core
objects, no network) with:

- no handlers on the root instrumentation dispatcher (LlamaIndex's own dispatch still runs);
- a no-op span handler + event handler pair (the floor of any instrumentation-API handler,
  e.g. OpenInference's);
- tracescore at sample_rate 1.0 and at 0.0 (both with a span exporter, drained).

LlamaIndex instrumentation is process-global (handlers on the root dispatcher), so the variants
are interleaved by installing a variant's handlers before its block and removing them after:
round-robin rounds, variant order shuffled per round, so drift on a noisy machine hits every
variant alike. "Added" is paired per round: block median of the variant minus the block median of
"none" in the same round, then the median over rounds. The install/remove toggle is timed too
(it is outside the timed blocks, and must be cheap). Between blocks each tracescore pipeline is
drained (``ts.flush()``, outside the timed window) so its background work (SQLite writer,
scorer) does not spill into another variant's window.

A second, much less noisy measurement replays the handler calls of real queries (span enter /
exit / drop and events, recorded once) straight into each handler pair on one thread, with fresh
span ids: what the handlers themselves cost per query, without LlamaIndex's own work.

Run:  python bench/llama_index_overhead.py [--quick] [--rounds N] [--per-round N] [--json out]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracescore.integrations.llama_index as li  # noqa: E402
from _common import machine_info, md_table, median, pct, print_machine  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.span import SimpleSpan  # noqa: E402
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from tracescore.examples.llama_index_rag import (  # noqa: E402
    build_index,
    build_query_engine,
    load_questions,
)

import tracescore  # noqa: E402
from tracescore.client import DEFAULT_METRICS  # noqa: E402


class NoopSpanHandler(BaseSpanHandler[SimpleSpan]):
    """Does nothing per span (overrides the entry points, like tracescore's handler)."""

    def span_enter(self, *args: Any, **kwargs: Any) -> None:
        return None

    def span_exit(self, *args: Any, **kwargs: Any) -> None:
        return None

    def span_drop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def new_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_exit_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_drop_span(self, *args: Any, **kwargs: Any) -> None:
        return None


class NoopEventHandler(BaseEventHandler):
    def handle(self, event: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Variant:
    key: str
    label: str
    install: Callable[[], None]
    remove: Callable[[], None]
    ts: Any = None
    exporter: InMemorySpanExporter | None = None
    samples: list[float] = field(default_factory=list)  # µs per query
    block_medians: list[float] = field(default_factory=list)
    toggles: list[float] = field(default_factory=list)  # µs per install + remove
    queries: int = 0
    flush_failures: int = 0

    def drain(self) -> None:
        if self.ts is not None and not self.ts.flush(120):
            self.flush_failures += 1
        if self.exporter is not None:
            self.exporter.clear()


def _noop_variant() -> Variant:
    sh, eh = NoopSpanHandler(), NoopEventHandler()
    root = get_dispatcher()

    def install() -> None:
        root.add_span_handler(sh)
        root.add_event_handler(eh)

    def remove() -> None:
        root.span_handlers = [h for h in root.span_handlers if h is not sh]
        root.event_handlers = [h for h in root.event_handlers if h is not eh]

    return Variant("noop", "no-op span + event handler", install, remove)


def _ts_variant(tmp: str, key: str, label: str, metrics: Sequence[str], rate: float) -> Variant:
    exp = InMemorySpanExporter()
    ts = tracescore.init(db=os.path.join(tmp, f"{key}.db"), metrics=list(metrics),
                         sample_rate=rate, span_exporter=exp)
    return Variant(key, label, ts.instrument_llama_index, ts.uninstrument_llama_index,
                   ts=ts, exporter=exp)


def run(variants: list[Variant], engine: Any, questions: list[str], rounds: int,
        per_round: int, warmup: int, rng: random.Random) -> None:
    n = len(questions)
    perf = time.perf_counter_ns
    for v in variants:
        v.install()
        for i in range(warmup):
            engine.query(questions[i % n])
        v.remove()
        v.drain()
    for r in range(rounds):
        order = variants[:]
        rng.shuffle(order)
        for v in order:
            gc.collect()
            t0 = perf()
            v.install()
            toggle = perf() - t0
            block: list[float] = []
            base = r * per_round
            for i in range(per_round):
                q = questions[(base + i) % n]
                t0 = perf()
                engine.query(q)
                block.append((perf() - t0) / 1000)
            t0 = perf()
            v.remove()
            v.toggles.append((toggle + perf() - t0) / 1000)
            v.queries += per_round
            v.samples.extend(block)
            v.block_medians.append(median(block))
            v.drain()


# -- handler-only replay ---------------------------------------------------------------------------
Op = tuple[str, dict[str, Any]]


class Recorder(NoopSpanHandler):
    """Records the span handler calls and events of real queries, in order."""

    ops: list[Op] = []

    def span_enter(self, *args: Any, **kwargs: Any) -> None:
        self.ops.append(("span_enter", kwargs))

    def span_exit(self, *args: Any, **kwargs: Any) -> None:
        self.ops.append(("span_exit", kwargs))

    def span_drop(self, *args: Any, **kwargs: Any) -> None:
        self.ops.append(("span_drop", kwargs))


class EventRecorder(NoopEventHandler):
    recorder: Any = None

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.recorder.ops.append(("handle", {"event": event}))


def record_queries(engine: Any, questions: list[str]) -> list[list[Op]]:
    root = get_dispatcher()
    out = []
    for q in questions:
        rec = Recorder()
        rec.ops = []
        ev = EventRecorder()
        ev.recorder = rec
        root.add_span_handler(rec)
        root.add_event_handler(ev)
        try:
            engine.query(q)
        finally:
            root.span_handlers = [h for h in root.span_handlers if h is not rec]
            root.event_handlers = [h for h in root.event_handlers if h is not ev]
        out.append(rec.ops)
    return out


def fresh(ops: list[Op]) -> list[tuple[str, Any]]:
    """``ops`` with new span ids (what a new query would send), events copied."""
    ids: dict[str, str] = {}

    def new(old: Any) -> Any:
        if old is None:
            return None
        if old not in ids:
            ids[old] = old[:-36] + str(uuid.uuid4()) if len(old) > 37 else str(uuid.uuid4())
        return ids[old]

    out: list[tuple[str, Any]] = []
    for name, kw in ops:
        if name == "handle":
            ev = kw["event"]
            out.append((name, ev.model_copy(update={"span_id": new(ev.span_id)})))
        else:
            k = dict(kw)
            k["id_"] = new(k["id_"])
            if "parent_id" in k:
                k["parent_id"] = new(k["parent_id"])
            out.append((name, k))
    return out


def replay(span_handler: Any, event_handler: Any, ops: list[tuple[str, Any]]) -> None:
    for name, arg in ops:
        if name == "handle":
            event_handler.handle(arg)
        else:
            getattr(span_handler, name)(**arg)


def run_replay(pairs: list[tuple[str, str, Any, Any, Any]], recs: list[list[Op]], rounds: int,
               per_round: int, rng: random.Random) -> dict[str, list[float]]:
    """µs per replayed query for each (key, label, span handler, event handler, ts)."""
    perf = time.perf_counter_ns
    samples: dict[str, list[float]] = {p[0]: [] for p in pairs}
    for r in range(rounds):
        order = pairs[:]
        rng.shuffle(order)
        for key, _, sh, eh, ts in order:
            batch = [fresh(recs[(r * per_round + i) % len(recs)]) for i in range(per_round)]
            gc.collect()
            for ops in batch:
                t0 = perf()
                replay(sh, eh, ops)
                samples[key].append((perf() - t0) / 1000)
            if ts is not None:
                ts.flush(120)
    return samples


def _db_count(path: str) -> int:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few rounds: a smoke test")
    ap.add_argument("--rounds", type=int, help="rounds (default 30, quick 3)")
    ap.add_argument("--per-round", type=int, help="queries per variant per round (default 40)")
    ap.add_argument("--metrics", default=",".join(DEFAULT_METRICS),
                    help="comma-separated metrics for the tracescore variants")
    ap.add_argument("--json", metavar="PATH", help="write all results as JSON")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 30)
    per_round = args.per_round or (10 if args.quick else 40)
    warmup = 5 if args.quick else 40
    replay_rounds = 3 if args.quick else 30
    metrics = [m for m in args.metrics.split(",") if m]
    rng = random.Random(args.seed)

    info = machine_info()
    try:
        info["packages"]["llama-index-core"] = metadata.version("llama-index-core")
    except metadata.PackageNotFoundError:
        info["packages"]["llama-index-core"] = "missing"
    print_machine(info)
    print(f"metrics: {', '.join(metrics)}; {rounds} rounds × {per_round} queries per variant "
          f"(+{warmup} warm-up)\n")

    li.uninstrument()
    index = build_index()
    engine = build_query_engine(index)
    questions = [q["question"] for q in load_questions()]
    with tempfile.TemporaryDirectory() as tmp:
        none = Variant("none", "no handlers", lambda: None, lambda: None)
        variants = [
            none,
            _noop_variant(),
            _ts_variant(tmp, "ts1", "tracescore, sample_rate 1.0", metrics, 1.0),
            _ts_variant(tmp, "ts0", "tracescore, sample_rate 0.0", metrics, 0.0),
        ]
        t0 = time.perf_counter()
        run(variants, engine, questions, rounds, per_round, warmup, rng)
        elapsed = time.perf_counter() - t0

        out: dict[str, dict[str, float]] = {}
        rows = []
        for v in variants:
            paired = [a - b for a, b in zip(v.block_medians, none.block_medians)]
            o = out[v.key] = {
                "median_us": median(v.samples),
                "added_us": median(paired) if v is not none else 0.0,
                "added_p25_us": pct(paired, 25) if v is not none else 0.0,
                "added_p75_us": pct(paired, 75) if v is not none else 0.0,
                "p99_us": pct(v.samples, 99),
                "toggle_us": median(v.toggles),
                "queries": v.queries,
            }
            iqr = "" if v is none else f"{o['added_p25_us']:.0f} … {o['added_p75_us']:.0f}"
            rows.append([v.label, o["median_us"], o["added_us"], iqr,
                         100 * o["added_us"] / out["none"]["median_us"], o["p99_us"],
                         o["toggle_us"]])
        print(f"## µs per `query_engine.query` ({elapsed:.0f} s)\n")
        print(md_table(["variant", "median µs", "added µs (paired)", "added IQR", "added %",
                        "p99 µs", "install+remove µs"], rows))

        a = {k: out[k]["added_us"] for k in out}
        ratios = {
            "ts1 / none (median query time)": out["ts1"]["median_us"] / out["none"]["median_us"],
            "ts0 / none (median query time)": out["ts0"]["median_us"] / out["none"]["median_us"],
            "ts1 added / no-op added": a["ts1"] / a["noop"] if a["noop"] > 0 else float("nan"),
            "ts0 added / ts1 added": a["ts0"] / a["ts1"] if a["ts1"] > 0 else float("nan"),
        }
        print()
        print(md_table(["ratio", "value"], [[k, v] for k, v in ratios.items()]))

        integrity = []
        for v in variants:
            if v.ts is None:
                continue
            v.ts.flush(120)
            written = v.ts.queue.written
            integrity.append([v.label, v.queries + warmup, written, _db_count(v.ts.db_path),
                              v.ts.queue.dropped, v.flush_failures])
        print("\nIntegrity (every query recorded once, nothing dropped):\n")
        print(md_table(["variant", "queries", "records written", "rows in db", "dropped",
                        "flush timeouts"], integrity))

        # handler-only replay
        recs = record_queries(engine, questions)
        n_spans = sum(1 for ops in recs for name, _ in ops if name == "span_enter") / len(recs)
        n_events = sum(1 for ops in recs for name, _ in ops if name == "handle") / len(recs)
        by_key = {v.key: v for v in variants}
        pairs: list[tuple[str, str, Any, Any, Any]] = [
            ("noop", "no-op span + event handler", NoopSpanHandler(), NoopEventHandler(), None)]
        for key in ("ts1", "ts0"):
            v = by_key[key]
            cap = li.LlamaIndexCapture(v.ts)
            pairs.append((key, v.label, li.TracescoreSpanHandler(cap),
                          li.TracescoreEventHandler(cap), v.ts))
        t0 = time.perf_counter()
        rsamples = run_replay(pairs, recs, replay_rounds, per_round, rng)
        rep = {k: {"median_us": median(xs), "p99_us": pct(xs, 99)} for k, xs in rsamples.items()}
        print(f"\n## Handler only: µs per query's handler calls, replayed on one thread "
              f"({n_spans:.0f} LlamaIndex spans + {n_events:.0f} events per query, "
              f"{time.perf_counter() - t0:.0f} s)\n")
        print(md_table(["handlers", "median µs", "p99 µs", "share of a plain query"],
                       [[label, rep[k]["median_us"], rep[k]["p99_us"],
                         f"{100 * rep[k]['median_us'] / out['none']['median_us']:.1f}%"]
                        for k, label, *_ in pairs]))
        for v in variants:
            if v.ts is not None:
                v.ts.shutdown(60)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": info, "results": out, "ratios": ratios, "replay": rep,
             "config": {"rounds": rounds, "per_round": per_round, "warmup": warmup,
                        "metrics": metrics}}, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
