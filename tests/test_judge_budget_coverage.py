"""Issue 33 item 4: the judge budget's coverage, decided with many days
(bench/judge_budget_proxy_sim.py; BENCHMARKS.md, "Session 15 — coverage"). The bench's days
can be simulated in disjoint ranges (two processes) and merged into the one run's table; and
in the *topics* case, where the proxy is the neighbours' verdicts, the estimator's reported
standard error matches the spread of its error across seeded days."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from statsmodels.stats.proportion import proportion_confint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import judge_budget_proxy_sim as sim  # noqa: E402

TOPICS = sim.CASES[3]


def test_days_run_in_disjoint_ranges_merge_into_the_one_run(tmp_path, capsys):
    """Day 0 and day 1 (``--rep-start``, ``--days``), merged (``--merge``), give the table of
    days 0–1 run at once: each day depends on its number only. Coverage carries its hits and
    the Wilson interval of statsmodels."""
    args = ["--cases", "4", "--records", "2000", "--budget", "150"]
    for start in (0, 1):
        assert sim.main([*args, "--reps", "1", "--rep-start", str(start),
                         "--days", str(tmp_path / f"d{start}.json")]) == 0
    out = tmp_path / "merged.json"
    files = ",".join(str(tmp_path / f"d{s}.json") for s in (0, 1))
    assert sim.main(["--merge", files, "--json", str(out)]) == 0
    merged = json.loads(out.read_text())["rows"]
    whole = sim.summarise(sim.simulate(2, 2000, 150.0, 34, (TOPICS,)))
    assert len(merged) == len(whole) == len(sim.ARMS)
    for m, w in zip(merged, whole):
        assert m["reps"] == 2 and m["arm"] == w["arm"]
        for k in ("coverage", "width", "width_ratio", "bias", "sd_error", "se_reported"):
            assert m[k] == w[k], (k, m, w)
        assert m["hits"] + m["miss_above"] + m["miss_below"] == 2
        assert m["wilson"] == list(proportion_confint(m["hits"], 2, method="wilson"))
    assert "Wilson" in capsys.readouterr().out


def test_topics_case_standard_error_matches_the_spread_of_the_estimate():
    """Uniform and the neighbours' arm of the *topics* case on 40 seeded small days (3,000
    records, budget 250): the standardised errors (estimate − the day's mean) / reported s.e.
    have mean ≈ 0 and s.d. ≈ 1, and the 95 % intervals cover in ≥ 85 % of the days. (The full
    run, 1,200 days of 40,000 records: BENCHMARKS.md.)"""
    for arm in ("uniform", "adaptive, rich + neighbours"):
        runs = []
        for day in range(40):
            rng = np.random.default_rng([15, 3, day])
            case = sim.make_case(rng, TOPICS, 3000)
            yesterday = 3000 * rng.uniform(0.8, 1.2)
            runs.append(sim.run_arm(np.random.default_rng([15, 3, day, 99]), case, arm, 250.0,
                                    yesterday))
        z = np.array([(r["value"] - r["truth"]) / r["se"] for r in runs])
        assert abs(z.mean()) < 0.5, (arm, z.mean())  # ~3 s.e. of a mean of 40
        assert 0.7 < z.std(ddof=1) < 1.4, (arm, z.std(ddof=1))
        covered = np.mean([r["lo"] <= r["truth"] <= r["hi"] for r in runs])
        assert covered >= 0.85, (arm, covered)
