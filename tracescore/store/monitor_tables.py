"""The monitor tables' schema (states, history, the evaluator lease, the notification
outbox), for both engines. The store's migrations create them (schema version 3); their SQL
lives in :mod:`tracescore.monitor.state`, which reads and writes them."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DDL", "ddl"]

#: The autoincrement id column: the one DDL difference between the engines.
_ID = {"sqlite": "INTEGER PRIMARY KEY", "postgres": "BIGSERIAL PRIMARY KEY"}

_TEMPLATES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS monitor_state (
        monitor TEXT NOT NULL PRIMARY KEY, state TEXT NOT NULL,
        since DOUBLE PRECISION NOT NULL, checked_at DOUBLE PRECISION NOT NULL,
        value DOUBLE PRECISION, lo DOUBLE PRECISION, hi DOUBLE PRECISION, n BIGINT,
        detail TEXT NOT NULL DEFAULT '{}', test_state TEXT,
        streak INTEGER NOT NULL DEFAULT 0, pending TEXT, notified_at DOUBLE PRECISION)""",
    """CREATE TABLE IF NOT EXISTS monitor_history (
        id <ID>, monitor TEXT NOT NULL, state TEXT NOT NULL, previous TEXT,
        at DOUBLE PRECISION NOT NULL, value DOUBLE PRECISION, lo DOUBLE PRECISION,
        hi DOUBLE PRECISION, n BIGINT, detail TEXT NOT NULL DEFAULT '{}')""",
    "CREATE INDEX IF NOT EXISTS idx_monitor_history_monitor_at "
    "ON monitor_history (monitor, at)",
    """CREATE TABLE IF NOT EXISTS monitor_lease (
        name TEXT NOT NULL PRIMARY KEY, owner TEXT NOT NULL,
        until DOUBLE PRECISION NOT NULL)""",
    # claim_owner/claim_until: a deliverer's short claim on a pending row (see due_outbox)
    """CREATE TABLE IF NOT EXISTS monitor_outbox (
        id <ID>, monitor TEXT NOT NULL, channel TEXT NOT NULL, kind TEXT NOT NULL,
        url_ref TEXT NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0, next_at DOUBLE PRECISION NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, sent_at DOUBLE PRECISION, last_error TEXT,
        claim_owner TEXT, claim_until DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS idx_monitor_outbox_status_next_at "
    "ON monitor_outbox (status, next_at)",
)


def ddl(dialect: str) -> list[str]:
    """The monitor tables' ``CREATE … IF NOT EXISTS`` statements for ``dialect``
    (``"sqlite"`` or ``"postgres"``), to run one at a time inside the caller's transaction."""
    if dialect not in _ID:
        raise ValueError(f"unknown dialect {dialect!r}; expected 'sqlite' or 'postgres'")
    return [t.replace("<ID>", _ID[dialect]) for t in _TEMPLATES]


#: :func:`ddl` of each dialect.
DDL: Mapping[str, tuple[str, ...]] = {d: tuple(ddl(d)) for d in _ID}
