"""Monitors checked again and again: false alarms and detection delays, side by side (issue 16).

Seeded simulation of score streams (Beta-distributed scores in [0, 1], concentration a+b = 10,
so sd ~0.11 at a mean of 0.85). Every monitor is checked every 50 records over 10,000 records.

1. **Threshold monitors** ("mean below 0.80"; healthy mean 0.85):
   - *ours*: ``ThresholdMonitor`` (tumbling windows of 1,000 records, PrPl-EB confidence
     sequence at alpha/(k(k+1)) in window k, alpha = 0.05, min_n = 30): ALERT when the interval
     lies below the threshold;
   - *ours, sums only*: the same windows with the normal-mixture boundary (``mixture_radius``,
     rho tuned for n = 1,000) instead of PrPl-EB;
   - *Langfuse-style*: the mean of the last 50 (or 100) records below the threshold;
   - *repeated t*: the 95 % one-sided t upper bound of the current 1,000-record window below the
     threshold (a fixed-level test, repeated at every check).
   No change (mean 0.85, and the worst case of the null, mean exactly 0.80): the share of 1,000
   streams with ANY alarm. Drops from 0.85 to 0.75 and to 0.70 (0.05 and 0.10 below the
   threshold) at a record drawn uniformly from [5,000, 6,000) per stream (so the change falls
   anywhere within one of our windows, not only on a boundary): the share of streams that alarm
   after the drop and the median delay in records (first alarming check after the change,
   minus the change point).
2. **Baseline monitors** ("regressed against the previous 7 days"): each stream has its own
   baseline sample of 5,000 records at mean 0.85; the stream has mean 0.85, dropping (at the
   same random change points) by 0.05 (to 0.80) or 0.10 (to 0.75). *ours*: ``BaselineMonitor`` (alpha split between
   the current window's CS and the baseline's empirical Bernstein bound, min_effect 0);
   *repeated Welch*: a one-sided Welch test at p < 0.05 of the last 100 records (or of the
   current window) against the baseline, at every check.
3. **Release comparisons**: ``mean_difference`` + ``verdict`` (Welch or bootstrap, bins given as
   the rollups store them) for scores, ``rate_difference`` for pass rates, n = 500 per side:
   the share of seeds judged "regressed" for A/A pairs and for A/B pairs with a drop of 0.05.

The vectorised rules are checked against the monitor objects on the first streams (same first
alarm), so the figures are those of the library code.

4. **A long life** (``--life``, session 11; see ``_monitor_life.py``): records to ALERT for a
   0.05 drop after a day, a week and a month of life, and false alarms over a 30-day life, for
   the old schedule alpha/(k(k+1)) with fixed hourly windows against the log schedule with
   fixed windows and with windows that grow until they can see the drop.

Run:  python bench/monitor_sim.py [--quick] [--life] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, md_table, print_machine  # noqa: E402

from tracescore.monitor.confseq import (  # noqa: E402
    ALERT,
    BaselineMonitor,
    ThresholdMonitor,
)
from tracescore.stats import (  # noqa: E402
    REGRESSED,
    Moments,
    mean_difference,
    rate_difference,
    verdict,
)
from tracescore.stats.confseq import (  # noqa: E402
    eb_confidence_sequence,
    empirical_bernstein_bound,
    mixture_radius,
    mixture_rho,
    window_alpha,
)

ALPHA = 0.05
RECORDS = 10_000
CHECK = 50
CHANGE_AT = 5_000
WINDOW = 1_000
MIN_N = 30
CONCENTRATION = 10.0
THRESHOLD = 0.80
HEALTHY = 0.85
BASELINE_N = 5_000


def beta_stream(rng: np.random.Generator, streams: int, before: float, after: float | None,
                records: int = RECORDS) -> tuple[np.ndarray, np.ndarray]:
    """Scores (streams x records) and each stream's change point (records before the change).

    Change points are uniform over [CHANGE_AT, CHANGE_AT + WINDOW), so they fall anywhere in
    a window of our rule, not only on its boundary (which would flatter windowed rules).
    """
    def draw(mean: float) -> np.ndarray:
        return rng.beta(mean * CONCENTRATION, (1 - mean) * CONCENTRATION, (streams, records))

    change = rng.integers(CHANGE_AT, CHANGE_AT + WINDOW, streams)
    if after is None:
        return draw(before), change
    cols = np.arange(records)
    return np.where(cols[None, :] < change[:, None], draw(before), draw(after)), change


def check_points(records: int = RECORDS) -> np.ndarray:
    return np.arange(CHECK, records + 1, CHECK)  # records seen at each check


def windows(records: int, window: int) -> list[tuple[int, int, int]]:
    return [(k + 1, s, min(s + window, records)) for k, s in enumerate(range(0, records, window))]


# --- threshold rules: a (streams x checks) matrix of "in alarm at this check" -----------------

def ours_threshold(x: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """ThresholdMonitor's rule ("below"): the window's PrPl-EB upper bound < threshold."""
    alarm = np.zeros((x.shape[0], x.shape[1] // CHECK), dtype=bool)
    for k, s, e in windows(x.shape[1], window):
        _, hi = eb_confidence_sequence(x[:, s:e], window_alpha(ALPHA, k))
        pos = np.arange(CHECK, e - s + 1, CHECK)  # windows start on a check (multiples of 50)
        alarm[:, (s + pos) // CHECK - 1] = (hi[:, pos - 1] < THRESHOLD) & (pos >= MIN_N)
    return alarm


def mixture_threshold(x: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """The same windows with the normal-mixture (sums only) boundary."""
    alarm = np.zeros((x.shape[0], x.shape[1] // CHECK), dtype=bool)
    for k, s, e in windows(x.shape[1], window):
        a = window_alpha(ALPHA, k)
        rho = mixture_rho(window, a)
        pos = np.arange(CHECK, e - s + 1, CHECK)
        means = np.cumsum(x[:, s:e], axis=1)[:, pos - 1] / pos
        radius = np.array([mixture_radius(int(n), a, rho) for n in pos])
        alarm[:, (s + pos) // CHECK - 1] = (means + radius < THRESHOLD) & (pos >= MIN_N)
    return alarm


def rolling_means(x: np.ndarray, last: int) -> np.ndarray:
    c = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x, axis=1)], axis=1)
    t = check_points(x.shape[1])
    start = np.maximum(t - last, 0)
    return (c[:, t] - c[:, start]) / (t - start)


def langfuse_threshold(x: np.ndarray, last: int) -> np.ndarray:
    """A Langfuse-style alert: the mean of the last `last` records below the threshold."""
    return rolling_means(x, last) < THRESHOLD


def repeated_t_threshold(x: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """One-sided 95 % t upper bound of the current window below the threshold, every check."""
    alarm = np.zeros((x.shape[0], x.shape[1] // CHECK), dtype=bool)
    for _, s, e in windows(x.shape[1], window):
        pos = np.arange(CHECK, e - s + 1, CHECK)
        c1 = np.cumsum(x[:, s:e], axis=1)[:, pos - 1]
        c2 = np.cumsum(x[:, s:e] ** 2, axis=1)[:, pos - 1]
        mean = c1 / pos
        var = np.maximum(c2 - c1 * c1 / pos, 0) / (pos - 1)
        upper = mean + sps.t.ppf(0.95, pos - 1) * np.sqrt(var / pos)
        alarm[:, (s + pos) // CHECK - 1] = upper < THRESHOLD
    return alarm


# --- baseline rules --------------------------------------------------------------------------

def baselines(rng: np.random.Generator, streams: int) -> list[Moments]:
    b, _ = beta_stream(rng, streams, HEALTHY, None, records=BASELINE_N)
    return [Moments(BASELINE_N, float(s), float(ss))
            for s, ss in zip(b.sum(axis=1), (b * b).sum(axis=1))]


def ours_baseline(x: np.ndarray, base: list[Moments], window: int = WINDOW) -> np.ndarray:
    """BaselineMonitor's rule ("below", min_effect 0)."""
    alarm = np.zeros((x.shape[0], x.shape[1] // CHECK), dtype=bool)
    for k, s, e in windows(x.shape[1], window):
        a = window_alpha(ALPHA, k)
        _, hi = eb_confidence_sequence(x[:, s:e], a / 2)
        bound = np.array([empirical_bernstein_bound(m, a / 2, "below") for m in base])
        pos = np.arange(CHECK, e - s + 1, CHECK)
        alarm[:, (s + pos) // CHECK - 1] = (hi[:, pos - 1] < bound[:, None]) & (pos >= MIN_N)
    return alarm


def _welch_lower_p(mean: np.ndarray, var: np.ndarray, n: np.ndarray | int,
                   base: list[Moments]) -> np.ndarray:
    bm = np.array([m.mean for m in base], dtype=float)[:, None]
    bv = np.array([m.var for m in base], dtype=float)[:, None]
    a, b = var / n, bv / BASELINE_N
    tstat = (mean - bm) / np.sqrt(a + b)
    df = (a + b) ** 2 / (a * a / (np.asarray(n) - 1) + b * b / (BASELINE_N - 1))
    return sps.t.cdf(tstat, df)  # one-sided: current lower than baseline


def repeated_welch_last(x: np.ndarray, base: list[Moments], last: int = 100) -> np.ndarray:
    c1 = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x, axis=1)], axis=1)
    c2 = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x * x, axis=1)], axis=1)
    t = check_points(x.shape[1])
    start = np.maximum(t - last, 0)
    n = t - start
    s1, s2 = c1[:, t] - c1[:, start], c2[:, t] - c2[:, start]
    mean = s1 / n
    var = np.maximum(s2 - s1 * s1 / n, 0) / (n - 1)
    return _welch_lower_p(mean, var, n, base) < 0.05


def repeated_welch_window(x: np.ndarray, base: list[Moments], window: int = WINDOW) -> np.ndarray:
    alarm = np.zeros((x.shape[0], x.shape[1] // CHECK), dtype=bool)
    for _, s, e in windows(x.shape[1], window):
        pos = np.arange(CHECK, e - s + 1, CHECK)
        c1 = np.cumsum(x[:, s:e], axis=1)[:, pos - 1]
        c2 = np.cumsum(x[:, s:e] ** 2, axis=1)[:, pos - 1]
        var = np.maximum(c2 - c1 * c1 / pos, 0) / (pos - 1)
        alarm[:, (s + pos) // CHECK - 1] = _welch_lower_p(c1 / pos, var, pos, base) < 0.05
    return alarm


# --- summaries -------------------------------------------------------------------------------

def any_alarm(alarm: np.ndarray) -> float:
    return float(np.mean(alarm.any(axis=1)))


def delays(alarm: np.ndarray, change: np.ndarray) -> np.ndarray:
    """Records from each stream's change to its first alarming check after it (inf if none)."""
    t = check_points(alarm.shape[1] * CHECK)
    after = alarm & (t[None, :] > change[:, None])
    first = after.argmax(axis=1)
    d = (t[first] - change).astype(float)
    d[~after.any(axis=1)] = np.inf
    return d


def median_delay(d: np.ndarray) -> float:
    return float(np.median(d))  # inf when fewer than half the streams detect


def fmt_delay(v: float) -> str:
    return "not found" if math.isinf(v) else f"{v:,.0f}"


def first_alarm(alarm: np.ndarray) -> list[int]:
    t = check_points(alarm.shape[1] * CHECK)
    return [int(t[row.argmax()]) if row.any() else -1 for row in alarm]


def verify_against_objects(x: np.ndarray, vec_alarm: np.ndarray, base: list[Moments] | None,
                           streams: int) -> None:
    """The vectorised rule and the monitor objects agree on each stream's first alarm."""
    expected = first_alarm(vec_alarm[:streams])
    for i in range(streams):
        mon: ThresholdMonitor | BaselineMonitor
        if base is None:
            mon = ThresholdMonitor(THRESHOLD, "below", ALPHA, window=WINDOW, min_n=MIN_N)
        else:
            mon = BaselineMonitor(base[i], "below", ALPHA, window=WINDOW, min_n=MIN_N)
        got = -1
        for t in range(CHECK, x.shape[1] + 1, CHECK):
            mon.update(x[i, t - CHECK:t])
            if mon.status().state == ALERT:
                got = t
                break
        if got != expected[i]:
            raise SystemExit(f"vectorised rule disagrees with the monitor object on stream {i}:"
                             f" {expected[i]} vs {got}")


def run_scenarios(rules: dict[str, Any], scen: dict[str, tuple[float, float | None]],
                  streams: int, seed: int, *, baseline: bool) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {r: {} for r in rules}
    for j, (sname, (before, after)) in enumerate(scen.items()):
        rng = np.random.default_rng(seed + j)
        base = baselines(rng, streams) if baseline else None
        x, change = beta_stream(rng, streams, before, after)
        for rname, rule in rules.items():
            alarm = rule(x, base) if baseline else rule(x)
            if rname.startswith("ours: "):
                verify_against_objects(x, alarm, base, min(20, streams))
            if after is None:
                table[rname][sname] = {"any_alarm": any_alarm(alarm)}
            else:
                d = delays(alarm, change)
                table[rname][sname] = {"detected": float(np.mean(np.isfinite(d))),
                                       "median_delay": median_delay(d),
                                       "alarm_before_change": float(np.mean(
                                           (alarm & (check_points()[None, :] <= change[:, None]))
                                           .any(axis=1)))}
    return table


def summary_rows(table: dict[str, dict[str, Any]],
                 scen: dict[str, tuple[float, float | None]]) -> list[list[str]]:
    rows = []
    for rname, v in table.items():
        row = [rname]
        for sname, (_, after) in scen.items():
            r = v[sname]
            if after is None:
                row.append(f"{100 * r['any_alarm']:.1f} %")
            else:
                row += [f"{100 * r['detected']:.0f} %", fmt_delay(r["median_delay"])]
        rows.append(row)
    return rows


# --- release comparisons ---------------------------------------------------------------------

def bins_of(xs: np.ndarray) -> list[tuple[float, float]]:
    counts = np.bincount(np.clip((xs * 100).astype(int), 0, 99), minlength=100)
    return [((i + 0.5) / 100, float(c)) for i, c in enumerate(counts) if c]


def release_scores(seeds: int, cur: float, base: float, seed: int, n: int = 500,
                   binary: bool = False) -> dict[str, Any]:
    """Verdicts on score means; binary=True draws 0/1 scores (skewed: the bootstrap's case)."""
    rng = np.random.default_rng(seed)
    if binary:
        a = (rng.random((seeds, n)) < cur).astype(float)
        b = (rng.random((seeds, n)) < base).astype(float)
    else:
        a = rng.beta(cur * CONCENTRATION, (1 - cur) * CONCENTRATION, (seeds, n))
        b = rng.beta(base * CONCENTRATION, (1 - base) * CONCENTRATION, (seeds, n))
    regressed, methods = 0, set()
    for i in range(seeds):
        d = mean_difference(Moments.from_values(a[i]), Moments.from_values(b[i]),
                            bins_current=bins_of(a[i]), bins_baseline=bins_of(b[i]), seed=i)
        methods.add(d.method)
        regressed += verdict(d, n_current=n, n_baseline=n, higher_is_better=True,
                             p_adjusted=d.p_value) == REGRESSED
    return {"regressed": regressed / seeds, "methods": sorted(methods)}


def release_rates(seeds: int, cur: float, base: float, seed: int, n: int = 500) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    kc, kb = rng.binomial(n, cur, seeds), rng.binomial(n, base, seeds)
    regressed, methods = 0, set()
    for x, y in zip(kc, kb):
        d = rate_difference(int(x), n, int(y), n)
        methods.add(d.method)
        regressed += verdict(d, n_current=n, n_baseline=n, higher_is_better=True,
                             p_adjusted=d.p_value) == REGRESSED
    se = math.sqrt(cur * (1 - cur) / n + base * (1 - base) / n)
    power = float(sps.norm.cdf((base - cur) / se - sps.norm.ppf(0.975))) if cur != base else None
    return {"regressed": regressed / seeds, "methods": sorted(methods), "power_z": power}


# --- main ------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200 streams, 300 seeds (< 60 s)")
    ap.add_argument("--streams", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--life", action="store_true",
                    help="only the long-life table (schedules and growing windows)")
    args = ap.parse_args()
    if args.life:
        import _monitor_life as life

        started = time.perf_counter()
        print_machine(machine_info())
        res = life.run(args.quick, args.streams)
        print("\n" + life.tables(res))
        print(f"\nelapsed {time.perf_counter() - started:.1f} s")
        if args.json:
            args.json.write_text(json.dumps(res, indent=2, default=str))
        return
    streams = args.streams or (200 if args.quick else 1000)
    seeds = 300 if args.quick else 1000
    started = time.perf_counter()
    info = machine_info()
    print_machine(info)
    print(f"\n{streams} streams x {RECORDS:,} records, checked every {CHECK}; Beta scores "
          f"(a+b = {CONCENTRATION:g}); threshold {THRESHOLD}, healthy mean {HEALTHY}; "
          f"alpha {ALPHA}; windows of {WINDOW:,}; each stream changes at a uniform record in "
          f"[{CHANGE_AT:,}, {CHANGE_AT + WINDOW:,})\n")
    results: dict[str, Any] = {"machine": info, "streams": streams, "seeds": seeds}

    # 1. threshold monitors
    rules = {
        "ours: PrPl-EB CS, alpha/(k(k+1)) per window": ours_threshold,
        "ours, sums only: normal-mixture CS": mixture_threshold,
        "Langfuse-style: mean of last 50 < 0.80": lambda x: langfuse_threshold(x, 50),
        "Langfuse-style: mean of last 100 < 0.80": lambda x: langfuse_threshold(x, 100),
        "repeated 95 % t bound of the window": repeated_t_threshold,
    }
    scen: dict[str, tuple[float, float | None]] = {
        "no change, mean 0.85": (HEALTHY, None),
        "no change, mean 0.80": (THRESHOLD, None),  # the worst case of "not below 0.80"
        "to 0.75": (HEALTHY, 0.75),
        "to 0.70": (HEALTHY, 0.70),
    }
    table = run_scenarios(rules, scen, streams, 100, baseline=False)
    print("### Threshold monitor \"mean below 0.80\"\n")
    print(md_table(["rule", "any false alarm (mean 0.85)", "any false alarm (mean 0.80)",
                    "found (0.85 -> 0.75)", "median delay", "found (0.85 -> 0.70)",
                    "median delay"], summary_rows(table, scen)))
    results["threshold"] = table

    # 2. baseline monitors
    brules = {
        "ours: BaselineMonitor (CS vs EB bound)": ours_baseline,
        "repeated Welch p<0.05, last 100": repeated_welch_last,
        "repeated Welch p<0.05, current window": repeated_welch_window,
    }
    bscen: dict[str, tuple[float, float | None]] = {
        "no change": (HEALTHY, None),
        "drop 0.05": (HEALTHY, HEALTHY - 0.05),
        "drop 0.10": (HEALTHY, HEALTHY - 0.10),
    }
    btable = run_scenarios(brules, bscen, streams, 200, baseline=True)
    print("\n### Baseline monitor: a 7-day baseline of 5,000 records at mean 0.85\n")
    print(md_table(["rule", "any false alarm (no change)", "found (drop 0.05 -> 0.80)",
                    "median delay", "found (drop 0.10 -> 0.75)", "median delay"],
                   summary_rows(btable, bscen)))
    results["baseline"] = btable

    # window-size sensitivity of our threshold rule (full run only)
    if not args.quick:
        wrules = {f"{w:,}": (lambda x, w=w: ours_threshold(x, w)) for w in (500, 1000, 2000)}
        wtable = run_scenarios(wrules, scen, streams, 300, baseline=False)
        print("\n### Our threshold rule by window size (records)\n")
        print(md_table(["window", "any false alarm (mean 0.85)", "any false alarm (mean 0.80)",
                        "found (0.85 -> 0.75)", "median delay", "found (0.85 -> 0.70)",
                        "median delay"], summary_rows(wtable, scen)))
        results["window_sensitivity"] = wtable

    # 3. release comparisons
    rel = {
        "scores A/A (Beta, mean 0.80)": release_scores(seeds, 0.80, 0.80, 400),
        "scores A/B (0.80 -> 0.75)": release_scores(seeds, 0.75, 0.80, 401),
        "0/1 scores as a mean, A/A (0.97)": release_scores(seeds, 0.97, 0.97, 405, binary=True),
        "0/1 scores as a mean, A/B (0.97 -> 0.92)": release_scores(seeds, 0.92, 0.97, 406,
                                                                   binary=True),
        "pass rate A/A (0.80)": release_rates(seeds, 0.80, 0.80, 402),
        "pass rate A/B (0.95 -> 0.90)": release_rates(seeds, 0.90, 0.95, 403),
        "pass rate A/B (0.80 -> 0.75)": release_rates(seeds, 0.75, 0.80, 404),
    }
    rows = [[k, f"{100 * v['regressed']:.1f} %", ", ".join(v["methods"]),
             "" if v.get("power_z") is None else f"{100 * v['power_z']:.0f} %"]
            for k, v in rel.items()]
    print(f"\n### Release comparisons: n = 500 per side, {seeds} seeds\n")
    print(md_table(["pair", "judged \"regressed\"", "method", "z-test power (theory)"], rows))
    results["releases"] = rel
    elapsed = time.perf_counter() - started
    print(f"\nelapsed {elapsed:.1f} s")
    results["elapsed_s"] = elapsed
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
