"""What ``tracescore label`` reads: the records still to label for a score and annotator, the
record a plan row without a record id stands for, a label plan's population, and which label
rows name records the database does not have.

``conn`` is a connection that takes ``?`` SQL (:func:`tracescore.store.rollup.qmark` of the
store the command writes labels to); ``store`` is that store where a trace lookup needs its
dialect (:func:`tracescore.store.compat.trace_records`). Blocking I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..store.compat import trace_records

#: The records scored under a name that this annotator has not labelled, newest first.
UNLABELLED = (
    "SELECT DISTINCT r.record_id, r.trace_id, r.created_at FROM scores s JOIN records r"
    " ON r.record_id = s.record_id WHERE s.name = ? AND NOT EXISTS (SELECT 1 FROM labels l"
    " WHERE l.record_id = r.record_id AND l.name = ? AND l.annotator = ?)"
    " ORDER BY r.created_at DESC, r.record_id DESC")
#: The record a plan row without a record id stands for (plans stored before record ids):
#: the trace's newest record scored under the name, as a label by trace id. ``{of_trace}``:
#: the trace's records (:func:`tracescore.store.compat.trace_records`).
RECORD_OF_TRACE = (
    "SELECT r.record_id FROM records r JOIN scores s ON s.rec = r.seq"
    " AND s.name = ? WHERE {of_trace} ORDER BY r.created_at DESC, r.record_id DESC"
    " LIMIT 1")
#: SQL true when record ``r`` has text to label (captured, not compact, not all redacted).
HAS_TEXT = (
    "(COALESCE(r.content_captured, 1) <> 0 AND COALESCE(r.text_kept, 1) <> 0"
    " AND (COALESCE(r.query, '') <> '' OR COALESCE(r.answer, '') <> ''"
    " OR COALESCE(r.contexts, '[]') NOT IN ('', '[]')))")


def unlabelled(conn: Any, name: str, annotator: str) -> list[tuple[str, str]]:
    """(record_id, trace_id) of the records scored under ``name`` that ``annotator`` has not
    labelled, newest first."""
    return [(r[0], r[1]) for r in conn.execute(UNLABELLED, (name, name, annotator))]


def record_of_trace(store: Any, conn: Any, name: str, trace_id: str) -> str | None:
    """The newest record of trace ``trace_id`` scored under ``name``; None without one."""
    of_trace, args = trace_records(store, trace_id, "r")
    found = conn.execute(RECORD_OF_TRACE.format(of_trace=of_trace), (name, *args)).fetchone()
    return None if found is None else str(found[0])


def plan_population(conn: Any, name: str) -> Iterable[tuple[Any, ...]]:
    """(record_id, trace_id, value, release, has_text) of every ok score of ``name``, newest
    first (a record scored twice comes twice: the caller keeps its first, the newest)."""
    return conn.execute(
        f"SELECT r.record_id, r.trace_id, s.value, g.release, {HAS_TEXT} FROM scores s"
        " JOIN records r ON r.record_id = s.record_id LEFT JOIN segments g"
        " ON g.seg_id = r.seg_id WHERE s.name = ? AND s.status = 'ok'"
        " AND s.value IS NOT NULL ORDER BY s.created_at DESC, s.score_id DESC", (name,))


def unknown_targets(store: Any, conn: Any, rows: Iterable[Mapping[str, Any]]) -> int:
    """How many of ``rows`` (label rows with ``record_id`` or ``trace_id``) name a trace (or
    a record) the database has no record of."""
    n = 0
    args: tuple[Any, ...]
    for r in rows:
        if r["record_id"] is not None:
            sql, args = "SELECT 1 FROM records WHERE record_id = ?", (r["record_id"],)
        else:
            of_trace, args = trace_records(store, r["trace_id"])
            sql = f"SELECT 1 FROM records WHERE {of_trace} LIMIT 1"
        n += conn.execute(sql, args).fetchone() is None
    return n
