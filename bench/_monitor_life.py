"""Monitors over a long life (issue 29, part B; run by ``monitor_sim.py --life``).

A steady stream of 480 scored records an hour, hourly windows, "mean below 0.80" (a
continuous score, sd 0.11) and "rate below 0.85" (a yes/no score). Three designs:

- *quadratic, fixed*: the monitors before session 11 — window k at alpha / (k (k + 1)),
  every window one hour;
- *log, fixed*: window k at alpha ln 2 (1/ln(k+1) - 1/ln(k+2)) (``confseq.window_alpha_log``);
- *log, growing* (what ``tracescore check`` does now): the log schedule, and a window that
  holds fewer records than it needs to see a 0.05 drop (``sight.records_needed``, at the
  stream's spread) goes on into the next hour (up to 7 days) instead of closing.

Detection: after a day, a week and a month of healthy life the mean drops 0.05 below the
level (to 0.75; the rate to 0.80) at the start of a window; the records until the first ALERT
(median and 90th percentile over streams; "—" when fewer than half alert within 20,000
records) and the share of streams alerting within 24 h. False alarms: streams at exactly the
level (the worst case of "healthy") for a 30-day life; the share with any ALERT, which must
stay <= alpha = 0.05. Checked every record (the sequences are anytime-valid).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from tracescore.stats import sight
from tracescore.stats.confseq import eb_confidence_sequence, spend

RATE = 480  # records an hour
ALPHA = 0.05
GAP = 0.05
MAX_HOURS = 7 * 24
DESIGNS = {"quadratic, fixed": ("quadratic", False), "log, fixed": ("log", False),
           "log, growing": ("log", True)}
SCORES = {  # name: (level, healthy mean, variance)
    "score (sd 0.11)": (0.80, 0.85, 0.11 ** 2),
    "yes/no rate": (0.85, 0.90, 0.80 * 0.20),
}


def windows(design: str, var: float) -> Iterator[tuple[int, int, float]]:
    """(k, records, alpha_k) of the successive windows of a life under ``design``."""
    schedule, grow = DESIGNS[design]
    k = 1
    while True:
        a = spend(ALPHA, k, schedule)
        hours = 1
        if grow:
            need = sight.records_needed(GAP, a, var)
            hours = MAX_HOURS if need is None else min(MAX_HOURS, max(1, math.ceil(need / RATE)))
        yield k, hours * RATE, a
        k += 1


def _draw(rng: np.random.Generator, kind: str, mean: float, var: float,
          shape: tuple[int, int]) -> np.ndarray:
    if kind.startswith("yes/no"):
        return (rng.random(shape) < mean).astype(float)
    c = mean * (1 - mean) / var - 1
    return rng.beta(mean * c, (1 - mean) * c, shape)


def detection(design: str, kind: str, age_h: float, streams: int, seed: int,
              budget: int = 20_000) -> dict[str, Any]:
    level, _healthy, var = SCORES[kind]
    rng = np.random.default_rng(seed)
    it = windows(design, var)
    elapsed = 0.0
    k, n, a = next(it)
    while elapsed + n / RATE <= age_h:  # the healthy life before the drop
        elapsed += n / RATE
        k, n, a = next(it)
    first = np.full(streams, -1)
    seen = 0
    k0, n0 = k, n
    while seen < budget and (first < 0).any():
        x = _draw(rng, kind, level - GAP, var, (streams, n))
        _lo, hi = eb_confidence_sequence(x, a)
        alarm = hi < level
        idx = np.where(alarm.any(axis=1), alarm.argmax(axis=1), -1)
        new = (first < 0) & (idx >= 0)
        first[new] = seen + idx[new] + 1
        seen += n
        k, n, a = next(it)
    hit = first[first > 0]
    ranked = np.sort(np.where(first > 0, first, np.iinfo(np.int64).max))
    med, p90 = (float(ranked[int(q * (streams - 1))]) for q in (0.5, 0.9))
    med, p90 = (v if v < np.iinfo(np.int64).max else math.inf for v in (med, p90))
    return {"design": design, "score": kind, "age_h": age_h, "window_k": k0,
            "window_records": n0, "median": med, "p90": p90,
            "within_24h": float(np.mean((first > 0) & (first <= 24 * RATE))),
            "alerted": len(hit) / streams}


def false_alarms(design: str, kind: str, life_h: float, streams: int,
                 seed: int) -> dict[str, Any]:
    level, _healthy, var = SCORES[kind]
    rng = np.random.default_rng(seed)
    any_alarm = np.zeros(streams, dtype=bool)
    elapsed = 0.0
    windows_used = 0
    for _k, n, a in windows(design, var):
        if elapsed >= life_h:
            break
        x = _draw(rng, kind, level, var, (streams, n))
        _lo, hi = eb_confidence_sequence(x, a)
        any_alarm |= (hi < level).any(axis=1)
        elapsed += n / RATE
        windows_used += 1
    share = float(any_alarm.mean())
    return {"design": design, "score": kind, "life_h": life_h, "windows": windows_used,
            "false_alarm": share, "se": math.sqrt(max(share * (1 - share), 1e-12) / streams)}


def run(quick: bool, streams: int | None = None) -> dict[str, Any]:
    streams = streams or (200 if quick else 1000)
    ages = {"after a day": 24.0, "after a week": 168.0, "after a month": 720.0}
    det = [dict(detection(d, s, h, streams, seed=11 + i), age=name)
           for i, (d, s, (name, h)) in enumerate(
               (d, s, a) for s in SCORES for d in DESIGNS for a in ages.items())]
    # the shipped design over a month; the others over a week (the same records per day:
    # a month of 480 an hour is 345,600 a stream, so the fixed designs' month costs 4x more)
    life = 24.0 * (7 if quick else 30)
    fa = [false_alarms(d, s, life if d == "log, growing" else min(life, 168.0), streams,
                       seed=101 + i)
          for i, (s, d) in enumerate((s, d) for s in SCORES for d in DESIGNS)]
    return {"streams": streams, "detection": det, "false_alarms": fa, "life_h": life}


def _records(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:,.0f}"


def tables(res: dict[str, Any]) -> str:
    out = ["Records to ALERT after a drop of 0.05 below the level (480 records an hour, "
           f"hourly windows, {res['streams']} streams; median / 90th percentile; share "
           "alerting within 24 h)", "",
           "| score | design | age | window k (records) | median | p90 | within 24 h |",
           "|---|---|---|---|---:|---:|---:|"]
    for r in res["detection"]:
        out.append(f"| {r['score']} | {r['design']} | {r['age']} | {r['window_k']} "
                   f"({r['window_records']:,}) | {_records(r['median'])} | "
                   f"{_records(r['p90'])} | {r['within_24h']:.0%} |")
    out += ["", "False alarms over a life at exactly the level (any ALERT; must be <= 0.05)",
            "", "| score | design | life | windows | any ALERT | MC SE |",
            "|---|---|---:|---:|---:|---:|"]
    for r in res["false_alarms"]:
        out.append(f"| {r['score']} | {r['design']} | {r['life_h'] / 24:.0f} d | "
                   f"{r['windows']} | {r['false_alarm']:.3f} | {r['se']:.3f} |")
    return "\n".join(out)
