"""The migration steps: the functions and DDL each version of
:data:`~tracescore.store.migrations.SQLITE_MIGRATIONS` and
:data:`~tracescore.store.migrations.POSTGRES_MIGRATIONS` applies (the lists, their order and
the runner stay in the package's ``__init__``; a step never changes once released).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def _sqlite_v1(store: Any) -> None:
    """The first released schema (tracescore 0.x, schema_version 1)."""
    db = store.db
    db.table("records").create(
        {
            "record_id": str, "trace_id": str, "span_id": str, "created_at": float,
            "source": str, "query": str, "answer": str, "contexts": str,
            "n_contexts": int, "ground_truths": str, "metadata": str, "tags": str,
            "session_id": str, "user_id": str, "latency_ms": float,
            "input_tokens": int, "output_tokens": int, "model": str, "error": str,
            "content_captured": int, "sample_u": float, "sampled": int,
            "sampled_metrics": str, "forced": str, "prompt": str,
        },
        pk="record_id",
    )
    db.table("records").create_index(["created_at"])
    # (version 1 as released also indexed records(trace_id): version 6 drops that index, so a
    # new database does not build it to drop it at once)
    db.table("jobs").create(
        {
            "job_id": int, "record_id": str, "metric": str, "metric_version": str,
            "status": str, "attempts": int, "lease_owner": str, "lease_until": float,
            "reason": str, "created_at": float, "updated_at": float,
        },
        pk="job_id",
        not_null={"record_id", "metric", "metric_version", "status"},
        defaults={"attempts": 0},
    )
    db.table("jobs").create_index(["record_id", "metric", "metric_version"], unique=True)
    # (version 1 as released also indexed jobs(status, lease_until), and a later start added
    # jobs(status, job_id): version 7 replaces both by indexes of the open jobs only)
    db.table("scores").create(
        {
            "score_id": int, "job_id": int, "record_id": str, "trace_id": str,
            "name": str, "metric": str, "metric_version": str, "value": float,
            "label": str, "explanation": str, "status": str, "error": str,
            "duration_ms": float, "details": str, "created_at": float, "delivery": str,
        },
        pk="score_id",
    )
    db.table("scores").create_index(["record_id", "name"], unique=True)
    db.table("scores").create_index(["name", "created_at"])
    # (version 1 as released also indexed scores(delivery): version 7 keeps the undelivered)
    db.table("counters").create({"name": str, "value": int}, pk="name")
    # What each configured metric declares, so readers in other processes (the CLI)
    # know a custom metric's direction and threshold.
    db.table("metrics").create(
        {"metric": str, "version": str, "kind": str, "score_names": str,
         "higher_is_better": int, "threshold": float, "description": str,
         "updated_at": float},
        pk="metric",
    )


def _sqlite_v2(store: Any) -> None:
    """Compact rows and hourly rollups (bounded storage): only ``ALTER TABLE … ADD COLUMN``
    and ``CREATE``, no rewrite of existing rows (their NULL ``text_kept`` means "full text",
    as they were written)."""
    from ..compact import COMPACT_COLUMNS
    from ..rollup import V2_DDL

    cols = {r[1] for r in store.conn.execute("PRAGMA table_info(records)")}
    for name, sql_type in COMPACT_COLUMNS:
        if name not in cols:
            store.conn.execute(f"ALTER TABLE records ADD COLUMN {name} {sql_type}")
    for stmt in V2_DDL:
        store.conn.execute(stmt)


def _sqlite_v3(store: Any) -> None:
    """Segments and hourly rollups kept on write: see :func:`_v3`."""
    for table, name, sql_type in _V3_COLUMNS:
        cols = {r[1] for r in store.conn.execute(f"PRAGMA table_info({table})")}
        if name not in cols:
            store.conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")
    _v3(store, "sqlite")


def _sqlite_v6(store: Any) -> None:
    """Version 6 (SQLite only): drop ``idx_records_trace_id``. Every ``record_id`` is
    ``TRACE-SPAN``, so a trace's records are one range of the primary key
    (:func:`.compat.trace_records`); the index cost one randomly placed page write per record
    written and one per record pruned (~0.9 of ~4.5 WAL pages per pruned record, issue 19).
    PostgreSQL keeps it (a non-C collation does not order ``-`` and ``.`` byte-wise)."""
    store.conn.execute("DROP INDEX IF EXISTS idx_records_trace_id")


#: The jobs a worker may still run (the only ones the status indexes hold, version 7). SQLite
#: uses a partial index only for a query that has this very term (its planner does not prove
#: ``status='pending'`` implies it), so every query that reads jobs by status says it.
OPEN_JOBS = "status IN ('pending', 'leased')"
#: Version 7's indexes of the open jobs: leasing in job order, leases that ran out.
OPEN_JOB_INDEXES = (
    ("idx_jobs_open_job_id", f"ON jobs(status, job_id) WHERE {OPEN_JOBS}"),
    ("idx_jobs_open_lease_until", f"ON jobs(status, lease_until) WHERE {OPEN_JOBS}"),
)
#: Version 7's index of the scores not delivered yet (every reader of them says
#: ``delivery IS NULL``; the plans stay those of the old index of every score's delivery).
UNDELIVERED_INDEX = ("idx_scores_undelivered",
                     "ON scores(delivery) WHERE delivery IS NULL")


def _v7_open_row_indexes(store: Any) -> None:
    """Version 7 (SQLite; PostgreSQL's 6): the status indexes of ``jobs`` hold the open jobs
    only, and the delivery index of ``scores`` the undelivered scores only. Every record
    writes a job row per configured metric, and most end ``skipped`` (no reference answer)
    or ``done`` at once (scores on write); most scores are delivered when they are stored (on
    the held span). Under the old indexes each such row kept entries nobody reads: two per
    job, one per score — about a quarter of the pages a batch of records wrote to the WAL
    (issue 19). Every reader of jobs by status asks for open ones (:data:`OPEN_JOBS`), every
    reader of scores by delivery for ``delivery IS NULL``; the rest go by record (the unique
    indexes). Building them reads each table once."""
    for old in ("idx_jobs_status_lease_until", "idx_jobs_status_job_id", "idx_scores_delivery"):
        store.conn.execute(f"DROP INDEX IF EXISTS {old}")
    for name, sql in (*OPEN_JOB_INDEXES, UNDELIVERED_INDEX):
        store.conn.execute(f"CREATE INDEX IF NOT EXISTS {name} {sql}")


#: The forced records of a window, found without reading the others: a partial index, one
#: entry per forced record (few: a rule's errors, flags, priority picks), none for the rest.
FORCED_INDEX = ("idx_records_forced", "ON records(created_at) WHERE forced IS NOT NULL")


def _v8_forced_index(store: Any) -> None:
    """Version 8 (SQLite; PostgreSQL's 7): :data:`FORCED_INDEX`, so a report can tell at once
    whether a window holds forced records — whether its scores were chosen with unequal
    probability and need weighting (:mod:`tracescore.reports.inclusion`). Building it reads
    ``records`` once."""
    name, sql = FORCED_INDEX
    store.conn.execute(f"CREATE INDEX IF NOT EXISTS {name} {sql}")


_V3_COLUMNS = (("records", "release", "TEXT"), ("records", "environment", "TEXT"),
               ("records", "seg_id", "BIGINT"), ("scores", "seg_id", "BIGINT"),
               ("scores", "judge_model", "TEXT"))
#: Rows read per query while existing rows are folded into the rollups.
FOLD_CHUNK = 5000


def _v3(store: Any, dialect: str) -> None:
    """Version 3: tables ``segments``, ``segment_values``, ``hourly_*`` (and the monitor
    tables); then every existing row is folded into the hourly rollups, inside the
    migrating transaction, and the version-2 ``rollup_*`` tables are folded in and **dropped**.

    Existing records get a segment of their model (release and environment unknown: NULL; the
    declared metadata keys are not known to a migration), their scores that segment and
    ``judge_model = ''``. Rollups of pruned hours (version 2) go into ``hourly_*`` as follows:
    an hour whose records had one model goes whole under that model's segment; an hour of
    several models keeps each model's record count (``rollup_models``) under its segment and
    the rest (sampled, compact, errors, tokens, latency) under :data:`.segments.NONE_SEG`;
    scores, bins and skips under ``NONE_SEG`` with ``metric_version``/``judge_model``/skip
    reason ``''``. Their Σx² was not kept: it is rebuilt from the bins (exact for 0/1 scores;
    for others, the binned variance around the exact mean, good to about 0.01).
    """
    from .. import rollup, segments
    from ..rollup import Delta, qmark

    conn = qmark(store)
    for stmt in (*segments.ddl(dialect), *rollup.ddl(dialect)):
        conn.execute(stmt)
    conn.execute("CREATE INDEX IF NOT EXISTS idx_records_seg_created ON records(seg_id, "
                 "created_at)")
    # the worst records of a score: an index walk in value order, stopped after a few rows
    conn.execute("CREATE INDEX IF NOT EXISTS idx_scores_name_value ON scores(name, value)")
    conn.execute("INSERT INTO segments (seg_id, seg_key, meta, first_seen) VALUES (?, ?, '{}', ?)"
                 " ON CONFLICT DO NOTHING", (segments.NONE_SEG, segments.NONE_KEY, time.time()))
    for stmt in _monitor_ddl(dialect):
        conn.execute(stmt)

    # segments of the existing records: by model
    resolver = segments.SegmentResolver()
    now = time.time()
    models = [r[0] for r in conn.execute("SELECT DISTINCT model FROM records WHERE model IS NOT"
                                         " NULL AND seg_id IS NULL").fetchall()]
    model_seg = dict(zip(models, (sid for sid, _ in resolver.resolve_dims(
        store, [{"model": segments.clean_value(m)} for m in models], segments.DEFAULT_LIMIT,
        now))))
    conn.executemany("UPDATE records SET seg_id = ? WHERE model = ? AND seg_id IS NULL",
                     [(sid, m) for m, sid in model_seg.items()])
    conn.execute("UPDATE records SET seg_id = ? WHERE seg_id IS NULL", (segments.NONE_SEG,))
    conn.execute("UPDATE scores SET judge_model = coalesce(judge_model, ''), seg_id = coalesce("
                 "(SELECT r.seg_id FROM records r WHERE r.record_id = scores.record_id), ?)"
                 " WHERE seg_id IS NULL", (segments.NONE_SEG,))

    delta = Delta()
    for row in _keyset(conn, "SELECT record_id, created_at, seg_id, sampled, text_kept, error,"
                             " input_tokens, output_tokens, latency_ms FROM records", "record_id"):
        delta.add_record(*row[1:])
    for row in _keyset(conn, "SELECT score_id, name, created_at, seg_id, metric_version,"
                             " judge_model, metric, value, label, status FROM scores",
                       "score_id"):
        _, name, created, seg, mv, jm, metric, value, label, status = row
        delta.add_score(created, name, seg, mv, jm, metric, value, label, status)
    for _, created, metric, seg, reason in _keyset(
            conn, "SELECT j.job_id, r.created_at, j.metric, r.seg_id, j.reason FROM jobs j"
                  " JOIN records r ON r.record_id = j.record_id WHERE j.status = 'skipped'",
            "j.job_id"):
        delta.add_skip(created, metric, seg, reason)

    if _has_table(conn, dialect, "rollup_records"):
        _fold_v2(conn, store, resolver, delta, now)
    delta.write(conn)
    for table in rollup.V2_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def _v4(store: Any, dialect: str) -> None:
    """Version 4 (both backends): the tables ``labels``, ``label_plan`` and ``judge_canary``
    (:mod:`.labels`); only ``CREATE``, existing rows untouched."""
    from ..labels import ddl
    from ..rollup import qmark

    conn = qmark(store)
    for stmt in ddl(dialect):
        conn.execute(stmt)


#: Columns version 5 adds to ``records``: every retrieved candidate with the step that produced
#: or dropped it (JSON, NULL when the run had none or the row is compact) and whether the
#: answer is complete (0 = a stream the client cut off). Rows before it were complete.
V5_COLUMNS = (("candidates", "TEXT", "text"), ("complete", "INTEGER NOT NULL DEFAULT 1",
                                                "integer NOT NULL DEFAULT 1"))


def _v5(store: Any, dialect: str) -> None:
    """Version 5 (both backends): ``records.candidates`` and ``records.complete``; only
    ``ALTER TABLE … ADD COLUMN`` with a default, no rewrite of existing rows."""
    if dialect == "postgres":
        for name, _, pg_type in V5_COLUMNS:
            store.conn.execute(f"ALTER TABLE records ADD COLUMN IF NOT EXISTS {name} {pg_type}")
        return
    cols = {r[1] for r in store.conn.execute("PRAGMA table_info(records)")}
    for name, sql_type, _ in V5_COLUMNS:
        if name not in cols:
            store.conn.execute(f"ALTER TABLE records ADD COLUMN {name} {sql_type}")


def _agent_column(store: Any, dialect: str) -> None:
    """SQLite 12 / PostgreSQL 11: ``records.agent``, an agent run's tool calls and offered
    tools (JSON, :mod:`.agent_rows`; NULL for other records, compact rows and rows retention
    compacted). ``ALTER TABLE … ADD COLUMN`` only, no rewrite."""
    if dialect == "postgres":
        store.conn.execute("ALTER TABLE records ADD COLUMN IF NOT EXISTS agent text")
        return
    cols = {r[1] for r in store.conn.execute("PRAGMA table_info(records)")}
    if "agent" not in cols:
        store.conn.execute("ALTER TABLE records ADD COLUMN agent TEXT")


def _judge_rollup(store: Any, dialect: str) -> None:
    """SQLite 14 / PostgreSQL 13: the hourly sums of the adaptive judge's decisions
    (:mod:`.judge_rollup`), filled from the decisions and scores already stored."""
    from ..judge_rollup import backfill, ddl
    from ..rollup import QmarkConnection

    for stmt in ddl(dialect):
        store.conn.execute(stmt)
    backfill(QmarkConnection(store.conn) if dialect == "postgres" else store.conn, dialect)


def _keyset(conn: Any, select: str, key: str) -> Any:
    """Every row of ``select`` (which must start with ``key``), FOLD_CHUNK at a time (keyset
    pagination: PostgreSQL's client cursor would otherwise hold the whole table)."""
    where = " AND " if " WHERE " in select else " WHERE "
    last: Any = None
    while True:
        if last is None:
            rows = conn.execute(f"{select} ORDER BY {key} LIMIT ?", (FOLD_CHUNK,)).fetchall()
        else:
            rows = conn.execute(f"{select}{where}{key} > ? ORDER BY {key} LIMIT ?",
                                (last, FOLD_CHUNK)).fetchall()
        yield from rows
        if len(rows) < FOLD_CHUNK:
            return
        last = rows[-1][0]


def _has_table(conn: Any, dialect: str, name: str) -> bool:
    if dialect == "postgres":
        sql = ("SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema()"
               " AND table_name = ?")
    else:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return conn.execute(sql, (name,)).fetchone() is not None


def _fold_v2(conn: Any, store: Any, resolver: Any, delta: Any, now: float) -> None:
    """The version-2 rollups (pruned hours) into ``delta`` (see :func:`_v3`)."""
    from ..rollup import bin_mid, v2_bin
    from ..segments import DEFAULT_LIMIT, NONE_SEG, clean_value

    models: dict[int, dict[str | None, int]] = {}
    for hour, model, n in conn.execute("SELECT hour, model, n FROM rollup_models").fetchall():
        # v2 wrote a record without a model as "unknown"
        m = None if model == "unknown" else clean_value(model)
        models.setdefault(int(hour), {})
        models[int(hour)][m] = models[int(hour)].get(m, 0) + int(n)
    names = sorted({m for per in models.values() for m in per if m is not None})
    seg_of: dict[str | None, int] = {None: NONE_SEG}
    seg_of.update(zip(names, (sid for sid, _ in resolver.resolve_dims(
        store, [{"model": m} for m in names], DEFAULT_LIMIT, now))))
    for row in conn.execute("SELECT hour, records, sampled, compact, errors, with_usage,"
                            " input_tokens, output_tokens, latency_n, latency_ms_sum"
                            " FROM rollup_records").fetchall():
        hour, n = int(row[0]), int(row[1])
        rest = [int(v) for v in row[2:9]] + [float(row[9])]
        per = models.get(hour, {})
        if len(per) == 1:
            [(m, _)] = per.items()
            delta.merge_raw("records", (hour, seg_of[m]), [n, *rest])
            continue
        for m, k in per.items():
            delta.merge_raw("records", (hour, seg_of[m]), [k, 0, 0, 0, 0, 0, 0, 0, 0.0])
        delta.merge_raw("records", (hour, NONE_SEG), [n - sum(per.values()), *rest])
    bins: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for hour, name, b, label, n in conn.execute(
            "SELECT hour, name, bin, label, n FROM rollup_score_bins").fetchall():
        delta.merge_raw("bins", (int(hour), name, NONE_SEG, v2_bin(int(b)), label), [int(n)])
        bins.setdefault((int(hour), name), []).append((int(b), int(n)))
    for hour, name, metric, n_ok, vsum, n_lab, n_fail, n_err, n_skip in conn.execute(
            "SELECT hour, name, metric, n_ok, value_sum, n_labelled, n_fail, n_error, n_skipped"
            " FROM rollup_scores").fetchall():
        n_ok, vsum = int(n_ok), float(vsum)
        hb = bins.get((int(hour), name), [])
        if n_ok == 0:
            ss = 0.0
        elif all(b in (0, 99) for b, _ in hb):  # yes/no scores: x² = x
            ss = vsum
        else:  # binned variance around the exact mean
            mean = vsum / n_ok
            var = sum(k * (bin_mid(v2_bin(b)) - mean) ** 2 for b, k in hb) / n_ok
            ss = n_ok * var + vsum * vsum / n_ok
        delta.merge_raw("scores", (int(hour), name, NONE_SEG, "", ""),
                        [metric, n_ok, vsum, ss, int(n_lab), int(n_fail), int(n_err),
                         int(n_skip)])
    for hour, metric, n in conn.execute("SELECT hour, metric, n FROM rollup_skips").fetchall():
        delta.merge_raw("skips", (int(hour), metric, NONE_SEG, ""), [int(n)])


def _monitor_ddl(dialect: str) -> tuple[str, ...]:
    """The monitor tables (states, history, lease, notification outbox): :mod:`.monitor_tables`."""
    from ..monitor_tables import ddl

    return tuple(ddl(dialect))


# -- PostgreSQL --------------------------------------------------------------------------------
# Types: REAL → double precision; counters and ids bigint; token counts integer (so sum() is a
# bigint, not numeric). Unix-seconds timestamps as on SQLite, so readers share their SQL.
_PG_V1 = """
CREATE TABLE IF NOT EXISTS records (
    record_id text PRIMARY KEY, trace_id text, span_id text, created_at double precision,
    source text, query text, answer text, contexts text, n_contexts integer,
    ground_truths text, metadata text, tags text, session_id text, user_id text,
    latency_ms double precision, input_tokens integer, output_tokens integer, model text,
    error text, content_captured integer, sample_u double precision, sampled integer,
    sampled_metrics text, forced text, prompt text);
CREATE INDEX IF NOT EXISTS idx_records_created_at ON records(created_at);
CREATE INDEX IF NOT EXISTS idx_records_trace_id ON records(trace_id);
CREATE TABLE IF NOT EXISTS jobs (
    job_id bigserial PRIMARY KEY, record_id text NOT NULL, metric text NOT NULL,
    metric_version text NOT NULL, status text NOT NULL, attempts integer NOT NULL DEFAULT 0,
    lease_owner text, lease_until double precision, reason text,
    created_at double precision, updated_at double precision);
CREATE UNIQUE INDEX IF NOT EXISTS idx_jobs_record_metric
    ON jobs(record_id, metric, metric_version);
CREATE INDEX IF NOT EXISTS idx_jobs_status_lease_until ON jobs(status, lease_until);
CREATE INDEX IF NOT EXISTS idx_jobs_status_job_id ON jobs(status, job_id);
CREATE TABLE IF NOT EXISTS scores (
    score_id bigserial PRIMARY KEY, job_id bigint, record_id text, trace_id text, name text,
    metric text, metric_version text, value double precision, label text, explanation text,
    status text, error text, duration_ms double precision, details text,
    created_at double precision, delivery text);
CREATE UNIQUE INDEX IF NOT EXISTS idx_scores_record_name ON scores(record_id, name);
CREATE INDEX IF NOT EXISTS idx_scores_name_created_at ON scores(name, created_at);
CREATE INDEX IF NOT EXISTS idx_scores_delivery ON scores(delivery);
CREATE TABLE IF NOT EXISTS counters (name text PRIMARY KEY, value bigint);
CREATE TABLE IF NOT EXISTS metrics (
    metric text PRIMARY KEY, version text, kind text, score_names text,
    higher_is_better integer, threshold double precision, description text,
    updated_at double precision);
CREATE TABLE IF NOT EXISTS judge_cache (
    key text PRIMARY KEY, step text, model text, prompt_version text, value text,
    input_tokens integer, output_tokens integer, created_at double precision);
CREATE TABLE IF NOT EXISTS judge_calls (
    call_id bigserial PRIMARY KEY, record_id text, step text, model text,
    input_tokens integer, output_tokens integer, latency_ms double precision,
    cost_usd double precision, error text, created_at double precision);
CREATE INDEX IF NOT EXISTS idx_judge_calls_created_at ON judge_calls(created_at);
CREATE TABLE IF NOT EXISTS feedback (
    feedback_id bigserial PRIMARY KEY, trace_id text, name text, value double precision,
    label text, comment text, created_at double precision);
CREATE INDEX IF NOT EXISTS idx_feedback_trace ON feedback(trace_id);
CREATE TABLE IF NOT EXISTS judge_health (
    model text PRIMARY KEY, agreement double precision, cases integer, degenerate integer,
    detail text, checked_at double precision);
CREATE TABLE IF NOT EXISTS embedding_cache (
    model text NOT NULL, text_sha256 text NOT NULL, dim integer, vector bytea,
    created_at double precision, PRIMARY KEY (model, text_sha256));
CREATE TABLE IF NOT EXISTS rate_limits (
    name text PRIMARY KEY, tokens double precision NOT NULL,
    updated_at double precision NOT NULL)
"""


def _intake(store: Any, dialect: str) -> None:
    """SQLite version 9, PostgreSQL version 8: the tables of ``tracescore serve`` (the OTLP
    intake, :mod:`tracescore.intake.spool`)."""
    from ..intake_tables import ddl

    for stmt in ddl(dialect):
        store.conn.execute(stmt)


def _judge_budget(store: Any, dialect: str) -> None:
    """SQLite version 10, PostgreSQL version 9: ``judge_budget`` and ``judge_decisions``
    (:mod:`.judge_budget`); only ``CREATE``."""
    from ..judge_budget import ddl

    for stmt in ddl(dialect):
        store.conn.execute(stmt)


def _sessions(store: Any, dialect: str) -> None:
    """SQLite version 11, PostgreSQL version 10: the ``sessions`` table and an index of the
    records by session (:mod:`.sessions`). Sessions of records written before it are not
    backfilled: a session is known from its next turn on (and then scored with all its
    stored turns)."""
    from ..sessions import ddl

    for stmt in ddl(dialect):
        store.conn.execute(stmt)


def _pg_statements(script: str) -> Callable[[Any], None]:
    def apply(store: Any) -> None:
        for stmt in script.split(";"):
            if stmt.strip():
                store.conn.execute(stmt)
    return apply


def _pg_v2(store: Any) -> None:
    """As SQLite's version 2 (compact rows, hourly rollups), plus the columns SQLite adds
    beside its migrations (``records.retrieval_queries``, ``metrics.is_binary``)."""
    from ..compact import COMPACT_COLUMNS
    from ..rollup import V2_DDL

    pg_type = {"INTEGER": "integer", "TEXT": "text", "REAL": "double precision"}
    columns = [("records", "retrieval_queries", "text"), ("metrics", "is_binary", "integer"),
               *(("records", name, pg_type.get(t.upper(), t)) for name, t in COMPACT_COLUMNS)]
    for table, name, sql_type in columns:
        store.conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {sql_type}")
    for stmt in V2_DDL:
        store.conn.execute(stmt)


def _pg_v3(store: Any) -> None:
    """As SQLite's version 3 (:func:`_v3`)."""
    for table, name, sql_type in _V3_COLUMNS:
        store.conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {sql_type}")
    _v3(store, "postgres")
