"""Budgeted, adaptive judge selection (issue 33): a seeded simulation on production-shaped data.

One simulated day per replicate:

- **Traffic** (bursty): a diurnal curve (±60 %) of about ``--records`` records a day, plus three
  bursts of 30 minutes at 6× the traffic at random times; records arrive in 5-minute slots.
- **Scores** (skewed): each record's quality q ~ Beta(6, 1.2) (most answers good), burst
  records q ~ Beta(3, 2) (a spike of bad traffic); the judge's score y is the share of k
  statements it finds supported, k ~ 1 + Poisson(3), each with probability q — values in
  {0, 1/k, …, 1}, piled up at 1.
- **Proxies**: *good* f = q + N(0, 0.04²) (a local score that tracks the judge's
  expectation), *poor* f = q + N(0, 0.25²), *useless* f independent of everything; all
  clipped to [0, 1].
- **Selection**: the budget's pacer (``tracescore.budget.policy.Pacer``, yesterday's traffic
  known within ±20 %) sets the rate at each slot's start from the day's counts so far; π from
  the learned error model (``ErrorModel``) mixed with uniform (λ = 0.3,
  ``policy.inclusion``); a record is judged iff u < π (u uniform: the SHA-256 hash fraction's
  role); the day's budget is a hard cap (the durable counter's conditional update).
- **Estimates** of the mean of y over the day's records (the finite population):
  *adaptive*: ``stats.active.active_mean``; *uniform*: the same pacer with π = r for every
  record and the Hájek mean (``stats.weighted.hajek_mean``) — what tracescore does with a
  plain sample rate; *uniform+proxy*: π = r, the active estimator (the proxy's gain without
  adaptive selection).

Reported per proxy: coverage of the 95 % intervals, mean width, width ratio against uniform
(same replicates, same budget), bias, judged records, and the budget used per day (min / mean).

Run:  python bench/judge_budget_sim.py [--quick] [--reps R] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tracescore.budget.policy import (  # noqa: E402
    BINS,
    DAY,
    LAMBDA,
    ErrorModel,
    Pacer,
    inclusion,
)
from tracescore.stats.active import active_mean  # noqa: E402
from tracescore.stats.weighted import hajek_mean  # noqa: E402

SLOT = 300.0
PROXIES = ("good", "poor", "useless")
ARMS = ("adaptive", "uniform", "uniform+proxy")


def make_day(rng: np.random.Generator, records: int) -> dict[str, np.ndarray]:
    slots = int(DAY // SLOT)
    t = (np.arange(slots) + 0.5) / slots
    lam = 1.0 + 0.6 * np.sin(2 * np.pi * (t - 0.3))
    burst = np.zeros(slots, dtype=bool)
    for start in rng.choice(slots - 6, size=3, replace=False):
        burst[start:start + 6] = True
    lam = np.where(burst, lam * 6.0, lam)
    lam = lam / lam.sum() * records
    counts = rng.poisson(lam)
    slot_of = np.repeat(np.arange(slots), counts)
    in_burst = burst[slot_of]
    n = slot_of.size
    q = np.where(in_burst, rng.beta(3, 2, n), rng.beta(6, 1.2, n))
    k = 1 + rng.poisson(3, n)
    y = rng.binomial(k, q) / k
    return {"slot": slot_of, "counts": counts, "q": q, "y": y, "burst": in_burst}


def proxy_of(rng: np.random.Generator, kind: str, q: np.ndarray) -> np.ndarray:
    if kind == "good":
        f = q + rng.normal(0, 0.04, q.size)
    elif kind == "poor":
        f = q + rng.normal(0, 0.25, q.size)
    else:
        f = rng.beta(6, 1.2, q.size)
    return np.clip(f, 0.0, 1.0)


def run_arm(rng: np.random.Generator, day: dict[str, np.ndarray], f: np.ndarray, arm: str,
            budget: float, yesterday: float | None, lam: float = LAMBDA) -> dict[str, Any]:
    """One arm over one day: the decisions slot by slot, then the estimate (``lam``: the
    robust mix's weight on uniform, ``policy.LAMBDA`` in the worker)."""
    pacer = Pacer(budget)
    model = ErrorModel()
    bins = np.minimum(BINS - 1, (f * BINS).astype(int))
    y = day["y"]
    n = y.size
    pi = np.zeros(n)
    sel = np.zeros(n, dtype=bool)
    spent = seen = 0
    start = 0
    started: float | None = None
    u_all = rng.random(n)
    for s, c in enumerate(day["counts"]):
        if not c:
            continue
        idx = slice(start, start + c)
        start += c
        recent = float(day["counts"][max(0, s - int(pacer.recent_s // SLOT)):s].sum())
        if started is None:
            started = s * SLOT
        r = pacer.rate(spent, seen, s * SLOT, yesterday, recent, started)
        if arm == "adaptive":
            err, mean_err = model.errors()
            p = inclusion(err[bins[idx]], mean_err, r, lam=lam)
        else:
            p = np.full(c, r)
        chosen = u_all[idx] < p
        over = spent + int(chosen.sum()) - int(budget)
        if over > 0:  # the hard cap: the last ones of the slot find the budget spent
            where = np.flatnonzero(chosen)[-over:]
            chosen[where] = False
            p = p.copy()
            p[where] = 0.0
            p[np.arange(c) > where[0]] = 0.0
        pi[idx], sel[idx] = p, chosen
        spent += int(chosen.sum())
        seen += c
        if arm == "adaptive":
            ok = p > 0
            model.add(bins[idx][ok], f[idx][ok], p[ok], chosen[ok], y[idx][ok])
    covered = pi > 0  # records past an exhausted budget have pi 0: not represented
    truth = float(y.mean())
    if arm == "uniform":
        w = hajek_mean(y[sel], pi[sel])
        est, se = w.estimate, w.se
    else:
        am = active_mean(f[covered], pi[covered], sel[covered], y[covered])
        est, se = am.estimate, am.se
    return {"truth": truth, "value": est.value, "lo": est.lo, "hi": est.hi, "se": se,
            "judged": int(sel.sum()), "spent_share": spent / budget,
            "unrepresented": int((~covered).sum()), "n": n}


def simulate(reps: int, records: int, budget: float, seed: int,
             first_day: bool = False, lam: float = LAMBDA
             ) -> dict[str, dict[str, list[dict[str, Any]]]]:
    out: dict[str, dict[str, list[dict[str, Any]]]] = {
        p: {a: [] for a in ARMS} for p in PROXIES}
    for p_i, kind in enumerate(PROXIES):
        for rep in range(reps):
            rng = np.random.default_rng([seed, p_i, rep])
            day = make_day(rng, records)
            f = proxy_of(rng, kind, day["q"])
            yesterday = None if first_day else records * rng.uniform(0.8, 1.2)
            for a_i, arm in enumerate(ARMS):
                arm_rng = np.random.default_rng([seed, p_i, rep, 99])  # same u in every arm
                out[kind][arm].append(run_arm(arm_rng, day, f, arm, budget, yesterday,
                                                   lam))
                del a_i
    return out


def summarise(res: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per proxy and arm; coverage with its Wilson 95 % interval (statsmodels), and the s.d.
    of the standardised error (estimate − truth)/s.e. across days (1 when the s.e. is right)."""
    from statsmodels.stats.proportion import proportion_confint

    rows = []
    for kind, arms in res.items():
        width_u = np.array([r["hi"] - r["lo"] for r in arms["uniform"]])
        for arm, runs in arms.items():
            v = np.array([r["value"] for r in runs])
            lo = np.array([r["lo"] for r in runs])
            hi = np.array([r["hi"] for r in runs])
            truth = np.array([r["truth"] for r in runs])
            width = hi - lo
            spent = np.array([r["spent_share"] for r in runs])
            hits = int(np.sum((lo <= truth) & (truth <= hi)))
            z = (v - truth) / np.array([r["se"] or np.nan for r in runs], dtype=float)
            rows.append({
                "proxy": kind, "arm": arm, "reps": len(runs),
                "coverage": hits / len(runs),
                "wilson": [float(b) for b in proportion_confint(hits, len(runs), method="wilson")],
                "z_sd": float(np.std(z, ddof=1)) if len(runs) > 1 else float("nan"),
                "miss_above": int(np.sum(truth > hi)), "miss_below": int(np.sum(truth < lo)),
                "width": float(width.mean()),
                "width_ratio": float(width.mean() / width_u.mean()),
                "bias": float(np.mean(v - truth)),
                "rmse": float(np.sqrt(np.mean((v - truth) ** 2))),
                "judged": float(np.mean([r["judged"] for r in runs])),
                "records": float(np.mean([r["n"] for r in runs])),
                "budget_min": float(spent.min()), "budget_mean": float(spent.mean()),
                "unrepresented": float(np.mean([r["unrepresented"] for r in runs])),
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="few replicates (a smoke run)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--records", type=int, default=40_000, help="records a day")
    ap.add_argument("--budget", type=float, default=2000.0, help="judged records a day")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--first-day", action="store_true",
                    help="no traffic known from yesterday")
    ap.add_argument("--json", type=str, default=None)
    ap.add_argument("--lam", type=float, default=LAMBDA,
                    help="the robust mix's weight on uniform sampling (the worker's: %(default)s)")
    args = ap.parse_args(argv)
    reps = args.reps or (20 if args.quick else 300)
    t0 = time.perf_counter()
    c0 = time.process_time()
    rows = summarise(simulate(reps, args.records, args.budget, args.seed, args.first_day,
                              args.lam))
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"judge budget simulation: {reps} days per proxy, ~{args.records:,} records/day, "
          f"budget {args.budget:g}/day{' (first day: no prior)' if args.first_day else ''}, "
          f"seed {args.seed}, lambda {args.lam:g}, {took:.0f} s wall, {cpu:.0f} s CPU")
    head = ("proxy", "arm", "coverage [Wilson 95 %]", "sd((est - truth)/se)", "width",
            "ratio vs uniform", "bias", "judged/day", "budget used min/mean")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([r["proxy"], r["arm"],
                          f"{100 * r['coverage']:.1f} % [{100 * r['wilson'][0]:.1f}, "
                          f"{100 * r['wilson'][1]:.1f}]", f"{r['z_sd']:.3f}",
                          f"{r['width']:.4f}", f"{r['width_ratio']:.3f}", f"{r['bias']:+.5f}",
                          f"{r['judged']:.0f}",
                          f"{100 * r['budget_min']:.1f} / {100 * r['budget_mean']:.1f} %"]))
    if args.json:
        Path(args.json).write_text(json.dumps({"reps": reps, "seed": args.seed, "lam": args.lam,
                                               "wall_s": took,
                                               "cpu_s": cpu, "first_day": args.first_day,
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
