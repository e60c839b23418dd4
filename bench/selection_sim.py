"""Estimates that account for selection (issue 29, part C): seeded simulations.

**1. Priority-sampled and forced scores.** A window of N records; each gets a true score and
a kind, and is chosen for scoring the way tracescore's sampler chooses (one hash fraction u per
record, uniform):

- "complaint" (8 %): a rule forces it (π = 1); its scores are low (Beta(2, 8));
- "premium" (20 %): a priority rule samples it at 0.5 (``sampling.priority``): π = max(0.5, r);
  its scores are high (Beta(8, 2));
- "plain" (72 %): sampled at the metric's rate r (π = r); Beta(5, 4); half of those scoring
  below 0.25 get negative feedback, which forces them later (π = 1).

The rate is read back from the decisions as the reader does it (the shortest decimal between
the largest u sampled and the smallest u not, ``reports.inclusion``), each scored record's π
comes from ``stats.weighted.inclusion_probability``, and the Hájek mean with its linearised
variance (``stats.weighted.hajek_mean``) is checked against the mean of **all N records**
(the window's population). Beside it: the plain mean of the scored records with its t
interval — what ``report`` printed before. A "uniform" setting (no rule, no priority) shows the
weighting costs nothing when there is nothing to correct.

**2. Labels that are not a random draw.** N judge-scored records, humans' values y; the judge
f = clip(y + 0.08 + N(0, 0.12²)). n labels drawn: at random; from the lowest 30 % of judge
scores (the issue's case); with probability ∝ (1 − f)² (complaint-driven, milder); by a label
plan (``trust.plan.make_plan``, stratified). For each: how often the draw check
(``trust.selection``, α = 0.01) warns, and how often the corrected (PPI++; stratified for the
plan) interval covers the human mean of all N records.

Run:  python bench/selection_sim.py [--quick] [--reps R] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, md_table, print_machine  # noqa: E402

from tracescore.reports.inclusion import _shortest  # noqa: E402
from tracescore.stats import Moments, mean_ci  # noqa: E402
from tracescore.stats.ppi import Stratum, ppi_mean, stratified_ppi_mean  # noqa: E402
from tracescore.stats.weighted import hajek_mean, inclusion_probability  # noqa: E402
from tracescore.trust.plan import make_plan  # noqa: E402
from tracescore.trust.selection import draw_check, stratified_draw_check  # noqa: E402


def _moments(x: np.ndarray) -> Moments:
    return Moments(int(x.size), float(x.sum()), float(np.dot(x, x)))


# -- 1. scores ------------------------------------------------------------------------------
def one_window(rng: np.random.Generator, big_n: int, rate: float, rules: bool
               ) -> tuple[float, Any, Any, int]:
    kind = rng.random(big_n)
    complaint = (kind < 0.08) if rules else np.zeros(big_n, bool)
    premium = ((kind >= 0.08) & (kind < 0.28)) if rules else np.zeros(big_n, bool)
    x = np.where(complaint, rng.beta(2, 8, big_n),
                 np.where(premium, rng.beta(8, 2, big_n), rng.beta(5, 4, big_n)))
    u = rng.random(big_n)
    feedback = (~complaint & ~premium & (x < 0.25) & (rng.random(big_n) < 0.5)) if rules \
        else np.zeros(big_n, bool)
    prio = premium & (u < 0.5)
    forced = complaint | prio
    by_rate = ~forced & (u < rate)
    # the rate read back from the unforced records' decisions (reports.inclusion)
    unforced_u = u[~forced]
    top, bottom = unforced_u[by_rate[~forced]].max(), unforced_u[~by_rate[~forced]].min()
    r = _shortest(float(top), float(bottom))
    scored = forced | by_rate | feedback
    pis = []
    for i in np.flatnonzero(scored):
        reason = "complaint" if complaint[i] else "priority 0.5: premium" if prio[i] else None
        pis.append(inclusion_probability(reason, bool(feedback[i]), r))
    xs = x[scored]
    return float(x.mean()), hajek_mean(xs.tolist(), pis), mean_ci(_moments(xs)), int(
        scored.sum())


def run_scores(big_n: int, rate: float, rules: bool, reps: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    cover_w, cover_n, width_w, bias_w, bias_n, n = [], [], [], [], [], []
    for _ in range(reps):
        truth, w, naive, k = one_window(rng, big_n, rate, rules)
        e = w.estimate
        cover_w.append(e.lo <= truth <= e.hi)
        cover_n.append(naive.lo <= truth <= naive.hi)
        width_w.append(e.hi - e.lo)
        bias_w.append(e.value - truth)
        bias_n.append(naive.value - truth)
        n.append(k)
    return {"weighted_cover": float(np.mean(cover_w)), "naive_cover": float(np.mean(cover_n)),
            "weighted_bias": float(np.mean(bias_w)), "naive_bias": float(np.mean(bias_n)),
            "weighted_width": float(np.mean(width_w)), "scored": float(np.mean(n))}


# -- 2. labels ------------------------------------------------------------------------------
def population(rng: np.random.Generator, big_n: int) -> tuple[np.ndarray, np.ndarray]:
    y = rng.beta(6, 3, big_n)
    f = np.clip(y + 0.08 + rng.normal(0, 0.12, big_n), 0, 1)
    return f, y


def draw(rng: np.random.Generator, f: np.ndarray, n: int, how: str) -> np.ndarray:
    big_n = f.size
    if how == "random":
        return rng.choice(big_n, n, replace=False)
    if how == "lowest 30 %":
        low = np.argsort(f)[: int(0.3 * big_n)]
        return rng.choice(low, n, replace=False)
    p = (1 - f) ** 2
    return rng.choice(big_n, n, replace=False, p=p / p.sum())


def run_labels(big_n: int, n: int, how: str, reps: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    warned, cover = [], []
    ids = [f"t{i:06d}" for i in range(big_n)]
    for rep in range(reps):
        f, y = population(rng, big_n)
        truth = float(y.mean())
        if how == "plan":
            plan = make_plan(zip(ids, f.tolist(), [None] * big_n), n, seed=rep)
            pos = {t: i for i, t in enumerate(ids)}
            members: dict[str, list[int]] = {}
            for r in plan.rows:
                members.setdefault(r.stratum, []).append(pos[r.trace_id])
            strata = [Stratum(s.name, s.judge, f[members[s.name]].tolist(),
                              y[members[s.name]].tolist()) for s in plan.strata]
            res = stratified_ppi_mean(strata, unlabelled_includes_labelled=True)
            sizes = sum(s.judge.n for s in plan.strata)
            check = stratified_draw_check(
                [(s.judge.n / sizes, f[members[s.name]].tolist(), s.judge) for s in plan.strata],
                unlabelled_includes_labelled=True)
        else:
            idx = draw(rng, f, n, how)
            res = ppi_mean(_moments(f), f[idx].tolist(), y[idx].tolist(),
                           unlabelled_includes_labelled=True)
            check = draw_check(f[idx].tolist(), _moments(f), unlabelled_includes_labelled=True)
        c = res.corrected
        warned.append(check.warn)
        cover.append(c.lo <= truth <= c.hi)
    return {"warned": float(np.mean(warned)), "ppi_cover": float(np.mean(cover))}


def _se(p: float, reps: int) -> float:
    return float(np.sqrt(p * (1 - p) / reps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (CI smoke run)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    reps = args.reps or (200 if args.quick else 1000)
    info = machine_info()
    print_machine(info)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"machine": info, "reps": reps, "scores": [], "labels": []}

    rows = []
    for big_n, rate, rules in ((3000, 0.1, True), (3000, 0.05, True), (1000, 0.2, True),
                               (3000, 0.1, False)):
        r = run_scores(big_n, rate, rules, reps, seed=int(big_n * 1000 * rate) + rules)
        out["scores"].append({"N": big_n, "rate": rate, "rules": rules, **r})
        rows.append([big_n, rate, "forced + priority + feedback" if rules else "uniform",
                     f"{r['scored']:.0f}", f"{100 * r['weighted_cover']:.1f} %",
                     f"{100 * r['naive_cover']:.1f} %", f"{r['weighted_bias']:+.4f}",
                     f"{r['naive_bias']:+.4f}", f"{r['weighted_width']:.3f}"])
    print(f"\n1. Scores: 95 % intervals against the mean of all N records ({reps} windows each;"
          f" MC SE of a 95 % coverage ±{100 * _se(0.95, reps):.1f} pp)\n")
    print(md_table(["N", "rate", "selection", "scored", "weighted covers", "plain covers",
                    "weighted bias", "plain bias", "weighted width"], rows))

    rows = []
    for how in ("random", "lowest 30 %", "prob ∝ (1 − f)²", "plan"):
        r = run_labels(2000, 80, how, reps, seed=len(how))
        out["labels"].append({"draw": how, **r})
        rows.append([how, f"{100 * r['warned']:.1f} %", f"{100 * r['ppi_cover']:.1f} %"])
    print(f"\n2. Labels: N = 2000 scored records, n = 80 labels ({reps} repetitions each): how "
          "often the draw check warns (α = 0.01) and the corrected 95 % interval covers the "
          "human mean\n")
    print(md_table(["labels drawn", "warned", "corrected covers"], rows))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
