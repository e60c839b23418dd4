"""The judged records the judge budget's proxy learns from (:mod:`tracescore.budget.combine`):
their π and the judge's score, newest first. Reads ``judge_decisions`` (schema version 10,
:mod:`.judge_budget`) and ``scores``; no table of its own.
"""

from __future__ import annotations

from typing import Any

from .rollup import qmark

__all__ = ["judged_samples"]


def judged_samples(store: Any, metric: str, score_name: str, since: float,
                   limit: int) -> list[tuple[str, float, float]]:
    """(record id, π, the judge's ok score) of the records of ``metric`` judged since
    ``since``, newest first, at most ``limit``."""
    rows = qmark(store).execute(
        "SELECT d.record_id, d.pi, s.value FROM judge_decisions d"
        " JOIN records r ON r.record_id = d.record_id"
        " JOIN scores s ON s.rec = r.seq AND s.name = ? AND s.status = 'ok'"
        " WHERE d.metric = ? AND d.selected = 1 AND d.pi > 0 AND d.created_at >= ?"
        " AND s.value IS NOT NULL ORDER BY d.created_at DESC LIMIT ?",
        (score_name, metric, since, int(limit))).fetchall()
    return [(str(r), float(p), float(v)) for r, p, v in rows]
