"""What a LangChain request leaves for the collector (issue 33, session 15: the request path
under sustained traffic).

Two measures, on the example chain's recorded callbacks replayed into the handler
(``hot_path.py``), with the tree of the Python that runs it (run it with each tree's venv):

- **left** (default): the GC-tracked objects one request leaves alive for the background
  writer (the writer is not started: everything it would take stays in the buffer), after one
  young collection (tuples of plain values are untracked there), by type; asyncio's and this
  script's own objects left out;
- ``--promoted N``: N requests replayed back to back with the pipeline running (spans
  dropped): the objects promoted to the old generation by each young-generation-1
  collection, by type, per request (``gc.callbacks``; the new tail of
  ``gc.get_objects(2)``), and the full collections that ran. Every ~25 % growth of the old
  generation CPython runs a full collection of the whole heap on the allocating thread.

Run:  python bench/gc_left.py [--rate 1.0|0.0] [--promoted 5000]
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

METRICS = ["rouge", "bleu", "token_f1", "exact_match", "rgb_accuracy", "rgb_rejection"]
#: asyncio's (the scorer's loop), the interpreter's and this script's own objects
SKIP = {"set", "hamt", "hamt_bitmap_node", "function", "coroutine", "Future", "FutureIter",
        "TimerHandle", "Task", "cell", "builtin_function_or_method", "method", "ReferenceType",
        "Context@_contextvars", "Handle"}


def _name(o: Any) -> str:
    t = type(o)
    return t.__qualname__ + ("@_contextvars" if t.__module__ == "_contextvars" else "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, action="append")
    ap.add_argument("--promoted", type=int, default=0)
    a = ap.parse_args()
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    import tracescore  # (first: the tree of this venv; hot_path puts its checkout on sys.path)

    # isort: split
    import hot_path as H

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    app = H.build_chain()
    qs = [q["question"] for q in H.load_questions()[:20]]
    recs = H.record_events(app, qs)
    ids = [H.run_ids(e) for e in recs]
    tree = Path(tracescore.__file__).resolve().parent.parent
    for rate in a.rate or [1.0, 0.0]:
        ts = tracescore.init(db=tempfile.mktemp(suffix=".db"), sample_rate=rate,
                             span_exporter=Drop(), metrics=METRICS)
        h = ts.langchain_handler()
        if not a.promoted:
            ts.queue._start = lambda: None  # (no writer: what the request leaves for it)
            maps = H.fresh_maps(recs, ids, 0, 2)
            H.replay(h, recs[0], maps[0])
            ts.queue._buf.clear()
            gc.collect()
            keep = gc.get_objects()
            before = {id(o) for o in keep}
            H.replay(h, recs[1], maps[1])
            gc.collect(0)
            left = [o for o in gc.get_objects()
                    if id(o) not in before and o is not keep and _name(o) not in SKIP]
            c = collections.Counter(_name(o) for o in left)
            print(f"{tree} rate {rate}: {len(left)} tracked objects left for the writer: "
                  + ", ".join(f"{n} {t}" for t, n in c.most_common()))
            del keep, before, left
            continue
        for i, m in enumerate(H.fresh_maps(recs, ids, 0, 500)):
            H.replay(h, recs[i % len(recs)], m)
        ts.flush(60)
        gc.collect()
        state = {"last": len(gc.get_objects(2)), "busy": False, "full": 0, "total": 0}
        promo: collections.Counter[str] = collections.Counter()

        def cb(phase: str, info: dict[str, int], state: dict[str, Any] = state,
               promo: collections.Counter[str] = promo) -> None:
            if state["busy"] or phase != "stop":
                return
            state["busy"] = True
            try:
                objs = gc.get_objects(2)
                if info["generation"] == 1:
                    new = objs[state["last"]:]
                    state["total"] += len(new)
                    promo.update(_name(o) for o in new)
                elif info["generation"] == 2:
                    state["full"] += 1
                state["last"] = len(objs)
            finally:
                state["busy"] = False

        gc.callbacks.append(cb)
        n = a.promoted
        for i in range(n):
            j = i % len(recs)
            H.replay(h, recs[j], {old: uuid.uuid4() for old in ids[j]})
        gc.callbacks.remove(cb)
        print(f"{tree} rate {rate}: promoted {state['total'] / n:.1f} objects/request, "
              f"{state['full']} full collections in {n} requests, heap {len(gc.get_objects())}")
        for t, k in promo.most_common(16):
            print(f"  {k / n:6.2f} {t}")
        ts.flush(120)
        ts.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
