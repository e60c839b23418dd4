"""The record sequence (issue 33): ``records.seq``, a unique integer in insertion (time)
order, and ``scores.rec`` / ``jobs.rec``, their record's ``seq``; the per-record unique
indexes of scores and jobs keyed by it instead of the random ``record_id`` text.

Why: those two indexes were in random order against time, so every write transaction of a
prune rewrote most of their leaf pages however few records it deleted — 6–7× the bytes freed
with a busy writer at 60k records, 12.5× at 200k; keyed by ``rec`` a prune touches only the
pages it frees (2.6–2.9× and 3.4–3.5×: BENCHMARKS.md, Session 14), and a record written
appends its entries at the end of them instead of dirtying two random pages.

A record's scores and jobs are found by ``record_id`` through the records' own key:
``rec = (SELECT seq FROM records WHERE record_id = ?)``; a join from records is
``s.rec = r.seq``. Writers put ``rec`` in the inserted row (:data:`REC_OF`): SQLite decides a
conflict before an AFTER trigger could set it. Safety nets for any other insert: SQLite fills a
NULL ``records.seq`` (``max + 1``), ``scores.rec`` and ``jobs.rec`` in AFTER INSERT triggers;
PostgreSQL gives ``seq`` a sequence default and fills ``rec`` in a BEFORE INSERT trigger. A
score or job whose record does not exist keeps a NULL ``rec`` (no stored record to find it by).
"""

from __future__ import annotations

from typing import Any

#: The ``rec`` of a row about to be inserted for the record id bound at this ``?``.
REC_OF = "(SELECT seq FROM records WHERE record_id = ?)"

_SQLITE = (
    "UPDATE records SET seq = rowid + (SELECT coalesce(max(seq), 0) FROM records)"
    " WHERE seq IS NULL",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_records_seq ON records(seq)",
    "CREATE TRIGGER IF NOT EXISTS records_seq AFTER INSERT ON records WHEN NEW.seq IS NULL"
    " BEGIN UPDATE records SET seq = (SELECT coalesce(max(seq), 0) + 1 FROM records)"
    " WHERE rowid = NEW.rowid; END",
    "UPDATE scores SET rec = (SELECT r.seq FROM records r WHERE r.record_id = scores.record_id)"
    " WHERE rec IS NULL",
    "DROP INDEX IF EXISTS idx_scores_record_id_name",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_scores_rec_name ON scores(rec, name)",
    "CREATE TRIGGER IF NOT EXISTS scores_rec AFTER INSERT ON scores WHEN NEW.rec IS NULL"
    " BEGIN UPDATE scores SET rec = (SELECT seq FROM records WHERE record_id = NEW.record_id)"
    " WHERE rowid = NEW.rowid; END",
    "UPDATE jobs SET rec = (SELECT r.seq FROM records r WHERE r.record_id = jobs.record_id)"
    " WHERE rec IS NULL",
    "DROP INDEX IF EXISTS idx_jobs_record_id_metric_metric_version",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_jobs_rec_metric ON jobs(rec, metric, metric_version)",
    "CREATE TRIGGER IF NOT EXISTS jobs_rec AFTER INSERT ON jobs WHEN NEW.rec IS NULL"
    " BEGIN UPDATE jobs SET rec = (SELECT seq FROM records WHERE record_id = NEW.record_id)"
    " WHERE rowid = NEW.rowid; END",
)

_POSTGRES = (
    "ALTER TABLE records ADD COLUMN IF NOT EXISTS seq bigint",
    "CREATE SEQUENCE IF NOT EXISTS records_seq",
    "UPDATE records r SET seq = o.n + (SELECT coalesce(max(seq), 0) FROM records)"
    " FROM (SELECT record_id, row_number() OVER (ORDER BY created_at, record_id) AS n"
    " FROM records WHERE seq IS NULL) o WHERE r.record_id = o.record_id",
    "SELECT setval('records_seq', coalesce((SELECT max(seq) FROM records), 0) + 1, false)",
    "ALTER TABLE records ALTER COLUMN seq SET DEFAULT nextval('records_seq')",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_records_seq ON records(seq)",
    "ALTER TABLE scores ADD COLUMN IF NOT EXISTS rec bigint",
    "UPDATE scores s SET rec = r.seq FROM records r WHERE r.record_id = s.record_id"
    " AND s.rec IS NULL",
    "DROP INDEX IF EXISTS idx_scores_record_name",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_scores_rec_name ON scores(rec, name)",
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS rec bigint",
    "UPDATE jobs j SET rec = r.seq FROM records r WHERE r.record_id = j.record_id"
    " AND j.rec IS NULL",
    "DROP INDEX IF EXISTS idx_jobs_record_metric",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_jobs_rec_metric ON jobs(rec, metric, metric_version)",
    "CREATE OR REPLACE FUNCTION tracescore_rec() RETURNS trigger AS $$ BEGIN"
    " IF NEW.rec IS NULL THEN NEW.rec := (SELECT seq FROM records WHERE record_id ="
    " NEW.record_id); END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
    "DROP TRIGGER IF EXISTS scores_rec ON scores",
    "CREATE TRIGGER scores_rec BEFORE INSERT ON scores FOR EACH ROW"
    " EXECUTE FUNCTION tracescore_rec()",
    "DROP TRIGGER IF EXISTS jobs_rec ON jobs",
    "CREATE TRIGGER jobs_rec BEFORE INSERT ON jobs FOR EACH ROW"
    " EXECUTE FUNCTION tracescore_rec()",
)


def record_seq(store: Any, dialect: str) -> None:
    """SQLite 13 / PostgreSQL 12: :data:`REC_OF`'s columns, indexes and triggers; existing
    rows backfilled (``seq`` in rowid order on SQLite — the order records were written —,
    in ``created_at`` order on PostgreSQL)."""
    if dialect == "sqlite":  # (idempotent: a test may run a step again)
        for table, col in (("records", "seq"), ("scores", "rec"), ("jobs", "rec")):
            if col not in {r[1] for r in store.conn.execute(f"PRAGMA table_info({table})")}:
                store.conn.execute(f"ALTER TABLE {table} ADD COLUMN {col} INTEGER")
    for sql in _SQLITE if dialect == "sqlite" else _POSTGRES:
        store.conn.execute(sql)


#: PostgreSQL 14: the safety-net triggers fire only for a row without its ``rec`` (``WHEN``,
#: checked before any PL/pgSQL runs); the store's own inserts give ``rec`` in their VALUES
#: (:data:`REC_OF`), as on SQLite. Before, the trigger function ran for every job and score row
#: written (BENCHMARKS.md, "Session 15").
_POSTGRES_WHEN = tuple(
    sql for table in ("scores", "jobs") for sql in (
        f"DROP TRIGGER IF EXISTS {table}_rec ON {table}",
        f"CREATE TRIGGER {table}_rec BEFORE INSERT ON {table} FOR EACH ROW"
        " WHEN (NEW.rec IS NULL) EXECUTE FUNCTION tracescore_rec()"))


def rec_trigger_when(store: Any) -> None:
    """PostgreSQL 14: :data:`_POSTGRES_WHEN`."""
    for sql in _POSTGRES_WHEN:
        store.conn.execute(sql)
