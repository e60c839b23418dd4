"""What each metric declares (direction, threshold, yes/no, score names), for the readers.

The writing process stores its metrics' declarations in the ``metrics`` table; a reader in
another process (the CLI) trusts those first, then its own registry (built-in metrics).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

__all__ = ["MetricInfo", "declared_segment_keys", "known_scores"]


class MetricInfo:
    """Direction and score names of metrics, from the registry when it knows them."""

    def __init__(self, conn: sqlite3.Connection | None = None) -> None:
        self._cache: dict[str, Any] = {}
        # What the writing process declared beats what this process's registry knows.
        self._declared: dict[str, tuple[bool | None, tuple[str, ...]]] = {}
        self._thresholds: dict[str, float | None] = {}
        self._binary: dict[str, bool] = {}
        if conn is not None:
            try:
                for metric, hib, names, threshold in conn.execute(
                    "SELECT metric, higher_is_better, score_names, threshold FROM metrics"
                ):
                    self._declared[metric] = (
                        None if hib is None else bool(hib), tuple(json.loads(names or "[]"))
                    )
                    self._thresholds[metric] = threshold
            except sqlite3.Error:  # a database written before the metrics table existed
                pass
            try:
                for metric, binary in conn.execute(
                    "SELECT metric, is_binary FROM metrics WHERE is_binary IS NOT NULL"
                ):
                    self._binary[metric] = bool(binary)
            except sqlite3.Error:  # written before metrics declared binarity
                pass

    def _get(self, metric: str) -> Any:
        if metric not in self._cache:
            try:
                from ..metrics import registry

                self._cache[metric] = registry.get(metric)
            except Exception:  # unknown here (a custom metric of another process), or broken
                self._cache[metric] = None
        return self._cache[metric]

    def higher_is_better(self, metric: str) -> bool | None:
        if metric in self._declared:
            return self._declared[metric][0]
        m = self._get(metric)
        if m is None:
            return True
        value = getattr(m, "higher_is_better", True)
        return None if value is None else bool(value)

    def threshold(self, metric: str) -> float | None:
        if metric in self._thresholds:
            return self._thresholds[metric]
        m = self._get(metric)
        value = getattr(m, "threshold", None) if m is not None else None
        return float(value) if isinstance(value, (int, float)) else None

    def binary(self, metric: str, zero_one: bool, n: int) -> bool:
        """Yes/no metric: as declared by the writer, else by this registry, else when every
        value is 0 or 1 (``zero_one``: Σx² = Σx) and there are a few values (so one 0 is not
        taken for a check)."""
        if metric in self._binary:
            return self._binary[metric]
        m = self._get(metric)
        if m is not None:
            return bool(getattr(m, "binary", False))
        return n >= 5 and zero_one

    def names(self, metric: str) -> tuple[str, ...]:
        if self._declared.get(metric, (None, ()))[1]:
            return self._declared[metric][1]
        m = self._get(metric)
        try:
            return tuple(m.names()) if m is not None else (metric,)
        except Exception:
            return (metric,)



def known_scores(conn: Any, info: MetricInfo | None = None) -> dict[str, bool | None]:
    """Every score name the database knows (declared by a metric, or seen in the rollups),
    with whether higher is better (None: the metric declares no direction)."""
    info = MetricInfo(conn) if info is None else info
    known: dict[str, bool | None] = {}
    try:
        for metric, names in conn.execute("SELECT metric, score_names FROM metrics"):
            for name in json.loads(names or "[]") or [metric]:
                known[name] = info.higher_is_better(metric)
    except Exception:  # a database from before the metrics table
        pass
    for (name, metric) in conn.execute("SELECT DISTINCT name, metric FROM hourly_scores"):
        known.setdefault(name, info.higher_is_better(metric or name))
    return known


def declared_segment_keys(conn: Any) -> list[str]:
    """The ``metadata`` keys the app declared as segments (``meta.segment_keys``); [] when
    none or before that key existed."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'segment_keys'").fetchone()
        if row and row[0]:
            return [str(k) for k in json.loads(row[0])]
    except Exception:
        pass
    return []
