"""Helpers shared by the benchmark scripts (machine facts, tables, percentiles, thread CPU)."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("tracescore", "langchain-core", "opentelemetry-api", "opentelemetry-sdk",
            "sqlite-utils", "rouge-score", "nltk", "pydantic")


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    versions = {}
    for p in PACKAGES:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = "missing"
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        rev = rev + ("+dirty" if dirty else "")
    except Exception:
        rev = "?"
    import sqlite3

    return {
        "nproc": affinity,
        "cpu": cpu,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "switch_interval_ms": sys.getswitchinterval() * 1000,
        "git": rev,
        "packages": versions,
        "loadavg_at_start": load_average(),
    }


def load_average() -> list[float]:
    """1/5/15-minute load averages: other processes on a 2-core machine skew every timing."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def print_machine(info: dict[str, Any]) -> None:
    pk = ", ".join(f"{k} {v}" for k, v in info["packages"].items())
    print(f"machine: {info['nproc']} cores ({info['cpu'] or 'cpu ?'}), "
          f"{info['implementation']} {info['python']}, SQLite {info['sqlite']}, "
          f"GIL switch interval {info['switch_interval_ms']:g} ms, repo {info['git']}")
    print(f"load average at start (1/5/15 min): {info['loadavg_at_start']}")
    print(f"packages: {pk}")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [[_fmt(c) for c in r] for r in rows]
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _fmt(c: Any) -> str:
    if isinstance(c, float):
        if c != c:
            return "n/a"
        if abs(c) >= 100:
            return f"{c:,.0f}"
        if abs(c) >= 10:
            return f"{c:.1f}"
        return f"{c:.2f}"
    if isinstance(c, int) and not isinstance(c, bool):
        return f"{c:,}"
    return str(c)


def pct(values: Sequence[float], q: float) -> float:
    """Percentile ``q`` in [0, 100] (nearest-rank on a sorted copy)."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def trees_row(label: str, vals: dict[str, list[float]], first: str) -> str:
    """One row of a side-by-side table of trees: per tree the median (min–max) of its runs,
    then each other tree's median ÷ ``first``'s."""
    med = {n: statistics.median(v) for n, v in vals.items()}
    row = f"| {label} | " + " | ".join(
        f"{med[n]:,.1f} ({min(v):,.0f}–{max(v):,.0f})" for n, v in vals.items())
    row += "".join(f" | {med[n] / med[first]:.2f}×" if med[first] else " | –"
                   for n in vals if n != first)
    return row + " |"


def thread_cpu_s(t: threading.Thread | None) -> float:
    """CPU seconds a live thread has used since it started (Linux), 0.0 if unknown."""
    if t is None or t.ident is None or not t.is_alive():
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    except (AttributeError, OSError, ValueError):
        return 0.0


def background_threads(ts: Any) -> dict[str, list[threading.Thread]]:
    """The background threads of one Tracescore instance, by role (best effort, getattr-based
    so a refactor of the internals degrades the report instead of breaking the benchmark)."""
    out: dict[str, list[threading.Thread]] = {}

    def add(role: str, t: Any) -> None:
        if isinstance(t, threading.Thread):
            out.setdefault(role, []).append(t)

    q = getattr(ts, "queue", None)
    add("writer", getattr(q, "_thread", None))
    w = getattr(ts, "worker", None)
    add("scorer loop", getattr(w, "_thread", None))
    ex = getattr(w, "_executor", None)
    for t in list(getattr(ex, "_threads", ()) or ()):
        add("metric pool", t)
    att = getattr(ts, "attacher", None)
    add("hold reaper", getattr(att, "_reaper", None))
    inner = getattr(att, "inner", None)
    bp = getattr(inner, "_batch_processor", None)
    add("span export", getattr(bp, "_worker_thread", None) or getattr(inner, "worker_thread", None))
    return out


def background_cpu(ts: Any) -> dict[str, float]:
    return {role: sum(thread_cpu_s(t) for t in ts_) for role, ts_ in background_threads(ts).items()}
