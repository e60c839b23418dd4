"""Sessions in the store (schema: SQLite version 11, PostgreSQL version 10): the ``sessions``
table of open and closed conversations, the turns written into it, the closer's claims, and
the session's own record and scores.

State lives in the database, so a restart does not lose an open session and, on PostgreSQL,
any number of processes close sessions side by side:

- :func:`note_turns` (the writer, inside :meth:`write_batch`'s transaction): each record
  inserted with a ``session_id`` opens its session or keeps it open — ``touched_at`` (the
  write time), ``version`` + 1, ``status = 'open'`` (a closed session is re-opened by a late
  turn);
- :func:`claim` (a closer): sessions untouched for ``idle_s``, or whose closer's lease ran out,
  are marked ``closing`` under the closer's lease in one statement (PostgreSQL: ``FOR UPDATE
  SKIP LOCKED``, as jobs are leased), with the version they were claimed at;
- :func:`finish` (the closer): in one transaction, marks the session ``closed`` *only if* the
  closer still holds it at the same version (no turn arrived meanwhile), and writes the
  session's record and scores — replacing the ones of an earlier close, whose contribution
  leaves the hourly rollups first, so a re-opened session counts once;
- :func:`defer`: gives the session back until a later time (its turns still have open jobs).

The session's record (``records.source = 'session'``) has a stable id made from the session
key (:func:`session_record_id`), the release, environment and segment of its last turn, and
``forced = 'session'`` (every closed session is scored: inclusion probability 1). It is not
counted in ``hourly_records`` (it is not a request). Blocking I/O, off the request path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..record import RagRecord
from ..sampling import Decision
from ..score import Score
from .rollup import Delta, qmark, qmark_tx
from .rows import (
    _OLD_SCORES,
    _RECORD_COLS,
    _json_safe,
    clean_text,
    dumps,
    record_row,
    row_to_record,
)
from .segments import NONE_SEG, SegmentSpec

__all__ = ["SESSION_SOURCE", "Claim", "claim", "ddl", "defer", "finish", "metric_rules",
           "note_turns",
           "open_turn_jobs", "session_record_id", "session_state", "session_turns", "turn_scores"]

#: ``records.source`` of a session's own record
SESSION_SOURCE = "session"
#: ``records.forced`` of a session's record: every closed session is scored (π = 1)
SESSION_FORCED = "session"

_SID = _RECORD_COLS.index("session_id")
_CREATED = _RECORD_COLS.index("created_at")
_SOURCE = _RECORD_COLS.index("source")


def ddl(dialect: str) -> tuple[str, ...]:
    """The ``sessions`` table and the index of records by session (portable SQL)."""
    real = "DOUBLE PRECISION"
    return (
        f"""CREATE TABLE IF NOT EXISTS sessions (
            session_id TEXT PRIMARY KEY, first_at {real} NOT NULL, last_at {real} NOT NULL,
            touched_at {real} NOT NULL, version BIGINT NOT NULL,
            closed_version BIGINT NOT NULL DEFAULT 0, status TEXT NOT NULL,
            lease_owner TEXT, lease_until {real}, closes BIGINT NOT NULL DEFAULT 0,
            closed_at {real})""",
        "CREATE INDEX IF NOT EXISTS idx_sessions_due ON sessions(status, touched_at)",
        "CREATE INDEX IF NOT EXISTS idx_records_session ON records(session_id, created_at)"
        " WHERE session_id IS NOT NULL",
    )


def session_record_id(session_id: str) -> tuple[str, str]:
    """(trace id, span id) of a session's own record: hex from the key, stable everywhere."""
    h = hashlib.sha256(("tracescore.session\0" + session_id).encode("utf-8",
                                                                    "surrogatepass")).hexdigest()
    return h[:32], h[32:48]


_NOTE = (
    "INSERT INTO sessions (session_id, first_at, last_at, touched_at, version, closed_version,"
    " status) VALUES (?, ?, ?, ?, 1, 0, 'open') ON CONFLICT (session_id) DO UPDATE SET"
    " first_at = CASE WHEN excluded.first_at < sessions.first_at THEN excluded.first_at"
    " ELSE sessions.first_at END,"
    " last_at = CASE WHEN excluded.last_at > sessions.last_at THEN excluded.last_at"
    " ELSE sessions.last_at END,"
    " touched_at = excluded.touched_at, version = sessions.version + 1, status = 'open'")


def note_turns(conn: Any, rows: Iterable[Sequence[Any]], now: float) -> int:
    """The records rows just inserted (``record_row`` tuples) into ``sessions`` (inside the
    writer's transaction; ``conn`` takes ``?`` SQL). One upsert per session in the batch, in
    key order (concurrent writers on PostgreSQL lock session rows in the same order)."""
    spans: dict[str, list[float]] = {}
    for row in rows:
        sid = row[_SID]
        if not sid or row[_SOURCE] == SESSION_SOURCE:
            continue
        t = float(row[_CREATED] or now)
        a = spans.get(sid)
        if a is None:
            spans[sid] = [t, t]
        else:
            a[0], a[1] = min(a[0], t), max(a[1], t)
    for sid in sorted(spans):
        first, last = spans[sid]
        conn.execute(_NOTE, (sid, first, last, now))
    return len(spans)


@dataclass(frozen=True, slots=True)
class Claim:
    """A session a closer holds: its key and the version it was claimed at."""

    session_id: str
    version: int
    closes: int
    #: when its last turn was written
    touched_at: float = 0.0


def claim(store: Any, owner: str, now: float, idle_s: float, lease_s: float,
          limit: int = 20) -> list[Claim]:
    """Claim up to ``limit`` sessions due to close: open and untouched since ``now - idle_s``,
    or claimed by a closer whose lease ran out before ``now``. One statement; on PostgreSQL
    the rows are locked with ``SKIP LOCKED``, so closers in many processes take disjoint
    sessions."""
    lock = " FOR UPDATE SKIP LOCKED" if getattr(store, "dialect", "sqlite") == "postgres" else ""
    with qmark_tx(store) as conn:
        rows = conn.execute(
            "UPDATE sessions SET status = 'closing', lease_owner = ?, lease_until = ?"
            " WHERE session_id IN (SELECT session_id FROM sessions WHERE"
            " (status = 'open' AND touched_at <= ?) OR (status = 'closing' AND lease_until < ?)"
            f" ORDER BY touched_at LIMIT ?{lock})"
            " RETURNING session_id, version, closes, touched_at",
            (owner, now + lease_s, now - idle_s, now, limit)).fetchall()
    return [Claim(str(r[0]), int(r[1]), int(r[2]), float(r[3])) for r in sorted(rows)]


def defer(store: Any, owner: str, c: Claim, until: float) -> None:
    """Give ``c`` back until ``until`` (its turns still have jobs open): it stays ``closing``
    with no owner, and any closer claims it again once ``until`` has passed — unless a new
    turn re-opened it meanwhile."""
    with qmark_tx(store) as conn:
        conn.execute("UPDATE sessions SET lease_owner = NULL, lease_until = ? WHERE"
                     " session_id = ? AND lease_owner = ? AND status = 'closing'",
                     (until, c.session_id, owner))


def metric_rules(store: Any) -> list[tuple[Any, Any, Any]]:
    """(score_names JSON, higher_is_better, threshold) of each row of the ``metrics`` table
    (what configured processes declared)."""
    return qmark(store).execute(
        "SELECT score_names, higher_is_better, threshold FROM metrics").fetchall()


def session_state(store: Any, session_id: str) -> dict[str, Any] | None:
    """The ``sessions`` row of ``session_id`` as a dict (None when unknown)."""
    cur = qmark(store).execute("SELECT * FROM sessions WHERE session_id = ?", (session_id,))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row))


def session_turns(store: Any, session_id: str) -> list[tuple[RagRecord, dict[str, Any]]]:
    """The session's turns in time order: each record with its raw row (release,
    environment, seg_id, complete...)."""
    cur = qmark(store).execute(
        "SELECT * FROM records WHERE session_id = ? AND source <> ? ORDER BY created_at,"
        " record_id", (session_id, SESSION_SOURCE))
    cols = [d[0] for d in cur.description]
    out = []
    for r in cur.fetchall():
        row = dict(zip(cols, r))
        out.append((row_to_record(row), row))
    return out


def turn_scores(store: Any, record_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """record id → its stored score rows (name, metric, value, label, status)."""
    out: dict[str, list[dict[str, Any]]] = {rid: [] for rid in record_ids}
    conn = qmark(store)
    for i in range(0, len(record_ids), 500):
        chunk = list(record_ids[i:i + 500])
        for rid, name, metric, value, label, status in conn.execute(
                "SELECT record_id, name, metric, value, label, status FROM scores WHERE"
                " rec IN (SELECT seq FROM records WHERE record_id IN ("
                + ",".join("?" * len(chunk)) + "))", chunk).fetchall():
            out[rid].append({"name": name, "metric": metric, "value": value, "label": label,
                             "status": status})
    return out


def open_turn_jobs(store: Any, record_ids: Sequence[str]) -> int:
    """How many jobs of these records are still to run (pending or leased)."""
    n = 0
    conn = qmark(store)
    for i in range(0, len(record_ids), 500):
        chunk = list(record_ids[i:i + 500])
        n += int(conn.execute(
            "SELECT count(*) FROM jobs WHERE status IN ('pending', 'leased') AND rec IN ("
            "SELECT seq FROM records WHERE record_id IN ("
            + ",".join("?" * len(chunk)) + "))", chunk).fetchone()[0])
    return n


_UPSERT_SCORE = (
    "INSERT INTO scores (job_id, record_id, trace_id, name, metric, metric_version, value, label,"
    " explanation, status, error, duration_ms, details, created_at, delivery, seg_id,"
    " judge_model, rec) VALUES (NULL,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'',"
    " (SELECT seq FROM records WHERE record_id = ?))"
    " ON CONFLICT (rec, name) DO UPDATE SET job_id = NULL, metric = excluded.metric,"
    " metric_version = excluded.metric_version, value = excluded.value,"
    " label = excluded.label, explanation = excluded.explanation, status = excluded.status,"
    " error = excluded.error, duration_ms = excluded.duration_ms, details = excluded.details,"
    " created_at = excluded.created_at, delivery = excluded.delivery,"
    " seg_id = excluded.seg_id, judge_model = ''")


def finish(store: Any, owner: str, c: Claim, record: RagRecord | None,
           last_turn: Mapping[str, Any] | None, scores: Sequence[Score], now: float,
           jobs: Sequence[Any] = ()) -> bool:
    """Close ``c``: in one transaction, mark it ``closed`` if ``owner`` still holds it at the
    claimed version, and store the session's record and ``scores`` (replacing an earlier
    close's; names it no longer has are removed — not the judge jobs' scores, replaced when
    their re-opened jobs run), their rollup contributions exchanged.
    False (nothing stored) when a turn arrived meanwhile or the lease was lost; the session
    then closes again later. ``record`` None: the session has no turns left (pruned); only
    its state is closed. ``jobs``: the session judge metrics' jobs on its record, created or
    re-opened (``upsert_jobs``) in the same transaction."""
    with qmark_tx(store) as conn:
        won = conn.execute(
            "UPDATE sessions SET status = 'closed', closed_version = ?, lease_owner = NULL,"
            " lease_until = NULL, closes = closes + 1, closed_at = ? WHERE session_id = ? AND"
            " lease_owner = ? AND status = 'closing' AND version = ? RETURNING session_id",
            (c.version, now, c.session_id, owner, c.version)).fetchall()
        if not won or record is None:
            return bool(won)
        turn = last_turn or {}
        seg_id = NONE_SEG if turn.get("seg_id") is None else int(turn["seg_id"])
        spec = SegmentSpec(turn.get("release"), turn.get("environment"))
        row = record_row(record, Decision(0.0, (SESSION_SOURCE,), SESSION_FORCED), now, True,
                         spec, seg_id)
        conn.execute(
            "INSERT INTO records (" + ",".join(_RECORD_COLS) + ") VALUES ("
            + ",".join("?" * len(_RECORD_COLS)) + ") ON CONFLICT (record_id) DO UPDATE SET "
            + ", ".join(f"{col} = excluded.{col}" for col in _RECORD_COLS[1:]), row)
        delta = Delta()
        rid = record.record_id
        names = {s.name for s in scores}
        # (the closer's own rows only: a judge metric's score belongs to its job, which this
        # close re-opens, and is replaced when the job runs again)
        for old in conn.execute(_OLD_SCORES + " AND job_id IS NULL", (rid,)).fetchall():
            if old[2] is not None:
                delta.add_score(old[1], old[0], old[2], old[3], old[4], old[5], old[6],
                                old[7], old[8], -1)
            if old[0] not in names:
                conn.execute("DELETE FROM scores WHERE rec = (SELECT seq FROM records"
                             " WHERE record_id = ?) AND name = ?", (rid, old[0]))
        for s in scores:
            conn.execute(_UPSERT_SCORE, (
                rid, record.trace_id, s.name, s.metric or s.name, s.metric_version, s.value,
                s.label, clean_text(s.explanation) if s.explanation else None, s.status,
                clean_text(s.error) if s.error else None, s.duration_ms,
                dumps(_json_safe(dict(s.details))), now, "none", seg_id, rid))
            delta.add_score(now, s.name, seg_id, s.metric_version, "", s.metric or s.name,
                            s.value, s.label, s.status)
        delta.write(conn)
        if jobs:
            store.upsert_jobs(jobs)  # (nested: part of this transaction)
    return True
