"""Judge throughput: scoring against a judge that takes 200 ms per call, at concurrency 16.

The judge is ``ScriptedJudgeServer(delay_s=0.2)`` (real HTTP on 127.0.0.1, the real ``openai``
client through ``OpenAIJudge``); ``tracescore.init(..., concurrency=16)``. N records (3 contexts,
1 ground truth) are submitted, and the time from the first submit to ``ts.flush()`` returning
is compared with the concurrency bound: calls × 0.2 s / 16, the time 16 calls always in flight
would take. Target: ≥ 85 % of the bound for 200 records with the 7-metric RAG set.

Also printed: the most calls the server had in flight at once, for the RAG set and for
one-call-per-record metric sets, to tell a client/server cap (the server's thread-per-connection
model and listen backlog, the ``openai`` client's httpx pool: 1000 connections) from a
scheduling cap in tracescore.

Run:  python bench/judge_throughput.py [--n 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import machine_info, md_table, print_machine  # noqa: E402

import tracescore  # noqa: E402
from tracescore.judge.openai_judge import OpenAIJudge  # noqa: E402
from tracescore.metrics.judged import RAG_SET  # noqa: E402
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder  # noqa: E402

DELAY_S = 0.2
CONCURRENCY = 16
CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "The Commuter has a 500 Wh battery.",
            "Warranty lasts two years."]


def run(metrics: list[str], n: int) -> dict[str, Any]:
    # warm the responder's text tables outside the timed window
    lexical_responder("extract", {"texts": {"answer": "Warm. Up."}, "opinions_for": ["answer"]},
                      {})
    with tempfile.TemporaryDirectory() as tmp, \
            ScriptedJudgeServer(lexical_responder, delay_s=DELAY_S) as srv:
        judge = OpenAIJudge("bench-judge", base_url=srv.base_url)
        # the openai client's httpx connection pool, and the server's listen backlog
        pool = getattr(getattr(getattr(judge._client, "_client", None), "_transport", None),
                       "_pool", None)
        backlog = srv._server.request_queue_size
        ts = tracescore.init(db=str(Path(tmp) / "tput.db"), metrics=metrics, judge=judge,
                             judge_canary=False, concurrency=CONCURRENCY)
        t0 = time.perf_counter()
        for i in range(n):
            ts.log_record(query=f"What battery does the Cargo {i} have?",
                          answer=f"The Cargo {i} ships with a 750 Wh battery. It is heavy.",
                          contexts=CONTEXTS, ground_truths=[f"The Cargo {i} has a 750 Wh battery."])
        if not ts.flush(600):
            raise SystemExit("scoring did not finish in 600 s")
        elapsed = time.perf_counter() - t0
        stats = ts.stats()
        ts.shutdown()
        calls = srv.total_calls
    bound = calls * DELAY_S / CONCURRENCY
    return {"metrics": metrics, "records": n, "calls": calls, "elapsed_s": elapsed,
            "bound_s": bound, "ratio": bound / elapsed, "max_in_flight": srv.max_inflight,
            "error_scores": stats["error_scores"], "deferred": stats["deferred_jobs"],
            "client_pool_max_connections": getattr(pool, "_max_connections", None),
            "server_backlog": backlog}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="records (default 200)")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args()
    info = machine_info()
    print_machine(info)
    results = [run(list(RAG_SET), args.n), run(["faithfulness"], args.n),
               run(["coherence"], args.n)]
    labels = ["RAG set (7 metrics, 3 calls/record)", "faithfulness (2 sequential calls/record)",
              "coherence (1 call/record)"]
    print()
    print(f"{args.n} records, judge delay {DELAY_S * 1000:.0f} ms/call, "
          f"concurrency={CONCURRENCY}; bound = calls × {DELAY_S} s / {CONCURRENCY}")
    print()
    print(md_table(
        ["metric set", "calls", "achieved s", "bound s", "achieved / bound", "max in flight",
         "error scores"],
        [[lab, r["calls"], r["elapsed_s"], r["bound_s"], f"{r['ratio']:.0%}", r["max_in_flight"],
          r["error_scores"]] for lab, r in zip(labels, results)]))
    print()
    print(f"openai client httpx pool: max_connections={results[0]['client_pool_max_connections']}"
          f"; server: one thread per connection, listen backlog {results[0]['server_backlog']}")
    r = results[0]
    print(f"target: RAG set ≥ 85% of the bound → {r['ratio']:.0%}: "
          f"{'MET' if r['ratio'] >= 0.85 else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "results": results}, indent=1))


if __name__ == "__main__":
    main()
