"""Versioned schema migrations: one ordered list per backend.

Each step has a version (1, 2, ...) and a function that applies it inside the migrating
transaction; ``meta.schema_version`` records the last step applied. Opening a store applies
the steps above the database's version, in order, so a database written by any earlier
release is upgraded in place. A database newer than the code is refused (upgrade tracescore).
A new step is appended to *both* lists when it changes what both backends store (and to one
when only one backend needs it); versions never change once released.

On PostgreSQL the migration holds a transaction-scoped advisory lock, so app replicas and
workers that start together migrate once. This module imports no backend module (they import
it), and runs only off the request path.

The step functions live in :mod:`.steps`; the lists and the runners here (tests and a
newer step may replace a list on this module: the runners read it from here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .record_seq import REC_OF, rec_trigger_when, record_seq  # noqa: F401 (REC_OF: the writers')
from .steps import (  # noqa: F401 (re-exported: the steps are named from here too)
    _PG_V1,
    _V3_COLUMNS,
    FOLD_CHUNK,
    FORCED_INDEX,
    OPEN_JOB_INDEXES,
    OPEN_JOBS,
    UNDELIVERED_INDEX,
    V5_COLUMNS,
    _agent_column,
    _fold_v2,
    _has_table,
    _intake,
    _judge_budget,
    _judge_rollup,
    _keyset,
    _monitor_ddl,
    _pg_statements,
    _pg_v2,
    _pg_v3,
    _sessions,
    _sqlite_v1,
    _sqlite_v2,
    _sqlite_v3,
    _sqlite_v6,
    _v3,
    _v4,
    _v5,
    _v7_open_row_indexes,
    _v8_forced_index,
)

__all__ = ["POSTGRES_MIGRATIONS", "REBUILT_INDEXES", "SQLITE_MIGRATIONS", "Migration",
           "SchemaTooNew", "ensure_rebuilt_indexes", "migrate_postgres", "migrate_sqlite"]


class SchemaTooNew(RuntimeError):
    """The database was written by a newer tracescore."""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Any], None]  # gets the backend's store, inside the transaction


def _apply_steps(store: Any, steps: tuple[Migration, ...], current: int, where: str) -> int:
    """Apply the steps above ``current``, in order (inside the caller's transaction); the
    latest version. A database newer than the code is refused."""
    latest = steps[-1].version
    if current > latest:
        raise SchemaTooNew(f"{where} has schema version {current}, newer than this tracescore "
                           f"understands ({latest}); upgrade tracescore")
    for step in steps:
        if step.version > current:
            step.apply(store)
    return latest


# -- SQLite ------------------------------------------------------------------------------------


SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "records, jobs, scores, counters, metrics (+ judge tables, feedback)",
              _sqlite_v1),
    Migration(2, "compact rows for unsampled records, hourly rollups", _sqlite_v2),
    Migration(3, "segments (release, environment, model, metadata keys), hourly rollups per "
                 "segment kept on write; monitor tables", _sqlite_v3),
    Migration(4, "human labels, label plans, judge canary history", lambda s: _v4(s, "sqlite")),
    Migration(5, "records: retrieval candidates, complete flag", lambda s: _v5(s, "sqlite")),
    Migration(6, "records: no trace_id index (a trace's records are a primary-key range)",
              _sqlite_v6),
    Migration(7, "jobs, scores: status and delivery indexes of the open jobs and undelivered "
                 "scores only", _v7_open_row_indexes),
    Migration(8, "records: an index of the forced records only", _v8_forced_index),
    Migration(9, "OTLP intake: received spans, their resources, traces awaiting assembly",
              lambda s: _intake(s, "sqlite")),
    Migration(10, "judge budgets and adaptive judge decisions",
              lambda s: _judge_budget(s, "sqlite")),
    Migration(11, "sessions: open and closed conversations, records by session",
              lambda s: _sessions(s, "sqlite")),
    Migration(12, "records: an agent run's tool calls and offered tools",
              lambda s: _agent_column(s, "sqlite")),
    Migration(13, "records: a sequence; scores and jobs keyed per record by it (issue 33)",
              lambda s: record_seq(s, "sqlite")),
    Migration(14, "hourly sums of the adaptive judge's decisions (active estimates per hour)",
              lambda s: _judge_rollup(s, "sqlite")),
)


def migrate_sqlite(store: Any) -> None:
    """Bring the SQLite database of ``store`` (a :class:`~.sqlite.Store`) up to date."""
    conn = store.conn
    with store.transaction():
        if "meta" not in store.db.table_names():
            store.db.table("meta").create({"key": str, "value": str}, pk="key")
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        current = 0 if row is None else int(row[0])
        latest = _apply_steps(store, SQLITE_MIGRATIONS, current, store.path)
        if current != latest:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                         (str(latest),))
        # Version 1 databases from before the judge tables: add what they lack (idempotent).
        store._ensure_judge_tables()
        ensure_rebuilt_indexes(store.conn)


#: Indexes that no constraint and no write needs, whose entries lie in random order relative
#: to time (a score's value): retention may drop them for a large backlog and build them
#: again after it (issue 19, :data:`.retention.BULK_INDEXES`). A run that dies in between
#: leaves them missing; opening the store builds them again (:func:`ensure_rebuilt_indexes`:
#: ``Store._schema_ready`` checks their names), as does the next run. (name, DDL)
REBUILT_INDEXES: tuple[tuple[str, str], ...] = (
    ("idx_scores_name_value",
     "CREATE INDEX IF NOT EXISTS idx_scores_name_value ON scores(name, value)"),
)


def ensure_rebuilt_indexes(conn: Any, names: Any = None) -> None:
    """Build the :data:`REBUILT_INDEXES` that are missing (those in ``names``, or all), on a
    SQLite connection inside the caller's transaction (idempotent)."""
    for name, sql in REBUILT_INDEXES:
        if names is None or name in names:
            conn.execute(sql)


# -- version 3 (both backends) ----------------------------------------------------------------
#: Columns version 3 adds: the record's release, environment and segment; the score's segment
#: (its record's) and judge model ("" for a local metric).


POSTGRES_MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the SQLite version-1 tables, plus embedding_cache and rate_limits "
                 "(fleet-wide judge calls per minute)", _pg_statements(_PG_V1)),
    Migration(2, "compact rows, hourly rollups, retrieval queries, yes/no metric declarations",
              _pg_v2),
    Migration(3, "segments, hourly rollups per segment kept on write; monitor tables", _pg_v3),
    Migration(4, "human labels, label plans, judge canary history",
              lambda s: _v4(s, "postgres")),
    Migration(5, "records: retrieval candidates, complete flag", lambda s: _v5(s, "postgres")),
    Migration(6, "jobs, scores: status and delivery indexes of the open jobs and undelivered "
                 "scores only", _v7_open_row_indexes),
    Migration(7, "records: an index of the forced records only", _v8_forced_index),
    Migration(8, "OTLP intake: received spans, their resources, traces awaiting assembly",
              lambda s: _intake(s, "postgres")),
    Migration(9, "judge budgets and adaptive judge decisions",
              lambda s: _judge_budget(s, "postgres")),
    Migration(10, "sessions: open and closed conversations, records by session",
              lambda s: _sessions(s, "postgres")),
    Migration(11, "records: an agent run's tool calls and offered tools",
              lambda s: _agent_column(s, "postgres")),
    Migration(12, "records: a sequence; scores and jobs keyed per record by it (issue 33)",
              lambda s: record_seq(s, "postgres")),
    Migration(13, "hourly sums of the adaptive judge's decisions (active estimates per hour)",
              lambda s: _judge_rollup(s, "postgres")),
    Migration(14, "scores, jobs: the rec triggers fire only for a row inserted without rec "
              "(the store's inserts give it)", rec_trigger_when),
)

#: pg_advisory_xact_lock key: "tracescore" as an int
_LOCK_KEY = 0x7472616365


def migrate_postgres(store: Any) -> None:
    """Bring the PostgreSQL database of ``store`` (a :class:`~.postgres.PostgresStore`) up
    to date; one process at a time (advisory lock), each run in one transaction."""
    conn = store.conn
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text)")
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        current = 0 if row is None else int(row[0])
        latest = _apply_steps(store, POSTGRES_MIGRATIONS, current, store.name)
        if current != latest:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(latest),))
