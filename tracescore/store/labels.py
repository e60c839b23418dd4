"""Schema version 4: human labels, label plans and the judge canary's history — their DDL
and every SQL statement on them, written once for both backends (``?`` SQL; on PostgreSQL it
runs through :func:`.rollup.qmark`).

- ``labels``: a person's verdict on one score of one **record** (the text the annotator read),
  in the score's own scale (1/0 for a yes/no metric, else the number), bound to the metric
  version of that record's stored score when there is one. ``record_id`` is the record; a label
  given by trace id only is bound to the trace's newest record at labelling time (the newest
  one scored under that name, else the newest one); NULL when the trace had no record yet (an
  import ahead of its records: readers bind it to the trace's record later, see
  :func:`tracescore.reports.trust.read_pairs`). Unique key ``(trace_id, record_id or '',
  name, annotator)``: a new label by the same annotator on the same record replaces the old one
  (two annotators keep two rows — agreement between people; two records of one trace keep two).
  Labels are the calibration set: retention never deletes them, nor the records and scores of
  labelled traces.
- ``label_plan``: which records a plan chose to label (``tracescore label --plan N``), with
  the stratum each was drawn from, its size in the population (N_k) and the draws from it
  (n_k), so the stratified estimate can be computed later from the table alone.
- ``judge_canary``: one row per run of the judge's known-answer cases (start-up, schedule,
  model or prompt change, manual), kept as a history for the drift monitor.

:class:`LabelsMixin` gives both store classes the :class:`~.base.StoreAPI` methods. Blocking,
like every store method: never on the app's request path (the writer thread and the CLI call
them).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .compat import trace_records
from .rollup import qmark, qmark_tx

__all__ = ["CANARY_COLS", "LABEL_COLS", "PLAN_COLS", "LabelsMixin", "ddl", "metric_scales"]

#: the columns of a ``labels`` row, as :meth:`LabelsMixin.labels` returns them
LABEL_COLS = ("id", "trace_id", "record_id", "name", "value", "metric_version", "annotator",
              "comment", "source", "created_at")
#: the columns of a ``label_plan`` row
PLAN_COLS = ("plan_id", "position", "trace_id", "record_id", "name", "stratum", "stratum_size",
             "stratum_draws", "created_at")
#: the unique key of a label (an expression index: a NULL record is one key per trace)
LABEL_KEY = "(trace_id, (COALESCE(record_id, '')), name, annotator)"
#: the columns of a ``judge_canary`` row (``details``: JSON of the per-case expected/got)
CANARY_COLS = ("id", "at", "judge_model", "reported_model", "prompt_version", "trigger",
               "cases", "agreed", "yes_share", "degenerate", "reason", "details")

_TYPES = {
    "sqlite": {"id": "INTEGER PRIMARY KEY", "real": "REAL", "int": "INTEGER"},
    "postgres": {"id": "bigserial PRIMARY KEY", "real": "double precision", "int": "bigint"},
}


def ddl(dialect: str) -> list[str]:
    """The version-4 tables and indexes on ``dialect`` ("sqlite" | "postgres"); idempotent."""
    t = _TYPES[dialect]
    return [
        f"CREATE TABLE IF NOT EXISTS labels (id {t['id']}, trace_id TEXT NOT NULL,"
        f" record_id TEXT, name TEXT NOT NULL, value {t['real']}, metric_version TEXT,"
        " annotator TEXT NOT NULL DEFAULT '', comment TEXT,"
        f" source TEXT NOT NULL DEFAULT 'manual', created_at {t['real']} NOT NULL)",
        # the unique key; (trace_id, …) also serves retention's "is it labelled?"
        f"CREATE UNIQUE INDEX IF NOT EXISTS idx_labels_key ON labels{LABEL_KEY}",
        "CREATE INDEX IF NOT EXISTS idx_labels_name_created ON labels(name, created_at)",
        "CREATE INDEX IF NOT EXISTS idx_labels_record ON labels(record_id)",
        f"CREATE TABLE IF NOT EXISTS label_plan (plan_id TEXT NOT NULL, position {t['int']}"
        " NOT NULL, trace_id TEXT, record_id TEXT, name TEXT, stratum TEXT,"
        f" stratum_size {t['int']}, stratum_draws {t['int']}, created_at {t['real']},"
        " PRIMARY KEY (plan_id, position))",
        f"CREATE TABLE IF NOT EXISTS judge_canary (id {t['id']}, at {t['real']},"
        " judge_model TEXT, reported_model TEXT, prompt_version TEXT, trigger TEXT,"
        f" cases {t['int']}, agreed {t['int']}, yes_share {t['real']},"
        f" degenerate {t['int']}, reason TEXT, details TEXT)",
        "CREATE INDEX IF NOT EXISTS idx_judge_canary_at ON judge_canary(at)",
    ]


#: A label; the same annotator's earlier label of that (record, score) is replaced.
_UPSERT_LABEL = (
    "INSERT INTO labels(trace_id, record_id, name, value, metric_version, annotator, comment,"
    f" source, created_at) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT {LABEL_KEY} DO UPDATE"
    " SET value = excluded.value, metric_version = excluded.metric_version,"
    " comment = excluded.comment, source = excluded.source, created_at = excluded.created_at")
#: The record a label given by trace id is about: the trace's newest record scored under the
#: name, else its newest record (none: NULL, bound when read). ``{of_trace}``: the trace's
#: records (:func:`.compat.trace_records`: a primary-key range on SQLite).
_RECORD_OF_TRACE = (
    "SELECT r.record_id FROM records r WHERE {of_trace} ORDER BY EXISTS (SELECT 1 FROM"
    " scores s WHERE s.rec = r.seq AND s.name = ?) DESC, r.created_at DESC,"
    " r.record_id DESC LIMIT 1")
#: The metric version of the record's stored score of that name (the newest).
_SCORE_VERSION = (
    "SELECT metric_version FROM scores WHERE rec = (SELECT seq FROM records"
    " WHERE record_id = ?) AND name = ?"
    " ORDER BY created_at DESC, score_id DESC LIMIT 1")


def metric_scales(store: Any) -> list[tuple[Any, Any, Any]]:
    """(metric, score_names JSON, is_binary) of each row of the ``metrics`` table (what
    configured processes declared: the scale of a custom metric's labels)."""
    return qmark(store).execute("SELECT metric, score_names, is_binary FROM metrics").fetchall()


def _finite(value: Any, what: str) -> float | None:
    if value is None:
        return None
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return v


def _text(value: Any) -> str | None:
    from .rows import clean_text

    if value is None:
        return None
    return clean_text(str(value)).replace("\x00", "\\u0000")


class LabelsMixin:
    """The version-4 methods of :class:`~.base.StoreAPI`, for both backends (the class using
    it has ``dialect``, ``conn`` and ``transaction()``)."""

    # -- labels ---------------------------------------------------------------------------------
    def add_label(self, trace_id: str, name: str, value: float | None, *,
                  annotator: str | None = None, comment: str | None = None,
                  source: str = "manual", created_at: float | None = None,
                  metric_version: str | None = None, record_id: str | None = None) -> None:
        """Store a label of score ``name`` on ``trace_id`` (replacing the same annotator's on
        the same record). ``record_id``: the record labelled (``TRACE-SPAN``); None: the trace's
        newest record (module docstring). ``metric_version`` None: the version of that record's
        stored score of that name, if any (the label is bound to the metric version it judged;
        none yet: bound when read)."""
        self.add_labels([{"trace_id": trace_id, "record_id": record_id, "name": name,
                          "value": value,
                          "annotator": annotator, "comment": comment, "source": source,
                          "created_at": created_at, "metric_version": metric_version}])

    def add_labels(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Several labels (dicts with :data:`LABEL_COLS` keys but ``id``; ``trace_id`` may be
        left out when ``record_id`` is given) in one transaction, as :meth:`add_label` each (an
        import). Returns how many labels the table holds for them: rows with the same key
        (record, name, annotator) count once, the last one winning."""
        keys: set[tuple[str, str | None, str, str]] = set()
        now = time.time()
        with qmark_tx(self) as conn:
            for row in rows:
                record_id = row.get("record_id")
                record_id = None if record_id is None else str(record_id).lower()
                trace_id = row.get("trace_id")
                trace_id = (str(trace_id).lower() if trace_id is not None
                            else str(record_id).partition("-")[0])
                name = str(row["name"])
                if record_id is None:
                    of_trace, args = trace_records(self, trace_id, "r")
                    found = conn.execute(_RECORD_OF_TRACE.format(of_trace=of_trace),
                                         (*args, name)).fetchone()
                    record_id = None if found is None else str(found[0])
                version = row.get("metric_version")
                if version is None and record_id is not None:
                    found = conn.execute(_SCORE_VERSION, (record_id, name)).fetchone()
                    version = None if found is None else found[0]
                created = row.get("created_at")
                annotator = _text(row.get("annotator")) or ""
                keys.add((trace_id, record_id, name, annotator))
                conn.execute(_UPSERT_LABEL, (
                    trace_id, record_id, name, _finite(row.get("value"), "a label's value"),
                    None if version is None else str(version),
                    annotator, _text(row.get("comment")),
                    str(row.get("source") or "manual"),
                    now if created is None else _finite(created, "created_at")))
        return len(keys)

    def labels(self, name: str | None = None, since: float | None = None
               ) -> list[dict[str, Any]]:
        """Labels (dicts of :data:`LABEL_COLS`), oldest first; ``name``: of that score only;
        ``since``: created at or after that time (Unix seconds)."""
        sql = f"SELECT {', '.join(LABEL_COLS)} FROM labels WHERE 1 = 1"
        args: list[Any] = []
        if name is not None:
            sql += " AND name = ?"
            args.append(name)
        if since is not None:
            sql += " AND created_at >= ?"
            args.append(since)
        rows = qmark(self).execute(sql + " ORDER BY created_at, id", tuple(args)).fetchall()
        return [dict(zip(LABEL_COLS, r)) for r in rows]

    # -- label plans ------------------------------------------------------------------------------
    def add_label_plan(self, plan_id: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Store a plan: ``rows`` are dicts with ``trace_id``, ``name``, ``stratum``,
        ``stratum_size``, ``stratum_draws`` (and ``position``, default: their order;
        ``record_id``, the record to label, default NULL: the trace's).
        Replaces a plan of the same id. Returns how many rows."""
        now = time.time()
        values = [(plan_id, int(r.get("position", i)), str(r["trace_id"]).lower(),
                   None if r.get("record_id") is None else str(r["record_id"]).lower(),
                   str(r["name"]), None if r.get("stratum") is None else str(r["stratum"]),
                   None if r.get("stratum_size") is None else int(r["stratum_size"]),
                   None if r.get("stratum_draws") is None else int(r["stratum_draws"]), now)
                  for i, r in enumerate(rows)]
        with qmark_tx(self) as conn:
            conn.execute("DELETE FROM label_plan WHERE plan_id = ?", (plan_id,))
            if values:
                conn.executemany(f"INSERT INTO label_plan({', '.join(PLAN_COLS)}) VALUES"
                                 f" ({','.join('?' * len(PLAN_COLS))})", values)
        return len(values)

    def label_plan(self, plan_id: str) -> list[dict[str, Any]]:
        """The rows of plan ``plan_id`` (dicts of :data:`PLAN_COLS`), in position order."""
        rows = qmark(self).execute(
            f"SELECT {', '.join(PLAN_COLS)} FROM label_plan WHERE plan_id = ? ORDER BY"
            " position", (plan_id,)).fetchall()
        return [dict(zip(PLAN_COLS, r)) for r in rows]

    # -- judge canary history -------------------------------------------------------------------
    def add_canary_run(self, row: Mapping[str, Any]) -> None:
        """One canary run: a dict with :data:`CANARY_COLS` keys but ``id`` (missing ones
        NULL; ``at`` default now; ``details`` any JSON-able value, stored as JSON text;
        ``degenerate`` a bool)."""
        from .rows import dumps

        unknown = set(row) - set(CANARY_COLS[1:])
        if unknown:
            raise ValueError(f"unknown canary column(s): {', '.join(sorted(unknown))}")
        vals = dict(row)
        vals.setdefault("at", time.time())
        if vals.get("details") is not None and not isinstance(vals["details"], str):
            vals["details"] = dumps(vals["details"])
        if vals.get("degenerate") is not None:
            vals["degenerate"] = int(bool(vals["degenerate"]))
        cols = [c for c in CANARY_COLS[1:] if c in vals]
        with qmark_tx(self) as conn:
            conn.execute(f"INSERT INTO judge_canary({', '.join(cols)}) VALUES"
                         f" ({','.join('?' * len(cols))})",
                         tuple(_text(vals[c]) if isinstance(vals[c], str) else vals[c]
                               for c in cols))

    def canary_runs(self, judge_model: str | None = None, since: float | None = None
                    ) -> list[dict[str, Any]]:
        """Canary runs (dicts of :data:`CANARY_COLS`, ``details`` decoded from JSON), oldest
        first; ``judge_model``: of that configured model only; ``since``: at or after."""
        sql = f"SELECT {', '.join(CANARY_COLS)} FROM judge_canary WHERE 1 = 1"
        args: list[Any] = []
        if judge_model is not None:
            sql += " AND judge_model = ?"
            args.append(judge_model)
        if since is not None:
            sql += " AND at >= ?"
            args.append(since)
        out = []
        for r in qmark(self).execute(sql + " ORDER BY at, id", tuple(args)).fetchall():
            d = dict(zip(CANARY_COLS, r))
            if isinstance(d["details"], str):
                try:
                    d["details"] = json.loads(d["details"])
                except ValueError:
                    pass
            out.append(d)
        return out
