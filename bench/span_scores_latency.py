"""Scores on the span through the LangChain handler: run end → the root span exported with its
``tracescore.score.*`` attributes (issue 33, "the scores-on-span tail").

``pipeline_rate.py``'s latency child submits records with an SDK span of its own; here the
example chain runs with the handler, so the root span is the pending one the writer builds
(and holds for the scores). Requests one at a time, 20–60 ms apart (a steady app), rate 1.0,
``token_f1`` and ``exact_match`` (a ground truth in the run's metadata), a
``SimpleSpanProcessor`` whose exporter notes when the root arrives.

Run:  python bench/span_scores_latency.py [--n 60]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from typing import Any

from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    a = ap.parse_args()

    from tracescore.examples.langchain_rag import build_chain

    import tracescore

    arrived: list[float] = []
    cond = threading.Condition()

    class Clock(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            now = time.perf_counter()
            for s in spans:
                if any(k.startswith("tracescore.score.") for k in (s.attributes or {})):
                    with cond:
                        arrived.append(now)
                        cond.notify_all()
            return SpanExportResult.SUCCESS

    with tempfile.TemporaryDirectory() as d:
        ts = tracescore.init(db=os.path.join(d, "l.db"), sample_rate=1.0, retention=None,
                             span_processor=SimpleSpanProcessor(Clock()),
                             metrics=["token_f1", "exact_match"])
        h = ts.langchain_handler()
        chain = build_chain()
        config = {"callbacks": [h], "metadata": {"ground_truth": "45 minutes"}}
        rng = random.Random(3)
        lat: list[float] = []
        missing = 0
        for i in range(a.n):
            seen = len(arrived)
            chain.invoke("How long does a test ride last?", config=config)
            t_end = time.perf_counter()
            with cond:
                ok = cond.wait_for(lambda seen=seen: len(arrived) > seen, timeout=5.0)
            if ok and i >= 3:  # (the first few warm the caches and the connection)
                lat.append((arrived[seen] - t_end) * 1000)
            elif not ok:
                missing += 1
            time.sleep(rng.uniform(0.02, 0.06))
        ts.shutdown(10)
    lat.sort()
    print(f"n={len(lat)} missing={missing} p50={lat[len(lat) // 2]:.1f} ms "
          f"p90={lat[int(len(lat) * 0.9)]:.1f} ms max={lat[-1]:.1f} ms "
          f"(load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
