"""What ``tracescore calibrate`` reads: the metrics' declarations, the feedback of a name, the
score names scored, and the scores of a name on the traces with that feedback. Blocking I/O;
the agreement is computed by :mod:`tracescore.reports.calibration`.
"""

from __future__ import annotations

from typing import Any

from ..store.compat import has_table

__all__ = ["declared_metrics", "feedback_entries", "other_feedback", "scored_names",
           "scores_with_feedback"]


def declared_metrics(conn: Any) -> dict[str, tuple[str | None, bool | None, float | None]]:
    """metric → (kind, higher_is_better, threshold), as the writing process declared them."""
    out: dict[str, tuple[str | None, bool | None, float | None]] = {}
    if has_table(conn, "metrics"):
        for metric, kind, hib, thr in conn.execute(
                "SELECT metric, kind, higher_is_better, threshold FROM metrics"):
            out[metric] = (kind, None if hib is None else bool(hib), thr)
    return out


def feedback_entries(conn: Any, name: str) -> list[tuple[Any, Any, Any]]:
    """(trace_id, value, label) of every feedback named ``name``, oldest first."""
    return conn.execute(
        "SELECT trace_id, value, label FROM feedback WHERE name = ? "
        "ORDER BY created_at, feedback_id", (name,)).fetchall()


def other_feedback(conn: Any, name: str) -> dict[str, int]:
    """The other feedback names, each with the traces it is on."""
    return {n: c for n, c in conn.execute(
        "SELECT name, count(DISTINCT trace_id) FROM feedback WHERE name != ? "
        "GROUP BY name ORDER BY name", (name,))}


def scored_names(conn: Any) -> list[tuple[str, str]]:
    """(score name, metric) of every name with an ok score."""
    return [(n, m) for n, m in conn.execute(
        "SELECT DISTINCT name, coalesce(metric, name) FROM scores WHERE status = 'ok'")]


def scores_with_feedback(conn: Any, name: str, feedback: str) -> list[tuple[Any, Any, Any]]:
    """(trace_id, value, label) of the ok scores of ``name`` on the traces with feedback
    ``feedback``, by record id."""
    return conn.execute(
        "SELECT trace_id, value, label FROM scores WHERE name = ? AND status = 'ok' "
        "AND value IS NOT NULL AND trace_id IN (SELECT trace_id FROM feedback "
        "WHERE name = ?) ORDER BY record_id", (name, feedback)).fetchall()
