"""``compare`` under A/A: false verdicts and interval coverage, old method and new (issue 29).

Seeded simulation of the release comparison a deploy gate runs (``tracescore compare`` /
``check --compare``): two sides drawn from the SAME distribution (A/A), n per side, five scores
compared at once, exactly as :func:`tracescore.reports.compare.build_comparison` compares them:

- ``near-constant``: a continuous score that is 1.0 in 97 % of records, else uniform on [0, 1]
  (a faithfulness score on an app that is nearly always right; often a side is all 1.0);
- ``yes/no``: a yes/no check at 70 % yes (``rate_difference``);
- ``skewed``: Beta(0.5, 5), mean 0.09, skewness ~2 (a hallucination-like score);
- ``symmetric``: Beta(5, 5);
- ``rare rate``: a yes/no check at 97 % yes (Fisher's exact test when a cell is small).

Per replicate: each score's difference (current - baseline) with its 95 % interval and p-value,
p-values adjusted across the five with Holm, and :func:`tracescore.stats.verdict`
(min_n 30, min_effect 0.02). Reported: the family-wise share of replicates with ANY
"regressed"/"improved" verdict (the claim: <= 5 %), with its Monte Carlo SE; per score kind the
share whose difference interval holds the true difference 0 (the claim: >= 93 % at n >= 30) and
the share of false verdicts. "old" is the method before session 11 (a percentile bootstrap over
the 100-bin histograms for sides without spread or too skewed by Cochran's rule), loaded from
``--old`` (a path to that version of ``tracescore/monitor/stats.py``) when given; "new" is the
installed library; "Welch only" is the installed library told nothing of the [0, 1] range
(Welch wherever it is defined; no interval when both sides have no spread). Then the cost:
an A/B drop of the near-constant score, the share of replicates each method finds.

Run:  python bench/compare_sim.py [--quick] [--old /path/to/old/stats.py] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, md_table, print_machine  # noqa: E402

from tracescore import stats as new_stats  # noqa: E402

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def _near_constant(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    out = np.ones(shape)
    hit = rng.random(shape) < 0.03
    out[hit] = rng.random(int(hit.sum()))
    return out


#: (name, kind, draw): kind "mean" goes through mean_difference, "rate" through rate_difference
SCORES: list[tuple[str, str, Draw]] = [
    ("near-constant", "mean", _near_constant),
    ("yes/no", "rate", lambda rng, s: (rng.random(s) < 0.70).astype(float)),
    ("skewed", "mean", lambda rng, s: rng.beta(0.5, 5.0, s)),
    ("symmetric", "mean", lambda rng, s: rng.beta(5.0, 5.0, s)),
    ("rare rate", "rate", lambda rng, s: (rng.random(s) < 0.97).astype(float)),
]
SIZES = (30, 50, 200)
BAD = ("regressed", "improved", "changed")


def _bins(xs: np.ndarray) -> list[tuple[float, float]]:
    """100 equal bins over [0, 1], (midpoint, count), as the rollups store them."""
    idx = np.clip((xs * 100).astype(int), 0, 99)
    counts = np.bincount(idx, minlength=100)
    return [((i + 0.5) / 100, float(c)) for i, c in enumerate(counts) if c]


def _difference(st: ModuleType, kind: str, a: np.ndarray, b: np.ndarray,
                welch_only: bool = False) -> Any:
    if kind == "rate":
        return st.rate_difference(int(a.sum()), len(a), int(b.sum()), len(b))
    ma, mb = st.Moments.from_values(a), st.Moments.from_values(b)
    if welch_only:  # the range unknown: Welch wherever it is defined
        return st.mean_difference(ma, mb, bounded=False)
    # as compare passes them: the histograms (the old method's input), scores in [0, 1]
    return st.mean_difference(ma, mb, bins_current=_bins(a), bins_baseline=_bins(b))


def power(st: ModuleType, n: int, reps: int, seed: int, welch_only: bool = False) -> float:
    """A/B on the near-constant score: the share of outlying values grows from 3 % to 15 %
    (mean 0.985 -> 0.925) — the share of replicates judged "regressed" (one score, no
    adjustment)."""
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(reps):
        base = _near_constant(rng, (1, n))[0]
        cur = np.ones(n)
        hit = rng.random(n) < 0.15
        cur[hit] = rng.random(int(hit.sum()))
        d = _difference(st, "mean", cur, base, welch_only)
        found += st.verdict(d, n_current=n, n_baseline=n, higher_is_better=True,
                            p_adjusted=d.p_value) == "regressed"
    return found / reps


def simulate(st: ModuleType, n: int, reps: int, seed: int,
             welch_only: bool = False) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    data = [(name, kind, draw(rng, (reps, n)), draw(rng, (reps, n)))
            for name, kind, draw in SCORES]
    family_bad = 0
    covered = {name: 0 for name, _, _ in SCORES}
    false = {name: 0 for name, _, _ in SCORES}
    zero_width = {name: 0 for name, _, _ in SCORES}
    for i in range(reps):
        diffs = [_difference(st, kind, cur[i], base[i], welch_only)
                 for _, kind, cur, base in data]
        adjusted = st.adjust_pvalues([d.p_value for d in diffs])
        any_bad = False
        for (name, _, _, _), d, p in zip(data, diffs, adjusted):
            v = st.verdict(d, n_current=n, n_baseline=n, higher_is_better=True, p_adjusted=p)
            if v in BAD:
                false[name] += 1
                any_bad = True
            if d.lo is not None and d.hi is not None:
                covered[name] += d.lo <= 0.0 <= d.hi
                zero_width[name] += d.hi - d.lo <= 0.0
        family_bad += any_bad
    fw = family_bad / reps
    return {"n": n, "reps": reps, "familywise": fw,
            "familywise_se": math.sqrt(fw * (1 - fw) / reps),
            "coverage": {k: v / reps for k, v in covered.items()},
            "false": {k: v / reps for k, v in false.items()},
            "zero_width": {k: v / reps for k, v in zero_width.items()}}


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("old_stats", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_stats"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="300 replicates instead of 2,000")
    ap.add_argument("--old", help="path to the old tracescore/monitor/stats.py to compare")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    reps = 300 if args.quick else 2000
    info = machine_info()
    print_machine(info)
    methods: list[tuple[str, ModuleType, bool]] = [("new", new_stats, False),
                                                   ("Welch only", new_stats, True)]
    if args.old:
        methods.insert(0, ("old", _load(args.old), False))
    results: dict[str, list[dict[str, Any]]] = {}
    powers: dict[str, dict[int, float]] = {}
    t0 = time.perf_counter()
    for label, st, welch_only in methods:
        results[label] = [simulate(st, n, reps, 29_000 + n, welch_only) for n in SIZES]
        powers[label] = {n: power(st, n, reps, 29_500 + n, welch_only) for n in (50, 200)}
    elapsed = time.perf_counter() - t0
    names = [name for name, _, _ in SCORES]
    rows = []
    for label, per_n in results.items():
        for r in per_n:
            rows.append([label, r["n"], f"{100 * r['familywise']:.1f} ± {100 * r['familywise_se']:.1f}",
                         *(f"{100 * r['coverage'][k]:.1f}" for k in names)])
    print(f"\nA/A, {reps} replicates per n, five scores, Holm; {elapsed:.0f} s\n")
    print(md_table(["method", "n per side", "family-wise false verdicts %",
                    *(f"coverage {k} %" for k in names)], rows))
    rows = []
    for label, per_n in results.items():
        for r in per_n:
            rows.append([label, r["n"], *(f"{100 * r['false'][k]:.1f} / "
                                           f"{100 * r['zero_width'][k]:.1f}" for k in names)])
    print("\nper score: false verdicts % / zero-width intervals %\n")
    print(md_table(["method", "n per side", *names], rows))
    print("\nA/B, near-constant score, outlying share 3 % -> 15 % (mean -0.06): "
          "share judged regressed\n")
    print(md_table(["method", "n = 50 per side", "n = 200 per side"],
                   [[label, f"{100 * p[50]:.1f}", f"{100 * p[200]:.1f}"]
                    for label, p in powers.items()]))
    out = {"machine": info, "reps": reps, "elapsed_s": elapsed, "results": results,
           "power": powers}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
