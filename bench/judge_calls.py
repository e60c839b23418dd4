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
- Ragas (``ragas/metrics``, one reference per sample): faithfulness = statements + verdicts;
  context precision = 1 verdict call per context; context recall = 1; answer relevancy = 1
  request for ``strictness`` = 3 completions (``n=3``; 3 requests for a model without ``n``);
  answer correctness = statements of the answer + of the reference + 1 classification. With
  3 ground truths a Ragas sample holds one, so its reference metrics run once per ground truth.

Before/after (``--before OLD_TREE``, e.g. a ``git worktree`` of an older commit): the same
measurements run in a subprocess against each tree (``JUDGE_CALLS_TREE``), interleaved,
``--repeat`` times; calls are counted per step from the requests the server saw (the paired
``extract+contexts`` call under that name).

Run:  python bench/judge_calls.py [--before OLD_TREE] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the tree to measure: this repository, or (the subprocess of --before) the older one
sys.path.insert(0, os.environ.get("JUDGE_CALLS_TREE")
                or str(Path(__file__).resolve().parent.parent))

from _common import load_average, machine_info, md_table, print_machine  # noqa: E402

import tracescore  # noqa: E402
from tracescore.judge import prompts as P  # noqa: E402
from tracescore.judge.openai_judge import OpenAIJudge  # noqa: E402
from tracescore.metrics.judged import JUDGE_METRICS, RAG_SET  # noqa: E402
from tracescore.testing.embeddings import ScriptedEmbeddingServer, hashed_bag_of_words  # noqa: E402
from tracescore.testing.judge import (  # noqa: E402
    ScriptedJudgeServer,
    lexical_responder,
    parse_prompt,
)

REPO = Path(__file__).resolve().parent.parent
#: Ragas' five classic metrics, tracescore's names (issue 19)
RAGAS_FIVE = ["ragas_faithfulness", "ragas_answer_relevancy", "ragas_context_precision",
              "ragas_context_recall", "ragas_answer_correctness"]
#: the paired call's task line (None in a tree without it)
PAIR_TASK = getattr(P, "PAIR_TASK", None)
PAIR_STEP = getattr(P, "PAIR_STEP", "extract+contexts")

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


def ragas(metric: str, n_gt: int, n_ctx: int) -> int | None:
    return {
        "ragas_faithfulness": 2, "ragas_context_precision": n_ctx * n_gt,
        "ragas_context_recall": n_gt, "ragas_answer_relevancy": 1,
        "ragas_answer_correctness": 3 * n_gt,
    }.get(metric)


def _is_pair(messages: list[dict[str, Any]]) -> bool:
    user = next((m for m in messages if m.get("role") == "user"), None)
    return PAIR_TASK is not None and user is not None and str(user.get("content", "")) \
        .startswith("TASK\n" + PAIR_TASK.split("\n", 1)[0] + "\n")


def _step(request: dict[str, Any]) -> str:
    messages = request.get("messages", [])
    if _is_pair(messages):
        return PAIR_STEP + (":repair" if any(m.get("role") == "assistant" for m in messages)
                            else "")
    return parse_prompt(messages)[0]


def responder(step: str, data: Any, request: dict[str, Any]) -> Any:
    """The lexical judge, plus: the paired prompt answered part by part, and Ragas' generated
    questions (the lexical judge has none)."""
    if _is_pair(request.get("messages", [])) and isinstance(data, dict):
        return {name: _single(name, part, request) for name, part in data.items()}
    return _single(step, data, request)


def _single(step: str, data: Any, request: dict[str, Any]) -> Any:
    if step == "ragas_questions":
        return {"questions": [{"question": f"What does the answer say about point {i + 1}?",
                               "noncommittal": 0} for i in range(data["n"])]}
    return lexical_responder(step, data, request)


def ours(metrics: list[str], n_gt: int, *, rescore: bool = False) -> tuple[int, dict[str, int]]:
    """Score one record with ``metrics``; the judge calls the server saw, per step."""
    with tempfile.TemporaryDirectory() as tmp, ScriptedJudgeServer(responder) as srv, \
            ScriptedEmbeddingServer(lambda t: hashed_bag_of_words(t, 16)) as emb:
        db = str(Path(tmp) / "calls.db")
        for run in range(2 if rescore else 1):
            if run == 1:
                srv.requests.clear()
            needs_emb = any(m in ("ragas_answer_relevancy", "ragas_answer_correctness")
                            for m in metrics)
            ts = tracescore.init(db=db, metrics=metrics, judge_canary=False,
                                 judge=OpenAIJudge("bench-judge", base_url=srv.base_url),
                                 **_embedder(emb, needs_emb))
            # run 2 sees the same content as a new record: every step is a cache hit
            ts.log_record(query=QUERY, answer=ANSWER, contexts=CONTEXTS,
                          ground_truths=GROUND_TRUTHS[:n_gt])
            if not ts.flush(60):
                raise SystemExit("scoring did not finish")
            errors = ts.stats()["error_scores"]
            ts.shutdown()
            if errors:
                raise SystemExit(f"{errors} error scores for {metrics}")
        steps = Counter(_step(r) for r in list(srv.requests))
        return sum(steps.values()), dict(steps)


def _embedder(emb: Any, needed: bool) -> dict[str, Any]:
    if not needed:
        return {}
    from tracescore.embeddings import OpenAIEmbedder

    return {"embedder": OpenAIEmbedder("bench-embedder", base_url=emb.base_url)}


#: name → (label, metrics, ground truths, scored again on the same db)
SETS: dict[str, tuple[str, list[str], int, bool]] = {
    "rag_1": ("RAG set (7 metrics), 1 GT", list(RAG_SET), 1, False),
    "rag_3": ("RAG set (7 metrics), 3 GTs", list(RAG_SET), 3, False),
    "ragas5_1": ("five Ragas metrics, 1 GT", RAGAS_FIVE, 1, False),
    "ragas5_3": ("five Ragas metrics, 3 GTs", RAGAS_FIVE, 3, False),
    "judge16_1": ("all 16 judge metrics, 1 GT", [c.name for c in JUDGE_METRICS], 1, False),
    "rag_again": ("RAG set, same content scored again (cache)", list(RAG_SET), 1, True),
}


def measure_all() -> dict[str, Any]:
    return {name: dict(zip(("calls", "steps"), ours(metrics, n_gt, rescore=again)))
            for name, (_, metrics, n_gt, again) in SETS.items()}


def measure_tree(tree: Path) -> dict[str, Any]:
    """:func:`measure_all` in a subprocess that imports tracescore from ``tree``."""
    env = {**os.environ, "JUDGE_CALLS_TREE": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure"],
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(got.pop("tracescore")).resolve() != (tree / "tracescore").resolve():
        raise SystemExit(f"the subprocess did not import tracescore from {tree}")
    return got


def before_after(before: Path, repeat: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    loads = []
    for _ in range(repeat):  # interleaved: old, new, old, new, ...
        for side, tree in (("before", before), ("after", REPO)):
            loads.append(load_average()[0])
            runs[side].append(measure_tree(tree))
    n_ctx = len(CONTEXTS)
    rows, table = {}, []
    for name, (label, metrics, n_gt, _) in SETS.items():
        b = [r[name]["calls"] for r in runs["before"]]
        a = [r[name]["calls"] for r in runs["after"]]
        ref = "-"
        if name.startswith("rag_") and name != "rag_again":
            ref = f"Valor {sum(valor(m, n_gt, n_ctx) or 0 for m in metrics)}"
        elif name.startswith("ragas5"):
            ref = f"Ragas {sum(ragas(m, n_gt, n_ctx) or 0 for m in metrics)}"
        mb, ma = statistics.median(b), statistics.median(a)
        steps = runs["after"][-1][name]["steps"]
        rows[name] = {"label": label, "before": b, "after": a,
                      "before_steps": runs["before"][-1][name]["steps"], "after_steps": steps}
        table.append([label, f"{min(b)}/{mb:g}/{max(b)}", f"{min(a)}/{ma:g}/{max(a)}",
                      f"{ma / mb:.2f}×" if mb else "-", ref,
                      ", ".join(f"{k} {v}" for k, v in sorted(steps.items())) or "-"])
    print()
    print(f"Judge calls per record, before ({before.name}) and after (this tree): "
          f"min/median/max of {repeat} interleaved runs each; 1 record, {n_ctx} contexts; "
          f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f}")
    print()
    print(md_table(["metric set", "before", "after", "after / before", "peer (documented)",
                    "after, per step"], table))
    return {"repeat": repeat, "load_1min": loads, "sets": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write every number to this file")
    ap.add_argument("--before", type=Path,
                    help="an older tree of this repository (e.g. a git worktree): measure it "
                    "and this tree side by side")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per tree")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:  # the subprocess of --before: one JSON line
        print(json.dumps({**measure_all(), "tracescore": str(Path(tracescore.__file__).parent)}))
        return
    info = machine_info()
    print_machine(info)
    out: dict[str, Any] = {"machine": info, "rows": []}
    if args.before is not None:
        out["before_after"] = before_after(args.before.resolve(), args.repeat)
    n_ctx = len(CONTEXTS)
    sets: list[tuple[str, list[str]]] = [(m, [m]) for m in RAG_SET]
    sets.append(("**RAG set (all 7)**", list(RAG_SET)))
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
    five, _ = ours(RAGAS_FIVE, 1)
    print()
    print(f"target: RAG set ≤ 2 calls → {target} calls: "
          f"{'MET' if target <= 2 else 'MISSED'}; five Ragas metrics ≤ 3 calls → {five} "
          f"calls: {'MET' if five <= 3 else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
