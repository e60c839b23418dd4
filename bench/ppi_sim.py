"""Judge-corrected estimates: coverage and width of PPI++ against a scripted judge (issue 17).

Seeded simulation. A population of N scored records is drawn; humans label n of them at random;
the judge's scores of all N records (as the rollups keep them: n, sum, sum of squares) and the n
labelled pairs go to ``tracescore.stats.ppi.ppi_mean(..., unlabelled_includes_labelled=True)``,
exactly as a report would call it. The target is the population's true human mean E[Y], known
by construction. Per setting, over the repetitions:

- coverage of the 95 % intervals of PPI++ (goal >= 93 %; the library's default small-sample
  form, and ppi-python's form with ``small_sample=False``), of the plain judge mean (reported:
  it estimates the judge's mean, not the human one) and of the labels-only mean;
- the mean width of the PPI++ interval against the labels-only interval at the same n
  (goal: narrower), and the mean λ̂.

Cases:
- **yes/no**: human verdict y ~ Bernoulli(0.70); the judge says "yes" to 30 % of the human
  "no"s and "no" to 5 % of the human "yes"es (accuracy 0.875, bias +0.055 — a lenient judge).
- **numeric**: human score y ~ Beta(6, 2) (mean 0.75); judge f = clip(y + 0.08 + N(0, 0.12²),
  0, 1) (bias about +0.07, rank correlation about 0.6).
- **useless judge** (one setting): f ~ Beta(6, 2) independent of y — PPI++ must fall back to
  about the labels-only width (λ̂ near 0) and keep its coverage.
- **small n**: n = 10, 20, 30 labels, to set the floor ``MIN_LABELS``.

Stratified plan vs uniform labels: the same n labels drawn either uniformly (PPI++) or by
``tracescore.trust.plan.make_plan`` (4 score bands x 2 releases, Neyman-type allocation) and
estimated with ``stratified_ppi_mean`` (one pooled λ, the default, and λ per stratum); the judge is noisier on release "b" (sd 0.20 vs 0.08),
where the plan puts more labels.

Run:  python bench/ppi_sim.py [--quick] [--reps R] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, md_table, print_machine  # noqa: E402

from tracescore.stats import Moments  # noqa: E402
from tracescore.stats.ppi import PPIResult, Stratum, ppi_mean, stratified_ppi_mean  # noqa: E402
from tracescore.trust.plan import make_plan  # noqa: E402

ALPHA = 0.05
Gen = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray, float]]


def yes_no(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, float]:
    y = (rng.random(size) < 0.70).astype(float)
    u = rng.random(size)
    f = np.where(y == 1, (u >= 0.05), (u < 0.30)).astype(float)
    return f, y, 0.70


def numeric(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, float]:
    y = rng.beta(6, 2, size)
    f = np.clip(y + 0.08 + rng.normal(0, 0.12, size), 0, 1)
    return f, y, 0.75


def useless(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, float]:
    return rng.beta(6, 2, size), rng.beta(6, 2, size), 0.75


CASES: dict[str, Gen] = {"yes/no": yes_no, "numeric": numeric, "useless judge": useless}


def _moments(x: np.ndarray) -> Moments:
    return Moments(int(x.size), float(x.sum()), float(np.dot(x, x)))


def _score(res: PPIResult, raw: PPIResult, truth: float, acc: dict[str, list[float]]) -> None:
    for key, est in (("ppi", res.corrected), ("judge", res.judge), ("labels", res.labels),
                     ("raw", raw.corrected)):
        assert est.lo is not None and est.hi is not None, est
        acc[key + "_cover"].append(float(est.lo <= truth <= est.hi))
        acc[key + "_width"].append(est.hi - est.lo)
    acc["lam"].append(res.corrected.lam if res.corrected.lam is not None else float("nan"))


def run_setting(gen: Gen, big_n: int, n: int, reps: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    acc: dict[str, list[float]] = {k: [] for k in (
        "ppi_cover", "ppi_width", "judge_cover", "judge_width", "labels_cover",
        "labels_width", "raw_cover", "raw_width", "lam")}
    for _ in range(reps):
        f, y, truth = gen(rng, big_n)
        idx = rng.choice(big_n, n, replace=False)
        m, fl, yl = _moments(f), f[idx].tolist(), y[idx].tolist()
        res = ppi_mean(m, fl, yl, alpha=ALPHA, unlabelled_includes_labelled=True, min_n=2)
        raw = ppi_mean(m, fl, yl, alpha=ALPHA, unlabelled_includes_labelled=True, min_n=2,
                       small_sample=False)
        _score(res, raw, truth, acc)
    return {k: float(np.nanmean(v)) for k, v in acc.items()}


def segmented(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    seg = rng.random(size) < 0.5  # True: release "b", where the judge is noisier
    y = rng.beta(6, 2, size)
    f = np.clip(y + 0.08 + rng.normal(0, 1, size) * np.where(seg, 0.20, 0.08), 0, 1)
    return f, y, seg


def run_plan(big_n: int, n: int, reps: int, seed: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, list[float]]] = {
        k: {"cover": [], "width": []} for k in ("uniform", "plan", "plan per stratum",
                                                 "plan labels")}
    ids = [f"t{i:06d}" for i in range(big_n)]
    for rep in range(reps):
        f, y, seg = segmented(rng, big_n)
        truth = 0.75
        idx = rng.choice(big_n, n, replace=False)
        res = ppi_mean(_moments(f), f[idx].tolist(), y[idx].tolist(), alpha=ALPHA,
                       unlabelled_includes_labelled=True, min_n=2)
        _add(out["uniform"], res.corrected.lo, res.corrected.hi, truth)
        segs = np.where(seg, "release=b", "release=a")
        plan = make_plan(zip(ids, f.tolist(), segs.tolist()), n, seed=rep)
        pos = {t: i for i, t in enumerate(ids)}
        members: dict[str, list[int]] = {}
        for r in plan.rows:
            members.setdefault(r.stratum, []).append(pos[r.trace_id])
        strata = [Stratum(s.name, s.judge, f[members[s.name]].tolist(),
                          y[members[s.name]].tolist()) for s in plan.strata]
        sres = stratified_ppi_mean(strata, alpha=ALPHA, unlabelled_includes_labelled=True,
                                   min_n=2)
        _add(out["plan"], sres.corrected.lo, sres.corrected.hi, truth)
        each = stratified_ppi_mean(strata, alpha=ALPHA, unlabelled_includes_labelled=True,
                                   min_n=2, lam_mode="per_stratum")
        _add(out["plan per stratum"], each.corrected.lo, each.corrected.hi, truth)
        _add(out["plan labels"], sres.labels.lo, sres.labels.hi, truth)
    return {k: {m: float(np.mean(v)) for m, v in d.items()} for k, d in out.items()}


def _add(d: dict[str, list[float]], lo: float | None, hi: float | None, truth: float) -> None:
    assert lo is not None and hi is not None
    d["cover"].append(float(lo <= truth <= hi))
    d["width"].append(hi - lo)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200 repetitions (a few seconds)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    reps = args.reps or (200 if args.quick else 1000)
    started = time.perf_counter()
    info = machine_info()
    print_machine(info)
    results: dict[str, Any] = {"machine": info, "reps": reps, "alpha": ALPHA, "settings": []}
    print(f"\n{reps} repetitions per setting; 95 % intervals; target = true human mean\n")
    settings = [(case, big_n, n) for case in ("yes/no", "numeric")
                for big_n in (2000, 10000) for n in (50, 100, 200)]
    settings += [("useless judge", 10000, 100)]
    settings += [(case, 2000, n) for case in ("yes/no", "numeric") for n in (10, 20, 30)]
    rows = []
    for i, (case, big_n, n) in enumerate(settings):
        r = run_setting(CASES[case], big_n, n, reps, seed=1000 + i)
        results["settings"].append({"case": case, "N": big_n, "n": n, **r})
        rows.append([case, f"{big_n:,}", n, f"{100 * r['ppi_cover']:.1f} %",
                     f"{100 * r['raw_cover']:.1f} %",
                     f"{100 * r['judge_cover']:.1f} %", f"{100 * r['labels_cover']:.1f} %",
                     f"{r['ppi_width']:.4f}", f"{r['labels_width']:.4f}",
                     f"{r['ppi_width'] / r['labels_width']:.2f}", f"{r['lam']:.2f}"])
    print(md_table(["case", "N", "n labels", "PPI++ coverage", "ppi_py form coverage",
                    "judge-mean coverage", "labels-only coverage", "PPI++ width",
                    "labels-only width", "PPI++ / labels width", "mean lambda"], rows))
    plan_rows = []
    for j, (big_n, n) in enumerate(((2000, 50), (2000, 100), (10000, 100))):
        p = run_plan(big_n, n, reps, seed=5000 + j)
        results.setdefault("plan", []).append({"N": big_n, "n": n, **p})
        u, s, sl, se = p["uniform"], p["plan"], p["plan labels"], p["plan per stratum"]
        plan_rows.append([f"{big_n:,}", n, f"{100 * u['cover']:.1f} %",
                          f"{100 * s['cover']:.1f} %", f"{100 * se['cover']:.1f} %",
                          f"{100 * sl['cover']:.1f} %",
                          f"{u['width']:.4f}", f"{s['width']:.4f}", f"{sl['width']:.4f}",
                          f"{s['width'] / u['width']:.2f}"])
    print("\nStratified plan (4 bands x 2 releases) vs uniform labels, numeric, judge noisier "
          "on release b\n")
    print(md_table(["N", "n labels", "uniform PPI++ coverage", "plan + stratified PPI++ "
                    "coverage", "same, lambda per stratum", "plan, labels only coverage", "uniform PPI++ width",
                    "plan PPI++ width", "plan labels-only width", "plan / uniform width"],
                   plan_rows))
    elapsed = time.perf_counter() - started
    results["seconds"] = elapsed
    print(f"\n{elapsed:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
