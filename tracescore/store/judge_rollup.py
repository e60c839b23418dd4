"""Hourly sums of the adaptive judge's decisions (schema: SQLite 14, PostgreSQL 13), from
which a window's active-inference estimate is computed without its rows
(:mod:`tracescore.stats.active_totals` says which sums and why they suffice).

Two tables, per UTC hour of the decision (``judge_decisions.created_at``) and the decided
record's segment — the hours and segments of the other ``hourly_*`` rollups (:mod:`.rollup`):

- ``hourly_judge_decisions`` (hour, metric, seg_id): every decision (``decided``), those
  made with π = 0 (``unrep``), the selected ones, and over the unselected ones with π > 0
  their count, Σf and Σf²;
- ``hourly_judge_scores`` (hour, metric, name, seg_id): over the selected decisions with
  π > 0 whose record has an ok score ``name`` of the metric, the judged sums
  (:data:`~tracescore.stats.active_totals.JUDGED_FIELDS`).

Kept up to date in the transaction of the row they sum, on both backends:

- :func:`.judge_budget.decide`: a decision stored (+), a decision reopened by negative
  feedback (its old contribution −, the new one with π = 1 +);
- the scoring worker's ``complete_job(s)``: the judged sums of the (record, name) pairs the
  batch wrote are read before and after the scores are written, and the difference applied
  (:func:`judged_snapshot`, :meth:`JudgeDelta.change`) — an ok score added, an error
  replaced by an ok one or the other way round, a value changed;
- like every ``hourly_*`` table they hold every row ever written: ``prune`` deletes the raw
  decisions and scores and leaves the sums, so a window's estimate is the same before and
  after a prune (as the report's other figures are).

The migration fills them from the rows already there (:func:`backfill`). Blocking I/O on the
caller's connection (``?`` SQL: a :class:`.rollup.QmarkConnection` on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._internal.judge_terms import (
    DECISION_FIELDS,
    DECISION_INTS,
    JUDGED_FIELDS,
    JUDGED_INTS,
    decision_terms,
    judged_terms,
)
from .rollup import hour_of
from .segments import NONE_SEG, _chunks

__all__ = ["DECISION_FIELDS", "DECISIONS_SQL", "JUDGED_FIELDS", "JUDGED_SQL", "JudgeDelta",
           "backfill", "ddl", "decision_row", "judged_decisions", "judged_scores",
           "judged_snapshot", "sums_from_rows"]

_TYPES = {"sqlite": ("BIGINT", "DOUBLE PRECISION"),
          "postgres": ("bigint", "double precision")}


def ddl(dialect: str) -> list[str]:
    it, rt = _TYPES[dialect]
    tail = " WITHOUT ROWID" if dialect == "sqlite" else ""
    dec = ", ".join(f"{c} {it if c in DECISION_INTS else rt}"
                    " NOT NULL" for c in DECISION_FIELDS)
    jud = ", ".join(f"{c} {it if c in JUDGED_INTS else rt} NOT NULL" for c in JUDGED_FIELDS)
    return [
        f"CREATE TABLE IF NOT EXISTS hourly_judge_decisions (hour {it} NOT NULL,"
        f" metric TEXT NOT NULL, seg_id {it} NOT NULL, {dec},"
        f" PRIMARY KEY (hour, metric, seg_id)){tail}",
        f"CREATE TABLE IF NOT EXISTS hourly_judge_scores (hour {it} NOT NULL,"
        f" metric TEXT NOT NULL, name TEXT NOT NULL, seg_id {it} NOT NULL, {jud},"
        f" PRIMARY KEY (hour, metric, name, seg_id)){tail}",
    ]


def _upsert(table: str, keys: Sequence[str], cols: Sequence[str]) -> str:
    allc = (*keys, *cols)
    return (f"INSERT INTO {table} ({', '.join(allc)}) VALUES ({','.join('?' * len(allc))})"
            f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
            + ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in cols))


_UPSERT_DECISIONS = _upsert("hourly_judge_decisions", ("hour", "metric", "seg_id"),
                            DECISION_FIELDS)
_UPSERT_JUDGED = _upsert("hourly_judge_scores", ("hour", "metric", "name", "seg_id"),
                         JUDGED_FIELDS)


class JudgeDelta:
    """What a transaction adds to (or takes from) the two tables, summed in memory; one per
    transaction. :meth:`write` applies it in key order (the order every writer locks in)."""

    __slots__ = ("decisions", "judged")

    def __init__(self) -> None:
        self.decisions: dict[tuple[int, str, int], list[Any]] = {}
        self.judged: dict[tuple[int, str, str, int], list[Any]] = {}

    def __bool__(self) -> bool:
        return bool(self.decisions or self.judged)

    @staticmethod
    def _add(target: dict[Any, list[Any]], key: Any, terms: Sequence[Any], sign: int) -> None:
        a = target.get(key)
        if a is None:
            target[key] = [sign * x for x in terms]
        else:
            for i, x in enumerate(terms):
                a[i] += sign * x

    def add_decision(self, created_at: float, metric: str, seg_id: int, proxy: float,
                     pi: float, selected: bool, sign: int = 1) -> None:
        self._add(self.decisions, (hour_of(created_at), metric, int(seg_id)),
                  decision_terms(proxy, pi, selected), sign)

    def add_judged(self, created_at: float, metric: str, name: str, seg_id: int,
                   proxy: float, pi: float, y: float, sign: int = 1) -> None:
        self._add(self.judged, (hour_of(created_at), metric, name, int(seg_id)),
                  judged_terms(float(proxy), float(pi), float(y)), sign)

    def change(self, before: dict[Any, JudgedRow], after: dict[Any, JudgedRow]) -> None:
        """The difference of two :func:`judged_snapshot` s: each (record, metric, name) whose
        judged row changed leaves with its old terms and comes back with its new ones."""
        for key in set(before) | set(after):
            old, new = before.get(key), after.get(key)
            if old == new:
                continue
            if old is not None:
                self.add_judged(*old, sign=-1)
            if new is not None:
                self.add_judged(*new)

    def write(self, conn: Any) -> None:
        for sql, items in ((_UPSERT_DECISIONS, self.decisions), (_UPSERT_JUDGED, self.judged)):
            rows = [(*k, *a) for k, a in sorted(items.items()) if any(a)]
            if len(rows) == 1:
                conn.execute(sql, rows[0])
            elif rows:
                conn.executemany(sql, rows)


#: the FROM of the judged sums (``s.metric = d.metric``: a score of the judged metric; a
#: record's scores are found by its sequence, ``scores(rec, name)``, through ``records r``)
JUDGED_FROM = (" FROM judge_decisions d JOIN records r ON r.record_id = d.record_id"
               " JOIN scores s ON s.rec = r.seq AND s.metric = d.metric")
JUDGED_WHERE = " d.selected = 1 AND d.pi > 0 AND s.status = 'ok' AND s.value IS NOT NULL"
#: The write path's snapshot reads the same rows as :data:`JUDGED_FROM` / :data:`JUDGED_WHERE`
#: in three single-table statements, each on a unique index (the decisions, their records, their
#: records' scores), joined here: one statement joining the three let PostgreSQL's cached
#: generic plan scan every score when the tables' statistics were young (14 ms a batch at 4,000
#: scores, growing; BENCHMARKS "Session 15"), and a batch with no judged decision (every local
#: metric's, every record without a budget) stops after the first, which finds nothing.
_JUDGED_DECISIONS = ("SELECT record_id, metric, created_at, proxy, pi FROM judge_decisions"
                     " WHERE selected = 1 AND pi > 0")
_RECORD_SEQS = "SELECT record_id, seq, coalesce(seg_id, ?) FROM records WHERE record_id IN ("
_OK_SCORES = ("SELECT rec, metric, name, value FROM scores WHERE status = 'ok'"
              " AND value IS NOT NULL AND rec IN (")

#: a judged decision whose record is stored: (record id, metric, created_at, seg_id, proxy,
#: π, the record's seq)
JudgedDecision = tuple[str, str, float, int, float, float, int]


def judged_decisions(conn: Any, record_ids: Iterable[str], metric: str | None = None
                     ) -> list[JudgedDecision]:
    """The judged decisions (selected, π > 0) of ``record_ids`` (of ``metric`` only, if
    given) whose record is stored, with the record's seq and segment: what
    :func:`judged_scores` needs, read once for a batch (a job's scores change neither)."""
    ids = sorted(set(record_ids))
    extra, args = ("", []) if metric is None else (" AND metric = ?", [metric])
    found: list[tuple[str, str, float, float, float]] = []
    for chunk in _chunks(ids):
        found += [(str(rid), str(m), float(created), float(proxy), float(pi))
                  for rid, m, created, proxy, pi in conn.execute(
                      _JUDGED_DECISIONS + extra + " AND record_id IN ("
                      + ",".join("?" * len(chunk)) + ")", (*args, *chunk)).fetchall()]
    if not found:
        return []
    seqs: dict[str, tuple[int, int]] = {}
    for chunk in _chunks(sorted({f[0] for f in found})):
        for rid, seq, seg in conn.execute(_RECORD_SEQS + ",".join("?" * len(chunk)) + ")",
                                          (NONE_SEG, *chunk)).fetchall():
            if seq is not None:
                seqs[str(rid)] = (int(seq), int(seg))
    return [(rid, m, created, seqs[rid][1], proxy, pi, seqs[rid][0])
            for rid, m, created, proxy, pi in found if rid in seqs]


def judged_scores(conn: Any, decisions: Sequence[JudgedDecision]
                  ) -> dict[tuple[str, str, str], JudgedRow]:
    """(record, metric, score name) → its judged row as :meth:`JudgeDelta.add_judged` takes
    it (created_at, metric, name, seg_id, proxy, π, y): each of ``decisions`` with each ok
    score of its metric on its record (the rows of :data:`JUDGED_FROM` / :data:`JUDGED_WHERE`)."""
    if not decisions:
        return {}
    by_seq: dict[int, list[JudgedDecision]] = {}
    for d in decisions:
        by_seq.setdefault(d[6], []).append(d)
    out: dict[tuple[str, str, str], JudgedRow] = {}
    for chunk in _chunks(sorted(by_seq)):
        for rec, m, name, y in conn.execute(_OK_SCORES + ",".join("?" * len(chunk)) + ")",
                                            tuple(chunk)).fetchall():
            for rid, dm, created, seg, proxy, pi, _ in by_seq.get(int(rec), ()):
                if dm == m:
                    out[(rid, dm, str(name))] = (created, dm, str(name), seg, proxy, pi,
                                                 float(y))
    return out


def judged_snapshot(conn: Any, record_ids: Iterable[str], metric: str | None = None
                    ) -> dict[tuple[str, str, str], JudgedRow]:
    """(record, metric, score name) → its judged row (:func:`judged_scores`), for the judged
    decisions of ``record_ids`` (of ``metric`` only, if given) that have an ok score."""
    return judged_scores(conn, judged_decisions(conn, record_ids, metric))


DecisionRow = tuple[float, str, int, float, float, bool]
JudgedRow = tuple[float, str, str, int, float, float, float]


def decision_row(conn: Any, record_id: str, metric: str) -> DecisionRow | None:
    """(created_at, metric, seg_id, proxy, π, selected) of a decision, as
    :meth:`JudgeDelta.add_decision` takes it; None without one."""
    row = conn.execute(
        "SELECT d.created_at, d.metric, coalesce(r.seg_id, ?), d.proxy, d.pi, d.selected"
        " FROM judge_decisions d LEFT JOIN records r ON r.record_id = d.record_id"
        " WHERE d.record_id = ? AND d.metric = ?", (NONE_SEG, record_id, metric)).fetchone()
    if row is None:
        return None
    return (float(row[0]), str(row[1]), int(row[2]), float(row[3]), float(row[4]),
            bool(row[5]))


# -- the sums over raw rows (the migration's backfill; the readers' cut hours) -----------------
def _agg(cols: Sequence[str]) -> str:
    return ", ".join(cols)


_V = "((1.0 - d.pi) / (d.pi * d.pi))"
_U = "(1.0 / d.pi)"
#: :data:`DECISION_FIELDS` as SQL aggregates over ``judge_decisions d``
DECISIONS_SQL = _agg([
    "count(*)", "sum(CASE WHEN d.pi <= 0 THEN 1 ELSE 0 END)",
    "sum(CASE WHEN d.selected = 1 THEN 1 ELSE 0 END)",
    "sum(CASE WHEN d.pi > 0 AND d.selected = 0 THEN 1 ELSE 0 END)",
    "sum(CASE WHEN d.pi > 0 AND d.selected = 0 THEN d.proxy ELSE 0.0 END)",
    "sum(CASE WHEN d.pi > 0 AND d.selected = 0 THEN d.proxy * d.proxy ELSE 0.0 END)"])
#: :data:`JUDGED_FIELDS` as SQL aggregates over judged ``d`` joined to their ok scores ``s``
JUDGED_SQL = _agg([
    "count(*)", "sum(CASE WHEN d.pi < 1 THEN 1 ELSE 0 END)", "sum(d.proxy)",
    "sum(d.proxy * d.proxy)", "sum(s.value)", "sum(s.value * s.value)",
    *(f"sum({w}{t})" for w in (_V, _U)
      for t in ("", " * d.proxy", " * d.proxy * d.proxy", " * s.value",
                " * d.proxy * s.value", " * s.value * s.value"))])


def hour_expr(dialect: str) -> str:
    """The decision's rollup hour in SQL (as :func:`.rollup.hour_of`)."""
    if dialect == "postgres":
        return "(floor(d.created_at / 3600) * 3600)::bigint"
    return "(CAST(d.created_at / 3600 AS INTEGER) * 3600)"


def backfill(conn: Any, dialect: str) -> None:
    """Fill both tables from the decisions and scores stored (the migration; idempotent only
    on empty tables). ``conn`` takes ``?`` SQL."""
    sums_from_rows(conn, dialect).write(conn)


def sums_from_rows(conn: Any, dialect: str) -> JudgeDelta:
    """Both tables' rows as the stored decisions and scores make them (the backfill; the
    tests' oracle of the write path)."""
    h = hour_expr(dialect)
    seg = f"coalesce(r.seg_id, {NONE_SEG})"
    delta = JudgeDelta()
    for row in conn.execute(
            f"SELECT {h}, d.metric, {seg}, {DECISIONS_SQL} FROM judge_decisions d"
            f" LEFT JOIN records r ON r.record_id = d.record_id"
            f" GROUP BY {h}, d.metric, {seg}").fetchall():
        delta.decisions[(int(row[0]), str(row[1]), int(row[2]))] = _typed(
            DECISION_FIELDS, row[3:], DECISION_INTS)
    for row in conn.execute(
            f"SELECT {h}, d.metric, s.name, {seg}, {JUDGED_SQL}{JUDGED_FROM}"
            f" WHERE{JUDGED_WHERE}"
            f" GROUP BY {h}, d.metric, s.name, {seg}").fetchall():
        delta.judged[(int(row[0]), str(row[1]), str(row[2]), int(row[3]))] = _typed(
            JUDGED_FIELDS, row[4:], JUDGED_INTS)
    return delta


def _typed(names: Sequence[str], values: Sequence[Any], ints: Sequence[str]) -> list[Any]:
    return [(int(v or 0) if n in ints else float(v or 0.0)) for n, v in zip(names, values)]
