"""Moving up: copy a SQLite tracescore database into PostgreSQL (``tracescore
copy-to-postgres``).

Everything a team's history holds goes across — records, jobs, scores, feedback, counters,
declared metrics, judge cache, judge calls and health, embedding cache, human labels, label
plans, the judge canary's history — in one PostgreSQL
transaction (all or nothing). Ids are re-issued by PostgreSQL (the target may already hold a
fleet's data); a score keeps pointing at its job through the job's natural key (record,
metric, version). Rows whose natural key exists in the target are left as they are. Jobs
still open in the file (pending, or leased by a process of the old host) arrive pending, so
the fleet's workers score them. A source copied once is remembered in ``meta`` and refused a
second time (counters would double). Blocking; for the CLI.

Segments and rollups: each source segment is matched to the target's by its canonical key
(created there when missing), so ``seg_id`` is re-issued like the other ids and every record,
score and ``hourly_*`` row (the adaptive judge's ``hourly_judge_*`` sums too) points at the
target's segment. The source's hourly rollups (which
include its pruned hours) are *added* to the target's: a record already in the target (left
as it is) is then counted twice in the rollups — copy into a target that does not hold the
same records.

Only the columns the target's schema declares are copied, and every identifier is quoted on
both sides: a crafted SQLite file cannot put SQL into either database through a column name.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["AlreadyCopied", "copy_sqlite_to_postgres"]

CHUNK = 1000


class AlreadyCopied(RuntimeError):
    """The target already holds a copy of this source."""


def _chunks(conn: sqlite3.Connection, sql: str) -> Iterator[list[tuple[Any, ...]]]:
    cur = conn.execute(sql)
    while True:
        rows = cur.fetchmany(CHUNK)
        if not rows:
            return
        yield [tuple(r) for r in rows]


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[0]) for r in conn.execute("SELECT name FROM pragma_table_info(?)", (table,))]


def _shared_columns(src: sqlite3.Connection, dst: Any, table: str,
                    skip: Sequence[str] = ()) -> list[str]:
    """The columns of ``table`` that the target's schema declares and the source has, in the
    source's order. Only these are copied: a column name is never taken from the source file
    alone (a crafted file could name a column with SQL in it)."""
    declared = {str(r[0]) for r in dst.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s", (table,)).fetchall()}
    return [c for c in _columns(src, table) if c in declared and c not in skip]


def _select(cols: Sequence[str], table: str) -> str:
    """A SQLite SELECT of ``cols`` (quoted identifiers) from ``table``."""
    return (f"SELECT {', '.join(_sqlite_ident(c) for c in cols)} "
            f"FROM {_sqlite_ident(table)}")


def _sqlite_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _insert(table: str, cols: Sequence[str], tail: str = "") -> Any:
    """``INSERT INTO table(cols) VALUES (%s, ...) tail`` with quoted identifiers."""
    from psycopg import sql

    return sql.SQL("INSERT INTO {}({}) VALUES ({}) ").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in cols),
        sql.SQL(", ").join(sql.Placeholder() for _ in cols)) + sql.SQL(tail)  # type: ignore[arg-type,unused-ignore]


#: (table, SELECT of the source's rows: key columns first, then the values, number of key
#: columns) of the hourly rollups, in :class:`.rollup.Delta`'s layout.
_HOURLY = (
    ("records", "SELECT hour, seg_id, records, sampled, compact, errors, with_usage,"
                " input_tokens, output_tokens, latency_n, latency_ms_sum FROM hourly_records", 2),
    ("scores", "SELECT hour, name, seg_id, metric_version, judge_model, metric, n_ok, value_sum,"
               " value_sumsq, n_labelled, n_fail, n_error, n_skipped FROM hourly_scores", 5),
    ("bins", "SELECT hour, name, seg_id, bin, label, n FROM hourly_bins", 5),
    ("skips", "SELECT hour, metric, seg_id, reason, n FROM hourly_skips", 4),
)
_SEG_POS = {"records": 1, "scores": 2, "bins": 2, "skips": 2}
#: (table, its id column — re-issued by the target —, ON CONFLICT tail) of the tables copied
#: row by row after the scores: a label or plan row whose natural key the target holds stays.
_APPENDED = (
    ("feedback", "feedback_id", ""), ("judge_calls", "call_id", ""),
    ("labels", "id", "ON CONFLICT (trace_id, (COALESCE(record_id, '')), name, annotator)"
                     " DO NOTHING"),
    ("label_plan", "", "ON CONFLICT (plan_id, position) DO NOTHING"),
    ("judge_canary", "id", ""),
    # open sessions stay open in the target (their turns and own records are records above)
    ("sessions", "", "ON CONFLICT (session_id) DO NOTHING"),
)


def _copy_judge_sums(src: sqlite3.Connection, dst: Any, tables: Any,
                     seg_map: dict[int, int]) -> int:
    """The adaptive judge's hourly sums (:mod:`.judge_rollup`) added to the target's, their
    segments mapped: the source's tables (which include its pruned hours), or — a source
    from before them — the sums of its decision and score rows. The row count added."""
    from .judge_rollup import DECISION_FIELDS, JUDGED_FIELDS, JudgeDelta, sums_from_rows
    from .rollup import QmarkConnection

    if "judge_decisions" not in tables:
        return 0
    if "hourly_judge_decisions" in tables:
        got = JudgeDelta()
        for r in src.execute(f"SELECT hour, metric, seg_id, {', '.join(DECISION_FIELDS)}"
                             " FROM hourly_judge_decisions").fetchall():
            got.decisions[(int(r[0]), str(r[1]), int(r[2]))] = list(r[3:])
        for r in src.execute(f"SELECT hour, metric, name, seg_id, {', '.join(JUDGED_FIELDS)}"
                             " FROM hourly_judge_scores").fetchall():
            got.judged[(int(r[0]), str(r[1]), str(r[2]), int(r[3]))] = list(r[4:])
    else:
        got = sums_from_rows(src, "sqlite")
    out = JudgeDelta()
    for (h, m, sid), a in got.decisions.items():
        out._add(out.decisions, (h, m, seg_map.get(sid, sid)), a, 1)
    for (h, m, name, sid), a in got.judged.items():
        out._add(out.judged, (h, m, name, seg_map.get(sid, sid)), a, 1)
    out.write(QmarkConnection(dst))
    return len(out.decisions) + len(out.judged)


def _copy_segments(src: sqlite3.Connection, dst: Any,
                   put: Callable[[str, Sequence[str], str, Sequence[Sequence[Any]]], None]
                   ) -> dict[int, int]:
    """Segments and their admitted values into the target (matched by ``seg_key``);
    source seg_id → target seg_id."""
    for rows in _chunks(src, "SELECT dim, value FROM segment_values"):
        put("segment_values", ("dim", "value"), "ON CONFLICT (dim, value) DO NOTHING", rows)
    seg_map: dict[int, int] = {}
    cols = ("seg_key", "release", "environment", "model", "meta", "first_seen")
    for rows in _chunks(src, f"SELECT seg_id, {','.join(cols)} FROM segments"):
        put("segments", cols, "ON CONFLICT (seg_key) DO NOTHING", [r[1:] for r in rows])
        keys = {r[1]: int(r[0]) for r in rows}
        for sid, key in dst.execute("SELECT seg_id, seg_key FROM segments WHERE seg_key = "
                                    "ANY(%s)", (list(keys),)).fetchall():
            seg_map[keys[key]] = int(sid)
    return seg_map


def copy_sqlite_to_postgres(source: str | os.PathLike[str], url: str, *,
                            force: bool = False,
                            progress: Callable[[str, int], None] | None = None
                            ) -> dict[str, int]:
    """Copy ``source`` (a SQLite file) into the PostgreSQL database at ``url`` (created or
    upgraded first). Returns rows copied per table."""
    from psycopg import sql

    from .postgres import PostgresStore, _nul_free
    from .rollup import Delta, QmarkConnection
    from .sqlite import Store

    src_path = Path(source).resolve()
    Store(src_path).close()  # brings an older file up to the current schema first
    src = sqlite3.connect(f"file:{src_path}?mode=ro", uri=True)
    dst = PostgresStore(url)
    counts: dict[str, int] = {}
    key = f"copied_from:{src_path}"
    tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def put(table: str, cols: Sequence[str], sql_tail: str,
            rows: Sequence[Sequence[Any]]) -> None:
        with dst.conn.cursor() as cur:
            cur.executemany(_insert(table, cols, sql_tail),
                            [tuple(_nul_free(v) for v in r) for r in rows])
        counts[table] = counts.get(table, 0) + len(rows)
        if progress is not None:
            progress(table, counts[table])

    try:
        with dst.transaction():
            done = dst.conn.execute("SELECT value FROM meta WHERE key=%s", (key,)).fetchone()
            if done is not None and not force:
                raise AlreadyCopied(f"{src_path} was already copied into {dst.name} "
                                    f"(at {done[0]}); --force copies it again (counters add up)")
            seg_map = _copy_segments(src, dst.conn, put)

            def mapped(cols: Sequence[str], rows: Sequence[Sequence[Any]]
                       ) -> list[Sequence[Any]]:
                if "seg_id" not in cols:
                    return list(rows)
                i = list(cols).index("seg_id")
                return [(*r[:i], seg_map.get(r[i], r[i]), *r[i + 1:]) for r in rows]

            natural = {
                "records": ("record_id", "ON CONFLICT (record_id) DO NOTHING"),
                "metrics": ("metric", "ON CONFLICT (metric) DO NOTHING"),
                "judge_cache": ("key", "ON CONFLICT (key) DO NOTHING"),
                "judge_health": ("model", "ON CONFLICT (model) DO NOTHING"),
                "embedding_cache": ("model", "ON CONFLICT (model, text_sha256) DO NOTHING"),
                # the judge budget's days and per-record decisions (the active estimates of
                # a budgeted judge metric need their proxies and inclusion probabilities)
                "judge_budget": ("metric", "ON CONFLICT (metric, day) DO NOTHING"),
                "judge_decisions": ("record_id", "ON CONFLICT (record_id, metric) DO NOTHING"),
            }
            for table, (_, tail) in natural.items():
                if table not in tables:
                    continue
                # (a record's sequence is the target's own: given there; its scores' and
                # jobs' ``rec`` filled from it by the target's trigger)
                cols = _shared_columns(src, dst.conn, table, skip=("seq",))
                for rows in _chunks(src, _select(cols, table)):
                    put(table, cols, tail, mapped(cols, rows))
            # jobs: new ids; open jobs arrive pending (their old leases mean nothing here)
            jcols = ["record_id", "metric", "metric_version", "status", "attempts", "reason",
                     "created_at", "updated_at"]
            for rows in _chunks(src, "SELECT record_id, metric, metric_version, CASE WHEN "
                                     "status = 'leased' THEN 'pending' ELSE status END, "
                                     "attempts, reason, created_at, updated_at FROM jobs"):
                put("jobs", jcols, "ON CONFLICT (rec, metric, metric_version) "
                                   "DO NOTHING", rows)
            scols = _shared_columns(src, dst.conn, "scores", skip=("score_id", "job_id", "rec"))
            sel = ", ".join(f"s.{_sqlite_ident(c)}" for c in scols)
            score_insert = sql.SQL(
                "INSERT INTO scores({}, job_id) VALUES ({}, (SELECT job_id FROM jobs WHERE "
                "rec = (SELECT seq FROM records WHERE record_id=%s) AND metric=%s"
                " AND metric_version=%s)) ON CONFLICT (rec, name) DO NOTHING").format(
                sql.SQL(", ").join(sql.Identifier(c) for c in scols),
                sql.SQL(", ").join(sql.Placeholder() for _ in scols))
            for rows in _chunks(src, f"SELECT {sel}, j.metric, j.metric_version FROM scores s "
                                     "LEFT JOIN jobs j ON j.job_id = s.job_id"):
                # the job id in the target, by the job's natural key
                with dst.conn.cursor() as cur:
                    cur.executemany(
                        score_insert,
                        [tuple(_nul_free(v) for v in r[:-2])
                         + (r[scols.index("record_id")], r[-2], r[-1])
                         for r in mapped([*scols, "", ""], rows)])
                counts["scores"] = counts.get("scores", 0) + len(rows)
            for table, skip, tail in _APPENDED:
                if table in tables:
                    cols = _shared_columns(src, dst.conn, table, skip=(skip,))
                    for rows in _chunks(src, _select(cols, table)):
                        put(table, cols, tail, rows)
            for table, select, nkey in _HOURLY:
                for rows in _chunks(src, select):
                    delta = Delta()
                    for r in rows:
                        k = list(r[:nkey])
                        k[_SEG_POS[table]] = seg_map.get(k[_SEG_POS[table]], k[_SEG_POS[table]])
                        delta.merge_raw(table, tuple(k), list(r[nkey:]))
                    delta.write(QmarkConnection(dst.conn))
                    counts[f"hourly_{table}"] = counts.get(f"hourly_{table}", 0) + len(rows)
            counts["hourly_judge"] = _copy_judge_sums(src, dst.conn, tables, seg_map)
            counters = dict(src.execute("SELECT name, value FROM counters").fetchall())
            dst.bump_counters(counters)
            counts["counters"] = len(counters)
            dst.conn.execute(
                "INSERT INTO meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                "SET value = excluded.value",
                (key, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
    finally:
        src.close()
        dst.close()
    return counts
