"""The intake spool's statements (:mod:`tracescore.intake.spool`): the received spans, their
resources and their traces, stored in the writer's one transaction per batch (the caller's).

Each function runs the same statements, in the same batches, as the spool did when it held
them (issue 35 moved the text, not the logic): on SQLite multi-row ``VALUES`` of
:data:`CHUNK` rows and ``executemany``; on PostgreSQL one fixed statement text per table that
takes its rows as arrays in binary (``unnest(%b::...[])``), so psycopg prepares it after a few
runs (issue 32: CPU per span). Rows are the spool's ``SpanRow`` (``trace_id``, ``span_id``,
``parent_id``, ``resource_id``, ``body``). Blocking I/O on the spool's writer thread.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHUNK", "autocheckpoint_off", "insert_postgres", "insert_sqlite"]

#: Rows per INSERT statement (7 parameters each: under SQLite's 32,766 and psycopg's 65,535).
CHUNK = 2000
_UPSERT_TRACE = (
    " ON CONFLICT (trace_id) DO UPDATE SET last_at = excluded.last_at, spans = "
    "intake_traces.spans + excluded.spans, late_spans = intake_traces.late_spans + CASE WHEN "
    "intake_traces.state = 'done' THEN excluded.spans ELSE 0 END, root_span_id = "
    "COALESCE(intake_traces.root_span_id, excluded.root_span_id), ready_at = "
    "COALESCE(intake_traces.ready_at, excluded.ready_at)")

Inserted = tuple[set[tuple[str, str]], dict[str, list[Any]], int]


def autocheckpoint_off(conn: Any) -> None:
    """SQLite: commits on ``conn`` no longer checkpoint the WAL (the intake's background
    checkpoints it, outside any transaction: :meth:`~.sqlite.Store.checkpoint`)."""
    conn.execute("PRAGMA wal_autocheckpoint=0")


def _traces(rows: dict[tuple[str, str], Any],
            inserted: set[tuple[str, str]]) -> dict[str, list[Any]]:
    traces: dict[str, list[Any]] = {}  # trace -> [spans, root]
    for key in inserted:
        r = rows[key]
        agg = traces.setdefault(r.trace_id, [0, None])
        agg[0] += 1
        if not r.parent_id and agg[1] is None:
            agg[1] = r.span_id
    return traces


def insert_sqlite(conn: Any, resources: dict[str, bytes], rows: dict[tuple[str, str], Any],
                  now: float, grace_s: float) -> Inserted:
    """Store ``resources`` and ``rows`` (keyed by (trace id, span id)) received at ``now``,
    and upsert their traces (ready ``grace_s`` after a root span): (the keys inserted — a
    retried span is not —, trace id → [spans inserted, root span id], spans inserted into
    traces already assembled)."""
    if resources:
        conn.cursor().executemany("INSERT INTO intake_resources(resource_id, body, "
                                  "created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                                  [(k, v, now) for k, v in resources.items()])
    inserted: set[tuple[str, str]] = set()
    items = list(rows.values())
    for i in range(0, len(items), CHUNK):
        chunk = items[i:i + CHUNK]
        sql = ("INSERT INTO intake_spans(trace_id, span_id, parent_id, resource_id, "
               "body, received_at) VALUES " + ",".join(["(?,?,?,?,?,?)"] * len(chunk))
               + " ON CONFLICT DO NOTHING RETURNING trace_id, span_id")
        args: list[Any] = []
        for r in chunk:
            args += (r.trace_id, r.span_id, r.parent_id, r.resource_id, r.body, now)
        inserted.update((a, b) for a, b in conn.execute(sql, args).fetchall())
    traces = _traces(rows, inserted)
    late = 0
    if traces:
        if len(traces) < 1000:
            late = sum(traces[t][0] for (t,) in conn.execute(
                "SELECT trace_id FROM intake_traces WHERE state = 'done' AND trace_id IN ("
                + ",".join("?" * len(traces)) + ")", list(traces)).fetchall())
        conn.cursor().executemany(
            "INSERT INTO intake_traces(trace_id, first_at, last_at, root_span_id, "
            "ready_at, spans) VALUES (?, ?, ?, ?, ?, ?)" + _UPSERT_TRACE,
            [(tid, now, now, root, now + grace_s if root else None, n)
             for tid, (n, root) in traces.items()])
    return inserted, traces, late


def insert_postgres(conn: Any, resources: dict[str, bytes], rows: dict[tuple[str, str], Any],
                    now: float, grace_s: float) -> Inserted:
    """:func:`insert_sqlite` on PostgreSQL: each statement takes its rows as arrays
    (``unnest``): one fixed query text (prepared by psycopg after a few runs) instead of a
    multi-row VALUES whose text (and placeholders, parsed by psycopg on every batch) changes
    with the batch size, and one round trip for the traces instead of one per trace; the
    arrays go in binary (``%b``: no text escaping of each element) (issue 32: CPU per span,
    two processes)."""
    if resources:
        conn.execute(
            "INSERT INTO intake_resources(resource_id, body, created_at) SELECT r, b, %s "
            "FROM unnest(%b::text[], %b::bytea[]) AS u(r, b) ON CONFLICT DO NOTHING",
            (now, list(resources), list(resources.values())))
    inserted: set[tuple[str, str]] = set()
    items = list(rows.values())
    for i in range(0, len(items), CHUNK * 10):
        chunk = items[i:i + CHUNK * 10]
        got = conn.execute(
            "INSERT INTO intake_spans(trace_id, span_id, parent_id, resource_id, body, "
            "received_at) SELECT t, s, p, r, b, %s FROM unnest(%b::text[], %b::text[], "
            "%b::text[], %b::text[], %b::bytea[]) AS u(t, s, p, r, b) "
            "ON CONFLICT DO NOTHING RETURNING trace_id, span_id",
            (now, [r.trace_id for r in chunk], [r.span_id for r in chunk],
             [r.parent_id for r in chunk], [r.resource_id for r in chunk],
             [r.body for r in chunk])).fetchall()
        inserted.update((a, b) for a, b in got)
    traces = _traces(rows, inserted)
    late = 0
    if traces:
        tids = sorted(traces)  # (one lock order for the fleet's processes)
        late = sum(traces[t][0] for (t,) in conn.execute(
            "SELECT trace_id FROM intake_traces WHERE state = 'done' AND "
            "trace_id = ANY(%b::text[])", (tids,)).fetchall())
        conn.execute(
            "INSERT INTO intake_traces(trace_id, first_at, last_at, root_span_id, "
            "ready_at, spans) SELECT t, %s, %s, r, CASE WHEN r IS NULL THEN NULL ELSE "
            "%s::float8 END, n FROM unnest(%b::text[], %b::text[], %b::bigint[]) AS "
            "u(t, r, n)" + _UPSERT_TRACE,
            (now, now, now + grace_s, tids, [traces[t][1] for t in tids],
             [traces[t][0] for t in tids]))
    return inserted, traces, late
