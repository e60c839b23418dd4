"""Judge calls per record: tracescore (counted at the server) vs Valor and DeepEval.

For one record with 3 retrieved contexts and 1 (then 3) ground truths, each metric set is
scored by a real pipeline against ``ScriptedJudgeServer`` (real HTTP, the real ``openai``
client, the deterministic ``lexical_responder``), on a fresh database, and the calls are counted
at the server. Valor's and DeepEval's counts come from their documented algorithms (source read
for this benchmark):

- Valor (``valor_lite/text_generation/computation.py``): faithfulness = claims + verdicts;
  answer relevance = statements + verdicts; answer correctness = prediction statements + per
  ground truth (statements + verdicts); context precision = 1 verdict call per ground truth;
  context recall = per ground truth (statements + verdicts); context relevance = 1;
  hallucination = 1.
- DeepEval (``deepeval/metrics/*``, ``include_reason=True`` by default, which adds one
  "generate_reason" call to every metric except G-Eval): Faithfulness = truths + claims +
  verdicts (+ reason); AnswerRelevancy = statements + verdicts (+ reason); ContextualPrecision =
  verdicts (+ reason); ContextualRecall = verdicts (+ reason); ContextualRelevancy = 1 verdict
  call per context (+ reason); Hallucination = verdicts (+ reason). DeepEval has no answer
  correctness metric: its documented recipe is a G-Eval "Correctness" metric = evaluation steps
  (once per metric instance) + 1 evaluation (score and reason in one reply). A DeepEval test
  case has one ``expected_output``, so with 3 ground truths the reference metrics run once per
  ground truth (G-Eval reuses its steps).

Run:  python bench/judge_calls.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import machine_info, md_table, print_machine  # noqa: E402

import tracescore  # noqa: E402
from tracescore.judge.openai_judge import OpenAIJudge  # noqa: E402
from tracescore.metrics.judged import JUDGE_METRICS, RAG_SET  # noqa: E402
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder  # noqa: E402

QUERY = "What battery does the Cargo have, and how far does it go?"
CONTEXTS = [
    "The Cargo ships with a 750 Wh battery and carries up to 180 kg.",
    "The Commuter has a 500 Wh battery and a range of up to 90 km.",
    "The Cargo's range is up to 110 km in eco mode.",
]
ANSWER = "The Cargo has a 750 Wh battery. It goes up to 110 km in eco mode. It is the best bike."
GROUND_TRUTHS = [
    "The Cargo has a 750 Wh battery and a range of up to 110 km.",
    "A 750 Wh battery; about 110 km in eco mode.",
    "750 Wh, 110 km.",
]


def valor(metric: str, n_gt: int, n_ctx: int) -> int | None:
    return {
        "faithfulness": 2, "answer_relevance": 2, "answer_correctness": 1 + 2 * n_gt,
        "context_precision": n_gt, "context_recall": 2 * n_gt, "context_relevance": 1,
        "hallucination": 1,
    }.get(metric)


def deepeval(metric: str, n_gt: int, n_ctx: int, reason: bool = True) -> int | None:
    r = 1 if reason else 0
    return {
        "faithfulness": 3 + r, "answer_relevance": 2 + r,
        "answer_correctness": 1 + n_gt,  # G-Eval: steps once, then one evaluation per case
        "context_precision": n_gt * (1 + r), "context_recall": n_gt * (1 + r),
        "context_relevance": n_ctx + r, "hallucination": 1 + r,
    }.get(metric)


def ours(metrics: list[str], n_gt: int, *, rescore: bool = False) -> tuple[int, dict[str, int]]:
    """Score one record with ``metrics``; the judge calls the server saw, per step."""
    with tempfile.TemporaryDirectory() as tmp, ScriptedJudgeServer(lexical_responder) as srv:
        db = str(Path(tmp) / "calls.db")
        for run in range(2 if rescore else 1):
            if run == 1:
                srv.calls.clear()
            ts = tracescore.init(db=db, metrics=metrics, judge_canary=False,
                                 judge=OpenAIJudge("bench-judge", base_url=srv.base_url))
            # run 2 sees the same content as a new record: every step is a cache hit
            ts.log_record(query=QUERY, answer=ANSWER, contexts=CONTEXTS,
                          ground_truths=GROUND_TRUTHS[:n_gt])
            if not ts.flush(60):
                raise SystemExit("scoring did not finish")
            errors = ts.stats()["error_scores"]
            ts.shutdown()
            if errors:
                raise SystemExit(f"{errors} error scores for {metrics}")
        return srv.total_calls, dict(srv.calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args()
    info = machine_info()
    print_machine(info)
    n_ctx = len(CONTEXTS)
    sets: list[tuple[str, list[str]]] = [(m, [m]) for m in RAG_SET]
    sets.append(("**RAG set (all 7)**", list(RAG_SET)))
    out: dict[str, Any] = {"machine": info, "rows": []}
    table = []
    for label, metrics in sets:
        row: dict[str, Any] = {"set": label, "metrics": metrics}
        cells: list[Any] = [label]
        for n_gt in (1, 3):
            n, steps = ours(metrics, n_gt)
            v = sum(valor(m, n_gt, n_ctx) or 0 for m in metrics)
            d = sum(deepeval(m, n_gt, n_ctx) or 0 for m in metrics)
            d0 = sum(deepeval(m, n_gt, n_ctx, reason=False) or 0 for m in metrics)
            row[f"gt{n_gt}"] = {"ours": n, "ours_steps": steps, "valor": v,
                                "deepeval": d, "deepeval_no_reason": d0}
            cells += [n, v, f"{d} ({d0})"]
        out["rows"].append(row)
        table.append(cells)
    print()
    print(f"Judge calls for one record with {n_ctx} contexts (ours: measured at the server; "
          "Valor, DeepEval: from their documented algorithms; DeepEval in parentheses: "
          "include_reason=False)")
    print()
    print(md_table(["metric set", "ours, 1 GT", "Valor, 1 GT", "DeepEval, 1 GT",
                    "ours, 3 GTs", "Valor, 3 GTs", "DeepEval, 3 GTs"], table))

    extra = []
    n, steps = ours(list(RAG_SET), 1, rescore=True)
    extra.append(["RAG set, same content scored again (cache)", n,
                  ", ".join(f"{k} {v}" for k, v in sorted(steps.items())) or "-"])
    everything = [cls.name for cls in JUDGE_METRICS]
    n, steps = ours(everything, 1)
    extra.append([f"all {len(everything)} judge metrics", n,
                  ", ".join(f"{k} {v}" for k, v in sorted(steps.items()))])
    n, steps = ours(list(RAG_SET), 1)
    extra.insert(0, ["RAG set", n, ", ".join(f"{k} {v}" for k, v in sorted(steps.items()))])
    out["extra"] = extra
    print()
    print(md_table(["tracescore, 1 record, 3 contexts, 1 GT", "calls", "per step"], extra))
    target = out["rows"][-1]["gt1"]["ours"]
    print()
    print(f"target: RAG set ≤ 7 calls → {target} calls: "
          f"{'MET' if target <= 7 else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
