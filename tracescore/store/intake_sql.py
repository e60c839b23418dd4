"""The intake's statements after the spool (:mod:`.intake_spool`): the assembler's claims,
reads, ``done`` marks and pruning (:mod:`tracescore.intake.assembler`), and the forwarder's
reads and ``forwarded`` marks (:mod:`tracescore.intake.forwarder`).

Written once in ``?`` SQL, run as ``%s`` SQL on PostgreSQL (as the intake did when it held
them: issue 35 moved the text, not the logic). Each function runs one statement (or one
``executemany``) on ``store.conn``; batching and transactions stay the caller's (the
assembler's and forwarder's ``with background(), store.transaction()``). Blocking I/O on the
intake's background threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "claim", "delete_spanless_traces", "delete_spans", "mark_done", "mark_forwarded",
    "prunable_traces", "recorded", "resource_bodies", "spanless_traces", "trace_spans",
    "traces_spans", "unforwarded",
]

_CLAIM = ("UPDATE intake_traces SET state = 'claimed', owner = ?, lease_until = ? "
          "WHERE trace_id IN (SELECT trace_id FROM intake_traces WHERE state <> 'done' AND "
          "(ready_at <= ? OR (ready_at IS NULL AND last_at <= ?)) AND "
          "(state = 'open' OR lease_until < ?) ORDER BY ready_at LIMIT ?{lock}) "
          "RETURNING trace_id, spans")
_CLAIM_SQLITE = _CLAIM.format(lock="")
_CLAIM_PG = _CLAIM.format(lock=" FOR UPDATE SKIP LOCKED").replace("?", "%s")


def _q(store: Any, sql: str) -> str:
    return sql.replace("?", "%s") if store.dialect == "postgres" else sql


def _marks(n: int) -> str:
    return ",".join("?" * n)


# -- the assembler ----------------------------------------------------------------------------
def claim(store: Any, owner: str, lease_until: float, ready_before: float,
          idle_before: float, now: float, limit: int) -> list[tuple[str, int | None]]:
    """Lease to ``owner`` until ``lease_until`` the ``limit`` first traces ready (root span
    ready by ``ready_before``, or rootless and silent since ``idle_before``) that are open or
    whose lease ran out by ``now`` (PostgreSQL: skipping locked rows): their (trace id, spans
    received)."""
    sql = _CLAIM_PG if store.dialect == "postgres" else _CLAIM_SQLITE
    return store.conn.execute(
        sql, (owner, lease_until, ready_before, idle_before, now, limit)).fetchall()


def traces_spans(store: Any, trace_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """The spans of ``trace_ids`` (one query): (trace id, span id, parent id, resource id,
    body), in arrival order."""
    cols = "SELECT trace_id, span_id, parent_id, resource_id, body FROM intake_spans "
    if store.dialect == "postgres":
        cur = store.conn.execute(cols + "WHERE trace_id = ANY(%s::text[]) ORDER BY "
                                 "received_at", (list(trace_ids),))
    else:
        cur = store.conn.execute(cols + "WHERE trace_id IN (" + _marks(len(trace_ids))
                                 + ") ORDER BY received_at", list(trace_ids))
    return cur.fetchall()


def trace_spans(store: Any, trace_id: str, limit: int) -> list[tuple[Any, ...]]:
    """The first ``limit`` spans of one trace: (span id, parent id, resource id, body), in
    arrival order."""
    return store.conn.execute(_q(store,
        "SELECT span_id, parent_id, resource_id, body FROM intake_spans WHERE "
        "trace_id = ? ORDER BY received_at LIMIT ?"), (trace_id, limit)).fetchall()


def resource_bodies(store: Any, resource_ids: Sequence[str]) -> list[tuple[str, Any]]:
    """(resource id, serialized resource + scope) of those of ``resource_ids`` stored."""
    return store.conn.execute(_q(store,
        "SELECT resource_id, body FROM intake_resources WHERE resource_id IN ("
        + _marks(len(resource_ids)) + ")"), list(resource_ids)).fetchall()


def mark_done(store: Any, owner: str, now: float,
              per_trace: Iterable[tuple[str, int, str | None]]) -> None:
    """Mark done at ``now`` the traces (trace id, records built, note) ``owner`` still holds."""
    store.conn.cursor().executemany(_q(store,
        "UPDATE intake_traces SET state = 'done', records = ?, note = ?, done_at = ?, "
        "lease_until = NULL WHERE trace_id = ? AND owner = ? AND state = 'claimed'"),
        [(n, note, now, tid, owner) for tid, n, note in per_trace])


def prunable_traces(store: Any, done_before: float, forwarded_only: bool,
                    limit: int) -> list[str]:
    """The ``limit`` oldest traces assembled before ``done_before`` that still have spans
    (forwarded ones, with ``forwarded_only``)."""
    sent = " AND s.forwarded <> 0" if forwarded_only else ""
    return [r[0] for r in store.conn.execute(_q(store,
        "SELECT t.trace_id FROM intake_traces t WHERE t.state = 'done' AND t.done_at < ? "
        "AND EXISTS (SELECT 1 FROM intake_spans s WHERE s.trace_id = t.trace_id"
        + sent + ") ORDER BY t.done_at LIMIT ?"), (done_before, limit)).fetchall()]


def delete_spans(store: Any, trace_ids: Sequence[str], forwarded_only: bool) -> int:
    """Delete the spans (forwarded ones, with ``forwarded_only``) of ``trace_ids``: how many."""
    sent = " AND forwarded <> 0" if forwarded_only else ""
    cur = store.conn.execute(_q(store,
        "DELETE FROM intake_spans WHERE trace_id IN (" + _marks(len(trace_ids)) + ")"
        + sent), list(trace_ids))
    return max(0, cur.rowcount or 0)


def spanless_traces(store: Any, done_before: float, limit: int) -> list[str]:
    """Up to ``limit`` traces assembled before ``done_before`` with no span left."""
    return [r[0] for r in store.conn.execute(_q(store,
        "SELECT t.trace_id FROM intake_traces t WHERE t.state = 'done' AND t.done_at < ? "
        "AND NOT EXISTS (SELECT 1 FROM intake_spans s WHERE s.trace_id = t.trace_id) "
        "LIMIT ?"), (done_before, limit)).fetchall()]


def delete_spanless_traces(store: Any, trace_ids: Sequence[str]) -> None:
    """Delete the rows of ``trace_ids`` (a span that came meanwhile keeps its trace row)."""
    store.conn.execute(_q(store,
        "DELETE FROM intake_traces WHERE trace_id IN (" + _marks(len(trace_ids))
        + ") AND NOT EXISTS (SELECT 1 FROM intake_spans s WHERE s.trace_id = "
        "intake_traces.trace_id)"), list(trace_ids))


# -- the forwarder ----------------------------------------------------------------------------
def unforwarded(store: Any, owner: str, orphaned_before: float,
                limit: int) -> list[tuple[Any, ...]]:
    """The ``limit`` first spans not forwarded of traces ``owner`` assembled (or anyone,
    before ``orphaned_before``): (trace id, span id, resource id, body, done at)."""
    return store.conn.execute(_q(store,
        "SELECT s.trace_id, s.span_id, s.resource_id, s.body, t.done_at FROM intake_spans s"
        " JOIN intake_traces t ON t.trace_id = s.trace_id WHERE s.forwarded = 0 AND "
        "t.state = 'done' AND (t.owner = ? OR t.done_at < ?) ORDER BY s.received_at "
        "LIMIT ?"), (owner, orphaned_before, limit)).fetchall()


def recorded(store: Any, record_ids: Sequence[str]) -> list[str]:
    """Those of ``record_ids`` stored in ``records``."""
    return [r[0] for r in store.conn.execute(_q(store,
        "SELECT record_id FROM records WHERE record_id IN (" + _marks(len(record_ids))
        + ")"), list(record_ids)).fetchall()]


def mark_forwarded(store: Any, mark: int, spans: Iterable[tuple[str, str]]) -> None:
    """Set ``forwarded = mark`` (1: acknowledged, -1: rejected for good) on ``spans``
    ((trace id, span id))."""
    store.conn.cursor().executemany(_q(store,
        "UPDATE intake_spans SET forwarded = ? WHERE trace_id = ? AND span_id = ?"),
        [(mark, t, s) for t, s in spans])
