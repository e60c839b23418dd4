"""The intake's tables (schema step ``_intake`` in :mod:`tracescore.store.migrations`); their
statements are :mod:`.intake_spool`'s (the spool) and :mod:`.intake_sql`'s (assembler,
forwarder), used by :mod:`tracescore.intake`.

- ``intake_spans``: every span received, once (primary key trace id + span id: a sender that
  retries a batch stores nothing twice), as its serialized OTLP ``Span`` message, with the
  resource and scope it came with (``resource_id``) and whether it was forwarded.
- ``intake_resources``: each distinct resource + instrumentation scope, serialized as a
  ``ResourceSpans`` message without spans (many spans share one).
- ``intake_traces``: one row per trace: when its root span came (``ready_at`` = then + the
  grace period), its state (``open`` → ``claimed`` by one assembler under a lease → ``done``),
  the spans received, the spans that came after it was assembled (``late_spans``), and the
  records built from it.

Imports nothing of the package: the migrations module imports it (the store creates the
tables of the stages above it, as for the monitor's tables, :mod:`.monitor_tables`).
"""

from __future__ import annotations


def ddl(dialect: str) -> tuple[str, ...]:
    blob = "BYTEA" if dialect == "postgres" else "BLOB"
    real = "DOUBLE PRECISION"
    return (
        f"""CREATE TABLE IF NOT EXISTS intake_resources (
            resource_id TEXT PRIMARY KEY, body {blob} NOT NULL, created_at {real})""",
        f"""CREATE TABLE IF NOT EXISTS intake_spans (
            trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT,
            resource_id TEXT NOT NULL, body {blob} NOT NULL, received_at {real} NOT NULL,
            forwarded INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (trace_id, span_id))""",
        "CREATE INDEX IF NOT EXISTS idx_intake_spans_unforwarded ON intake_spans(received_at)"
        " WHERE forwarded = 0",
        f"""CREATE TABLE IF NOT EXISTS intake_traces (
            trace_id TEXT PRIMARY KEY, first_at {real} NOT NULL, last_at {real} NOT NULL,
            root_span_id TEXT, ready_at {real}, spans BIGINT NOT NULL DEFAULT 0,
            late_spans BIGINT NOT NULL DEFAULT 0, state TEXT NOT NULL DEFAULT 'open',
            owner TEXT, lease_until {real}, records INTEGER, note TEXT, done_at {real})""",
        "CREATE INDEX IF NOT EXISTS idx_intake_traces_open ON intake_traces(ready_at)"
        " WHERE state <> 'done'",
        "CREATE INDEX IF NOT EXISTS idx_intake_traces_waiting ON intake_traces(last_at)"
        " WHERE state = 'open' AND ready_at IS NULL",
    )
