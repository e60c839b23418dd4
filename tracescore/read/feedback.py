"""Users' feedback (``ts.add_feedback``) as the reports show it: a summary per feedback name
for ``report`` and the entries of one trace for ``show``.

Feedback is about a trace (``feedback.trace_id``), not a record. A report's window is the
feedback's own ``created_at``; a ``--where`` segment keeps the feedback on traces with a
record in that segment. Positive / negative follow ``tracescore calibrate``: a value >= 0.5
(or, without a value, a label such as "good" / "bad"). Blocking I/O; no formatting here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..store.compat import has_table

if TYPE_CHECKING:  # the data classes load with the report, not with calibrate
    from .model import FeedbackSummary

__all__ = ["NEGATIVE_LABELS", "POSITIVE_LABELS", "feedback_for_trace", "feedback_summary",
           "polarity"]

#: Feedback labels read as positive / negative when the feedback has no value.
POSITIVE_LABELS = frozenset({"good", "correct", "right", "helpful", "up", "thumbs_up",
                             "positive", "pass", "yes", "true", "1", "accept", "accepted"})
NEGATIVE_LABELS = frozenset({"bad", "incorrect", "wrong", "unhelpful", "down", "thumbs_down",
                             "negative", "fail", "no", "false", "0", "reject", "rejected",
                             "hallucination", "hallucinated"})

#: Labels listed per feedback name (the most frequent).
TOP_LABELS = 5


def polarity(value: float | None, label: str | None) -> bool | None:
    """True positive, False negative, None neither (a label that says neither)."""
    if value is not None:
        return value >= 0.5
    low = (label or "").strip().lower()
    if low in POSITIVE_LABELS:
        return True
    if low in NEGATIVE_LABELS:
        return False
    return None


def _num(x: float) -> float:
    """±inf as the largest finite floats (PostgreSQL's double precision takes no inf)."""
    return max(min(x, 1.7976931348623157e308), -1.7976931348623157e308)


def feedback_summary(conn: Any, since: float | None = None, until: float | None = None,
                     seg_ids: set[int] | None = None) -> list[FeedbackSummary]:
    """Per feedback name: entries, traces, mean value, positives / negatives with the
    positive share's Wilson interval, labels; empty without a ``feedback`` table."""
    from ..stats import rate_ci
    from .model import FeedbackSummary

    if not has_table(conn, "feedback"):
        return []
    lo = _num(-math.inf if since is None else since)
    hi = _num(math.inf if until is None else until)
    seg_sql, args = "", [lo, hi]
    if seg_ids is not None:
        if not seg_ids:
            return []
        ids = sorted(seg_ids)
        seg_sql = (" AND trace_id IN (SELECT trace_id FROM records WHERE seg_id IN ("
                   + ",".join("?" * len(ids)) + "))")
        args += ids
    scope = " FROM feedback WHERE created_at >= ? AND created_at < ?" + seg_sql
    totals = {
        name: (int(n), int(traces), int(valued), mean, int(comments), last)
        for name, n, traces, valued, mean, comments, last in conn.execute(
            "SELECT name, count(*), count(DISTINCT trace_id), count(value), avg(value),"
            " count(comment), max(created_at)" + scope + " GROUP BY name", args).fetchall()
    }
    pos: dict[str, int] = {}
    neg: dict[str, int] = {}
    labels: dict[str, dict[str, int]] = {}
    # grouped by (name, side of 0.5, label): a handful of rows whatever the feedback count
    for name, side, label, n in conn.execute(
        "SELECT name, CASE WHEN value IS NULL THEN NULL WHEN value >= 0.5 THEN 1 ELSE 0 END,"
        " label, count(*)" + scope + " GROUP BY 1, 2, 3", args).fetchall():
        p = polarity(None if side is None else float(side), label)
        if p is True:
            pos[name] = pos.get(name, 0) + int(n)
        elif p is False:
            neg[name] = neg.get(name, 0) + int(n)
        if label is not None:
            per = labels.setdefault(name, {})
            per[label] = per.get(label, 0) + int(n)
    out = []
    for name in sorted(totals):
        n, traces, valued, mean, comments, last = totals[name]
        k, m = pos.get(name, 0), neg.get(name, 0)
        top = sorted(labels.get(name, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_LABELS]
        out.append(FeedbackSummary(
            name=name, count=n, traces=traces, valued=valued,
            mean=None if mean is None else float(mean), positive=k, negative=m,
            estimate=rate_ci(k, k + m), comments=comments,
            last_at=None if last is None else float(last), labels=tuple(top)))
    return out


def feedback_for_trace(conn: Any, trace_id: str) -> list[dict[str, Any]]:
    """A trace's feedback entries, oldest first (empty without a ``feedback`` table)."""
    if not trace_id or not has_table(conn, "feedback"):
        return []
    return [
        {"name": name, "value": value, "label": label, "comment": comment,
         "created_at": created}
        for name, value, label, comment, created in conn.execute(
            "SELECT name, value, label, comment, created_at FROM feedback WHERE trace_id = ?"
            " ORDER BY created_at, feedback_id", (trace_id,)).fetchall()
    ]
