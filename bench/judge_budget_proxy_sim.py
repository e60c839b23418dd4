"""The judge budget's richer proxy (issue 33 item 2): does it pay? A seeded simulation on the
days of ``bench/judge_budget_sim.py`` (same traffic, bursts, skewed judge scores, pacer, hard
cap, error model and estimator), with the proxy the worker now builds.

Each record has two features: a lexical score o = q + N(0, 0.25²) (the overlap proxy: the
*poor* proxy of the first simulation) and an embedding similarity e. Three cases:

- **informative**: e = 0.3 + 0.6·q + N(0, 0.04²) (a similarity that tracks the judge's
  expectation, on a cosine-like scale), and 15 % of the records are exact repeats of an
  earlier record of the day (same content: same features, same judge score);
- **informative, no repeats**: the same e, no repeats (the learned combination alone);
- **not informative**: e ~ N(0.6, 0.15²) independent of everything, no repeats;
- **topics** (the judge's verdicts on similar records, session 14): 100 topics, each with a
  level of quality (30 % of them drawn as the bursts' lower one); q = the topic's level +
  N(0, 0.05²); the lexical score and e are blind to q (o from an independent draw, e as in
  *not informative*). Similar records get similar verdicts, and nothing but the neighbours
  sees it;
- **topics, verdicts not by topic**: the same topics and vectors, q independent of them (the
  neighbours are useless).

Every record has a question+answer vector: its topic's unit centre (32 dimensions) plus
N(0, 0.1²) per dimension, normalised (cosine ~0.75 within a topic, ~0 across).

Arms, at the same budget (2,000 judged records a day of ~40,000):

- **uniform**: π = the pacer's rate, the Hájek mean (a plain sample rate);
- **adaptive, overlap**: today's selection with the overlap proxy f = o (the active estimate);
- **adaptive, rich**: the worker's proxy: a repeat of a judged record gets the judge's verdict
  (π = 1, judged free: no unit of the budget); else the combination of (o, e) fitted by
  ``tracescore.budget.combine.fit_groups`` on the newest 500 judged records, refitted every
  hour (kept only when it beats the line through o by leave-one-out error); else f = o;
- **adaptive, rich + neighbours**: the same, with the neighbours' verdicts as one more
  feature (``nn_question_answer``, :mod:`tracescore.budget.neighbours`): for a judged record
  of the fit, from the records judged before it; for a decision, from the fit's judged
  records (all judged before it). Kept only where it beats the fit without it.

Reported per case and arm: coverage of the 95 % interval of the day's mean, mean width, width
ratio against uniform (same days), bias, judged records (free ones included) and the budget's
units used per day.

Run:  python bench/judge_budget_proxy_sim.py [--quick] [--reps R] [--cases 4,5] [--json out.json]
      [--rep-start K --days days.json]; then --merge a.json,b.json to summarise runs together
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# one BLAS thread: the neighbours' small matrix products are slower threaded, and on the shared
# 2-core machine the threads' spinning took ~10× the CPU (parallel runs use --rep-start)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_budget_sim import SLOT, make_day  # noqa: E402

from tracescore.budget.combine import fit_groups  # noqa: E402
from tracescore.budget.neighbours import means, ordered_means  # noqa: E402
from tracescore.budget.policy import BINS, LAMBDA, ErrorModel, Pacer, inclusion  # noqa: E402
from tracescore.stats.active import active_mean  # noqa: E402
from tracescore.stats.weighted import hajek_mean  # noqa: E402

CASES = ("informative", "informative, no repeats", "not informative", "topics",
         "topics, verdicts not by topic")
ARMS = ("uniform", "adaptive, overlap", "adaptive, rich", "adaptive, rich + neighbours")
REFIT_SLOTS = 12  # an hour
FIT_LIMIT = 500
KEYS = ("ctx_support", "emb_answer_contexts")
NN = "nn_question_answer"
KEYS_NN = (*KEYS, NN)
TOPICS, DIMS, SPREAD = 100, 32, 0.1


def make_case(rng: np.random.Generator, case: str, records: int) -> dict[str, np.ndarray]:
    day = make_day(rng, records)
    q, y, slot = day["q"], day["y"], day["slot"]
    n = q.size
    o = np.clip(q + rng.normal(0, 0.25, n), 0.0, 1.0)
    if case.startswith("informative"):
        e = 0.3 + 0.6 * q + rng.normal(0, 0.04, n)
    else:
        e = rng.normal(0.6, 0.15, n)
    # every record's question+answer vector: its topic's centre plus noise (cosine ~0.75
    # within a topic, ~0 across)
    centres = rng.normal(size=(TOPICS, DIMS))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    topic = rng.integers(0, TOPICS, n)
    if case == "topics":
        # verdicts follow the topic; the lexical score and the similarity are blind to it
        level = np.where(rng.random(TOPICS) < 0.3, rng.beta(3, 2, TOPICS),
                         rng.beta(6, 1.2, TOPICS))
        q = np.clip(level[topic] + rng.normal(0, 0.05, n), 0.0, 1.0)
        k = 1 + rng.poisson(3, n)
        y = rng.binomial(k, q) / k
        o = np.clip(rng.beta(6, 1.2, n) + rng.normal(0, 0.25, n), 0.0, 1.0)
    if case.startswith("topics"):
        e = rng.normal(0.6, 0.15, n)
    v = centres[topic] + rng.normal(0, SPREAD, (n, DIMS))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    orig = np.full(n, -1)
    if case == "informative":
        # a repeat copies a record of an earlier slot (its content, features and verdict)
        first = np.searchsorted(slot, slot)  # index of the first record of each one's slot
        rep = (rng.random(n) < 0.15) & (first > 0)
        orig[rep] = (rng.random(int(rep.sum())) * first[rep]).astype(int)
        src = np.where(rep, orig, np.arange(n))
        y, o, e, v = y[src], o[src], e[src], v[src]
    return {**day, "y": y, "o": o, "e": e, "v": v, "orig": orig}


def run_arm(rng: np.random.Generator, day: dict[str, Any], arm: str, budget: float,
            yesterday: float, lam: float = LAMBDA) -> dict[str, Any]:
    y, o, e, orig = day["y"], day["o"], day["e"], day["orig"]
    n = y.size
    pacer = Pacer(budget)
    model = ErrorModel()
    f = o.copy()
    pi = np.zeros(n)
    sel = np.zeros(n, dtype=bool)
    free = np.zeros(n, dtype=bool)
    spent = seen = start = 0
    started: float | None = None
    beta: tuple[float, ...] | None = None
    keys: tuple[str, ...] = ()
    near = np.empty(0, dtype=int)
    rich = arm.startswith("adaptive, rich")
    u_all = rng.random(n)
    for s, c in enumerate(day["counts"]):
        if not c:
            continue
        idx = np.arange(start, start + c)
        start += c
        if rich and s % REFIT_SLOTS == 0:
            judged = np.flatnonzero(sel[:idx[0]])[-FIT_LIMIT:]
            if arm == "adaptive, rich":
                fits = fit_groups([({KEYS[0]: o[i], KEYS[1]: e[i]}, o[i], pi[i], y[i])
                                   for i in judged])
                beta, keys = (fits[KEYS].beta, KEYS) if KEYS in fits else (None, ())
            elif judged.size >= 2:
                # the neighbours' verdicts of each judged record, from those judged before it
                nn = ordered_means(day["v"][judged], y[judged])
                fits = fit_groups([({KEYS[0]: o[i], KEYS[1]: e[i],
                                     **({NN: m} if np.isfinite(m) else {})}, o[i], pi[i], y[i])
                                   for i, m in zip(judged, nn)])
                got = fits.get(KEYS_NN)
                beta, keys = (got.beta, got.keys) if got is not None else (None, ())
                near = judged
        recent = float(day["counts"][max(0, s - int(pacer.recent_s // SLOT)):s].sum())
        started = s * SLOT if started is None else started
        r = pacer.rate(spent, seen, s * SLOT, yesterday, recent, started)
        cached = np.zeros(c, dtype=bool)
        if rich:
            cached = (orig[idx] >= 0) & sel[np.maximum(orig[idx], 0)]
            if beta is not None:
                cols = {KEYS[0]: o[idx], KEYS[1]: e[idx]}
                if NN in keys:  # among the judged records of the last fit (judged earlier)
                    cols[NN] = means(day["v"][near], y[near], day["v"][idx])
                f[idx] = np.clip(beta[0] + sum(b * cols[k] for b, k in zip(beta[1:], keys)),
                                 0.0, 1.0)
            f[idx[cached]] = y[idx[cached]]
        bins = np.minimum(BINS - 1, (f[idx] * BINS).astype(int))
        if arm == "uniform":
            p = np.full(c, r)
        else:
            err, mean_err = model.errors()
            p = inclusion(err[bins], mean_err, r, lam=lam)
        chosen = u_all[idx] < p
        p = np.where(cached, 1.0, p)
        chosen = chosen | cached
        paid = chosen & ~cached
        over = spent + int(paid.sum()) - int(budget)
        if over > 0:  # the hard cap: the last paid ones of the slot find the budget spent
            where = np.flatnonzero(paid)[-over:]
            chosen[where] = False
            p = p.copy()
            late = (np.arange(c) >= where[0]) & ~cached
            p[late] = 0.0
            chosen[late] = False
            paid = chosen & ~cached
        pi[idx], sel[idx], free[idx] = p, chosen, cached
        spent += int(paid.sum())
        seen += c
        if arm != "uniform":
            ok = p > 0
            model.add(bins[ok], f[idx][ok], p[ok], chosen[ok], y[idx][ok])
    covered = pi > 0
    truth = float(y.mean())
    if arm == "uniform":
        hm = hajek_mean(y[sel], pi[sel])
        est, se = hm.estimate, hm.se
    else:
        am = active_mean(f[covered], pi[covered], sel[covered], y[covered])
        est, se = am.estimate, am.se
    paid_pi = pi[sel & ~free]
    # the hard cap's records (π = 0) are not represented: the estimate is of the others' mean
    return {"truth": truth, "truth_covered": float(y[covered].mean()),
            "pi0_share": 1.0 - float(covered.mean()),
            "value": est.value, "lo": est.lo, "hi": est.hi, "se": se,
            "judged": int(sel.sum()), "free": int(free.sum()), "spent_share": spent / budget,
            "n": n, "pi_min": float(paid_pi.min()) if paid_pi.size else None,
            "w_max_share": float((1 / paid_pi).max() / (1 / paid_pi).sum())
            if paid_pi.size else None}


def simulate(reps: int, records: int, budget: float, seed: int,
             cases: tuple[str, ...] = CASES, rep_start: int = 0,
             arms: tuple[str, ...] = ARMS, lam: float = LAMBDA) -> dict[str, Any]:
    out: dict[str, dict[str, list[dict[str, Any]]]] = {c: {a: [] for a in arms} for c in cases}
    for c_i, case in enumerate(CASES):
        if case not in cases:
            continue
        for rep in range(rep_start, rep_start + reps):
            rng = np.random.default_rng([seed, c_i, rep])
            day = make_case(rng, case, records)
            yesterday = records * rng.uniform(0.8, 1.2)
            for arm in arms:
                arm_rng = np.random.default_rng([seed, c_i, rep, 99])  # same u in every arm
                out[case][arm].append(run_arm(arm_rng, day, arm, budget, yesterday, lam))
    return out


def summarise(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Per case and arm: coverage with its Wilson 95 % interval (statsmodels), width, width
    ratio against uniform (same days), bias, and the estimator's mean reported s.e. against
    the empirical s.d. of the estimate's error across days."""
    from scipy import stats
    from statsmodels.stats.proportion import proportion_confint

    rows = []
    for case, arms in res.items():
        width_u = np.array([r["hi"] - r["lo"] for r in arms.get("uniform", [])])
        for arm, runs in arms.items():
            if not runs:
                continue
            v, lo, hi, truth = (np.array([r[k] for r in runs], dtype=float)
                                for k in ("value", "lo", "hi", "truth"))
            hits = int(np.sum((lo <= truth) & (truth <= hi)))
            w_lo, w_hi = proportion_confint(hits, len(runs), alpha=0.05, method="wilson")
            se = np.array([r.get("se") or np.nan for r in runs], dtype=float)
            sd = float(np.std(v - truth, ddof=1)) if len(runs) > 1 else float("nan")
            z = (v - truth) / se  # the standardised error: N(0, 1) if the s.e. is right
            rows.append({
                "case": case, "arm": arm, "reps": len(runs), "hits": hits,
                "coverage": hits / len(runs), "wilson": [float(w_lo), float(w_hi)],
                # misses by side: the truth above the interval, below it
                "miss_above": int(np.sum(truth > hi)), "miss_below": int(np.sum(truth < lo)),
                "width": float((hi - lo).mean()),
                "width_ratio": float((hi - lo).mean() / width_u.mean())
                if width_u.size else float("nan"),
                "bias": float(np.mean(v - truth)),
                "bias_se": sd / np.sqrt(len(runs)),
                "sd_error": sd,
                "se_reported": float(np.sqrt(np.nanmean(se * se))),
                "z_sd": float(np.std(z, ddof=1)) if len(runs) > 1 else float("nan"),
                "z_coverage": {f"{lvl:g}": float(np.mean(np.abs(z) <= stats.norm.ppf(0.5 + lvl / 2)))
                               for lvl in (0.8, 0.9, 0.95, 0.99)},
                "z_ks_p": float(stats.kstest(z, "norm").pvalue),
                # against the mean of the records with π > 0 (what the estimate is of), and
                # the share of the day's records the hard cap left with π = 0
                **({"coverage_covered": float(np.mean([r["lo"] <= r["truth_covered"] <= r["hi"]
                                                       for r in runs])),
                    "z_sd_covered": float(np.std([(r["value"] - r["truth_covered"]) / r["se"]
                                                  for r in runs], ddof=1)),
                    "pi0_share": float(np.mean([r["pi0_share"] for r in runs])),
                    "pi0_days": int(sum(r["pi0_share"] > 0 for r in runs))}
                   if len(runs) > 1 and all("truth_covered" in r for r in runs) else {}),
                "judged": float(np.mean([r["judged"] for r in runs])),
                "free": float(np.mean([r["free"] for r in runs])),
                "budget_mean": float(np.mean([r["spent_share"] for r in runs])),
            })
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(" | ".join(("case", "arm", "days", "coverage [Wilson 95 %]", "width",
                      "ratio vs uniform", "bias (s.e.)", "sd(err) / rms se", "judged/day (free)",
                      "budget used")))
    for r in rows:
        print(" | ".join([r["case"], r["arm"], str(r["reps"]),
                          f"{100 * r['coverage']:.1f} % [{100 * r['wilson'][0]:.1f}, "
                          f"{100 * r['wilson'][1]:.1f}]",
                          f"{r['width']:.4f}", f"{r['width_ratio']:.3f}",
                          f"{r['bias']:+.5f} ({r['bias_se']:.5f})",
                          f"{r['sd_error'] / r['se_reported']:.3f}",
                          f"{r['judged']:.0f} ({r['free']:.0f})",
                          f"{100 * r['budget_mean']:.1f} %"]))


def merge(paths: list[str]) -> dict[str, Any]:
    """The days of several ``--days`` files (runs over disjoint ``--rep-start`` ranges)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for path in paths:
        for case, arms in json.loads(Path(path).read_text())["days"].items():
            for arm, runs in arms.items():
                out.setdefault(case, {}).setdefault(arm, []).extend(runs)
    return out


def cost(n: int = 200) -> None:
    """What the proxy's features cost per decision on the worker: lexical only, and with the
    local MiniLM embedder (vectors cached in a SQLite file: first sight, then again)."""
    import asyncio
    import tempfile

    from tracescore.budget.features import embedding_features, local_features
    from tracescore.embeddings import CachedEmbedder, MiniLMEmbedder
    from tracescore.record import Context, RagRecord

    recs = [RagRecord(trace_id=f"{i:032x}", span_id=f"{i:016x}",
                      query=f"How long does the battery of model {i} last?",
                      contexts=(Context(f"Model {i} ships with a {500 + i} Wh battery that lasts"
                                        " about five hours on a charge."),
                                Context("The warranty covers the battery for two years.")),
                      answer=f"Model {i} has a {500 + i} Wh battery; it lasts about five hours.",
                      ground_truths=(f"About five hours ({500 + i} Wh).",))
            for i in range(n)]
    local_features(recs[0])  # (the tokenizer's tables are built on first use)
    t0 = time.perf_counter()
    for r in recs:
        local_features(r)
    lexical = (time.perf_counter() - t0) / n
    with tempfile.TemporaryDirectory() as d:
        emb = CachedEmbedder(MiniLMEmbedder(), f"{d}/e.db")

        async def run() -> tuple[float, float]:
            await emb.embed(["warm up"])
            out = []
            for _ in range(2):
                t = time.perf_counter()
                for r in recs:
                    await embedding_features(r, emb)
                out.append((time.perf_counter() - t) / n)
            return out[0], out[1]

        cold, warm = asyncio.run(run())
    print(f"features per record: lexical {1e6 * lexical:.0f} µs; MiniLM embeddings "
          f"(4 texts) first sight {1e3 * cold:.1f} ms, cached {1e3 * warm:.2f} ms")
    # the neighbours' verdicts: 500 judged records, MiniLM's 384 dimensions, both views
    from tracescore.budget.neighbours import KEYS as NN_KEYS
    from tracescore.budget.neighbours import Index

    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(501, 384))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = [(f"r{i}", {k: vecs[i] for k in NN_KEYS}, float(rng.random())) for i in range(500)]
    t0 = time.perf_counter()
    index = Index.build(rows)
    index.training()
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n):
        index.features("new", {k: vecs[500] for k in NN_KEYS})
    per = (time.perf_counter() - t0) / n
    print(f"neighbours' verdicts (500 judged, 384 dims, 2 views): per decision "
          f"{1e6 * per:.0f} µs; per refit (index and training features) {1e3 * fit_s:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="few replicates (a smoke run)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--records", type=int, default=40_000, help="records a day")
    ap.add_argument("--budget", type=float, default=2000.0, help="judged records a day")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--json", type=str, default=None)
    ap.add_argument("--cases", type=str, default=None,
                    help="comma-separated case numbers (1-based, in the order above)")
    ap.add_argument("--arms", type=str, default=None,
                    help="comma-separated arm numbers (1-based: uniform, adaptive overlap, rich, "
                    "rich + neighbours); the width ratio needs uniform")
    ap.add_argument("--lam", type=float, default=LAMBDA,
                    help="the robust mix's weight on uniform sampling (the worker's: %(default)s)")
    ap.add_argument("--rep-start", type=int, default=0,
                    help="the first day's number (runs over disjoint ranges can be merged)")
    ap.add_argument("--days", type=str, default=None,
                    help="write every simulated day's figures to this JSON file")
    ap.add_argument("--merge", type=str, default=None,
                    help="comma-separated --days files: summarise them together")
    ap.add_argument("--cost", action="store_true",
                    help="only time the features of one decision (lexical, MiniLM)")
    args = ap.parse_args(argv)
    if args.cost:
        cost()
        return 0
    if args.merge:
        rows = summarise(merge(args.merge.split(",")))
        print_rows(rows)
        if args.json:
            Path(args.json).write_text(json.dumps({"merged": args.merge, "rows": rows},
                                                  indent=1))
        return 0
    reps = args.reps or (10 if args.quick else 200)
    t0 = time.perf_counter()
    c0 = time.process_time()
    cases = CASES if not args.cases else tuple(CASES[int(i) - 1]
                                               for i in args.cases.split(","))
    arms = ARMS if not args.arms else tuple(ARMS[int(i) - 1] for i in args.arms.split(","))
    res = simulate(reps, args.records, args.budget, args.seed, cases, args.rep_start, arms,
                   args.lam)
    rows = summarise(res)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"judge budget, richer proxy: {reps} days per case (from {args.rep_start}), "
          f"~{args.records:,} records/day, budget {args.budget:g}/day, seed {args.seed}, "
          f"lambda {args.lam:g}, "
          f"{wall:.0f} s wall, {cpu:.0f} s CPU")
    print_rows(rows)
    meta = {"reps": reps, "rep_start": args.rep_start, "seed": args.seed, "lam": args.lam,
            "wall_s": wall,
            "cpu_s": cpu, "cases": list(cases)}
    if args.json:
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    if args.days:
        Path(args.days).write_text(json.dumps({**meta, "days": res}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
