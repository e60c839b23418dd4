"""One record (or a trace's records, or a session's) in full, as plain data: the rows of
``tracescore show`` and of the HTML report's worst records. Reads raw rows by primary key (a
trace's records and a trace-id prefix are ranges of it on SQLite:
:func:`tracescore.store.compat.trace_records`) or, on PostgreSQL, by the trace id index.
Blocking I/O; formatting is :mod:`tracescore.reports.show`'s.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from ..store.compat import trace_prefix, trace_records

__all__ = ["find_records", "record_details", "score_details", "session_records",
           "session_state"]


def find_records(conn: sqlite3.Connection, ident: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Records for a trace id, a record id (``trace-span``) or a unique trace-id prefix.

    Returns ``(records, candidates)``: records found (oldest first), or no records and the
    trace ids a too-short prefix matches (empty when nothing matches).
    """
    ident = ident.strip().lower()
    if "-" in ident:
        rows = conn.execute("SELECT * FROM records WHERE record_id = ?", (ident,)).fetchall()
        return [dict(r) for r in rows], []
    if not ident or not re.fullmatch(r"[0-9a-f]+", ident):
        return [], []
    prefix, args = trace_prefix(conn, ident)  # a range, so an index serves the prefix search
    ids = [r[0] for r in conn.execute(
        f"SELECT DISTINCT trace_id FROM records WHERE {prefix} LIMIT 11", args)]
    if len(ids) != 1:
        return [], ids
    of_trace, args = trace_records(conn, ids[0])
    rows = conn.execute(
        f"SELECT * FROM records WHERE {of_trace} ORDER BY created_at, record_id", args
    ).fetchall()
    return [dict(r) for r in rows], []


def record_details(conn: sqlite3.Connection, row: dict[str, Any]) -> dict[str, Any]:
    """A record as plain data: decoded JSON columns, its scores, its unscored jobs and the
    feedback on its trace."""
    from .feedback import feedback_for_trace

    rec = dict(row)
    for key, default in (("contexts", "[]"), ("ground_truths", "[]"), ("metadata", "{}"),
                         ("tags", "[]"), ("sampled_metrics", "[]"), ("candidates", "[]")):
        try:
            rec[key] = json.loads(rec.get(key) or default)
        except (TypeError, ValueError):
            pass  # keep the raw text: show what is there rather than fail
    try:
        rec["agent"] = json.loads(rec.get("agent") or "null")
    except (TypeError, ValueError):
        rec["agent"] = None
    rec["sampled"] = bool(rec.get("sampled"))
    rec["content_captured"] = bool(rec.get("content_captured"))
    rec["scores"] = [
        {k: s[k] for k in ("name", "metric", "metric_version", "value", "label", "explanation",
                           "status", "error", "duration_ms", "created_at", "delivery")}
        for s in conn.execute(
            "SELECT * FROM scores WHERE rec = (SELECT seq FROM records WHERE record_id = ?)"
            " ORDER BY metric, score_id",
            (rec["record_id"],),
        )
    ]
    rec["jobs"] = [
        dict(j) for j in conn.execute(
            "SELECT metric, metric_version, status, attempts, reason FROM jobs"
            " WHERE rec = (SELECT seq FROM records WHERE record_id = ?) AND status != 'done'"
            " ORDER BY metric", (rec["record_id"],),
        )
    ]
    rec["feedback"] = feedback_for_trace(conn, rec.get("trace_id") or "")
    return rec


def session_records(conn: Any, key: str) -> list[dict[str, Any]]:
    """The records of session ``key`` (its turns and its own record), oldest first."""
    cur = conn.execute("SELECT * FROM records WHERE session_id = ? ORDER BY created_at,"
                       " record_id", (key,))
    return [dict(r) for r in cur.fetchall()]


def session_state(conn: Any, key: str) -> dict[str, Any] | None:
    """Session ``key``'s row of ``sessions`` (status, versions, closes, times); None without
    one, or before sessions existed (schema < 11 / 10)."""
    try:
        got = conn.execute("SELECT status, version, closed_version, closes, touched_at,"
                           " closed_at FROM sessions WHERE session_id = ?", (key,)).fetchone()
        return None if got is None else dict(got)
    except Exception:  # a database from before sessions: no state
        return None


def score_details(conn: Any, record_id: str) -> dict[str, Any]:
    """The details (decoded JSON; {} when unreadable) of each score of a record, by name."""
    details: dict[str, Any] = {}
    for name, raw in conn.execute("SELECT name, details FROM scores WHERE"
                                  " rec = (SELECT seq FROM records WHERE record_id = ?)",
                                  (record_id,)).fetchall():
        try:
            details[name] = json.loads(raw or "{}")
        except ValueError:
            details[name] = {}
    return details
